// SPDX-License-Identifier: GPL-2.0

//! Names: `lookup` and the directory-changing inode operations (`create`, `mkdir`, `mknod`,
//! `symlink`, `link`, `unlink`, `rmdir`, `rename`), and `tmpfile` (a file without a name).

use kernel::bindings;
use kernel::error::from_result;
use kernel::ffi::{c_char, c_int, c_uint};
use kernel::prelude::*;
use crate::acl::NewAcls;
use crate::engine::error::Error as EError;
use crate::engine::format::{Inode as EInode, NAME_MAX};
use crate::engine::{CreateArgs, SetAttr};
use crate::inode::{iget, refresh};
use crate::kfs::{current_fsids, init_security, kerr, new_encode_dev, Dentry, Idmap, Inode, TmpFile};
use crate::xattr::SecCtx;

/// `inode_operations::lookup`.
///
/// # Safety
///
/// Called by the VFS only, with a locked ferrofs directory and a negative dentry in it.
pub(crate) unsafe extern "C" fn lookup(dir: *mut bindings::inode, dentry: *mut bindings::dentry, _flags: c_uint) -> *mut bindings::dentry {
    // SAFETY: VFS lookup contract: a locked, live ferrofs directory and a negative dentry in it
    // (name stable), for the call.
    let (dir, d) = unsafe { (Inode::from_raw(dir), Dentry::from_raw(dentry)) };
    let name = d.name();
    if name.len() > NAME_MAX {
        return Error::from_errno(-(bindings::ENAMETOOLONG as c_int)).to_ptr();
    }
    let res = dir.info().lock().lookup(dir.ino(), name);
    let inode = match res {
        Ok(a) => match iget(dir.sb(), &a) {
            Ok(i) => Some(i),
            Err(e) => return e.to_ptr(),
        },
        Err(EError::NotFound) => None,
        Err(e) => return kerr(e).to_ptr(),
    };
    d.splice_alias(inode)
}

/// Create any kind of inode named by `dentry` in `dir` (a VFS directory operation: `dir`
/// locked, `dentry` negative).
fn make_node(idmap: &Idmap, dir: &Inode, dentry: &Dentry, mode: u32, rdev: u32, target: Option<&[u8]>) -> Result {
    let info = dir.info();
    let name = dentry.name();
    let t = dir.now();
    let dino = dir.ino();
    let (uid, gid) = current_fsids();
    let is_dir = target.is_none() && mode & bindings::S_IFMT == bindings::S_IFDIR;
    // The ACLs inherited from the default ACL of `dir`, and the mode they (or the umask) leave.
    let mut mode = mode;
    let acls = match target {
        Some(_) => None,
        None => Some(NewAcls::new(dir, &mut mode)?),
    };
    let cmode = acls.as_ref().map_or(mode, |a| a.create_mode(mode));
    let mut fs = info.lock();
    let a = match target {
        Some(tgt) => fs.symlink(dino, name, tgt, uid, gid, t),
        None if is_dir => fs.mkdir(dino, name, cmode & 0o7777, uid, gid, t),
        None => fs.create(dino, name, &CreateArgs { mode: cmode, uid, gid, rdev }, t),
    }
    .map_err(kerr)?;
    refresh(&mut fs, dir)?;
    drop(fs);
    // dropped (`iput`) on every error path below, after the engine lock
    let inode = iget(dir.sb(), &a)?;
    if let Err(e) = finish_node(idmap, dir, dentry, &inode, &a, mode, acls.as_ref()) {
        // Undo the creation: drop the name; the inode goes with this last reference.
        let res = {
            let mut fs = info.lock();
            let r = if is_dir { fs.rmdir(dino, name, t) } else { fs.unlink(dino, name, t) };
            r.map_err(kerr).and_then(|_| refresh(&mut fs, dir))
        };
        if let Err(u) = res {
            pr_warn!("{}: could not undo the creation of inode {} ({}); fsck will report it\n", info.dev, a.ino, u.to_errno());
        }
        inode.clear_nlink();
        return Err(e);
    }
    dentry.instantiate(inode);
    Ok(())
}

/// The rest of a creation, on the new inode `inode` (engine inode `a`, not yet visible through
/// a dentry; `dir` locked): its ownership and ACLs (symlinks have none), then the LSM's label.
fn finish_node(idmap: &Idmap, dir: &Inode, dentry: &Dentry, inode: &Inode, a: &EInode, mode: u32, acls: Option<&NewAcls>) -> Result {
    if let Some(acls) = acls {
        init_owner(idmap, dir, inode, a, mode, acls)?;
    }
    // The LSM's label (SELinux, Smack...), stored as security.* xattrs by `initxattrs`.
    // Without an LSM (the test kernel has none) this returns 0 without calling back.
    let mut ctx = SecCtx { info: dir.info(), ino: a.ino, now: a.ctime };
    let r = init_security(inode, dir, dentry, &mut ctx);
    if r != 0 {
        return Err(Error::from_errno(r));
    }
    Ok(())
}

/// Let the VFS apply its ownership rules (setgid directories, idmaps) to the new `inode`
/// (engine attributes `a`, created with `acls.create_mode(mode)`), not yet visible through a
/// dentry, and record them with its final `mode` and inherited ACLs in one engine call.
fn init_owner(idmap: &Idmap, dir: &Inode, inode: &Inode, a: &EInode, mode: u32, acls: &NewAcls) -> Result {
    inode.init_owner(idmap, dir, mode);
    let (nuid, ngid, nmode) = (inode.uid(), inode.gid(), inode.mode());
    if nuid != a.uid || ngid != a.gid || nmode != a.mode || !acls.is_empty() {
        let sa = SetAttr { mode: Some(nmode), uid: Some(nuid), gid: Some(ngid), ctime: Some(a.ctime), ..SetAttr::default() };
        // The result is taken first so that the engine lock is released before any `iput`.
        let res = acls.store(&mut dir.info().lock(), a.ino, &sa, a.ctime);
        res.map_err(kerr)?;
    }
    acls.cache(inode);
    Ok(())
}

/// `inode_operations::tmpfile` (`O_TMPFILE`): a regular file born without a name, on the
/// engine's orphan list (`Engine::tmpfile`), as an unlinked file still open. `linkat` (with
/// `AT_EMPTY_PATH` or through `/proc/self/fd`; the VFS allows it unless `O_EXCL` was given)
/// names it and takes it off the list (`link`); closed unnamed it is deleted at eviction, and
/// after a crash by the next mount.
///
/// # Safety
///
/// Called by the VFS only (`vfs_tmpfile`).
pub(crate) unsafe extern "C" fn tmpfile(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, file: *mut bindings::file, mode: bindings::umode_t) -> c_int {
    // SAFETY: VFS tmpfile contract: the mount's idmap, a live ferrofs directory, and the file
    // being opened with its new negative dentry, for the call.
    let (idmap, dir, file) = unsafe { (Idmap::from_raw(idmap), Inode::from_raw(dir), TmpFile::from_raw(file)) };
    from_result(|| {
        let info = dir.info();
        let t = dir.now();
        let (uid, gid) = current_fsids();
        // the ACLs inherited from the default ACL of `dir`, and the mode they (or the umask) leave
        let mut mode = (u32::from(mode) & 0o7777) | bindings::S_IFREG;
        let acls = NewAcls::new(dir, &mut mode)?;
        let args = CreateArgs { mode: acls.create_mode(mode), uid, gid, rdev: 0 };
        let res = info.lock().tmpfile(dir.ino(), &args, t);
        let a = res.map_err(kerr)?;
        // on every error below, dropping `inode` evicts it: unlinked, the engine deletes it
        let inode = iget(dir.sb(), &a)?;
        finish_node(idmap, dir, file.dentry(), &inode, &a, mode, Some(&acls))?;
        file.finish(inode)?;
        Ok(0)
    })
}

/// `make_node` from the raw arguments of a VFS directory operation.
///
/// # Safety
///
/// `idmap` is the mount's idmap, `dir` a locked, live ferrofs directory and `dentry` a negative
/// dentry in it (the VFS create/mkdir/mknod/symlink contract), for the call.
unsafe fn make_node_raw(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: u32, rdev: u32, target: Option<&[u8]>) -> c_int {
    // SAFETY: per the contract.
    let (idmap, dir, dentry) = unsafe { (Idmap::from_raw(idmap), Inode::from_raw(dir), Dentry::from_raw(dentry)) };
    from_result(|| make_node(idmap, dir, dentry, mode, rdev, target).map(|_| 0))
}

/// `inode_operations::create`.
///
/// # Safety
///
/// Called by the VFS only (create contract).
pub(crate) unsafe extern "C" fn create(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: bindings::umode_t, _excl: bool) -> c_int {
    // SAFETY: VFS create contract.
    unsafe { make_node_raw(idmap, dir, dentry, u32::from(mode) | bindings::S_IFREG, 0, None) }
}

/// `inode_operations::mkdir`.
///
/// # Safety
///
/// Called by the VFS only (mkdir contract).
pub(crate) unsafe extern "C" fn mkdir(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: bindings::umode_t) -> c_int {
    // SAFETY: VFS mkdir contract.
    unsafe { make_node_raw(idmap, dir, dentry, u32::from(mode) | bindings::S_IFDIR, 0, None) }
}

/// `inode_operations::mknod`.
///
/// # Safety
///
/// Called by the VFS only (mknod contract).
pub(crate) unsafe extern "C" fn mknod(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: bindings::umode_t, dev: bindings::dev_t) -> c_int {
    // SAFETY: VFS mknod contract.
    unsafe { make_node_raw(idmap, dir, dentry, u32::from(mode), new_encode_dev(dev), None) }
}

/// `inode_operations::symlink`.
///
/// # Safety
///
/// Called by the VFS only (symlink contract).
pub(crate) unsafe extern "C" fn symlink(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, target: *const c_char) -> c_int {
    // SAFETY: VFS symlink contract: `target` is a NUL-terminated kernel string for the call.
    unsafe { make_node_raw(idmap, dir, dentry, bindings::S_IFLNK | 0o777, 0, Some(CStr::from_char_ptr(target).as_bytes())) }
}

/// `inode_operations::link`.
///
/// # Safety
///
/// Called by the VFS only (link contract).
pub(crate) unsafe extern "C" fn link(old: *mut bindings::dentry, dir: *mut bindings::inode, dentry: *mut bindings::dentry) -> c_int {
    // SAFETY: VFS link contract: `old` is positive, `dir` a locked ferrofs directory, `dentry`
    // negative, all live for the call.
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
        d.instantiate(inode.ihold());
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

/// `inode_operations::unlink`.
///
/// # Safety
///
/// Called by the VFS only (unlink contract).
pub(crate) unsafe extern "C" fn unlink(dir: *mut bindings::inode, dentry: *mut bindings::dentry) -> c_int {
    // SAFETY: VFS unlink contract: `dir` a locked ferrofs directory, `dentry` positive in it.
    let (dir, dentry) = unsafe { (Inode::from_raw(dir), Dentry::from_raw(dentry)) };
    from_result(|| remove(dir, dentry, false))
}

/// `inode_operations::rmdir`.
///
/// # Safety
///
/// Called by the VFS only (rmdir contract).
pub(crate) unsafe extern "C" fn rmdir(dir: *mut bindings::inode, dentry: *mut bindings::dentry) -> c_int {
    // SAFETY: VFS rmdir contract, as for `unlink`.
    let (dir, dentry) = unsafe { (Inode::from_raw(dir), Dentry::from_raw(dentry)) };
    from_result(|| remove(dir, dentry, true))
}

/// `inode_operations::rename`.
///
/// # Safety
///
/// Called by the VFS only (rename contract).
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
        // The engine wrote the renamed inode only if it is a directory that moved (its `..`);
        // otherwise its new ctime lives in the VFS inode, marked dirty, until `write_inode`
        // stores it (at write-back, fsync or sync), as UBIFS does: a rename appends its
        // entries and the directories' inodes only. The source is not locked by the VFS when
        // a directory is renamed inside its parent (`vfs_rename`), so only the ctime is set
        // here; `write_inode` copies the attributes under the engine lock, after any chmod or
        // utimes racing with the rename stored its own.
        let exchange = flags & crate::engine::RENAME_EXCHANGE != 0;
        let victim = match target {
            Some(target) if !exchange => Some((target, fs.getattr(target.ino()))),
            _ => None,
        };
        drop(fs);
        let moved = |i: &Inode| ndir != odir && i.mode() & bindings::S_IFMT == bindings::S_IFDIR;
        old.set_ctime(t);
        if !moved(old) {
            old.mark_dirty();
        }
        match (target, victim) {
            // an overwritten target lost a link: the engine wrote it
            (_, Some((target, Ok(a)))) if a.nlink > 0 => target.set_nlink_ctime(a.nlink, a.ctime),
            (_, Some((target, _))) => target.clear_nlink(),
            (Some(target), None) => {
                target.set_ctime(t);
                if !moved(target) {
                    target.mark_dirty();
                }
            }
            (None, None) => {}
        }
        Ok(0)
    })
}
