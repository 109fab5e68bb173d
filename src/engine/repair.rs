//! Repair (`fsck.ferrofs -p` / `-y`) of what a bad page or a lost record leaves: unreadable
//! records, inodes without a name or without an inode record, entries naming nothing, wrong
//! link counts, directory sizes, parents and entry types, stale orphan entries, a segment
//! table that disagrees with the index.
//!
//! It starts from a read-only mount. What must be right before the mount writes anything is
//! fixed in RAM first (the segment table: a segment marked free but holding live records would
//! be allocated and erased; orphan entries of inodes still linked: the mount deletes what the
//! orphan list names); then the mount is finished (its checkpoint persists those two) and every
//! other repair is one failure-atomic operation of its own (`begin_mutation` .. `end_op`, one
//! atomic group), decided from a fresh analysis ([`Engine::analyze`]) in passes until nothing
//! is left to do. A cut between two repairs leaves a filesystem that the next run repairs
//! further; the caller ends with a checkpoint (unmount).

use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{
    kind, FileType, Inode, Key, Timespec, FLAG_CONT, NAME_MAX, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG,
};
use crate::engine::fs::{Engine, ROOT_INO};
use crate::engine::space::{RESERVE_DELETE, RESERVE_SEGS};
use crate::engine::fsck::Analysis;
use crate::engine::platform::{FallibleVec, Platform};
use crate::engine::dir::{dtype_of, ftype_of_dtype};

/// How much [`Engine::repair`] may change (fsck(8)'s `-p` and `-y`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairLevel {
    /// `-p`, preen: only repairs that lose nothing readable and have one answer: counts, sizes,
    /// parents, entry types, the segment table, stale orphan entries, entries naming no inode
    /// at all, unlinked inodes left off the orphan list (deleted, as a mount deletes orphans),
    /// inodes no entry names (linked into `/lost+found`).
    Preen,
    /// `-y`: everything repairable, also what drops or guesses: unreadable records (a data
    /// block becomes a hole: the file keeps its size and the block reads as zeros), inodes
    /// recreated from what names them or what they hold, extra names of directories, records
    /// that fit no inode, and accepting the state recovered after damage in the log.
    All,
}

/// One repair [`Engine::repair`] made or could not make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repair {
    /// The log lost durable records after the checkpoint (see [`Engine::log_damage`]): the
    /// state recovered without them is accepted and repaired further.
    AcceptLogDamage {
        /// First missing sequence number.
        first_missing: u64,
    },
    /// A segment's live bytes set to what the index refers to (`table` u32::MAX: it was marked
    /// free; it is in use again).
    SegmentUsage {
        /// Segment.
        seg: u32,
        /// Live bytes the table had.
        table: u32,
        /// Live bytes the index refers to.
        computed: u32,
    },
    /// An orphan entry for an inode that does not exist or is still linked, removed.
    StaleOrphan(u64),
    /// An unreadable record removed from the index (a data block becomes a hole: the file keeps
    /// its size, the block reads as zeros; an entry: its inode is reconnected).
    DropRecord(Key),
    /// A readable record whose kind does not fit its inode (an entry of a non-directory, a data
    /// block of a directory) removed.
    DropMisplaced(Key),
    /// An inode record written for an inode whose record is missing or unreadable, from what
    /// names it and what it holds (owner root, times now, permissions 0700/0600).
    Recreate {
        /// Inode.
        ino: u64,
        /// Type and permission bits given to it.
        mode: u32,
        /// Size given to it (directories: entries; files: the end of the last data block).
        size: u64,
    },
    /// Every record of an inode that does not exist and cannot be recreated (nothing names it,
    /// it holds no data) removed.
    DropRecords(u64),
    /// An entry naming an inode of which nothing is left, removed.
    DropEntry {
        /// Directory.
        dir: u64,
        /// Entry key.
        key: u64,
        /// The missing inode.
        child: u64,
    },
    /// A name of a directory removed: an extra one (a directory has one), any name of the root,
    /// or the name of a directory the root does not reach (reconnected in `/lost+found` next).
    DropName {
        /// Directory holding the entry.
        dir: u64,
        /// Entry key.
        key: u64,
        /// The directory it names.
        child: u64,
    },
    /// An entry's type set to its inode's.
    EntryType {
        /// Directory.
        dir: u64,
        /// Entry key.
        key: u64,
        /// Inode it names.
        child: u64,
        /// New type (DT_*).
        dtype: u8,
    },
    /// An inode no entry names linked into `/lost+found` as `#<ino>`.
    Reconnect(u64),
    /// An inode with link count 0 that no entry names and that is not on the orphan list (its
    /// orphan entry was lost) deleted, as a mount deletes orphans.
    DestroyUnlinked(u64),
    /// The superblock copy in this segment (damaged, unreadable or read through ECC correction)
    /// rewritten from the other copy by the mount.
    SuperblockCopy(u32),
    /// Checkpoint area 0 (A) or 1 (B) holds a slot that does not read back, or was read
    /// through ECC correction: the checkpoints move off it and erase it.
    CheckpointArea(u8),
    /// An inode's link count, size (directories) or parent (directories) set to what the tree
    /// gives: (old, new) each.
    Inode {
        /// Inode.
        ino: u64,
        /// Link count.
        nlink: (u32, u32),
        /// Size.
        size: (u64, u64),
        /// Parent.
        parent: (u64, u64),
    },
}

impl Repair {
    /// Whether `level` allows this repair.
    pub fn allowed(&self, level: RepairLevel) -> bool {
        level == RepairLevel::All
            || matches!(
                self,
                Repair::SegmentUsage { .. }
                    | Repair::SuperblockCopy(_)
                    | Repair::CheckpointArea(_)
                    | Repair::StaleOrphan(_)
                    | Repair::DropEntry { .. }
                    | Repair::EntryType { .. }
                    | Repair::Reconnect(_)
                    | Repair::DestroyUnlinked(_)
                    | Repair::Inode { .. }
            )
    }
}

/// What became of a [`Repair`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairOutcome {
    /// Made.
    Done,
    /// Needed, but the level does not allow it (left).
    NotAllowed,
    /// Tried and failed with this error, changing nothing (left).
    Failed(Error),
}

/// Summary of [`Engine::repair`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Repairs made.
    pub repaired: u64,
    /// Repairs needed but not made (not allowed at the level, or failed).
    pub left: u64,
    /// Analysis passes.
    pub passes: u32,
    /// The caller asked to stop (the repairs made so far are complete operations).
    pub cancelled: bool,
    /// Problems [`Engine::fsck`] finds afterwards.
    pub problems_after: u64,
}

/// Analysis passes at most: each pass repairs what one fresh look at the index shows; a
/// repair's consequences (an entry dropped: a directory size, an inode to reconnect) show in
/// the next one. Damage of any kind settles in four or five.
const MAX_PASSES: u32 = 16;

/// What the callback of [`Engine::repair`] sees: every repair with its outcome; it returns
/// false to stop.
pub type RepairFn<'a> = &'a mut dyn FnMut(&Repair, RepairOutcome) -> bool;

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Repair the filesystem as far as `level` allows, reporting every repair made or left to
    /// `each` (which returns false to stop). The engine must be freshly mounted read-only
    /// (`MountOptions::read_only`; anything else: `Invalid`): the repairs the mount's own
    /// writes depend on are made in RAM first, then the mount is finished (read-write from
    /// then on) and the rest goes through failure-atomic operations. The caller ends with a
    /// checkpoint (`sync` or `unmount`). Errors: those of the mount's writes, of reading the
    /// index (an unreadable index node: not repairable here), and of a repair that failed
    /// after writing (the engine is then fail-stopped).
    pub fn repair(&mut self, level: RepairLevel, now: Timespec, each: RepairFn<'_>) -> Result<RepairReport> {
        if !self.opts.read_only || !self.mount_pending {
            return Err(Error::Invalid);
        }
        let mut rep = RepairReport::default();
        macro_rules! tell {
            ($r:expr, $o:expr) => {{
                let o = $o;
                if o == RepairOutcome::Done {
                    rep.repaired = rep.repaired.saturating_add(1);
                } else {
                    rep.left = rep.left.saturating_add(1);
                }
                if !each(&$r, o) {
                    rep.cancelled = true;
                }
            }};
        }
        if let Some(d) = self.log_damage() {
            let r = Repair::AcceptLogDamage { first_missing: d.first_missing };
            if !r.allowed(level) {
                tell!(r, RepairOutcome::NotAllowed);
                rep.problems_after = self.fsck()?.problems;
                return Ok(rep);
            }
            // the state recovered after the damage is the one repaired and written
            self.damage = None;
            tell!(r, RepairOutcome::Done);
        }
        // In RAM, before the mount writes: the segment table, and the orphan entries of inodes
        // that are still linked (the mount would delete them).
        {
            let mut found: P::Vec<(u32, u32, u32)> = P::Vec::new();
            let mut err = Ok(());
            self.segment_usage(true, &mut |seg, table, computed| {
                if err.is_ok() {
                    err = found.try_push((seg, table, computed));
                }
            })?;
            err?;
            for &(seg, table, computed) in found.as_slice() {
                tell!(Repair::SegmentUsage { seg, table, computed }, RepairOutcome::Done);
            }
        }
        {
            let a = self.analyze(&mut |_| {}, &mut |_| {})?;
            for &o in a.orphans.as_slice() {
                if a.obj(o).is_some_and(|x| x.valid && (x.nlink != 0 || x.names > 0)) {
                    let k = Key::new(0, kind::ORPHAN, o);
                    self.idx_del_range(k, k)?;
                    tell!(Repair::StaleOrphan(o), RepairOutcome::Done);
                }
            }
        }
        if rep.cancelled {
            rep.problems_after = self.fsck()?.problems;
            return Ok(rep);
        }
        // the mount rewrites a damaged superblock copy, and the checkpoints move off a damaged
        // checkpoint area and erase it
        let (sb_copy, refreshed) = (self.sb_refresh, self.log.faults.superblock_refreshes);
        let areas = self.cp_scrub;
        self.set_read_only(false)?;
        if let Some(s) = sb_copy.filter(|_| self.log.faults.superblock_refreshes > refreshed) {
            tell!(Repair::SuperblockCopy(s), RepairOutcome::Done);
        }
        for (a, &f) in areas.iter().enumerate() {
            if f {
                tell!(Repair::CheckpointArea(a as u8), RepairOutcome::Done);
            }
        }
        let mut failed: P::Vec<Repair> = P::Vec::new();
        let mut plan: P::Vec<Repair> = P::Vec::new();
        while rep.passes < MAX_PASSES && !rep.cancelled {
            rep.passes = rep.passes.saturating_add(1);
            let a = self.analyze(&mut |_| {}, &mut |_| {})?;
            let mut chosen = None;
            for stage in 0..3u8 {
                plan.clear();
                plan_stage(&a, stage, &mut plan)?;
                if plan.as_slice().iter().any(|r| r.allowed(level) && !failed.as_slice().contains(r)) {
                    chosen = Some(stage);
                    break;
                }
            }
            if chosen.is_none() {
                // nothing more this level can do: what is needed is left
                for stage in 0..3u8 {
                    plan.clear();
                    plan_stage(&a, stage, &mut plan)?;
                    for r in plan.as_slice() {
                        if !failed.as_slice().contains(r) {
                            tell!(*r, RepairOutcome::NotAllowed);
                        }
                    }
                }
                break;
            }
            drop(a);
            for i in 0..plan.len() {
                let r = match plan.as_slice().get(i) {
                    Some(r) => *r,
                    None => break,
                };
                if !r.allowed(level) || failed.as_slice().contains(&r) {
                    continue;
                }
                match self.apply_repair(&r, now) {
                    Ok(()) => tell!(r, RepairOutcome::Done),
                    Err(e) if self.log.failed => return Err(e),
                    Err(e) => {
                        failed.try_push(r)?;
                        tell!(r, RepairOutcome::Failed(e));
                    }
                }
                if rep.cancelled {
                    break;
                }
            }
        }
        // the repairs keep the table right; say so if they did not
        let mut found = 0u64;
        self.segment_usage(true, &mut |_, _, _| found = found.saturating_add(1))?;
        rep.repaired = rep.repaired.saturating_add(found);
        rep.problems_after = self.fsck()?.problems;
        Ok(rep)
    }

    /// Make one repair, as one operation: nothing is changed when it fails before its first
    /// record; a failure after it stops the engine (fail-stop).
    fn apply_repair(&mut self, r: &Repair, now: Timespec) -> Result<()> {
        // /lost+found first, as an operation of its own
        let lf = match r {
            Repair::Reconnect(_) => self.lost_found(now)?,
            _ => 0,
        };
        let res = self.apply_repair_op(r, lf, now);
        self.end_op(res)
    }

    fn apply_repair_op(&mut self, r: &Repair, lf: u64, now: Timespec) -> Result<()> {
        match *r {
            Repair::AcceptLogDamage { .. }
            | Repair::SegmentUsage { .. }
            | Repair::SuperblockCopy(_)
            | Repair::CheckpointArea(_) => Ok(()),
            Repair::StaleOrphan(ino) => self.drop_key(Key::new(0, kind::ORPHAN, ino)),
            Repair::DropRecord(k) | Repair::DropMisplaced(k) => {
                self.icache_forget(k.ino);
                self.drop_key(k)
            }
            Repair::DropEntry { dir, key, .. } | Repair::DropName { dir, key, .. } => {
                self.drop_key(Key::new(dir, kind::DENT, key))
            }
            Repair::DropRecords(ino) => {
                self.begin_mutation(RESERVE_DELETE)?;
                self.icache_forget(ino);
                self.delete_range(Key::new(ino, 0, 0), Key::new(ino, u8::MAX, u64::MAX), 0)
            }
            Repair::DestroyUnlinked(ino) => {
                self.begin_mutation(RESERVE_DELETE)?;
                self.destroy_inode(ino)
            }
            Repair::Recreate { ino, mode, size } => {
                self.begin_mutation(RESERVE_SEGS)?;
                let is_dir = mode & S_IFMT == S_IFDIR;
                let node = Inode {
                    ino,
                    mode,
                    uid: 0,
                    gid: 0,
                    // set from the tree by the next pass; 1 keeps it off "unlinked" meanwhile
                    nlink: if is_dir { 2 } else { 1 },
                    size,
                    atime: now,
                    mtime: now,
                    ctime: now,
                    rdev: 0,
                    flags: 0,
                    generation: (ino as u32).wrapping_mul(2_654_435_761),
                    parent: if is_dir { ROOT_INO } else { 0 },
                };
                self.next_ino = self.next_ino.max(ino.saturating_add(1));
                self.write_inode(&node, 0)
            }
            Repair::EntryType { dir, key, child, dtype } => {
                self.begin_mutation(RESERVE_SEGS)?;
                let k = Key::new(dir, kind::DENT, key);
                self.read_key(&k)?.ok_or(Error::NotFound)?;
                let mut name = [0u8; NAME_MAX];
                let n = {
                    let p = self.payload();
                    let n = usize::from(*p.get(9).ok_or(Error::Corrupt)?);
                    let src = p.get(10..10usize.saturating_add(n)).ok_or(Error::Corrupt)?;
                    name.get_mut(..n).ok_or(Error::Corrupt)?.copy_from_slice(src);
                    n
                };
                self.write_dent(dir, key, child, dtype, name.get(..n).ok_or(Error::Corrupt)?, 0)
            }
            Repair::Reconnect(ino) => {
                self.begin_mutation(RESERVE_SEGS)?;
                let mut d = self.dir_inode(lf)?;
                let mut t = self.getattr(ino)?;
                let mut nb = [0u8; 24];
                let name = lost_name(ino, &mut nb);
                let key = match self.find_dent(lf, name)? {
                    Ok(_) => return Err(Error::Exists),
                    Err(k) => k,
                };
                self.write_dent(lf, key, ino, dtype_of(t.mode), name, FLAG_CONT)?;
                if t.is_dir() {
                    t.parent = lf;
                    d.nlink = d.nlink.saturating_add(1);
                } else {
                    t.nlink = 1;
                }
                t.ctime = now;
                self.write_inode(&t, FLAG_CONT)?;
                d.size = d.size.saturating_add(1);
                d.mtime = now;
                d.ctime = now;
                self.write_inode(&d, 0)
            }
            Repair::Inode { ino, nlink, size, parent } => {
                self.begin_mutation(RESERVE_DELETE)?;
                let mut i = self.getattr(ino)?;
                i.nlink = nlink.1;
                i.size = size.1;
                i.parent = parent.1;
                self.write_inode(&i, 0)
            }
        }
    }

    /// Remove one key from the index (one DELETE record).
    fn drop_key(&mut self, k: Key) -> Result<()> {
        self.begin_mutation(RESERVE_DELETE)?;
        self.delete_range(k, k, 0)
    }

    /// `/lost+found`, made (mode 0700, owner root) when missing.
    fn lost_found(&mut self, now: Timespec) -> Result<u64> {
        match self.lookup(ROOT_INO, b"lost+found") {
            Ok(i) if i.is_dir() => Ok(i.ino),
            Ok(_) => Err(Error::Exists),
            Err(Error::NotFound) => Ok(self.mkdir(ROOT_INO, b"lost+found", 0o700, 0, 0, now)?.ino),
            Err(e) => Err(e),
        }
    }
}

/// `#<ino>`, the name of a reconnected inode in `/lost+found` (as e2fsck names them).
fn lost_name(ino: u64, buf: &mut [u8; 24]) -> &[u8] {
    let mut digits = [0u8; 20];
    let mut n = ino;
    let mut k = 0usize;
    loop {
        if let Some(d) = digits.get_mut(k) {
            *d = b'0' + (n % 10) as u8;
        }
        k = k.saturating_add(1);
        n /= 10;
        if n == 0 || k >= digits.len() {
            break;
        }
    }
    if let Some(b) = buf.get_mut(0) {
        *b = b'#';
    }
    for i in 0..k {
        if let (Some(dst), Some(src)) = (buf.get_mut(i.saturating_add(1)), digits.get(k.saturating_sub(i + 1))) {
            *dst = *src;
        }
    }
    buf.get(..k.saturating_add(1)).unwrap_or(&[])
}

/// The repairs one stage calls for, from an analysis: 0, records (unreadable or misplaced
/// records, inodes without an inode record, entries naming nothing or the wrong type, extra
/// names of directories, stale orphan entries); 1, attachment (inodes no entry names,
/// directories the root does not reach); 2, counts (link counts, directory sizes and parents).
/// A stage's repairs are made only when the stages before it have none left the level allows:
/// each works on a tree the previous ones settled.
fn plan_stage<P: Platform>(a: &Analysis<P>, stage: u8, plan: &mut P::Vec<Repair>) -> Result<()> {
    match stage {
        0 => {
            for &k in a.bad.as_slice() {
                plan.try_push(Repair::DropRecord(k))?;
            }
            for &k in a.misplaced.as_slice() {
                plan.try_push(Repair::DropMisplaced(k))?;
            }
            for o in a.objs.as_slice().iter().filter(|o| !o.valid) {
                if o.orphan {
                    // unlinked: what is left of it goes
                    plan.try_push(Repair::DropRecords(o.ino))?;
                    continue;
                }
                let dir = o.entries > 0 || (o.names > 0 && o.name_dtype == FileType::Dir.dtype()) || o.ino == ROOT_INO;
                if dir {
                    let perm = if o.ino == ROOT_INO { 0o755 } else { 0o700 };
                    plan.try_push(Repair::Recreate { ino: o.ino, mode: S_IFDIR | perm, size: o.entries })?;
                } else if o.data > 0 || (o.names > 0 && (o.bad_inode || o.records > 0)) {
                    let ft = if o.names > 0 { ftype_of_dtype(o.name_dtype) } else { FileType::Regular };
                    // a symlink needs its target block; a dtype that names no type is a file
                    let mode = match ft {
                        FileType::Symlink if o.data > 0 => S_IFLNK | 0o777,
                        FileType::Symlink | FileType::Dir | FileType::Regular => S_IFREG | 0o600,
                        other => other.mode_bits() | 0o600,
                    };
                    let size = if mode & S_IFMT == S_IFREG || mode & S_IFMT == S_IFLNK { o.data_end } else { 0 };
                    plan.try_push(Repair::Recreate { ino: o.ino, mode, size })?;
                } else if o.names == 0 {
                    plan.try_push(Repair::DropRecords(o.ino))?;
                }
                // named, nothing else: the entries naming it go (below)
            }
            for r in a.refs.as_slice() {
                if a.obj(r.dir).is_some_and(|d| d.valid && !d.is_dir()) {
                    continue; // misplaced: dropped above
                }
                let c = match a.obj(r.child) {
                    Some(c) => c,
                    None => {
                        plan.try_push(Repair::DropEntry { dir: r.dir, key: r.key, child: r.child })?;
                        continue;
                    }
                };
                if !c.valid {
                    if !c.bad_inode && c.records == 0 {
                        plan.try_push(Repair::DropEntry { dir: r.dir, key: r.key, child: r.child })?;
                    }
                    continue;
                }
                let keep = r.dir == c.keep_dir && r.key == c.keep_key;
                if c.ino == ROOT_INO || (c.is_dir() && !keep) {
                    plan.try_push(Repair::DropName { dir: r.dir, key: r.key, child: r.child })?;
                    continue;
                }
                let want = dtype_of(c.mode);
                if r.dtype != want {
                    plan.try_push(Repair::EntryType { dir: r.dir, key: r.key, child: r.child, dtype: want })?;
                }
            }
            for &o in a.orphans.as_slice() {
                match a.obj(o) {
                    Some(x) if x.valid && x.nlink == 0 && x.names == 0 => {}
                    _ => plan.try_push(Repair::StaleOrphan(o))?,
                }
            }
        }
        1 => {
            let root_ok = a.obj(ROOT_INO).is_some_and(|o| o.is_dir());
            for o in a.objs.as_slice().iter().filter(|o| o.valid && o.ino != ROOT_INO && o.names == 0 && !o.orphan) {
                plan.try_push(if o.nlink == 0 { Repair::DestroyUnlinked(o.ino) } else { Repair::Reconnect(o.ino) })?;
            }
            // one detached directory per pass: its names go, the next pass reconnects it (and
            // the root then reaches what hangs below it)
            if root_ok {
                if let Some(o) = a.objs.as_slice().iter().find(|o| o.is_dir() && o.names > 0 && !o.reachable && o.ino != ROOT_INO) {
                    for r in a.refs.as_slice().iter().filter(|r| r.child == o.ino) {
                        plan.try_push(Repair::DropName { dir: r.dir, key: r.key, child: r.child })?;
                    }
                }
            }
        }
        _ => {
            for o in a.objs.as_slice().iter().filter(|o| o.valid && !o.is_orphan0()) {
                let (nlink, size, parent) = if o.is_dir() {
                    let parent = if o.ino == ROOT_INO {
                        ROOT_INO
                    } else if o.names > 0 {
                        o.keep_dir
                    } else {
                        o.parent
                    };
                    (o.subdirs.saturating_add(2), o.entries, parent)
                } else if o.names > 0 {
                    (o.names, o.size, o.parent)
                } else {
                    continue;
                };
                if (nlink, size, parent) != (o.nlink, o.size, o.parent) {
                    plan.try_push(Repair::Inode {
                        ino: o.ino,
                        nlink: (o.nlink, nlink),
                        size: (o.size, size),
                        parent: (o.parent, parent),
                    })?;
                }
            }
        }
    }
    Ok(())
}
