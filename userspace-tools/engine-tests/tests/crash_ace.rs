//! ACE-style systematic crash workloads (after CrashMonkey's Automatic Crash Explorer): every
//! workload of one and of two operations, and a bounded set of three, over a small tree, each
//! operation followed by a persistence variant, with a power cut after every device operation.
//!
//! The tree (`template`): files `/A` (10000 bytes, xattr `user.a`), `/B` (100 bytes), directory
//! `/D` with file `/D/A` (5000 bytes), empty directory `/E`; new names `/C`, `/D/C` (files),
//! `/F`, `/D/F` (directories), `/S` (symlink). The operations (`ops()`, 52 of them): create,
//! mkdir, symlink; `write` (overwrite inside a block, across blocks, append, past EOF, into a
//! new file); `write_blocks` as the kernel's write-back calls it (under a budget reservation:
//! overwrite, rewrite of the EOF block and extension, extension of a small file, past EOF, a
//! new file); truncate (to 0, into a block, up); link (in and across directories); unlink (also
//! of an open file, which stays an orphan); rmdir; rename (to a new name, over an existing file,
//! across directories, of directories, over an empty directory); RENAME_EXCHANGE (files, across
//! directories, directories, a file with a directory); setxattr (replace, new and large, on a
//! directory), removexattr; chmod, chown and utimes through setattr. Persistence after each
//! operation: none, fsync of the touched object, fdatasync of it, fsync of its parent
//! directory, sync. (In the engine fdatasync is the same call as fsync, and fsync of any inode
//! writes out every head and flushes the device, so the three differ in the inode passed, not in
//! what reaches the medium: one-operation workloads take all five variants; longer ones take
//! none, sync, or one of the three fsync variants in rotation.)
//!
//! The oracle (`ferrofs_engine_tests::crashcheck`): the recovered tree equals, in every
//! attribute, a state the workload passed through since the last completed persistence point
//! (or the interrupted data write partly done: whole blocks, a prefix, the size only over new
//! blocks); fsck is clean; the mount is writable and new work survives a crash and a remount. A
//! workload whose operation is invalid in the model (a missing source, an existing target, a
//! non-empty directory, ...) is not generated; the states of the uninterrupted run are checked
//! against the model (names, link identity, type, mode, uid, gid, nlink, size, content, xattrs).
//!
//! Three media: NAND (32 KiB segments of 512-byte pages), the same with a 4 KiB checkpoint bound
//! (checkpoints inside operations, and inside a long `write`), and a block device with at most 2
//! segments open and a volatile write cache (at each cut all, none or a random subset of the
//! writes since the last flush reach the medium). `cargo test` runs every one-operation workload
//! and a deterministic sample of the longer ones that still has every kind of operation and every
//! persistence variant; `FERROFS_CRASH_FULL=1` (`make crash-full`) runs all of them at every cut
//! point, with recovery cuts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use ferrofs_engine::format::{S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
use ferrofs_engine::{Budget, CreateArgs, Error, Flash, FlashKind, MountOptions, Pairing, PairingScheme, SetAttr, RENAME_EXCHANGE, ROOT_INO};
use ferrofs_engine_tests::crashcheck::{check_after_cut, CutCheck, Oracle, WriteShape, BS};
use ferrofs_engine_tests::snapshot::{snapshot, Snap};
use ferrofs_engine_tests::*;

/// An operation of the generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AOp {
    Create(&'static str),
    Mkdir(&'static str),
    Symlink(&'static str),
    /// The engine's `write` of `len` bytes at `off`.
    Write(&'static str, u64, u64),
    /// `write_blocks` of `n` blocks from block `first`, the last one `last` bytes long.
    WriteBack(&'static str, u64, u64, u64),
    Truncate(&'static str, u64),
    Link(&'static str, &'static str),
    Unlink(&'static str),
    /// Unlink of an open file: it stays an orphan until the end of the workload.
    UnlinkOpen(&'static str),
    Rmdir(&'static str),
    Rename(&'static str, &'static str),
    Exchange(&'static str, &'static str),
    SetXattr(&'static str, &'static str, usize),
    RemoveXattr(&'static str, &'static str),
    Chmod(&'static str, u32),
    Chown(&'static str, u32, u32),
    Utimes(&'static str),
}

/// What follows an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Persist {
    None,
    /// fsync of the object the operation touched.
    Fsync,
    /// fdatasync of it (the engine's fsync).
    Fdatasync,
    /// fsync of its parent directory.
    FsyncParent,
    Sync,
}

const PERSISTS: [Persist; 5] = [Persist::None, Persist::Fsync, Persist::Fdatasync, Persist::FsyncParent, Persist::Sync];

/// Every operation instance.
fn ops() -> Vec<AOp> {
    use AOp::*;
    vec![
        Create("/C"),
        Create("/D/C"),
        Mkdir("/F"),
        Mkdir("/D/F"),
        Symlink("/S"),
        Write("/A", 100, 200),
        Write("/A", 3000, 6000),
        Write("/A", 10000, 3000),
        Write("/A", 20000, 100),
        Write("/D/A", 5000, 9000),
        Write("/C", 0, 5000),
        WriteBack("/A", 0, 2, BS),
        WriteBack("/A", 2, 3, 500),
        WriteBack("/B", 0, 1, BS),
        WriteBack("/D/A", 3, 1, BS),
        WriteBack("/C", 0, 2, 1000),
        Truncate("/A", 0),
        Truncate("/A", 5000),
        Truncate("/A", 30000),
        Truncate("/D/A", 100),
        Link("/A", "/C"),
        Link("/A", "/D/C"),
        Link("/D/A", "/C"),
        Unlink("/A"),
        Unlink("/B"),
        Unlink("/D/A"),
        Unlink("/C"),
        UnlinkOpen("/A"),
        Rmdir("/E"),
        Rmdir("/D"),
        Rmdir("/F"),
        Rename("/A", "/C"),
        Rename("/A", "/B"),
        Rename("/A", "/D/C"),
        Rename("/D/A", "/A"),
        Rename("/B", "/D/A"),
        Rename("/D", "/F"),
        Rename("/E", "/D/F"),
        Rename("/F", "/E"),
        Rename("/C", "/A"),
        Exchange("/A", "/B"),
        Exchange("/A", "/D/A"),
        Exchange("/D", "/E"),
        Exchange("/A", "/D"),
        SetXattr("/A", "user.a", 30),
        SetXattr("/A", "user.b", 3000),
        SetXattr("/D", "user.d", 10),
        RemoveXattr("/A", "user.a"),
        Chmod("/A", 0o600),
        Chmod("/D", 0o700),
        Chown("/B", 1000, 100),
        Utimes("/A"),
    ]
}

/// The operations of the bounded three-operation workloads.
fn ops3() -> Vec<AOp> {
    use AOp::*;
    vec![
        Create("/C"),
        Write("/A", 10000, 3000),
        WriteBack("/A", 2, 3, 500),
        Truncate("/A", 5000),
        Link("/A", "/D/C"),
        Unlink("/B"),
        Rename("/A", "/C"),
        Rename("/D/A", "/A"),
        Exchange("/A", "/B"),
        SetXattr("/A", "user.b", 3000),
        Mkdir("/F"),
        Rmdir("/E"),
    ]
}

fn parent(p: &str) -> &str {
    match p.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &p[..i],
    }
}

fn name(p: &str) -> &str {
    &p[p.rfind('/').map_or(0, |i| i + 1)..]
}

/// The object an operation touched (what its fsync variants sync).
fn touched(op: &AOp) -> &'static str {
    use AOp::*;
    match *op {
        Create(p) | Mkdir(p) | Symlink(p) | Write(p, ..) | WriteBack(p, ..) | Truncate(p, _) => p,
        SetXattr(p, ..) | RemoveXattr(p, _) | Chmod(p, _) | Chown(p, ..) | Utimes(p) => p,
        Link(_, b) | Rename(_, b) => b,
        Exchange(a, _) => a,
        Unlink(p) | UnlinkOpen(p) | Rmdir(p) => parent(p),
    }
}

/// One step of a workload: an operation or a persistence point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Op(AOp),
    Persist(Persist, &'static str),
}

// ------------------------------------------------------------------------------ the model

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Link,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct MObj {
    kind: Kind,
    data: Vec<u8>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    perm: u32,
    uid: u32,
    gid: u32,
}

/// Names, objects and what each operation does to them (without times).
#[derive(Clone, Debug)]
struct Model {
    names: BTreeMap<String, u32>,
    objs: BTreeMap<u32, MObj>,
    next: u32,
}

/// A model object's view: what the uninterrupted run must show apart from times.
#[derive(Debug, PartialEq, Eq)]
struct View {
    /// The first name of the object (link identity).
    first: String,
    kind: Kind,
    perm: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    size: u64,
    data: Vec<u8>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Model {
    fn from_snap(s: &Snap) -> Model {
        let mut m = Model { names: BTreeMap::new(), objs: BTreeMap::new(), next: 0 };
        for (ino, o) in &s.objs {
            let kind = match o.inode.mode & S_IFMT {
                S_IFDIR => Kind::Dir,
                S_IFLNK => Kind::Link,
                _ => Kind::File,
            };
            let i = &o.inode;
            m.objs.insert(*ino as u32, MObj { kind, data: o.data.clone(), xattrs: o.xattrs.clone(), perm: i.mode & 0o7777, uid: i.uid, gid: i.gid });
            m.next = m.next.max(*ino as u32 + 1);
        }
        for (p, ino) in &s.names {
            m.names.insert(p.clone(), *ino as u32);
        }
        m
    }

    fn kind(&self, p: &str) -> Option<Kind> {
        self.names.get(p).map(|id| self.objs[id].kind)
    }

    fn children<'a>(&'a self, d: &'a str) -> impl Iterator<Item = &'a String> + 'a {
        self.names.keys().filter(move |k| k.as_str() != "/" && parent(k) == d)
    }

    fn file_mut(&mut self, p: &str) -> Result<&mut MObj, String> {
        match self.names.get(p) {
            Some(id) if self.objs[id].kind == Kind::File => Ok(self.objs.get_mut(id).unwrap()),
            _ => Err(format!("{p} is not a file")),
        }
    }

    fn new_obj(&mut self, p: &str, kind: Kind, data: Vec<u8>, perm: u32) -> Result<(), String> {
        if self.kind(parent(p)) != Some(Kind::Dir) || self.names.contains_key(p) {
            return Err(format!("cannot create {p}"));
        }
        self.next += 1;
        self.objs.insert(self.next, MObj { kind, data, xattrs: BTreeMap::new(), perm, uid: 0, gid: 0 });
        self.names.insert(p.to_string(), self.next);
        Ok(())
    }

    fn drop_name(&mut self, p: &str) {
        if let Some(id) = self.names.remove(p) {
            if !self.names.values().any(|v| *v == id) {
                self.objs.remove(&id);
            }
        }
    }

    /// Apply an operation (`b`: the content byte of writes); an error if it is invalid.
    fn apply(&mut self, op: &AOp, b: u8) -> Result<(), String> {
        use AOp::*;
        match *op {
            Create(p) => self.new_obj(p, Kind::File, Vec::new(), 0o644)?,
            Mkdir(p) => self.new_obj(p, Kind::Dir, Vec::new(), 0o755)?,
            Symlink(p) => self.new_obj(p, Kind::Link, SYMLINK_TARGET.to_vec(), 0o777)?,
            Write(p, off, len) => {
                let c = &mut self.file_mut(p)?.data;
                let end = (off + len) as usize;
                if c.len() < end {
                    c.resize(end, 0);
                }
                c[off as usize..end].fill(b);
            }
            WriteBack(p, first, n, last) => {
                let c = &mut self.file_mut(p)?.data;
                let end = ((first + n - 1) * BS + last) as usize;
                if last < BS && end < c.len() {
                    return Err("a short block is written back only at EOF".into());
                }
                if c.len() < end {
                    c.resize(end, 0);
                }
                c[(first * BS) as usize..end].fill(b);
            }
            Truncate(p, sz) => self.file_mut(p)?.data.resize(sz as usize, 0),
            Link(a, b2) => {
                if self.kind(a) != Some(Kind::File) || self.kind(parent(b2)) != Some(Kind::Dir) || self.names.contains_key(b2) {
                    return Err(format!("cannot link {a} to {b2}"));
                }
                let id = self.names[a];
                self.names.insert(b2.to_string(), id);
            }
            Unlink(p) | UnlinkOpen(p) => {
                if !matches!(self.kind(p), Some(Kind::File | Kind::Link)) {
                    return Err(format!("cannot unlink {p}"));
                }
                self.drop_name(p);
            }
            Rmdir(p) => {
                if self.kind(p) != Some(Kind::Dir) || self.children(p).next().is_some() {
                    return Err(format!("cannot rmdir {p}"));
                }
                self.drop_name(p);
            }
            Rename(a, b2) => {
                let (ka, kb) = (self.kind(a), self.kind(b2));
                let inside = b2.starts_with(&format!("{a}/"));
                let ok = match (ka, kb) {
                    (None, _) => false,
                    _ if inside || self.kind(parent(b2)) != Some(Kind::Dir) => false,
                    (_, None) => true,
                    (Some(Kind::Dir), Some(Kind::Dir)) => self.children(b2).next().is_none(),
                    (Some(Kind::Dir), _) | (_, Some(Kind::Dir)) => false,
                    _ => self.names[a] != self.names[b2],
                };
                if !ok {
                    return Err(format!("cannot rename {a} to {b2}"));
                }
                self.drop_name(b2);
                let moved: Vec<(String, u32)> = self.names.iter().filter(|(k, _)| *k == a || k.starts_with(&format!("{a}/"))).map(|(k, v)| (k.clone(), *v)).collect();
                for (k, v) in moved {
                    self.names.remove(&k);
                    self.names.insert(format!("{b2}{}", &k[a.len()..]), v);
                }
            }
            Exchange(a, b2) => {
                if self.kind(a).is_none() || self.kind(b2).is_none() || a == b2 || b2.starts_with(&format!("{a}/")) || a.starts_with(&format!("{b2}/")) {
                    return Err(format!("cannot exchange {a} and {b2}"));
                }
                let mut renamed = BTreeMap::new();
                for (k, v) in &self.names {
                    let nk = if k == a || k.starts_with(&format!("{a}/")) {
                        format!("{b2}{}", &k[a.len()..])
                    } else if k == b2 || k.starts_with(&format!("{b2}/")) {
                        format!("{a}{}", &k[b2.len()..])
                    } else {
                        k.clone()
                    };
                    renamed.insert(nk, *v);
                }
                self.names = renamed;
            }
            SetXattr(p, n, len) => {
                let id = *self.names.get(p).ok_or("no such object")?;
                self.objs.get_mut(&id).unwrap().xattrs.insert(n.as_bytes().to_vec(), vec![b; len]);
            }
            RemoveXattr(p, n) => {
                let id = *self.names.get(p).ok_or("no such object")?;
                if self.objs.get_mut(&id).unwrap().xattrs.remove(n.as_bytes()).is_none() {
                    return Err(format!("{p} has no {n}"));
                }
            }
            Chmod(p, mode) => {
                let id = *self.names.get(p).ok_or("no such object")?;
                self.objs.get_mut(&id).unwrap().perm = mode;
            }
            Chown(p, uid, gid) => {
                let id = *self.names.get(p).ok_or("no such object")?;
                let o = self.objs.get_mut(&id).unwrap();
                o.uid = uid;
                o.gid = gid;
            }
            Utimes(p) => {
                self.names.get(p).ok_or("no such object")?;
            }
        }
        Ok(())
    }

    fn view(&self) -> BTreeMap<String, View> {
        let mut v = BTreeMap::new();
        for (p, id) in &self.names {
            let o = &self.objs[id];
            let first = self.names.iter().find(|(_, x)| *x == id).map(|(k, _)| k.clone()).unwrap();
            let (nlink, size) = match o.kind {
                Kind::File => (self.names.values().filter(|x| *x == id).count() as u32, o.data.len() as u64),
                Kind::Link => (1, o.data.len() as u64),
                Kind::Dir => {
                    let subdirs = self.children(p).filter(|c| self.kind(c) == Some(Kind::Dir)).count() as u32;
                    (2 + subdirs, self.children(p).count() as u64)
                }
            };
            v.insert(p.clone(), View { first, kind: o.kind, perm: o.perm, uid: o.uid, gid: o.gid, nlink, size, data: o.data.clone(), xattrs: o.xattrs.clone() });
        }
        v
    }
}

/// A snapshot's view, nlink and size as its inodes say.
fn view_of(s: &Snap) -> BTreeMap<String, View> {
    let mut v = Model::from_snap(s).view();
    for (p, x) in v.iter_mut() {
        let i = &s.objs[&s.names[p]].inode;
        x.nlink = i.nlink;
        x.size = i.size;
    }
    v
}

const SYMLINK_TARGET: &[u8] = b"D/A";

// ------------------------------------------------------------------------------ running

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 24, ..Default::default() }
}

fn reg(perm: u32) -> CreateArgs {
    CreateArgs { mode: S_IFREG | perm, ..Default::default() }
}

/// The tree every workload starts from, on `f`.
fn template_on(f: RamFlash) -> RamFlash {
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
    let a = fs.create(ROOT_INO, b"A", &reg(0o644), ts(1)).unwrap().ino;
    let content: Vec<u8> = (0..10000u32).map(|i| (i % 251) as u8 + 1).collect();
    fs.write(a, 0, &content, ts(1)).unwrap();
    fs.setxattr(a, b"user.a", &[0x61; 20], 0, ts(1)).unwrap();
    let b = fs.create(ROOT_INO, b"B", &reg(0o644), ts(1)).unwrap().ino;
    fs.write(b, 0, &[0x42; 100], ts(1)).unwrap();
    let d = fs.mkdir(ROOT_INO, b"D", 0o755, 0, 0, ts(1)).unwrap().ino;
    let da = fs.create(d, b"A", &reg(0o644), ts(1)).unwrap().ino;
    fs.write(da, 0, &[0x44; 5000], ts(1)).unwrap();
    fs.mkdir(ROOT_INO, b"E", 0o755, 0, 0, ts(1)).unwrap();
    fs.unmount().map_err(|e| e.0).unwrap()
}

fn template() -> RamFlash {
    template_on(RamFlash::new_nand(32 * 1024, 40, 512))
}

fn lookup(fs: &mut Fs, p: &str) -> Result<u64, Error> {
    let mut ino = ROOT_INO;
    for c in p.split('/').filter(|c| !c.is_empty()) {
        ino = fs.lookup(ino, c.as_bytes())?.ino;
    }
    Ok(ino)
}

fn dir_name(fs: &mut Fs, p: &'static str) -> Result<(u64, &'static [u8]), Error> {
    Ok((lookup(fs, parent(p))?, name(p).as_bytes()))
}

/// The content byte of the writes of step `i`.
fn byte(i: usize) -> u8 {
    0xB0u8.wrapping_add(i as u8 * 7)
}

/// Run step `i` of a workload.
fn run_step(fs: &mut Fs, step: &Step, i: usize) -> Result<(), Error> {
    use AOp::*;
    let now = ts(10 + i as i64);
    let b = byte(i);
    match *step {
        Step::Persist(p, target) => match p {
            Persist::None => {}
            Persist::Sync => fs.sync()?,
            Persist::Fsync | Persist::Fdatasync => {
                let ino = lookup(fs, target)?;
                fs.fsync(ino)?;
            }
            Persist::FsyncParent => {
                let ino = lookup(fs, parent(target))?;
                fs.fsync(ino)?;
            }
        },
        Step::Op(op) => match op {
            Create(p) => {
                let (d, n) = dir_name(fs, p)?;
                fs.create(d, n, &reg(0o644), now)?;
            }
            Mkdir(p) => {
                let (d, n) = dir_name(fs, p)?;
                fs.mkdir(d, n, 0o755, 0, 0, now)?;
            }
            Symlink(p) => {
                let (d, n) = dir_name(fs, p)?;
                fs.symlink(d, n, SYMLINK_TARGET, 0, 0, now)?;
            }
            Write(p, off, len) => {
                let ino = lookup(fs, p)?;
                let k = fs.write(ino, off, &vec![b; len as usize], now)?;
                assert_eq!(k as u64, len, "short write");
            }
            WriteBack(p, first, n, last) => {
                // as the kernel's write-back: reserved in write_begin, one call per run of
                // dirty folios, the size the run reaches
                let ino = lookup(fs, p)?;
                let full = vec![b; BS as usize];
                let mut refs: Vec<&[u8]> = vec![&full; n as usize];
                refs[n as usize - 1] = &full[..last as usize];
                let end = (first + n - 1) * BS + last;
                let budget = Budget::new();
                let cost = fs.budget_cost(n, 1);
                budget.publish(fs.budget_avail());
                assert!(budget.try_reserve(cost), "no budget for {n} blocks");
                fs.set_reserved(budget.reserved());
                let r = fs.write_blocks(ino, first, &refs, end, now, now);
                budget.release(cost);
                fs.set_reserved(budget.reserved());
                r?;
            }
            Truncate(p, sz) => {
                let ino = lookup(fs, p)?;
                fs.setattr(ino, &SetAttr { size: Some(sz), ..Default::default() }, now)?;
            }
            Link(a, b2) => {
                let ino = lookup(fs, a)?;
                let (d, n) = dir_name(fs, b2)?;
                fs.link(ino, d, n, now)?;
            }
            Unlink(p) | UnlinkOpen(p) => {
                let ino = lookup(fs, p)?;
                let (d, n) = dir_name(fs, p)?;
                fs.unlink(d, n, now)?;
                if matches!(op, Unlink(_)) && fs.getattr(ino)?.nlink == 0 {
                    fs.evict(ino)?;
                }
            }
            Rmdir(p) => {
                let ino = lookup(fs, p)?;
                let (d, n) = dir_name(fs, p)?;
                fs.rmdir(d, n, now)?;
                fs.evict(ino)?;
            }
            Rename(a, b2) => {
                let victim = lookup(fs, b2).ok();
                let (da, na) = dir_name(fs, a)?;
                let (db, nb) = dir_name(fs, b2)?;
                fs.rename(da, na, db, nb, 0, now)?;
                if let Some(v) = victim {
                    if fs.getattr(v)?.nlink == 0 {
                        fs.evict(v)?;
                    }
                }
            }
            Exchange(a, b2) => {
                let (da, na) = dir_name(fs, a)?;
                let (db, nb) = dir_name(fs, b2)?;
                fs.rename(da, na, db, nb, RENAME_EXCHANGE, now)?;
            }
            SetXattr(p, n, len) => {
                let ino = lookup(fs, p)?;
                fs.setxattr(ino, n.as_bytes(), &vec![b; len], 0, now)?;
            }
            RemoveXattr(p, n) => {
                let ino = lookup(fs, p)?;
                fs.removexattr(ino, n.as_bytes(), now)?;
            }
            Chmod(p, mode) => {
                let ino = lookup(fs, p)?;
                fs.setattr(ino, &SetAttr { mode: Some(mode), ..Default::default() }, now)?;
            }
            Chown(p, uid, gid) => {
                let ino = lookup(fs, p)?;
                fs.setattr(ino, &SetAttr { uid: Some(uid), gid: Some(gid), ..Default::default() }, now)?;
            }
            Utimes(p) => {
                let ino = lookup(fs, p)?;
                fs.setattr(ino, &SetAttr { atime: Some(ts(5)), mtime: Some(ts(6)), ..Default::default() }, now)?;
            }
        },
    }
    Ok(())
}

// ------------------------------------------------------------------------------ workloads

/// A workload: operations with their persistence.
type Workload = Vec<(AOp, Persist)>;

fn steps(w: &Workload) -> Vec<Step> {
    w.iter().flat_map(|&(op, p)| [Step::Op(op), Step::Persist(p, touched(&op))]).collect()
}

/// Whether every operation of `w` is valid, in order, from the template's tree.
fn valid(base: &Model, w: &Workload) -> bool {
    let mut m = base.clone();
    for (i, (op, p)) in w.iter().enumerate() {
        if m.apply(op, byte(2 * i)).is_err() {
            return false;
        }
        // the fsync variants need the touched object (and its parent) to exist
        if *p != Persist::None && *p != Persist::Sync && (!m.names.contains_key(touched(op)) || !m.names.contains_key(parent(touched(op)))) {
            return false;
        }
    }
    true
}

/// The persistence of operation `k` of a longer workload number `n`: none, sync, or one of the
/// fsync variants in rotation.
fn persist_class(class: usize, n: usize, k: usize) -> Persist {
    match class {
        0 => Persist::None,
        1 => [Persist::Fsync, Persist::Fdatasync, Persist::FsyncParent][(n + k) % 3],
        _ => Persist::Sync,
    }
}

/// Every valid workload: all one-operation workloads with the five persistence variants, all
/// two-operation ones (persistence none, fsync-like or sync after each), and the bounded
/// three-operation set (`ops3`, none or fsync-like after the first two, fsync-like or sync
/// after the last).
fn workloads(base: &Model) -> [Vec<Workload>; 3] {
    let all = ops();
    let mut one = Vec::new();
    for &op in &all {
        for p in PERSISTS {
            one.push(vec![(op, p)]);
        }
    }
    let mut two = Vec::new();
    for &a in &all {
        for &b in &all {
            for pa in 0..3 {
                for pb in 0..3 {
                    let n = two.len();
                    two.push(vec![(a, persist_class(pa, n, 0)), (b, persist_class(pb, n, 1))]);
                }
            }
        }
    }
    let small = ops3();
    let mut three = Vec::new();
    for &a in &small {
        for &b in &small {
            for &c in &small {
                for pa in 0..2 {
                    for pb in 0..2 {
                        for pc in 1..3 {
                            let n = three.len();
                            three.push(vec![(a, persist_class(pa, n, 0)), (b, persist_class(pb, n, 1)), (c, persist_class(pc, n, 2))]);
                        }
                    }
                }
            }
        }
    }
    [one, two, three].map(|v| v.into_iter().filter(|w| valid(base, w)).collect())
}

// ------------------------------------------------------------------------------ checking

/// The states of the uninterrupted run (checked against the model) and the partial writes.
fn oracle(tpl: &RamFlash, base: &Model, st: &[Step], opts: MountOptions) -> Result<Oracle, String> {
    let mut fs = Fs::mount(tpl.clone(), opts).map_err(|e| e.0).unwrap();
    let mut m = base.clone();
    let mut o = Oracle { states: vec![snapshot(&mut fs)?], ..Default::default() };
    for (i, step) in st.iter().enumerate() {
        let before = o.states.last().unwrap();
        o.partial.push(match *step {
            Step::Op(AOp::Write(p, off, len)) => Some(WriteShape { ino: before.names[p], off, end: off + len, intermediate: true }),
            Step::Op(AOp::WriteBack(p, first, n, last)) => Some(WriteShape { ino: before.names[p], off: first * BS, end: (first + n - 1) * BS + last, intermediate: false }),
            _ => None,
        });
        o.persists.push(matches!(step, Step::Persist(p, _) if *p != Persist::None));
        run_step(&mut fs, step, i).map_err(|e| format!("step {i} {step:?} failed: {e:?}"))?;
        if let Step::Op(op) = step {
            m.apply(op, byte(i))?;
        }
        let s = snapshot(&mut fs)?;
        let (got, want) = (view_of(&s), m.view());
        if got != want {
            let d: Vec<String> = want.iter().filter(|(k, v)| got.get(*k) != Some(v)).map(|(k, v)| format!("{k}: model {v:?}, engine {:?}", got.get(k))).collect();
            let extra: Vec<&String> = got.keys().filter(|k| !want.contains_key(*k)).collect();
            return Err(format!("step {i} {step:?}: the engine differs from the model: {d:?}, extra {extra:?}"));
        }
        o.states.push(s);
    }
    Ok(o)
}

/// Device operations (writes and erases) of a medium so far.
fn device_ops(f: &RamFlash) -> u64 {
    f.writes + f.erases.iter().map(|&e| u64::from(e)).sum::<u64>()
}

/// Run `st` with a cut after `cut` device operations; the medium, the steps completed and the
/// device operations of the steps.
fn run_cut(tpl: &RamFlash, st: &[Step], cut: Option<u64>, tear: bool, loss: Option<CacheLoss>, opts: MountOptions) -> (RamFlash, usize, u64) {
    let mut fs = Fs::mount(tpl.clone(), opts).map_err(|e| e.0).unwrap();
    let start = device_ops(fs.flash());
    fs.flash().cut_in = cut;
    fs.flash().tear = tear;
    if let Some(l) = loss {
        fs.flash().set_write_cache(l);
    }
    for (i, step) in st.iter().enumerate() {
        if let Err(e) = run_step(&mut fs, step, i) {
            assert!(fs.flash().dead, "step {i} {step:?} failed without a power cut: {e:?}");
            let f = fs.into_flash();
            let n = device_ops(&f) - start;
            return (f, i, n);
        }
    }
    let f = fs.into_flash();
    let n = device_ops(&f) - start;
    (f, st.len(), n)
}

/// How one enumeration runs.
#[derive(Clone, Copy)]
struct Plan {
    /// Check every `stride`-th cut point (at a per-workload offset).
    stride: u64,
    /// Cut the recovery of every `recovery_every`-th checked cut point (0: never).
    recovery_every: u64,
    /// A block device with a write cache (otherwise NAND).
    block: bool,
    /// The mount options of every mount.
    opts: MountOptions,
}

#[derive(Default)]
struct Tally {
    workloads: u64,
    cuts: u64,
    recovery: u64,
    failures: Vec<String>,
}

fn loss_for(i: u64) -> CacheLoss {
    match i % 3 {
        0 => CacheLoss::Subset(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xACE),
        1 => CacheLoss::LoseAll,
        _ => CacheLoss::KeepAll,
    }
}

/// Every cut point of workload `w` (number `n`).
fn check_workload(tpl: &RamFlash, base: &Model, w: &Workload, n: u64, plan: Plan, t: &mut Tally) {
    let st = steps(w);
    let o = match oracle(tpl, base, &st, plan.opts) {
        Ok(o) => o,
        Err(e) => {
            t.failures.push(format!("{w:?}: uninterrupted run: {e}"));
            return;
        }
    };
    t.workloads += 1;
    let cc = CutCheck { opts: plan.opts, oracle: &o, recovery_cuts: false };
    let loss = |i: u64| plan.block.then(|| loss_for(i));
    // a crash right after the last step
    let (mut f, done, total) = run_cut(tpl, &st, None, true, loss(n), plan.opts);
    assert_eq!(done, st.len());
    f.power_cut();
    match check_after_cut(&cc, f, done) {
        Ok(k) => t.cuts += k,
        Err(e) => t.failures.push(format!("{w:?} crash after the last step: {e}")),
    }
    let mut i = 0u64;
    for cut in (n % plan.stride..total).step_by(plan.stride as usize) {
        let tear = (cut / plan.stride + n) % 2 == 1;
        let recovery = plan.recovery_every != 0 && (i + n) % plan.recovery_every == 0;
        let cc = CutCheck { recovery_cuts: recovery, ..cc.clone() };
        let (f, done, _) = run_cut(tpl, &st, Some(cut), tear, loss(n + i), plan.opts);
        assert!(f.dead, "{w:?}: no cut at {cut} of {total}");
        match check_after_cut(&cc, f, done) {
            Ok(k) => {
                t.cuts += 1;
                t.recovery += k - 1;
            }
            Err(e) => {
                t.cuts += 1;
                t.failures.push(format!("{w:?} cut {cut} (tear {tear}) after {done} steps: {e}"));
            }
        }
        i += 1;
    }
}

/// Check `list` (workload numbers from `first`) on as many threads as the machine has.
fn run_all(tpl: &RamFlash, base: &Model, list: &[Workload], plan: Plan) -> Tally {
    let next = AtomicUsize::new(0);
    let total = Mutex::new(Tally::default());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut t = Tally::default();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(w) = list.get(i) else { break };
                    check_workload(tpl, base, w, i as u64, plan, &mut t);
                }
                let mut all = total.lock().unwrap();
                all.workloads += t.workloads;
                all.cuts += t.cuts;
                all.recovery += t.recovery;
                all.failures.extend(t.failures);
            });
        }
    });
    total.into_inner().unwrap()
}

/// Every `every`-th element of `v`, from `offset`.
fn sample<T: Clone>(v: &[T], every: usize, offset: usize) -> Vec<T> {
    v.iter().skip(offset % every.max(1)).step_by(every.max(1)).cloned().collect()
}

fn report(label: &str, tallies: &[(&str, Tally)]) {
    let mut w = 0;
    let mut cuts = 0;
    let mut rec = 0;
    let mut fails = Vec::new();
    for (name, t) in tallies {
        eprintln!("  {name}: {} workloads, {} cut points ({} in recoveries), {} failures", t.workloads, t.cuts + t.recovery, t.recovery, t.failures.len());
        w += t.workloads;
        cuts += t.cuts;
        rec += t.recovery;
        fails.extend(t.failures.iter().cloned());
    }
    println!("{label}: {w} workloads, {} cut points checked ({rec} in recoveries), {} failures", cuts + rec, fails.len());
    eprintln!("{label}: {w} workloads, {} cut points checked ({rec} in recoveries), {} failures", cuts + rec, fails.len());
    for f in fails.iter().take(12) {
        eprintln!("{f}");
    }
    assert!(fails.is_empty(), "{} failures", fails.len());
}

fn base_model(tpl: &RamFlash) -> Model {
    let mut fs = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
    Model::from_snap(&snapshot(&mut fs).unwrap())
}

/// The samples `cargo test` takes: every `n`-th two- and three-operation workload.
const SAMPLE_TWO: usize = 13;
const SAMPLE_THREE: usize = 97;

/// The ACE workloads on NAND (32 KiB segments of 512-byte pages): with `FERROFS_CRASH_FULL`
/// every cut point of every one-, two- and three-operation workload, every 8th with its recovery
/// cut at each of its device operations; `cargo test`: every cut point of every one-operation
/// workload and of every 13th two- and 97th three-operation one, every 8th recovery.
#[test]
fn ace_workloads_nand() {
    let full = std::env::var_os("FERROFS_CRASH_FULL").is_some();
    let tpl = template();
    let base = base_model(&tpl);
    let [one, two, three] = workloads(&base);
    let plan = Plan { stride: 1, recovery_every: 8, block: false, opts: opts() };
    let (two, three) = if full { (two, three) } else { (sample(&two, SAMPLE_TWO, 7), sample(&three, SAMPLE_THREE, 3)) };
    let t1 = run_all(&tpl, &base, &one, plan);
    let t2 = run_all(&tpl, &base, &two, plan);
    let t3 = run_all(&tpl, &base, &three, plan);
    report("crash enumeration (ACE, NAND)", &[("seq-1", t1), ("seq-2", t2), ("seq-3", t3)]);
}

/// The same with a checkpoint bound of 4 KiB of log: most operations checkpoint, and a
/// multi-block `write` checkpoints between its blocks, writing an inode record for the blocks
/// written so far. Full: every one- and two-operation workload; `cargo test`: every one-operation
/// workload and every 53rd two-operation one, every other cut point.
#[test]
fn ace_workloads_nand_checkpoint_inside_operations() {
    let full = std::env::var_os("FERROFS_CRASH_FULL").is_some();
    let tpl = template();
    let base = base_model(&tpl);
    let [one, two, _] = workloads(&base);
    let opts = MountOptions { checkpoint_log_bytes: 4096, ..opts() };
    let (plan, two) = if full {
        (Plan { stride: 1, recovery_every: 16, block: false, opts }, two)
    } else {
        (Plan { stride: 2, recovery_every: 16, block: false, opts }, sample(&two, 53, 11))
    };
    let t1 = run_all(&tpl, &base, &one, plan);
    let t2 = run_all(&tpl, &base, &two, plan);
    report("crash enumeration (ACE, NAND, 4 KiB checkpoint bound)", &[("seq-1", t1), ("seq-2", t2)]);
}

/// The ACE workloads on a block device (4 KiB blocks, 64 KiB units, at most 2 segments open)
/// with a volatile write cache that keeps, at each cut, all, none or a random subset of the
/// writes since the last flush (`flashsim::WriteCache`): every one- and two-operation workload
/// with `FERROFS_CRASH_FULL` (every 16th with recovery cuts); `cargo test` every other cut point
/// of the one-operation workloads and of every 61st two-operation one.
#[test]
fn ace_workloads_block_write_cache() {
    let full = std::env::var_os("FERROFS_CRASH_FULL").is_some();
    let f = RamFlash::with_kind(FlashKind::Block, 64 * 1024, 64, 4096);
    let tpl = template_on(f);
    assert_eq!(tpl.geometry().kind, FlashKind::Block);
    let base = base_model(&tpl);
    let [one, two, _] = workloads(&base);
    let (plan, two) = if full {
        (Plan { stride: 1, recovery_every: 16, block: true, opts: opts() }, two)
    } else {
        (Plan { stride: 2, recovery_every: 0, block: true, opts: opts() }, sample(&two, 61, 5))
    };
    let t1 = run_all(&tpl, &base, &one, plan);
    let t2 = run_all(&tpl, &base, &two, plan);
    report("crash enumeration (ACE, block with a write cache)", &[("seq-1", t1), ("seq-2", t2)]);
}

/// The ACE workloads on MLC NAND (the NAND geometry; a torn program also destroys the
/// programmed page sharing its cells), once with Linux's dist3 pairing and once with adjacent
/// pairs: every cut point of every one-operation workload and of every 26th two-operation one
/// (`FERROFS_CRASH_FULL`: every one- and two-operation workload), every 8th with its recovery
/// cut at each of its device operations.
#[test]
fn ace_workloads_mlc() {
    let full = std::env::var_os("FERROFS_CRASH_FULL").is_some();
    let mut tallies = Vec::new();
    for (names, scheme) in [(["dist3 seq-1", "dist3 seq-2"], PairingScheme::Dist3), (["adjacent seq-1", "adjacent seq-2"], PairingScheme::Adjacent)] {
        let tpl = template_on(RamFlash::new_mlc(32 * 1024, 40, 512, Pairing { groups: 2, scheme }));
        let base = base_model(&tpl);
        let [one, two, _] = workloads(&base);
        let plan = Plan { stride: 1, recovery_every: 8, block: false, opts: opts() };
        let two = if full { two } else { sample(&two, 2 * SAMPLE_TWO, 5) };
        tallies.push((names[0], run_all(&tpl, &base, &one, plan)));
        tallies.push((names[1], run_all(&tpl, &base, &two, plan)));
    }
    report("crash enumeration (ACE, MLC NAND: dist3, adjacent pairs)", &tallies);
}

/// The generator: counts, distinct workloads, every operation and persistence variant in the
/// one-operation set and in what `cargo test` samples.
#[test]
fn ace_generator_covers_every_operation_and_persistence() {
    let tpl = template();
    let base = base_model(&tpl);
    let [one, two, three] = workloads(&base);
    eprintln!("ACE workloads: {} of one operation, {} of two, {} of three", one.len(), two.len(), three.len());
    let kind = |op: &AOp| format!("{op:?}").split('(').next().unwrap().to_string();
    let kinds: BTreeSet<String> = ops().iter().map(kind).collect();
    assert_eq!(kinds.len(), 17, "{kinds:?}");
    // what cargo test runs: every kind of operation, every persistence variant
    let (two_s, three_s) = (sample(&two, SAMPLE_TWO, 7), sample(&three, SAMPLE_THREE, 3));
    for (i, set) in [&one, &two_s, &three_s].into_iter().enumerate() {
        let seen: BTreeSet<String> = set.iter().flat_map(|w| w.iter().map(|(op, _)| kind(op))).collect();
        let want: BTreeSet<String> = if i < 2 { kinds.clone() } else { ops3().iter().map(kind).collect() };
        assert_eq!(seen, want, "operations missing in set {i}");
        let ps: BTreeSet<String> = set.iter().flat_map(|w| w.iter().map(|(_, p)| format!("{p:?}"))).collect();
        assert_eq!(ps.len(), 5, "persistence variants in set {i}: {ps:?}");
    }
    // every operation instance is checked: alone, or after one that makes it valid
    for op in ops() {
        assert!(one.iter().chain(&two).any(|w| w.last().unwrap().0 == op), "{op:?} is never valid");
    }
    let mut d: Vec<String> = two.iter().map(|w| format!("{w:?}")).collect();
    let n = d.len();
    d.sort();
    d.dedup();
    assert_eq!(d.len(), n, "duplicate workloads");
    assert!(two.len() > 10_000 && three.len() > 1000, "too few workloads");
}
