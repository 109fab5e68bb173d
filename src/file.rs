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

pub(crate) unsafe extern "C" fn fsync(file: *mut bindings::file, start: bindings::loff_t, end: bindings::loff_t, _datasync: c_int) -> c_int {
    from_result(|| {
        // SAFETY: VFS fsync contract: `file` is open.
        to_result(unsafe { bindings::file_write_and_wait_range(file, start, end) })?;
        // SAFETY: as above.
        let inode = unsafe { Inode::from_file(file) };
        let (info, ino, a, t) = (inode.info(), inode.ino(), inode.attrs(), inode.now());
        let mut fs = info.lock();
        if fs.is_read_only() || inode.sb().rdonly() {
            return Ok(0);
        }
        fs.setattr(ino, &a, t).map_err(kerr)?;
        fs.fsync(ino).map_err(kerr)?;
        Ok(0)
    })
}
