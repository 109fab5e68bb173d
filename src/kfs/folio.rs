// SPDX-License-Identifier: GPL-2.0

//! `LockedFolio`: a folio this code holds locked, unlocked (and, if it owns the reference, put)
//! when the wrapper is dropped, so that no error path can leak a lock or a reference.

use core::ptr::NonNull;

use kernel::bindings;

use crate::shim;

/// A locked folio of a ferrofs regular file.
///
/// # Invariants
///
/// `ptr` is a folio locked by this code (the lock passes to the wrapper), not in highmem
/// (ferrofs mappings never are), whose reference is kept alive for the wrapper's lifetime: by
/// the caller when `put` is false, by the wrapper itself when `put` is true. Dropping the
/// wrapper unlocks the folio, then puts the reference if `put`.
pub(crate) struct LockedFolio {
    ptr: NonNull<bindings::folio>,
    put: bool,
}

impl LockedFolio {
    /// Take over the lock of a folio whose reference the caller keeps (`read_folio`,
    /// `readahead_folio`, `writeback_iter`). Returns `None` for a null pointer.
    ///
    /// # Safety
    ///
    /// `ptr` is null or a locked folio (not highmem) whose lock passes to the result and whose
    /// reference outlives it.
    pub(crate) unsafe fn from_locked(ptr: *mut bindings::folio) -> Option<Self> {
        Some(LockedFolio { ptr: NonNull::new(ptr)?, put: false })
    }

    /// Take over the lock and the reference of a folio (`write_begin_get_folio`, `write_end`).
    ///
    /// # Safety
    ///
    /// `ptr` is null or a locked, referenced folio (not highmem); both the lock and the
    /// reference pass to the result.
    pub(crate) unsafe fn from_locked_owned(ptr: *mut bindings::folio) -> Option<Self> {
        Some(LockedFolio { ptr: NonNull::new(ptr)?, put: true })
    }

    /// Hand the lock (and the reference, if owned) back to the caller, who must release them.
    pub(crate) fn into_raw(self) -> *mut bindings::folio {
        let p = self.ptr.as_ptr();
        core::mem::forget(self);
        p
    }

    fn raw(&self) -> *mut bindings::folio {
        self.ptr.as_ptr()
    }

    /// The file offset of the folio's first byte.
    pub(crate) fn pos(&self) -> i64 {
        // SAFETY: the folio is referenced (type invariant).
        unsafe { shim::ferrofs_folio_pos(self.raw()) }
    }

    /// The folio's size in bytes.
    pub(crate) fn size(&self) -> usize {
        // SAFETY: the folio is referenced (type invariant).
        unsafe { shim::ferrofs_folio_size(self.raw()) }
    }

    /// The inode owning the folio's mapping.
    pub(crate) fn inode_ptr(&self) -> *mut bindings::inode {
        // SAFETY: a locked folio is attached to its mapping (type invariant), whose host is live.
        unsafe { shim::ferrofs_folio_inode(self.raw()) }
    }

    pub(crate) fn is_uptodate(&self) -> bool {
        // SAFETY: the folio is referenced (type invariant).
        unsafe { shim::ferrofs_folio_test_uptodate(self.raw()) }
    }

    pub(crate) fn mark_uptodate(&mut self) {
        // SAFETY: the folio is locked by us (type invariant), as `folio_mark_uptodate` requires.
        unsafe { shim::ferrofs_folio_mark_uptodate(self.raw()) }
    }

    pub(crate) fn clear_uptodate(&mut self) {
        // SAFETY: the folio is locked by us (type invariant).
        unsafe { shim::ferrofs_folio_clear_uptodate(self.raw()) }
    }

    /// Run `f` over the folio's bytes. The slice lives only for the call, while the folio stays
    /// locked. For use on a folio that is not uptodate (being filled, so not mapped and not read
    /// by anyone else).
    pub(crate) fn with_bytes_mut<R>(&mut self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        // SAFETY: the folio is locked by us and not highmem (type invariant): its kernel address
        // is valid for `folio_size` bytes; `&mut self` and the lock make this the only access
        // from this code while `f` runs, and the slice does not outlive the call.
        let buf = unsafe { core::slice::from_raw_parts_mut(shim::ferrofs_folio_address(self.raw()).cast::<u8>(), self.size()) };
        f(buf)
    }

    /// Run `f` over the bytes `off..off + len` of the folio (clamped to the folio), read-only,
    /// while the folio stays locked.
    pub(crate) fn with_bytes<R>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        let size = self.size();
        let off = off.min(size);
        let len = len.min(size - off);
        // SAFETY: the folio is locked by us and not highmem (type invariant): `off..off + len`
        // lies inside its `folio_size` bytes; the slice does not outlive the call. Stores through
        // a shared writable mapping may race with the read, as with the C `memcpy` it replaces.
        let buf = unsafe { core::slice::from_raw_parts(shim::ferrofs_folio_address(self.raw()).cast::<u8>().add(off), len) };
        f(buf)
    }

    /// `folio_start_writeback`; end it with `unlock_end_writeback`.
    pub(crate) fn start_writeback(&mut self) {
        // SAFETY: the folio is locked by us (type invariant), as `folio_start_writeback` requires.
        unsafe { shim::ferrofs_folio_start_writeback(self.raw()) }
    }

    /// Unlock the folio (dropping the wrapper), then end the writeback started by
    /// `start_writeback`.
    pub(crate) fn unlock_end_writeback(self) {
        let p = self.raw();
        let put = self.put;
        core::mem::forget(self);
        // SAFETY: we hold the lock (type invariant) and give it up here; writeback was started
        // by `start_writeback`, and the reference is still held (by the caller, or by us until
        // the put below).
        unsafe {
            shim::ferrofs_folio_unlock(p);
            shim::ferrofs_folio_end_writeback(p);
            if put {
                shim::ferrofs_folio_put(p);
            }
        }
    }
}

impl Drop for LockedFolio {
    fn drop(&mut self) {
        // SAFETY: we hold the lock, and the reference if `put` (type invariant); neither is used
        // after this.
        unsafe {
            shim::ferrofs_folio_unlock(self.raw());
            if self.put {
                shim::ferrofs_folio_put(self.raw());
            }
        }
    }
}
