//! `--cheap-ftl`: a userspace model of `make bench`'s cheap-FTL randwrite forms (issue 13):
//! ferrofs's block backend on mtdblock over a 256 MiB nandsim chip with 128 KiB erase blocks.
//!
//! The medium is a [`BlockSim`] formatted as `mkfs.ferrofs --au 128k` formats the rig's
//! mtdblock: 4 KiB write unit, 128 KiB segments (the erase block), 16 KiB FTL page (mkfs's
//! default of 4 write units: mtdblock reports no larger I/O size), 2 open segments (mkfs's
//! block default: one log head plus the checkpoint area), mounted with the kernel's 8 MiB
//! replay window for block devices. Between the engine and the medium sits [`MtdBlock`], a model
//! of mtdblock: a one-erase-block write cache that writes its block back whole (erase and 64
//! page programs) when a write goes to another erase block and at every device flush. Each
//! write-back is one NAND erase, the figure the rig reads from nandsim's erase counter.
//!
//! The kernel's call pattern (docs/kernel.md): each dirty folio run is one
//! `Engine::write_blocks` call (at most 64 blocks; random 4 KiB overwrites make runs of one),
//! fsync is `setattr` of the timestamps (`write_inode` of the dirty inode) and `Engine::fsync`,
//! and the background thread runs once per simulated second: background GC in
//! `GC_STEP_BYTES` steps, then a checkpoint (`sync`) every 5 ticks when the log moved. The
//! forms, in the rig's order over one kept file of half the device (laid out first with
//! sequential writes and an fsync):
//! - `sync16`: 2 MiB of random 4 KiB overwrites, an fsync after every 16;
//! - `buffered`: 8 MiB, written back by the flusher whenever 2 MiB are dirty (the background
//!   threshold under `vm.dirty_bytes` 4 MiB), in file order, then the final fsync;
//! - `sync1`: 256 KiB, an fsync after every write.
//!
//! Simulated time (for the background thread and the modelled MB/s) is nandsim's time for what
//! mtdblock does: per write-back an erase and 64 page programs, per cache fill and per read that
//! misses the cache the pages read, plus 25 ns per byte moved. Idle gaps of `gap_seconds` lie
//! between the layout and the forms (the rig starts a new tool for each).

use std::fmt::Write as _;

use ferrofs_engine::flash::{Flash, FlashError, Geometry, ReadStatus};
use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::std_platform::StdEngine;
use ferrofs_engine::{CreateArgs, Error, FormatOptions, MountOptions, SetAttr, ROOT_INO};
use ferrofs_flashsim::{BlockConfig, BlockSim};
use serde::Serialize;

use crate::dirty::{BYTE_NS, ERASE_US, PROGRAM_US, READ_US};
use crate::{now, BenchError, Result, Rng, MIB};

/// mtdblock's erase block (nandsim's: 64 pages of 2 KiB).
pub const ERASE_BLOCK: u64 = 128 << 10;
/// NAND pages per erase block.
pub const NAND_PAGES: u64 = 64;
/// NAND page.
pub const NAND_PAGE: u64 = 2048;
/// The kernel's replay window on a block device (`BLOCK_CHECKPOINT_LOG_BYTES`).
pub const BLOCK_REPLAY_WINDOW: u64 = 8 << 20;
/// Record bytes per background GC step (`bg::GC_STEP_BYTES`).
pub const GC_STEP_BYTES: u32 = 32 * 1024;
/// Folios per write-back run (`data::MAX_RUN`).
pub const MAX_RUN: usize = 64;
/// Seconds between two periodic checkpoints (`commit=5`).
pub const COMMIT_TICKS: u32 = 5;

/// What the engine was doing when the device saw an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ctx {
    /// `write_blocks` (write-back of dirty folios).
    Write,
    /// `setattr` (write_inode) at fsync or after a write-back pass.
    Inode,
    /// `Engine::fsync`.
    Fsync,
    /// The background thread's GC steps.
    BgGc,
    /// The background thread's periodic checkpoint.
    BgSync,
}

const CTXS: [Ctx; 5] = [Ctx::Write, Ctx::Inode, Ctx::Fsync, Ctx::BgGc, Ctx::BgSync];

fn ctx_index(c: Ctx) -> usize {
    match c {
        Ctx::Write => 0,
        Ctx::Inode => 1,
        Ctx::Fsync => 2,
        Ctx::BgGc => 3,
        Ctx::BgSync => 4,
    }
}

fn ctx_name(c: Ctx) -> &'static str {
    match c {
        Ctx::Write => "write_blocks",
        Ctx::Inode => "setattr",
        Ctx::Fsync => "fsync",
        Ctx::BgGc => "bg gc",
        Ctx::BgSync => "bg checkpoint",
    }
}

/// The device's counters as mtdblock sees them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MtdCounters {
    /// Write requests.
    pub writes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Read requests.
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Cache flushes (`REQ_PREFLUSH`).
    pub flushes: u64,
    /// Erase-block write-backs (erase, then program the whole block): NAND erases.
    pub writebacks: u64,
    /// Of them, because a write went to another erase block.
    pub writebacks_switch: u64,
    /// Of them, at a flush.
    pub writebacks_flush: u64,
    /// Erase blocks read whole into the cache (a write to a block not cached).
    pub cache_fills: u64,
    /// NAND pages read (cache fills and reads that miss the cache).
    pub nand_pages_read: u64,
    /// Write-backs by what the engine was doing (`Ctx` order).
    pub writebacks_by_ctx: [u64; 5],
    /// Flushes by what the engine was doing.
    pub flushes_by_ctx: [u64; 5],
}

impl MtdCounters {
    fn since(&self, b: &MtdCounters) -> MtdCounters {
        let mut by = [0u64; 5];
        let mut fl = [0u64; 5];
        for i in 0..5 {
            by[i] = self.writebacks_by_ctx[i] - b.writebacks_by_ctx[i];
            fl[i] = self.flushes_by_ctx[i] - b.flushes_by_ctx[i];
        }
        MtdCounters {
            writes: self.writes - b.writes,
            write_bytes: self.write_bytes - b.write_bytes,
            reads: self.reads - b.reads,
            read_bytes: self.read_bytes - b.read_bytes,
            flushes: self.flushes - b.flushes,
            writebacks: self.writebacks - b.writebacks,
            writebacks_switch: self.writebacks_switch - b.writebacks_switch,
            writebacks_flush: self.writebacks_flush - b.writebacks_flush,
            cache_fills: self.cache_fills - b.cache_fills,
            nand_pages_read: self.nand_pages_read - b.nand_pages_read,
            writebacks_by_ctx: by,
            flushes_by_ctx: fl,
        }
    }

    /// Simulated nandsim seconds of what mtdblock did.
    pub fn device_seconds(&self) -> f64 {
        let prog = self.writebacks as f64 * (ERASE_US + NAND_PAGES as f64 * PROGRAM_US);
        let read = self.nand_pages_read as f64 * READ_US;
        let bytes = self.writebacks * ERASE_BLOCK + self.nand_pages_read * NAND_PAGE;
        (prog + read) / 1e6 + bytes as f64 * BYTE_NS / 1e9
    }
}

/// mtdblock's one-erase-block cache over any medium (the model of the cheap FTL). Writes and
/// flushes are forwarded to the medium unchanged; the counters say what mtdblock would have
/// done with them.
#[derive(Debug)]
pub struct MtdBlock<F: Flash> {
    inner: F,
    /// The cached erase block and whether it differs from the NAND.
    cached: Option<u64>,
    dirty: bool,
    /// What the engine is doing (set by the caller).
    pub ctx: Ctx,
    /// The counters.
    pub c: MtdCounters,
}

impl<F: Flash> MtdBlock<F> {
    /// mtdblock over `inner`, its cache empty.
    pub fn new(inner: F) -> Self {
        MtdBlock { inner, cached: None, dirty: false, ctx: Ctx::Write, c: MtdCounters::default() }
    }

    /// The medium.
    pub fn inner(&self) -> &F {
        &self.inner
    }

    fn writeback(&mut self, flush: bool) {
        if self.dirty {
            self.dirty = false;
            self.c.writebacks += 1;
            self.c.writebacks_by_ctx[ctx_index(self.ctx)] += 1;
            if flush {
                self.c.writebacks_flush += 1;
            } else {
                self.c.writebacks_switch += 1;
            }
        }
    }

    /// A write of `len` bytes at device byte `addr`, 512 bytes at a time as mtdblock takes it.
    pub fn model_write(&mut self, addr: u64, len: u64) {
        self.c.writes += 1;
        self.c.write_bytes += len;
        let (first, last) = (addr / ERASE_BLOCK, (addr + len.max(1) - 1) / ERASE_BLOCK);
        for b in first..=last {
            if self.cached != Some(b) {
                self.writeback(false);
                self.cached = Some(b);
                self.c.cache_fills += 1;
                self.c.nand_pages_read += NAND_PAGES;
            }
            self.dirty = true;
        }
    }

    /// A read of `len` bytes at `addr`: from the cache when it holds the block, else from NAND.
    pub fn model_read(&mut self, addr: u64, len: u64) {
        self.c.reads += 1;
        self.c.read_bytes += len;
        let end = addr + len;
        let mut a = addr;
        while a < end {
            let b = a / ERASE_BLOCK;
            let stop = ((b + 1) * ERASE_BLOCK).min(end);
            if self.cached != Some(b) {
                self.c.nand_pages_read += (stop - 1) / NAND_PAGE - a / NAND_PAGE + 1;
            }
            a = stop;
        }
    }

    /// A cache flush: the cached block is written back if dirty (it stays cached, clean).
    pub fn model_flush(&mut self) {
        self.c.flushes += 1;
        self.c.flushes_by_ctx[ctx_index(self.ctx)] += 1;
        self.writeback(true);
    }
}

impl<F: Flash> Flash for MtdBlock<F> {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> std::result::Result<ReadStatus, FlashError> {
        let g = self.inner.geometry();
        if let Some(a) = g.byte_addr(seg, offset, buf.len()) {
            self.model_read(a, buf.len() as u64);
        }
        self.inner.read(seg, offset, buf)
    }
    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> std::result::Result<(), FlashError> {
        let r = self.inner.write(seg, offset, buf);
        if r.is_ok() {
            let g = self.inner.geometry();
            if let Some(a) = g.byte_addr(seg, offset, buf.len()) {
                self.model_write(a, buf.len() as u64);
            }
        }
        r
    }
    fn erase(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        // a discard: mtdblock has none (the block layer drops it)
        self.inner.erase(seg)
    }
    fn is_bad(&mut self, seg: u32) -> std::result::Result<bool, FlashError> {
        self.inner.is_bad(seg)
    }
    fn mark_bad(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        self.inner.mark_bad(seg)
    }
    fn flush(&mut self) -> std::result::Result<(), FlashError> {
        let r = self.inner.flush();
        self.model_flush();
        r
    }
    fn discard_hint(&mut self, seg: u32) {
        self.inner.discard_hint(seg)
    }
}

/// The engine over mtdblock over the block simulator.
pub type CFs = StdEngine<MtdBlock<BlockSim>>;

/// The model's parameters.
#[derive(Debug, Clone, Serialize)]
pub struct CheapConfig {
    /// Device size in MiB (the rig: the whole 256 MiB chip).
    pub device_mib: u32,
    /// File size as a fraction of the device.
    pub file_fraction: f64,
    /// Bytes of the three forms: sync16, buffered, sync1.
    pub amounts: [u64; 3],
    /// Idle simulated seconds before each form (the background thread runs).
    pub gap_seconds: u32,
    /// Model the background thread.
    pub background: bool,
    /// Seconds between the background thread's periodic checkpoints (the `commit=` option).
    pub commit_seconds: u32,
    /// The background thread's periodic work: `false` (the default) `Engine::commit`, as the
    /// kernel calls it (on a block device a flush of the log heads, an fsync's work, unless a
    /// checkpoint is due); `true` a checkpoint, as the kernel did before.
    pub periodic_checkpoint: bool,
    /// The replay window (`MountOptions::checkpoint_log_bytes`; the kernel's on a block device:
    /// [`BLOCK_REPLAY_WINDOW`]).
    pub replay_window: u64,
    /// Simulated milliseconds of CPU (system call, page cache, engine) per user write and per
    /// fsync, added to the clock the background thread runs by (0: device time only).
    pub call_ms: f64,
    /// The rig's syncs around each form: `sync` (a checkpoint, `sync_fs`) after the form
    /// before the idle gap (the rig's `snap` and `settle`), and again after the gap (`snap` of
    /// the next form), none of them timed.
    pub settle_sync: bool,
    /// Random seed.
    pub seed: u64,
}

impl CheapConfig {
    /// The rig's quick profile.
    pub fn rig(seed: u64) -> Self {
        CheapConfig { device_mib: 256, file_fraction: 0.5, amounts: [2 * MIB, 8 * MIB, 256 << 10], gap_seconds: 2, background: true, commit_seconds: COMMIT_TICKS, periodic_checkpoint: false, replay_window: BLOCK_REPLAY_WINDOW, call_ms: 0.0, settle_sync: false, seed }
    }
}

/// One form's figures.
#[derive(Debug, Clone, Serialize)]
pub struct FormResult {
    /// `randwrite-sync16`, `randwrite-buffered`, `randwrite-sync1`.
    pub name: String,
    /// User bytes written.
    pub user_bytes: u64,
    /// fsyncs.
    pub fsyncs: u64,
    /// Engine: bytes programmed (all of it), GC copies, checkpoints, and the rest (metadata:
    /// index, segment table, inodes, padding, checkpoint slots).
    pub engine_programmed: u64,
    /// GC bytes moved.
    pub gc_bytes: u64,
    /// Checkpoints.
    pub checkpoints: u64,
    /// programmed - user - gc.
    pub meta_bytes: u64,
    /// Checkpoints by context (`Ctx` order).
    pub checkpoints_by_ctx: [u64; 5],
    /// mtdblock's view.
    pub dev: MtdCounters,
    /// Modelled device seconds.
    pub device_seconds: f64,
    /// user bytes / device seconds.
    pub mb_per_s: f64,
    /// Write-backs per fsync.
    pub writebacks_per_fsync: f64,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct CheapResult {
    /// Parameters.
    pub config: CheapConfig,
    /// Per form.
    pub forms: Vec<FormResult>,
    /// Engine fsck clean at the end.
    pub fsck_clean: bool,
}

struct St {
    fs: CFs,
    ino: u64,
    op: u64,
    bg_at: f64,
    bg_ticks: u32,
    bg_seq: u64,
    bg_flushed: u64,
    bg_flush_age: u32,
    background: bool,
    commit: u32,
    periodic_checkpoint: bool,
    ckpt_by_ctx: [u64; 5],
    idle_total: f64,
    calls: u64,
    call_s: f64,
}

fn eng(what: &'static str) -> impl Fn(Error) -> BenchError {
    move |e| BenchError::Engine(what, e)
}

impl St {
    /// The simulated clock: mtdblock's device time, the idle gaps and the CPU time per call.
    fn dev_time(&self) -> f64 {
        self.fs.flash_ref().c.device_seconds() + self.idle_total + self.calls as f64 * self.call_s
    }

    /// Runs `f` with the device tagged `ctx`, counting its checkpoints.
    fn call<T>(&mut self, ctx: Ctx, f: impl FnOnce(&mut CFs) -> std::result::Result<T, Error>) -> std::result::Result<T, Error> {
        self.fs.flash_io().ctx = ctx;
        let c0 = self.fs.stats().checkpoints;
        let r = f(&mut self.fs);
        let c1 = self.fs.stats().checkpoints;
        self.ckpt_by_ctx[ctx_index(ctx)] += c1 - c0;
        r
    }

    /// One second of the background thread.
    fn tick(&mut self) -> Result<()> {
        self.bg_ticks += 1;
        let mut cur = None;
        loop {
            match self.call(Ctx::BgGc, |fs| fs.gc_step_bounded(true, cur, GC_STEP_BYTES)) {
                Ok(ferrofs_engine::gcstep::GcProgress::More(c)) => cur = Some(c),
                Ok(_) | Err(Error::NoSpace) => break,
                Err(e) => return Err(BenchError::Engine("background gc", e)),
            }
        }
        // the kernel's rule (src/bg.rs): on a block device the commit flushes only records
        // that waited a whole `commit=` interval without any flush (or when a checkpoint is due)
        if self.fs.flushed_seq() != self.bg_flushed {
            self.bg_flushed = self.fs.flushed_seq();
            self.bg_flush_age = 0;
        } else {
            self.bg_flush_age += 1;
        }
        let due = if self.periodic_checkpoint {
            self.fs.log_seq() != self.bg_seq
        } else {
            self.fs.checkpoint_due() || (self.fs.log_seq() != self.fs.flushed_seq() && self.bg_flush_age >= self.commit)
        };
        if self.bg_ticks >= self.commit && due {
            if self.periodic_checkpoint {
                self.call(Ctx::BgSync, |fs| fs.sync()).map_err(eng("periodic checkpoint"))?;
            } else {
                self.call(Ctx::BgSync, |fs| fs.commit().map(drop)).map_err(eng("periodic commit"))?;
            }
            self.bg_seq = self.fs.log_seq();
            self.bg_flushed = self.fs.flushed_seq();
            self.bg_flush_age = 0;
            self.bg_ticks = 0;
        }
        Ok(())
    }

    /// The background thread catches up with the simulated clock.
    fn background(&mut self) -> Result<()> {
        if !self.background {
            return Ok(());
        }
        while self.bg_at + 1.0 <= self.dev_time() {
            self.bg_at += 1.0;
            self.tick()?;
        }
        Ok(())
    }

    /// `seconds` idle: the clock moves, only the background thread works.
    fn idle(&mut self, seconds: u32) -> Result<()> {
        self.idle_total += f64::from(seconds);
        self.background()
    }

    fn write_run(&mut self, first: u64, blocks: &[Vec<u8>], size: u64) -> Result<()> {
        self.op += 1;
        let t = now(self.op);
        let refs: Vec<&[u8]> = blocks.iter().map(|b| b.as_slice()).collect();
        // the kernel's `size`: the inode size, at most the end of the run
        let size = size.min((first + blocks.len() as u64) * 4096);
        let ino = self.ino;
        self.call(Ctx::Write, |fs| fs.write_blocks(ino, first, &refs, size, t, t)).map_err(eng("write_blocks"))?;
        self.background()
    }

    fn write_inode(&mut self) -> Result<()> {
        self.op += 1;
        let t = now(self.op);
        let a = SetAttr { mtime: Some(t), ctime: Some(t), ..SetAttr::default() };
        let ino = self.ino;
        self.call(Ctx::Inode, |fs| fs.setattr(ino, &a, t)).map_err(eng("setattr"))?;
        Ok(())
    }

    fn fsync(&mut self) -> Result<()> {
        self.calls += 1;
        self.write_inode()?;
        let ino = self.ino;
        self.call(Ctx::Fsync, |fs| fs.fsync(ino)).map_err(eng("fsync"))?;
        self.background()
    }
}

fn block(rng: &mut Rng) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    for c in b.chunks_mut(8) {
        c.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    b
}

/// Formats and mounts the rig's ferrofs-mtdblock on a fresh simulator.
pub fn fresh(device_mib: u32, replay_window: u64, seed: u64) -> Result<CFs> {
    let segs = (u64::from(device_mib) * MIB / ERASE_BLOCK) as u32;
    let mut cfg = BlockConfig::with_layout(4096, ERASE_BLOCK as u32, segs);
    cfg.preferred_write = 16384;
    cfg.seed = seed;
    let sim = BlockSim::new(cfg).map_err(|e| BenchError::Sim(e.to_string()))?;
    let fo = FormatOptions { open_segments: Some(2), ..FormatOptions::default() };
    let dev = CFs::format(MtdBlock::new(sim), &fo, now(0)).map_err(|(e, _)| BenchError::Engine("format", e))?;
    let mo = MountOptions { checkpoint_log_bytes: replay_window, ..MountOptions::default() };
    CFs::mount(dev, mo).map_err(|(e, _)| BenchError::Engine("mount", e))
}

/// Runs the layout and the three forms.
pub fn run_cheap(cfg: &CheapConfig, log: &mut dyn FnMut(&str)) -> Result<CheapResult> {
    let fs = fresh(cfg.device_mib, cfg.replay_window, cfg.seed)?;
    let mut st = St { fs, ino: 0, op: 1, bg_at: 0.0, bg_ticks: 0, bg_seq: 0, bg_flushed: 0, bg_flush_age: 0, background: cfg.background, commit: cfg.commit_seconds.max(1), periodic_checkpoint: cfg.periodic_checkpoint, ckpt_by_ctx: [0; 5], idle_total: 0.0, calls: 0, call_s: cfg.call_ms / 1e3 };
    st.bg_seq = st.fs.log_seq();
    st.bg_flushed = st.fs.flushed_seq();
    let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
    st.ino = st.fs.create(ROOT_INO, b"work", &args, now(1)).map_err(eng("create"))?.ino;
    let mut rng = Rng::new(cfg.seed);
    let file_blocks = ((u64::from(cfg.device_mib) * MIB) as f64 * cfg.file_fraction) as u64 / 4096;
    let size = file_blocks * 4096;
    // layout: sequential write-back runs of 64 folios, then fsync
    let mut b = 0u64;
    while b < file_blocks {
        let n = (file_blocks - b).min(MAX_RUN as u64) as usize;
        let run: Vec<Vec<u8>> = (0..n).map(|_| block(&mut rng)).collect();
        st.write_run(b, &run, (b + n as u64) * 4096)?;
        b += n as u64;
    }
    st.fsync()?;
    log(&format!("cheap-ftl: laid out {} MiB, {} write-backs", size >> 20, st.fs.flash_ref().c.writebacks));
    let mut forms = Vec::new();
    for (k, (name, every)) in [("randwrite-sync16", 16u64), ("randwrite-buffered", 0), ("randwrite-sync1", 1)].into_iter().enumerate() {
        if cfg.settle_sync {
            st.call(Ctx::BgSync, |fs| fs.sync()).map_err(eng("settle sync"))?;
        }
        st.idle(cfg.gap_seconds)?;
        if cfg.settle_sync {
            st.call(Ctx::BgSync, |fs| fs.sync()).map_err(eng("settle sync"))?;
        }
        let d0 = st.fs.flash_ref().c;
        let s0 = st.fs.stats();
        let k0 = st.ckpt_by_ctx;
        let n = cfg.amounts[k] / 4096;
        let mut fsyncs = 0u64;
        let mut dirty: std::collections::BTreeMap<u64, Vec<u8>> = std::collections::BTreeMap::new();
        for i in 0..n {
            st.calls += 1;
            let blk = rng.below(file_blocks);
            let data = block(&mut rng);
            if every == 0 {
                dirty.insert(blk, data);
                if dirty.len() as u64 * 4096 >= 2 * MIB {
                    flush_dirty(&mut st, &mut dirty, size)?;
                }
            } else {
                st.write_run(blk, &[data], size)?;
                if (i + 1) % every == 0 || i + 1 == n {
                    st.fsync()?;
                    fsyncs += 1;
                }
            }
        }
        if every == 0 {
            flush_dirty(&mut st, &mut dirty, size)?;
            st.fsync()?;
            fsyncs += 1;
        }
        let dev = st.fs.flash_ref().c.since(&d0);
        let s1 = st.fs.stats();
        let mut kc = [0u64; 5];
        for i in 0..5 {
            kc[i] = st.ckpt_by_ctx[i] - k0[i];
        }
        let user = n * 4096;
        let prog = s1.programmed_bytes - s0.programmed_bytes;
        let gc = s1.gc_bytes - s0.gc_bytes;
        let secs = dev.device_seconds();
        let r = FormResult {
            name: name.into(),
            user_bytes: user,
            fsyncs,
            engine_programmed: prog,
            gc_bytes: gc,
            checkpoints: s1.checkpoints - s0.checkpoints,
            meta_bytes: prog.saturating_sub(user).saturating_sub(gc),
            checkpoints_by_ctx: kc,
            dev,
            device_seconds: secs,
            mb_per_s: if secs > 0.0 { user as f64 / secs / 1e6 } else { 0.0 },
            writebacks_per_fsync: if fsyncs > 0 { dev.writebacks as f64 / fsyncs as f64 } else { 0.0 },
        };
        log(&format!("cheap-ftl: {name}: {} write-backs, {} fsyncs, {} checkpoints", dev.writebacks, fsyncs, r.checkpoints));
        forms.push(r);
    }
    let fsck_clean = st.fs.fsck().map(|r| r.problems == 0).unwrap_or(false);
    Ok(CheapResult { config: cfg.clone(), forms, fsck_clean })
}

/// The flusher: every dirty folio in file order, one `write_blocks` per run of adjacent ones,
/// then `write_inode`.
fn flush_dirty(st: &mut St, dirty: &mut std::collections::BTreeMap<u64, Vec<u8>>, size: u64) -> Result<()> {
    if dirty.is_empty() {
        return Ok(());
    }
    let all = std::mem::take(dirty);
    let mut run: Vec<Vec<u8>> = Vec::new();
    let mut first = 0u64;
    for (blk, data) in all {
        if !run.is_empty() && (blk != first + run.len() as u64 || run.len() == MAX_RUN) {
            st.write_run(first, &run, size)?;
            run.clear();
        }
        if run.is_empty() {
            first = blk;
        }
        run.push(data);
    }
    if !run.is_empty() {
        st.write_run(first, &run, size)?;
    }
    st.write_inode()
}

/// The results as Markdown.
pub fn cheap_markdown(r: &CheapResult) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Cheap-FTL model: ferrofs-mtdblock (128 KiB segments, 2 open, {} KiB replay window) on mtdblock over {} MiB\n", r.config.replay_window >> 10, r.config.device_mib);
    let _ = writeln!(s, "| Figure | {} |", r.forms.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(" | "));
    let _ = writeln!(s, "|---|{}", "---|".repeat(r.forms.len()));
    let row = |s: &mut String, name: &str, f: &dyn Fn(&FormResult) -> String| {
        let _ = writeln!(s, "| {name} | {} |", r.forms.iter().map(f).collect::<Vec<_>>().join(" | "));
    };
    row(&mut s, "user KiB", &|f| format!("{}", f.user_bytes >> 10));
    row(&mut s, "fsyncs", &|f| format!("{}", f.fsyncs));
    row(&mut s, "mtdblock write-backs (NAND erases)", &|f| format!("{}", f.dev.writebacks));
    row(&mut s, "write-backs per fsync", &|f| format!("{:.2}", f.writebacks_per_fsync));
    row(&mut s, "of them at a block switch / at a flush", &|f| format!("{} / {}", f.dev.writebacks_switch, f.dev.writebacks_flush));
    for c in CTXS {
        row(&mut s, &format!("write-backs in {}", ctx_name(c)), &|f| format!("{}", f.dev.writebacks_by_ctx[ctx_index(c)]));
    }
    row(&mut s, "device flushes", &|f| format!("{}", f.dev.flushes));
    row(&mut s, "engine KiB programmed", &|f| format!("{}", f.engine_programmed >> 10));
    row(&mut s, "of it GC copies / metadata KiB", &|f| format!("{} / {}", f.gc_bytes >> 10, f.meta_bytes >> 10));
    row(&mut s, "checkpoints (fsync / write / bg gc / bg periodic)", &|f| {
        format!("{} ({} / {} / {} / {})", f.checkpoints, f.checkpoints_by_ctx[2], f.checkpoints_by_ctx[0] + f.checkpoints_by_ctx[1], f.checkpoints_by_ctx[3], f.checkpoints_by_ctx[4])
    });
    row(&mut s, "device write requests / KiB", &|f| format!("{} / {}", f.dev.writes, f.dev.write_bytes >> 10));
    row(&mut s, "device read requests / KiB", &|f| format!("{} / {}", f.dev.reads, f.dev.read_bytes >> 10));
    row(&mut s, "NAND pages read (cache fills + misses)", &|f| format!("{}", f.dev.nand_pages_read));
    row(&mut s, "modelled MB/s", &|f| format!("{:.3}", f.mb_per_s));
    let _ = writeln!(s, "\nfsck clean at the end: {}", r.fsck_clean);
    s
}
