//! Index nodes: the in-RAM layout (entries pointing at flash or at cached children), routing,
//! and the on-flash encoding (`level u8, count u16, count x (key, loc)`, format.md).

use crate::engine::codec::{Reader, Writer};
use crate::engine::error::{Error, Result};
use crate::engine::format::{Key, Loc};
use crate::engine::index::Tree;
use crate::engine::platform::{FallibleVec, Platform};

/// Maximum entries per node.
pub const MAX_ENTRIES: usize = 64;

/// Maximum encoded node payload size.
pub const NODE_MAX_BYTES: usize = 1 + 2 + MAX_ENTRIES * (Key::SIZE + Loc::SIZE);

/// Maximum tree height accepted from flash.
pub const MAX_LEVEL: u8 = 12;

pub(super) const NONE: u32 = u32::MAX;

/// A child pointer or leaf value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ptr {
    Flash(Loc),
    Mem(u32),
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) key: Key,
    pub(super) ptr: Ptr,
}

pub(super) struct Node<P: Platform> {
    pub(super) level: u8,
    pub(super) dirty: bool,
    /// Used since the CLOCK hand last passed (a second chance before eviction).
    pub(super) referenced: bool,
    pub(super) loc: Option<Loc>,
    pub(super) parent: u32,
    pub(super) entries: P::Vec<Entry>,
}

pub(super) fn route(entries: &[Entry], key: &Key) -> usize {
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

pub(super) fn search(entries: &[Entry], key: &Key) -> core::result::Result<usize, usize> {
    entries.binary_search_by(|e| e.key.cmp(key))
}

/// Decode a node payload read from flash: its level and entries (all pointing at flash), checked
/// (at most `MAX_ENTRIES`, level at most `MAX_LEVEL`, keys strictly increasing, aligned
/// locations only for data keys in leaves).
pub(super) fn decode<P: Platform>(b: &[u8]) -> Result<(u8, P::Vec<Entry>)> {
    let mut entries = P::Vec::new();
    let mut r = Reader::new(b);
    let level = r.u8()?;
    let count = r.u16()? as usize;
    if count > MAX_ENTRIES || level > MAX_LEVEL {
        return Err(Error::Corrupt);
    }
    let mut prev: Option<Key> = None;
    for _ in 0..count {
        let key = Key::get(&mut r)?;
        let l = Loc::get(&mut r)?;
        // an aligned payload (format.md 8.3) only ever holds a file's data block
        if l.is_aligned() && (level != 0 || key.kind != crate::engine::format::kind::DATA) {
            return Err(Error::Corrupt);
        }
        if let Some(p) = prev {
            if p >= key {
                return Err(Error::Corrupt);
            }
        }
        prev = Some(key);
        entries.try_push(Entry { key, ptr: Ptr::Flash(l) })?;
    }
    Ok((level, entries))
}

impl<P: Platform> Tree<P> {
    /// Encode node `n` into the tree's buffer (children by their flash location, so children
    /// are written first); returns the payload length.
    pub(super) fn encode_node(&mut self, n: &Node<P>) -> Result<usize> {
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
}
