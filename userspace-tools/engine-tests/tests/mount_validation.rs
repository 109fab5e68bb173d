//! Superblock fields that size allocations, loops and reads at mount, forged with a valid CRC:
//! each is refused with `BadFormat` at once (no huge allocation, no long slot loop), never a
//! panic. The genuine superblock still mounts.

use std::time::{Duration, Instant};

use ferrofs_engine::format::{Superblock, SB_FULL_SIZE};
use ferrofs_engine::{Error, MountOptions};
use ferrofs_engine_tests::{mkfs, ts, Fs, RamFlash};

const SEG: u32 = 32 * 1024;

fn image() -> RamFlash {
    let f = RamFlash::new_nand(SEG, 48, 512);
    mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap()
}

/// The superblock with its extensions (the aligned-data one too, on `FERROFS_TEST_ALIGNED` volumes).
fn read_sb(f: &RamFlash, seg: u32) -> Superblock {
    let b = &f.raw()[(seg * SEG) as usize..(seg * SEG) as usize + SB_FULL_SIZE];
    Superblock::decode(b).unwrap()
}

/// Overwrite both superblock copies with `sb` (CRCs recomputed; the bytes of an extension `sb`
/// does not have stay as they are).
fn forge(f: &mut RamFlash, sb: &Superblock) {
    let mut b = f.raw()[..SB_FULL_SIZE].to_vec();
    sb.encode(&mut b).unwrap();
    for seg in [0u32, 1] {
        for (i, &nb) in b.iter().enumerate() {
            let old = f.raw()[(seg * SEG) as usize + i];
            f.flip(seg, i as u32, old ^ nb);
        }
        assert_eq!(read_sb(f, seg), *sb);
    }
}

fn mount_err(f: RamFlash) -> Error {
    let t = Instant::now();
    let r = Fs::mount(f, MountOptions::default());
    assert!(t.elapsed() < Duration::from_secs(5), "mount took {:?}", t.elapsed());
    match r {
        Ok(_) => panic!("a forged superblock mounted"),
        Err((e, _)) => e,
    }
}

#[test]
fn genuine_superblock_mounts() {
    let f = image();
    let sb = read_sb(&f, 0);
    let mut g = f.clone();
    forge(&mut g, &sb);
    Fs::mount(g, MountOptions::default()).map_err(|e| e.0).unwrap();
}

#[test]
fn forged_checkpoint_slot_sizes_are_refused() {
    let f = image();
    let sb = read_sb(&f, 0);
    let area = sb.cp_area_segs * SEG;
    for slot in [0u32, 1, 8, 512, sb.cp_slot_size + 1, sb.cp_slot_size - 512, area + 512, 0x7FFF_FE00, 0xFFFF_FE00, u32::MAX] {
        if slot == sb.cp_slot_size {
            continue;
        }
        let mut g = f.clone();
        forge(&mut g, &Superblock { cp_slot_size: slot, ..sb });
        assert_eq!(mount_err(g), Error::BadFormat, "cp_slot_size {slot}");
    }
}

#[test]
fn forged_segment_lists_and_geometry_are_refused() {
    let f = image();
    let sb = read_sb(&f, 0);
    let mut cases: Vec<(&str, Superblock)> = Vec::new();
    let mut cp = sb.cp_segs;
    cp[0][0] = 48; // past the device
    cases.push(("checkpoint segment past the end", Superblock { cp_segs: cp, ..sb }));
    let mut cp = sb.cp_segs;
    cp[1][0] = cp[0][0]; // both areas share a segment
    cases.push(("checkpoint areas overlap", Superblock { cp_segs: cp, ..sb }));
    let mut cp = sb.cp_segs;
    cp[0][0] = sb.sb_segs[0]; // the checkpoint area over the superblock
    cases.push(("checkpoint over the superblock", Superblock { cp_segs: cp, ..sb }));
    cases.push(("superblock segment past the end", Superblock { sb_segs: [0, u32::MAX - 1], ..sb }));
    cases.push(("no checkpoint area", Superblock { cp_area_segs: 0, ..sb }));
    cases.push(("too many checkpoint segments", Superblock { cp_area_segs: 17, ..sb }));
    for (what, s) in cases {
        let mut g = f.clone();
        forge(&mut g, &s);
        assert_eq!(mount_err(g), Error::BadFormat, "{what}");
    }
}

/// The runtime read-only switch (`remount,ro` / `remount,rw`): nothing is written while
/// read-only, not even by unmount; a read-only mount can become writable (a root file system
/// is mounted read-only, then remounted read-write), and writes then persist.
#[test]
fn runtime_read_only_switch() {
    use ferrofs_engine::format::S_IFREG;
    use ferrofs_engine::{CreateArgs, ROOT_INO};
    let reg = CreateArgs { mode: S_IFREG | 0o644, ..Default::default() };
    let f = image();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let a = fs.create(ROOT_INO, b"a", &reg, ts(1)).unwrap();
    fs.write(a.ino, 0, b"before", ts(1)).unwrap();
    fs.set_read_only(true).unwrap();
    assert!(fs.is_read_only());
    let (p0, e0) = (fs.flash().programmed, fs.flash().erases.iter().sum::<u32>());
    assert_eq!(fs.write(a.ino, 0, b"x", ts(2)).unwrap_err(), Error::ReadOnly);
    assert_eq!(fs.create(ROOT_INO, b"b", &reg, ts(2)).unwrap_err(), Error::ReadOnly);
    fs.fsync(a.ino).unwrap();
    let _ = fs.gc_step(true);
    let _ = fs.sync();
    let mut buf = [0u8; 6];
    fs.read(a.ino, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"before");
    assert_eq!((fs.flash().programmed, fs.flash().erases.iter().sum::<u32>()), (p0, e0), "written while read-only");
    // back to read-write
    fs.set_read_only(false).unwrap();
    fs.write(a.ino, 0, b"after!", ts(3)).unwrap();
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    // read-only mount, then read-write
    let mut fs = Fs::mount(f, MountOptions { read_only: true, ..Default::default() }).map_err(|e| e.0).unwrap();
    assert_eq!(fs.write(a.ino, 0, b"x", ts(4)).unwrap_err(), Error::ReadOnly);
    fs.set_read_only(false).unwrap();
    assert!(!fs.is_read_only());
    let b = fs.create(ROOT_INO, b"b", &reg, ts(4)).unwrap();
    fs.write(b.ino, 0, b"bbb", ts(4)).unwrap();
    fs.fsync(b.ino).unwrap();
    // crash: fsync'd data of the read-write phase survives
    let mut fs = Fs::mount(fs.into_flash(), MountOptions::default()).map_err(|e| e.0).unwrap();
    let mut buf = [0u8; 6];
    fs.read(a.ino, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"after!");
    let b = fs.lookup(ROOT_INO, b"b").unwrap();
    assert_eq!(b.size, 3);
    ferrofs_engine_tests::assert_fsck(&mut fs);
}

/// Unknown read-only-compatible features: a read-write mount is refused, a read-only mount
/// works and cannot be switched to read-write.
#[test]
fn unknown_ro_compat_features_stay_read_only() {
    let f = image();
    let sb = read_sb(&f, 0);
    let mut g = f.clone();
    forge(&mut g, &Superblock { ro_compat: 1 << 40, ..sb });
    let g = match Fs::mount(g, MountOptions::default()) {
        Ok(_) => panic!("read-write mount with unknown ro_compat features"),
        Err((e, g)) => {
            assert_eq!(e, Error::ReadOnly);
            g
        }
    };
    let mut fs = Fs::mount(g, MountOptions { read_only: true, ..Default::default() }).map_err(|e| e.0).unwrap();
    assert_eq!(fs.set_read_only(false).unwrap_err(), Error::ReadOnly);
    assert!(fs.is_read_only());
}
