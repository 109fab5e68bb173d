//! Crash-point enumeration over many short workloads.
//!
//! For each workload (a short sequence of operations with fsync/sync among them: creates,
//! writes, overwrites, truncates, renames incl. RENAME_EXCHANGE, hard links, unlinks of open
//! files, xattrs, mkdir/rmdir), power is cut after every device operation in turn, once with the
//! interrupted write dropped and once with it torn (whole units, then half a unit); then the
//! shared oracle (`ferrofs_engine_tests::crashcheck`): the medium is remounted, the engine's fsck
//! must find nothing, the whole visible state (every attribute) must equal a state the workload
//! passed through since the last completed fsync or sync, or the interrupted write partly done
//! (whole blocks, a prefix, the size only over new blocks), and the filesystem must keep working
//! (new work survives a crash and a remount); some cut points also cut the recovery at each of
//! its device operations. On the block device a volatile write cache loses all, none or a random
//! subset of the writes since the last flush at each cut.
//!
//! `cargo test` checks every workload with a subset of the cut points (every
//! `FERROFS_CRASH_STRIDE`-th, default 2, at a per-workload offset, both tear modes);
//! `make crash-full` (`FERROFS_CRASH_FULL=1`) checks all of them, each with its recovery cuts.

use std::collections::BTreeMap;

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, Engine, Error, Flash, FlashError, FlashKind, MountOptions, Pairing, PairingScheme, Platform, SetAttr, ROOT_INO, RENAME_EXCHANGE};
use ferrofs_engine_tests::failalloc::{self, FailFs};
use ferrofs_engine_tests::crashcheck::{check_after_cut, clean_remount, expect_state, CutCheck, Oracle, WriteShape};
use ferrofs_engine_tests::crashload::{diff, pick, read_state, State};
use ferrofs_engine_tests::snapshot::{diff as snap_diff, snapshot, Snap};
use ferrofs_engine_tests::*;

/// Number of distinct workloads.
const WORKLOADS: u64 = 64;

#[derive(Clone, Debug)]
enum Op {
    Create(String),
    Write(String, u64, usize, u8),
    Truncate(String, u64),
    Rename(String, String),
    Exchange(String, String),
    Link(String, String),
    Unlink(String),
    /// Unlink while the file is open: it stays an orphan, still written to, until `Close`.
    UnlinkOpen(String),
    WriteOpen(u64, usize, u8),
    Close,
    SetXattr(String, u8, usize),
    RemoveXattr(String),
    Mkdir(String),
    Rmdir(String),
    Fsync(String),
    Sync,
}

/// The model: path -> file id; file id -> (content, xattr); directories.
#[derive(Clone, Debug, Default)]
struct Model {
    paths: BTreeMap<String, u32>,
    files: BTreeMap<u32, (Vec<u8>, Option<Vec<u8>>)>,
    dirs: BTreeMap<String, ()>,
    open: Option<u32>,
    next: u32,
}

impl Model {
    fn state(&self) -> State {
        let mut s = State::new();
        for (p, id) in &self.paths {
            let (c, x) = &self.files[id];
            s.insert(p.clone(), c.clone());
            if let Some(x) = x {
                s.insert(format!("{p}@x"), x.clone());
            }
        }
        for d in self.dirs.keys() {
            s.insert(format!("{d}/"), Vec::new());
        }
        s
    }

    fn gc_file(&mut self, id: u32) {
        if !self.paths.values().any(|v| *v == id) && self.open != Some(id) {
            self.files.remove(&id);
        }
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Create(n) => {
                self.next += 1;
                self.files.insert(self.next, (Vec::new(), None));
                self.paths.insert(n.clone(), self.next);
            }
            Op::Write(n, off, len, b) => write_model(&mut self.files.get_mut(&self.paths[n]).unwrap().0, *off, *len, *b),
            Op::WriteOpen(off, len, b) => {
                let id = self.open.unwrap();
                write_model(&mut self.files.get_mut(&id).unwrap().0, *off, *len, *b)
            }
            Op::Truncate(n, sz) => self.files.get_mut(&self.paths[n]).unwrap().0.resize(*sz as usize, 0),
            Op::Rename(a, b) => {
                let id = self.paths.remove(a).unwrap();
                if let Some(old) = self.paths.insert(b.clone(), id) {
                    self.gc_file(old);
                }
            }
            Op::Exchange(a, b) => {
                let (x, y) = (self.paths[a], self.paths[b]);
                self.paths.insert(a.clone(), y);
                self.paths.insert(b.clone(), x);
            }
            Op::Link(a, b) => {
                let id = self.paths[a];
                self.paths.insert(b.clone(), id);
            }
            Op::Unlink(n) => {
                let id = self.paths.remove(n).unwrap();
                self.gc_file(id);
            }
            Op::UnlinkOpen(n) => {
                let id = self.paths.remove(n).unwrap();
                self.open = Some(id);
            }
            Op::Close => {
                let id = self.open.take().unwrap();
                self.gc_file(id);
            }
            Op::SetXattr(n, b, len) => self.files.get_mut(&self.paths[n]).unwrap().1 = Some(vec![*b; *len]),
            Op::RemoveXattr(n) => self.files.get_mut(&self.paths[n]).unwrap().1 = None,
            Op::Mkdir(d) => {
                self.dirs.insert(d.clone(), ());
            }
            Op::Rmdir(d) => {
                self.dirs.remove(d);
            }
            Op::Fsync(_) | Op::Sync => {}
        }
    }

    fn file_paths(&self) -> Vec<String> {
        self.paths.keys().cloned().collect()
    }

    fn taken(&self, p: &str) -> bool {
        self.paths.contains_key(p) || self.dirs.contains_key(p)
    }

    fn dir_empty(&self, d: &str) -> bool {
        let pre = format!("{d}/");
        !self.paths.keys().any(|k| k.starts_with(&pre))
    }
}

fn write_model(c: &mut Vec<u8>, off: u64, len: usize, b: u8) {
    let end = off as usize + len;
    if c.len() < end {
        c.resize(end, 0);
    }
    c[off as usize..end].fill(b);
}

fn new_path(rng: &mut Rng, m: &Model, i: usize, prefix: &str) -> String {
    let d: Vec<String> = m.dirs.keys().cloned().collect();
    match pick(rng, &d) {
        Some(d) if rng.below(2) == 0 => format!("{d}/{prefix}{i}"),
        _ => format!("{prefix}{i}"),
    }
}

/// Workload `w`: a theme (which operations dominate) and 8..13 operations, with fsync/sync
/// among them. Themes rotate so that every kind of operation appears in many workloads.
/// Data workloads for the lazy roll-forward (`enumerate_lazy`): runs of writes of several
/// blocks to two or three files (data records following data records, the ones a mount reads by
/// their headers), fsyncs and syncs between them (the markers that prove records durable), and
/// a rename or truncate now and then.
fn workload_data(w: u64) -> Vec<Op> {
    let mut rng = Rng::new(0xDA7A ^ w.wrapping_mul(0x9E37_79B9));
    let files: Vec<String> = (0..2 + rng.below(2)).map(|i| format!("d{i}")).collect();
    let mut ops: Vec<Op> = files.iter().map(|f| Op::Create(f.clone())).collect();
    let n = 10 + rng.below(6) as usize;
    while ops.len() < n {
        let f = files[rng.below(files.len() as u64) as usize].clone();
        let r = rng.below(100);
        let op = if r < 60 {
            let off = rng.below(6) * 4096 + if rng.below(4) == 0 { rng.below(4096) } else { 0 };
            let len = 4096 * (1 + rng.below(5) as usize) + if rng.below(3) == 0 { rng.below(4096) as usize } else { 0 };
            Op::Write(f, off, len, 1 + rng.below(250) as u8)
        } else if r < 80 {
            Op::Fsync(f)
        } else if r < 90 {
            Op::Sync
        } else {
            Op::Truncate(f, rng.below(8) * 2048)
        };
        ops.push(op);
    }
    ops
}

fn workload(w: u64) -> Vec<Op> {
    let mut rng = Rng::new(0xC0FFEE ^ w.wrapping_mul(0x9E37_79B9));
    let theme = w % 6;
    let mut m = Model::default();
    let mut ops = Vec::new();
    let n = 10 + rng.below(10) as usize;
    let mut i = 0usize;
    let mut guard = 0;
    while ops.len() < n && guard < 500 {
        guard += 1;
        i += 1;
        let fs_ = m.file_paths();
        let r = rng.below(100);
        // theme bias: shift the dice towards one group of operations
        let r = match theme {
            0 => r / 2,                  // creates and writes
            1 => 40 + r * 30 / 100,      // truncates, renames, exchanges
            2 => 55 + r * 25 / 100,      // links, unlinks, open unlinks
            3 => 70 + r * 18 / 100,      // xattrs and directories
            _ => r,                      // mixed
        };
        let op = if fs_.len() < 2 || r < 12 {
            let p = new_path(&mut rng, &m, i, "f");
            if m.taken(&p) {
                continue;
            }
            Op::Create(p)
        } else if r < 34 {
            let f = pick(&mut rng, &fs_).unwrap();
            let off = rng.below(4) * 4096 + if rng.below(2) == 0 { 0 } else { rng.below(3000) };
            let max = if rng.below(4) == 0 { 20_000 } else { 3000 };
            let len = 1 + rng.below(max) as usize;
            Op::Write(f, off, len, rng.below(250) as u8 + 1)
        } else if r < 40 {
            Op::Fsync(pick(&mut rng, &fs_).unwrap())
        } else if r < 47 {
            Op::Truncate(pick(&mut rng, &fs_).unwrap(), rng.below(14_000))
        } else if r < 53 {
            let a = pick(&mut rng, &fs_).unwrap();
            let b = if rng.below(3) == 0 { pick(&mut rng, &fs_).unwrap() } else { new_path(&mut rng, &m, i, "r") };
            if a == b || m.dirs.contains_key(&b) || m.paths.get(&a) == m.paths.get(&b) {
                continue;
            }
            Op::Rename(a, b)
        } else if r < 58 {
            let a = pick(&mut rng, &fs_).unwrap();
            let b = pick(&mut rng, &fs_).unwrap();
            if a == b || m.paths[&a] == m.paths[&b] {
                continue;
            }
            Op::Exchange(a, b)
        } else if r < 64 {
            let a = pick(&mut rng, &fs_).unwrap();
            let b = new_path(&mut rng, &m, i, "h");
            if m.taken(&b) {
                continue;
            }
            Op::Link(a, b)
        } else if r < 68 {
            Op::Unlink(pick(&mut rng, &fs_).unwrap())
        } else if r < 74 {
            if m.open.is_some() {
                if rng.below(3) != 0 {
                    Op::WriteOpen(rng.below(3) * 4096, 1 + rng.below(5000) as usize, rng.below(250) as u8 + 1)
                } else {
                    Op::Close
                }
            } else {
                Op::UnlinkOpen(pick(&mut rng, &fs_).unwrap())
            }
        } else if r < 79 {
            let max = if rng.below(3) == 0 { 5000 } else { 200 };
            Op::SetXattr(pick(&mut rng, &fs_).unwrap(), rng.below(250) as u8 + 1, 1 + rng.below(max) as usize)
        } else if r < 82 {
            let with: Vec<String> = fs_.iter().filter(|f| m.files[&m.paths[*f]].1.is_some()).cloned().collect();
            match pick(&mut rng, &with) {
                Some(f) => Op::RemoveXattr(f),
                None => continue,
            }
        } else if r < 88 {
            let d = format!("d{}", rng.below(2));
            if m.dirs.contains_key(&d) {
                if !m.dir_empty(&d) {
                    continue;
                }
                Op::Rmdir(d)
            } else if m.taken(&d) {
                continue;
            } else {
                Op::Mkdir(d)
            }
        } else if r < 94 {
            Op::Sync
        } else {
            Op::Fsync(pick(&mut rng, &fs_).unwrap())
        };
        m.apply(&op);
        ops.push(op);
        // fsync/sync among the operations: about one in three
        if ops.len() < n && rng.below(3) == 0 {
            let f = m.file_paths();
            let s = if rng.below(3) == 0 || f.is_empty() { Op::Sync } else { Op::Fsync(pick(&mut rng, &f).unwrap()) };
            ops.push(s);
        }
    }
    if m.open.is_some() && rng.below(2) == 0 {
        ops.push(Op::Close);
    }
    if !ops.iter().any(|o| matches!(o, Op::Sync | Op::Fsync(_))) {
        ops.insert(ops.len() / 2, Op::Sync);
    }
    ops
}

fn resolve<P: Platform>(fs: &mut Engine<P, RamFlash>, path: &str) -> Result<(u64, String), Error> {
    match path.split_once('/') {
        Some((d, n)) => Ok((fs.lookup(ROOT_INO, d.as_bytes())?.ino, n.to_string())),
        None => Ok((ROOT_INO, path.to_string())),
    }
}

fn look<P: Platform>(fs: &mut Engine<P, RamFlash>, p: &str) -> Result<u64, Error> {
    let (d, n) = resolve(fs, p)?;
    Ok(fs.lookup(d, n.as_bytes())?.ino)
}

/// Run one operation; `open` is the inode of the unlinked-but-open file.
fn run_op<P: Platform>(fs: &mut Engine<P, RamFlash>, op: &Op, open: &mut Option<u64>, t: i64) -> Result<(), Error> {
    let now = ts(t);
    match op {
        Op::Create(p) => {
            let (d, n) = resolve(fs, p)?;
            fs.create(d, n.as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, now)?;
        }
        Op::Write(p, off, len, b) => {
            let ino = look(fs, p)?;
            let k = fs.write(ino, *off, &vec![*b; *len], now)?;
            assert_eq!(k, *len, "short write");
        }
        Op::WriteOpen(off, len, b) => {
            let ino = open.expect("open file");
            fs.write(ino, *off, &vec![*b; *len], now)?;
        }
        Op::Truncate(p, sz) => {
            let ino = look(fs, p)?;
            fs.setattr(ino, &SetAttr { size: Some(*sz), ..Default::default() }, now)?;
        }
        Op::Rename(a, b) => {
            let victim = look(fs, b).ok();
            let (da, na) = resolve(fs, a)?;
            let (db, nb) = resolve(fs, b)?;
            fs.rename(da, na.as_bytes(), db, nb.as_bytes(), 0, now)?;
            if let Some(v) = victim {
                if fs.getattr(v).map(|i| i.nlink == 0).unwrap_or(false) {
                    fs.evict(v)?;
                }
            }
        }
        Op::Exchange(a, b) => {
            let (da, na) = resolve(fs, a)?;
            let (db, nb) = resolve(fs, b)?;
            fs.rename(da, na.as_bytes(), db, nb.as_bytes(), RENAME_EXCHANGE, now)?;
        }
        Op::Link(a, b) => {
            let ino = look(fs, a)?;
            let (d, n) = resolve(fs, b)?;
            fs.link(ino, d, n.as_bytes(), now)?;
        }
        Op::Unlink(p) => {
            let ino = look(fs, p)?;
            let (d, n) = resolve(fs, p)?;
            fs.unlink(d, n.as_bytes(), now)?;
            if fs.getattr(ino)?.nlink == 0 {
                fs.evict(ino)?;
            }
        }
        Op::UnlinkOpen(p) => {
            let ino = look(fs, p)?;
            let (d, n) = resolve(fs, p)?;
            fs.unlink(d, n.as_bytes(), now)?;
            *open = Some(ino);
        }
        Op::Close => {
            let ino = open.take().expect("open file");
            if fs.getattr(ino)?.nlink == 0 {
                fs.evict(ino)?;
            }
        }
        Op::SetXattr(p, b, len) => {
            let ino = look(fs, p)?;
            fs.setxattr(ino, b"user.x", &vec![*b; *len], 0, now)?;
        }
        Op::RemoveXattr(p) => {
            let ino = look(fs, p)?;
            fs.removexattr(ino, b"user.x", now)?;
        }
        Op::Mkdir(d) => {
            fs.mkdir(ROOT_INO, d.as_bytes(), 0o755, 0, 0, now)?;
        }
        Op::Rmdir(d) => {
            let ino = fs.lookup(ROOT_INO, d.as_bytes())?.ino;
            fs.rmdir(ROOT_INO, d.as_bytes(), now)?;
            fs.evict(ino)?;
        }
        Op::Fsync(p) => {
            let ino = look(fs, p)?;
            fs.fsync(ino)?;
        }
        Op::Sync => fs.sync()?,
    }
    Ok(())
}

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 24, lazy_replay_min_log: LAZY_MIN_LOG.with(|l| l.get()), ..Default::default() }
}

std::thread_local! {
    /// `MountOptions::lazy_replay_min_log` of this test's mounts (each test runs in its own
    /// thread): 0, the default (logs this small are read whole), or 1 in the lazy tests.
    static LAZY_MIN_LOG: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The lazy tests' tally of how the mounts after the cuts read the log.
    static LAZY_SEEN: std::cell::Cell<(u64, u64, u64, u64)> = const { std::cell::Cell::new((0, 0, 0, 0)) };
}

/// In the lazy tests: mount the cut medium once more (as the check will) and tally how its
/// roll-forward read the data records: (mounts, records taken on trust, of those read back,
/// mounts that rolled forward again reading everything).
fn tally_lazy(f: &RamFlash) {
    if LAZY_MIN_LOG.with(|l| l.get()) == 0 {
        return;
    }
    let mut g = f.clone();
    g.power_on();
    if let Ok(fs) = Fs::mount(g, opts()) {
        let r = fs.replay_lazy();
        LAZY_SEEN.with(|s| {
            let (m, t, rr, re) = s.get();
            s.set((m + 1, t + r.trusted, rr + r.reread, re + u64::from(r.retried)));
        });
    }
}

fn template() -> RamFlash {
    template_on(RamFlash::new_nand(32 * 1024, 40, 512))
}

/// A block device (4 KiB blocks, 256 KiB allocation units, 8 KiB pages: flushes pad to the
/// page) formatted with the block default: at most 2 segments open (one log head and the
/// checkpoint area).
fn template_block() -> RamFlash {
    let f = template_on(RamFlash::with_kind(FlashKind::Block, 256 * 1024, 48, 4096));
    let fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.open_segment_limit(), (2, 1));
    fs.unmount().map_err(|e| e.0).unwrap()
}

/// MLC NAND of the NAND template's geometry (64 pages of 512 bytes per segment) whose pages
/// share cells as `scheme` says: a torn program also destroys the programmed page sharing its
/// cells (`RamFlash::new_mlc`).
fn template_mlc(scheme: PairingScheme) -> RamFlash {
    template_on(RamFlash::new_mlc(32 * 1024, 40, 512, Pairing { groups: 2, scheme }))
}

fn template_on(f: RamFlash) -> RamFlash {
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
    let g = fs.create(ROOT_INO, b"base", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
    fs.write(g.ino, 0, &[0x5a; 6000], ts(1)).unwrap();
    fs.unmount().map_err(|e| e.0).unwrap()
}

/// Run `ops` with a cut after `cut` device operations (`loss`: the block device's write
/// cache, lost at the cut as it says). Returns the medium, the number of completed operations
/// and whether the cut happened.
fn run_with_cut(tpl: &RamFlash, ops: &[Op], cut: Option<u64>, tear: bool, loss: Option<CacheLoss>) -> (RamFlash, usize, bool) {
    let mut fs = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
    fs.flash().cut_in = cut;
    fs.flash().tear = tear;
    if let Some(l) = loss {
        fs.flash().set_write_cache(l);
    }
    let mut open = None;
    let mut done = 0;
    for (i, op) in ops.iter().enumerate() {
        match run_op(&mut fs, op, &mut open, 10 + i as i64) {
            Ok(()) => done += 1,
            Err(e) => {
                assert!(fs.flash().dead, "op {i} {op:?} failed without a power cut: {e:?}");
                return (fs.into_flash(), done, true);
            }
        }
    }
    let dead = fs.flash().dead;
    (fs.into_flash(), done, dead)
}

/// Whether a cut medium's write cache held writes when the power went.
fn cached(f: &RamFlash) -> bool {
    f.cache.as_ref().is_some_and(|(c, _)| !c.is_empty())
}

/// The model's view of a snapshot: file contents, `user.x`, directories.
fn project(s: &Snap) -> State {
    let mut st = State::new();
    for (p, ino) in &s.names {
        let Some(p) = p.strip_prefix('/').filter(|p| !p.is_empty()) else { continue };
        let o = &s.objs[ino];
        if o.inode.is_dir() {
            st.insert(format!("{p}/"), Vec::new());
            continue;
        }
        st.insert(p.to_string(), o.data.clone());
        if let Some(x) = o.xattrs.get(&b"user.x"[..]) {
            st.insert(format!("{p}@x"), x.clone());
        }
    }
    st
}

/// The states of an uninterrupted run of `ops` (snapshots after each operation, checked
/// against the model), and what a cut may leave of each operation.
fn oracle(tpl: &RamFlash, ops: &[Op], model_states: &[State]) -> Oracle {
    let mut fs = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
    let mut open = None;
    let mut o = Oracle { states: vec![snapshot(&mut fs).unwrap()], ..Default::default() };
    for (i, op) in ops.iter().enumerate() {
        let before = o.states.last().unwrap();
        o.partial.push(match op {
            Op::Write(p, off, len, _) => Some(WriteShape { ino: before.names[&format!("/{p}")], off: *off, end: off + *len as u64, intermediate: true }),
            _ => None,
        });
        o.persists.push(matches!(op, Op::Fsync(_) | Op::Sync));
        run_op(&mut fs, op, &mut open, 10 + i as i64).unwrap();
        let s = snapshot(&mut fs).unwrap();
        assert!(project(&s) == model_states[i + 1], "op {i} {op:?}: the engine differs from the model: {:?}\n{ops:?}", diff(&model_states[i + 1], &project(&s)));
        o.states.push(s);
    }
    o
}

/// The model's states of workload `ops` from the template's contents.
fn model_states(base: &State, ops: &[Op]) -> Vec<State> {
    let mut m = Model::default();
    for (k, v) in base {
        m.next += 1;
        m.files.insert(m.next, (v.clone(), None));
        m.paths.insert(k.clone(), m.next);
    }
    let mut states = vec![m.state()];
    for o in ops {
        m.apply(o);
        states.push(m.state());
    }
    states
}

/// The write-cache loss of cut `i` of a workload on a block device.
fn loss_for(i: u64) -> CacheLoss {
    match i % 3 {
        0 => CacheLoss::Subset(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5eed),
        1 => CacheLoss::LoseAll,
        _ => CacheLoss::KeepAll,
    }
}

fn enumerate(full: bool) {
    enumerate_on(full, template(), 2, 4, WORKLOADS, "crash enumeration (random workloads, NAND)");
}

/// Every `stride`-th cut point of each workload (all of them when `full`), every
/// `recovery_every`-th of those (all when `full`) with every device operation of the recovery
/// cut in turn too. Returns the pages MLC pairing destroyed at the cuts (0 on other media).
fn enumerate_on(full: bool, tpl: RamFlash, default_stride: u64, recovery_every: u64, workloads: u64, label: &str) -> u64 {
    enumerate_with(workload, full, tpl, default_stride, recovery_every, workloads, label)
}

/// `enumerate_on` with workloads from `workload`.
fn enumerate_with(workload: fn(u64) -> Vec<Op>, full: bool, tpl: RamFlash, default_stride: u64, recovery_every: u64, workloads: u64, label: &str) -> u64 {
    let stride: u64 = std::env::var("FERROFS_CRASH_STRIDE").ok().and_then(|v| v.parse().ok()).unwrap_or(default_stride).max(1);
    let block = tpl.geometry().kind == FlashKind::Block;
    let base = {
        let mut fs = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
        read_state(&mut fs)
    };
    let mut checked = 0u64;
    let mut recovery = 0u64;
    let mut with_cache = 0u64;
    let mut pair_lost = 0u64;
    let mut failures = Vec::new();
    let mut kinds = BTreeMap::new();
    for w in 0..workloads {
        let ops = workload(w);
        for o in &ops {
            *kinds.entry(format!("{o:?}").split('(').next().unwrap_or("").to_string()).or_insert(0u32) += 1;
        }
        let o = oracle(&tpl, &ops, &model_states(&base, &ops));
        let cc = CutCheck { opts: opts(), oracle: &o, recovery_cuts: false };
        // the uninterrupted run, then a crash right after the last operation (a block
        // device's cache losing what it may)
        let (f, done, cut) = run_with_cut(&tpl, &ops, None, true, block.then(|| loss_for(w)));
        assert!(!cut && done == ops.len());
        let mut g = f.clone();
        g.power_cut();
        if let Err(e) = check_after_cut(&cc, g, ops.len()) {
            panic!("workload {w}: crash after the last operation: {e}\n{ops:?}");
        }
        let total = f.writes + f.erases.iter().map(|&e| u64::from(e)).sum::<u64>() - tpl.writes - tpl.erases.iter().map(|&e| u64::from(e)).sum::<u64>();
        {
            let mut fs = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
            let mut open = None;
            for (i, op) in ops.iter().enumerate() {
                run_op(&mut fs, op, &mut open, 10 + i as i64).unwrap();
            }
            let mut fs = Fs::mount(fs.unmount().map_err(|e| e.0).unwrap(), opts()).map_err(|e| e.0).unwrap();
            let got = snapshot(&mut fs).unwrap();
            let exp = o.states.last().unwrap();
            assert!(got == *exp, "workload {w}: state after a clean unmount: {:?}\n{ops:?}", snap_diff(exp, &got));
        }
        for tear in [false, true] {
            let mut cut = if full { 0 } else { (w + u64::from(tear) * 3) % stride };
            let mut i = 0u64;
            loop {
                let cc = CutCheck { recovery_cuts: full || (i + w) % recovery_every == 0, ..cc.clone() };
                let losses: Vec<Option<CacheLoss>> = match (block, full) {
                    (false, _) => vec![None],
                    (true, false) => vec![Some(loss_for(i + w))],
                    (true, true) => (0..3).map(|k| Some(loss_for(i * 3 + k))).collect(),
                };
                let mut happened = false;
                for loss in losses {
                    let (f, done, was_cut) = run_with_cut(&tpl, &ops, Some(cut), tear, loss);
                    if !was_cut {
                        break;
                    }
                    happened = true;
                    with_cache += u64::from(cached(&f));
                    tally_lazy(&f);
                    pair_lost += f.pair_losses;
                    match check_after_cut(&cc, f, done) {
                        Ok(n) => {
                            checked += 1;
                            recovery += n - 1;
                        }
                        Err(e) => {
                            checked += 1;
                            failures.push(format!("workload {w} cut {cut} tear {tear} cache {loss:?}: {e}\n  ops: {ops:?}"));
                        }
                    }
                }
                if !happened {
                    break;
                }
                cut += if full { 1 } else { stride };
                i += 1;
                assert!(cut < total + 1000, "workload {w}: the cut never happened");
            }
        }
    }
    let all = checked + recovery;
    let mut cache = if block { format!(", {with_cache} with writes in the cache") } else { String::new() };
    if tpl.cells.is_some() {
        cache += &format!(", {pair_lost} paired pages destroyed");
    }
    println!("{label}: {workloads} workloads, {all} cut points checked ({checked} in the workloads{cache}, {recovery} in the recoveries), {} failures", failures.len());
    eprintln!("{label}: {workloads} workloads, {all} cut points checked ({checked} in the workloads{cache}, {recovery} in the recoveries), {} failures; operations: {kinds:?}", failures.len());
    assert!(!block || with_cache * 2 > checked, "only {with_cache} of {checked} cuts found writes in the cache");
    for f in failures.iter().take(10) {
        eprintln!("{f}");
    }
    assert!(failures.is_empty(), "{} failures", failures.len());
    pair_lost
}

/// The same workloads on a block device with the default open-segment limit (2: every record
/// in one head, segments closed by writing them to their end, the mount closing the tails the
/// cut left) with a volatile write cache (at each cut the writes since the last flush are kept,
/// lost, or a random subset of their sectors kept: `loss_for`): every other cut point
/// (`FERROFS_CRASH_FULL`: all, each with the three losses), and no mount after a cut has more
/// than 2 segments open.
#[test]
fn crash_enumeration_block_open_segments_2() {
    let full = std::env::var_os("FERROFS_CRASH_FULL").is_some();
    enumerate_on(full, template_block(), 2, 16, WORKLOADS, "crash enumeration (random workloads, block, 2 open segments)");
}

/// The random workloads on MLC NAND with Linux's dist3 pairing: every cut point of every
/// workload, both tear modes (a torn program destroying the page that shares its cells), every
/// 8th with its recovery cut at each device operation (`FERROFS_CRASH_FULL`: every recovery).
#[test]
fn crash_enumeration_mlc_dist3() {
    let full = std::env::var_os("FERROFS_CRASH_FULL").is_some();
    let tpl = template_mlc(PairingScheme::Dist3);
    let lost = enumerate_on(full, tpl, 1, 8, WORKLOADS, "crash enumeration (random workloads, MLC NAND, dist3 pairing)");
    assert!(lost > 0, "no cut destroyed a paired page: the model was not exercised");
}

/// The same with pairs of adjacent pages.
#[test]
fn crash_enumeration_mlc_adjacent() {
    let full = std::env::var_os("FERROFS_CRASH_FULL").is_some();
    let tpl = template_mlc(PairingScheme::Adjacent);
    let lost = enumerate_on(full, tpl, 1, 8, WORKLOADS, "crash enumeration (random workloads, MLC NAND, adjacent pairs)");
    assert!(lost > 0, "no cut destroyed a paired page: the model was not exercised");
}

/// The random workloads with every mount after a cut reading data records by their headers
/// where the log proves them durable (`MountOptions::lazy_replay_min_log` 1: the kernel does so
/// only on logs of 2 MiB or more, which no workload here reaches), on NAND, on MLC NAND (dist3:
/// a torn program also destroys its paired page) and on a block device losing its write cache:
/// the same states as when every record is read, and the path is taken (records trusted, some
/// read back, and torn ones sending the roll-forward round again).
fn enumerate_lazy(tpl: RamFlash, stride: u64, recovery_every: u64, label: &str) {
    let full = std::env::var_os("FERROFS_CRASH_FULL").is_some();
    LAZY_MIN_LOG.with(|l| l.set(1));
    enumerate_with(workload, full, tpl.clone(), stride, recovery_every, WORKLOADS, label);
    enumerate_with(workload_data, full, tpl, 1, recovery_every, 16, &format!("{label}, data workloads"));
    let (mounts, trusted, reread, retried) = LAZY_SEEN.with(|s| s.get());
    eprintln!("{label}: {mounts} mounts after cuts: {trusted} records taken on trust, {reread} of them read back, {retried} roll-forwards again reading everything");
    assert!(trusted > mounts, "only {trusted} records taken on trust in {mounts} mounts: the lazy path was hardly exercised");
    assert!(reread > 0 && reread < trusted, "{reread} of {trusted} trusted records read back: the proofs were never (or always) used");
}

#[test]
fn crash_enumeration_lazy_replay_nand() {
    enumerate_lazy(template(), 2, 4, "crash enumeration (lazy replay, NAND)");
    let (_, _, _, retried) = LAZY_SEEN.with(|s| s.get());
    assert!(retried > 0, "no torn record sent a roll-forward round again");
}

#[test]
fn crash_enumeration_lazy_replay_mlc_dist3() {
    enumerate_lazy(template_mlc(PairingScheme::Dist3), 2, 8, "crash enumeration (lazy replay, MLC NAND, dist3 pairing)");
}

#[test]
fn crash_enumeration_lazy_replay_block() {
    enumerate_lazy(template_block(), 2, 16, "crash enumeration (lazy replay, block, 2 open segments)");
}

#[test]
fn crash_enumeration_every_workload() {
    let full = std::env::var_os("FERROFS_CRASH_FULL").is_some();
    enumerate(full);
}

#[test]
fn workloads_are_distinct_and_cover_every_operation() {
    let all: Vec<String> = (0..WORKLOADS).map(|w| format!("{:?}", workload(w))).collect();
    let mut d = all.clone();
    d.sort();
    d.dedup();
    assert_eq!(d.len(), all.len(), "duplicate workloads");
    for kind in ["Create", "Write", "Truncate", "Rename", "Exchange", "Link", "Unlink(", "UnlinkOpen", "WriteOpen", "Close", "SetXattr", "RemoveXattr", "Mkdir", "Rmdir", "Fsync", "Sync"] {
        let n = all.iter().filter(|w| w.contains(kind)).count();
        assert!(n >= 3, "{kind} appears in only {n} workloads");
    }
    assert!(all.iter().all(|w| w.contains("Fsync") || w.contains("Sync")), "a workload without fsync/sync");
}

/// What a failure-injection run injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Inject {
    /// The n-th allocation fails with NoMem.
    Alloc,
    /// The n-th growth of any vector (within its capacity or not) fails with NoMem.
    Growth,
    /// The n-th read reports an uncorrectable page.
    ReadUncorrectable,
    /// The n-th read fails with an I/O error.
    ReadIo,
}

/// Whether a `run_op` of this kind is several engine calls (a rename or unlink followed by the
/// eviction of the inode it dropped), so that an error in the later call leaves the earlier
/// one done.
fn composite(op: &Op) -> bool {
    matches!(op, Op::Rename(..) | Op::Unlink(_) | Op::Rmdir(_) | Op::Close)
}

/// Run the workload on the failing platform with failure `n` of kind `inj` planned. Returns
/// None when the failure never happened (n is past the workload's last allocation or read).
fn check_injection(tpl: &RamFlash, ops: &[Op], o: &Oracle, inj: Inject, n: u64) -> Option<Result<(), String>> {
    let states = &o.states;
    let mut fs = FailFs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
    failalloc::any_growth(inj == Inject::Growth);
    match inj {
        Inject::Alloc | Inject::Growth => failalloc::arm(Some(n)),
        Inject::ReadUncorrectable | Inject::ReadIo => {
            fs.flash().fail_read_in = Some(n);
            fs.flash().read_failed = false;
            fs.flash().read_error = if inj == Inject::ReadIo { FlashError::Io } else { FlashError::Uncorrectable };
        }
    }
    let fired = |fs: &mut FailFs| match inj {
        Inject::Alloc | Inject::Growth => failalloc::fired(),
        _ => fs.flash().read_failed,
    };
    let mut open = None;
    let mut failed_at = None;
    for (i, op) in ops.iter().enumerate() {
        if let Err(e) = run_op(&mut fs, op, &mut open, 10 + i as i64) {
            failed_at = Some((i, e));
            break;
        }
    }
    let was_fired = fired(&mut fs);
    failalloc::arm(None);
    failalloc::any_growth(false);
    fs.flash().fail_read_in = None;
    if !was_fired {
        return None;
    }
    let res = (|| -> Result<(), String> {
        match failed_at {
            None => {
                // the failure was absorbed (e.g. by the GC): the run completed
                let got = snapshot(&mut fs)?;
                if got != *states.last().unwrap() {
                    return Err(format!("no operation failed, but the state differs: {:?}", snap_diff(states.last().unwrap(), &got)));
                }
                let mut fs = clean_remount(fs, opts())?;
                expect_state(&mut fs, states.last().unwrap()).map_err(|e| format!("after remount: {e}"))
            }
            Some((k, e)) => {
                let op = &ops[k];
                if fs.is_failed() {
                    // fail-stopped: nothing more is written; the medium holds what a crash
                    // at this point leaves
                    if fs.failure().is_none() {
                        return Err("fail-stopped without a cause".into());
                    }
                    match fs.create(ROOT_INO, b"after-stop", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(99)) {
                        Err(Error::ReadOnly) => {}
                        r => return Err(format!("a mutation after fail-stop returned {r:?}")),
                    }
                    let mut f = fs.into_flash();
                    f.power_on();
                    let mut fs = Fs::mount(f, opts()).map_err(|(e, _)| format!("op {k} {op:?} failed with {e:?}, fail-stop; remount: {e:?}"))?;
                    let r = fs.fsck().map_err(|e| format!("fsck failed: {e:?}"))?;
                    if r.problems != 0 {
                        return Err(format!("op {k} {op:?} failed with {e:?}, fail-stop; fsck after remount: {r:?}"));
                    }
                    let got = snapshot(&mut fs)?;
                    return o.check(k, &got).map(|_| ()).map_err(|m| format!("op {k} {op:?} failed with {e:?}, fail-stop; after remount: {m}"));
                }
                // still writable: the operation changed nothing (or, for a composite one, did
                // its first engine call only)
                let got = snapshot(&mut fs)?;
                let ok = got == states[k] || (composite(op) && got == states[k + 1]);
                if !ok {
                    return Err(format!("op {k} {op:?} failed with {e:?}, the engine still writes, but the state changed: {:?}", snap_diff(&states[k], &got)));
                }
                let mut fs = clean_remount(fs, opts()).map_err(|e2| format!("op {k} {op:?} failed with {e:?}; {e2}"))?;
                expect_state(&mut fs, &got).map_err(|e2| format!("op {k} {op:?} failed with {e:?}; the remount differs: {e2}"))
            }
        }
    })();
    Some(res)
}

fn enumerate_injections(full: bool) {
    let stride: u64 = std::env::var("FERROFS_FAIL_STRIDE").ok().and_then(|v| v.parse().ok()).unwrap_or(5).max(1);
    let tpl = template();
    let base = {
        let mut fs = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
        read_state(&mut fs)
    };
    let mut checked = BTreeMap::new();
    let mut failures = Vec::new();
    for w in 0..WORKLOADS {
        let ops = workload(w);
        let o = oracle(&tpl, &ops, &model_states(&base, &ops));
        for inj in [Inject::Alloc, Inject::Growth, Inject::ReadUncorrectable, Inject::ReadIo] {
            let mut n = if full { 0 } else { (w * 3 + inj as u64) % stride };
            loop {
                match check_injection(&tpl, &ops, &o, inj, n) {
                    None => break,
                    Some(r) => {
                        *checked.entry(format!("{inj:?}")).or_insert(0u64) += 1;
                        if let Err(e) = r {
                            failures.push(format!("workload {w} {inj:?} #{n}: {e}\n  ops: {ops:?}"));
                        }
                    }
                }
                n += if full { 1 } else { stride };
            }
        }
    }
    let total: u64 = checked.values().sum();
    println!("failure injection: {WORKLOADS} workloads, {total} points checked ({checked:?}), {} failures", failures.len());
    eprintln!("failure injection: {WORKLOADS} workloads, {total} points checked ({checked:?}), {} failures", failures.len());
    for f in failures.iter().take(10) {
        eprintln!("{f}");
    }
    assert!(total > 1000, "too few injection points: {total}");
    assert!(failures.is_empty(), "{} failures", failures.len());
}

/// Every allocation (failing platform) and every read (uncorrectable, then I/O error) of
/// every workload, in turn, fails once: the operation returns an error and leaves the engine
/// either unchanged and writable or fail-stopped (read-only, with a cause); a remount (after
/// a clean unmount, or as after a crash) passes fsck and shows an acceptable state.
/// `cargo test` takes every `FERROFS_FAIL_STRIDE`-th point (default 5);
/// `FERROFS_FAIL_FULL=1` takes all.
#[test]
fn failure_injection_every_allocation_and_read() {
    let full = std::env::var_os("FERROFS_FAIL_FULL").is_some();
    enumerate_injections(full);
}

/// A device filled until writes are refused (NoSpace / short writes), then synced: the files
/// `n0`, `n1`, ... of 9000 bytes each (the last one maybe shorter).
fn template_full() -> (RamFlash, usize) {
    template_full_with(3000, 3)
}

/// A device filled with files of `chunks` writes of `chunk` bytes each, until refused.
fn template_full_with(chunk: usize, chunks: u64) -> (RamFlash, usize) {
    let f = RamFlash::new_nand(32 * 1024, 40, 512);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
    let mut n = 0usize;
    'fill: loop {
        let name = format!("n{n}");
        let ino = match fs.create(ROOT_INO, name.as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)) {
            Ok(i) => i.ino,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("create: {e:?}"),
        };
        n += 1;
        let mut off = 0u64;
        while off < chunk as u64 * chunks {
            match fs.write(ino, off, &vec![n as u8; chunk], ts(1)) {
                Ok(k) if k == chunk => off += chunk as u64,
                Ok(_) | Err(Error::NoSpace) => break 'fill,
                Err(e) => panic!("write: {e:?}"),
            }
        }
    }
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    (f, n)
}

/// Workload `w` on the full device: deletions (unlink, truncate to zero or a few bytes,
/// xattr removal is not needed: there are none), renames over existing files, fsync/sync.
fn workload_full(w: u64, files: usize) -> Vec<Op> {
    let mut rng = Rng::new(0xF011 ^ w.wrapping_mul(0x9E37_79B9));
    let mut m = Model::default();
    for i in 0..files {
        m.next += 1;
        m.files.insert(m.next, (Vec::new(), None));
        m.paths.insert(format!("n{i}"), m.next);
    }
    let mut ops = Vec::new();
    let n = 6 + rng.below(6) as usize;
    let mut guard = 0;
    while ops.len() < n && guard < 200 {
        guard += 1;
        let fs_ = m.file_paths();
        if fs_.len() < 3 {
            break;
        }
        let op = match rng.below(10) {
            0..=3 => Op::Unlink(pick(&mut rng, &fs_).unwrap()),
            4..=5 => Op::Truncate(pick(&mut rng, &fs_).unwrap(), rng.below(3) * 100),
            6..=7 => {
                let a = pick(&mut rng, &fs_).unwrap();
                let b = pick(&mut rng, &fs_).unwrap();
                if a == b {
                    continue;
                }
                Op::Rename(a, b)
            }
            8 => Op::Fsync(pick(&mut rng, &fs_).unwrap()),
            _ => Op::Sync,
        };
        m.apply(&op);
        ops.push(op);
    }
    ops
}

/// Crash enumeration on a full device: every cut point of deletion workloads (which may run
/// the free segments down to the deletion floor) must leave a medium that mounts read-write
/// (mount itself needs new heads and a checkpoint before it can free anything), passes fsck,
/// shows an acceptable state, and accepts the next deletion and a write afterwards.
#[test]
fn crash_enumeration_full_device() {
    let full = std::env::var_os("FERROFS_CRASH_FULL").is_some();
    let stride: u64 = if full { 1 } else { 3 };
    let (tpl, files) = template_full();
    assert!(files >= 10, "only {files} files fit");
    let base = {
        let mut fs = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
        read_state(&mut fs)
    };
    let mut checked = 0u64;
    let mut failures = Vec::new();
    for w in 0..16u64 {
        let ops = workload_full(w, files);
        let o = oracle(&tpl, &ops, &model_states(&base, &ops));
        let mut cut = w % stride;
        loop {
            let (mut f, done, was_cut) = run_with_cut(&tpl, &ops, Some(cut), cut % 2 == 0, None);
            if !was_cut {
                break;
            }
            checked += 1;
            f.power_on();
            let r = (|| -> Result<(), String> {
                let mut fs = Fs::mount(f, opts()).map_err(|(e, _)| format!("mount failed: {e:?}"))?;
                if fs.is_failed() || fs.is_read_only() {
                    return Err(format!("mounted read-only (failed {:?})", fs.failure()));
                }
                let r = fs.fsck().map_err(|e| format!("fsck failed: {e:?}"))?;
                if r.problems != 0 {
                    return Err(format!("fsck: {r:?}"));
                }
                let got = snapshot(&mut fs)?;
                o.check(done, &got).map_err(|e| format!("after {done} ops: {e}"))?;
                // keep going: a deletion, then a write into the space it freed
                let got = project(&got);
                let victim = got.keys().find(|k| !k.contains('@') && !k.ends_with('/')).cloned().ok_or("no file left")?;
                let vino = fs.lookup(ROOT_INO, victim.as_bytes()).map_err(|e| format!("lookup: {e:?}"))?.ino;
                fs.unlink(ROOT_INO, victim.as_bytes(), ts(50)).map_err(|e| format!("unlink after remount: {e:?}"))?;
                fs.evict(vino).map_err(|e| format!("evict after remount: {e:?}"))?;
                let c = fs
                    .create(ROOT_INO, b"again", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(51))
                    .map_err(|e| format!("create after remount: {e:?} (free segments {}, statfs {:?})", fs.stats().free_segments, fs.statfs()))?;
                fs.write(c.ino, 0, &[7u8; 2000], ts(51)).map_err(|e| format!("write after remount: {e:?}"))?;
                let f = fs.unmount().map_err(|(e, _)| format!("unmount: {e:?}"))?;
                let mut fs = Fs::mount(f, opts()).map_err(|(e, _)| format!("second mount: {e:?}"))?;
                let r = fs.fsck().map_err(|e| format!("fsck failed: {e:?}"))?;
                if r.problems != 0 {
                    return Err(format!("fsck after the second mount: {r:?}"));
                }
                Ok(())
            })();
            if let Err(e) = r {
                failures.push(format!("full workload {w} cut {cut}: {e}\n  ops: {ops:?}"));
            }
            cut += stride;
        }
    }
    println!("crash enumeration (full device): 16 workloads, {checked} cut points checked, {} failures", failures.len());
    eprintln!("crash enumeration (full device): 16 workloads, {checked} cut points checked, {} failures", failures.len());
    let mut kinds: BTreeMap<String, u32> = BTreeMap::new();
    for f in &failures {
        let k = f.split(": ").nth(1).unwrap_or("").chars().take(40).collect::<String>();
        *kinds.entry(k).or_insert(0) += 1;
    }
    eprintln!("failure kinds: {kinds:?}");
    for f in failures.iter().take(10) {
        eprintln!("{f}");
    }
    assert!(checked > 100, "only {checked} cut points");
    assert!(failures.is_empty(), "{} failures", failures.len());
}

/// Unlinks of open files (their data stays until the last close) run the free segments down to
/// the deletion floor; a crash there must leave a medium that mounts read-write: the mount
/// reclaims the orphans, opens new heads and checkpoints before anything is freed. Every cut
/// point of the last unlinks is tried.
#[test]
fn mount_after_crash_at_the_deletion_floor() {
    let (tpl, files) = template_full_with(600, 1);
    // free segments plus those reserved as heads' successors (a mount gets both)
    fn pool(fs: &Fs) -> u32 {
        (0..40).filter(|&i| fs.segment_info(i).is_some_and(|s| s.state == 0 || s.state == 4)).count() as u32
    }
    let need = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap().mount_need();
    // how far the unlinks go, and the device operations they take
    let run = |cut: Option<u64>| -> (RamFlash, usize, u32) {
        let mut fs = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
        fs.flash().cut_in = cut;
        let mut n = 0;
        let mut min_free = u32::MAX;
        for i in 0..files {
            let name = format!("n{i}");
            match fs.unlink(ROOT_INO, name.as_bytes(), ts(20 + i as i64)) {
                Ok(()) => n += 1,
                Err(Error::NoSpace) => break,
                Err(_) if fs.flash().dead => break,
                Err(e) => panic!("unlink {name}: {e:?}"),
            }
            min_free = min_free.min(pool(&fs));
            // renames of the remaining files, each a few records more
            if i + 2 < files {
                let a = format!("n{}", i + 1);
                let b = format!("m{}", i + 1);
                match fs.rename(ROOT_INO, a.as_bytes(), ROOT_INO, b.as_bytes(), 0, ts(20)) {
                    // and back (refused at the floor: the file keeps its new name and the run
                    // ends here, as when the first rename is refused)
                    Ok(()) => match fs.rename(ROOT_INO, b.as_bytes(), ROOT_INO, a.as_bytes(), 0, ts(20)) {
                        Ok(()) => {}
                        Err(Error::NoSpace) => break,
                        Err(_) if fs.flash().dead => break,
                        Err(e) => panic!("rename {b}: {e:?}"),
                    },
                    Err(Error::NoSpace) => break,
                    Err(_) if fs.flash().dead => break,
                    Err(e) => panic!("rename {a}: {e:?}"),
                }
            }
        }
        (fs.into_flash(), n, min_free)
    };
    let (f, n, min_free) = run(None);
    let total = f.writes + f.erases.iter().map(|&e| u64::from(e)).sum::<u64>() - tpl.writes - tpl.erases.iter().map(|&e| u64::from(e)).sum::<u64>();
    eprintln!("{n} of {files} files unlinked while open; free + reserved segments down to {min_free} (a mount needs {need}); {total} device operations");
    assert!(n >= 10, "only {n} unlinks");
    assert!(min_free >= need, "deletions ran the free segments down to {min_free}, below the {need} a mount needs");
    let mut checked = 0;
    let mut failures = Vec::new();
    let from = total.saturating_sub(120);
    for cut in (from..total + 1).chain(std::iter::once(u64::MAX)) {
        let (mut f, _, _) = if cut == u64::MAX { run(None) } else { run(Some(cut)) };
        f.power_on();
        checked += 1;
        let r = (|| -> Result<(), String> {
            let mut fs = Fs::mount(f, opts()).map_err(|(e, _)| format!("mount failed: {e:?}"))?;
            if fs.is_failed() || fs.is_read_only() {
                return Err(format!("mounted read-only (failed {:?})", fs.failure()));
            }
            let r = fs.fsck().map_err(|e| format!("fsck failed: {e:?}"))?;
            if r.problems != 0 {
                return Err(format!("fsck: {r:?}"));
            }
            // the orphans are gone; make room (whatever was unlinked before the cut)
            let st = read_state(&mut fs);
            for v in st.keys().filter(|k| !k.contains('@') && !k.ends_with('/')).take(40) {
                let vino = fs.lookup(ROOT_INO, v.as_bytes()).map_err(|e| format!("lookup: {e:?}"))?.ino;
                fs.unlink(ROOT_INO, v.as_bytes(), ts(50)).map_err(|e| format!("unlink after remount: {e:?}"))?;
                fs.evict(vino).map_err(|e| format!("evict after remount: {e:?}"))?;
            }
            let c = fs
                .create(ROOT_INO, b"again", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(51))
                .map_err(|e| {
                    let segs: Vec<String> = (0..40).map(|i| fs.segment_info(i).map(|s| format!("{}:{}:{}", s.state, s.live, s.flags)).unwrap_or_default()).collect();
                    format!("create after remount: {e:?} (free segments {}, statfs {:?}) {segs:?}", fs.stats().free_segments, fs.statfs())
                })?;
            fs.write(c.ino, 0, &[7u8; 2000], ts(51)).map_err(|e| format!("write after remount: {e:?}"))?;
            fs.unmount().map_err(|(e, _)| format!("unmount: {e:?}"))?;
            Ok(())
        })();
        if let Err(e) = r {
            failures.push(format!("cut {cut}: {e}"));
        }
    }
    println!("crash enumeration (deletion floor): 1 workloads, {checked} cut points checked, {} failures", failures.len());
    eprintln!("crash enumeration (deletion floor): 1 workloads, {checked} cut points checked, {} failures", failures.len());
    for f in failures.iter().take(10) {
        eprintln!("{f}");
    }
    assert!(failures.is_empty(), "{} failures", failures.len());
}
