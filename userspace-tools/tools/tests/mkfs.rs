//! mkfs.ferrofs: images of every kind, `-r` copies of real trees read back through the engine,
//! geometry and source errors.

mod common;

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use common::*;
use ferrofs_engine::format::S_IFMT;

/// Build the test tree; returns whether user xattrs are supported.
fn build_tree(root: &Path) -> bool {
    let d = |p: &str| root.join(p);
    fs::create_dir_all(d("a/b/c/d")).unwrap();
    fs::create_dir_all(d("empty_dir")).unwrap();
    fs::create_dir_all(d("sticky")).unwrap();
    fs::set_permissions(d("sticky"), fs::Permissions::from_mode(0o1777)).unwrap();
    // 3 MiB of pseudo-random data
    fs::write(d("big.bin"), prng_bytes(1, 3 << 20)).unwrap();
    // sparse: 8 MiB hole, 5 bytes, 4 MiB hole, 1 byte, then a hole at the end (size set by truncate)
    {
        let mut f = fs::File::create(d("sparse")).unwrap();
        f.seek(SeekFrom::Start(8 << 20)).unwrap();
        f.write_all(b"hello").unwrap();
        f.seek(SeekFrom::Start(12 << 20)).unwrap();
        f.write_all(b"x").unwrap();
        f.set_len((16 << 20) + 123).unwrap();
    }
    fs::write(d("empty"), b"").unwrap();
    fs::write(d("a/small.txt"), b"small file\n").unwrap();
    fs::write(d("a/b/unaligned"), prng_bytes(2, 4096 * 3 + 17)).unwrap();
    // a file whose middle block is zero (a hole inside) and whose tail block is partially zero
    let mut z = prng_bytes(3, 4096 * 4);
    z[4096..8192].fill(0);
    z[3 * 4096 + 100..].fill(0);
    fs::write(d("a/zero_middle"), &z).unwrap();
    // hard links across directories
    fs::write(d("a/b/linked"), b"linked content").unwrap();
    fs::hard_link(d("a/b/linked"), d("a/b/c/d/link2")).unwrap();
    fs::hard_link(d("a/b/linked"), d("link3")).unwrap();
    // symlinks: relative, absolute, dangling, to a directory, long
    symlink("../small.txt", d("a/b/rel_link")).unwrap();
    symlink("/etc/passwd", d("abs_link")).unwrap();
    symlink("does/not/exist", d("dangling")).unwrap();
    symlink("a/b", d("dir_link")).unwrap();
    symlink("x".repeat(3000), d("long_link")).unwrap();
    // fifo, socket, device nodes (root only)
    mkfifo(&d("fifo"), 0o640);
    let _sock = std::os::unix::net::UnixListener::bind(d("sock")).unwrap();
    let have_dev = mknod(&d("chardev"), libc::S_IFCHR | 0o600, libc::makedev(1, 3))
        & mknod(&d("blockdev"), libc::S_IFBLK | 0o660, libc::makedev(259, 70000));
    if !have_dev {
        let _ = fs::remove_file(d("chardev"));
        let _ = fs::remove_file(d("blockdev"));
    }
    // odd names
    fs::write(d("with space"), b"1").unwrap();
    fs::write(d("new\nline"), b"2").unwrap();
    fs::write(d("-dash"), b"3").unwrap();
    fs::write(d("ünïcødé ✓"), b"4").unwrap();
    fs::write(root.join(std::ffi::OsStr::from_bytes(b"bad\xff\xfeutf8")), b"5").unwrap();
    fs::write(d(&"n".repeat(255)), b"6").unwrap();
    // modes
    fs::write(d("setuid"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(d("setuid"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::write(d("setgid"), b"").unwrap();
    fs::set_permissions(d("setgid"), fs::Permissions::from_mode(0o2711)).unwrap();
    fs::write(d("noperm"), b"secret").unwrap();
    fs::set_permissions(d("noperm"), fs::Permissions::from_mode(0o000)).unwrap();
    fs::set_permissions(d("a/b/c"), fs::Permissions::from_mode(0o700)).unwrap();
    // owners (root only)
    let _ = lchown(&d("a/small.txt"), 1234, 5678);
    let _ = lchown(&d("a/b/rel_link"), 42, 43);
    let _ = lchown(&d("a/b/c"), 1000, 100);
    // xattrs
    let xa = set_xattr(&d("a/small.txt"), "user.comment", b"hello xattr")
        && set_xattr(&d("a/small.txt"), "user.empty", b"")
        && set_xattr(&d("a/b"), "user.dir", &prng_bytes(4, 1000))
        && set_xattr(&d("big.bin"), "user.big", &prng_bytes(5, 3000));
    // times with nanoseconds (after all content changes)
    set_times(&d("big.bin"), (1_000_000_000, 123_456_789), (1_234_567_890, 987_654_321));
    set_times(&d("a/small.txt"), (1_600_000_000, 1), (1_500_000_000, 999_999_999));
    set_times(&d("abs_link"), (1_400_000_000, 5), (1_300_000_000, 7));
    set_times(&d("a/b/c/d"), (1_100_000_000, 11), (1_200_000_000, 22));
    set_times(&d("empty"), (0, 0), (0, 0));
    set_times(&d("fifo"), (-1_000, 500), (-86_400 * 365, 250));
    xa
}

#[test]
fn mkfs_tree_roundtrip_fsck_clean_and_every_byte_and_attribute_matches() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    let xattrs_ok = build_tree(&src);
    fs::set_permissions(&src, fs::Permissions::from_mode(0o750)).unwrap();
    set_times(&src, (1_111_111_111, 1), (1_222_222_222, 2));
    let snap = snapshot(&src);
    let root_md = fs::metadata(&src).unwrap();
    let img = t.path().join("fs.img");
    let r = run_ok(MKFS, &[p(&img), "--size", "96M", "-r", p(&src)]);
    assert!(r.stdout.contains("copied"), "{}", r.stdout);
    let f = run(FSCK, &["-n", p(&img)]);
    assert_eq!(f.code, 0, "fsck:\n{}{}", f.stdout, f.stderr);
    assert!(f.stdout.contains("clean"), "{}", f.stdout);
    let mut fs = mount_ro(&img);
    let n = compare_tree(&mut fs, &src, &snap, false);
    assert_eq!(n, snap.len());
    // the root takes the source directory's attributes
    let root = fs.getattr(ferrofs_engine::ROOT_INO).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(root.mode & 0o7777, 0o750);
    assert_eq!((root.mtime.sec, root.mtime.nsec), (1_222_222_222, 2));
    assert_eq!((root.uid, root.gid), (root_md.uid(), root_md.gid()));
    // hard links share one inode with nlink 3
    let a = ferrofs_tools::walk::resolve(&mut fs, b"a/b/linked").unwrap();
    let b = ferrofs_tools::walk::resolve(&mut fs, b"a/b/c/d/link2").unwrap();
    let c = ferrofs_tools::walk::resolve(&mut fs, b"link3").unwrap();
    assert_eq!((a.ino, a.nlink), (b.ino, 3));
    assert_eq!(a.ino, c.ino);
    // holes are not stored: the 16 MiB sparse file has 2 data blocks, the zero-middle file 3
    let sparse = ferrofs_tools::walk::resolve(&mut fs, b"sparse").unwrap();
    let zm = ferrofs_tools::walk::resolve(&mut fs, b"a/zero_middle").unwrap();
    assert_eq!(sparse.size, (16 << 20) + 123);
    drop(fs);
    assert_eq!(data_blocks(&img, sparse.ino), 2);
    assert_eq!(data_blocks(&img, zm.ino), 3);
    if xattrs_ok {
        let mut fs = mount_ro(&img);
        let i = ferrofs_tools::walk::resolve(&mut fs, b"a/small.txt").unwrap();
        let x = ferrofs_tools::walk::xattrs(&mut fs, i.ino).unwrap();
        assert!(x.contains(&(b"user.comment".to_vec(), b"hello xattr".to_vec())));
        assert!(x.contains(&(b"user.empty".to_vec(), Vec::new())));
    }
}

#[test]
fn mkfs_squash_uids_makes_everything_root_owned() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("d/f"), b"x").unwrap();
    symlink("f", src.join("d/l")).unwrap();
    // squashing is only seen on files that belong to someone else (root can chown)
    assert!(lchown(&src.join("d/f"), 777, 888) && lchown(&src.join("d"), 5, 6), "cannot run: chown needs root");
    let snap = snapshot(&src);
    let img = t.path().join("fs.img");
    run_ok(MKFS, &[p(&img), "-q", "--squash-uids", "-r", p(&src)]);
    let mut fs = mount_ro(&img);
    compare_tree(&mut fs, &src, &snap, true);
    assert_eq!(run(FSCK, &[p(&img)]).code, 0);
}

#[test]
fn mkfs_every_image_kind_mounts_and_fscks_clean() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("sub/file"), prng_bytes(9, 100_000)).unwrap();
    let snap = snapshot(&src);
    let cases: &[(&str, &[&str], &str)] = &[
        ("nand.img", &["--size", "32M", "--page", "2k", "--erase", "128k"], "kind            0 (NAND)"),
        ("nand2.img", &["--nand", "4096,64,128"], "segment_size    262144"),
        ("block.img", &["--block", "--size", "128M", "--au", "4M", "--unit", "4k"], "kind            2 (block)"),
        ("smallau.img", &["--block", "--size", "32M", "--au", "256k"], "segment_count   128"),
        ("raw.img", &["--raw", "--size", "16M", "--page", "2k", "--erase", "64k"], "write_unit      2048"),
        ("rawblock.img", &["--raw", "--block", "--size", "64M", "--au", "1M"], "kind            2 (block)"),
        ("bad.img", &["--size", "32M", "--bad-blocks", "0,5,100"], "sb_segments     1 2"),
    ];
    for (name, args, expect) in cases {
        let img = t.path().join(name);
        let mut a: Vec<&str> = vec![p(&img), "-q", "-r", p(&src)];
        a.extend_from_slice(args);
        run_ok(MKFS, &a);
        let f = run(FSCK, &[p(&img)]);
        assert_eq!(f.code, 0, "{name}: fsck\n{}{}", f.stdout, f.stderr);
        let d = run_ok(DUMP, &[p(&img), "--superblock"]);
        assert!(d.stdout.contains(expect), "{name}: dump lacks {expect:?}:\n{}", d.stdout);
        let mut fs = mount_ro(&img);
        compare_tree(&mut fs, &src, &snap, false);
    }
    // raw images have exactly the device size
    assert_eq!(fs::metadata(t.path().join("raw.img")).unwrap().len(), 16 << 20);
    assert_eq!(fs::metadata(t.path().join("rawblock.img")).unwrap().len(), 64 << 20);
    // bad blocks are reported as bad in the segment table
    let d = run_ok(DUMP, &[p(&t.path().join("bad.img")), "--segments"]);
    assert!(d.stdout.contains("3 bad"), "{}", d.stdout);
}

#[test]
fn mkfs_empty_filesystem_has_root_only() {
    let t = tmp();
    let img = t.path().join("e.img");
    let r = run_ok(MKFS, &[p(&img), "--serial", "0x1234abcd"]);
    assert!(r.stdout.contains("0x000000001234abcd"), "{}", r.stdout);
    let mut fs = mount_ro(&img);
    assert!(ferrofs_tools::walk::list_dir(&mut fs, 1).unwrap().is_empty());
    let root = fs.getattr(1).unwrap();
    assert_eq!(root.mode & S_IFMT, libc::S_IFDIR);
    assert_eq!(root.mode & 0o7777, 0o755);
    let f = run(FSCK, &["-n", p(&img)]);
    assert_eq!(f.code, 0, "{}", f.all());
}

/// --probe, --dry-run and --destructive: block devices only, and the probe writes over a
/// device that --dry-run would not format only with --destructive (usage errors, exit 16,
/// nothing created).
#[test]
fn mkfs_probe_and_dry_run_flags() {
    let t = tmp();
    let img = t.path().join("x.img");
    let cases: &[(&[&str], &str)] = &[
        (&["--probe"], "work on a block device"),
        (&["--dry-run"], "work on a block device"),
        (&["--probe", "--destructive"], "work on a block device"),
        (&["--destructive"], "--destructive only lets --probe write during a --dry-run"),
    ];
    for (args, msg) in cases {
        let mut a: Vec<&str> = vec![p(&img)];
        a.extend_from_slice(args);
        let r = run(MKFS, &a);
        assert_eq!(r.code, 16, "{args:?}: {}", r.all());
        assert!(r.stderr.contains(msg), "{args:?}: expected {msg:?} in {}", r.stderr);
        assert!(!img.exists(), "{args:?} created the image");
    }
}

#[test]
fn mkfs_geometry_errors_are_clear() {
    let t = tmp();
    let img = t.path().join("x.img");
    let cases: &[(&[&str], &str)] = &[
        (&["--size", "1M"], "device too small"),
        (&["--size", "1000k"], "not a multiple"),
        (&["--size", "64M", "--erase", "8k"], "too small"),
        (&["--size", "64M", "--page", "3000", "--erase", "128k"], "not a multiple of the write unit"),
        (&["--block", "--size", "64M"], "device too small"),
        (&["--nand", "2048,64"], "PAGE,PAGES_PER_BLOCK,BLOCKS"),
        (&["--size", "64M", "--au", "1M"], "--block"),
    ];
    for (args, msg) in cases {
        let mut a: Vec<&str> = vec![p(&img)];
        a.extend_from_slice(args);
        let r = run(MKFS, &a);
        assert_ne!(r.code, 0, "{args:?} should fail");
        assert!(r.stderr.contains("error:"), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(msg), "{args:?}: expected {msg:?} in {}", r.stderr);
    }
    // the target is a directory
    let r = run(MKFS, &[p(t.path())]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("is a directory"), "{}", r.stderr);
    // a fifo is no target
    mkfifo(&t.path().join("pipe"), 0o600);
    let r = run(MKFS, &[p(&t.path().join("pipe"))]);
    assert_eq!(r.code, 1);
    // a regular file is no MTD
    let r = run(FSCK, &[p(&t.path().join("pipe"))]);
    assert_eq!(r.code, 8);
}

#[test]
fn mkfs_source_errors_are_clear() {
    let t = tmp();
    let img = t.path().join("x.img");
    let r = run(MKFS, &[p(&img), "-r", p(&t.path().join("missing"))]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("cannot access the source directory"), "{}", r.stderr);
    fs::write(t.path().join("file"), b"x").unwrap();
    let r = run(MKFS, &[p(&img), "-r", p(&t.path().join("file"))]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("not a directory"), "{}", r.stderr);
    assert!(!img.exists(), "no image is written when the source is unusable");
}

#[test]
fn mkfs_enospc_reports_how_much_is_needed() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    for i in 0..6 {
        fs::write(src.join(format!("f{i}")), prng_bytes(i, 1 << 20)).unwrap();
    }
    let img = t.path().join("small.img");
    let r = run(MKFS, &[p(&img), "--size", "4M", "--erase", "64k", "-r", p(&src)]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.stderr.contains("ENOSPC"), "{}", r.stderr);
    assert!(r.stderr.contains("needs about"), "{}", r.stderr);
    assert!(r.stderr.contains("at least about"), "{}", r.stderr);
    // the suggested size works
    let r2 = run_ok(MKFS, &[p(&img), "--size", "16M", "--erase", "64k", "-r", p(&src)]);
    assert!(r2.stdout.contains("copied 6 files"), "{}", r2.stdout);
}

#[test]
fn mkfs_generated_tree_of_2000_files() {
    let t = tmp();
    let src = t.path().join("src");
    let mut n = 0u64;
    for d in 0..40 {
        let dir = src.join(format!("dir{d:02}")).join(format!("sub{}", d % 3));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..50 {
            n += 1;
            let len = (n * 7919 % 20_000) as usize;
            fs::write(dir.join(format!("file{f:03}.dat")), prng_bytes(n, len)).unwrap();
            if f % 10 == 0 {
                symlink(format!("file{f:03}.dat"), dir.join(format!("ln{f}"))).unwrap();
            }
        }
    }
    let snap = snapshot(&src);
    let img = t.path().join("gen.img");
    run_ok(MKFS, &[p(&img), "-q", "--size", "128M", "-r", p(&src)]);
    let f = run(FSCK, &["-n", p(&img)]);
    assert_eq!(f.code, 0, "{}", f.all());
    assert!(f.stdout.contains("2000 files"), "{}", f.stdout);
    let mut fs = mount_ro(&img);
    assert_eq!(compare_tree(&mut fs, &src, &snap, false), snap.len());
}

/// A real tree: /usr/share/doc (about 130 MiB, 5000+ entries here). Slow in debug builds.
#[test]
#[ignore]
fn mkfs_usr_share_doc() {
    let src = Path::new("/usr/share/doc");
    assert!(src.is_dir(), "cannot run: no /usr/share/doc here");
    let t = tmp();
    let snap = snapshot(src);
    let img = t.path().join("doc.img");
    run_ok(MKFS, &[p(&img), "-q", "--size", "512M", "-r", "/usr/share/doc"]);
    let f = run(FSCK, &["-n", p(&img)]);
    assert_eq!(f.code, 0, "{}", f.all());
    let mut fs = mount_ro(&img);
    assert_eq!(compare_tree(&mut fs, src, &snap, false), snap.len());
}

/// A real block device: a loop device over a file (root only; attaches /dev/loopN for the
/// duration of the test, detached by a guard).
#[test]
#[ignore]
fn mkfs_fsck_dump_on_a_loop_block_device() {
    struct Loop(String);
    impl Drop for Loop {
        fn drop(&mut self) {
            let _ = std::process::Command::new("losetup").args(["-d", &self.0]).status();
        }
    }
    let t = tmp();
    let backing = t.path().join("backing");
    fs::File::create(&backing).unwrap().set_len(64 << 20).unwrap();
    let out = std::process::Command::new("losetup").args(["-f", "--show", p(&backing)]).output();
    let out = out.expect("cannot run: no losetup");
    assert!(out.status.success(), "cannot run: losetup failed: {}", String::from_utf8_lossy(&out.stderr));
    let dev = Loop(String::from_utf8_lossy(&out.stdout).trim().to_string());
    let src = t.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("d/f"), prng_bytes(3, 200_000)).unwrap();
    let snap = snapshot(&src);
    run_ok(MKFS, &[&dev.0, "-q", "--au", "1M", "-r", p(&src)]);
    assert_eq!(run(FSCK, &["-n", &dev.0]).code, 0);
    assert_eq!(run(FSCK, &[&dev.0]).code, 0);
    let d = run_ok(DUMP, &[&dev.0, "--cat", "/d/f"]);
    assert_eq!(d.raw_stdout, fs::read(src.join("d/f")).unwrap());
    let mut fs = mount_ro(Path::new(&dev.0));
    compare_tree(&mut fs, &src, &snap, false);
    // image options make no sense for a device
    assert_eq!(run(MKFS, &[&dev.0, "--size", "1M"]).code, 16);
    // the probe: refused in a dry run without --destructive; with it, a loop device over a
    // file shows no structure and the defaults are said; --probe formats (with 1 MiB segments:
    // 16 of the default 4 MiB leave no room on 64 MiB)
    let r = run(MKFS, &[&dev.0, "--dry-run", "--probe"]);
    assert_eq!(r.code, 16);
    assert!(r.stderr.contains("--destructive"), "{}", r.stderr);
    let r = run_ok(MKFS, &[&dev.0, "--dry-run", "--probe", "--destructive"]);
    assert!(r.stdout.contains("the probe found no structure") && r.stdout.contains("segment 4.0 MiB (default"), "{}", r.stdout);
    let r = run_ok(MKFS, &[&dev.0, "--probe", "--au", "1M"]);
    assert!(r.stdout.contains("writes test data over all of") && r.stdout.contains("before formatting it"), "{}", r.stdout);
    assert_eq!(run(FSCK, &["-n", &dev.0]).code, 0);
}

#[test]
fn mkfs_skips_oversized_xattrs_with_a_warning_and_erase_all_works() {
    let t = tmp();
    // tmpfs holds large user xattrs (ext4 keeps them within a block)
    let shm = tempfile::tempdir_in("/dev/shm").ok();
    let src = shm.as_ref().map_or_else(|| t.path().join("src"), |d| d.path().join("src"));
    fs::create_dir(&src).unwrap();
    fs::write(src.join("f"), b"content").unwrap();
    // 16 KiB segments hold values up to 15 472 bytes; bigger ones are skipped
    let big = prng_bytes(2, 4000);
    assert!(
        set_xattr(&src.join("f"), "user.big", &big) && set_xattr(&src.join("f"), "user.ok", b"v"),
        "cannot run: the source directory takes no user xattrs"
    );
    assert!(
        set_xattr(&src.join("f"), "user.huge", &prng_bytes(1, 20_000)),
        "cannot run: the source filesystem refused a 20 000-byte xattr (tmpfs in /dev/shm takes it)"
    );
    let img = t.path().join("x.img");
    let r = run_ok(MKFS, &[p(&img), "--erase-all", "--size", "4M", "--page", "512", "--erase", "16k", "-r", p(&src)]);
    assert!(r.stderr.contains("warning") && r.stderr.contains("user.huge"), "{}", r.stderr);
    assert!(r.stderr.contains("15472"), "{}", r.stderr);
    assert!(!r.stderr.contains("user.big"), "{}", r.stderr);
    assert_eq!(run(FSCK, &[p(&img)]).code, 0);
    let mut fs = mount_ro(&img);
    let i = ferrofs_tools::walk::resolve(&mut fs, b"f").unwrap();
    let mut x = ferrofs_tools::walk::xattrs(&mut fs, i.ino).unwrap();
    x.sort();
    assert_eq!(x, vec![(b"user.big".to_vec(), big), (b"user.ok".to_vec(), b"v".to_vec())]);
}
