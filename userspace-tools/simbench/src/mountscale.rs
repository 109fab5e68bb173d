//! Mount time at device scale, clean and after a power cut, in simulated nandsim time: the
//! same data on every device size (a tree of files), then either a clean unmount or the rig's
//! `mount-powercut` writer (128 KiB files, every 4th fsync'd, no periodic checkpoint) stopped
//! by a power cut just before the engine's next checkpoint would have been due (the longest
//! log a mount can find after a cut: `MountOptions::checkpoint_log_bytes`), then a timed mount.
//!
//! Per mount: NAND pages read and programmed, erases, the simulated device time
//! ([`crate::nand_seconds`]), the engine's CPU time, the records replayed; per device the
//! checkpoints and checkpoint bytes per user MiB of the writer; and the 1 GiB / 256 MiB ratios.

use serde::Serialize;

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, Error, MountOptions, ROOT_INO};
use ferrofs_flashsim::{Counters, NandSim, OpKind};

use crate::dirty::Clock;
use crate::dirty::{BYTE_NS, ERASE_US, PROGRAM_US, READ_US};
use crate::{counters, fresh_fs, now, BenchError, Fs, Result, Rng, MIB, PAGE_SIZE};

/// The experiment's parameters.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleConfig {
    /// Device sizes in MiB.
    pub devices_mib: Vec<u32>,
    /// MiB of file data written first on every device (the same files).
    pub data_mib: u64,
    /// `MountOptions::checkpoint_log_bytes` of every mount (0: the engine's default).
    pub checkpoint_log_bytes: u64,
    /// Random seed (file sizes, contents).
    pub seed: u64,
}

/// One timed mount.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleMount {
    /// NAND pages read.
    pub pages_read: u64,
    /// Read requests.
    pub reads: u64,
    /// NAND pages programmed.
    pub pages_programmed: u64,
    /// Erase blocks erased.
    pub erases: u64,
    /// Simulated nandsim milliseconds.
    pub device_ms: f64,
    /// Engine CPU milliseconds (native).
    pub cpu_ms: f64,
    /// Records replayed.
    pub replayed: u64,
    /// Index nodes cached after the mount.
    pub cached_nodes: usize,
    /// Pages read in the superblock and checkpoint-area segments (the rest: the log).
    pub meta_pages_read: u64,
    /// Erases of checkpoint-area segments (the rest: the log heads' new segments).
    pub meta_erases: u64,
    /// Bytes the mount's checkpoint(s) programmed (`Engine::checkpoint_bytes`).
    pub checkpoint_bytes: u64,
    /// Bytes of SEGTAB records the mount appended (headers included).
    pub segtab_bytes: u64,
    /// Bytes of index nodes the mount appended.
    pub index_bytes: u64,
}

impl ScaleMount {
    /// Device + CPU milliseconds.
    pub fn total_ms(&self) -> f64 {
        self.device_ms + self.cpu_ms
    }
}

/// One device size.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleDevice {
    /// Device size in MiB.
    pub device_mib: u32,
    /// Segments.
    pub segments: u32,
    /// statfs capacity in bytes.
    pub capacity_bytes: u64,
    /// Mount after a clean unmount.
    pub clean: ScaleMount,
    /// Mount after the writer and a power cut.
    pub cut: ScaleMount,
    /// Log bytes programmed since the last checkpoint before the cut.
    pub log_bytes_at_cut: u64,
    /// User MiB the writer wrote.
    pub writer_mib: f64,
    /// Checkpoints per user MiB of the writer.
    pub checkpoints_per_user_mib: f64,
    /// Bytes programmed by checkpoints per user MiB of the writer (`Engine::checkpoint_bytes`).
    pub checkpoint_bytes_per_user_mib: f64,
}

/// What the experiment measured.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleResult {
    /// Parameters.
    pub config: ScaleConfig,
    /// Per device size.
    pub devices: Vec<ScaleDevice>,
}

/// Simulated seconds of the rig's nandsim for the operations in `d`, page by page: a read
/// costs the page access and the transfer of the whole page (MTD reads whole pages, however
/// few bytes are asked for: 25 us + 2 KiB x 25 ns = 76 us, about 27 MB/s), a program the
/// program time and the page transfer, an erase 2 ms.
pub fn nand_seconds(d: &Counters) -> f64 {
    let xfer = f64::from(PAGE_SIZE) * BYTE_NS / 1000.0;
    (d.pages_read as f64 * (READ_US + xfer) + d.pages_programmed as f64 * (PROGRAM_US + xfer) + d.blocks_erased as f64 * ERASE_US)
        / 1e6
}

fn eng(what: &'static str) -> impl Fn(Error) -> BenchError {
    move |e| BenchError::Engine(what, e)
}

fn opts(cfg: &ScaleConfig) -> MountOptions {
    let d = MountOptions::default();
    MountOptions { checkpoint_log_bytes: if cfg.checkpoint_log_bytes == 0 { d.checkpoint_log_bytes } else { cfg.checkpoint_log_bytes }, ..d }
}

fn content(rng: &mut Rng, buf: &mut [u8]) {
    for c in buf.chunks_mut(8) {
        let v = rng.next_u64().to_le_bytes();
        let n = c.len();
        c.copy_from_slice(&v[..n]);
    }
}

/// The same tree on every device: directories of 100 files of 4 KiB to 256 KiB.
fn write_data(fs: &mut Fs, cfg: &ScaleConfig) -> Result<()> {
    let mut rng = Rng::new(cfg.seed);
    let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
    let mut buf = vec![0u8; 256 << 10];
    let (mut written, mut op, mut dir) = (0u64, 0u64, ROOT_INO);
    let mut i = 0u64;
    while written < cfg.data_mib * MIB {
        op += 1;
        if i.is_multiple_of(100) {
            dir = fs.mkdir(ROOT_INO, format!("d{}", i / 100).as_bytes(), 0o755, 0, 0, now(op)).map_err(eng("mkdir"))?.ino;
        }
        let size = 4096 * (1 + rng.below(64)) as usize;
        content(&mut rng, &mut buf[..size]);
        let ino = fs.create(dir, format!("f{i}").as_bytes(), &args, now(op)).map_err(eng("create"))?.ino;
        fs.write(ino, 0, &buf[..size], now(op)).map_err(eng("write"))?;
        written += size as u64;
        i += 1;
    }
    fs.sync().map_err(eng("sync"))
}

fn timed_mount(mut sim: NandSim, o: MountOptions) -> Result<(Fs, ScaleMount)> {
    // the operations, to tell the checkpoint areas' and superblock's reads from the log's
    sim.enable_log(true);
    let c0 = sim.counters();
    let clock = Clock::start();
    let mut fs = Fs::mount(sim, o).map_err(|(e, _)| BenchError::Engine("timed mount", e))?;
    let cpu = clock.seconds();
    let d: Counters = counters(&mut fs).since(&c0);
    let ops = fs.flash().take_log();
    fs.flash().enable_log(false);
    let (mut meta_pages_read, mut meta_erases) = (0u64, 0u64);
    for op in &ops {
        let meta = fs.segment_info(op.seg).is_some_and(|s| s.state == ferrofs_engine::format::segstate::META);
        match op.kind {
            OpKind::Read if meta && op.len > 0 => {
                meta_pages_read += u64::from((op.offset + op.len - 1) / PAGE_SIZE - op.offset / PAGE_SIZE + 1);
            }
            OpKind::Erase if meta => meta_erases += 1,
            _ => {}
        }
    }
    let st = fs.stats();
    let m = ScaleMount {
        pages_read: d.pages_read,
        reads: d.reads,
        pages_programmed: d.pages_programmed,
        erases: d.blocks_erased,
        device_ms: nand_seconds(&d) * 1e3,
        cpu_ms: cpu * 1e3,
        replayed: st.replayed,
        cached_nodes: fs.cached_nodes(),
        meta_pages_read,
        meta_erases,
        checkpoint_bytes: fs.checkpoint_bytes(),
        segtab_bytes: st.segtab_bytes,
        index_bytes: st.index_bytes,
    };
    Ok((fs, m))
}

fn run_device(cfg: &ScaleConfig, mib: u32) -> Result<ScaleDevice> {
    let o = opts(cfg);
    // clean: the data, unmount, mount
    let mut fs = fresh_fs(mib, cfg.seed, 0)?;
    write_data(&mut fs, cfg)?;
    let sim = fs.unmount().map_err(|(e, _)| BenchError::Engine("unmount", e))?;
    let (mut fs, clean) = timed_mount(sim, o)?;
    let segments = counters(&mut fs).erase_counts.len() as u32;
    let capacity_bytes = fs.statfs().blocks * u64::from(fs.statfs().block_size);

    // the writer, stopped by a power cut when the next file would bring the log since the
    // last checkpoint to the bound (the engine then checkpoints)
    let sim = fs.unmount().map_err(|(e, _)| BenchError::Engine("unmount", e))?;
    let mut fs = Fs::mount(sim, o).map_err(|(e, _)| BenchError::Engine("writer mount", e))?;
    let file = 128u64 << 10;
    let bound = fs.checkpoint_log_bytes();
    let mut rng = Rng::new(cfg.seed ^ 0x5eed);
    let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
    let wdir = fs.mkdir(ROOT_INO, b"writer", 0o755, 0, 0, now(1)).map_err(eng("mkdir"))?.ino;
    let mut buf = vec![0u8; file as usize];
    let (cp0, cpb0) = (fs.stats().checkpoints, fs.checkpoint_bytes());
    let mut cps = cp0;
    let mut prog_at_cp = counters(&mut fs).bytes_programmed;
    let (mut user, mut i) = (0u64, 0u64);
    // a few checkpoints during the run, then stop when the next file would bring the log
    // since the last one to the bound (the engine checkpoints inside that file's write)
    let stop_after = 2 * bound.max(file) / file + 8;
    loop {
        let since = counters(&mut fs).bytes_programmed - prog_at_cp;
        if i >= stop_after && since + file + (file / 4096) * 64 >= bound {
            break;
        }
        if i > 100_000 {
            return Err(BenchError::Insane("the writer never reached the checkpoint bound".into()));
        }
        content(&mut rng, &mut buf);
        let ino = fs.create(wdir, format!("w{i}").as_bytes(), &args, now(i)).map_err(eng("writer create"))?.ino;
        fs.write(ino, 0, &buf, now(i)).map_err(eng("writer write"))?;
        if i % 4 == 3 {
            fs.fsync(ino).map_err(eng("writer fsync"))?;
        }
        user += file;
        i += 1;
        let c = fs.stats().checkpoints;
        if c != cps {
            cps = c;
            prog_at_cp = counters(&mut fs).bytes_programmed;
        }
    }
    let log_bytes_at_cut = counters(&mut fs).bytes_programmed - prog_at_cp;
    let user_mib = user as f64 / MIB as f64;
    let checkpoints_per_user_mib = fs.stats().checkpoints.saturating_sub(cp0) as f64 / user_mib;
    let checkpoint_bytes_per_user_mib = fs.checkpoint_bytes().saturating_sub(cpb0) as f64 / user_mib;
    let sim = fs.into_flash();
    let (fs, cut) = timed_mount(sim, o)?;
    drop(fs);
    Ok(ScaleDevice {
        device_mib: mib,
        segments,
        capacity_bytes,
        clean,
        cut,
        log_bytes_at_cut,
        writer_mib: user_mib,
        checkpoints_per_user_mib,
        checkpoint_bytes_per_user_mib,
    })
}

/// Runs the experiment.
pub fn run_scale(cfg: &ScaleConfig, progress: &mut dyn FnMut(&str)) -> Result<ScaleResult> {
    let mut devices = Vec::new();
    for &mib in &cfg.devices_mib {
        progress(&format!("mount scale: {mib} MiB"));
        devices.push(run_device(cfg, mib)?);
    }
    Ok(ScaleResult { config: cfg.clone(), devices })
}

/// The result as Markdown.
pub fn scale_markdown(r: &ScaleResult) -> String {
    use std::fmt::Write as _;
    let c = &r.config;
    let mut s = format!(
        "#### Mount time at scale ({} MiB of files on every device; checkpoint_log_bytes {})\n\n",
        c.data_mib,
        if c.checkpoint_log_bytes == 0 { "default".to_string() } else { c.checkpoint_log_bytes.to_string() }
    );
    s.push_str("| device | segments | case | pages read | reads | pages programmed | erases | records replayed | device ms | CPU ms | total ms |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for d in &r.devices {
        for (case, m) in [("clean", &d.clean), ("power cut", &d.cut)] {
            let _ = writeln!(
                s,
                "| {} MiB | {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | **{:.1}** |",
                d.device_mib,
                d.segments,
                case,
                m.pages_read,
                m.reads,
                m.pages_programmed,
                m.erases,
                m.replayed,
                m.device_ms,
                m.cpu_ms,
                m.total_ms()
            );
        }
    }
    s.push_str("\nWhere they go: pages read in the superblock and checkpoint areas (the slot scan) and in the log (segment table, the checkpoint's read-back, index root, head tails); bytes the mount's checkpoint programmed, of them SEGTAB records and index nodes; erases of a checkpoint area and of the log.\n\n");
    s.push_str("| device | case | pages read: areas / log | checkpoint bytes | SEGTAB bytes (in full chunks of 3 654) | index bytes | erases: area / log |\n");
    s.push_str("|---|---|---|---|---|---|---|\n");
    for d in &r.devices {
        for (case, m) in [("clean", &d.clean), ("power cut", &d.cut)] {
            let _ = writeln!(
                s,
                "| {} MiB | {} | {} / {} | {} | {} ({:.1}) | {} | {} / {} |",
                d.device_mib,
                case,
                m.meta_pages_read,
                m.pages_read.saturating_sub(m.meta_pages_read),
                m.checkpoint_bytes,
                m.segtab_bytes,
                m.segtab_bytes as f64 / (200.0 * 18.0 + 54.0),
                m.index_bytes,
                m.meta_erases,
                m.erases.saturating_sub(m.meta_erases)
            );
        }
    }
    s.push_str("\n| device | statfs capacity MB | writer MiB | log at the cut | checkpoints per user MiB | checkpoint bytes per user MiB | cut - clean ms |\n");
    s.push_str("|---|---|---|---|---|---|---|\n");
    for d in &r.devices {
        let _ = writeln!(
            s,
            "| {} MiB | {:.1} | {:.1} | {:.0} KiB | {:.2} | {:.0} | {:.1} |",
            d.device_mib,
            d.capacity_bytes as f64 / 1e6,
            d.writer_mib,
            d.log_bytes_at_cut as f64 / 1024.0,
            d.checkpoints_per_user_mib,
            d.checkpoint_bytes_per_user_mib,
            d.cut.total_ms() - d.clean.total_ms()
        );
    }
    if let (Some(a), Some(b)) = (r.devices.first(), r.devices.last()) {
        if a.device_mib != b.device_mib {
            let _ = writeln!(
                s,
                "\nRatio {} MiB / {} MiB (device + CPU): clean {:.2}, after a cut {:.2}.",
                b.device_mib,
                a.device_mib,
                b.clean.total_ms() / a.clean.total_ms().max(1e-9),
                b.cut.total_ms() / a.cut.total_ms().max(1e-9)
            );
            let _ = writeln!(
                s,
                "Device time alone (the CPU time has a 4 ms resolution): clean {:.3}, after a cut {:.3}.",
                b.clean.device_ms / a.clean.device_ms.max(1e-9),
                b.cut.device_ms / a.cut.device_ms.max(1e-9)
            );
        }
    }
    s
}
