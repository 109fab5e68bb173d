//! The segment table on flash: SEGTAB records written by a checkpoint and read back by a
//! mount, its size in segments, and the check of the in-RAM table against the index (and its
//! repair, for fsck).

use crate::engine::codec::{Reader, Writer};
use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{
    get_seginfo, put_seginfo, rtype, segstate, CpHeader, Key, Loc, SegInfo, CP_HDR_SIZE, HEAD_META,
    NO_SEG, REC_HDR, SEGINFO_SIZE, SEGTAB_ENTRIES,
};
use crate::engine::fs::Engine;
use crate::engine::log::{SEG_DEAD_CP, SEG_RAM_FLAGS, SEG_RETIRE};
use crate::engine::platform::{FallibleVec, Platform};

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Load the segment table of checkpoint `cp` (blob `blob`) from the SEGTAB records it
    /// names; pin their segments until the next checkpoint, mark the heads' segments full, and
    /// flag the segments already dead at this checkpoint (`SEG_DEAD_CP`).
    pub(super) fn load_segtab(&mut self, cp: &CpHeader, blob: &[u8]) -> Result<()> {
        let chunks = crate::engine::format::segtab_chunks(cp.seg_count);
        let mut locs: P::Vec<Loc> = P::Vec::new();
        {
            let mut r = Reader::new(blob.get(CP_HDR_SIZE..).ok_or(Error::Corrupt)?);
            for _ in 0..chunks {
                locs.try_push(Loc::get(&mut r)?)?;
            }
        }
        let mut segs: P::Vec<SegInfo> = P::Vec::new();
        let mut rec = P::Vec::new();
        for (i, l) in (0..chunks).zip(locs.as_slice().iter()) {
            let h = self.log.read_record(*l, &mut rec)?;
            if h.rtype != rtype::SEGTAB || h.key != Key::new(0, 0, u64::from(i)) {
                return Err(Error::Corrupt);
            }
            let mut r = Reader::new(rec.as_slice().get(REC_HDR..).ok_or(Error::Corrupt)?);
            let first = r.u32()?;
            let count = u32::from(r.u16()?);
            if first != i.saturating_mul(SEGTAB_ENTRIES) || count > SEGTAB_ENTRIES {
                return Err(Error::Corrupt);
            }
            for _ in 0..count {
                let mut si = get_seginfo(&mut r)?;
                if si.state > segstate::META || si.live > self.sb.segment_size {
                    return Err(Error::Corrupt);
                }
                if si.state == segstate::OPEN {
                    si.state = segstate::FULL;
                }
                segs.try_push(si)?;
            }
        }
        if segs.len() != cp.seg_count as usize {
            return Err(Error::Corrupt);
        }
        for si in segs.as_mut_slice() {
            si.flags &= !SEG_RAM_FLAGS;
        }
        self.log.segs = segs;
        self.log.reset_open();
        self.pinned.clear();
        for l in locs.as_slice() {
            let si = self.log.seg_mut(l.seg)?;
            if si.state == segstate::FREE || si.state == segstate::RESERVED {
                si.state = segstate::FULL;
            }
            if !self.pinned.as_slice().contains(&l.seg) {
                self.pinned.try_push(l.seg)?;
            }
        }
        // the heads' segments may have been opened after the table was captured
        for hs in cp.heads.iter().filter(|h| h.seg != NO_SEG) {
            let si = self.log.seg_mut(hs.seg)?;
            si.state = segstate::FULL;
            si.seq = hs.seg_seq;
        }
        // Segments the table records full and dead were dead at this checkpoint: the
        // next checkpoint may free them. (Not the heads' segments: the log after this
        // checkpoint starts there.)
        let n = self.log.segs.len() as u32;
        for i in 0..n {
            let keep = self.pinned.as_slice().contains(&i) || cp.heads.iter().any(|h| h.seg == i);
            if let Some(si) = self.log.segs.as_mut_slice().get_mut(i as usize) {
                si.flags &= !SEG_DEAD_CP;
                if si.state == segstate::FULL && si.live == 0 && !keep {
                    si.flags |= SEG_DEAD_CP;
                }
            }
        }
        Ok(())
    }

    /// Capture the segment table (segments whose records are all dead recorded as free, or bad
    /// when retiring) and append it as SEGTAB records to the metadata head.
    pub(super) fn write_segtab(&mut self, table: &mut P::Vec<u8>, locs: &mut P::Vec<Loc>) -> Result<()> {
        let count = self.log.segs.len();
        table.clear();
        table.try_resize(count.saturating_mul(SEGINFO_SIZE), 0u8)?;
        {
            let mut w = Writer::new(table.as_mut_slice());
            for s in self.log.segs.as_slice() {
                let mut e = *s;
                // freed by this checkpoint only when it was dead at the previous one (see
                // SEG_DEAD_CP); otherwise recorded full, so a mount from this checkpoint keeps
                // it for the fallback to the previous one
                if e.state == segstate::FULL && e.live == 0 && e.flags & SEG_DEAD_CP != 0 {
                    e.state = if e.flags & SEG_RETIRE != 0 { segstate::BAD } else { segstate::FREE };
                }
                e.flags &= !SEG_RAM_FLAGS;
                put_seginfo(&mut w, &e)?;
            }
        }
        locs.clear();
        let per = SEGTAB_ENTRIES as usize;
        let mut payload: P::Vec<u8> = P::Vec::new();
        let mut first = 0usize;
        let mut idx = 0u64;
        while first < count {
            let n = per.min(count - first);
            payload.clear();
            payload.try_extend_from_slice(&(first as u32).to_le_bytes())?;
            payload.try_extend_from_slice(&(n as u16).to_le_bytes())?;
            let a = first.saturating_mul(SEGINFO_SIZE);
            let b = a.saturating_add(n.saturating_mul(SEGINFO_SIZE));
            payload.try_extend_from_slice(table.as_slice().get(a..b).ok_or(Error::Invalid)?)?;
            let loc = self.log.append(HEAD_META, rtype::SEGTAB, 0, Key::new(0, 0, idx), payload.as_slice())?;
            locs.try_push(loc)?;
            first = first.saturating_add(n);
            idx = idx.saturating_add(1);
        }
        Ok(())
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
    /// with the segment table. Returns the first mismatch as (segment, table, computed).
    pub fn check(&mut self) -> Result<Option<(u32, u32, u32)>> {
        let mut first = None;
        self.segment_usage(false, &mut |seg, table, computed| {
            if first.is_none() {
                first = Some((seg, table, computed));
            }
        })?;
        Ok(first)
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
            let si = self.log.seg_mut(i)?;
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
