// SPDX-License-Identifier: GPL-2.0

//! `SuperBlock`: a mounted ferrofs superblock.

use core::pin::Pin;
use kernel::alloc::KBox;
use kernel::bindings;
use kernel::types::{ForeignOwnable, Opaque};

use crate::super_::SbInfo;
use crate::shim;

/// A ferrofs superblock between `fill_super` (once `s_fs_info` is set) and `put_super`.
///
/// # Invariants
///
/// `s_fs_info` points at the `SbInfo` set up by `fill_super`, which lives until `put_super`,
/// and the superblock outlives the reference.
#[repr(transparent)]
pub(crate) struct SuperBlock(Opaque<bindings::super_block>);

impl SuperBlock {
    /// # Safety
    ///
    /// `sb` must be a ferrofs superblock between `fill_super` and `put_super` for `'a`.
    pub(crate) unsafe fn from_raw<'a>(sb: *mut bindings::super_block) -> &'a SuperBlock {
        // SAFETY: `SuperBlock` is a transparent wrapper; valid per the contract.
        unsafe { &*sb.cast::<SuperBlock>() }
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::super_block {
        self.0.get()
    }

    /// The per-superblock state.
    pub(crate) fn info(&self) -> &SbInfo {
        // SAFETY: `s_fs_info` is the live pinned box of `SbInfo` that `fill_super` passed
        // through `into_foreign` and `put_super` takes back after the superblock's last use
        // (type invariant), so it outlives `&self`.
        unsafe { <Pin<KBox<SbInfo>> as ForeignOwnable>::borrow((*self.as_ptr()).s_fs_info) }.get_ref()
    }

    /// Whether the superblock is mounted read-only (`sb_rdonly`).
    pub(crate) fn rdonly(&self) -> bool {
        // SAFETY: the superblock is live (type invariant).
        unsafe { shim::ferrofs_sb_rdonly(self.as_ptr()) }
    }
}

/// `SB_NOSEC` (include/linux/fs.h, `BIT(28)`, not in `bindings`): the VFS may mark inodes
/// `S_NOSEC` once it found no setuid bit and no `security.capability`, so a write stops probing
/// that xattr through the engine every time.
pub(crate) const SB_NOSEC: kernel::ffi::c_ulong = 1 << 28;

/// The `SbInfo` of a mounted superblock.
///
/// # Safety
///
/// `sb` must be a ferrofs superblock between `fill_super` and `put_super`.
pub(crate) unsafe fn sbi<'a>(sb: *mut bindings::super_block) -> &'a SbInfo {
    // SAFETY: per the contract.
    unsafe { SuperBlock::from_raw(sb) }.info()
}
