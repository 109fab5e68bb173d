//! `ferrofs-simbench`: write amplification and mount time of the ferrofs engine on the NAND simulator.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use ferrofs_simbench::{check_sane, markdown, run_all, Pattern, Plan, RunLength};

/// Write amplification (uniform and 80/20 overwrites at 50/80/95 % fill, beside the greedy
/// bound 1/(1-u)) and mount time after a power cut vs a clean unmount, on the NAND simulator.
#[derive(Debug, Parser)]
#[command(name = "ferrofs-simbench", version)]
struct Cli {
    /// Quick mode (about a minute): 32 MiB device, warm-up 2x and measurement 1x the device, fixed operation count for the mount test.
    #[arg(long)]
    quick: bool,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Device size of the write-amplification runs in MiB (default 64, 32 with --quick).
    #[arg(long)]
    device_mib: Option<u32>,
    /// Fill levels in percent, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [50u32, 80, 95])]
    fill: Vec<u32>,
    /// Warm-up: overwrite this many times the device size before measuring.
    #[arg(long)]
    warmup: Option<f64>,
    /// Measurement window in device sizes.
    #[arg(long)]
    measure: Option<f64>,
    /// Only the uniform pattern.
    #[arg(long)]
    uniform_only: bool,
    /// Seconds of writing before the power cut / unmount in the mount test (default 10; with --quick a fixed 20000 ops).
    #[arg(long)]
    mount_seconds: Option<f64>,
    /// Device size of the mount test in MiB.
    #[arg(long)]
    mount_device_mib: Option<u32>,
    /// Index nodes the engine caches in the WA runs (MountOptions::cache_nodes; default: the engine's).
    #[arg(long)]
    cache_nodes: Option<usize>,
    /// WA simulations run at the same time (default: the number of CPUs). Timings are per run.
    #[arg(long)]
    jobs: Option<usize>,
    /// Only the dirty-fill scenario of `ferrofs-bench dirty` (32 KiB files in directories of
    /// 256, fill to each --fill level, delete half at random, sync, refill): per-phase flash
    /// operations, simulated nandsim time and CPU time. Default device 128 MiB, levels 50,80,90.
    #[arg(long)]
    dirty_fill: bool,
    /// Dirty fill: give up a phase after this many CPU seconds (0 = never).
    #[arg(long, default_value_t = 0.0)]
    phase_limit: f64,
    /// Dirty fill: no background thread model (gc_step + periodic sync per simulated second).
    #[arg(long)]
    no_background: bool,
    /// Dirty fill: size of the work file overwritten after each level in MiB (0 = none).
    #[arg(long, default_value_t = 4)]
    work_mib: u64,
    /// Dirty fill: bytes per engine write call (the kernel hands over one 4 KiB folio per call).
    #[arg(long, default_value_t = 4096)]
    write_chunk: u64,
    /// Only the footprint experiment: engine RAM (per segment, per cached index node) and the
    /// bytes a checkpoint programs, on a 64 MiB and a 1 GiB device (--device-mib: the larger
    /// one) filled to the first --fill level.
    #[arg(long)]
    footprint: bool,
    /// Only the metadata experiment of `ferrofs-bench meta` (20 directories x 100 empty files on
    /// 128 MiB; --device-mib): flash reads, records appended, pages programmed, simulated
    /// nandsim time and CPU time per operation.
    #[arg(long)]
    meta: bool,
    /// Meta: directories (default: the rig's full profile, 20).
    #[arg(long)]
    meta_dirs: Option<u64>,
    /// Meta: empty files per directory (default: the rig's full profile, 100).
    #[arg(long)]
    meta_files: Option<u64>,
    /// Only the mount-scale experiment: the same files on each --scale-devices size, then a
    /// mount after a clean unmount and one after a power cut at the end of the longest log
    /// the checkpoint bound allows, in simulated nandsim time.
    #[arg(long)]
    mount_scale: bool,
    /// Mount scale: device sizes in MiB.
    #[arg(long, value_delimiter = ',', default_values_t = [256u32, 1024])]
    scale_devices: Vec<u32>,
    /// Mount scale: MiB of files written on every device.
    #[arg(long, default_value_t = 64)]
    data_mib: u64,
    /// Mount scale: MountOptions::checkpoint_log_bytes in KiB (0: the engine's default).
    #[arg(long, default_value_t = 0)]
    checkpoint_log_kib: u64,
    /// Only the cheap-FTL model of `make bench`'s randwrite forms (issue 13): ferrofs's block
    /// backend on a model of mtdblock (one cached 128 KiB erase block, written back at a block
    /// switch and at every flush) over a 256 MiB device (--device-mib): per form the write-backs
    /// (NAND erases), flushes, engine bytes and checkpoints.
    #[arg(long)]
    cheap_ftl: bool,
    /// Cheap FTL: idle simulated seconds before each form (the background thread runs).
    #[arg(long, default_value_t = 2)]
    gap_seconds: u32,
    /// Cheap FTL: seconds between the background thread's periodic checkpoints (commit=).
    #[arg(long, default_value_t = 5)]
    commit: u32,
    /// Cheap FTL: simulated milliseconds of CPU per user write and per fsync (the clock of the
    /// background thread; 0: device time only).
    #[arg(long, default_value_t = 0.0)]
    call_ms: f64,
    /// Cheap FTL: the background thread's periodic work is a checkpoint (the kernel before
    /// `Engine::commit`; by default it calls `Engine::commit`, as the kernel does now, which on
    /// a block device flushes the log heads unless a checkpoint is due).
    #[arg(long)]
    periodic_checkpoint: bool,
    /// Cheap FTL: a sync (checkpoint) after each form and before the next, around the idle gap,
    /// as the rig's `snap` and `settle` do (tests/vm/bench-target).
    #[arg(long)]
    settle_sync: bool,
    /// Cheap FTL: the replay window in KiB (0: the kernel's 8 MiB on a block device).
    #[arg(long, default_value_t = 0)]
    replay_window_kib: u64,
    /// Exit non-zero when a sanity check fails (WA < 1, ENOSPC, lost fsynced data, replay after clean unmount).
    #[arg(long)]
    strict: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.dirty_fill {
        return dirty_main(&cli);
    }
    if cli.cheap_ftl {
        return cheap_main(&cli);
    }
    if cli.footprint {
        return footprint_main(&cli);
    }
    if cli.meta {
        return meta_main(&cli);
    }
    if cli.mount_scale {
        return scale_main(&cli);
    }
    let mut plan = if cli.quick { Plan::quick(cli.seed) } else { Plan::full(cli.seed) };
    if let Some(d) = cli.device_mib {
        plan.wa_device_mib = d;
    }
    plan.fills = cli.fill.iter().map(|&f| f64::from(f.min(99)) / 100.0).collect();
    if let Some(w) = cli.warmup {
        plan.warmup = w;
    }
    if let Some(m) = cli.measure {
        plan.measure = m;
    }
    if let Some(c) = cli.cache_nodes {
        plan.cache_nodes = c;
    }
    if let Some(j) = cli.jobs {
        plan.jobs = j;
    }
    if cli.uniform_only {
        plan.patterns = vec![Pattern::Uniform];
    }
    if let Some(s) = cli.mount_seconds {
        plan.mount_run = RunLength::Seconds(s);
    }
    if let Some(d) = cli.mount_device_mib {
        plan.mount_device_mib = d;
    }
    let Some(report) = publish(&cli, run_all(&plan, cli.quick, &mut |l| eprintln!("{l}")), markdown) else {
        return ExitCode::FAILURE;
    };
    if let Err(e) = check_sane(&report) {
        eprintln!("ferrofs-simbench: {e}");
        if cli.strict {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// A run's result on screen (its markdown) and in `--json`; `None` (said on stderr) when the run
/// or the JSON failed.
fn publish<R: serde::Serialize, E: std::fmt::Display>(cli: &Cli, result: Result<R, E>, markdown: impl Fn(&R) -> String) -> Option<R> {
    let r = result.map_err(|e| eprintln!("ferrofs-simbench: {e}")).ok()?;
    println!("{}", markdown(&r));
    write_json(cli.json.as_deref(), &r).map_err(|e| eprintln!("ferrofs-simbench: {e}")).ok()?;
    Some(r)
}

/// Writes `value` as pretty JSON to `path`, if one was given.
fn write_json<T: serde::Serialize>(path: Option<&std::path::Path>, value: &T) -> Result<(), String> {
    let Some(p) = path else { return Ok(()) };
    let txt = serde_json::to_string_pretty(value).map_err(|e| format!("JSON: {e}"))?;
    std::fs::write(p, txt + "\n").map_err(|e| format!("writing {}: {e}", p.display()))
}

fn cheap_main(cli: &Cli) -> ExitCode {
    let mut cfg = ferrofs_simbench::cheapftl::CheapConfig::rig(cli.seed);
    if let Some(d) = cli.device_mib {
        cfg.device_mib = d;
    }
    cfg.gap_seconds = cli.gap_seconds;
    cfg.commit_seconds = cli.commit;
    cfg.call_ms = cli.call_ms;
    cfg.periodic_checkpoint = cli.periodic_checkpoint;
    cfg.settle_sync = cli.settle_sync;
    if cli.replay_window_kib > 0 {
        cfg.replay_window = cli.replay_window_kib << 10;
    }
    cfg.background = !cli.no_background;
    let r = ferrofs_simbench::cheapftl::run_cheap(&cfg, &mut |l| eprintln!("{l}"));
    match publish(cli, r, ferrofs_simbench::cheapftl::cheap_markdown) {
        Some(r) if r.fsck_clean => ExitCode::SUCCESS,
        Some(_) => {
            eprintln!("ferrofs-simbench: fsck found problems after the cheap-FTL forms");
            ExitCode::FAILURE
        }
        None => ExitCode::FAILURE,
    }
}

fn footprint_main(cli: &Cli) -> ExitCode {
    let fill = f64::from(cli.fill.first().copied().unwrap_or(50).min(99)) / 100.0;
    let large = cli.device_mib.unwrap_or(1024);
    let r = ferrofs_simbench::footprint::run_footprint(64, large, fill, cli.seed, &mut |l| eprintln!("{l}"));
    match publish(cli, r, ferrofs_simbench::footprint::footprint_markdown) {
        Some(_) => ExitCode::SUCCESS,
        None => ExitCode::FAILURE,
    }
}

fn meta_main(cli: &Cli) -> ExitCode {
    let mut cfg = ferrofs_simbench::meta::MetaConfig::rig(cli.seed);
    if let Some(d) = cli.device_mib {
        cfg.device_mib = d;
    }
    if let Some(d) = cli.meta_dirs {
        cfg.dirs = d.max(1);
    }
    if let Some(f) = cli.meta_files {
        cfg.files_per_dir = f.max(1);
    }
    match publish(cli, ferrofs_simbench::meta::run_meta(&cfg), ferrofs_simbench::meta::meta_markdown) {
        Some(_) => ExitCode::SUCCESS,
        None => ExitCode::FAILURE,
    }
}

fn scale_main(cli: &Cli) -> ExitCode {
    let cfg = ferrofs_simbench::mountscale::ScaleConfig {
        devices_mib: cli.scale_devices.clone(),
        data_mib: cli.data_mib,
        checkpoint_log_bytes: cli.checkpoint_log_kib << 10,
        seed: cli.seed,
    };
    let r = ferrofs_simbench::mountscale::run_scale(&cfg, &mut |l| eprintln!("{l}"));
    match publish(cli, r, ferrofs_simbench::mountscale::scale_markdown) {
        Some(_) => ExitCode::SUCCESS,
        None => ExitCode::FAILURE,
    }
}

fn dirty_main(cli: &Cli) -> ExitCode {
    let mut cfg = ferrofs_simbench::dirty::DirtyConfig::rig(cli.device_mib.unwrap_or(128), cli.seed);
    if cli.fill != [50u32, 80, 95] {
        cfg.levels = cli.fill.iter().map(|&f| f64::from(f.min(99)) / 100.0).collect();
    }
    if let Some(c) = cli.cache_nodes {
        cfg.cache_nodes = c;
    }
    cfg.phase_cpu_limit = cli.phase_limit;
    cfg.write_chunk = cli.write_chunk.max(1);
    cfg.background = !cli.no_background;
    cfg.work_size = cli.work_mib << 20;
    cfg.work_amount = cfg.work_size;
    let Some(r) = publish(cli, ferrofs_simbench::dirty::run_dirty(&cfg, &mut |l| eprintln!("{l}")), ferrofs_simbench::dirty::dirty_markdown) else {
        return ExitCode::FAILURE;
    };
    let done = r.phases.len() == cfg.levels.len() * if cfg.work_size > 0 { 3 } else { 2 } && !r.phases.iter().any(|p| p.gave_up);
    if !done || !r.fsck_clean {
        eprintln!("ferrofs-simbench: dirty fill did not complete cleanly (phases {}, fsck clean {})", r.phases.len(), r.fsck_clean);
        if cli.strict {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
