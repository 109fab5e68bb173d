//! The copy-on-write B+tree index from [`Key`] to record [`Loc`], with a bounded node cache.
//!
//! Nodes live on flash as `INDEX` records in the metadata log. A node in RAM is either clean
//! (identical to its flash copy, may be evicted) or dirty (modified since the last commit, pinned
//! until [`Tree::commit`] writes it to a new location). Dirtying a node dirties its ancestors
//! and reports its old location as dead. Routing rule everywhere: in an internal node pick the
//! last entry whose key is <= the searched key, or entry 0.
//!
//! This file holds the tree and its lookups; `node.rs` the node layout and its encoding,
//! `cache.rs` the slot cache (loading, eviction), `mutate.rs` insertion, removal, splits,
//! merges and the commit.

mod cache;
mod mutate;
mod node;

pub use node::{decode_node, encode_compact_leaf, node_level, COMPACT_WORST, MAX_ENTRIES, MAX_LEVEL, NODE_MAX_BYTES};

use crate::engine::error::{Error, Result};
use crate::engine::format::{Key, Loc};
use crate::engine::platform::{FallibleVec, Platform};
use node::{route, search, Node, Ptr};

/// What the tree needs from the log.
pub trait NodeIo {
    /// Read the payload of the INDEX record at `loc` into `buf`; return the payload length.
    fn read_node(&mut self, loc: Loc, buf: &mut [u8]) -> Result<usize>;
    /// Append an INDEX record with `payload`; return its location (counted live).
    fn write_node(&mut self, payload: &[u8], first: Key, level: u8) -> Result<Loc>;
    /// A record at `loc` is no longer referenced.
    fn dead(&mut self, loc: Loc);
}

/// The index.
pub struct Tree<P: Platform> {
    slots: P::Vec<Option<Node<P>>>,
    /// Free slot numbers: the first `nfree` entries. As long as `slots`, so that freeing a
    /// slot never allocates.
    free: P::Vec<u32>,
    nfree: usize,
    /// The CLOCK hand: the next slot eviction looks at.
    hand: usize,
    root: Option<Ptr>,
    root_level: u8,
    capacity: usize,
    /// Dirty nodes at which [`Tree::needs_commit`] asks for a commit.
    dirty_limit: usize,
    dirty: usize,
    replay: bool,
    /// Leaves are written in the compact encoding (`FEATURE_INCOMPAT_COMPACT_INDEX`).
    compact: bool,
    buf: P::Vec<u8>,
}

impl<P: Platform> Tree<P> {
    /// An empty tree with room for `capacity` cached nodes (at least 16), asking for a commit
    /// when half of them are dirty (see [`Tree::set_dirty_limit`]).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(16);
        Tree {
            slots: P::Vec::new(),
            free: P::Vec::new(),
            nfree: 0,
            hand: 0,
            root: None,
            root_level: 0,
            capacity,
            dirty_limit: capacity / 2,
            dirty: 0,
            replay: false,
            compact: false,
            buf: P::Vec::new(),
        }
    }

    /// Ask for a commit once `limit` nodes are dirty (at least 1, at most 3/4 of the capacity:
    /// the rest stays evictable for lookups).
    pub fn set_dirty_limit(&mut self, limit: usize) {
        self.dirty_limit = limit.min(self.capacity / 4 * 3).max(1);
    }

    /// Write leaves in the compact encoding (the volume has `FEATURE_INCOMPAT_COMPACT_INDEX`);
    /// both encodings are read whatever this says.
    pub fn set_compact(&mut self, on: bool) {
        self.compact = on;
    }

    /// The dirty-node count at which a commit is asked for.
    pub fn dirty_limit(&self) -> usize {
        self.dirty_limit
    }

    /// The cache capacity in nodes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Set the root from a checkpoint (drops every cached node).
    pub fn set_root(&mut self, root: Option<(Loc, u8)>) {
        self.slots.clear();
        self.free.clear();
        self.nfree = 0;
        self.hand = 0;
        self.dirty = 0;
        match root {
            Some((loc, level)) => {
                self.root = Some(Ptr::Flash(loc));
                self.root_level = level;
            }
            None => {
                self.root = None;
                self.root_level = 0;
            }
        }
    }

    /// The root location and level, valid only right after [`Tree::commit`].
    pub fn root(&self) -> Option<(Loc, u8)> {
        match self.root {
            Some(Ptr::Flash(l)) => Some((l, self.root_level)),
            Some(Ptr::Mem(s)) => self.node(s).ok().and_then(|n| n.loc).map(|l| (l, self.root_level)),
            None => None,
        }
    }

    /// In replay mode the cache may grow past its capacity (up to 8x) instead of failing when
    /// it is full of dirty nodes: nothing can be written during roll-forward.
    pub fn set_replay(&mut self, on: bool) {
        self.replay = on;
    }

    /// Number of dirty nodes.
    pub fn dirty_count(&self) -> usize {
        self.dirty
    }

    /// Whether a commit is advisable (the dirty limit reached).
    pub fn needs_commit(&self) -> bool {
        self.dirty >= self.dirty_limit
    }

    /// Number of cached nodes.
    pub fn cached(&self) -> usize {
        self.slots.len().saturating_sub(self.nfree)
    }

    /// Descend to the node at `level` routing by `key`; fills `path` with (slot, idx) pairs of the
    /// internal nodes above it. Returns the slot reached.
    fn descend(
        &mut self,
        io: &mut dyn NodeIo,
        key: &Key,
        level: u8,
        path: &mut [(u32, usize); MAX_LEVEL as usize + 1],
        depth: &mut usize,
    ) -> Result<Option<u32>> {
        *depth = 0;
        let mut cur = match self.root_slot(io)? {
            Some(s) => s,
            None => return Ok(None),
        };
        loop {
            let (lvl, idx, empty) = {
                let n = self.node(cur)?;
                (n.level, route(n.entries.as_slice(), key), n.entries.is_empty())
            };
            if lvl <= level {
                return Ok(if lvl == level { Some(cur) } else { None });
            }
            if empty {
                return Err(Error::Corrupt);
            }
            let slot = path.get_mut(*depth).ok_or(Error::Corrupt)?;
            *slot = (cur, idx);
            *depth += 1;
            cur = self.child(io, cur, idx)?;
        }
    }

    /// Look `key` up.
    pub fn get(&mut self, io: &mut dyn NodeIo, key: &Key) -> Result<Option<Loc>> {
        let mut path = [(0u32, 0usize); MAX_LEVEL as usize + 1];
        let mut depth = 0;
        let leaf = match self.descend(io, key, 0, &mut path, &mut depth)? {
            Some(l) => l,
            None => return Ok(None),
        };
        let n = self.node(leaf)?;
        match search(n.entries.as_slice(), key) {
            Ok(i) => match n.entries.as_slice().get(i).map(|e| e.ptr) {
                Some(Ptr::Flash(l)) => Ok(Some(l)),
                _ => Err(Error::Corrupt),
            },
            Err(_) => Ok(None),
        }
    }

    /// The first entry with key >= `from`.
    pub fn next(&mut self, io: &mut dyn NodeIo, from: &Key) -> Result<Option<(Key, Loc)>> {
        let mut first = None;
        self.walk_from(io, from, &mut |k, l| {
            first = Some((k, l));
            false
        })?;
        Ok(first)
    }

    /// Visit the entries with key >= `from` in key order, `f(key, loc)` returning false to
    /// stop: one descent, then leaf after leaf (a range costs no descent per entry).
    pub fn walk_from(&mut self, io: &mut dyn NodeIo, from: &Key, f: &mut dyn FnMut(Key, Loc) -> bool) -> Result<()> {
        let mut path = [(0u32, 0usize); MAX_LEVEL as usize + 1];
        let mut depth = 0;
        let mut cur = match self.descend(io, from, 0, &mut path, &mut depth)? {
            Some(l) => l,
            None => return Ok(()),
        };
        let mut start = {
            let n = self.node(cur)?;
            match search(n.entries.as_slice(), from) {
                Ok(i) | Err(i) => i,
            }
        };
        // the last key visited: keys must rise strictly (a forged node could repeat them)
        let mut last: Option<Key> = None;
        loop {
            {
                let n = self.node(cur)?;
                if n.level == 0 {
                    if let Some(e) = n.entries.as_slice().get(start) {
                        // never below `from` nor back: callers loop and must make progress
                        if e.key < *from || last.is_some_and(|k| e.key <= k) {
                            return Err(Error::Corrupt);
                        }
                        let Ptr::Flash(l) = e.ptr else { return Err(Error::Corrupt) };
                        last = Some(e.key);
                        if !f(e.key, l) {
                            return Ok(());
                        }
                        start = start.saturating_add(1);
                        continue;
                    }
                } else if start < n.entries.len() {
                    // descend leftmost from child `start`
                    let slot = path.get_mut(depth).ok_or(Error::Corrupt)?;
                    *slot = (cur, start);
                    depth += 1;
                    cur = self.child(io, cur, start)?;
                    start = 0;
                    continue;
                }
            }
            // exhausted this node: go up
            if depth == 0 {
                return Ok(());
            }
            depth -= 1;
            let (p, idx) = *path.get(depth).ok_or(Error::Corrupt)?;
            cur = p;
            start = idx.saturating_add(1);
        }
    }

    /// Whether the index node at `loc` (level `level`, first key `first`) is referenced by the
    /// tree and clean. With `make_dirty`, a referenced node is dirtied (to be rewritten at the
    /// next commit) and `true` is returned.
    pub fn node_live(&mut self, io: &mut dyn NodeIo, loc: Loc, first: &Key, level: u8, make_dirty: bool) -> Result<bool> {
        if self.root.is_none() || level > self.root_level {
            return Ok(false);
        }
        let is_root_flash = self.root == Some(Ptr::Flash(loc));
        if !is_root_flash {
            // Check without loading the node itself: look at the parent's pointer.
            if level == self.root_level {
                let r = self.root_slot(io)?;
                let hit = match r {
                    Some(r) => self.node(r)?.loc == Some(loc),
                    None => false,
                };
                if hit && make_dirty {
                    if let Some(r) = r {
                        self.mark_dirty(io, r)?;
                    }
                }
                return Ok(hit);
            }
            let mut path = [(0u32, 0usize); MAX_LEVEL as usize + 1];
            let mut depth = 0;
            let parent = match self.descend(io, first, level.saturating_add(1), &mut path, &mut depth)? {
                Some(p) => p,
                None => return Ok(false),
            };
            let idx = route(self.node(parent)?.entries.as_slice(), first);
            let ptr = self.node(parent)?.entries.as_slice().get(idx).map(|e| e.ptr).ok_or(Error::Corrupt)?;
            let hit = match ptr {
                Ptr::Flash(l) => l == loc,
                Ptr::Mem(c) => self.node(c)?.loc == Some(loc),
            };
            if hit && make_dirty {
                let c = self.child(io, parent, idx)?;
                self.mark_dirty(io, c)?;
            }
            return Ok(hit);
        }
        if make_dirty {
            if let Some(r) = self.root_slot(io)? {
                self.mark_dirty(io, r)?;
            }
        }
        Ok(true)
    }

    /// Visit every node location (`true`) and every leaf value (`false`). Dirty nodes have no
    /// location yet and are not reported (their records are not on flash). Writes nothing.
    pub fn walk(&mut self, io: &mut dyn NodeIo, f: &mut dyn FnMut(Loc, bool)) -> Result<()> {
        let r = match self.root_slot(io)? {
            Some(r) => r,
            None => return Ok(()),
        };
        let mut stack: [(u32, usize); MAX_LEVEL as usize + 2] = [(0, 0); MAX_LEVEL as usize + 2];
        let mut sp = 1usize;
        if let Some(x) = stack.get_mut(0) {
            *x = (r, 0);
        }
        if let Some(l) = self.node(r)?.loc {
            f(l, true);
        }
        while sp > 0 {
            let (s, i) = *stack.get(sp - 1).ok_or(Error::Corrupt)?;
            let (level, len) = {
                let n = self.node(s)?;
                (n.level, n.entries.len())
            };
            if level == 0 {
                for e in self.node(s)?.entries.as_slice() {
                    if let Ptr::Flash(l) = e.ptr {
                        f(l, false);
                    }
                }
                sp -= 1;
                continue;
            }
            if i >= len {
                sp -= 1;
                continue;
            }
            if let Some(x) = stack.get_mut(sp - 1) {
                x.1 = i + 1;
            }
            let c = self.child(io, s, i)?;
            if let Some(l) = self.node(c)?.loc {
                f(l, true);
            }
            let slot = stack.get_mut(sp).ok_or(Error::Corrupt)?;
            *slot = (c, 0);
            sp += 1;
        }
        Ok(())
    }
}
