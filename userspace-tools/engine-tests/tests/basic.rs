use ferrofs_engine::format::{S_IFCHR, S_IFIFO, S_IFREG, S_IFSOCK};
use ferrofs_engine::{CreateArgs, Error, FileType, SetAttr, RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT_INO};
use ferrofs_engine_tests::*;

fn reg(mode: u32) -> CreateArgs {
    CreateArgs { mode: S_IFREG | mode, uid: 1000, gid: 100, rdev: 0 }
}

fn list(fs: &mut Fs, dir: u64) -> Vec<(Vec<u8>, u64)> {
    let mut v = Vec::new();
    fs.readdir(dir, 0, &mut |n, ino, _t, _c| {
        v.push((n.to_vec(), ino));
        true
    })
    .unwrap();
    v.sort();
    v
}

#[test]
fn format_mount_root() {
    let mut fs = fresh(64 * 1024, 64, 2048);
    let r = fs.getattr(ROOT_INO).unwrap();
    assert!(r.is_dir());
    assert_eq!(r.nlink, 2);
    assert_consistent(&mut fs);
    let mut fs = remount(fs);
    assert!(fs.getattr(ROOT_INO).unwrap().is_dir());
    assert_consistent(&mut fs);
}

#[test]
fn create_write_read_remount() {
    let mut fs = fresh(64 * 1024, 64, 2048);
    let f = fs.create(ROOT_INO, b"hello", &reg(0o644), ts(1)).unwrap();
    assert_eq!(fs.write(f.ino, 0, b"hello world", ts(2)).unwrap(), 11);
    let mut buf = [0u8; 64];
    assert_eq!(fs.read(f.ino, 0, &mut buf).unwrap(), 11);
    assert_eq!(&buf[..11], b"hello world");
    // sparse write far away
    fs.write(f.ino, 100_000, b"tail", ts(3)).unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!(a.size, 100_004);
    let mut big = vec![0xAAu8; 100_004];
    assert_eq!(fs.read(f.ino, 0, &mut big).unwrap(), 100_004);
    assert_eq!(&big[..11], b"hello world");
    assert!(big[11..100_000].iter().all(|&b| b == 0));
    assert_eq!(&big[100_000..], b"tail");
    let mut fs = remount(fs);
    let l = fs.lookup(ROOT_INO, b"hello").unwrap();
    assert_eq!(l.ino, f.ino);
    assert_eq!(l.size, 100_004);
    assert_eq!(l.uid, 1000);
    let mut big2 = vec![0u8; 100_004];
    fs.read(f.ino, 0, &mut big2).unwrap();
    assert_eq!(big, big2);
    assert_consistent(&mut fs);
}

#[test]
fn truncate_and_extend_zeroes() {
    let mut fs = fresh(64 * 1024, 64, 2048);
    let f = fs.create(ROOT_INO, b"f", &reg(0o644), ts(1)).unwrap();
    fs.write(f.ino, 0, &[7u8; 10_000], ts(2)).unwrap();
    fs.setattr(f.ino, &SetAttr { size: Some(5000), ..Default::default() }, ts(3)).unwrap();
    fs.setattr(f.ino, &SetAttr { size: Some(9000), ..Default::default() }, ts(4)).unwrap();
    let mut b = vec![1u8; 9000];
    assert_eq!(fs.read(f.ino, 0, &mut b).unwrap(), 9000);
    assert!(b[..5000].iter().all(|&x| x == 7));
    assert!(b[5000..].iter().all(|&x| x == 0));
    let mut fs = remount(fs);
    let mut b2 = vec![1u8; 9000];
    fs.read(f.ino, 0, &mut b2).unwrap();
    assert_eq!(b, b2);
    fs.setattr(f.ino, &SetAttr { size: Some(0), ..Default::default() }, ts(5)).unwrap();
    assert_eq!(fs.read(f.ino, 0, &mut b2).unwrap(), 0);
    assert_consistent(&mut fs);
}

#[test]
fn directories_links_symlinks_nodes() {
    let mut fs = fresh(64 * 1024, 64, 2048);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(1)).unwrap();
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 3);
    let f = fs.create(d.ino, b"f", &reg(0o600), ts(2)).unwrap();
    assert_eq!(fs.create(d.ino, b"f", &reg(0o600), ts(2)).unwrap_err(), Error::Exists);
    fs.link(f.ino, ROOT_INO, b"hard", ts(3)).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 2);
    assert_eq!(fs.link(d.ino, ROOT_INO, b"dl", ts(3)).unwrap_err(), Error::NotPermitted);
    let s = fs.symlink(ROOT_INO, b"sym", b"d/f", 0, 0, ts(4)).unwrap();
    let mut t = [0u8; 16];
    let n = fs.readlink(s.ino, &mut t).unwrap();
    assert_eq!(&t[..n], b"d/f");
    let c = fs.create(ROOT_INO, b"chr", &CreateArgs { mode: S_IFCHR | 0o600, uid: 0, gid: 0, rdev: 0x0501 }, ts(5)).unwrap();
    fs.create(ROOT_INO, b"fifo", &CreateArgs { mode: S_IFIFO | 0o600, ..Default::default() }, ts(5)).unwrap();
    fs.create(ROOT_INO, b"sock", &CreateArgs { mode: S_IFSOCK | 0o600, ..Default::default() }, ts(5)).unwrap();
    let names: Vec<Vec<u8>> = list(&mut fs, ROOT_INO).into_iter().map(|x| x.0).collect();
    assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), b"chr".to_vec(), b"d".to_vec(), b"fifo".to_vec(), b"hard".to_vec(), b"sock".to_vec(), b"sym".to_vec()]);
    assert_eq!(fs.rmdir(ROOT_INO, b"d", ts(6)).unwrap_err(), Error::NotEmpty);
    assert_eq!(fs.unlink(ROOT_INO, b"d", ts(6)).unwrap_err(), Error::IsDir);
    assert_eq!(fs.rmdir(ROOT_INO, b"hard", ts(6)).unwrap_err(), Error::NotDir);
    let mut fs = remount(fs);
    assert_eq!(fs.getattr(c.ino).unwrap().rdev, 0x0501);
    assert_eq!(fs.lookup(ROOT_INO, b"fifo").unwrap().file_type(), Some(FileType::Fifo));
    fs.unlink(d.ino, b"f", ts(7)).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 1);
    fs.unlink(ROOT_INO, b"hard", ts(7)).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 0);
    fs.evict(f.ino).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap_err(), Error::NotFound);
    fs.rmdir(ROOT_INO, b"d", ts(8)).unwrap();
    fs.evict(d.ino).unwrap();
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 2);
    assert_eq!(fs.lookup(ROOT_INO, b"d").unwrap_err(), Error::NotFound);
    let mut fs = remount(fs);
    assert_eq!(fs.getattr(d.ino).unwrap_err(), Error::NotFound);
    assert_consistent(&mut fs);
}

#[test]
fn orphans_reclaimed_after_crash() {
    let mut fs = fresh(64 * 1024, 64, 2048);
    let f = fs.create(ROOT_INO, b"open", &reg(0o644), ts(1)).unwrap();
    fs.write(f.ino, 0, &[1u8; 20_000], ts(2)).unwrap();
    fs.unlink(ROOT_INO, b"open", ts(3)).unwrap();
    // still readable while "open"
    let mut b = [0u8; 10];
    assert_eq!(fs.read(f.ino, 0, &mut b).unwrap(), 10);
    fs.fsync(ROOT_INO).unwrap();
    let mut fs = crash_remount(fs);
    assert_eq!(fs.getattr(f.ino).unwrap_err(), Error::NotFound);
    let mut b = [0u8; 10];
    assert_eq!(fs.read(f.ino, 0, &mut b).unwrap_err(), Error::NotFound);
    assert_consistent(&mut fs);
}

#[test]
fn rename_variants() {
    let mut fs = fresh(64 * 1024, 64, 2048);
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0, ts(1)).unwrap();
    let b = fs.mkdir(ROOT_INO, b"b", 0o755, 0, 0, ts(1)).unwrap();
    let x = fs.create(a.ino, b"x", &reg(0o644), ts(2)).unwrap();
    let y = fs.create(b.ino, b"y", &reg(0o644), ts(2)).unwrap();
    // move across directories
    fs.rename(a.ino, b"x", b.ino, b"x2", 0, ts(3)).unwrap();
    assert_eq!(fs.lookup(b.ino, b"x2").unwrap().ino, x.ino);
    assert_eq!(fs.lookup(a.ino, b"x").unwrap_err(), Error::NotFound);
    // noreplace
    assert_eq!(fs.rename(b.ino, b"x2", b.ino, b"y", RENAME_NOREPLACE, ts(4)).unwrap_err(), Error::Exists);
    // exchange
    fs.rename(b.ino, b"x2", b.ino, b"y", RENAME_EXCHANGE, ts(4)).unwrap();
    assert_eq!(fs.lookup(b.ino, b"x2").unwrap().ino, y.ino);
    assert_eq!(fs.lookup(b.ino, b"y").unwrap().ino, x.ino);
    // overwrite: y (now named x2) replaced by x
    fs.rename(b.ino, b"y", b.ino, b"x2", 0, ts(5)).unwrap();
    assert_eq!(fs.lookup(b.ino, b"x2").unwrap().ino, x.ino);
    assert_eq!(fs.getattr(y.ino).unwrap().nlink, 0);
    fs.evict(y.ino).unwrap();
    // directory move and cycle refusal
    fs.rename(ROOT_INO, b"a", b.ino, b"a", 0, ts(6)).unwrap();
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 3);
    assert_eq!(fs.rename(ROOT_INO, b"b", a.ino, b"loop", 0, ts(7)).unwrap_err(), Error::Invalid);
    let c = fs.mkdir(ROOT_INO, b"c", 0o755, 0, 0, ts(8)).unwrap();
    // exchange a directory with a file in another directory
    fs.rename(b.ino, b"a", c.ino, b"nothing", 0, ts(9)).unwrap();
    let mut fs = remount(fs);
    assert_eq!(fs.lookup(c.ino, b"nothing").unwrap().ino, a.ino);
    assert_eq!(fs.getattr(a.ino).unwrap().parent, c.ino);
    assert_eq!(fs.lookup(a.ino, b"..").unwrap().ino, c.ino);
    assert_eq!(fs.getattr(c.ino).unwrap().nlink, 3);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 2);
    assert_consistent(&mut fs);
}

#[test]
fn xattrs() {
    let mut fs = fresh(64 * 1024, 64, 2048);
    let f = fs.create(ROOT_INO, b"f", &reg(0o644), ts(1)).unwrap();
    fs.setxattr(f.ino, b"user.a", b"1", 0, ts(2)).unwrap();
    fs.setxattr(f.ino, b"user.b", b"22", 0, ts(2)).unwrap();
    assert_eq!(fs.setxattr(f.ino, b"user.a", b"x", ferrofs_engine::XATTR_CREATE, ts(2)).unwrap_err(), Error::Exists);
    assert_eq!(fs.setxattr(f.ino, b"user.c", b"x", ferrofs_engine::XATTR_REPLACE, ts(2)).unwrap_err(), Error::NoData);
    fs.setxattr(f.ino, b"user.a", b"333", ferrofs_engine::XATTR_REPLACE, ts(2)).unwrap();
    let mut fs = remount(fs);
    assert_eq!(fs.getxattr(f.ino, b"user.a", &mut []).unwrap(), 3);
    let mut v = [0u8; 8];
    let n = fs.getxattr(f.ino, b"user.a", &mut v).unwrap();
    assert_eq!(&v[..n], b"333");
    let mut small = [0u8; 1];
    assert_eq!(fs.getxattr(f.ino, b"user.a", &mut small).unwrap_err(), Error::Range);
    let need = fs.listxattr(f.ino, &mut []).unwrap();
    let mut l = vec![0u8; need];
    fs.listxattr(f.ino, &mut l).unwrap();
    let mut names: Vec<&[u8]> = l.split(|&c| c == 0).filter(|s| !s.is_empty()).collect();
    names.sort();
    assert_eq!(names, vec![&b"user.a"[..], &b"user.b"[..]]);
    fs.removexattr(f.ino, b"user.a", ts(3)).unwrap();
    assert_eq!(fs.getxattr(f.ino, b"user.a", &mut v).unwrap_err(), Error::NoData);
    assert_eq!(fs.removexattr(f.ino, b"user.a", ts(3)).unwrap_err(), Error::NoData);
    assert_consistent(&mut fs);
}

/// A listing resumed from a cookie after entries were added and removed returns every entry
/// that was there all along exactly once, none that was removed, and nothing twice; also with
/// the resume after a remount (cold caches) and with many directories' entries interleaved.
#[test]
fn readdir_cookies_stable() {
    use std::collections::HashSet;
    for cold in [false, true] {
        let mut fs = fresh(64 * 1024, 64, 2048);
        let other = fs.mkdir(ROOT_INO, b"other", 0o755, 0, 0, ts(1)).unwrap().ino;
        for i in 0..300 {
            fs.create(ROOT_INO, format!("file{i}").as_bytes(), &reg(0o644), ts(1)).unwrap();
            fs.create(other, format!("o{i}").as_bytes(), &reg(0o644), ts(1)).unwrap();
        }
        // read the first 100 entries, then delete some and add some, then continue
        let mut seen = Vec::new();
        let mut cookie = 0;
        fs.readdir(ROOT_INO, 0, &mut |n, _i, _t, c| {
            seen.push(n.to_vec());
            cookie = c;
            seen.len() < 100
        })
        .unwrap();
        let first: HashSet<Vec<u8>> = seen.iter().cloned().collect();
        let mut removed = HashSet::new();
        for i in 0..300 {
            let n = format!("file{i}").into_bytes();
            if i % 7 == 0 {
                fs.unlink(ROOT_INO, &n, ts(2)).unwrap();
                removed.insert(n);
            }
        }
        let mut added = HashSet::new();
        for i in 0..150 {
            let n = format!("new{i}").into_bytes();
            fs.create(ROOT_INO, &n, &reg(0o644), ts(3)).unwrap();
            added.insert(n);
        }
        if cold {
            fs = remount(fs);
        }
        let mut rest = Vec::new();
        fs.readdir(ROOT_INO, cookie, &mut |n, _i, _t, _c| {
            rest.push(n.to_vec());
            true
        })
        .unwrap();
        let total = seen.len() + rest.len();
        let all: HashSet<Vec<u8>> = seen.iter().chain(&rest).cloned().collect();
        assert_eq!(all.len(), total, "no entry returned twice");
        for i in 0..300 {
            let n = format!("file{i}").into_bytes();
            if !removed.contains(&n) {
                assert!(all.contains(&n), "{} lost", String::from_utf8_lossy(&n));
            }
        }
        for n in &rest {
            assert!(!removed.contains(n), "{} removed before the resume", String::from_utf8_lossy(n));
            assert!(!first.contains(n));
            let s = String::from_utf8_lossy(n);
            assert!(s.starts_with("file") || added.contains(n), "{s}");
        }
        assert_consistent(&mut fs);
    }
}

#[test]
fn statfs_and_stats() {
    let mut fs = fresh(64 * 1024, 64, 2048);
    let s0 = fs.statfs();
    assert!(s0.blocks > 0 && s0.blocks_free <= s0.blocks);
    let f = fs.create(ROOT_INO, b"f", &reg(0o644), ts(1)).unwrap();
    fs.write(f.ino, 0, &[3u8; 100_000], ts(2)).unwrap();
    let s1 = fs.statfs();
    assert!(s1.blocks_free < s0.blocks_free);
    let st = fs.stats();
    assert_eq!(st.user_bytes, 100_000);
    assert!(st.programmed_bytes > 0);
    assert!(st.checkpoints >= 1);
}

#[test]
fn rename_edge_cases_keep_fsck_clean() {
    let mut fs = fresh(64 * 1024, 64, 2048);
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0, ts(1)).unwrap();
    let b = fs.mkdir(ROOT_INO, b"b", 0o755, 0, 0, ts(1)).unwrap();
    let sub = fs.mkdir(a.ino, b"sub", 0o755, 0, 0, ts(1)).unwrap();
    let f = fs.create(b.ino, b"f", &reg(0o644), ts(1)).unwrap();
    // exchange a directory in a/ with a file in b/
    fs.rename(a.ino, b"sub", b.ino, b"f", RENAME_EXCHANGE, ts(2)).unwrap();
    assert_eq!(fs.lookup(a.ino, b"sub").unwrap().ino, f.ino);
    assert_eq!(fs.lookup(b.ino, b"f").unwrap().ino, sub.ino);
    assert_eq!(fs.getattr(sub.ino).unwrap().parent, b.ino);
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    assert_consistent(&mut fs);
    // overwrite an empty directory in another directory with a directory
    let e = fs.mkdir(a.ino, b"empty", 0o755, 0, 0, ts(3)).unwrap();
    fs.rename(b.ino, b"f", a.ino, b"empty", 0, ts(3)).unwrap();
    fs.evict(e.ino).unwrap();
    assert_eq!(fs.lookup(a.ino, b"empty").unwrap().ino, sub.ino);
    assert_eq!(fs.getattr(e.ino).unwrap_err(), Error::NotFound);
    assert_consistent(&mut fs);
    // a directory holding only a symlink is not empty
    fs.symlink(sub.ino, b"l", b"x", 0, 0, ts(4)).unwrap();
    assert_eq!(fs.rmdir(a.ino, b"empty", ts(4)).unwrap_err(), Error::NotEmpty);
    // overwriting a non-empty directory fails, a file onto a directory fails
    let d2 = fs.mkdir(ROOT_INO, b"d2", 0o755, 0, 0, ts(5)).unwrap();
    assert_eq!(fs.rename(ROOT_INO, b"d2", a.ino, b"empty", 0, ts(5)).unwrap_err(), Error::NotEmpty);
    assert_eq!(fs.rename(a.ino, b"sub", ROOT_INO, b"d2", 0, ts(5)).unwrap_err(), Error::IsDir);
    assert_eq!(fs.rename(ROOT_INO, b"d2", a.ino, b"sub", 0, ts(5)).unwrap_err(), Error::NotDir);
    // moving a directory under itself fails; exchanging with its own descendant fails
    assert_eq!(fs.rename(ROOT_INO, b"a", sub.ino, b"x", 0, ts(6)).unwrap_err(), Error::Invalid);
    assert_eq!(fs.rename(ROOT_INO, b"a", a.ino, b"empty", RENAME_EXCHANGE, ts(6)).unwrap_err(), Error::Invalid);
    // hard links across directories, then rename one link over the other (no-op)
    fs.link(f.ino, d2.ino, b"g", ts(7)).unwrap();
    fs.rename(a.ino, b"sub", d2.ino, b"g", 0, ts(7)).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 2);
    assert!(fs.lookup(a.ino, b"sub").is_ok());
    // exchange of a name with a missing target
    assert_eq!(fs.rename(a.ino, b"sub", d2.ino, b"none", RENAME_EXCHANGE, ts(8)).unwrap_err(), Error::NotFound);
    assert_eq!(fs.rename(a.ino, b"sub", d2.ino, b"none", RENAME_EXCHANGE | RENAME_NOREPLACE, ts(8)).unwrap_err(), Error::Invalid);
    assert_consistent(&mut fs);
    let mut fs = remount(fs);
    assert_consistent(&mut fs);
    assert_eq!(fs.lookup(d2.ino, b"g").unwrap().ino, f.ino);
}

#[test]
fn mount_refuses_blank_and_foreign_media_and_bad_geometry() {
    let blank = RamFlash::new_nand(64 * 1024, 64, 2048);
    let r = Fs::mount(blank, Default::default());
    assert_eq!(r.err().map(|e| e.0), Some(Error::BadFormat));
    let tiny = RamFlash::new_nand(4096, 64, 2048);
    let r = mkfs(tiny, &Default::default(), ts(0));
    assert_eq!(r.err().map(|e| e.0), Some(Error::Invalid));
    let few = RamFlash::new_nand(64 * 1024, 8, 2048);
    assert_eq!(mkfs(few, &Default::default(), ts(0)).err().map(|e| e.0), Some(Error::Invalid));
    // a medium formatted with another geometry is refused
    let f = RamFlash::new_nand(64 * 1024, 64, 2048);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut other = RamFlash::new_nand(64 * 1024, 64, 512);
    let raw = f.raw().to_vec();
    for (i, b) in raw.iter().enumerate().take(64 * 1024 * 4) {
        if *b != 0xFF {
            other.flip((i / (64 * 1024)) as u32, (i % (64 * 1024)) as u32, !*b);
        }
    }
    assert_eq!(Fs::mount(other, Default::default()).err().map(|e| e.0), Some(Error::BadFormat));
}

/// MLC NAND (paired pages: a cut while programming an upper page can destroy its lower page,
/// fsync'd data included) whose pairing the medium does not report is refused: format and
/// mount (read-only too) return NotSupported, and the same image mounts as SLC NAND (mlc.rs:
/// with a pairing).
#[test]
fn mlc_nand_is_refused() {
    use ferrofs_engine::{FlashKind, MountOptions};
    let mlc = RamFlash::with_kind(FlashKind::MlcNand, 64 * 1024, 64, 2048);
    assert_eq!(mkfs(mlc, &Default::default(), ts(0)).err().map(|e| e.0), Some(Error::NotSupported));
    let f = RamFlash::new_nand(64 * 1024, 64, 2048);
    let mut f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    f.set_kind(FlashKind::MlcNand);
    let (e, f) = Fs::mount(f, Default::default()).err().expect("MLC mount accepted");
    assert_eq!(e, Error::NotSupported);
    let (e, mut f) = Fs::mount(f, MountOptions { read_only: true, ..Default::default() }).err().expect("read-only MLC mount accepted");
    assert_eq!(e, Error::NotSupported);
    f.set_kind(FlashKind::Nand);
    let mut fs = Fs::mount(f, Default::default()).map_err(|e| e.0).unwrap();
    assert_consistent(&mut fs);
}

/// A rename writes the renamed inode only when it is a directory moved to another parent (its
/// `parent`, with the rename's time as ctime): otherwise nothing of it changes on the medium
/// and its ctime is the caller's to store (the kernel's `write_inode`, as UBIFS does). The
/// directories' inodes are written every time, and a moved directory's `..` survives a remount.
#[test]
fn rename_writes_the_renamed_inode_only_for_a_directory_changing_parent() {
    const INODE_RECORD: u64 = 136;
    let mut fs = fresh(64 * 1024, 64, 2048);
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0, ts(1)).unwrap().ino;
    let b = fs.mkdir(ROOT_INO, b"b", 0o755, 0, 0, ts(1)).unwrap().ino;
    let f = fs.create(a, b"f", &reg(0o644), ts(2)).unwrap().ino;
    let d = fs.mkdir(a, b"d", 0o755, 0, 0, ts(2)).unwrap().ino;
    let inode_bytes = |fs: &Fs| fs.stats().inode_bytes;
    let step = |fs: &mut Fs, odir: u64, o: &[u8], ndir: u64, n: &[u8], flags: u32, t: i64| -> u64 {
        let i0 = inode_bytes(fs);
        fs.rename(odir, o, ndir, n, flags, ts(t)).unwrap();
        (inode_bytes(fs) - i0) / INODE_RECORD
    };
    // a file in its directory, then to another: the directories' inodes only
    assert_eq!(step(&mut fs, a, b"f", a, b"g", 0, 3), 1);
    assert_eq!(step(&mut fs, a, b"g", b, b"g", 0, 4), 2);
    assert_eq!(fs.getattr(f).unwrap().ctime, ts(2), "the engine leaves the file's ctime to the caller");
    // a directory in its directory: its inode is not written; to another: it is (its parent)
    assert_eq!(step(&mut fs, a, b"d", a, b"e", 0, 5), 1);
    assert_eq!(fs.getattr(d).unwrap().ctime, ts(2));
    assert_eq!(step(&mut fs, a, b"e", b, b"e", 0, 6), 3);
    let di = fs.getattr(d).unwrap();
    assert_eq!((di.parent, di.ctime), (b, ts(6)));
    assert_eq!(fs.getattr(a).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b).unwrap().nlink, 3);
    // an exchange of a file and a directory in one directory writes neither; across
    // directories only the directory that moved
    assert_eq!(step(&mut fs, b, b"g", b, b"e", RENAME_EXCHANGE, 7), 1);
    assert_eq!(fs.lookup(b, b"g").unwrap().ino, d);
    let h = fs.create(a, b"h", &reg(0o644), ts(8)).unwrap().ino;
    assert_eq!(step(&mut fs, a, b"h", b, b"g", RENAME_EXCHANGE, 9), 3);
    assert_eq!(fs.getattr(d).unwrap().parent, a);
    assert_eq!(fs.lookup(b, b"g").unwrap().ino, h);
    assert_eq!((fs.getattr(a).unwrap().nlink, fs.getattr(b).unwrap().nlink), (3, 2));
    // the caller's ctime goes through setattr, as the kernel's write_inode stores it
    let sa = SetAttr { ctime: Some(ts(9)), ..SetAttr::default() };
    fs.setattr(h, &sa, ts(9)).unwrap();
    assert_consistent(&mut fs);
    let mut fs = remount(fs);
    assert_eq!(fs.lookup(a, b"h").unwrap().ino, d);
    assert_eq!(fs.getattr(d).unwrap().parent, a);
    assert_eq!(fs.getattr(h).unwrap().ctime, ts(9));
    assert_eq!(fs.getattr(f).unwrap().ctime, ts(2));
    assert_eq!(list(&mut fs, b).iter().map(|e| e.0.clone()).collect::<Vec<_>>(), vec![b".".to_vec(), b"..".to_vec(), b"e".to_vec(), b"g".to_vec()]);
    assert_consistent(&mut fs);
}

/// The last unlink (and a rename over the last link) does not rewrite the inode record: the
/// orphan entry alone says it has no links (format.md 3.3). getattr reports `nlink` 0 from the
/// inode cache and, once the cache lost it, from the orphan key; fsck counts the orphan's
/// links as 0 with its record still saying 1; evict and a crash reclaim it.
#[test]
fn the_last_unlink_leaves_the_inode_record_to_the_orphan_entry() {
    use ferrofs_engine::writeback::ICACHE_SLOTS;
    const INODE_RECORD: u64 = 136;
    let mut fs = fresh(64 * 1024, 64, 2048);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(1)).unwrap().ino;
    let f = fs.create(d, b"f", &reg(0o644), ts(1)).unwrap().ino;
    fs.write(f, 0, &[7u8; 9000], ts(1)).unwrap();
    fs.link(f, d, b"g", ts(2)).unwrap();
    let v = fs.create(d, b"victim", &reg(0o644), ts(2)).unwrap().ino;
    let w = fs.create(d, b"w", &reg(0o644), ts(2)).unwrap().ino;
    let inode_records = |fs: &Fs| fs.stats().inode_bytes / INODE_RECORD;
    // a link left: the inode and the directory; the last link: the directory only
    let n0 = inode_records(&fs);
    fs.unlink(d, b"g", ts(3)).unwrap();
    assert_eq!(inode_records(&fs) - n0, 2);
    assert_eq!(fs.getattr(f).unwrap().nlink, 1);
    let n0 = inode_records(&fs);
    fs.unlink(d, b"f", ts(4)).unwrap();
    assert_eq!(inode_records(&fs) - n0, 1);
    let n0 = inode_records(&fs);
    fs.rename(d, b"w", d, b"victim", 0, ts(5)).unwrap();
    assert_eq!(inode_records(&fs) - n0, 1, "a rename over the last link writes the directory only");
    for (ino, t) in [(f, 4), (v, 5)] {
        let i = fs.getattr(ino).unwrap();
        assert_eq!((i.nlink, i.ctime), (0, ts(t)), "inode {ino} from the cache");
    }
    assert_eq!(fs.lookup(d, b"victim").unwrap().ino, w);
    assert_consistent(&mut fs);
    // push both out of the inode cache (its slot is ino % ICACHE_SLOTS): the orphan key decides
    let mut last = 0;
    while last < f.max(v) + ICACHE_SLOTS as u64 {
        let name = format!("x{last}");
        last = fs.create(ROOT_INO, name.as_bytes(), &reg(0o600), ts(6)).unwrap().ino;
    }
    for x in [f + ICACHE_SLOTS as u64, v + ICACHE_SLOTS as u64] {
        fs.getattr(x).unwrap();
    }
    let (_, misses0) = fs.icache_stats();
    assert_eq!(fs.getattr(f).unwrap().nlink, 0);
    assert_eq!(fs.getattr(v).unwrap().nlink, 0);
    assert_eq!(fs.icache_stats().1 - misses0, 2, "both read from flash");
    let mut b = [0u8; 16];
    assert_eq!(fs.read(f, 100, &mut b).unwrap(), 16);
    assert_eq!(b, [7u8; 16], "still readable while open");
    assert_consistent(&mut fs);
    // evict reclaims one; a crash the other
    fs.evict(f).unwrap();
    assert_eq!(fs.getattr(f).unwrap_err(), Error::NotFound);
    fs.fsync(d).unwrap();
    let mut fs = crash_remount(fs);
    assert_eq!(fs.getattr(v).unwrap_err(), Error::NotFound);
    assert_eq!(fs.getattr(w).unwrap().nlink, 1);
    assert_consistent(&mut fs);
}
