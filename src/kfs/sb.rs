// SPDX-License-Identifier: GPL-2.0

//! Superblock helpers.

use kernel::bindings;

use crate::super_::SbInfo;

/// The `SbInfo` of a mounted superblock.
///
/// # Safety
///
/// `sb` must be a ferrofs superblock between `fill_super` and `put_super`.
pub(crate) unsafe fn sbi<'a>(sb: *mut bindings::super_block) -> &'a SbInfo {
    // SAFETY: per the contract, `s_fs_info` points at the `SbInfo` set up by `fill_super`,
    // which lives until `put_super`.
    unsafe { &*((*sb).s_fs_info as *const SbInfo) }
}

/// The `SbInfo` of the filesystem holding `inode`.
///
/// # Safety
///
/// `inode` must be a live ferrofs inode.
pub(crate) unsafe fn isbi<'a>(inode: *mut bindings::inode) -> &'a SbInfo {
    // SAFETY: a live inode's `i_sb` is its mounted superblock.
    unsafe { sbi((*inode).i_sb) }
}
