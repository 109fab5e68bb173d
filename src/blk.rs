// SPDX-License-Identifier: GPL-2.0

//! The block backend: the engine's `Flash` over a block device (SD/eMMC/USB through their FTL,
//! a virtio disk, a loop device, mtdblock).
//!
//! The geometry comes from the ferrofs superblock that mkfs.ferrofs wrote (segment = allocation
//! unit, write unit, FTL page), checked against the device: a block device says nothing about
//! its FTL's allocation unit, so only the format knows it (the MTD backend reads it from
//! `mtd_info` instead). Rules (`FlashKind::Block`): writes are whole aligned write units,
//! sequential inside a segment (the engine's rule); `erase` is a discard where the device has
//! one, else nothing, and the format never relies on erased contents; there are no bad blocks.
//!
//! I/O (docs/kernel.md, "The block backend's I/O"):
//! - writes are queued (copied into owned pages, contiguous ones merged into one run) and sent
//!   when the engine call ends (`complete`, from the engine lock's guard), before a read of a
//!   queued range, a discard, a cache flush, or when the queue is full: one segment's runs at a
//!   time (no elevator can then put a later segment's writes first), each group under one
//!   block plug, as bios as large as the queue takes, chained so that one wait covers it. A failed
//!   batch stops every later write (`Io`): the engine goes fail-stop at its next write.
//! - reads are widened to whole aligned FTL pages (`preferred_write`) and the last one read is
//!   kept: the next record is often in it.
//! - `flush` (fsync, checkpoint: the only callers in the engine) sends the queue, waits, then
//!   issues one empty `REQ_PREFLUSH` bio.
//! - discards (`erase` of a segment about to be reused, `discard_hint` of a segment the engine
//!   freed) are queued and issued after the engine call by `DiscardBatch::issue`, outside the
//!   engine lock. A write to a segment waits for that segment's discard (or issues a queued one
//!   first): no write can be overtaken by an older discard.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::engine::flash::{Flash, FlashError, FlashKind, Geometry, ReadStatus};
use crate::engine::format::{Superblock, SB_FULL_SIZE};
use crate::kfs::{BlockDev, PageBuf, Run, PAGE_BYTES, SECTOR_SIZE};
use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::{Arc, CondVar, Mutex};
use kernel::{new_condvar, new_mutex};

/// `Superblock::kind` of a block-device format.
const KIND_BLOCK: u8 = 2;

/// Bytes of writes queued at most: a batch the engine writes beyond this is sent and waited
/// for before more is queued.
const WRITE_QUEUE_BYTES: usize = 1 << 20;

/// Separate runs (non-contiguous pieces) a batch holds at most.
const MAX_RUNS: usize = 32;

/// Bytes one read goes to the device with at most (larger reads go in pieces).
const READ_BYTES: usize = 1 << 20;

/// Discards an engine call queues; more are issued at once, under the engine lock.
const DISCARD_QUEUE: usize = 16;

/// Discards in flight outside the engine lock at once (several engine calls may be issuing).
const DISCARDS_IN_FLIGHT: usize = 64;

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

/// What the block backend sent to the device since the mount (debugfs `dev_*`).
#[derive(Clone, Copy, Default)]
pub(crate) struct IoStats {
    /// Write bios, and their bytes.
    pub(crate) write_bios: u64,
    pub(crate) write_bytes: u64,
    /// The smallest write bio (0 before the first).
    pub(crate) write_min_bytes: u64,
    /// Write bios that do not start on an FTL page (`preferred_write`) or are not a whole
    /// number of pages.
    pub(crate) writes_unaligned: u64,
    /// Batches of writes sent, and the groups they went out in (one segment's runs each,
    /// one wait each: `complete`).
    pub(crate) write_batches: u64,
    pub(crate) write_groups: u64,
    /// Read bios and their bytes; reads served from the last page read.
    pub(crate) read_bios: u64,
    pub(crate) read_bytes: u64,
    pub(crate) read_hits: u64,
    /// Cache flushes (empty `REQ_PREFLUSH` bios).
    pub(crate) flushes: u64,
    /// Segment discards issued, and issued while the engine lock was held (a write needed
    /// the segment before the discard could go out after the call).
    pub(crate) discards: u64,
    pub(crate) discards_locked: u64,
    /// The most segments written to and not written to their end or discarded, at once, as
    /// the device saw them (the engine's own count is `max_open_segments`).
    pub(crate) max_open_segments: u64,
    /// A model of a cheap FTL that caches one erase block (mtdblock): the device's writes and
    /// flushes as sent, with the erase block taken as one segment. Write-backs of the cached
    /// block because a write went to another block, because of a cache flush, and, of the
    /// former, those that left the block before its end (the block is written back again when
    /// the stream returns to it).
    pub(crate) ftl1_switch_rewrites: u64,
    pub(crate) ftl1_flush_rewrites: u64,
    pub(crate) ftl1_early_switches: u64,
    /// Of the switches, those into or out of a superblock or checkpoint-area segment.
    pub(crate) ftl1_fixed_switches: u64,
}

/// The one-block cache of the `IoStats::ftl1_*` model: the block held (`u64::MAX`: none), the
/// end of the bytes written into it, whether it is dirty.
#[derive(Clone, Copy)]
struct Ftl1 {
    block: u64,
    end: u64,
    dirty: bool,
}

impl Ftl1 {
    const EMPTY: Ftl1 = Ftl1 { block: u64::MAX, end: 0, dirty: false };

    /// Device bytes `at..at + len` written, with blocks of `bs` bytes.
    fn write(&mut self, s: &mut IoStats, at: u64, len: u64, bs: u64, fixed: &[u32]) {
        if bs == 0 || len == 0 {
            return;
        }
        let mut pos = at;
        let end = at.saturating_add(len);
        while pos < end {
            let b = pos / bs;
            let to = end.min(b.saturating_add(1).saturating_mul(bs));
            if b != self.block {
                if self.dirty {
                    s.ftl1_switch_rewrites = s.ftl1_switch_rewrites.saturating_add(1);
                    if self.end < self.block.saturating_add(1).saturating_mul(bs) {
                        s.ftl1_early_switches = s.ftl1_early_switches.saturating_add(1);
                    }
                    let is_fixed = |blk: u64| fixed.iter().any(|&f| u64::from(f) == blk);
                    if is_fixed(b) || is_fixed(self.block) {
                        s.ftl1_fixed_switches = s.ftl1_fixed_switches.saturating_add(1);
                    }
                }
                *self = Ftl1 { block: b, end: 0, dirty: false };
            }
            self.dirty = true;
            self.end = self.end.max(to);
            pos = to;
        }
    }

    /// A cache flush: the dirty block is written back and the cache emptied.
    fn flush(&mut self, s: &mut IoStats) {
        if self.dirty {
            s.ftl1_flush_rewrites = s.ftl1_flush_rewrites.saturating_add(1);
        }
        *self = Ftl1::EMPTY;
    }
}

/// A set of up to `N` segment numbers.
#[derive(Clone, Copy)]
struct SegSet<const N: usize> {
    segs: [u32; N],
    n: usize,
}

impl<const N: usize> SegSet<N> {
    const fn new() -> Self {
        SegSet { segs: [0; N], n: 0 }
    }

    fn as_slice(&self) -> &[u32] {
        self.segs.get(..self.n).unwrap_or(&[])
    }

    fn contains(&self, seg: u32) -> bool {
        self.as_slice().contains(&seg)
    }

    /// Add `seg`; false when full.
    fn push(&mut self, seg: u32) -> bool {
        match self.segs.get_mut(self.n) {
            Some(slot) => {
                *slot = seg;
                self.n += 1;
                true
            }
            None => false,
        }
    }

    /// Remove `seg`; whether it was there.
    fn remove(&mut self, seg: u32) -> bool {
        let Some(i) = self.as_slice().iter().position(|&s| s == seg) else { return false };
        let last = self.n - 1;
        self.segs.swap(i, last);
        self.n = last;
        true
    }
}

/// A bit per segment.
struct SegBits(KVVec<u64>);

impl SegBits {
    fn new(count: u32) -> Result<Self> {
        Ok(SegBits(KVVec::from_elem(0u64, (count as usize).div_ceil(64), GFP_KERNEL)?))
    }

    /// Set or clear the bit; returns its old value.
    fn put(&mut self, seg: u32, on: bool) -> bool {
        let Some(w) = self.0.as_mut_slice().get_mut(seg as usize / 64) else { return false };
        let bit = 1u64 << (seg % 64);
        let was = *w & bit != 0;
        if on {
            *w |= bit;
        } else {
            *w &= !bit;
        }
        was
    }
}

/// The discards of one block device: the ones in flight outside the engine lock (a write to
/// such a segment waits), shared by the backend and the `DiscardBatch`es it hands out.
#[pin_data]
pub(crate) struct Discarder {
    dev: BlockDev,
    /// Bytes per segment (set once the superblock is read).
    seg_bytes: AtomicU64,
    #[pin]
    inflight: Mutex<SegSet<DISCARDS_IN_FLIGHT>>,
    #[pin]
    done: CondVar,
    /// The device takes discards (`bdev_max_discard_sectors` > 0, until one fails as
    /// unsupported).
    enabled: AtomicBool,
    issued: AtomicU64,
    warned: AtomicBool,
    name: DevName,
}

impl Discarder {
    /// Discard segment `seg` now and wait. A discard only tells the FTL the old data is
    /// garbage and is issued only for free segments, so a failed one loses nothing; -EOPNOTSUPP
    /// (e.g. a loop device over a filesystem without hole punching) turns discards off.
    fn discard_now(&self, seg: u32) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        let sectors = self.seg_bytes.load(Ordering::Relaxed) / SECTOR_SIZE;
        if sectors == 0 {
            return;
        }
        match self.dev.discard(u64::from(seg) * sectors, sectors) {
            Ok(()) => {
                self.issued.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if e == -(bindings::EOPNOTSUPP as i32) => self.enabled.store(false, Ordering::Relaxed),
            Err(e) => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    pr_warn!("{}: discard of segment {} failed ({}); continuing without it\n", self.name, seg, e);
                }
            }
        }
    }

    /// Wait until no discard of `seg` is in flight.
    fn wait_for(&self, seg: u32) {
        let mut g = self.inflight.lock();
        while g.contains(seg) {
            self.done.wait(&mut g);
        }
    }
}

/// Discards queued by one engine call, to issue once the engine lock is dropped.
pub(crate) struct DiscardBatch {
    d: Arc<Discarder>,
    segs: SegSet<DISCARD_QUEUE>,
}

impl DiscardBatch {
    /// Issue the discards (each waited for), then let writers of these segments go on.
    pub(crate) fn issue(self) {
        for &s in self.segs.as_slice() {
            self.d.discard_now(s);
        }
        {
            let mut g = self.d.inflight.lock();
            for &s in self.segs.as_slice() {
                g.remove(s);
            }
        }
        self.d.done.notify_all();
    }
}

/// A block device held by a mounted superblock.
pub(crate) struct BlkFlash {
    dev: BlockDev,
    geo: Geometry,
    /// Logical block size: reads are widened to whole blocks at least.
    lbs: u32,
    /// Reads are widened to whole aligned chunks of this many bytes (the FTL page).
    rchunk: u32,
    /// The largest bio sent (the queue's limit, in whole FTL pages).
    max_bio: usize,
    /// Queued writes: their bytes (`wbytes` of `wbuf`) and where they go.
    wbuf: PageBuf,
    wbytes: usize,
    runs: [Run; MAX_RUNS],
    nruns: usize,
    /// The last read: device bytes `rstart..rstart + rlen` are in `rbuf`.
    rbuf: PageBuf,
    rstart: u64,
    rlen: usize,
    /// Discards queued by the current engine call.
    dq: SegSet<DISCARD_QUEUE>,
    disc: Arc<Discarder>,
    /// Segments discarded (or queued for it) since their last write: erasing them again is
    /// a no-op.
    clean: SegBits,
    /// Segments written to and not to their end nor discarded since (the device's view).
    open: SegBits,
    open_now: u64,
    /// A batch of writes failed: every later write and flush fails (fail-stop).
    failed: bool,
    stats: IoStats,
    ftl1: Ftl1,
    /// The superblock and checkpoint-area segments (for `IoStats::ftl1_fixed_switches`).
    fixed: [u32; 2 + 2 * crate::engine::format::MAX_CP_SEGS],
    nfixed: usize,
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
    /// Describe the block device `dev` for the engine, from the ferrofs superblock on it;
    /// `discard_dev` is a second handle on it for the discards issued outside the engine lock.
    /// Errors (with a message naming the device): `EINVAL` when there is no ferrofs superblock,
    /// it describes raw flash, or its geometry does not fit the device; `ENOMEM`; `EIO`.
    pub(crate) fn new(dev: BlockDev, discard_dev: BlockDev, name: DevName) -> Result<Self> {
        let lbs = dev.logical_block_size();
        let bytes = dev.nr_bytes();
        if lbs == 0 || !lbs.is_power_of_two() || lbs as usize > PAGE_BYTES || u64::from(lbs) % SECTOR_SIZE != 0 {
            pr_err!("{}: unsupported logical block size {}\n", name, lbs);
            return Err(EINVAL);
        }
        let disc = Arc::pin_init(
            pin_init!(Discarder {
                dev: discard_dev,
                seg_bytes: AtomicU64::new(0),
                inflight <- new_mutex!(SegSet::new(), "ferrofs_discards"),
                done <- new_condvar!("ferrofs_discard_done"),
                enabled: AtomicBool::new(false),
                issued: AtomicU64::new(0),
                warned: AtomicBool::new(false),
                name,
            }),
            GFP_KERNEL,
        )?;
        let max_bio = dev.max_bio_bytes();
        let mut f = BlkFlash {
            dev,
            // provisional: only `read_abs` runs before the real geometry is known
            geo: Geometry { kind: FlashKind::Block, segment_size: 0, segment_count: 0, write_unit: lbs, preferred_write: lbs },
            lbs,
            rchunk: lbs,
            max_bio,
            wbuf: PageBuf::new(WRITE_QUEUE_BYTES),
            wbytes: 0,
            runs: [Run { dev_at: 0, buf_at: 0, len: 0 }; MAX_RUNS],
            nruns: 0,
            rbuf: PageBuf::new(READ_BYTES),
            rstart: 0,
            rlen: 0,
            dq: SegSet::new(),
            disc,
            clean: SegBits::new(0)?,
            open: SegBits::new(0)?,
            open_now: 0,
            failed: false,
            stats: IoStats::default(),
            ftl1: Ftl1::EMPTY,
            fixed: [0; 2 + 2 * crate::engine::format::MAX_CP_SEGS],
            nfixed: 0,
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
        // the FTL page mkfs recorded (the engine refuses one that does not fit); an older
        // format: what the device writes without a read-modify-write, or 4 write units as
        // mkfs's block images assume, or one
        let pbs = dev_pbs(&f.dev);
        let fits = |p: u32| p >= wu && p.checked_rem(wu) == Some(0) && ss.checked_rem(p) == Some(0);
        let quad = wu.saturating_mul(4);
        let preferred = if sb.ftl_page != 0 && fits(sb.ftl_page) {
            sb.ftl_page
        } else if fits(pbs.max(quad)) {
            pbs.max(quad)
        } else if fits(quad) {
            quad
        } else {
            wu
        };
        f.geo = Geometry { kind: FlashKind::Block, segment_size: ss, segment_count: count, write_unit: wu, preferred_write: preferred };
        // reads widen to the page when it is small next to a read trip
        f.rchunk = if preferred as usize <= READ_BYTES / 4 { preferred.max(lbs) } else { lbs };
        // bios of whole FTL pages, as large as the queue takes
        if f.max_bio >= preferred as usize {
            f.max_bio = f.max_bio / preferred as usize * preferred as usize;
        }
        for &seg in Iterator::chain(sb.sb_segs.iter(), sb.cp_segs.iter().flat_map(|a| a.iter().take(sb.cp_area_segs as usize))) {
            if let Some(slot) = f.fixed.get_mut(f.nfixed) {
                *slot = seg;
                f.nfixed += 1;
            }
        }
        f.clean = SegBits::new(count)?;
        f.open = SegBits::new(count)?;
        f.disc.seg_bytes.store(u64::from(ss), Ordering::Relaxed);
        f.disc.enabled.store(f.dev.max_discard_sectors() > 0, Ordering::Relaxed);
        Ok(f)
    }
}

impl BlkFlash {
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
            f.read_abs(off, &mut page, bytes).ok()?;
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

    /// What was sent to the device since the mount.
    pub(crate) fn io_stats(&self) -> IoStats {
        let mut s = self.stats;
        s.discards = s.discards.saturating_add(self.disc.issued.load(Ordering::Relaxed));
        s
    }

    /// Whether a queued write overlaps device bytes `a..b`.
    fn queued_overlaps(&self, a: u64, b: u64) -> bool {
        self.runs.iter().take(self.nruns).any(|r| r.dev_at < b && a < r.dev_at.saturating_add(r.len as u64))
    }

    /// Forget the last read if it overlaps device bytes `a..b` (about to change).
    fn forget_read(&mut self, a: u64, b: u64) {
        if self.rlen > 0 && self.rstart < b && a < self.rstart.saturating_add(self.rlen as u64) {
            self.rlen = 0;
        }
    }

    /// Read `buf.len()` bytes at byte `at` of the device (of its first `limit` bytes): from the
    /// last read when it holds them, else (after sending queued writes to that range) whole
    /// aligned FTL pages around the range, at most `READ_BYTES` per trip, kept for the next
    /// read. A failed widened read is retried on the logical blocks of the range alone, so a
    /// bad spot next to the wanted bytes does not fail them.
    fn read_abs(&mut self, at: u64, buf: &mut [u8], limit: u64) -> Result<(), FlashError> {
        let end = at.checked_add(buf.len() as u64).ok_or(FlashError::InvalidRequest)?;
        if end > limit {
            return Err(FlashError::InvalidRequest);
        }
        if self.queued_overlaps(at, end) {
            self.complete()?;
        }
        let mut pos = at;
        while pos < end {
            let cached_end = self.rstart.saturating_add(self.rlen as u64);
            if self.rlen == 0 || pos < self.rstart || pos >= cached_end {
                self.fill_read(pos, end, limit)?;
            }
            let cached_end = self.rstart.saturating_add(self.rlen as u64);
            let to = end.min(cached_end);
            if to <= pos || pos < self.rstart {
                return Err(FlashError::Io);
            }
            let dst = buf.get_mut((pos - at) as usize..(to - at) as usize).ok_or(FlashError::InvalidRequest)?;
            self.rbuf.copy_out((pos - self.rstart) as usize, dst).map_err(|_| FlashError::InvalidRequest)?;
            pos = to;
        }
        Ok(())
    }

    /// Read the aligned FTL pages from `pos` towards `end` (at most `READ_BYTES`) into the read
    /// buffer.
    fn fill_read(&mut self, pos: u64, end: u64, limit: u64) -> Result<(), FlashError> {
        let unit = u64::from(self.rchunk.max(self.lbs).max(1));
        let lbs = u64::from(self.lbs.max(1));
        let a = pos - pos % unit;
        let b = end.div_ceil(unit).saturating_mul(unit).min(a.saturating_add(READ_BYTES as u64)).min(limit);
        let b = b.div_ceil(lbs).saturating_mul(lbs).min(limit - limit % lbs);
        if b <= a {
            return Err(FlashError::InvalidRequest);
        }
        self.rlen = 0;
        match self.read_into(a, (b - a) as usize) {
            Ok(()) => {
                self.rstart = a;
                self.rlen = (b - a) as usize;
                return Ok(());
            }
            Err(_) if unit > lbs => {}
            Err(e) => return Err(e),
        }
        // only the logical blocks of the wanted bytes
        let a2 = pos - pos % lbs;
        let b2 = end.div_ceil(lbs).saturating_mul(lbs).min(a2.saturating_add(READ_BYTES as u64));
        self.read_into(a2, (b2 - a2) as usize)?;
        self.rstart = a2;
        self.rlen = (b2 - a2) as usize;
        Ok(())
    }

    /// One trip to the device: `len` bytes at `at` into the start of the read buffer.
    fn read_into(&mut self, at: u64, len: usize) -> Result<(), FlashError> {
        self.rbuf.reserve(len).map_err(|_| FlashError::Io)?;
        let run = [Run { dev_at: at, buf_at: 0, len }];
        match self.dev.submit_runs(false, &run, &self.rbuf, self.max_bio) {
            Ok(bios) => {
                self.stats.read_bios = self.stats.read_bios.saturating_add(bios);
                self.stats.read_bytes = self.stats.read_bytes.saturating_add(len as u64);
                Ok(())
            }
            Err(e) => {
                pr_warn!("{}: read failed ({}) at byte {} ({} bytes)\n", self.name, e, at, len);
                Err(read_error(e))
            }
        }
    }

    /// Whether a write at device byte `at` continues the last queued run.
    fn continues(&self, at: u64) -> bool {
        self.nruns > 0 && self.runs.get(self.nruns - 1).is_some_and(|r| r.dev_at.saturating_add(r.len as u64) == at)
    }

    /// Queue `data` (at most `WRITE_QUEUE_BYTES`) for device byte `at`: appended to the last
    /// run when it continues it, else a new run. A full queue is sent first.
    fn queue_write(&mut self, at: u64, data: &[u8]) -> Result<(), FlashError> {
        let len = data.len();
        if self.wbytes.saturating_add(len) > WRITE_QUEUE_BYTES || (self.nruns == MAX_RUNS && !self.continues(at)) {
            self.complete()?;
        }
        if self.wbuf.reserve(self.wbytes + len).is_err() {
            // no memory to grow the queue: send what is queued, then this alone
            self.complete()?;
            self.wbuf.reserve(len).map_err(|_| FlashError::Io)?;
        }
        self.wbuf.fill_at(self.wbytes, data).map_err(|_| FlashError::InvalidRequest)?;
        if self.continues(at) {
            if let Some(r) = self.runs.get_mut(self.nruns - 1) {
                r.len += len;
            }
        } else {
            let r = self.runs.get_mut(self.nruns).ok_or(FlashError::InvalidRequest)?;
            *r = Run { dev_at: at, buf_at: self.wbytes, len };
            self.nruns += 1;
        }
        self.wbytes += len;
        Ok(())
    }

    /// Send the queued writes and wait for them: one segment's runs at a time, each group under
    /// one plug as large bios with one wait. After a failure every later write and flush
    /// fails: the engine stops at its next write, so the records it believed written are never
    /// relied on (fsync reports the error).
    ///
    /// Why a wait per segment: the elevator of a single-queue device (mq-deadline, the default
    /// for mtdblock, SD and eMMC) dispatches what a plug holds in sector order from where its
    /// last write ended, so a batch that finishes one segment and starts a lower-addressed one
    /// could reach the device start-of-the-new-one first; a one-erase-block FTL (mtdblock,
    /// cheap cards) then writes both erase blocks back twice. Inside one segment the runs are
    /// ascending (the engine writes a segment sequentially), which no elevator reorders.
    pub(crate) fn complete(&mut self) -> Result<(), FlashError> {
        if self.nruns == 0 {
            return Ok(());
        }
        let n = self.nruns;
        self.nruns = 0;
        let wbytes = core::mem::replace(&mut self.wbytes, 0);
        let runs = self.runs.get(..n).ok_or(FlashError::InvalidRequest)?;
        let ss = u64::from(self.geo.segment_size).max(1);
        let mut r = Ok(0u64);
        let mut first = 0usize;
        while first < n {
            // the group: `runs[first..last]`, ascending runs inside one segment
            let seg = runs.get(first).map(|x| x.dev_at / ss);
            let mut last = first + 1;
            while let (Some(prev), Some(next)) = (runs.get(last - 1), runs.get(last)) {
                if Some(next.dev_at / ss) != seg || next.dev_at < prev.dev_at.saturating_add(prev.len as u64) {
                    break;
                }
                last += 1;
            }
            let group = runs.get(first..last).ok_or(FlashError::InvalidRequest)?;
            match self.dev.submit_runs(true, group, &self.wbuf, self.max_bio) {
                Ok(b) => r = r.map(|t| t + b),
                Err(e) => {
                    r = Err(e);
                    break;
                }
            }
            self.stats.write_groups = self.stats.write_groups.saturating_add(1);
            first = last;
        }
        let chunk = u64::from(self.geo.preferred_write.max(1));
        let max_bio = self.max_bio.max(1) as u64;
        for run in runs {
            // the bios `submit_runs` cut the run into
            let mut off = 0u64;
            while off < run.len as u64 {
                let n = (run.len as u64 - off).min(max_bio);
                let at = run.dev_at + off;
                let s = &mut self.stats;
                s.write_bios = s.write_bios.saturating_add(1);
                s.write_bytes = s.write_bytes.saturating_add(n);
                s.write_min_bytes = if s.write_min_bytes == 0 { n } else { s.write_min_bytes.min(n) };
                if at % chunk != 0 || n % chunk != 0 {
                    s.writes_unaligned = s.writes_unaligned.saturating_add(1);
                }
                off += n;
            }
            let fixed = self.fixed.get(..self.nfixed).unwrap_or(&[]);
            self.ftl1.write(&mut self.stats, run.dev_at, run.len as u64, u64::from(self.geo.segment_size), fixed);
        }
        self.stats.write_batches = self.stats.write_batches.saturating_add(1);
        match r {
            Ok(_) => Ok(()),
            Err(e) => {
                let first = runs.first().map(|r| r.dev_at).unwrap_or(0);
                pr_err!("{}: write error ({}) in a batch of {} bytes from byte {}: ferrofs stops writing (read-only until remounted)\n", self.name, e, wbytes, first);
                self.failed = true;
                Err(FlashError::Io)
            }
        }
    }

    /// The discards queued by this engine call, marked in flight, to issue once the engine
    /// lock is dropped (`DiscardBatch::issue`). What does not fit in flight is issued now.
    pub(crate) fn take_discards(&mut self) -> Option<DiscardBatch> {
        if self.dq.n == 0 {
            return None;
        }
        let queued = core::mem::replace(&mut self.dq, SegSet::new());
        let mut batch = SegSet::new();
        let mut now = SegSet::<DISCARD_QUEUE>::new();
        {
            let mut g = self.disc.inflight.lock();
            for &s in queued.as_slice() {
                if !g.contains(s) && g.push(s) {
                    batch.push(s);
                } else {
                    now.push(s);
                }
            }
        }
        for &s in now.as_slice() {
            self.disc.wait_for(s);
            self.discard_locked(s);
        }
        if batch.n == 0 {
            return None;
        }
        Some(DiscardBatch { d: self.disc.clone(), segs: batch })
    }

    /// Issue the discard of `seg` under the engine lock (and wait).
    fn discard_locked(&mut self, seg: u32) {
        self.disc.discard_now(seg);
        self.stats.discards_locked = self.stats.discards_locked.saturating_add(1);
    }

    /// Queue a discard of `seg` (a segment the engine is done with), unless it was discarded
    /// since its last write or the device takes none. Queued writes to it go out first, so
    /// the discard cannot overtake them.
    fn queue_discard(&mut self, seg: u32) -> Result<(), FlashError> {
        let ss = u64::from(self.geo.segment_size);
        let a = u64::from(seg) * ss;
        if self.queued_overlaps(a, a + ss) {
            self.complete()?;
        }
        self.forget_read(a, a + ss);
        self.note_closed(seg);
        if !self.disc.enabled.load(Ordering::Relaxed) || self.clean.put(seg, true) {
            return Ok(());
        }
        if !self.dq.contains(seg) && !self.dq.push(seg) {
            self.disc.wait_for(seg);
            self.discard_locked(seg);
        }
        Ok(())
    }

    /// Before a write to `seg`: its discard (queued by this call: issued now; in flight
    /// outside the lock: waited for) completes first.
    fn before_write(&mut self, seg: u32) {
        if self.dq.remove(seg) {
            self.disc.wait_for(seg);
            self.discard_locked(seg);
        } else {
            self.disc.wait_for(seg);
        }
        self.clean.put(seg, false);
    }

    /// The device's view of open segments: a write that stops short of the segment's end
    /// leaves it open, one that reaches the end closes it.
    fn note_written(&mut self, seg: u32, end: u64) {
        if end >= u64::from(self.geo.segment_size) {
            self.note_closed(seg);
        } else if !self.open.put(seg, true) {
            self.open_now += 1;
            self.stats.max_open_segments = self.stats.max_open_segments.max(self.open_now);
        }
    }

    fn note_closed(&mut self, seg: u32) {
        if self.open.put(seg, false) {
            self.open_now = self.open_now.saturating_sub(1);
        }
    }
}

impl Drop for BlkFlash {
    fn drop(&mut self) {
        // queued writes reach the device before their pages are freed (every engine call
        // ends with `complete`, so this finds nothing in the normal paths)
        let _ = self.complete();
    }
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
        let hits = self.rlen > 0 && at >= self.rstart && at + buf.len() as u64 <= self.rstart + self.rlen as u64;
        self.read_abs(at, buf, self.geo.device_bytes())?;
        if hits {
            self.stats.read_hits = self.stats.read_hits.saturating_add(1);
        }
        Ok(ReadStatus::Clean)
    }

    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        let at = self.addr(seg, offset, buf.len())?;
        let wu = self.geo.write_unit;
        if offset.checked_rem(wu) != Some(0) || (buf.len() as u64).checked_rem(u64::from(wu)) != Some(0) {
            return Err(FlashError::InvalidRequest);
        }
        if self.failed {
            return Err(FlashError::Io);
        }
        if buf.is_empty() {
            return Ok(());
        }
        self.before_write(seg);
        let end = at + buf.len() as u64;
        self.forget_read(at, end);
        // pieces of whole write units that fit the queue
        let piece = (WRITE_QUEUE_BYTES / wu as usize).max(1) * wu as usize;
        let mut done = 0usize;
        for part in buf.chunks(piece) {
            self.queue_write(at + done as u64, part)?;
            done += part.len();
        }
        self.note_written(seg, u64::from(offset) + buf.len() as u64);
        Ok(())
    }

    fn erase(&mut self, seg: u32) -> Result<(), FlashError> {
        self.addr(seg, 0, self.geo.segment_size as usize)?;
        if self.failed {
            return Err(FlashError::Io);
        }
        self.queue_discard(seg)
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
        self.complete()?;
        if self.failed {
            return Err(FlashError::Io);
        }
        self.stats.flushes = self.stats.flushes.saturating_add(1);
        self.ftl1.flush(&mut self.stats);
        match self.dev.flush() {
            Ok(()) => Ok(()),
            Err(e) => {
                pr_err!("{}: cache flush failed ({}): ferrofs stops writing (read-only until remounted)\n", self.name, e);
                self.failed = true;
                Err(FlashError::Io)
            }
        }
    }

    fn discard_hint(&mut self, seg: u32) {
        if self.addr(seg, 0, 0).is_ok() && !self.failed {
            let _ = self.queue_discard(seg);
        }
    }
}

/// The physical block size when it is a sane power of two, else 0.
fn dev_pbs(dev: &BlockDev) -> u32 {
    let p = dev.physical_block_size();
    if p.is_power_of_two() && p <= 1 << 20 { p } else { 0 }
}
