// SPDX-License-Identifier: GPL-2.0

//! Names: `lookup` and the directory-changing inode operations (`create`, `mkdir`, `mknod`,
//! `symlink`, `link`, `unlink`, `rmdir`, `rename`).

use core::ptr;
use kernel::bindings;
use kernel::error::from_result;
use kernel::ffi::{c_char, c_int, c_uint};
use kernel::prelude::*;
use crate::engine::error::Error as EError;
use crate::engine::format::NAME_MAX;
use crate::engine::posix::{CreateArgs, SetAttr};
use crate::shim;
use crate::inode::{copy_attrs, iget, refresh};
use crate::kfs::{cstr, dname, isbi, kerr, now};
use crate::xattr::SecCtx;

pub(crate) unsafe extern "C" fn lookup(dir: *mut bindings::inode, dentry: *mut bindings::dentry, _flags: c_uint) -> *mut bindings::dentry {
    // SAFETY: the VFS passes a locked directory and a negative dentry in it.
    unsafe {
        let name = dname(dentry);
        if name.len() > NAME_MAX {
            return Error::from_errno(-(bindings::ENAMETOOLONG as c_int)).to_ptr();
        }
        let res = isbi(dir).lock().lookup((*dir).i_ino as u64, name);
        let inode = match res {
            Ok(a) => match iget((*dir).i_sb, &a) {
                Ok(i) => i,
                Err(e) => return e.to_ptr(),
            },
            Err(EError::NotFound) => ptr::null_mut(),
            Err(e) => return kerr(e).to_ptr(),
        };
        bindings::d_splice_alias(inode, dentry)
    }
}

/// Create any kind of inode named by `dentry` in `dir`.
///
/// # Safety
///
/// Called from a VFS directory operation with `dir` locked and `dentry` negative.
pub(crate) unsafe fn make_node(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: u32, rdev: u32, target: Option<&[u8]>) -> Result {
    // SAFETY: per the contract.
    unsafe {
        let info = isbi(dir);
        let name = dname(dentry);
        let t = now(dir);
        let dino = (*dir).i_ino as u64;
        let (uid, gid) = (shim::ferrofs_current_fsuid(), shim::ferrofs_current_fsgid());
        let mut fs = info.lock();
        let a = match target {
            Some(tgt) => fs.symlink(dino, name, tgt, uid, gid, t),
            None if mode & bindings::S_IFMT == bindings::S_IFDIR => fs.mkdir(dino, name, mode & 0o7777, uid, gid, t),
            None => fs.create(dino, name, &CreateArgs { mode, uid, gid, rdev }, t),
        }
        .map_err(kerr)?;
        refresh(&mut fs, dir)?;
        drop(fs);
        let inode = iget((*dir).i_sb, &a)?;
        // Let the VFS apply its ownership rules (setgid directories, idmaps); record any change.
        if target.is_none() {
            bindings::inode_init_owner(idmap, inode, dir, (*inode).i_mode);
            let (nuid, ngid, nmode) = (shim::ferrofs_i_uid_read(inode), shim::ferrofs_i_gid_read(inode), u32::from((*inode).i_mode));
            if nuid != a.uid || ngid != a.gid || nmode != a.mode {
                let sa = SetAttr { mode: Some(nmode), uid: Some(nuid), gid: Some(ngid), ctime: Some(a.ctime), ..SetAttr::default() };
                // The result is taken first so that the engine lock is released before `iput`.
                let res = info.lock().setattr(a.ino, &sa, t);
                if let Err(e) = res {
                    bindings::iput(inode);
                    return Err(kerr(e));
                }
            }
        }
        // The LSM's label (SELinux, Smack...), stored as security.* xattrs by `initxattrs`.
        // Without an LSM (the test kernel has none) this returns 0 without calling back.
        let mut ctx = SecCtx { info, ino: a.ino, now: t };
        let r = shim::ferrofs_init_security(inode, dir, dentry, ptr::addr_of_mut!(ctx).cast());
        if r != 0 {
            // Undo the creation: drop the name; the inode goes with this last reference.
            let res = {
                let mut fs = info.lock();
                let r = if mode & bindings::S_IFMT == bindings::S_IFDIR && target.is_none() { fs.rmdir(dino, name, t) } else { fs.unlink(dino, name, t) };
                r.map_err(kerr).and_then(|_| refresh(&mut fs, dir))
            };
            if let Err(e) = res {
                pr_warn!("mtd{}: could not undo the creation of inode {} ({}); fsck will report it\n", info.mtd_index, a.ino, e.to_errno());
            }
            bindings::clear_nlink(inode);
            bindings::iput(inode);
            return Err(Error::from_errno(r));
        }
        bindings::d_instantiate(dentry, inode);
    }
    Ok(())
}

pub(crate) unsafe extern "C" fn create(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: bindings::umode_t, _excl: bool) -> c_int {
    // SAFETY: VFS create contract.
    from_result(|| unsafe { make_node(idmap, dir, dentry, u32::from(mode) | bindings::S_IFREG, 0, None) }.map(|_| 0))
}

pub(crate) unsafe extern "C" fn mkdir(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: bindings::umode_t) -> c_int {
    // SAFETY: VFS mkdir contract.
    from_result(|| unsafe { make_node(idmap, dir, dentry, u32::from(mode) | bindings::S_IFDIR, 0, None) }.map(|_| 0))
}

pub(crate) unsafe extern "C" fn mknod(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: bindings::umode_t, dev: bindings::dev_t) -> c_int {
    // SAFETY: VFS mknod contract; encoding a dev_t has no preconditions.
    from_result(|| unsafe { make_node(idmap, dir, dentry, u32::from(mode), shim::ferrofs_new_encode_dev(dev), None) }.map(|_| 0))
}

pub(crate) unsafe extern "C" fn symlink(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, target: *const c_char) -> c_int {
    // SAFETY: VFS symlink contract: `target` is a NUL-terminated kernel string.
    from_result(|| unsafe { make_node(idmap, dir, dentry, bindings::S_IFLNK | 0o777, 0, Some(cstr(target))) }.map(|_| 0))
}

pub(crate) unsafe extern "C" fn link(old: *mut bindings::dentry, dir: *mut bindings::inode, dentry: *mut bindings::dentry) -> c_int {
    from_result(|| {
        // SAFETY: VFS link contract: `old` is positive, `dir` locked, `dentry` negative.
        unsafe {
            let inode = shim::ferrofs_d_inode(old);
            let info = isbi(dir);
            let t = now(dir);
            let mut fs = info.lock();
            fs.link((*inode).i_ino as u64, (*dir).i_ino as u64, dname(dentry), t).map_err(kerr)?;
            refresh(&mut fs, inode)?;
            refresh(&mut fs, dir)?;
            drop(fs);
            bindings::ihold(inode);
            bindings::d_instantiate(dentry, inode);
        }
        Ok(0)
    })
}

/// Unlink or rmdir.
///
/// # Safety
///
/// VFS unlink/rmdir contract.
pub(crate) unsafe fn remove(dir: *mut bindings::inode, dentry: *mut bindings::dentry, is_dir: bool) -> Result<c_int> {
    // SAFETY: per the contract.
    unsafe {
        let inode = shim::ferrofs_d_inode(dentry);
        let info = isbi(dir);
        let t = now(dir);
        let name = dname(dentry);
        let mut fs = info.lock();
        if is_dir {
            fs.rmdir((*dir).i_ino as u64, name, t).map_err(kerr)?;
        } else {
            fs.unlink((*dir).i_ino as u64, name, t).map_err(kerr)?;
        }
        refresh(&mut fs, dir)?;
        match fs.getattr((*inode).i_ino as u64) {
            Ok(a) if a.nlink > 0 => copy_attrs(inode, &a, false),
            _ => {
                bindings::clear_nlink(inode);
                (*inode).i_ctime_sec = t.sec;
                (*inode).i_ctime_nsec = t.nsec;
            }
        }
    }
    Ok(0)
}

pub(crate) unsafe extern "C" fn unlink(dir: *mut bindings::inode, dentry: *mut bindings::dentry) -> c_int {
    // SAFETY: VFS unlink contract.
    from_result(|| unsafe { remove(dir, dentry, false) })
}

pub(crate) unsafe extern "C" fn rmdir(dir: *mut bindings::inode, dentry: *mut bindings::dentry) -> c_int {
    // SAFETY: VFS rmdir contract.
    from_result(|| unsafe { remove(dir, dentry, true) })
}

pub(crate) unsafe extern "C" fn rename(
    _idmap: *mut bindings::mnt_idmap,
    odir: *mut bindings::inode,
    odentry: *mut bindings::dentry,
    ndir: *mut bindings::inode,
    ndentry: *mut bindings::dentry,
    flags: c_uint,
) -> c_int {
    from_result(|| {
        // SAFETY: VFS rename contract: both directories locked, `odentry` positive.
        unsafe {
            let info = isbi(odir);
            let t = now(odir);
            let old = shim::ferrofs_d_inode(odentry);
            let target = shim::ferrofs_d_inode(ndentry);
            let mut fs = info.lock();
            fs.rename((*odir).i_ino as u64, dname(odentry), (*ndir).i_ino as u64, dname(ndentry), flags, t).map_err(kerr)?;
            refresh(&mut fs, odir)?;
            if ndir != odir {
                refresh(&mut fs, ndir)?;
            }
            refresh(&mut fs, old)?;
            if !target.is_null() {
                match fs.getattr((*target).i_ino as u64) {
                    Ok(a) if a.nlink > 0 => copy_attrs(target, &a, false),
                    _ => bindings::clear_nlink(target),
                }
            }
        }
        Ok(0)
    })
}
