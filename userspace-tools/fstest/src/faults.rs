//! `faults ...`: the checks of the flash-fault suite (tests/vm/ferrofs-faults), where nandsim
//! injects bit-flips, bad blocks, failing erases and programs and unreadable pages.
//!
//! The file set is `DIR/fNNN` (N files of K KiB); generation G of file F is a seekable pattern
//! in which every 512-byte block starts with a 16-byte tag ("FFT", G, seed, F, block index), so
//! `locate` can find on the raw MTD which pages hold which file's data (for choosing a page
//! that nandsim will make unreadable in a second, identical run).
//!
//! - `churn`: R generations; each overwrites every file (fsync'd with `--fsync`), then drops the
//!   caches and verifies every file. A long write/read workload that must see no error at all.
//! - `write`: generation G of every file, no reading (then syncfs, unless each file is fsync'd).
//! - `snapshot SRC DST --blank P,..`: copy MTD SRC page by page onto MTD DST (erased first) while
//!   the filesystem on SRC is still mounted: what a power cut at this moment would leave, with the
//!   pages whose program failed left erased (their content is undefined on real NAND).
//! - `verify`: every file holds generation G; with `--expect-eio F[,F..]` those files must fail
//!   to read with EIO (or EUCLEAN) and every byte they do return must be right; every other file
//!   must read back whole and exact.
//! - `locate`: scan an MTD character device for the tags; print `page P file F` for one page
//!   that holds only file F's data, inside the file.
//! - `mtdpart-add MASTER NAME OFFSET LEN`, `mtdpart-del MASTER MTDNUM`: BLKPG on an MTD master
//!   (a partition that does not end on an erase-block boundary is forced read-only by MTD).
//! - `romount SRC DIR`: SRC is a read-only MTD holding the file set: a read-write mount(2) must
//!   fail with EROFS, a read-only one must work and serve generation G, writes get EROFS, a
//!   remount read-write is refused, and umount works.

use std::path::{Path, PathBuf};

use libc::{O_CREAT, O_RDONLY, O_TRUNC, O_WRONLY};

use crate::pattern;
use crate::report::Report;
use crate::sys::{self, Errno};

/// Bytes per tagged block of file content.
const BLK: u64 = 512;
const TAG: usize = 16;

#[derive(Debug, Clone)]
pub struct Opts {
    pub dir: PathBuf,
    pub seed: u64,
    pub files: u32,
    pub kib: u64,
    pub gen: u32,
    pub rounds: u32,
    pub fsync: bool,
    pub expect_eio: Vec<u32>,
}

fn name(f: u32) -> String {
    format!("f{f:03}")
}

/// The content of file `f`, generation `gen`, at `off` (any offset and length).
fn fill(seed: u64, gen: u32, f: u32, off: u64, buf: &mut [u8]) {
    let key = pattern::key_for(seed ^ (u64::from(gen) << 40), name(f).as_bytes());
    pattern::fill(key, off, buf);
    let mut tag = [0u8; TAG];
    tag[..3].copy_from_slice(b"FFT");
    tag[3] = gen as u8;
    tag[4..8].copy_from_slice(&(seed as u32).to_le_bytes());
    tag[8..12].copy_from_slice(&f.to_le_bytes());
    let end = off + buf.len() as u64;
    let mut b = off / BLK * BLK;
    while b < end {
        tag[12..16].copy_from_slice(&((b / BLK) as u32).to_le_bytes());
        for (i, &t) in tag.iter().enumerate() {
            let p = b + i as u64;
            if p >= off && p < end {
                buf[(p - off) as usize] = t;
            }
        }
        b += BLK;
    }
}

fn size(o: &Opts) -> u64 {
    o.kib * 1024
}

/// Write generation `gen` of file `f` whole (truncating it first). Returns a description of
/// the first error.
fn write_file(o: &Opts, gen: u32, f: u32) -> Result<(), String> {
    let p = o.dir.join(name(f));
    let fd = sys::open(&p, O_WRONLY | O_CREAT | O_TRUNC, 0o644).map_err(|e| format!("open {}: {e}", p.display()))?;
    let total = size(o);
    let mut buf = vec![0u8; 64 << 10];
    let mut off = 0u64;
    while off < total {
        let n = (total - off).min(buf.len() as u64) as usize;
        fill(o.seed, gen, f, off, &mut buf[..n]);
        fd.pwrite_all(&buf[..n], off).map_err(|(d, e)| format!("write {} at {}: {e}", p.display(), off + d as u64))?;
        off += n as u64;
    }
    if o.fsync {
        fd.fsync().map_err(|e| format!("fsync {}: {e}", p.display()))?;
    }
    fd.close().map_err(|e| format!("close {}: {e}", p.display()))
}

/// How reading a file went.
enum ReadOutcome {
    /// Whole and exact.
    Exact,
    /// A read failed with this errno after `good` correct bytes (every byte returned was right).
    Error { errno: Errno, at: u64 },
    /// Wrong content or size: silent corruption.
    Wrong(String),
}

fn read_file(o: &Opts, gen: u32, f: u32) -> ReadOutcome {
    let p = o.dir.join(name(f));
    let fd = match sys::open(&p, O_RDONLY, 0) {
        Ok(fd) => fd,
        Err(e) => return ReadOutcome::Error { errno: e, at: 0 },
    };
    let total = size(o);
    let mut buf = vec![0u8; 64 << 10];
    let mut want = vec![0u8; 64 << 10];
    let mut off = 0u64;
    // page by page so that an unreadable page does not hide the ones after it
    let mut first_err: Option<(Errno, u64)> = None;
    while off < total {
        let n = (total - off).min(4096) as usize;
        match fd.pread_full(&mut buf[..n], off) {
            Ok(got) if got == n => {
                fill(o.seed, gen, f, off, &mut want[..n]);
                if buf[..n] != want[..n] {
                    let i = buf[..n].iter().zip(&want[..n]).position(|(a, b)| a != b).unwrap_or(0);
                    return ReadOutcome::Wrong(format!("{}: wrong byte at offset {}", name(f), off + i as u64));
                }
            }
            Ok(got) => return ReadOutcome::Wrong(format!("{}: short read at {off}: {got} of {n} bytes", name(f))),
            Err(e) => {
                if first_err.is_none() {
                    first_err = Some((e, off));
                }
            }
        }
        off += n as u64;
    }
    let mut one = [0u8; 1];
    match fd.pread(&mut one, total) {
        Ok(0) => {}
        Ok(_) => return ReadOutcome::Wrong(format!("{}: longer than {total} bytes", name(f))),
        Err(e) => {
            if first_err.is_none() {
                first_err = Some((e, total));
            }
        }
    }
    match first_err {
        None => ReadOutcome::Exact,
        Some((errno, at)) => ReadOutcome::Error { errno, at },
    }
}

/// Verify every file against generation `gen`; files in `expect_eio` must report a read error.
fn verify_all(r: &mut Report, o: &Opts, gen: u32, what: &str) {
    let mut exact = 0u32;
    let mut problems: Vec<String> = Vec::new();
    let mut eio_seen: Vec<u32> = Vec::new();
    for f in 0..o.files {
        match read_file(o, gen, f) {
            ReadOutcome::Exact => {
                exact += 1;
                if o.expect_eio.contains(&f) {
                    problems.push(format!("{} read back whole although its page is unreadable", name(f)));
                }
            }
            ReadOutcome::Error { errno, at } => {
                if o.expect_eio.contains(&f) && errno.0 == libc::EIO {
                    eio_seen.push(f);
                    r.note(format!("{}: {errno} at offset {at}, every byte returned was right", name(f)));
                } else {
                    problems.push(format!("{}: {errno} at offset {at}", name(f)));
                }
            }
            ReadOutcome::Wrong(s) => problems.push(s),
        }
    }
    let want_exact = o.files - o.expect_eio.len() as u32;
    r.check(
        &format!("{what}: {} files of generation {gen} read back exactly", want_exact),
        problems.is_empty() && exact == want_exact,
        format!("{want_exact} exact, no wrong byte"),
        format!("{exact} exact; {}", problems.join("; ")),
    );
    if !o.expect_eio.is_empty() {
        r.check(
            &format!("{what}: files on the unreadable page report EIO ({:?})", o.expect_eio),
            eio_seen.len() == o.expect_eio.len(),
            format!("{:?}", o.expect_eio),
            format!("{eio_seen:?}"),
        );
    }
}

pub fn churn(o: &Opts) -> i32 {
    let mut r = Report::new();
    if let Err(e) = std::fs::create_dir_all(&o.dir) {
        r.fail("create the directory", "success", e);
        return r.finish();
    }
    let t0 = std::time::Instant::now();
    for gen in 0..o.rounds {
        let mut errs: Vec<String> = Vec::new();
        for f in 0..o.files {
            if let Err(e) = write_file(o, gen, f) {
                errs.push(e);
            }
        }
        r.check(
            &format!("generation {gen}: {} files of {} KiB written{}", o.files, o.kib, if o.fsync { " and fsync'd" } else { "" }),
            errs.is_empty(),
            "no error",
            errs.join("; "),
        );
        if let Err(e) = sys::syncfs_path(&o.dir) {
            r.fail(&format!("generation {gen}: syncfs"), "success", e);
        }
        let dropped = sys::drop_caches();
        verify_all(&mut r, o, gen, &format!("generation {gen}{}", if dropped { " after drop_caches" } else { "" }));
    }
    r.note(format!(
        "{} generations of {} x {} KiB in {:.1} s",
        o.rounds,
        o.files,
        o.kib,
        t0.elapsed().as_secs_f64()
    ));
    r.finish()
}

/// Write generation `gen` of every file (fsync'd with `--fsync`), then syncfs; no reading.
pub fn write(o: &Opts) -> i32 {
    let mut r = Report::new();
    if let Err(e) = std::fs::create_dir_all(&o.dir) {
        r.fail("create the directory", "success", e);
        return r.finish();
    }
    let errs: Vec<String> = (0..o.files).filter_map(|f| write_file(o, o.gen, f).err()).collect();
    r.check(
        &format!("generation {}: {} files of {} KiB written{}", o.gen, o.files, o.kib, if o.fsync { " and fsync'd" } else { "" }),
        errs.is_empty(),
        "no error",
        errs.join("; "),
    );
    if !o.fsync {
        r.ok("syncfs", sys::syncfs_path(&o.dir));
    }
    r.finish()
}

pub fn verify(o: &Opts, drop: bool) -> i32 {
    let mut r = Report::new();
    let dropped = drop && sys::drop_caches();
    verify_all(&mut r, o, o.gen, &format!("verify{}", if dropped { " after drop_caches" } else { "" }));
    r.finish()
}

/// Scan `dev` (an MTD character device) for the tags of generation `gen`; print one page that
/// holds only one file's data, well inside that file. Exit 0 when found, 1 otherwise.
pub fn locate(dev: &Path, o: &Opts, page_size: u64) -> i32 {
    let data = match std::fs::read(dev) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("locate: read {}: {e}", dev.display());
            return 1;
        }
    };
    // (raw offset, file, block index) of every tag of this seed and generation
    let mut tags: Vec<(u64, u32, u32)> = Vec::new();
    let mut i = 0usize;
    while i + TAG <= data.len() {
        if &data[i..i + 3] == b"FFT"
            && data[i + 3] == o.gen as u8
            && data[i + 4..i + 8] == (o.seed as u32).to_le_bytes()
        {
            let f = u32::from_le_bytes(data[i + 8..i + 12].try_into().unwrap_or([0; 4]));
            let b = u32::from_le_bytes(data[i + 12..i + 16].try_into().unwrap_or([0; 4]));
            if f < o.files {
                tags.push((i as u64, f, b));
                i += BLK as usize;
                continue;
            }
        }
        i += 1;
    }
    let blocks_per_file = (size(o) / BLK) as u32;
    // A tag proves its block when the whole 512 bytes there are that block's expected content.
    let mut want = vec![0u8; BLK as usize];
    let proven: Vec<(u64, u32, u32)> = tags
        .into_iter()
        .filter(|&(raw, f, b)| {
            fill(o.seed, o.gen, f, u64::from(b) * BLK, &mut want);
            data.get(raw as usize..(raw + BLK) as usize) == Some(&want[..])
        })
        .collect();
    // Runs of proven blocks of one file at consecutive raw positions cover [first, last + 512):
    // every aligned page inside such a run holds only that file's data.
    let ps = page_size.max(1);
    let mut best: Option<(u64, u32)> = None;
    let mut start = 0usize;
    while start < proven.len() {
        let mut end = start + 1;
        while end < proven.len()
            && proven[end].1 == proven[start].1
            && proven[end].0 == proven[end - 1].0 + BLK
            && proven[end].2 == proven[end - 1].2 + 1
        {
            end += 1;
        }
        let (lo, f, b0) = proven[start];
        let (hi, _, b1) = proven[end - 1];
        let hi = hi + BLK;
        let page_start = lo.div_ceil(ps) * ps;
        // stay away from the file's first and last blocks
        if page_start + ps <= hi && b0 >= 4 && b1 + 4 <= blocks_per_file {
            let page = page_start / ps;
            if best.is_none() || f == o.files / 2 {
                best = Some((page, f));
                if f == o.files / 2 {
                    break;
                }
            }
        }
        start = end;
    }
    match best {
        Some((page, f)) => {
            println!("page {page} file {f}");
            0
        }
        None => {
            eprintln!("locate: no page holds only one file's data");
            1
        }
    }
}

#[repr(C)]
struct BlkpgPartition {
    start: libc::c_longlong,
    length: libc::c_longlong,
    pno: libc::c_int,
    devname: [u8; 64],
    volname: [u8; 64],
}

#[repr(C)]
struct BlkpgIoctlArg {
    op: libc::c_int,
    flags: libc::c_int,
    datalen: libc::c_int,
    data: *mut libc::c_void,
}

const BLKPG: libc::c_ulong = 0x1269;
const BLKPG_ADD_PARTITION: libc::c_int = 1;
const BLKPG_DEL_PARTITION: libc::c_int = 2;

/// BLKPG on MTD master `dev`: add partition `name` at `start` of `length` bytes, or delete MTD
/// number `pno` (when `name` is None).
pub fn mtdpart(dev: &Path, name: Option<&str>, start: u64, length: u64, pno: i32) -> i32 {
    let fd = match sys::open(dev, O_RDONLY, 0) {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("mtdpart: open {}: {e}", dev.display());
            return 1;
        }
    };
    let mut p = BlkpgPartition { start: start as i64, length: length as i64, pno, devname: [0; 64], volname: [0; 64] };
    if let Some(n) = name {
        let b = n.as_bytes();
        let k = b.len().min(63);
        p.devname[..k].copy_from_slice(&b[..k]);
    }
    let mut a = BlkpgIoctlArg {
        op: if name.is_some() { BLKPG_ADD_PARTITION } else { BLKPG_DEL_PARTITION },
        flags: 0,
        datalen: std::mem::size_of::<BlkpgPartition>() as libc::c_int,
        data: (&mut p as *mut BlkpgPartition).cast(),
    };
    // SAFETY: BLKPG takes a pointer to a blkpg_ioctl_arg whose data points at a
    // blkpg_partition; both live until the call returns.
    let rc = unsafe { libc::ioctl(fd.raw(), BLKPG as _, &mut a as *mut BlkpgIoctlArg) };
    if rc != 0 {
        eprintln!("mtdpart: BLKPG on {}: {}", dev.display(), Errno::last());
        return 1;
    }
    0
}

fn mount(src: &str, dir: &Path, flags: libc::c_ulong) -> sys::R<()> {
    let s = sys::cpath(src)?;
    let d = sys::cpath(dir)?;
    let t = sys::cpath("ferrofs")?;
    // SAFETY: all strings are NUL-terminated and live across the call; no data argument.
    let rc = unsafe { libc::mount(s.as_ptr(), d.as_ptr(), t.as_ptr(), flags, std::ptr::null()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

fn umount(dir: &Path) -> sys::R<()> {
    let d = sys::cpath(dir)?;
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::umount(d.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

pub fn romount(src: &str, mnt: &Path, o: &Opts) -> i32 {
    let mut r = Report::new();
    let rw = mount(src, mnt, 0);
    if rw.is_ok() {
        let _ = umount(mnt);
    }
    r.err(&format!("read-write mount of read-only {src} is refused"), rw, libc::EROFS);
    if r.ok(&format!("read-only mount of {src}"), mount(src, mnt, libc::MS_RDONLY)).is_none() {
        return r.finish();
    }
    let o2 = Opts { dir: mnt.join(o.dir.file_name().unwrap_or_default()), ..o.clone() };
    let dropped = sys::drop_caches();
    verify_all(&mut r, &o2, o.gen, &format!("read-only mount{}", if dropped { " after drop_caches" } else { "" }));
    r.err(
        "creating a file on the read-only mount fails with EROFS",
        sys::open(o2.dir.join("new"), O_WRONLY | O_CREAT, 0o644).map(|_| ()),
        libc::EROFS,
    );
    let rw = mount(src, mnt, libc::MS_REMOUNT);
    if rw.is_ok() {
        let _ = mount(src, mnt, libc::MS_REMOUNT | libc::MS_RDONLY);
    }
    r.err_any("remount read-write is refused", rw, &[libc::EROFS, libc::EINVAL]);
    r.ok("umount of the read-only mount", umount(mnt));
    r.finish()
}

/// Copy MTD `src` onto MTD `dst` (same size), leaving the pages in `blank` (and every erased
/// page) unwritten. Prints what it copied; exit 0 on success.
pub fn snapshot(src: &Path, dst: &Path, blank: &[u32]) -> i32 {
    let run = || -> Result<String, String> {
        let s = sys::open(src, O_RDONLY, 0).map_err(|e| format!("open {}: {e}", src.display()))?;
        let d = sys::open(dst, libc::O_RDWR, 0).map_err(|e| format!("open {}: {e}", dst.display()))?;
        let si = sys::mtd_info(&s).map_err(|e| format!("MEMGETINFO: {e}"))?;
        let di = sys::mtd_info(&d).map_err(|e| format!("MEMGETINFO: {e}"))?;
        if si.size != di.size || si.erasesize != di.erasesize || si.writesize != di.writesize || si.writesize == 0 {
            return Err(format!("geometries differ: {} / {} bytes, {} / {} erase", si.size, di.size, si.erasesize, di.erasesize));
        }
        let mut b = 0u32;
        while b < di.size {
            sys::mtd_erase(&d, b, di.erasesize).map_err(|e| format!("MEMERASE at {b}: {e}"))?;
            b += di.erasesize;
        }
        let ps = si.writesize as usize;
        let mut page = vec![0u8; ps];
        let (mut copied, mut blanked) = (0u32, 0u32);
        for p in 0..si.size / si.writesize {
            let off = u64::from(p) * ps as u64;
            let n = s.pread_full(&mut page, off).map_err(|e| format!("read page {p}: {e}"))?;
            if n != ps {
                return Err(format!("short read of page {p}"));
            }
            if page.iter().all(|&x| x == 0xFF) {
                continue;
            }
            if blank.contains(&p) {
                blanked += 1;
                continue;
            }
            d.pwrite_all(&page, off).map_err(|(_, e)| format!("write page {p}: {e}"))?;
            copied += 1;
        }
        Ok(format!("{copied} pages copied, {blanked} failed pages left erased"))
    };
    match run() {
        Ok(m) => {
            println!("snapshot: {m}");
            0
        }
        Err(e) => {
            eprintln!("snapshot: {e}");
            1
        }
    }
}
