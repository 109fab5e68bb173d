// SPDX-License-Identifier: GPL-2.0

//! Inode flags: `FileAttr` (the `struct fileattr` of FS_IOC_GETFLAGS/SETFLAGS and
//! FS_IOC_FSGETXATTR/FSSETXATTR) and the VFS inode's `S_*` flags (`inode_set_flags`).

use kernel::bindings;
use kernel::types::Opaque;

use crate::kfs::Inode;
use crate::shim;

/// The attributes a `fileattr_get` fills or a `fileattr_set` applies.
///
/// # Invariants
///
/// Live, and not used by others, for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct FileAttr(Opaque<bindings::fileattr>);

impl FileAttr {
    /// # Safety
    ///
    /// `p` is the `fileattr` the VFS passes to `fileattr_get`/`fileattr_set`, live for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::fileattr) -> &'a FileAttr {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<FileAttr>() }
    }

    /// The `FS_*_FL` flags (for FS_IOC_FSSETXATTR, the VFS's translation of the common xflags).
    pub(crate) fn flags(&self) -> u32 {
        // SAFETY: live (type invariant).
        unsafe { shim::ferrofs_fileattr_flags(self.0.get()) }
    }

    /// Whether an FS_IOC_FSSETXATTR asks for more than the flags (`fileattr_has_fsx`: xflags
    /// without an `FS_*_FL` equivalent, an extent size, a project id).
    pub(crate) fn has_fsx(&self) -> bool {
        // SAFETY: live (type invariant).
        unsafe { shim::ferrofs_fileattr_has_fsx(self.0.get()) }
    }

    /// `fileattr_fill_flags`: report `flags` (and the xflags they imply).
    pub(crate) fn fill_flags(&self, flags: u32) {
        // SAFETY: live and ours to fill (type invariant).
        unsafe { shim::ferrofs_fileattr_fill_flags(self.0.get(), flags) }
    }
}

impl Inode {
    /// `inode_set_flags(inode, flags, mask)`: set the `S_*` flags in `mask` to those of `flags`
    /// (the VFS enforces `S_IMMUTABLE`, `S_APPEND`, `S_NOATIME`, `S_SYNC`). Under the inode
    /// lock, or on a new inode.
    pub(crate) fn set_iflags(&self, flags: u32, mask: u32) {
        // SAFETY: the inode is live (type invariant); `inode_set_flags` updates `i_flags`
        // atomically.
        unsafe { bindings::inode_set_flags(self.as_ptr(), flags, mask) }
    }
}
