//! Garbage collection: the foreground cleaner (`ensure_space`), victim choice, moving a
//! segment's live records, background steps and wear levelling, and the relocation of segments
//! whose program failed. `gcstep.rs` cuts the same work into bounded steps.

use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{
    group_count, group_entry, group_extent, kind, rtype, segstate, Key, Loc, RecHdr, BLOCK_SIZE, HEAD_COLD, HEAD_META, NO_SEG,
    REC_HDR,
};
use crate::engine::fs::Engine;
use crate::engine::log::{GC_GROUP, SEG_PINNED, SEG_RETIRE, SEG_SCRUB, SEG_STUCK};
use crate::engine::platform::{FallibleVec, Platform};

/// Extra segments the foreground GC frees per checkpoint (hysteresis), at least.
pub const GC_BATCH: u32 = 4;

/// The foreground GC refuses victims more than this percentage live.
pub const GC_MAX_LIVE: u32 = 90;

/// Cleaning ahead of need (free segments above the need) takes victims at most this live, or
/// up to `AHEAD_BELOW_AVERAGE` points below the log's average when that is higher.
pub const GC_AHEAD_MAX_LIVE: u32 = 75;

/// Ahead of need, a victim this many percentage points emptier than the log's average is
/// worth moving even above `GC_AHEAD_MAX_LIVE`.
pub const AHEAD_BELOW_AVERAGE: u32 = 5;

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Make sure at least `min_free` segments are free, running the GC if needed.
    pub(crate) fn ensure_space(&mut self, min_free: u32) -> Result<()> {
        if self.log.failed {
            return Err(Error::ReadOnly);
        }
        if self.log.free_count() < min_free && self.gc_futile(min_free) {
            // the last attempt found nothing to reclaim and nothing changed since
            return Err(Error::NoSpace);
        }
        let r = self.ensure_space_gc(min_free);
        if matches!(r, Err(Error::NoSpace)) {
            self.gc_futile = Some((self.log.next_seq, min_free));
        }
        r
    }

    /// Whether the foreground GC is known to be unable to reach `min_free` free segments: an
    /// earlier attempt at that need or below ended in `NoSpace` and nothing was appended since
    /// (no record died, no segment was freed or written).
    pub(crate) fn gc_futile(&self, min_free: u32) -> bool {
        matches!(self.gc_futile, Some((seq, need)) if seq == self.log.next_seq && min_free >= need)
    }

    fn ensure_space_gc(&mut self, min_free: u32) -> Result<()> {
        // Clean ahead of need: start when free segments fall below `low` (the need plus a
        // batch) and collect victims until the segments waiting for a checkpoint cover the need
        // plus two batches, then checkpoint once (a checkpoint writes the dirty index and the
        // segment table, so it must free many segments to pay for itself). Above the need, one
        // unit of work per call (a victim or a checkpoint) spreads the cleaning over the writes.
        let batch = self.gc_batch();
        let low = min_free.saturating_add(batch);
        let high = low.saturating_add(batch);
        let mut guard = self.sb.segment_count.saturating_mul(2);
        let mut worked = false;
        let at_need = self.log.free_count() < min_free;
        // The GC's own checkpoints in a row that raised nothing with no victim moved before
        // them: the pending segments are then only what checkpoints supersede, and every
        // further checkpoint frees as much as it writes. The second such checkpoint ends the
        // cleaning (the first may have left the segments that died since the previous
        // checkpoint to the next one). Without this a full filesystem wrote checkpoints until
        // the guard ran out (two per log segment: 2048 checkpoints, 127 MB programmed on a
        // 32 MiB device) at every failing operation.
        let mut stale = 0u32;
        // The most free segments those checkpoints reached: one counts as a gain only above it.
        // A checkpoint's own records may open a segment or not depending on where the metadata
        // head stands (compact index leaves vary in size), so free segments can go up and down
        // by one from checkpoint to checkpoint, each rise looking like a gain: without the
        // high-water mark a full volume of badly packing records checkpointed until the guard
        // (2 046 checkpoints on 16 KiB segments of 2 KiB pages, enospc.rs).
        let mut best = 0u32;
        // Cleaning cycles: victims moved, then the checkpoint that frees them (a victim's
        // segment is reusable only once a checkpoint no longer needs it: `SEG_DEAD_CP`). At the
        // end of each cycle (the first checkpoint after a victim) the room made (`gc_room`) is
        // compared with the previous cycle's: a cycle that ended with no more room than the one
        // before it gained nothing, since what its moves freed was spent on the segments they
        // filled and on its checkpoint (records that pack badly: every victim's live records
        // fill a new segment again), and the next cycle takes victims no emptier. Such a cycle
        // ends the cleaning of anything but a deletion: no more victims, at most the two
        // checkpoints of `stale` to free what waits, then `NoSpace`. Deletions make room, so
        // they go on until the guard, as before.
        let deletion = min_free <= self.cp_margin().max(self.mount_floor());
        let mut cps = self.log.stats.checkpoints;
        let mut moved = false;
        let mut last_room: Option<u64> = None;
        let mut flat = false;
        loop {
            let free = self.log.free_count();
            if free >= low || (worked && free >= min_free) {
                if at_need || free >= low {
                    self.gc_flat = false;
                }
                return Ok(());
            }
            if self.gc_flat && free >= min_free {
                // The last cleaning at the need gained nothing: above the need it would only
                // spend checkpoints, and the room a deletion makes would be gone by the time an
                // operation needs it. Wait for the need.
                return Ok(());
            }
            if guard == 0 {
                return if free >= min_free { Ok(()) } else { Err(Error::NoSpace) };
            }
            guard -= 1;
            let need = free < min_free;
            if self.log.stats.checkpoints != cps {
                cps = self.log.stats.checkpoints;
                if moved {
                    moved = false;
                    let room = self.gc_room();
                    if need && !deletion && last_room.is_some_and(|r| room <= r) {
                        flat = true;
                        self.gc_flat = true;
                    }
                    last_room = Some(room);
                }
            }
            let pending = self.pending_free();
            if pending > 0 && stale == 0 && (free.saturating_add(pending) >= high || free <= self.cp_margin()) {
                stale = self.checkpoint_stale(free, stale, &mut best)?;
                worked = true;
                continue;
            }
            // Ahead of need, only victims that pay for their move: at most 3/4 live, or clearly
            // emptier than the log's average (`ahead_max_live`). When the need is urgent,
            // greedy (the most space per move); ahead of need, cost-benefit (see `pick_victim`).
            let max_live = if need { GC_MAX_LIVE } else { self.ahead_max_live() };
            if flat || !self.gc_once(false, max_live, need)? {
                if need && pending > 0 && stale < 2 {
                    stale = self.checkpoint_stale(free, stale, &mut best)?;
                    worked = true;
                    continue;
                }
                return if free >= min_free { Ok(()) } else { Err(Error::NoSpace) };
            }
            stale = 0;
            best = 0;
            worked = true;
            moved = true;
        }
    }

    /// The room the foreground GC has made, or will have made once checkpoints free what waits,
    /// in bytes: the free segments, the full segments with nothing live, and what is left
    /// of the heads' segments. Byte-exact, so that cycles that gain less than a segment each
    /// still count as progress.
    fn gc_room(&self) -> u64 {
        let ss = u64::from(self.sb.segment_size);
        let segs = u64::from(self.log.free_count()).saturating_add(u64::from(self.pending_free()));
        let heads = self
            .log
            .heads
            .iter()
            .filter(|h| h.seg != NO_SEG)
            .fold(0u64, |a, h| a.saturating_add(u64::from(self.sb.segment_size.saturating_sub(h.pos))));
        segs.saturating_mul(ss).saturating_add(heads)
    }

    /// A checkpoint of the foreground GC, taken with `free` segments free: returns the new
    /// count of checkpoints in a row that gained nothing (`stale` + 1 when the free segments
    /// did not grow above both `free` and `best`, the most the checkpoints since the last
    /// victim reached, which it updates; else 0).
    fn checkpoint_stale(&mut self, free: u32, stale: u32, best: &mut u32) -> Result<u32> {
        self.checkpoint_to_free()?;
        let now = self.log.free_count();
        let gained = now > free.max(*best);
        *best = (*best).max(now);
        Ok(if gained { 0 } else { stale.saturating_add(1) })
    }

    /// Segments the foreground GC frees per checkpoint, and how far ahead of need it starts
    /// cleaning: grows with what a checkpoint writes (its segment table) and with the device
    /// (1/64 of the log segments, a small part of the 3/32 kept out of the capacity).
    pub(crate) fn gc_batch(&self) -> u32 {
        let fixed = GC_BATCH.saturating_add(self.segtab_segments().saturating_mul(4));
        let scaled = (self.main_segments() / 64).min(u64::from(u32::MAX)) as u32;
        fixed.max(scaled)
    }

    /// One bounded step of garbage collection: move the live records of one victim segment.
    /// `background` selects cost-benefit victim choice and static wear levelling; otherwise
    /// greedy. Returns whether any work was done.
    pub fn gc_step(&mut self, background: bool) -> Result<bool> {
        if self.log.failed {
            return Err(Error::ReadOnly);
        }
        if self.log.free_count() <= self.cp_margin() && self.pending_free() > 0 && !self.gc_futile(u32::MAX) {
            self.checkpoint_to_free()?;
            return Ok(true);
        }
        if background {
            // Idle work only when useful: scrubbing, wear levelling, or space getting short
            // (fewer than a quarter of the log segments free) with a victim at most half live.
            let v = match self.pick_victim(true, GC_MAX_LIVE, false) {
                Some(v) => v,
                None => return Ok(false),
            };
            let si = *self.log.seg(v)?;
            let main = self.main_segments();
            let short = u64::from(self.log.free_count()).saturating_mul(4) < main;
            let cheap = u64::from(si.live).saturating_mul(2) <= u64::from(self.sb.segment_size);
            let special = si.flags & SEG_SCRUB != 0 || self.wear_spread() > self.opts.wear_threshold;
            if !(special || (short && cheap)) {
                return Ok(false);
            }
        }
        self.gc_once(background, GC_MAX_LIVE, !background)
    }

    /// The most live (percent) a victim taken ahead of need may be: `GC_AHEAD_MAX_LIVE`, or
    /// `AHEAD_BELOW_AVERAGE` points below the average of the log's used segments when that is
    /// higher (never above `GC_MAX_LIVE`). At 95 % fill no segment is 3/4 live, so with the
    /// fixed limit alone the GC ran only at the need, with the free segments at the checkpoint
    /// margin, and checkpointed after every few victims. On a nearly full filesystem with
    /// little dead space, moving victims no emptier than the average ahead of need would
    /// consume the reserve instead of adding to it.
    fn ahead_max_live(&self) -> u32 {
        let c = self.log.segs.counts();
        let used = u64::from(c.main.saturating_sub(c.free).saturating_sub(c.reserved));
        let cap = used.saturating_mul(u64::from(self.sb.segment_size));
        let avg = if cap == 0 { 0 } else { c.live.saturating_mul(100) / cap };
        let avg = u32::try_from(avg).unwrap_or(u32::MAX);
        avg.saturating_sub(AHEAD_BELOW_AVERAGE).clamp(GC_AHEAD_MAX_LIVE, GC_MAX_LIVE)
    }

    /// Move one victim (foreground: at most `max_live` percent live; `greedy`: least live
    /// rather than cost-benefit). Returns whether any work was done.
    fn gc_once(&mut self, background: bool, max_live: u32, greedy: bool) -> Result<bool> {
        let v = match self.pick_victim(background, max_live, greedy && !background) {
            Some(v) => v,
            None => return Ok(false),
        };
        let vi = *self.log.seg(v)?;
        if vi.live == 0 {
            self.checkpoint_to_free()?;
            return Ok(true);
        }
        if !background
            && u64::from(vi.live).saturating_mul(100) > u64::from(self.sb.segment_size).saturating_mul(u64::from(max_live))
            && vi.flags & SEG_SCRUB == 0
        {
            // moving this segment would gain (almost) nothing
            return Ok(false);
        }
        match self.move_segment(v) {
            Ok(()) => {}
            // an unreadable live record keeps the victim (now skipped): what could be moved was
            Err(Error::Corrupt) if self.log.seg(v)?.flags & SEG_STUCK != 0 => {}
            Err(e) => return Err(e),
        }
        self.gc_after_victim()?;
        Ok(true)
    }

    pub(crate) fn pick_victim(&self, background: bool, max_live: u32, greedy: bool) -> Option<u32> {
        let ss = u64::from(self.sb.segment_size);
        let now = self.log.next_seq;
        let mut best: Option<(u32, u64)> = None;
        let mut minmax: Option<(u32, u32, u32)> = None; // (min erases full seg, its idx, max erases)
        let mut maxe = 0u32;
        let n = self.log.segs.len() as u32;
        for (i, s) in (0..n).zip(self.log.segs.as_slice().iter()) {
            if s.state != segstate::BAD && s.state != segstate::META {
                maxe = maxe.max(s.erases);
            }
            if s.state != segstate::FULL || self.is_head_seg(i) || s.flags & (SEG_PINNED | SEG_STUCK) != 0 {
                continue;
            }
            if s.live == 0 {
                // already dead: freed by the next checkpoint, nothing to move
                continue;
            }
            if s.flags & SEG_SCRUB != 0 {
                return Some(i);
            }
            if minmax.is_none_or(|m| s.erases < m.0) {
                minmax = Some((s.erases, i, 0));
            }
            let live = u64::from(s.live);
            if !background && live.saturating_mul(100) > ss.saturating_mul(u64::from(max_live)) {
                // moving it would gain too little (gc_once refuses it)
                continue;
            }
            // Cost-benefit (1 - u) * age / (1 + u), scaled, unless the need is urgent. Greedy
            // (least live) keeps picking young metadata segments (index nodes, inode updates,
            // segment tables) whose records would soon die anyway; moving their index nodes
            // dirties the index and forces a checkpoint, which writes new such segments: at
            // 90 % fill with small files it cleaned about one victim per checkpoint. When free
            // segments are short, though, only the space a move gains counts (an old, almost
            // full victim would consume the last free segments).
            let score = if greedy {
                ss.saturating_sub(live)
            } else {
                let age = now.saturating_sub(s.seq).max(1);
                ss.saturating_sub(live).saturating_mul(age) / ss.saturating_add(live).max(1)
            };
            if live < ss && best.is_none_or(|b| score > b.1) {
                best = Some((i, score));
            }
        }
        if background {
            if let Some((mine, idx, _)) = minmax {
                if maxe.saturating_sub(mine) > self.opts.wear_threshold {
                    return Some(idx);
                }
            }
        }
        best.map(|b| b.0)
    }

    pub(crate) fn is_head_seg(&self, s: u32) -> bool {
        self.log.heads.iter().any(|h| h.seg == s || h.next == s)
    }

    pub(crate) fn wear_spread(&self) -> u32 {
        let mut lo = u32::MAX;
        let mut hi = 0u32;
        for s in self.log.segs.as_slice() {
            if s.state != segstate::BAD && s.state != segstate::META {
                lo = lo.min(s.erases);
                hi = hi.max(s.erases);
            }
        }
        hi.saturating_sub(lo)
    }

    /// Move every live record out of segment `v` (to the cold head for file data, to the meta
    /// head for metadata; live index nodes are dirtied). The segment becomes free (or bad, if it
    /// is being retired) at the next checkpoint.
    fn move_segment(&mut self, v: u32) -> Result<()> {
        let vi = *self.log.seg(v)?;
        let mut off = 0u32;
        while let Some(loc) = self.gc_move_next(v, off, vi.seq)? {
            off = loc.off.saturating_add(loc.len);
            self.gc_bound_index()?;
            if self.log.seg(v)?.live == 0 {
                break;
            }
        }
        if self.gc_settle(v, vi.flags)? {
            return Err(Error::Corrupt);
        }
        Ok(())
    }

    /// Move the first record of segment `v` (sequence `seq`) at or after `off` (see
    /// `gc_record`); returns where it was, or `None` at the end of the segment.
    pub(crate) fn gc_move_next(&mut self, v: u32, off: u32, seq: u64) -> Result<Option<Loc>> {
        let mut tmp = core::mem::replace(&mut self.buf2, P::Vec::new());
        let res = match self.log.scan(v, off, seq, &mut tmp) {
            Ok(Some((h, loc))) => self.gc_record(&h, loc, &tmp).map(|()| Some(loc)),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        self.buf2 = tmp;
        res
    }

    /// Keep the dirty part of the index bounded while moving a large segment.
    pub(crate) fn gc_bound_index(&mut self) -> Result<()> {
        if self.should_checkpoint() {
            if self.in_checkpoint {
                self.tree.commit(&mut self.log)?;
            } else {
                self.checkpoint()?;
            }
        }
        Ok(())
    }

    /// After moving what could be moved out of segment `v` (whose flags were `flags0` when the
    /// move began): returns true when something live is left in it, which is then stuck.
    pub(crate) fn gc_settle(&mut self, v: u32, flags0: u8) -> Result<bool> {
        if self.log.seg(v)?.live != 0 {
            // Something live could not be read back (an uncorrectable page stops the scan):
            // keep the segment, never erase live data, and never pick it again (every later
            // move would fail the same way, and the foreground GC would fail every write).
            // Once nothing in it is live it is retired, not reused.
            let mut si = self.log.seg_mut(v)?;
            si.flags &= !SEG_SCRUB;
            si.flags |= SEG_STUCK | SEG_RETIRE;
            return Ok(true);
        }
        if flags0 & SEG_SCRUB != 0 && flags0 & SEG_RETIRE == 0 {
            self.log.faults.scrubbed_segments = self.log.faults.scrubbed_segments.saturating_add(1);
        }
        Ok(false)
    }

    /// After a victim: commit if due, and checkpoint when free segments ran down to the margin.
    pub(crate) fn gc_after_victim(&mut self) -> Result<()> {
        self.maybe_commit()?;
        if self.log.free_count() <= self.cp_margin() {
            self.checkpoint_to_free()?;
        }
        Ok(())
    }

    /// A checkpoint taken to free segments. A checkpoint frees only the segments that were
    /// already dead at the previous one (the fallback may still need the others); the victims
    /// emptied since then would wait for the next checkpoint, a whole interval of cleaning held
    /// back from the free pool. When more of them wait than a checkpoint's segment table may
    /// take, a second checkpoint frees them at once: it writes little (the index was just
    /// committed: changed segment-table chunks, head padding, the slot).
    pub(crate) fn checkpoint_to_free(&mut self) -> Result<()> {
        self.checkpoint()?;
        if self.pending_free() > self.segtab_segments().saturating_add(1) {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Relocate the records of segments whose program failed (heads in ghost mode and the
    /// shadows), so that the next checkpoint can retire them. A program that fails while a
    /// shadow's records are written again makes its head ghost in turn: the head leaves that
    /// segment as another shadow when it fills it (`Log::close_segment`), or here, and the
    /// loop relocates it next. Only more failed segments at once than [`SHADOWS`] slots, or a
    /// run of failures the loop's bound does not see end, stop the engine.
    ///
    /// [`SHADOWS`]: crate::engine::log::SHADOWS
    pub(super) fn relocate_failed(&mut self) -> Result<()> {
        let mut guard = 0u32;
        loop {
            guard = guard.saturating_add(1);
            if guard > 32 {
                self.log.failed = true;
                return Err(Error::Io);
            }
            let pending = self.log.shadows.iter().position(Option::is_some);
            let k = match pending {
                Some(k) => k,
                None => match self.log.heads.iter().position(|h| h.ghost) {
                    Some(h) => {
                        self.log.ghost_to_shadow(h)?;
                        continue;
                    }
                    None => return Ok(()),
                },
            };
            let seg = self.log.shadows.get(k).and_then(Option::as_ref).map_or(NO_SEG, |sh| sh.seg);
            if seg != NO_SEG {
                let r = self.move_segment(seg);
                if r.is_err() {
                    self.log.failed = true;
                }
                r?;
            }
            if let Some(sl) = self.log.shadows.get_mut(k) {
                *sl = None;
            }
        }
    }

    /// Move the live blocks of the data group at `loc` (its table `table`) to the cold head, as
    /// data groups of at most `GC_GROUP` blocks that keep their CRCs. A block is live when the
    /// index maps its key to its slot. A live block that does not read back stays (the segment
    /// is then left stuck by `gc_settle`).
    ///
    /// [`GC_GROUP`] blocks: the capacity counts a segment of aligned data by what groups of
    /// that size fill of it (`Log::block_fill`).
    fn gc_group(&mut self, loc: Loc, table: &[u8]) -> Result<()> {
        let count = group_count(table)?;
        let (payload0, _) = group_extent(loc.off, count, self.log.data_align).ok_or(Error::Corrupt)?;
        let mut data: P::Vec<u8> = P::Vec::new();
        let mut keys: P::Vec<(u64, u64, Loc)> = P::Vec::new();
        let mut i = 0u32;
        while i < count || !keys.is_empty() {
            if i < count && keys.len() < GC_GROUP {
                let e = group_entry(table, i)?;
                let old = Loc::aligned(loc.seg, payload0.saturating_add(i.saturating_mul(BLOCK_SIZE)), e.crc);
                i += 1;
                if self.idx_get(&Key::new(e.ino, kind::DATA, e.blk))? != Some(old) {
                    continue;
                }
                let at = data.len();
                data.try_resize(at.saturating_add(BLOCK_SIZE as usize), 0)?;
                match self.log.read_aligned(old, data.as_mut_slice().get_mut(at..).ok_or(Error::Corrupt)?) {
                    Ok(()) => keys.try_push((e.ino, e.blk, old))?,
                    Err(Error::Corrupt) => data.truncate(at),
                    Err(err) => return Err(err),
                }
                continue;
            }
            // write the batch
            let mut items: P::Vec<(u64, u64, &[u8])> = P::Vec::new();
            for (k, &(ino, blk, _)) in keys.as_slice().iter().enumerate() {
                let b = k.saturating_mul(BLOCK_SIZE as usize);
                items.try_push((ino, blk, data.as_slice().get(b..b.saturating_add(BLOCK_SIZE as usize)).ok_or(Error::Corrupt)?))?;
            }
            let mut done = 0usize;
            while done < items.len() {
                let mut locs: P::Vec<Loc> = P::Vec::new();
                let n = self.log.append_group(HEAD_COLD, items.as_slice().get(done..).ok_or(Error::Corrupt)?, &mut locs)?;
                for (k, &nl) in locs.as_slice().iter().enumerate() {
                    let &(ino, blk, _) = keys.as_slice().get(done.saturating_add(k)).ok_or(Error::Corrupt)?;
                    self.idx_set(Key::new(ino, kind::DATA, blk), nl)?;
                    self.log.stats.gc_records = self.log.stats.gc_records.saturating_add(1);
                    self.log.stats.gc_bytes = self.log.stats.gc_bytes.saturating_add(u64::from(BLOCK_SIZE));
                }
                done = done.saturating_add(n);
            }
            drop(items);
            keys.clear();
            data.clear();
        }
        Ok(())
    }

    pub(crate) fn gc_record(&mut self, h: &RecHdr, loc: Loc, rec: &P::Vec<u8>) -> Result<()> {
        match h.rtype {
            rtype::INODE | rtype::DENT | rtype::DATA | rtype::XATTR | rtype::ORPHAN => {
                if self.idx_get(&h.key)? == Some(loc) {
                    let payload = rec.as_slice().get(REC_HDR..).ok_or(Error::Corrupt)?;
                    let head = if h.rtype == rtype::DATA { HEAD_COLD } else { HEAD_META };
                    let nl = match self.log.append(head, h.rtype, 0, h.key, payload) {
                        Ok(nl) => nl,
                        Err(e) => {
                            if h.rtype == rtype::INODE {
                                self.icache_forget(h.key.ino);
                            }
                            return Err(e);
                        }
                    };
                    if h.rtype == rtype::INODE {
                        // the same bytes at a new place: a cached copy stays right
                        self.icache_moved(h.key.ino, loc, nl);
                    }
                    self.idx_set(h.key, nl)?;
                    self.log.stats.gc_records = self.log.stats.gc_records.saturating_add(1);
                    self.log.stats.gc_bytes = self.log.stats.gc_bytes.saturating_add(u64::from(loc.len));
                }
                Ok(())
            }
            rtype::DGROUP => self.gc_group(loc, rec.as_slice().get(REC_HDR..).ok_or(Error::Corrupt)?),
            rtype::INDEX => {
                let level = crate::engine::index::node_level(*rec.as_slice().get(REC_HDR).ok_or(Error::Corrupt)?);
                if self.tree.node_live(&mut self.log, loc, &h.key, level, true)? {
                    self.log.stats.gc_records = self.log.stats.gc_records.saturating_add(1);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
