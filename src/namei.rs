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
use crate::engine::{CreateArgs, SetAttr};
use crate::shim;
use crate::inode::{iget, refresh};
use crate::kfs::{cstr, kerr, Dentry, Inode};
use crate::xattr::SecCtx;

pub(crate) unsafe extern "C" fn lookup(dir: *mut bindings::inode, dentry: *mut bindings::dentry, _flags: c_uint) -> *mut bindings::dentry {
    // SAFETY: the VFS passes a locked, live ferrofs directory and a negative dentry in it.
    let (dir, d) = unsafe { (Inode::from_raw(dir), Dentry::from_raw(dentry)) };
    let name = d.name();
    if name.len() > NAME_MAX {
        return Error::from_errno(-(bindings::ENAMETOOLONG as c_int)).to_ptr();
    }
    let res = dir.info().lock().lookup(dir.ino(), name);
    let inode = match res {
        Ok(a) => match iget(dir.sb(), &a) {
            Ok(i) => i,
            Err(e) => return e.to_ptr(),
        },
        Err(EError::NotFound) => ptr::null_mut(),
        Err(e) => return kerr(e).to_ptr(),
    };
    // SAFETY: `inode` is null or a referenced inode, whose reference `d_splice_alias` consumes;
    // `dentry` is the VFS's negative dentry.
    unsafe { bindings::d_splice_alias(inode, dentry) }
}

/// Create any kind of inode named by `dentry` in `dir` (a VFS directory operation: `dir`
/// locked, `dentry` negative).
fn make_node(idmap: *mut bindings::mnt_idmap, dir: &Inode, dentry: &Dentry, mode: u32, rdev: u32, target: Option<&[u8]>) -> Result {
    let info = dir.info();
    let name = dentry.name();
    let t = dir.now();
    let dino = dir.ino();
    // SAFETY: reads the calling task's credentials.
    let (uid, gid) = unsafe { (shim::ferrofs_current_fsuid(), shim::ferrofs_current_fsgid()) };
    let mut fs = info.lock();
    let a = match target {
        Some(tgt) => fs.symlink(dino, name, tgt, uid, gid, t),
        None if mode & bindings::S_IFMT == bindings::S_IFDIR => fs.mkdir(dino, name, mode & 0o7777, uid, gid, t),
        None => fs.create(dino, name, &CreateArgs { mode, uid, gid, rdev }, t),
    }
    .map_err(kerr)?;
    refresh(&mut fs, dir)?;
    drop(fs);
    let raw = iget(dir.sb(), &a)?;
    // SAFETY: `iget` returned a referenced ferrofs inode, which we hold until it is handed to
    // `d_instantiate` or `iput` below.
    let inode = unsafe { Inode::from_raw(raw) };
    // Let the VFS apply its ownership rules (setgid directories, idmaps); record any change.
    if target.is_none() {
        // SAFETY: `raw` is referenced and not yet visible through a dentry; `dir` is locked.
        unsafe { bindings::inode_init_owner(idmap, raw, dir.as_ptr(), inode.mode() as u16) };
        let (nuid, ngid, nmode) = (inode.uid(), inode.gid(), inode.mode());
        if nuid != a.uid || ngid != a.gid || nmode != a.mode {
            let sa = SetAttr { mode: Some(nmode), uid: Some(nuid), gid: Some(ngid), ctime: Some(a.ctime), ..SetAttr::default() };
            // The result is taken first so that the engine lock is released before `iput`.
            let res = info.lock().setattr(a.ino, &sa, t);
            if let Err(e) = res {
                // SAFETY: drops the reference from `iget`; `inode` is not used after this.
                unsafe { bindings::iput(raw) };
                return Err(kerr(e));
            }
        }
    }
    // The LSM's label (SELinux, Smack...), stored as security.* xattrs by `initxattrs`.
    // Without an LSM (the test kernel has none) this returns 0 without calling back.
    let mut ctx = SecCtx { info, ino: a.ino, now: t };
    // SAFETY: `raw` and `dir` are live, `dentry` is the VFS's; `ctx` outlives the call, in which
    // `ferrofs_initxattrs` reads it.
    let r = unsafe { shim::ferrofs_init_security(raw, dir.as_ptr(), dentry.as_ptr(), ptr::addr_of_mut!(ctx).cast()) };
    if r != 0 {
        // Undo the creation: drop the name; the inode goes with this last reference.
        let res = {
            let mut fs = info.lock();
            let r = if mode & bindings::S_IFMT == bindings::S_IFDIR && target.is_none() { fs.rmdir(dino, name, t) } else { fs.unlink(dino, name, t) };
            r.map_err(kerr).and_then(|_| refresh(&mut fs, dir))
        };
        if let Err(e) = res {
            pr_warn!("{}: could not undo the creation of inode {} ({}); fsck will report it\n", info.dev, a.ino, e.to_errno());
        }
        inode.clear_nlink();
        // SAFETY: drops the reference from `iget`; `inode` is not used after this.
        unsafe { bindings::iput(raw) };
        return Err(Error::from_errno(r));
    }
    // SAFETY: `dentry` is negative and `d_instantiate` takes over the reference from `iget`.
    unsafe { bindings::d_instantiate(dentry.as_ptr(), raw) };
    Ok(())
}

/// `make_node` from the raw arguments of a VFS directory operation.
///
/// # Safety
///
/// `dir` is a locked, live ferrofs directory and `dentry` a negative dentry in it (the VFS
/// create/mkdir/mknod/symlink contract).
unsafe fn make_node_raw(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: u32, rdev: u32, target: Option<&[u8]>) -> c_int {
    // SAFETY: per the contract.
    let (dir, dentry) = unsafe { (Inode::from_raw(dir), Dentry::from_raw(dentry)) };
    from_result(|| make_node(idmap, dir, dentry, mode, rdev, target).map(|_| 0))
}

pub(crate) unsafe extern "C" fn create(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: bindings::umode_t, _excl: bool) -> c_int {
    // SAFETY: VFS create contract.
    unsafe { make_node_raw(idmap, dir, dentry, u32::from(mode) | bindings::S_IFREG, 0, None) }
}

pub(crate) unsafe extern "C" fn mkdir(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: bindings::umode_t) -> c_int {
    // SAFETY: VFS mkdir contract.
    unsafe { make_node_raw(idmap, dir, dentry, u32::from(mode) | bindings::S_IFDIR, 0, None) }
}

pub(crate) unsafe extern "C" fn mknod(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: bindings::umode_t, dev: bindings::dev_t) -> c_int {
    // SAFETY: VFS mknod contract; encoding a dev_t has no preconditions.
    unsafe { make_node_raw(idmap, dir, dentry, u32::from(mode), shim::ferrofs_new_encode_dev(dev), None) }
}

pub(crate) unsafe extern "C" fn symlink(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, target: *const c_char) -> c_int {
    // SAFETY: VFS symlink contract: `target` is a NUL-terminated kernel string.
    unsafe { make_node_raw(idmap, dir, dentry, bindings::S_IFLNK | 0o777, 0, Some(cstr(target))) }
}

pub(crate) unsafe extern "C" fn link(old: *mut bindings::dentry, dir: *mut bindings::inode, dentry: *mut bindings::dentry) -> c_int {
    // SAFETY: VFS link contract: `old` is positive, `dir` a locked ferrofs directory, `dentry`
    // negative.
    let (old, dir, d) = unsafe { (Dentry::from_raw(old), Inode::from_raw(dir), Dentry::from_raw(dentry)) };
    from_result(|| {
        let inode = old.inode().ok_or(ENOENT)?;
        let info = dir.info();
        let t = dir.now();
        let mut fs = info.lock();
        fs.link(inode.ino(), dir.ino(), d.name(), t).map_err(kerr)?;
        refresh(&mut fs, inode)?;
        refresh(&mut fs, dir)?;
        drop(fs);
        // SAFETY: `inode` is live; the new reference passes to `dentry`, which is negative.
        unsafe {
            bindings::ihold(inode.as_ptr());
            bindings::d_instantiate(dentry, inode.as_ptr());
        }
        Ok(0)
    })
}

/// Unlink or rmdir (VFS unlink/rmdir contract: `dir` locked, `dentry` positive).
fn remove(dir: &Inode, dentry: &Dentry, is_dir: bool) -> Result<c_int> {
    let inode = dentry.inode().ok_or(ENOENT)?;
    let info = dir.info();
    let t = dir.now();
    let name = dentry.name();
    let mut fs = info.lock();
    if is_dir {
        fs.rmdir(dir.ino(), name, t).map_err(kerr)?;
    } else {
        fs.unlink(dir.ino(), name, t).map_err(kerr)?;
    }
    refresh(&mut fs, dir)?;
    match fs.getattr(inode.ino()) {
        Ok(a) if a.nlink > 0 => inode.set_attrs(&a, false),
        _ => {
            inode.clear_nlink();
            inode.set_ctime(t);
        }
    }
    Ok(0)
}

pub(crate) unsafe extern "C" fn unlink(dir: *mut bindings::inode, dentry: *mut bindings::dentry) -> c_int {
    // SAFETY: VFS unlink contract: `dir` a locked ferrofs directory, `dentry` positive in it.
    let (dir, dentry) = unsafe { (Inode::from_raw(dir), Dentry::from_raw(dentry)) };
    from_result(|| remove(dir, dentry, false))
}

pub(crate) unsafe extern "C" fn rmdir(dir: *mut bindings::inode, dentry: *mut bindings::dentry) -> c_int {
    // SAFETY: VFS rmdir contract, as for `unlink`.
    let (dir, dentry) = unsafe { (Inode::from_raw(dir), Dentry::from_raw(dentry)) };
    from_result(|| remove(dir, dentry, true))
}

pub(crate) unsafe extern "C" fn rename(
    _idmap: *mut bindings::mnt_idmap,
    odir: *mut bindings::inode,
    odentry: *mut bindings::dentry,
    ndir: *mut bindings::inode,
    ndentry: *mut bindings::dentry,
    flags: c_uint,
) -> c_int {
    // SAFETY: VFS rename contract: both directories live and locked, `odentry` positive,
    // `ndentry` positive or negative.
    let (odir_i, od, ndir_i, nd) = unsafe { (Inode::from_raw(odir), Dentry::from_raw(odentry), Inode::from_raw(ndir), Dentry::from_raw(ndentry)) };
    from_result(|| {
        let info = odir_i.info();
        let t = odir_i.now();
        let old = od.inode().ok_or(ENOENT)?;
        let target = nd.inode();
        let mut fs = info.lock();
        fs.rename(odir_i.ino(), od.name(), ndir_i.ino(), nd.name(), flags, t).map_err(kerr)?;
        refresh(&mut fs, odir_i)?;
        if ndir != odir {
            refresh(&mut fs, ndir_i)?;
        }
        // The source is not locked by the VFS when a directory is renamed inside its parent
        // (`vfs_rename`), so only what the rename changed is copied: its ctime. Copying all of
        // its attributes could overwrite those of a chmod or utimes racing with the rename.
        let a = fs.getattr(old.ino()).map_err(kerr)?;
        old.set_ctime(a.ctime);
        if let Some(target) = target {
            match fs.getattr(target.ino()) {
                Ok(a) if a.nlink > 0 => target.set_nlink_ctime(a.nlink, a.ctime),
                _ => target.clear_nlink(),
            }
        }
        Ok(0)
    })
}
