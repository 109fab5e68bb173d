// SPDX-License-Identifier: GPL-2.0

//! A regular file's extents: `fallocate` (the default mode and `FALLOC_FL_KEEP_SIZE` as a
//! write-back budget hold, `FALLOC_FL_PUNCH_HOLE`, `FALLOC_FL_ZERO_RANGE`) and `fiemap`.
//!
//! ferrofs is log-structured: a block is written somewhere new every time, so space cannot be
//! set aside on the flash for a range. What `fallocate` allocates is the write-back budget
//! (docs/kernel.md "Write-back"): the cost of writing every block of the range once, plus one
//! inode record per write-back run, reserved from the shared budget and held by the inode
//! (`FerroInode::prealloc`); the file's next dirtied folios draw from that hold before the
//! shared pool. So once `fallocate` has succeeded, writing the range (once) cannot fail with
//! ENOSPC however full the filesystem gets meanwhile. The hold lives in memory with the inode:
//! it is given back when the inode is evicted (at the latest at unmount) and is not kept across
//! a remount; the size a non-`KEEP_SIZE` call sets is durable like a truncate's.

use core::sync::atomic::Ordering;
use kernel::bindings;
use kernel::error::from_result;
use kernel::ffi::{c_int, c_long};
use kernel::prelude::*;

use crate::engine::format::BLOCK_SIZE;
use crate::engine::writeback::{BUDGET_PER_BLOCK, BUDGET_PER_INODE};
use crate::kfs::{kerr, Fiemap, File, Inode, FIEMAP_EXTENT_LAST, FIEMAP_EXTENT_UNKNOWN};

/// uapi `linux/falloc.h`.
const FALLOC_FL_KEEP_SIZE: c_int = 0x01;
const FALLOC_FL_PUNCH_HOLE: c_int = 0x02;
const FALLOC_FL_ZERO_RANGE: c_int = 0x10;

const BS: u64 = BLOCK_SIZE as u64;
/// Folios one write-back run takes at most (`writepages`): each run writes one inode record.
const RUN_BLOCKS: u64 = crate::data::MAX_RUN as u64;

/// `file_operations::fallocate`. Supported: the default mode, `KEEP_SIZE`, `PUNCH_HOLE |
/// KEEP_SIZE`, `ZERO_RANGE` (with or without `KEEP_SIZE`); anything else (`COLLAPSE_RANGE`,
/// `INSERT_RANGE`, `UNSHARE_RANGE`) is EOPNOTSUPP. The VFS has checked the flag combinations,
/// the range (EINVAL, EFBIG), the file mode (EBADF), immutable and append-only files (EPERM).
///
/// # Safety
///
/// Called by the VFS only, with an open ferrofs regular file.
pub(crate) unsafe extern "C" fn fallocate(file: *mut bindings::file, mode: c_int, offset: bindings::loff_t, len: bindings::loff_t) -> c_long {
    // SAFETY: VFS fallocate contract: `file` is an open ferrofs regular file, for the call.
    let file = unsafe { File::from_raw(file) };
    from_result(|| {
        falloc(file, mode, offset, len)?;
        Ok(0)
    })
}

fn falloc(file: &File, mode: c_int, off: i64, len: i64) -> Result {
    if mode & !(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 {
        return Err(Error::from_errno(-(bindings::EOPNOTSUPP as c_int)));
    }
    let end = off.checked_add(len).ok_or(EFBIG)?;
    if off < 0 || len <= 0 {
        return Err(EINVAL);
    }
    let inode = file.inode();
    let _lock = inode.lock();
    let keep = mode & FALLOC_FL_KEEP_SIZE != 0;
    if !keep {
        inode.newsize_ok(end)?;
    }
    // setuid bits and times, as a write
    file.modified()?;
    if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 {
        zero_range(file, inode, off, end)?;
    }
    if mode & FALLOC_FL_PUNCH_HOLE == 0 {
        hold(inode, off, end)?;
        let old = inode.size();
        if !keep && end > old {
            crate::inode::set_size(inode, old, end)?;
        }
    }
    Ok(())
}

/// Make `[off, end)` read as zeros: the dirty data of the range reaches the engine, the engine
/// drops the blocks the range covers and rewrites the partial ones (`Engine::punch_hole`, one
/// atomic group), then the page cache follows (its folios inside the range dropped, the parts
/// of the edge folios inside it zeroed). The engine goes first so that a failure leaves the
/// cache as the flash is. The caller holds the inode lock; the invalidate lock is taken before
/// the write-back, so no `page_mkwrite` dirties a folio of the range between the write-back
/// and the cut (a folio admitted as an overwrite in place must not stay dirty over a block
/// the cut rewrites: `data::in_place`).
fn zero_range(file: &File, inode: &Inode, off: i64, end: i64) -> Result {
    let _invalidate = inode.invalidate_lock();
    file.write_and_wait_range(off, end - 1)?;
    let info = inode.info();
    info.lock().punch_hole(inode.ino(), off as u64, (end - off) as u64, inode.now()).map_err(kerr)?;
    inode.truncate_pagecache_range(off, end - 1);
    Ok(())
}

/// Hold the write-back budget of writing blocks `[off, end)` once (see the module comment),
/// after the slow path (write-back, checkpoint) if the pool is short; ENOSPC when it stays
/// short. The inode's hold never exceeds the cost of every block up to the end of the range,
/// so calling again over the same range does not hold more.
fn hold(inode: &Inode, off: i64, end: i64) -> Result {
    let cost = |blocks: u64| blocks.saturating_mul(BUDGET_PER_BLOCK).saturating_add(blocks.div_ceil(RUN_BLOCKS).saturating_mul(BUDGET_PER_INODE));
    let last = (end as u64).max(inode.size() as u64).div_ceil(BS);
    let cap = cost(last);
    let held = &inode.ferro().prealloc;
    let want = cost((end as u64).div_ceil(BS) - off as u64 / BS).min(cap.saturating_sub(held.load(Ordering::Acquire)));
    if want == 0 {
        return Ok(());
    }
    let budget = &inode.info().budget;
    if !budget.try_reserve(want) {
        crate::data::make_free_space(inode, false);
        if !budget.try_reserve(want) {
            return Err(ENOSPC);
        }
    }
    held.fetch_add(want, Ordering::AcqRel);
    Ok(())
}

/// `inode_operations::fiemap` of a regular file: the runs of blocks that have data records
/// (from the engine's index, as SEEK_DATA/SEEK_HOLE), in whole 4 KiB blocks, each flagged
/// `FIEMAP_EXTENT_UNKNOWN` with physical address 0: every block is a separate record that
/// write-back and GC move, so no stable physical extent exists. Dirty page-cache data is written
/// back first whether or not the caller asks for `FIEMAP_FLAG_SYNC`, so data written and not yet
/// synced is listed as the extent it is and never as a hole (no extent needs
/// `FIEMAP_EXTENT_DELALLOC`); no other flag is supported (EBADR).
///
/// # Safety
///
/// Called by the VFS only, with a live ferrofs regular file and the caller's extent list.
pub(crate) unsafe extern "C" fn fiemap(inode: *mut bindings::inode, fi: *mut bindings::fiemap_extent_info, start: u64, len: u64) -> c_int {
    // SAFETY: VFS fiemap contract: a live ferrofs regular file and the ioctl's extent list,
    // for the call.
    let (inode, fi) = unsafe { (Inode::from_raw(inode), Fiemap::from_raw(fi)) };
    from_result(|| {
        map_extents(inode, fi, start, len)?;
        Ok(0)
    })
}

fn map_extents(inode: &Inode, fi: &Fiemap, start: u64, len: u64) -> Result {
    let len = fi.prep(inode, start, len)?;
    // the engine's index knows only written-back blocks: write the dirty ones first (a no-op
    // after `prep` honoured FIEMAP_FLAG_SYNC)
    let r = inode.write_and_wait();
    if r != 0 {
        return Err(Error::from_errno(r));
    }
    let end = start.saturating_add(len);
    let (ino, info) = (inode.ino(), inode.info());
    let mut pos = start;
    while pos < end {
        // one extent and whether another follows, in one lock hold; filled after it (the
        // fill copies to user memory)
        let (data, hole, more) = {
            let mut fs = info.lock();
            let Some(data) = fs.seek_data(ino, pos).map_err(kerr)? else {
                break;
            };
            let hole = fs.seek_hole(ino, data).map_err(kerr)?.div_ceil(BS).saturating_mul(BS);
            (data, hole, fs.seek_data(ino, hole).map_err(kerr)?.is_some())
        };
        if data >= end {
            break;
        }
        let flags = FIEMAP_EXTENT_UNKNOWN | if more { 0 } else { FIEMAP_EXTENT_LAST };
        if fi.fill(data, 0, hole - data, flags)? {
            break;
        }
        pos = hole;
    }
    Ok(())
}
