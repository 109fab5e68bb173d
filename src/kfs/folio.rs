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

    /// Lock a folio the caller holds a reference to (`page_mkwrite`: the fault's folio).
    ///
    /// # Safety
    ///
    /// `ptr` is a referenced folio (not highmem) whose reference outlives the result, not locked
    /// by this thread.
    pub(crate) unsafe fn lock(ptr: *mut bindings::folio) -> Option<Self> {
        let ptr = NonNull::new(ptr)?;
        // SAFETY: per the contract the folio is referenced; `folio_lock` may sleep, which the
        // callers (fault, writeback) allow.
        unsafe { shim::ferrofs_folio_lock(ptr.as_ptr()) };
        Some(LockedFolio { ptr, put: false })
    }

    /// Take a reference of our own on a folio whose reference the caller keeps only for a
    /// while (`writeback_iter`'s batch), so the wrapper may outlive it.
    pub(crate) fn take_ref(&mut self) {
        if !self.put {
            // SAFETY: the folio is referenced (type invariant); the new reference is put on drop.
            unsafe { shim::ferrofs_folio_get(self.raw()) };
            self.put = true;
        }
    }

    /// The folio's mapping (null once truncated out of it).
    pub(crate) fn mapping(&self) -> *mut bindings::address_space {
        // SAFETY: the folio is locked by us (type invariant), so its mapping is stable.
        unsafe { shim::ferrofs_folio_mapping(self.raw()) }
    }

    pub(crate) fn is_dirty(&self) -> bool {
        // SAFETY: the folio is referenced (type invariant).
        unsafe { shim::ferrofs_folio_test_dirty(self.raw()) }
    }

    /// `folio_mark_dirty` (the mapping's `dirty_folio`, which also dirties the inode's pages).
    pub(crate) fn mark_dirty(&mut self) {
        // SAFETY: the folio is locked by us (type invariant), so its mapping is stable.
        unsafe { bindings::folio_mark_dirty(self.raw()) };
    }

    /// `folio_wait_stable`: wait for writeback if the device needs stable pages.
    pub(crate) fn wait_stable(&self) {
        // SAFETY: the folio is locked by us (type invariant).
        unsafe { shim::ferrofs_folio_wait_stable(self.raw()) }
    }

    /// Whether the folio carries a write-back budget (our private mark).
    pub(crate) fn is_budgeted(&self) -> bool {
        // SAFETY: the folio is referenced (type invariant).
        unsafe { shim::ferrofs_folio_test_private(self.raw()) }
    }

    /// Mark the folio as budgeted (`folio_attach_private`, which takes a folio reference that
    /// `clear_budgeted` drops). No-op if it is already marked.
    pub(crate) fn set_budgeted(&mut self) {
        if !self.is_budgeted() {
            // SAFETY: the folio is locked by us (type invariant), as attaching private data
            // requires; the private value is the constant 1, never dereferenced.
            unsafe { shim::ferrofs_folio_attach_budget(self.raw()) }
        }
    }

    /// Remove the budget mark; returns whether there was one.
    pub(crate) fn clear_budgeted(&mut self) -> bool {
        // SAFETY: the folio is locked by us (type invariant).
        unsafe { clear_budget_mark(self.raw()) }
    }

    /// Zero `off..off + len` of the folio (clamped to it).
    pub(crate) fn zero(&mut self, off: usize, len: usize) {
        let size = self.size();
        let off = off.min(size);
        let len = len.min(size - off);
        if len > 0 {
            // SAFETY: the folio is locked by us (type invariant); the range lies inside it.
            unsafe { shim::ferrofs_folio_zero_range(self.raw(), off, len) }
        }
    }

    /// The bytes `0..len` of the folio (clamped), borrowed for as long as the wrapper (and so
    /// the lock) is.
    pub(crate) fn bytes(&self, len: usize) -> &[u8] {
        let len = len.min(self.size());
        // SAFETY: the folio is locked by us and not highmem (type invariant): its first `len`
        // bytes are mapped; the slice borrows `self`, so it ends before the lock is dropped.
        // Stores through a shared writable mapping may race with the read, as with `memcpy`.
        unsafe { core::slice::from_raw_parts(shim::ferrofs_folio_address(self.raw()).cast::<u8>(), len) }
    }

    /// `folio_redirty_for_writepage`: keep a folio dirty that writeback could not store.
    pub(crate) fn redirty(&self, wbc: *mut bindings::writeback_control) {
        // SAFETY: the folio is locked by us (type invariant); `wbc` is the writeback control of
        // the `writepages` call that handed it out.
        unsafe { bindings::folio_redirty_for_writepage(wbc, self.raw()) };
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

/// Remove the budget mark of a folio the caller has locked (or that the VM hands to
/// `invalidate_folio`/`release_folio` locked); returns whether there was one.
///
/// # Safety
///
/// `folio` is a locked folio.
pub(crate) unsafe fn clear_budget_mark(folio: *mut bindings::folio) -> bool {
    // SAFETY: per the contract.
    unsafe {
        if shim::ferrofs_folio_test_private(folio) {
            shim::ferrofs_folio_detach_private(folio);
            true
        } else {
            false
        }
    }
}
