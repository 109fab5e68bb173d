//! Random corruption of the medium: mount, fsck, reads and writes must return errors, never
//! panic, and fsck must notice damaged records.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, MountOptions, ROOT_INO};
use ferrofs_engine_tests::*;

fn populated() -> RamFlash {
    let mut fs = fresh(32 * 1024, 48, 512);
    let mut rng = Rng::new(5);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(1)).unwrap();
    for i in 0..30 {
        let dir = if i % 2 == 0 { ROOT_INO } else { d.ino };
        let f = fs.create(dir, format!("f{i}").as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
        let mut b = vec![0u8; 1 + rng.below(20_000) as usize];
        rng.fill(&mut b);
        fs.write(f.ino, 0, &b, ts(1)).unwrap();
        fs.setxattr(f.ino, b"user.x", &b[..b.len().min(50)], 0, ts(1)).unwrap();
    }
    fs.unmount().map_err(|e| e.0).unwrap()
}

fn exercise(fs: &mut Fs) -> u64 {
    let mut problems = 0;
    match fs.fsck() {
        Ok(r) => problems += r.problems,
        Err(_) => problems += 1,
    }
    let mut names = Vec::new();
    let _ = fs.readdir(ROOT_INO, 0, &mut |n, ino, _, _| {
        names.push((n.to_vec(), ino));
        true
    });
    for (_, ino) in &names {
        let mut b = vec![0u8; 30_000];
        let _ = fs.read(*ino, 0, &mut b);
        let _ = fs.getxattr(*ino, b"user.x", &mut b);
        let _ = fs.readdir(*ino, 0, &mut |_, _, _, _| true);
        let _ = fs.write(*ino, 100, b"new data", ts(9));
    }
    let _ = fs.create(ROOT_INO, b"zz", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(9));
    let _ = fs.gc_step(false);
    let _ = fs.sync();
    problems
}

#[test]
fn random_corruption_never_panics_and_is_detected() {
    let base = populated();
    let mut rng = Rng::new(77);
    let (mut mounted, mut detected) = (0, 0);
    for iter in 0..150 {
        let mut f = base.clone();
        let flips = 1 + rng.below(4);
        let mut done = 0;
        while done < flips {
            let seg = rng.below(48) as u32;
            let off = rng.below(32 * 1024) as u32;
            if f.is_programmed(seg, off) {
                f.flip(seg, off, 1 << rng.below(8));
                done += 1;
            }
        }
        let ro = iter % 3 == 0;
        match Fs::mount(f, MountOptions { read_only: ro, ..Default::default() }) {
            Ok(mut fs) => {
                mounted += 1;
                if exercise(&mut fs) > 0 {
                    detected += 1;
                }
            }
            Err((_e, _f)) => detected += 1,
        }
    }
    eprintln!("{mounted} mounted, {detected} with damage detected");
    assert!(detected > 20);
}

#[test]
fn read_only_mount_writes_nothing() {
    let base = populated();
    // leave some log after the checkpoint
    let mut fs = Fs::mount(base, MountOptions::default()).map_err(|e| e.0).unwrap();
    let f = fs.create(ROOT_INO, b"late", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(2)).unwrap();
    fs.write(f.ino, 0, b"hello", ts(2)).unwrap();
    fs.fsync(f.ino).unwrap();
    let flash = fs.into_flash();
    let before = flash.clone();
    let mut fs = Fs::mount(flash, MountOptions { read_only: true, ..Default::default() }).map_err(|e| e.0).unwrap();
    assert!(fs.is_read_only());
    let i = fs.lookup(ROOT_INO, b"late").unwrap();
    let mut b = [0u8; 5];
    fs.read(i.ino, 0, &mut b).unwrap();
    assert_eq!(&b, b"hello");
    assert_eq!(fs.write(i.ino, 0, b"x", ts(3)).unwrap_err(), ferrofs_engine::Error::ReadOnly);
    assert_eq!(fs.sync().unwrap_err(), ferrofs_engine::Error::ReadOnly);
    assert_fsck(&mut fs);
    let after = fs.unmount().map_err(|e| e.0).unwrap();
    assert_eq!(after.programmed, before.programmed);
    assert_eq!(after.erases, before.erases);
}

/// `fsck_each` reports every problem, not only the first: after several random flips, the
/// callback sees exactly `problems` problems, the first being the report's `first`.
#[test]
fn fsck_each_lists_every_problem() {
    let base = populated();
    let mut rng = Rng::new(99);
    let mut multi = 0;
    for _ in 0..60 {
        let mut f = base.clone();
        let mut done = 0;
        while done < 12 {
            let seg = rng.below(48) as u32;
            let off = rng.below(32 * 1024) as u32;
            if f.is_programmed(seg, off) {
                f.flip(seg, off, 1 << rng.below(8));
                done += 1;
            }
        }
        let Ok(mut fs) = Fs::mount(f, MountOptions { read_only: true, ..Default::default() }) else { continue };
        let mut seen = Vec::new();
        let Ok(r) = fs.fsck_each(&mut |p| seen.push(*p)) else { continue };
        assert_eq!(seen.len() as u64, r.problems);
        assert_eq!(seen.first().copied(), r.first);
        if r.problems >= 2 {
            multi += 1;
        }
    }
    assert!(multi > 0, "no image with several problems: the test checks nothing");
}
