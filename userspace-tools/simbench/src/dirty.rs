//! The "dirty fill" scenario of `ferrofs-bench dirty`, on the simulator: fill the filesystem with
//! small files to a statfs level, delete half of them at random, sync, fill to the same level
//! again; levels in order (files kept across levels).
//!
//! Each fill file is created in `fill/dN` (256 files per directory), written in
//! `write_chunk`-byte `Engine::write` calls (4 KiB by default: the kernel layer hands the engine
//! one page-cache folio per call), then fsync'd (as `write_file` of ferrofs-bench does). A file
//! is deleted by `unlink` followed by `evict` (the VFS drops the inode at once). The level is
//! statfs `(blocks - blocks_free) / blocks` checked after every file, like the bench's statvfs.
//!
//! Device time is a model of the QEMU rig's nandsim: 250 us per page programmed, 25 us per page
//! read (a read of a few bytes loads a page), 2 ms per erase, plus 25 ns per byte transferred.

use std::time::Instant;

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, Error, ROOT_INO};
use ferrofs_flashsim::Counters;
use serde::Serialize;

use crate::{counters, fresh_fs, now, BenchError, Fs, Result, Rng, MIB};

/// nandsim timings of the benchmark rig (microseconds, nanoseconds per byte).
pub const PROGRAM_US: f64 = 250.0;
/// Page read.
pub const READ_US: f64 = 25.0;
/// Block erase.
pub const ERASE_US: f64 = 2000.0;
/// Transfer per byte.
pub const BYTE_NS: f64 = 25.0;

/// Files per directory, as ferrofs-bench.
pub const FILES_PER_DIR: u64 = 256;

/// The scenario's parameters.
#[derive(Debug, Clone, Serialize)]
pub struct DirtyConfig {
    /// Device size in MiB.
    pub device_mib: u32,
    /// Levels (fractions of statfs blocks used), in order.
    pub levels: Vec<f64>,
    /// Size of each fill file.
    pub file_size: u64,
    /// Bytes per `Engine::write` call.
    pub write_chunk: u64,
    /// Fraction of all fill files deleted after each fill.
    pub delete_fraction: f64,
    /// Random seed.
    pub seed: u64,
    /// Index nodes cached (0 = engine default).
    pub cache_nodes: usize,
    /// Give up a phase after this many seconds of engine CPU time (0 = never).
    pub phase_cpu_limit: f64,
    /// Model the kernel's background thread: `gc_step(true)` once per simulated device second
    /// and a `sync` every 5 simulated seconds when something was written.
    pub background: bool,
    /// Size of the work file overwritten after each fill phase (0 = none), as ferrofs-bench
    /// dirty does: created first, then after each level random overwrites of one warm-up pass
    /// plus `work_amount` bytes at each block size of `work_block_sizes`, each ending in fsync.
    pub work_size: u64,
    /// Bytes overwritten per block size (after the warm-up pass).
    pub work_amount: u64,
    /// Block sizes of the work-file overwrites.
    pub work_block_sizes: Vec<u64>,
}

impl DirtyConfig {
    /// The rig's workload on a device of `device_mib` MiB: 32 KiB files, 50/80/90 %, half deleted.
    pub fn rig(device_mib: u32, seed: u64) -> Self {
        DirtyConfig {
            device_mib,
            levels: vec![0.5, 0.8, 0.9],
            file_size: 32 << 10,
            write_chunk: 4096,
            delete_fraction: 0.5,
            seed,
            cache_nodes: 0,
            phase_cpu_limit: 0.0,
            background: true,
            work_size: 4 << 20,
            work_amount: 4 << 20,
            work_block_sizes: vec![4096, 16384, 65536, 131072, 1 << 20],
        }
    }
}

/// What one phase (a fill, or a delete + sync + refill) did.
#[derive(Debug, Clone, Serialize, Default)]
pub struct DirtyPhase {
    /// Target level.
    pub level: f64,
    /// "fill", "refill" (the refill includes the deletions and the sync before it) or
    /// "overwrite" (the work file).
    pub phase: String,
    /// Files created and written.
    pub files_written: u64,
    /// Files deleted.
    pub files_deleted: u64,
    /// User bytes written.
    pub user_bytes: u64,
    /// Bytes programmed on the NAND.
    pub programmed_bytes: u64,
    /// Pages programmed.
    pub pages_programmed: u64,
    /// Pages read.
    pub pages_read: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Blocks erased.
    pub erases: u64,
    /// programmed / user bytes.
    pub wa: f64,
    /// Bytes moved by the GC / user bytes.
    pub wa_gc_copy: f64,
    /// Checkpoints taken.
    pub checkpoints: u64,
    /// Simulated nandsim time (s).
    pub device_seconds: f64,
    /// Engine CPU time (s; the thread's CPU clock, wall clock where unavailable).
    pub cpu_seconds: f64,
    /// statfs level at the end of the phase.
    pub level_reached: f64,
    /// The fill stopped on ENOSPC.
    pub enospc: bool,
    /// The phase was cut by `phase_cpu_limit`.
    pub gave_up: bool,
    /// User MB/s the rig would see (user bytes / (device + CPU seconds)).
    pub mb_per_s: f64,
}

/// The whole scenario's results.
#[derive(Debug, Clone, Serialize)]
pub struct DirtyResult {
    /// The parameters.
    pub config: DirtyConfig,
    /// Every phase in order.
    pub phases: Vec<DirtyPhase>,
    /// `Engine::fsck` found no problem at the end.
    pub fsck_clean: bool,
    /// Every surviving file read back with its content.
    pub verified_files: u64,
}

/// CPU time of the calling thread in seconds (Linux schedstat), `None` elsewhere.
fn thread_cpu() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

pub(crate) struct Clock {
    wall: Instant,
    cpu: Option<f64>,
}

impl Clock {
    pub(crate) fn start() -> Self {
        Clock { wall: Instant::now(), cpu: thread_cpu() }
    }
    pub(crate) fn seconds(&self) -> f64 {
        match (self.cpu, thread_cpu()) {
            (Some(a), Some(b)) => b - a,
            _ => self.wall.elapsed().as_secs_f64(),
        }
    }
}

/// Simulated nandsim seconds for the operations in `d`.
pub fn device_seconds(d: &Counters) -> f64 {
    (d.pages_programmed as f64 * PROGRAM_US + d.pages_read as f64 * READ_US + d.blocks_erased as f64 * ERASE_US) / 1e6
        + (d.bytes_programmed + d.bytes_read) as f64 * BYTE_NS / 1e9
}

fn used(fs: &Fs) -> f64 {
    let s = fs.statfs();
    if s.blocks == 0 {
        1.0
    } else {
        s.blocks.saturating_sub(s.blocks_free) as f64 / s.blocks as f64
    }
}

/// File content: 8 bytes of the file id then a pattern derived from it.
fn fill_block(id: u64, off: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let p = off + i as u64;
        *b = (p.wrapping_mul(31) ^ id.wrapping_mul(0x9E37_79B9) ^ (p >> 8)) as u8;
    }
}

struct State {
    files: Vec<(u64, u64, u64)>, // (id, dir ino, ino)
    dirs: Vec<u64>,
    next_id: u64,
    op: u64,
    full: bool,
    background: bool,
    /// Simulated device seconds at the last background tick, ticks since the last sync, log
    /// sequence at the last sync.
    bg_at: f64,
    bg_ticks: u32,
    bg_seq: u64,
}

/// The kernel's background thread, driven by simulated device time.
fn background(fs: &mut Fs, st: &mut State) -> Result<()> {
    if !st.background {
        return Ok(());
    }
    let t = device_seconds(&counters(fs));
    while st.bg_at + 1.0 <= t {
        st.bg_at += 1.0;
        st.bg_ticks += 1;
        match fs.gc_step(true) {
            Ok(_) | Err(Error::NoSpace) => {}
            Err(e) => return Err(BenchError::Engine("background gc_step", e)),
        }
        if st.bg_ticks >= 5 && fs.log_seq() != st.bg_seq {
            fs.sync().map_err(|e| BenchError::Engine("periodic sync", e))?;
            st.bg_seq = fs.log_seq();
            st.bg_ticks = 0;
        }
    }
    Ok(())
}

fn name(id: u64) -> Vec<u8> {
    format!("f{id}").into_bytes()
}

/// Fill to `target`; returns whether ENOSPC stopped it.
fn fill_to(fs: &mut Fs, cfg: &DirtyConfig, st: &mut State, target: f64, ph: &mut DirtyPhase, clock: &Clock) -> Result<()> {
    let chunk = cfg.write_chunk.clamp(1, cfg.file_size.max(1)) as usize;
    let mut buf = vec![0u8; chunk];
    let fill_dir = match st.dirs.first() {
        Some(&d) => d,
        None => return Err(BenchError::Insane("no fill directory".into())),
    };
    while used(fs) < target && !st.full {
        if cfg.phase_cpu_limit > 0.0 && clock.seconds() > cfg.phase_cpu_limit {
            ph.gave_up = true;
            break;
        }
        let id = st.next_id;
        st.next_id += 1;
        let d = (id / FILES_PER_DIR) as usize;
        st.op += 1;
        if d + 1 >= st.dirs.len() {
            match fs.mkdir(fill_dir, format!("d{d}").as_bytes(), 0o755, 0, 0, now(st.op)) {
                Ok(i) => st.dirs.push(i.ino),
                Err(Error::NoSpace) => {
                    st.full = true;
                    ph.enospc = true;
                    break;
                }
                Err(e) => return Err(BenchError::Engine("mkdir", e)),
            }
        }
        let dir = st.dirs[d + 1];
        let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
        let ino = match fs.create(dir, &name(id), &args, now(st.op)) {
            Ok(i) => i.ino,
            Err(Error::NoSpace) => {
                st.full = true;
                ph.enospc = true;
                break;
            }
            Err(e) => return Err(BenchError::Engine("create", e)),
        };
        st.files.push((id, dir, ino));
        ph.files_written += 1;
        let mut off = 0u64;
        while off < cfg.file_size {
            let n = (cfg.file_size - off).min(chunk as u64) as usize;
            fill_block(id, off, &mut buf[..n]);
            st.op += 1;
            match fs.write(ino, off, &buf[..n], now(st.op)) {
                Ok(w) => {
                    ph.user_bytes += w as u64;
                    off += w as u64;
                    if w < n {
                        st.full = true;
                        ph.enospc = true;
                        break;
                    }
                }
                Err(Error::NoSpace) => {
                    st.full = true;
                    ph.enospc = true;
                    break;
                }
                Err(e) => return Err(BenchError::Engine("write", e)),
            }
        }
        match fs.fsync(ino) {
            Ok(()) | Err(Error::NoSpace) => {}
            Err(e) => return Err(BenchError::Engine("fsync", e)),
        }
        background(fs, st)?;
    }
    Ok(())
}

/// Random block-aligned overwrites of the work file: per block size one warm-up pass over the
/// file plus `work_amount` bytes, each pass ending in fsync.
fn overwrite_work(fs: &mut Fs, cfg: &DirtyConfig, st: &mut State, work: u64, rng: &mut Rng, ph: &mut DirtyPhase) -> Result<()> {
    let mut buf = Vec::new();
    for &bs in &cfg.work_block_sizes {
        let bs = bs.clamp(4096, cfg.work_size.max(4096));
        let slots = (cfg.work_size / bs).max(1);
        for pass in [cfg.work_size, cfg.work_amount] {
            for _ in 0..pass.div_ceil(bs).max(1) {
                let off = rng.below(slots) * bs;
                let mut done = 0u64;
                // the kernel hands the engine one folio at a time
                while done < bs {
                    let n = (bs - done).min(cfg.write_chunk.max(1)) as usize;
                    buf.resize(n, 0);
                    fill_block(st.op, off + done, &mut buf);
                    st.op += 1;
                    match fs.write(work, off + done, &buf, now(st.op)) {
                        Ok(w) => {
                            ph.user_bytes += w as u64;
                            done += w as u64;
                            if w < n {
                                break;
                            }
                        }
                        Err(Error::NoSpace) => {
                            ph.enospc = true;
                            break;
                        }
                        Err(e) => return Err(BenchError::Engine("overwrite", e)),
                    }
                }
                background(fs, st)?;
            }
            match fs.fsync(work) {
                Ok(()) | Err(Error::NoSpace) => {}
                Err(e) => return Err(BenchError::Engine("fsync work", e)),
            }
        }
    }
    Ok(())
}

fn delete_some(fs: &mut Fs, cfg: &DirtyConfig, st: &mut State, rng: &mut Rng, ph: &mut DirtyPhase) -> Result<()> {
    let n = (st.files.len() as f64 * cfg.delete_fraction.clamp(0.0, 1.0)).round() as usize;
    // Fisher-Yates shuffle, then drop the first n
    for i in (1..st.files.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        st.files.swap(i, j);
    }
    for (id, dir, ino) in st.files.drain(..n) {
        st.op += 1;
        fs.unlink(dir, &name(id), now(st.op)).map_err(|e| BenchError::Engine("unlink", e))?;
        fs.evict(ino).map_err(|e| BenchError::Engine("evict", e))?;
        ph.files_deleted += 1;
    }
    if n > 0 {
        st.full = false;
    }
    fs.sync().map_err(|e| BenchError::Engine("sync", e))
}

fn finish(fs: &mut Fs, ph: &mut DirtyPhase, c0: &Counters, s0: ferrofs_engine::format::Stats, clock: &Clock) {
    let d = counters(fs).since(c0);
    let s1 = fs.stats();
    ph.programmed_bytes = d.bytes_programmed;
    ph.pages_programmed = d.pages_programmed;
    ph.pages_read = d.pages_read;
    ph.bytes_read = d.bytes_read;
    ph.erases = d.blocks_erased;
    ph.wa = if ph.user_bytes == 0 { 0.0 } else { d.bytes_programmed as f64 / ph.user_bytes as f64 };
    let gc = s1.gc_bytes.saturating_sub(s0.gc_bytes);
    ph.wa_gc_copy = if ph.user_bytes == 0 { 0.0 } else { gc as f64 / ph.user_bytes as f64 };
    ph.checkpoints = s1.checkpoints.saturating_sub(s0.checkpoints);
    ph.device_seconds = device_seconds(&d);
    ph.cpu_seconds = clock.seconds();
    ph.level_reached = used(fs);
    let t = ph.device_seconds + ph.cpu_seconds;
    ph.mb_per_s = if t > 0.0 { ph.user_bytes as f64 / 1e6 / t } else { 0.0 };
}

/// Runs the scenario; `progress` gets one line per phase.
pub fn run_dirty(cfg: &DirtyConfig, progress: &mut dyn FnMut(&str)) -> Result<DirtyResult> {
    let mut fs = fresh_fs(cfg.device_mib, cfg.seed, cfg.cache_nodes)?;
    let mut rng = Rng::new(cfg.seed ^ 0xf111);
    let mut st = State {
        files: Vec::new(),
        dirs: Vec::new(),
        next_id: 0,
        op: 0,
        full: false,
        background: cfg.background,
        bg_at: 0.0,
        bg_ticks: 0,
        bg_seq: 0,
    };
    let mut work = 0u64;
    if cfg.work_size > 0 {
        let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
        work = fs.create(ROOT_INO, b"work.dat", &args, now(0)).map_err(|e| BenchError::Engine("create work", e))?.ino;
        let mut buf = vec![0u8; cfg.write_chunk.clamp(1, 1 << 20) as usize];
        let mut off = 0u64;
        while off < cfg.work_size {
            let n = (cfg.work_size - off).min(buf.len() as u64) as usize;
            fill_block(0, off, &mut buf[..n]);
            off += fs.write(work, off, &buf[..n], now(0)).map_err(|e| BenchError::Engine("write work", e))? as u64;
        }
        fs.fsync(work).map_err(|e| BenchError::Engine("fsync work", e))?;
    }
    let fill = fs
        .mkdir(ROOT_INO, b"fill", 0o755, 0, 0, now(0))
        .map_err(|e| BenchError::Engine("mkdir fill", e))?;
    st.dirs.push(fill.ino);
    let mut phases = Vec::new();
    let mut wrng = Rng::new(cfg.seed ^ 0x3011);
    let work_phases: &[&str] = if work != 0 { &["fill", "refill", "overwrite"] } else { &["fill", "refill"] };
    for &level in &cfg.levels {
        for &phase in work_phases {
            let mut ph = DirtyPhase { level, phase: phase.into(), ..Default::default() };
            let c0 = counters(&mut fs);
            let s0 = fs.stats();
            let clock = Clock::start();
            if phase == "overwrite" {
                overwrite_work(&mut fs, cfg, &mut st, work, &mut wrng, &mut ph)?;
            } else {
                if phase == "refill" {
                    delete_some(&mut fs, cfg, &mut st, &mut rng, &mut ph)?;
                }
                fill_to(&mut fs, cfg, &mut st, level, &mut ph, &clock)?;
            }
            finish(&mut fs, &mut ph, &c0, s0, &clock);
            progress(&format!(
                "dirty {:.0} % {}: {} files written, {} deleted, WA {:.2}, {} erases, device {:.1} s, CPU {:.1} s{}",
                level * 100.0,
                phase,
                ph.files_written,
                ph.files_deleted,
                ph.wa,
                ph.erases,
                ph.device_seconds,
                ph.cpu_seconds,
                if ph.gave_up { " (gave up)" } else { "" }
            ));
            let gave_up = ph.gave_up;
            phases.push(ph);
            if gave_up {
                return Ok(DirtyResult { config: cfg.clone(), phases, fsck_clean: false, verified_files: 0 });
            }
        }
    }
    let fsck_clean = fs.fsck().map(|r| r.problems == 0).unwrap_or(false);
    // read every surviving file back
    let mut verified = 0u64;
    let mut got = vec![0u8; cfg.file_size as usize];
    let mut want = vec![0u8; cfg.file_size as usize];
    for &(id, _, ino) in &st.files {
        let n = fs.read(ino, 0, &mut got).map_err(|e| BenchError::Engine("read back", e))?;
        fill_block(id, 0, &mut want[..n]);
        if n == got.len() && got == want {
            verified += 1;
        }
    }
    Ok(DirtyResult { config: cfg.clone(), phases, fsck_clean, verified_files: verified })
}

/// The scenario's table.
pub fn dirty_markdown(r: &DirtyResult) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let c = &r.config;
    let _ = writeln!(
        s,
        "### Dirty fill ({} MiB NandSim, 2 KiB pages, 128 KiB blocks; {} KiB files, {} per directory, {} B writes + fsync; delete {:.0} % + sync + refill)\n",
        c.device_mib,
        c.file_size / 1024,
        FILES_PER_DIR,
        c.write_chunk,
        c.delete_fraction * 100.0
    );
    let _ = writeln!(
        s,
        "| level | phase | files written | deleted | user MB | programmed MB | WA | GC copies | pages read | erases | checkpoints | device s | CPU s | MB/s | level reached |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for p in &r.phases {
        let _ = writeln!(
            s,
            "| {:.0} % | {}{} | {} | {} | {:.1} | {:.1} | **{:.2}** | {:.2} | {} | {} | {} | {:.1} | {:.1} | {:.2} | {:.1} %{} |",
            p.level * 100.0,
            p.phase,
            if p.gave_up { " (gave up)" } else { "" },
            p.files_written,
            p.files_deleted,
            p.user_bytes as f64 / 1e6,
            p.programmed_bytes as f64 / 1e6,
            p.wa,
            p.wa_gc_copy,
            p.pages_read,
            p.erases,
            p.checkpoints,
            p.device_seconds,
            p.cpu_seconds,
            p.mb_per_s,
            p.level_reached * 100.0,
            if p.enospc { " (ENOSPC)" } else { "" }
        );
    }
    let _ = writeln!(
        s,
        "\nfsck after the last phase: {}; {} surviving files read back intact. Device time: 250 us per page programmed, 25 us per page read, 2 ms per erase, 25 ns per byte.",
        if r.fsck_clean { "clean" } else { "NOT CLEAN" },
        r.verified_files
    );
    let _ = MIB;
    s
}
