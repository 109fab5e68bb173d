//! `stress DIR`: many processes on shared directories for `--seconds`, each checking what it can
//! know for sure while the others change things around it:
//!
//! - renamers: write complete files under temporary names and rename them over a fixed set of
//!   `race.K` names (also from a subdirectory, and RENAME_EXCHANGE between two of them); every
//!   open of a `race.K` must succeed (rename replaces atomically) and show one complete file.
//! - scanners: read the shared directories with getdents in small and large buffers: every name
//!   seen is one some process can create, every one of the stable entries (made before the start,
//!   never touched) is seen exactly once per pass with its inode number, none is missing.
//! - mapper and truncator pairs: one process stores into a MAP_SHARED mapping of a file while the
//!   other truncates it down and up (SIGBUS beyond EOF is expected: the page is replaced by an
//!   anonymous one and the store continues); every byte must stay either 0 or the one value the
//!   mapper ever stores there, and the part below the lowest truncation point must keep it.
//! - unlinkers: unlink files they hold open, keep reading and writing them through the
//!   descriptor (nlink 0), including one held for the whole run.
//! - linkers: hard links to a file of their own, in the shared directory and a subdirectory,
//!   with the link count checked after every link, unlink and rename between two of its names.
//! - owners: files of their own in the shared directory, written, appended, truncated and read
//!   against an in-memory model ([`crate::fsx::Model`]).
//!
//! At the end the parent checks the whole tree: every file readable, every link count equal to
//! the names found for its inode, the race files complete, the stable entries intact; then
//! removes it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::fsx::Model;
use crate::pattern::{self, Rng};
use crate::report::Report;
use crate::sys::{self, Errno, Fd, Mmap, R};

const STABLE: usize = 64;
const RACE: u64 = 8;
const MAGIC: u64 = 0x5354_5245_5353_2121; // "STRESS!!"
const MM_SIZE: u64 = 64 * 1024;
/// The mapper's file never shrinks below this: its stores there must all persist.
const MM_FLOOR: u64 = 16 * 1024;
const MAX_NOTES: u64 = 8;
const RENAME_EXCHANGE: u32 = 2;

#[derive(Debug, Clone)]
pub struct Opts {
    pub dir: PathBuf,
    pub seconds: u64,
    pub procs: u32,
    pub seed: u64,
    /// Self-test: a worker corrupts one stable entry behind the checks' back.
    pub inject: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Renamer,
    Scanner,
    Mapper,
    Truncator,
    Unlinker,
    Linker,
    Owner,
}

/// Roles in the order processes get them (a mapper and its truncator are neighbours).
const ORDER: [Role; 8] = [
    Role::Renamer,
    Role::Scanner,
    Role::Mapper,
    Role::Truncator,
    Role::Unlinker,
    Role::Linker,
    Role::Owner,
    Role::Renamer,
];

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Renamer => "renamer",
            Role::Scanner => "scanner",
            Role::Mapper => "mapper",
            Role::Truncator => "truncator",
            Role::Unlinker => "unlinker",
            Role::Linker => "linker",
            Role::Owner => "owner",
        }
    }
}

/// Role of process `i` of `procs`: a mapper without a truncator (odd tail) becomes an owner.
pub fn role_of(i: u32, procs: u32) -> Role {
    let r = ORDER[i as usize % ORDER.len()];
    if r == Role::Mapper && i + 1 >= procs {
        Role::Owner
    } else {
        r
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub ops: u64,
    pub errors: u64,
    pub mismatches: u64,
    pub info: String,
    pub problem: Option<String>,
}

struct W {
    id: u32,
    role: Role,
    rng: Rng,
    shared: PathBuf,
    sub: PathBuf,
    out: Outcome,
    deadline: Instant,
    inject: bool,
}

impl W {
    fn note(&self, msg: &str) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "# stress[{}] {}: {msg}", self.id, self.role.name());
        let _ = o.flush();
    }
    fn error(&mut self, what: &str, e: impl std::fmt::Display) {
        self.out.errors += 1;
        let m = format!("ERROR {what}: {e}");
        if self.out.errors + self.out.mismatches <= MAX_NOTES {
            self.note(&m);
        }
        self.out.problem.get_or_insert(m);
    }
    fn mismatch(&mut self, what: String) {
        self.out.mismatches += 1;
        let m = format!("MISMATCH {what}");
        if self.out.errors + self.out.mismatches <= MAX_NOTES {
            self.note(&m);
        }
        self.out.problem.get_or_insert(m);
    }
    fn running(&self) -> bool {
        Instant::now() < self.deadline && self.out.errors + self.out.mismatches < 1000
    }
}

/// A complete file's bytes: header (magic, id, length) then the pattern of `id`.
fn race_content(id: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len.max(24)];
    pattern::fill(pattern::mix64(id), 0, &mut v);
    v[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    v[8..16].copy_from_slice(&id.to_le_bytes());
    let n = v.len() as u64;
    v[16..24].copy_from_slice(&n.to_le_bytes());
    v
}

/// Checks a complete file written by [`race_content`]; returns a description of what is wrong.
pub fn check_race_content(b: &[u8]) -> Result<u64, String> {
    if b.len() < 24 {
        return Err(format!("{} bytes, shorter than the header", b.len()));
    }
    let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
    if w(0) != MAGIC {
        return Err(format!("bad magic {:#x}", w(0)));
    }
    let (id, len) = (w(8), w(16));
    if len != b.len() as u64 {
        return Err(format!(
            "file of id {id:#x}: {} bytes, header says {len}",
            b.len()
        ));
    }
    let exp = race_content(id, b.len());
    match exp.iter().zip(b).position(|(a, c)| a != c) {
        None => Ok(id),
        Some(at) => Err(format!(
            "file of id {id:#x} ({len} bytes) differs at offset {at}"
        )),
    }
}

/// The value the mapper stores at `off` (never 0).
fn mm_byte(off: u64) -> u8 {
    (pattern::mix64(off) as u8) | 1
}

/// Checks the mapper's file content read at `off`: below the floor every byte is the mapper's,
/// above it 0 or the mapper's. Returns the first bad offset.
fn mm_check(off: u64, b: &[u8]) -> Option<u64> {
    b.iter().enumerate().find_map(|(i, &c)| {
        let o = off + i as u64;
        let good = c == mm_byte(o) || (o >= MM_FLOOR && c == 0);
        (!good).then_some(o)
    })
}

fn stable_name(k: usize) -> String {
    format!("stable.{k:03}")
}

/// Whether a name in the shared directories is one that some process creates.
pub fn known_name(n: &str) -> bool {
    let num = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    let num2 = |s: &str| {
        s.split_once('.')
            .map(|(a, b)| num(a) && num(b))
            .unwrap_or(false)
    };
    if n == "sub" {
        return true;
    }
    for (p, f) in [
        ("stable.", 1),
        ("race.", 1),
        ("t", 2),
        ("u", 2),
        ("own", 1),
        ("ln", 2),
        ("o", 2),
        ("held", 1),
        ("mm", 1),
    ] {
        if let Some(rest) = n.strip_prefix(p) {
            if (f == 1 && num(rest)) || (f == 2 && num2(rest)) {
                return true;
            }
        }
    }
    false
}

fn read_all(fd: &Fd) -> R<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = fd.pread(&mut buf, out.len() as u64)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

fn write_new(p: &Path, data: &[u8], fsync: bool) -> R<()> {
    let fd = sys::open(p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644)?;
    fd.pwrite_all(data, 0).map_err(|(_, e)| e)?;
    if fsync {
        fd.fsync()?;
    }
    fd.close()
}

// ---------------------------------------------------------------------------------------------
// Roles

fn renamer(w: &mut W) {
    let mut n = 0u64;
    let mut renames = 0u64;
    let mut exchanges = 0u64;
    let mut reads = 0u64;
    while w.running() {
        w.out.ops += 1;
        let k = w.rng.below(RACE);
        let target = w.shared.join(format!("race.{k}"));
        match w.rng.below(10) {
            0..=4 => {
                // A complete file under a temporary name (here or in sub/), renamed over race.K.
                n += 1;
                let dir = if w.rng.chance(30) { &w.sub } else { &w.shared };
                let tmp = dir.join(format!("t{}.{n}", w.id));
                let id = (u64::from(w.id) << 40) | n;
                let len = w.rng.range(24, 20_000) as usize;
                if let Err(e) = write_new(&tmp, &race_content(id, len), w.rng.chance(10)) {
                    w.error(&format!("create {}", tmp.display()), e);
                    continue;
                }
                match sys::rename(&tmp, &target) {
                    Ok(()) => renames += 1,
                    Err(e) => w.error(&format!("rename {} over race.{k}", tmp.display()), e),
                }
                if sys::lstat(&tmp).is_ok() {
                    w.mismatch(format!("{} still exists after its rename", tmp.display()));
                }
            }
            5 => {
                let j = (k + 1 + w.rng.below(RACE - 1)) % RACE;
                match sys::rename2(&target, w.shared.join(format!("race.{j}")), RENAME_EXCHANGE) {
                    Ok(()) => exchanges += 1,
                    Err(e) if e.0 == libc::EINVAL || e.0 == libc::EOPNOTSUPP => {}
                    Err(e) => w.error(&format!("RENAME_EXCHANGE race.{k} race.{j}"), e),
                }
            }
            _ => {
                // Every open of a race name succeeds and shows one complete file, even while it is
                // replaced (the descriptor keeps the old one).
                reads += 1;
                match sys::open(&target, libc::O_RDONLY, 0) {
                    Err(e) => w.mismatch(format!(
                        "open race.{k}: {e} (rename must replace atomically)"
                    )),
                    Ok(fd) => {
                        if w.rng.chance(30) {
                            std::thread::yield_now();
                        }
                        match read_all(&fd) {
                            Ok(b) => {
                                if let Err(m) = check_race_content(&b) {
                                    w.mismatch(format!("race.{k}: {m}"));
                                }
                            }
                            Err(e) => w.error(&format!("read race.{k}"), e),
                        }
                        match fd.fstat() {
                            Ok(s) if s.st_nlink > 1 => {
                                w.mismatch(format!("race.{k}: nlink {}", s.st_nlink))
                            }
                            Ok(_) => {}
                            Err(e) => w.error("fstat", e),
                        }
                    }
                }
            }
        }
    }
    w.out.info = format!("{renames} renames, {exchanges} exchanges, {reads} checked opens");
}

fn scan(w: &mut W, dir: &Path, bufsize: usize, stable: Option<&BTreeMap<String, u64>>) {
    let fd = match sys::open(dir, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
        Ok(f) => f,
        Err(e) => return w.error(&format!("open {}", dir.display()), e),
    };
    let mut buf = vec![0u8; bufsize];
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let mut stable_ino: BTreeMap<String, u64> = BTreeMap::new();
    loop {
        let ents = match fd.getdents(&mut buf) {
            Ok(v) => v,
            Err(e) => return w.error(&format!("getdents {}", dir.display()), e),
        };
        if ents.is_empty() {
            break;
        }
        for e in ents {
            let n = String::from_utf8_lossy(&e.name).into_owned();
            if n == "." || n == ".." {
                continue;
            }
            if !known_name(&n) {
                w.mismatch(format!(
                    "{}: readdir returned an entry nobody made: {n:?}",
                    dir.display()
                ));
            }
            *seen.entry(n.clone()).or_default() += 1;
            if n.starts_with("stable.") {
                stable_ino.insert(n, e.ino);
            }
        }
        if seen.len() > 1_000_000 {
            return w.mismatch(format!("{}: readdir does not end", dir.display()));
        }
    }
    if let Some(st) = stable {
        for (name, ino) in st {
            match (seen.get(name), stable_ino.get(name)) {
                (None, _) => w.mismatch(format!(
                    "{}: stable entry {name} missing from a readdir pass (buffer {bufsize})",
                    dir.display()
                )),
                (Some(&c), _) if c > 1 => w.mismatch(format!(
                    "{}: stable entry {name} returned {c} times in one pass",
                    dir.display()
                )),
                (_, Some(&i)) if i != *ino => w.mismatch(format!(
                    "{}: stable entry {name} has d_ino {i}, stat says {ino}",
                    dir.display()
                )),
                _ => {}
            }
        }
    }
}

fn scanner(w: &mut W) {
    let mut stable = BTreeMap::new();
    for k in 0..STABLE {
        let p = w.shared.join(stable_name(k));
        match sys::lstat(&p) {
            Ok(s) => {
                stable.insert(stable_name(k), s.st_ino as u64);
            }
            Err(e) => w.error(&format!("lstat {}", p.display()), e),
        }
    }
    let mut passes = 0u64;
    while w.running() {
        w.out.ops += 1;
        passes += 1;
        let bufsize = [256usize, 1024, 4096, 32768][w.rng.below(4) as usize];
        let shared = w.shared.clone();
        let sub = w.sub.clone();
        scan(w, &shared, bufsize, Some(&stable));
        scan(w, &sub, bufsize, None);
        // The stable entries' content stays as written.
        let k = w.rng.below(STABLE as u64) as usize;
        match sys::read_file(w.shared.join(stable_name(k))) {
            Ok(b) => {
                if let Err(m) = check_race_content(&b) {
                    w.mismatch(format!("{}: {m}", stable_name(k)));
                }
            }
            Err(e) => w.error(&format!("read {}", stable_name(k)), e),
        }
        if w.inject && passes == 3 {
            // Self-test: a stable entry disappears behind the scanner's back.
            w.note("self-test: removing stable.000");
            let _ = sys::unlink(w.shared.join(stable_name(0)));
        }
    }
    w.out.info = format!("{passes} readdir passes");
}

static SIGBUS_COUNT: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers; si_addr is the faulting
    // address. Mapping an anonymous page over it (mmap is a plain syscall) lets the store retry
    // and land there: a store beyond EOF of a truncated file goes nowhere, as it should.
    unsafe {
        let addr = (*info).si_addr() as usize & !4095;
        let p = libc::mmap(
            addr as *mut libc::c_void,
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            libc::_exit(3);
        }
    }
    SIGBUS_COUNT.fetch_add(1, Ordering::Relaxed);
}

fn mapper(w: &mut W) {
    let p = w.shared.join(format!("mm{}", w.id));
    // SAFETY: installing a SA_SIGINFO handler that only calls mmap and touches an atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
    }
    let fd = match sys::open(&p, libc::O_RDWR, 0) {
        Ok(f) => f,
        Err(e) => return w.error("open mm", e),
    };
    let mut maps = 0u64;
    let mut tmp = Vec::new();
    while w.running() {
        w.out.ops += 1;
        maps += 1;
        let mut m = match Mmap::new(&fd, MM_SIZE as usize, true, true) {
            Ok(m) => m,
            Err(e) => return w.error("mmap mm", e),
        };
        for _ in 0..32 {
            let off = w.rng.below(MM_SIZE - 1);
            let len = w.rng.range(1, 3000).min(MM_SIZE - off);
            tmp.clear();
            tmp.extend((off..off + len).map(mm_byte));
            m.write_at(off as usize, &tmp);
        }
        // msync may see the file shorter than the mapping; only real I/O errors count.
        if let Err(e) = m.msync() {
            if e.0 != libc::ENOMEM {
                w.error("msync mm", e);
            }
        }
        drop(m);
    }
    w.out.info = format!(
        "{maps} mappings, {} SIGBUS beyond EOF absorbed",
        SIGBUS_COUNT.load(Ordering::Relaxed)
    );
}

fn truncator(w: &mut W) {
    // The mapper is the previous process.
    let p = w.shared.join(format!("mm{}", w.id.saturating_sub(1)));
    let fd = match sys::open(&p, libc::O_RDWR, 0) {
        Ok(f) => f,
        Err(e) => return w.error("open mm", e),
    };
    let mut buf = vec![0u8; MM_SIZE as usize];
    while w.running() {
        w.out.ops += 1;
        let len = w.rng.range(MM_FLOOR, MM_SIZE);
        if let Err(e) = fd.ftruncate(len) {
            w.error("ftruncate mm down", e);
        }
        let n = match fd.pread_full(&mut buf, 0) {
            Ok(n) => n,
            Err(e) => {
                w.error("pread mm", e);
                continue;
            }
        };
        if n as u64 > len || (n as u64) < MM_FLOOR {
            w.mismatch(format!("mm: read {n} bytes after truncating to {len}"));
        }
        if let Some(at) = mm_check(0, &buf[..n]) {
            w.mismatch(format!(
                "mm: byte at {at} is {:#x}, want {:#x}{} (file truncated to {len})",
                buf[at as usize],
                mm_byte(at),
                if at >= MM_FLOOR { " or 0" } else { "" }
            ));
        }
        if let Err(e) = fd.ftruncate(MM_SIZE) {
            w.error("ftruncate mm up", e);
        }
        if w.rng.chance(5) {
            if let Err(e) = fd.fdatasync() {
                w.error("fdatasync mm", e);
            }
        }
    }
    let _ = fd.ftruncate(MM_SIZE);
    w.out.info = format!(
        "{} truncations down and up, content checked after each",
        w.out.ops
    );
}

fn unlinker(w: &mut W) {
    let held_p = w.shared.join(format!("held{}", w.id));
    let held_data = race_content(0xAB00 + u64::from(w.id), 50_000);
    let held = match write_new(&held_p, &held_data, true)
        .and_then(|_| sys::open(&held_p, libc::O_RDWR, 0))
        .and_then(|f| sys::unlink(&held_p).map(|_| f))
    {
        Ok(f) => f,
        Err(e) => return w.error("create and unlink the held file", e),
    };
    let mut n = 0u64;
    while w.running() {
        w.out.ops += 1;
        n += 1;
        let p = w.shared.join(format!("u{}.{n}", w.id));
        let len = w.rng.range(24, 30_000) as usize;
        let data = race_content((u64::from(w.id) << 40) | n, len);
        if let Err(e) = write_new(&p, &data, false) {
            w.error("create", e);
            continue;
        }
        let fd = match sys::open(&p, libc::O_RDWR, 0) {
            Ok(f) => f,
            Err(e) => {
                w.error("open", e);
                continue;
            }
        };
        if let Err(e) = sys::unlink(&p) {
            w.error("unlink of an open file", e);
        }
        if sys::lstat(&p).is_ok() {
            w.mismatch(format!("{} still there after unlink", p.display()));
        }
        match fd.fstat() {
            Ok(s) if s.st_nlink != 0 => {
                w.mismatch(format!("unlinked open file: nlink {}", s.st_nlink))
            }
            Ok(_) => {}
            Err(e) => w.error("fstat", e),
        }
        if w.rng.chance(30) {
            // SAFETY: sync has no preconditions.
            unsafe { libc::syncfs(fd.raw()) };
        }
        match read_all(&fd) {
            Ok(b) if b == data => {}
            Ok(b) => w.mismatch(format!(
                "unlinked open file: content differs ({} bytes, want {})",
                b.len(),
                data.len()
            )),
            Err(e) => w.error("read unlinked open file", e),
        }
        // It stays writable.
        let extra = race_content(n, 4096);
        if let Err((_, e)) = fd.pwrite_all(&extra, len as u64) {
            w.error("write unlinked open file", e);
        }
        let mut b = vec![0u8; 4096];
        match fd.pread_full(&mut b, len as u64) {
            Ok(4096) if b == extra => {}
            Ok(k) => w.mismatch(format!(
                "unlinked open file: wrote 4096 at {len}, read back {k} bytes differing"
            )),
            Err(e) => w.error("pread", e),
        }
        if let Err(e) = fd.close() {
            w.error("close unlinked file", e);
        }
        if n.is_multiple_of(16) {
            match read_all(&held) {
                Ok(b) if b == held_data => {}
                Ok(b) => w.mismatch(format!(
                    "held unlinked file: {} bytes, content differs",
                    b.len()
                )),
                Err(e) => w.error("read held unlinked file", e),
            }
        }
    }
    match read_all(&held) {
        Ok(b) if b == held_data => {}
        Ok(_) => w.mismatch("held unlinked file differs at the end".into()),
        Err(e) => w.error("read held unlinked file", e),
    }
    w.out.info = format!("{n} files unlinked while open");
}

fn linker(w: &mut W) {
    let own = w.shared.join(format!("own{}", w.id));
    let data = race_content(0xC000 + u64::from(w.id), 5000);
    if let Err(e) = write_new(&own, &data, false) {
        return w.error("create own file", e);
    }
    let ino = sys::lstat(&own).map(|s| s.st_ino).unwrap_or(0);
    let mut links: BTreeSet<PathBuf> = BTreeSet::new();
    let mut k = 0u64;
    while w.running() {
        w.out.ops += 1;
        let act = w.rng.below(10);
        if act < 5 || links.is_empty() {
            k += 1;
            let dir = if w.rng.chance(40) { &w.sub } else { &w.shared };
            let p = dir.join(format!("ln{}.{k}", w.id));
            match sys::link(&own, &p) {
                Ok(()) => {
                    links.insert(p);
                }
                Err(e) => w.error("link", e),
            }
        } else if act < 9 {
            let i = w.rng.below(links.len() as u64) as usize;
            let Some(p) = links.iter().nth(i).cloned() else {
                continue;
            };
            match sys::unlink(&p) {
                Ok(()) => {
                    links.remove(&p);
                }
                Err(e) => w.error("unlink link", e),
            }
        } else {
            // rename between two names of the same inode does nothing: both stay.
            let a = links.iter().next().cloned();
            if let Some(a) = a {
                if let Err(e) = sys::rename(&a, &own) {
                    w.error("rename a link over another name of the same file", e);
                }
                if sys::lstat(&a).is_err() || sys::lstat(&own).is_err() {
                    w.mismatch(format!(
                        "rename {} over {} (same inode) removed a name",
                        a.display(),
                        own.display()
                    ));
                }
            }
        }
        if links.len() > 40 {
            let Some(p) = links.iter().next().cloned() else {
                continue;
            };
            if sys::unlink(&p).is_ok() {
                links.remove(&p);
            }
        }
        match sys::lstat(&own) {
            Ok(s) if s.st_nlink as usize != links.len() + 1 || s.st_ino != ino => {
                w.mismatch(format!(
                    "own file: nlink {} (ino {}), want {} (ino {ino})",
                    s.st_nlink,
                    s.st_ino,
                    links.len() + 1
                ))
            }
            Ok(_) => {}
            Err(e) => w.error("lstat own", e),
        }
        if w.rng.chance(10) {
            if let Some(p) = links.iter().last() {
                match sys::read_file(p) {
                    Ok(b) if b == data => {}
                    Ok(_) => w.mismatch(format!(
                        "{}: content differs from the file it links",
                        p.display()
                    )),
                    Err(e) => w.error("read link", e),
                }
            }
        }
    }
    w.out.info = format!("{k} links made, {} left", links.len());
}

fn owner(w: &mut W) {
    const FILES: u64 = 6;
    let mut models: Vec<Model> = (0..FILES).map(|_| Model::default()).collect();
    let paths: Vec<PathBuf> = (0..FILES)
        .map(|k| w.shared.join(format!("o{}.{k}", w.id)))
        .collect();
    for p in &paths {
        if let Err(e) = write_new(p, &[], false) {
            return w.error("create own file", e);
        }
    }
    let mut op = 0u64;
    while w.running() {
        w.out.ops += 1;
        op += 1;
        let k = w.rng.below(FILES) as usize;
        let fd = match sys::open(&paths[k], libc::O_RDWR, 0) {
            Ok(f) => f,
            Err(e) => {
                w.error("open own file", e);
                continue;
            }
        };
        let m = &mut models[k];
        match w.rng.below(10) {
            0..=4 => {
                let off = w.rng.below(200_000);
                let len = w.rng.range(1, 20_000);
                let mut d = vec![0u8; len as usize];
                pattern::fill(pattern::mix64(op ^ (u64::from(w.id) << 48)), off, &mut d);
                m.write(off, &d, op);
                if let Err((_, e)) = fd.pwrite_all(&d, off) {
                    w.error("pwrite", e);
                }
            }
            5..=6 => {
                let len = w.rng.below(m.len() + 10_000);
                m.truncate(len);
                if let Err(e) = fd.ftruncate(len) {
                    w.error("ftruncate", e);
                }
            }
            7 => {
                if let Err(e) = fd.fsync() {
                    w.error("fsync", e);
                }
            }
            _ => {}
        }
        let m = &models[k];
        match read_all(&fd) {
            Ok(b) if b == m.data => {}
            Ok(b) => {
                let at = b.iter().zip(&m.data).position(|(x, y)| x != y);
                w.mismatch(format!(
                    "{}: {} bytes read, model {}; first difference at {at:?}",
                    paths[k].display(),
                    b.len(),
                    m.len()
                ));
                models[k].data = b.clone();
                models[k].who = vec![0; b.len()];
            }
            Err(e) => w.error("read own file", e),
        }
    }
    w.out.info = format!("{op} operations on {FILES} files");
}

// ---------------------------------------------------------------------------------------------
// Parent

fn encode(o: &Outcome) -> String {
    format!(
        "{} {} {} {}\t{}\n",
        o.ops,
        o.errors,
        o.mismatches,
        o.info.replace(['\t', '\n'], " "),
        o.problem
            .as_deref()
            .unwrap_or("")
            .replace(['\t', '\n'], " ")
    )
}

fn decode(s: &str) -> Option<Outcome> {
    let (a, problem) = s.trim_end_matches('\n').split_once('\t')?;
    let mut it = a.splitn(4, ' ');
    Some(Outcome {
        ops: it.next()?.parse().ok()?,
        errors: it.next()?.parse().ok()?,
        mismatches: it.next()?.parse().ok()?,
        info: it.next().unwrap_or("").to_string(),
        problem: (!problem.is_empty()).then(|| problem.to_string()),
    })
}

fn setup(root: &Path, shared: &Path, sub: &Path, procs: u32) -> R<()> {
    let _ = std::fs::remove_dir_all(root);
    sys::mkdir(root, 0o755)?;
    sys::mkdir(shared, 0o755)?;
    sys::mkdir(sub, 0o755)?;
    for k in 0..STABLE {
        write_new(
            &shared.join(stable_name(k)),
            &race_content(0x5AB1E000 + k as u64, 100 + 37 * k),
            false,
        )?;
    }
    for k in 0..RACE {
        write_new(
            &shared.join(format!("race.{k}")),
            &race_content(k, 100),
            false,
        )?;
    }
    let mm: Vec<u8> = (0..MM_SIZE).map(mm_byte).collect();
    for i in (0..procs).filter(|&i| role_of(i, procs) == Role::Mapper) {
        write_new(&shared.join(format!("mm{i}")), &mm, true)?;
    }
    Ok(())
}

/// Final check of the tree: every file readable, link counts match the names found.
fn final_check(r: &mut Report, shared: &Path, sub: &Path) -> u64 {
    let mut bad = 0u64;
    let mut names: BTreeMap<u64, Vec<PathBuf>> = BTreeMap::new();
    let mut nlinks: BTreeMap<u64, u64> = BTreeMap::new();
    let mut files = 0u64;
    for dir in [shared, sub] {
        let list = match std::fs::read_dir(dir) {
            Ok(l) => l,
            Err(e) => {
                r.fail(&format!("final: read {}", dir.display()), "success", e);
                return bad + 1;
            }
        };
        for e in list.flatten() {
            let p = e.path();
            let n = e.file_name().to_string_lossy().into_owned();
            if n == "sub" {
                continue;
            }
            if !known_name(&n) {
                bad += 1;
                r.fail("final: every name is one a process made", "known name", &n);
            }
            let s = match sys::lstat(&p) {
                Ok(s) => s,
                Err(e) => {
                    bad += 1;
                    r.fail(&format!("final: lstat {n}"), "success", e);
                    continue;
                }
            };
            files += 1;
            names.entry(s.st_ino as u64).or_default().push(p.clone());
            nlinks.insert(s.st_ino as u64, s.st_nlink as u64);
            match sys::read_file(&p) {
                Err(e) => {
                    bad += 1;
                    r.fail(&format!("final: read {}", p.display()), "success", e);
                }
                Ok(b) => {
                    let check = if n.starts_with("race.")
                        || n.starts_with("stable.")
                        || n.starts_with("own")
                        || n.starts_with("ln")
                    {
                        check_race_content(&b).map(|_| ())
                    } else if n.starts_with("mm") {
                        match mm_check(0, &b) {
                            None if b.len() as u64 == MM_SIZE => Ok(()),
                            None => Err(format!("size {}, want {MM_SIZE}", b.len())),
                            Some(at) => Err(format!("byte at {at} is {:#x}", b[at as usize])),
                        }
                    } else {
                        Ok(())
                    };
                    if let Err(m) = check {
                        bad += 1;
                        r.fail(&format!("final: content of {}", p.display()), "complete", m);
                    }
                }
            }
        }
    }
    for k in 0..STABLE {
        if sys::lstat(shared.join(stable_name(k))).is_err() {
            bad += 1;
            r.fail("final: stable entries present", stable_name(k), "missing");
        }
    }
    for k in 0..RACE {
        if sys::lstat(shared.join(format!("race.{k}"))).is_err() {
            bad += 1;
            r.fail(
                "final: race entries present",
                format!("race.{k}"),
                "missing",
            );
        }
    }
    let mut wrong = Vec::new();
    for (ino, ps) in &names {
        let want = ps.len() as u64;
        if nlinks.get(ino) != Some(&want) {
            wrong.push(format!(
                "ino {ino}: nlink {:?}, names {}",
                nlinks.get(ino),
                ps.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
    }
    bad += wrong.len() as u64;
    r.check(
        &format!(
            "final: link counts equal the names found ({files} names, {} inodes)",
            names.len()
        ),
        wrong.is_empty(),
        "equal",
        wrong.join("; "),
    );
    bad
}

/// `ferrofs-fstest stress`: forks the workers, waits for the deadline, sums and checks.
pub fn run(o: &Opts) -> i32 {
    let mut r = Report::new();
    let procs = o.procs.max(2);
    let root = o.dir.join("stress-work");
    let shared = root.join("shared");
    let sub = shared.join("sub");
    r.note(format!(
        "stress: seed {} ({:#x}), {} processes, {} s; replay: ferrofs-fstest stress {} --seconds {} --procs {} --seed {}",
        o.seed, o.seed, procs, o.seconds, o.dir.display(), o.seconds, procs, o.seed
    ));
    if let Err(e) = setup(&root, &shared, &sub, procs) {
        r.fail("set up the shared directories", "success", e);
        println!("stress: 0 seconds, {procs} processes, 1 errors, 0 mismatches");
        return r.finish();
    }
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(o.seconds);
    let _ = std::io::stdout().flush();
    let mut kids = Vec::new();
    for i in 0..procs {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is an array of two ints.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            r.fail("pipe", "success", Errno::last());
            break;
        }
        let (rd, wr) = (Fd(fds[0]), Fd(fds[1]));
        // SAFETY: single-threaded; the child runs its role and `_exit`s.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            r.fail(&format!("fork worker {i}"), "success", Errno::last());
            break;
        }
        if pid == 0 {
            crate::report::reset_fatal_signal_handler();
            drop(rd);
            drop(std::mem::take(&mut kids));
            let role = role_of(i, procs);
            let mut w = W {
                id: i,
                role,
                rng: Rng::new(crate::fsx::proc_seed(o.seed ^ 0x57E5, i)),
                shared: shared.clone(),
                sub: sub.clone(),
                out: Outcome::default(),
                deadline,
                inject: o.inject,
            };
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match role {
                Role::Renamer => renamer(&mut w),
                Role::Scanner => scanner(&mut w),
                Role::Mapper => mapper(&mut w),
                Role::Truncator => truncator(&mut w),
                Role::Unlinker => unlinker(&mut w),
                Role::Linker => linker(&mut w),
                Role::Owner => owner(&mut w),
            }));
            if res.is_err() {
                w.error("worker", "panic");
            }
            let _ = std::io::stdout().flush();
            let _ = wr.write(encode(&w.out).as_bytes());
            // SAFETY: leaving the child without the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        drop(wr);
        kids.push((pid, rd, role_of(i, procs)));
    }
    let (mut errors, mut mismatches) = (0u64, 0u64);
    for (i, (pid, rd, role)) in kids.iter().enumerate() {
        let mut s = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = rd.read(&mut buf) {
            if n == 0 {
                break;
            }
            s.extend_from_slice(&buf[..n]);
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(*pid, &mut status, 0) };
        let name = format!("worker {i} ({})", role.name());
        match decode(&String::from_utf8_lossy(&s)) {
            Some(out) => {
                errors += out.errors;
                mismatches += out.mismatches;
                match &out.problem {
                    None => r.pass(&format!("{name}: {} rounds, {}", out.ops, out.info)),
                    Some(p) => r.fail(
                        &format!("{name}: {} rounds, {}", out.ops, out.info),
                        "no errors or mismatches",
                        format!(
                            "{} errors, {} mismatches, first: {p}",
                            out.errors, out.mismatches
                        ),
                    ),
                }
                if out.ops == 0 {
                    errors += 1;
                    r.fail(&format!("{name}: did some work"), "rounds > 0", 0);
                }
            }
            None => {
                errors += 1;
                let how = if libc::WIFSIGNALED(status) {
                    format!("killed by signal {}", libc::WTERMSIG(status))
                } else {
                    format!("exit {} without a result", libc::WEXITSTATUS(status))
                };
                r.fail(&format!("{name}: ran to the end"), "a result", how);
            }
        }
    }
    let secs = t0.elapsed().as_secs();
    mismatches += final_check(&mut r, &shared, &sub);
    if errors + mismatches == 0 {
        let res = std::fs::remove_dir_all(&root).map_err(|e| Errno(e.raw_os_error().unwrap_or(0)));
        r.ok("remove the work tree", res);
    }
    println!("stress: {secs} seconds, {procs} processes, {errors} errors, {mismatches} mismatches");
    r.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn race_content_checks() {
        let b = race_content(77, 1000);
        assert_eq!(check_race_content(&b), Ok(77));
        assert!(check_race_content(&b[..999]).is_err());
        let mut c = b.clone();
        c[500] ^= 1;
        assert!(check_race_content(&c).is_err());
        assert!(check_race_content(&[0u8; 100]).is_err());
    }

    #[test]
    fn names_and_mm() {
        for n in [
            "stable.003",
            "race.7",
            "t3.12",
            "u1.5",
            "own4",
            "ln5.9",
            "o6.2",
            "held4",
            "mm2",
        ] {
            assert!(known_name(n), "{n}");
        }
        for n in ["stable.", "t3", "x", "race.a", "ln5"] {
            assert!(!known_name(n), "{n}");
        }
        let b: Vec<u8> = (0..100).map(mm_byte).collect();
        assert_eq!(mm_check(0, &b), None);
        let mut z = vec![0u8; 10];
        assert_eq!(mm_check(MM_FLOOR, &z), None);
        assert_eq!(mm_check(0, &z), Some(0));
        z[3] = mm_byte(MM_FLOOR + 3) ^ 2;
        assert_eq!(mm_check(MM_FLOOR, &z), Some(MM_FLOOR + 3));
    }

    #[test]
    fn roles_pair_mappers() {
        assert_eq!(role_of(2, 3), Role::Owner);
        assert_eq!(role_of(2, 4), Role::Mapper);
        assert_eq!(role_of(3, 4), Role::Truncator);
        let o = Outcome {
            ops: 3,
            errors: 1,
            mismatches: 2,
            info: "a b".into(),
            problem: Some("x y".into()),
        };
        assert_eq!(decode(&encode(&o)), Some(o));
    }
}
