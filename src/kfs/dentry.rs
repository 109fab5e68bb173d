// SPDX-License-Identifier: GPL-2.0

//! `Dentry`: a borrowed VFS dentry.

use kernel::bindings;
use kernel::types::Opaque;

use crate::kfs::{Inode, InodeRef};
use crate::shim;

/// A dentry handed to a VFS callback.
///
/// # Invariants
///
/// The dentry is live while the reference is, and its name is stable (the VFS keeps the
/// dentry's name stable across the directory operations that receive it: the parent is locked).
#[repr(transparent)]
pub(crate) struct Dentry(Opaque<bindings::dentry>);

impl Dentry {
    /// # Safety
    ///
    /// `p` is a valid dentry that stays live, with a stable name, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::dentry) -> &'a Dentry {
        // SAFETY: `Dentry` is a transparent wrapper of `bindings::dentry`; valid per the contract.
        unsafe { &*p.cast::<Dentry>() }
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::dentry {
        self.0.get()
    }

    /// The name as bytes.
    pub(crate) fn name(&self) -> &[u8] {
        let mut len = 0u32;
        // SAFETY: the dentry is live (type invariant).
        let p = unsafe { shim::ferrofs_dentry_name(self.as_ptr(), &mut len) };
        // SAFETY: `d_name.name` points at `d_name.len` bytes, stable while `self` is borrowed
        // (type invariant).
        unsafe { core::slice::from_raw_parts(p, len as usize) }
    }

    /// The dentry's inode, or `None` for a negative dentry.
    pub(crate) fn inode(&self) -> Option<&Inode> {
        // SAFETY: the dentry is live (type invariant).
        let i = unsafe { shim::ferrofs_d_inode(self.as_ptr()) };
        if i.is_null() {
            return None;
        }
        // SAFETY: a positive dentry holds a reference to its ferrofs inode while it is live.
        Some(unsafe { Inode::from_raw(i) })
    }

    /// `d_splice_alias` of this negative dentry (from `lookup`) with `inode` (whose reference
    /// it takes), or with none: a negative entry. Returns what `lookup` hands back to the VFS
    /// (null, another dentry, or an error pointer).
    pub(crate) fn splice_alias(&self, inode: Option<InodeRef>) -> *mut bindings::dentry {
        let i = inode.map_or(core::ptr::null_mut(), InodeRef::into_raw);
        // SAFETY: the dentry is live (type invariant); `i` is null or a referenced inode, whose
        // reference `d_splice_alias` consumes.
        unsafe { bindings::d_splice_alias(i, self.as_ptr()) }
    }

    /// `d_instantiate`: make this negative dentry (of a create or link) point at `inode`,
    /// whose reference it takes.
    pub(crate) fn instantiate(&self, inode: InodeRef) {
        // SAFETY: the dentry is live (type invariant); the reference passes to it.
        unsafe { bindings::d_instantiate(self.as_ptr(), inode.into_raw()) }
    }
}
