//! `dirty`: overwrite throughput by block size, clean versus filled-and-fragmented.
//!
//! Method (after the 2002 JFFS2 dirty-filesystem benchmark): a work file is created on the clean
//! filesystem; for each block size an untimed warm-up overwrite pass is followed by a timed overwrite
//! of a fixed byte count (the same for every data point, final fsync included). Then the filesystem
//! is filled with small files to each level (statvfs), a random part of them deleted and the fill
//! topped up again, and the same measurements repeat.

use std::path::Path;

use crate::buf::{DataBuf, Progress};
use crate::cli::DirtyArgs;
use crate::error::{Context, Result};
use crate::exp::fill::Filler;
use crate::exp::{cleanup, open_rw, overwrite_n, work_dir, write_file, Ctx, Overwriter};
use crate::record::{DirtyPoint, DirtyResults, Phase};
use crate::units::fmt_size;

pub fn run(ctx: &mut Ctx, a: &DirtyArgs) -> Result<DirtyResults> {
    let w = work_dir(&a.dir, ".ferrofs-bench-dirty")?;
    let r = run_in(ctx, a, &w);
    if !a.keep {
        cleanup(ctx, &w);
    }
    r
}

fn run_in(ctx: &mut Ctx, a: &DirtyArgs, w: &Path) -> Result<DirtyResults> {
    let max_bs = a.block_sizes.iter().copied().max().unwrap_or(4096);
    let work_size = a.work_size.max(max_bs);
    if work_size != a.work_size {
        ctx.event(format!("work file enlarged to the largest block size, {}", fmt_size(work_size)));
    }
    let warmup = a.warmup.unwrap_or(work_size);
    let mut buf = DataBuf::new(max_bs.max(1 << 20) as usize, ctx.seed);
    let work = w.join("work.dat");
    write_file(&work, work_size, 1 << 20, &mut buf, 0)?;
    let fill_root = w.join("fill");
    std::fs::create_dir(&fill_root).with_ctx(|| format!("creating {}", fill_root.display()))?;
    let mut filler = Filler::new(fill_root, &a.fill_args, ctx.seed);

    let mut levels: Vec<f64> = a.fill.iter().copied().filter(|&f| f > 0.0).collect();
    levels.sort_by(|x, y| x.total_cmp(y));
    levels.dedup();
    levels.insert(0, 0.0);

    let mut out = DirtyResults { work_file_bytes: work_size, overwrite_bytes: a.amount, warmup_bytes: warmup, fills: Vec::new(), points: Vec::new() };
    for level in levels {
        if level > 0.0 {
            let rep = filler.fill_and_fragment(ctx, level)?;
            say!(
                "fill {:.0} %: reached {}, {} files written, {} deleted{}{}",
                level * 100.0,
                rep.achieved_fraction.map(|f| format!("{:.1} %", f * 100.0)).unwrap_or_else(|| "?".into()),
                rep.files_written,
                rep.files_deleted,
                if rep.enospc { ", ENOSPC" } else { "" },
                if rep.capped { ", capped" } else { "" }
            );
            out.fills.push(rep);
        }
        for &bs in &a.block_sizes {
            let file = open_rw(&work, 0)?;
            let mut ow = Overwriter::new(file, work_size, bs, a.pattern, ctx.seed ^ bs, buf);
            let silent = Progress::new(false, 0, "");
            let warm_n = warmup.div_ceil(bs).max(1);
            let (_, _, werr) = overwrite_n(&mut ow, warm_n, true, &silent);
            let n = a.amount.div_ceil(bs).max(1);
            let state = if level > 0.0 { "dirty" } else { "clean" };
            let (phase, wa) = if let Some(e) = werr {
                let m = format!("warm-up overwrite: {e}");
                ctx.event(format!("dirty {state} {:.0} % {}: {m}", level * 100.0, fmt_size(bs)));
                (Phase::failed("error", 0, 0.0, m), None)
            } else {
                let before = ctx.wa.snapshot();
                let pb = Progress::new(ctx.progress, n * bs, &format!("{state} {:.0}% {}", level * 100.0, fmt_size(bs)));
                let (done, secs, err) = overwrite_n(&mut ow, n, true, &pb);
                pb.finish();
                let wa = ctx.wa.sample(&before, &ctx.wa.snapshot(), done);
                let phase = match err {
                    None => Phase::ok(done, secs),
                    Some(e) => {
                        let m = format!("overwrite: {e}");
                        ctx.event(format!("dirty {state} {:.0} % {}: {m}", level * 100.0, fmt_size(bs)));
                        Phase::failed("error", done, secs, m)
                    }
                };
                (phase, wa)
            };
            buf = ow.into_buf();
            out.points.push(DirtyPoint { fill: level, state: state.into(), block_size: bs, overwrite: phase, wa });
            print_point(out.points.last());
        }
    }
    Ok(out)
}

fn print_point(p: Option<&DirtyPoint>) {
    if let Some(p) = p {
        let v = p.overwrite.mb_s.map(|v| format!("{v:9.2} MB/s")).unwrap_or_else(|| p.overwrite.status.clone());
        say!("{:>5} fill {:>4.0} % {:>6}: {}", p.state, p.fill * 100.0, fmt_size(p.block_size), v);
    }
}
