//! The write-back side of the engine (issue 10): space budgeting for delayed allocation,
//! batched whole-block writes, and the inode cache that spares `getattr` a flash read.
//!
//! # The budget
//!
//! The engine's space rule is the one its other operations already follow: the bytes of live
//! records ([`Engine::live_bytes`], record header + payload of every record the index or a
//! checkpoint refers to) stay at most [`Engine::capacity_bytes`] (29/32 of the segments left after
//! the GC, checkpoint, head and segment-table reserves), so the GC always finds victims and the
//! reserves are never eaten. A budget reservation is a promise that this still holds after the
//! reserved write-back, so it is counted in live bytes *after the next index commit*, against
//! [`Engine::capacity_bytes`] (the capacity scaled by how much of a segment DATA records can
//! fill: records never span segments):
//!
//! * [`Engine::budget_avail`] = budget capacity - live - `dirty index nodes` x (`NODE_MAX_BYTES` +
//!   `REC_HDR`). A node dirtied since the last commit has had its old copy counted dead and its
//!   new copy is not counted yet; the commit adds at most a full node back per dirty node. (The
//!   copy-on-write rewrite of an index path is therefore charged here, in the published
//!   figure, not per block: after the commit a rewritten node is no bigger than its old copy
//!   plus the entries added to it, which `budget_cost` charges.)
//! * [`Engine::budget_cost`]`(blocks, inodes)` is linear, so per-folio and per-inode
//!   reservations add up to exactly the cost of any batch made of them:
//!   `blocks x PER_BLOCK + inodes x PER_INODE` with
//!   - `PER_BLOCK = (REC_HDR + BLOCK_SIZE)` (the DATA record, counted live in full even when
//!     the last block is shorter) `+ (REC_HDR - 1)` (the padding [`crate::engine::log::Log`]
//!     inserts so a record header never starts in the last `REC_HDR - 1` bytes of a write
//!     unit; padding is not live, it is charged anyway) `+ ENTRY` (one new leaf entry,
//!     `Key::SIZE + Loc::SIZE` = 29 bytes, if the block is new) `+ ceil(LEVELS x SPLIT / 31)`
//!     (the block's share of node splits, below);
//!   - `PER_INODE = (REC_HDR + INODE_SIZE) + (REC_HDR - 1) + ENTRY + 3 x LEVELS x SPLIT + ROOT`
//!     (the inode record, its padding and entry, and the per-call constant of the split bound);
//!   - `SPLIT = REC_HDR + 3 + ENTRY`: a split adds one node record (header and the node's 3-byte
//!     level/count header; the moved entries were counted in the old node) and one entry in the
//!     parent; `ROOT = REC_HDR + 3 + 2 x ENTRY` for a new root; `LEVELS = MAX_LEVEL + 1` (13:
//!     the tree refuses to grow higher).
//!
//!   The split bound: a call inserts at most `n` contiguous keys of one file (and rewrites one
//!   inode key). With `Phi = sum over touched nodes of max(0, entries - 32)`, an insert raises
//!   `Phi` by at most 1 and a split (65 entries into 32 + 33) lowers it by 32; the leaves the run
//!   touches start with `Phi <= n + 64` (inner leaves hold only keys of the run, the two edge
//!   leaves at most 32 each), so leaf splits `s0 <= 2 + n/32`, and at every higher level
//!   `s <= 2 + (n + s_below)/32 <= 3 + n/31`. Summed over `LEVELS` levels that is at most
//!   `3 x LEVELS` splits per call plus `n x LEVELS / 31`, plus one new root.
//!
//! With 4 KiB blocks: `PER_BLOCK` = 4254 bytes (3.9 % over the payload), `PER_INODE` = 3441.
//!
//! Every other space-consuming operation then checks `live + extra + reserved + dirty-index
//! term <= budget capacity` while anything is reserved ([`Engine::set_reserved`]), so it gets `NoSpace`
//! rather than the reserved space; deletions take no space check and keep working.
//! [`Engine::write_blocks`] takes no capacity check when the caller holds its budget, and its
//! foreground GC may dip below the free-segment target (the reserve the budget was sized
//! against): it never fails with `NoSpace` then.

use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{
    kind, rtype, Inode, Key, Loc, Timespec, BLOCK_SIZE, GROUP_MAX, HEAD_HOT, INODE_SIZE, MAX_FILE_SIZE, REC_HDR, S_IFMT, S_IFREG,
};
use crate::engine::fs::Engine;
use crate::engine::space::RESERVE_SEGS;
use crate::engine::index::MAX_LEVEL;
use crate::engine::platform::{FallibleVec, Platform};

const BS: u64 = BLOCK_SIZE as u64;
/// One index entry.
const ENTRY: u64 = (Key::SIZE + crate::engine::format::Loc::SIZE) as u64;
/// Worst padding before a record.
const PAD: u64 = REC_HDR as u64 - 1;
/// Levels the index may have.
const LEVELS: u64 = MAX_LEVEL as u64 + 1;
/// Live bytes one node split adds after the commit.
const SPLIT: u64 = REC_HDR as u64 + 3 + ENTRY;
/// Live bytes a new root adds.
const ROOT: u64 = REC_HDR as u64 + 3 + 2 * ENTRY;
/// Budget bytes per data block.
pub const BUDGET_PER_BLOCK: u64 = (REC_HDR as u64 + BS) + PAD + ENTRY + (LEVELS * SPLIT).div_ceil(31);
/// Budget bytes per inode record (and per `write_blocks` call).
pub const BUDGET_PER_INODE: u64 = (REC_HDR as u64 + INODE_SIZE as u64) + PAD + ENTRY + 3 * LEVELS * SPLIT + ROOT;

/// Slots of the inode cache (direct-mapped by inode number; about 128 KiB, allocated on first
/// use): a directory of a few hundred files renamed or unlinked one by one finds its inodes here.
pub const ICACHE_SLOTS: usize = 1024;

/// One inode cache slot: the decoded inode and the location of the record it came from.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ICacheSlot {
    valid: bool,
    loc: Loc,
    inode: Inode,
}

impl<P: Platform, F: Flash> Engine<P, F> {
    // ------------------------------------------------------------------ budget

    /// Worst-case live bytes that writing back `blocks` data blocks of one file plus `inodes`
    /// inode records adds (record headers, write-unit padding, index growth including node
    /// splits; the copy-on-write rewrite of index paths is accounted in [`Engine::budget_avail`]).
    /// Linear in both arguments; the formula and its derivation are in `writeback.rs` and
    /// docs/design.md. A [`Engine::write_blocks`] call needs `budget_cost(blocks.len(), 1)`.
    pub fn budget_cost(&self, blocks: u64, inodes: u64) -> u64 {
        blocks.saturating_mul(BUDGET_PER_BLOCK).saturating_add(inodes.saturating_mul(BUDGET_PER_INODE))
    }

    /// Bytes a budget may hand out now: capacity - live - what the next index commit may add
    /// back for the dirty index nodes (reservations are not subtracted). 0 when the engine no
    /// longer writes.
    pub fn budget_avail(&self) -> u64 {
        if self.log.failed {
            return 0;
        }
        self.capacity_bytes().saturating_sub(self.live_bytes()).saturating_sub(self.dirty_index_bytes())
    }

    /// Tell the engine how many bytes are reserved outside it (call it under the engine lock
    /// each time the lock is taken). While it is non-zero every other space-consuming
    /// operation (create, mkdir, symlink, mknod, link, setxattr, write, setattr growing a
    /// file) returns `NoSpace` rather than use reserved space; deletions still work.
    pub fn set_reserved(&mut self, bytes: u64) {
        self.reserved = bytes;
    }

    /// The reservation [`Engine::set_reserved`] last recorded.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// The figures the budget is computed from: ([`Engine::capacity_bytes`], live bytes, what
    /// the next index commit may add back for dirty nodes). Budgeted write-back keeps
    /// `live + dirty <= capacity`; right after a checkpoint the dirty term is 0.
    pub fn budget_figures(&self) -> (u64, u64, u64) {
        (self.capacity_bytes(), self.live_bytes(), self.dirty_index_bytes())
    }

    /// Inode records written since the mount.
    pub fn inode_records(&self) -> u64 {
        self.inode_records
    }

    /// `NoSpace` if `extra` more live bytes would eat into reserved space: the capacity check
    /// ([`Engine::check_capacity`]) while something is reserved (nothing reserved: always Ok,
    /// the operation's own checks apply).
    pub(crate) fn check_reserved(&mut self, extra: u64) -> Result<()> {
        if self.reserved == 0 {
            return Ok(());
        }
        self.check_capacity(extra)
    }

    /// How many of blocks `first_blk .. first_blk + n` of regular file `ino` would be written
    /// back in place: the index holds a record of the whole block (4096 bytes) lying wholly
    /// inside the on-flash size, at least as big as the record [`Engine::write_blocks`] writes
    /// for a whole block (an aligned block on a volume with aligned data, a DATA record
    /// otherwise). Writing such a block back adds no live bytes after the next commit: the new
    /// record replaces one at least as big, its index entry is rewritten in place (no insert,
    /// no split), and the call's inode record replaces the inode's. The kernel admits a dirty
    /// folio of such blocks without a budget reservation (docs/design.md "Write-back"), and
    /// `write_blocks` charges only the other blocks.
    pub fn blocks_in_place(&mut self, ino: u64, first_blk: u64, n: u64) -> Result<u64> {
        let i = self.getattr(ino)?;
        if i.mode & S_IFMT != S_IFREG {
            return Ok(0);
        }
        let new_bytes = if self.log.data_align != 0 { BS } else { REC_HDR as u64 + BS };
        let mut k = 0u64;
        for b in first_blk..first_blk.saturating_add(n) {
            let inside = b.checked_add(1).and_then(|e| e.checked_mul(BS)).is_some_and(|e| e <= i.size);
            if !inside {
                continue;
            }
            if let Some(old) = self.idx_get(&Key::new(ino, kind::DATA, b))? {
                let payload = if old.is_aligned() { BS } else { u64::from(old.len).saturating_sub(REC_HDR as u64) };
                if payload == BS && u64::from(old.bytes()) >= new_bytes {
                    k = k.saturating_add(1);
                }
            }
        }
        Ok(k)
    }

    // ------------------------------------------------------------------ write_blocks

    /// Write back whole blocks of regular file `ino`: `blocks[k]` is block `first_blk + k`, each
    /// exactly `BLOCK_SIZE` bytes except the last, which may be shorter (the file's EOF block,
    /// truncated to EOF by the caller); no read-modify-write. Blocks between the on-flash size
    /// and `first_blk` that the log may still hold from before a crash are dropped first (they
    /// would show through otherwise). Then ONE inode record: size = max(on-flash size, `size`),
    /// `mtime`, `ctime`; `size` must not exceed the end of the run (the on-flash size never
    /// covers a block not written).
    ///
    /// May run GC and checkpoints (the same bounds as [`Engine::write`] across segments) and
    /// may use reserved space: never `NoSpace` when [`Engine::set_reserved`] covers
    /// `budget_cost(fresh, 1)` for the `fresh` blocks not in place ([`Engine::blocks_in_place`];
    /// nothing when every block is in place); without that cover it returns `NoSpace` (nothing
    /// written) when the room is not there. An error after the first append makes the engine
    /// fail-stop (read-only: later mutations get `ReadOnly`).
    pub fn write_blocks(
        &mut self,
        ino: u64,
        first_blk: u64,
        blocks: &[&[u8]],
        size: u64,
        mtime: Timespec,
        ctime: Timespec,
    ) -> Result<()> {
        if self.log.failed {
            return Err(Error::ReadOnly);
        }
        let n = blocks.len() as u64;
        let last = blocks.last().ok_or(Error::Invalid)?;
        for (k, b) in blocks.iter().enumerate() {
            let full = b.len() as u64 == BS;
            if b.is_empty() || b.len() as u64 > BS || (!full && k + 1 != blocks.len()) {
                return Err(Error::Invalid);
            }
        }
        let end = first_blk
            .checked_add(n - 1)
            .and_then(|l| l.checked_mul(BS))
            .and_then(|s| s.checked_add(last.len() as u64))
            .ok_or(Error::FileTooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(Error::FileTooBig);
        }
        if size > end {
            return Err(Error::Invalid);
        }
        let mut i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Error::IsDir);
        }
        if i.mode & S_IFMT != S_IFREG {
            return Err(Error::Invalid);
        }
        // blocks that replace a whole block in place add no live bytes (`blocks_in_place`):
        // only the others, and their inode record, cost budget; a call of overwrites only costs
        // nothing and counts as held (the kernel admits such folios without a reservation)
        let mut cost = self.budget_cost(n, 1);
        if self.reserved < cost {
            let fresh = n.saturating_sub(self.blocks_in_place(ino, first_blk, n)?);
            cost = if fresh == 0 { 0 } else { self.budget_cost(fresh, 1) };
        }
        let held = self.reserved >= cost;
        if !held && cost > self.budget_avail().saturating_sub(self.reserved) {
            return Err(Error::NoSpace);
        }
        // the same preparation as every mutation, but a held budget may dip into the reserve
        self.maybe_commit()?;
        let need_free = RESERVE_SEGS.saturating_add(self.cp_segments());
        match self.ensure_space(need_free) {
            Ok(()) => {}
            Err(Error::NoSpace) if held => {}
            Err(e) => return Err(e),
        }
        // from here on this call's own records follow: an error after its first append goes
        // fail-stop with its cause kept (`end_op`, `Engine::failure`)
        self.log.op_mark = self.log.next_seq;
        let r = self.write_blocks_inner(&mut i, first_blk, blocks, size, mtime, ctime, need_free);
        self.end_op(r)
    }

    #[allow(clippy::too_many_arguments)]
    fn write_blocks_inner(
        &mut self,
        i: &mut Inode,
        first_blk: u64,
        blocks: &[&[u8]],
        size: u64,
        mtime: Timespec,
        ctime: Timespec,
        need_free: u32,
    ) -> Result<()> {
        let ino = i.ino;
        let start = first_blk.saturating_mul(BS);
        if start > i.size {
            // stale blocks past the on-flash EOF (from a write-back a crash cut short) must not
            // show through the gap
            self.cut_data(ino, i.size, 0)?;
        }
        let mut opened = self.log.opened;
        let mut k = 0usize;
        while k < blocks.len() {
            let rest = blocks.get(k..).ok_or(Error::Invalid)?;
            let n = self.put_blocks(ino, first_blk.saturating_add(k as u64), rest)?;
            for b in rest.get(..n).ok_or(Error::Invalid)? {
                self.log.stats.user_bytes = self.log.stats.user_bytes.saturating_add(b.len() as u64);
            }
            k = k.saturating_add(n);
            if k >= blocks.len() {
                break;
            }
            // a long batch consumes segments: keep the GC reserve and the checkpoint bound
            let short = self.log.opened != opened && self.log.free_count() < need_free;
            opened = self.log.opened;
            if short || self.should_checkpoint() {
                if self.should_checkpoint() {
                    self.checkpoint()?;
                }
                match self.ensure_space(need_free) {
                    // budgeted: the reserve covers the rest of the batch
                    Ok(()) | Err(Error::NoSpace) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if size > i.size {
            i.size = size;
        }
        i.mtime = mtime;
        i.ctime = ctime;
        self.write_inode(i, 0)
    }

    /// Write the first of `blocks` (block `blk` of `ino`) to the hot head and index it: with
    /// aligned data (format.md section 8), the run of whole blocks it starts as one data group
    /// (as many as fit in the head's segment); otherwise one DATA record. Returns how many
    /// blocks were written (at least one).
    fn put_blocks(&mut self, ino: u64, blk: u64, blocks: &[&[u8]]) -> Result<usize> {
        let whole = |b: &&[u8]| b.len() == BS as usize;
        let first = blocks.first().ok_or(Error::Invalid)?;
        if self.log.data_align == 0 || !whole(first) {
            self.put_record(HEAD_HOT, rtype::DATA, 0, Key::new(ino, kind::DATA, blk), first)?;
            return Ok(1);
        }
        let mut items: P::Vec<(u64, u64, &[u8])> = P::Vec::new();
        for (i, b) in blocks.iter().take(GROUP_MAX).take_while(|b| whole(b)).enumerate() {
            items.try_push((ino, blk.saturating_add(i as u64), b))?;
        }
        let mut locs: P::Vec<Loc> = P::Vec::new();
        let n = self.log.append_group(HEAD_HOT, items.as_slice(), &mut locs)?;
        for (i, &loc) in locs.as_slice().iter().enumerate() {
            self.idx_set(Key::new(ino, kind::DATA, blk.saturating_add(i as u64)), loc)?;
        }
        Ok(n)
    }

    // ------------------------------------------------------------------ xattr probe

    /// Length of xattr `name` of `ino` without a buffer (the size-0 probe of getxattr(2)).
    pub fn getxattr_len(&mut self, ino: u64, name: &[u8]) -> Result<usize> {
        self.getxattr(ino, name, &mut [])
    }

    // ------------------------------------------------------------------ inode cache

    /// The cached inode `ino` if its record is still the one at `loc` (the index's current
    /// location: any change of the record, by whatever path, misses).
    pub(crate) fn icache_get(&self, ino: u64, loc: Loc) -> Option<Inode> {
        let s = self.icache.as_slice().get(ino as usize % ICACHE_SLOTS)?;
        if s.valid && s.inode.ino == ino && s.loc == loc {
            Some(s.inode)
        } else {
            None
        }
    }

    /// Cache `inode`, whose record is at `loc`. Allocates the (fixed-size) table on first use;
    /// without memory nothing is cached.
    pub(crate) fn icache_put(&mut self, loc: Loc, inode: &Inode) {
        if self.icache.len() != ICACHE_SLOTS && self.icache.try_resize(ICACHE_SLOTS, ICacheSlot::default()).is_err() {
            self.icache.clear();
            return;
        }
        if let Some(s) = self.icache.as_mut_slice().get_mut(inode.ino as usize % ICACHE_SLOTS) {
            *s = ICacheSlot { valid: true, loc, inode: *inode };
        }
    }

    /// The GC copied inode `ino`'s record unchanged from `old` to `new`: a cached copy of the
    /// record at `old` is the record at `new` (without this every GC move would cost a miss).
    pub(crate) fn icache_moved(&mut self, ino: u64, old: Loc, new: Loc) {
        if let Some(s) = self.icache.as_mut_slice().get_mut(ino as usize % ICACHE_SLOTS) {
            if s.valid && s.inode.ino == ino {
                if s.loc == old {
                    s.loc = new;
                } else {
                    s.valid = false;
                }
            }
        }
    }

    /// Drop inode `ino` from the cache.
    pub(crate) fn icache_forget(&mut self, ino: u64) {
        if let Some(s) = self.icache.as_mut_slice().get_mut(ino as usize % ICACHE_SLOTS) {
            if s.inode.ino == ino {
                s.valid = false;
            }
        }
    }

    /// Inode-cache hits and misses since the mount (getattr calls served without / with a
    /// flash read).
    pub fn icache_stats(&self) -> (u64, u64) {
        (self.icache_hits, self.icache_misses)
    }

    /// Read inode `ino` through the cache.
    pub(crate) fn getattr_cached(&mut self, ino: u64) -> Result<Inode> {
        let key = Key::new(ino, kind::INODE, 0);
        let loc = match self.idx_get(&key)? {
            Some(l) => l,
            None => return Err(Error::NotFound),
        };
        if let Some(i) = self.icache_get(ino, loc) {
            self.icache_hits = self.icache_hits.saturating_add(1);
            return Ok(i);
        }
        self.icache_misses = self.icache_misses.saturating_add(1);
        let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
        let r = self.log.read_record(loc, &mut tmp);
        self.buf = tmp;
        let h = r?;
        if h.key != key {
            return Err(Error::Corrupt);
        }
        let mut i = Inode::decode(self.payload())?;
        if i.ino != ino {
            return Err(Error::Corrupt);
        }
        // an inode on the orphan list has no links, whatever its record says (the last unlink
        // does not rewrite it: `Engine::drop_link`)
        if i.nlink != 0 && self.idx_get(&Key::new(0, kind::ORPHAN, ino))?.is_some() {
            i.nlink = 0;
        }
        self.icache_put(loc, &i);
        Ok(i)
    }
}
