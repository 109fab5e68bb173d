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

use crate::kfs::{kerr, kerr_data, Inode, LockedFolio};
use crate::shim;
use crate::super_::Fs;

/// Fill a locked folio of `inode` from the engine (zeros past the end of the file).
fn fill_folio(inode: &Inode, folio: &mut LockedFolio) -> Result {
    fill_folio_locked(&mut inode.info().lock(), inode, folio)
}

/// `fill_folio` with the engine already locked.
fn fill_folio_locked(fs: &mut Fs, inode: &Inode, folio: &mut LockedFolio) -> Result {
    let pos = folio.pos() as u64;
    folio.with_bytes_mut(|buf| -> Result {
        let n = fs.read(inode.ino(), pos, buf).map_err(kerr_data)?;
        if let Some(rest) = buf.get_mut(n..) {
            rest.fill(0);
        }
        Ok(())
    })?;
    folio.mark_uptodate();
    Ok(())
}

pub(crate) unsafe extern "C" fn read_folio(_file: *mut bindings::file, folio: *mut bindings::folio) -> c_int {
    // SAFETY: the VFS passes a locked folio of a ferrofs regular file, ours to unlock; the VFS
    // holds its reference.
    let Some(mut folio) = (unsafe { LockedFolio::from_locked(folio) }) else {
        return EINVAL.to_errno();
    };
    // SAFETY: the host of a locked folio's mapping is a live ferrofs inode.
    let inode = unsafe { Inode::from_raw(folio.inode_ptr()) };
    // dropping `folio` unlocks it
    match fill_folio(inode, &mut folio) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Readahead: fill the batch of locked folios under one engine lock. A folio that cannot be
/// read stays not-uptodate; `read_folio` then reports the error to the reader.
pub(crate) unsafe extern "C" fn readahead(rac: *mut bindings::readahead_control) {
    // SAFETY: VFS readahead contract: `rac` describes folios of a live ferrofs file.
    let inode = unsafe { Inode::from_raw(shim::ferrofs_readahead_inode(rac)) };
    let mut fs = inode.info().lock();
    loop {
        // SAFETY: each folio handed out by `readahead_folio` is locked and ours to unlock; the
        // page cache keeps it referenced until it is unlocked.
        let Some(mut folio) = (unsafe { LockedFolio::from_locked(shim::ferrofs_readahead_folio(rac)) }) else {
            break;
        };
        let _ = fill_folio_locked(&mut fs, inode, &mut folio);
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
    // SAFETY: VFS write_begin contract: `mapping` is the mapping of a live ferrofs file.
    let (inode, raw) = unsafe { (Inode::from_raw((*mapping).host), shim::ferrofs_write_begin_folio(mapping, pos)) };
    let raw = match kernel::error::from_err_ptr(raw) {
        Ok(f) => f,
        Err(e) => return e.to_errno(),
    };
    // SAFETY: `write_begin_get_folio` returns a locked, referenced folio (or null), which passes
    // to us.
    let Some(mut folio) = (unsafe { LockedFolio::from_locked_owned(raw) }) else {
        return ENOMEM.to_errno();
    };
    let whole = pos == folio.pos() && i64::from(len) == folio.size() as i64;
    if !folio.is_uptodate() && !whole {
        // on error, dropping `folio` unlocks and puts it
        if let Err(e) = fill_folio(inode, &mut folio) {
            return e.to_errno();
        }
    }
    // SAFETY: `foliop` is the VFS's out pointer; the lock and reference pass to the VFS, which
    // hands them back in `write_end`.
    unsafe { *foliop = folio.into_raw() };
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
    // SAFETY: VFS write_end contract: `folio` is the locked, referenced folio from
    // `write_begin`, both passing back to us, and `copied` bytes were copied into it at `pos`.
    let (inode, folio) = unsafe { (Inode::from_raw((*mapping).host), LockedFolio::from_locked_owned(folio)) };
    let Some(mut folio) = folio else {
        return EINVAL.to_errno();
    };
    let mut copied = copied;
    if !folio.is_uptodate() {
        if copied < len {
            // A short copy into a folio we did not read: retry the whole write.
            copied = 0;
        } else {
            folio.mark_uptodate();
        }
    }
    let mut ret = copied as c_int;
    if copied > 0 {
        let off = (pos - folio.pos()) as usize;
        let info = inode.info();
        let t = inode.now();
        let res = folio.with_bytes(off, copied as usize, |data| info.lock().write(inode.ino(), pos as u64, data, t));
        match res {
            Ok(n) if n == copied as usize => {
                let end = pos + i64::from(copied);
                if end > inode.size() {
                    inode.set_size(end);
                }
            }
            Ok(_) => ret = EIO.to_errno(),
            Err(e) => {
                // The folio holds bytes the engine refused: read it again next time.
                folio.clear_uptodate();
                ret = kerr(e).to_errno();
            }
        }
    }
    // dropping `folio` unlocks and puts it
    ret
}

/// Hand one dirty folio (from a shared writable mapping) to the engine.
fn write_folio(inode: &Inode, mut folio: LockedFolio) -> c_int {
    let isize = inode.size();
    let pos = folio.pos();
    if pos >= isize {
        return 0;
    }
    let len = (isize - pos).min(folio.size() as i64) as usize;
    folio.start_writeback();
    let t = inode.now();
    let res = folio.with_bytes(0, len, |data| inode.info().lock().write(inode.ino(), pos as u64, data, t));
    folio.unlock_end_writeback();
    match res {
        Ok(_) => 0,
        Err(e) => {
            let err = kerr(e).to_errno();
            inode.set_mapping_error(err);
            err
        }
    }
}

pub(crate) unsafe extern "C" fn writepages(mapping: *mut bindings::address_space, wbc: *mut bindings::writeback_control) -> c_int {
    // SAFETY: VFS writepages contract: `mapping` is the mapping of a live ferrofs file.
    let inode = unsafe { Inode::from_raw((*mapping).host) };
    let mut err: c_int = 0;
    let mut folio: *mut bindings::folio = ptr::null_mut();
    loop {
        // SAFETY: VFS writepages contract; `folio` is null or the folio the previous iteration
        // got (unlocked by now, still referenced by the iterator).
        folio = unsafe { bindings::writeback_iter(mapping, wbc, folio, &mut err) };
        // SAFETY: `writeback_iter` hands out a locked, dirty-cleared folio, ours to unlock; the
        // iterator keeps its reference until the next call.
        let Some(f) = (unsafe { LockedFolio::from_locked(folio) }) else {
            break;
        };
        err = write_folio(inode, f);
    }
    err
}
