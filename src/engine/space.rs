//! Space accounting: the capacity offered to users, live bytes, statfs, and the free-segment
//! floors every operation keeps (reserves, what a mount and a checkpoint need).

use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{NUM_HEADS, REC_HDR};
use crate::engine::index::NODE_MAX_BYTES;
use crate::engine::fs::{Engine, StatFs};
use crate::engine::platform::Platform;

/// The part of the log offered to users: `OFFER_NUM / OFFER_DEN` (29/32) of what the log
/// segments left after the reserves hold ([`Engine::capacity_bytes`]); the other 3/32 stay dead
/// space the GC reclaims on a full filesystem (its over-provisioning).
pub const OFFER_NUM: u64 = 29;
/// See [`OFFER_NUM`].
pub const OFFER_DEN: u64 = 32;

/// Segments always kept free for the metadata, the GC and the checkpoint of a full filesystem.
pub const RESERVE_SEGS: u32 = 6;

/// Segments kept free below which even deletions are refused.
pub const RESERVE_DELETE: u32 = 2;

/// Bytes the record of one index node may take (a full node): what a dirty node may add to the
/// live bytes at the next commit, and what it costs the next checkpoint.
pub(crate) const DIRTY_NODE: u64 = NODE_MAX_BYTES as u64 + REC_HDR as u64;

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Bytes of user-visible capacity (data + metadata) allowed before writes fail with NoSpace:
    /// 29/32 ([`OFFER_NUM`] / [`OFFER_DEN`]) of the log segments left after the reserves,
    /// counted in what a segment of DATA records holds ([`Engine::data_fill`]). Records never
    /// span segments, so a segment holds only whole block records: on 16 KiB segments three
    /// (76 % of it), on 32 KiB seven (88 %), on 128 KiB thirty-one (98 %). Counted in raw
    /// segment bytes, the offered part left a filesystem of block records on 16 KiB segments no
    /// dead space at all: the fill ended only when the GC gave up, with the free segments at
    /// the floor, and a deletion then found `NoSpace`. Counted this way, a full filesystem
    /// keeps 3/32 of what its used segments can hold as dead space the GC can reclaim, whatever
    /// the segment size. The write-back budget hands out the same figure
    /// ([`Engine::budget_avail`]). The part was 7/8 until compact index leaves cut the
    /// metadata's write amplification (docs/benchmarks.md, "Compact index leaves").
    pub(crate) fn capacity_bytes(&self) -> u64 {
        let main = self.main_segments();
        let usable = main.saturating_sub(
            u64::from(RESERVE_SEGS) + NUM_HEADS as u64 * 2 + 2 * u64::from(self.segtab_segments()),
        );
        usable.saturating_mul(self.data_fill()) / OFFER_DEN * OFFER_NUM
    }

    /// Live bytes of whole blocks one segment holds: [`Log::block_fill`] of the volume's
    /// geometry and data alignment (the log's own layout rule, computed once at the mount).
    ///
    /// [`Log::block_fill`]: crate::engine::log::Log::block_fill
    pub(crate) fn data_fill(&self) -> u64 {
        self.log.data_fill.min(u64::from(self.sb.segment_size))
    }

    /// Live bytes once the next commit has written the dirty index nodes (each counted as a
    /// full node record): what the capacity checks and statfs count as used. A dirtied node's
    /// old copy is dead at once while its new copy counts only when written, so live bytes
    /// alone would let a full filesystem overshoot by the dirty index.
    pub(crate) fn committed_bytes(&self) -> u64 {
        self.live_bytes().saturating_add(self.dirty_index_bytes())
    }

    /// What the dirty index nodes may add to the live bytes at the next commit.
    pub(crate) fn dirty_index_bytes(&self) -> u64 {
        (self.tree.dirty_count() as u64).saturating_mul(DIRTY_NODE)
    }

    /// Live bytes of every segment (a counter of the segment table: no scan).
    pub(crate) fn live_bytes(&self) -> u64 {
        self.log.segs.counts().live
    }

    /// Filesystem usage for statfs.
    pub fn statfs(&self) -> StatFs {
        let cap = self.capacity_bytes();
        let used = self.committed_bytes();
        StatFs {
            block_size: crate::engine::format::BLOCK_SIZE,
            blocks: cap / u64::from(crate::engine::format::BLOCK_SIZE),
            blocks_free: cap.saturating_sub(used) / u64::from(crate::engine::format::BLOCK_SIZE),
            files: self.next_ino.saturating_sub(1),
            name_max: crate::engine::format::NAME_MAX as u32,
        }
    }

    /// Full segments with nothing live that no checkpoint pins: the next checkpoints free them.
    pub(crate) fn pending_free(&self) -> u32 {
        self.log.segs.counts().pending
    }

    /// Segments of the log (neither bad nor superblock or checkpoint area).
    pub(crate) fn main_segments(&self) -> u64 {
        u64::from(self.log.segs.counts().main)
    }

    /// Free segments a mount needs before it can free any: a new segment for the metadata
    /// head with its reserved successor, and the segment table and index nodes of the mount's
    /// checkpoint (pending segments become free only once that checkpoint is written). The
    /// data heads open at the mount only when there is room for them too (`finish_mount`),
    /// otherwise on their first record. Every operation keeps at least this many segments free
    /// or reserved as a head's successor (a mount returns those to the pool), deletions
    /// included: see `mount_floor`.
    pub fn mount_need(&self) -> u32 {
        2u32.saturating_add(self.segtab_segments()).saturating_add(1)
    }

    /// The free segments to keep before an operation so that a mount after a crash finds
    /// `mount_need`: the segments reserved as heads' successors go back to the pool at mount,
    /// and the operation's own records may open one segment (taking a free one as successor).
    pub(crate) fn mount_floor(&self) -> u32 {
        let reserved = self.log.segs.counts().reserved;
        self.mount_need().saturating_add(1).saturating_sub(reserved)
    }

    /// Free segments below which a checkpoint must be taken now: what a checkpoint itself
    /// needs (its segment table and index nodes) plus the deletion reserve.
    pub(crate) fn cp_margin(&self) -> u32 {
        RESERVE_DELETE.saturating_add(self.cp_segments())
    }

    /// Segments the next checkpoint may write: its segment table and the dirty index nodes.
    pub(crate) fn cp_segments(&self) -> u32 {
        let dirty = self.dirty_index_bytes();
        let segs = dirty.div_ceil(u64::from(self.sb.segment_size).max(1));
        self.segtab_segments().saturating_add(u32::try_from(segs).unwrap_or(u32::MAX))
    }

    /// `NoSpace` unless `extra` more live bytes fit in the capacity beside what is reserved.
    /// The dirty index nodes count at their largest (a full fixed-encoding node each:
    /// [`DIRTY_NODE`]); when the check fails with some dirty, a checkpoint writes them at their
    /// real size (a compact leaf is a fraction of it) and the check is made again, as UBIFS's
    /// budgeting forces a commit before it answers ENOSPC. Called before the operation writes
    /// anything.
    pub(super) fn check_capacity(&mut self, extra: u64) -> Result<()> {
        if self.fits(extra) || (self.commit_for_room()? && self.fits(extra)) {
            return Ok(());
        }
        Err(Error::NoSpace)
    }

    fn fits(&self, extra: u64) -> bool {
        self.committed_bytes().saturating_add(extra).saturating_add(self.reserved) <= self.capacity_bytes()
    }

    /// Checkpoint when dirty index nodes hold room back (counted at their largest); returns
    /// whether one was taken. A failing operation dirties nothing, so on a full filesystem
    /// only the first of a run of failures pays for a checkpoint.
    /// Only before the operation's first record (`begin_mutation` set the mark and nothing was
    /// appended since): the checkpoint is then not part of the operation, and the mark moves
    /// past it, so that the operation failing afterwards (`NoSpace`) is not taken for one that
    /// failed half way (`end_op`'s fail-stop).
    pub(crate) fn commit_for_room(&mut self) -> Result<bool> {
        let untouched = self.log.op_mark == u64::MAX || self.log.op_mark == self.log.next_seq;
        if self.tree.dirty_count() == 0 || self.opts.read_only || self.in_checkpoint || !untouched {
            return Ok(false);
        }
        let marked = self.log.op_mark != u64::MAX;
        self.checkpoint()?;
        if marked {
            self.log.op_mark = self.log.next_seq;
        }
        Ok(true)
    }
}
