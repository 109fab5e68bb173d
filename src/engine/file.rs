//! File data: 4 KiB blocks keyed by block index (holes are missing blocks), read, write
//! (short at a full filesystem), cutting at a size, SEEK_DATA/SEEK_HOLE, symlink targets.

use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{
    kind, rtype, Inode, Key, Timespec, BLOCK_SIZE, FLAG_CONT, HEAD_HOT, HEAD_META, MAX_FILE_SIZE,
    REC_HDR, S_IFLNK, S_IFMT,
};
use crate::engine::fs::Engine;
use crate::engine::platform::{FallibleVec, Platform};
use crate::engine::space::RESERVE_SEGS;

/// Data block size as u64.
const BS: u64 = BLOCK_SIZE as u64;

/// The most bytes `read_blocks` reads from the flash in one call (a readahead batch of 32
/// 4 KiB blocks with their headers, as the kernel's default 128 KiB readahead window asks for).
const READ_SPAN_MAX: usize = 160 * 1024;

const REC_HDR_U32: u32 = REC_HDR as u32;

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Read up to `buf.len()` bytes of file `ino` at `off`; returns the count (0 at EOF).
    pub fn read(&mut self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
        let i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Error::IsDir);
        }
        self.read_data(&i, off, buf)
    }

    /// Read the target of symlink `ino` into `buf`; returns its length.
    pub fn readlink(&mut self, ino: u64, buf: &mut [u8]) -> Result<usize> {
        let i = self.getattr(ino)?;
        if i.mode & S_IFMT != S_IFLNK {
            return Err(Error::Invalid);
        }
        let n = (i.size as usize).min(buf.len());
        self.read_data(&i, 0, buf.get_mut(..n).ok_or(Error::Invalid)?)
    }

    fn read_data(&mut self, i: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
        if off >= i.size {
            return Ok(0);
        }
        let n = ((i.size - off).min(buf.len() as u64)) as usize;
        let mut done = 0usize;
        while done < n {
            let pos = off.saturating_add(done as u64);
            let blk = pos / BS;
            let bo = (pos % BS) as usize;
            let take = (BS as usize - bo).min(n - done);
            let out = buf.get_mut(done..done.saturating_add(take)).ok_or(Error::Invalid)?;
            match self.read_key(&Key::new(i.ino, kind::DATA, blk))? {
                Some(plen) => {
                    let p = self.payload();
                    out.fill(0);
                    if let Some(src) = p.get(bo..plen.min(p.len())) {
                        let k = src.len().min(out.len());
                        if let (Some(d), Some(s)) = (out.get_mut(..k), src.get(..k)) {
                            d.copy_from_slice(s);
                        }
                    }
                }
                None => out.fill(0),
            }
            done += take;
        }
        Ok(n)
    }

    /// Read whole blocks `first..first + n` of regular file `ino` for the kernel's readahead,
    /// calling `f(k, data)` for every `k` in `0..n`, in order: `data` is what block `first + k`
    /// holds (shorter than a block where the rest reads as zeros: the record is shorter or the
    /// file ends there; empty for a hole or a block past EOF). Data records that lie back to
    /// back on the medium, as write-back and GC leave the blocks of a file, are read with one
    /// flash read per span of up to `READ_SPAN_MAX` bytes instead of one per record (each
    /// 4 KiB record straddles NAND pages, so neighbours share pages): a cold sequential read
    /// reads every page once. An error (a damaged record, an unreadable page, no memory for
    /// the span) is returned after the blocks before it were handed to `f`; the caller reads
    /// the rest one block at a time to tell which block is damaged.
    pub fn read_blocks(&mut self, ino: u64, first: u64, n: u64, f: &mut dyn FnMut(u64, &[u8])) -> Result<()> {
        let i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Error::IsDir);
        }
        // the located blocks of the range, in block order
        let end = first.saturating_add(n).min(i.size.div_ceil(BS));
        let mut locs: P::Vec<(u64, crate::engine::format::Loc)> = P::Vec::new();
        let mut from = Key::new(ino, kind::DATA, first);
        while let Some((k, loc)) = self.idx_next(&from)? {
            if k.ino != ino || k.kind != kind::DATA || k.key >= end {
                break;
            }
            locs.try_push((k.key, loc))?;
            from = Key::new(ino, kind::DATA, k.key.saturating_add(1));
        }
        let mut span: P::Vec<u8> = P::Vec::new();
        let mut next = 0u64; // the next k to hand to `f`
        let mut a = 0usize;
        let all = locs.as_slice().len();
        while a < all {
            // the records [a, b) lie back to back in one segment, within READ_SPAN_MAX
            // (records and aligned payloads alike: `start` and `bytes` span what they occupy)
            let (_, l0) = *locs.as_slice().get(a).ok_or(Error::Corrupt)?;
            let mut b = a + 1;
            let mut span_end = u64::from(l0.start()) + u64::from(l0.bytes());
            while let Some(&(_, l)) = locs.as_slice().get(b) {
                let gap_ok = l.seg == l0.seg
                    && u64::from(l.start()) >= span_end
                    && u64::from(l.start()) - span_end <= u64::from(self.log.geo.write_unit.max(REC_HDR_U32))
                    && u64::from(l.start()) + u64::from(l.bytes()) - u64::from(l0.start()) <= READ_SPAN_MAX as u64;
                if !gap_ok {
                    break;
                }
                span_end = u64::from(l.start()) + u64::from(l.bytes());
                b += 1;
            }
            let len = usize::try_from(span_end - u64::from(l0.start())).map_err(|_| Error::Corrupt)?;
            span.clear();
            span.try_resize(len, 0)?;
            self.log.read_span(l0.seg, l0.start(), span.as_mut_slice())?;
            for &(blk, loc) in locs.as_slice().get(a..b).ok_or(Error::Corrupt)? {
                let o = (loc.start() - l0.start()) as usize;
                let rec = span.as_slice().get(o..o.saturating_add(loc.bytes() as usize)).ok_or(Error::Corrupt)?;
                let p = if loc.is_aligned() {
                    self.log.check_aligned(rec, loc)?;
                    rec
                } else {
                    let h = self.log.check_record(rec, loc)?;
                    if h.key != Key::new(ino, kind::DATA, blk) || h.rtype != rtype::DATA {
                        return Err(Error::Corrupt);
                    }
                    rec.get(REC_HDR..).unwrap_or(&[])
                };
                let k = blk - first;
                while next < k {
                    f(next, &[]);
                    next += 1;
                }
                // nothing past EOF, whatever the record holds
                let valid = i.size.saturating_sub(blk.saturating_mul(BS)).min(BS) as usize;
                f(k, p.get(..valid.min(p.len())).unwrap_or(&[]));
                next = k + 1;
            }
            a = b;
        }
        while next < n {
            f(next, &[]);
            next += 1;
        }
        Ok(())
    }

    /// Block `blk` of file `ino` into `out` (at least 4096 bytes: the page-cache folio), the
    /// bytes past what the file holds zeroed; returns how many bytes are the file's (0: a hole
    /// or past EOF). An aligned block (format.md section 8) is read from the medium straight
    /// into `out` (one read of 4096 bytes at an aligned offset, checked against the CRC in its
    /// index entry), with no copy; a DATA record goes through the engine's buffer.
    pub fn read_block_into(&mut self, ino: u64, blk: u64, out: &mut [u8]) -> Result<usize> {
        let i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Error::IsDir);
        }
        let out = out.get_mut(..BS as usize).ok_or(Error::Invalid)?;
        let valid = i.size.saturating_sub(blk.saturating_mul(BS)).min(BS) as usize;
        let key = Key::new(ino, kind::DATA, blk);
        let loc = match self.idx_get(&key)? {
            Some(l) if valid > 0 => l,
            _ => {
                out.fill(0);
                return Ok(0);
            }
        };
        let n = if loc.is_aligned() {
            self.log.read_aligned(loc, out)?;
            valid
        } else {
            let len = self.read_at(&key, loc)?;
            let n = len.min(valid);
            out.get_mut(..n).ok_or(Error::Corrupt)?.copy_from_slice(self.payload().get(..n).ok_or(Error::Corrupt)?);
            n
        };
        out.get_mut(n..).ok_or(Error::Corrupt)?.fill(0);
        Ok(n)
    }

    /// SEEK_DATA: the first offset >= `off` inside a data block of file `ino` (4 KiB blocks, the
    /// index's granularity: a block that has a data record is data, even if it holds zeros).
    /// `Ok(None)` when there is no data at or after `off` before EOF, and for `off` at or past
    /// EOF (the caller answers ENXIO).
    pub fn seek_data(&mut self, ino: u64, off: u64) -> Result<Option<u64>> {
        let i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Error::IsDir);
        }
        if off >= i.size {
            return Ok(None);
        }
        match self.idx_next(&Key::new(ino, kind::DATA, off / BS))? {
            Some((k, _)) if k.ino == ino && k.kind == kind::DATA => {
                let at = k.key.saturating_mul(BS).max(off);
                Ok(if at < i.size { Some(at) } else { None })
            }
            _ => Ok(None),
        }
    }

    /// SEEK_HOLE: the first offset >= `off` inside a hole of file `ino` (a 4 KiB block without
    /// a data record), or EOF, which always counts as a hole. `Err(NoSuchAddress)` (ENXIO) for
    /// `off` at or past EOF.
    pub fn seek_hole(&mut self, ino: u64, off: u64) -> Result<u64> {
        let i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Error::IsDir);
        }
        if off >= i.size {
            return Err(Error::NoSuchAddress);
        }
        let mut blk = off / BS;
        loop {
            let start = blk.saturating_mul(BS);
            if start >= i.size {
                return Ok(i.size);
            }
            match self.idx_next(&Key::new(ino, kind::DATA, blk))? {
                Some((k, _)) if k.ino == ino && k.kind == kind::DATA && k.key == blk => {
                    blk = blk.saturating_add(1);
                }
                _ => return Ok(start.max(off)),
            }
        }
    }

    /// Write `data` to file `ino` at `off`; returns the count written.
    pub fn write(&mut self, ino: u64, off: u64, data: &[u8], now: Timespec) -> Result<usize> {
        let r = self.write_op(ino, off, data, now);
        self.end_op(r)
    }

    fn write_op(&mut self, ino: u64, off: u64, data: &[u8], now: Timespec) -> Result<usize> {
        let end = off.checked_add(data.len() as u64).ok_or(Error::FileTooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(Error::FileTooBig);
        }
        self.begin_mutation(RESERVE_SEGS)?;
        let mut i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Error::IsDir);
        }
        if i.mode & S_IFMT == S_IFLNK {
            return Err(Error::Invalid);
        }
        // short write when the filesystem is nearly full (after a checkpoint, when the dirty
        // index nodes counted at their largest are what makes it short: `check_capacity`)
        let mut room = self.write_room();
        if (data.len() as u64) > room && self.commit_for_room()? {
            room = self.write_room();
        }
        let fit = if (data.len() as u64) <= room { data.len() } else { self.write_fit(&i, off, data.len(), room)? };
        if fit == 0 && !data.is_empty() {
            return Err(Error::NoSpace);
        }
        let data = data.get(..fit).ok_or(Error::Invalid)?;
        if off > i.size {
            // make sure nothing stale shows up in the gap
            self.cut_data(ino, i.size, 0)?;
        }
        let mut done = 0usize;
        let mut opened = self.log.opened;
        let need_free = RESERVE_SEGS.saturating_add(self.cp_segments());
        let mut blockbuf = core::mem::replace(&mut self.buf2, P::Vec::new());
        let res = (|| -> Result<()> {
            while done < data.len() {
                let pos = off.saturating_add(done as u64);
                let blk = pos / BS;
                let bo = (pos % BS) as usize;
                let take = (BS as usize - bo).min(data.len() - done);
                let key = Key::new(ino, kind::DATA, blk);
                blockbuf.clear();
                if bo != 0 || take != BS as usize {
                    if self.read_key(&key)?.is_some() {
                        blockbuf.try_extend_from_slice(self.payload())?;
                    }
                    // bytes of the old block beyond the old EOF are stale
                    let valid = i.size.saturating_sub(blk.saturating_mul(BS)).min(BS) as usize;
                    if blockbuf.len() > valid {
                        blockbuf.truncate(valid);
                    }
                }
                if blockbuf.len() < bo.saturating_add(take) {
                    blockbuf.try_resize(bo.saturating_add(take), 0)?;
                }
                let src = data.get(done..done.saturating_add(take)).ok_or(Error::Invalid)?;
                let dst = blockbuf.as_mut_slice().get_mut(bo..).ok_or(Error::Invalid)?;
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = *s;
                }
                self.put_record(HEAD_HOT, rtype::DATA, 0, key, blockbuf.as_slice())?;
                done = done.saturating_add(take);
                self.log.stats.user_bytes = self.log.stats.user_bytes.saturating_add(take as u64);
                // a long write consumes segments: keep the reserve (GC) and the checkpoint bounds
                let short = self.log.opened != opened && self.log.free_count() < need_free;
                opened = self.log.opened;
                if short || self.should_checkpoint() {
                    // the inode covers what is written so far
                    let cur = off.saturating_add(done as u64);
                    if cur > i.size {
                        i.size = cur;
                    }
                    i.mtime = now;
                    i.ctime = now;
                    self.write_inode(&i, 0)?;
                    if self.should_checkpoint() {
                        self.checkpoint()?;
                    }
                    self.ensure_space(need_free)?;
                }
            }
            Ok(())
        })();
        self.buf2 = blockbuf;
        match res {
            Ok(()) => {}
            // out of space part-way: a short write
            Err(Error::NoSpace) if done > 0 => {}
            Err(e) => return Err(e),
        }
        let end = off.saturating_add(done as u64);
        if end > i.size {
            i.size = end;
        }
        i.mtime = now;
        i.ctime = now;
        self.write_inode(&i, 0)?;
        Ok(done)
    }

    /// Bytes a write may still add (the capacity less what is committed and reserved, less a
    /// block's slack for the records around the data).
    fn write_room(&self) -> u64 {
        self.capacity_bytes().saturating_sub(self.committed_bytes()).saturating_sub(self.reserved).saturating_sub(4096)
    }

    /// How many of the `len` bytes a write at `off` to file `i` may take with `room` bytes
    /// left below the capacity (called when `len` exceeds `room`): the bytes of a block whose
    /// new record is no bigger than the record it replaces cost nothing (an overwrite in place:
    /// the old record dies, the live bytes do not grow, and the filesystem keeps the dead
    /// space the capacity leaves for the GC), every other byte costs one byte of `room`, as
    /// before. Ends at the first byte that does not fit.
    fn write_fit(&mut self, i: &Inode, off: u64, len: usize, room: u64) -> Result<usize> {
        let mut left = room;
        let mut done = 0usize;
        while done < len {
            let pos = off.saturating_add(done as u64);
            let blk = pos / BS;
            let bo = (pos % BS) as usize;
            let take = (BS as usize).saturating_sub(bo).min(len.saturating_sub(done));
            // what `write_op` writes for this block: the old payload (up to EOF) with the new
            // bytes over it, as one DATA record
            let free = match self.idx_get(&Key::new(i.ino, kind::DATA, blk))? {
                Some(old) => {
                    let valid = i.size.saturating_sub(blk.saturating_mul(BS)).min(BS);
                    let old_payload = if old.is_aligned() { BS } else { u64::from(old.len).saturating_sub(REC_HDR as u64) };
                    let new_payload = old_payload.min(valid).max((bo + take) as u64);
                    new_payload.saturating_add(REC_HDR as u64) <= u64::from(old.bytes())
                }
                None => false,
            };
            if free {
                done = done.saturating_add(take);
                continue;
            }
            let k = (take as u64).min(left) as usize;
            done = done.saturating_add(k);
            left = left.saturating_sub(k as u64);
            if k < take {
                break;
            }
        }
        Ok(done)
    }

    /// Cut the file's data at byte `at`: drop blocks past it and zero the tail of the block
    /// containing it. Records go to the metadata head with `flags` on the last one.
    pub(crate) fn cut_data(&mut self, ino: u64, at: u64, flags: u8) -> Result<()> {
        let blk = at / BS;
        let r = (at % BS) as usize;
        let first_dead = if r == 0 { blk } else { blk.saturating_add(1) };
        if r != 0 {
            if let Some(plen) = self.read_key(&Key::new(ino, kind::DATA, blk))? {
                if plen > r {
                    let mut tmp = core::mem::replace(&mut self.buf2, P::Vec::new());
                    tmp.clear();
                    let res = tmp
                        .try_extend_from_slice(self.payload().get(..r).unwrap_or(&[]))
                        .and_then(|_| {
                            self.put_record(HEAD_META, rtype::DATA, FLAG_CONT, Key::new(ino, kind::DATA, blk), tmp.as_slice())
                        });
                    self.buf2 = tmp;
                    res?;
                }
            }
        }
        self.delete_range(Key::new(ino, kind::DATA, first_dead), Key::new(ino, kind::DATA, u64::MAX), flags)
    }
}

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Punch a hole in regular file `ino` (`fallocate(FALLOC_FL_PUNCH_HOLE | KEEP_SIZE)`): bytes
    /// `[off, off + len)` read as zeros afterwards and the size is kept. Blocks the range covers
    /// whole (up to EOF) lose their records (one DELETE range, the space comes back at the next
    /// GC of their segments); a block it covers in part is rewritten with that part zeroed. The
    /// partial blocks, the DELETE and the inode record (new `mtime`/`ctime`) are one atomic
    /// group, as a truncate: after a power cut the hole is there whole or not at all. Nothing
    /// past EOF is touched (there is nothing there). Returns the inode as stored.
    pub fn punch_hole(&mut self, ino: u64, off: u64, len: u64, now: Timespec) -> Result<Inode> {
        let r = self.punch_hole_op(ino, off, len, now);
        self.end_op(r)
    }

    fn punch_hole_op(&mut self, ino: u64, off: u64, len: u64, now: Timespec) -> Result<Inode> {
        self.begin_mutation(crate::engine::space::RESERVE_DELETE)?;
        let mut i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Error::IsDir);
        }
        if i.mode & S_IFMT != crate::engine::format::S_IFREG {
            return Err(Error::Invalid);
        }
        let end = off.saturating_add(len).min(i.size);
        if len == 0 || off >= end {
            return Ok(i);
        }
        // blocks first..=last are touched; a block is covered whole when the range reaches
        // from its start to its end or to EOF
        let (first, last) = (off / BS, (end - 1) / BS);
        let whole = |b: u64| off <= b.saturating_mul(BS) && end >= b.saturating_add(1).saturating_mul(BS).min(i.size);
        let mut del_from = first;
        if !whole(first) {
            let base = first.saturating_mul(BS);
            let to = end.min(base.saturating_add(BS)) - base;
            self.zero_in_block(ino, first, (off - base) as usize, to as usize)?;
            del_from = first.saturating_add(1);
        }
        let mut del_to = last.saturating_add(1); // exclusive
        if last >= del_from && !whole(last) {
            let base = last.saturating_mul(BS);
            self.zero_in_block(ino, last, 0, (end - base) as usize)?;
            del_to = last;
        }
        if del_from < del_to {
            self.delete_range(Key::new(ino, kind::DATA, del_from), Key::new(ino, kind::DATA, del_to - 1), FLAG_CONT)?;
        }
        i.mtime = now;
        i.ctime = now;
        self.write_inode(&i, 0)?;
        Ok(i)
    }

    /// Rewrite block `blk` of `ino` with bytes `[from, to)` zeroed (a hole stays a hole; a
    /// record that ends inside the range is cut at `from`: the rest reads as zeros). The record
    /// goes to the metadata head with `FLAG_CONT`, as the partial block of a truncate; a block left
    /// with zeros only is deleted.
    fn zero_in_block(&mut self, ino: u64, blk: u64, from: usize, to: usize) -> Result<()> {
        let key = Key::new(ino, kind::DATA, blk);
        let Some(plen) = self.read_key(&key)? else {
            return Ok(());
        };
        let plen = plen.min(self.payload().len());
        if plen <= from {
            return Ok(());
        }
        if from == 0 && to >= plen {
            // nothing but zeros would be left: the block becomes a hole
            return self.del_key(key, FLAG_CONT);
        }
        let mut tmp = core::mem::replace(&mut self.buf2, P::Vec::new());
        tmp.clear();
        let keep = if to >= plen { from } else { plen };
        let res = tmp.try_extend_from_slice(self.payload().get(..keep).unwrap_or(&[])).and_then(|_| {
            if let Some(z) = tmp.as_mut_slice().get_mut(from..to.min(keep)) {
                z.fill(0);
            }
            self.put_record(HEAD_META, rtype::DATA, FLAG_CONT, key, tmp.as_slice())
        });
        self.buf2 = tmp;
        res.map(|_| ())
    }
}
