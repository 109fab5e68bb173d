// SPDX-License-Identifier: GPL-2.0

//! Inode helpers.

use kernel::bindings;

use crate::engine::format::Timespec;

/// The current time, as the VFS would stamp `inode`.
///
/// # Safety
///
/// `inode` must be valid.
pub(crate) unsafe fn now(inode: *mut bindings::inode) -> Timespec {
    // SAFETY: `inode` is valid per the contract.
    let t = unsafe { bindings::current_time(inode) };
    Timespec { sec: t.tv_sec, nsec: t.tv_nsec as u32 }
}
