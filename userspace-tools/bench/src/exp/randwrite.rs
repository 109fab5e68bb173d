//! `randwrite`: random block overwrites of a large file in forms a page cache cannot hide: an
//! fsync after every N writes (`randwrite-syncN`), or buffered under a small dirty limit with the
//! final fsync timed (`randwrite-buffered`).
//!
//! The file is first written sequentially and fsynced (untimed, or reused from an earlier run
//! with `--keep`); the timed phase overwrites `--amount` bytes at random block-aligned offsets.

use std::path::Path;
use std::time::Instant;

use crate::buf::{DataBuf, Progress};
use crate::cli::{Pattern, RandwriteArgs};
use crate::error::Result;
use crate::exp::{cleanup, open_rw, work_dir, write_file, Ctx, Overwriter};
use crate::record::{Phase, RandwriteResults};
use crate::stats::summarize_ns;
use crate::sys::DirtyLimit;
use crate::units::fmt_size;

const DIR: &str = ".ferrofs-bench-randwrite";

/// `randwrite-sync16`, `randwrite-sync1`, ... or `randwrite-buffered` (fsync only at the end).
pub fn experiment_name(a: &RandwriteArgs) -> String {
    if a.fsync_every == 0 {
        "randwrite-buffered".into()
    } else {
        format!("randwrite-sync{}", a.fsync_every)
    }
}

pub fn run(ctx: &mut Ctx, a: &RandwriteArgs) -> Result<RandwriteResults> {
    if a.dirty_bytes.is_some() && !crate::sys::is_root() {
        crate::bail!("--dirty-bytes sets vm.dirty_bytes: run as root");
    }
    let w = a.dir.join(DIR);
    let path = w.join("work.dat");
    let file_size = a.file_size.max(a.block_size) / a.block_size * a.block_size;
    let reuse = a.keep && std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == file_size);
    if !reuse {
        work_dir(&a.dir, DIR)?;
    }
    let r = run_in(ctx, a, &path, file_size, reuse);
    if !a.keep || r.as_ref().map_or(true, |r| r.stopped_by == "error") {
        cleanup(ctx, &w);
    }
    r
}

fn run_in(ctx: &mut Ctx, a: &RandwriteArgs, path: &Path, file_size: u64, reuse: bool) -> Result<RandwriteResults> {
    let bs = a.block_size;
    let mut buf = DataBuf::new(bs.max(1 << 20) as usize, ctx.seed);
    let mut out = RandwriteResults {
        block_size: bs,
        file_size,
        fsync_every: a.fsync_every,
        writes: 0,
        fsyncs: 0,
        total: Phase::skipped("not run"),
        fsync_latency: None,
        final_fsync_s: None,
        dirty_bytes: None,
        layout: None,
        stopped_by: "error".into(),
        wa: None,
        counter_key: ctx.wa.counters_file.as_ref().map(|_| ctx.wa.counter_key.clone()),
        counter_per_fsync: None,
    };
    if reuse {
        ctx.event(format!("reused the {} work file an earlier run left", fmt_size(file_size)));
    } else {
        let t = Instant::now();
        match write_file(path, file_size, 1 << 20, &mut buf, 0) {
            Ok(f) => drop(f),
            Err(e) => {
                let m = format!("laying out the {} file: {e}", fmt_size(file_size));
                ctx.event(m.clone());
                out.layout = Some(Phase::failed("error", 0, t.elapsed().as_secs_f64(), m));
                out.total = Phase::skipped("no work file");
                return Ok(out);
            }
        }
        out.layout = Some(Phase::ok(file_size, t.elapsed().as_secs_f64()));
    }

    let n = a.amount.div_ceil(bs).max(1);
    // The writes between two fsyncs: all of them when buffered (one fsync, at the end).
    let group = if a.fsync_every == 0 { n } else { a.fsync_every };
    let mut fsync_ns: Vec<u64> = Vec::new();
    if usize::try_from(n.div_ceil(group)).ok().and_then(|k| fsync_ns.try_reserve_exact(k).ok()).is_none() {
        crate::bail!("--amount {}: cannot hold that many fsync samples in memory", a.amount);
    }
    // Each form draws its own offsets, so forms run one after another over a kept file do not
    // retrace each other's blocks.
    let seed = ctx.seed ^ a.fsync_every.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut ow = Overwriter::new(open_rw(path, 0)?, file_size, bs, Pattern::Random, seed, buf);
    let limit = match a.dirty_bytes {
        Some(b) => Some(DirtyLimit::set(b)?),
        None => None,
    };
    out.dirty_bytes = limit.as_ref().and(a.dirty_bytes);
    let pb = Progress::new(ctx.progress, n * bs, &experiment_name(a));
    let before = ctx.wa.snapshot();
    let start = Instant::now();
    let mut done = 0u64;
    let mut err = None;
    let mut stopped_by = "amount";
    'run: while out.writes < n {
        let k = group.min(n - out.writes);
        for _ in 0..k {
            if let Err(e) = ow.write_one() {
                err = Some(format!("write {} of {n}: {e}", out.writes + 1));
                break 'run;
            }
            out.writes += 1;
            done += bs;
            if out.writes % 256 == 0 {
                pb.inc(256 * bs);
            }
            if a.max_duration.is_some_and(|m| start.elapsed() >= m) {
                stopped_by = "duration";
                break;
            }
        }
        let t = Instant::now();
        if let Err(e) = ow.file.sync_all() {
            err = Some(format!("fsync {}: {e}", out.fsyncs + 1));
            break;
        }
        fsync_ns.push(t.elapsed().as_nanos().min(u64::MAX as u128) as u64);
        out.fsyncs += 1;
        if stopped_by == "duration" {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    pb.finish();
    out.wa = ctx.wa.sample(&before, &ctx.wa.snapshot(), done);
    drop(limit);
    out.final_fsync_s = fsync_ns.last().map(|&ns| ns as f64 / 1e9);
    out.fsync_latency = summarize_ns(&mut fsync_ns);
    out.counter_per_fsync = out.wa.as_ref().and_then(|w| w.counters_delta.get(&ctx.wa.counter_key)).filter(|_| out.fsyncs > 0).map(|d| d / out.fsyncs as f64);
    out.total = match err {
        None => Phase::ok(done, secs),
        Some(m) => {
            stopped_by = "error";
            ctx.event(format!("{}: {m}", experiment_name(a)));
            Phase::failed("error", done, secs, m)
        }
    };
    out.stopped_by = stopped_by.into();
    if stopped_by == "duration" {
        ctx.event(format!("stopped by --max-duration after {} of {} writes", out.writes, n));
    }
    say!(
        "{}: {} writes of {} in a {} file, {} fsyncs{}: {} MB/s{}",
        experiment_name(a),
        out.writes,
        fmt_size(bs),
        fmt_size(file_size),
        out.fsyncs,
        out.dirty_bytes.map(|b| format!(", vm.dirty_bytes {}", fmt_size(b))).unwrap_or_default(),
        out.total.mb_s.map(|v| format!("{v:.3}")).unwrap_or_else(|| out.total.status.clone()),
        out.final_fsync_s.map(|s| format!(", last fsync {s:.3} s")).unwrap_or_default()
    );
    Ok(out)
}
