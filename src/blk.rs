// SPDX-License-Identifier: GPL-2.0

//! The block backend: the engine's `Flash` over a block device (SD/eMMC/USB through their FTL,
//! a virtio disk, a loop device, mtdblock), with synchronous bios.
//!
//! The geometry comes from the ferrofs superblock that mkfs.ferrofs wrote (segment = allocation
//! unit, write unit), checked against the device: a block device says nothing about its FTL's
//! allocation unit, so only the format knows it (the MTD backend reads it from `mtd_info`
//! instead). Rules (`FlashKind::Block`): writes are whole aligned write units, sequential inside
//! a segment (the engine's rule; each is one synchronous bio); `erase` is a discard where the
//! device has one, else nothing, and the format never relies on erased contents; there are no
//! bad blocks; `flush` is a cache flush (`REQ_PREFLUSH`), issued only when the engine calls it
//! (fsync, checkpoint).

use crate::engine::flash::{Flash, FlashError, FlashKind, Geometry, ReadStatus};
use crate::engine::format::{Superblock, SB_FULL_SIZE};
use crate::kfs::{BlockDev, PageBuf, PAGE_BYTES, SECTOR_SIZE};
use kernel::bindings;
use kernel::prelude::*;

/// `Superblock::kind` of a block-device format.
const KIND_BLOCK: u8 = 2;

/// A short device name for messages (`sb->s_id`: "vda", "loop0", "mtdblock0").
#[derive(Clone, Copy)]
pub(crate) struct DevName {
    buf: [u8; 32],
    len: usize,
}

impl DevName {
    /// The name from `bytes` (cut to 32 bytes; anything but printable ASCII shown as '?').
    pub(crate) fn new(bytes: &[u8]) -> Self {
        let mut buf = [0u8; 32];
        let len = bytes.len().min(buf.len());
        for (d, &s) in buf.iter_mut().zip(bytes.iter()) {
            *d = if s.is_ascii_graphic() { s } else { b'?' };
        }
        DevName { buf, len }
    }

    /// `mtdN`.
    pub(crate) fn mtd(index: i32) -> Self {
        let mut n = DevName { buf: [0u8; 32], len: 0 };
        let mut w = crate::super_::ByteWriter { buf: &mut n.buf, len: 0 };
        let _ = core::fmt::write(&mut w, format_args!("mtd{}", index));
        n.len = w.len;
        n
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

impl core::fmt::Display for DevName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // printable ASCII only (see `new`), so always UTF-8
        f.write_str(core::str::from_utf8(self.as_bytes()).unwrap_or("?"))
    }
}

/// A block device held by a mounted superblock.
pub(crate) struct BlkFlash {
    dev: BlockDev,
    geo: Geometry,
    /// Logical block size: reads are widened to whole blocks.
    lbs: u32,
    /// Bounce pages for every bio (grown on demand up to one bio).
    bounce: PageBuf,
    /// Discards are issued (`bdev_max_discard_sectors` > 0) until one fails as unsupported.
    discard: bool,
    pub(crate) name: DevName,
}

/// A read error: -EIO (the device could not read the range), -EBADMSG and -EILSEQ (a
/// checksum or integrity error) mean the data is lost (`Uncorrectable`, so a file read returns
/// EIO as on MTD); anything else (-ENOMEM, -ETIMEDOUT, -ENOLINK...) is an I/O error.
fn read_error(ret: i32) -> FlashError {
    if ret == -(bindings::EIO as i32) || ret == -(bindings::EBADMSG as i32) || ret == -(bindings::EILSEQ as i32) {
        FlashError::Uncorrectable
    } else {
        FlashError::Io
    }
}

impl BlkFlash {
    /// Describe the block device `dev` for the engine, from the ferrofs superblock on it.
    /// Errors (with a message naming the device): `EINVAL` when there is no ferrofs superblock,
    /// it describes raw flash, or its geometry does not fit the device; `ENOMEM`; `EIO`.
    pub(crate) fn new(dev: BlockDev, name: DevName) -> Result<Self> {
        let lbs = dev.logical_block_size();
        let bytes = dev.nr_bytes();
        if lbs == 0 || !lbs.is_power_of_two() || lbs as usize > PAGE_BYTES || u64::from(lbs) % SECTOR_SIZE != 0 {
            pr_err!("{}: unsupported logical block size {}\n", name, lbs);
            return Err(EINVAL);
        }
        let mut f = BlkFlash {
            dev,
            // provisional: only `read_abs` runs before the real geometry is known
            geo: Geometry { kind: FlashKind::Block, segment_size: 0, segment_count: 0, write_unit: lbs, preferred_write: lbs },
            lbs,
            bounce: PageBuf::new(),
            discard: false,
            name,
        };
        let sb = f.find_superblock(bytes)?;
        if sb.kind != KIND_BLOCK {
            pr_err!("{}: the ferrofs filesystem on this block device was made for raw flash (NAND/NOR): mount its MTD device (mtdN), or run mkfs.ferrofs on the block device\n", name);
            return Err(EINVAL);
        }
        let (ss, wu, count) = (sb.segment_size, sb.write_unit, sb.segment_count);
        let fs_bytes = u64::from(ss).checked_mul(u64::from(count));
        let bad = wu == 0 || wu.checked_rem(lbs) != Some(0) || ss == 0 || ss.checked_rem(wu) != Some(0) || count == 0;
        match fs_bytes {
            Some(n) if !bad && n <= bytes => {}
            _ if bad => {
                pr_err!("{}: unsupported geometry in the ferrofs superblock: segment size {}, write unit {} (the device's logical block size is {})\n", name, ss, wu, lbs);
                return Err(EINVAL);
            }
            _ => {
                pr_err!("{}: the filesystem ({} segments of {} bytes) is larger than the device ({} bytes): was the device or image truncated?\n", name, count, ss, bytes);
                return Err(EINVAL);
            }
        }
        // what the FTL writes without a read-modify-write, when it fits the segment; else 4
        // write units as mkfs's block images assume, else one
        let pbs = dev_pbs(&f.dev);
        let fits = |p: u32| p >= wu && p.checked_rem(wu) == Some(0) && ss.checked_rem(p) == Some(0);
        let quad = wu.saturating_mul(4);
        let preferred = if fits(pbs.max(quad)) {
            pbs.max(quad)
        } else if fits(quad) {
            quad
        } else {
            wu
        };
        f.geo = Geometry { kind: FlashKind::Block, segment_size: ss, segment_count: count, write_unit: wu, preferred_write: preferred };
        f.discard = f.dev.max_discard_sectors() > 0;
        Ok(f)
    }

    /// The superblock: at byte 0, else (segment 0 unreadable or damaged) its second copy at the
    /// start of segment 1, which mkfs places at `m * 2^k` for segment sizes 16 KiB..64 MiB (as
    /// the userspace tools probe). A copy counts only at a multiple of its own segment size.
    fn find_superblock(&mut self, bytes: u64) -> Result<Superblock> {
        let mut page = [0u8; SB_FULL_SIZE];
        let mut bad_format = true;
        let mut try_at = |f: &mut Self, off: u64| -> Option<Superblock> {
            if off.checked_add(SB_FULL_SIZE as u64)? > bytes {
                return None;
            }
            f.read_abs(off, &mut page).ok()?;
            match Superblock::decode(&page) {
                Ok(sb) if sb.segment_size != 0 && off % u64::from(sb.segment_size) == 0 => Some(sb),
                Ok(_) => None,
                Err(crate::engine::error::Error::BadFormat) => None,
                Err(_) => {
                    bad_format = false;
                    None
                }
            }
        };
        if let Some(sb) = try_at(self, 0) {
            return Ok(sb);
        }
        for k in 14..=26u32 {
            for m in 1..=4u64 {
                if let Some(sb) = try_at(self, m << k) {
                    pr_warn!("{}: the first ferrofs superblock is unreadable or damaged: using its copy at byte {}\n", self.name, m << k);
                    return Ok(sb);
                }
            }
        }
        if bad_format {
            pr_err!("{}: no ferrofs filesystem found (run mkfs.ferrofs), or its version is not supported\n", self.name);
        } else {
            pr_err!("{}: cannot mount: the ferrofs superblock is corrupt (bad checksum)\n", self.name);
        }
        Err(EINVAL)
    }

    /// Whether the block device accepts writes (`KFlash::check_writeable` refuses a read-write
    /// mount of one that does not).
    pub(crate) fn writeable(&self) -> bool {
        !self.dev.read_only()
    }

    /// Byte address of `offset` in `seg`, checked against the geometry.
    fn addr(&self, seg: u32, offset: u32, len: usize) -> Result<u64, FlashError> {
        self.geo.byte_addr(seg, offset, len).ok_or(FlashError::InvalidRequest)
    }

    /// Read `buf.len()` bytes at byte `at` of the device: whole logical blocks into the bounce
    /// pages, one bio per at most `BIO_MAX_VECS` pages, then the wanted bytes out.
    fn read_abs(&mut self, at: u64, buf: &mut [u8]) -> Result<(), FlashError> {
        let lbs = u64::from(self.lbs.max(1));
        let end = at.checked_add(buf.len() as u64).ok_or(FlashError::InvalidRequest)?;
        let mut pos = at - at % lbs;
        let max = self.bounce.max_bytes() as u64;
        while pos < end {
            let chunk_end = end.div_ceil(lbs).saturating_mul(lbs).min(pos.saturating_add(max));
            let n = (chunk_end - pos) as usize;
            self.bounce.reserve(n).map_err(|_| FlashError::Io)?;
            if let Err(e) = self.dev.submit_sync(false, pos / SECTOR_SIZE, &mut self.bounce, n) {
                pr_warn!("{}: read failed ({}) at byte {} ({} bytes)\n", self.name, e, pos, n);
                return Err(read_error(e));
            }
            // the part of [pos, chunk_end) inside [at, end)
            let from = pos.max(at);
            let to = chunk_end.min(end);
            let dst = buf.get_mut((from - at) as usize..(to - at) as usize).ok_or(FlashError::InvalidRequest)?;
            self.bounce.copy_out((from - pos) as usize, dst).map_err(|_| FlashError::InvalidRequest)?;
            pos = chunk_end;
        }
        Ok(())
    }
}

/// The physical block size when it is a sane power of two, else 0.
fn dev_pbs(dev: &BlockDev) -> u32 {
    let p = dev.physical_block_size();
    if p.is_power_of_two() && p <= 1 << 20 { p } else { 0 }
}

impl Flash for BlkFlash {
    fn geometry(&self) -> Geometry {
        self.geo
    }

    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> Result<ReadStatus, FlashError> {
        let at = self.addr(seg, offset, buf.len())?;
        if buf.is_empty() {
            return Ok(ReadStatus::Clean);
        }
        self.read_abs(at, buf)?;
        Ok(ReadStatus::Clean)
    }

    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        let at = self.addr(seg, offset, buf.len())?;
        let wu = self.geo.write_unit;
        if offset.checked_rem(wu) != Some(0) || (buf.len() as u64).checked_rem(u64::from(wu)) != Some(0) {
            return Err(FlashError::InvalidRequest);
        }
        // one bio per call, split only above `BIO_MAX_VECS` pages (the engine's writes are
        // `preferred_write` batches, far below that)
        let max = self.bounce.max_bytes();
        let mut done = 0usize;
        for chunk in buf.chunks(max) {
            self.bounce.reserve(chunk.len()).map_err(|_| FlashError::Io)?;
            self.bounce.fill(chunk).map_err(|_| FlashError::InvalidRequest)?;
            let pos = at + done as u64;
            if let Err(e) = self.dev.submit_sync(true, pos / SECTOR_SIZE, &mut self.bounce, chunk.len()) {
                pr_err!("{}: write error ({}) at segment {} offset {} ({} bytes): ferrofs stops writing (read-only until remounted)\n", self.name, e, seg, offset as usize + done, chunk.len());
                return Err(FlashError::Io);
            }
            done += chunk.len();
        }
        Ok(())
    }

    fn erase(&mut self, seg: u32) -> Result<(), FlashError> {
        let at = self.addr(seg, 0, self.geo.segment_size as usize)?;
        if !self.discard {
            return Ok(());
        }
        // A discard only tells the FTL the old data is garbage: nothing relies on it, so a
        // failed one loses nothing. Unsupported (-EOPNOTSUPP, e.g. a loop device over a file
        // system without hole punching) turns discards off for this mount.
        if let Err(e) = self.dev.discard(at / SECTOR_SIZE, u64::from(self.geo.segment_size) / SECTOR_SIZE) {
            if e == -(bindings::EOPNOTSUPP as i32) {
                self.discard = false;
            } else {
                pr_warn!("{}: discard of segment {} failed ({}); continuing without it\n", self.name, seg, e);
            }
        }
        Ok(())
    }

    fn is_bad(&mut self, seg: u32) -> Result<bool, FlashError> {
        self.addr(seg, 0, 0)?;
        Ok(false)
    }

    fn mark_bad(&mut self, seg: u32) -> Result<(), FlashError> {
        // the FTL remaps failing blocks itself; nothing to record
        self.addr(seg, 0, 0)?;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), FlashError> {
        match self.dev.flush() {
            Ok(()) => Ok(()),
            Err(e) => {
                pr_err!("{}: cache flush failed ({}): ferrofs stops writing (read-only until remounted)\n", self.name, e);
                Err(FlashError::Io)
            }
        }
    }
}
