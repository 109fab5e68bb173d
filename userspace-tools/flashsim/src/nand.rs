//! [`NandSim`]: an in-memory raw NAND (or NOR) flash with real programming rules, bad blocks,
//! injected faults, bit-flips and power cuts.

use std::collections::{BTreeMap, BTreeSet};

use ferrofs_engine::flash::{Flash, FlashError, FlashKind, Geometry, PairInfo, Pairing, ReadStatus};

use crate::counters::{Counters, Reject};
use crate::error::{Error, Result};
use crate::power::{CutEffect, CutPlan, Gate, Op, OpKind, OpLog, Power, TornFill};
use crate::rng::SimRng;

/// Default NAND page size: 2 KiB.
pub const DEFAULT_PAGE_SIZE: u32 = 2048;
/// Default pages per erase block: 64 (so 128 KiB erase blocks).
pub const DEFAULT_PAGES_PER_BLOCK: u32 = 64;

/// How to build a [`NandSim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NandConfig {
    /// Page size in bytes (the write unit). Default 2048.
    pub page_size: u32,
    /// Pages per erase block. Default 64.
    pub pages_per_block: u32,
    /// Number of erase blocks (segments).
    pub block_count: u32,
    /// `FlashKind::Nand` (default), `FlashKind::Nor` or `FlashKind::MlcNand`; all follow the
    /// NAND rules here.
    pub kind: FlashKind,
    /// `FlashKind::MlcNand`: how the pages of a block share cells (the simulator destroys the
    /// pages sharing cells with a page whose program a power cut interrupts) and what the
    /// device reports ([`Flash::pairing`]). `None`: no pairing is modelled or reported.
    pub pairing: Option<Pairing>,
    /// Preferred write size (a multiple of `page_size`); 0 means one page.
    pub preferred_write: u32,
    /// Factory bad blocks.
    pub bad_blocks: Vec<u32>,
    /// Seed of the generator behind random bit-flips and torn operations.
    pub seed: u64,
}

impl NandConfig {
    /// 2 KiB pages, 64 pages per block (128 KiB blocks), `block_count` blocks, no bad block, seed 0.
    pub fn new(block_count: u32) -> Self {
        Self {
            page_size: DEFAULT_PAGE_SIZE,
            pages_per_block: DEFAULT_PAGES_PER_BLOCK,
            block_count,
            kind: FlashKind::Nand,
            pairing: None,
            preferred_write: 0,
            bad_blocks: Vec::new(),
            seed: 0,
        }
    }

    /// Same, with the given page size and pages per block.
    pub fn with_layout(page_size: u32, pages_per_block: u32, block_count: u32) -> Self {
        Self { page_size, pages_per_block, ..Self::new(block_count) }
    }

    /// Checks the configuration and returns the geometry it gives.
    pub fn geometry(&self) -> Result<Geometry> {
        if self.kind == FlashKind::Block {
            return Err(Error::InvalidGeometry("NandSim models raw flash; use BlockSim for FlashKind::Block".into()));
        }
        if self.pairing.is_some() && self.kind != FlashKind::MlcNand {
            return Err(Error::InvalidGeometry(format!("a page pairing needs FlashKind::MlcNand, not {:?}", self.kind)));
        }
        if self.page_size == 0 || self.pages_per_block == 0 || self.block_count == 0 {
            return Err(Error::InvalidGeometry(format!(
                "page size {}, pages per block {}, block count {}: all must be non-zero",
                self.page_size, self.pages_per_block, self.block_count
            )));
        }
        let segment_size = self.page_size.checked_mul(self.pages_per_block).ok_or_else(|| {
            Error::InvalidGeometry("erase block size overflows 32 bits".into())
        })?;
        let total = u64::from(segment_size) * u64::from(self.block_count);
        if usize::try_from(total).is_err() {
            return Err(Error::InvalidGeometry(format!("{total} bytes do not fit in memory")));
        }
        let preferred_write = if self.preferred_write == 0 { self.page_size } else { self.preferred_write };
        if preferred_write % self.page_size != 0 || preferred_write > segment_size {
            return Err(Error::InvalidGeometry(format!(
                "preferred write {preferred_write} is not a multiple of the page size {} within a block",
                self.page_size
            )));
        }
        if let Some(p) = self.pairing {
            if p.max_distance(self.pages_per_block).is_none() {
                return Err(Error::InvalidGeometry(format!("pairing {p:?} does not describe {} pages per block", self.pages_per_block)));
            }
        }
        if let Some(b) = self.bad_blocks.iter().find(|&&b| b >= self.block_count) {
            return Err(Error::InvalidGeometry(format!("bad block {b} beyond the {} blocks", self.block_count)));
        }
        Ok(Geometry {
            kind: self.kind,
            segment_size,
            segment_count: self.block_count,
            write_unit: self.page_size,
            preferred_write,
        })
    }
}

#[derive(Debug, Clone, Default)]
struct NandFaults {
    /// Global page -> programs that still succeed before every later one fails.
    program_fail: BTreeMap<u64, u32>,
    /// Block -> erases that still succeed before every later one fails.
    weak_blocks: BTreeMap<u32, u32>,
    /// Global page -> reads that still succeed before every later one fails.
    grave_pages: BTreeMap<u64, u32>,
    /// Pages whose reads report a corrected bit-flip until their block is erased.
    bitflip_pages: BTreeSet<u64>,
    /// Pages whose reads are uncorrectable until their block is erased.
    uncorrectable_pages: BTreeSet<u64>,
    bitflip_ppm: u32,
    uncorrectable_ppm: u32,
}

/// An in-memory raw NAND flash implementing [`Flash`] with real semantics.
///
/// Rules enforced (a violation returns `FlashError::InvalidRequest`, is counted in
/// [`Counters`] and changes nothing):
/// - offsets and lengths of writes are whole pages, inside one erase block of the device;
/// - a page is programmed only once between erases (`rejected_rewrite`), and pages are programmed
///   in increasing order inside a block (`rejected_out_of_order`); skipping pages is allowed;
/// - writes and erases of a bad block are refused (`rejected_bad_block`); reads of a bad block work.
///
/// Erased pages read as 0xFF. Reads may cross pages but not erase blocks.
///
/// Faults: see [`NandSim::fail_program`], [`NandSim::weak_block`], [`NandSim::grave_page`],
/// [`NandSim::inject_bitflip`], [`NandSim::inject_uncorrectable`], [`NandSim::set_bitflip_rate`].
/// Power cuts: see [`NandSim::cut_after`] and [`NandSim::reboot`].
///
/// Torn program model: one page `k` of the request is chosen; pages before it are programmed;
/// page `k` is either not started (then it and the rest stay erased) or programmed up to a random
/// byte, the rest of it being 0xFF ([`TornFill::Unwritten`]) or random ([`TornFill::Random`]);
/// a started page counts as programmed even when it still reads as all 0xFF (like unstable bits
/// on real NAND), so programming it again is a rewrite.
///
/// MLC ([`NandConfig::pairing`]): when page `k` was started, the programmed pages sharing its
/// cells (its lower page) read uncorrectable until their block is erased
/// ([`NandSim::paired_pages_lost`]); a cut at any other point behaves as on SLC.
///
/// Torn erase model: with [`TornFill::Unwritten`] the first pages of the block (a random count) are
/// erased and the others keep their old data; with [`TornFill::Random`] each page is either erased
/// or filled with random bits. A page still holding data counts as programmed.
#[derive(Debug, Clone)]
pub struct NandSim {
    geo: Geometry,
    page: usize,
    ppb: u32,
    data: Vec<u8>,
    programmed: Vec<bool>,
    next_page: Vec<u32>,
    bad: Vec<bool>,
    faults: NandFaults,
    power: Power,
    rng: SimRng,
    counters: Counters,
    log: OpLog,
    pairing: Option<Pairing>,
    paired_lost: u64,
}

impl NandSim {
    /// A fully erased device built from `config`.
    pub fn new(config: NandConfig) -> Result<Self> {
        let geo = config.geometry()?;
        Self::build(config, geo, vec![0xFF; geo.device_bytes() as usize])
    }

    /// A device with the given contents; `data` must be exactly the device's size.
    fn build(config: NandConfig, geo: Geometry, data: Vec<u8>) -> Result<Self> {
        if data.len() as u64 != geo.device_bytes() {
            return Err(Error::BadImage(format!("{} data bytes for a {}-byte device", data.len(), geo.device_bytes())));
        }
        let pages = geo.segment_count as usize * config.pages_per_block as usize;
        let mut sim = Self {
            geo,
            page: config.page_size as usize,
            ppb: config.pages_per_block,
            data,
            programmed: vec![false; pages],
            next_page: vec![0; geo.segment_count as usize],
            bad: vec![false; geo.segment_count as usize],
            faults: NandFaults::default(),
            power: Power::default(),
            rng: SimRng::new(config.seed),
            counters: Counters::new(geo.segment_count),
            log: OpLog::default(),
            pairing: config.pairing,
            paired_lost: 0,
        };
        for &b in &config.bad_blocks {
            sim.bad[b as usize] = true;
        }
        Ok(sim)
    }

    /// Builds a device from saved parts (used by the image loader). `programmed` may be `None`,
    /// in which case a page counts as programmed when it is not all 0xFF.
    pub(crate) fn from_parts(
        geo: Geometry,
        data: Vec<u8>,
        programmed: Option<Vec<bool>>,
        bad_blocks: &[u32],
        erase_counts: Option<Vec<u64>>,
    ) -> Result<Self> {
        if geo.kind == FlashKind::Block || geo.write_unit == 0 || !geo.segment_size.is_multiple_of(geo.write_unit) {
            return Err(Error::InvalidGeometry(format!("{geo:?} is not a raw flash geometry")));
        }
        let config = NandConfig {
            page_size: geo.write_unit,
            pages_per_block: geo.segment_size / geo.write_unit,
            block_count: geo.segment_count,
            kind: geo.kind,
            pairing: None,
            preferred_write: geo.preferred_write,
            bad_blocks: bad_blocks.to_vec(),
            seed: 0,
        };
        let geo = config.geometry()?;
        let mut sim = Self::build(config, geo, data)?;
        sim.programmed = match programmed {
            Some(p) if p.len() == sim.programmed.len() => p,
            Some(p) => return Err(Error::BadImage(format!("{} page states for {} pages", p.len(), sim.programmed.len()))),
            None => sim.data.chunks(sim.page).map(|pg| pg.iter().any(|&b| b != 0xFF)).collect(),
        };
        if let Some(ec) = erase_counts {
            if ec.len() != sim.counters.erase_counts.len() {
                return Err(Error::BadImage("erase count table has the wrong length".into()));
            }
            sim.counters.erase_counts = ec;
        }
        for b in 0..geo.segment_count {
            sim.recompute_next_page(b);
        }
        Ok(sim)
    }

    // ----- inspection -------------------------------------------------------------------------

    /// Page size in bytes.
    pub fn page_size(&self) -> u32 {
        self.geo.write_unit
    }

    /// Pages per erase block.
    pub fn pages_per_block(&self) -> u32 {
        self.ppb
    }

    /// The whole raw contents (no OOB), as a `nanddump` without OOB would show them.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The raw contents of one erase block, or `None` when out of range.
    pub fn segment_data(&self, seg: u32) -> Option<&[u8]> {
        let sz = self.geo.segment_size as usize;
        let start = (seg as usize).checked_mul(sz)?;
        self.data.get(start..start.checked_add(sz)?)
    }

    /// Whether a page has been programmed since its block was last erased (false when out of range).
    pub fn is_page_programmed(&self, seg: u32, page: u32) -> bool {
        self.global_page(seg, page).and_then(|p| self.programmed.get(p as usize).copied()).unwrap_or(false)
    }

    /// The programmed-page map of the whole device (one entry per page).
    pub fn programmed_pages(&self) -> &[bool] {
        &self.programmed
    }

    /// The lowest page of `seg` that may be programmed next (pages per block when full).
    pub fn next_programmable_page(&self, seg: u32) -> Option<u32> {
        self.next_page.get(seg as usize).copied()
    }

    /// The list of bad blocks, factory or marked.
    pub fn bad_blocks(&self) -> Vec<u32> {
        (0..self.geo.segment_count).filter(|&b| self.bad[b as usize]).collect()
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> Counters {
        self.counters.clone()
    }

    /// Resets every counter to zero except the per-block erase counts (which model wear).
    pub fn reset_counters(&mut self) {
        let ec = std::mem::take(&mut self.counters.erase_counts);
        self.counters = Counters { erase_counts: ec, ..Counters::default() };
    }

    /// Starts (`true`) or stops and clears (`false`) the operation log.
    pub fn enable_log(&mut self, on: bool) {
        self.log.ops = if on { Some(Vec::new()) } else { None };
    }

    /// Returns the logged operations and empties the log (empty when logging is off).
    pub fn take_log(&mut self) -> Vec<Op> {
        self.log.ops.as_mut().map(std::mem::take).unwrap_or_default()
    }

    // ----- faults -----------------------------------------------------------------------------

    fn global_page(&self, seg: u32, page: u32) -> Option<u64> {
        if seg < self.geo.segment_count && page < self.ppb {
            Some(u64::from(seg) * u64::from(self.ppb) + u64::from(page))
        } else {
            None
        }
    }

    fn page_arg(&self, seg: u32, page: u32) -> std::result::Result<u64, FlashError> {
        self.global_page(seg, page).ok_or(FlashError::InvalidRequest)
    }

    /// Weak page: programs of page `page` of `seg` succeed `programs_ok` more times, then every
    /// program touching it fails with `WriteFailed` (the page is left programmed with garbage).
    pub fn fail_program(&mut self, seg: u32, page: u32, programs_ok: u32) -> std::result::Result<(), FlashError> {
        let p = self.page_arg(seg, page)?;
        self.faults.program_fail.insert(p, programs_ok);
        Ok(())
    }

    /// Weak block: erases of `seg` succeed `erases_ok` more times, then fail with `EraseFailed`.
    pub fn weak_block(&mut self, seg: u32, erases_ok: u32) -> std::result::Result<(), FlashError> {
        if seg >= self.geo.segment_count {
            return Err(FlashError::InvalidRequest);
        }
        self.faults.weak_blocks.insert(seg, erases_ok);
        Ok(())
    }

    /// Grave page: reads touching the page succeed `reads_ok` more times, then fail with
    /// `Uncorrectable` forever (erasing does not heal it).
    pub fn grave_page(&mut self, seg: u32, page: u32, reads_ok: u32) -> std::result::Result<(), FlashError> {
        let p = self.page_arg(seg, page)?;
        self.faults.grave_pages.insert(p, reads_ok);
        Ok(())
    }

    /// Reads touching the page return the correct data with `ReadStatus::Corrected` until its block is erased.
    pub fn inject_bitflip(&mut self, seg: u32, page: u32) -> std::result::Result<(), FlashError> {
        let p = self.page_arg(seg, page)?;
        self.faults.bitflip_pages.insert(p);
        Ok(())
    }

    /// Reads touching the page fail with `Uncorrectable` until its block is erased.
    pub fn inject_uncorrectable(&mut self, seg: u32, page: u32) -> std::result::Result<(), FlashError> {
        let p = self.page_arg(seg, page)?;
        self.faults.uncorrectable_pages.insert(p);
        Ok(())
    }

    /// Random corrected bit-flips: each page touched by a read reports `Corrected` with
    /// probability `ppm` per million (seeded, deterministic).
    pub fn set_bitflip_rate(&mut self, ppm: u32) {
        self.faults.bitflip_ppm = ppm;
    }

    /// Random uncorrectable reads: each page touched by a read fails with probability `ppm` per million.
    pub fn set_uncorrectable_rate(&mut self, ppm: u32) {
        self.faults.uncorrectable_ppm = ppm;
    }

    /// Removes every injected fault (bad blocks stay bad).
    pub fn clear_faults(&mut self) {
        self.faults = NandFaults::default();
    }

    /// Reseeds the generator behind random faults and torn operations.
    pub fn reseed(&mut self, seed: u64) {
        self.rng = SimRng::new(seed);
    }

    // ----- power ------------------------------------------------------------------------------

    /// Schedules a power cut: the `n_ops`-th counted operation from now (1 = the next one) is cut
    /// as the current [`CutPlan`] says, and every operation after it fails with `PowerCut`
    /// until [`NandSim::reboot`]. `n_ops == 0` cuts the power at once.
    pub fn cut_after(&mut self, n_ops: u64) {
        let plan = self.power.plan;
        self.cut_after_with(n_ops, plan);
    }

    /// [`NandSim::cut_after`] with a given plan (which stays the current plan).
    pub fn cut_after_with(&mut self, n_ops: u64, plan: CutPlan) {
        if n_ops == 0 && !self.power.off {
            self.counters.power_cuts += 1;
        }
        self.power.schedule(n_ops, plan);
    }

    /// Sets the plan used by later [`NandSim::cut_after`] calls.
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
            self.counters.power_cuts += 1;
        }
        self.power.cancel();
        self.power.off = true;
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

    /// Operations counted (for cut scheduling) since the last power-on: run a workload once,
    /// read this, then replay it with `cut_after(i)` for every `i` in `1..=n` to enumerate crash points.
    pub fn ops_since_power_on(&self) -> u64 {
        self.power.counted_ops
    }

    /// Power back on after a cut: the contents stay as the cut left them, faults and bad blocks
    /// persist, any scheduled cut is cancelled, and the device is a usable `Flash` again.
    pub fn reboot(&mut self) {
        self.power.power_on();
    }

    /// Same as [`NandSim::reboot`].
    pub fn power_on(&mut self) {
        self.reboot();
    }

    // ----- internals --------------------------------------------------------------------------

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

    fn recompute_next_page(&mut self, seg: u32) {
        let base = seg as usize * self.ppb as usize;
        let pages = &self.programmed[base..base + self.ppb as usize];
        self.next_page[seg as usize] = pages.iter().rposition(|&p| p).map_or(0, |i| i as u32 + 1);
    }

    /// Programs page `page` of `seg` with `src` (one page), marking it programmed.
    fn program_page(&mut self, seg: u32, page: u32, src: &[u8]) {
        let at = self.byte_index(seg, page * self.geo.write_unit);
        self.data[at..at + src.len()].copy_from_slice(src);
        let gp = seg as usize * self.ppb as usize + page as usize;
        self.programmed[gp] = true;
        self.next_page[seg as usize] = self.next_page[seg as usize].max(page + 1);
        self.counters.pages_programmed += 1;
        self.counters.bytes_programmed += src.len() as u64;
    }

    fn torn_program(&mut self, seg: u32, first: u32, buf: &[u8]) {
        let page = self.page;
        let npages = (buf.len() / page) as u64;
        let k = self.rng.below(npages) as usize;
        for i in 0..k {
            self.program_page(seg, first + i as u32, &buf[i * page..(i + 1) * page]);
        }
        if self.rng.coin() {
            // Page k was being programmed: a prefix of it made it, the rest is 0xFF or noise.
            let cut = self.rng.below(page as u64) as usize;
            let mut img = vec![0xFF; page];
            img[..cut].copy_from_slice(&buf[k * page..k * page + cut]);
            if self.power.plan.fill == TornFill::Random {
                self.rng.fill(&mut img[cut..]);
            }
            let pg = first + k as u32;
            let at = self.byte_index(seg, pg * self.geo.write_unit);
            self.data[at..at + page].copy_from_slice(&img);
            self.programmed[seg as usize * self.ppb as usize + pg as usize] = true;
            self.next_page[seg as usize] = self.next_page[seg as usize].max(pg + 1);
            self.counters.pages_programmed += 1;
            self.counters.bytes_programmed += cut as u64;
            self.pair_damage(seg, pg);
        }
    }

    /// MLC: the program of page `page` of `seg` was interrupted: the programmed pages before
    /// it that share its cells become uncorrectable until the block is erased.
    fn pair_damage(&mut self, seg: u32, page: u32) {
        let Some(p) = self.pairing else { return };
        let Some(i) = p.info(page, self.ppb) else { return };
        for g in 0..i.group {
            if let Some(l) = p.wunit(PairInfo { pair: i.pair, group: g }, self.ppb).filter(|&l| l < page) {
                let gp = u64::from(seg) * u64::from(self.ppb) + u64::from(l);
                if self.programmed[gp as usize] && self.faults.uncorrectable_pages.insert(gp) {
                    self.paired_lost += 1;
                }
            }
        }
    }

    /// MLC: pages destroyed so far by cuts during the program of a page sharing their cells.
    pub fn paired_pages_lost(&self) -> u64 {
        self.paired_lost
    }

    fn erase_block(&mut self, seg: u32) {
        let start = self.byte_index(seg, 0);
        let sz = self.geo.segment_size as usize;
        self.data[start..start + sz].fill(0xFF);
        let base = seg as usize * self.ppb as usize;
        self.programmed[base..base + self.ppb as usize].fill(false);
        self.next_page[seg as usize] = 0;
        self.forget_transient_faults(seg);
        self.counters.note_erase(seg);
    }

    fn forget_transient_faults(&mut self, seg: u32) {
        let lo = u64::from(seg) * u64::from(self.ppb);
        let hi = lo + u64::from(self.ppb);
        self.faults.bitflip_pages.retain(|p| !(lo..hi).contains(p));
        self.faults.uncorrectable_pages.retain(|p| !(lo..hi).contains(p));
    }

    fn torn_erase(&mut self, seg: u32) {
        let ppb = self.ppb as usize;
        let page = self.page;
        let base_page = seg as usize * ppb;
        let base = self.byte_index(seg, 0);
        match self.power.plan.fill {
            TornFill::Unwritten => {
                let k = self.rng.below(self.ppb as u64 + 1) as usize;
                self.data[base..base + k * page].fill(0xFF);
                self.programmed[base_page..base_page + k].fill(false);
            }
            TornFill::Random => {
                for i in 0..ppb {
                    let at = base + i * page;
                    if self.rng.coin() {
                        self.data[at..at + page].fill(0xFF);
                        self.programmed[base_page + i] = false;
                    } else {
                        let mut noise = vec![0u8; page];
                        self.rng.fill(&mut noise);
                        self.data[at..at + page].copy_from_slice(&noise);
                        self.programmed[base_page + i] = true;
                    }
                }
            }
        }
        self.recompute_next_page(seg);
        self.forget_transient_faults(seg);
        self.counters.note_erase(seg);
    }

    fn do_read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> std::result::Result<ReadStatus, FlashError> {
        self.power.check_on()?;
        self.check_range(seg, offset, buf.len())?;
        if let Gate::Cut(_) = self.power.gate(OpKind::Read) {
            self.counters.power_cuts += 1;
            return Err(FlashError::PowerCut);
        }
        self.counters.reads += 1;
        let at = self.byte_index(seg, offset);
        buf.copy_from_slice(&self.data[at..at + buf.len()]);
        if buf.is_empty() {
            return Ok(ReadStatus::Clean);
        }
        let first = offset / self.geo.write_unit;
        let last = (offset + buf.len() as u32 - 1) / self.geo.write_unit;
        self.counters.pages_read += u64::from(last - first + 1);
        let mut corrected = false;
        let mut lost = false;
        for page in first..=last {
            let gp = u64::from(seg) * u64::from(self.ppb) + u64::from(page);
            if let Some(left) = self.faults.grave_pages.get_mut(&gp) {
                if *left == 0 {
                    lost = true;
                } else {
                    *left -= 1;
                }
            }
            lost |= self.faults.uncorrectable_pages.contains(&gp);
            corrected |= self.faults.bitflip_pages.contains(&gp);
            lost |= self.rng.chance_ppm(self.faults.uncorrectable_ppm);
            corrected |= self.rng.chance_ppm(self.faults.bitflip_ppm);
        }
        if lost {
            // Like MTD, hand back the (damaged) data anyway; the caller must not trust it.
            let bit = self.rng.below(buf.len() as u64 * 8) as usize;
            buf[bit / 8] ^= 1 << (bit % 8);
            self.counters.uncorrectable_reads += 1;
            return Err(FlashError::Uncorrectable);
        }
        self.counters.bytes_read += buf.len() as u64;
        if corrected {
            self.counters.corrected_reads += 1;
            Ok(ReadStatus::Corrected)
        } else {
            Ok(ReadStatus::Clean)
        }
    }

    fn do_write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> std::result::Result<(), FlashError> {
        self.power.check_on()?;
        self.check_range(seg, offset, buf.len())?;
        let unit = self.geo.write_unit;
        if !offset.is_multiple_of(unit) || !buf.len().is_multiple_of(self.page) {
            self.counters.reject(Reject::Misaligned);
            return Err(FlashError::InvalidRequest);
        }
        if self.bad[seg as usize] {
            self.counters.reject(Reject::BadBlock);
            return Err(FlashError::InvalidRequest);
        }
        if buf.is_empty() {
            return Ok(());
        }
        let first = offset / unit;
        if first < self.next_page[seg as usize] {
            let gp = seg as usize * self.ppb as usize + first as usize;
            let why = if self.programmed[gp] { Reject::Rewrite } else { Reject::OutOfOrder };
            self.counters.reject(why);
            return Err(FlashError::InvalidRequest);
        }
        if let Gate::Cut(effect) = self.power.gate(OpKind::Write) {
            self.counters.power_cuts += 1;
            self.counters.writes += 1;
            match effect {
                CutEffect::NotDone => {}
                CutEffect::Done => self.program_all(seg, first, buf),
                CutEffect::Torn => self.torn_program(seg, first, buf),
            }
            return Err(FlashError::PowerCut);
        }
        self.counters.writes += 1;
        for (i, chunk) in buf.chunks(self.page).enumerate() {
            let page = first + i as u32;
            let gp = u64::from(seg) * u64::from(self.ppb) + u64::from(page);
            if let Some(left) = self.faults.program_fail.get_mut(&gp) {
                if *left == 0 {
                    let mut garbage = chunk.to_vec();
                    let mut noise = vec![0u8; chunk.len()];
                    self.rng.fill(&mut noise);
                    for (g, n) in garbage.iter_mut().zip(noise) {
                        *g &= n;
                    }
                    self.program_page(seg, page, &garbage);
                    self.counters.write_failures += 1;
                    return Err(FlashError::WriteFailed);
                }
                *left -= 1;
            }
            self.program_page(seg, page, chunk);
        }
        Ok(())
    }

    fn program_all(&mut self, seg: u32, first: u32, buf: &[u8]) {
        for (i, chunk) in buf.chunks(self.page).enumerate() {
            self.program_page(seg, first + i as u32, chunk);
        }
    }

    fn do_erase(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        self.power.check_on()?;
        self.check_range(seg, 0, 0)?;
        if self.bad[seg as usize] {
            self.counters.reject(Reject::BadBlock);
            return Err(FlashError::InvalidRequest);
        }
        if let Gate::Cut(effect) = self.power.gate(OpKind::Erase) {
            self.counters.power_cuts += 1;
            match effect {
                CutEffect::NotDone => {}
                CutEffect::Done => self.erase_block(seg),
                CutEffect::Torn => self.torn_erase(seg),
            }
            return Err(FlashError::PowerCut);
        }
        if let Some(left) = self.faults.weak_blocks.get_mut(&seg) {
            if *left == 0 {
                self.counters.erase_failures += 1;
                return Err(FlashError::EraseFailed);
            }
            *left -= 1;
        }
        self.erase_block(seg);
        Ok(())
    }

    fn do_mark_bad(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        self.power.check_on()?;
        self.check_range(seg, 0, 0)?;
        if let Gate::Cut(effect) = self.power.gate(OpKind::MarkBad) {
            self.counters.power_cuts += 1;
            if effect != CutEffect::NotDone {
                self.bad[seg as usize] = true;
                self.counters.marked_bad += 1;
            }
            return Err(FlashError::PowerCut);
        }
        self.bad[seg as usize] = true;
        self.counters.marked_bad += 1;
        Ok(())
    }
}

impl Flash for NandSim {
    fn geometry(&self) -> Geometry {
        self.geo
    }

    fn pairing(&self) -> Option<Pairing> {
        self.pairing
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
        Ok(self.bad[seg as usize])
    }

    fn mark_bad(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        let r = self.do_mark_bad(seg);
        self.log.push(OpKind::MarkBad, seg, 0, 0, r);
        r
    }

    fn flush(&mut self) -> std::result::Result<(), FlashError> {
        let r = self.power.check_on().and_then(|()| match self.power.gate(OpKind::Flush) {
            Gate::Go => {
                self.counters.flushes += 1;
                Ok(())
            }
            Gate::Cut(_) => {
                self.counters.power_cuts += 1;
                Err(FlashError::PowerCut)
            }
        });
        self.log.push(OpKind::Flush, 0, 0, 0, r);
        r
    }
}
