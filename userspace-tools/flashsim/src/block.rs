//! [`BlockSim`]: an in-memory block device with allocation units (the managed-flash backend's
//! medium), enforcing the block backend's write rules and modelling a cheap FTL's cost.

use std::collections::BTreeSet;

use ferrofs_engine::flash::{Flash, FlashError, FlashKind, Geometry, ReadStatus};

use crate::cache::{CacheLoss, WriteCache};
use crate::counters::{Counters, Reject};
use crate::error::{Error, Result};
use crate::power::{CutEffect, CutPlan, Gate, Op, OpKind, OpLog, Power, TornFill};
use crate::rng::SimRng;

/// Default write unit of the block backend: 4 KiB.
pub const DEFAULT_WRITE_UNIT: u32 = 4096;
/// Default allocation unit (segment): 4 MiB.
pub const DEFAULT_SEGMENT_SIZE: u32 = 4 << 20;

/// What a read of a discarded range returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscardMode {
    /// Zeroes (like a device with "deterministic read zeroes after trim").
    Zeroes,
    /// 0xFF bytes (like some raw-NAND-backed FTLs).
    Ones,
    /// The stale old data: discard is only a hint (the engine must not rely on it).
    Stale,
}

/// How to build a [`BlockSim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockConfig {
    /// Write unit in bytes. Default 4096.
    pub write_unit: u32,
    /// Segment (allocation unit) size in bytes, a multiple of `write_unit`. Default 4 MiB.
    pub segment_size: u32,
    /// Number of segments.
    pub segment_count: u32,
    /// Preferred write size (FTL page); 0 means 4 write units (16 KiB by default).
    pub preferred_write: u32,
    /// What reads of discarded ranges return. Default [`DiscardMode::Stale`], the harder case.
    pub discard: DiscardMode,
    /// Allocation units the modelled cheap FTL keeps open at once before it has to close one
    /// half-written (a read-modify-write). Default 2.
    pub open_au_limit: u32,
    /// Reject (true, default) or merely count (false) writes that do not follow the previous
    /// write of their segment.
    pub enforce_sequential: bool,
    /// Granularity of torn writes: a torn write keeps a multiple of this many bytes. Default 512.
    pub sector_size: u32,
    /// Model a volatile write cache: at a power cut, the writes and discards not yet covered by
    /// a `flush` reach the medium as a random, reordered subset torn at sector granularity: each
    /// sector they touched holds, independently, its content at the last flush or after any
    /// one of them. Default false.
    pub volatile_cache: bool,
    /// Seed of the generator behind torn writes and cache losses.
    pub seed: u64,
}

impl BlockConfig {
    /// 4 KiB write unit, 4 MiB segments, `segment_count` segments, stale discards, 2 open AUs.
    pub fn new(segment_count: u32) -> Self {
        Self {
            write_unit: DEFAULT_WRITE_UNIT,
            segment_size: DEFAULT_SEGMENT_SIZE,
            segment_count,
            preferred_write: 0,
            discard: DiscardMode::Stale,
            open_au_limit: 2,
            enforce_sequential: true,
            sector_size: 512,
            volatile_cache: false,
            seed: 0,
        }
    }

    /// Same, with the given write unit and segment size.
    pub fn with_layout(write_unit: u32, segment_size: u32, segment_count: u32) -> Self {
        Self { write_unit, segment_size, ..Self::new(segment_count) }
    }

    /// Checks the configuration and returns the geometry it gives.
    pub fn geometry(&self) -> Result<Geometry> {
        block_geometry(self.write_unit, self.segment_size, self.segment_count, self.preferred_write)
            .and_then(|g| {
                if self.sector_size == 0 || !self.write_unit.is_multiple_of(self.sector_size) {
                    Err(Error::InvalidGeometry(format!(
                        "sector size {} does not divide the write unit {}",
                        self.sector_size, self.write_unit
                    )))
                } else if usize::try_from(g.device_bytes()).is_err() {
                    Err(Error::InvalidGeometry("device does not fit in memory".into()))
                } else {
                    Ok(g)
                }
            })
    }
}

/// Checks a block-device geometry (shared with the file and device backends).
pub(crate) fn block_geometry(write_unit: u32, segment_size: u32, segment_count: u32, preferred: u32) -> Result<Geometry> {
    if write_unit == 0 || segment_size == 0 || segment_count == 0 {
        return Err(Error::InvalidGeometry(format!(
            "write unit {write_unit}, segment size {segment_size}, segment count {segment_count}: all must be non-zero"
        )));
    }
    if !segment_size.is_multiple_of(write_unit) {
        return Err(Error::InvalidGeometry(format!(
            "segment size {segment_size} is not a multiple of the write unit {write_unit}"
        )));
    }
    let preferred_write = if preferred != 0 {
        preferred
    } else {
        let p = write_unit.saturating_mul(4);
        if segment_size.is_multiple_of(p) { p } else { write_unit }
    };
    if preferred_write % write_unit != 0 || preferred_write > segment_size {
        return Err(Error::InvalidGeometry(format!(
            "preferred write {preferred_write} is not a multiple of the write unit {write_unit} within a segment"
        )));
    }
    Ok(Geometry { kind: FlashKind::Block, segment_size, segment_count, write_unit, preferred_write })
}


/// An in-memory block device implementing [`Flash`] with `FlashKind::Block`.
///
/// Rules enforced (violations return `InvalidRequest`, are counted and change nothing):
/// - writes are whole, aligned write units inside one segment;
/// - inside a segment, a write starts exactly where the previous write of that segment ended
///   (`rejected_out_of_order`); `erase` (a discard) rewinds the segment to offset 0. After
///   [`BlockSim::reboot`] or loading an image the position is unknown, and the first write of a
///   segment may start anywhere (the engine resumes its log where its recovery found the end).
///
/// `erase` is a discard: later reads of the segment return zeroes, 0xFF or the stale data, as
/// [`DiscardMode`] says. `is_bad` is always false and `mark_bad` is counted but has no effect.
///
/// Cheap-FTL cost model: the FTL keeps at most `open_au_limit` allocation units open (LRU).
/// Each of these is a read-modify-write event, counted in `Counters::ftl_rmw_events`, with the
/// bytes it copies in `Counters::ftl_bytes_copied`:
/// a write that does not continue its open AU sequentially (copies the whole AU), opening an AU
/// at a non-zero offset (copies the prefix), and closing a half-written AU because too many are
/// open (copies the rest). `Counters::max_open_segments` is the most segments ever half-written
/// at once. Write amplification: [`Counters::device_write_amplification`].
#[derive(Debug, Clone)]
pub struct BlockSim {
    geo: Geometry,
    data: Vec<u8>,
    wp: Vec<Option<u32>>,
    open_now: u64,
    discard: DiscardMode,
    open_au_limit: u32,
    enforce_sequential: bool,
    sector: u32,
    ftl_open: Vec<(u32, u32)>,
    cache: Option<WriteCache>,
    /// (segment, write unit) whose reads fail until the unit is written again.
    read_errors: BTreeSet<(u32, u32)>,
    /// Segments whose writes fail.
    write_errors: BTreeSet<u32>,
    power: Power,
    rng: SimRng,
    counters: Counters,
    log: OpLog,
}

impl BlockSim {
    /// A zero-filled device built from `config`, every segment freshly discarded (position 0).
    pub fn new(config: BlockConfig) -> Result<Self> {
        let geo = config.geometry()?;
        Self::build(config, geo, vec![0; geo.device_bytes() as usize])
    }

    /// A device with the given contents; `data` must be exactly the device's size.
    fn build(config: BlockConfig, geo: Geometry, data: Vec<u8>) -> Result<Self> {
        if data.len() as u64 != geo.device_bytes() {
            return Err(Error::BadImage(format!("{} data bytes for a {}-byte device", data.len(), geo.device_bytes())));
        }
        Ok(Self {
            geo,
            data,
            wp: vec![Some(0); geo.segment_count as usize],
            open_now: 0,
            discard: config.discard,
            open_au_limit: config.open_au_limit,
            enforce_sequential: config.enforce_sequential,
            sector: config.sector_size,
            ftl_open: Vec::new(),
            cache: if config.volatile_cache { Some(WriteCache::new(config.sector_size as usize)) } else { None },
            read_errors: BTreeSet::new(),
            write_errors: BTreeSet::new(),
            power: Power::default(),
            rng: SimRng::new(config.seed),
            counters: Counters::new(geo.segment_count),
            log: OpLog::default(),
        })
    }

    /// Builds a device from saved contents (used by the image loader); positions are unknown.
    pub(crate) fn from_parts(geo: Geometry, data: Vec<u8>, erase_counts: Option<Vec<u64>>) -> Result<Self> {
        let mut config = BlockConfig::with_layout(geo.write_unit, geo.segment_size, geo.segment_count);
        config.preferred_write = geo.preferred_write;
        if !config.write_unit.is_multiple_of(config.sector_size) {
            config.sector_size = config.write_unit;
        }
        let geo = config.geometry()?;
        let mut sim = Self::build(config, geo, data)?;
        sim.wp.fill(None);
        if let Some(ec) = erase_counts {
            if ec.len() != sim.counters.erase_counts.len() {
                return Err(Error::BadImage("erase count table has the wrong length".into()));
            }
            sim.counters.erase_counts = ec;
        }
        Ok(sim)
    }

    // ----- inspection and settings ------------------------------------------------------------

    /// The whole contents.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The contents of one segment, or `None` when out of range.
    pub fn segment_data(&self, seg: u32) -> Option<&[u8]> {
        let sz = self.geo.segment_size as usize;
        let start = (seg as usize).checked_mul(sz)?;
        self.data.get(start..start.checked_add(sz)?)
    }

    /// Where the next write of `seg` must start; `None` when unknown (any offset accepted) or out of range.
    pub fn write_position(&self, seg: u32) -> Option<u32> {
        self.wp.get(seg as usize).copied().flatten()
    }

    /// Segments currently half-written (written since their last discard, not full).
    pub fn open_segments(&self) -> u64 {
        self.open_now
    }

    /// Changes what reads of discarded ranges return (affects later discards).
    pub fn set_discard_mode(&mut self, mode: DiscardMode) {
        self.discard = mode;
    }

    /// Changes how many allocation units the modelled FTL keeps open.
    pub fn set_open_au_limit(&mut self, limit: u32) {
        self.open_au_limit = limit;
    }

    /// Rejects (true) or only counts (false) non-sequential writes.
    pub fn set_enforce_sequential(&mut self, on: bool) {
        self.enforce_sequential = on;
    }

    /// Turns the volatile write-cache model on or off (turning it on starts with an empty cache).
    pub fn set_volatile_cache(&mut self, on: bool) {
        self.cache = if on { Some(WriteCache::new(self.sector as usize)) } else { None };
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> Counters {
        self.counters.clone()
    }

    /// Resets every counter to zero except the per-segment erase counts.
    pub fn reset_counters(&mut self) {
        let ec = std::mem::take(&mut self.counters.erase_counts);
        self.counters = Counters { erase_counts: ec, ..Counters::default() };
    }

    /// Starts (`true`) or stops and clears (`false`) the operation log.
    pub fn enable_log(&mut self, on: bool) {
        self.log.ops = if on { Some(Vec::new()) } else { None };
    }

    /// Returns the logged operations and empties the log.
    pub fn take_log(&mut self) -> Vec<Op> {
        self.log.ops.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Medium error: reads touching write unit `unit` of `seg` fail with `Uncorrectable` until
    /// the unit is written again (as a real device remaps a sector on write).
    pub fn inject_read_error(&mut self, seg: u32, unit: u32) -> std::result::Result<(), FlashError> {
        if seg >= self.geo.segment_count || unit >= self.geo.units_per_segment() {
            return Err(FlashError::InvalidRequest);
        }
        self.read_errors.insert((seg, unit));
        Ok(())
    }

    /// Writes to `seg` fail with `WriteFailed` (nothing is written) until [`BlockSim::clear_faults`].
    pub fn inject_write_error(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        if seg >= self.geo.segment_count {
            return Err(FlashError::InvalidRequest);
        }
        self.write_errors.insert(seg);
        Ok(())
    }

    /// Removes every injected fault.
    pub fn clear_faults(&mut self) {
        self.read_errors.clear();
        self.write_errors.clear();
    }

    /// Reseeds the generator behind torn writes and cache losses.
    pub fn reseed(&mut self, seed: u64) {
        self.rng = SimRng::new(seed);
    }

    // ----- power ------------------------------------------------------------------------------

    /// Schedules a power cut at the `n_ops`-th counted operation from now (1 = the next one);
    /// everything after it fails with `PowerCut` until [`BlockSim::reboot`]. 0 cuts at once.
    pub fn cut_after(&mut self, n_ops: u64) {
        let plan = self.power.plan;
        self.cut_after_with(n_ops, plan);
    }

    /// [`BlockSim::cut_after`] with a given plan (which stays the current plan).
    pub fn cut_after_with(&mut self, n_ops: u64, plan: CutPlan) {
        let was_on = !self.power.off;
        self.power.schedule(n_ops, plan);
        if n_ops == 0 && was_on {
            self.on_cut();
        }
    }

    /// Sets the plan used by later [`BlockSim::cut_after`] calls.
    pub fn set_cut_plan(&mut self, plan: CutPlan) {
        self.power.plan = plan;
    }

    /// The current cut plan.
    pub fn cut_plan(&self) -> CutPlan {
        self.power.plan
    }

    /// Cuts the power now, between operations.
    pub fn cut_now(&mut self) {
        if !self.power.off {
            self.power.cancel();
            self.power.off = true;
            self.on_cut();
        }
    }

    /// Cancels a scheduled cut that has not happened yet.
    pub fn cancel_cut(&mut self) {
        self.power.cancel();
    }

    /// Counted operations left until the scheduled cut (1 = the next one), `None` when none is scheduled.
    pub fn pending_cut(&self) -> Option<u64> {
        self.power.scheduled()
    }

    /// Whether the power is on.
    pub fn is_powered(&self) -> bool {
        !self.power.off
    }

    /// Operations counted since the last power-on (see `NandSim::ops_since_power_on`).
    pub fn ops_since_power_on(&self) -> u64 {
        self.power.counted_ops
    }

    /// Power back on after a cut: contents stay as the cut left them, write positions become
    /// unknown, the FTL model starts with no open unit, and the device is a usable `Flash` again.
    pub fn reboot(&mut self) {
        self.power.power_on();
        self.wp.fill(None);
        self.open_now = 0;
        self.ftl_open.clear();
    }

    /// Same as [`BlockSim::reboot`].
    pub fn power_on(&mut self) {
        self.reboot();
    }

    // ----- internals --------------------------------------------------------------------------

    fn on_cut(&mut self) {
        self.counters.power_cuts += 1;
        if let Some(cache) = self.cache.as_mut() {
            cache.power_loss(&mut self.data, CacheLoss::Subset(self.rng.next_u64()));
        }
    }

    fn check_range(&mut self, seg: u32, offset: u32, len: usize) -> std::result::Result<(), FlashError> {
        let end = u64::from(offset) + len as u64;
        if seg >= self.geo.segment_count || end > u64::from(self.geo.segment_size) {
            self.counters.reject(Reject::OutOfRange);
            return Err(FlashError::InvalidRequest);
        }
        Ok(())
    }

    fn byte_index(&self, seg: u32, offset: u32) -> usize {
        seg as usize * self.geo.segment_size as usize + offset as usize
    }

    fn is_open(&self, seg: u32) -> bool {
        matches!(self.wp[seg as usize], Some(p) if p > 0 && p < self.geo.segment_size)
    }

    fn set_wp(&mut self, seg: u32, wp: Option<u32>) {
        let was = self.is_open(seg);
        self.wp[seg as usize] = wp;
        let now = self.is_open(seg);
        if now && !was {
            self.open_now += 1;
            self.counters.max_open_segments = self.counters.max_open_segments.max(self.open_now);
        } else if was && !now {
            self.open_now -= 1;
        }
    }

    fn ftl_write(&mut self, seg: u32, offset: u32, len: u32) {
        let size = self.geo.segment_size;
        let end = offset + len;
        if let Some(i) = self.ftl_open.iter().position(|&(s, _)| s == seg) {
            let (_, next) = self.ftl_open.remove(i);
            if offset != next {
                self.counters.ftl_rmw_events += 1;
                self.counters.ftl_bytes_copied += u64::from(size);
            }
        } else {
            self.counters.ftl_au_opens += 1;
            if offset != 0 {
                self.counters.ftl_rmw_events += 1;
                self.counters.ftl_bytes_copied += u64::from(offset);
            }
        }
        if end < size {
            self.ftl_open.push((seg, end));
        }
        while self.ftl_open.len() > self.open_au_limit.max(1) as usize {
            let (_, next) = self.ftl_open.remove(0);
            self.counters.ftl_rmw_events += 1;
            self.counters.ftl_bytes_copied += u64::from(size - next);
        }
    }

    fn store(&mut self, at: usize, src: &[u8]) {
        match self.cache.as_mut() {
            Some(c) => c.write(&mut self.data, at, src),
            None => self.data[at..at + src.len()].copy_from_slice(src),
        }
    }

    fn discard_range(&mut self, at: usize, len: usize) {
        let fill = match self.discard {
            DiscardMode::Zeroes => 0,
            DiscardMode::Ones => 0xFF,
            DiscardMode::Stale => return,
        };
        self.store(at, &vec![fill; len]);
    }

    fn do_read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> std::result::Result<ReadStatus, FlashError> {
        self.power.check_on()?;
        self.check_range(seg, offset, buf.len())?;
        if let Gate::Cut(_) = self.power.gate(OpKind::Read) {
            self.on_cut();
            return Err(FlashError::PowerCut);
        }
        let at = self.byte_index(seg, offset);
        buf.copy_from_slice(&self.data[at..at + buf.len()]);
        self.counters.reads += 1;
        if !buf.is_empty() && !self.read_errors.is_empty() {
            let unit = self.geo.write_unit;
            let last = (offset + buf.len() as u32 - 1) / unit;
            if (offset / unit..=last).any(|u| self.read_errors.contains(&(seg, u))) {
                self.counters.uncorrectable_reads += 1;
                return Err(FlashError::Uncorrectable);
            }
        }
        self.counters.bytes_read += buf.len() as u64;
        if !buf.is_empty() {
            let unit = self.geo.write_unit;
            self.counters.pages_read += u64::from((offset + buf.len() as u32 - 1) / unit - offset / unit + 1);
        }
        Ok(ReadStatus::Clean)
    }

    fn do_write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> std::result::Result<(), FlashError> {
        self.power.check_on()?;
        self.check_range(seg, offset, buf.len())?;
        let unit = self.geo.write_unit;
        if !offset.is_multiple_of(unit) || !buf.len().is_multiple_of(unit as usize) {
            self.counters.reject(Reject::Misaligned);
            return Err(FlashError::InvalidRequest);
        }
        if buf.is_empty() {
            return Ok(());
        }
        let sequential = self.wp[seg as usize].is_none_or(|p| p == offset);
        if !sequential && self.enforce_sequential {
            self.counters.reject(Reject::OutOfOrder);
            return Err(FlashError::InvalidRequest);
        }
        let len = buf.len() as u32;
        let at = self.byte_index(seg, offset);
        match self.power.gate(OpKind::Write) {
            Gate::Go if self.write_errors.contains(&seg) => {
                self.counters.writes += 1;
                self.counters.write_failures += 1;
                Err(FlashError::WriteFailed)
            }
            Gate::Go => {
                self.store(at, buf);
                let first = offset / unit;
                self.read_errors.retain(|&(s, u)| s != seg || u < first || u >= first + len / unit);
                self.counters.writes += 1;
                self.counters.bytes_programmed += u64::from(len);
                self.counters.pages_programmed += u64::from(len / unit);
                if !offset.is_multiple_of(self.geo.preferred_write.max(1)) {
                    self.counters.ftl_page_rewrites += 1;
                }
                self.ftl_write(seg, offset, len);
                self.set_wp(seg, Some(offset + len));
                Ok(())
            }
            Gate::Cut(effect) => {
                self.counters.writes += 1;
                match effect {
                    CutEffect::NotDone => {}
                    CutEffect::Done => {
                        self.store(at, buf);
                        self.counters.bytes_programmed += u64::from(len);
                        self.counters.pages_programmed += u64::from(len / unit);
                    }
                    CutEffect::Torn => {
                        let sectors = u64::from(len / self.sector);
                        let keep = (self.rng.below(sectors) as u32 * self.sector) as usize;
                        self.store(at, &buf[..keep]);
                        if self.power.plan.fill == TornFill::Random {
                            let s = self.sector as usize;
                            let mut noise = vec![0u8; s];
                            self.rng.fill(&mut noise);
                            self.store(at + keep, &noise);
                        }
                        self.counters.bytes_programmed += keep as u64;
                        self.counters.pages_programmed += keep as u64 / u64::from(unit);
                    }
                }
                self.on_cut();
                Err(FlashError::PowerCut)
            }
        }
    }

    fn do_erase(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        self.power.check_on()?;
        self.check_range(seg, 0, 0)?;
        let at = self.byte_index(seg, 0);
        let size = self.geo.segment_size as usize;
        match self.power.gate(OpKind::Erase) {
            Gate::Go => {
                self.discard_range(at, size);
                self.counters.note_erase(seg);
                self.ftl_open.retain(|&(s, _)| s != seg);
                self.set_wp(seg, Some(0));
                Ok(())
            }
            Gate::Cut(effect) => {
                match effect {
                    CutEffect::NotDone => {}
                    CutEffect::Done => {
                        self.discard_range(at, size);
                        self.counters.note_erase(seg);
                    }
                    CutEffect::Torn => {
                        let units = u64::from(self.geo.units_per_segment());
                        let k = self.rng.below(units + 1) as usize * self.geo.write_unit as usize;
                        self.discard_range(at, k);
                        self.counters.note_erase(seg);
                    }
                }
                self.on_cut();
                Err(FlashError::PowerCut)
            }
        }
    }

    fn do_flush(&mut self) -> std::result::Result<(), FlashError> {
        self.power.check_on()?;
        match self.power.gate(OpKind::Flush) {
            Gate::Go => {
                if let Some(c) = self.cache.as_mut() {
                    c.flush();
                }
                self.counters.flushes += 1;
                Ok(())
            }
            Gate::Cut(effect) => {
                if effect == CutEffect::Done {
                    if let Some(c) = self.cache.as_mut() {
                        c.flush();
                    }
                }
                self.on_cut();
                Err(FlashError::PowerCut)
            }
        }
    }
}

impl Flash for BlockSim {
    fn geometry(&self) -> Geometry {
        self.geo
    }

    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> std::result::Result<ReadStatus, FlashError> {
        let r = self.do_read(seg, offset, buf);
        self.log.push(OpKind::Read, seg, offset, buf.len(), r.map(|_| ()));
        r
    }

    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> std::result::Result<(), FlashError> {
        let r = self.do_write(seg, offset, buf);
        self.log.push(OpKind::Write, seg, offset, buf.len(), r);
        r
    }

    fn erase(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        let r = self.do_erase(seg);
        self.log.push(OpKind::Erase, seg, 0, 0, r);
        r
    }

    fn is_bad(&mut self, seg: u32) -> std::result::Result<bool, FlashError> {
        self.power.check_on()?;
        self.check_range(seg, 0, 0)?;
        Ok(false)
    }

    fn mark_bad(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        let r = self.power.check_on().and_then(|()| self.check_range(seg, 0, 0));
        if r.is_ok() {
            self.counters.marked_bad += 1;
        }
        self.log.push(OpKind::MarkBad, seg, 0, 0, r);
        r
    }

    fn flush(&mut self) -> std::result::Result<(), FlashError> {
        let r = self.do_flush();
        self.log.push(OpKind::Flush, 0, 0, 0, r);
        r
    }

    /// A discard of the freed segment, as a kernel backend issues it later: the data goes as
    /// [`DiscardMode`] says, the FTL forgets the unit, the segment counts as closed. Not an
    /// operation of the power model (no cut point, nothing logged); ignored while the power is
    /// off or for a segment out of range.
    fn discard_hint(&mut self, seg: u32) {
        if self.power.off || seg >= self.geo.segment_count {
            return;
        }
        let at = self.byte_index(seg, 0);
        self.discard_range(at, self.geo.segment_size as usize);
        self.ftl_open.retain(|&(s, _)| s != seg);
        self.set_wp(seg, Some(0));
        self.counters.discard_hints += 1;
    }
}
