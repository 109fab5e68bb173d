//! File data: 4 KiB blocks keyed by block index (holes are missing blocks), read, write
//! (short at a full filesystem), cutting at a size, SEEK_DATA/SEEK_HOLE, symlink targets.

use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{
    kind, rtype, Inode, Key, Timespec, BLOCK_SIZE, FLAG_CONT, HEAD_HOT, HEAD_META, MAX_FILE_SIZE,
    S_IFLNK, S_IFMT,
};
use crate::engine::fs::Engine;
use crate::engine::platform::{FallibleVec, Platform};
use crate::engine::space::RESERVE_SEGS;

/// Data block size as u64.
const BS: u64 = BLOCK_SIZE as u64;

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
        // short write when the filesystem is nearly full
        let room = self
            .capacity_bytes()
            .saturating_sub(self.committed_bytes())
            .saturating_sub(self.reserved_space())
            .saturating_sub(4096);
        if room == 0 && !data.is_empty() {
            return Err(Error::NoSpace);
        }
        let data = data.get(..data.len().min(usize::try_from(room).unwrap_or(usize::MAX))).ok_or(Error::Invalid)?;
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
