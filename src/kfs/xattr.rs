// SPDX-License-Identifier: GPL-2.0

//! Extended attributes: `XattrHandler` (one namespace of the handler table in shim.c),
//! `Xattrs` (the attributes an LSM gives a new inode) and `init_security`.

use core::ptr;

use kernel::bindings;
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;
use kernel::types::Opaque;

use crate::kfs::{Dentry, Inode};
use crate::shim;
use crate::xattr::SecCtx;

/// One of our xattr handlers (`user.`, `trusted.`, `security.`).
///
/// # Invariants
///
/// One of the static handlers of shim.c's table.
#[repr(transparent)]
pub(crate) struct XattrHandler(Opaque<bindings::xattr_handler>);

impl XattrHandler {
    /// # Safety
    ///
    /// `p` is a ferrofs handler, as the VFS passes to its `get`/`set`.
    pub(crate) unsafe fn from_raw<'a>(p: *const bindings::xattr_handler) -> &'a XattrHandler {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<XattrHandler>() }
    }

    /// The namespace prefix ("user.").
    pub(crate) fn prefix(&self) -> &[u8] {
        // SAFETY: a static handler (type invariant) with a static NUL-terminated prefix.
        unsafe { CStr::from_char_ptr(shim::ferrofs_xattr_handler_prefix(self.0.get())) }.as_bytes()
    }
}

/// The array of attributes an LSM hands to `initxattrs`, ended by an entry with a null name.
///
/// # Invariants
///
/// Live for the lifetime of the reference, ended as above.
#[repr(transparent)]
pub(crate) struct Xattrs(Opaque<bindings::xattr>);

impl Xattrs {
    /// # Safety
    ///
    /// `p` is the array the LSM passes to `initxattrs`, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *const bindings::xattr) -> &'a Xattrs {
        // SAFETY: a transparent wrapper of the first entry; valid per the contract.
        unsafe { &*p.cast::<Xattrs>() }
    }

    /// Entry `i` as (name suffix, value), or `None` at the end. Call with `i` from 0 up, stopping
    /// at the first `None`.
    pub(crate) fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        let mut value: *mut c_void = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: the array is live (type invariant) and entries up to its end are readable;
        // the caller stops at the first null name, so `i` never passes the end.
        let name = unsafe { shim::ferrofs_xattr_entry(self.0.get(), i, &mut value, &mut len) };
        if name.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated suffix owned by the LSM for the call.
        let name = unsafe { CStr::from_char_ptr(name) }.as_bytes();
        let value: &[u8] = if value.is_null() || len == 0 {
            &[]
        } else {
            // SAFETY: `value` holds `len` bytes for the call.
            unsafe { core::slice::from_raw_parts(value as *const u8, len) }
        };
        Some((name, value))
    }
}

/// `security_inode_init_security` for a new `inode` named `dentry` in `dir`: the LSM's label,
/// stored through `ferrofs_initxattrs` (src/xattr.rs) with `ctx`. Returns 0 or an errno.
pub(crate) fn init_security(inode: &Inode, dir: &Inode, dentry: &Dentry, ctx: &mut SecCtx<'_>) -> c_int {
    // SAFETY: all live (type invariants); `ctx` outlives the call, in which `ferrofs_initxattrs`
    // reads it as the `SecCtx` it is.
    unsafe { shim::ferrofs_init_security(inode.as_ptr(), dir.as_ptr(), dentry.as_ptr(), ptr::from_mut(ctx).cast()) }
}
