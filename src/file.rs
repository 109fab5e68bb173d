// SPDX-License-Identifier: GPL-2.0

//! Regular files: llseek (SEEK_DATA/SEEK_HOLE from the engine's index) and fsync.

use kernel::bindings;
use kernel::error::{from_result, to_result};
use kernel::ffi::c_int;
use kernel::prelude::*;
use crate::engine::format::MAX_FILE_SIZE;
use crate::kfs::{kerr, File};

/// Regular-file llseek: SEEK_DATA/SEEK_HOLE from the engine's index (4 KiB granularity; the
/// end of the file is a hole), everything else generic.
///
/// # Safety
///
/// Called by the VFS only, with an open ferrofs regular file.
pub(crate) unsafe extern "C" fn file_llseek(file: *mut bindings::file, offset: bindings::loff_t, whence: c_int) -> bindings::loff_t {
    // SAFETY: VFS llseek contract: `file` is an open ferrofs regular file, for the call.
    let file = unsafe { File::from_raw(file) };
    if whence != bindings::SEEK_DATA as c_int && whence != bindings::SEEK_HOLE as c_int {
        return file.generic_llseek(offset, whence);
    }
    let res = (|| -> Result<i64> {
        let inode = file.inode();
        // Stores through shared mappings must reach the engine's index first.
        to_result(inode.write_and_wait())?;
        let (isize, ino, info) = (inode.size(), inode.ino(), inode.info());
        if offset < 0 || offset >= isize {
            return Err(ENXIO);
        }
        let mut fs = info.lock();
        let pos = if whence == bindings::SEEK_DATA as c_int {
            fs.seek_data(ino, offset as u64).map_err(kerr)?.ok_or(ENXIO)?
        } else {
            fs.seek_hole(ino, offset as u64).map_err(kerr)?
        };
        Ok((pos.min(isize as u64) as i64).max(offset))
    })();
    match res {
        // `vfs_setpos` checks the bound and updates f_pos
        Ok(pos) => file.set_pos(pos, MAX_FILE_SIZE as i64),
        Err(e) => e.to_errno() as i64,
    }
}

/// fsync/fdatasync: write the range back (batched `writepages`; an earlier write-back error is
/// reported here), write the inode only if it is dirty (datasync: only if its size or other
/// data-relevant fields changed, `I_DIRTY_DATASYNC`), then flush the log heads and the device
/// (`Engine::fsync`; a new file's directory entry is in the same log, so it is durable too).
///
/// # Safety
///
/// Called by the VFS only, with an open ferrofs file or directory.
pub(crate) unsafe extern "C" fn fsync(file: *mut bindings::file, start: bindings::loff_t, end: bindings::loff_t, datasync: c_int) -> c_int {
    // SAFETY: VFS fsync contract: `file` is open, for the call.
    let file = unsafe { File::from_raw(file) };
    from_result(|| {
        file.write_and_wait_range(start, end)?;
        let inode = file.inode();
        if inode.sb().rdonly() {
            return Ok(0);
        }
        let state = inode.state();
        let dirty = if datasync != 0 { bindings::I_DIRTY_DATASYNC } else { bindings::I_DIRTY_SYNC | bindings::I_DIRTY_DATASYNC };
        if state & dirty != 0 {
            // writes it through `write_inode` and waits
            inode.sync_metadata()?;
        }
        let mut fs = inode.info().lock();
        if fs.is_read_only() {
            return Ok(0);
        }
        fs.fsync(inode.ino()).map_err(kerr)?;
        Ok(0)
    })
}
