//! Keyed records: appending a record and pointing the index at it (keeping the segment usage
//! right), deleting key ranges, and reading the record a key points to.

use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{
    kind, put_delete, rtype, Inode, Key, Loc, BLOCK_SIZE, FEATURE_INCOMPAT_LEAN_DELETE, HEAD_META, INODE_SIZE, REC_HDR,
};
use crate::engine::fs::Engine;
use crate::engine::platform::{FallibleVec, Platform};

/// Keys [`Engine::idx_del_range`] takes from one walk of the index leaves.
const DEL_RUN: usize = 32;

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Point `key` at `loc`, keeping the segment usage table right.
    pub(crate) fn idx_set(&mut self, key: Key, loc: Loc) -> Result<()> {
        let old = self.tree.insert(&mut self.log, key, loc)?;
        self.log.live_add(loc);
        if let Some(o) = old {
            crate::engine::index::NodeIo::dead(&mut self.log, o);
        }
        Ok(())
    }

    /// Look `key` up.
    pub(crate) fn idx_get(&mut self, key: &Key) -> Result<Option<Loc>> {
        self.tree.get(&mut self.log, key)
    }

    /// First key >= `from`.
    pub(crate) fn idx_next(&mut self, from: &Key) -> Result<Option<(Key, Loc)>> {
        self.tree.next(&mut self.log, from)
    }

    /// Visit the keys >= `from` in order until `f(key, loc)` returns false (one descent).
    pub(crate) fn idx_walk(&mut self, from: &Key, f: &mut dyn FnMut(Key, Loc) -> bool) -> Result<()> {
        self.tree.walk_from(&mut self.log, from, f)
    }

    /// Remove every key in `[a, b]`.
    ///
    /// Each key the walk finds must be removable: a key that lookups do not reach (a forged
    /// index node holding keys outside its parent's range) would otherwise come back from
    /// the walk forever. Such a tree is `Corrupt`.
    pub(crate) fn idx_del_range(&mut self, a: Key, b: Key) -> Result<()> {
        if a == b {
            // One key (a name, an orphan entry): one descent removes it, instead of a `next`,
            // the `remove` and a final `next`. A key `remove` does not find goes through the
            // general loop below, which tells an absent key (Ok) from one that only the walk
            // reaches (Corrupt).
            if let Some(o) = self.tree.remove(&mut self.log, &a)? {
                crate::engine::index::NodeIo::dead(&mut self.log, o);
                return Ok(());
            }
        }
        // The keys come a run at a time from one walk of the leaves (one descent per run, not
        // one `next` per key), then each is removed.
        let mut from = a;
        loop {
            let mut run = [Key::default(); DEL_RUN];
            let mut n = 0usize;
            self.tree.walk_from(&mut self.log, &from, &mut |k, _| match run.get_mut(n) {
                Some(slot) if k <= b => {
                    *slot = k;
                    n = n.saturating_add(1);
                    n < DEL_RUN
                }
                _ => false,
            })?;
            for k in run.get(..n).unwrap_or(&[]) {
                match self.tree.remove(&mut self.log, k)? {
                    Some(o) => crate::engine::index::NodeIo::dead(&mut self.log, o),
                    None => return Err(Error::Corrupt),
                }
            }
            match run.get(..n).and_then(|r| r.last()) {
                // a full run: the next walk starts after its last key (removed now)
                Some(&k) if n == DEL_RUN => from = k,
                _ => return Ok(()),
            }
        }
    }

    /// Append a DELETE record for `[a, b]` to the metadata head and apply it.
    pub(crate) fn delete_range(&mut self, a: Key, b: Key, flags: u8) -> Result<()> {
        let mut p = [0u8; 2 * Key::SIZE];
        let short = self.sb.incompat & FEATURE_INCOMPAT_LEAN_DELETE != 0;
        let n = put_delete(a, b, short, &mut p)?;
        self.log.append(HEAD_META, rtype::DELETE, flags, a, p.get(..n).ok_or(Error::Invalid)?)?;
        self.idx_del_range(a, b)
    }

    /// Write an inode record and index it.
    pub(crate) fn write_inode(&mut self, ino: &Inode, flags: u8) -> Result<()> {
        let mut p = [0u8; INODE_SIZE];
        ino.encode(&mut p)?;
        let key = Key::new(ino.ino, kind::INODE, 0);
        let loc = self.log.append(HEAD_META, rtype::INODE, flags, key, &p)?;
        self.icache_forget(ino.ino);
        self.inode_records = self.inode_records.saturating_add(1);
        self.idx_set(key, loc)?;
        self.icache_put(loc, ino);
        Ok(())
    }

    /// Append a keyed record and index it.
    pub(crate) fn put_record(&mut self, head: usize, rt: u8, flags: u8, key: Key, payload: &[u8]) -> Result<Loc> {
        let loc = self.log.append(head, rt, flags, key, payload)?;
        self.idx_set(key, loc)?;
        Ok(loc)
    }

    /// Read the record for `key` into `self.buf`; returns the payload length.
    pub(crate) fn read_key(&mut self, key: &Key) -> Result<Option<usize>> {
        let loc = match self.idx_get(key)? {
            Some(l) => l,
            None => return Ok(None),
        };
        self.read_at(key, loc).map(Some)
    }

    /// Read the record for `key` at `loc` (a location the index just returned, e.g. from
    /// `idx_next`) into `self.buf`, without descending the index again; returns the payload length.
    /// An aligned payload (format.md 8.3) has no header: the buffer then holds `REC_HDR` zeros
    /// before its 4096 bytes, checked against the CRC its location carries.
    pub(crate) fn read_at(&mut self, key: &Key, loc: Loc) -> Result<usize> {
        let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
        let r = if loc.is_aligned() {
            self.read_aligned_into(key, loc, &mut tmp)
        } else {
            self.log.read_record(loc, &mut tmp).and_then(|h| if h.key == *key { Ok(h.len as usize) } else { Err(Error::Corrupt) })
        };
        self.buf = tmp;
        r
    }

    fn read_aligned_into(&mut self, key: &Key, loc: Loc, out: &mut P::Vec<u8>) -> Result<usize> {
        if key.kind != kind::DATA {
            return Err(Error::Corrupt);
        }
        out.clear();
        out.try_resize(REC_HDR + BLOCK_SIZE as usize, 0)?;
        self.log.read_aligned(loc, out.as_mut_slice().get_mut(REC_HDR..).ok_or(Error::Corrupt)?)?;
        Ok(BLOCK_SIZE as usize)
    }

    /// Payload of the record last read by `read_key` or `read_at`.
    pub(crate) fn payload(&self) -> &[u8] {
        self.buf.as_slice().get(REC_HDR..).unwrap_or(&[])
    }

    /// Delete one key (a DELETE record for `[key, key]`).
    pub(super) fn del_key(&mut self, key: Key, flags: u8) -> Result<()> {
        self.delete_range(key, key, flags)
    }
}
