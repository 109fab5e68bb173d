//! Checkpoints: committing the index, writing out the heads and the segment table, the blob
//! in the fixed checkpoint areas (slots, area switches), and freeing the segments that died
//! before the previous checkpoint.

use crate::engine::codec::{Reader, Writer};
use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{rtype, segstate, CpExt, CpHeader, Loc, CP_HDR_SIZE, HEAD_COLD, HEAD_META};
use crate::engine::log::{Scan, ScanWindow};
use crate::engine::fs::Engine;
use crate::engine::log::{SEG_DEAD_CP, SEG_PINNED, SEG_RETIRE};
use crate::engine::platform::{FallibleVec, Platform};

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Write a checkpoint: commit the index, flush every head, persist the segment table.
    /// Segments whose records are all dead become free once it is on flash.
    pub fn checkpoint(&mut self) -> Result<()> {
        if self.log.failed {
            return Err(Error::ReadOnly);
        }
        self.in_checkpoint = true;
        let before = self.log.stats.programmed_bytes;
        let r = self.checkpoint_inner();
        self.in_checkpoint = false;
        self.cp_bytes = self.cp_bytes.saturating_add(self.log.stats.programmed_bytes.saturating_sub(before));
        r
    }

    fn checkpoint_inner(&mut self) -> Result<()> {
        let r = self.checkpoint_write();
        if r.is_err() {
            // the table's chunks written so far are named by no checkpoint: write them all
            // again next time
            self.log.segs.set_changed(true);
        }
        r
    }

    fn checkpoint_write(&mut self) -> Result<()> {
        let block = self.log.flash.geometry().kind == crate::engine::flash::FlashKind::Block;
        let mut rounds = 0u32;
        let mut locs: P::Vec<Loc> = P::Vec::new();
        // where the checkpoint's own records start in the metadata head (the extension), when
        // the first round wrote all of them (a relocation round writes some of them elsewhere)
        let mut start: Option<(u32, u32, u64)>;
        let mut first_round = true;
        let mut twins: P::Vec<u8> = P::Vec::new();
        loop {
            if self.log.has_failed_seg() {
                rounds = rounds.saturating_add(1);
                if rounds > 8 {
                    self.log.failed = true;
                    return Err(Error::Io);
                }
                self.relocate_failed()?;
            }
            // the checkpoint's own records start on a fresh write unit: a bad page of its
            // metadata then holds no record of the operations before it (which a mount
            // falling back to the previous checkpoint replays)
            for h in [crate::engine::format::HEAD_HOT, HEAD_COLD, HEAD_META] {
                self.log.flush_head(h)?;
            }
            let m = self.log.heads.get(self.log.phys_head(HEAD_META)).ok_or(Error::Invalid)?;
            start = if first_round && m.seg != crate::engine::format::NO_SEG && m.pos < self.sb.segment_size {
                Some((m.seg, m.pos, m.seg_seq))
            } else {
                None
            };
            first_round = false;
            self.tree.commit(&mut self.log)?;
            if block {
                // On a block device nothing needs the index durable before the segment table:
                // the one device flush after the table covers both, before the slot that names
                // them is written. A device flush in between made a cheap FTL that caches one
                // erase block (mtdblock) write the head's block back once more per checkpoint
                // (issue 13). The heads are still padded (a failed program still shows as a
                // ghost head below); only the device flush and its SYNC marker are left out.
                for h in [crate::engine::format::HEAD_HOT, HEAD_COLD, HEAD_META] {
                    self.log.flush_head(h)?;
                }
            } else {
                self.log.flush_all()?;
            }
            if self.log.has_failed_seg() {
                continue;
            }
            // capture the segment table, then write what changed of it to the metadata log
            self.write_segtab(&mut locs, &mut twins)?;
            self.log.flush_all()?;
            if !self.log.has_failed_seg() {
                break;
            }
            // a program failed under the chunks just written: all of them again
            self.log.segs.set_changed(true);
        }
        let seq = self.log.next_seq;
        self.log.next_seq = seq.saturating_add(1);
        let (root, root_level, has_root) = match self.tree.root() {
            Some((l, lv)) => (l, lv, true),
            None => (Loc::default(), 0, false),
        };
        let count = self.log.segs.len();
        let len = CP_HDR_SIZE + locs.len() * Loc::SIZE;
        let mut stats = self.log.stats;
        stats.checkpoints = stats.checkpoints.saturating_add(1);
        let hdr = CpHeader {
            seq,
            serial: self.sb.serial,
            len: len as u32,
            root,
            root_level,
            has_root,
            next_ino: self.next_ino,
            next_seq: self.log.next_seq,
            heads: self.log.head_states(),
            stats,
            seg_count: count as u32,
        };
        let mut blob = core::mem::replace(&mut self.buf2, P::Vec::new());
        let ext = start.map(|(seg, off, seg_seq)| crate::engine::format::CpExt { seq, seg, off, seg_seq });
        let chunks = crate::engine::format::segtab_chunks(count as u32);
        let tw = crate::engine::format::CpTwins { seq, prev: self.segtab_seq, chunks };
        let r = self.encode_cp(&hdr, locs.as_slice(), ext, (tw, twins.as_slice()), &mut blob);
        if r.is_err() {
            self.buf2 = blob;
            return r;
        }
        // choose a slot: the next one of the current area, or slot 0 of the other area
        // (erased first) when this one is full, after a mount, or when an area is to be
        // scrubbed: the other (erasing it scrubs it), or this one (the next checkpoint then
        // comes back and erases it)
        let slots = self.slots_per_area();
        let other = 1 - self.cp_area.min(1);
        let scrub = self.cp_scrub.get(other).copied().unwrap_or(false) || self.cp_scrub.get(self.cp_area).copied().unwrap_or(false);
        if self.cp_next_slot >= slots || scrub {
            if scrub && self.cp_next_slot < slots {
                self.log.faults.cp_area_scrubs = self.log.faults.cp_area_scrubs.saturating_add(1);
            }
            if self.log.fill_on_close && self.cp_next_slot != u32::MAX {
                // the full area's last segment may end in a part no slot fits: close it
                let ss = u64::from(self.sb.segment_size.max(1));
                let end = u64::from(self.cp_next_slot) * u64::from(self.sb.cp_slot_size);
                let idx = (end / ss) as usize;
                if end % ss != 0 && idx < self.sb.cp_area_segs as usize {
                    let seg = *self.sb.cp_segs.get(self.cp_area).and_then(|x| x.get(idx)).ok_or(Error::Corrupt)?;
                    if let Err(e) = self.log.fill_to_end(seg, (end % ss) as u32, true) {
                        self.buf2 = blob;
                        return Err(e);
                    }
                }
            }
            for i in 0..self.sb.cp_area_segs as usize {
                let s = *self.sb.cp_segs.get(other).and_then(|a| a.get(i)).ok_or(Error::Corrupt)?;
                match self.log.erase(s) {
                    Ok(true) => {}
                    // a checkpoint-area block failed: no checkpoint can be written any more
                    Ok(false) => {
                        self.buf2 = blob;
                        self.log.failed = true;
                        return Err(Error::Io);
                    }
                    Err(e) => {
                        self.buf2 = blob;
                        self.log.failed = true;
                        return Err(e);
                    }
                }
                // the checkpoint area keeps its META state even if erase accounting touched it
                if let Ok(mut si) = self.log.seg_mut(s) {
                    si.state = segstate::META;
                }
            }
            self.cp_area = other;
            self.cp_next_slot = 0;
            if let Some(f) = self.cp_scrub.get_mut(other) {
                *f = false;
            }
        }
        let off = u64::from(self.cp_next_slot) * u64::from(self.sb.cp_slot_size);
        let r = self.cp_write(self.cp_area, off, blob.as_slice());
        self.buf2 = blob;
        if let Err(e) = r {
            self.log.failed = true;
            return Err(e);
        }
        self.cp_next_slot = self.cp_next_slot.saturating_add(1);
        self.log.flash.flush()?;
        self.log.flushed_seq = self.log.next_seq;
        self.log.stats = stats;
        self.log.need_checkpoint = false;
        self.log.since_checkpoint = 0;
        self.pin_segtab(&mut locs, &mut twins, seq);
        // Free the segments that were dead at the previous checkpoint already (neither this
        // checkpoint nor the previous one, the fallback, refers to them); retire failed ones.
        // The ones that died since wait for the next checkpoint. Only those segments are
        // touched (full, nothing live, not pinned: the table's `pending` counter says whether
        // there is any), found by a read-only pass over the entries.
        let n = if self.log.segs.counts().pending > 0 { self.log.segs.len() as u32 } else { 0 };
        for i in 0..n {
            let cand = self
                .log
                .segs
                .as_slice()
                .get(i as usize)
                .is_some_and(|si| si.state == segstate::FULL && si.live == 0 && si.flags & SEG_PINNED == 0);
            if !cand {
                continue;
            }
            let (mut retired, mut freed) = (false, false);
            {
                let mut si = self.log.seg_mut(i)?;
                if si.state != segstate::FULL || si.live != 0 || si.flags & SEG_PINNED != 0 {
                    continue;
                }
                if si.flags & SEG_DEAD_CP == 0 {
                    si.flags |= SEG_DEAD_CP;
                    continue;
                }
                si.flags &= !SEG_DEAD_CP;
                if si.flags & SEG_RETIRE != 0 {
                    si.state = segstate::BAD;
                    retired = true;
                } else {
                    si.state = segstate::FREE;
                    freed = true;
                }
            }
            if retired || freed {
                // what it held is gone for good (an FTL may discard it)
                self.log.rcache.invalidate_seg(i);
            }
            if retired {
                self.log.stats.retired = self.log.stats.retired.saturating_add(1);
                let _ = self.log.flash.mark_bad(i);
            }
            if freed {
                // a block device may tell its FTL now, off the write path
                self.log.flash.discard_hint(i);
            }
        }
        Ok(())
    }

    /// The blob (`hdr`, the SEGTAB locations), its CRC, and after its `len` bytes the
    /// extension when there is one and the slot has room for it (a filesystem formatted before
    /// `FEATURE_COMPAT_CP_EXT` may not), then the twin map (`twins`: the map's header and one
    /// byte per chunk from `write_segtab`) where it fits (see [`Engine::cp_twins_at`]).
    fn encode_cp(
        &mut self,
        hdr: &CpHeader,
        locs: &[Loc],
        ext: Option<crate::engine::format::CpExt>,
        twins: (crate::engine::format::CpTwins, &[u8]),
        blob: &mut P::Vec<u8>,
    ) -> Result<()> {
        let slot = self.sb.cp_slot_size as usize;
        blob.clear();
        blob.try_resize(slot, 0u8)?;
        let len = hdr.len as usize;
        {
            let b = blob.as_mut_slice();
            let mut w = Writer::new(b);
            hdr.encode(&mut w)?;
            for l in locs {
                l.put(&mut w)?;
            }
            if w.pos() != len {
                return Err(Error::Invalid);
            }
        }
        let crc = crate::engine::crc::crc32c(blob.as_slice().get(..len).ok_or(Error::Invalid)?);
        crate::engine::codec::put_u32(blob.as_mut_slice(), 4, crc)?;
        if let (Some(e), Some(room)) = (ext, blob.as_mut_slice().get_mut(len..)) {
            if room.len() >= crate::engine::format::CP_EXT_SIZE {
                e.encode(room)?;
            }
        }
        // the twin map, when the previous checkpoint is known and the map fits
        if let (Some(at), true) = (self.cp_twins_at(), twins.0.prev != 0 && twins.1.len() == locs.len()) {
            if let Some(room) = blob.as_mut_slice().get_mut(at..) {
                twins.0.encode(twins.1, room)?;
            }
        }
        Ok(())
    }

    /// Where a checkpoint's twin map starts in its slot (after the blob and the extension's
    /// place), when it fits in the write units the blob and the extension occupy anyway and
    /// in the slot: `None` otherwise (such checkpoints have none: a mount from them writes
    /// the whole table again). On MLC NAND the units after those are the slot's pair guard,
    /// which the next slot's programs may destroy: the map never lies there.
    pub(super) fn cp_twins_at(&self) -> Option<usize> {
        let wu = u64::from(self.sb.write_unit.max(1));
        let at = Self::cp_blob_len(self.sb.segment_count).saturating_add(crate::engine::format::CP_EXT_SIZE as u64);
        let end = at.saturating_add(crate::engine::format::cp_twins_len(crate::engine::format::segtab_chunks(self.sb.segment_count)) as u64);
        let room = at.div_ceil(wu).saturating_mul(wu).min(u64::from(self.sb.cp_slot_size));
        (end <= room).then(|| usize::try_from(at).ok()).flatten()
    }

    /// Bytes of a checkpoint slot a mount reads to load it: the blob, the extension when the
    /// slot has room for it, and the twin map when it fits (see [`Engine::cp_twins_at`]).
    pub(super) fn cp_load_len(&self) -> Result<usize> {
        let blob_len = usize::try_from(Self::cp_blob_len(self.sb.segment_count)).map_err(|_| Error::BadFormat)?;
        let slot = usize::try_from(self.sb.cp_slot_size).map_err(|_| Error::BadFormat)?;
        let with_ext = blob_len.saturating_add(crate::engine::format::CP_EXT_SIZE).min(slot).max(blob_len);
        Ok(match self.cp_twins_at() {
            Some(at) => at.saturating_add(crate::engine::format::cp_twins_len(crate::engine::format::segtab_chunks(self.sb.segment_count))),
            None => with_ext,
        })
    }

    pub(super) fn validate_cp(&self, b: &[u8]) -> Result<CpHeader> {
        let (h, crc) = CpHeader::decode(&mut Reader::new(b))?;
        let len = h.len as usize;
        if len > b.len() || len < CP_HDR_SIZE || h.serial != self.sb.serial || h.seg_count != self.sb.segment_count {
            return Err(Error::Corrupt);
        }
        if h.seq >= crate::engine::format::SEQ_LIMIT || h.next_seq >= crate::engine::format::SEQ_LIMIT || h.next_seq <= h.seq {
            return Err(Error::Corrupt);
        }
        if len != CP_HDR_SIZE + crate::engine::format::segtab_chunks(h.seg_count) as usize * Loc::SIZE {
            return Err(Error::Corrupt);
        }
        let body = b.get(..len).ok_or(Error::Corrupt)?;
        let c = crate::engine::crc::crc32c_update(
            crate::engine::crc::crc32c_update(crate::engine::crc::crc32c(body.get(..4).ok_or(Error::Corrupt)?), &[0, 0, 0, 0]),
            body.get(8..).ok_or(Error::Corrupt)?,
        );
        if c != crc {
            return Err(Error::Corrupt);
        }
        Ok(h)
    }

    /// Report the places of the newest checkpoint's metadata as `(segment, offset, length)`:
    /// its blob's slot in the checkpoint area, each segment-table record, and the index root
    /// node (valid right after a checkpoint). For tests and tools (scrubbing, corruption
    /// tests); reads the blob back from the medium.
    pub fn checkpoint_metadata(&mut self, f: &mut dyn FnMut(u32, u32, u32)) -> Result<()> {
        let slot = self.cp_next_slot.checked_sub(1).ok_or(Error::Invalid)?;
        if slot >= self.slots_per_area() {
            return Err(Error::Invalid);
        }
        let ss = u64::from(self.sb.segment_size.max(1));
        let off = u64::from(slot) * u64::from(self.sb.cp_slot_size);
        let a = self.cp_area;
        let mut blob: P::Vec<u8> = P::Vec::new();
        let blob_len = usize::try_from(Self::cp_blob_len(self.sb.segment_count)).map_err(|_| Error::Invalid)?;
        let with_ext = blob_len.saturating_add(crate::engine::format::CP_EXT_SIZE).min(self.sb.cp_slot_size as usize).max(blob_len);
        blob.try_resize(with_ext, 0)?;
        self.cp_read(a, off, blob.as_mut_slice())?;
        // the slot may span segments of the area
        let mut done = 0u64;
        let len = u64::from(self.sb.cp_slot_size);
        while done < len {
            let pos = off + done;
            let seg = *self.sb.cp_segs.get(a).and_then(|x| x.get((pos / ss) as usize)).ok_or(Error::Corrupt)?;
            let n = (ss - pos % ss).min(len - done);
            f(seg, (pos % ss) as u32, n as u32);
            done += n;
        }
        let h = self.validate_cp(blob.as_slice())?;
        // with the extension: every record the checkpoint wrote (its index nodes, padding,
        // segment headers, SEGTAB records), then the SEGTAB records of earlier checkpoints
        // it names (see `write_segtab`)
        let mut walked: P::Vec<Loc> = P::Vec::new();
        let mut nomem = false;
        let ext = self.cp_records(&h, blob.as_slice(), &mut |l| {
            f(l.seg, l.off, l.len);
            nomem |= walked.try_push(l).is_err();
        })?;
        if nomem {
            return Err(Error::NoMem);
        }
        let chunks = crate::engine::format::segtab_chunks(h.seg_count);
        let mut r = Reader::new(blob.as_slice().get(CP_HDR_SIZE..).ok_or(Error::Corrupt)?);
        for _ in 0..chunks {
            let l = Loc::get(&mut r)?;
            if !walked.as_slice().contains(&l) {
                f(l.seg, l.off, l.len);
            }
        }
        if h.has_root && !ext {
            f(h.root.seg, h.root.off, h.root.len);
        }
        Ok(())
    }

    /// Read back every record checkpoint `cp` (blob `blob`) wrote to the metadata head, from
    /// the start its extension gives to the end of its last SEGTAB record, following the
    /// head's chain, calling `f` with each record's location; `Ok(false)` without an extension
    /// (a checkpoint of an older engine, or one written in relocation rounds). A record that
    /// does not read back, or a segment left before the record that follows could not fit in
    /// it (the only reason the head moves on), is `Corrupt`: the mount falls back to the
    /// previous checkpoint.
    pub(super) fn cp_records(&mut self, cp: &CpHeader, blob: &[u8], f: &mut dyn FnMut(Loc)) -> Result<bool> {
        let Some(ext) = blob.get(cp.len as usize..).and_then(CpExt::decode).filter(|e| e.seq == cp.seq) else {
            return Ok(false);
        };
        let chunks = crate::engine::format::segtab_chunks(cp.seg_count);
        let at = CP_HDR_SIZE.saturating_add((chunks.saturating_sub(1) as usize).saturating_mul(Loc::SIZE));
        let last = Loc::get(&mut Reader::new(blob.get(at..).ok_or(Error::Corrupt)?))?;
        let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
        let r = self.cp_records_walk(ext, last, &mut tmp, f);
        self.buf = tmp;
        r.map(|()| true)
    }

    fn cp_records_walk(&mut self, ext: CpExt, last: Loc, tmp: &mut P::Vec<u8>, f: &mut dyn FnMut(Loc)) -> Result<()> {
        let ss = self.sb.segment_size;
        let (mut seg, mut off, mut seq) = (ext.seg, ext.off, ext.seg_seq);
        // where the head left the segment before (its next record must not have fitted there)
        let mut left_at: Option<u32> = None;
        let mut segs = 0u32;
        let mut win = ScanWindow::new();
        // the walk ends with the last SEGTAB record: no window reads past it
        win.stop_at = Some((last.seg, last.off.saturating_add(last.len)));
        loop {
            match self.log.scan_in(seg, off, seq, tmp, &mut win)? {
                Scan::Rec(h, l) => {
                    if let Some(end) = left_at.take().filter(|_| h.rtype != rtype::SEGHDR) {
                        let pos = crate::engine::log::Log::<P, F>::align_pos(self.sb.write_unit, end);
                        if u64::from(pos).saturating_add(u64::from(l.len)) <= u64::from(ss) {
                            return Err(Error::Corrupt);
                        }
                    }
                    f(l);
                    if l.seg == last.seg && l.off == last.off {
                        return Ok(());
                    }
                    off = l.off.saturating_add(l.len);
                }
                Scan::End => {
                    segs = segs.saturating_add(1);
                    if segs > self.sb.segment_count {
                        return Err(Error::Corrupt);
                    }
                    let (_, _, _, next) = self.log.read_seghdr(seg, tmp)?.ok_or(Error::Corrupt)?;
                    let (nseq, _, prev, _) = self.log.read_seghdr(next, tmp)?.ok_or(Error::Corrupt)?;
                    if prev != seg || nseq <= seq {
                        return Err(Error::Corrupt);
                    }
                    left_at = Some(off);
                    (seg, off, seq) = (next, 0, nseq);
                }
                Scan::Bad => return Err(Error::Corrupt),
            }
        }
    }

    /// Length of a checkpoint blob for `segments` segments.
    pub(super) fn cp_blob_len(segments: u32) -> u64 {
        CP_HDR_SIZE as u64 + u64::from(crate::engine::format::segtab_chunks(segments)) * Loc::SIZE as u64
    }

    pub(super) fn slots_per_area(&self) -> u32 {
        let area = u64::from(self.sb.cp_area_segs) * u64::from(self.sb.segment_size);
        (area / u64::from(self.sb.cp_slot_size.max(1))) as u32
    }

    /// The piece of a `len`-byte access at linear offset `off` of checkpoint area `a` that
    /// starts `done` bytes in: (segment, offset in it, length), stopping at the segment's end.
    fn cp_piece(&self, a: usize, off: u64, done: usize, len: usize) -> Result<(u32, u32, usize)> {
        let ss = u64::from(self.sb.segment_size);
        if ss == 0 {
            return Err(Error::Corrupt);
        }
        let pos = off.saturating_add(done as u64);
        let so = (pos % ss) as u32;
        let seg = *self.sb.cp_segs.get(a).and_then(|x| x.get((pos / ss) as usize)).ok_or(Error::Corrupt)?;
        let n = (ss.saturating_sub(u64::from(so)) as usize).min(len.saturating_sub(done));
        Ok((seg, so, n))
    }

    /// Read `out.len()` bytes of checkpoint area `a` at linear offset `off`.
    pub(super) fn cp_read(&mut self, a: usize, off: u64, out: &mut [u8]) -> Result<()> {
        let mut done = 0usize;
        while done < out.len() {
            let (seg, so, n) = self.cp_piece(a, off, done, out.len())?;
            let st = self.log.flash.read(seg, so, out.get_mut(done..done + n).ok_or(Error::Corrupt)?)?;
            if st == crate::engine::flash::ReadStatus::Corrected {
                // bits are flipping in this area: move off it and erase it (see `checkpoint`)
                self.log.faults.corrected_reads = self.log.faults.corrected_reads.saturating_add(1);
                if let Some(f) = self.cp_scrub.get_mut(a) {
                    *f = true;
                }
            }
            done = done.saturating_add(n);
        }
        Ok(())
    }

    /// Write `data` to checkpoint area `a` at linear offset `off`.
    fn cp_write(&mut self, a: usize, off: u64, data: &[u8]) -> Result<()> {
        let mut done = 0usize;
        while done < data.len() {
            let (seg, so, n) = self.cp_piece(a, off, done, data.len())?;
            self.log.write_fixed(seg, so, data.get(done..done + n).ok_or(Error::Corrupt)?)?;
            done = done.saturating_add(n);
        }
        Ok(())
    }

    /// Checkpoint if the index cache is getting full of dirty nodes or a head lost its chain.
    pub(crate) fn maybe_commit(&mut self) -> Result<()> {
        if self.should_checkpoint() || self.log.need_checkpoint || self.log.has_failed_seg() {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Whether the dirty index or the log since the last checkpoint grew past its bound.
    pub(crate) fn should_checkpoint(&self) -> bool {
        self.tree.needs_commit() || self.log.since_checkpoint >= self.opts.checkpoint_log_bytes.max(1)
    }
}
