//! Mount: finding the newest loadable checkpoint (falling back to the one before), loading
//! it, rolling the log after it forward in sequence order, and the writing end of a mount
//! (orphans, new heads, the first checkpoint); read-only mounts and `remount`.

use crate::engine::codec::Reader;
use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{
    group_count, group_extent, kind, rtype, segstate, CpHeader, GroupEntry, Key, Loc, RecHdr, BLOCK_SIZE, CP_HDR_SIZE,
    FLAG_CONT, FLAG_SYNC, GROUP_ENTRY_SIZE, NO_SEG, NUM_HEADS, REC_HDR,
};
use crate::engine::fs::{Engine, ROOT_INO};
use crate::engine::log::{Log, Scan, ScanWindow};
use crate::engine::platform::{FallibleVec, Platform};
use crate::engine::segtab::SegTable;

/// Segments after the checkpoint (in bytes) from which the roll-forward reads data records by
/// their headers alone (`Engine::replay`). Below it the log is read whole: measured with
/// `ferrofs-simbench --mount-scale`, a 1 MiB log cut after a few unsynced files read 912 pages
/// that way against 789 whole, a 3 MiB one 1 565 against 1 994. In the rig a record read by its
/// header cost about 110 us of the mount after a cut and one read whole 180 us (2.5 MiB window,
/// 661-790 records by headers, 532 whole), so 1 MiB, where the two are even, not 2 MiB: the
/// longest log read whole was the slowest mount after a cut.
pub const LAZY_REPLAY_MIN_LOG: u64 = 1 << 20;

/// The mount could not load the newest checkpoint (a bad page in its blob, its segment table,
/// its index root, or a read error in its roll-forward) and mounted an older one: what was
/// written after the newer checkpoint is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpFallback {
    /// Sequence number of the newest checkpoint found (not loadable), 0 when its header
    /// itself could not be read.
    pub newest: u64,
    /// Sequence number of the checkpoint mounted.
    pub used: u64,
    /// Records after the gap that ended the roll-forward (dropped).
    pub dropped: u64,
}

/// Damage found in the log after the checkpoint by the last mount: records that had been made
/// durable (by fsync or a checkpoint's flush) no longer read back, and valid records follow.
/// Recovery skipped the damaged records and applied what follows; the mount is read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogDamage {
    /// Segment of the first unreadable spot found, or `u32::MAX` when the lost records read
    /// as never written (e.g. erased).
    pub seg: u32,
    /// Its offset in the segment.
    pub off: u32,
    /// Sequence number of the first missing record.
    pub first_missing: u64,
    /// Sequence numbers missing in total (records of every kind, padding included).
    pub missing: u64,
    /// Records (data and metadata) found after the first damaged spot.
    pub after: u64,
}

impl<P: Platform, F: Flash> Engine<P, F> {
    /// The mount after the superblock: load the newest loadable checkpoint, roll forward, and
    /// (read-write) finish the mount.
    pub(super) fn mount_inner(&mut self) -> Result<()> {
        // 1. newest valid checkpoint
        let slots = self.slots_per_area();
        let slot_size = u64::from(self.sb.cp_slot_size);
        // Only the blob's own length (and its extension, when the slot has room for one, and
        // the twin map, when it fits in the same write units) is read (validated against the
        // slot size at mount), in a heap buffer (MTD drivers may DMA into it).
        let blob_len = self.cp_load_len()?;
        let mut blob = P::Vec::new();
        blob.try_resize(blob_len.max(CP_HDR_SIZE), 0u8)?;
        // One pass over the slots collects the candidate headers; the newest are then
        // validated, each once (not one pass over every slot per candidate).
        let mut cands: P::Vec<(u64, u8, u32)> = P::Vec::new();
        // per area, the last slot that was written but holds no readable header (a torn or
        // damaged checkpoint): a valid checkpoint before it is not the newest one
        let mut last_bad: [Option<u32>; 2] = [None, None];
        // per area, the slots written since its last erase: the run of valid headers with
        // increasing sequence numbers from slot 0 (stale slots of an earlier round after it
        // have lower ones): (slots in the run, sequence of its last)
        let mut run: [(u32, u64, bool); 2] = [(0, 0, true); 2];
        for a in 0..2u8 {
            for s in 0..slots {
                let hb = blob.as_mut_slice().get_mut(..CP_HDR_SIZE).ok_or(Error::Corrupt)?;
                if self.cp_read(usize::from(a), u64::from(s) * slot_size, hb).is_err() {
                    if let Some(x) = last_bad.get_mut(usize::from(a)) {
                        *x = Some(s);
                    }
                    continue;
                }
                let erased = hb.iter().all(|&b| b == 0xFF);
                let decoded = CpHeader::decode(&mut Reader::new(hb));
                if let Some(r) = run.get_mut(usize::from(a)) {
                    match decoded {
                        Ok((ref h, _)) if r.2 && h.serial == self.sb.serial && (r.0 == 0 || h.seq > r.1) => {
                            *r = (r.0.saturating_add(1), h.seq, true);
                        }
                        _ => r.2 = false,
                    }
                }
                match decoded {
                    Ok((h, _)) if h.serial == self.sb.serial && h.seq < crate::engine::format::SEQ_LIMIT => {
                        cands.try_push((h.seq, a, s))?
                    }
                    _ if !erased => {
                        if let Some(x) = last_bad.get_mut(usize::from(a)) {
                            *x = Some(s);
                        }
                    }
                    _ => {}
                }
            }
        }
        // newest first, at most CP_TRIES of them (no sort: it could panic on a bad order)
        const CP_TRIES: u32 = 16;
        let mut below = u64::MAX;
        // The newest valid checkpoint whose segment table, index root and log after it read
        // back; when one does not (a bad page in its metadata), the one before it: its
        // segments are kept until the next checkpoint is written (see SEG_DEAD_CP), and the
        // roll-forward from it stops at the first missing record (at the latest the newer
        // checkpoint's own number), so at most what came after the newer one is lost.
        let mut newest: Option<u64> = None;
        let mut loaded = false;
        let mut last_err = Error::Corrupt;
        for _ in 0..CP_TRIES {
            let mut best: Option<(u64, u8, u32)> = None;
            for &c in cands.as_slice() {
                if c.0 < below && best.is_none_or(|b| c.0 > b.0) {
                    best = Some(c);
                }
            }
            let Some((seq, a, s)) = best else { break };
            below = seq;
            if newest.is_none() {
                newest = Some(seq);
            }
            if self.cp_read(usize::from(a), u64::from(s) * slot_size, blob.as_mut_slice()).is_err() {
                continue;
            }
            let h = match self.validate_cp(blob.as_slice()) {
                Ok(h) => h,
                Err(_) => continue,
            };
            // a written but unreadable slot after this one in its area, or in the other area
            // when that holds no valid checkpoint at all (it was erased for a newer one)
            let other = 1 - usize::from(a).min(1);
            let other_valid = cands.as_slice().iter().any(|c| usize::from(c.1) == other);
            let later_bad = last_bad.get(usize::from(a)).copied().flatten().is_some_and(|b| b > s)
                || (!other_valid && last_bad.get(other).copied().flatten().is_some());
            let fallback = newest != Some(h.seq) || later_bad;
            match self.load_checkpoint(h, usize::from(a), blob.as_slice(), fallback) {
                Ok(()) => {
                    // the area's segment holding the end of its run of written slots
                    let end = u64::from(run.get(usize::from(a)).map(|r| r.0).unwrap_or(0)).saturating_mul(slot_size);
                    let ss = u64::from(self.sb.segment_size.max(1));
                    let idx = (end / ss) as usize;
                    if let (Some(&seg), Some(t)) = (
                        self.sb.cp_segs.get(usize::from(a)).and_then(|x| x.get(idx)).filter(|_| idx < self.sb.cp_area_segs as usize),
                        self.mount_tails.get_mut(NUM_HEADS),
                    ) {
                        if end % ss != 0 {
                            *t = (seg, (end % ss) as u32);
                        }
                    }
                    if !fallback {
                        // the previous checkpoint's twins of this one's SEGTAB records
                        self.load_prev_segtab(&h, blob.as_slice(), cands.as_slice());
                    }
                    if fallback {
                        // (0: the newer checkpoint's header itself is unreadable)
                        let nw = if newest == Some(h.seq) { 0 } else { newest.unwrap_or(0) };
                        self.fallback = Some(CpFallback { newest: nw, used: h.seq, dropped: self.dropped });
                        // the next checkpoint must rank above the one that failed to load
                        self.log.next_seq = self.log.next_seq.max(nw.saturating_add(1));
                    }
                    loaded = true;
                    break;
                }
                // a data block the roll-forward took on trust did not read back: the same
                // checkpoint again, every block read (see `replay`)
                Err(Error::Corrupt) if self.replay_retry && !self.replay_verify_all => {
                    self.reset_for_reload();
                    self.replay_verify_all = true;
                    self.replay_lazy.retried = true;
                    below = seq.saturating_add(1);
                }
                // unreadable or damaged metadata of this checkpoint: try the one before
                Err(e @ (Error::Corrupt | Error::Io)) => {
                    last_err = e;
                    self.reset_for_reload();
                }
                Err(e) => return Err(e),
            }
        }
        drop(cands);
        drop(blob);
        if !loaded {
            return Err(last_err);
        }
        // an area with a written slot that does not read back (torn or damaged) is scrubbed:
        // the next checkpoints move off it and erase it
        for (f, b) in self.cp_scrub.iter_mut().zip(last_bad.iter()) {
            *f |= b.is_some();
        }
        if self.damage.is_some() {
            // durable records were lost in the middle of the log: what follows was recovered,
            // but the state is not one the operations produced. Never write on top of it.
            self.opts.read_only = true;
        }
        if self.opts.read_only {
            // nothing may be written: keep the replayed changes in RAM
            self.tree.set_replay(true);
            self.log.failed = true;
            self.mount_pending = true;
            return Ok(());
        }
        match self.finish_mount() {
            // The medium failed under these writes (e.g. a worn-out block of a checkpoint area,
            // which every mount erases and which cannot be relocated): recovery is complete in
            // RAM, so serve it read-only (`is_failed`) instead of refusing the mount.
            Err(Error::Io) if self.log.failed => {
                self.tree.set_replay(true);
                Ok(())
            }
            r => r,
        }
    }

    /// Load checkpoint `cp` (from area `a`, blob `blob`): its segment table and index root,
    /// then roll the log after it forward. With `fallback` (an older checkpoint, the newest
    /// could not be loaded), every gap in the sequence numbers ends the roll-forward (the
    /// newer checkpoint's own number is one): what follows belongs to after the newer
    /// checkpoint and is dropped rather than reported as damage.
    fn load_checkpoint(&mut self, cp: CpHeader, a: usize, blob: &[u8], fallback: bool) -> Result<()> {
        // The slots after the newest valid checkpoint may hold a torn write: never program
        // them again; the next checkpoint goes to the other area (erased first).
        self.cp_area = a;
        self.cp_next_slot = u32::MAX;
        // segment table, from the SEGTAB records the checkpoint names
        self.load_segtab(&cp, blob)?;
        self.log.next_seq = cp.next_seq.max(cp.seq.saturating_add(1));
        self.log.stats = cp.stats;
        self.next_ino = cp.next_ino.max(ROOT_INO + 1);
        self.tree.set_root(if cp.has_root { Some((cp.root, cp.root_level)) } else { None });
        // the index root and the path to the first leaf must read back (cheap: a node per level)
        self.tree.set_replay(true);
        let first = self.idx_next(&Key::default());
        self.tree.set_replay(false);
        first?;
        // and every page the checkpoint wrote, when its extension says where they start
        self.cp_records(&cp, blob, &mut |_| {})?;
        self.replay_fallback = fallback;
        // 2. chains of segments written after the checkpoint
        let mut streams: [Stream; NUM_HEADS] = [Stream::default(); NUM_HEADS];
        let mut chains: P::Vec<(u32, u64)> = P::Vec::new();
        for (h, st) in streams.iter_mut().enumerate() {
            let hs = cp.heads.get(h).copied().unwrap_or_default();
            st.chain_start = chains.len();
            if hs.seg == NO_SEG {
                st.chain_end = chains.len();
                if hs.next != NO_SEG {
                    self.release_reserved(hs.next)?;
                }
                continue;
            }
            if hs.off > self.sb.segment_size {
                return Err(Error::Corrupt);
            }
            chains.try_push((hs.seg, hs.seg_seq))?;
            let (mut cur, mut cur_seq, mut next) = (hs.seg, hs.seg_seq, hs.next);
            let mut guard = 0u32;
            while next != NO_SEG && guard < self.sb.segment_count {
                guard += 1;
                let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
                let r = self.log.read_seghdr(next, &mut tmp);
                self.buf = tmp;
                match r? {
                    Some((sq, head, prev, nn)) if sq > cur_seq && prev == cur && head as usize == h => {
                        let mut si = self.log.seg_mut(next)?;
                        si.state = segstate::FULL;
                        si.seq = sq;
                        si.live = 0;
                        chains.try_push((next, sq))?;
                        cur = next;
                        cur_seq = sq;
                        next = nn;
                    }
                    _ => {
                        self.release_reserved(next)?;
                        break;
                    }
                }
            }
            if guard >= self.sb.segment_count {
                return Err(Error::Corrupt);
            }
            if next != NO_SEG {
                self.release_reserved(next)?;
            }
            st.chain_end = chains.len();
            st.idx = st.chain_start;
            st.off = hs.off;
        }
        // any other reserved segment goes back to the free pool (the table's counters say
        // whether there is one: usually the chains and `release_reserved` took them all)
        let reserved = if self.log.segs.counts().reserved > 0 { self.log.segs.len() as u32 } else { 0 };
        for i in 0..reserved {
            let mut s = self.log.seg_mut(i)?;
            if s.state == segstate::RESERVED {
                s.state = segstate::FREE;
            }
        }
        // 3. roll forward
        self.tree.set_replay(true);
        // each head's log is read ahead in its own window: every page once, in large reads
        let mut wins: [ScanWindow<P>; NUM_HEADS] = core::array::from_fn(|_| ScanWindow::new());
        // Records taken on trust (see `replay`) save about half the pages of the log the proofs
        // cover, and cost up to a second read of the records after the last proof (what was
        // written since the last fsync): only on a long log, where the first outweighs the second.
        let log_bytes = (chains.len() as u64).saturating_mul(u64::from(self.sb.segment_size));
        let min_log = match self.opts.lazy_replay_min_log {
            0 => LAZY_REPLAY_MIN_LOG,
            n => n,
        };
        let lazy = !self.replay_verify_all && !self.opts.read_only && log_bytes >= min_log;
        let replayed = self.replay(&mut streams, &mut wins, chains.as_slice(), cp.seq, cp.next_seq, lazy)?;
        drop(wins);
        let Some(replayed) = replayed else {
            self.replay_retry = true;
            return Err(Error::Corrupt);
        };
        self.tree.set_replay(false);
        self.replay_fallback = false;
        self.log.stats.replayed = replayed;
        // 4. where each head's last segment ends (only needed to close it, see `finish_mount`)
        self.mount_tails = [(NO_SEG, 0); NUM_HEADS + 1];
        if self.log.fill_on_close {
            let wu = self.log.geo.write_unit.max(1);
            for (h, st) in streams.iter().enumerate() {
                if st.chain_end <= st.chain_start {
                    continue;
                }
                let last = st.chain_end - 1;
                let (seg, seg_seq) = *chains.as_slice().get(last).ok_or(Error::Corrupt)?;
                let mut off = if last == st.chain_start { cp.heads.get(h).map(|x| x.off).unwrap_or(0) } else { 0 };
                let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
                let mut guard = self.sb.segment_size;
                let mut win = ScanWindow::new();
                let r = loop {
                    match self.log.scan_in(seg, off, seg_seq, &mut tmp, &mut win) {
                        Ok(Scan::Rec(_, l)) if guard > 0 => {
                            guard = guard.saturating_sub(1);
                            off = l.off.saturating_add(l.len);
                        }
                        Ok(_) => break Ok(()),
                        Err(e) => break Err(e),
                    }
                };
                self.buf = tmp;
                r?;
                let from = off.div_ceil(wu).saturating_mul(wu);
                if let Some(t) = self.mount_tails.get_mut(h) {
                    *t = (seg, from);
                }
            }
        }
        Ok(())
    }

    /// Forget what a failed `load_checkpoint` set up, before the next candidate.
    fn reset_for_reload(&mut self) {
        self.tree.set_replay(false);
        self.tree.set_root(None);
        self.log.segs = SegTable::empty();
        self.segtab_locs.clear();
        self.segtab_prev_locs.clear();
        self.segtab_twin.clear();
        self.segtab_seq = 0;
        self.dropped = 0;
        self.damage = None;
        self.replay_ok_ino = 0;
        self.replay_fallback = false;
        self.replay_retry = false;
    }

    /// The writing part of a mount: reclaim orphans, open new heads (torn tails are never
    /// programmed again), checkpoint so the next mount starts here.
    fn finish_mount(&mut self) -> Result<()> {
        self.tree.set_replay(false);
        if self.log.fill_on_close {
            // Close what the previous mount left half-written before anything opens: the
            // heads' last segments (their torn tails are never used for records again) and
            // the checkpoint area's current segment (the first checkpoint goes to the other
            // area). 0xFF reads as the end of the records and as an erased slot.
            let tails = self.mount_tails;
            let ss = self.sb.segment_size;
            for &(seg, _) in tails.iter().filter(|t| t.0 != NO_SEG && t.1 < ss) {
                self.log.mark_open(seg);
            }
            for (i, &(seg, from)) in tails.iter().enumerate().filter(|t| t.1 .0 != NO_SEG) {
                self.log.fill_to_end(seg, from, i == NUM_HEADS)?;
                self.log.note_closed(seg);
            }
            self.mount_tails = [(NO_SEG, 0); NUM_HEADS + 1];
        }
        // a damaged or weak superblock copy, while nothing else is open
        if let Some(s) = self.sb_refresh.take() {
            self.refresh_superblock(s)?;
        }
        let all_heads = (2 * NUM_HEADS as u32).saturating_add(self.segtab_segments());
        if self.log.free_count() < all_heads && self.pending_free() > 0 {
            // Short of free segments (a crash on a full device): a checkpoint first (it opens
            // the metadata head only) turns the segments whose records all died into free ones.
            self.checkpoint()?;
        }
        self.reclaim_orphans()?;
        if self.log.free_count() >= all_heads {
            self.log.open_heads()?;
        }
        // otherwise the data heads open on their first record (not chained: the next fsync
        // checkpoints), and torn tails are never programmed again either way
        self.checkpoint()
    }

    /// Switch between read-only and read-write at run time (`mount -o remount,ro|rw`).
    ///
    /// To read-only: checkpoint (everything reaches the medium), then refuse every mutation
    /// with `ReadOnly` and write nothing, `unmount` included. To read-write: after a
    /// read-only mount, finish the mount (orphans, new heads, a checkpoint); after a
    /// read-write mount turned read-only, simply resume. Refused (`ReadOnly`, nothing
    /// changed) when the volume has unknown read-only features, and (`Corrupt`) when the
    /// mount found damage in the log (see [`Engine::log_damage`]). A failed checkpoint on
    /// the way to read-only still leaves the engine read-only, and returns the error.
    pub fn set_read_only(&mut self, ro: bool) -> Result<()> {
        if ro == self.opts.read_only {
            return Ok(());
        }
        if ro {
            let r = if self.log.failed { Ok(()) } else { self.checkpoint() };
            self.failed_before_ro = self.log.failed;
            self.log.failed = true;
            self.opts.read_only = true;
            return r;
        }
        if self.damage.is_some() {
            return Err(Error::Corrupt);
        }
        if self.ro_compat_unknown {
            return Err(Error::ReadOnly);
        }
        if self.mount_pending {
            self.log.failed = false;
            self.opts.read_only = false;
            if let Err(e) = self.finish_mount() {
                // leave the engine read-only; the in-RAM replay state stays usable for reads
                self.tree.set_replay(true);
                self.log.failed = true;
                self.opts.read_only = true;
                return Err(e);
            }
            self.mount_pending = false;
            return Ok(());
        }
        self.log.failed = self.failed_before_ro;
        self.opts.read_only = false;
        Ok(())
    }

    /// Whether the last mount fell back to an older checkpoint because the newest one could
    /// not be loaded (the caller reports it: what came after the newer checkpoint is lost).
    pub fn checkpoint_fallback(&self) -> Option<CpFallback> {
        self.fallback
    }

    /// Damage found in the log by the mount (durable records lost in the middle of the log,
    /// valid records after them): the mount recovered what follows and is read-only.
    pub fn log_damage(&self) -> Option<LogDamage> {
        self.damage
    }

    /// Records the last mount's roll-forward dropped: records after the first missing sequence
    /// number (a head buffer lost in the crash: later records would not give a state any prefix
    /// of the operations produced), of an incomplete atomic group, or of an inode without an
    /// inode record.
    pub fn dropped_records(&self) -> u64 {
        self.dropped
    }

    fn release_reserved(&mut self, s: u32) -> Result<()> {
        let mut si = self.log.seg_mut(s)?;
        if si.state == segstate::RESERVED {
            si.state = segstate::FREE;
        }
        Ok(())
    }

    /// Peek the next valid record of a stream.
    /// With `lazy`, a data group's blocks are yielded from its table alone (`Peek::lazy`),
    /// their payloads not read (see `replay`).
    fn stream_peek(&mut self, st: &mut Stream, win: &mut ScanWindow<P>, chains: &[(u32, u64)], min_seq: u64, lazy: bool) -> Result<()> {
        if st.peeked.is_some() || st.done {
            return Ok(());
        }
        loop {
            if let Some(g) = st.group {
                if g.next < g.count {
                    st.group = Some(GroupCur { next: g.next + 1, ..g });
                    match self.group_block(&g, lazy)? {
                        Some(p) => {
                            st.peeked = Some(Peek { h: p.0, loc: p.1, range: None, lazy, chained: false });
                            return Ok(());
                        }
                        None => {
                            // not present (torn, lost, damaged): a missing number, decided
                            // at the gap it leaves like any other (see `replay`)
                            if st.bad.is_none() {
                                st.bad = Some((g.seg, g.payload0.saturating_add(g.next.saturating_mul(BLOCK_SIZE))));
                            }
                            continue;
                        }
                    }
                }
                st.group = None;
            }
            if st.idx >= st.chain_end {
                st.done = true;
                return Ok(());
            }
            let (seg, seg_seq) = *chains.get(st.idx).ok_or(Error::Corrupt)?;
            if lazy && st.after_data {
                // after a data record, most likely another: its header alone (see `replay`)
                if let Some((h, loc)) = self.log.scan_data_header(seg, st.off, seg_seq, win)? {
                    if h.seq >= min_seq {
                        st.off = loc.off.saturating_add(loc.len);
                        st.peeked = Some(Peek { h, loc, range: None, lazy: true, chained: false });
                        return Ok(());
                    }
                }
            }
            // read after a bad spot or first in its segment: not reached through the lengths
            // of the records before it
            let mut chained = st.off != 0;
            let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
            let r = match self.log.scan_in(seg, st.off, seg_seq, &mut tmp, win) {
                Ok(Scan::Rec(h, l)) => Ok(Some((h, l))),
                Ok(Scan::End) => Ok(None),
                Ok(Scan::Bad) => {
                    // A torn program (nothing valid follows: the end of the log) or damage
                    // (valid records of this segment follow): continue after it. Whether
                    // what it held was durable is decided at the gap it leaves, see `replay`.
                    let at = Log::<P, F>::align_pos(self.log.geo.write_unit.max(1), st.off);
                    chained = false;
                    let r = self.log.resync(seg, at, seg_seq, &mut tmp);
                    if let Ok(Some(_)) = r {
                        if st.bad.is_none() {
                            st.bad = Some((seg, at));
                        }
                    }
                    r
                }
                Err(e) => Err(e),
            };
            // a DELETE's range, decoded now (the record is not read again to apply it)
            let range = match &r {
                Ok(Some((h, _))) if h.rtype == rtype::DELETE => tmp
                    .as_slice()
                    .get(REC_HDR..REC_HDR.saturating_add(h.len as usize))
                    .and_then(|p| crate::engine::format::delete_range(h.key, p).ok()),
                _ => None,
            };
            self.buf = tmp;
            match r? {
                Some((h, loc)) => {
                    st.off = loc.off.saturating_add(loc.len);
                    st.after_data = h.rtype == rtype::DATA;
                    if h.seq < min_seq {
                        // stale data from before the checkpoint: the stream ends
                        st.done = true;
                        return Ok(());
                    }
                    if h.rtype == rtype::DGROUP {
                        // its blocks follow as records `seq + 1 ..= seq + count` (format.md 8.4)
                        let count = group_count(self.buf.as_slice().get(REC_HDR..).unwrap_or(&[]))?;
                        let (payload0, _) = group_extent(loc.off, count, self.log.data_align).ok_or(Error::Corrupt)?;
                        st.group = Some(GroupCur { seg, table: loc.off, payload0, seq: h.seq, seg_seq, count, next: 0 });
                    }
                    st.peeked = Some(Peek { h, loc, range, lazy: false, chained });
                    return Ok(());
                }
                None => {
                    // end of this segment's valid records; continue with the next segment of
                    // the chain only if this one was properly completed (the next exists).
                    st.idx += 1;
                    st.off = 0;
                }
            }
        }
    }

    /// Block `g.next` of the data group `g` as the DATA record it stands for (number `g.seq + 1 +
    /// g.next`, its aligned location), or `None` when it is not present: its slot does not read
    /// back or does not match the table's CRC. With `lazy` the payload is not read: the block
    /// is taken as present (the caller verifies it unless the log proves it durable).
    fn group_block(&mut self, g: &GroupCur, lazy: bool) -> Result<Option<(RecHdr, Loc)>> {
        let at = g.table.saturating_add((REC_HDR + 4) as u32).saturating_add(g.next.saturating_mul(GROUP_ENTRY_SIZE as u32));
        let mut eb = [0u8; GROUP_ENTRY_SIZE];
        match self.log.read_bytes(g.seg, at, &mut eb) {
            Ok(()) => {}
            Err(Error::Corrupt) => return Ok(None),
            Err(e) => return Err(e),
        }
        let e = GroupEntry::get(&mut Reader::new(&eb))?;
        let slot = g.payload0.saturating_add(g.next.saturating_mul(BLOCK_SIZE));
        let loc = Loc::aligned(g.seg, slot, e.crc);
        let seq = g.seq.saturating_add(1).saturating_add(u64::from(g.next));
        let key = Key::new(e.ino, kind::DATA, e.blk);
        let h = RecHdr { rtype: rtype::DATA, flags: 0, crc: e.crc, seq, seg_seq: g.seg_seq, key, len: BLOCK_SIZE };
        if lazy {
            return Ok(Some((h, loc)));
        }
        if !self.block_reads_back(loc)? {
            return Ok(None);
        }
        Ok(Some((h, loc)))
    }

    /// Whether the data block at aligned location `loc` reads back and matches its CRC.
    fn block_reads_back(&mut self, loc: Loc) -> Result<bool> {
        let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
        tmp.clear();
        let r = match tmp.try_resize(BLOCK_SIZE as usize, 0) {
            Ok(()) => match self.log.read_bytes(loc.seg, loc.start(), tmp.as_mut_slice()) {
                Ok(()) => Ok(self.log.check_aligned(tmp.as_slice(), loc).is_ok()),
                Err(Error::Corrupt) => Ok(false),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        self.buf = tmp;
        r
    }

    /// Roll forward: apply the records of every head in global sequence order, starting at the
    /// checkpoint's `next_seq`, and stop at the first missing sequence number. Every record
    /// (padding, segment headers, index nodes and segment-table chunks included) takes one
    /// sequence number, so a gap is a record that never reached the medium (a head buffer lost
    /// in the crash) and everything after it belongs to later operations: applying it would
    /// recover a state no prefix of the operations produced (e.g. file data written out by the
    /// hot head while the metadata of earlier operations was still in the meta head's buffer).
    /// Groups (`CONT`) are applied only once their last record arrived.
    ///
    /// With `lazy`, the blocks of data groups are taken from the groups' tables without reading
    /// their payloads (most of the log's pages after a cut), and only those the log does not
    /// prove durable are read afterwards: a block numbered below a `FLAG_SYNC` marker followed
    /// by a later marker or by a record other than padding (both read and checked, never a
    /// block taken on trust) was on the medium when the flush after that marker returned
    /// (`look_ahead`'s proof, which makes a missing record there damage, not a crash's loss).
    /// Such a block that no longer reads back is then found when it is read (its location
    /// carries its CRC), not reported by the mount. `Ok(None)`: a block above the last proof
    /// does not read back (a torn or lost program: the roll-forward must stop before it);
    /// the caller rolls forward again from the same checkpoint with every block read.
    fn replay(&mut self, streams: &mut [Stream; NUM_HEADS], wins: &mut [ScanWindow<P>; NUM_HEADS], chains: &[(u32, u64)], min_seq: u64, first_seq: u64, lazy: bool) -> Result<Option<u64>> {
        // records taken on trust: number, location, stream, and whether a record of the same
        // stream read in full was reached through its length (`Peek::chained`)
        let mut trusted: P::Vec<(u64, Loc, usize, bool)> = P::Vec::new();
        // per stream, its first trusted record not yet followed by such a record
        let mut unchained = [0usize; NUM_HEADS];
        // the last marker passed, and the last one proven (a later marker or record read)
        let (mut marker, mut proven) = (0u64, 0u64);
        let mut count = 0u64;
        let mut expected = first_seq;
        let mut group: P::Vec<Peek> = P::Vec::new();
        let mut group_stream = usize::MAX;
        let mut gap = false;
        let mut damaged_gaps = 0u32;
        loop {
            for (st, win) in streams.iter_mut().zip(wins.iter_mut()) {
                self.stream_peek(st, win, chains, min_seq, lazy)?;
            }
            let mut best: Option<(usize, u64)> = None;
            for (i, st) in streams.iter().enumerate() {
                if let Some(Peek { h, .. }) = st.peeked {
                    if best.is_none_or(|b| h.seq < b.1) {
                        best = Some((i, h.seq));
                    }
                }
            }
            let (i, seq) = match best {
                Some(b) => b,
                None => break,
            };
            if seq != expected {
                // A missing record: lost in a crash (a head buffer never written out, a torn
                // program), or damage: a record that was durable no longer reads back.
                // (each damaged spot costs a read of the rest of the log: at most MAX_DAMAGE)
                const MAX_DAMAGE: u32 = 64;
                let look = self.look_ahead(streams, wins, chains, min_seq, expected)?;
                if !look.durable || damaged_gaps >= MAX_DAMAGE || self.replay_fallback {
                    gap = true;
                    self.log.next_seq = self.log.next_seq.max(look.max_seq.saturating_add(1));
                    self.dropped = self.dropped.saturating_add(look.records).saturating_add(group.len() as u64);
                    group.clear();
                    break;
                }
                // Damage in the middle of the log: report it and recover what follows (the
                // mount turns read-only, see `mount_inner`). An incomplete group before it
                // lost its end: drop it.
                let at = streams.iter().find_map(|s| s.bad);
                let d = self.damage.get_or_insert(LogDamage { seg: NO_SEG, off: 0, first_missing: expected, missing: 0, after: 0 });
                if d.seg == NO_SEG {
                    if let Some((sg, of)) = at {
                        d.seg = sg;
                        d.off = of;
                    }
                }
                d.missing = d.missing.saturating_add(seq.saturating_sub(expected));
                damaged_gaps = damaged_gaps.saturating_add(1);
                d.after = d.after.max(look.records);
                self.dropped = self.dropped.saturating_add(group.len() as u64);
                group.clear();
                expected = seq;
                continue;
            }
            let st = streams.get_mut(i).ok_or(Error::Corrupt)?;
            let pk = st.peeked.take().ok_or(Error::Corrupt)?;
            let h = pk.h;
            expected = expected.saturating_add(1);
            self.log.next_seq = self.log.next_seq.max(h.seq.saturating_add(1));
            let is_marker = h.rtype == rtype::PAD && h.flags & FLAG_SYNC != 0;
            if pk.lazy {
                trusted.try_push((h.seq, pk.loc, i, false))?;
                if !pk.loc.is_aligned() {
                    // A data record's header was read: with the record magic and the
                    // segment's sequence number it is on the medium (whole or torn), so it was
                    // appended, which happens after the flush that wrote the marker returned.
                    // (Not a group's block: nothing of it was read.)
                    proven = proven.max(marker);
                }
            } else {
                if is_marker || h.rtype != rtype::PAD {
                    // read and checked: proves the marker before it
                    proven = proven.max(marker);
                }
                let from = unchained.get(i).copied().unwrap_or(0);
                if pk.chained {
                    for t in trusted.as_mut_slice().iter_mut().skip(from).filter(|t| t.2 == i) {
                        t.3 = true;
                    }
                }
                if let Some(u) = unchained.get_mut(i) {
                    *u = trusted.len();
                }
            }
            if is_marker {
                marker = h.seq;
            }
            if matches!(h.rtype, rtype::PAD | rtype::SEGHDR | rtype::INDEX | rtype::SEGTAB | rtype::DGROUP) {
                continue;
            }
            if !group.is_empty() && group_stream != i {
                // Groups are written by one operation to the meta head, so only padding and
                // segment headers of other heads interleave; anything else stands alone.
                self.apply(&pk, false)?;
                count = count.saturating_add(1);
                continue;
            }
            group.try_push(pk)?;
            group_stream = i;
            if h.flags & FLAG_CONT != 0 {
                continue;
            }
            for pk in group.as_slice() {
                // a group that creates an inode may write its records before the inode record
                // (a symlink's target)
                let created = group.as_slice().iter().any(|g| g.h.rtype == rtype::INODE && g.h.key.ino == pk.h.key.ino);
                self.apply(pk, created)?;
                count = count.saturating_add(1);
            }
            group.clear();
        }
        // an incomplete group and everything after a gap (counted by `look_ahead`) are
        // dropped; the sequence numbers of what is on the medium stay unused
        if !gap {
            self.dropped = self.dropped.saturating_add(group.len() as u64);
        }
        // the records taken on trust must read back unless a proof covers them and a record
        // read in full follows them in their stream (so their lengths chained up to it)
        // (a write unit at a time through the read cache, which still holds most of the pages
        // of their headers: each page is read about once)
        let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
        let mut all = Ok(true);
        self.replay_lazy.trusted = self.replay_lazy.trusted.saturating_add(trusted.len() as u64);
        for &(_, loc, _, _) in trusted.as_slice().iter().filter(|t| t.0 >= proven || !t.3) {
            self.replay_lazy.reread = self.replay_lazy.reread.saturating_add(1);
            all = if loc.is_aligned() { self.block_reads_back(loc) } else { self.log.record_reads_back(loc, &mut tmp) };
            if !matches!(all, Ok(true)) {
                break;
            }
        }
        self.buf = tmp;
        if !all? {
            return Ok(None);
        }
        Ok(Some(count))
    }

    /// At a gap (record `missing` absent): read the rest of every stream (on copies) and tell
    /// whether `missing` was durable: a `FLAG_SYNC` padding record numbered above it is on the
    /// medium, and so is a record other than padding numbered above that marker (which proves
    /// the device flush after the marker completed and its caller returned, see
    /// `Log::flush_all`; padding after a marker is written by the flush itself, on MLC NAND
    /// before it returns: `Log::pair_pad`), or a second marker. Torn tails and lost head buffers
    /// never satisfy this; damage to data that fsync or a checkpoint's flush made durable
    /// does. Also returns the highest sequence number and the number of records (padding,
    /// segment headers, index nodes and table chunks aside) that follow.
    fn look_ahead(&mut self, streams: &[Stream; NUM_HEADS], wins: &mut [ScanWindow<P>; NUM_HEADS], chains: &[(u32, u64)], min_seq: u64, missing: u64) -> Result<LookAhead> {
        let mut copy = *streams;
        let mut max_seq = 0u64;
        // the highest number of a record other than padding
        let mut max_real = 0u64;
        let mut records = 0u64;
        // the two highest markers above `missing`
        let (mut m1, mut m2) = (0u64, 0u64);
        for (st, win) in copy.iter_mut().zip(wins.iter_mut()) {
            loop {
                self.stream_peek(st, win, chains, min_seq, false)?;
                match st.peeked.take() {
                    Some(Peek { h, .. }) => {
                        max_seq = max_seq.max(h.seq);
                        if h.rtype != rtype::PAD {
                            max_real = max_real.max(h.seq);
                        }
                        if h.rtype == rtype::PAD && h.flags & FLAG_SYNC != 0 && h.seq > missing {
                            if h.seq > m1 {
                                m2 = m1;
                                m1 = h.seq;
                            } else if h.seq > m2 {
                                m2 = h.seq;
                            }
                        }
                        if !matches!(h.rtype, rtype::PAD | rtype::SEGHDR | rtype::INDEX | rtype::SEGTAB | rtype::DGROUP) {
                            records = records.saturating_add(1);
                        }
                    }
                    None => break,
                }
            }
        }
        let durable = (m1 != 0 && m1 < max_real) || m2 != 0;
        Ok(LookAhead { durable, max_seq, records })
    }

    /// Apply one replayed record to the index.
    fn apply(&mut self, pk: &Peek, created: bool) -> Result<()> {
        let h = &pk.h;
        match h.rtype {
            rtype::INODE | rtype::DENT | rtype::DATA | rtype::XATTR | rtype::ORPHAN => {
                if h.rtype == rtype::INODE {
                    self.next_ino = self.next_ino.max(h.key.ino.saturating_add(1));
                } else if h.key.ino != 0 && h.key.ino != self.replay_ok_ino && !created {
                    // A record of an inode without an inode record: its creation did not reach
                    // the medium (the hot head is written out before the metadata head). Never
                    // index it: drop it (its space stays dead) and count it.
                    if self.idx_get(&Key::new(h.key.ino, kind::INODE, 0))?.is_none() {
                        self.dropped = self.dropped.saturating_add(1);
                        return Ok(());
                    }
                    self.replay_ok_ino = h.key.ino;
                }
                self.idx_set(h.key, pk.loc)
            }
            rtype::DELETE => {
                let (a, b) = pk.range.ok_or(Error::Corrupt)?;
                self.replay_ok_ino = 0;
                self.idx_del_range(a, b)
            }
            _ => Ok(()),
        }
    }

    fn reclaim_orphans(&mut self) -> Result<()> {
        loop {
            let k = match self.idx_next(&Key::new(0, kind::ORPHAN, 0))? {
                Some((k, _)) if k.ino == 0 && k.kind == kind::ORPHAN => k,
                _ => return Ok(()),
            };
            self.destroy_inode(k.key)?;
            self.maybe_commit()?;
        }
    }
}

/// What [`Engine::look_ahead`] found after a gap.
struct LookAhead {
    durable: bool,
    max_seq: u64,
    records: u64,
}

/// A record a stream found: its header, where it is, and for a DELETE the key range its
/// payload names (`None` if it does not decode: applying it is `Corrupt`).
#[derive(Debug, Clone, Copy)]
struct Peek {
    h: RecHdr,
    loc: Loc,
    range: Option<(Key, Key)>,
    /// A data group block yielded from the table alone, or a data record from its header
    /// alone: its payload (and CRC) was not read.
    lazy: bool,
    /// Read in full and reached from the record before it in its stream through that
    /// record's length (not the first of its segment, not found by resynchronising).
    chained: bool,
}

/// Replay cursor over one head's chain.
#[derive(Debug, Clone, Copy, Default)]
struct Stream {
    /// First bad spot (segment, offset) this stream resynchronised after.
    bad: Option<(u32, u32)>,
    chain_start: usize,
    chain_end: usize,
    idx: usize,
    off: u32,
    peeked: Option<Peek>,
    done: bool,
    /// The data group whose blocks the stream is yielding.
    group: Option<GroupCur>,
    /// The last record read in full was a data record.
    after_data: bool,
}

/// A stream's position in a data group (format.md 8.4).
#[derive(Debug, Clone, Copy, Default)]
struct GroupCur {
    seg: u32,
    /// Offset of the group record.
    table: u32,
    /// Offset of its first payload slot.
    payload0: u32,
    /// Its sequence number (block `i` is `seq + 1 + i`).
    seq: u64,
    seg_seq: u64,
    count: u32,
    /// The next block to yield.
    next: u32,
}
