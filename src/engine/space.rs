//! Space accounting: the capacity offered to users, live bytes, statfs, and the free-segment
//! floors every operation keeps (reserves, what a mount and a checkpoint need).

use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{segstate, NUM_HEADS};
use crate::engine::fs::{Engine, StatFs};
use crate::engine::platform::{FallibleVec, Platform};

/// Segments always kept free for the metadata, the GC and the checkpoint of a full filesystem.
pub const RESERVE_SEGS: u32 = 6;

/// Segments kept free below which even deletions are refused.
pub const RESERVE_DELETE: u32 = 2;

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Bytes of user-visible capacity (data + metadata) allowed before writes fail with NoSpace.
    pub(crate) fn capacity_bytes(&self) -> u64 {
        let main = self
            .log
            .segs
            .as_slice()
            .iter()
            .filter(|s| s.state != segstate::BAD && s.state != segstate::META)
            .fold(0u64, |a, _| a.saturating_add(1));
        let usable = main.saturating_sub(
            u64::from(RESERVE_SEGS) + NUM_HEADS as u64 * 2 + 2 * u64::from(self.segtab_segments()),
        );
        usable.saturating_mul(u64::from(self.sb.segment_size)) / 8 * 7
    }

    pub(crate) fn live_bytes(&self) -> u64 {
        self.log.segs.as_slice().iter().fold(0u64, |a, s| a.saturating_add(u64::from(s.live)))
    }

    /// Filesystem usage for statfs.
    pub fn statfs(&self) -> StatFs {
        let cap = self.capacity_bytes();
        let live = self.live_bytes();
        StatFs {
            block_size: crate::engine::format::BLOCK_SIZE,
            blocks: cap / u64::from(crate::engine::format::BLOCK_SIZE),
            blocks_free: cap.saturating_sub(live) / u64::from(crate::engine::format::BLOCK_SIZE),
            files: self.next_ino.saturating_sub(1),
            name_max: crate::engine::format::NAME_MAX as u32,
        }
    }

    pub(crate) fn pending_free(&self) -> u32 {
        let pinned = self.pinned.as_slice();
        let n = self.log.segs.len() as u32;
        (0..n)
            .zip(self.log.segs.as_slice().iter())
            .filter(|(i, s)| s.state == segstate::FULL && s.live == 0 && !pinned.contains(i))
            .fold(0u32, |a, _| a.saturating_add(1))
    }

    pub(crate) fn main_segments(&self) -> u64 {
        self.log
            .segs
            .as_slice()
            .iter()
            .filter(|s| s.state != segstate::BAD && s.state != segstate::META)
            .fold(0u64, |a, _| a.saturating_add(1))
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
        let reserved = self.log.segs.as_slice().iter().filter(|s| s.state == segstate::RESERVED).fold(0u32, |a, _| a.saturating_add(1));
        self.mount_need().saturating_add(1).saturating_sub(reserved)
    }

    /// Free segments below which a checkpoint must be taken now: what a checkpoint itself
    /// needs (its segment table and index nodes) plus the deletion reserve.
    pub(crate) fn cp_margin(&self) -> u32 {
        RESERVE_DELETE.saturating_add(self.segtab_segments())
    }

    pub(super) fn check_capacity(&self, extra: u64) -> Result<()> {
        if self.live_bytes().saturating_add(extra).saturating_add(self.reserved_space()) > self.capacity_bytes() {
            return Err(Error::NoSpace);
        }
        Ok(())
    }
}
