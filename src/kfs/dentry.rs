// SPDX-License-Identifier: GPL-2.0

//! Dentry helpers.

use kernel::bindings;

use crate::shim;

/// The name of `dentry` as bytes.
///
/// # Safety
///
/// `d` must be valid; the name is valid while the caller holds the dentry (the VFS keeps it
/// stable across the directory operations that receive it).
pub(crate) unsafe fn dname<'a>(d: *const bindings::dentry) -> &'a [u8] {
    let mut len = 0u32;
    // SAFETY: `d` is valid per the contract.
    let p = unsafe { shim::ferrofs_dentry_name(d, &mut len) };
    // SAFETY: `d_name.name` points at `d_name.len` bytes, stable per the contract.
    unsafe { core::slice::from_raw_parts(p, len as usize) }
}
