//! Tree mutation: copy-on-write dirtying, failure-atomic insertion with top-down splits,
//! removal with merges and root collapses, and the bottom-up commit of dirty nodes.

use super::node::{search, Entry, Node, Ptr, NONE};
use super::{NodeIo, Tree, MAX_ENTRIES, MAX_LEVEL};
use crate::engine::error::{Error, Result};
use crate::engine::format::{Key, Loc};
use crate::engine::platform::{FallibleVec, Platform};

impl<P: Platform> Tree<P> {
    pub(super) fn mark_dirty(&mut self, io: &mut dyn NodeIo, mut s: u32) -> Result<()> {
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
}
