// SPDX-License-Identifier: GPL-2.0

//! Regular files: llseek (SEEK_DATA/SEEK_HOLE from the engine's index) and fsync.

use kernel::bindings;
use kernel::error::{from_result, to_result};
use kernel::ffi::c_int;
use kernel::prelude::*;
use crate::engine::format::MAX_FILE_SIZE;
use crate::kfs::{kerr, Inode};

/// Regular-file llseek: SEEK_DATA/SEEK_HOLE from the engine's index (4 KiB granularity; the
/// end of the file is a hole), everything else generic.
pub(crate) unsafe extern "C" fn file_llseek(file: *mut bindings::file, offset: bindings::loff_t, whence: c_int) -> bindings::loff_t {
    if whence != bindings::SEEK_DATA as c_int && whence != bindings::SEEK_HOLE as c_int {
        // SAFETY: VFS llseek contract.
        return unsafe { bindings::generic_file_llseek(file, offset, whence) };
    }
    let res = (|| -> Result<i64> {
        // SAFETY: VFS llseek contract: `file` is an open ferrofs regular file.
        let inode = unsafe { Inode::from_file(file) };
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
        // SAFETY: `file` is open; `vfs_setpos` checks the bound and updates f_pos.
        Ok(pos) => unsafe { bindings::vfs_setpos(file, pos, MAX_FILE_SIZE as i64) },
        Err(e) => e.to_errno() as i64,
    }
}

/// fsync/fdatasync: write the range back (batched `writepages`; an earlier write-back error is
/// reported here), write the inode only if it is dirty (datasync: only if its size or other
/// data-relevant fields changed, `I_DIRTY_DATASYNC`), then flush the log heads and the device
/// (`Engine::fsync`; a new file's directory entry is in the same log, so it is durable too).
pub(crate) unsafe extern "C" fn fsync(file: *mut bindings::file, start: bindings::loff_t, end: bindings::loff_t, datasync: c_int) -> c_int {
    from_result(|| {
        // SAFETY: VFS fsync contract: `file` is open.
        to_result(unsafe { bindings::file_write_and_wait_range(file, start, end) })?;
        // SAFETY: as above.
        let inode = unsafe { Inode::from_file(file) };
        if inode.sb().rdonly() {
            return Ok(0);
        }
        let state = inode.state();
        let dirty = if datasync != 0 { bindings::I_DIRTY_DATASYNC } else { bindings::I_DIRTY_SYNC | bindings::I_DIRTY_DATASYNC };
        if state & dirty != 0 {
            // SAFETY: the inode is live (the file is open); this writes it through
            // `write_inode` and waits.
            to_result(unsafe { bindings::sync_inode_metadata(inode.as_ptr(), 1) })?;
        }
        let mut fs = inode.info().lock();
        if fs.is_read_only() {
            return Ok(0);
        }
        fs.fsync(inode.ino()).map_err(kerr)?;
        Ok(0)
    })
}
