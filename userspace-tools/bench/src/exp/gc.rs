//! `gc`: throughput in short windows over a long overwrite run, to show GC fluctuation.

use std::time::Instant;

use crate::buf::{DataBuf, Progress};
use crate::cli::{GcArgs, SyncMode};
use crate::error::{Context, Result};
use crate::exp::fill::Filler;
use crate::exp::{cleanup, open_rw, work_dir, write_file, Ctx, Overwriter};
use crate::record::{GcResults, GcWindow, Phase};
use crate::stats::mb_per_s;

/// `gc` for buffered writes, `gc-fsync` / `gc-dsync` for the device-bound variants.
pub fn experiment_name(a: &GcArgs) -> &'static str {
    match a.sync {
        SyncMode::None => "gc",
        SyncMode::Fsync => "gc-fsync",
        SyncMode::Dsync => "gc-dsync",
    }
}

/// The slowest window's rate as a percentage of `mean_mb_s`, over windows of at least 90 % of
/// `window_s` (a short last window is noise); all windows if none is that long.
pub fn slowest_pct_of_mean(windows: &[GcWindow], window_s: f64, mean_mb_s: f64) -> Option<f64> {
    if mean_mb_s <= 0.0 || !mean_mb_s.is_finite() {
        return None;
    }
    let full = windows.iter().filter(|w| w.seconds >= 0.9 * window_s).map(|w| w.mb_s).reduce(f64::min);
    let min = full.or_else(|| windows.iter().map(|w| w.mb_s).reduce(f64::min))?;
    Some(100.0 * min / mean_mb_s)
}

pub fn run(ctx: &mut Ctx, a: &GcArgs) -> Result<GcResults> {
    let w = work_dir(&a.dir, ".ferrofs-bench-gc")?;
    let r = run_in(ctx, a, &w);
    if !a.keep {
        cleanup(ctx, &w);
    }
    r
}

/// Coefficient of variation (population stddev / mean); `None` for fewer than 2 values or mean 0.
pub fn cov(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    if mean <= 0.0 {
        return None;
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
    Some(var.sqrt() / mean)
}

fn run_in(ctx: &mut Ctx, a: &GcArgs, w: &std::path::Path) -> Result<GcResults> {
    let file_size = a.file_size.max(a.block_size);
    let mut buf = DataBuf::new(a.block_size.max(1 << 20) as usize, ctx.seed);
    let path = w.join("work.dat");
    drop(write_file(&path, file_size, 1 << 20, &mut buf, 0)?);
    let fill = if a.fill > 0.0 {
        let root = w.join("fill");
        std::fs::create_dir(&root).with_ctx(|| format!("creating {}", root.display()))?;
        let mut filler = Filler::new(root, &a.fill_args, ctx.seed);
        Some(filler.fill_and_fragment(ctx, a.fill)?)
    } else {
        None
    };
    let flags = if a.sync == SyncMode::Dsync { libc::O_DSYNC } else { 0 };
    let fsync_each = a.sync == SyncMode::Fsync;
    let mut ow = Overwriter::new(open_rw(&path, flags)?, file_size, a.block_size, a.pattern, ctx.seed, buf);
    let bs = a.block_size;
    let window = a.window.min(a.duration);
    let fsync_window = !a.no_window_fsync;
    let pb = Progress::new(ctx.progress, a.duration.as_secs().max(1), "gc run (seconds)");
    let before = ctx.wa.snapshot();
    let start = Instant::now();
    // Pre-sized so that recording a window rarely allocates (capped: the run may stop early).
    let mut windows = Vec::with_capacity(((a.duration.as_secs_f64() / window.as_secs_f64()).ceil() as usize).saturating_add(1).min(1 << 16));
    let mut w_start = start;
    let mut w_bytes = 0u64;
    let mut total = 0u64;
    let mut stopped_by = "duration";
    let mut err = None;
    let mut shown = 0u64;
    loop {
        if let Err(e) = ow.write_one().and_then(|()| if fsync_each { ow.file.sync_data() } else { Ok(()) }) {
            err = Some(e);
            break;
        }
        w_bytes += bs;
        total += bs;
        let now = Instant::now();
        let limit_hit = a.max_bytes > 0 && total >= a.max_bytes;
        let end_hit = now.duration_since(start) >= a.duration;
        if now.duration_since(w_start) >= window || limit_hit || end_hit {
            if fsync_window {
                if let Err(e) = ow.file.sync_data() {
                    err = Some(e);
                    break;
                }
            }
            let w_end = Instant::now();
            let secs = w_end.duration_since(w_start).as_secs_f64();
            windows.push(GcWindow { t_s: w_start.duration_since(start).as_secs_f64(), seconds: secs, bytes: w_bytes, mb_s: mb_per_s(w_bytes, secs) });
            w_start = w_end;
            w_bytes = 0;
            let el = w_end.duration_since(start).as_secs();
            if el > shown {
                pb.inc(el - shown);
                shown = el;
            }
            if limit_hit {
                stopped_by = "max_bytes";
                break;
            }
            if end_hit || w_end.duration_since(start) >= a.duration {
                break;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    pb.finish();
    let wa = ctx.wa.sample(&before, &ctx.wa.snapshot(), total);
    let total_phase = match err {
        None => Phase::ok(total, secs),
        Some(e) => {
            stopped_by = "error";
            let m = format!("overwrite after {total} bytes: {e}");
            ctx.event(format!("gc: {m}"));
            Phase::failed("error", total, secs, m)
        }
    };
    let rates: Vec<f64> = windows.iter().map(|w| w.mb_s).collect();
    let window_s = window.as_secs_f64();
    let slowest = slowest_pct_of_mean(&windows, window_s, total_phase.mb_s.unwrap_or(mb_per_s(total, secs)));
    let sync = match a.sync {
        SyncMode::None => "none",
        SyncMode::Fsync => "fsync",
        SyncMode::Dsync => "dsync",
    };
    let res = GcResults {
        block_size: bs,
        window_s,
        min_window_mb_s: rates.iter().copied().reduce(f64::min),
        max_window_mb_s: rates.iter().copied().reduce(f64::max),
        cov: cov(&rates),
        windows,
        total: total_phase,
        stopped_by: stopped_by.into(),
        fill,
        wa,
        sync: sync.into(),
        slowest_window_pct_of_mean: slowest,
    };
    say!(
        "gc (sync {}): {} windows of {:.2} s, mean {:.2} MB/s, min {:.2}, max {:.2}, slowest window {} of the mean, CoV {}",
        res.sync,
        res.windows.len(),
        res.window_s,
        res.total.mb_s.unwrap_or(mb_per_s(total, secs)),
        res.min_window_mb_s.unwrap_or(0.0),
        res.max_window_mb_s.unwrap_or(0.0),
        res.slowest_window_pct_of_mean.map(|p| format!("{p:.0} %")).unwrap_or_else(|| "n/a".into()),
        res.cov.map(|c| format!("{c:.3}")).unwrap_or_else(|| "n/a".into())
    );
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coefficient_of_variation() {
        assert_eq!(cov(&[]), None);
        assert_eq!(cov(&[1.0]), None);
        assert_eq!(cov(&[2.0, 2.0]), Some(0.0));
        assert!((cov(&[1.0, 3.0]).unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(cov(&[0.0, 0.0]), None);
    }

    #[test]
    fn slowest_window_leaves_out_a_short_last_window() {
        let w = |seconds: f64, mb_s: f64| GcWindow { t_s: 0.0, seconds, bytes: 0, mb_s };
        let ws = [w(1.0, 4.0), w(1.02, 2.0), w(0.1, 0.5)];
        assert_eq!(slowest_pct_of_mean(&ws, 1.0, 4.0), Some(50.0));
        assert_eq!(slowest_pct_of_mean(&[w(0.2, 1.0)], 1.0, 2.0), Some(50.0), "no full window: all count");
        assert_eq!(slowest_pct_of_mean(&ws, 1.0, 0.0), None);
        assert_eq!(slowest_pct_of_mean(&[], 1.0, 1.0), None);
    }
}
