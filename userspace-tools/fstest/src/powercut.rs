//! Power-cut workload and verifier: `ferrofs-fstest powercut run|verify DIR --log DEV`.
//!
//! `run` starts several worker processes, each on its own subtree `DIR/wK`, doing creates,
//! writes, overwrites, appends, truncates, renames (also over existing files), links, unlinks,
//! mkdir/rmdir, xattr and mode changes, and fsync/fdatasync of files and directories at random
//! points. What each fsync made durable is recorded in a log kept off the filesystem under test
//! (`--log`: a raw disk, written one 512-byte sector per record with O_DIRECT|O_SYNC, each record
//! checksummed and numbered so a torn or stale sector is recognised). The machine is then killed
//! at a random moment; `verify` in the next boot checks every record still standing against the
//! tree, and the whole tree for consistency.
//!
//! The log's records (one epoch per boot):
//! - `BEGIN` (sector 0 of a half), the baseline (a `FILE` for every file and a `DIR` for every
//!   directory, written after `syncfs`), `COMMIT`; then the workers' records:
//! - `FILE`: after `fsync`/`fdatasync` of a file returned: its path, inode number, size, content
//!   digest, mode, link count and xattrs (mode, link count and xattrs not promised by fdatasync).
//!   ferrofs promises that fsync of a file makes its data, its inode and its directory entry
//!   durable (docs/design.md), so the entry `path -> inode` is checked too.
//! - `DIR`: after `fsync` of a directory returned: the set of `name -> inode` entries.
//! - `INTENT`: written (durably) *before* an operation that changes something a standing record
//!   describes: the record's path (`P`), inode (`I`) or directory (`D`) key. From then on the state
//!   is whatever the cut left (old, new, or for data in between) and only the tree check applies.
//!
//! The log has two halves; each boot's epoch goes into the half not holding the newest committed
//! epoch, so a cut while writing a baseline leaves the previous epoch intact. Epoch numbers are
//! never reused, and a record counts only with its half's epoch and its own sector number.
//!
//! Verification counts: `lost` = standing records whose file or entry is missing or different
//! (an fsync'd file lost or damaged), `tree` = consistency problems of the whole tree (unreadable
//! files, wrong link counts, wrong `..`, a directory entry whose inode cannot be stat'ed).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::pattern::{self, mix64, Rng};
use crate::sys::{self, Errno, Fd};

pub const SECTOR: usize = 512;
const MAGIC: &[u8; 4] = b"FPCL";
const HDR: usize = 35;
const MAX_PAYLOAD: usize = SECTOR - HDR;
/// Consecutive sectors without a record of the half's epoch that end a scan (workers write
/// concurrently, so a cut can leave holes, at most as wide as the number of writers).
const SCAN_GAP: u64 = 256;
const LOG_FULL: &str = "the log is full";

pub const T_BEGIN: u8 = 1;
pub const T_COMMIT: u8 = 2;
pub const T_FILE: u8 = 3;
pub const T_DIR: u8 = 4;
pub const T_INTENT: u8 = 5;

pub const F_DATASYNC: u8 = 1;
pub const F_BASELINE: u8 = 2;

const MAX_FILES: usize = 48;
const MAX_DIRS: usize = 8;
const MAX_SIZE: usize = 192 * 1024;
const MAX_LINKS: usize = 3;
const XATTR_NAMES: [&str; 3] = ["user.pc.a", "user.pc.b", "user.pc.c"];
const MODES: [u32; 5] = [0o644, 0o600, 0o640, 0o755, 0o444];

// ---------------------------------------------------------------------------------------------
// Records

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRec {
    pub flags: u8,
    pub ino: u64,
    pub size: u64,
    pub digest: u64,
    pub mode: u32,
    pub nlink: u32,
    pub xdigest: u64,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirRec {
    pub ino: u64,
    pub count: u32,
    pub digest: u64,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    Path(String),
    Ino(u64),
    Dir(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Begin,
    Commit,
    File(FileRec),
    Dir(DirRec),
    Intent(Vec<Key>),
}

#[derive(Default)]
struct Enc(Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn s(&mut self, v: &str) -> &mut Self {
        let b = v.as_bytes();
        self.0.push(b.len().min(255) as u8);
        self.0.extend_from_slice(&b[..b.len().min(255)]);
        self
    }
}

struct Dec<'a>(&'a [u8]);

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)
    }
    fn s(&mut self) -> Option<String> {
        let n = self.u8()? as usize;
        self.take(n).map(|b| String::from_utf8_lossy(b).into_owned())
    }
}

impl Body {
    fn kind(&self) -> u8 {
        match self {
            Body::Begin => T_BEGIN,
            Body::Commit => T_COMMIT,
            Body::File(_) => T_FILE,
            Body::Dir(_) => T_DIR,
            Body::Intent(_) => T_INTENT,
        }
    }
    fn payload(&self) -> Vec<u8> {
        let mut e = Enc::default();
        match self {
            Body::Begin | Body::Commit => {}
            Body::File(f) => {
                e.u8(f.flags).u64(f.ino).u64(f.size).u64(f.digest).u32(f.mode).u32(f.nlink);
                e.u64(f.xdigest).s(&f.path);
            }
            Body::Dir(d) => {
                e.u64(d.ino).u32(d.count).u64(d.digest).s(&d.path);
            }
            Body::Intent(keys) => {
                e.u8(keys.len() as u8);
                for k in keys {
                    match k {
                        Key::Path(p) => e.u8(0).s(p),
                        Key::Ino(i) => e.u8(1).u64(*i),
                        Key::Dir(p) => e.u8(2).s(p),
                    };
                }
            }
        }
        e.0
    }
    fn parse(kind: u8, p: &[u8]) -> Option<Body> {
        let mut d = Dec(p);
        Some(match kind {
            T_BEGIN => Body::Begin,
            T_COMMIT => Body::Commit,
            T_FILE => Body::File(FileRec {
                flags: d.u8()?,
                ino: d.u64()?,
                size: d.u64()?,
                digest: d.u64()?,
                mode: d.u32()?,
                nlink: d.u32()?,
                xdigest: d.u64()?,
                path: d.s()?,
            }),
            T_DIR => Body::Dir(DirRec {
                ino: d.u64()?,
                count: d.u32()?,
                digest: d.u64()?,
                path: d.s()?,
            }),
            T_INTENT => {
                let n = d.u8()?;
                let mut keys = Vec::new();
                for _ in 0..n {
                    keys.push(match d.u8()? {
                        0 => Key::Path(d.s()?),
                        1 => Key::Ino(d.u64()?),
                        2 => Key::Dir(d.s()?),
                        _ => return None,
                    });
                }
                Body::Intent(keys)
            }
            _ => return None,
        })
    }
}

/// Encodes a record for sector `idx` (within its half) of `epoch`.
pub fn encode(idx: u64, epoch: u64, body: &Body) -> Result<[u8; SECTOR], String> {
    let p = body.payload();
    if p.len() > MAX_PAYLOAD {
        return Err(format!("log record too long ({} bytes)", p.len()));
    }
    let mut s = [0u8; SECTOR];
    s[0..4].copy_from_slice(MAGIC);
    s[16..24].copy_from_slice(&idx.to_le_bytes());
    s[24..32].copy_from_slice(&epoch.to_le_bytes());
    s[32] = body.kind();
    s[33..35].copy_from_slice(&(p.len() as u16).to_le_bytes());
    s[HDR..HDR + p.len()].copy_from_slice(&p);
    let h = pattern::hash_bytes(&s[16..]);
    s[8..16].copy_from_slice(&h.to_le_bytes());
    Ok(s)
}

/// Decodes sector `idx`: `(epoch, body)` if it is an intact record written for that sector.
pub fn decode(s: &[u8], idx: u64) -> Option<(u64, Body)> {
    if s.len() < SECTOR || &s[0..4] != MAGIC {
        return None;
    }
    let h = u64::from_le_bytes(s[8..16].try_into().ok()?);
    if h != pattern::hash_bytes(&s[16..SECTOR]) {
        return None;
    }
    if u64::from_le_bytes(s[16..24].try_into().ok()?) != idx {
        return None;
    }
    let epoch = u64::from_le_bytes(s[24..32].try_into().ok()?);
    let len = u16::from_le_bytes([s[33], s[34]]) as usize;
    if len > MAX_PAYLOAD {
        return None;
    }
    Body::parse(s[32], &s[HDR..HDR + len]).map(|b| (epoch, b))
}

// ---------------------------------------------------------------------------------------------
// The log device

/// One epoch found in a half of the log.
#[derive(Debug, Clone)]
pub struct Epoch {
    pub half: u64,
    pub epoch: u64,
    pub committed: bool,
    /// Records in sector order (BEGIN first).
    pub recs: Vec<(u64, Body)>,
    /// One past the last sector holding a record of this epoch.
    pub end: u64,
}

pub struct LogDev {
    fd: Fd,
    pub direct: bool,
    pub half_sectors: u64,
}

impl LogDev {
    /// Opens the log with O_DIRECT|O_SYNC (plain O_SYNC where O_DIRECT is refused, as on tmpfs).
    pub fn open(path: &Path, half_sectors: u64) -> Result<LogDev, String> {
        let fl = libc::O_RDWR | libc::O_SYNC;
        match sys::open(path, fl | libc::O_DIRECT, 0) {
            Ok(fd) => Ok(LogDev {
                fd,
                direct: true,
                half_sectors,
            }),
            Err(Errno(libc::EINVAL)) => {
                let fd = sys::open(path, fl, 0).map_err(|e| format!("open {}: {e}", path.display()))?;
                Ok(LogDev {
                    fd,
                    direct: false,
                    half_sectors,
                })
            }
            Err(e) => Err(format!("open {}: {e}", path.display())),
        }
    }

    fn reopen(&self) -> Result<LogDev, String> {
        // SAFETY: dup of a descriptor we own; the new one is owned by the returned Fd.
        let fd = unsafe { libc::dup(self.fd.raw()) };
        if fd < 0 {
            return Err(format!("dup log fd: {}", Errno::last()));
        }
        Ok(LogDev {
            fd: Fd(fd),
            direct: self.direct,
            half_sectors: self.half_sectors,
        })
    }

    /// Writes one record at sector `idx` of `half`; durable when this returns (O_SYNC).
    pub fn put(&self, half: u64, idx: u64, epoch: u64, body: &Body) -> Result<(), String> {
        if idx >= self.half_sectors {
            return Err(LOG_FULL.into());
        }
        let s = encode(idx, epoch, body)?;
        let mut b = sys::AlignedBuf::new(SECTOR);
        b.get_mut().copy_from_slice(&s);
        let off = (half * self.half_sectors + idx) * SECTOR as u64;
        self.fd
            .pwrite_all(b.get(), off)
            .map_err(|(_, e)| format!("log write at sector {idx}: {e}"))?;
        if !self.direct {
            self.fd.fdatasync().map_err(|e| format!("log fdatasync: {e}"))?;
        }
        Ok(())
    }

    /// Reads the epoch of one half (None if sector 0 holds no BEGIN).
    pub fn scan(&self, half: u64) -> Result<Option<Epoch>, String> {
        const CHUNK: usize = 256 * 1024;
        let per = (CHUNK / SECTOR) as u64;
        let mut b = sys::AlignedBuf::new(CHUNK);
        let base = half * self.half_sectors * SECTOR as u64;
        let mut ep: Option<Epoch> = None;
        let mut gap = 0u64;
        let mut idx = 0u64;
        'outer: while idx < self.half_sectors {
            let n = self
                .fd
                .pread_full(b.get_mut(), base + idx * SECTOR as u64)
                .map_err(|e| format!("log read: {e}"))?;
            let sectors = (n / SECTOR) as u64;
            if sectors == 0 {
                break;
            }
            for i in 0..sectors.min(per) {
                let k = idx + i;
                if k >= self.half_sectors {
                    break 'outer;
                }
                let s = &b.get()[(i as usize) * SECTOR..(i as usize + 1) * SECTOR];
                let d = decode(s, k);
                match (&mut ep, d) {
                    (None, Some((e, Body::Begin))) if k == 0 => {
                        ep = Some(Epoch {
                            half,
                            epoch: e,
                            committed: false,
                            recs: vec![(0, Body::Begin)],
                            end: 1,
                        });
                    }
                    (None, _) => return Ok(None),
                    (Some(ep), Some((e, body))) if e == ep.epoch && !matches!(body, Body::Begin) => {
                        if body == Body::Commit {
                            ep.committed = true;
                        }
                        ep.recs.push((k, body));
                        ep.end = k + 1;
                        gap = 0;
                    }
                    (Some(_), _) => {
                        gap += 1;
                        if gap >= SCAN_GAP {
                            break 'outer;
                        }
                    }
                }
            }
            if (n as u64) < CHUNK as u64 {
                break;
            }
            idx += per;
        }
        Ok(ep)
    }

    /// Both halves' epochs.
    pub fn epochs(&self) -> Result<Vec<Epoch>, String> {
        let mut v = Vec::new();
        for h in 0..2 {
            if let Some(e) = self.scan(h)? {
                v.push(e);
            }
        }
        Ok(v)
    }
}

/// The newest committed epoch, if any.
pub fn newest_committed(eps: &[Epoch]) -> Option<&Epoch> {
    eps.iter().filter(|e| e.committed).max_by_key(|e| e.epoch)
}

// ---------------------------------------------------------------------------------------------
// Shared log cursor (workers are forked processes; the next free sector is in shared memory)

struct Cursor {
    ptr: *mut AtomicU64,
}

impl Cursor {
    fn new(start: u64) -> Result<Cursor, String> {
        // SAFETY: an anonymous shared mapping of one page; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap: {}", Errno::last()));
        }
        let ptr = p.cast::<AtomicU64>();
        // SAFETY: the mapping is page-aligned, writable, zero-filled and at least 8 bytes long;
        // an AtomicU64 has the layout of a u64, and this is the only reference so far.
        unsafe { (*ptr).store(start, Ordering::SeqCst) };
        Ok(Cursor { ptr })
    }
    fn take(&self) -> u64 {
        // SAFETY: `ptr` points into the shared mapping made in `new`, never unmapped while this
        // process runs; atomics are the only access.
        unsafe { (*self.ptr).fetch_add(1, Ordering::SeqCst) }
    }
}

struct Log {
    dev: LogDev,
    half: u64,
    epoch: u64,
    cur: Cursor,
}

impl Log {
    fn put(&self, body: &Body) -> Result<(), String> {
        let idx = self.cur.take();
        self.dev.put(self.half, idx, self.epoch, body)
    }
}

// ---------------------------------------------------------------------------------------------
// Digests and the tree

pub fn content_digest(data: &[u8]) -> u64 {
    mix64(pattern::hash_bytes(data) ^ data.len() as u64)
}

pub fn xattr_digest(x: &BTreeMap<String, Vec<u8>>) -> u64 {
    let mut b = Vec::new();
    for (k, v) in x {
        b.extend_from_slice(k.as_bytes());
        b.push(0);
        b.extend_from_slice(&(v.len() as u32).to_le_bytes());
        b.extend_from_slice(v);
    }
    pattern::hash_bytes(&b)
}

pub fn entries_digest(e: &BTreeMap<String, u64>) -> u64 {
    let mut b = Vec::new();
    for (k, v) in e {
        b.extend_from_slice(k.as_bytes());
        b.push(0);
        b.extend_from_slice(&v.to_le_bytes());
    }
    pattern::hash_bytes(&b)
}

fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        format!("{a}/{b}")
    }
}

fn parent(p: &str) -> &str {
    p.rfind('/').map(|i| &p[..i]).unwrap_or("")
}

fn base(p: &str) -> &str {
    p.rfind('/').map(|i| &p[i + 1..]).unwrap_or(p)
}

fn abs(root: &Path, rel: &str) -> PathBuf {
    if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    }
}

/// The user.* xattrs of a path.
fn read_xattrs(p: &Path) -> Result<BTreeMap<String, Vec<u8>>, Errno> {
    let mut m = BTreeMap::new();
    for n in sys::listxattr(p)? {
        if n.starts_with("user.") {
            m.insert(n.clone(), sys::getxattr(p, &n)?);
        }
    }
    Ok(m)
}

fn list_dir(p: &Path) -> Result<BTreeMap<String, (u64, u8)>, Errno> {
    let fd = sys::open(p, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let mut buf = vec![0u8; 32768];
    let mut out = BTreeMap::new();
    loop {
        let ents = fd.getdents(&mut buf)?;
        if ents.is_empty() {
            break;
        }
        for e in ents {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            out.insert(String::from_utf8_lossy(&e.name).into_owned(), (e.ino, e.dtype));
        }
    }
    Ok(out)
}

/// One object of a scanned tree.
#[derive(Debug, Clone)]
pub struct Node {
    pub ino: u64,
    pub mode: u32,
    pub nlink: u64,
    pub size: u64,
    pub is_dir: bool,
    /// Regular files: the content digest, or None if it could not be read in full.
    pub digest: Option<u64>,
    pub data: Option<Vec<u8>>,
    pub xattrs: BTreeMap<String, Vec<u8>>,
    /// Directories: name -> inode.
    pub entries: BTreeMap<String, u64>,
}

/// A scanned tree: relative path -> node, plus the problems met on the way.
#[derive(Default)]
pub struct Tree {
    pub nodes: BTreeMap<String, Node>,
    pub problems: Vec<String>,
}

impl Tree {
    pub fn by_ino(&self, ino: u64) -> Vec<&str> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.ino == ino && !n.is_dir)
            .map(|(p, _)| p.as_str())
            .collect()
    }
}

/// Walks `root` (lstat everything, read every file in full, read xattrs, list directories) and
/// checks link counts, `..` and that every entry's inode can be stat'ed. `keep_data` keeps file
/// contents (the workers' model needs them).
pub fn scan_tree(root: &Path, keep_data: bool) -> Tree {
    let mut t = Tree::default();
    let mut stack = vec![(String::new(), None::<u64>)];
    while let Some((rel, parent_ino)) = stack.pop() {
        let p = abs(root, &rel);
        let st = match sys::lstat(&p) {
            Ok(s) => s,
            Err(e) => {
                t.problems.push(format!("{rel}: lstat: {e}"));
                continue;
            }
        };
        let fmt = st.st_mode & libc::S_IFMT;
        let mut node = Node {
            ino: st.st_ino as u64,
            mode: st.st_mode & 0o7777,
            nlink: st.st_nlink as u64,
            size: st.st_size as u64,
            is_dir: fmt == libc::S_IFDIR,
            digest: None,
            data: None,
            xattrs: BTreeMap::new(),
            entries: BTreeMap::new(),
        };
        match read_xattrs(&p) {
            Ok(x) => node.xattrs = x,
            Err(e) => t.problems.push(format!("{rel}: xattrs: {e}")),
        }
        if fmt == libc::S_IFDIR {
            if let Some(pi) = parent_ino {
                match sys::lstat(p.join("..")) {
                    Ok(pp) if pp.st_ino as u64 == pi => {}
                    Ok(pp) => t.problems.push(format!("{rel}: '..' is inode {}, parent is {pi}", pp.st_ino)),
                    Err(e) => t.problems.push(format!("{rel}: lstat ..: {e}")),
                }
            }
            match list_dir(&p) {
                Ok(ents) => {
                    let mut subdirs = 0u64;
                    for (name, (ino, dtype)) in ents {
                        let crel = join(&rel, &name);
                        match sys::lstat(abs(root, &crel)) {
                            Ok(cs) => {
                                if cs.st_ino as u64 != ino {
                                    t.problems.push(format!("{crel}: readdir inode {ino}, lstat inode {}", cs.st_ino));
                                }
                                let cdir = cs.st_mode & libc::S_IFMT == libc::S_IFDIR;
                                if dtype != libc::DT_UNKNOWN && (dtype == libc::DT_DIR) != cdir {
                                    t.problems.push(format!("{crel}: readdir type {dtype} disagrees with the mode"));
                                }
                                if cdir {
                                    subdirs += 1;
                                }
                                stack.push((crel, Some(node.ino)));
                            }
                            Err(e) => t.problems.push(format!("{crel}: listed but lstat fails: {e}")),
                        }
                        node.entries.insert(name, ino);
                    }
                    if node.nlink != 2 + subdirs {
                        t.problems.push(format!("{rel}/: link count {}, expected {} (2 + {subdirs} subdirectories)", node.nlink, 2 + subdirs));
                    }
                }
                Err(e) => t.problems.push(format!("{rel}: readdir: {e}")),
            }
        } else if fmt == libc::S_IFREG {
            match sys::read_file(&p) {
                Ok(d) if d.len() as u64 == node.size => {
                    node.digest = Some(content_digest(&d));
                    if keep_data {
                        node.data = Some(d);
                    }
                }
                Ok(d) => t.problems.push(format!("{rel}: read {} bytes, size is {}", d.len(), node.size)),
                Err(e) => t.problems.push(format!("{rel}: read: {e}")),
            }
        } else {
            t.problems.push(format!("{rel}: unexpected file type {:o}", fmt));
        }
        t.nodes.insert(rel, node);
    }
    // link counts of regular files: every name of an inode is in the tree (it is the whole fs
    // below root, and the workload makes no links out of it)
    let mut names: HashMap<u64, u64> = HashMap::new();
    for n in t.nodes.values().filter(|n| !n.is_dir) {
        *names.entry(n.ino).or_default() += 1;
    }
    for (p, n) in t.nodes.iter().filter(|(_, n)| !n.is_dir) {
        let c = names.get(&n.ino).copied().unwrap_or(0);
        if n.nlink != c {
            t.problems.push(format!("{p}: link count {}, {c} names found", n.nlink));
        }
    }
    t
}

// ---------------------------------------------------------------------------------------------
// Verification

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub epoch: u64,
    pub records: u64,
    pub files_checked: u64,
    pub dirs_checked: u64,
    pub lost: Vec<String>,
    pub tree: Vec<String>,
}

/// The records of an epoch still standing at its end (no intent logged after them).
#[derive(Debug, Default, Clone)]
pub struct Standing {
    /// Directory entries `path -> inode` made durable by a file fsync (or the baseline).
    pub entries: BTreeMap<String, FileRec>,
    /// Inode contents and attributes made durable.
    pub contents: BTreeMap<u64, FileRec>,
    /// Directories whose entries were made durable.
    pub dirs: BTreeMap<String, DirRec>,
}

pub fn standing(ep: &Epoch) -> Standing {
    let mut entries: BTreeMap<String, (FileRec, bool)> = BTreeMap::new();
    let mut content: BTreeMap<u64, Option<FileRec>> = BTreeMap::new();
    let mut dirs: BTreeMap<String, Option<DirRec>> = BTreeMap::new();
    for (_, b) in &ep.recs {
        match b {
            Body::File(f) => {
                entries.insert(f.path.clone(), (f.clone(), true));
                content.insert(f.ino, Some(f.clone()));
            }
            Body::Dir(d) => {
                dirs.insert(d.path.clone(), Some(d.clone()));
            }
            Body::Intent(keys) => {
                for k in keys {
                    match k {
                        Key::Path(p) => {
                            if let Some(e) = entries.get_mut(p) {
                                e.1 = false;
                            }
                        }
                        Key::Ino(i) => {
                            content.insert(*i, None);
                        }
                        Key::Dir(p) => {
                            dirs.insert(p.clone(), None);
                        }
                    }
                }
            }
            Body::Begin | Body::Commit => {}
        }
    }
    Standing {
        entries: entries.into_iter().filter(|(_, (_, s))| *s).map(|(p, (f, _))| (p, f)).collect(),
        contents: content.into_iter().filter_map(|(i, f)| f.map(|f| (i, f))).collect(),
        dirs: dirs.into_iter().filter_map(|(p, d)| d.map(|d| (p, d))).collect(),
    }
}

/// Checks the standing records of `ep` against `tree`.
pub fn check_epoch(ep: &Epoch, tree: &Tree) -> Verdict {
    let mut v = Verdict {
        epoch: ep.epoch,
        records: ep.recs.len() as u64,
        tree: tree.problems.clone(),
        ..Verdict::default()
    };
    let st = standing(ep);
    for (path, f) in &st.entries {
        v.files_checked += 1;
        match tree.nodes.get(path) {
            None => v.lost.push(format!("{path}: fsync'd file (inode {}) missing", f.ino)),
            Some(n) if n.is_dir || n.ino != f.ino => v.lost.push(format!(
                "{path}: fsync'd entry names inode {}, found {} inode {}",
                f.ino,
                if n.is_dir { "directory" } else { "file" },
                n.ino
            )),
            Some(_) => {}
        }
    }
    for (ino, f) in &st.contents {
        v.files_checked += 1;
        let at = tree.by_ino(*ino);
        let p = match at.first() {
            Some(p) => *p,
            None => {
                v.lost.push(format!("{}: fsync'd inode {ino} not found anywhere in the tree", f.path));
                continue;
            }
        };
        let n = &tree.nodes[p];
        let mut bad = Vec::new();
        if n.size != f.size {
            bad.push(format!("size {} (expected {})", n.size, f.size));
        }
        if n.digest != Some(f.digest) {
            bad.push(format!(
                "content digest {} (expected {:016x})",
                n.digest.map(|d| format!("{d:016x}")).unwrap_or_else(|| "unreadable".into()),
                f.digest
            ));
        }
        if f.flags & F_DATASYNC == 0 {
            if n.mode != f.mode {
                bad.push(format!("mode {:o} (expected {:o})", n.mode, f.mode));
            }
            if n.nlink != u64::from(f.nlink) {
                bad.push(format!("link count {} (expected {})", n.nlink, f.nlink));
            }
            if xattr_digest(&n.xattrs) != f.xdigest {
                bad.push(format!("xattrs {:?} differ", n.xattrs.keys().collect::<Vec<_>>()));
            }
        }
        if !bad.is_empty() {
            v.lost.push(format!("{p}: fsync'd inode {ino} (recorded at {}): {}", f.path, bad.join(", ")));
        }
    }
    for (path, d) in &st.dirs {
        v.dirs_checked += 1;
        match tree.nodes.get(path) {
            None => v.lost.push(format!("{}/: fsync'd directory missing", path)),
            Some(n) if !n.is_dir || n.ino != d.ino => {
                v.lost.push(format!("{path}/: fsync'd directory (inode {}) is now inode {}", d.ino, n.ino))
            }
            Some(n) => {
                if n.entries.len() as u32 != d.count || entries_digest(&n.entries) != d.digest {
                    v.lost.push(format!(
                        "{path}/: fsync'd directory has {} entries {:?}, expected {} (digest differs)",
                        n.entries.len(),
                        n.entries.keys().collect::<Vec<_>>(),
                        d.count
                    ));
                }
            }
        }
    }
    v
}

pub struct VerifyOpts {
    pub dir: PathBuf,
    pub log: PathBuf,
    pub half_sectors: u64,
}

/// `powercut verify`: prints the problems and `POWERCUT-VERIFY: ...`, then `N passed, N failed`.
pub fn verify(o: &VerifyOpts) -> i32 {
    let dev = match LogDev::open(&o.log, o.half_sectors) {
        Ok(d) => d,
        Err(e) => {
            println!("FAIL - powercut log: {e}");
            println!("POWERCUT-VERIFY: epoch 0, 0 records, 0 files, 0 dirs, lost=1 tree=0");
            println!("0 passed, 1 failed");
            return 1;
        }
    };
    let eps = match dev.epochs() {
        Ok(e) => e,
        Err(e) => {
            println!("FAIL - powercut log: {e}");
            println!("POWERCUT-VERIFY: epoch 0, 0 records, 0 files, 0 dirs, lost=1 tree=0");
            println!("0 passed, 1 failed");
            return 1;
        }
    };
    let ep = match newest_committed(&eps) {
        Some(e) => e.clone(),
        None => {
            println!("FAIL - powercut log: no committed epoch (a check that cannot run fails)");
            println!("POWERCUT-VERIFY: epoch 0, 0 records, 0 files, 0 dirs, lost=1 tree=0");
            println!("0 passed, 1 failed");
            return 1;
        }
    };
    let t0 = Instant::now();
    let tree = scan_tree(&o.dir, false);
    let v = check_epoch(&ep, &tree);
    for l in &v.lost {
        println!("FAIL - lost: {l}");
    }
    for p in &v.tree {
        println!("FAIL - tree: {p}");
    }
    let checks = v.files_checked + v.dirs_checked;
    let p = checks.saturating_sub(v.lost.len() as u64) + u64::from(v.tree.is_empty());
    let f = v.lost.len() as u64 + v.tree.len() as u64;
    println!(
        "POWERCUT-VERIFY: epoch {}, {} records, {} files, {} dirs, {} tree nodes, lost={} tree={} ({} ms)",
        v.epoch,
        v.records,
        v.files_checked,
        v.dirs_checked,
        tree.nodes.len(),
        v.lost.len(),
        v.tree.len(),
        t0.elapsed().as_millis()
    );
    println!("{p} passed, {f} failed");
    i32::from(f != 0)
}

// ---------------------------------------------------------------------------------------------
// The workload

pub struct RunOpts {
    pub dir: PathBuf,
    pub log: PathBuf,
    pub half_sectors: u64,
    pub procs: u32,
    pub seed: u64,
    pub seconds: u64,
}

#[derive(Debug, Clone)]
struct Obj {
    data: Vec<u8>,
    mode: u32,
    xattrs: BTreeMap<String, Vec<u8>>,
    names: BTreeSet<String>,
}

/// One worker's model of its subtree (exact while no cut happens).
#[derive(Debug, Clone, Default)]
struct Model {
    root: String,
    files: BTreeMap<String, u64>,
    objs: HashMap<u64, Obj>,
    dirs: BTreeMap<String, u64>,
}

impl Model {
    fn from_tree(root: &str, t: &Tree) -> Result<Model, String> {
        let mut m = Model {
            root: root.to_string(),
            ..Model::default()
        };
        let pre = format!("{root}/");
        for (p, n) in &t.nodes {
            if !root.is_empty() && p != root && !p.starts_with(&pre) {
                continue;
            }
            if n.is_dir {
                m.dirs.insert(p.clone(), n.ino);
                continue;
            }
            let data = n.data.clone().ok_or_else(|| format!("{p}: unreadable"))?;
            m.files.insert(p.clone(), n.ino);
            let o = m.objs.entry(n.ino).or_insert_with(|| Obj {
                data,
                mode: n.mode,
                xattrs: n.xattrs.clone(),
                names: BTreeSet::new(),
            });
            o.names.insert(p.clone());
        }
        if !m.dirs.contains_key(root) {
            return Err(format!("{root}: no such directory"));
        }
        Ok(m)
    }

    fn entries(&self, d: &str) -> BTreeMap<String, u64> {
        let mut e = BTreeMap::new();
        for (p, i) in self.files.iter().chain(self.dirs.iter()) {
            if p != d && parent(p) == d {
                e.insert(base(p).to_string(), *i);
            }
        }
        e
    }

    fn file_rec(&self, path: &str, flags: u8) -> Option<FileRec> {
        let ino = *self.files.get(path)?;
        let o = self.objs.get(&ino)?;
        Some(FileRec {
            flags,
            ino,
            size: o.data.len() as u64,
            digest: content_digest(&o.data),
            mode: o.mode,
            nlink: o.names.len() as u32,
            xdigest: xattr_digest(&o.xattrs),
            path: path.to_string(),
        })
    }

    fn dir_rec(&self, d: &str) -> Option<DirRec> {
        let ino = *self.dirs.get(d)?;
        let e = self.entries(d);
        Some(DirRec {
            ino,
            count: e.len() as u32,
            digest: entries_digest(&e),
            path: d.to_string(),
        })
    }
}

struct Worker<'a> {
    id: u32,
    dir: &'a Path,
    log: Log,
    rng: Rng,
    m: Model,
    durable: HashSet<Key>,
    ops: BTreeMap<&'static str, u64>,
    errors: u64,
    enospc: u64,
    serial: u64,
}

fn fstat_ino(fd: &Fd) -> Result<u64, Errno> {
    fd.fstat().map(|s| s.st_ino as u64)
}

impl<'a> Worker<'a> {
    fn p(&self, rel: &str) -> PathBuf {
        abs(self.dir, rel)
    }

    /// Logs (durably) an intent for the standing keys among `keys` before an operation.
    fn intent(&mut self, keys: Vec<Key>) -> Result<(), String> {
        let mut k: Vec<Key> = keys.into_iter().filter(|k| self.durable.contains(k)).collect();
        k.sort();
        k.dedup();
        if k.is_empty() {
            return Ok(());
        }
        for chunk in k.chunks(6) {
            self.log.put(&Body::Intent(chunk.to_vec()))?;
        }
        for x in k {
            self.durable.remove(&x);
        }
        Ok(())
    }

    /// A path in `dir` that names nothing now (the model is the whole subtree).
    fn fresh_name(&mut self, dir: &str, prefix: &str) -> String {
        loop {
            self.serial += 1;
            let p = join(dir, &format!("{prefix}{}", self.serial));
            if !self.m.files.contains_key(&p) && !self.m.dirs.contains_key(&p) {
                return p;
            }
        }
    }

    fn pick_file(&mut self) -> Option<String> {
        if self.m.files.is_empty() {
            return None;
        }
        let i = self.rng.below(self.m.files.len() as u64) as usize;
        self.m.files.keys().nth(i).cloned()
    }

    fn pick_dir(&mut self) -> String {
        let i = self.rng.below(self.m.dirs.len() as u64) as usize;
        self.m.dirs.keys().nth(i).cloned().unwrap_or_else(|| self.m.root.clone())
    }

    fn random_data(&mut self, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        let key = self.rng.next_u64();
        pattern::fill(key, 0, &mut b);
        b
    }

    fn rand_len(&mut self) -> usize {
        // mostly small, sometimes several blocks
        match self.rng.below(10) {
            0..=4 => self.rng.range(1, 4096) as usize,
            5..=7 => self.rng.range(1, 20000) as usize,
            _ => self.rng.range(1, 70000) as usize,
        }
    }

    /// Re-reads the subtree after an operation failed part-way (ENOSPC, an error).
    fn resync(&mut self) -> Result<(), String> {
        let t = scan_tree(self.dir, true);
        let root = self.m.root.clone();
        let pre = format!("{root}/");
        let mut sub = Tree::default();
        for (p, n) in t.nodes {
            if p == root || p.starts_with(&pre) {
                sub.nodes.insert(p, n);
            }
        }
        self.m = Model::from_tree(&root, &sub)?;
        Ok(())
    }

    fn fail(&mut self, what: &str, e: Errno) -> Result<(), String> {
        if e.0 == libc::ENOSPC {
            self.enospc += 1;
        } else {
            self.errors += 1;
            println!("FAIL - powercut worker {}: {what}: {e}", self.id);
        }
        self.resync()
    }

    fn op(&mut self) -> Result<(), String> {
        let nfiles = self.m.files.len();
        let r = self.rng.below(100);
        let name = match r {
            0..=11 => "create",
            12..=25 => "write",
            26..=34 => "append",
            35..=40 => "truncate",
            41..=48 => "rename",
            49..=52 => "link",
            53..=59 => "unlink",
            60..=62 => "mkdir",
            63..=64 => "rmdir",
            65..=70 => "xattr",
            71..=73 => "chmod",
            74..=90 => "fsync",
            _ => "fsyncdir",
        };
        let name = match name {
            "create" | "link" if nfiles >= MAX_FILES => "unlink",
            "unlink" | "rename" | "write" | "append" | "truncate" | "xattr" | "chmod" | "fsync" | "link"
                if nfiles == 0 =>
            {
                "create"
            }
            n => n,
        };
        *self.ops.entry(name).or_default() += 1;
        match name {
            "create" => {
                let d = self.pick_dir();
                let rel = self.fresh_name(&d, "f");
                let len = if self.rng.chance(15) { 0 } else { self.rand_len() };
                let data = self.random_data(len);
                self.intent(vec![Key::Dir(d.clone()), Key::Path(rel.clone())])?;
                let fd = match sys::open(self.p(&rel), libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644) {
                    Ok(f) => f,
                    Err(e) => return self.fail("create", e),
                };
                let ino = match fstat_ino(&fd) {
                    Ok(i) => i,
                    Err(e) => return self.fail("fstat", e),
                };
                self.m.files.insert(rel.clone(), ino);
                self.m.objs.insert(
                    ino,
                    Obj {
                        data: Vec::new(),
                        mode: 0o644,
                        xattrs: BTreeMap::new(),
                        names: [rel.clone()].into_iter().collect(),
                    },
                );
                if let Err((_, e)) = fd.pwrite_all(&data, 0) {
                    return self.fail("write new file", e);
                }
                if let Some(o) = self.m.objs.get_mut(&ino) {
                    o.data = data;
                }
            }
            "write" | "append" => {
                let rel = self.pick_file().unwrap_or_default();
                let ino = self.m.files[&rel];
                let size = self.m.objs[&ino].data.len();
                let mut len = self.rand_len();
                let off = if name == "append" {
                    size
                } else if self.rng.chance(10) {
                    size + self.rng.range(1, 9000) as usize
                } else {
                    self.rng.below(size as u64 + 1) as usize
                };
                if off + len > MAX_SIZE {
                    if off >= MAX_SIZE {
                        return Ok(());
                    }
                    len = MAX_SIZE - off;
                }
                let data = self.random_data(len);
                self.intent(vec![Key::Ino(ino)])?;
                let flags = if name == "append" { libc::O_WRONLY | libc::O_APPEND } else { libc::O_WRONLY };
                let fd = match sys::open(self.p(&rel), flags, 0) {
                    Ok(f) => f,
                    Err(e) => return self.fail("open for write", e),
                };
                let r = if name == "append" {
                    let mut done = 0;
                    let mut res = Ok(());
                    while done < data.len() {
                        match fd.write(&data[done..]) {
                            Ok(0) => {
                                res = Err(Errno(libc::EIO));
                                break;
                            }
                            Ok(n) => done += n,
                            Err(e) => {
                                res = Err(e);
                                break;
                            }
                        }
                    }
                    res
                } else {
                    fd.pwrite_all(&data, off as u64).map_err(|(_, e)| e)
                };
                if let Err(e) = r {
                    return self.fail(name, e);
                }
                if let Some(o) = self.m.objs.get_mut(&ino) {
                    if o.data.len() < off + len {
                        o.data.resize(off + len, 0);
                    }
                    o.data[off..off + len].copy_from_slice(&data);
                }
            }
            "truncate" => {
                let rel = self.pick_file().unwrap_or_default();
                let ino = self.m.files[&rel];
                let size = self.m.objs[&ino].data.len();
                let new = match self.rng.below(4) {
                    0 => 0,
                    1 => (size + self.rng.range(1, 30000) as usize).min(MAX_SIZE),
                    _ => self.rng.below(size as u64 + 1) as usize,
                };
                self.intent(vec![Key::Ino(ino)])?;
                if let Err(e) = sys::truncate(self.p(&rel), new as u64) {
                    return self.fail("truncate", e);
                }
                if let Some(o) = self.m.objs.get_mut(&ino) {
                    o.data.resize(new, 0);
                }
            }
            "rename" => {
                let from = self.pick_file().unwrap_or_default();
                let ino = self.m.files[&from];
                // over an existing file (another inode) or to a fresh name
                let over: Vec<String> = self
                    .m
                    .files
                    .iter()
                    .filter(|(_, i)| **i != ino)
                    .map(|(p, _)| p.clone())
                    .collect();
                let to = if !over.is_empty() && self.rng.chance(40) {
                    over[self.rng.below(over.len() as u64) as usize].clone()
                } else {
                    let d = self.pick_dir();
                    self.fresh_name(&d, "r")
                };
                let victim = self.m.files.get(&to).copied();
                let mut keys = vec![
                    Key::Path(from.clone()),
                    Key::Path(to.clone()),
                    Key::Dir(parent(&from).to_string()),
                    Key::Dir(parent(&to).to_string()),
                ];
                if let Some(v) = victim {
                    keys.push(Key::Ino(v));
                }
                self.intent(keys)?;
                if let Err(e) = sys::rename(self.p(&from), self.p(&to)) {
                    return self.fail("rename", e);
                }
                if let Some(v) = victim {
                    if let Some(o) = self.m.objs.get_mut(&v) {
                        o.names.remove(&to);
                        if o.names.is_empty() {
                            self.m.objs.remove(&v);
                        }
                    }
                }
                self.m.files.remove(&from);
                self.m.files.insert(to.clone(), ino);
                if let Some(o) = self.m.objs.get_mut(&ino) {
                    o.names.remove(&from);
                    o.names.insert(to);
                }
            }
            "link" => {
                let from = self.pick_file().unwrap_or_default();
                let ino = self.m.files[&from];
                if self.m.objs[&ino].names.len() >= MAX_LINKS {
                    return Ok(());
                }
                let d = self.pick_dir();
                let to = self.fresh_name(&d, "l");
                self.intent(vec![Key::Dir(d), Key::Path(to.clone()), Key::Ino(ino)])?;
                if let Err(e) = sys::link(self.p(&from), self.p(&to)) {
                    return self.fail("link", e);
                }
                self.m.files.insert(to.clone(), ino);
                if let Some(o) = self.m.objs.get_mut(&ino) {
                    o.names.insert(to);
                }
            }
            "unlink" => {
                let rel = self.pick_file().unwrap_or_default();
                let ino = self.m.files[&rel];
                self.intent(vec![Key::Path(rel.clone()), Key::Dir(parent(&rel).to_string()), Key::Ino(ino)])?;
                if let Err(e) = sys::unlink(self.p(&rel)) {
                    return self.fail("unlink", e);
                }
                self.m.files.remove(&rel);
                if let Some(o) = self.m.objs.get_mut(&ino) {
                    o.names.remove(&rel);
                    if o.names.is_empty() {
                        self.m.objs.remove(&ino);
                    }
                }
            }
            "mkdir" => {
                if self.m.dirs.len() >= MAX_DIRS {
                    return Ok(());
                }
                let mut d = self.pick_dir();
                if d.matches('/').count() >= 3 {
                    d = self.m.root.clone();
                }
                let rel = self.fresh_name(&d, "d");
                self.intent(vec![Key::Dir(d)])?;
                if let Err(e) = sys::mkdir(self.p(&rel), 0o755) {
                    return self.fail("mkdir", e);
                }
                match sys::lstat(self.p(&rel)) {
                    Ok(s) => {
                        self.m.dirs.insert(rel, s.st_ino as u64);
                    }
                    Err(e) => return self.fail("lstat new dir", e),
                }
            }
            "rmdir" => {
                let empty: Vec<String> = self
                    .m
                    .dirs
                    .keys()
                    .filter(|d| **d != self.m.root && self.m.entries(d).is_empty())
                    .cloned()
                    .collect();
                if empty.is_empty() {
                    return Ok(());
                }
                let d = empty[self.rng.below(empty.len() as u64) as usize].clone();
                self.intent(vec![Key::Dir(parent(&d).to_string()), Key::Dir(d.clone())])?;
                if let Err(e) = sys::rmdir(self.p(&d)) {
                    return self.fail("rmdir", e);
                }
                self.m.dirs.remove(&d);
            }
            "xattr" => {
                let rel = self.pick_file().unwrap_or_default();
                let ino = self.m.files[&rel];
                let n = XATTR_NAMES[self.rng.below(XATTR_NAMES.len() as u64) as usize];
                let remove = self.m.objs[&ino].xattrs.contains_key(n) && self.rng.chance(30);
                let len = self.rng.range(1, 200) as usize;
                let val = self.random_data(len);
                self.intent(vec![Key::Ino(ino)])?;
                if remove {
                    if let Err(e) = sys::removexattr(self.p(&rel), n) {
                        return self.fail("removexattr", e);
                    }
                    if let Some(o) = self.m.objs.get_mut(&ino) {
                        o.xattrs.remove(n);
                    }
                } else {
                    if let Err(e) = sys::setxattr(self.p(&rel), n, &val, 0, false) {
                        return self.fail("setxattr", e);
                    }
                    if let Some(o) = self.m.objs.get_mut(&ino) {
                        o.xattrs.insert(n.to_string(), val);
                    }
                }
            }
            "chmod" => {
                let rel = self.pick_file().unwrap_or_default();
                let ino = self.m.files[&rel];
                let mode = MODES[self.rng.below(MODES.len() as u64) as usize];
                self.intent(vec![Key::Ino(ino)])?;
                if let Err(e) = sys::chmod(self.p(&rel), mode) {
                    return self.fail("chmod", e);
                }
                if let Some(o) = self.m.objs.get_mut(&ino) {
                    o.mode = mode;
                }
            }
            "fsync" => {
                let rel = self.pick_file().unwrap_or_default();
                let datasync = self.rng.chance(40);
                let fd = match sys::open(self.p(&rel), libc::O_RDONLY, 0) {
                    Ok(f) => f,
                    Err(e) => return self.fail("open for fsync", e),
                };
                let r = if datasync { fd.fdatasync() } else { fd.fsync() };
                if let Err(e) = r {
                    return self.fail(if datasync { "fdatasync" } else { "fsync" }, e);
                }
                let flags = if datasync { F_DATASYNC } else { 0 };
                if let Some(rec) = self.m.file_rec(&rel, flags) {
                    self.log.put(&Body::File(rec.clone()))?;
                    self.durable.insert(Key::Path(rel));
                    self.durable.insert(Key::Ino(rec.ino));
                }
            }
            _ => {
                let d = self.pick_dir();
                let fd = match sys::open(self.p(&d), libc::O_RDONLY | libc::O_DIRECTORY, 0) {
                    Ok(f) => f,
                    Err(e) => return self.fail("open dir", e),
                };
                if let Err(e) = fd.fsync() {
                    return self.fail("fsync dir", e);
                }
                if let Some(rec) = self.m.dir_rec(&d) {
                    self.log.put(&Body::Dir(rec))?;
                    self.durable.insert(Key::Dir(d));
                }
            }
        }
        Ok(())
    }

    fn run(&mut self, deadline: Instant) -> i32 {
        let mut n = 0u64;
        let t0 = Instant::now();
        while Instant::now() < deadline {
            if let Err(e) = self.op() {
                if e == LOG_FULL {
                    println!("POWERCUT-LOG-FULL: worker {} stops", self.id);
                } else {
                    println!("FAIL - powercut worker {}: {e}", self.id);
                    self.errors += 1;
                }
                break;
            }
            n += 1;
        }
        let ops: Vec<String> = self.ops.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "POWERCUT-WORKER {}: {n} operations in {} ms, {} errors, {} ENOSPC ({})",
            self.id,
            t0.elapsed().as_millis(),
            self.errors,
            self.enospc,
            ops.join(" ")
        );
        i32::from(self.errors != 0)
    }
}

/// `powercut run`: baseline epoch, then `procs` workers for `seconds` (the host usually kills
/// the machine first). Prints `POWERCUT-WORKLOAD-START` once the baseline is committed.
pub fn run(o: &RunOpts) -> i32 {
    match run_inner(o) {
        Ok(rc) => rc,
        Err(e) => {
            println!("FAIL - powercut run: {e}");
            println!("POWERCUT-WORKLOAD-ERROR: {e}");
            println!("0 passed, 1 failed");
            1
        }
    }
}

fn run_inner(o: &RunOpts) -> Result<i32, String> {
    let dev = LogDev::open(&o.log, o.half_sectors)?;
    let eps = dev.epochs()?;
    let newest = newest_committed(&eps);
    let half = match newest {
        Some(e) => 1 - e.half,
        None => 0,
    };
    let epoch = eps.iter().map(|e| e.epoch).max().unwrap_or(0) + 1;
    for k in 0..o.procs {
        let p = o.dir.join(format!("w{k}"));
        match sys::mkdir(&p, 0o755) {
            Ok(()) | Err(Errno(libc::EEXIST)) => {}
            Err(e) => return Err(format!("mkdir {}: {e}", p.display())),
        }
    }
    sys::syncfs_path(&o.dir).map_err(|e| format!("syncfs: {e}"))?;
    let tree = scan_tree(&o.dir, true);
    if !tree.problems.is_empty() {
        return Err(format!("the tree has problems before the workload: {}", tree.problems.join("; ")));
    }
    // baseline: everything is durable after syncfs
    dev.put(half, 0, epoch, &Body::Begin)?;
    let mut idx = 1u64;
    let whole = Model::from_tree("", &tree)?;
    let mut durable = HashSet::new();
    for p in whole.files.keys() {
        if let Some(rec) = whole.file_rec(p, F_BASELINE) {
            dev.put(half, idx, epoch, &Body::File(rec.clone()))?;
            idx += 1;
            durable.insert(Key::Path(p.clone()));
            durable.insert(Key::Ino(rec.ino));
        }
    }
    for d in whole.dirs.keys() {
        if let Some(rec) = whole.dir_rec(d) {
            dev.put(half, idx, epoch, &Body::Dir(rec))?;
            idx += 1;
            durable.insert(Key::Dir(d.clone()));
        }
    }
    dev.put(half, idx, epoch, &Body::Commit)?;
    idx += 1;
    println!(
        "POWERCUT-WORKLOAD-START: epoch {epoch} in log half {half}, {} files, {} dirs, {} procs, seed {}{}",
        whole.files.len(),
        whole.dirs.len(),
        o.procs,
        o.seed,
        if dev.direct { "" } else { " (log without O_DIRECT)" }
    );
    let cur = Cursor::new(idx)?;
    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    let mut kids = Vec::new();
    for k in 0..o.procs {
        let root = format!("w{k}");
        let m = Model::from_tree(&root, &tree)?;
        let dur: HashSet<Key> = durable
            .iter()
            .filter(|key| match key {
                Key::Path(p) | Key::Dir(p) => p == &root || p.starts_with(&format!("{root}/")),
                Key::Ino(i) => m.objs.contains_key(i),
            })
            .cloned()
            .collect();
        let log = Log {
            dev: dev.reopen()?,
            half,
            epoch,
            cur: Cursor { ptr: cur.ptr },
        };
        // SAFETY: fork in a single-threaded process; the child only runs this worker and exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(format!("fork: {}", Errno::last()));
        }
        if pid == 0 {
            let mut w = Worker {
                id: k,
                dir: &o.dir,
                log,
                rng: Rng::new(o.seed ^ mix64(u64::from(k) + 1)),
                m,
                durable: dur,
                ops: BTreeMap::new(),
                errors: 0,
                enospc: 0,
                serial: mix64(o.seed ^ u64::from(k)) % 100_000,
            };
            let rc = w.run(deadline);
            use std::io::Write;
            let _ = std::io::stdout().flush();
            // SAFETY: ends the child without running the parent's destructors twice.
            unsafe { libc::_exit(rc) };
        }
        kids.push(pid);
    }
    let mut failed = 0;
    for pid in kids {
        let mut st = 0;
        // SAFETY: waiting for our own child; `st` is a valid int.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        if !(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0) {
            failed += 1;
        }
    }
    let passed = o.procs - failed;
    println!("POWERCUT-WORKLOAD-END: {passed} workers ok, {failed} failed");
    println!("{passed} passed, {failed} failed");
    Ok(i32::from(failed != 0))
}
