//! Offline-style consistency check of a mounted filesystem (for tests, `fsck` and `dump` tools),
//! and the analysis the repair (`repair.rs`) acts on.
//!
//! Uses RAM proportional to the number of inodes and directory entries: it is a tool, not
//! something the kernel runs.

use crate::engine::codec::Reader;
use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{group_count, group_entry, group_extent, kind, rtype, FileType, Inode, Key, Loc, BLOCK_SIZE, REC_HDR, S_IFDIR, S_IFMT};
use crate::engine::log::Scan;
use crate::engine::fs::{Engine, ROOT_INO};
use crate::engine::platform::{FallibleVec, Platform};
use crate::engine::dir::dtype_of;

/// One inconsistency found by [`Engine::fsck`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsckProblem {
    /// The record the index points at for this key is unreadable, fails its CRC, holds another
    /// key or cannot be decoded (an inode record of another number, a truncated entry).
    BadRecord(Key),
    /// An aligned data block (format.md 8.3) whose slot no valid data group of its segment
    /// covers, or whose group's entry for that slot names another key or CRC (format.md 8.2).
    Ungrouped(Key),
    /// The segment usage table disagrees with the index.
    SegmentUsage {
        /// Segment.
        seg: u32,
        /// Live bytes in the table (u32::MAX: the segment is marked free).
        table: u32,
        /// Live bytes computed from the index.
        computed: u32,
    },
    /// A directory entry, data block or xattr belongs to an inode that does not exist.
    NoOwner(Key),
    /// A record whose kind does not fit its inode: a directory entry of a non-directory, a
    /// data block of a directory.
    Misplaced(Key),
    /// A directory entry names an inode that does not exist.
    Dangling {
        /// Directory.
        dir: u64,
        /// Missing child.
        child: u64,
    },
    /// An inode's link count does not match the entries naming it.
    LinkCount {
        /// Inode.
        ino: u64,
        /// Stored link count.
        nlink: u32,
        /// Expected from the directory tree.
        expected: u32,
    },
    /// An inode no directory entry names, and not on the orphan list (an unlinked inode whose
    /// orphan entry was lost when `nlink` is 0, else a file whose names were lost).
    Unattached {
        /// Inode.
        ino: u64,
        /// Its stored link count.
        nlink: u32,
    },
    /// A directory named by more than one entry (the root: by any entry).
    ExtraNames {
        /// Directory.
        ino: u64,
        /// Entries naming it.
        names: u32,
    },
    /// A directory that entries name but that the root does not reach (a cycle of
    /// directories, or a name in a directory whose inode is missing).
    Unreachable(u64),
    /// A directory's size is not its number of entries.
    DirSize {
        /// Directory.
        ino: u64,
        /// Stored size.
        size: u64,
        /// Entries found.
        entries: u64,
    },
    /// A directory's parent field does not name the directory holding it.
    Parent {
        /// Directory.
        ino: u64,
        /// Stored parent.
        parent: u64,
    },
    /// A directory entry's type does not match the inode it names.
    EntryType {
        /// Directory.
        dir: u64,
        /// Child.
        child: u64,
    },
    /// An orphan entry names an inode that is missing or still linked.
    Orphan(u64),
    /// The root directory is missing or not a directory.
    NoRoot,
    /// The log after the checkpoint lost records that had been made durable (see
    /// [`Engine::log_damage`]): the state is what follows the damage, applied without them.
    LogDamage {
        /// First missing sequence number.
        first_missing: u64,
        /// Segment of the first bad spot (`u32::MAX`: none found).
        seg: u32,
        /// Its offset.
        off: u32,
    },
}

/// Summary of [`Engine::fsck`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// Inodes.
    pub inodes: u64,
    /// Directories among them.
    pub directories: u64,
    /// Directory entries.
    pub entries: u64,
    /// File data blocks.
    pub data_blocks: u64,
    /// Extended attributes.
    pub xattrs: u64,
    /// Orphans (unlinked, not yet evicted).
    pub orphans: u64,
    /// Number of problems found.
    pub problems: u64,
    /// The first problem found.
    pub first: Option<FsckProblem>,
}

impl FsckReport {
    fn problem(&mut self, p: FsckProblem) {
        self.problems = self.problems.saturating_add(1);
        if self.first.is_none() {
            self.first = Some(p);
        }
    }
}

/// What the index holds for one inode number.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Obj {
    pub(crate) ino: u64,
    /// A readable inode record of this number.
    pub(crate) valid: bool,
    /// An inode key whose record is unreadable or not this inode.
    pub(crate) bad_inode: bool,
    pub(crate) mode: u32,
    pub(crate) nlink: u32,
    pub(crate) size: u64,
    pub(crate) parent: u64,
    /// Directory entry keys (readable or not).
    pub(crate) entries: u64,
    /// Readable entries of type directory.
    pub(crate) subdirs: u32,
    /// Readable data blocks, and the end of the last one (its block offset plus its length).
    pub(crate) data: u64,
    pub(crate) data_end: u64,
    /// Keys other than the inode's own (readable or not).
    pub(crate) records: u64,
    /// Readable entries naming this inode (in directories with or without an inode record).
    pub(crate) names: u32,
    /// The name to keep when a directory has several: in its parent if one is there, else the
    /// first found; `name_dtype` is that entry's type.
    pub(crate) keep_dir: u64,
    pub(crate) keep_key: u64,
    pub(crate) name_dtype: u8,
    pub(crate) orphan: bool,
    pub(crate) reachable: bool,
}

impl Obj {
    pub(crate) fn is_dir(&self) -> bool {
        self.valid && self.mode & S_IFMT == S_IFDIR
    }
    /// Unlinked and on the orphan list: the next mount (or evict) deletes it. (The analysis
    /// sets an orphan's `nlink` to 0: its record may still count the last link.)
    pub(crate) fn is_orphan0(&self) -> bool {
        self.orphan && self.nlink == 0
    }
}

/// A readable directory entry.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ref {
    pub(crate) dir: u64,
    pub(crate) key: u64,
    pub(crate) child: u64,
    pub(crate) dtype: u8,
}

/// Everything [`Engine::fsck`] learnt from the index, for the repair.
pub(crate) struct Analysis<P: Platform> {
    /// Every inode number with a key in the index, in order.
    pub(crate) objs: P::Vec<Obj>,
    /// Readable entries, in (directory, key) order.
    pub(crate) refs: P::Vec<Ref>,
    /// Keys whose records are unreadable (inode keys excepted: `Obj::bad_inode`).
    pub(crate) bad: P::Vec<Key>,
    /// Readable records whose kind does not fit their inode.
    pub(crate) misplaced: P::Vec<Key>,
    /// Inodes on the orphan list.
    pub(crate) orphans: P::Vec<u64>,
    pub(crate) rep: FsckReport,
}

impl<P: Platform> Analysis<P> {
    pub(crate) fn obj(&self, ino: u64) -> Option<&Obj> {
        let s = self.objs.as_slice();
        s.binary_search_by_key(&ino, |o| o.ino).ok().and_then(|i| s.get(i))
    }
}

/// The key after `key` in index order.
fn key_after(key: &Key) -> Key {
    match key.key.checked_add(1) {
        Some(n) => Key::new(key.ino, key.kind, n),
        None => match key.kind.checked_add(1) {
            Some(k) => Key::new(key.ino, k, 0),
            None => Key::new(key.ino.saturating_add(1), 0, 0),
        },
    }
}

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Check the whole filesystem: segment usage, every indexed record, ownership, link counts,
    /// directory sizes and parents, entry types, orphans, reachability from the root. Reads only.
    pub fn fsck(&mut self) -> Result<FsckReport> {
        self.fsck_each(&mut |_| {})
    }

    /// [`Engine::fsck`], calling `each` with every problem found (the report keeps the first
    /// and the count), so that a tool can list them all without the engine allocating.
    pub fn fsck_each(&mut self, each: &mut dyn FnMut(&FsckProblem)) -> Result<FsckReport> {
        Ok(self.analyze(each, &mut |_| {})?.rep)
    }

    /// [`Engine::fsck_each`], also calling `progress` with the number of index keys checked
    /// so far (every 1024 keys: a tool's progress display).
    pub fn fsck_progress(&mut self, each: &mut dyn FnMut(&FsckProblem), progress: &mut dyn FnMut(u64)) -> Result<FsckReport> {
        Ok(self.analyze(each, progress)?.rep)
    }

    /// Read the whole index: every record (CRC, key, decoding), who owns what, who names whom,
    /// what the root reaches; call `each` with every problem.
    pub(crate) fn analyze(&mut self, each: &mut dyn FnMut(&FsckProblem), progress: &mut dyn FnMut(u64)) -> Result<Analysis<P>> {
        let mut a: Analysis<P> = Analysis {
            objs: P::Vec::new(),
            refs: P::Vec::new(),
            bad: P::Vec::new(),
            misplaced: P::Vec::new(),
            orphans: P::Vec::new(),
            rep: FsckReport::default(),
        };
        macro_rules! problem {
            ($p:expr) => {{
                let p = $p;
                each(&p);
                a.rep.problem(p);
            }};
        }
        if let Some(d) = self.log_damage() {
            problem!(FsckProblem::LogDamage { first_missing: d.first_missing, seg: d.seg, off: d.off });
        }
        {
            let rep = &mut a.rep;
            self.segment_usage(false, &mut |seg, table, computed| {
                let p = FsckProblem::SegmentUsage { seg, table, computed };
                each(&p);
                rep.problem(p);
            })?;
        }
        let mut group = GroupSeen::<P> { seg: u32::MAX, payload0: 0, end: 0, table: P::Vec::new() };
        let mut from = Key::default();
        let mut keys = 0u64;
        while let Some((key, loc)) = self.idx_next(&from)? {
            from = key_after(&key);
            keys = keys.saturating_add(1);
            if keys.is_multiple_of(1024) {
                progress(keys);
            }
            let plen = match self.read_at(&key, loc) {
                Ok(n) => Some(n),
                Err(Error::Corrupt) => None,
                Err(e) => return Err(e),
            };
            if key.ino == 0 {
                // only orphan entries live under inode 0
                if key.kind == kind::ORPHAN && plen.is_some() {
                    a.rep.orphans = a.rep.orphans.saturating_add(1);
                    a.orphans.try_push(key.key)?;
                } else {
                    a.bad.try_push(key)?;
                    problem!(FsckProblem::BadRecord(key));
                }
                continue;
            }
            if a.objs.as_slice().last().is_none_or(|o| o.ino != key.ino) {
                a.objs.try_push(Obj { ino: key.ino, ..Obj::default() })?;
            }
            let (valid, is_dir) = match a.objs.as_slice().last() {
                Some(o) => (o.valid, o.is_dir()),
                None => return Err(Error::Corrupt),
            };
            let decoded = match (key.kind, plen) {
                (_, None) => false,
                (kind::INODE, Some(_)) => match Inode::decode(self.payload()) {
                    Ok(i) if i.ino == key.ino && key.key == 0 => {
                        a.rep.inodes = a.rep.inodes.saturating_add(1);
                        if i.mode & S_IFMT == S_IFDIR {
                            a.rep.directories = a.rep.directories.saturating_add(1);
                        }
                        if let Some(o) = a.objs.as_mut_slice().last_mut() {
                            o.valid = true;
                            o.mode = i.mode;
                            o.nlink = i.nlink;
                            o.size = i.size;
                            o.parent = i.parent;
                        }
                        true
                    }
                    _ => false,
                },
                (kind::DENT, Some(_)) => {
                    let mut r = Reader::new(self.payload());
                    match (r.u64(), r.u8(), r.u8()) {
                        (Ok(child), Ok(dtype), Ok(nlen)) if r.bytes(usize::from(nlen)).is_ok() && nlen > 0 => {
                            a.rep.entries = a.rep.entries.saturating_add(1);
                            if !valid {
                                problem!(FsckProblem::NoOwner(key));
                            } else if !is_dir {
                                problem!(FsckProblem::Misplaced(key));
                                a.misplaced.try_push(key)?;
                            }
                            if !valid || is_dir {
                                a.refs.try_push(Ref { dir: key.ino, key: key.key, child, dtype })?;
                                if let Some(o) = a.objs.as_mut_slice().last_mut() {
                                    if dtype == FileType::Dir.dtype() {
                                        o.subdirs = o.subdirs.saturating_add(1);
                                    }
                                }
                            }
                            true
                        }
                        _ => false,
                    }
                }
                (kind::DATA, Some(_)) if loc.is_aligned() && !self.grouped(&key, loc, &mut group)? => {
                    a.bad.try_push(key)?;
                    problem!(FsckProblem::Ungrouped(key));
                    true
                }
                (kind::DATA, Some(n)) => {
                    a.rep.data_blocks = a.rep.data_blocks.saturating_add(1);
                    if !valid {
                        problem!(FsckProblem::NoOwner(key));
                    } else if is_dir {
                        problem!(FsckProblem::Misplaced(key));
                        a.misplaced.try_push(key)?;
                    }
                    if let Some(o) = a.objs.as_mut_slice().last_mut() {
                        o.data = o.data.saturating_add(1);
                        let end = key.key.saturating_mul(BLOCK_SIZE as u64).saturating_add(n as u64);
                        o.data_end = o.data_end.max(end);
                    }
                    true
                }
                (kind::XATTR, Some(_)) => {
                    a.rep.xattrs = a.rep.xattrs.saturating_add(1);
                    if !valid {
                        problem!(FsckProblem::NoOwner(key));
                    }
                    true
                }
                _ => false,
            };
            if let Some(o) = a.objs.as_mut_slice().last_mut() {
                if key.kind != kind::INODE {
                    o.records = o.records.saturating_add(1);
                }
                if key.kind == kind::DENT {
                    o.entries = o.entries.saturating_add(1);
                }
                if !decoded && key.kind == kind::INODE && key.key == 0 {
                    o.bad_inode = true;
                }
            }
            if !decoded {
                if key.kind != kind::INODE || key.key != 0 {
                    a.bad.try_push(key)?;
                }
                problem!(FsckProblem::BadRecord(key));
            }
        }
        // orphans
        for i in 0..a.orphans.len() {
            let o = match a.orphans.as_slice().get(i) {
                Some(o) => *o,
                None => break,
            };
            let found = a.objs.as_slice().binary_search_by_key(&o, |x| x.ino).ok();
            match found.and_then(|idx| a.objs.as_mut_slice().get_mut(idx)) {
                Some(x) => {
                    x.orphan = true;
                    if !x.valid {
                        problem!(FsckProblem::Orphan(o));
                    }
                    // on the orphan list: no links, whatever its record says (the last unlink
                    // does not rewrite it)
                    x.nlink = 0;
                }
                None => problem!(FsckProblem::Orphan(o)),
            }
        }
        // entries, by child: names, types, parents
        let mut by_child: P::Vec<Ref> = P::Vec::new();
        for r in a.refs.as_slice() {
            by_child.try_push(*r)?;
        }
        heapsort_by_child(by_child.as_mut_slice());
        for r in by_child.as_slice() {
            let idx = a.objs.as_slice().binary_search_by_key(&r.child, |x| x.ino).ok();
            let c = match idx.and_then(|i| a.objs.as_mut_slice().get_mut(i)) {
                Some(c) => c,
                None => {
                    problem!(FsckProblem::Dangling { dir: r.dir, child: r.child });
                    continue;
                }
            };
            c.names = c.names.saturating_add(1);
            if c.names == 1 || (r.dir == c.parent && c.keep_dir != c.parent) {
                c.keep_dir = r.dir;
                c.keep_key = r.key;
                c.name_dtype = r.dtype;
            }
            if !c.valid {
                problem!(FsckProblem::Dangling { dir: r.dir, child: r.child });
                continue;
            }
            let (ino, parent, dir, mode) = (c.ino, c.parent, c.is_dir(), c.mode);
            if r.dtype != dtype_of(mode) {
                problem!(FsckProblem::EntryType { dir: r.dir, child: r.child });
            }
            if dir && parent != r.dir {
                problem!(FsckProblem::Parent { ino, parent });
            }
        }
        drop(by_child);
        // what the root reaches (through directories with an inode record)
        let root_ok = a.obj(ROOT_INO).is_some_and(|o| o.is_dir());
        if !root_ok {
            problem!(FsckProblem::NoRoot);
        } else {
            let mut queue: P::Vec<u64> = P::Vec::new();
            queue.try_push(ROOT_INO)?;
            if let Ok(i) = a.objs.as_slice().binary_search_by_key(&ROOT_INO, |x| x.ino) {
                if let Some(o) = a.objs.as_mut_slice().get_mut(i) {
                    o.reachable = true;
                }
            }
            let mut qi = 0usize;
            while let Some(&d) = queue.as_slice().get(qi) {
                qi = qi.saturating_add(1);
                let refs = a.refs.as_slice();
                let lo = refs.partition_point(|r| r.dir < d);
                let hi = refs.partition_point(|r| r.dir <= d);
                for r in refs.get(lo..hi).unwrap_or(&[]) {
                    let Ok(i) = a.objs.as_slice().binary_search_by_key(&r.child, |x| x.ino) else { continue };
                    if let Some(o) = a.objs.as_mut_slice().get_mut(i) {
                        if !o.reachable {
                            o.reachable = true;
                            if o.is_dir() {
                                queue.try_push(o.ino)?;
                            }
                        }
                    }
                }
            }
        }
        for o in a.objs.as_slice() {
            if !o.valid {
                continue;
            }
            if o.orphan && o.names > 0 {
                // on the orphan list, yet named
                problem!(FsckProblem::Orphan(o.ino));
                continue;
            }
            if o.is_dir() {
                if o.size != o.entries {
                    problem!(FsckProblem::DirSize { ino: o.ino, size: o.size, entries: o.entries });
                }
                let expected = if o.is_orphan0() { 0 } else { o.subdirs.saturating_add(2) };
                let want_names = if o.ino == ROOT_INO || o.is_orphan0() { 0 } else { 1 };
                if o.names == 0 && want_names == 1 {
                    problem!(FsckProblem::Unattached { ino: o.ino, nlink: o.nlink });
                } else if o.names > want_names {
                    problem!(FsckProblem::ExtraNames { ino: o.ino, names: o.names });
                } else if o.nlink != expected {
                    problem!(FsckProblem::LinkCount { ino: o.ino, nlink: o.nlink, expected });
                }
                if o.names > 0 && !o.reachable && o.ino != ROOT_INO && root_ok {
                    problem!(FsckProblem::Unreachable(o.ino));
                }
            } else if o.names == 0 && !o.orphan {
                problem!(FsckProblem::Unattached { ino: o.ino, nlink: o.nlink });
            } else if o.nlink != o.names {
                problem!(FsckProblem::LinkCount { ino: o.ino, nlink: o.nlink, expected: o.names });
            }
        }
        Ok(a)
    }
}

/// In-place heapsort of references by child inode (no allocation, no panicking path).
/// The data group [`Engine::grouped`] found last: its segment, its payload slots
/// (`payload0..end`) and its table.
struct GroupSeen<P: Platform> {
    seg: u32,
    payload0: u32,
    end: u32,
    table: P::Vec<u8>,
}

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Whether the aligned location `loc` of `key` is a slot of a valid data group of its
    /// segment whose entry for that slot names `key` and the location's CRC (format.md 8.2,
    /// 8.3). The segment is walked from its start as recovery walks it (past a bad spot to the
    /// next valid record) up to the group whose slots hold `loc`; `seen` keeps that group, which
    /// the next blocks of a file usually share.
    fn grouped(&mut self, key: &Key, loc: Loc, seen: &mut GroupSeen<P>) -> Result<bool> {
        let slot = loc.start();
        if seen.seg != loc.seg || slot < seen.payload0 || slot >= seen.end {
            seen.seg = u32::MAX;
            let seq = self.log.seg(loc.seg)?.seq;
            let mut tmp: P::Vec<u8> = P::Vec::new();
            let mut off = 0u32;
            loop {
                let found = match self.log.scan_at(loc.seg, off, seq, &mut tmp)? {
                    Scan::Rec(h, l) => Some((h, l)),
                    Scan::End => None,
                    Scan::Bad => self.log.resync(loc.seg, off, seq, &mut tmp)?,
                };
                let Some((h, l)) = found else { return Ok(false) };
                if l.off > slot {
                    return Ok(false);
                }
                let end = l.off.saturating_add(l.len);
                if h.rtype == rtype::DGROUP && slot < end {
                    let table = tmp.as_slice().get(REC_HDR..).ok_or(Error::Corrupt)?;
                    let Some((payload0, _)) = group_count(table).ok().and_then(|n| group_extent(l.off, n, self.log.data_align)) else {
                        return Ok(false);
                    };
                    seen.table.clear();
                    seen.table.try_extend_from_slice(table)?;
                    (seen.seg, seen.payload0, seen.end) = (loc.seg, payload0, end);
                    break;
                }
                if end <= off {
                    return Ok(false);
                }
                off = end;
            }
        }
        if slot < seen.payload0 || !(slot - seen.payload0).is_multiple_of(BLOCK_SIZE) {
            return Ok(false);
        }
        let Ok(e) = group_entry(seen.table.as_slice(), (slot - seen.payload0) / BLOCK_SIZE) else { return Ok(false) };
        Ok(Key::new(e.ino, kind::DATA, e.blk) == *key && e.crc == loc.len)
    }
}

fn heapsort_by_child(v: &mut [Ref]) {
    let n = v.len();
    let mut start = n / 2;
    while start > 0 {
        start -= 1;
        sift_down(v, start, n);
    }
    let mut end = n;
    while end > 1 {
        end -= 1;
        if end < v.len() {
            v.swap(0, end);
        }
        sift_down(v, 0, end);
    }
}

fn sift_down(v: &mut [Ref], mut root: usize, end: usize) {
    let key = |v: &[Ref], i: usize| v.get(i).map_or((0, 0, 0), |r| (r.child, r.dir, r.key));
    loop {
        let mut child = match root.checked_mul(2).and_then(|c| c.checked_add(1)) {
            Some(c) if c < end => c,
            _ => return,
        };
        if let Some(c2) = child.checked_add(1) {
            if c2 < end && key(v, child) < key(v, c2) {
                child = c2;
            }
        }
        if key(v, root) >= key(v, child) {
            return;
        }
        if root < v.len() && child < v.len() {
            v.swap(root, child);
        }
        root = child;
    }
}
