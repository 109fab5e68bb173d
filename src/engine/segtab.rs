//! The segment table on flash: SEGTAB records written by a checkpoint and read back by a
//! mount, its size in segments, and the check of the in-RAM table against the index (and its
//! repair, for fsck).

use crate::engine::codec::{Reader, Writer};
use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{
    put_seginfo, rtype, seginfo_from, segstate, CpHeader, CpTwins, Key, Loc, SegInfo, CP_HDR_SIZE, HEAD_META,
    NO_SEG, REC_HDR, SEGINFO_SIZE, SEGTAB_ENTRIES,
};
use crate::engine::fs::Engine;
use crate::engine::log::{SEG_DEAD_CP, SEG_PINNED, SEG_RAM_FLAGS, SEG_RETIRE, SEG_SCRUB, SEG_STUCK};
use crate::engine::platform::{FallibleVec, Platform};

/// The entry as a checkpoint writes it: a full segment with nothing live that was already dead
/// at the previous checkpoint (`SEG_DEAD_CP`) is recorded free (bad when retiring); otherwise
/// recorded as it is, so a mount from this checkpoint keeps it for the fallback to the previous
/// one. RAM-only flags are dropped.
pub fn table_entry(s: &SegInfo) -> SegInfo {
    let mut e = *s;
    if e.state == segstate::FULL && e.live == 0 && e.flags & SEG_DEAD_CP != 0 {
        e.state = if e.flags & SEG_RETIRE != 0 { segstate::BAD } else { segstate::FREE };
    }
    e.flags &= !SEG_RAM_FLAGS;
    e
}

/// Summary counters of the segment table, kept in step with every change of an entry (see
/// [`SegTable`]), so that free-space checks, statfs and the GC's bookkeeping never scan it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SegCounts {
    /// Free segments.
    pub free: u32,
    /// Segments reserved as a head's next segment.
    pub reserved: u32,
    /// Segments of the log (neither bad nor superblock/checkpoint area).
    pub main: u32,
    /// Full segments with nothing live that no checkpoint pins: the next checkpoints free them.
    pub pending: u32,
    /// Live bytes of every segment.
    pub live: u64,
}

impl SegCounts {
    fn of(s: &SegInfo) -> SegCounts {
        SegCounts {
            free: u32::from(s.state == segstate::FREE),
            reserved: u32::from(s.state == segstate::RESERVED),
            main: u32::from(s.state != segstate::BAD && s.state != segstate::META),
            pending: u32::from(s.state == segstate::FULL && s.live == 0 && s.flags & SEG_PINNED == 0),
            live: u64::from(s.live),
        }
    }

    fn add(&mut self, c: &SegCounts) {
        self.free = self.free.saturating_add(c.free);
        self.reserved = self.reserved.saturating_add(c.reserved);
        self.main = self.main.saturating_add(c.main);
        self.pending = self.pending.saturating_add(c.pending);
        self.live = self.live.saturating_add(c.live);
    }

    fn sub(&mut self, c: &SegCounts) {
        self.free = self.free.saturating_sub(c.free);
        self.reserved = self.reserved.saturating_sub(c.reserved);
        self.main = self.main.saturating_sub(c.main);
        self.pending = self.pending.saturating_sub(c.pending);
        self.live = self.live.saturating_sub(c.live);
    }
}

/// The segment table in RAM: one [`SegInfo`] per segment, its summary counters, and which
/// SEGTAB chunks changed since the last checkpoint wrote the table (as [`table_entry`] records
/// them). Entries change only
/// through [`SegTable::get_mut`] (a guard that updates both when it is dropped) or
/// [`SegTable::replace`], so the counters and the chunk marks cannot miss a change.
pub struct SegTable<P: Platform> {
    segs: P::Vec<SegInfo>,
    counts: SegCounts,
    /// One byte per SEGTAB chunk: non-zero when an entry of the chunk changed since the last
    /// checkpoint captured it.
    changed: P::Vec<u8>,
    /// The least-worn free segments, found by one pass over the table (see
    /// [`SegTable::least_worn_free`]).
    wear: WearCache,
}

/// Free segments in the order [`SegTable::least_worn_free`] hands them out (erase count, then
/// index), taken from one pass over the table, so that opening a segment does not scan every
/// entry each time (a mount opens several; issue 12's mount at scale). Every free segment not
/// in it ranks above `bound`; a change that could break that (a segment becoming free, or a free
/// one's erase count changing, at or below `bound`) empties it, and the next call scans again.
#[derive(Debug, Clone, Copy)]
struct WearCache {
    /// (erase count, segment), ascending; `take..len` not handed out yet.
    at: [(u32, u32); WEAR_CACHE],
    len: usize,
    take: usize,
    /// The largest key the pass kept when it left free segments out (`(MAX, MAX)` when it kept
    /// every free one: then any newly free segment empties the cache).
    bound: (u32, u32),
}

/// Segments a [`WearCache`] pass keeps.
const WEAR_CACHE: usize = 16;

impl WearCache {
    const EMPTY: WearCache = WearCache { at: [(0, 0); WEAR_CACHE], len: 0, take: 0, bound: (0, 0) };

    /// A change of entry `s` from `before` to `after` (see the type).
    fn note(&mut self, s: u32, before: &SegInfo, after: &SegInfo) {
        if self.take >= self.len {
            return;
        }
        let free_now = after.state == segstate::FREE;
        let was_free = before.state == segstate::FREE;
        if free_now && (!was_free || before.erases != after.erases) && (after.erases, s) <= self.bound {
            self.len = 0;
        } else if was_free && before.erases != after.erases {
            // a cached entry's key is stale: start again
            self.len = 0;
        }
    }
}

/// A mutable segment-table entry: dropping it updates the table's counters and marks the
/// entry's chunk changed if the entry differs.
pub struct SegMut<'a> {
    si: &'a mut SegInfo,
    counts: &'a mut SegCounts,
    changed: Option<&'a mut u8>,
    wear: &'a mut WearCache,
    index: u32,
    before: SegInfo,
}

impl core::ops::Deref for SegMut<'_> {
    type Target = SegInfo;
    fn deref(&self) -> &SegInfo {
        self.si
    }
}

impl core::ops::DerefMut for SegMut<'_> {
    fn deref_mut(&mut self) -> &mut SegInfo {
        self.si
    }
}

impl Drop for SegMut<'_> {
    fn drop(&mut self) {
        if *self.si != self.before {
            self.wear.note(self.index, &self.before, self.si);
            self.counts.sub(&SegCounts::of(&self.before));
            self.counts.add(&SegCounts::of(self.si));
            if table_entry(self.si) != table_entry(&self.before) {
                if let Some(c) = self.changed.as_deref_mut() {
                    *c = 1;
                }
            }
        }
    }
}

impl<P: Platform> SegTable<P> {
    /// An empty table (no segments: nothing loaded yet).
    pub fn empty() -> Self {
        SegTable { segs: P::Vec::new(), counts: SegCounts::default(), changed: P::Vec::new(), wear: WearCache::EMPTY }
    }

    /// A table over `segs`, every chunk marked changed (fails only without memory for the
    /// chunk marks).
    pub fn new(segs: P::Vec<SegInfo>) -> Result<Self> {
        let mut t = Self::empty();
        t.replace(segs)?;
        Ok(t)
    }

    /// Replace every entry (a table loaded from a checkpoint, or none), every chunk marked
    /// changed. On `NoMem` the table is empty.
    pub fn replace(&mut self, segs: P::Vec<SegInfo>) -> Result<()> {
        let counts = {
            let mut c = SegCounts::default();
            for s in segs.as_slice() {
                c.add(&SegCounts::of(s));
            }
            c
        };
        self.replace_counted(segs, counts)
    }

    /// [`SegTable::replace`] with the counters of `segs` already computed (`counts`, by the
    /// caller's own pass over the entries: [`SegCounts::add`] of [`SegCounts::of`] each).
    fn replace_counted(&mut self, segs: P::Vec<SegInfo>, counts: SegCounts) -> Result<()> {
        self.segs = segs;
        self.wear = WearCache::EMPTY;
        self.changed.clear();
        let chunks = crate::engine::format::segtab_chunks(self.segs.len() as u32) as usize;
        if let Err(e) = self.changed.try_resize(chunks, 1) {
            self.segs = P::Vec::new();
            self.counts = SegCounts::default();
            return Err(e);
        }
        self.counts = counts;
        Ok(())
    }

    /// Number of segments.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// Whether the table is empty (not loaded yet).
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Every entry.
    pub fn as_slice(&self) -> &[SegInfo] {
        self.segs.as_slice()
    }

    /// Entry `s`.
    pub fn get(&self, s: u32) -> Result<&SegInfo> {
        self.segs.as_slice().get(s as usize).ok_or(Error::Corrupt)
    }

    /// Entry `s`, to change (see [`SegMut`]).
    pub fn get_mut(&mut self, s: u32) -> Result<SegMut<'_>> {
        let si = self.segs.as_mut_slice().get_mut(s as usize).ok_or(Error::Corrupt)?;
        let changed = self.changed.as_mut_slice().get_mut((s / SEGTAB_ENTRIES) as usize);
        let before = *si;
        Ok(SegMut { si, counts: &mut self.counts, changed, wear: &mut self.wear, index: s, before })
    }

    /// The least-worn free segment (the lowest erase count, the lowest index among equals),
    /// handed out once: the caller takes it (marks it reserved) before asking again. From the
    /// wear cache while it holds one, else from a new pass over the table.
    pub fn least_worn_free(&mut self) -> Option<u32> {
        while self.wear.take < self.wear.len {
            let (e, s) = self.wear.at.get(self.wear.take).copied()?;
            self.wear.take = self.wear.take.saturating_add(1);
            // still free, with the count it was ranked by (a segment taken and freed again, or
            // counted again, emptied the cache instead)
            if self.segs.as_slice().get(s as usize).is_some_and(|x| x.state == segstate::FREE && x.erases == e) {
                return Some(s);
            }
        }
        self.refill_wear();
        let (_, s) = self.wear.at.get(self.wear.take).copied().filter(|_| self.wear.take < self.wear.len)?;
        self.wear.take = self.wear.take.saturating_add(1);
        Some(s)
    }

    /// One pass over the table: the [`WEAR_CACHE`] least-worn free segments, in order.
    fn refill_wear(&mut self) {
        let mut w = WearCache::EMPTY;
        let mut left_out: Option<(u32, u32)> = None;
        for (i, x) in self.segs.as_slice().iter().enumerate() {
            if x.state != segstate::FREE {
                continue;
            }
            let key = (x.erases, i as u32);
            if w.len == WEAR_CACHE {
                // full: `key` is above the last kept (entries come in index order), or takes
                // its place
                let last = w.at.get(WEAR_CACHE - 1).copied().unwrap_or((0, 0));
                if key >= last {
                    left_out = Some(left_out.map_or(key, |l| l.min(key)));
                    continue;
                }
                left_out = Some(left_out.map_or(last, |l| l.min(last)));
                w.len = WEAR_CACHE - 1;
            }
            // insertion into the sorted prefix
            let mut p = w.len;
            while p > 0 {
                let prev = w.at.get(p - 1).copied().unwrap_or((0, 0));
                if prev < key {
                    break;
                }
                if let Some(slot) = w.at.get_mut(p) {
                    *slot = prev;
                }
                p -= 1;
            }
            if let Some(slot) = w.at.get_mut(p) {
                *slot = key;
            }
            w.len = w.len.saturating_add(1);
        }
        // every free segment left out ranks above every kept one
        w.bound = match left_out {
            Some(_) => w.at.get(w.len.saturating_sub(1)).copied().unwrap_or((0, 0)),
            None => (u32::MAX, u32::MAX),
        };
        self.wear = w;
    }

    /// The summary counters.
    pub fn counts(&self) -> SegCounts {
        self.counts
    }

    /// The counters computed from the entries (what [`SegTable::counts`] must equal).
    pub fn recounted(&self) -> SegCounts {
        let mut c = SegCounts::default();
        for s in self.segs.as_slice() {
            c.add(&SegCounts::of(s));
        }
        c
    }

    /// Whether chunk `i` changed since this was last asked (the mark is cleared).
    pub fn take_changed(&mut self, i: usize) -> bool {
        match self.changed.as_mut_slice().get_mut(i) {
            Some(c) => core::mem::replace(c, 0) != 0,
            None => true,
        }
    }

    /// Mark chunk `i` changed.
    pub fn mark_changed(&mut self, i: usize) {
        if let Some(c) = self.changed.as_mut_slice().get_mut(i) {
            *c = 1;
        }
    }

    /// Mark every chunk changed (`true`) or unchanged.
    pub fn set_changed(&mut self, on: bool) {
        for c in self.changed.as_mut_slice() {
            *c = u8::from(on);
        }
    }
}

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Load the segment table of checkpoint `cp` (blob `blob`) from the SEGTAB records it
    /// names; pin their segments until the next checkpoint, mark the heads' segments full, and
    /// flag the segments already dead at this checkpoint (`SEG_DEAD_CP`). A chunk is marked
    /// changed only where the table in RAM differs from the record loaded (the next checkpoint
    /// writes what changed since this one, see [`Engine::write_segtab`]). Records that lie
    /// back to back in a segment are read together (one flash read of up to
    /// [`crate::engine::log::SCAN_WINDOW`] bytes), so each page of the table is read once.
    pub(super) fn load_segtab(&mut self, cp: &CpHeader, blob: &[u8]) -> Result<()> {
        let chunks = crate::engine::format::segtab_chunks(cp.seg_count);
        let mut locs: P::Vec<Loc> = P::Vec::new();
        {
            let mut r = Reader::new(blob.get(CP_HDR_SIZE..).ok_or(Error::Corrupt)?);
            for _ in 0..chunks {
                locs.try_push(Loc::get(&mut r)?)?;
            }
        }
        // The whole table is allocated once and every entry written in place: one pass over
        // the entries decodes them and the passes after it touch only what they change (a mount
        // on 8192 segments decodes 8192 entries: issue 12's mount at scale).
        let n = cp.seg_count as usize;
        let mut segs: P::Vec<SegInfo> = P::Vec::new();
        segs.try_resize(n, SegInfo::default())?;
        let mut rec = P::Vec::new();
        // the bytes of the current run of records: (segment, start, end) and the bytes
        let mut span: P::Vec<u8> = P::Vec::new();
        let mut span_at: (u32, u32, u32) = (NO_SEG, 0, 0);
        // chunks whose entries are not loaded as recorded (an open segment becomes full, RAM
        // flags are dropped): written again by the next checkpoint
        let mut differs: P::Vec<u8> = P::Vec::new();
        differs.try_resize(chunks as usize, 0)?;
        let wu = self.sb.write_unit.max(1);
        for i in 0..chunks {
            let l = *locs.as_slice().get(i as usize).ok_or(Error::Corrupt)?;
            let end = l.off.checked_add(l.len).ok_or(Error::Corrupt)?;
            if !(span_at.0 == l.seg && l.off >= span_at.1 && end <= span_at.2) {
                // A new window, of whole write units: this record and those that follow it back
                // to back. The write unit the last window ended in is not read again.
                let mut run_end = end;
                let ws = l.off.saturating_sub(l.off % wu);
                for n in locs.as_slice().get(i as usize + 1..).unwrap_or(&[]) {
                    let n_end = n.off.saturating_add(n.len);
                    if n.seg != l.seg || n.off < run_end || n.off.saturating_sub(run_end) >= wu || u64::from(n_end.saturating_sub(ws)) > crate::engine::log::SCAN_WINDOW {
                        break;
                    }
                    run_end = n_end;
                }
                let we = run_end.div_ceil(wu).saturating_mul(wu).min(self.sb.segment_size);
                // kept from the last window: [ws, keep_end)
                let keep = span_at.0 == l.seg && ws >= span_at.1 && ws < span_at.2 && span_at.2 < we;
                let keep_end = if keep { span_at.2 } else { ws };
                if keep {
                    let from = ws.saturating_sub(span_at.1) as usize;
                    span.as_mut_slice().copy_within(from.., 0);
                }
                span.truncate(keep_end.saturating_sub(ws) as usize);
                span_at = (NO_SEG, 0, 0);
                if end <= we && span.try_resize(we.saturating_sub(ws) as usize, 0).is_ok() {
                    let fresh = span.as_mut_slice().get_mut(keep_end.saturating_sub(ws) as usize..).ok_or(Error::Corrupt)?;
                    self.log.read_span(l.seg, keep_end, fresh)?;
                    span_at = (l.seg, ws, we);
                }
            }
            let bytes: &[u8] = if span_at.0 == l.seg && l.off >= span_at.1 && end <= span_at.2 {
                span.as_slice().get(l.off.saturating_sub(span_at.1) as usize..end.saturating_sub(span_at.1) as usize).ok_or(Error::Corrupt)?
            } else {
                self.log.read_record(l, &mut rec)?;
                rec.as_slice()
            };
            let h = self.log.check_record(bytes, l)?;
            if h.rtype != rtype::SEGTAB || h.key != Key::new(0, 0, u64::from(i)) {
                return Err(Error::Corrupt);
            }
            let mut r = Reader::new(bytes.get(REC_HDR..).ok_or(Error::Corrupt)?);
            let first = r.u32()?;
            let count = u32::from(r.u16()?);
            // every chunk holds exactly its entries (what `write_segtab` writes): entry k of
            // chunk i is segment i * SEGTAB_ENTRIES + k
            let first_us = first as usize;
            let want = n.saturating_sub(first_us).min(SEGTAB_ENTRIES as usize);
            if first != i.saturating_mul(SEGTAB_ENTRIES) || count as usize != want || first_us >= n {
                return Err(Error::Corrupt);
            }
            let raw = r.bytes(want.saturating_mul(SEGINFO_SIZE))?;
            let out = segs.as_mut_slice().get_mut(first_us..first_us.saturating_add(want)).ok_or(Error::Corrupt)?;
            let mut same = true;
            for (k, o) in out.iter_mut().enumerate() {
                let at = k.saturating_mul(SEGINFO_SIZE);
                let e = raw.get(at..at.saturating_add(SEGINFO_SIZE)).ok_or(Error::Corrupt)?;
                let mut si = seginfo_from(e.try_into().map_err(|_| Error::Corrupt)?);
                if si.state > segstate::META || si.live > self.sb.segment_size {
                    return Err(Error::Corrupt);
                }
                if si.state == segstate::OPEN {
                    si.state = segstate::FULL;
                    same = false;
                }
                if si.flags & SEG_RAM_FLAGS != 0 {
                    si.flags &= !SEG_RAM_FLAGS;
                    same = false;
                }
                *o = si;
            }
            if !same {
                if let Some(d) = differs.as_mut_slice().get_mut(i as usize) {
                    *d = 1;
                }
            }
        }
        drop(span);
        // Before the table is installed, on the entries themselves (as `SegTable::get_mut`
        // would, chunks marked where the entry as the next checkpoint records it changes):
        // the SEGTAB records' segments are pinned until the next checkpoint, the heads'
        // segments are full (they may have been opened after the table was captured), and
        // segments the table records full and dead were dead at this checkpoint (`SEG_DEAD_CP`:
        // the next checkpoint may free them; not the heads' segments, where the log after this
        // checkpoint starts).
        let mut counts = SegCounts::default();
        {
            let t = segs.as_mut_slice();
            let d = differs.as_mut_slice();
            let mut adjust = |s: u32, f: &mut dyn FnMut(&mut SegInfo)| -> Result<()> {
                let si = t.get_mut(s as usize).ok_or(Error::Corrupt)?;
                let before = table_entry(si);
                f(si);
                if table_entry(si) != before {
                    if let Some(x) = d.get_mut((s / SEGTAB_ENTRIES) as usize) {
                        *x = 1;
                    }
                }
                Ok(())
            };
            for l in locs.as_slice() {
                adjust(l.seg, &mut |si| {
                    if si.state == segstate::FREE || si.state == segstate::RESERVED {
                        si.state = segstate::FULL;
                    }
                    si.flags |= SEG_PINNED;
                })?;
            }
            for hs in cp.heads.iter().filter(|h| h.seg != NO_SEG) {
                adjust(hs.seg, &mut |si| {
                    si.state = segstate::FULL;
                    si.seq = hs.seg_seq;
                })?;
            }
            for (c, part) in t.chunks_mut(SEGTAB_ENTRIES as usize).enumerate() {
                let mut dead = false;
                for (k, si) in part.iter_mut().enumerate() {
                    if si.state == segstate::FULL && si.live == 0 && si.flags & SEG_PINNED == 0 {
                        let s = c.saturating_mul(SEGTAB_ENTRIES as usize).saturating_add(k);
                        if !cp.heads.iter().any(|h| h.seg as usize == s) {
                            // recorded free (or bad) from now on: the chunk changes
                            si.flags |= SEG_DEAD_CP;
                            dead = true;
                        }
                    }
                    // (SEG_DEAD_CP counts for none of the counters)
                    counts.add(&SegCounts::of(si));
                }
                if dead {
                    if let Some(x) = d.get_mut(c) {
                        *x = 1;
                    }
                }
            }
        }
        self.log.segs.replace_counted(segs, counts)?;
        // from here on every change goes through `SegTable::get_mut`, which marks its chunk
        self.log.segs.set_changed(false);
        for (i, &c) in differs.as_slice().iter().enumerate() {
            if c != 0 {
                self.log.segs.mark_changed(i);
            }
        }
        // no entry of the new table is counted open (the RAM flags were dropped)
        self.log.reset_open();
        self.segtab_locs = locs;
        self.segtab_seq = cp.seq;
        // the previous checkpoint's records are not known (yet: see `Engine::load_prev_segtab`)
        self.segtab_prev_locs.clear();
        self.segtab_twin.clear();
        Ok(())
    }

    /// After checkpoint `cp` (blob `blob`, the newest on the medium, not a fallback) was
    /// loaded: its twin map says which of its SEGTAB records hold the same entries as those of
    /// the checkpoint before it (`prev`); that checkpoint's blob (among the valid slots found,
    /// `cands`: sequence, area, slot) names them. With both, the next checkpoint (the mount's)
    /// names those records again for the chunks that did not change since `cp`, as a
    /// checkpoint after `cp` in the same session would have, instead of writing the whole
    /// table. Best effort: without a map (an older engine, no room in the slot), the previous
    /// blob, or memory, the next checkpoint writes every chunk as before.
    ///
    /// The previous checkpoint's records are still on the medium: their segments died at `cp`
    /// at the earliest (pinned until then, see [`Engine::pin_segtab`]) and only a checkpoint
    /// after `cp` frees such segments; a mount from `cp` means none was written, or one was and
    /// it (or a slot after `cp`) does not read back, which makes the mount a fallback.
    pub(super) fn load_prev_segtab(&mut self, cp: &CpHeader, blob: &[u8], cands: &[(u64, u8, u32)]) {
        let chunks = crate::engine::format::segtab_chunks(cp.seg_count);
        let Some(at) = self.cp_twins_at() else { return };
        let Some((map, bits)) = blob.get(at..).and_then(|b| CpTwins::decode(b, chunks)) else { return };
        if map.seq != cp.seq || map.prev >= cp.seq || self.segtab_locs.len() != chunks as usize {
            return;
        }
        let Some(&(_, area, slot)) = cands.iter().find(|c| c.0 == map.prev) else { return };
        let mut pb: P::Vec<u8> = P::Vec::new();
        let len = CP_HDR_SIZE.saturating_add((chunks as usize).saturating_mul(Loc::SIZE));
        if pb.try_resize(len, 0).is_err() {
            return;
        }
        let off = u64::from(slot).saturating_mul(u64::from(self.sb.cp_slot_size));
        if self.cp_read(usize::from(area), off, pb.as_mut_slice()).is_err() {
            return;
        }
        match self.validate_cp(pb.as_slice()) {
            Ok(h) if h.seq == map.prev && h.seg_count == cp.seg_count => {}
            _ => return,
        }
        let (mut prev, mut twin): (P::Vec<Loc>, P::Vec<u8>) = (P::Vec::new(), P::Vec::new());
        let mut r = Reader::new(pb.as_slice().get(CP_HDR_SIZE..).unwrap_or(&[]));
        for i in 0..chunks as usize {
            let Ok(l) = Loc::get(&mut r) else { return };
            // never the record the loaded checkpoint names itself, and only in a segment the
            // loaded table has in use (nothing may allocate it before the records are named)
            let in_use = self.log.seg(l.seg).is_ok_and(|s| s.state == segstate::FULL);
            let t = CpTwins::bit(bits, i) && in_use && self.segtab_locs.as_slice().get(i).is_some_and(|&n| n != l);
            if prev.try_push(l).is_err() || twin.try_push(u8::from(t)).is_err() {
                return;
            }
        }
        self.segtab_prev_locs = prev;
        self.segtab_twin = twin;
    }

    /// Capture the segment table (entries as [`table_entry`] records them) and write it as
    /// SEGTAB records to the metadata head, only what is needed: `locs` gets every chunk's
    /// location for the new checkpoint and `twins` whether that record and the one the newest
    /// checkpoint names hold the same entries.
    ///
    /// The new checkpoint never names a record the newest one names (one bad page of the new
    /// checkpoint's metadata must leave the newest loadable as its fallback). A chunk changed
    /// since the newest checkpoint is written. An unchanged one is written again once (a
    /// twin of the newest's record) and from then on alternates between the two twins, so
    /// a chunk that does not change costs nothing, unless its twin's segment is no longer a
    /// good home (see [`Engine::chunk_home_ok`]). The last chunk is always written: the
    /// checkpoint's own records then end with the record its blob names last, where the
    /// mount's read-back of them (the checkpoint extension, [`Engine::cp_records`]) stops, in
    /// this engine and in one that predates the twins.
    pub(super) fn write_segtab(&mut self, locs: &mut P::Vec<Loc>, twins: &mut P::Vec<u8>) -> Result<()> {
        let count = self.log.segs.len();
        let chunks = crate::engine::format::segtab_chunks(count as u32) as usize;
        locs.clear();
        twins.clear();
        // Short of free segments, write every chunk: the segments the previous records pin
        // (mostly dead metadata segments, which the GC may not touch while pinned) are then
        // released and freed two checkpoints later, as a full table rewrite always did.
        let short = self.log.free_count() <= self.cp_margin().saturating_add(self.gc_batch());
        let per = SEGTAB_ENTRIES as usize;
        let mut payload: P::Vec<u8> = P::Vec::new();
        for i in 0..chunks {
            let changed = self.log.segs.take_changed(i);
            let twin = self.segtab_twin.as_slice().get(i).is_some_and(|&t| t != 0);
            let reuse = match self.segtab_prev_locs.as_slice().get(i) {
                Some(&l) if !changed && twin && !short && i.saturating_add(1) < chunks => self.chunk_home_ok(l).then_some(l),
                _ => None,
            };
            if let Some(l) = reuse {
                locs.try_push(l)?;
                twins.try_push(1)?;
                continue;
            }
            let first = i.saturating_mul(per);
            let n = per.min(count.saturating_sub(first));
            payload.clear();
            payload.try_resize(6usize.saturating_add(n.saturating_mul(SEGINFO_SIZE)), 0u8)?;
            {
                let mut w = Writer::new(payload.as_mut_slice());
                w.u32(first as u32)?;
                w.u16(n as u16)?;
                for s in self.log.segs.as_slice().get(first..first.saturating_add(n)).ok_or(Error::Invalid)? {
                    put_seginfo(&mut w, &table_entry(s))?;
                }
            }
            let loc = self.log.append(HEAD_META, rtype::SEGTAB, 0, Key::new(0, 0, i as u64), payload.as_slice())?;
            locs.try_push(loc)?;
            // unchanged: the same entries as the newest checkpoint's record
            let same = !changed && self.segtab_locs.len() == chunks;
            twins.try_push(u8::from(same))?;
        }
        Ok(())
    }

    /// Whether the previous checkpoint's SEGTAB record at `l` may be named again: its segment
    /// is a head's, or full and at least half used by live records and the previous
    /// checkpoint's SEGTAB records (a pin keeps the GC off a segment, so a mostly dead one
    /// would waste its space: the chunk is written anew instead and the segment is released),
    /// and neither retiring, stuck nor due for a scrub. (The segment cannot have been freed:
    /// it held a record of the newest checkpoint until then, whose segments are pinned, so it
    /// died at the newest checkpoint at the earliest and is freed by the next one at the
    /// earliest, after this record is pinned again.)
    fn chunk_home_ok(&self, l: Loc) -> bool {
        let s = match self.log.seg(l.seg) {
            Ok(s) => *s,
            Err(_) => return false,
        };
        if s.flags & (SEG_SCRUB | SEG_RETIRE | SEG_STUCK) != 0 {
            return false;
        }
        if s.state == segstate::OPEN {
            return true;
        }
        let chunk_bytes = self
            .segtab_prev_locs
            .as_slice()
            .iter()
            .filter(|p| p.seg == l.seg)
            .fold(0u64, |a, p| a.saturating_add(u64::from(p.len)));
        s.state == segstate::FULL
            && u64::from(s.live).saturating_add(chunk_bytes).saturating_mul(2) >= u64::from(self.sb.segment_size)
    }

    /// After a checkpoint named the chunks at `locs` (`twins` from [`Engine::write_segtab`]):
    /// the newest checkpoint's records become the previous ones, and only the segments holding
    /// the new checkpoint's records are pinned (never freed or moved by the GC). The others go
    /// through `SEG_DEAD_CP` like any segment, so the previous checkpoint's records stay
    /// until the next checkpoint. `seq` is the new checkpoint's sequence.
    pub(super) fn pin_segtab(&mut self, locs: &mut P::Vec<Loc>, twins: &mut P::Vec<u8>, seq: u64) {
        self.segtab_seq = seq;
        // prev <- newest, newest <- new; `locs` gets the previous checkpoint's (unreferenced)
        core::mem::swap(&mut self.segtab_prev_locs, &mut self.segtab_locs);
        core::mem::swap(&mut self.segtab_locs, locs);
        core::mem::swap(&mut self.segtab_twin, twins);
        for l in self.segtab_prev_locs.as_slice() {
            if let Ok(mut s) = self.log.segs.get_mut(l.seg) {
                s.flags &= !SEG_PINNED;
            }
        }
        for l in self.segtab_locs.as_slice() {
            if let Ok(mut s) = self.log.segs.get_mut(l.seg) {
                s.flags |= SEG_PINNED;
                // a mark "dead at the previous checkpoint" set before this pin is stale: the
                // segment may be freed only once a checkpoint that no longer names it was
                // written (it then becomes the previous one, the fallback, which still does),
                // so the count starts again when the pin is released
                s.flags &= !SEG_DEAD_CP;
            }
        }
    }

    /// Segments a checkpoint's segment table (SEGTAB records) may occupy, kept in reserve on
    /// top of the fixed reserves (the previous table stays pinned until the next one is written).
    pub(crate) fn segtab_segments(&self) -> u32 {
        let bytes = u64::from(crate::engine::format::segtab_chunks(self.sb.segment_count))
            .saturating_mul(u64::from(SEGTAB_ENTRIES) * SEGINFO_SIZE as u64 + REC_HDR as u64 + 64);
        let ss = u64::from(self.sb.segment_size).max(1);
        (bytes.div_ceil(ss) as u32).saturating_add(1)
    }

    /// The segment table entry of segment `s` (state, flags, live bytes, erases, sequence).
    pub fn segment_info(&self, s: u32) -> Option<crate::engine::format::SegInfo> {
        self.log.seg(s).ok().copied()
    }

    /// Consistency check: recompute every segment's live bytes from the index and compare them
    /// with the segment table. Returns the first mismatch as (segment, table, computed); as
    /// (`u32::MAX`, mask, 0) when the table's summary counters disagree with its entries (mask
    /// bits: 1 free, 2 reserved, 4 log segments, 8 pending, 16 live bytes).
    pub fn check(&mut self) -> Result<Option<(u32, u32, u32)>> {
        if let Some(mask) = self.check_counters() {
            return Ok(Some((u32::MAX, mask, 0)));
        }
        let mut first = None;
        self.segment_usage(false, &mut |seg, table, computed| {
            if first.is_none() {
                first = Some((seg, table, computed));
            }
        })?;
        Ok(first)
    }

    /// The segment table's summary counters against a recount of its entries (no flash
    /// access): `None` when they agree, else which differ (bits: 1 free, 2 reserved, 4 log
    /// segments, 8 pending, 16 live bytes). A difference is a bug of the engine's bookkeeping.
    pub fn check_counters(&self) -> Option<u32> {
        let (c, r) = (self.log.segs.counts(), self.log.segs.recounted());
        let mask = u32::from(c.free != r.free)
            | u32::from(c.reserved != r.reserved) << 1
            | u32::from(c.main != r.main) << 2
            | u32::from(c.pending != r.pending) << 3
            | u32::from(c.live != r.live) << 4;
        (mask != 0).then_some(mask)
    }

    /// Recompute every segment's live bytes from the index and call `each(seg, table,
    /// computed)` for each segment the table disagrees on (`table` u32::MAX: the segment is
    /// marked free although records in it are live). With `fix`, the table takes the computed
    /// figures (in RAM: the next checkpoint writes them), and a free segment holding live
    /// records becomes full (with the sequence of its segment header) so that nothing
    /// allocates it.
    pub(crate) fn segment_usage(&mut self, fix: bool, each: &mut dyn FnMut(u32, u32, u32)) -> Result<()> {
        let mut live: P::Vec<u32> = P::Vec::new();
        live.try_resize(self.log.segs.len(), 0)?;
        {
            let lv = &mut live;
            let mut bad = false;
            self.tree.walk(&mut self.log, &mut |l: Loc, _node: bool| match lv.as_mut_slice().get_mut(l.seg as usize) {
                Some(x) => *x = x.saturating_add(l.bytes()),
                None => bad = true,
            })?;
            if bad {
                return Err(Error::Corrupt);
            }
        }
        let n = self.log.segs.len() as u32;
        for i in 0..n {
            let c = live.as_slice().get(i as usize).copied().unwrap_or(0);
            let (state, table) = match self.log.segs.as_slice().get(i as usize) {
                Some(s) => (s.state, s.live),
                None => break,
            };
            let free = c != 0 && state == segstate::FREE;
            if table == c && !free {
                continue;
            }
            each(i, if free { u32::MAX } else { table }, c);
            if !fix {
                continue;
            }
            let seq = if free {
                let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
                let r = self.log.read_seghdr(i, &mut tmp);
                self.buf = tmp;
                r.ok().flatten().map(|h| h.0)
            } else {
                None
            };
            let mut si = self.log.seg_mut(i)?;
            si.live = c;
            if free {
                si.state = segstate::FULL;
                if let Some(s) = seq {
                    si.seq = s;
                }
            }
        }
        Ok(())
    }
}
