// SPDX-License-Identifier: GPL-2.0

//! The address space operations: `read_folio`, `readahead`, `write_begin`/`write_end`,
//! `writepages`.
//!
//! Data path: `write_iter` goes through the page cache (`generic_file_write_iter`), and
//! `write_end` hands the copied bytes to the engine at once (write-through), so ENOSPC and I/O
//! errors reach the writer; the folio stays clean. Shared writable mappings dirty folios, which
//! `writepages` hands to the engine.

use core::ptr;
use kernel::bindings;
use kernel::ffi::{c_int, c_uint, c_void};
use kernel::prelude::*;
use crate::shim;
use crate::kfs::{folio_bytes, isbi, kerr, now};
use crate::super_::Fs;

/// Fill a locked folio from the engine (zeros past the end of the file).
///
/// # Safety
///
/// `folio` must be a locked folio of `inode`'s mapping.
pub(crate) unsafe fn fill_folio(inode: *mut bindings::inode, folio: *mut bindings::folio) -> Result {
    // SAFETY: per the contract.
    unsafe { fill_folio_locked(&mut isbi(inode).lock(), inode, folio) }
}

/// `fill_folio` with the engine already locked.
///
/// # Safety
///
/// As for `fill_folio`.
pub(crate) unsafe fn fill_folio_locked(fs: &mut Fs, inode: *mut bindings::inode, folio: *mut bindings::folio) -> Result {
    // SAFETY: per the contract.
    unsafe {
        let pos = shim::ferrofs_folio_pos(folio) as u64;
        let buf = folio_bytes(folio);
        let n = fs.read((*inode).i_ino as u64, pos, buf).map_err(kerr)?;
        if let Some(rest) = buf.get_mut(n..) {
            rest.fill(0);
        }
        shim::ferrofs_folio_mark_uptodate(folio);
    }
    Ok(())
}

pub(crate) unsafe extern "C" fn read_folio(_file: *mut bindings::file, folio: *mut bindings::folio) -> c_int {
    // SAFETY: the VFS passes a locked folio of a ferrofs regular file.
    let ret = unsafe { fill_folio(shim::ferrofs_folio_inode(folio), folio) };
    // SAFETY: the folio is locked and ours to unlock.
    unsafe { shim::ferrofs_folio_unlock(folio) };
    match ret {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Readahead: fill the batch of locked folios under one engine lock. A folio that cannot be
/// read stays not-uptodate; `read_folio` then reports the error to the reader.
pub(crate) unsafe extern "C" fn readahead(rac: *mut bindings::readahead_control) {
    // SAFETY: VFS readahead contract: `rac` describes locked folios of a ferrofs file; each
    // folio handed out by `readahead_folio` is locked and ours to unlock.
    unsafe {
        let inode = shim::ferrofs_readahead_inode(rac);
        let mut fs = isbi(inode).lock();
        loop {
            let folio = shim::ferrofs_readahead_folio(rac);
            if folio.is_null() {
                break;
            }
            let _ = fill_folio_locked(&mut fs, inode, folio);
            shim::ferrofs_folio_unlock(folio);
        }
    }
}

pub(crate) unsafe extern "C" fn write_begin(
    _file: *mut bindings::file,
    mapping: *mut bindings::address_space,
    pos: bindings::loff_t,
    len: c_uint,
    foliop: *mut *mut bindings::folio,
    _fsdata: *mut *mut c_void,
) -> c_int {
    // SAFETY: VFS write_begin contract.
    unsafe {
        let folio = match kernel::error::from_err_ptr(shim::ferrofs_write_begin_folio(mapping, pos)) {
            Ok(f) => f,
            Err(e) => return e.to_errno(),
        };
        if folio.is_null() {
            return ENOMEM.to_errno();
        }
        let fpos = shim::ferrofs_folio_pos(folio);
        let fsize = shim::ferrofs_folio_size(folio) as i64;
        let whole = pos == fpos && i64::from(len) == fsize;
        if !shim::ferrofs_folio_test_uptodate(folio) && !whole {
            if let Err(e) = fill_folio((*mapping).host, folio) {
                shim::ferrofs_folio_unlock(folio);
                shim::ferrofs_folio_put(folio);
                return e.to_errno();
            }
        }
        *foliop = folio;
    }
    0
}

pub(crate) unsafe extern "C" fn write_end(
    _file: *mut bindings::file,
    mapping: *mut bindings::address_space,
    pos: bindings::loff_t,
    len: c_uint,
    copied: c_uint,
    folio: *mut bindings::folio,
    _fsdata: *mut c_void,
) -> c_int {
    // SAFETY: VFS write_end contract: `folio` is the locked folio from `write_begin`, and
    // `copied` bytes were copied into it at `pos`.
    unsafe {
        let inode = (*mapping).host;
        let mut copied = copied;
        if !shim::ferrofs_folio_test_uptodate(folio) {
            if copied < len {
                // A short copy into a folio we did not read: retry the whole write.
                copied = 0;
            } else {
                shim::ferrofs_folio_mark_uptodate(folio);
            }
        }
        let mut ret = copied as c_int;
        if copied > 0 {
            let off = (pos - shim::ferrofs_folio_pos(folio)) as usize;
            let data = &folio_bytes(folio)[off..off + copied as usize];
            let info = isbi(inode);
            let t = now(inode);
            match info.lock().write((*inode).i_ino as u64, pos as u64, data, t) {
                Ok(n) if n == copied as usize => {
                    let end = pos + i64::from(copied);
                    if end > shim::ferrofs_i_size_read(inode) {
                        shim::ferrofs_i_size_write(inode, end);
                    }
                }
                Ok(_) => ret = EIO.to_errno(),
                Err(e) => {
                    // The folio holds bytes the engine refused: read it again next time.
                    shim::ferrofs_folio_clear_uptodate(folio);
                    ret = kerr(e).to_errno();
                }
            }
        }
        shim::ferrofs_folio_unlock(folio);
        shim::ferrofs_folio_put(folio);
        ret
    }
}

/// Hand one dirty folio (from a shared writable mapping) to the engine.
///
/// # Safety
///
/// `folio` must be a locked, dirty-cleared folio of `inode` handed out by `writeback_iter`.
pub(crate) unsafe fn write_folio(inode: *mut bindings::inode, folio: *mut bindings::folio) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        let isize = shim::ferrofs_i_size_read(inode);
        let pos = shim::ferrofs_folio_pos(folio);
        if pos >= isize {
            shim::ferrofs_folio_unlock(folio);
            return 0;
        }
        let len = (isize - pos).min(shim::ferrofs_folio_size(folio) as i64) as usize;
        shim::ferrofs_folio_start_writeback(folio);
        let data = &folio_bytes(folio)[..len];
        let t = now(inode);
        let res = isbi(inode).lock().write((*inode).i_ino as u64, pos as u64, data, t);
        shim::ferrofs_folio_unlock(folio);
        shim::ferrofs_folio_end_writeback(folio);
        match res {
            Ok(_) => 0,
            Err(e) => {
                let err = kerr(e).to_errno();
                shim::ferrofs_mapping_set_error((*inode).i_mapping, err);
                err
            }
        }
    }
}

pub(crate) unsafe extern "C" fn writepages(mapping: *mut bindings::address_space, wbc: *mut bindings::writeback_control) -> c_int {
    // SAFETY: VFS writepages contract.
    unsafe {
        let inode = (*mapping).host;
        let mut err: c_int = 0;
        let mut folio: *mut bindings::folio = ptr::null_mut();
        loop {
            folio = bindings::writeback_iter(mapping, wbc, folio, &mut err);
            if folio.is_null() {
                break;
            }
            err = write_folio(inode, folio);
        }
        err
    }
}
