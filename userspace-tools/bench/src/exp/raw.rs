//! `sweep --raw`: the physical limit of an MTD char device or a block device.
//!
//! MTD: the region's erase blocks are erased with MEMERASE (timed separately), then written
//! sequentially page-aligned, then read back. Block device: O_DIRECT pwrite/pread (buffered with
//! fsync if the device refuses O_DIRECT).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::Instant;

use crate::buf::{DataBuf, Progress};
use crate::cli::SweepArgs;
use crate::error::{Context, Result};
use crate::exp::sweep::{point_bytes, print_point};
use crate::exp::Ctx;
use crate::record::{Phase, RawDevice, SweepPoint, SweepResults};
use crate::units::fmt_size;

const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((ty as u32) << 8) | nr as u32
}
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// `struct mtd_info_user` from `<mtd/mtd-abi.h>`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct MtdInfoUser {
    type_: u8,
    flags: u32,
    size: u32,
    erasesize: u32,
    writesize: u32,
    oobsize: u32,
    padding: u64,
}

/// `struct erase_info_user`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct EraseInfoUser {
    start: u32,
    length: u32,
}

const MEMGETINFO: u32 = ioc(IOC_READ, b'M', 1, std::mem::size_of::<MtdInfoUser>());
const MEMERASE: u32 = ioc(IOC_WRITE, b'M', 2, std::mem::size_of::<EraseInfoUser>());
const MEMGETBADBLOCK: u32 = ioc(IOC_WRITE, b'M', 11, std::mem::size_of::<i64>());
const BLKGETSIZE64: u32 = ioc(IOC_READ, 0x12, 114, std::mem::size_of::<usize>());

/// # Safety
/// `req` must read and/or write at most one `T` through its argument.
unsafe fn ioctl_ptr<T>(f: &File, req: u32, arg: &mut T) -> io::Result<i32> {
    // SAFETY: `arg` is a live, aligned, writable `T`; the caller guarantees `req` accesses only it.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), req as _, arg as *mut T) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn mtd_info(f: &File) -> io::Result<MtdInfoUser> {
    let mut i = MtdInfoUser::default();
    // SAFETY: MEMGETINFO writes one `struct mtd_info_user`.
    unsafe { ioctl_ptr(f, MEMGETINFO, &mut i) }?;
    Ok(i)
}

fn mtd_erase(f: &File, start: u32, length: u32) -> io::Result<()> {
    let mut e = EraseInfoUser { start, length };
    // SAFETY: MEMERASE reads one `struct erase_info_user`.
    unsafe { ioctl_ptr(f, MEMERASE, &mut e) }.map(|_| ())
}

fn mtd_is_bad(f: &File, ofs: u64) -> io::Result<bool> {
    let mut o = ofs as i64;
    // SAFETY: MEMGETBADBLOCK reads one `loff_t`.
    unsafe { ioctl_ptr(f, MEMGETBADBLOCK, &mut o) }.map(|r| r > 0)
}

fn blk_size(f: &File) -> io::Result<u64> {
    let mut s: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one `u64`.
    unsafe { ioctl_ptr(f, BLKGETSIZE64, &mut s) }?;
    Ok(s)
}

pub fn run(ctx: &mut Ctx, a: &SweepArgs, dev: &Path) -> Result<SweepResults> {
    if !a.destructive {
        crate::bail!("--raw overwrites {}; add --destructive to confirm", dev.display());
    }
    let md = std::fs::metadata(dev).with_ctx(|| format!("raw device {}", dev.display()))?;
    let ft = md.file_type();
    if ft.is_char_device() {
        run_mtd(ctx, a, dev)
    } else if ft.is_block_device() {
        run_block(ctx, a, dev)
    } else {
        crate::bail!("{} is neither an MTD character device nor a block device", dev.display())
    }
}

fn run_mtd(ctx: &mut Ctx, a: &SweepArgs, dev: &Path) -> Result<SweepResults> {
    let f = OpenOptions::new().read(true).write(true).open(dev).with_ctx(|| format!("opening {}", dev.display()))?;
    let info = mtd_info(&f).with_ctx(|| format!("MEMGETINFO on {} (not an MTD device?)", dev.display()))?;
    let (eb, page, size) = (info.erasesize as u64, info.writesize.max(1) as u64, info.size as u64);
    if eb == 0 {
        crate::bail!("{} reports erase size 0", dev.display());
    }
    let offset = a.raw_offset.div_ceil(eb) * eb;
    if offset >= size {
        crate::bail!("--raw-offset {} is beyond the device ({} bytes)", a.raw_offset, size);
    }
    let max_bs = a.block_sizes.iter().copied().max().unwrap_or(eb);
    let want = point_bytes(a.total, max_bs).div_ceil(eb) * eb;
    let region = want.min((size - offset) / eb * eb);
    if region < want {
        ctx.event(format!("raw region limited to {} bytes by the device size", region));
    }
    for b in (offset..offset + region).step_by(eb as usize) {
        if mtd_is_bad(&f, b).unwrap_or(false) {
            crate::bail!("bad erase block at offset {b:#x} in the region; choose another --raw-offset");
        }
    }
    let mut buf = DataBuf::new(max_bs as usize, ctx.seed);
    let mut points = Vec::new();
    for &bs in &a.block_sizes {
        let mut p = SweepPoint {
            block_size: bs,
            mode: "raw-mtd".into(),
            write: Phase::skipped(""),
            read: Phase::skipped("write phase failed"),
            cache_drop: None,
            erase_seconds: None,
            wa: None,
        };
        if bs % page != 0 {
            p.write = Phase::failed("unsupported", 0, 0.0, format!("block size not a multiple of the page size {page}"));
            p.read = p.write.clone();
            print_point(&p);
            points.push(p);
            continue;
        }
        // Whole blocks that fit in the region; the last may be partial (still page-aligned).
        let total = region;
        let t = Instant::now();
        let mut erase_err = None;
        for b in (offset..offset + total).step_by(eb as usize) {
            if let Err(e) = mtd_erase(&f, b as u32, eb as u32) {
                erase_err = Some(format!("MEMERASE at {b:#x}: {e}"));
                break;
            }
        }
        p.erase_seconds = Some(t.elapsed().as_secs_f64());
        if let Some(e) = erase_err {
            ctx.event(e.clone());
            p.write = Phase::failed("error", 0, 0.0, e);
            print_point(&p);
            points.push(p);
            continue;
        }
        let before = ctx.wa.snapshot();
        p.write = timed_io(ctx, &f, offset, total, bs, &mut buf, Io::WriteSync, &format!("write {}", fmt_size(bs)));
        p.wa = ctx.wa.sample(&before, &ctx.wa.snapshot(), total);
        if p.write.status == "ok" {
            p.read = timed_io(ctx, &f, offset, total, bs, &mut buf, Io::Read, &format!("read {}", fmt_size(bs)));
        }
        print_point(&p);
        points.push(p);
    }
    Ok(SweepResults {
        points,
        raw_device: Some(RawDevice { kind: "mtd".into(), size, erase_size: Some(info.erasesize), write_size: Some(info.writesize), offset, region_bytes: region }),
    })
}

fn run_block(ctx: &mut Ctx, a: &SweepArgs, dev: &Path) -> Result<SweepResults> {
    let (f, direct) = match OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(dev) {
        Ok(f) => (f, true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            ctx.event("block device refuses O_DIRECT; using buffered I/O with fsync and cache drop");
            (OpenOptions::new().read(true).write(true).open(dev).with_ctx(|| format!("opening {}", dev.display()))?, false)
        }
        Err(e) => return Err(e).with_ctx(|| format!("opening {}", dev.display())),
    };
    let size = blk_size(&f).with_ctx(|| format!("BLKGETSIZE64 on {}", dev.display()))?;
    let offset = a.raw_offset.div_ceil(4096) * 4096;
    if offset >= size {
        crate::bail!("--raw-offset {} is beyond the device ({} bytes)", a.raw_offset, size);
    }
    let max_bs = a.block_sizes.iter().copied().max().unwrap_or(4096);
    let mut buf = DataBuf::new(max_bs as usize, ctx.seed);
    let mut points = Vec::new();
    let mut region_max = 0;
    for &bs in &a.block_sizes {
        let want = point_bytes(a.total, bs);
        let total = want.min((size - offset) / bs * bs);
        region_max = region_max.max(total);
        let mut p = SweepPoint {
            block_size: bs,
            mode: "raw-block".into(),
            write: Phase::skipped(""),
            read: Phase::skipped("write phase failed"),
            cache_drop: None,
            erase_seconds: None,
            wa: None,
        };
        if total == 0 || (direct && bs % 512 != 0) {
            p.write = Phase::failed("unsupported", 0, 0.0, "block size larger than the device or not sector-aligned");
            p.read = p.write.clone();
        } else {
            let before = ctx.wa.snapshot();
            p.write = timed_io(ctx, &f, offset, total, bs, &mut buf, Io::WriteFsync, &format!("write {}", fmt_size(bs)));
            p.wa = ctx.wa.sample(&before, &ctx.wa.snapshot(), total);
            if p.write.status == "ok" {
                if !direct {
                    p.cache_drop = Some(crate::sys::drop_caches(a.remount_cmd.as_deref(), !a.common.no_drop_caches).unwrap_or_else(|e| format!("failed: {e}")));
                }
                p.read = timed_io(ctx, &f, offset, total, bs, &mut buf, Io::Read, &format!("read {}", fmt_size(bs)));
            }
        }
        print_point(&p);
        points.push(p);
    }
    Ok(SweepResults {
        points,
        raw_device: Some(RawDevice { kind: "block".into(), size, erase_size: None, write_size: None, offset, region_bytes: region_max }),
    })
}

/// Which raw I/O `timed_io` does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Io {
    Read,
    /// Writes ending with fsync inside the timing (block devices).
    WriteFsync,
    /// Writes without fsync: the MTD char device writes synchronously and has no fsync (EINVAL).
    WriteSync,
}

/// Sequential positioned I/O of `total` bytes from `offset` in `bs` pieces (last one may be short).
#[allow(clippy::too_many_arguments)]
fn timed_io(ctx: &mut Ctx, f: &File, offset: u64, total: u64, bs: u64, buf: &mut DataBuf, io: Io, msg: &str) -> Phase {
    let write = io != Io::Read;
    let mut what = if write { "write" } else { "read" };
    let pb = Progress::new(ctx.progress, total, msg);
    let t = Instant::now();
    let mut done = 0u64;
    let res = (|| -> io::Result<()> {
        while done < total {
            let n = (total - done).min(bs) as usize;
            if write {
                f.write_all_at(buf.next_block(n), offset + done)?;
            } else {
                f.read_exact_at(&mut buf.as_mut_slice()[..n], offset + done)?;
            }
            done += n as u64;
            pb.inc(n as u64);
        }
        if io == Io::WriteFsync {
            what = "fsync";
            f.sync_all()?;
        }
        Ok(())
    })();
    let secs = t.elapsed().as_secs_f64();
    pb.finish();
    match res {
        Ok(()) => Phase::ok(total, secs),
        Err(e) => {
            let m = format!("{what} at offset {}: {e}", offset + done);
            ctx.event(m.clone());
            Phase::failed("error", done, secs, m)
        }
    }
}
