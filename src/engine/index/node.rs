//! Index nodes: the in-RAM layout (entries pointing at flash or at cached children), routing,
//! and the two on-flash encodings (format.md 5 and 5.1): fixed (`level u8, count u16, count x (key,
//! loc)`) for every node, and compact for leaves (first byte `INDEX_COMPACT_LEAF`, each entry
//! as a flags byte and varint differences from the entry before it).

use crate::engine::codec::{Reader, Writer};
use crate::engine::error::{Error, Result};
use crate::engine::format::{Key, Loc, INDEX_COMPACT_LEAF, LOC_ALIGNED};
use crate::engine::index::Tree;
use crate::engine::platform::{FallibleVec, Platform};

/// Maximum entries per node.
pub const MAX_ENTRIES: usize = 64;

/// Maximum encoded node payload size.
pub const NODE_MAX_BYTES: usize = 1 + 2 + MAX_ENTRIES * (Key::SIZE + Loc::SIZE);

/// Bytes a compact leaf may take before the encoder falls back to the fixed encoding (every
/// field present at its longest: flags, ino and key varints of 10 bytes, kind, and segment,
/// offset and length varints of 5). Only the encoder's buffer is this large: a compact leaf
/// longer than the fixed encoding of the same entries is never written, so a node on flash is
/// at most `NODE_MAX_BYTES` either way.
pub const COMPACT_WORST: usize = 1 + 2 + MAX_ENTRIES * (1 + 10 + 1 + 10 + 5 + 5 + 5);

/// Compact entry flags: the owner inode follows (else the previous entry's).
const C_INO: u8 = 1;
/// The kind byte follows (else the previous entry's).
const C_KIND: u8 = 2;
/// The key follows as itself (else as the difference from the previous entry's key).
const C_KEY_ABS: u8 = 4;
/// The segment follows (else the previous entry's).
const C_SEG: u8 = 8;
/// The length follows (else the previous entry's).
const C_LEN: u8 = 16;
/// The location is an aligned payload (`LOC_ALIGNED`; the offset follows without the bit).
const C_ALIGNED: u8 = 32;
/// Bits a compact entry's flags may have.
const C_ALL: u8 = C_INO | C_KIND | C_KEY_ABS | C_SEG | C_LEN | C_ALIGNED;

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

/// The level of the index node whose payload starts with `first` (a compact leaf's marker is a
/// leaf).
pub fn node_level(first: u8) -> u8 {
    if first == INDEX_COMPACT_LEAF {
        0
    } else {
        first
    }
}

/// Decode an index node's payload, in either encoding: its level is returned and each entry
/// (key, location) is handed to `each` in order. Checked: at most `MAX_ENTRIES`, level at most
/// `MAX_LEVEL`, keys strictly increasing, aligned locations only for data keys in leaves, no
/// bytes after a compact leaf's entries. The one decoder of index nodes (the engine's cache and
/// the tools).
pub fn decode_node(b: &[u8], each: &mut dyn FnMut(Key, Loc) -> Result<()>) -> Result<u8> {
    let mut r = Reader::new(b);
    let first = r.u8()?;
    let compact = first == INDEX_COMPACT_LEAF;
    let level = node_level(first);
    let count = r.u16()? as usize;
    if count > MAX_ENTRIES || level > MAX_LEVEL {
        return Err(Error::Corrupt);
    }
    let mut prev: Option<Key> = None;
    let (mut pk, mut pl) = (Key::default(), Loc::default());
    for _ in 0..count {
        let (key, l) = if compact { compact_entry(&mut r, &pk, &pl)? } else { (Key::get(&mut r)?, Loc::get(&mut r)?) };
        (pk, pl) = (key, l);
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
        each(key, l)?;
    }
    if compact && r.pos() != b.len() {
        // a compact leaf's length is its entries': trailing bytes are not written
        return Err(Error::Corrupt);
    }
    Ok(level)
}

/// Decode a node payload read from flash ([`decode_node`]): its level and entries, all
/// pointing at flash.
pub(super) fn decode<P: Platform>(b: &[u8]) -> Result<(u8, P::Vec<Entry>)> {
    let mut entries = P::Vec::new();
    let level = decode_node(b, &mut |key, l| entries.try_push(Entry { key, ptr: Ptr::Flash(l) }))?;
    Ok((level, entries))
}

/// Decode one compact leaf entry after the entry (`pk`, `pl`) (zeros for the first).
fn compact_entry(r: &mut Reader<'_>, pk: &Key, pl: &Loc) -> Result<(Key, Loc)> {
    let f = r.u8()?;
    if f & !C_ALL != 0 {
        return Err(Error::Corrupt);
    }
    let ino = if f & C_INO != 0 { r.uvar()? } else { pk.ino };
    let kind = if f & C_KIND != 0 { r.u8()? } else { pk.kind };
    let key = if f & C_KEY_ABS != 0 { r.uvar()? } else { pk.key.checked_add(r.uvar()?).ok_or(Error::Corrupt)? };
    let seg = if f & C_SEG != 0 { r.uvar32()? } else { pl.seg };
    let off = r.uvar32()?;
    if off & LOC_ALIGNED != 0 {
        return Err(Error::Corrupt);
    }
    let off = if f & C_ALIGNED != 0 { off | LOC_ALIGNED } else { off };
    let len = if f & C_LEN != 0 { r.uvar32()? } else { pl.len };
    Ok((Key { ino, kind, key }, Loc { seg, off, len }))
}

/// Encode a compact leaf of `count` entries (`entry(i)` gives the i-th key and location, in
/// increasing key order) into `out`; returns the payload length (at most [`COMPACT_WORST`]).
pub fn encode_compact_leaf(
    count: usize,
    entry: &mut dyn FnMut(usize) -> Result<(Key, Loc)>,
    out: &mut [u8],
) -> Result<usize> {
    if count > MAX_ENTRIES {
        return Err(Error::Invalid);
    }
    let mut w = Writer::new(out);
    w.u8(INDEX_COMPACT_LEAF)?;
    w.u16(count as u16)?;
    let (mut pk, mut pl) = (Key::default(), Loc::default());
    for i in 0..count {
        let (key, l) = entry(i)?;
        put_compact_entry(&mut w, &key, &l, &pk, &pl)?;
        (pk, pl) = (key, l);
    }
    Ok(w.pos())
}

/// Encode one compact leaf entry (`key`, `l`) after the entry (`pk`, `pl`).
fn put_compact_entry(w: &mut Writer<'_>, key: &Key, l: &Loc, pk: &Key, pl: &Loc) -> Result<()> {
    let delta = if key.ino == pk.ino && key.kind == pk.kind { key.key.checked_sub(pk.key) } else { None };
    let f = [
        (key.ino != pk.ino, C_INO),
        (key.kind != pk.kind, C_KIND),
        (delta.is_none(), C_KEY_ABS),
        (l.seg != pl.seg, C_SEG),
        (l.len != pl.len, C_LEN),
        (l.is_aligned(), C_ALIGNED),
    ]
    .iter()
    .fold(0u8, |f, &(on, bit)| if on { f | bit } else { f });
    w.u8(f)?;
    if f & C_INO != 0 {
        w.uvar(key.ino)?;
    }
    if f & C_KIND != 0 {
        w.u8(key.kind)?;
    }
    w.uvar(delta.unwrap_or(key.key))?;
    if f & C_SEG != 0 {
        w.uvar(u64::from(l.seg))?;
    }
    w.uvar(u64::from(l.start()))?;
    if f & C_LEN != 0 {
        w.uvar(u64::from(l.len))?;
    }
    Ok(())
}

impl<P: Platform> Tree<P> {
    /// Encode node `n` into the tree's buffer (children by their flash location, so children
    /// are written first); returns the payload length.
    pub(super) fn encode_node(&mut self, n: &Node<P>) -> Result<usize> {
        let mut buf = core::mem::replace(&mut self.buf, P::Vec::new());
        if buf.len() < COMPACT_WORST {
            if let Err(e) = buf.try_resize(COMPACT_WORST, 0) {
                self.buf = buf;
                return Err(e);
            }
        }
        let fixed_len = 3usize.saturating_add(n.entries.len().saturating_mul(Key::SIZE + Loc::SIZE));
        if self.compact && n.level == 0 {
            let entries = n.entries.as_slice();
            let res = encode_compact_leaf(
                entries.len(),
                &mut |i| {
                    let e = entries.get(i).ok_or(Error::Corrupt)?;
                    match e.ptr {
                        Ptr::Flash(l) => Ok((e.key, l)),
                        Ptr::Mem(c) => Ok((e.key, self.node(c)?.loc.ok_or(Error::Corrupt)?)),
                    }
                },
                buf.as_mut_slice(),
            );
            match res {
                // never longer than the fixed encoding (`NODE_MAX_BYTES` bounds both)
                Ok(len) if len <= fixed_len => {
                    self.buf = buf;
                    return Ok(len);
                }
                Ok(_) => {}
                Err(e) => {
                    self.buf = buf;
                    return Err(e);
                }
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
