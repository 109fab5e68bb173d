// SPDX-License-Identifier: GPL-2.0

//! Open files and what their operations receive: `File`, `DirContext` (readdir), and for
//! shared mappings `Vma` and `VmFault`.

use kernel::bindings;
use kernel::error::to_result;
use kernel::ffi::{c_int, c_uint};
use kernel::prelude::*;
use kernel::types::Opaque;

use crate::kfs::{Inode, LockedFolio, Table};
use crate::shim;

/// An open ferrofs file.
///
/// # Invariants
///
/// The file is open (so its inode, a ferrofs inode of a mounted superblock, is live) for the
/// lifetime of the reference.
#[repr(transparent)]
pub(crate) struct File(Opaque<bindings::file>);

impl File {
    /// # Safety
    ///
    /// `p` is an open ferrofs file (as the VFS passes to a file operation), for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::file) -> &'a File {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<File>() }
    }

    fn as_ptr(&self) -> *mut bindings::file {
        self.0.get()
    }

    /// The file's inode.
    pub(crate) fn inode(&self) -> &Inode {
        // SAFETY: an open file holds a reference to its inode (type invariant).
        unsafe { Inode::from_raw(shim::ferrofs_file_inode(self.as_ptr())) }
    }

    /// `generic_file_llseek`.
    pub(crate) fn generic_llseek(&self, offset: i64, whence: c_int) -> i64 {
        // SAFETY: the file is open (type invariant).
        unsafe { bindings::generic_file_llseek(self.as_ptr(), offset, whence) }
    }

    /// `generic_file_llseek_size` with `maxsize` and `eof`.
    pub(crate) fn generic_llseek_size(&self, offset: i64, whence: c_int, maxsize: i64, eof: i64) -> i64 {
        // SAFETY: the file is open (type invariant).
        unsafe { bindings::generic_file_llseek_size(self.as_ptr(), offset, whence, maxsize, eof) }
    }

    /// `vfs_setpos`: set the position to `pos` (at most `max`); returns it, or an errno.
    pub(crate) fn set_pos(&self, pos: i64, max: i64) -> i64 {
        // SAFETY: the file is open (type invariant); `vfs_setpos` checks the bound.
        unsafe { bindings::vfs_setpos(self.as_ptr(), pos, max) }
    }

    /// `file_write_and_wait_range`: write back `start..=end` and wait, reporting a write-back
    /// error recorded on the mapping since the file saw the last one.
    pub(crate) fn write_and_wait_range(&self, start: i64, end: i64) -> Result {
        // SAFETY: the file is open (type invariant).
        to_result(unsafe { bindings::file_write_and_wait_range(self.as_ptr(), start, end) })
    }

    /// `file_update_time`: stamp mtime and ctime (a write through a mapping).
    pub(crate) fn update_time(&self) -> Result {
        // SAFETY: the file is open (type invariant).
        to_result(unsafe { bindings::file_update_time(self.as_ptr()) })
    }

    /// `generic_file_mmap` of `vma`, then our operations for the mapping.
    pub(crate) fn mmap(&self, vma: &Vma, ops: &'static Table<bindings::vm_operations_struct>) -> Result {
        // SAFETY: the file is open (type invariant) and `vma` is being set up for it.
        to_result(unsafe { bindings::generic_file_mmap(self.as_ptr(), vma.as_ptr()) })?;
        // SAFETY: as above; the table is static.
        unsafe { shim::ferrofs_vma_set_ops(vma.as_ptr(), &ops.0) };
        Ok(())
    }
}

/// The position and output of one `getdents` call (`iterate_shared`).
///
/// # Invariants
///
/// Live for the lifetime of the reference, used by this call only.
#[repr(transparent)]
pub(crate) struct DirContext(Opaque<bindings::dir_context>);

impl DirContext {
    /// # Safety
    ///
    /// `p` is the context the VFS passes to `iterate_shared`, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::dir_context) -> &'a DirContext {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<DirContext>() }
    }

    fn as_ptr(&self) -> *mut bindings::dir_context {
        self.0.get()
    }

    /// The position (a directory cookie).
    pub(crate) fn pos(&self) -> i64 {
        // SAFETY: live and ours for the call (type invariant).
        unsafe { (*self.as_ptr()).pos }
    }

    pub(crate) fn set_pos(&self, pos: i64) {
        // SAFETY: live and ours for the call (type invariant).
        unsafe { (*self.as_ptr()).pos = pos }
    }

    /// `dir_emit` one entry (`dtype`: a `DT_*` value); false when the caller's buffer is full.
    /// May copy to user memory: never under the engine lock.
    pub(crate) fn emit(&self, name: &[u8], ino: u64, dtype: u8) -> bool {
        // SAFETY: live and ours for the call (type invariant); `name` is `name.len()` readable
        // bytes.
        unsafe { shim::ferrofs_dir_emit(self.as_ptr(), name.as_ptr().cast(), name.len() as c_int, ino, c_uint::from(dtype)) }
    }
}

/// A mapping being set up by `mmap`.
///
/// # Invariants
///
/// Live and being set up by the caller for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct Vma(Opaque<bindings::vm_area_struct>);

impl Vma {
    /// # Safety
    ///
    /// `p` is the area the VFS passes to `mmap`, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::vm_area_struct) -> &'a Vma {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<Vma>() }
    }

    fn as_ptr(&self) -> *mut bindings::vm_area_struct {
        self.0.get()
    }
}

/// A write fault on a shared mapping of an open ferrofs file (`page_mkwrite`).
///
/// # Invariants
///
/// Live for the lifetime of the reference; the fault holds its folio referenced (not locked)
/// and its mapping keeps the file open.
#[repr(transparent)]
pub(crate) struct VmFault(Opaque<bindings::vm_fault>);

impl VmFault {
    /// # Safety
    ///
    /// `p` is the fault the VM passes to `page_mkwrite` of a ferrofs mapping, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::vm_fault) -> &'a VmFault {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<VmFault>() }
    }

    fn as_ptr(&self) -> *mut bindings::vm_fault {
        self.0.get()
    }

    /// The mapped file.
    pub(crate) fn file(&self) -> &File {
        // SAFETY: the mapping keeps the file open while the fault is handled (type invariant).
        unsafe { File::from_raw(shim::ferrofs_vmf_file(self.as_ptr())) }
    }

    /// Lock the fault's folio (which may be truncated meanwhile: check its mapping). The fault
    /// keeps its reference.
    pub(crate) fn lock_folio(&self) -> Option<LockedFolio> {
        // SAFETY: the fault holds the folio referenced and this thread does not hold its lock
        // (type invariant); the reference outlives the wrapper (dropped in the handler).
        unsafe { LockedFolio::lock(shim::ferrofs_vmf_folio(self.as_ptr())) }
    }
}
