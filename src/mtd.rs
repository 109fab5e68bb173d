// SPDX-License-Identifier: GPL-2.0

//! The MTD backend: the engine's `Flash` over a raw NAND/NOR `struct mtd_info`.

use crate::engine::flash::{Flash, FlashError, FlashKind, Geometry, PairInfo, Pairing, PairingScheme, ReadStatus};
use crate::engine::platform::FallibleVec;
use crate::kfs::{KthreadCtx, MtdDev, Worker, WorkerThread, MTD_MLCNANDFLASH, MTD_NANDFLASH};
use crate::kplatform::KernelVec;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::{Arc, CondVar, Mutex};
use kernel::{new_condvar, new_mutex};
/// The engine writes in units of at least this many bytes, even on bit-programmable media.
const MIN_WRITE_UNIT: u32 = 512;

/// An MTD device held by a mounted superblock (`sb->s_mtd`, released by `kill_mtd_super`).
pub(crate) struct MtdFlash {
    mtd: MtdDev,
    geo: Geometry,
    /// MTD index, for messages.
    pub(crate) index: i32,
    /// The device accepts writes and erases (`MTD_WRITEABLE`): false for a partition marked
    /// read-only or one that does not start and end on erase-block boundaries.
    writeable: bool,
    /// MLC NAND: the page pairing, when it is one the engine knows (see [`identify_pairing`]).
    pairing: Option<Pairing>,
    /// Time spent in MTD calls since the mount (`MtdTimes`, debugfs `mtd_*`), but for the
    /// write-behind thread's programs (counted in `Behind`).
    times: MtdTimes,
    /// The write-behind queue and the thread that makes its programs; `None` when the thread
    /// could not be started (every program is then made in the call).
    behind: Option<WorkerThread<Behind>>,
}

/// Programs queued by `write_behind` and not yet taken back by the engine thread, at most.
/// The engine fills one page at a time, so a few are enough to overlap its next operations
/// with the programs; the engine waits when all are in use.
const BEHIND_SLOTS: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// Free (its buffer kept for reuse).
    Free,
    /// Waiting for the thread.
    Queued,
    /// Being programmed: the thread holds the bytes.
    InFlight,
    /// Programmed; the slot is freed by the engine thread's next call.
    Done,
    /// Not programmed: the program failed, or an earlier one of its segment did, or (`Io`) the
    /// device failed. Kept, and read, until the engine takes the bytes (`forget_failed`).
    Failed,
}

struct Slot {
    seg: u32,
    off: u32,
    /// Device byte address of `off`.
    at: i64,
    /// FIFO position (a slot with a lower one was queued earlier).
    order: u64,
    /// Bytes to program (`data` holds them but while the thread programs them).
    len: u32,
    data: KernelVec<u8>,
    st: SlotState,
}

struct BehindQ {
    slots: [Slot; BEHIND_SLOTS],
    next_order: u64,
    /// The device failed a program with an error that says nothing about the block: every
    /// later call fails (the engine stops writing).
    io_error: bool,
    /// The owner is going away: the thread ends once nothing is queued.
    stop: bool,
}

impl BehindQ {
    /// Whether a program of `seg` failed and was not taken back yet.
    fn has_failed(&self, seg: u32) -> bool {
        self.slots.iter().any(|s| s.st == SlotState::Failed && s.seg == seg)
    }

    fn busy(&self) -> bool {
        self.slots.iter().any(|s| matches!(s.st, SlotState::Queued | SlotState::InFlight))
    }

    /// Free the programmed slots (engine thread).
    fn reap(&mut self) {
        for s in self.slots.iter_mut() {
            if s.st == SlotState::Done {
                s.st = SlotState::Free;
            }
        }
    }

    /// The slot holding byte `pos` of `seg`, or else where the next slot of `seg` after it
    /// starts.
    fn find(&self, seg: u32, pos: u32) -> (Option<usize>, Option<u32>) {
        let mut next: Option<u32> = None;
        for (i, s) in self.slots.iter().enumerate() {
            if s.st == SlotState::Free || s.seg != seg {
                continue;
            }
            if s.off <= pos && pos < s.off.saturating_add(s.len) {
                return (Some(i), None);
            }
            if s.off > pos {
                next = Some(next.map_or(s.off, |n| n.min(s.off)));
            }
        }
        (None, next)
    }
}

/// A device's write-behind queue, shared with its thread.
#[pin_data]
pub(crate) struct Behind {
    mtd: MtdDev,
    index: i32,
    #[pin]
    q: Mutex<BehindQ>,
    /// Signalled when a slot is queued (for the thread) and when a program ends (for the
    /// engine thread waiting for one).
    #[pin]
    cv: CondVar,
    writes: AtomicU64,
    write_ns: AtomicU64,
}

/// Requests to the MTD device and the time spent in them (ns, `ktime_get`), since the mount:
/// on nandsim with timing, the busy-waits of its page reads and programs are in here.
#[derive(Clone, Copy, Default)]
pub(crate) struct MtdTimes {
    pub(crate) reads: u64,
    pub(crate) read_ns: u64,
    pub(crate) writes: u64,
    pub(crate) write_ns: u64,
    pub(crate) erase_ns: u64,
}

impl Worker for Behind {
    /// Make the queued programs, oldest first, without the engine lock.
    fn run(&self, t: &KthreadCtx) {
        loop {
            let (i, at, data) = {
                let mut g = self.q.lock();
                loop {
                    let oldest = g.slots.iter().enumerate().filter(|(_, s)| s.st == SlotState::Queued).min_by_key(|(_, s)| s.order).map(|(i, _)| i);
                    if let Some(s) = oldest.and_then(|i| g.slots.get_mut(i).map(|s| (i, s))) {
                        let (i, s) = s;
                        s.st = SlotState::InFlight;
                        break (i, s.at, core::mem::replace(&mut s.data, KernelVec::new()));
                    }
                    if g.stop {
                        drop(g);
                        // `kthread_stop` needs the thread until it asks
                        while t.sleep(1000) {}
                        return;
                    }
                    // (a kthread gets no signals: the result says nothing)
                    let _ = self.cv.wait_interruptible(&mut g);
                }
            };
            let t0 = crate::super_::now_ns();
            let (ret, retlen) = self.mtd.write(at, data.as_slice());
            self.writes.fetch_add(1, Ordering::Relaxed);
            self.write_ns.fetch_add(crate::super_::now_ns().saturating_sub(t0), Ordering::Relaxed);
            let ok = ret == 0 && retlen == data.len();
            let mut g = self.q.lock();
            let Some(s) = g.slots.get_mut(i) else { continue };
            s.data = data;
            s.st = if ok { SlotState::Done } else { SlotState::Failed };
            let (seg, off, order) = (s.seg, s.off, s.order);
            if !ok {
                let e = media_error(ret, FlashError::WriteFailed);
                if e == FlashError::WriteFailed {
                    pr_warn!("mtd{}: program failed ({}) at segment {} offset {} (write-behind): relocating its data and retiring the block\n", self.index, ret, seg, off);
                } else {
                    pr_err!("mtd{}: write error ({}, {} bytes) at segment {} offset {} (write-behind): not a media error; ferrofs stops writing (read-only until remounted)\n", self.index, ret, retlen, seg, off);
                    g.io_error = true;
                }
                // nothing more is programmed in that block
                for s in g.slots.iter_mut() {
                    if s.st == SlotState::Queued && s.seg == seg && s.order > order {
                        s.st = SlotState::Failed;
                    }
                }
            }
            drop(g);
            self.cv.notify_all();
        }
    }
}

impl Behind {
    /// Wait until nothing is queued or in flight, then free the programmed slots. `Io` when the
    /// device failed a program with a non-media error.
    fn settle(&self) -> Result<(), FlashError> {
        let mut g = self.q.lock();
        while g.busy() {
            self.cv.wait(&mut g);
        }
        g.reap();
        if g.io_error {
            return Err(FlashError::Io);
        }
        Ok(())
    }

    /// Whether a write-behind program of `seg` failed and was not taken back yet.
    fn seg_failed(&self, seg: u32) -> bool {
        self.q.lock().has_failed(seg)
    }
}

impl MtdFlash {
    /// Describe `mtd` for the engine; `worker` is a second handle on it for the write-behind
    /// thread.
    pub(crate) fn new(mtd: MtdDev, worker: MtdDev) -> Result<Self> {
        let (size, erase, write, ty, index, writeable) = (mtd.size(), mtd.erasesize(), mtd.writesize(), mtd.kind(), mtd.index(), mtd.writeable());
        let kind = match ty {
            MTD_NANDFLASH => FlashKind::Nand,
            // the engine pads for paired pages when it knows the pairing (`FlashKind::MlcNand`)
            MTD_MLCNANDFLASH => FlashKind::MlcNand,
            // NOR, and the bit-programmable RAM/ROM devices (block2mtd: MTD_RAM)
            _ => FlashKind::Nor,
        };
        let write_unit = write.max(MIN_WRITE_UNIT);
        if erase == 0 || erase % write_unit != 0 {
            pr_err!("mtd{}: unsupported geometry: erase size {} is not a multiple of {}\n", index, erase, write_unit);
            return Err(EINVAL);
        }
        let count = size / u64::from(erase);
        let segment_count = u32::try_from(count).map_err(|_| EFBIG)?;
        let pairing = if kind == FlashKind::MlcNand && write_unit == write { identify_pairing(&mtd, erase / write) } else { None };
        if kind == FlashKind::MlcNand && pairing.is_none() {
            pr_warn!("mtd{}: MLC NAND with {} pages sharing a cell in a pairing scheme ferrofs does not know (dist3, adjacent pairs)\n", index, mtd.pairing_groups());
        }
        let behind = if writeable { start_behind(worker, index) } else { None };
        Ok(MtdFlash {
            mtd,
            geo: Geometry { kind, segment_size: erase, segment_count, write_unit, preferred_write: write_unit },
            index,
            writeable,
            pairing,
            times: MtdTimes::default(),
            behind,
        })
    }

    /// Requests to the device and the time in them, the write-behind thread's included.
    pub(crate) fn times(&self) -> MtdTimes {
        let mut t = self.times;
        if let Some(b) = &self.behind {
            let b = b.data();
            t.writes = t.writes.saturating_add(b.writes.load(Ordering::Relaxed));
            t.write_ns = t.write_ns.saturating_add(b.write_ns.load(Ordering::Relaxed));
        }
        t
    }

    /// Wait for the write-behind programs (see `Behind::settle`).
    fn settle_behind(&self) -> Result<(), FlashError> {
        match &self.behind {
            Some(b) => b.data().settle(),
            None => Ok(()),
        }
    }

    /// Whether the MTD device accepts writes (`MTD_WRITEABLE` set). On one that does not, every
    /// program and erase would fail with -EROFS, so `KFlash::check_writeable` refuses a
    /// read-write mount with `EROFS` (busybox and util-linux `mount` then retry read-only).
    pub(crate) fn writeable(&self) -> bool {
        self.writeable
    }

    /// The device address of a program of `len` bytes at `offset` of `seg`: whole write units.
    fn program_addr(&self, seg: u32, offset: u32, len: usize) -> Result<i64, FlashError> {
        let at = self.addr(seg, offset, len)?;
        let wu = self.geo.write_unit;
        if offset.checked_rem(wu) != Some(0) || (len as u64).checked_rem(u64::from(wu)) != Some(0) {
            return Err(FlashError::InvalidRequest);
        }
        Ok(at)
    }

    fn addr(&self, seg: u32, offset: u32, len: usize) -> Result<i64, FlashError> {
        let at = self.geo.byte_addr(seg, offset, len).ok_or(FlashError::InvalidRequest)?;
        i64::try_from(at).map_err(|_| FlashError::InvalidRequest)
    }
}

/// Start the write-behind thread of MTD device `index` (`None`, with a warning, when it cannot
/// be: every program is then made in the engine's call).
fn start_behind(mtd: MtdDev, index: i32) -> Option<WorkerThread<Behind>> {
    let empty = || Slot { seg: 0, off: 0, at: 0, order: 0, len: 0, data: KernelVec::new(), st: SlotState::Free };
    let q = BehindQ { slots: core::array::from_fn(|_| empty()), next_order: 0, io_error: false, stop: false };
    let b = Arc::pin_init(
        pin_init!(Behind {
            mtd,
            index,
            q <- new_mutex!(q, "ferrofs_behind"),
            cv <- new_condvar!("ferrofs_behind_cv"),
            writes: AtomicU64::new(0),
            write_ns: AtomicU64::new(0),
        }),
        GFP_KERNEL,
    );
    let mut name = [0u8; 16];
    let r = b.and_then(|b| WorkerThread::start(b, crate::super_::dev_cstr(&crate::blk::DevName::mtd(index), &mut name)));
    match r {
        Ok(t) => Some(t),
        Err(e) => {
            pr_warn!("mtd{}: no write-behind thread ({}): pages are programmed in the call\n", index, e.to_errno());
            None
        }
    }
}

impl Drop for MtdFlash {
    fn drop(&mut self) {
        // the thread makes what is still queued (a checkpoint or a flush waited for it already
        // unless the engine stopped), then ends; `behind`'s drop after this stops it
        if let Some(b) = &self.behind {
            let b = b.data();
            b.q.lock().stop = true;
            b.cv.notify_all();
            let _ = b.settle();
        }
    }
}

/// The pairing scheme of an MLC device of `pages` pages per erase block, if it is one the engine
/// knows: two pages per cell, and `mtd_wunit_to_pairing_info` agrees with the scheme on every
/// page it answers for. Linux 6.12 answers only for write units below `pages / groups` (it
/// compares the write unit with the number of pairs), which tells dist3 and adjacent pairs
/// apart (they differ from page 2 on); a driver whose scheme is neither is not recognised.
fn identify_pairing(mtd: &MtdDev, pages: u32) -> Option<Pairing> {
    let groups = mtd.pairing_groups();
    if groups != 2 || pages < 8 {
        return None;
    }
    let asked = pages / 2;
    [PairingScheme::Dist3, PairingScheme::Adjacent].into_iter().map(|scheme| Pairing { groups: 2, scheme }).find(|p| {
        p.max_distance(pages).is_some()
            && (0..asked).all(|w| {
                let Ok(wi) = i32::try_from(w) else { return false };
                match mtd.wunit_pairing(wi) {
                    Ok((pair, group)) => match (u32::try_from(pair), u32::try_from(group)) {
                        (Ok(pair), Ok(group)) => p.info(w, pages) == Some(PairInfo { pair, group }),
                        _ => false,
                    },
                    Err(_) => false,
                }
            })
    })
}

/// What an MTD program or erase error says about the block. Only -EIO (the chip reported a
/// failed program or erase; also what the NAND core returns for an erase of a bad block) and
/// -EBADMSG are media errors, which retire the block (`media`). Everything else (-ETIMEDOUT,
/// -ENOMEM, -EINTR, -EROFS from a read-only device, a short write with no error) says nothing
/// about the block: `Io`, which fails the operation and stops the engine writing, retiring
/// nothing.
fn media_error(ret: i32, media: FlashError) -> FlashError {
    if ret == -(bindings::EIO as i32) || ret == -(bindings::EBADMSG as i32) {
        media
    } else {
        FlashError::Io
    }
}

impl MtdFlash {
    /// `mtd_read` (the write-behind queue not looked at).
    fn read_dev(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> Result<ReadStatus, FlashError> {
        let at = self.addr(seg, offset, buf.len())?;
        let t0 = crate::super_::now_ns();
        let (ret, retlen) = self.mtd.read(at, buf);
        self.times.reads = self.times.reads.saturating_add(1);
        self.times.read_ns = self.times.read_ns.saturating_add(crate::super_::now_ns().saturating_sub(t0));
        match -ret {
            0 if retlen == buf.len() => Ok(ReadStatus::Clean),
            c if c == bindings::EUCLEAN as i32 && retlen == buf.len() => Ok(ReadStatus::Corrected),
            c if c == bindings::EBADMSG as i32 => {
                pr_warn!("mtd{}: uncorrectable ECC error reading {} bytes at segment {} offset {}\n", self.index, buf.len(), seg, offset);
                Err(FlashError::Uncorrectable)
            }
            // block2mtd waits killably for its page cache: a fatal signal (the reader is being
            // killed, e.g. by the shutdown scripts) says nothing about the flash: no warning
            c if c == bindings::EINTR as i32 => Err(FlashError::Io),
            _ => {
                pr_warn!("mtd{}: read failed ({}) at segment {} offset {}\n", self.index, ret, seg, offset);
                Err(FlashError::Io)
            }
        }
    }

    /// `read` with the write-behind queue: bytes still queued (or failed, until the engine
    /// takes them back) come from their slot, after waiting for one the thread is programming;
    /// the rest from the device. No slot appears meanwhile: only the engine's calls, which this
    /// is one of, queue.
    fn read_behind(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> Result<ReadStatus, FlashError> {
        let end = offset.checked_add(buf.len() as u32).ok_or(FlashError::InvalidRequest)?;
        let mut pos = offset;
        let mut status = ReadStatus::Clean;
        while pos < end {
            // the bytes from `pos` on: copied from a slot, or the device's up to `gap_end`
            let gap_end = {
                let Some(w) = &self.behind else { return Err(FlashError::InvalidRequest) };
                let b = w.data();
                let mut g = b.q.lock();
                loop {
                    match g.find(seg, pos) {
                        (Some(i), _) => {
                            let s = g.slots.get(i).ok_or(FlashError::InvalidRequest)?;
                            if s.st == SlotState::InFlight {
                                b.cv.wait(&mut g);
                                continue;
                            }
                            let to = end.min(s.off.saturating_add(s.len));
                            let src = s.data.as_slice().get((pos - s.off) as usize..(to - s.off) as usize).ok_or(FlashError::InvalidRequest)?;
                            buf.get_mut((pos - offset) as usize..(to - offset) as usize).ok_or(FlashError::InvalidRequest)?.copy_from_slice(src);
                            pos = to;
                            break None;
                        }
                        (None, next) => break Some(next.map_or(end, |n| n.min(end))),
                    }
                }
            };
            if let Some(ge) = gap_end {
                let dst = buf.get_mut((pos - offset) as usize..(ge - offset) as usize).ok_or(FlashError::InvalidRequest)?;
                if self.read_dev(seg, pos, dst)? == ReadStatus::Corrected {
                    status = ReadStatus::Corrected;
                }
                pos = ge;
            }
        }
        Ok(status)
    }

    /// `mtd_write`, now.
    fn write_now(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        let at = self.program_addr(seg, offset, buf.len())?;
        let t0 = crate::super_::now_ns();
        let (ret, retlen) = self.mtd.write(at, buf);
        self.times.writes = self.times.writes.saturating_add(1);
        self.times.write_ns = self.times.write_ns.saturating_add(crate::super_::now_ns().saturating_sub(t0));
        if ret == 0 && retlen == buf.len() {
            return Ok(());
        }
        let e = media_error(ret, FlashError::WriteFailed);
        if e == FlashError::WriteFailed {
            pr_warn!("mtd{}: program failed ({}) at segment {} offset {}: relocating its data and retiring the block\n", self.index, ret, seg, offset);
        } else {
            pr_err!("mtd{}: write error ({}, {} of {} bytes) at segment {} offset {}: not a media error; ferrofs stops writing (read-only until remounted)\n", self.index, ret, retlen, buf.len(), seg, offset);
        }
        Err(e)
    }
}

impl Flash for MtdFlash {
    fn geometry(&self) -> Geometry {
        self.geo
    }

    fn pairing(&self) -> Option<Pairing> {
        self.pairing
    }

    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> Result<ReadStatus, FlashError> {
        if self.behind.is_none() {
            return self.read_dev(seg, offset, buf);
        }
        self.read_behind(seg, offset, buf)
    }

    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        self.settle_behind()?;
        if self.behind.as_ref().is_some_and(|b| b.data().seg_failed(seg)) {
            // a write-behind program of this block failed: nothing more is programmed there
            return Err(FlashError::WriteFailed);
        }
        self.write_now(seg, offset, buf)
    }

    fn write_behind(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        let at = self.program_addr(seg, offset, buf.len())?;
        let Some(b) = &self.behind else { return self.write_now(seg, offset, buf) };
        let b = b.data();
        let queued = {
            let mut g = b.q.lock();
            if g.io_error {
                return Err(FlashError::Io);
            }
            g.reap();
            // a slot frees when the thread makes a program; failed slots wait for the engine,
            // so with none queued or in flight there is nothing to wait for
            while !g.slots.iter().any(|s| s.st == SlotState::Free) && g.busy() {
                b.cv.wait(&mut g);
                g.reap();
            }
            if g.has_failed(seg) {
                // a program of this block failed: nothing more is programmed there (the
                // engine keeps this one with the failed ones, `Log::reconcile`)
                return Err(FlashError::WriteFailed);
            }
            let order = g.next_order;
            let ok = match g.slots.iter_mut().find(|s| s.st == SlotState::Free) {
                Some(s) => {
                    s.data.clear();
                    if s.data.try_extend_from_slice(buf).is_ok() {
                        (s.seg, s.off, s.at, s.order, s.len) = (seg, offset, at, order, buf.len() as u32);
                        s.st = SlotState::Queued;
                        true
                    } else {
                        false
                    }
                }
                None => false,
            };
            if ok {
                g.next_order = order.wrapping_add(1);
            }
            ok
        };
        if !queued {
            // no memory for the copy, or every slot holds a failed program of another block:
            // made in the call, after what is queued
            return self.write(seg, offset, buf);
        }
        b.cv.notify_all();
        Ok(())
    }

    fn settle(&mut self) -> Result<(), FlashError> {
        self.settle_behind()
    }

    fn failed_behind(&mut self) -> Option<(u32, u32, u32)> {
        let b = self.behind.as_ref()?.data();
        let g = b.q.lock();
        let first = g.slots.iter().filter(|s| s.st == SlotState::Failed).min_by_key(|s| s.order)?;
        let (seg, off) = (first.seg, first.off);
        // the failed slots of that segment, contiguous from the first
        let mut end = off;
        while let Some(s) = g.slots.iter().find(|s| s.st == SlotState::Failed && s.seg == seg && s.off == end && s.len > 0) {
            end = end.saturating_add(s.len);
        }
        Some((seg, off, end.saturating_sub(off)))
    }

    fn forget_failed(&mut self, seg: u32) {
        if let Some(b) = &self.behind {
            for s in b.data().q.lock().slots.iter_mut() {
                if s.st == SlotState::Failed && s.seg == seg {
                    s.st = SlotState::Free;
                }
            }
        }
    }

    fn erase(&mut self, seg: u32) -> Result<(), FlashError> {
        self.settle_behind()?;
        // failed programs of the block left in the queue are void once it is erased
        self.forget_failed(seg);
        let at = self.addr(seg, 0, self.geo.segment_size as usize)?;
        let t0 = crate::super_::now_ns();
        let ret = self.mtd.erase(at, u64::from(self.geo.segment_size));
        self.times.erase_ns = self.times.erase_ns.saturating_add(crate::super_::now_ns().saturating_sub(t0));
        if ret == 0 {
            return Ok(());
        }
        let e = media_error(ret, FlashError::EraseFailed);
        if e == FlashError::EraseFailed {
            pr_warn!("mtd{}: erase failed ({}) for segment {}: retiring the block\n", self.index, ret, seg);
        } else {
            pr_err!("mtd{}: erase error ({}) for segment {}: not a media error; ferrofs stops writing (read-only until remounted)\n", self.index, ret, seg);
        }
        Err(e)
    }

    fn is_bad(&mut self, seg: u32) -> Result<bool, FlashError> {
        self.settle_behind()?;
        if !self.mtd.can_have_bb() {
            return Ok(false);
        }
        let at = self.addr(seg, 0, 0)?;
        match self.mtd.block_isbad(at) {
            0 => Ok(false),
            r if r > 0 => Ok(true),
            _ => Err(FlashError::Io),
        }
    }

    fn mark_bad(&mut self, seg: u32) -> Result<(), FlashError> {
        self.settle_behind()?;
        if !self.mtd.can_have_bb() {
            return Ok(());
        }
        let at = self.addr(seg, 0, 0)?;
        pr_warn!("mtd{}: retiring segment {} as a bad block\n", self.index, seg);
        match self.mtd.block_markbad(at) {
            0 => Ok(()),
            _ => Err(FlashError::Io),
        }
    }

    fn flush(&mut self) -> Result<(), FlashError> {
        self.settle_behind()?;
        self.mtd.sync();
        Ok(())
    }
}
