//! The engine side of the data interfaces of issue 14: hole punching
//! (`fallocate(PUNCH_HOLE)`, also the first half of `ZERO_RANGE`) and `O_TMPFILE` files (born
//! unlinked on the orphan list, named by `link`).

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, Error, MountOptions, ROOT_INO};
use ferrofs_engine_tests::*;

const BS: usize = 4096;

fn args() -> CreateArgs {
    CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }
}

fn read_all(fs: &mut Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut got = vec![0xAAu8; size];
    assert_eq!(fs.read(ino, 0, &mut got).unwrap(), size);
    got
}

/// Punch `[off, off + len)` in the model the way the engine must: zeros inside, size kept.
fn punch_model(m: &mut [u8], off: usize, len: usize) {
    let end = off.saturating_add(len).min(m.len());
    if off < end {
        m[off..end].fill(0);
    }
}

#[test]
fn punch_hole_zeroes_the_range_keeps_the_size_and_survives_a_crash() {
    let mut fs = fresh(32 * 1024, 128, 512);
    let f = fs.create(ROOT_INO, b"f", &args(), ts(1)).unwrap();
    let size = 10 * BS + 123;
    let mut model = vec![0u8; size];
    Rng::new(7).fill(&mut model);
    fs.write(f.ino, 0, &model, ts(1)).unwrap();
    // inside one block, across a block edge, whole blocks, from mid-block to past EOF, empty,
    // wholly past EOF, the partial EOF block from its start
    let cases: &[(usize, usize)] = &[
        (100, 200),
        (BS - 10, 30),
        (2 * BS, 3 * BS),
        (6 * BS + 500, 2 * BS + 7),
        (BS * 9 + 17, 0),
        (size + 10, 5000),
        (10 * BS, 4096),
        (8 * BS + 4000, 4096 * 100),
    ];
    for (n, &(off, len)) in cases.iter().enumerate() {
        let t = ts(10 + n as i64);
        let a = fs.punch_hole(f.ino, off as u64, len as u64, t).unwrap();
        punch_model(&mut model, off, len);
        assert_eq!(a.size, size as u64, "case {n}: the size is kept");
        if len > 0 && off < size {
            assert_eq!(a.mtime, t, "case {n}: mtime");
            assert_eq!(a.ctime, t, "case {n}: ctime");
        }
        assert!(read_all(&mut fs, f.ino) == model, "case {n} ({off}, {len}): contents differ");
    }
    // whole blocks inside a punched range are holes (their records are gone)
    assert_eq!(fs.seek_hole(f.ino, 0).unwrap(), 2 * BS as u64);
    assert_eq!(fs.seek_data(f.ino, 2 * BS as u64).unwrap(), Some(5 * BS as u64));
    fs.fsync(f.ino).unwrap();
    let mut fs = crash_remount(fs);
    assert!(read_all(&mut fs, f.ino) == model, "after a crash");
    assert_consistent(&mut fs);
    // the directory and the rest of the volume are untouched
    assert_eq!(fs.lookup(ROOT_INO, b"f").unwrap().ino, f.ino);
}

#[test]
fn punch_hole_gives_the_space_back_and_refuses_what_is_not_a_file() {
    let mut fs = fresh(32 * 1024, 128, 512);
    let f = fs.create(ROOT_INO, b"f", &args(), ts(1)).unwrap();
    let data = vec![0x5Au8; 64 * BS];
    fs.write(f.ino, 0, &data, ts(1)).unwrap();
    fs.sync().unwrap();
    let live0 = fs.budget_figures().1;
    fs.punch_hole(f.ino, 0, 64 * BS as u64, ts(2)).unwrap();
    fs.sync().unwrap();
    let live1 = fs.budget_figures().1;
    // 64 records of a header and a block each are no longer live
    assert!(live0 - live1 >= 64 * BS as u64, "live bytes {live0} -> {live1}");
    assert_eq!(fs.seek_data(f.ino, 0).unwrap(), None);
    assert_eq!(fs.getattr(f.ino).unwrap().size, 64 * BS as u64);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(3)).unwrap();
    assert_eq!(fs.punch_hole(d.ino, 0, 10, ts(3)).unwrap_err(), Error::IsDir);
    let s = fs.symlink(ROOT_INO, b"s", b"target", 0, 0, ts(3)).unwrap();
    assert_eq!(fs.punch_hole(s.ino, 0, 3, ts(3)).unwrap_err(), Error::Invalid);
    assert_consistent(&mut fs);
}

/// A power cut at every flash operation of a punch (after an fsync'd write): the file reads
/// either as before the punch or as after it, never in between.
#[test]
fn punch_hole_is_atomic_at_every_cut() {
    let size = 9 * BS + 300;
    let mut old = vec![0u8; size];
    Rng::new(11).fill(&mut old);
    let (base, ino) = {
        let mut fs = fresh(32 * 1024, 64, 512);
        let f = fs.create(ROOT_INO, b"f", &args(), ts(1)).unwrap();
        fs.write(f.ino, 0, &old, ts(1)).unwrap();
        fs.sync().unwrap();
        (fs.unmount().map_err(|e| e.0).unwrap(), f.ino)
    };
    let (off, len) = (BS + 700, 6 * BS);
    let mut new = old.clone();
    punch_model(&mut new, off, len);
    let opts = MountOptions::default();
    let mut cut = 0u64;
    let (mut saw_old, mut saw_new) = (false, false);
    loop {
        let mut fs = Fs::mount(base.clone(), opts).map_err(|e| e.0).unwrap();
        fs.flash().cut_in = Some(cut);
        let r = fs.punch_hole(ino, off as u64, len as u64, ts(5)).and_then(|_| fs.fsync(ino));
        let dead = fs.flash().dead;
        let mut flash = fs.into_flash();
        flash.power_on();
        let mut fs = Fs::mount(flash, opts).map_err(|e| e.0).unwrap();
        assert_consistent(&mut fs);
        let got = read_all(&mut fs, ino);
        if r.is_ok() {
            assert!(got == new, "cut {cut}: the fsync'd punch is lost");
        }
        if got == old {
            saw_old = true;
        } else {
            assert!(got == new, "cut {cut}: a half-punched file");
            saw_new = true;
        }
        if !dead {
            break;
        }
        cut += 1;
    }
    assert!(saw_old && saw_new, "cuts {cut}: old {saw_old}, new {saw_new}");
}

#[test]
fn tmpfile_is_an_orphan_until_linked() {
    let mut fs = fresh(32 * 1024, 128, 512);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(1)).unwrap();
    let dir_before = fs.getattr(d.ino).unwrap();
    let t = fs.tmpfile(d.ino, &args(), ts(2)).unwrap();
    assert_eq!(t.nlink, 0);
    assert_eq!(t.size, 0);
    // no name, no change to the directory
    assert_eq!(fs.getattr(d.ino).unwrap(), dir_before);
    let mut n = 0;
    fs.readdir(d.ino, 0, &mut |name, _, _, _| {
        if name != b"." && name != b".." {
            n += 1;
        }
        true
    })
    .unwrap();
    assert_eq!(n, 0);
    let data = vec![0x33u8; 3 * BS + 5];
    fs.write(t.ino, 0, &data, ts(3)).unwrap();
    // only regular files
    let dir_args = CreateArgs { mode: ferrofs_engine::format::S_IFDIR | 0o755, ..Default::default() };
    assert_eq!(fs.tmpfile(d.ino, &dir_args, ts(3)).unwrap_err(), Error::Invalid);
    assert_eq!(fs.tmpfile(t.ino, &args(), ts(3)).unwrap_err(), Error::NotDir);
    // fsck sees an orphan, not a lost inode
    let r = assert_fsck(&mut fs);
    assert_eq!(r.orphans, 1);
    fs.fsync(t.ino).unwrap();
    // a crash before the link: the next mount reclaims it with its data
    let mut fs = crash_remount(fs);
    assert_eq!(fs.getattr(t.ino).unwrap_err(), Error::NotFound);
    let r = assert_fsck(&mut fs);
    assert_eq!(r.orphans, 0);
    let _ = d;
}

#[test]
fn linked_tmpfile_survives_a_crash_and_eviction() {
    let mut fs = fresh(32 * 1024, 128, 512);
    let t = fs.tmpfile(ROOT_INO, &args(), ts(2)).unwrap();
    let mut data = vec![0u8; 5 * BS + 77];
    Rng::new(3).fill(&mut data);
    fs.write(t.ino, 0, &data, ts(3)).unwrap();
    let a = fs.link(t.ino, ROOT_INO, b"named", ts(4)).unwrap();
    assert_eq!(a.nlink, 1);
    // a second name is an ordinary link now
    assert_eq!(fs.link(t.ino, ROOT_INO, b"again", ts(4)).unwrap().nlink, 2);
    assert_eq!(fs.unlink(ROOT_INO, b"again", ts(4)), Ok(()));
    // the VFS drops the tmpfile's inode: linked, so nothing is deleted
    fs.evict(t.ino).unwrap();
    fs.fsync(t.ino).unwrap();
    let mut fs = crash_remount(fs);
    let f = fs.lookup(ROOT_INO, b"named").unwrap();
    assert_eq!(f.ino, t.ino);
    assert_eq!(f.nlink, 1);
    assert!(read_all(&mut fs, f.ino) == data);
    let r = assert_fsck(&mut fs);
    assert_eq!(r.orphans, 0);
}

/// Power cut at every flash operation of `tmpfile; write; fsync; link; fsync`: after the cut
/// the file is either named with all its data or gone without a trace (fsck clean, no orphan
/// left after the mount), and it is named once the second fsync returned.
#[test]
fn tmpfile_link_at_every_cut() {
    let base = {
        let mut fs = fresh(32 * 1024, 64, 512);
        fs.sync().unwrap();
        fs.unmount().map_err(|e| e.0).unwrap()
    };
    let mut data = vec![0u8; 2 * BS + 9];
    Rng::new(9).fill(&mut data);
    let opts = MountOptions::default();
    let mut cut = 0u64;
    let (mut saw_named, mut saw_gone) = (false, false);
    loop {
        let mut fs = Fs::mount(base.clone(), opts).map_err(|e| e.0).unwrap();
        fs.flash().cut_in = Some(cut);
        let r = (|| {
            let t = fs.tmpfile(ROOT_INO, &args(), ts(1))?;
            fs.write(t.ino, 0, &data, ts(1))?;
            fs.fsync(t.ino)?;
            fs.link(t.ino, ROOT_INO, b"f", ts(2))?;
            fs.fsync(t.ino)
        })();
        let dead = fs.flash().dead;
        let mut flash = fs.into_flash();
        flash.power_on();
        let mut fs = Fs::mount(flash, opts).map_err(|e| e.0).unwrap();
        let rep = assert_fsck(&mut fs);
        assert_eq!(rep.orphans, 0, "cut {cut}: an orphan survived the mount");
        match fs.lookup(ROOT_INO, b"f") {
            Ok(f) => {
                assert!(read_all(&mut fs, f.ino) == data, "cut {cut}: named with other data");
                saw_named = true;
            }
            Err(Error::NotFound) => {
                assert!(r.is_err(), "cut {cut}: the linked, fsync'd file is lost");
                saw_gone = true;
            }
            Err(e) => panic!("cut {cut}: lookup: {e:?}"),
        }
        if !dead {
            break;
        }
        cut += 1;
    }
    assert!(saw_named && saw_gone, "cuts {cut}");
}
