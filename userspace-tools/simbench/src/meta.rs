//! The `meta` experiment of `ferrofs-bench` on the simulator: what each metadata operation
//! costs the engine in flash operations. The rig's order and sizes (full profile: 20
//! directories of 100 empty files): mkdir, create, stat, readdir, rename, unlink, rmdir; plus
//! name lookups and a readdir after a remount (cold caches).
//!
//! Each phase issues the engine calls the kernel layer makes for the system call when the
//! VFS caches hold what the benchmark just touched: `create` is a negative `lookup` (the new
//! dentry) and `create`; `stat` is `getattr`; `rename` is a negative `lookup` of the target
//! and `rename`; `unlink` and `rmdir` are followed by `evict` (the last reference goes at
//! once). `readdir` is one `Engine::readdir` call per directory (a getdents buffer holds
//! them all). `lookup` looks every file name up (what a cold path walk does).
//!
//! Per operation: flash reads (requests and NAND pages), records appended (the log's sequence
//! numbers, padding and index nodes included), pages programmed, checkpoints, simulated
//! nandsim time (see [`device_seconds`]) and the engine's CPU time, and the log's read cache
//! (lines served, lines read).

use serde::Serialize;

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, Error, ROOT_INO};
use ferrofs_flashsim::Counters;

use crate::dirty::{device_seconds, Clock as CpuClock};
use crate::{counters, fresh_fs, now, BenchError, Fs, Result};

/// The experiment's parameters.
#[derive(Debug, Clone, Serialize)]
pub struct MetaConfig {
    /// Device size in MiB.
    pub device_mib: u32,
    /// Directories.
    pub dirs: u64,
    /// Empty files per directory.
    pub files_per_dir: u64,
    /// `stat` passes over every file.
    pub stat_rounds: u64,
    /// Random seed of the simulator.
    pub seed: u64,
}

impl MetaConfig {
    /// The rig's full profile: 20 x 100 files, 3 stat rounds, on the 128 MiB partition.
    pub fn rig(seed: u64) -> Self {
        MetaConfig { device_mib: 128, dirs: 20, files_per_dir: 100, stat_rounds: 3, seed }
    }
}

/// One phase.
#[derive(Debug, Clone, Serialize)]
pub struct MetaPhase {
    /// Operation name.
    pub op: String,
    /// Operations (for readdir: entries returned).
    pub ops: u64,
    /// Flash read requests per operation.
    pub reads_per_op: f64,
    /// NAND pages read per operation.
    pub pages_read_per_op: f64,
    /// Records appended to the log per operation (sequence numbers taken).
    pub records_per_op: f64,
    /// NAND pages programmed per operation.
    pub pages_programmed_per_op: f64,
    /// Bytes programmed per operation (the log's records, padding and index nodes).
    pub bytes_programmed_per_op: f64,
    /// Bytes of inode records (header included) appended per operation.
    pub inode_bytes_per_op: f64,
    /// Checkpoints in the phase.
    pub checkpoints: u64,
    /// Simulated nandsim microseconds per operation.
    pub device_us_per_op: f64,
    /// Engine CPU microseconds per operation (native, not the rig's emulated CPU).
    pub cpu_us_per_op: f64,
    /// Operations per second of device + CPU time; `None` when the phase took no device time
    /// and less CPU time than the clock resolves (a phase served from RAM).
    pub ops_per_s: Option<f64>,
}

/// What the experiment measured.
#[derive(Debug, Clone, Serialize)]
pub struct MetaResult {
    /// Parameters.
    pub config: MetaConfig,
    /// Phases in order.
    pub phases: Vec<MetaPhase>,
    /// Inode cache (hits, misses) over the run.
    pub icache: (u64, u64),
    /// The log's read cache since the remount (line reads served from it, lines read into it).
    pub read_cache: (u64, u64),
}

fn eng(what: &'static str) -> impl Fn(Error) -> BenchError {
    move |e| BenchError::Engine(what, e)
}

struct Phase {
    c0: Counters,
    seq0: u64,
    cp0: u64,
    ib0: u64,
    clock: CpuClock,
}

impl Phase {
    fn start(fs: &mut Fs) -> Self {
        Phase { c0: counters(fs), seq0: fs.log_seq(), cp0: fs.stats().checkpoints, ib0: fs.stats().inode_bytes, clock: CpuClock::start() }
    }

    fn end(self, fs: &mut Fs, op: &str, ops: u64) -> MetaPhase {
        let cpu = self.clock.seconds();
        let d = counters(fs).since(&self.c0);
        let n = ops.max(1) as f64;
        let dev = device_seconds(&d);
        MetaPhase {
            op: op.into(),
            ops,
            reads_per_op: d.reads as f64 / n,
            pages_read_per_op: d.pages_read as f64 / n,
            records_per_op: fs.log_seq().saturating_sub(self.seq0) as f64 / n,
            pages_programmed_per_op: d.pages_programmed as f64 / n,
            bytes_programmed_per_op: d.bytes_programmed as f64 / n,
            inode_bytes_per_op: fs.stats().inode_bytes.saturating_sub(self.ib0) as f64 / n,
            checkpoints: fs.stats().checkpoints.saturating_sub(self.cp0),
            device_us_per_op: dev * 1e6 / n,
            cpu_us_per_op: cpu * 1e6 / n,
            ops_per_s: (dev + cpu > 0.0).then(|| ops as f64 / (dev + cpu)),
        }
    }
}

/// Runs the experiment.
pub fn run_meta(cfg: &MetaConfig) -> Result<MetaResult> {
    let mut fs = fresh_fs(cfg.device_mib, cfg.seed, 0)?;
    let mut op = 0u64;
    let mut phases = Vec::new();
    let work = fs.mkdir(ROOT_INO, b"meta", 0o755, 0, 0, now(op)).map_err(eng("mkdir"))?.ino;
    fs.sync().map_err(eng("sync"))?;
    let name = |i: u64, suffix: &str| format!("f{i}{suffix}").into_bytes();
    let fpd = cfg.files_per_dir.max(1);
    let n = cfg.dirs * fpd;

    let p = Phase::start(&mut fs);
    let mut dirs = Vec::new();
    for d in 0..cfg.dirs {
        op += 1;
        dirs.push(fs.mkdir(work, format!("d{d}").as_bytes(), 0o755, 0, 0, now(op)).map_err(eng("mkdir"))?.ino);
    }
    phases.push(p.end(&mut fs, "mkdir", cfg.dirs));

    let p = Phase::start(&mut fs);
    let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
    let mut inos = Vec::new();
    for i in 0..n {
        op += 1;
        let dir = dirs[(i / fpd) as usize];
        match fs.lookup(dir, &name(i % fpd, "")) {
            Err(Error::NotFound) => {}
            r => return Err(BenchError::Insane(format!("lookup before create: {r:?}"))),
        }
        inos.push(fs.create(dir, &name(i % fpd, ""), &args, now(op)).map_err(eng("create"))?.ino);
    }
    phases.push(p.end(&mut fs, "create", n));

    let p = Phase::start(&mut fs);
    for r in 0..n * cfg.stat_rounds.max(1) {
        fs.getattr(inos[(r % n) as usize]).map_err(eng("stat"))?;
    }
    phases.push(p.end(&mut fs, "stat", n * cfg.stat_rounds.max(1)));

    phases.extend(read_phases(&mut fs, &dirs, fpd, "")?);

    // cold: a remount empties every cache
    let sim = fs.unmount().map_err(|(e, _)| BenchError::Engine("unmount", e))?;
    fs = Fs::mount(sim, crate::mount_opts(0)).map_err(|(e, _)| BenchError::Engine("remount", e))?;
    phases.extend(read_phases(&mut fs, &dirs, fpd, "_cold")?);

    let p = Phase::start(&mut fs);
    for i in 0..n {
        op += 1;
        let dir = dirs[(i / fpd) as usize];
        match fs.lookup(dir, &name(i % fpd, ".r")) {
            Err(Error::NotFound) => {}
            r => return Err(BenchError::Insane(format!("lookup before rename: {r:?}"))),
        }
        fs.rename(dir, &name(i % fpd, ""), dir, &name(i % fpd, ".r"), 0, now(op)).map_err(eng("rename"))?;
    }
    phases.push(p.end(&mut fs, "rename", n));

    let p = Phase::start(&mut fs);
    for i in 0..n {
        op += 1;
        let dir = dirs[(i / fpd) as usize];
        fs.unlink(dir, &name(i % fpd, ".r"), now(op)).map_err(eng("unlink"))?;
        fs.evict(inos[i as usize]).map_err(eng("evict"))?;
    }
    phases.push(p.end(&mut fs, "unlink", n));

    let p = Phase::start(&mut fs);
    for (d, &ino) in dirs.iter().enumerate() {
        op += 1;
        fs.rmdir(work, format!("d{d}").as_bytes(), now(op)).map_err(eng("rmdir"))?;
        fs.evict(ino).map_err(eng("evict"))?;
    }
    phases.push(p.end(&mut fs, "rmdir", cfg.dirs));

    let icache = fs.icache_stats();
    let read_cache = fs.read_cache_stats();
    let report = fs.fsck().map_err(eng("fsck"))?;
    if report.problems != 0 {
        return Err(BenchError::Insane(format!("fsck after the meta run: {} problems", report.problems)));
    }
    Ok(MetaResult { config: cfg.clone(), phases, icache, read_cache })
}

/// The phases that only read: every directory listed, then every file looked up by name
/// (phase names ending in `suffix`).
fn read_phases(fs: &mut Fs, dirs: &[u64], fpd: u64, suffix: &str) -> Result<[MetaPhase; 2]> {
    let p = Phase::start(fs);
    let mut entries = 0u64;
    for &d in dirs {
        fs.readdir(d, 0, &mut |_, _, _, _| {
            entries += 1;
            true
        })
        .map_err(eng("readdir"))?;
    }
    let listed = p.end(fs, &format!("readdir_entries{suffix}"), entries);
    let p = Phase::start(fs);
    let n = dirs.len() as u64 * fpd;
    for i in 0..n {
        fs.lookup(dirs[(i / fpd) as usize], format!("f{}", i % fpd).as_bytes()).map_err(eng("lookup"))?;
    }
    Ok([listed, p.end(fs, &format!("lookup{suffix}"), n)])
}

/// The result as Markdown.
pub fn meta_markdown(r: &MetaResult) -> String {
    use std::fmt::Write as _;
    let c = &r.config;
    let mut s = format!(
        "#### Metadata operations ({} MiB NandSim, {} directories x {} files; per operation)\n\n",
        c.device_mib, c.dirs, c.files_per_dir
    );
    s.push_str("| op | ops | reads | pages read | records appended | bytes programmed | inode bytes | pages programmed | checkpoints | device us | CPU us | ops/s (device + CPU) |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for p in &r.phases {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.2} | {} | {:.1} | {:.2} | {} |",
            p.op,
            p.ops,
            p.reads_per_op,
            p.pages_read_per_op,
            p.records_per_op,
            p.bytes_programmed_per_op,
            p.inode_bytes_per_op,
            p.pages_programmed_per_op,
            p.checkpoints,
            p.device_us_per_op,
            p.cpu_us_per_op,
            p.ops_per_s.map_or_else(|| "below the clock".to_string(), |r| format!("{r:.0}"))
        );
    }
    let _ = writeln!(
        s,
        "\nInode cache: {} hits, {} misses. Read cache since the remount: {} pages served, {} read. Device time: nandsim's 25 us per page read, 250 us per page programmed, 2 ms per erase, 25 ns per byte transferred.",
        r.icache.0, r.icache.1, r.read_cache.0, r.read_cache.1
    );
    s
}
