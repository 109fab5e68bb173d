//! The data interfaces a real userland uses (issue 14; the ferrofs-ifdata guest suite):
//! O_TMPFILE with linkat, fallocate (default mode, KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE, the
//! unsupported modes), FIEMAP, O_DIRECT and syncfs, with results, errnos and persistence.
//!
//! ```text
//! ferrofs-fstest ifdata run DIR [--snapshot SRCMTD:DSTMTD]
//!     every check; leaves the files `verify` checks (each made durable by fsync, the last by
//!     syncfs alone) and, while an unnamed O_TMPFILE file with fsync'd data is still open,
//!     copies the mounted MTD SRC onto DST (a power cut at that moment: mount with
//!     commit=3600,gc=off,noatime so that nothing else reaches the flash meanwhile)
//! ferrofs-fstest ifdata verify DIR
//!     after a remount or on the power-cut copy: the files `run` left, byte for byte
//! ```

use std::path::{Path, PathBuf};

use libc::{FALLOC_FL_COLLAPSE_RANGE, FALLOC_FL_INSERT_RANGE, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE};

use crate::pattern;
use crate::report::Report;
use crate::sys::{self, AlignedBuf, Errno, Fd, R};

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

/// `FS_IOC_FIEMAP` = `_IOWR('f', 11, struct fiemap)` (32-byte header).
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
const FIEMAP_FLAG_SYNC: u32 = 0x1;
const FIEMAP_FLAG_XATTR: u32 = 0x2;
const FIEMAP_EXTENT_LAST: u32 = 0x1;
const FIEMAP_EXTENT_UNKNOWN: u32 = 0x2;

/// The seed of every pattern here (`Pattern` is deterministic per path and seed).
const SEED: u64 = 14;

// The files `run` leaves for `verify`: name and size (contents from `expected`).
const LINKED: &str = "tmp-linked";
const LINKED_LEN: usize = 300 * KIB + 7;
const FALLOC_SIZE: &str = "falloc-size";
const FALLOC_SIZE_LEN: u64 = 3 * MIB as u64 + 5;
const PUNCHED: &str = "punched";
const PUNCHED_LEN: usize = 200 * KIB + 100;
/// `(offset, length)` punched into `PUNCHED`: inside a block, across blocks, whole blocks.
const PUNCHES: &[(usize, usize)] = &[(100, 300), (5000, 20000), (64 * KIB, 64 * KIB)];
const DIRECT: &str = "direct";
const DIRECT_LEN: usize = 1 * MIB;
const SYNCFS: &str = "syncfs-file";
const SYNCFS_LEN: usize = 2 * MIB + 300;
const AFTER: &str = "after-syncfs";

fn usage() -> i32 {
    eprintln!("usage: ferrofs-fstest ifdata run DIR [--snapshot SRCMTD:DSTMTD] | verify DIR");
    2
}

/// Entry point for `ferrofs-fstest ifdata ...`; returns the exit status.
pub fn main(args: &[String]) -> i32 {
    let (sub, dir) = match (args.first(), args.get(1)) {
        (Some(s), Some(d)) => (s.as_str(), PathBuf::from(d)),
        _ => return usage(),
    };
    let mut snapshot = None;
    let mut i = 2;
    while i < args.len() {
        match (args[i].as_str(), args.get(i + 1)) {
            ("--snapshot", Some(v)) if sub == "run" => match v.split_once(':') {
                Some((a, b)) => snapshot = Some((PathBuf::from(a), PathBuf::from(b))),
                None => return usage(),
            },
            _ => return usage(),
        }
        i += 2;
    }
    // modes as asked, whatever the caller's umask
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(0) };
    let mut r = Report::new();
    match sub {
        "run" => run(&mut r, &dir, snapshot.as_ref()),
        "verify" => verify(&mut r, &dir),
        _ => return usage(),
    }
    r.finish()
}

fn pattern(name: &str, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    pattern::fill(pattern::key_for(SEED, name.as_bytes()), 0, &mut v);
    v
}

/// What `verify` expects in `name`.
fn expected(name: &str) -> Vec<u8> {
    match name {
        PUNCHED => {
            let mut v = pattern(PUNCHED, PUNCHED_LEN);
            for &(o, l) in PUNCHES {
                v[o..o + l].fill(0);
            }
            v
        }
        FALLOC_SIZE => {
            let mut v = vec![0u8; FALLOC_SIZE_LEN as usize];
            let p = pattern(FALLOC_SIZE, 10 * KIB);
            v[MIB..MIB + p.len()].copy_from_slice(&p);
            v
        }
        LINKED => pattern(LINKED, LINKED_LEN),
        DIRECT => pattern(DIRECT, DIRECT_LEN),
        SYNCFS => pattern(SYNCFS, SYNCFS_LEN),
        _ => Vec::new(),
    }
}

fn fallocate(fd: &Fd, mode: i32, off: i64, len: i64) -> R<()> {
    // SAFETY: plain syscall on an open descriptor.
    if unsafe { libc::fallocate(fd.raw(), mode, off, len) } != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

fn linkat_proc(fd: &Fd, to: &Path) -> R<()> {
    let from = sys::cpath(format!("/proc/self/fd/{}", fd.raw()))?;
    let c = sys::cpath(to)?;
    // SAFETY: both paths are NUL-terminated.
    if unsafe { libc::linkat(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, c.as_ptr(), libc::AT_SYMLINK_FOLLOW) } != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

fn tmpfile(dir: &Path, extra: i32) -> R<Fd> {
    sys::open(dir, libc::O_TMPFILE | libc::O_RDWR | extra, 0o640)
}

fn read_all(p: &Path) -> R<Vec<u8>> {
    sys::read_file(p)
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Free bytes after a `sync` (write-back done, reservations given back).
fn free_bytes(dir: &Path) -> u64 {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    sys::avail_bytes(dir).unwrap_or(0)
}

/// One FIEMAP extent: (logical, physical, length, flags).
type Extent = (u64, u64, u64, u32);

/// `FS_IOC_FIEMAP` over the whole file with room for `max` extents: (mapped count, extents).
fn fiemap(fd: &Fd, flags: u32, max: u32) -> R<(u32, Vec<Extent>)> {
    const HDR: usize = 32;
    const EXT: usize = 56;
    let mut buf = vec![0u64; (HDR + EXT * max as usize) / 8];
    {
        let b: &mut [u8] = bytemuck_u8(&mut buf);
        b[8..16].copy_from_slice(&u64::MAX.to_ne_bytes()); // fm_length
        b[16..20].copy_from_slice(&flags.to_ne_bytes());
        b[24..28].copy_from_slice(&max.to_ne_bytes()); // fm_extent_count
    }
    // SAFETY: `buf` holds a `struct fiemap` with room for `max` extents, 8-byte aligned.
    if unsafe { libc::ioctl(fd.raw(), FS_IOC_FIEMAP as _, buf.as_mut_ptr()) } != 0 {
        return Err(Errno::last());
    }
    let b = bytemuck_u8(&mut buf);
    let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
    let mapped = u32_at(20);
    let mut ext = Vec::new();
    for k in 0..mapped.min(max) as usize {
        let o = HDR + k * EXT;
        ext.push((u64_at(o), u64_at(o + 8), u64_at(o + 16), u32_at(o + 40)));
    }
    Ok((mapped, ext))
}

fn bytemuck_u8(v: &mut [u64]) -> &mut [u8] {
    let len = v.len() * 8;
    // SAFETY: any u64 storage is valid as bytes; the length is the same memory.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), len) }
}

fn run(r: &mut Report, dir: &Path, snapshot: Option<&(PathBuf, PathBuf)>) {
    r.group("tmpfile", |r| tmpfile_checks(r, dir));
    r.group("fallocate", |r| fallocate_checks(r, dir));
    r.group("fallocate-enospc", |r| fallocate_enospc(r, dir));
    r.group("fiemap", |r| fiemap_checks(r, dir));
    r.group("odirect", |r| odirect_checks(r, dir));
    // last: an open unnamed file with fsync'd data, then data made durable by syncfs alone,
    // then the copy of the flash
    let mut pending = None;
    r.group("power cut", |r| {
        let Some(fd) = r.ok("an O_TMPFILE file to stay open", tmpfile(dir, 0)) else { return };
        let data = pattern("pending", 2 * MIB);
        r.ok("write 2 MiB into it", fd.pwrite_all(&data, 0).map_err(|(_, e)| e));
        r.ok("fsync it (unnamed: its data is on the orphan list's inode)", fd.fsync());
        pending = Some(fd);
        let data = pattern(SYNCFS, SYNCFS_LEN);
        let p = dir.join(SYNCFS);
        let Some(f) = r.ok("create the syncfs file", sys::open(&p, libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY, 0o644)) else { return };
        r.ok("write it (no fsync)", f.pwrite_all(&data, 0).map_err(|(_, e)| e));
        r.ok("syncfs(2) on its descriptor", f.syncfs());
        drop(f);
        r.ok("a file written after the syncfs (may or may not survive the cut)", sys::write_file(dir.join(AFTER), b"not synced", 0o644));
        if let Some((src, dst)) = snapshot {
            r.eq("copy the mounted flash (the power cut)", 0, crate::faults::snapshot(src, dst, &[]));
        } else {
            r.skip("copy the mounted flash", "no --snapshot");
        }
    });
    drop(pending);
}

fn tmpfile_checks(r: &mut Report, dir: &Path) {
    let before = names(dir);
    let Some(fd) = r.ok("open O_TMPFILE | O_RDWR", tmpfile(dir, 0)) else { return };
    if let Some(st) = r.ok("fstat", fd.fstat()) {
        r.eq("a regular file", libc::S_IFREG, st.st_mode & libc::S_IFMT);
        r.eq("mode 0640", 0o640, st.st_mode & 0o7777);
        r.eq("no link", 0, st.st_nlink as u64);
    }
    r.eq("no new name in the directory", before.clone(), names(dir));
    let data = pattern(LINKED, LINKED_LEN);
    r.ok("write", fd.pwrite_all(&data, 0).map_err(|(_, e)| e));
    let mut got = vec![0u8; data.len()];
    r.ok("read back", fd.pread_full(&mut got, 0));
    r.check("read back: same bytes", got == data, "the written bytes", "other bytes");
    let p = dir.join(LINKED);
    r.ok("linkat(fd, \"\", AT_EMPTY_PATH)", sys::linkat_empty(&fd, &p));
    r.ok("fsync after the link", fd.fsync());
    if let Some(st) = r.ok("stat the new name", sys::stat(&p)) {
        r.eq("one link", 1, st.st_nlink as u64);
        r.eq("its size", LINKED_LEN as i64, st.st_size);
    }
    r.check("its contents", read_all(&p).ok() == Some(data), "the written bytes", "other bytes");
    r.err("linkat of the same file to an existing name", sys::linkat_empty(&fd, &p), libc::EEXIST);
    drop(fd);
    r.check("the name stays after close", sys::stat(&p).is_ok(), "present", "gone");

    // through /proc/self/fd, as glibc's and systemd's users do
    if let Some(fd) = r.ok("open O_TMPFILE | O_WRONLY", sys::open(dir, libc::O_TMPFILE | libc::O_WRONLY, 0o600)) {
        r.ok("write", fd.write(b"via proc").map(|_| ()));
        let q = dir.join("tmp-proc");
        r.ok("linkat(/proc/self/fd/N, AT_SYMLINK_FOLLOW)", linkat_proc(&fd, &q));
        drop(fd);
        r.eq("its contents", Some(b"via proc".to_vec()), read_all(&q).ok());
        r.ok("unlink it", sys::unlink(&q));
    }
    // O_EXCL: never linkable
    if let Some(fd) = r.ok("open O_TMPFILE | O_EXCL", tmpfile(dir, libc::O_EXCL)) {
        r.err("linkat of an O_EXCL tmpfile", sys::linkat_empty(&fd, &dir.join("tmp-excl")), libc::ENOENT);
    }
    r.err("O_TMPFILE needs write access", sys::open(dir, libc::O_TMPFILE | libc::O_RDONLY, 0o600), libc::EINVAL);
    r.err("O_TMPFILE on a regular file", sys::open(&p, libc::O_TMPFILE | libc::O_RDWR, 0o600), libc::ENOTDIR);
    let mut after = before;
    after.push(LINKED.to_string());
    after.sort();
    r.eq("the directory holds the linked name only", after, names(dir));

    // an unnamed file's space comes back at close
    let free0 = free_bytes(dir);
    if let Some(fd) = r.ok("another O_TMPFILE file", tmpfile(dir, 0)) {
        r.ok("write 4 MiB into it", fd.pwrite_all(&vec![0x5Au8; 4 * MIB], 0).map_err(|(_, e)| e));
        r.ok("fsync", fd.fsync());
        let used = free0.saturating_sub(free_bytes(dir));
        r.check("its data takes space while open", used >= 4 * MIB as u64, ">= 4 MiB", used);
    }
    let lost = free0.saturating_sub(free_bytes(dir));
    r.check("closed unnamed: its space is free again", lost < 256 * KIB as u64, "< 256 KiB still used", lost);
}

fn fallocate_checks(r: &mut Report, dir: &Path) {
    // default mode: the size grows, the range reads as zeros
    let p = dir.join(FALLOC_SIZE);
    let Some(fd) = r.ok("create", sys::open(&p, libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o644)) else { return };
    let t0 = fd.fstat().map(|s| (s.st_mtime, s.st_mtime_nsec)).ok();
    std::thread::sleep(std::time::Duration::from_millis(20));
    r.ok("fallocate(0, 0, 3 MiB + 5)", fallocate(&fd, 0, 0, FALLOC_SIZE_LEN as i64));
    if let Some(st) = r.ok("fstat", fd.fstat()) {
        r.eq("the size is the range's end", FALLOC_SIZE_LEN as i64, st.st_size);
        r.check("mtime changed", Some((st.st_mtime, st.st_mtime_nsec)) != t0, "a new mtime", "the old one");
    }
    let mut z = vec![0xEEu8; 64 * KIB];
    r.ok("read inside the range", fd.pread_full(&mut z, 2 * MIB as u64));
    r.check("reads zeros", z.iter().all(|&b| b == 0), "zeros", "other bytes");
    let d = pattern(FALLOC_SIZE, 10 * KIB);
    r.ok("write 10 KiB at 1 MiB", fd.pwrite_all(&d, MIB as u64).map_err(|(_, e)| e));
    r.ok("fallocate KEEP_SIZE past EOF", fallocate(&fd, FALLOC_FL_KEEP_SIZE, 4 * MIB as i64, MIB as i64));
    r.ok("fallocate inside the file", fallocate(&fd, 0, 0, 4096));
    r.eq("neither changed the size", Some(FALLOC_SIZE_LEN as i64), fd.fstat().ok().map(|s| s.st_size));
    r.ok("fsync", fd.fsync());
    r.check("contents", read_all(&p).ok() == Some(expected(FALLOC_SIZE)), "zeros and the 10 KiB", "other bytes");

    // the errnos of the VFS and of the unsupported modes
    r.err("len 0", fallocate(&fd, 0, 0, 0), libc::EINVAL);
    r.err("negative offset", fallocate(&fd, 0, -4096, 4096), libc::EINVAL);
    r.err("PUNCH_HOLE without KEEP_SIZE", fallocate(&fd, FALLOC_FL_PUNCH_HOLE, 0, 4096), libc::EOPNOTSUPP);
    r.err("COLLAPSE_RANGE", fallocate(&fd, FALLOC_FL_COLLAPSE_RANGE, 0, 128 * KIB as i64), libc::EOPNOTSUPP);
    r.err("INSERT_RANGE", fallocate(&fd, FALLOC_FL_INSERT_RANGE, 0, 128 * KIB as i64), libc::EOPNOTSUPP);
    r.err("past the largest file size", fallocate(&fd, 0, i64::MAX - 4096, 8192), libc::EFBIG);
    drop(fd);
    if let Some(ro) = r.ok("open read-only", sys::open(&p, libc::O_RDONLY, 0)) {
        r.err("fallocate on a read-only descriptor", fallocate(&ro, 0, 0, 4096), libc::EBADF);
    }
    r.err("fallocate on a directory", sys::open(dir, libc::O_RDONLY | libc::O_DIRECTORY, 0).and_then(|d| fallocate(&d, 0, 0, 4096)), libc::EBADF);

    // PUNCH_HOLE | KEEP_SIZE: zeros inside, the size kept, whole blocks become holes
    let p = dir.join(PUNCHED);
    let data = pattern(PUNCHED, PUNCHED_LEN);
    let Some(fd) = r.ok("create the punched file", sys::open(&p, libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o644)) else { return };
    r.ok("write 200 KiB", fd.pwrite_all(&data, 0).map_err(|(_, e)| e));
    for &(o, l) in PUNCHES {
        r.ok(&format!("punch {o}+{l}"), fallocate(&fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, o as i64, l as i64));
    }
    r.ok("punch past EOF (nothing there)", fallocate(&fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 10 * MIB as i64, 4096));
    r.eq("the size is kept", Some(PUNCHED_LEN as i64), fd.fstat().ok().map(|s| s.st_size));
    r.check("contents before fsync", read_all(&p).ok() == Some(expected(PUNCHED)), "zeros in the holes only", "other bytes");
    r.ok("fsync", fd.fsync());
    r.eq("SEEK_HOLE finds the whole-block hole", Ok(8192), fd.lseek(0, libc::SEEK_HOLE));
    r.eq("SEEK_DATA after it", Ok(24576), fd.lseek(8192, libc::SEEK_DATA));
    drop(fd);
    r.check("contents after the caches were dropped", sys::drop_caches() && read_all(&p).ok() == Some(expected(PUNCHED)), "zeros in the holes only", "other bytes");

    // the space of punched blocks comes back
    let big = dir.join("punch-space");
    if let Some(fd) = r.ok("create an 8 MiB file", sys::open(&big, libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o644)) {
        r.ok("write it", fd.pwrite_all(&vec![0xA5u8; 8 * MIB], 0).map_err(|(_, e)| e));
        r.ok("fsync", fd.fsync());
        let free0 = free_bytes(dir);
        r.ok("punch all of it", fallocate(&fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 8 * MIB as i64));
        let gained = free_bytes(dir).saturating_sub(free0);
        r.check("the space came back", gained >= 7 * MIB as u64, ">= 7 MiB more free", gained);
        let mut b = vec![1u8; 4096];
        r.ok("read the hole", fd.pread_full(&mut b, 5 * MIB as u64));
        r.check("zeros", b.iter().all(|&x| x == 0), "zeros", "other bytes");
    }
    r.ok("remove it", sys::unlink(&big));

    // ZERO_RANGE: zeros; past EOF it extends the file unless KEEP_SIZE
    let p = dir.join("zeroed");
    let mut m = pattern("zeroed", 64 * KIB);
    if let Some(fd) = r.ok("create the zeroed file", sys::open(&p, libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o644)) {
        r.ok("write 64 KiB", fd.pwrite_all(&m, 0).map_err(|(_, e)| e));
        r.ok("ZERO_RANGE 3000+10000", fallocate(&fd, FALLOC_FL_ZERO_RANGE, 3000, 10000));
        m[3000..13000].fill(0);
        r.ok("ZERO_RANGE 60 KiB+10 KiB (past EOF)", fallocate(&fd, FALLOC_FL_ZERO_RANGE, 60 * KIB as i64, 10 * KIB as i64));
        m[60 * KIB..].fill(0);
        m.resize(70 * KIB, 0);
        r.eq("the size grew to its end", Some(70 * KIB as i64), fd.fstat().ok().map(|s| s.st_size));
        r.ok("ZERO_RANGE | KEEP_SIZE past EOF", fallocate(&fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 68 * KIB as i64, 100 * KIB as i64));
        m[68 * KIB..].fill(0);
        r.eq("the size is kept", Some(70 * KIB as i64), fd.fstat().ok().map(|s| s.st_size));
        r.ok("fsync", fd.fsync());
    }
    r.check("contents", sys::drop_caches() && read_all(&p).ok() == Some(m), "zeros in the ranges only", "other bytes");
    r.ok("remove it", sys::unlink(&p));
}

/// The default mode's promise: after fallocate succeeded, writing the range cannot fail with
/// ENOSPC, even when the filesystem filled up meanwhile. Control: a file without it gets ENOSPC.
fn fallocate_enospc(r: &mut Report, dir: &Path) {
    let p = dir.join("held");
    let filler = dir.join("filler");
    let Some(fd) = r.ok("create", sys::open(&p, libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o644)) else { return };
    r.ok("fallocate 2 MiB", fallocate(&fd, 0, 0, 2 * MIB as i64));
    let Some(f) = r.ok("create a filler", sys::open(&filler, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644)) else { return };
    let chunk = vec![0x77u8; 256 * KIB];
    let mut off = 0u64;
    let full = loop {
        match f.pwrite_all(&chunk, off) {
            Ok(()) => off += chunk.len() as u64,
            Err((n, e)) => break (off + n as u64, e),
        }
        if off > 1 << 40 {
            break (off, Errno(0));
        }
    };
    r.eq("the filler ends with ENOSPC", Errno(libc::ENOSPC), full.1);
    r.note(format!("filler: {} KiB written", full.0 / 1024));
    let _ = f.fsync();
    drop(f);
    let ctl = dir.join("control");
    let c = sys::open(&ctl, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644);
    r.err_any("control: a 1 MiB write without fallocate", c.and_then(|c| c.pwrite_all(&vec![1u8; MIB], 0).map_err(|(_, e)| e)), &[libc::ENOSPC]);
    let _ = sys::unlink(&ctl);
    let data = pattern("held", 2 * MIB);
    r.ok("write the whole fallocated range", fd.pwrite_all(&data, 0).map_err(|(_, e)| e));
    r.ok("fsync it", fd.fsync());
    drop(fd);
    r.check("its contents", sys::drop_caches() && read_all(&p).ok() == Some(data), "the written bytes", "other bytes");
    r.ok("remove the filler", sys::unlink(&filler));
    r.ok("remove the file", sys::unlink(&p));
}

fn fiemap_checks(r: &mut Report, dir: &Path) {
    let p = dir.join("mapped");
    let Some(fd) = r.ok("create", sys::open(&p, libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o644)) else { return };
    r.eq("an empty file has no extent", Ok((0, Vec::new())), fiemap(&fd, FIEMAP_FLAG_SYNC, 8));
    // data in blocks 0..4 and 8..10, a hole between, the last block partial
    r.ok("write 16 KiB at 0", fd.pwrite_all(&vec![1u8; 16 * KIB], 0).map_err(|(_, e)| e));
    r.ok("write 6 KiB at 32 KiB", fd.pwrite_all(&vec![2u8; 6 * KIB], 32 * KIB as u64).map_err(|(_, e)| e));
    let u = FIEMAP_EXTENT_UNKNOWN;
    let want = vec![(0, 0, 16 * KIB as u64, u), (32 * KIB as u64, 0, 8 * KIB as u64, u | FIEMAP_EXTENT_LAST)];
    r.eq("FIEMAP_FLAG_SYNC: two extents, the second last", Ok((2, want.clone())), fiemap(&fd, FIEMAP_FLAG_SYNC, 8));
    r.eq("count only (fm_extent_count 0)", Ok((2, Vec::new())), fiemap(&fd, 0, 0));
    r.eq("room for one: the first, not last", Ok((1, want[..1].to_vec())), fiemap(&fd, 0, 1));
    r.err("FIEMAP_FLAG_XATTR is not supported", fiemap(&fd, FIEMAP_FLAG_XATTR, 8), libc::EBADR);
    r.ok("punch block 1", fallocate(&fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 4096));
    let want = vec![(0, 0, 4 * KIB as u64, u), (8 * KIB as u64, 0, 8 * KIB as u64, u), (32 * KIB as u64, 0, 8 * KIB as u64, u | FIEMAP_EXTENT_LAST)];
    r.eq("after a punch: three extents", Ok((3, want.clone())), fiemap(&fd, FIEMAP_FLAG_SYNC, 8));
    // data written and not synced, asked without FIEMAP_FLAG_SYNC: an extent, never a hole
    r.ok("write 4 KiB at 64 KiB (no fsync)", fd.pwrite_all(&vec![3u8; 4 * KIB], 64 * KIB as u64).map_err(|(_, e)| e));
    let mut want = want;
    if let Some(last) = want.last_mut() {
        last.3 = u;
    }
    want.push((64 * KIB as u64, 0, 4 * KIB as u64, u | FIEMAP_EXTENT_LAST));
    r.eq("unsynced data without FIEMAP_FLAG_SYNC: listed as an extent", Ok((4, want)), fiemap(&fd, 0, 8));
    drop(fd);
    r.ok("remove it", sys::unlink(&p));
}

fn odirect_checks(r: &mut Report, dir: &Path) {
    let p = dir.join(DIRECT);
    let Some(fd) = r.ok("open O_DIRECT | O_CREAT", sys::open(&p, libc::O_DIRECT | libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o644)) else { return };
    let data = pattern(DIRECT, DIRECT_LEN);
    let mut b = AlignedBuf::new(64 * KIB);
    let mut ok = true;
    for (k, c) in data.chunks(64 * KIB).enumerate() {
        b.get_mut().copy_from_slice(c);
        ok &= fd.pwrite(b.get_mut(), (k * 64 * KIB) as u64) == Ok(64 * KIB);
    }
    r.check("1 MiB in aligned 64 KiB direct writes", ok, "every write whole", "a short or failed write");
    let mut got = vec![0u8; DIRECT_LEN];
    let mut ok = true;
    for (k, c) in got.chunks_mut(64 * KIB).enumerate() {
        ok &= fd.pread(b.get_mut(), (k * 64 * KIB) as u64) == Ok(64 * KIB);
        c.copy_from_slice(b.get_mut());
    }
    r.check("aligned direct reads", ok, "every read whole", "a short or failed read");
    r.check("direct reads return what direct writes wrote", got == data, "the written bytes", "other bytes");
    r.check("a buffered reader sees them", read_all(&p).ok() == Some(data.clone()), "the written bytes", "other bytes");
    let mut b5 = AlignedBuf::new(512);
    r.ok("a 512-byte direct read at 512", fd.pread(b5.get_mut(), 512).map(|_| ()));
    r.err("misaligned buffer", fd.pwrite(b.misaligned_mut(), 0), libc::EINVAL);
    r.err("misaligned offset", fd.pwrite(b.get_mut(), 100), libc::EINVAL);
    let mut b1000 = AlignedBuf::new(1000);
    r.err("misaligned length", fd.pread(b1000.get_mut(), 0), libc::EINVAL);
    // a buffered write is seen by a direct read (the range is written back first)
    if let Some(w) = r.ok("open buffered", sys::open(&p, libc::O_WRONLY, 0)) {
        r.ok("buffered write of 4 KiB at 128 KiB", w.pwrite_all(&vec![9u8; 4096], 128 * KIB as u64).map_err(|(_, e)| e));
        let mut b4 = AlignedBuf::new(4096);
        r.ok("direct read of it", fd.pread(b4.get_mut(), 128 * KIB as u64).map(|_| ()));
        r.check("sees the buffered bytes", b4.get_mut().iter().all(|&x| x == 9), "9s", "other bytes");
        b4.get_mut().copy_from_slice(&data[128 * KIB..132 * KIB]);
        r.ok("direct write puts the old bytes back", fd.pwrite(b4.get_mut(), 128 * KIB as u64).map(|_| ()));
    }
    r.ok("fsync", fd.fsync());
    r.check("contents", sys::drop_caches() && read_all(&p).ok() == Some(data), "the written bytes", "other bytes");
}

fn verify(r: &mut Report, dir: &Path) {
    r.group("persistence", |r| {
        for name in [LINKED, FALLOC_SIZE, PUNCHED, DIRECT, SYNCFS] {
            let p = dir.join(name);
            match read_all(&p) {
                Ok(got) => {
                    let want = expected(name);
                    r.eq(&format!("{name}: size"), want.len(), got.len());
                    r.check(&format!("{name}: contents"), got == want, "the expected bytes", "other bytes");
                }
                Err(e) => r.fail(&format!("{name}: read"), "present", e),
            }
        }
        if let Ok(st) = sys::stat(dir.join(LINKED)) {
            r.eq("the linked tmpfile has one link", 1, st.st_nlink as u64);
        }
        if let Ok(fd) = sys::open(dir.join(PUNCHED), libc::O_RDONLY, 0) {
            r.eq("the punched hole is a hole", Ok(8192), fd.lseek(0, libc::SEEK_HOLE));
        }
        r.note(format!("{AFTER} (written after the syncfs): {}", if sys::stat(dir.join(AFTER)).is_ok() { "present" } else { "absent" }));
    });
}
