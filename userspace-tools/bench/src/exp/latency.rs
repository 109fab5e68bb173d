//! `latency`: the time of each of N block writes into a work file.

use std::time::Instant;

use crate::buf::{DataBuf, Progress};
use crate::cli::{LatencyArgs, SyncMode};
use crate::error::Result;
use crate::exp::{cleanup, open_rw, work_dir, write_file, Ctx, Overwriter};
use crate::record::{LatencyResults, Phase};
use crate::stats::{log2_histogram, summarize_ns};

/// `latency` for buffered writes (`--sync none`), `latency-fsync` / `latency-dsync` for the
/// device-bound variants, so that both sit side by side in one results folder.
pub fn experiment_name(a: &LatencyArgs) -> &'static str {
    match a.sync {
        SyncMode::None => "latency",
        SyncMode::Fsync => "latency-fsync",
        SyncMode::Dsync => "latency-dsync",
    }
}

pub fn run(ctx: &mut Ctx, a: &LatencyArgs) -> Result<(LatencyResults, Option<Vec<u64>>)> {
    let w = work_dir(&a.dir, ".ferrofs-bench-latency")?;
    let r = run_in(ctx, a, &w);
    cleanup(ctx, &w);
    r
}

fn run_in(ctx: &mut Ctx, a: &LatencyArgs, w: &std::path::Path) -> Result<(LatencyResults, Option<Vec<u64>>)> {
    let file_size = a.file_size.max(a.block_size);
    let mut buf = DataBuf::new(a.block_size.max(1 << 20) as usize, ctx.seed);
    let path = w.join("work.dat");
    drop(write_file(&path, file_size, 1 << 20, &mut buf, 0)?);
    let flags = if a.sync == SyncMode::Dsync { libc::O_DSYNC } else { 0 };
    let file = open_rw(&path, flags)?;
    let mut ow = Overwriter::new(file, file_size, a.block_size, a.pattern, ctx.seed, buf);
    let fsync_each = a.sync == SyncMode::Fsync;
    let n = a.count;
    // Pre-allocated so the timed loop never allocates.
    let mut samples: Vec<u64> = Vec::new();
    if usize::try_from(n).ok().and_then(|n| samples.try_reserve_exact(n).ok()).is_none() {
        crate::bail!("--count {n}: cannot hold that many samples in memory");
    }
    let pb = Progress::new(ctx.progress, n * a.block_size, "latency");
    let before = ctx.wa.snapshot();
    let t_all = Instant::now();
    let mut err = None;
    for i in 0..n {
        let t = Instant::now();
        let r = ow.write_one().and_then(|()| if fsync_each { ow.file.sync_data() } else { Ok(()) });
        let ns = t.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        if let Err(e) = r {
            err = Some(e);
            break;
        }
        samples.push(ns);
        if i % 1024 == 1023 {
            pb.inc(1024 * a.block_size);
        }
    }
    let secs = t_all.elapsed().as_secs_f64();
    pb.finish();
    let done = samples.len() as u64 * a.block_size;
    let wa = ctx.wa.sample(&before, &ctx.wa.snapshot(), done);
    let total = match err {
        None => Phase::ok(done, secs),
        Some(e) => {
            let m = format!("write {} of {n}: {e}", samples.len() + 1);
            ctx.event(format!("latency: {m}"));
            Phase::failed("error", done, secs, m)
        }
    };
    let histogram = log2_histogram(&samples);
    let keep = if a.keep_samples { Some(samples.clone()) } else { None };
    let summary = summarize_ns(&mut samples);
    let sync = match a.sync {
        SyncMode::None => "none",
        SyncMode::Fsync => "fsync",
        SyncMode::Dsync => "dsync",
    };
    if let Some(s) = &summary {
        say!(
            "{} writes of {} B (sync {sync}): min {:.1} µs, median {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs",
            s.count, a.block_size, s.min_us, s.median_us, s.p99_us, s.p999_us, s.max_us
        );
        for b in &histogram {
            if b.count > 0 {
                say!("  [{:>9}, {:>9}) µs {:>9}", b.lo_us, b.hi_us, b.count);
            }
        }
    }
    Ok((LatencyResults { block_size: a.block_size, writes: samples.len() as u64, sync: sync.into(), summary, histogram, total, wa }, keep))
}
