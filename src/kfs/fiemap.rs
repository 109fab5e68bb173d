// SPDX-License-Identifier: GPL-2.0

//! `Fiemap`: the extent list of a `FS_IOC_FIEMAP` call (`struct fiemap_extent_info`, opaque in
//! the bindings), filled through `fiemap_prep` and `fiemap_fill_next_extent`.

use kernel::bindings;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::types::Opaque;

use crate::kfs::Inode;
use crate::shim;

/// The last extent of the file (`FIEMAP_EXTENT_LAST`, uapi `linux/fiemap.h`).
pub(crate) const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// The location of the data is not known (`FIEMAP_EXTENT_UNKNOWN`): `fe_physical` is 0.
pub(crate) const FIEMAP_EXTENT_UNKNOWN: u32 = 0x2;

/// The extent list of one `fiemap` call.
///
/// # Invariants
///
/// Live for the lifetime of the reference, used by this call only. Filling it may copy to
/// user memory: never under the engine lock.
#[repr(transparent)]
pub(crate) struct Fiemap(Opaque<bindings::fiemap_extent_info>);

impl Fiemap {
    /// # Safety
    ///
    /// `p` is the extent list the VFS passes to `inode_operations::fiemap`, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::fiemap_extent_info) -> &'a Fiemap {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<Fiemap>() }
    }

    /// `fiemap_prep` with no flag beyond `FIEMAP_FLAG_SYNC` (which it honours: the file is
    /// written back first): `EBADR` for other flags; returns `len` clamped to the largest
    /// file size.
    pub(crate) fn prep(&self, inode: &Inode, start: u64, len: u64) -> Result<u64> {
        let mut len = len;
        // SAFETY: the list is live (type invariant) and `inode` is the file it describes.
        to_result(unsafe { shim::fiemap_prep(inode.as_ptr(), self.0.get(), start, &mut len, 0) })?;
        Ok(len)
    }

    /// `fiemap_fill_next_extent`: add one extent; `Ok(true)` when the caller must stop (the
    /// user's array is full, or `flags` has `FIEMAP_EXTENT_LAST`).
    pub(crate) fn fill(&self, logical: u64, physical: u64, len: u64, flags: u32) -> Result<bool> {
        // SAFETY: the list is live (type invariant); this copies to user memory, which the
        // callers do without the engine lock.
        let r = unsafe { shim::fiemap_fill_next_extent(self.0.get(), logical, physical, len, flags) };
        to_result(r)?;
        Ok(r == 1)
    }
}
