// SPDX-License-Identifier: GPL-2.0

//! Thin safe wrappers over the kernel objects the kernel layer uses, with type invariants and
//! RAII: the superblock in its phases, the mount context, inodes, dentries, folios, open files
//! and mappings, xattr handlers, POSIX ACLs, inode flags, the background thread and the NOFS scope, debugfs, the
//! filesystem type, the MTD device and the block layer (block device, bio pages). With
//! `shim.rs` (the C declarations) and `kplatform.rs` (the engine's vectors) they hold all the
//! `unsafe` of the kernel layer, except the one block per `extern "C"` callback that turns the
//! VFS's raw pointers into these wrappers.

use kernel::bindings;
use kernel::prelude::*;

use crate::engine::error::Error as EError;

mod acl;
mod bio;
mod context;
mod debugfs;
mod dentry;
mod fiemap;
mod file;
mod fileattr;
mod folio;
mod inode;
mod module;
mod mtd;
mod sb;
mod task;
mod xattr;

pub(crate) use acl::*;
pub(crate) use bio::*;
pub(crate) use context::*;
pub(crate) use debugfs::*;
pub(crate) use dentry::*;
pub(crate) use fiemap::*;
pub(crate) use file::*;
pub(crate) use fileattr::*;
pub(crate) use folio::*;
pub(crate) use inode::*;
pub(crate) use module::*;
pub(crate) use mtd::*;
pub(crate) use sb::*;
pub(crate) use task::*;
pub(crate) use xattr::*;

/// A C operations table, shareable between threads.
#[repr(transparent)]
pub(crate) struct Table<T>(pub(crate) T);

// SAFETY: the tables are immutable after initialisation and hold only function pointers (and
// pointers to static strings).
unsafe impl<T> Sync for Table<T> {}

/// A C operations struct whose all-zero value is valid: every field a nullable function pointer
/// (null: no callback) or a null pointer.
///
/// # Safety
///
/// All-zero must be a valid value of the type.
pub(crate) unsafe trait OpsTable {}

// SAFETY: these structs hold only nullable function pointers (and, for `file_operations`, a
// null `owner` and `fop_flags` 0), so all-zero is valid: no callback.
unsafe impl OpsTable for bindings::super_operations {}
// SAFETY: as above.
unsafe impl OpsTable for bindings::inode_operations {}
// SAFETY: as above.
unsafe impl OpsTable for bindings::file_operations {}
// SAFETY: as above.
unsafe impl OpsTable for bindings::address_space_operations {}
// SAFETY: as above.
unsafe impl OpsTable for bindings::vm_operations_struct {}

/// An all-zero `T`: the fields of an operations table that name no callback.
pub(crate) const fn no_callbacks<T: OpsTable>() -> T {
    // SAFETY: all-zero is a valid `T` (`OpsTable`).
    unsafe { core::mem::zeroed() }
}

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
