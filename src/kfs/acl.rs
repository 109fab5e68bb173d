// SPDX-License-Identifier: GPL-2.0

//! POSIX ACLs: `Acl` (an owned reference to a `struct posix_acl`, released on drop) with its
//! conversions to and from the xattr form, the VFS's generic ACL helpers that ferrofs calls
//! (`posix_acl_create`, `posix_acl_update_mode`, `__posix_acl_chmod`) and the inode's ACL cache
//! (`get_inode_acl`, `set_cached_acl`).

use core::ptr::{self, NonNull};

use kernel::bindings;
use kernel::error::from_err_ptr;
use kernel::ffi::c_int;
use kernel::prelude::*;

use crate::kfs::{Idmap, Inode};
use crate::shim;

/// The two kinds of ACL (`ACL_TYPE_ACCESS`, `ACL_TYPE_DEFAULT`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum AclType {
    Access,
    Default,
}

/// `ACL_TYPE_ACCESS` and `ACL_TYPE_DEFAULT` (include/uapi/linux/posix_acl.h; not in `bindings`).
const ACL_TYPE_ACCESS: c_int = 0x8000;
const ACL_TYPE_DEFAULT: c_int = 0x4000;

impl AclType {
    /// The type the VFS passes, or `None` for another value.
    pub(crate) fn from_raw(t: c_int) -> Option<AclType> {
        match t {
            ACL_TYPE_ACCESS => Some(AclType::Access),
            ACL_TYPE_DEFAULT => Some(AclType::Default),
            _ => None,
        }
    }

    fn raw(self) -> c_int {
        match self {
            AclType::Access => ACL_TYPE_ACCESS,
            AclType::Default => ACL_TYPE_DEFAULT,
        }
    }

    /// The xattr the ACL is stored in (docs/format.md).
    pub(crate) fn xattr_name(self) -> &'static [u8] {
        match self {
            AclType::Access => b"system.posix_acl_access",
            AclType::Default => b"system.posix_acl_default",
        }
    }
}

/// An owned reference to a POSIX ACL.
///
/// # Invariants
///
/// The pointer is a valid `struct posix_acl` whose reference this value owns (released on drop).
pub(crate) struct Acl(NonNull<bindings::posix_acl>);

impl Acl {
    /// # Safety
    ///
    /// `p` is null or a valid ACL whose reference passes to the result.
    unsafe fn from_owned(p: *mut bindings::posix_acl) -> Option<Acl> {
        NonNull::new(p).map(Acl)
    }

    /// A new reference to the ACL at `p` (null: `None`), which the caller only borrows.
    ///
    /// # Safety
    ///
    /// `p` is null or a valid ACL, referenced by the caller for the call.
    pub(crate) unsafe fn dup_raw(p: *mut bindings::posix_acl) -> Option<Acl> {
        let p = NonNull::new(p)?;
        // SAFETY: a valid ACL (contract): one more reference, owned by the result.
        unsafe { shim::ferrofs_posix_acl_dup(p.as_ptr()) };
        Some(Acl(p))
    }

    /// The ACL in a stored xattr value (the kernel's `posix_acl_xattr` form, ids in the initial
    /// user namespace, as ext4 and UBIFS store it); `None` for one without entries. A malformed
    /// value is `EINVAL` (or `EOPNOTSUPP` for an unknown version).
    pub(crate) fn from_xattr(v: &[u8]) -> Result<Option<Acl>> {
        // SAFETY: `v` is readable for its length for the call; the result is null, an error
        // pointer or a new ACL whose reference passes to us.
        let p = unsafe { shim::ferrofs_posix_acl_from_xattr(v.as_ptr().cast(), v.len()) };
        let p = from_err_ptr(p)?;
        // SAFETY: null or a new reference (above).
        Ok(unsafe { Acl::from_owned(p) })
    }

    /// The xattr form of the ACL, to store.
    pub(crate) fn to_xattr(&self) -> Result<KVec<u8>> {
        // SAFETY: a valid ACL (type invariant); a null buffer asks for the size.
        let n = unsafe { shim::ferrofs_posix_acl_to_xattr(self.0.as_ptr(), ptr::null_mut(), 0) };
        let n = usize::try_from(n).map_err(|_| Error::from_errno(n))?;
        let mut v = KVec::from_elem(0u8, n, GFP_KERNEL)?;
        // SAFETY: a valid ACL; `v` holds `n` writable bytes.
        let r = unsafe { shim::ferrofs_posix_acl_to_xattr(self.0.as_ptr(), v.as_mut_ptr().cast(), n) };
        if r < 0 {
            return Err(Error::from_errno(r));
        }
        Ok(v)
    }

    /// `__posix_acl_chmod`: a copy of this ACL with its owner, group-class (the mask, if any)
    /// and other entries set from the permission bits of `mode`, as a chmod does.
    pub(crate) fn chmod(self, mode: u32) -> Result<Acl> {
        let mut p = self.into_raw();
        // SAFETY: `p` is a valid ACL whose reference we pass in: `__posix_acl_chmod` releases it
        // and stores in `p` a new reference to the copy, or null on error.
        let r = unsafe { shim::ferrofs_posix_acl_chmod(&mut p, mode as bindings::umode_t) };
        // SAFETY: null or a new reference (above).
        let acl = unsafe { Acl::from_owned(p) };
        if r < 0 {
            return Err(Error::from_errno(r));
        }
        acl.ok_or(ENOMEM)
    }

    /// Hand the reference to the caller (`get_inode_acl` returns it to the VFS).
    pub(crate) fn into_raw(self) -> *mut bindings::posix_acl {
        let p = self.0.as_ptr();
        core::mem::forget(self);
        p
    }
}

impl Drop for Acl {
    fn drop(&mut self) {
        // SAFETY: drops the reference we own (type invariant).
        unsafe { shim::ferrofs_posix_acl_release(self.0.as_ptr()) }
    }
}

/// `posix_acl_create` for a new inode of `*mode` (type and permission bits) in `dir`: with a
/// default ACL in `dir`, `*mode` is masked by it and the result is (the default ACL, for a
/// directory; the access ACL, unless the mode says it all); without one, `*mode` loses the
/// umask. Call without the engine lock (a miss in `dir`'s ACL cache reads the engine).
pub(crate) fn acl_create(dir: &Inode, mode: &mut u32) -> Result<(Option<Acl>, Option<Acl>)> {
    let mut m = *mode as bindings::umode_t;
    let (mut default, mut access) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: `dir` is live (type invariant); the out pointers are ours. On success each of
    // them is null or a new reference that passes to us; on error both are null.
    let r = unsafe { shim::ferrofs_posix_acl_create(dir.as_ptr(), &mut m, &mut default, &mut access) };
    // SAFETY: null or new references (above).
    let acls = unsafe { (Acl::from_owned(default), Acl::from_owned(access)) };
    if r < 0 {
        return Err(Error::from_errno(r));
    }
    *mode = u32::from(m);
    Ok(acls)
}

impl Inode {
    /// The ACL of `ty` through the VFS's cache (`get_inode_acl`; a miss calls our
    /// `get_inode_acl`, which reads the engine: call without the engine lock).
    pub(crate) fn acl(&self, ty: AclType) -> Result<Option<Acl>> {
        // SAFETY: the inode is live (type invariant); the result is null, an error pointer or
        // a new reference that passes to us.
        let p = from_err_ptr(unsafe { shim::ferrofs_get_inode_acl(self.as_ptr(), ty.raw()) })?;
        // SAFETY: null or a new reference (above).
        Ok(unsafe { Acl::from_owned(p) })
    }

    /// `set_cached_acl`: the VFS's cache of the inode's ACL of `ty` (`None`: it has none).
    pub(crate) fn cache_acl(&self, ty: AclType, acl: Option<&Acl>) {
        let p = acl.map_or(ptr::null_mut(), |a| a.0.as_ptr());
        // SAFETY: the inode is live (type invariant); `p` is null or a valid ACL, of which the
        // cache takes a reference of its own.
        unsafe { shim::ferrofs_set_cached_acl(self.as_ptr(), ty.raw(), p) }
    }

    /// `posix_acl_update_mode` for setting access ACL `acl` on this inode through `idmap`:
    /// the new mode (its permission bits from the ACL; setgid dropped as a chmod would), and
    /// whether the ACL is still needed (false when the mode says it all).
    pub(crate) fn acl_update_mode(&self, idmap: &Idmap, acl: &Acl) -> Result<(u32, bool)> {
        let mut mode: bindings::umode_t = 0;
        let mut p = acl.0.as_ptr();
        // SAFETY: both are live (type invariants); `p` is a valid ACL that the call only reads
        // and may set to null (no reference changes hands).
        let r = unsafe { shim::ferrofs_posix_acl_update_mode(idmap.as_ptr(), self.as_ptr(), &mut mode, &mut p) };
        if r < 0 {
            return Err(Error::from_errno(r));
        }
        Ok((u32::from(mode), !p.is_null()))
    }
}
