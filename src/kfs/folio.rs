// SPDX-License-Identifier: GPL-2.0

//! Folios: `LockedFolio`, a folio this code holds locked, unlocked (and, if it owns the
//! reference, put) when the wrapper is dropped, so that no error path can leak a lock or a
//! reference; `Folio`, a folio the VM holds locked for a callback; and the two ways the page
//! cache hands out folios, `Readahead` and `Writeback` (`writeback_iter`).

use core::ptr::{self, NonNull};

use kernel::bindings;
use kernel::ffi::c_int;
use kernel::types::Opaque;

use crate::kfs::Inode;
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

    /// Lock a folio the caller holds a reference to (`VmFault::lock_folio`: the fault's folio).
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

    /// `folio_redirty_for_writepage`: keep a folio dirty that the writeback `wb` handed out
    /// but could not store.
    pub(crate) fn redirty(&self, wb: &Writeback<'_>) {
        // SAFETY: the folio is locked by us (type invariant); `wbc` is the writeback control of
        // the `writepages` call that handed it out.
        unsafe { bindings::folio_redirty_for_writepage(wb.wbc, self.raw()) };
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

/// Remove the budget mark of a locked folio; returns whether there was one.
///
/// # Safety
///
/// `folio` is a folio locked by the caller.
unsafe fn clear_budget_mark(folio: *mut bindings::folio) -> bool {
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

/// A folio of a ferrofs mapping that the VM holds locked for a callback (`invalidate_folio`,
/// `release_folio`).
///
/// # Invariants
///
/// Locked (by the caller of the callback) and referenced, attached to a ferrofs mapping, for
/// the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct Folio(Opaque<bindings::folio>);

impl Folio {
    /// # Safety
    ///
    /// `p` is a locked folio of a ferrofs mapping that stays locked and attached for `'a`.
    pub(crate) unsafe fn from_locked<'a>(p: *mut bindings::folio) -> &'a Folio {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<Folio>() }
    }

    fn raw(&self) -> *mut bindings::folio {
        self.0.get()
    }

    /// The folio's size in bytes.
    pub(crate) fn size(&self) -> usize {
        // SAFETY: the folio is referenced (type invariant).
        unsafe { shim::ferrofs_folio_size(self.raw()) }
    }

    pub(crate) fn is_dirty(&self) -> bool {
        // SAFETY: the folio is referenced (type invariant).
        unsafe { shim::ferrofs_folio_test_dirty(self.raw()) }
    }

    /// Remove the budget mark; returns whether there was one.
    pub(crate) fn clear_budgeted(&self) -> bool {
        // SAFETY: the folio is locked (type invariant).
        unsafe { clear_budget_mark(self.raw()) }
    }

    /// The inode owning the folio's mapping.
    pub(crate) fn inode(&self) -> &Inode {
        // SAFETY: a locked folio attached to a ferrofs mapping (type invariant): its host is a
        // live ferrofs inode, which outlives the folio's attachment.
        unsafe { Inode::from_raw(shim::ferrofs_folio_inode(self.raw())) }
    }
}

/// A readahead request: the inode and a batch of locked new folios to fill.
///
/// # Invariants
///
/// The request is live for the lifetime of the reference, for a ferrofs regular file.
#[repr(transparent)]
pub(crate) struct Readahead(Opaque<bindings::readahead_control>);

impl Readahead {
    /// # Safety
    ///
    /// `p` is the request the VM passes to `readahead`, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::readahead_control) -> &'a Readahead {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<Readahead>() }
    }

    /// The file's inode.
    pub(crate) fn inode(&self) -> &Inode {
        // SAFETY: the request is live (type invariant); its mapping's host is a live ferrofs
        // inode while it is.
        unsafe { Inode::from_raw(shim::ferrofs_readahead_inode(self.0.get())) }
    }

    /// The next folio of the batch (`readahead_folio`), locked and ours to unlock; the page
    /// cache keeps it referenced until it is unlocked.
    pub(crate) fn next_folio(&self) -> Option<LockedFolio> {
        // SAFETY: the request is live (type invariant); each folio it hands out is locked, and
        // referenced by the page cache until unlocked, so the wrapper's lock and borrow hold.
        unsafe { LockedFolio::from_locked(shim::ferrofs_readahead_folio(self.0.get())) }
    }
}

/// The dirty folios of one `writepages` call (`writeback_iter`).
///
/// # Invariants
///
/// `mapping` and `wbc` are the live arguments of a `writepages` call of a ferrofs file, for
/// `'a`; `prev` is null or the folio the iterator handed out last.
pub(crate) struct Writeback<'a> {
    mapping: *mut bindings::address_space,
    wbc: *mut bindings::writeback_control,
    prev: *mut bindings::folio,
    /// The iterator's error slot (`writeback_iter`'s `error`).
    pub(crate) err: c_int,
    _args: core::marker::PhantomData<&'a ()>,
}

impl<'a> Writeback<'a> {
    /// # Safety
    ///
    /// `mapping` and `wbc` are the arguments of a `writepages` call of a ferrofs file, for `'a`.
    pub(crate) unsafe fn new(mapping: *mut bindings::address_space, wbc: *mut bindings::writeback_control) -> Self {
        Writeback { mapping, wbc, prev: ptr::null_mut(), err: 0, _args: core::marker::PhantomData }
    }

    /// The file's inode.
    pub(crate) fn inode(&self) -> &'a Inode {
        // SAFETY: the mapping of a `writepages` call of a ferrofs file is live for `'a` (type
        // invariant), and so is its host.
        unsafe { Inode::from_mapping(self.mapping) }
    }

    /// The next dirty folio, locked and with its dirty bit cleared, ours to unlock (and put: the
    /// wrapper takes its own reference, as the iterator's lasts only while its batch does).
    pub(crate) fn next_folio(&mut self) -> Option<LockedFolio> {
        // SAFETY: the arguments are live (type invariant); `prev` is null or the folio handed
        // out last (whose lock the iterator does not touch).
        self.prev = unsafe { bindings::writeback_iter(self.mapping, self.wbc, self.prev, &mut self.err) };
        // SAFETY: a locked folio, ours to unlock, referenced by the iterator's batch until the
        // next call, which `take_ref` outlasts.
        let mut f = unsafe { LockedFolio::from_locked(self.prev) }?;
        f.take_ref();
        Some(f)
    }
}

impl Inode {
    /// The inode owning a locked folio's mapping.
    ///
    /// # Safety
    ///
    /// `folio` is a folio of a ferrofs mapping, locked (so attached) for `'a`.
    pub(crate) unsafe fn from_locked_folio<'a>(folio: *mut bindings::folio) -> &'a Inode {
        // SAFETY: per the contract, the host of the folio's mapping is a live ferrofs inode.
        unsafe { Inode::from_raw(shim::ferrofs_folio_inode(folio)) }
    }
}

/// `address_space_operations::migrate_folio`: the page cache's own (`filemap_migrate_folio`,
/// which moves the budget mark with the folio).
///
/// # Safety
///
/// Called by the VM only, per its `migrate_folio` contract.
pub(crate) unsafe extern "C" fn migrate_folio(
    mapping: *mut bindings::address_space,
    dst: *mut bindings::folio,
    src: *mut bindings::folio,
    mode: bindings::migrate_mode,
) -> c_int {
    // SAFETY: the VM's migrate_folio contract, passed on unchanged.
    unsafe { shim::ferrofs_migrate_folio(mapping, dst, src, mode) }
}
