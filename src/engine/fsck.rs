//! Offline-style consistency check of a mounted filesystem (for tests, `fsck` and `dump` tools).
//!
//! Uses RAM proportional to the number of inodes and directory entries: it is a tool, not
//! something the kernel runs.

use crate::engine::codec::Reader;
use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{kind, Inode, Key};
use crate::engine::fs::{Engine, ROOT_INO};
use crate::engine::platform::{FallibleVec, Platform};

/// One inconsistency found by [`Engine::fsck`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsckProblem {
    /// The record the index points at for this key is unreadable, fails its CRC or has another key.
    BadRecord(Key),
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

#[derive(Clone, Copy)]
struct Ino {
    ino: u64,
    nlink: u32,
    is_dir: bool,
    parent: u64,
    size: u64,
    entries: u64,
    subdirs: u32,
    orphan: bool,
}

#[derive(Clone, Copy)]
struct Ref {
    child: u64,
    dir: u64,
    is_dir: bool,
}

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Check the whole filesystem: segment usage, every indexed record, ownership, link counts,
    /// directory sizes and parents, orphans. Reads only.
    pub fn fsck(&mut self) -> Result<FsckReport> {
        self.fsck_each(&mut |_| {})
    }

    /// [`Engine::fsck`], calling `each` with every problem found (the report keeps the first
    /// and the count), so that a tool can list them all without the engine allocating.
    pub fn fsck_each(&mut self, each: &mut dyn FnMut(&FsckProblem)) -> Result<FsckReport> {
        let mut rep = FsckReport::default();
        macro_rules! problem {
            ($p:expr) => {{
                let p = $p;
                each(&p);
                rep.problem(p);
            }};
        }
        if let Some(d) = self.log_damage() {
            problem!(FsckProblem::LogDamage { first_missing: d.first_missing, seg: d.seg, off: d.off });
        }
        if let Some((seg, table, computed)) = self.check()? {
            problem!(FsckProblem::SegmentUsage { seg, table, computed });
        }
        let mut inodes: P::Vec<Ino> = P::Vec::new();
        let mut refs: P::Vec<Ref> = P::Vec::new();
        let mut orphans: P::Vec<u64> = P::Vec::new();
        let mut from = Key::default();
        while let Some((key, _)) = self.idx_next(&from)? {
            from = match key.key.checked_add(1) {
                Some(n) => Key::new(key.ino, key.kind, n),
                None => match key.kind.checked_add(1) {
                    Some(k) => Key::new(key.ino, k, 0),
                    None => Key::new(key.ino.saturating_add(1), 0, 0),
                },
            };
            match self.read_key(&key) {
                Ok(Some(_)) => {}
                Ok(None) | Err(Error::Corrupt) => {
                    problem!(FsckProblem::BadRecord(key));
                    continue;
                }
                Err(e) => return Err(e),
            }
            if key.ino == 0 && key.kind == kind::ORPHAN {
                rep.orphans = rep.orphans.saturating_add(1);
                orphans.try_push(key.key)?;
                continue;
            }
            let owner_ok = inodes.as_slice().last().is_some_and(|i| i.ino == key.ino);
            match key.kind {
                kind::INODE => match Inode::decode(self.payload()) {
                    Ok(i) if i.ino == key.ino => {
                        rep.inodes = rep.inodes.saturating_add(1);
                        if i.is_dir() {
                            rep.directories = rep.directories.saturating_add(1);
                        }
                        inodes.try_push(Ino {
                            ino: i.ino,
                            nlink: i.nlink,
                            is_dir: i.is_dir(),
                            parent: i.parent,
                            size: i.size,
                            entries: 0,
                            subdirs: 0,
                            orphan: false,
                        })?;
                    }
                    _ => problem!(FsckProblem::BadRecord(key)),
                },
                kind::DENT => {
                    rep.entries = rep.entries.saturating_add(1);
                    if !owner_ok {
                        problem!(FsckProblem::NoOwner(key));
                        continue;
                    }
                    let mut r = Reader::new(self.payload());
                    let child = r.u64()?;
                    let dt = r.u8()?;
                    let is_dir = dt == 4;
                    if let Some(d) = inodes.as_mut_slice().last_mut() {
                        d.entries = d.entries.saturating_add(1);
                        if is_dir {
                            d.subdirs = d.subdirs.saturating_add(1);
                        }
                    }
                    refs.try_push(Ref { child, dir: key.ino, is_dir })?;
                }
                kind::DATA => {
                    rep.data_blocks = rep.data_blocks.saturating_add(1);
                    if !owner_ok {
                        problem!(FsckProblem::NoOwner(key));
                    }
                }
                kind::XATTR => {
                    rep.xattrs = rep.xattrs.saturating_add(1);
                    if !owner_ok {
                        problem!(FsckProblem::NoOwner(key));
                    }
                }
                _ => problem!(FsckProblem::BadRecord(key)),
            }
        }
        // orphans
        for o in orphans.as_slice() {
            match inodes.as_slice().binary_search_by_key(o, |i| i.ino) {
                Ok(idx) => {
                    if let Some(i) = inodes.as_mut_slice().get_mut(idx) {
                        i.orphan = true;
                        if i.nlink != 0 {
                            problem!(FsckProblem::Orphan(*o));
                        }
                    }
                }
                Err(_) => problem!(FsckProblem::Orphan(*o)),
            }
        }
        // references
        heapsort_by_child(refs.as_mut_slice());
        for r in refs.as_slice() {
            match inodes.as_slice().binary_search_by_key(&r.child, |i| i.ino) {
                Ok(idx) => {
                    if let Some(c) = inodes.as_slice().get(idx) {
                        if c.is_dir != r.is_dir {
                            problem!(FsckProblem::EntryType { dir: r.dir, child: r.child });
                        }
                        if c.is_dir && c.parent != r.dir {
                            problem!(FsckProblem::Parent { ino: c.ino, parent: c.parent });
                        }
                    }
                }
                Err(_) => problem!(FsckProblem::Dangling { dir: r.dir, child: r.child }),
            }
        }
        match inodes.as_slice().binary_search_by_key(&ROOT_INO, |i| i.ino) {
            Ok(idx) if inodes.as_slice().get(idx).is_some_and(|i| i.is_dir) => {}
            _ => problem!(FsckProblem::NoRoot),
        }
        let refs_s = refs.as_slice();
        for i in inodes.as_slice() {
            let lo = refs_s.partition_point(|r| r.child < i.ino);
            let hi = refs_s.partition_point(|r| r.child <= i.ino);
            let named = hi.saturating_sub(lo) as u32;
            if i.is_dir {
                if i.size != i.entries {
                    problem!(FsckProblem::DirSize { ino: i.ino, size: i.size, entries: i.entries });
                }
                let expected = if i.nlink == 0 && i.orphan { 0 } else { i.subdirs.saturating_add(2) };
                let want_named = if i.ino == ROOT_INO || (i.nlink == 0 && i.orphan) { 0 } else { 1 };
                if i.nlink != expected || named != want_named {
                    problem!(FsckProblem::LinkCount { ino: i.ino, nlink: i.nlink, expected });
                }
            } else if i.nlink != named {
                problem!(FsckProblem::LinkCount { ino: i.ino, nlink: i.nlink, expected: named });
            } else if named == 0 && !i.orphan {
                problem!(FsckProblem::LinkCount { ino: i.ino, nlink: 0, expected: 0 });
            }
        }
        Ok(rep)
    }
}

/// In-place heapsort of references by child inode (no allocation, no panicking path).
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
    let key = |v: &[Ref], i: usize| v.get(i).map_or(0, |r| r.child);
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
