//! ferrofs-bench: a light benchmark tool for flash filesystems and raw flash devices.
//!
//! Runs inside a slow (TCG) QEMU guest: data buffers are generated once per run, the timed loops
//! neither allocate nor format, and every experiment is deterministic from `--seed`. Each run writes
//! a JSON [`record::RunRecord`]; `report` combines several filesystems' runs on the host.

/// `println!` that never panics: a closed stdout (`| head`) must not abort a benchmark whose JSON
/// is still to be written.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

pub mod buf;
pub mod cli;
pub mod error;
pub mod exp;
pub mod plot;
pub mod record;
pub mod report;
pub mod stats;
pub mod sys;
pub mod units;
pub mod wa;

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::cli::{Cli, Cmd, Common};
use crate::error::{Context, Result};
use crate::exp::Ctx;
use crate::record::RunRecord;

fn params<T: Serialize>(p: T) -> serde_json::Value {
    serde_json::to_value(p).unwrap_or(serde_json::Value::Null)
}

/// Writes the JSON and Markdown of a run and prints the Markdown.
fn finish(rec: RunRecord, common: &Common) -> Result<RunRecord> {
    let path = rec.write_json(&common.out_dir)?;
    let md = report::summary_markdown(&rec)?;
    let md_path = path.with_extension("md");
    std::fs::write(&md_path, &md).with_ctx(|| format!("writing {}", md_path.display()))?;
    say!("\n{md}");
    say!("results: {}", path.display());
    Ok(rec)
}

fn started() -> (u64, Instant) {
    (sys::unix_now(), Instant::now())
}

/// Runs one parsed command line. Measuring commands return their record (the report returns None).
pub fn run(cli: Cli) -> Result<Option<RunRecord>> {
    match cli.cmd {
        Cmd::Sweep(a) => {
            let st = started();
            let mut ctx = Ctx::new(&a.common);
            let (res, target) = match (&a.raw, &a.dir) {
                (Some(dev), _) => (exp::raw::run(&mut ctx, &a, dev)?, dev.display().to_string()),
                (None, Some(dir)) => (exp::sweep::run_fs(&mut ctx, &a, dir)?, dir.display().to_string()),
                (None, None) => bail!("sweep needs a directory or --raw DEVICE"),
            };
            let p = params(serde_json::json!({
                "block_sizes": a.block_sizes, "total": a.total,
                "modes": a.modes.iter().map(|m| format!("{m:?}").to_lowercase()).collect::<Vec<_>>(),
                "raw": a.raw.is_some(), "raw_offset": a.raw_offset, "remount_cmd": a.remount_cmd, "drop_caches": !a.common.no_drop_caches,
            }));
            let rec = ctx.record("sweep", &target, st, p, serde_json::to_value(res)?);
            finish(rec, &a.common).map(Some)
        }
        Cmd::Dirty(a) => {
            let st = started();
            let mut ctx = Ctx::new(&a.common);
            let res = exp::dirty::run(&mut ctx, &a)?;
            let p = params(serde_json::json!({
                "fill": a.fill, "block_sizes": a.block_sizes, "amount": a.amount, "work_size": a.work_size,
                "warmup": a.warmup, "pattern": format!("{:?}", a.pattern).to_lowercase(),
                "fill_file_size": a.fill_args.fill_file_size, "delete_fraction": a.fill_args.delete_fraction, "max_fill_bytes": a.fill_args.max_fill_bytes,
            }));
            let rec = ctx.record("dirty", &a.dir.display().to_string(), st, p, serde_json::to_value(res)?);
            finish(rec, &a.common).map(Some)
        }
        Cmd::Latency(a) => {
            let st = started();
            let mut ctx = Ctx::new(&a.common);
            let (res, samples) = exp::latency::run(&mut ctx, &a)?;
            let p = params(serde_json::json!({
                "count": a.count, "block_size": a.block_size, "file_size": a.file_size,
                "sync": format!("{:?}", a.sync).to_lowercase(), "pattern": format!("{:?}", a.pattern).to_lowercase(),
            }));
            let mut v = serde_json::to_value(res)?;
            if let (Some(s), Some(obj)) = (samples, v.as_object_mut()) {
                obj.insert("samples_ns".into(), serde_json::to_value(s)?);
            }
            let rec = ctx.record(exp::latency::experiment_name(&a), &a.dir.display().to_string(), st, p, v);
            finish(rec, &a.common).map(Some)
        }
        Cmd::Gc(a) => {
            let st = started();
            let mut ctx = Ctx::new(&a.common);
            let res = exp::gc::run(&mut ctx, &a)?;
            let p = params(serde_json::json!({
                "duration_s": a.duration.as_secs_f64(), "window_s": a.window.as_secs_f64(), "max_bytes": a.max_bytes,
                "block_size": a.block_size, "file_size": a.file_size, "fill": a.fill,
                "pattern": format!("{:?}", a.pattern).to_lowercase(), "window_fsync": !a.no_window_fsync,
                "sync": format!("{:?}", a.sync).to_lowercase(),
                "fill_file_size": a.fill_args.fill_file_size, "delete_fraction": a.fill_args.delete_fraction, "max_fill_bytes": a.fill_args.max_fill_bytes,
            }));
            let rec = ctx.record(exp::gc::experiment_name(&a), &a.dir.display().to_string(), st, p, serde_json::to_value(res)?);
            finish(rec, &a.common).map(Some)
        }
        Cmd::Randwrite(a) => {
            let st = started();
            let mut ctx = Ctx::new(&a.common);
            let res = exp::randwrite::run(&mut ctx, &a)?;
            let p = params(serde_json::json!({
                "file_size": a.file_size, "block_size": a.block_size, "amount": a.amount, "fsync_every": a.fsync_every,
                "dirty_bytes": a.dirty_bytes, "max_duration_s": a.max_duration.map(|d| d.as_secs_f64()), "keep": a.keep,
            }));
            let rec = ctx.record(&exp::randwrite::experiment_name(&a), &a.dir.display().to_string(), st, p, serde_json::to_value(res)?);
            finish(rec, &a.common).map(Some)
        }
        Cmd::Concurrency(a) => {
            let st = started();
            let mut ctx = Ctx::new(&a.common);
            let res = exp::concurrency::run(&mut ctx, &a)?;
            let p = params(serde_json::json!({
                "read_size": a.read_size, "read_block": a.read_block, "duration_s": a.duration.as_secs_f64(),
                "write_size": a.write_size, "write_block": a.write_block, "writer_fsync_every": res.writer_fsync_every,
            }));
            let rec = ctx.record("concurrency", &a.dir.display().to_string(), st, p, serde_json::to_value(res)?);
            finish(rec, &a.common).map(Some)
        }
        Cmd::ConcurrencyWriter(a) => {
            exp::concurrency::writer(&a)?;
            Ok(None)
        }
        Cmd::Smallfiles(a) => {
            let st = started();
            let mut ctx = Ctx::new(&a.common);
            let res = exp::meta::run_smallfiles(&mut ctx, &a)?;
            let p = params(serde_json::json!({"count": a.count, "size": a.size, "per_dir": a.per_dir, "fsync": !a.no_fsync}));
            let rec = ctx.record("smallfiles", &a.dir.display().to_string(), st, p, serde_json::to_value(res)?);
            finish(rec, &a.common).map(Some)
        }
        Cmd::Meta(a) => {
            let st = started();
            let mut ctx = Ctx::new(&a.common);
            let res = exp::meta::run_meta(&mut ctx, &a)?;
            let p = params(serde_json::json!({"dirs": a.dirs, "files_per_dir": a.files_per_dir, "stat_rounds": a.stat_rounds}));
            let rec = ctx.record("meta", &a.dir.display().to_string(), st, p, serde_json::to_value(res)?);
            finish(rec, &a.common).map(Some)
        }
        Cmd::Mount(a) => {
            let st = started();
            let mut ctx = Ctx::new(&a.common);
            let res = exp::mount::run(&mut ctx, &a)?;
            let p = params(serde_json::json!({"mount_cmd": a.mount_cmd, "umount_cmd": a.umount_cmd, "repeat": a.repeat, "not_mounted": a.not_mounted, "drop_caches": !a.common.no_drop_caches, "after": a.after}));
            let failed = res.runs.iter().any(|r| !r.mount.ok);
            let rec = ctx.record(exp::mount::experiment_name(&a), &a.mount_cmd, st, p, serde_json::to_value(res)?);
            let rec = finish(rec, &a.common)?;
            if failed {
                bail!("the mount command failed (results written)");
            }
            Ok(Some(rec))
        }
        Cmd::Report(a) => {
            report_cmd(&a.results_dir, a.out.as_deref(), &a.reference, !a.no_plots)?;
            Ok(None)
        }
    }
}

/// `report`: combined Markdown (report.md) and SVG plots.
pub fn report_cmd(results: &Path, out: Option<&Path>, reference: &str, plots: bool) -> Result<()> {
    let set = report::load_results(results)?;
    if set.runs.is_empty() {
        bail!("no ferrofs-bench JSON results found under {}", results.display());
    }
    let out = out.map(Path::to_path_buf).unwrap_or_else(|| results.join("report"));
    std::fs::create_dir_all(&out).with_ctx(|| format!("creating {}", out.display()))?;
    let mut md = report::combined_markdown(&set, reference)?;
    if plots {
        let files = plot::plot_all(&set, reference, &out)?;
        if !files.is_empty() {
            md.push_str("\n## Plots\n\n");
            for f in &files {
                if let Some(n) = f.file_name().and_then(|n| n.to_str()) {
                    md.push_str(&format!("![{n}]({n})\n\n"));
                }
            }
        }
    }
    let path = out.join("report.md");
    std::fs::write(&path, &md).with_ctx(|| format!("writing {}", path.display()))?;
    for w in &set.warnings {
        eprintln!("ferrofs-bench: {w}");
    }
    say!("{md}");
    say!("report: {}", path.display());
    Ok(())
}
