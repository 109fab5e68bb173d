//! The node cache: a slot array of at most `capacity` nodes (a bounded overshoot while dirty
//! nodes are pinned) with a stack of free slots, loading nodes from flash with their checks,
//! and CLOCK eviction of clean nodes without cached children.

use super::node::{decode, Node, Ptr, NONE};
use super::{NodeIo, Tree, NODE_MAX_BYTES};
use crate::engine::error::{Error, Result};
use crate::engine::format::Loc;
use crate::engine::platform::{FallibleVec, Platform};

impl<P: Platform> Tree<P> {
    pub(super) fn node(&self, s: u32) -> Result<&Node<P>> {
        self.slots.as_slice().get(s as usize).and_then(|n| n.as_ref()).ok_or(Error::Corrupt)
    }

    pub(super) fn node_mut(&mut self, s: u32) -> Result<&mut Node<P>> {
        self.slots.as_mut_slice().get_mut(s as usize).and_then(|n| n.as_mut()).ok_or(Error::Corrupt)
    }

    /// A slot for a new node: a free one, a new one while the cache is below its capacity, or
    /// the slot of a clean node evicted by CLOCK (see [`Tree::evict`]). `keep` is never
    /// evicted. The caller fills the slot at once.
    pub(super) fn alloc_slot(&mut self, keep: u32) -> Result<u32> {
        if let Some(top) = self.nfree.checked_sub(1) {
            let s = *self.free.as_slice().get(top).ok_or(Error::Corrupt)?;
            self.nfree = top;
            return Ok(s);
        }
        if self.slots.len() < self.capacity {
            return self.grow();
        }
        match self.evict(keep)? {
            Some(v) => Ok(v),
            // Over capacity only with dirty nodes pinned: allow a bounded overshoot (2x, 8x
            // during replay) instead of failing an operation half-way.
            None if self.slots.len() < self.capacity.saturating_mul(if self.replay { 8 } else { 2 }) => self.grow(),
            None => Err(Error::NoMem),
        }
    }

    /// One more slot. The free stack grows with the slot array, so that freeing a slot never
    /// allocates.
    fn grow(&mut self) -> Result<u32> {
        self.free.try_push(NONE)?;
        if let Err(e) = self.slots.try_push(None) {
            let _ = self.free.pop();
            return Err(e);
        }
        Ok(self.slots.len().saturating_sub(1) as u32)
    }

    /// CLOCK: sweep from the hand for a clean node without cached children that is not the
    /// root or `keep`; a node used since the hand last passed it gets a second chance. At most
    /// two turns (the first clears the marks); `None` when every node is pinned. The evicted
    /// node's parent points at its flash copy again; its slot is returned empty.
    fn evict(&mut self, keep: u32) -> Result<Option<u32>> {
        let root_slot = match self.root {
            Some(Ptr::Mem(s)) => s,
            _ => NONE,
        };
        let len = self.slots.len();
        if len == 0 {
            return Ok(None);
        }
        let mut victim = None;
        for _ in 0..len.saturating_mul(2) {
            let i = self.hand % len;
            self.hand = i.saturating_add(1);
            let i32_ = i as u32;
            let n = match self.slots.as_mut_slice().get_mut(i) {
                Some(Some(n)) => n,
                _ => continue,
            };
            if n.dirty || i32_ == root_slot || i32_ == keep || n.loc.is_none() {
                continue;
            }
            if n.level > 0 && n.entries.as_slice().iter().any(|e| matches!(e.ptr, Ptr::Mem(_))) {
                continue;
            }
            if n.referenced {
                n.referenced = false;
                continue;
            }
            victim = Some(i32_);
            break;
        }
        let v = match victim {
            Some(v) => v,
            None => return Ok(None),
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
        Ok(Some(v))
    }

    /// Drop the node in slot `s` (if any) and put the slot on the free stack.
    pub(super) fn free_slot(&mut self, s: u32) {
        let was = match self.slots.as_mut_slice().get_mut(s as usize) {
            Some(x) => x.take(),
            None => return,
        };
        if let Some(n) = was {
            if n.dirty {
                self.dirty = self.dirty.saturating_sub(1);
            }
            if let Some(f) = self.free.as_mut_slice().get_mut(self.nfree) {
                *f = s;
                self.nfree = self.nfree.saturating_add(1);
            }
        }
    }

    /// Read the node at `loc` (child of `parent`), check and decode it, and cache it in a slot
    /// (never evicting `keep`).
    fn decode_node(&mut self, io: &mut dyn NodeIo, loc: Loc, parent: u32, keep: u32) -> Result<u32> {
        if self.buf.len() < NODE_MAX_BYTES {
            self.buf.try_resize(NODE_MAX_BYTES, 0)?;
        }
        // at most a fixed-encoding node, whatever the encoder grew the buffer to
        // (`COMPACT_WORST`): a larger INDEX record is `Corrupt`, as it always was
        let n = io.read_node(loc, self.buf.as_mut_slice().get_mut(..NODE_MAX_BYTES).ok_or(Error::Corrupt)?)?;
        let b = self.buf.as_slice().get(..n).ok_or(Error::Corrupt)?;
        let (level, entries) = decode::<P>(b)?;
        let slot = self.alloc_slot(keep)?;
        if let Some(s) = self.slots.as_mut_slice().get_mut(slot as usize) {
            *s = Some(Node { level, dirty: false, referenced: true, loc: Some(loc), parent, entries });
        }
        Ok(slot)
    }

    /// Slot of the root, loading it if needed.
    pub(super) fn root_slot(&mut self, io: &mut dyn NodeIo) -> Result<Option<u32>> {
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
    pub(super) fn child(&mut self, io: &mut dyn NodeIo, parent: u32, idx: usize) -> Result<u32> {
        let (ptr, plevel) = {
            let p = self.node(parent)?;
            (p.entries.as_slice().get(idx).ok_or(Error::Corrupt)?.ptr, p.level)
        };
        match ptr {
            Ptr::Mem(s) => {
                self.node_mut(s)?.referenced = true;
                Ok(s)
            }
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
}
