//! `fsx DIR`: an fsx-style randomized file checker. Every process owns one file and an in-memory
//! model of it, runs a seeded random sequence of reads, writes, appends, truncates down and up,
//! holes (writes past EOF, punched holes where the filesystem has them), mapped reads and writes
//! (MAP_SHARED + msync), fsync/fdatasync, close/reopen and page-cache drops, and after every
//! operation reads back what it touched and compares with the model (the whole file at every
//! reopen, every [`FULL_EVERY`] operations and at the end). At fixed points all processes meet at
//! a barrier, close their files, and the parent unmounts and mounts the filesystem again
//! (`--remount SRC:FSTYPE`, through umount2(2)/mount(2)) or drops the page cache; then every
//! process checks its whole file.
//!
//! A mismatch prints, like fsx, the offsets and good/bad bytes, which operation wrote the good
//! byte, which one the bad byte looks like, and the tail of the operation log. The run is a pure
//! function of `--seed`: process `i` uses [`proc_seed`]`(seed, i)`.
//!
//! The group `fsx` of `posix` runs [`run_one`] in-process with a fixed seed.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};

use crate::pattern::{self, Rng};
use crate::report::Report;
use crate::sys::{self, Errno, Fd, Mmap, R};

/// Whole-file comparison every this many operations (besides reopen, barriers and the end).
pub const FULL_EVERY: u64 = 100;
const LOG_KEEP: usize = 48;
const PAGE: u64 = 4096;

#[derive(Debug, Clone)]
pub struct Opts {
    pub dir: PathBuf,
    /// Total operations over all processes.
    pub ops: u64,
    pub procs: u32,
    pub seed: u64,
    /// `(source, fstype)`: unmount and mount at every barrier instead of dropping caches.
    pub remount: Option<(String, String)>,
    /// Operations per process between barriers (0 = no barriers).
    pub barrier_every: u64,
    /// Largest file size the operations aim at.
    pub max_len: u64,
    /// Self-test: at this operation of process 0, write a byte behind the model's back.
    pub inject: Option<u64>,
    /// Drop the page cache (root only) at barriers without --remount and as a random operation.
    pub drop_caches: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            dir: PathBuf::new(),
            ops: 10_000,
            procs: 1,
            seed: 1,
            remount: None,
            barrier_every: 2000,
            max_len: 256 * 1024,
            inject: None,
            drop_caches: false,
        }
    }
}

/// The seed of process `i`.
pub fn proc_seed(seed: u64, i: u32) -> u64 {
    pattern::mix64(seed ^ pattern::mix64(0xF5F5_0000 + u64::from(i)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
    Append,
    TruncDown,
    TruncUp,
    Hole,
    Punch,
    MapRead,
    MapWrite,
    Fsync,
    Fdatasync,
    Reopen,
    DropCaches,
}

pub const KINDS: [Kind; 13] = [
    Kind::Read,
    Kind::Write,
    Kind::Append,
    Kind::TruncDown,
    Kind::TruncUp,
    Kind::Hole,
    Kind::Punch,
    Kind::MapRead,
    Kind::MapWrite,
    Kind::Fsync,
    Kind::Fdatasync,
    Kind::Reopen,
    Kind::DropCaches,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Append => "append",
            Kind::TruncDown => "truncdown",
            Kind::TruncUp => "truncup",
            Kind::Hole => "hole",
            Kind::Punch => "punch",
            Kind::MapRead => "mapread",
            Kind::MapWrite => "mapwrite",
            Kind::Fsync => "fsync",
            Kind::Fdatasync => "fdatasync",
            Kind::Reopen => "reopen",
            Kind::DropCaches => "dropcaches",
        }
    }
    fn index(self) -> usize {
        KINDS.iter().position(|&k| k == self).unwrap_or(0)
    }
    /// Weight out of 1000.
    fn weight(self) -> u64 {
        match self {
            Kind::Read => 200,
            Kind::Write => 200,
            Kind::Append => 80,
            Kind::TruncDown => 60,
            Kind::TruncUp => 50,
            Kind::Hole => 40,
            Kind::Punch => 30,
            Kind::MapRead => 110,
            Kind::MapWrite => 110,
            Kind::Fsync => 40,
            Kind::Fdatasync => 30,
            Kind::Reopen => 40,
            Kind::DropCaches => 10,
        }
    }
}

/// The expected content of one file, with the operation that last wrote each byte
/// (0 = a hole or zero fill).
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub data: Vec<u8>,
    pub who: Vec<u32>,
}

impl Model {
    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    pub fn write(&mut self, off: u64, bytes: &[u8], op: u64) {
        let (off, end) = (off as usize, off as usize + bytes.len());
        if self.data.len() < end {
            self.data.resize(end, 0);
            self.who.resize(end, 0);
        }
        self.data[off..end].copy_from_slice(bytes);
        self.who[off..end].fill(op as u32 + 1);
    }
    pub fn truncate(&mut self, len: u64) {
        self.data.resize(len as usize, 0);
        self.who.resize(len as usize, 0);
    }
    /// Zeroes `[off, off+len)` within the current size.
    pub fn zero(&mut self, off: u64, len: u64) {
        let a = (off as usize).min(self.data.len());
        let b = ((off + len) as usize).min(self.data.len());
        self.data[a..b].fill(0);
        self.who[a..b].fill(0);
    }
}

/// One logged operation.
#[derive(Debug, Clone)]
struct LogEntry {
    op: u64,
    kind: Kind,
    off: u64,
    len: u64,
    /// File size after the operation (model).
    size: u64,
}

impl std::fmt::Display for LogEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Kind::Read
            | Kind::Write
            | Kind::Append
            | Kind::Hole
            | Kind::Punch
            | Kind::MapRead
            | Kind::MapWrite => write!(
                f,
                "{:6} {:10} 0x{:06x} thru 0x{:06x} (0x{:x} bytes) size 0x{:x}",
                self.op,
                self.kind.name(),
                self.off,
                (self.off + self.len).saturating_sub(1),
                self.len,
                self.size
            ),
            Kind::TruncDown | Kind::TruncUp => write!(
                f,
                "{:6} {:10} to 0x{:x}",
                self.op,
                self.kind.name(),
                self.size
            ),
            _ => write!(
                f,
                "{:6} {:10} size 0x{:x}",
                self.op,
                self.kind.name(),
                self.size
            ),
        }
    }
}

/// Result of one process's run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    pub ops: u64,
    pub mismatches: u64,
    pub errors: u64,
    pub counts: [u64; 13],
    /// First problem, one line.
    pub problem: Option<String>,
    /// Page-cache drops that really happened (root only).
    pub dropped: u64,
    pub punch_supported: bool,
}

/// What a barrier does between the operations of a run.
pub trait Barrier {
    /// Called with every file closed; returns false to stop the run (the remount failed).
    fn wait(&mut self) -> bool;
}

/// In-process barrier: drops the page cache when asked to (root only), else only the close and
/// reopen around it happen.
pub struct LocalBarrier {
    pub drop_caches: bool,
}

impl Barrier for LocalBarrier {
    fn wait(&mut self) -> bool {
        if self.drop_caches {
            sys::drop_caches();
        }
        true
    }
}

/// Unmounts `dir` (retrying while busy) and mounts `src` of `fstype` on it again.
pub fn remount(src: &str, fstype: &str, dir: &Path) -> Result<(), String> {
    let d = sys::cpath(dir).map_err(|e| format!("path: {e}"))?;
    let mut tries = 0;
    loop {
        // SAFETY: `d` is NUL-terminated.
        if unsafe { libc::umount2(d.as_ptr(), 0) } == 0 {
            break;
        }
        let e = Errno::last();
        tries += 1;
        if e.0 != libc::EBUSY || tries > 50 {
            return Err(format!("umount2 {}: {e}", dir.display()));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Unmounting evicted every inode and page of the filesystem: what follows comes from the medium.
    let s = sys::cpath(src).map_err(|e| format!("path: {e}"))?;
    let t = sys::cpath(fstype).map_err(|e| format!("path: {e}"))?;
    // SAFETY: all strings are NUL-terminated; no mount data.
    let rc = unsafe { libc::mount(s.as_ptr(), d.as_ptr(), t.as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        return Err(format!(
            "mount -t {fstype} {src} {}: {}",
            dir.display(),
            Errno::last()
        ));
    }
    Ok(())
}

struct Runner<'a> {
    id: u32,
    seed: u64,
    path: PathBuf,
    fd: Option<Fd>,
    afd: Option<Fd>,
    m: Model,
    rng: Rng,
    log: std::collections::VecDeque<LogEntry>,
    out: Outcome,
    max_len: u64,
    inject: Option<u64>,
    drop_caches: bool,
    buf: Vec<u8>,
    progress: Option<&'a std::sync::atomic::AtomicU64>,
}

fn note(id: u32, msg: impl std::fmt::Display) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "# fsx[{id}] {msg}");
    let _ = o.flush();
}

impl Runner<'_> {
    fn fd(&self) -> &Fd {
        // Reopened before every operation that needs it; a missing descriptor is a bug here.
        self.fd.as_ref().expect("file open")
    }

    fn open(&mut self) -> R<()> {
        self.fd = Some(sys::open(&self.path, libc::O_RDWR | libc::O_CREAT, 0o644)?);
        self.afd = Some(sys::open(&self.path, libc::O_WRONLY | libc::O_APPEND, 0)?);
        Ok(())
    }

    fn close(&mut self) -> R<()> {
        if let Some(a) = self.afd.take() {
            a.close()?;
        }
        if let Some(f) = self.fd.take() {
            f.close()?;
        }
        Ok(())
    }

    fn data(&self, op: u64, off: u64, len: u64) -> Vec<u8> {
        let mut v = vec![0u8; len as usize];
        pattern::fill(pattern::key_for(self.seed, &op.to_le_bytes()), off, &mut v);
        v
    }

    /// An operation failed with an errno: an error, the run stops.
    fn error(&mut self, op: u64, what: &str, e: impl std::fmt::Display) -> bool {
        self.out.errors += 1;
        let msg = format!("op {op} {what}: {e}");
        note(self.id, format!("ERROR {msg}"));
        self.dump_log();
        self.out.problem.get_or_insert(msg);
        false
    }

    fn dump_log(&self) {
        note(
            self.id,
            format!(
                "seed {:#x} file {}: LOG of the last {} operations:",
                self.seed,
                self.path.display(),
                self.log.len()
            ),
        );
        for e in &self.log {
            note(self.id, format!("  {e}"));
        }
    }

    /// What the bytes at `off` look like: zeros, or the data of a logged write.
    fn whose(&self, off: u64, got: &[u8]) -> String {
        let n = got.len().min(8);
        if n == 0 {
            return "nothing".into();
        }
        if got[..n].iter().all(|&b| b == 0) {
            return "zeros".into();
        }
        for e in self.log.iter().rev() {
            if matches!(
                e.kind,
                Kind::Write | Kind::Append | Kind::Hole | Kind::MapWrite
            ) && off >= e.off
                && off < e.off + e.len
            {
                let d = self.data(e.op, off, n as u64);
                if d[..] == got[..n] {
                    return format!("data of op {}", e.op);
                }
            }
        }
        "unknown data".into()
    }

    /// Compares `got` (read at `off`) with the model; on a difference prints the report.
    fn compare(&mut self, op: u64, how: &str, off: u64, got: &[u8]) -> bool {
        let exp_start = off.min(self.m.len());
        let exp_end = self.m.len().min(off + got.len() as u64).max(exp_start);
        let exp = &self.m.data[exp_start as usize..exp_end as usize];
        if exp == got {
            return true;
        }
        self.out.mismatches += 1;
        let mut msg = format!(
            "op {op}: {how} 0x{off:x}+0x{:x}: content differs from the model",
            got.len()
        );
        if exp.len() != got.len() {
            msg = format!(
                "op {op}: {how} 0x{off:x}: {} bytes read, model has {}",
                got.len(),
                exp.len()
            );
        }
        note(self.id, format!("MISMATCH {msg}"));
        note(
            self.id,
            format!(
                "file size 0x{:x}, model size 0x{:x}",
                self.fd
                    .as_ref()
                    .and_then(|f| f.fstat().ok())
                    .map(|s| s.st_size)
                    .unwrap_or(-1),
                self.m.len()
            ),
        );
        let bad: Vec<usize> = (0..exp.len().min(got.len()))
            .filter(|&i| exp[i] != got[i])
            .collect();
        if let (Some(&first), Some(&last)) = (bad.first(), bad.last()) {
            note(
                self.id,
                format!(
                    "{} bad bytes in 0x{:x} thru 0x{:x}",
                    bad.len(),
                    off + first as u64,
                    off + last as u64
                ),
            );
            note(self.id, "OFFSET      GOOD  BAD   GOOD WRITTEN BY");
            for &i in bad.iter().take(16) {
                let w = self.m.who[off as usize + i];
                note(
                    self.id,
                    format!(
                        "0x{:08x}  0x{:02x}  0x{:02x}  {}",
                        off + i as u64,
                        exp[i],
                        got[i],
                        if w == 0 {
                            "hole/zero fill".to_string()
                        } else {
                            format!("op {}", w - 1)
                        }
                    ),
                );
            }
            let bo = off + first as u64;
            note(
                self.id,
                format!(
                    "bad bytes at 0x{bo:x} look like {}",
                    self.whose(bo, &got[first..])
                ),
            );
        }
        self.dump_log();
        self.out.problem.get_or_insert(msg);
        false
    }

    /// Reads `[off, off+len)` and compares; also checks the size.
    fn check_range(&mut self, op: u64, how: &str, off: u64, len: u64) -> bool {
        let size = match self.fd().fstat() {
            Ok(s) => s.st_size as u64,
            Err(e) => return self.error(op, "fstat", e),
        };
        if size != self.m.len() {
            self.out.mismatches += 1;
            let msg = format!(
                "op {op}: after {how}: file size 0x{size:x}, model size 0x{:x}",
                self.m.len()
            );
            note(self.id, format!("MISMATCH {msg}"));
            self.dump_log();
            self.out.problem.get_or_insert(msg);
            return false;
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(len as usize, 0);
        let r = self.fd().pread_full(&mut buf, off);
        let ok = match r {
            Ok(n) => self.compare(op, how, off, &buf[..n]),
            Err(e) => self.error(op, "pread", e),
        };
        self.buf = buf;
        ok
    }

    /// The touched range with a page of margin on each side.
    fn check_around(&mut self, op: u64, how: &str, off: u64, len: u64) -> bool {
        let a = off.saturating_sub(PAGE);
        let b = (off + len + PAGE).min(self.m.len().max(off + len));
        self.check_range(op, how, a, b - a)
    }

    fn check_full(&mut self, op: u64, how: &str) -> bool {
        let n = self.m.len() + PAGE;
        self.check_range(op, how, 0, n)
    }

    fn log(&mut self, op: u64, kind: Kind, off: u64, len: u64) {
        if self.log.len() == LOG_KEEP {
            self.log.pop_front();
        }
        let size = self.m.len();
        self.log.push_back(LogEntry {
            op,
            kind,
            off,
            len,
            size,
        });
    }

    fn pick(&mut self) -> Kind {
        let total: u64 = KINDS.iter().map(|k| k.weight()).sum();
        let mut x = self.rng.below(total);
        for k in KINDS {
            if x < k.weight() {
                return k;
            }
            x -= k.weight();
        }
        Kind::Read
    }

    fn rand_len(&mut self) -> u64 {
        // Mostly small, sometimes up to a quarter of the file size limit; odd sizes and offsets.
        match self.rng.below(10) {
            0..=5 => self.rng.range(1, 4096),
            6..=8 => self.rng.range(1, 32 * 1024),
            _ => self.rng.range(1, (self.max_len / 4).max(2)),
        }
    }

    /// One operation; false stops the run.
    fn step(&mut self, op: u64) -> bool {
        let kind = self.pick();
        self.out.counts[kind.index()] += 1;
        let size = self.m.len();
        let ok = match kind {
            Kind::Read => {
                let off = self.rng.below(size + 1024);
                let len = self.rand_len();
                self.log(op, kind, off, len);
                self.check_range(op, "read", off, len)
            }
            Kind::Write | Kind::Hole => {
                let (off, len) = if kind == Kind::Write {
                    let len = self.rand_len();
                    (self.rng.below(self.max_len.saturating_sub(len).max(1)), len)
                } else {
                    // A write well past EOF leaves a hole between the old EOF and it.
                    let len = self.rng.range(1, 8192);
                    let start = size + self.rng.range(1, 64 * 1024);
                    (start.min(self.max_len + 64 * 1024), len)
                };
                let d = self.data(op, off, len);
                self.m.write(off, &d, op);
                self.log(op, kind, off, len);
                if let Err((_, e)) = self.fd().pwrite_all(&d, off) {
                    return self.error(op, "pwrite", e);
                }
                self.check_around(op, kind.name(), off, len)
            }
            Kind::Append => {
                let len = self.rand_len().min(16 * 1024);
                if size + len > self.max_len + 64 * 1024 {
                    // Keep the file bounded: an append would exceed the limit.
                    self.log(op, kind, size, 0);
                    return self.check_range(op, "append (skipped)", size.saturating_sub(16), 32);
                }
                let d = self.data(op, size, len);
                self.m.write(size, &d, op);
                self.log(op, kind, size, len);
                let afd = self.afd.as_ref().expect("append fd open");
                let mut done = 0usize;
                while done < d.len() {
                    match afd.write(&d[done..]) {
                        Ok(0) => return self.error(op, "append write", "wrote 0 bytes"),
                        Ok(n) => done += n,
                        Err(Errno(libc::EINTR)) => {}
                        Err(e) => return self.error(op, "append write", e),
                    }
                }
                self.check_around(op, "append", size, len)
            }
            Kind::TruncDown | Kind::TruncUp => {
                let len = if kind == Kind::TruncDown {
                    self.rng.below(size + 1)
                } else {
                    // Up, but keep the file bounded (at the bound it stays the same size).
                    (size + self.rng.range(1, (self.max_len / 2).max(2)))
                        .min(self.max_len + 64 * 1024)
                        .max(size)
                };
                self.m.truncate(len);
                self.log(op, kind, len, 0);
                if let Err(e) = self.fd().ftruncate(len) {
                    return self.error(op, "ftruncate", e);
                }
                let lo = size.min(len);
                self.check_around(op, kind.name(), lo, len.max(size) - lo)
            }
            Kind::Punch => {
                if !self.out.punch_supported {
                    self.log(op, kind, 0, 0);
                    return true;
                }
                let off = self.rng.below(size + 1);
                let len = self.rand_len();
                self.log(op, kind, off, len);
                // SAFETY: plain syscall on an open descriptor.
                let rc = unsafe {
                    libc::fallocate(
                        self.fd().raw(),
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        off as libc::off_t,
                        len as libc::off_t,
                    )
                };
                if rc != 0 {
                    return self.error(op, "fallocate punch", Errno::last());
                }
                self.m.zero(off, len);
                self.check_around(op, "punch", off, len)
            }
            Kind::MapRead => {
                if size == 0 {
                    self.log(op, kind, 0, 0);
                    return true;
                }
                let off = self.rng.below(size);
                let len = self.rand_len().min(size - off);
                self.log(op, kind, off, len);
                let map = match Mmap::new(self.fd(), (off + len) as usize, false, true) {
                    Ok(m) => m,
                    Err(e) => return self.error(op, "mmap", e),
                };
                let got = map.as_slice()[off as usize..].to_vec();
                drop(map);
                self.compare(op, "mapread", off, &got)
            }
            Kind::MapWrite => {
                let len = self.rand_len();
                let off = self.rng.below(self.max_len.saturating_sub(len).max(1));
                let end = off + len;
                if end > size {
                    // As fsx does: extend the file first; a mapping cannot grow it.
                    self.m.truncate(end);
                    if let Err(e) = self.fd().ftruncate(end) {
                        self.log(op, kind, off, len);
                        return self.error(op, "ftruncate before mapwrite", e);
                    }
                }
                let d = self.data(op, off, len);
                self.m.write(off, &d, op);
                self.log(op, kind, off, len);
                let mut map = match Mmap::new(self.fd(), end as usize, true, true) {
                    Ok(m) => m,
                    Err(e) => return self.error(op, "mmap", e),
                };
                map.write_at(off as usize, &d);
                let r = map.msync();
                drop(map);
                if let Err(e) = r {
                    return self.error(op, "msync", e);
                }
                self.check_around(op, "mapwrite", off, len)
            }
            Kind::Fsync | Kind::Fdatasync => {
                self.log(op, kind, 0, 0);
                let r = if kind == Kind::Fsync {
                    self.fd().fsync()
                } else {
                    self.fd().fdatasync()
                };
                match r {
                    Ok(()) => true,
                    Err(e) => self.error(op, kind.name(), e),
                }
            }
            Kind::Reopen => {
                self.log(op, kind, 0, 0);
                if let Err(e) = self.close() {
                    return self.error(op, "close", e);
                }
                if let Err(e) = self.open() {
                    return self.error(op, "reopen", e);
                }
                self.check_full(op, "read after reopen")
            }
            Kind::DropCaches => {
                self.log(op, kind, 0, 0);
                if !self.drop_caches {
                    return true;
                }
                if sys::drop_caches() {
                    self.out.dropped += 1;
                }
                self.check_full(op, "read after dropping caches")
            }
        };
        if !ok {
            return false;
        }
        if self.inject == Some(op) {
            // Self-test: one byte of the file changes behind the model's back.
            let at = self.m.len() / 2;
            let b = self.m.data.get(at as usize).copied().unwrap_or(0) ^ 0x5a;
            note(
                self.id,
                format!("self-test: op {op}: corrupting byte 0x{at:x}"),
            );
            if let Err((_, e)) = self.fd().pwrite_all(&[b], at) {
                return self.error(op, "inject pwrite", e);
            }
        }
        if op % FULL_EVERY == FULL_EVERY - 1 {
            return self.check_full(op, "full read");
        }
        true
    }
}

/// One process's run: its file, seed and share of the operations.
#[derive(Debug, Clone)]
pub struct One {
    pub id: u32,
    pub path: PathBuf,
    pub seed: u64,
    pub ops: u64,
    /// Operations between barriers (0 = none).
    pub barrier_every: u64,
    pub max_len: u64,
    pub inject: Option<u64>,
    pub drop_caches: bool,
}

/// Runs one process's operations, calling `barrier` (with the file closed) every
/// `barrier_every` operations. The file is removed at the end when everything matched.
pub fn run_one(
    c: &One,
    barrier: &mut dyn Barrier,
    progress: Option<&std::sync::atomic::AtomicU64>,
) -> Outcome {
    let (path, ops, barrier_every) = (c.path.as_path(), c.ops, c.barrier_every);
    let mut r = Runner {
        id: c.id,
        seed: c.seed,
        path: path.to_path_buf(),
        fd: None,
        afd: None,
        m: Model::default(),
        rng: Rng::new(c.seed),
        log: std::collections::VecDeque::with_capacity(LOG_KEEP),
        out: Outcome::default(),
        max_len: c.max_len.max(PAGE),
        inject: c.inject,
        drop_caches: c.drop_caches,
        buf: Vec::new(),
        progress,
    };
    let _ = sys::unlink(path);
    if let Err(e) = r.open() {
        r.error(0, "create", e);
        return r.out;
    }
    // Punched holes only where the filesystem has them (EOPNOTSUPP: the op is a no-op).
    // SAFETY: plain syscall on an open descriptor.
    let rc = unsafe {
        libc::fallocate(
            r.fd().raw(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            4096,
        )
    };
    r.out.punch_supported = rc == 0;
    let mut clean = true;
    for op in 0..ops {
        if let Some(p) = r.progress {
            p.store(op, std::sync::atomic::Ordering::Relaxed);
        }
        if barrier_every > 0 && op > 0 && op % barrier_every == 0 {
            r.log(op, Kind::Reopen, 0, 0);
            if let Err(e) = r.close() {
                r.error(op, "close before barrier", e);
                clean = false;
                break;
            }
            if !barrier.wait() {
                r.error(op, "barrier", "remount failed (see the parent's report)");
                clean = false;
                break;
            }
            if let Err(e) = r.open() {
                r.error(op, "open after barrier", e);
                clean = false;
                break;
            }
            if !r.check_full(op, "read after remount/drop") {
                clean = false;
                break;
            }
        }
        r.out.ops = op + 1;
        if !r.step(op) {
            clean = false;
            break;
        }
    }
    if clean {
        let op = r.out.ops;
        match r.close().and_then(|_| r.open()) {
            Ok(()) => {
                clean = r.check_full(op, "final read after reopen");
            }
            Err(e) => {
                r.error(op, "final reopen", e);
                clean = false;
            }
        }
    }
    let _ = r.close();
    if clean {
        let _ = sys::unlink(path);
    }
    r.out
}

/// Barrier of a forked child: tells the parent, waits for its answer.
struct PipeBarrier {
    to_parent: Fd,
    from_parent: Fd,
}

impl Barrier for PipeBarrier {
    fn wait(&mut self) -> bool {
        if self.to_parent.write(b"B\n").is_err() {
            return false;
        }
        let mut b = [0u8; 1];
        matches!(self.from_parent.read(&mut b), Ok(1) if b[0] == b'G')
    }
}

fn pipe() -> R<(Fd, Fd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is an array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Errno::last());
    }
    Ok((Fd(fds[0]), Fd(fds[1])))
}

fn encode(o: &Outcome) -> String {
    let counts: Vec<String> = o.counts.iter().map(|c| c.to_string()).collect();
    format!(
        "D {} {} {} {} {} {} {}\n",
        o.ops,
        o.mismatches,
        o.errors,
        o.dropped,
        u8::from(o.punch_supported),
        counts.join(","),
        o.problem.as_deref().unwrap_or("").replace('\n', " ")
    )
}

fn decode(line: &str) -> Option<Outcome> {
    let mut it = line.trim_end_matches('\n').splitn(8, ' ');
    if it.next()? != "D" {
        return None;
    }
    let mut o = Outcome {
        ops: it.next()?.parse().ok()?,
        mismatches: it.next()?.parse().ok()?,
        errors: it.next()?.parse().ok()?,
        dropped: it.next()?.parse().ok()?,
        punch_supported: it.next()? == "1",
        ..Outcome::default()
    };
    for (i, c) in it.next()?.split(',').enumerate() {
        *o.counts.get_mut(i)? = c.parse().ok()?;
    }
    let p = it.next().unwrap_or("");
    if !p.is_empty() {
        o.problem = Some(p.to_string());
    }
    Some(o)
}

struct Child {
    pid: libc::pid_t,
    lines: BufReader<std::fs::File>,
    go: Fd,
    done: Option<Outcome>,
    alive: bool,
}

/// Shared counters (one per process) the children update with their current operation, so that
/// the parent can name the operation a killed child was in.
struct Progress {
    ptr: *mut std::sync::atomic::AtomicU64,
    n: usize,
}

impl Progress {
    fn new(n: usize) -> Option<Progress> {
        let len = n.max(1) * 8;
        // SAFETY: a fresh anonymous shared mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Progress { ptr: p.cast(), n })
    }
    fn get(&self, i: usize) -> Option<&std::sync::atomic::AtomicU64> {
        // SAFETY: the mapping holds `n` zero-initialised u64 slots, valid as AtomicU64, and lives
        // as long as `self`; shared between processes, accessed only atomically.
        (i < self.n).then(|| unsafe { &*self.ptr.add(i) })
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.ptr.cast(), self.n.max(1) * 8) };
    }
}

fn signame(s: i32) -> String {
    match s {
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGKILL => "SIGKILL".into(),
        _ => format!("signal {s}"),
    }
}

/// `ferrofs-fstest fsx`: forks `procs` processes, each on its own file, sums their results.
pub fn run(o: &Opts) -> i32 {
    let mut r = Report::new();
    let procs = o.procs.max(1);
    let per = o.ops / u64::from(procs);
    let extra = o.ops % u64::from(procs);
    let ops_of = |i: u32| per + u64::from(u64::from(i) < extra);
    let mode = match &o.remount {
        Some((s, t)) => format!("close, umount+mount {s} ({t}), reopen"),
        None if o.drop_caches => "close, drop caches, reopen".into(),
        None => "close and reopen".into(),
    };
    r.note(format!(
        "fsx: seed {} ({:#x}), {} operations over {} processes, files up to {} bytes, every {} operations per process: {}",
        o.seed, o.seed, o.ops, procs, o.max_len, o.barrier_every, mode
    ));
    r.note(format!(
        "replay: ferrofs-fstest fsx {} --ops {} --procs {} --seed {} --max-len {} --barrier-every {}{}{}",
        o.dir.display(),
        o.ops,
        procs,
        o.seed,
        o.max_len,
        o.barrier_every,
        o.remount
            .as_ref()
            .map(|(s, t)| format!(" --remount {s}:{t}"))
            .unwrap_or_default(),
        if o.drop_caches { " --drop-caches" } else { "" }
    ));
    let work = o.dir.join("fsx-work");
    let _ = sys::mkdir(&work, 0o755);
    let progress = Progress::new(procs as usize);
    let _ = std::io::stdout().flush();
    let mut children: Vec<Child> = Vec::new();
    for i in 0..procs {
        let (Ok((up_r, up_w)), Ok((go_r, go_w))) = (pipe(), pipe()) else {
            r.fail("create pipes", "success", Errno::last());
            break;
        };
        // SAFETY: this program is single-threaded; the child runs its share and `_exit`s.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            r.fail(&format!("fork process {i}"), "success", Errno::last());
            break;
        }
        if pid == 0 {
            crate::report::reset_fatal_signal_handler();
            drop(up_r);
            drop(go_w);
            // The siblings' pipe ends are not ours.
            drop(std::mem::take(&mut children));
            let seed = proc_seed(o.seed, i);
            note(i, format!("seed {seed:#x}, {} operations", ops_of(i)));
            let mut b = PipeBarrier {
                to_parent: up_w,
                from_parent: go_r,
            };
            let inject = if i == 0 { o.inject } else { None };
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let one = One {
                    id: i,
                    path: work.join(format!("f{i}")),
                    seed,
                    ops: ops_of(i),
                    barrier_every: o.barrier_every,
                    max_len: o.max_len,
                    inject,
                    drop_caches: o.drop_caches,
                };
                run_one(
                    &one,
                    &mut b,
                    progress.as_ref().and_then(|p| p.get(i as usize)),
                )
            }));
            let out = res.unwrap_or_else(|p| {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Outcome {
                    errors: 1,
                    problem: Some(format!("panic in the checker: {msg}")),
                    ..Outcome::default()
                }
            });
            let _ = std::io::stdout().flush();
            let _ = b.to_parent.write(encode(&out).as_bytes());
            // SAFETY: leaving the child without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        drop(up_w);
        drop(go_r);
        let raw = up_r.0;
        std::mem::forget(up_r);
        children.push(Child {
            pid,
            // SAFETY: `raw` is our pipe's read end, now owned by the File.
            lines: BufReader::new(unsafe { std::fs::File::from_raw_fd(raw) }),
            go: go_w,
            done: None,
            alive: true,
        });
    }
    // Barrier rounds: every live child either reaches the barrier or reports its end.
    let mut round = 0u64;
    loop {
        let mut waiting = Vec::new();
        for (i, c) in children.iter_mut().enumerate() {
            if !c.alive || c.done.is_some() {
                continue;
            }
            let mut line = String::new();
            match c.lines.read_line(&mut line) {
                Ok(n) if n > 0 && line == "B\n" => waiting.push(i),
                Ok(n) if n > 0 => match decode(&line) {
                    Some(out) => c.done = Some(out),
                    None => {
                        c.alive = false;
                        r.fail(&format!("process {i} protocol"), "B or D line", line.trim());
                    }
                },
                _ => c.alive = false,
            }
        }
        if waiting.is_empty() {
            break;
        }
        round += 1;
        let ok = match &o.remount {
            Some((src, fstype)) => {
                let res = remount(src, fstype, &o.dir);
                let name = format!("barrier {round}: umount and mount {src} again");
                match res {
                    Ok(()) => {
                        r.pass(&name);
                        true
                    }
                    Err(e) => {
                        r.fail(&name, "success", e);
                        false
                    }
                }
            }
            None if o.drop_caches => {
                let dropped = sys::drop_caches();
                r.check(
                    &format!("barrier {round}: sync and drop caches"),
                    dropped,
                    "caches dropped",
                    "cannot write /proc/sys/vm/drop_caches (not root?)",
                )
            }
            None => true,
        };
        for i in waiting {
            let _ = children[i].go.write(if ok { b"G" } else { b"X" });
        }
    }
    let mut total = Outcome::default();
    let mut counts = [0u64; 13];
    for (i, c) in children.iter_mut().enumerate() {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(c.pid, &mut status, 0) };
        let name = format!("process {i} (seed {:#x})", proc_seed(o.seed, i as u32));
        let at = progress
            .as_ref()
            .and_then(|p| p.get(i))
            .map(|a| a.load(std::sync::atomic::Ordering::Relaxed))
            .unwrap_or(0);
        match c.done.take() {
            Some(out) => {
                for (t, x) in counts.iter_mut().zip(out.counts) {
                    *t += x;
                }
                total.ops += out.ops;
                total.mismatches += out.mismatches;
                total.errors += out.errors;
                total.dropped += out.dropped;
                total.punch_supported |= out.punch_supported;
                match &out.problem {
                    None => r.pass(&format!("{name}: {} operations match the model", out.ops)),
                    Some(p) => r.fail(
                        &format!("{name}: operations match the model"),
                        "no mismatch or error",
                        p,
                    ),
                }
            }
            None => {
                let how = if libc::WIFSIGNALED(status) {
                    format!(
                        "killed by {} during op {at}",
                        signame(libc::WTERMSIG(status))
                    )
                } else {
                    format!("exited {} without a result", libc::WEXITSTATUS(status))
                };
                total.errors += 1;
                r.fail(&format!("{name}: ran to the end"), "a result", how);
            }
        }
    }
    let per_kind: Vec<String> = KINDS
        .iter()
        .zip(counts)
        .map(|(k, c)| format!("{} {c}", k.name()))
        .collect();
    r.note(format!("operations: {}", per_kind.join(", ")));
    r.note(format!(
        "page-cache drops {}, punched holes {}",
        total.dropped,
        if total.punch_supported {
            "supported"
        } else {
            "not supported (EOPNOTSUPP): skipped"
        }
    ));
    if total.errors == 0 && total.mismatches == 0 {
        let _ = sys::rmdir(&work);
    }
    let _ = std::io::stdout().flush();
    println!(
        "fsx: {} operations, {} mismatches",
        total.ops, total.mismatches
    );
    if o.inject.is_none() && total.ops != o.ops && total.errors + total.mismatches == 0 {
        r.fail("operation count", o.ops, total.ops);
    }
    r.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_tracks_writes_truncates_and_holes() {
        let mut m = Model::default();
        m.write(10, b"abc", 4);
        assert_eq!(m.len(), 13);
        assert_eq!(&m.data[..10], &[0u8; 10]);
        assert_eq!(m.who[11], 5);
        m.truncate(11);
        m.truncate(20);
        assert_eq!(&m.data[10..12], &[b'a', 0]);
        m.zero(0, 100);
        assert!(m.data.iter().all(|&b| b == 0));
        assert_eq!(m.len(), 20);
    }

    #[test]
    fn outcome_round_trips_through_the_pipe_line() {
        let o = Outcome {
            ops: 7,
            mismatches: 1,
            errors: 2,
            counts: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13],
            problem: Some("op 3: read 0x10 differs".into()),
            dropped: 3,
            punch_supported: true,
        };
        assert_eq!(decode(&encode(&o)), Some(o));
        assert_eq!(decode("B\n"), None);
    }

    #[test]
    fn seeds_differ_per_process() {
        assert_ne!(proc_seed(1, 0), proc_seed(1, 1));
        assert_eq!(proc_seed(5, 3), proc_seed(5, 3));
    }
}
