// SPDX-License-Identifier: GPL-2.0

//! Inode flags: the `fileattr_get`/`fileattr_set` inode operations (FS_IOC_GETFLAGS/SETFLAGS,
//! and FS_IOC_FSGETXATTR/FSSETXATTR for the flags they share), stored in the engine inode's
//! `flags` field, and the VFS's `S_*` flags they imply, which it enforces (immutable,
//! append-only, noatime, sync).

use kernel::bindings;
use kernel::error::from_result;
use kernel::ffi::c_int;
use kernel::prelude::*;

use crate::kfs::{kerr, Dentry, FileAttr, Inode};

/// The flags ferrofs keeps. Each is enforced by the VFS through an `S_*` flag, except
/// `FS_NODUMP_FL`, which is for backup programs to read. Any other flag is refused
/// (EOPNOTSUPP) and never reported.
const FLAGS: u32 = bindings::FS_IMMUTABLE_FL | bindings::FS_APPEND_FL | bindings::FS_NOATIME_FL | bindings::FS_SYNC_FL | bindings::FS_NODUMP_FL;

/// The VFS inode flags (`S_*`) each stored flag sets.
const S_FLAGS: [(u32, u32); 4] = [
    (bindings::FS_IMMUTABLE_FL, bindings::S_IMMUTABLE),
    (bindings::FS_APPEND_FL, bindings::S_APPEND),
    (bindings::FS_NOATIME_FL, bindings::S_NOATIME),
    (bindings::FS_SYNC_FL, bindings::S_SYNC),
];

/// Set the VFS inode's `S_*` flags from the stored `flags` (in `iget`, and after a change).
pub(crate) fn set_iflags(inode: &Inode, flags: u32) {
    let (mut set, mut mask) = (0, 0);
    for (fl, s) in S_FLAGS {
        mask |= s;
        if flags & fl != 0 {
            set |= s;
        }
    }
    inode.set_iflags(set, mask);
}

/// `inode_operations::fileattr_get`.
///
/// # Safety
///
/// Called by the VFS only (`vfs_fileattr_get`).
pub(crate) unsafe extern "C" fn fileattr_get(dentry: *mut bindings::dentry, fa: *mut bindings::fileattr) -> c_int {
    // SAFETY: VFS fileattr_get contract: a positive ferrofs dentry and the attributes to fill,
    // for the call.
    let (dentry, fa) = unsafe { (Dentry::from_raw(dentry), FileAttr::from_raw(fa)) };
    from_result(|| {
        let inode = dentry.inode().ok_or(ENOENT)?;
        let a = inode.info().lock().getattr(inode.ino()).map_err(kerr)?;
        fa.fill_flags(a.flags & FLAGS);
        Ok(0)
    })
}

/// `inode_operations::fileattr_set`: the VFS checked ownership, and `CAP_LINUX_IMMUTABLE` for
/// a change of the immutable or append-only flag, and holds the inode lock.
///
/// # Safety
///
/// Called by the VFS only (`vfs_fileattr_set`).
pub(crate) unsafe extern "C" fn fileattr_set(_idmap: *mut bindings::mnt_idmap, dentry: *mut bindings::dentry, fa: *mut bindings::fileattr) -> c_int {
    // SAFETY: VFS fileattr_set contract: the mount's idmap, a positive ferrofs dentry whose
    // inode the VFS locked, and the new attributes, for the call.
    let (dentry, fa) = unsafe { (Dentry::from_raw(dentry), FileAttr::from_raw(fa)) };
    from_result(|| {
        let inode = dentry.inode().ok_or(ENOENT)?;
        let flags = fa.flags();
        if fa.has_fsx() || flags & !FLAGS != 0 {
            return Err(Error::from_errno(-(bindings::EOPNOTSUPP as c_int)));
        }
        let t = inode.now();
        // The VFS inode and the engine change together under the engine lock, as in setattr.
        let mut fs = inode.info().lock();
        let mut sa = inode.attrs();
        sa.flags = Some(flags);
        sa.ctime = Some(t);
        fs.setattr(inode.ino(), &sa, t).map_err(kerr)?;
        inode.set_ctime(t);
        set_iflags(inode, flags);
        Ok(0)
    })
}
