// SPDX-License-Identifier: GPL-2.0

//! POSIX ACLs through the kernel's generic helpers: the `get_inode_acl` and `set_acl` inode
//! operations, the ACLs a new inode inherits from its directory's default ACL (`NewAcls`, used
//! by `make_node`) and the access ACL a chmod changes (`ChmodAcl`, used by `setattr`). An ACL is
//! the xattr `system.posix_acl_access` or `system.posix_acl_default` in the kernel's xattr form
//! (docs/format.md); an ACL and the mode it implies always change in one atomic engine call
//! (`Engine::setattr_xattrs`).

use core::ptr;

use kernel::bindings;
use kernel::error::from_result;
use kernel::ffi::c_int;
use kernel::prelude::*;

use crate::engine::error::Error as EError;
use crate::engine::format::Timespec;
use crate::engine::{SetAttr, XattrChange};
use crate::kfs::{acl_create, kerr, Acl, AclType, Dentry, Idmap, Inode};
use crate::super_::Fs;

/// `inode_operations::get_inode_acl`: the ACL of `ty` from its xattr (the VFS caches it).
///
/// # Safety
///
/// Called by the VFS only, with a live ferrofs inode.
pub(crate) unsafe extern "C" fn get_inode_acl(inode: *mut bindings::inode, ty: c_int, rcu: bool) -> *mut bindings::posix_acl {
    if rcu {
        // RCU walk: the engine lock may sleep.
        return ECHILD.to_ptr();
    }
    // SAFETY: VFS get_inode_acl contract: a live ferrofs inode, for the call.
    let inode = unsafe { Inode::from_raw(inode) };
    let Some(ty) = AclType::from_raw(ty) else {
        return EINVAL.to_ptr();
    };
    match read_acl(inode, ty) {
        Ok(Some(acl)) => acl.into_raw(),
        Ok(None) => ptr::null_mut(),
        Err(e) => e.to_ptr(),
    }
}

/// The stored ACL of `ty`, if any. A stored value that is not an ACL is damaged metadata
/// (EUCLEAN, one message), as a damaged inode is.
fn read_acl(inode: &Inode, ty: AclType) -> Result<Option<Acl>> {
    let (info, ino, name) = (inode.info(), inode.ino(), ty.xattr_name());
    let (v, n) = {
        let mut fs = info.lock();
        let n = match fs.getxattr_len(ino, name) {
            Ok(n) => n,
            Err(EError::NoData) => return Ok(None),
            Err(e) => return Err(kerr(e)),
        };
        let mut v = KVVec::from_elem(0u8, n, GFP_KERNEL)?;
        let n = fs.getxattr(ino, name, v.as_mut_slice()).map_err(kerr)?;
        (v, n)
    };
    let v = v.as_slice().get(..n).ok_or(EIO)?;
    Acl::from_xattr(v).map_err(|e| {
        if e == EINVAL || e.to_errno() == -(bindings::EOPNOTSUPP as c_int) {
            let which = if ty == AclType::Access { "access" } else { "default" };
            pr_err!("{}: corrupt {} ACL on inode {} ({} bytes)\n", info.dev, which, ino, v.len());
            Error::from_errno(-(bindings::EUCLEAN as c_int))
        } else {
            e
        }
    })
}

/// `inode_operations::set_acl`: store the ACL of `ty`, or remove it when `acl` is null; an
/// access ACL also sets the mode it implies (`posix_acl_update_mode`, which drops an ACL that
/// the mode says all of), in the same atomic engine call.
///
/// # Safety
///
/// Called by the VFS only (`set_posix_acl`, `posix_acl_chmod`).
pub(crate) unsafe extern "C" fn set_acl(idmap: *mut bindings::mnt_idmap, dentry: *mut bindings::dentry, acl: *mut bindings::posix_acl, ty: c_int) -> c_int {
    // SAFETY: VFS set_acl contract: the mount's idmap, a positive ferrofs dentry whose inode the
    // VFS locked (after its ownership and validity checks), and `acl` null (remove) or a valid
    // ACL the caller holds a reference to, all for the call.
    let (idmap, dentry, acl) = unsafe { (Idmap::from_raw(idmap), Dentry::from_raw(dentry), Acl::dup_raw(acl)) };
    from_result(|| {
        let inode = dentry.inode().ok_or(ENOENT)?;
        let ty = AclType::from_raw(ty).ok_or(EINVAL)?;
        store_acl(idmap, inode, ty, acl)?;
        Ok(0)
    })
}

fn store_acl(idmap: &Idmap, inode: &Inode, ty: AclType, mut acl: Option<Acl>) -> Result {
    let mut mode = inode.mode();
    if let (AclType::Access, Some(a)) = (ty, &acl) {
        let (m, needed) = inode.acl_update_mode(idmap, a)?;
        mode = m;
        if !needed {
            acl = None;
        }
    }
    let value = acl.as_ref().map(Acl::to_xattr).transpose()?;
    let change = [XattrChange { name: ty.xattr_name(), value: value.as_deref() }];
    let (info, t) = (inode.info(), inode.now());
    {
        // The VFS inode and the engine change together under the engine lock, as in setattr.
        let mut fs = info.lock();
        let mut sa = inode.attrs();
        sa.mode = Some(mode);
        sa.ctime = Some(t);
        fs.setattr_xattrs(inode.ino(), &change, &sa, t).map_err(kerr)?;
        inode.restore_attrs(&sa);
    }
    inode.cache_acl(ty, acl.as_ref());
    Ok(())
}

/// The ACLs a new inode inherits from its directory's default ACL, in stored form.
pub(crate) struct NewAcls {
    default: Option<(Acl, KVec<u8>)>,
    access: Option<(Acl, KVec<u8>)>,
}

fn with_xattr(acl: Option<Acl>) -> Result<Option<(Acl, KVec<u8>)>> {
    acl.map(|a| a.to_xattr().map(|x| (a, x))).transpose()
}

impl NewAcls {
    /// For a new inode of `*mode` (type and permission bits) in `dir`; `*mode` becomes the mode
    /// it gets: masked by the default ACL of `dir`, or by the umask when `dir` has none (the
    /// VFS leaves the umask to filesystems with ACLs). Symlinks get none. Call without the
    /// engine lock.
    pub(crate) fn new(dir: &Inode, mode: &mut u32) -> Result<NewAcls> {
        let (default, access) = acl_create(dir, mode)?;
        Ok(NewAcls { default: with_xattr(default)?, access: with_xattr(access)? })
    }

    /// The mode to create the inode with, before its ACLs are stored: without the group bits
    /// when an access ACL is to come (they are its mask, which may grant more than the ACL's
    /// group entries), so that a crash between the create and the ACLs leaves the inode less
    /// accessible, never more.
    pub(crate) fn create_mode(&self, mode: u32) -> u32 {
        if self.access.is_some() {
            mode & !0o070
        } else {
            mode
        }
    }

    /// Whether there is an ACL to store.
    pub(crate) fn is_empty(&self) -> bool {
        self.default.is_none() && self.access.is_none()
    }

    /// Store the ACLs with the attributes `sa` of inode `ino` in one atomic engine call.
    pub(crate) fn store(&self, fs: &mut Fs, ino: u64, sa: &SetAttr, t: Timespec) -> core::result::Result<(), EError> {
        let none = XattrChange { name: b"", value: None };
        let mut ch = [none, none];
        let mut n = 0;
        for (ty, a) in [(AclType::Default, &self.default), (AclType::Access, &self.access)] {
            if let (Some((_, x)), Some(slot)) = (a, ch.get_mut(n)) {
                *slot = XattrChange { name: ty.xattr_name(), value: Some(x.as_slice()) };
                n += 1;
            }
        }
        fs.setattr_xattrs(ino, ch.get(..n).unwrap_or(&[]), sa, t).map(|_| ())
    }

    /// Fill the new inode's ACL cache (once stored): a first permission check then needs no
    /// engine read.
    pub(crate) fn cache(&self, inode: &Inode) {
        inode.cache_acl(AclType::Default, self.default.as_ref().map(|(a, _)| a));
        inode.cache_acl(AclType::Access, self.access.as_ref().map(|(a, _)| a));
    }
}

/// The access ACL of a chmod: the inode's ACL with its owner, mask (or group) and other
/// entries changed to the new mode's, stored with the mode in one engine call (`setattr`).
pub(crate) struct ChmodAcl {
    acl: Acl,
    value: KVec<u8>,
}

impl ChmodAcl {
    /// For a chmod of `inode` to `mode`; `None` when it has no access ACL. Call without the
    /// engine lock.
    pub(crate) fn new(inode: &Inode, mode: u32) -> Result<Option<ChmodAcl>> {
        let Some(acl) = inode.acl(AclType::Access)? else {
            return Ok(None);
        };
        let acl = acl.chmod(mode)?;
        let value = acl.to_xattr()?;
        Ok(Some(ChmodAcl { acl, value }))
    }

    /// The xattr change that stores it.
    pub(crate) fn change(&self) -> XattrChange<'_> {
        XattrChange { name: AclType::Access.xattr_name(), value: Some(self.value.as_slice()) }
    }

    /// Put it in the ACL cache, once stored.
    pub(crate) fn cache(&self, inode: &Inode) {
        inode.cache_acl(AclType::Access, Some(&self.acl));
    }
}
