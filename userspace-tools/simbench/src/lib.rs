//! `ferrofs-simbench`: benchmarks of the ferrofs engine on the in-memory NAND simulator.
//!
//! Two experiments, both deterministic for a given seed except for wall-clock timings:
//!
//! - [`run_wa`]: steady-state write amplification of random 4 KiB overwrites at a given fill
//!   level, uniform or skewed (80 % of the writes to 20 % of the data), measured as
//!   device bytes programmed / user bytes written and erases per user MiB, beside the greedy
//!   cleaning bound 1/(1-u).
//! - [`run_mount`]: mount time after a power cut (the engine dropped without unmount) and after a
//!   clean unmount, with the number of records replayed and the log bytes written since the last
//!   checkpoint.
//!
//! The simulator has no timing model: mount times are CPU times of the engine over RAM and
//! mainly show how much work recovery does; the bytes read at mount are the figure that
//! carries over to real flash.

pub mod cheapftl;
pub mod dirty;
pub mod footprint;
pub mod meta;
pub mod mountscale;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use ferrofs_engine::format::{segtab_chunks, Loc, CP_HDR_SIZE, S_IFREG};
use ferrofs_engine::std_platform::StdEngine;
use ferrofs_engine::{CreateArgs, Error, FormatOptions, MountOptions, Timespec, ROOT_INO};
use ferrofs_engine::readcache::READ_CACHE_AUTO_MAX;
use ferrofs_flashsim::{Counters, NandConfig, NandSim};
use serde::Serialize;

/// The engine over the NAND simulator.
pub type Fs = StdEngine<NandSim>;

/// NAND page size used by every experiment (bytes).
pub const PAGE_SIZE: u32 = 2048;
/// Pages per erase block: 64, so 128 KiB erase blocks.
pub const PAGES_PER_BLOCK: u32 = 64;
/// Erase block (segment) size in bytes.
pub const SEGMENT_SIZE: u32 = PAGE_SIZE * PAGES_PER_BLOCK;
/// Size of one user write of the overwrite workloads.
pub const WRITE_SIZE: usize = 4096;
pub(crate) const MIB: u64 = 1 << 20;

/// Errors of the benchmark.
#[derive(Debug)]
pub enum BenchError {
    /// The simulator refused its configuration.
    Sim(String),
    /// The engine returned an error where the experiment cannot continue.
    Engine(&'static str, Error),
    /// A sanity check on the results failed.
    Insane(String),
}

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchError::Sim(s) => write!(f, "simulator: {s}"),
            BenchError::Engine(what, e) => write!(f, "engine error during {what}: {e:?} (errno {})", e.errno()),
            BenchError::Insane(s) => write!(f, "insane result: {s}"),
        }
    }
}

impl std::error::Error for BenchError {}

/// Result type of the benchmark.
pub type Result<T> = std::result::Result<T, BenchError>;

/// SplitMix64: small, fast and reproducible.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Synthetic clock: one second per 1000 operations, so timestamps move but cost nothing.
pub fn now(op: u64) -> Timespec {
    Timespec { sec: 1_700_000_000 + (op / 1000) as i64, nsec: ((op % 1000) * 1_000_000) as u32 }
}

/// A fresh simulator of `device_mib` MiB with 2 KiB pages and 128 KiB erase blocks, formatted
/// and mounted.
pub fn fresh_fs(device_mib: u32, seed: u64, cache_nodes: usize) -> Result<Fs> {
    let blocks = device_mib.saturating_mul((MIB / u64::from(SEGMENT_SIZE)) as u32);
    let cfg = NandConfig { seed, ..NandConfig::with_layout(PAGE_SIZE, PAGES_PER_BLOCK, blocks) };
    let sim = NandSim::new(cfg).map_err(|e| BenchError::Sim(e.to_string()))?;
    let sim = Fs::format(sim, &FormatOptions::default(), now(0)).map_err(|(e, _)| BenchError::Engine("format", e))?;
    Fs::mount(sim, mount_opts(cache_nodes)).map_err(|(e, _)| BenchError::Engine("first mount", e))
}

/// Mount options of the benchmark: the defaults, with `cache_nodes` index nodes cached (0 = the
/// engine's automatic size) and the read cache the kernel gives a mount on the rig's 1 GiB
/// guest (1/256 of RAM, capped: `READ_CACHE_AUTO_MAX`).
pub fn mount_opts(cache_nodes: usize) -> MountOptions {
    MountOptions { cache_nodes, read_cache_bytes: Some(READ_CACHE_AUTO_MAX), ..MountOptions::default() }
}

/// Bytes of one checkpoint slot on a device of `segments` segments with `write_unit`-byte pages
/// (docs/format.md section 4: the blob, a header and one location per segment-table chunk,
/// rounded up to the write unit; the table itself is in SEGTAB records in the log).
pub fn checkpoint_slot_bytes(segments: u32, write_unit: u32) -> u64 {
    let blob = (CP_HDR_SIZE + segtab_chunks(segments) as usize * Loc::SIZE) as u64;
    blob.div_ceil(u64::from(write_unit)) * u64::from(write_unit)
}

pub(crate) fn counters(fs: &mut Fs) -> Counters {
    fs.flash_ref().counters()
}

/// Which blocks the overwrites hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Every 4 KiB block of the data equally likely.
    Uniform,
    /// 80 % of the writes to the first 20 % of the blocks, 20 % to the other 80 %.
    Skewed8020,
}

impl Pattern {
    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Uniform => "uniform",
            Pattern::Skewed8020 => "80/20",
        }
    }

    fn pick(self, rng: &mut Rng, blocks: u64) -> u64 {
        match self {
            Pattern::Uniform => rng.below(blocks),
            Pattern::Skewed8020 => {
                let hot = (blocks / 5).max(1);
                if rng.below(10) < 8 || hot == blocks {
                    rng.below(hot)
                } else {
                    hot + rng.below(blocks - hot)
                }
            }
        }
    }
}

/// One write-amplification experiment.
#[derive(Debug, Clone, Serialize)]
pub struct WaConfig {
    /// Device size in MiB.
    pub device_mib: u32,
    /// Target fill: user data as a fraction of the capacity the engine reports (statfs).
    pub fill: f64,
    /// Overwrite pattern.
    pub pattern: Pattern,
    /// Warm-up: random overwrites of this many times the device size before measuring.
    pub warmup_device_multiples: f64,
    /// Measurement: random overwrites of this many times the device size.
    pub measure_device_multiples: f64,
    /// Size of each file of the data set in bytes (a multiple of 4096).
    pub file_size: u64,
    /// Random seed.
    pub seed: u64,
    /// Index nodes cached by the engine (`MountOptions::cache_nodes`; 0 = the engine's automatic size).
    pub cache_nodes: usize,
}

/// Results of one write-amplification experiment.
#[derive(Debug, Clone, Serialize)]
pub struct WaResult {
    /// The experiment.
    pub config: WaConfig,
    /// User data written before the overwrites (bytes).
    pub data_bytes: u64,
    /// Fill reached: used blocks / total blocks from statfs (data + metadata), at the end.
    pub fill_actual: f64,
    /// Live user data / raw device size.
    pub data_over_device: f64,
    /// Greedy bound 1/(1-u) with u = the target fill.
    pub greedy_bound: f64,
    /// Greedy bound with u = `fill_actual`.
    pub greedy_bound_actual: f64,
    /// Greedy bound with u = `data_over_device` (the physical utilisation by user data alone).
    pub greedy_bound_raw: f64,
    /// User bytes written in the warm-up.
    pub warmup_user_bytes: u64,
    /// User bytes written in the measurement window.
    pub user_bytes: u64,
    /// Bytes programmed on the simulated NAND in the measurement window.
    pub programmed_bytes: u64,
    /// Erases in the measurement window.
    pub erases: u64,
    /// programmed / user bytes over the window.
    pub wa: f64,
    /// WA of the first half of the window.
    pub wa_first_half: f64,
    /// WA of the second half of the window (close to the first one in steady state).
    pub wa_second_half: f64,
    /// Erase blocks erased per MiB of user data.
    pub erases_per_user_mib: f64,
    /// Bytes the engine's GC moved in the window.
    pub gc_bytes: u64,
    /// Checkpoints in the window.
    pub checkpoints: u64,
    /// Share of the WA due to records copied by the GC: `gc_bytes / user_bytes`.
    pub wa_gc_copy: f64,
    /// The rest beyond 1 + GC copies: record headers, inode updates, index nodes, checkpoints,
    /// padding: `wa - 1 - wa_gc_copy`.
    pub wa_metadata: f64,
    /// Part of `wa_metadata` due to checkpoint blobs: checkpoints x slot size / user bytes.
    pub wa_checkpoint_blobs: f64,
    /// Part of `wa_metadata` due to index-node records (`Stats::index_bytes` / user bytes).
    pub wa_index_nodes: f64,
    /// Part of `wa_metadata` due to inode records (`Stats::inode_bytes` / user bytes).
    pub wa_inodes: f64,
    /// Part of `wa_metadata` due to SEGTAB records (`Stats::segtab_bytes` / user bytes).
    pub wa_segtab: f64,
    /// Overwrites refused with ENOSPC in the window (should be 0).
    pub enospc: u64,
    /// Wall-clock seconds of warm-up + measurement.
    pub seconds: f64,
    /// Erase count spread (max - min) over the device at the end.
    pub wear_spread: u64,
    /// The engine's index cache capacity in nodes (`MountOptions::cache_nodes` resolved).
    pub index_cache_nodes: usize,
    /// Dirty index nodes at which the engine checkpoints (`MountOptions::dirty_nodes` resolved).
    pub index_dirty_limit: usize,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn greedy(u: f64) -> f64 {
    if u >= 1.0 {
        f64::INFINITY
    } else {
        1.0 / (1.0 - u)
    }
}

fn used_fraction(fs: &Fs) -> f64 {
    let s = fs.statfs();
    ratio(s.blocks.saturating_sub(s.blocks_free), s.blocks)
}

/// Files of `file_size` bytes written sequentially until `target` data bytes (or ENOSPC).
/// Returns the inode numbers and the bytes written.
fn fill_files(fs: &mut Fs, target: u64, file_size: u64, op: &mut u64, rng: &mut Rng) -> Result<(Vec<u64>, u64)> {
    let mut inos = Vec::new();
    let mut written = 0u64;
    let mut chunk = vec![0u8; 64 * 1024];
    let mut k = 0u64;
    'files: while written < target {
        let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
        let name = format!("f{k:06}");
        k += 1;
        *op += 1;
        let ino = match fs.create(ROOT_INO, name.as_bytes(), &args, now(*op)) {
            Ok(i) => i.ino,
            Err(Error::NoSpace) => break,
            Err(e) => return Err(BenchError::Engine("create", e)),
        };
        let mut off = 0u64;
        let this = file_size.min(target - written).div_ceil(WRITE_SIZE as u64) * WRITE_SIZE as u64;
        while off < this {
            let n = (this - off).min(chunk.len() as u64) as usize;
            for c in chunk.chunks_mut(8) {
                c.copy_from_slice(&rng.next_u64().to_le_bytes());
            }
            *op += 1;
            match fs.write(ino, off, &chunk[..n], now(*op)) {
                Ok(w) => {
                    off += w as u64;
                    written += w as u64;
                    if w < n {
                        inos.push(ino);
                        break 'files;
                    }
                }
                Err(Error::NoSpace) => {
                    inos.push(ino);
                    break 'files;
                }
                Err(e) => return Err(BenchError::Engine("fill write", e)),
            }
        }
        inos.push(ino);
    }
    Ok((inos, written))
}

/// Runs one write-amplification experiment.
pub fn run_wa(cfg: &WaConfig) -> Result<WaResult> {
    let mut fs = fresh_fs(cfg.device_mib, cfg.seed, cfg.cache_nodes)?;
    let mut rng = Rng::new(cfg.seed ^ 0xA5A5_5A5A);
    let mut op = 0u64;
    let cap = fs.statfs().blocks * u64::from(fs.statfs().block_size);
    let target = (cap as f64 * cfg.fill) as u64;
    let file_size = cfg.file_size.max(WRITE_SIZE as u64) / WRITE_SIZE as u64 * WRITE_SIZE as u64;
    let (inos, data_bytes) = fill_files(&mut fs, target, file_size, &mut op, &mut rng)?;
    let bpf = file_size / WRITE_SIZE as u64;
    let blocks = data_bytes / WRITE_SIZE as u64;
    if blocks == 0 {
        return Err(BenchError::Insane("no data could be written".into()));
    }
    let device = u64::from(cfg.device_mib) * MIB;
    let warm = (device as f64 * cfg.warmup_device_multiples) as u64 / WRITE_SIZE as u64;
    let meas = ((device as f64 * cfg.measure_device_multiples) as u64 / WRITE_SIZE as u64).max(2);
    let mut buf = vec![0u8; WRITE_SIZE];
    let start = Instant::now();
    let mut enospc = 0u64;
    let mut overwrite = |fs: &mut Fs, op: &mut u64, rng: &mut Rng, enospc: &mut u64| -> Result<u64> {
        let b = cfg.pattern.pick(rng, blocks);
        let ino = inos[(b / bpf) as usize];
        let off = (b % bpf) * WRITE_SIZE as u64;
        buf[..8].copy_from_slice(&op.to_le_bytes());
        buf[8..16].copy_from_slice(&rng.next_u64().to_le_bytes());
        *op += 1;
        match fs.write(ino, off, &buf, now(*op)) {
            Ok(n) => Ok(n as u64),
            Err(Error::NoSpace) => {
                *enospc += 1;
                Ok(0)
            }
            Err(e) => Err(BenchError::Engine("overwrite", e)),
        }
    };
    let mut warmup_user_bytes = 0u64;
    let mut warm_enospc = 0u64;
    for _ in 0..warm {
        warmup_user_bytes += overwrite(&mut fs, &mut op, &mut rng, &mut warm_enospc)?;
    }
    let c0 = counters(&mut fs);
    let s0 = fs.stats();
    let mut user = 0u64;
    let mut mid = None;
    for i in 0..meas {
        if i == meas / 2 {
            mid = Some((counters(&mut fs).bytes_programmed, user));
        }
        user += overwrite(&mut fs, &mut op, &mut rng, &mut enospc)?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let c1 = counters(&mut fs);
    let s1 = fs.stats();
    let d = c1.since(&c0);
    let (mid_prog, mid_user) = mid.unwrap_or((c0.bytes_programmed, 0));
    let fill_actual = used_fraction(&fs);
    Ok(WaResult {
        config: cfg.clone(),
        data_bytes,
        fill_actual,
        data_over_device: ratio(data_bytes, device),
        greedy_bound: greedy(cfg.fill),
        greedy_bound_actual: greedy(fill_actual),
        greedy_bound_raw: greedy(ratio(data_bytes, device)),
        warmup_user_bytes,
        user_bytes: user,
        programmed_bytes: d.bytes_programmed,
        erases: d.blocks_erased,
        wa: ratio(d.bytes_programmed, user),
        wa_first_half: ratio(mid_prog.saturating_sub(c0.bytes_programmed), mid_user),
        wa_second_half: ratio(c1.bytes_programmed.saturating_sub(mid_prog), user.saturating_sub(mid_user)),
        erases_per_user_mib: d.erases_per_user_mib(user).unwrap_or(0.0),
        gc_bytes: s1.gc_bytes.saturating_sub(s0.gc_bytes),
        checkpoints: s1.checkpoints.saturating_sub(s0.checkpoints),
        wa_gc_copy: ratio(s1.gc_bytes.saturating_sub(s0.gc_bytes), user),
        wa_metadata: ratio(d.bytes_programmed, user) - 1.0 - ratio(s1.gc_bytes.saturating_sub(s0.gc_bytes), user),
        wa_checkpoint_blobs: ratio(
            s1.checkpoints.saturating_sub(s0.checkpoints)
                * checkpoint_slot_bytes((device / u64::from(SEGMENT_SIZE)) as u32, PAGE_SIZE),
            user,
        ),
        wa_index_nodes: ratio(s1.index_bytes.saturating_sub(s0.index_bytes), user),
        wa_inodes: ratio(s1.inode_bytes.saturating_sub(s0.inode_bytes), user),
        wa_segtab: ratio(s1.segtab_bytes.saturating_sub(s0.segtab_bytes), user),
        enospc,
        seconds,
        wear_spread: c1.wear_spread(),
        index_cache_nodes: fs.index_cache_limits().0,
        index_dirty_limit: fs.index_cache_limits().1,
    })
}

/// How long the mount experiment writes before the cut or unmount.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunLength {
    /// Write for this many seconds of wall clock (the clean case then replays the same number of operations).
    Seconds(f64),
    /// Write this many operations.
    Ops(u64),
}

/// The mount-time experiment.
#[derive(Debug, Clone, Serialize)]
pub struct MountConfig {
    /// Device size in MiB.
    pub device_mib: u32,
    /// Fill before the timed workload starts (fraction of the capacity).
    pub prefill: f64,
    /// How long to write.
    pub run: RunLength,
    /// Random seed.
    pub seed: u64,
}

/// Results of one mount (one case of the mount experiment).
#[derive(Debug, Clone, Serialize)]
pub struct MountResult {
    /// "power-cut" or "clean-unmount".
    pub case: String,
    /// Device size in MiB.
    pub device_mib: u32,
    /// Operations of the workload before the cut/unmount.
    pub ops: u64,
    /// User bytes written by them.
    pub user_bytes: u64,
    /// Wall-clock seconds of the workload.
    pub write_seconds: f64,
    /// Checkpoints written during the workload (the engine checkpoints on its own).
    pub checkpoints_during_run: u64,
    /// Bytes programmed since the last checkpoint before the cut/unmount (what recovery must scan).
    pub log_bytes_since_checkpoint: u64,
    /// Wall-clock milliseconds of `Engine::mount` (engine CPU time over RAM: no flash timing model).
    pub mount_ms: f64,
    /// Records replayed by the mount (engine statistics).
    pub replayed_records: u64,
    /// Bytes read from the flash by the mount.
    pub mount_bytes_read: u64,
    /// Read operations issued by the mount.
    pub mount_reads: u64,
    /// Bytes programmed by the mount itself (its checkpoint).
    pub mount_bytes_programmed: u64,
    /// Whether every overwritten block read back a value it may hold: after a power cut the
    /// value of the last fsync or a later one, after a clean unmount the newest.
    pub fsynced_data_ok: bool,
}

struct MountWorkload {
    ops: u64,
    user_bytes: u64,
    seconds: f64,
    checkpoints: u64,
    prog_at_last_cp: u64,
    /// Per 4 KiB block of the large files: the tag made durable by the last fsync, and the tags
    /// written after it. After a cut a block must read back one of them; after a clean unmount,
    /// the newest.
    history: HashMap<(u64, u64), BlockHist>,
}

#[derive(Debug, Default)]
struct BlockHist {
    durable: Option<u64>,
    since: Vec<u64>,
}

/// The mount experiment's workload: random 4 KiB overwrites (90 %), small file creations
/// (5 %) and deletions (5 %), with an fsync every 256 operations; stops after `run`.
fn mount_workload(fs: &mut Fs, cfg: &MountConfig, run: RunLength) -> Result<MountWorkload> {
    let mut rng = Rng::new(cfg.seed);
    let mut op = 0u64;
    let cap = fs.statfs().blocks * u64::from(fs.statfs().block_size);
    let (inos, data) = fill_files(fs, (cap as f64 * cfg.prefill) as u64, 256 * 1024, &mut op, &mut rng)?;
    let blocks = (data / WRITE_SIZE as u64).max(1);
    let bpf = 256 * 1024 / WRITE_SIZE as u64;
    let mut small: Vec<(Vec<u8>, u64)> = Vec::new();
    let mut buf = vec![0u8; WRITE_SIZE];
    let mut cps = fs.stats().checkpoints;
    let cp0 = cps;
    let mut prog_at_last_cp = counters(fs).bytes_programmed;
    let start = Instant::now();
    let mut ops = 0u64;
    let mut user_bytes = 0u64;
    let mut k = 0u64;
    let mut history: HashMap<(u64, u64), BlockHist> = HashMap::new();
    let mut dirty: Vec<(u64, u64)> = Vec::new();
    let mut last_ino = None;
    loop {
        match run {
            RunLength::Ops(n) if ops >= n => break,
            RunLength::Seconds(s) if ops.is_multiple_of(64) && start.elapsed() >= Duration::from_secs_f64(s) => break,
            _ => {}
        }
        ops += 1;
        op += 1;
        let r = rng.below(100);
        let t = now(op);
        if r < 90 {
            let b = rng.below(blocks);
            let ino = inos[(b / bpf) as usize];
            let tag = rng.next_u64();
            buf[..8].copy_from_slice(&tag.to_le_bytes());
            match fs.write(ino, (b % bpf) * WRITE_SIZE as u64, &buf, t) {
                Ok(n) => {
                    user_bytes += n as u64;
                    let h = history.entry((ino, b % bpf)).or_default();
                    if h.since.is_empty() {
                        dirty.push((ino, b % bpf));
                    }
                    h.since.push(tag);
                    last_ino = Some(ino);
                }
                Err(Error::NoSpace) => {}
                Err(e) => return Err(BenchError::Engine("mount workload write", e)),
            }
        } else if r < 95 || small.is_empty() {
            let name = format!("s{k:08}");
            k += 1;
            let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
            match fs.create(ROOT_INO, name.as_bytes(), &args, t) {
                Ok(i) => {
                    let n = 512 + rng.below(3584) as usize;
                    match fs.write(i.ino, 0, &buf[..n], t) {
                        Ok(w) => user_bytes += w as u64,
                        Err(Error::NoSpace) => {}
                        Err(e) => return Err(BenchError::Engine("mount workload small write", e)),
                    }
                    small.push((name.into_bytes(), i.ino));
                }
                Err(Error::NoSpace) => {}
                Err(e) => return Err(BenchError::Engine("mount workload create", e)),
            }
        } else {
            let (name, ino) = small.swap_remove(rng.below(small.len() as u64) as usize);
            match fs.unlink(ROOT_INO, &name, t) {
                Ok(()) => fs.evict(ino).map_err(|e| BenchError::Engine("evict", e))?,
                Err(Error::NoSpace) => {}
                Err(e) => return Err(BenchError::Engine("mount workload unlink", e)),
            }
        }
        if ops.is_multiple_of(256) {
            if let Some(ino) = last_ino.take() {
                // fsync writes out every head: everything written so far is durable
                fs.fsync(ino).map_err(|e| BenchError::Engine("fsync", e))?;
                for k in dirty.drain(..) {
                    if let Some(h) = history.get_mut(&k) {
                        h.durable = h.since.pop().or(h.durable);
                        h.since.clear();
                    }
                }
            }
        }
        let c = fs.stats().checkpoints;
        if c != cps {
            cps = c;
            prog_at_last_cp = counters(fs).bytes_programmed;
        }
    }
    Ok(MountWorkload {
        ops,
        user_bytes,
        seconds: start.elapsed().as_secs_f64(),
        checkpoints: cps.saturating_sub(cp0),
        prog_at_last_cp,
        history,
    })
}

fn timed_mount(case: &str, cfg: &MountConfig, w: &MountWorkload, mut sim: NandSim) -> Result<MountResult> {
    let log_bytes = sim.counters().bytes_programmed.saturating_sub(w.prog_at_last_cp);
    let c0 = sim.counters();
    let t0 = Instant::now();
    let mut fs = Fs::mount(sim, MountOptions::default()).map_err(|(e, _)| BenchError::Engine("timed mount", e))?;
    let mount_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let d = counters(&mut fs).since(&c0);
    let replayed = fs.stats().replayed;
    let mut ok = true;
    let mut b = vec![0u8; WRITE_SIZE];
    let clean = case == "clean-unmount";
    for (&(ino, blk), h) in &w.history {
        let newest = h.since.last().copied().or(h.durable);
        let Some(newest) = newest else { continue };
        if !clean && h.durable.is_none() {
            continue;
        }
        let got = match fs.read(ino, blk * WRITE_SIZE as u64, &mut b) {
            Ok(n) if n == WRITE_SIZE => u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])),
            _ => {
                ok = false;
                continue;
            }
        };
        ok &= if clean { got == newest } else { Some(got) == h.durable || h.since.contains(&got) };
    }
    sim = fs.unmount().map_err(|(e, _)| BenchError::Engine("final unmount", e))?;
    drop(sim);
    Ok(MountResult {
        case: case.into(),
        device_mib: cfg.device_mib,
        ops: w.ops,
        user_bytes: w.user_bytes,
        write_seconds: w.seconds,
        checkpoints_during_run: w.checkpoints,
        log_bytes_since_checkpoint: log_bytes,
        mount_ms,
        replayed_records: replayed,
        mount_bytes_read: d.bytes_read,
        mount_reads: d.reads,
        mount_bytes_programmed: d.bytes_programmed,
        fsynced_data_ok: ok,
    })
}

/// Runs the mount experiment: the workload then a power cut (the engine is dropped without
/// unmount: whatever it had not written is lost), then the same workload (same operations)
/// then a clean unmount; each is followed by a timed mount.
pub fn run_mount(cfg: &MountConfig) -> Result<Vec<MountResult>> {
    let mut fs = fresh_fs(cfg.device_mib, cfg.seed, 0)?;
    let w = mount_workload(&mut fs, cfg, cfg.run)?;
    let sim = fs.into_flash();
    let cut = timed_mount("power-cut", cfg, &w, sim)?;

    let mut fs = fresh_fs(cfg.device_mib, cfg.seed, 0)?;
    let w2 = mount_workload(&mut fs, cfg, RunLength::Ops(w.ops))?;
    let sim = fs.unmount().map_err(|(e, _)| BenchError::Engine("clean unmount", e))?;
    let mut clean = timed_mount("clean-unmount", cfg, &w2, sim)?;
    // the clean case ends with the unmount's checkpoint
    clean.log_bytes_since_checkpoint = 0;
    Ok(vec![cut, clean])
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Whether `--quick` was given.
    pub quick: bool,
    /// NAND page size.
    pub page_size: u32,
    /// Erase block size.
    pub erase_block: u32,
    /// Write-amplification results.
    pub wa: Vec<WaResult>,
    /// Mount results.
    pub mount: Vec<MountResult>,
}

/// Parameters of a whole run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Device size of the WA experiments (MiB).
    pub wa_device_mib: u32,
    /// Fill levels.
    pub fills: Vec<f64>,
    /// Patterns.
    pub patterns: Vec<Pattern>,
    /// Warm-up in device sizes.
    pub warmup: f64,
    /// Measurement in device sizes.
    pub measure: f64,
    /// File size of the data set.
    pub file_size: u64,
    /// Device size of the mount experiment (MiB).
    pub mount_device_mib: u32,
    /// How long the mount experiment writes.
    pub mount_run: RunLength,
    /// Seed.
    pub seed: u64,
    /// Index nodes cached in the WA runs (0 = engine default).
    pub cache_nodes: usize,
    /// WA runs simulated at the same time (threads).
    pub jobs: usize,
}

impl Plan {
    /// The full run: 64 MiB device, warm-up 3x, measurement 1x the device; 10 s of writing on 128 MiB for the mount test.
    pub fn full(seed: u64) -> Self {
        Plan {
            wa_device_mib: 64,
            fills: vec![0.5, 0.8, 0.95],
            patterns: vec![Pattern::Uniform, Pattern::Skewed8020],
            warmup: 3.0,
            measure: 1.0,
            file_size: 1 << 20,
            mount_device_mib: 128,
            mount_run: RunLength::Seconds(10.0),
            seed,
            cache_nodes: 0,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// The quick run (about a minute): 32 MiB device, warm-up 2x, measurement 1x; a fixed number of operations for the mount test.
    /// (Warm-up and measurement are in device sizes; the WA runs use `jobs` threads.)
    pub fn quick(seed: u64) -> Self {
        Plan {
            wa_device_mib: 32,
            warmup: 2.0,
            measure: 1.0,
            mount_device_mib: 64,
            mount_run: RunLength::Ops(20_000),
            ..Plan::full(seed)
        }
    }

    /// A tiny run for tests (a few seconds).
    pub fn tiny(seed: u64) -> Self {
        Plan {
            wa_device_mib: 8,
            warmup: 1.0,
            measure: 0.5,
            file_size: 256 * 1024,
            mount_device_mib: 8,
            mount_run: RunLength::Ops(2_000),
            ..Plan::full(seed)
        }
    }
}

/// Runs every experiment of `plan`, printing progress lines through `progress`.
pub fn run_all(plan: &Plan, quick: bool, progress: &mut dyn FnMut(&str)) -> Result<Report> {
    let mut cfgs = Vec::new();
    for &pattern in &plan.patterns {
        for &fill in &plan.fills {
            cfgs.push(WaConfig {
                device_mib: plan.wa_device_mib,
                fill,
                pattern,
                warmup_device_multiples: plan.warmup,
                measure_device_multiples: plan.measure,
                file_size: plan.file_size,
                seed: plan.seed,
                cache_nodes: plan.cache_nodes,
            });
        }
    }
    // independent simulations: run them on `jobs` threads, report in the plan's order
    let jobs = plan.jobs.max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<WaResult>)>();
    let mut slots: Vec<Option<Result<WaResult>>> = cfgs.iter().map(|_| None).collect();
    std::thread::scope(|sc| {
        for _ in 0..jobs {
            let tx = tx.clone();
            let (next, cfgs) = (&next, &cfgs);
            sc.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(cfg) = cfgs.get(i) else { break };
                if tx.send((i, run_wa(cfg))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, r) in rx {
            if let Ok(w) = &r {
                progress(&format!(
                    "wa {} fill {:.0}%: WA {:.2} (bound {:.2}) in {:.1} s",
                    w.config.pattern.name(),
                    w.config.fill * 100.0,
                    w.wa,
                    w.greedy_bound,
                    w.seconds
                ));
            }
            slots[i] = Some(r);
        }
    });
    let mut wa = Vec::new();
    for r in slots.into_iter().flatten() {
        wa.push(r?);
    }
    let mcfg = MountConfig { device_mib: plan.mount_device_mib, prefill: 0.5, run: plan.mount_run, seed: plan.seed };
    let mount = run_mount(&mcfg)?;
    for m in &mount {
        progress(&format!("mount {}: {:.2} ms, {} records replayed", m.case, m.mount_ms, m.replayed_records));
    }
    Ok(Report { quick, page_size: PAGE_SIZE, erase_block: SEGMENT_SIZE, wa, mount })
}

/// Checks the figures are sane: WA >= 1, erases happened when the device was overwritten
/// several times, a mount after a clean unmount replays (almost) nothing, fsynced data survived.
pub fn check_sane(r: &Report) -> Result<()> {
    for w in &r.wa {
        if w.wa.is_nan() || w.wa < 1.0 || !w.wa.is_finite() {
            return Err(BenchError::Insane(format!("WA {} < 1 for {:?}", w.wa, w.config)));
        }
        if w.enospc != 0 {
            return Err(BenchError::Insane(format!("{} overwrites failed with ENOSPC for {:?}", w.enospc, w.config)));
        }
        if w.user_bytes == 0 || w.erases == 0 && w.config.measure_device_multiples >= 0.5 {
            return Err(BenchError::Insane(format!("no erase while overwriting for {:?}", w.config)));
        }
    }
    for m in &r.mount {
        if !m.fsynced_data_ok {
            return Err(BenchError::Insane(format!("fsynced data lost after {}", m.case)));
        }
        if m.case == "clean-unmount" && m.replayed_records > 2 {
            return Err(BenchError::Insane(format!("{} records replayed after a clean unmount", m.replayed_records)));
        }
    }
    Ok(())
}

fn human(b: u64) -> String {
    if b >= MIB {
        format!("{:.1} MiB", b as f64 / MIB as f64)
    } else if b >= 1024 {
        format!("{:.1} KiB", b as f64 / 1024.0)
    } else {
        format!("{b} B")
    }
}

/// The report as Markdown tables.
pub fn markdown(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "### Write amplification ({} mode, NandSim {} KiB pages, {} KiB erase blocks, 4 KiB overwrites, index cache {})\n",
        if r.quick { "quick" } else { "full" },
        r.page_size / 1024,
        r.erase_block / 1024,
        r.wa.first().map_or_else(|| "-".to_string(), |w| format!("{} nodes, dirty limit {}", w.index_cache_nodes, w.index_dirty_limit))
    );
    let _ = writeln!(
        s,
        "| device | pattern | fill target | fill reached | data/raw | warm-up | measured | WA | WA 1st / 2nd half | = 1 + GC copies + metadata (of which index nodes / inodes / segment table / checkpoint blobs) | greedy 1/(1-u) at target / data/raw | erases per user MiB | checkpoints per user MiB | ENOSPC | s |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for w in &r.wa {
        let _ = writeln!(
            s,
            "| {} MiB | {} | {:.0} % | {:.1} % | {:.1} % | {} | {} | **{:.2}** | {:.2} / {:.2} | 1 + {:.2} + {:.2} ({:.2} / {:.2} / {:.2} / {:.2}) | {:.2} / {:.2} | {:.2} | {:.1} | {} | {:.1} |",
            w.config.device_mib,
            w.config.pattern.name(),
            w.config.fill * 100.0,
            w.fill_actual * 100.0,
            w.data_over_device * 100.0,
            human(w.warmup_user_bytes),
            human(w.user_bytes),
            w.wa,
            w.wa_first_half,
            w.wa_second_half,
            w.wa_gc_copy,
            w.wa_metadata,
            w.wa_index_nodes,
            w.wa_inodes,
            w.wa_segtab,
            w.wa_checkpoint_blobs,
            w.greedy_bound,
            w.greedy_bound_raw,
            w.erases_per_user_mib,
            w.checkpoints as f64 * MIB as f64 / w.user_bytes.max(1) as f64,
            w.enospc,
            w.seconds
        );
    }
    let _ = writeln!(s, "\n### Mount time\n");
    let _ = writeln!(
        s,
        "| case | device | ops before | written | write s | checkpoints in run | log since last checkpoint | mount ms | records replayed | bytes read at mount | reads | programmed at mount | fsynced data |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for m in &r.mount {
        let _ = writeln!(
            s,
            "| {} | {} MiB | {} | {} | {:.1} | {} | {} | **{:.2}** | {} | {} | {} | {} | {} |",
            m.case,
            m.device_mib,
            m.ops,
            human(m.user_bytes),
            m.write_seconds,
            m.checkpoints_during_run,
            human(m.log_bytes_since_checkpoint),
            m.mount_ms,
            m.replayed_records,
            human(m.mount_bytes_read),
            m.mount_reads,
            human(m.mount_bytes_programmed),
            if m.fsynced_data_ok { "ok" } else { "LOST" }
        );
    }
    s
}
