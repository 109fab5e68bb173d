//! The copy-on-write B+tree index from [`Key`] to record [`Loc`], with a bounded node cache.
//!
//! Nodes live on flash as `INDEX` records in the metadata log. A node in RAM is either clean
//! (identical to its flash copy, may be evicted) or dirty (modified since the last commit, pinned
//! until [`Tree::commit`] writes it to a new location). Dirtying a node dirties its ancestors
//! and reports its old location as dead. Routing rule everywhere: in an internal node pick the
//! last entry whose key is <= the searched key, or entry 0.

use crate::engine::codec::{Reader, Writer};
use crate::engine::error::{Error, Result};
use crate::engine::format::{Key, Loc};
use crate::engine::platform::{FallibleVec, Platform};

/// Maximum entries per node.
pub const MAX_ENTRIES: usize = 64;
/// Maximum encoded node payload size.
pub const NODE_MAX_BYTES: usize = 1 + 2 + MAX_ENTRIES * (Key::SIZE + Loc::SIZE);
/// Maximum tree height accepted from flash.
pub const MAX_LEVEL: u8 = 12;
const NONE: u32 = u32::MAX;

/// A child pointer or leaf value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ptr {
    Flash(Loc),
    Mem(u32),
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    key: Key,
    ptr: Ptr,
}

struct Node<P: Platform> {
    level: u8,
    dirty: bool,
    loc: Option<Loc>,
    parent: u32,
    entries: P::Vec<Entry>,
}

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
    root: Option<Ptr>,
    root_level: u8,
    capacity: usize,
    dirty: usize,
    replay: bool,
    buf: P::Vec<u8>,
}

fn route(entries: &[Entry], key: &Key) -> usize {
    // last entry with entry.key <= key, else 0
    let mut lo = 0usize;
    let mut hi = entries.len();
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match entries.get(mid) {
            Some(e) if e.key <= *key => lo = mid + 1,
            _ => hi = mid,
        }
    }
    lo.saturating_sub(1)
}

fn search(entries: &[Entry], key: &Key) -> core::result::Result<usize, usize> {
    entries.binary_search_by(|e| e.key.cmp(key))
}

impl<P: Platform> Tree<P> {
    /// An empty tree with room for `capacity` cached nodes (at least 16).
    pub fn new(capacity: usize) -> Self {
        Tree {
            slots: P::Vec::new(),
            root: None,
            root_level: 0,
            capacity: if capacity < 16 { 16 } else { capacity },
            dirty: 0,
            replay: false,
            buf: P::Vec::new(),
        }
    }

    /// Set the root from a checkpoint (drops every cached node).
    pub fn set_root(&mut self, root: Option<(Loc, u8)>) {
        self.slots.clear();
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

    /// Whether a commit is advisable (dirty nodes above half the cache).
    pub fn needs_commit(&self) -> bool {
        self.dirty.saturating_mul(2) >= self.capacity
    }

    /// Number of cached nodes.
    pub fn cached(&self) -> usize {
        self.slots.as_slice().iter().filter(|s| s.is_some()).fold(0usize, |a, _| a.saturating_add(1))
    }

    fn node(&self, s: u32) -> Result<&Node<P>> {
        self.slots.as_slice().get(s as usize).and_then(|n| n.as_ref()).ok_or(Error::Corrupt)
    }

    fn node_mut(&mut self, s: u32) -> Result<&mut Node<P>> {
        self.slots.as_mut_slice().get_mut(s as usize).and_then(|n| n.as_mut()).ok_or(Error::Corrupt)
    }

    /// Find a free slot, evicting a clean node if the cache is full. `keep` is never evicted.
    fn alloc_slot(&mut self, keep: u32) -> Result<u32> {
        if let Some(i) = self.slots.as_slice().iter().position(|s| s.is_none()) {
            return Ok(i as u32);
        }
        if self.slots.len() < self.capacity {
            self.slots.try_push(None)?;
            return Ok(self.slots.len().saturating_sub(1) as u32);
        }
        // Evict a clean node without cached children that is not the root or `keep`.
        let root_slot = match self.root {
            Some(Ptr::Mem(s)) => s,
            _ => NONE,
        };
        let mut victim = None;
        for (i, s) in self.slots.as_slice().iter().enumerate() {
            let i32_ = i as u32;
            if let Some(n) = s {
                if n.dirty || i32_ == root_slot || i32_ == keep || n.loc.is_none() {
                    continue;
                }
                if n.level > 0 && n.entries.as_slice().iter().any(|e| matches!(e.ptr, Ptr::Mem(_))) {
                    continue;
                }
                victim = Some(i32_);
                break;
            }
        }
        let v = match victim {
            Some(v) => v,
            // Over capacity only with dirty nodes pinned: allow a bounded overshoot (2x, 8x
            // during replay) instead of failing an operation half-way.
            None if self.slots.len() < self.capacity.saturating_mul(if self.replay { 8 } else { 2 }) => {
                self.slots.try_push(None)?;
                return Ok(self.slots.len().saturating_sub(1) as u32);
            }
            None => return Err(Error::NoMem),
        };
        let (parent, loc) = {
            let n = self.node(v)?;
            (n.parent, n.loc.ok_or(Error::Corrupt)?)
        };
        if parent != NONE {
            let p = self.node_mut(parent)?;
            for e in p.entries.as_mut_slice() {
                if e.ptr == Ptr::Mem(v) {
                    e.ptr = Ptr::Flash(loc);
                }
            }
        }
        if let Some(s) = self.slots.as_mut_slice().get_mut(v as usize) {
            *s = None;
        }
        Ok(v)
    }

    fn decode_node(&mut self, io: &mut dyn NodeIo, loc: Loc, parent: u32, keep: u32) -> Result<u32> {
        if self.buf.len() < NODE_MAX_BYTES {
            self.buf.try_resize(NODE_MAX_BYTES, 0)?;
        }
        let n = io.read_node(loc, self.buf.as_mut_slice())?;
        let mut entries = P::Vec::new();
        let level;
        {
            let b = self.buf.as_slice().get(..n).ok_or(Error::Corrupt)?;
            let mut r = Reader::new(b);
            level = r.u8()?;
            let count = r.u16()? as usize;
            if count > MAX_ENTRIES || level > MAX_LEVEL {
                return Err(Error::Corrupt);
            }
            let mut prev: Option<Key> = None;
            for _ in 0..count {
                let key = Key::get(&mut r)?;
                let l = Loc::get(&mut r)?;
                if let Some(p) = prev {
                    if p >= key {
                        return Err(Error::Corrupt);
                    }
                }
                prev = Some(key);
                entries.try_push(Entry { key, ptr: Ptr::Flash(l) })?;
            }
        }
        let slot = self.alloc_slot(keep)?;
        if let Some(s) = self.slots.as_mut_slice().get_mut(slot as usize) {
            *s = Some(Node { level, dirty: false, loc: Some(loc), parent, entries });
        }
        Ok(slot)
    }

    /// Slot of the root, loading it if needed.
    fn root_slot(&mut self, io: &mut dyn NodeIo) -> Result<Option<u32>> {
        match self.root {
            None => Ok(None),
            Some(Ptr::Mem(s)) => Ok(Some(s)),
            Some(Ptr::Flash(loc)) => {
                let s = self.decode_node(io, loc, NONE, NONE)?;
                if self.node(s)?.level != self.root_level {
                    return Err(Error::Corrupt);
                }
                self.root = Some(Ptr::Mem(s));
                Ok(Some(s))
            }
        }
    }

    /// Slot of child `idx` of `parent`, loading it if needed.
    fn child(&mut self, io: &mut dyn NodeIo, parent: u32, idx: usize) -> Result<u32> {
        let (ptr, plevel) = {
            let p = self.node(parent)?;
            (p.entries.as_slice().get(idx).ok_or(Error::Corrupt)?.ptr, p.level)
        };
        match ptr {
            Ptr::Mem(s) => Ok(s),
            Ptr::Flash(loc) => {
                let s = self.decode_node(io, loc, parent, parent)?;
                if self.node(s)?.level.checked_add(1) != Some(plevel) || !self.within_parent(s, parent, idx)? {
                    self.free_slot(s);
                    return Err(Error::Corrupt);
                }
                let p = self.node_mut(parent)?;
                if let Some(e) = p.entries.as_mut_slice().get_mut(idx) {
                    e.ptr = Ptr::Mem(s);
                }
                Ok(s)
            }
        }
    }

    /// Whether the keys of node `s`, just loaded as child `idx` of `parent`, lie in the range
    /// the parent routes to it: at or above the parent's entry `idx` (except for entry 0, whose
    /// key may be above keys inserted into it later, see [`Tree::split_one`]) and below entry
    /// `idx + 1`. The tree keeps this for every node it writes; a forged node breaking it
    /// would hold keys that lookups route elsewhere, so `remove` could not find what `next`
    /// returns (an endless delete loop) and `next` could step backwards.
    fn within_parent(&self, s: u32, parent: u32, idx: usize) -> Result<bool> {
        let n = self.node(s)?.entries.as_slice();
        let (first, last) = match (n.first(), n.last()) {
            (Some(f), Some(l)) => (f.key, l.key),
            // an empty non-root node is never written
            _ => return Ok(false),
        };
        let p = self.node(parent)?.entries.as_slice();
        if idx > 0 {
            match p.get(idx) {
                Some(e) if first >= e.key => {}
                _ => return Ok(false),
            }
        }
        if let Some(e) = p.get(idx.saturating_add(1)) {
            if last >= e.key {
                return Ok(false);
            }
        }
        Ok(true)
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
        let mut path = [(0u32, 0usize); MAX_LEVEL as usize + 1];
        let mut depth = 0;
        let mut cur = match self.descend(io, from, 0, &mut path, &mut depth)? {
            Some(l) => l,
            None => return Ok(None),
        };
        let mut start = {
            let n = self.node(cur)?;
            match search(n.entries.as_slice(), from) {
                Ok(i) | Err(i) => i,
            }
        };
        loop {
            {
                let n = self.node(cur)?;
                if n.level == 0 {
                    if let Some(e) = n.entries.as_slice().get(start) {
                        // never below `from`: callers loop on `next` and must make progress
                        if e.key < *from {
                            return Err(Error::Corrupt);
                        }
                        return match e.ptr {
                            Ptr::Flash(l) => Ok(Some((e.key, l))),
                            Ptr::Mem(_) => Err(Error::Corrupt),
                        };
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
                return Ok(None);
            }
            depth -= 1;
            let (p, idx) = *path.get(depth).ok_or(Error::Corrupt)?;
            cur = p;
            start = idx.saturating_add(1);
        }
    }

    fn mark_dirty(&mut self, io: &mut dyn NodeIo, mut s: u32) -> Result<()> {
        loop {
            let n = self.node_mut(s)?;
            if n.dirty {
                return Ok(());
            }
            n.dirty = true;
            let old = n.loc.take();
            let parent = n.parent;
            self.dirty = self.dirty.saturating_add(1);
            if let Some(l) = old {
                io.dead(l);
            }
            if parent == NONE {
                return Ok(());
            }
            s = parent;
        }
    }

    fn new_node(&mut self, level: u8, parent: u32) -> Result<u32> {
        let s = self.alloc_slot(NONE)?;
        if let Some(x) = self.slots.as_mut_slice().get_mut(s as usize) {
            *x = Some(Node { level, dirty: true, loc: None, parent, entries: P::Vec::new() });
        }
        self.dirty = self.dirty.saturating_add(1);
        Ok(s)
    }

    /// Insert or replace `key`; returns the previous location.
    ///
    /// Failure-atomic: a full leaf is split before the key goes in, and every split is a
    /// complete tree transformation of its own whose allocations all happen before anything
    /// is moved (see [`Tree::split_one`]). An error (`NoMem`, a read error loading a node)
    /// leaves a valid tree holding exactly the keys it held before.
    pub fn insert(&mut self, io: &mut dyn NodeIo, key: Key, loc: Loc) -> Result<Option<Loc>> {
        if self.root.is_none() {
            let s = self.new_node(0, NONE)?;
            self.root = Some(Ptr::Mem(s));
            self.root_level = 0;
        }
        let mut path = [(0u32, 0usize); MAX_LEVEL as usize + 1];
        let mut depth = 0;
        let mut leaf = self.descend(io, &key, 0, &mut path, &mut depth)?.ok_or(Error::Corrupt)?;
        if let Ok(i) = search(self.node(leaf)?.entries.as_slice(), &key) {
            self.mark_dirty(io, leaf)?;
            let n = self.node_mut(leaf)?;
            let e = n.entries.as_mut_slice().get_mut(i).ok_or(Error::Corrupt)?;
            let old = match e.ptr {
                Ptr::Flash(l) => l,
                Ptr::Mem(_) => return Err(Error::Corrupt),
            };
            e.ptr = Ptr::Flash(loc);
            return Ok(Some(old));
        }
        if self.node(leaf)?.entries.len() >= MAX_ENTRIES {
            self.make_room(io, leaf)?;
            leaf = self.descend(io, &key, 0, &mut path, &mut depth)?.ok_or(Error::Corrupt)?;
        }
        self.mark_dirty(io, leaf)?;
        let n = self.node_mut(leaf)?;
        match search(n.entries.as_slice(), &key) {
            Ok(_) => Err(Error::Corrupt),
            Err(i) => {
                if n.entries.len() >= MAX_ENTRIES {
                    return Err(Error::Corrupt);
                }
                n.entries.try_insert(i, Entry { key, ptr: Ptr::Flash(loc) })?;
                Ok(None)
            }
        }
    }

    /// Split full nodes from the top of the chain of full ancestors of `leaf` down to `leaf`,
    /// so that `leaf` (or the half the key then routes to) has room for one more entry.
    fn make_room(&mut self, io: &mut dyn NodeIo, leaf: u32) -> Result<()> {
        // the whole path dirty: no node on it can be evicted by the allocations of a split
        self.mark_dirty(io, leaf)?;
        let mut guard = 0u32;
        loop {
            guard = guard.saturating_add(1);
            if guard > u32::from(MAX_LEVEL) + 2 {
                return Err(Error::Corrupt);
            }
            // the highest full node whose parent has room (or that is the root)
            let mut s = leaf;
            let mut up = 0u32;
            loop {
                let p = self.node(s)?.parent;
                if p == NONE || self.node(p)?.entries.len() < MAX_ENTRIES {
                    break;
                }
                s = p;
                up = up.saturating_add(1);
                if up > u32::from(MAX_LEVEL) {
                    return Err(Error::Corrupt);
                }
            }
            self.split_one(io, s)?;
            if s == leaf {
                return Ok(());
            }
        }
    }

    /// Split node `s` in two halves (its parent, if any, has room for one more entry). Every
    /// allocation (the new node, its entries, a new root, the parent's new entry) is made
    /// first; only then are entries moved, so an error leaves the tree as it was.
    fn split_one(&mut self, io: &mut dyn NodeIo, s: u32) -> Result<()> {
        let (len, level, parent) = {
            let n = self.node(s)?;
            (n.entries.len(), n.level, n.parent)
        };
        if len < 2 {
            return Err(Error::Corrupt);
        }
        if parent == NONE && level >= MAX_LEVEL {
            return Err(Error::NoSpace);
        }
        // s and its ancestors dirty first: a dirty node is never evicted by the allocations below
        self.mark_dirty(io, s)?;
        // Slots first: allocating one may evict a clean child of `s` (its entry in `s` turns
        // into a flash pointer), so the entries are copied only after that.
        let right = self.new_node(level, parent)?;
        let nr = if parent == NONE {
            match self.new_node(level.saturating_add(1), NONE) {
                Ok(x) => x,
                Err(e) => {
                    self.free_slot(right);
                    return Err(e);
                }
            }
        } else {
            NONE
        };
        let undo = |t: &mut Self, e: Error| {
            if nr != NONE {
                t.free_slot(nr);
            }
            t.free_slot(right);
            Err(e)
        };
        let half = len / 2;
        let mut moved: P::Vec<Entry> = P::Vec::new();
        for i in half..len {
            let e = *self.node(s)?.entries.as_slice().get(i).ok_or(Error::Corrupt)?;
            if let Err(e) = moved.try_push(e) {
                return undo(self, e);
            }
        }
        let first = moved.as_slice().first().map(|e| e.key).ok_or(Error::Corrupt)?;
        if parent == NONE {
            let lfirst = self.node(s)?.entries.as_slice().first().map(|e| e.key).ok_or(Error::Corrupt)?;
            let r = {
                let rn = self.node_mut(nr)?;
                rn.entries
                    .try_push(Entry { key: lfirst, ptr: Ptr::Mem(s) })
                    .and_then(|_| rn.entries.try_push(Entry { key: first, ptr: Ptr::Mem(right) }))
            };
            if let Err(e) = r {
                return undo(self, e);
            }
            self.node_mut(s)?.parent = nr;
            self.node_mut(right)?.parent = nr;
            self.root = Some(Ptr::Mem(nr));
            self.root_level = level.saturating_add(1);
        } else {
            let r = {
                let p = self.node_mut(parent)?;
                match p.entries.as_slice().iter().position(|e| e.ptr == Ptr::Mem(s)) {
                    Some(pos) => p.entries.try_insert(pos + 1, Entry { key: first, ptr: Ptr::Mem(right) }).map(|_| pos),
                    None => Err(Error::Corrupt),
                }
            };
            match r {
                Ok(pos) => {
                    // The first child's key may be above keys inserted into it later (they
                    // route to entry 0): lower it to the node's first key, or the new entry
                    // would sort below it.
                    let lfirst = self.node(s)?.entries.as_slice().first().map(|e| e.key).ok_or(Error::Corrupt)?;
                    if let Some(e) = self.node_mut(parent)?.entries.as_mut_slice().get_mut(pos) {
                        if e.key > lfirst {
                            e.key = lfirst;
                        }
                    }
                }
                Err(e) => return undo(self, e),
            }
        }
        // everything is allocated: move the upper half (nothing below can fail on memory)
        self.node_mut(s)?.entries.truncate(half);
        for e in moved.as_slice() {
            if let Ptr::Mem(c) = e.ptr {
                self.node_mut(c)?.parent = right;
            }
        }
        self.node_mut(right)?.entries = moved;
        Ok(())
    }

    /// Remove `key`; returns its location if it was present.
    pub fn remove(&mut self, io: &mut dyn NodeIo, key: &Key) -> Result<Option<Loc>> {
        let mut path = [(0u32, 0usize); MAX_LEVEL as usize + 1];
        let mut depth = 0;
        let leaf = match self.descend(io, key, 0, &mut path, &mut depth)? {
            Some(l) => l,
            None => return Ok(None),
        };
        let i = match search(self.node(leaf)?.entries.as_slice(), key) {
            Ok(i) => i,
            Err(_) => return Ok(None),
        };
        self.mark_dirty(io, leaf)?;
        let e = self.node_mut(leaf)?.entries.remove_at(i).ok_or(Error::Corrupt)?;
        let old = match e.ptr {
            Ptr::Flash(l) => l,
            Ptr::Mem(_) => return Err(Error::Corrupt),
        };
        // remove empty nodes upward
        let mut s = leaf;
        loop {
            let (empty, parent) = {
                let n = self.node(s)?;
                (n.entries.is_empty(), n.parent)
            };
            if !empty || parent == NONE {
                break;
            }
            {
                let p = self.node_mut(parent)?;
                let pos = p
                    .entries
                    .as_slice()
                    .iter()
                    .position(|e| e.ptr == Ptr::Mem(s))
                    .ok_or(Error::Corrupt)?;
                let _ = p.entries.remove_at(pos);
            }
            self.free_slot(s);
            s = parent;
        }
        self.merge_up(io, s)?;
        // collapse a root with one child
        while let Some(Ptr::Mem(r)) = self.root {
            let (level, len) = {
                let n = self.node(r)?;
                (n.level, n.entries.len())
            };
            if level == 0 {
                if len == 0 {
                    self.free_slot(r);
                    self.root = None;
                    self.root_level = 0;
                }
                break;
            }
            if len != 1 {
                break;
            }
            let c = self.child(io, r, 0)?;
            self.mark_dirty(io, c)?;
            self.node_mut(c)?.parent = NONE;
            self.free_slot(r);
            self.root = Some(Ptr::Mem(c));
            self.root_level = level.saturating_sub(1);
        }
        Ok(Some(old))
    }

    /// Merge under-full node `s` (fewer than a quarter of the entries) with a neighbour when
    /// both fit in one node, then continue with the parent. Keeps a tree that shrank from
    /// wasting flash and cache on nearly empty nodes.
    fn merge_up(&mut self, io: &mut dyn NodeIo, mut s: u32) -> Result<()> {
        loop {
            let (len, parent) = {
                let n = self.node(s)?;
                (n.entries.len(), n.parent)
            };
            if parent == NONE || len.saturating_mul(4) >= MAX_ENTRIES {
                return Ok(());
            }
            let (pos, plen) = {
                let p = self.node(parent)?;
                let pos = p.entries.as_slice().iter().position(|e| e.ptr == Ptr::Mem(s)).ok_or(Error::Corrupt)?;
                (pos, p.entries.len())
            };
            let (li, ri) = if pos.saturating_add(1) < plen {
                (pos, pos + 1)
            } else if pos > 0 {
                (pos - 1, pos)
            } else {
                return Ok(());
            };
            let l = self.child(io, parent, li)?;
            let r = self.child(io, parent, ri)?;
            let (ll, rl) = (self.node(l)?.entries.len(), self.node(r)?.entries.len());
            if ll.saturating_add(rl) > MAX_ENTRIES {
                return Ok(());
            }
            self.mark_dirty(io, l)?;
            self.mark_dirty(io, r)?;
            // copy first, so that a failed allocation leaves both nodes intact
            for i in 0..rl {
                let e = *self.node(r)?.entries.as_slice().get(i).ok_or(Error::Corrupt)?;
                if let Err(err) = self.node_mut(l)?.entries.try_push(e) {
                    self.node_mut(l)?.entries.truncate(ll);
                    return Err(err);
                }
            }
            for i in 0..rl {
                let e = *self.node(r)?.entries.as_slice().get(i).ok_or(Error::Corrupt)?;
                if let Ptr::Mem(c) = e.ptr {
                    self.node_mut(c)?.parent = l;
                }
            }
            let _ = self.node_mut(parent)?.entries.remove_at(ri);
            self.free_slot(r);
            s = parent;
        }
    }

    fn free_slot(&mut self, s: u32) {
        if let Some(x) = self.slots.as_mut_slice().get_mut(s as usize) {
            if let Some(n) = x {
                if n.dirty {
                    self.dirty = self.dirty.saturating_sub(1);
                }
            }
            *x = None;
        }
    }

    /// Write every dirty node (children first) to the log.
    pub fn commit(&mut self, io: &mut dyn NodeIo) -> Result<()> {
        if let Some(Ptr::Mem(r)) = self.root {
            self.write_dirty(io, r, 0)?;
        }
        Ok(())
    }

    fn write_dirty(&mut self, io: &mut dyn NodeIo, s: u32, depth: u8) -> Result<Loc> {
        if depth > MAX_LEVEL {
            return Err(Error::Corrupt);
        }
        {
            let n = self.node(s)?;
            if !n.dirty {
                return n.loc.ok_or(Error::Corrupt);
            }
        }
        let count = self.node(s)?.entries.len();
        for i in 0..count {
            let ptr = self.node(s)?.entries.as_slice().get(i).map(|e| e.ptr).ok_or(Error::Corrupt)?;
            if let Ptr::Mem(c) = ptr {
                if self.node(c)?.dirty {
                    self.write_dirty(io, c, depth.saturating_add(1))?;
                }
            }
        }
        let node = self
            .slots
            .as_mut_slice()
            .get_mut(s as usize)
            .and_then(|x| x.take())
            .ok_or(Error::Corrupt)?;
        let level = node.level;
        let first = node.entries.as_slice().first().map(|e| e.key).unwrap_or_default();
        let enc = self.encode_node(&node);
        if let Some(x) = self.slots.as_mut_slice().get_mut(s as usize) {
            *x = Some(node);
        }
        let len = enc?;
        let payload = self.buf.as_slice().get(..len).ok_or(Error::Corrupt)?;
        let loc = io.write_node(payload, first, level)?;
        let n = self.node_mut(s)?;
        n.loc = Some(loc);
        n.dirty = false;
        self.dirty = self.dirty.saturating_sub(1);
        Ok(loc)
    }

    fn encode_node(&mut self, n: &Node<P>) -> Result<usize> {
        let mut buf = core::mem::replace(&mut self.buf, P::Vec::new());
        if buf.len() < NODE_MAX_BYTES {
            if let Err(e) = buf.try_resize(NODE_MAX_BYTES, 0) {
                self.buf = buf;
                return Err(e);
            }
        }
        let res = (|| {
            let mut w = Writer::new(buf.as_mut_slice());
            w.u8(n.level)?;
            w.u16(n.entries.len() as u16)?;
            for e in n.entries.as_slice() {
                e.key.put(&mut w)?;
                let l = match e.ptr {
                    Ptr::Flash(l) => l,
                    Ptr::Mem(c) => self.node(c)?.loc.ok_or(Error::Corrupt)?,
                };
                l.put(&mut w)?;
            }
            Ok(w.pos())
        })();
        self.buf = buf;
        res
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
