//! Extended attribute values larger than a page: up to 64 KiB (Linux's XATTR_SIZE_MAX) on 2 KiB-page
//! NAND with 128 KiB erase blocks, across remounts, crashes and garbage collection.

use ferrofs_engine::format::{S_IFREG, XATTR_VALUE_MAX};
use ferrofs_engine::{CreateArgs, Error, ROOT_INO};
use ferrofs_engine_tests::*;

fn args() -> CreateArgs {
    CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }
}

fn value(seed: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    Rng::new(seed).fill(&mut v);
    v
}

fn check(fs: &mut Fs, ino: u64, name: &[u8], want: &[u8]) {
    assert_eq!(fs.getxattr(ino, name, &mut []).unwrap(), want.len());
    let mut got = vec![0u8; XATTR_VALUE_MAX];
    let n = fs.getxattr(ino, name, &mut got).unwrap();
    assert!(got[..n] == *want, "{} differs", String::from_utf8_lossy(name));
}

#[test]
fn xattr_values_up_to_64k_round_trip_remount_crash_and_gc() {
    assert_eq!(XATTR_VALUE_MAX, 65536);
    let mut fs = fresh(128 * 1024, 96, 2048);
    assert_eq!(fs.xattr_value_max(), 65536);
    let f = fs.create(ROOT_INO, b"x", &args(), ts(1)).unwrap();
    let a = value(1, 4000);
    let b = value(2, 65536);
    let c = value(3, 20_000);
    fs.setxattr(f.ino, b"user.a", &a, 0, ts(1)).unwrap();
    fs.setxattr(f.ino, b"user.b", &b, 0, ts(1)).unwrap();
    fs.setxattr(f.ino, b"user.c", &c, 0, ts(1)).unwrap();
    assert_eq!(fs.setxattr(f.ino, b"user.big", &value(4, 65537), 0, ts(1)), Err(Error::Range));
    let mut small = [0u8; 3000];
    assert_eq!(fs.getxattr(f.ino, b"user.a", &mut small), Err(Error::Range));
    check(&mut fs, f.ino, b"user.a", &a);
    check(&mut fs, f.ino, b"user.b", &b);
    let mut fs = remount(fs);
    check(&mut fs, f.ino, b"user.a", &a);
    check(&mut fs, f.ino, b"user.b", &b);
    check(&mut fs, f.ino, b"user.c", &c);
    // replace after an fsync, then crash: roll-forward reads the big records back
    let b2 = value(5, 65000);
    fs.setxattr(f.ino, b"user.b", &b2, 0, ts(2)).unwrap();
    fs.fsync(f.ino).unwrap();
    let mut fs = crash_remount(fs);
    check(&mut fs, f.ino, b"user.b", &b2);
    assert_consistent(&mut fs);
    // greedy GC steps until every used segment was a victim at least once: the big XATTR
    // records move to the meta head
    fs.sync().unwrap();
    let before = fs.stats();
    for _ in 0..200 {
        fs.gc_step(false).unwrap();
    }
    fs.sync().unwrap();
    let after = fs.stats();
    assert!(after.gc_bytes - before.gc_bytes >= (a.len() + b2.len() + c.len()) as u64, "{before:?} {after:?}");
    check(&mut fs, f.ino, b"user.a", &a);
    check(&mut fs, f.ino, b"user.b", &b2);
    check(&mut fs, f.ino, b"user.c", &c);
    assert_consistent(&mut fs);
    let mut fs = remount(fs);
    check(&mut fs, f.ino, b"user.a", &a);
    check(&mut fs, f.ino, b"user.b", &b2);
    check(&mut fs, f.ino, b"user.c", &c);
    assert_consistent(&mut fs);
}

#[test]
fn xattr_limit_follows_small_segments() {
    let mut fs = fresh(16 * 1024, 64, 512);
    let max = fs.xattr_value_max();
    assert_eq!(max, 15_472);
    let f = fs.create(ROOT_INO, b"x", &args(), ts(1)).unwrap();
    let name = vec![b'u'; 255];
    let mut name = name;
    name[..5].copy_from_slice(b"user.");
    let v = value(7, max);
    fs.setxattr(f.ino, &name, &v, 0, ts(1)).unwrap();
    assert_eq!(fs.setxattr(f.ino, b"user.y", &value(8, max + 1), 0, ts(1)), Err(Error::Range));
    let v2 = value(9, 4000);
    fs.setxattr(f.ino, b"user.z", &v2, 0, ts(1)).unwrap();
    let mut fs = remount(fs);
    check(&mut fs, f.ino, &name, &v);
    check(&mut fs, f.ino, b"user.z", &v2);
    assert_consistent(&mut fs);
}
