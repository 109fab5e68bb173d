//! `smallfiles` and `meta`: operation rates of small-file and metadata workloads.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::buf::{DataBuf, Progress};
use crate::cli::{MetaArgs, SmallfilesArgs};
use crate::error::Result;
use crate::exp::{cleanup, work_dir, Ctx};
use crate::record::{OpRate, OpsResults};

/// Times `n` calls of `op(i)`; stops at the first error and reports it in the rate.
fn timed(ctx: &mut Ctx, name: &str, n: u64, mut op: impl FnMut(u64) -> std::io::Result<()>) -> OpRate {
    let pb = Progress::new(ctx.progress, n, name);
    let t = Instant::now();
    let mut done = 0;
    let mut error = None;
    for i in 0..n {
        if let Err(e) = op(i) {
            error = Some(format!("{name} #{i}: {e}"));
            break;
        }
        done += 1;
        pb.inc(1);
    }
    let secs = t.elapsed().as_secs_f64();
    pb.finish();
    if let Some(e) = &error {
        ctx.event(e.clone());
    }
    let r = OpRate { op: name.into(), count: done, seconds: secs, ops_per_s: if secs > 0.0 { done as f64 / secs } else { 0.0 }, error };
    say!("{:<20} {:>8} ops {:>10.1} ops/s{}", r.op, r.count, r.ops_per_s, r.error.as_deref().map(|e| format!("  ({e})")).unwrap_or_default());
    r
}

fn sub_dirs(root: &Path, count: u64, per_dir: u64) -> Vec<PathBuf> {
    (0..count.div_ceil(per_dir.max(1)).max(1)).map(|d| root.join(format!("d{d}"))).collect()
}

pub fn run_smallfiles(ctx: &mut Ctx, a: &SmallfilesArgs) -> Result<OpsResults> {
    let w = work_dir(&a.dir, ".ferrofs-bench-smallfiles")?;
    let per = a.per_dir.max(1);
    let dirs = sub_dirs(&w, a.count, per);
    let mut ops = Vec::new();
    let mk = timed(ctx, "mkdir", dirs.len() as u64, |i| std::fs::create_dir(&dirs[i as usize]));
    let ok = mk.error.is_none();
    ops.push(mk);
    let mut wa = None;
    if ok {
        let mut buf = DataBuf::new(a.size.max(1) as usize, ctx.seed);
        let size = a.size as usize;
        let fsync = !a.no_fsync;
        let path = |i: u64| dirs[(i / per) as usize].join(format!("f{i}"));
        let before = ctx.wa.snapshot();
        let name = if fsync { "create_write_fsync" } else { "create_write" };
        let cw = timed(ctx, name, a.count, |i| {
            let mut f = OpenOptions::new().write(true).create_new(true).open(path(i))?;
            if size > 0 {
                f.write_all(buf.next_block(size))?;
            }
            if fsync {
                f.sync_all()?;
            }
            Ok(())
        });
        wa = ctx.wa.sample(&before, &ctx.wa.snapshot(), cw.count * a.size);
        let created = cw.count;
        ops.push(cw);
        ops.push(timed(ctx, "unlink", created, |i| std::fs::remove_file(path(i))));
    }
    cleanup(ctx, &w);
    Ok(OpsResults { ops, wa })
}

pub fn run_meta(ctx: &mut Ctx, a: &MetaArgs) -> Result<OpsResults> {
    let w = work_dir(&a.dir, ".ferrofs-bench-meta")?;
    let dirs: Vec<PathBuf> = (0..a.dirs.max(1)).map(|d| w.join(format!("d{d}"))).collect();
    let fpd = a.files_per_dir;
    let n = dirs.len() as u64 * fpd;
    let file = |i: u64, suffix: &str| dirs[(i / fpd.max(1)) as usize].join(format!("f{}{suffix}", i % fpd.max(1)));
    let mut ops = Vec::new();
    // Each phase runs only if the previous one completed (it needs its objects).
    let phases: [&str; 7] = ["mkdir", "create", "stat", "readdir", "rename", "unlink", "rmdir"];
    for name in phases {
        let r = match name {
            "mkdir" => timed(ctx, name, dirs.len() as u64, |i| std::fs::create_dir(&dirs[i as usize])),
            "create" => timed(ctx, name, n, |i| OpenOptions::new().write(true).create_new(true).open(file(i, "")).map(drop)),
            "stat" => timed(ctx, name, n * a.stat_rounds.max(1), |i| std::fs::metadata(file(i % n.max(1), "")).map(drop)),
            "readdir" => {
                let mut entries = 0u64;
                let mut r = timed(ctx, name, dirs.len() as u64, |i| {
                    for e in std::fs::read_dir(&dirs[i as usize])? {
                        e?;
                        entries += 1;
                    }
                    Ok(())
                });
                // Report entries per second: one readdir call returns many.
                r.op = "readdir_entries".into();
                r.ops_per_s = if r.seconds > 0.0 { entries as f64 / r.seconds } else { 0.0 };
                r.count = entries;
                r
            }
            "rename" => timed(ctx, name, n, |i| std::fs::rename(file(i, ""), file(i, ".r"))),
            "unlink" => timed(ctx, name, n, |i| std::fs::remove_file(file(i, ".r"))),
            _ => timed(ctx, name, dirs.len() as u64, |i| std::fs::remove_dir(&dirs[i as usize])),
        };
        let failed = r.error.is_some();
        ops.push(r);
        if failed {
            break;
        }
    }
    cleanup(ctx, &w);
    Ok(OpsResults { ops, wa: None })
}
