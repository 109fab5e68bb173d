// SPDX-License-Identifier: GPL-2.0

//! Thin wrappers over the raw VFS objects (superblock, inode, dentry, folio) and the block
//! layer (block device, bio pages): with `shim.rs`,
//! `mtd.rs` and `kplatform.rs` they hold the raw-pointer `unsafe` of the kernel layer.

use kernel::ffi::c_char;
use kernel::prelude::*;

use crate::engine::error::Error as EError;

mod bio;
mod dentry;
mod folio;
mod inode;
mod sb;

pub(crate) use bio::*;
pub(crate) use dentry::*;
pub(crate) use folio::*;
pub(crate) use inode::*;
pub(crate) use sb::*;

/// `SB_RDONLY` (include/linux/fs.h, `BIT(0)`): bindgen cannot expand `BIT()`, so it is not in
/// `bindings`.
pub(crate) const SB_RDONLY: u32 = 1 << 0;

/// An engine error as a kernel error.
pub(crate) fn kerr(e: EError) -> Error {
    Error::from_errno(-e.errno())
}

/// An engine error from reading a file's contents: damaged or unreadable data is an I/O error
/// to the reader (EIO, as btrfs reports a data checksum failure), while damaged metadata found by
/// lookup, getattr or readdir stays EUCLEAN ("structure needs cleaning", as ext4 and btrfs report it).
pub(crate) fn kerr_data(e: EError) -> Error {
    match e {
        EError::Corrupt => EIO,
        e => kerr(e),
    }
}

/// A NUL-terminated C string as bytes (without the NUL).
///
/// # Safety
///
/// `s` must be a valid NUL-terminated string that outlives the result.
pub(crate) unsafe fn cstr<'a>(s: *const c_char) -> &'a [u8] {
    // SAFETY: per the contract.
    unsafe { CStr::from_char_ptr(s) }.as_bytes()
}
