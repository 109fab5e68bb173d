//! [`WriteBehind`]: a model of a write-behind queue ([`Flash::write_behind`]) over any flash,
//! such as the kernel's MTD backend runs with a worker thread.
//!
//! `write_behind` copies the program into a bounded FIFO queue and returns. Queued programs
//! are made ("drained"), oldest first:
//! - when the queue is full (a `write_behind` that does not fit makes the oldest first);
//! - all of them before any `write`, `erase`, `mark_bad`, `is_bad`, `flush` and `settle`;
//! - at seeded random points: each `write_behind` (after queueing) and each `read` (before
//!   reading) makes, with some probability, a random number of the oldest programs, so that
//!   the medium sees the programs at varied times, as a thread would make them.
//!
//! Until a program is made, `read` returns its queued bytes (over the inner flash's data; a
//! range wholly held by the queue does not touch the inner flash at all).
//!
//! A program the inner flash fails with `WriteFailed` is kept as a failed entry, with every
//! later queued program of its segment (none of those is made); `read` returns their bytes,
//! and a `write` or `write_behind` to that segment fails with `WriteFailed` (nothing queued,
//! the inner flash untouched), until [`Flash::forget_failed`].
//! [`Flash::failed_behind`] reports the oldest failure: its segment and the range its entries
//! cover.
//!
//! Any other error of a made program is kept and returned by the next call (a call that
//! drains the queue itself returns it). `Io` makes the program (and the later queued ones of
//! its segment) failed entries too, as the kernel's thread does. A power cut (`PowerCut`,
//! simulators) loses every queued program not made yet, and every later call fails with
//! `PowerCut` until [`WriteBehind::power_lost`] (call it when the inner simulator reboots):
//! a power cut loses a suffix of the queue, as if it came earlier. Power-cut scheduling is the
//! inner simulator's, counting the programs when they are made.
//!
//! ```
//! use ferrofs_flashsim::{BehindConfig, Flash, NandConfig, NandSim, WriteBehind};
//!
//! let nand = NandSim::new(NandConfig::with_layout(512, 8, 4))?;
//! let mut f = WriteBehind::with_config(nand, BehindConfig { drain_percent: 0, ..BehindConfig::default() });
//! f.write_behind(1, 0, &[7u8; 512]).map_err(|e| format!("{e:?}"))?;
//! assert_eq!(f.queued_programs(), 1);
//! assert!(!f.inner().is_page_programmed(1, 0));
//! let mut b = [0u8; 16];
//! f.read(1, 100, &mut b).map_err(|e| format!("{e:?}"))?;
//! assert_eq!(b, [7u8; 16]); // the queued bytes
//! f.settle().map_err(|e| format!("{e:?}"))?;
//! assert!(f.inner().is_page_programmed(1, 0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;

use ferrofs_engine::flash::{Flash, FlashError, Geometry, Pairing, ReadStatus};

use crate::rng::SimRng;

/// How a [`WriteBehind`] queue behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BehindConfig {
    /// Write units (pages) the queue holds at most; a `write_behind` that does not fit makes the
    /// oldest programs first (a single larger program is queued alone). Default 8. 0: no
    /// queue, `write_behind` is a `write` (the trait's default), for comparisons.
    pub max_queued: u32,
    /// Chance (in percent) that a `write_behind` or a `read` makes some of the oldest queued
    /// programs (a random count, from none to all). Default 30; 0: only a full queue and the
    /// synchronous calls make programs.
    pub drain_percent: u32,
    /// Seed of the generator choosing those points.
    pub seed: u64,
}

impl Default for BehindConfig {
    fn default() -> Self {
        Self { max_queued: 8, drain_percent: 30, seed: 0 }
    }
}

/// What a [`WriteBehind`] did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BehindStats {
    /// `write_behind` calls queued.
    pub queued: u64,
    /// Programs made on the inner flash from the queue (failed ones included).
    pub made: u64,
    /// Programs made in a later call than the `write_behind` that queued them.
    pub deferred: u64,
    /// Programs made at a random point (`drain_percent`).
    pub made_at_random: u64,
    /// Programs made because the queue was full.
    pub made_when_full: u64,
    /// Synchronous `write` calls.
    pub sync_writes: u64,
    /// Programs the inner flash failed (`WriteFailed`, or `Io`).
    pub failed_programs: u64,
    /// Entries that became failed without being made: later queued programs of a segment
    /// whose program failed.
    pub failed_unmade: u64,
    /// `write` and `write_behind` calls refused with `WriteFailed` because their segment held
    /// failed entries.
    pub refused_writes: u64,
    /// `failed_behind` calls that reported a failure.
    pub failures_reported: u64,
    /// `forget_failed` calls that dropped failed entries.
    pub failures_forgotten: u64,
    /// Queued programs a power cut lost.
    pub lost_to_power_cut: u64,
    /// Reads that returned queued or failed bytes.
    pub overlay_reads: u64,
    /// Reads wholly served from queued or failed bytes (the inner flash not read).
    pub queue_only_reads: u64,
    /// Non-media errors of made programs, kept for the next call.
    pub deferred_errors: u64,
    /// The failed entries of a segment `failed_behind` reported did not cover one contiguous
    /// range (the gap reads from the inner flash).
    pub failed_gaps: u64,
    /// Segments erased while they held failed entries not forgotten (their bytes still read).
    pub erased_with_failed: u64,
}

#[derive(Debug, Clone)]
struct Entry {
    seg: u32,
    off: u32,
    data: Vec<u8>,
    /// The call (`WriteBehind::call`) that queued it.
    call: u64,
}

impl Entry {
    fn end(&self) -> u32 {
        self.off + self.data.len() as u32
    }
}

/// Why programs are being made (for the counters).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Why {
    Full,
    Random,
    Sync,
}

/// A write-behind queue over flash `F` (see the module documentation).
#[derive(Debug, Clone)]
pub struct WriteBehind<F: Flash> {
    inner: F,
    geo: Geometry,
    cfg: BehindConfig,
    rng: SimRng,
    /// Programs not made yet, oldest first.
    queue: VecDeque<Entry>,
    /// Write units in `queue`.
    queued_units: u64,
    /// Failed entries, in the order they failed (a segment's entries in offset order).
    failed: Vec<Entry>,
    /// An error of a made program for the next call (`PowerCut` stays until `power_lost`).
    pending: Option<FlashError>,
    /// Programs from now until the one to fail with `Io` (1: the next one made).
    io_fail_in: Option<u64>,
    /// Calls so far (each Flash call but `geometry`, `pairing`, `discard_hint`).
    call: u64,
    stats: BehindStats,
}

impl<F: Flash> WriteBehind<F> {
    /// A queue of the default configuration over `inner`, seeded with `seed`.
    pub fn new(inner: F, seed: u64) -> Self {
        Self::with_config(inner, BehindConfig { seed, ..BehindConfig::default() })
    }

    /// A queue configured by `cfg` over `inner`.
    pub fn with_config(inner: F, cfg: BehindConfig) -> Self {
        let geo = inner.geometry();
        Self {
            inner,
            geo,
            cfg,
            rng: SimRng::new(cfg.seed),
            queue: VecDeque::new(),
            queued_units: 0,
            failed: Vec::new(),
            pending: None,
            io_fail_in: None,
            call: 0,
            stats: BehindStats::default(),
        }
    }

    /// The flash under the queue (its contents lack the programs not made yet).
    pub fn inner(&self) -> &F {
        &self.inner
    }

    /// The flash under the queue, mutably (to inject faults, schedule power cuts...).
    pub fn inner_mut(&mut self) -> &mut F {
        &mut self.inner
    }

    /// The flash under the queue; queued programs not made yet and failed entries are dropped
    /// (call [`Flash::settle`] first to make them).
    pub fn into_inner(self) -> F {
        self.inner
    }

    /// The configuration.
    pub fn config(&self) -> BehindConfig {
        self.cfg
    }

    /// Change the configuration (the generator is reseeded when the seed changes).
    pub fn set_config(&mut self, cfg: BehindConfig) {
        if cfg.seed != self.cfg.seed {
            self.rng = SimRng::new(cfg.seed);
        }
        self.cfg = cfg;
    }

    /// The counters so far.
    pub fn stats(&self) -> BehindStats {
        self.stats.clone()
    }

    /// Programs queued and not made yet.
    pub fn queued_programs(&self) -> usize {
        self.queue.len()
    }

    /// Failed entries held (not forgotten yet).
    pub fn failed_entries(&self) -> usize {
        self.failed.len()
    }

    /// The program made `n`-th from now (1: the next one) fails with `Io` instead of reaching
    /// the inner flash (a non-media error: kept for the next call).
    pub fn fail_io_after(&mut self, n: u64) {
        self.io_fail_in = if n == 0 { None } else { Some(n) };
    }

    /// The power was lost (the inner simulator rebooted after a cut, or is about to): queued
    /// programs, failed entries and a kept error are dropped, as a reboot loses RAM.
    pub fn power_lost(&mut self) {
        self.stats.lost_to_power_cut += self.queue.len() as u64;
        self.queue.clear();
        self.queued_units = 0;
        self.failed.clear();
        self.pending = None;
    }

    /// Make every queued program, oldest first.
    pub fn drain_all(&mut self) {
        self.make(usize::MAX, Why::Sync);
    }

    // ----- internals --------------------------------------------------------------------------

    fn units(&self, len: usize) -> u64 {
        let wu = u64::from(self.geo.write_unit.max(1));
        (len as u64).div_ceil(wu)
    }

    fn seg_failed(&self, seg: u32) -> bool {
        self.failed.iter().any(|e| e.seg == seg)
    }

    /// The kept error, if any: `PowerCut` stays, others are returned once.
    fn take_pending(&mut self) -> Result<(), FlashError> {
        match self.pending {
            None => Ok(()),
            Some(FlashError::PowerCut) => Err(FlashError::PowerCut),
            Some(e) => {
                self.pending = None;
                Err(e)
            }
        }
    }

    /// Make up to `n` of the oldest queued programs.
    fn make(&mut self, n: usize, why: Why) {
        for _ in 0..n {
            let Some(e) = self.queue.pop_front() else { return };
            self.queued_units -= self.units(e.data.len());
            self.make_one(e, why);
        }
    }

    fn make_one(&mut self, e: Entry, why: Why) {
        self.stats.made += 1;
        if e.call < self.call {
            self.stats.deferred += 1;
        }
        match why {
            Why::Full => self.stats.made_when_full += 1,
            Why::Random => self.stats.made_at_random += 1,
            Why::Sync => {}
        }
        let io = match self.io_fail_in {
            Some(1) => {
                self.io_fail_in = None;
                true
            }
            Some(k) => {
                self.io_fail_in = Some(k - 1);
                false
            }
            None => false,
        };
        let r = if io { Err(FlashError::Io) } else { self.inner.write(e.seg, e.off, &e.data) };
        match r {
            Ok(()) => {}
            Err(FlashError::WriteFailed) => {
                self.stats.failed_programs += 1;
                self.fail_segment(e);
            }
            Err(FlashError::PowerCut) => {
                // RAM is lost with the power: what was still queued is never made
                self.stats.lost_to_power_cut += self.queue.len() as u64;
                self.queue.clear();
                self.queued_units = 0;
                self.pending = Some(FlashError::PowerCut);
            }
            Err(FlashError::Io) => {
                self.stats.failed_programs += 1;
                self.stats.deferred_errors += 1;
                self.fail_segment(e);
                if self.pending != Some(FlashError::PowerCut) {
                    self.pending = Some(FlashError::Io);
                }
            }
            Err(other) => {
                // a broken request (a caller bug) or an unexpected error: returned next
                self.stats.deferred_errors += 1;
                if self.pending != Some(FlashError::PowerCut) {
                    self.pending = Some(other);
                }
            }
        }
    }

    /// `e` failed: keep it, with every later queued program of its segment (not made).
    fn fail_segment(&mut self, e: Entry) {
        let seg = e.seg;
        self.failed.push(e);
        let mut keep = VecDeque::with_capacity(self.queue.len());
        for q in self.queue.drain(..) {
            if q.seg == seg {
                self.stats.failed_unmade += 1;
                self.failed.push(q);
            } else {
                keep.push_back(q);
            }
        }
        self.queue = keep;
        self.queued_units = self.queue.iter().map(|q| self.units(q.data.len())).sum();
    }

    /// At a random point: maybe make some of the oldest programs.
    fn random_drain(&mut self) {
        if self.queue.is_empty() || self.cfg.drain_percent == 0 {
            return;
        }
        if self.rng.below(100) < u64::from(self.cfg.drain_percent) {
            let n = self.rng.below(self.queue.len() as u64 + 1) as usize;
            self.make(n, Why::Random);
        }
    }

    /// Start of a synchronous call: make the whole queue, then return a kept error.
    fn sync_call(&mut self) -> Result<(), FlashError> {
        self.call += 1;
        self.make(usize::MAX, Why::Sync);
        self.take_pending()
    }

    fn valid_program(&self, seg: u32, off: u32, len: usize) -> bool {
        let wu = self.geo.write_unit.max(1);
        self.geo.byte_addr(seg, off, len).is_some() && off.is_multiple_of(wu) && (len as u64).is_multiple_of(u64::from(wu))
    }
}

impl<F: Flash> Flash for WriteBehind<F> {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }

    fn pairing(&self) -> Option<Pairing> {
        self.inner.pairing()
    }

    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> Result<ReadStatus, FlashError> {
        self.call += 1;
        self.random_drain();
        self.take_pending()?;
        let len = buf.len() as u32;
        let end = offset.saturating_add(len);
        // the held entries over the range, clipped: (start, end) in the segment
        let over = |e: &&Entry| e.seg == seg && e.off < end && offset < e.end();
        let mut held: Vec<&Entry> = self.failed.iter().filter(over).chain(self.queue.iter().filter(over)).collect();
        if held.is_empty() || buf.is_empty() {
            return self.inner.read(seg, offset, buf);
        }
        held.sort_by_key(|e| e.off);
        // the gaps no entry covers read from the inner flash
        let mut gaps: Vec<(u32, u32)> = Vec::new();
        let mut at = offset;
        for e in &held {
            if e.off > at {
                gaps.push((at, e.off));
            }
            at = at.max(e.end());
        }
        if at < end {
            gaps.push((at, end));
        }
        let mut status = ReadStatus::Clean;
        for &(a, b) in &gaps {
            let s = &mut buf[(a - offset) as usize..(b - offset) as usize];
            if self.inner.read(seg, a, s)? == ReadStatus::Corrected {
                status = ReadStatus::Corrected;
            }
        }
        for e in self.failed.iter().filter(over).chain(self.queue.iter().filter(over)) {
            let a = e.off.max(offset);
            let b = e.end().min(end);
            buf[(a - offset) as usize..(b - offset) as usize].copy_from_slice(&e.data[(a - e.off) as usize..(b - e.off) as usize]);
        }
        self.stats.overlay_reads += 1;
        if gaps.is_empty() {
            self.stats.queue_only_reads += 1;
        }
        Ok(status)
    }

    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        self.sync_call()?;
        self.stats.sync_writes += 1;
        if self.seg_failed(seg) {
            self.stats.refused_writes += 1;
            return Err(FlashError::WriteFailed);
        }
        self.inner.write(seg, offset, buf)
    }

    fn write_behind(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        if self.cfg.max_queued == 0 {
            return self.write(seg, offset, buf);
        }
        self.call += 1;
        self.take_pending()?;
        if !self.valid_program(seg, offset, buf.len()) {
            return Err(FlashError::InvalidRequest);
        }
        if buf.is_empty() {
            return Ok(());
        }
        if self.seg_failed(seg) {
            // nothing more is programmed in a segment whose program failed
            self.stats.refused_writes += 1;
            return Err(FlashError::WriteFailed);
        }
        let units = self.units(buf.len());
        while !self.queue.is_empty() && self.queued_units + units > u64::from(self.cfg.max_queued) {
            self.make(1, Why::Full);
        }
        if self.pending == Some(FlashError::PowerCut) {
            // the power went while waiting for room: nothing is queued any more
            return Err(FlashError::PowerCut);
        }
        if self.seg_failed(seg) {
            // a program of this segment failed while waiting for room
            self.stats.refused_writes += 1;
            return Err(FlashError::WriteFailed);
        }
        self.stats.queued += 1;
        self.queue.push_back(Entry { seg, off: offset, data: buf.to_vec(), call: self.call });
        self.queued_units += units;
        self.random_drain();
        Ok(())
    }

    fn settle(&mut self) -> Result<(), FlashError> {
        self.sync_call()
    }

    fn failed_behind(&mut self) -> Option<(u32, u32, u32)> {
        let seg = self.failed.first()?.seg;
        let mut ranges: Vec<(u32, u32)> = self.failed.iter().filter(|e| e.seg == seg).map(|e| (e.off, e.end())).collect();
        ranges.sort_unstable();
        let start = ranges.first().map_or(0, |r| r.0);
        let mut end = start;
        let mut gap = false;
        for (a, b) in ranges {
            gap |= a > end;
            end = end.max(b);
        }
        if gap {
            self.stats.failed_gaps += 1;
        }
        self.stats.failures_reported += 1;
        Some((seg, start, end - start))
    }

    fn forget_failed(&mut self, seg: u32) {
        let before = self.failed.len();
        self.failed.retain(|e| e.seg != seg);
        if self.failed.len() != before {
            self.stats.failures_forgotten += 1;
        }
    }

    fn erase(&mut self, seg: u32) -> Result<(), FlashError> {
        self.sync_call()?;
        if self.seg_failed(seg) {
            self.stats.erased_with_failed += 1;
        }
        self.inner.erase(seg)
    }

    fn is_bad(&mut self, seg: u32) -> Result<bool, FlashError> {
        self.sync_call()?;
        self.inner.is_bad(seg)
    }

    fn mark_bad(&mut self, seg: u32) -> Result<(), FlashError> {
        self.sync_call()?;
        self.inner.mark_bad(seg)
    }

    fn flush(&mut self) -> Result<(), FlashError> {
        self.sync_call()?;
        self.inner.flush()
    }

    fn discard_hint(&mut self, seg: u32) {
        self.inner.discard_hint(seg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nand::{NandConfig, NandSim};
    use crate::power::{CutEffect, CutPlan};

    const PAGE: usize = 512;

    fn wb(drain: u32, max: u32) -> WriteBehind<NandSim> {
        let nand = NandSim::new(NandConfig::with_layout(PAGE as u32, 8, 8)).unwrap();
        WriteBehind::with_config(nand, BehindConfig { max_queued: max, drain_percent: drain, seed: 3 })
    }

    fn pages(n: usize, seed: u8) -> Vec<u8> {
        (0..n * PAGE).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    #[test]
    fn queued_bytes_read_back_and_are_made_in_order() {
        let mut f = wb(0, 8);
        let a = pages(2, 1);
        let b = pages(1, 2);
        f.write_behind(1, 0, &a).unwrap();
        f.write_behind(1, 2 * PAGE as u32, &b).unwrap();
        assert_eq!(f.queued_programs(), 2);
        assert!(!f.inner().is_page_programmed(1, 0));
        // a read spanning both entries and the erased page after them
        let mut buf = vec![0u8; 4 * PAGE];
        f.read(1, 0, &mut buf).unwrap();
        assert_eq!(&buf[..2 * PAGE], &a[..]);
        assert_eq!(&buf[2 * PAGE..3 * PAGE], &b[..]);
        assert!(buf[3 * PAGE..].iter().all(|&x| x == 0xFF));
        let st = f.stats();
        assert_eq!((st.overlay_reads, st.queue_only_reads), (1, 0));
        // wholly inside the queue: the inner flash is not read
        let reads = f.inner().counters().reads;
        let mut small = vec![0u8; 700];
        f.read(1, 800, &mut small).unwrap();
        assert_eq!(small, [&a[800..], &b[..476]].concat());
        assert_eq!(f.inner().counters().reads, reads);
        assert_eq!(f.stats().queue_only_reads, 1);
        f.inner_mut().enable_log(true);
        f.settle().unwrap();
        let log = f.inner_mut().take_log();
        assert_eq!(log.iter().map(|o| (o.seg, o.offset, o.len)).collect::<Vec<_>>(), vec![(1, 0, 1024), (1, 1024, 512)]);
        assert_eq!(f.stats().deferred, 2);
    }

    #[test]
    fn a_full_queue_makes_the_oldest() {
        let mut f = wb(0, 2);
        f.write_behind(0, 0, &pages(1, 1)).unwrap();
        f.write_behind(0, PAGE as u32, &pages(1, 2)).unwrap();
        assert!(!f.inner().is_page_programmed(0, 0));
        f.write_behind(0, 2 * PAGE as u32, &pages(1, 3)).unwrap();
        assert!(f.inner().is_page_programmed(0, 0) && !f.inner().is_page_programmed(0, 1));
        assert_eq!(f.stats().made_when_full, 1);
        f.write(2, 0, &pages(1, 4)).unwrap();
        assert_eq!(f.queued_programs(), 0);
        assert!(f.inner().is_page_programmed(0, 2));
    }

    #[test]
    fn a_failed_program_keeps_its_segment() {
        let mut f = wb(0, 8);
        f.inner_mut().fail_program(3, 1, 0).unwrap();
        let (p0, p1, p2) = (pages(1, 1), pages(1, 2), pages(1, 3));
        f.write_behind(3, 0, &p0).unwrap();
        f.write_behind(3, PAGE as u32, &p1).unwrap();
        f.write_behind(4, 0, &p0).unwrap();
        f.write_behind(3, 2 * PAGE as u32, &p2).unwrap();
        assert_eq!(f.failed_behind(), None);
        f.settle().unwrap();
        assert_eq!(f.failed_behind(), Some((3, PAGE as u32, 2 * PAGE as u32)));
        assert!(f.inner().is_page_programmed(4, 0) && !f.inner().is_page_programmed(3, 2));
        let mut b = vec![0u8; 2 * PAGE];
        f.read(3, PAGE as u32, &mut b).unwrap();
        assert_eq!(b, [p1.clone(), p2.clone()].concat());
        // further programs of the segment refused, nothing queued
        assert_eq!(f.write_behind(3, 3 * PAGE as u32, &p0), Err(FlashError::WriteFailed));
        assert_eq!(f.failed_behind(), Some((3, PAGE as u32, 2 * PAGE as u32)));
        assert_eq!(f.write(3, 4 * PAGE as u32, &p0), Err(FlashError::WriteFailed));
        f.forget_failed(3);
        assert_eq!(f.failed_behind(), None);
        f.read(3, PAGE as u32, &mut b).unwrap();
        assert_ne!(b, [p1, p2].concat());
        let st = f.stats();
        assert_eq!((st.failed_programs, st.failed_unmade, st.refused_writes, st.failures_forgotten), (1, 1, 2, 1));
    }

    #[test]
    fn io_errors_come_with_the_next_call_and_power_cuts_lose_the_queue() {
        let mut f = wb(0, 8);
        f.fail_io_after(1);
        f.write_behind(0, 0, &pages(1, 1)).unwrap();
        assert_eq!(f.settle(), Err(FlashError::Io));
        assert_eq!(f.failed_behind(), Some((0, 0, PAGE as u32)));
        f.forget_failed(0);
        assert_eq!(f.settle(), Ok(()));

        f.inner_mut().cut_after_with(2, CutPlan { effect: CutEffect::NotDone, ..CutPlan::default() });
        for i in 0..4u32 {
            f.write_behind(1, i * PAGE as u32, &pages(1, i as u8)).unwrap();
        }
        assert_eq!(f.flush(), Err(FlashError::PowerCut));
        assert!(f.inner().is_page_programmed(1, 0) && !f.inner().is_page_programmed(1, 1));
        assert_eq!(f.write_behind(1, 4 * PAGE as u32, &pages(1, 9)), Err(FlashError::PowerCut));
        assert_eq!(f.stats().lost_to_power_cut, 2);
        f.inner_mut().reboot();
        f.power_lost();
        let mut b = vec![0u8; PAGE];
        f.read(1, PAGE as u32, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0xFF));
    }
}
