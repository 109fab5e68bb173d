//! Damage in the log written after the last checkpoint: a page that was made durable (fsync)
//! and no longer reads back, with valid records after it. Recovery must say so (and mount
//! read-only) and recover what follows, instead of silently dropping everything after the bad
//! page, fsync'd data included. A torn tail (the last program, cut by a power loss) stays a
//! silent, writable mount.

use ferrofs_engine::std_platform::StdPlatform;
use ferrofs_engine::{Engine, Error, Flash, MountOptions, ROOT_INO};
use ferrofs_engine_tests::{mkfs, reg, ts, RamFlash, Rng};
use ferrofs_flashsim::{CutEffect, CutPlan, NandConfig, NandSim, TornFill};

type E<F> = Engine<StdPlatform, F>;

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    Rng::new(seed).fill(&mut d);
    d
}

/// Format, add a base file, unmount; then mount and write three files, each fsync'd (A, B, C),
/// and crash. Returns the flash and the pages (segment, offset) programmed after the mount.
fn workload<F: Flash + Clone>(f: F, programmed: impl Fn(&F) -> Vec<(u32, u32)>) -> (F, Vec<(u32, u32)>) {
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = E::<F>::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let b = fs.create(ROOT_INO, b"base", &reg(), ts(1)).unwrap();
    fs.write(b.ino, 0, &data(9, 10_000), ts(1)).unwrap();
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = E::<F>::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let before = programmed(fs.flash());
    for (i, name) in [b"A", b"B", b"C"].iter().enumerate() {
        let x = fs.create(ROOT_INO, *name, &reg(), ts(2)).unwrap();
        fs.write(x.ino, 0, &data(i as u64 + 1, 24_000), ts(2)).unwrap();
        fs.fsync(x.ino).unwrap();
    }
    let f = fs.into_flash();
    let after = programmed(&f);
    let new: Vec<(u32, u32)> = after.into_iter().filter(|p| !before.contains(p)).collect();
    (f, new)
}

fn read_all<F: Flash>(fs: &mut E<F>, name: &[u8]) -> Result<Vec<u8>, Error> {
    let i = fs.lookup(ROOT_INO, name)?;
    let mut b = vec![0u8; i.size as usize];
    let n = fs.read(i.ino, 0, &mut b)?;
    b.truncate(n);
    Ok(b)
}

/// The segment holding most of the new pages (the data head's), and its new pages in order.
fn busiest(pages: &[(u32, u32)]) -> (u32, Vec<u32>) {
    let mut segs: Vec<u32> = pages.iter().map(|p| p.0).collect();
    segs.sort_unstable();
    segs.dedup();
    let seg = *segs.iter().max_by_key(|s| pages.iter().filter(|p| p.0 == **s).count()).unwrap();
    let mut offs: Vec<u32> = pages.iter().filter(|p| p.0 == seg).map(|p| p.1).collect();
    offs.sort_unstable();
    (seg, offs)
}

fn check_damaged_mount<F: Flash>(f: F, seg: u32, off: u32) {
    let mut fs = match E::<F>::mount(f, MountOptions::default()) {
        Ok(fs) => fs,
        Err((e, _)) => panic!("mount after damage: {e:?}"),
    };
    let d = fs.log_damage().expect("the damage is reported");
    assert!(d.missing > 0, "{d:?}");
    assert!(d.after > 0, "{d:?}");
    assert_eq!(d.seg, seg, "{d:?}");
    // the first bad record starts in the damaged page or in the record that runs into it
    assert!(d.off <= off + 2048 && off < d.off + 8192, "{d:?} vs page at {off}");
    assert!(fs.is_read_only(), "a damaged log mounts read-only");
    // what was fsync'd after the damage is recovered
    assert_eq!(read_all(&mut fs, b"C").unwrap(), data(3, 24_000), "C, fsync'd after the damaged page");
    assert_eq!(read_all(&mut fs, b"B").unwrap(), data(2, 24_000), "B, fsync'd after the damaged page");
    assert_eq!(read_all(&mut fs, b"base").unwrap(), data(9, 10_000));
    // never written on top of
    let c = fs.lookup(ROOT_INO, b"C").unwrap().ino;
    assert_eq!(fs.write(c, 0, b"x", ts(5)).unwrap_err(), Error::ReadOnly);
    assert_eq!(fs.set_read_only(false).unwrap_err(), Error::Corrupt);
    assert!(fs.is_read_only());
    // fsck reports it
    let r = fs.fsck().unwrap();
    assert!(matches!(r.first, Some(ferrofs_engine::FsckProblem::LogDamage { .. })), "{r:?}");
}

/// An uncorrectable page (ECC failure) in the data head, in the middle of what fsync made durable.
#[test]
fn uncorrectable_page_in_the_middle_of_the_log_is_reported_and_what_follows_recovered() {
    let nand = NandSim::new(NandConfig::new(64)).unwrap();
    let ps = nand.page_size();
    let ppb = nand.pages_per_block();
    let (mut f, new) = workload(nand, move |n: &NandSim| {
        let mut v = Vec::new();
        for (i, &p) in n.programmed_pages().iter().enumerate() {
            if p {
                v.push(((i as u32) / ppb, (i as u32 % ppb) * ps));
            }
        }
        v
    });
    let (seg, offs) = busiest(&new);
    assert!(offs.len() > 20, "{offs:?}");
    // a page of A's data: valid records (B, C, fsync markers) follow it in the same segment
    let off = offs[offs.len() / 5];
    f.inject_uncorrectable(seg, off / ps).unwrap();
    check_damaged_mount(f, seg, off);
}

/// Flipped bits (CRC mismatch) in a page of the data head.
#[test]
fn corrupt_page_in_the_middle_of_the_log_is_reported_and_what_follows_recovered() {
    let ram = RamFlash::new_nand(64 * 1024, 48, 512);
    let (mut f, new) = workload(ram, |r: &RamFlash| {
        let mut v = Vec::new();
        for (i, c) in r.raw().chunks(512).enumerate() {
            if c.iter().any(|&b| b != 0xFF) {
                v.push(((i * 512 / (64 * 1024)) as u32, ((i * 512) % (64 * 1024)) as u32));
            }
        }
        v
    });
    let (seg, offs) = busiest(&new);
    let off = offs[offs.len() / 5];
    for k in [100u32, 200, 300] {
        f.flip(seg, off + k, 0x10);
    }
    check_damaged_mount(f, seg, off);
}

/// A torn last program: no damage reported, the mount is writable, everything fsync'd is there.
#[test]
fn torn_tail_mounts_silently() {
    let mut cuts = 0;
    for fill in [TornFill::Unwritten, TornFill::Random] {
        for n in 1..80 {
            let nand = NandSim::new(NandConfig { seed: n, ..NandConfig::new(64) }).unwrap();
            let f = mkfs(nand, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
            let mut fs = E::<NandSim>::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
            fs.flash().cut_after_with(n, CutPlan { effect: CutEffect::Torn, fill, ..CutPlan::default() });
            let mut synced = 0usize;
            for i in 0..6u64 {
                let name = format!("f{i}");
                let r = (|| -> Result<(), Error> {
                    let x = fs.create(ROOT_INO, name.as_bytes(), &reg(), ts(2))?;
                    fs.write(x.ino, 0, &data(i, 9_000), ts(2))?;
                    fs.fsync(x.ino)
                })();
                if r.is_err() {
                    break;
                }
                synced += 1;
            }
            if fs.flash().is_powered() {
                continue;
            }
            cuts += 1;
            let mut f = fs.into_flash();
            f.reboot();
            let mut fs = E::<NandSim>::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
            assert_eq!(fs.log_damage(), None, "cut {n} {fill:?}");
            assert!(!fs.is_read_only());
            for i in 0..synced as u64 {
                assert_eq!(read_all(&mut fs, format!("f{i}").as_bytes()).unwrap(), data(i, 9_000), "cut {n}: f{i}");
            }
            fs.create(ROOT_INO, b"later", &reg(), ts(3)).unwrap();
        }
    }
    assert!(cuts > 40, "{cuts}");
}

/// fsck repair of a damaged log: `-p` may not accept the state recovered after the damage (it
/// is not one the operations produced), `-y` accepts it: the filesystem becomes writable, fsck
/// is clean, what followed the damage is kept, and the next mount reports nothing.
#[test]
fn repair_accepts_log_damage_with_all_repairs_only() {
    use ferrofs_engine::{Repair, RepairLevel, RepairOutcome};
    let ram = RamFlash::new_nand(64 * 1024, 48, 512);
    let (mut f, new) = workload(ram, |r: &RamFlash| {
        let mut v = Vec::new();
        for (i, c) in r.raw().chunks(512).enumerate() {
            if c.iter().any(|&b| b != 0xFF) {
                v.push(((i * 512 / (64 * 1024)) as u32, ((i * 512) % (64 * 1024)) as u32));
            }
        }
        v
    });
    let (seg, offs) = busiest(&new);
    let off = offs[offs.len() / 5];
    for k in [100u32, 200, 300] {
        f.flip(seg, off + k, 0x10);
    }
    let ro = MountOptions { read_only: true, ..Default::default() };
    // preen: left, nothing written
    let mut fs = E::<RamFlash>::mount(f.clone(), ro).map_err(|e| e.0).unwrap();
    let mut seen = Vec::new();
    let rep = fs.repair(RepairLevel::Preen, ts(9), &mut |r, o| {
        seen.push((*r, o));
        true
    });
    let rep = rep.unwrap();
    assert!(matches!(seen.as_slice(), [(Repair::AcceptLogDamage { .. }, RepairOutcome::NotAllowed)]), "{seen:?}");
    assert_eq!((rep.repaired, rep.left), (0, 1));
    assert!(fs.is_read_only());
    assert_eq!(fs.into_flash().raw(), f.raw(), "preen wrote");
    // all repairs: accepted, writable, clean
    let mut fs = E::<RamFlash>::mount(f, ro).map_err(|e| e.0).unwrap();
    let mut seen = Vec::new();
    let rep = fs
        .repair(RepairLevel::All, ts(9), &mut |r, o| {
            seen.push((*r, o));
            true
        })
        .unwrap();
    assert!(seen.iter().all(|(_, o)| *o == RepairOutcome::Done), "{seen:?}");
    assert!(matches!(seen.first(), Some((Repair::AcceptLogDamage { .. }, _))), "{seen:?}");
    assert_eq!(rep.problems_after, 0, "{seen:?}");
    assert!(!fs.is_read_only());
    assert_eq!(read_all(&mut fs, b"C").unwrap(), data(3, 24_000));
    assert_eq!(read_all(&mut fs, b"B").unwrap(), data(2, 24_000));
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = E::<RamFlash>::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.log_damage(), None);
    assert_eq!(fs.fsck().unwrap().problems, 0);
    assert_eq!(read_all(&mut fs, b"C").unwrap(), data(3, 24_000));
    assert_eq!(read_all(&mut fs, b"base").unwrap(), data(9, 10_000));
    let x = fs.create(ROOT_INO, b"after", &reg(), ts(10)).unwrap();
    fs.write(x.ino, 0, b"writable", ts(10)).unwrap();
}
