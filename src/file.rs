// SPDX-License-Identifier: GPL-2.0

//! Regular files: llseek (SEEK_DATA/SEEK_HOLE from the engine's index) and fsync.

use kernel::bindings;
use kernel::error::{from_result, to_result};
use kernel::ffi::c_int;
use kernel::prelude::*;
use crate::engine::format::MAX_FILE_SIZE;
use crate::shim;
use crate::inode::vfs_attrs;
use crate::kfs::{isbi, kerr, now};

/// Regular-file llseek: SEEK_DATA/SEEK_HOLE from the engine's index (4 KiB granularity; the
/// end of the file is a hole), everything else generic.
pub(crate) unsafe extern "C" fn file_llseek(file: *mut bindings::file, offset: bindings::loff_t, whence: c_int) -> bindings::loff_t {
    if whence != bindings::SEEK_DATA as c_int && whence != bindings::SEEK_HOLE as c_int {
        // SAFETY: VFS llseek contract.
        return unsafe { bindings::generic_file_llseek(file, offset, whence) };
    }
    let res = (|| -> Result<i64> {
        // SAFETY: VFS llseek contract: `file` is an open ferrofs regular file.
        let inode = unsafe { shim::ferrofs_file_inode(file) };
        // Stores through shared mappings must reach the engine's index first.
        // SAFETY: `inode` is live.
        to_result(unsafe { shim::ferrofs_filemap_write_and_wait((*inode).i_mapping) })?;
        // SAFETY: `inode` is live.
        let (isize, ino, info) = unsafe { (shim::ferrofs_i_size_read(inode), (*inode).i_ino as u64, isbi(inode)) };
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
        unsafe {
            to_result(bindings::file_write_and_wait_range(file, start, end))?;
            let inode = shim::ferrofs_file_inode(file);
            let info = isbi(inode);
            let ino = (*inode).i_ino as u64;
            let a = vfs_attrs(inode);
            let t = now(inode);
            let mut fs = info.lock();
            if fs.is_read_only() || shim::ferrofs_sb_rdonly((*inode).i_sb) {
                return Ok(0);
            }
            fs.setattr(ino, &a, t).map_err(kerr)?;
            fs.fsync(ino).map_err(kerr)?;
        }
        Ok(0)
    })
}
