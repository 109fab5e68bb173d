// SPDX-License-Identifier: GPL-2.0

//! `FsContext` (a mount or remount in the making: our options, the source, errors for the
//! caller, `get_tree_mtd`/`get_tree_bdev`) and `FsParameter` (one mount option).

use core::ptr;

use kernel::bindings;
use kernel::ffi::c_int;
use kernel::prelude::*;
use kernel::types::Opaque;

use crate::context::MountOpts;
use crate::kfs::{SuperBlock, SB_RDONLY};
use crate::shim;

/// A ferrofs `fs_context`.
///
/// # Invariants
///
/// The context is live for the lifetime of the reference; its `fs_private` is null or a
/// `KBox<MountOpts>` stored by `init`, owned by the context until `free`. The VFS runs one
/// callback of a context at a time, so the options are never accessed concurrently (and no
/// reference to them outlives a method call).
#[repr(transparent)]
pub(crate) struct FsContext(Opaque<bindings::fs_context>);

impl FsContext {
    /// # Safety
    ///
    /// `fc` must be a live `fs_context` of our filesystem type handed to one of its callbacks
    /// (`init_fs_context`, the context operations, `fill_super`), for `'a`.
    pub(crate) unsafe fn from_raw<'a>(fc: *mut bindings::fs_context) -> &'a FsContext {
        // SAFETY: `FsContext` is a transparent wrapper; valid per the contract.
        unsafe { &*fc.cast::<FsContext>() }
    }

    fn as_ptr(&self) -> *mut bindings::fs_context {
        self.0.get()
    }

    fn opts_ptr(&self) -> *mut MountOpts {
        // SAFETY: the context is live (type invariant).
        unsafe { shim::ferrofs_fc_fs_private(self.as_ptr()) }.cast()
    }

    /// Set up a new context (`init_fs_context`): our context operations and `opts`.
    pub(crate) fn init(&self, opts: KBox<MountOpts>) {
        self.free();
        // SAFETY: the context is live (type invariant); the box passes to `fs_private`, which
        // `free` takes back.
        unsafe {
            shim::ferrofs_fc_set_fs_private(self.as_ptr(), KBox::into_raw(opts).cast());
            shim::ferrofs_fc_set_ops(self.as_ptr());
        }
    }

    /// Drop the options (`fs_context_operations::free`).
    pub(crate) fn free(&self) {
        let p = self.opts_ptr();
        if !p.is_null() {
            // SAFETY: a non-null `fs_private` is the box `init` stored (type invariant); it is
            // nulled right after, so it is freed once.
            unsafe {
                drop(KBox::from_raw(p));
                shim::ferrofs_fc_set_fs_private(self.as_ptr(), ptr::null_mut());
            }
        }
    }

    /// The mount options parsed so far (`None` before `init` or after `free`).
    pub(crate) fn opts(&self) -> Option<MountOpts> {
        let p = self.opts_ptr();
        // SAFETY: a non-null `fs_private` is our live box, not accessed concurrently (type
        // invariant).
        (!p.is_null()).then(|| unsafe { *p })
    }

    /// Replace the mount options; false (and nothing stored) before `init` or after `free`.
    pub(crate) fn set_opts(&self, opts: MountOpts) -> bool {
        let p = self.opts_ptr();
        if p.is_null() {
            return false;
        }
        // SAFETY: as in `opts`.
        unsafe { *p = opts };
        true
    }

    /// The mount source (`mtd0`, `/dev/vda`), if any.
    pub(crate) fn source(&self) -> Option<&[u8]> {
        // SAFETY: the context is live (type invariant).
        let s = unsafe { shim::ferrofs_fc_source(self.as_ptr()) };
        // SAFETY: a non-null source is a NUL-terminated string owned by the context, which
        // outlives `&self`.
        (!s.is_null()).then(|| unsafe { CStr::from_char_ptr(s) }.as_bytes())
    }

    /// The new superblock flags asked for include `SB_RDONLY`.
    pub(crate) fn wants_rdonly(&self) -> bool {
        // SAFETY: the context is live (type invariant).
        let flags = unsafe { shim::ferrofs_fc_sb_flags(self.as_ptr()) };
        flags & SB_RDONLY != 0
    }

    /// The mounted superblock a reconfiguration (remount) context is for, `None` for a new
    /// mount. The VFS holds its `s_umount` during `reconfigure`.
    pub(crate) fn root_sb(&self) -> Option<&SuperBlock> {
        // SAFETY: the context is live (type invariant).
        let root = unsafe { shim::ferrofs_fc_root(self.as_ptr()) };
        if root.is_null() {
            return None;
        }
        // SAFETY: a reconfiguration context holds a reference to the root dentry of a mounted
        // ferrofs (our `fill_super` attached its state), whose superblock outlives the context.
        Some(unsafe { SuperBlock::from_raw((*root).d_sb) })
    }

    /// Report `msg` to the caller (`invalfc`, which copies it); returns the error (EINVAL).
    pub(crate) fn error(&self, msg: &CStr) -> Error {
        // SAFETY: the context is live (type invariant); the message is NUL-terminated.
        Error::from_errno(unsafe { shim::ferrofs_fc_error(self.as_ptr(), msg.as_char_ptr()) })
    }

    /// `get_tree_mtd`: resolve the `mtdN`/`mtd:NAME` source and call `fill` with `s_mtd` set.
    pub(crate) fn get_tree_mtd(&self, fill: FillSuper) -> c_int {
        // SAFETY: the context is live (type invariant); `fill` has the callback's type.
        unsafe { shim::ferrofs_get_tree_mtd(self.as_ptr(), fill) }
    }

    /// `get_tree_bdev`: open the block device named by the source exclusively and call `fill`
    /// with `s_bdev` set.
    pub(crate) fn get_tree_bdev(&self, fill: FillSuper) -> c_int {
        // SAFETY: the context is live (type invariant); `fill` has the callback's type.
        unsafe { shim::ferrofs_get_tree_bdev(self.as_ptr(), fill) }
    }
}

/// A `fill_super` callback for `get_tree_mtd`/`get_tree_bdev`.
pub(crate) type FillSuper = shim::FillSuper;

/// One mount option being parsed.
///
/// # Invariants
///
/// The parameter is live for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct FsParameter(Opaque<bindings::fs_parameter>);

impl FsParameter {
    /// # Safety
    ///
    /// `p` must be a live parameter handed to `parse_param`, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::fs_parameter) -> &'a FsParameter {
        // SAFETY: `FsParameter` is a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<FsParameter>() }
    }

    fn as_ptr(&self) -> *mut bindings::fs_parameter {
        self.0.get()
    }

    /// The option's name.
    pub(crate) fn key(&self) -> &CStr {
        // SAFETY: the key of a live parameter is a NUL-terminated string it owns.
        unsafe { CStr::from_char_ptr(shim::ferrofs_param_key(self.as_ptr())) }
    }

    /// The option's value, if it is a string (`name=value`; a flag has none).
    pub(crate) fn string(&self) -> Option<&[u8]> {
        // SAFETY: the parameter is live (type invariant).
        if !unsafe { shim::ferrofs_param_is_string(self.as_ptr()) } {
            return None;
        }
        // SAFETY: the parameter is live (type invariant).
        let s = unsafe { shim::ferrofs_param_string(self.as_ptr()) };
        // SAFETY: a non-null value of a string parameter is a NUL-terminated string it owns.
        (!s.is_null()).then(|| unsafe { CStr::from_char_ptr(s) }.as_bytes())
    }
}
