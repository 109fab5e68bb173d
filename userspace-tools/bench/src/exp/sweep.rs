//! `sweep`: sequential write (with final fsync) then read throughput per block size.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Instant;

use crate::buf::{DataBuf, Progress};
use crate::cli::{IoMode, SweepArgs};
use crate::error::Result;
use crate::exp::Ctx;
use crate::record::{Phase, SweepPoint, SweepResults};
use crate::units::fmt_size;

/// Bytes of one data point: `total` rounded up to a whole number of blocks.
pub fn point_bytes(total: u64, bs: u64) -> u64 {
    total.div_ceil(bs).max(1).saturating_mul(bs)
}

fn is_einval(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

/// Measures a mounted filesystem directory.
pub fn run_fs(ctx: &mut Ctx, a: &SweepArgs, dir: &Path) -> Result<SweepResults> {
    crate::exp::check_dir(dir)?;
    let max_bs = a.block_sizes.iter().copied().max().unwrap_or(4096);
    let mut buf = DataBuf::new(max_bs as usize, ctx.seed);
    let path = dir.join(".ferrofs-bench-sweep.dat");
    let mut points = Vec::new();
    for &bs in &a.block_sizes {
        for &mode in &a.modes {
            let p = one_point(ctx, a, &path, bs, mode, &mut buf);
            let _ = std::fs::remove_file(&path);
            crate::sys::sync_all();
            print_point(&p);
            points.push(p);
        }
    }
    Ok(SweepResults { points, raw_device: None })
}

fn mode_name(m: IoMode) -> &'static str {
    match m {
        IoMode::Buffered => "buffered",
        IoMode::Direct => "direct",
    }
}

pub fn print_point(p: &SweepPoint) {
    let f = |ph: &Phase| match ph.mb_s {
        Some(v) => format!("{v:9.2} MB/s"),
        None => format!("{:>14}", ph.status),
    };
    say!("{:>6} {:<9} write {}  read {}", fmt_size(p.block_size), p.mode, f(&p.write), f(&p.read));
}

fn one_point(ctx: &mut Ctx, a: &SweepArgs, path: &Path, bs: u64, mode: IoMode, buf: &mut DataBuf) -> SweepPoint {
    let total = point_bytes(a.total, bs);
    let flags = if mode == IoMode::Direct { libc::O_DIRECT } else { 0 };
    let mut point = SweepPoint {
        block_size: bs,
        mode: mode_name(mode).into(),
        write: Phase::skipped(""),
        read: Phase::skipped("write phase failed"),
        cache_drop: None,
        erase_seconds: None,
        wa: None,
    };
    let before = ctx.wa.snapshot();
    let pb = Progress::new(ctx.progress, total, &format!("write {} {}", fmt_size(bs), mode_name(mode)));
    let t = Instant::now();
    let wr = (|| -> std::result::Result<(), (std::io::Error, u64, &'static str)> {
        let mut f = OpenOptions::new().write(true).create(true).truncate(true).custom_flags(flags).open(path).map_err(|e| (e, 0, "open"))?;
        let mut done = 0;
        while done < total {
            f.write_all(buf.next_block(bs as usize)).map_err(|e| (e, done, "write"))?;
            done += bs;
            pb.inc(bs);
        }
        f.sync_all().map_err(|e| (e, done, "fsync"))?;
        Ok(())
    })();
    let secs = t.elapsed().as_secs_f64();
    pb.finish();
    match wr {
        Ok(()) => point.write = Phase::ok(total, secs),
        Err((e, 0, what)) if mode == IoMode::Direct && is_einval(&e) => {
            point.write = Phase::failed("unsupported", 0, 0.0, format!("O_DIRECT {what}: {e}"));
            point.read = Phase::failed("unsupported", 0, 0.0, "O_DIRECT not supported");
            return point;
        }
        Err((e, done, what)) => {
            let msg = format!("{what} {}: {e}", path.display());
            ctx.event(format!("sweep {} {}: {msg}", fmt_size(bs), mode_name(mode)));
            point.write = Phase::failed("error", done, secs, msg);
            return point;
        }
    }
    point.wa = ctx.wa.sample(&before, &ctx.wa.snapshot(), total);

    // Empty the caches so the read comes from the medium (O_DIRECT bypasses them anyway).
    if mode == IoMode::Buffered {
        match crate::sys::drop_caches(a.remount_cmd.as_deref(), !a.common.no_drop_caches) {
            Ok(how) => point.cache_drop = Some(how),
            Err(e) => {
                ctx.event(format!("dropping caches: {e}"));
                point.cache_drop = Some(format!("failed: {e}"));
            }
        }
    }

    let pb = Progress::new(ctx.progress, total, &format!("read {} {}", fmt_size(bs), mode_name(mode)));
    let t = Instant::now();
    let rd = (|| -> std::io::Result<u64> {
        let mut f = OpenOptions::new().read(true).custom_flags(flags).open(path)?;
        let mut done = 0;
        let b = &mut buf.as_mut_slice()[..bs as usize];
        while done < total {
            let n = read_full(&mut f, b)?;
            if n == 0 {
                break;
            }
            done += n as u64;
            pb.inc(n as u64);
        }
        Ok(done)
    })();
    let secs = t.elapsed().as_secs_f64();
    pb.finish();
    point.read = match rd {
        Ok(n) if n == total => Phase::ok(n, secs),
        Ok(n) => Phase::failed("error", n, secs, format!("short read: {n} of {total} bytes")),
        Err(e) if mode == IoMode::Direct && is_einval(&e) => Phase::failed("unsupported", 0, 0.0, format!("O_DIRECT read: {e}")),
        Err(e) => Phase::failed("error", 0, secs, format!("read {}: {e}", path.display())),
    };
    point
}

/// Reads until `b` is full or end of file; returns the bytes read.
pub fn read_full(f: &mut File, b: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < b.len() {
        match f.read(&mut b[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(point_bytes(64 << 20, 4096), 64 << 20);
        assert_eq!(point_bytes(1 << 20, 16 << 20), 16 << 20);
        assert_eq!(point_bytes(10_000, 4096), 12_288);
    }
}
