// SPDX-License-Identifier: GPL-2.0

//! Open files and what their operations receive: `File`, `DirContext` (readdir), for shared
//! mappings `Vma` and `VmFault`, for direct I/O `Kiocb` and
//! `IovIter`, and the file of an `O_TMPFILE` open, `TmpFile`.

use kernel::bindings;
use kernel::error::to_result;
use kernel::ffi::{c_int, c_uint};
use kernel::prelude::*;
use kernel::types::Opaque;

use crate::kfs::{Dentry, Inode, InodeRef, LockedFolio, Table};
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

    /// `file_modified`: drop the setuid/setgid bits and security labels a write removes, and
    /// stamp mtime and ctime (what a size- or data-changing `fallocate` must do).
    pub(crate) fn modified(&self) -> Result {
        // SAFETY: the file is open (type invariant); the caller holds the inode lock.
        to_result(unsafe { bindings::file_modified(self.as_ptr()) })
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

/// The I/O request of a `direct_IO` call.
///
/// # Invariants
///
/// Live for the lifetime of the reference, for an open ferrofs regular file.
#[repr(transparent)]
pub(crate) struct Kiocb(Opaque<bindings::kiocb>);

impl Kiocb {
    /// # Safety
    ///
    /// `p` is the request the VFS passes to `direct_IO`, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::kiocb) -> &'a Kiocb {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<Kiocb>() }
    }

    /// The file position of the request (`ki_pos`).
    pub(crate) fn pos(&self) -> i64 {
        // SAFETY: live for the call (type invariant).
        unsafe { (*self.0.get()).ki_pos }
    }
}

/// The user memory of a `direct_IO` call.
///
/// # Invariants
///
/// Live for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct IovIter(Opaque<bindings::iov_iter>);

impl IovIter {
    /// # Safety
    ///
    /// `p` is the iterator the VFS passes to `direct_IO`, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::iov_iter) -> &'a IovIter {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<IovIter>() }
    }

    /// `iov_iter_alignment`: the OR of every segment's address and length (low bits set when
    /// any of them is misaligned).
    pub(crate) fn alignment(&self) -> u64 {
        // SAFETY: live for the call (type invariant); only read.
        (unsafe { bindings::iov_iter_alignment(self.0.get()) }) as u64
    }
}

/// The file of an `O_TMPFILE` open, as `inode_operations::tmpfile` receives it.
///
/// # Invariants
///
/// The file `vfs_tmpfile` passes to `tmpfile`, not yet opened, whose path holds the new
/// negative dentry, for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct TmpFile(Opaque<bindings::file>);

impl TmpFile {
    /// # Safety
    ///
    /// `p` is the file the VFS passes to `inode_operations::tmpfile`, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::file) -> &'a TmpFile {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<TmpFile>() }
    }

    /// The file's (negative) dentry.
    pub(crate) fn dentry(&self) -> &Dentry {
        // SAFETY: the file's path holds the dentry for the call (type invariant).
        unsafe { Dentry::from_raw((*self.0.get()).f_path.dentry) }
    }

    /// Give the file its inode and open it: `set_nlink(1)`, then `d_tmpfile` (the dentry takes
    /// the reference, and drops the link count to zero again, marking the inode dirty), then
    /// `finish_open_simple`. `inode` is a new regular ferrofs inode nothing else sees yet.
    pub(crate) fn finish(&self, inode: InodeRef) -> Result {
        inode.set_nlink(1);
        // SAFETY: the file and its negative dentry are `vfs_tmpfile`'s (type invariant); the
        // inode has the one link `d_tmpfile` drops, and its reference passes to the dentry.
        unsafe { bindings::d_tmpfile(self.0.get(), inode.into_raw()) };
        // SAFETY: as above (`finish_open_simple` with no error).
        to_result(unsafe { bindings::finish_open(self.0.get(), (*self.0.get()).f_path.dentry, None) })
    }
}
