// SPDX-License-Identifier: GPL-2.0

//! Inodes: the inode slab cache, `alloc_inode`/`free_inode`/`evict_inode`/`write_inode`, `iget`,
//! attribute copies between the engine and the VFS inode, `setattr` and `get_link`.

use core::sync::atomic::Ordering;
use kernel::bindings;
use kernel::error::from_result;
use kernel::ffi::{c_char, c_int};
use kernel::prelude::*;
use crate::engine::error::Error as EError;
use crate::engine::format::{FileType, Inode as EInode, BLOCK_SIZE};
use crate::acl::ChmodAcl;
use crate::engine::SetAttr;
use crate::kfs::{kerr, DelayedCall, Dentry, EvictingInode, Iattr, Idmap, Iget, Inode, InodeRef, SuperBlock};
use crate::ops::OPS;
use crate::super_::Fs;

/// Get the VFS inode for `a`, filling it from `a` if it is new.
pub(crate) fn iget(sb: &SuperBlock, a: &EInode) -> Result<InodeRef> {
    let inode = match crate::kfs::iget(sb, a.ino)? {
        Iget::Cached(i) => return Ok(i),
        Iget::New(i) => i,
    };
    inode.set_attrs(a, true);
    crate::fileattr::set_iflags(&inode, a.flags);
    let ops = &OPS;
    match FileType::from_mode(a.mode) {
        Some(FileType::Regular) => inode.set_ops(&ops.file_iops, Some(&ops.file_fops), Some(&ops.aops)),
        Some(FileType::Dir) => inode.set_ops(&ops.dir_iops, Some(&ops.dir_fops), None),
        Some(FileType::Symlink) => {
            inode.set_ops(&ops.symlink_iops, None, None);
            inode.set_nohighmem();
        }
        Some(_) => {
            inode.set_ops(&ops.special_iops, None, None);
            inode.init_special(a.mode, a.rdev);
        }
        None => {
            pr_err!("{}: corrupt inode {}: bad mode {:o}\n", sb.info().dev, a.ino, a.mode);
            // dropping `inode` fails it (`iget_failed`)
            return Err(Error::from_errno(-(bindings::EUCLEAN as c_int)));
        }
    }
    Ok(inode.unlock())
}

/// Refresh a VFS inode from the engine (after an operation changed it in the engine). The
/// caller holds the inode's lock (a VFS directory or attribute operation).
pub(crate) fn refresh(fs: &mut Fs, inode: &Inode) -> Result {
    let a = fs.getattr(inode.ino()).map_err(kerr)?;
    inode.set_attrs(&a, false);
    Ok(())
}

/// Write the VFS inode's attributes (all but the size) to the engine. The caller holds the
/// engine lock (`fs`), which orders this against `setattr`: setattr changes the VFS inode and
/// the engine under that lock, so the copy taken here is never older than what the engine
/// holds (a copy taken before the lock could overwrite a newer chmod, chown or utimes).
pub(crate) fn store_attrs(fs: &mut Fs, inode: &Inode) -> core::result::Result<(), EError> {
    let (a, t) = (inode.attrs(), inode.now());
    fs.setattr(inode.ino(), &a, t).map(|_| ())
}

/// `super_operations::write_inode`: record the VFS's timestamp and attribute updates.
///
/// # Safety
///
/// Called by the VFS only, with a live ferrofs inode.
pub(crate) unsafe extern "C" fn write_inode(inode: *mut bindings::inode, _wbc: *mut bindings::writeback_control) -> c_int {
    // SAFETY: VFS write_inode contract: a live ferrofs inode, for the call.
    let inode = unsafe { Inode::from_raw(inode) };
    let mut fs = inode.info().lock();
    if fs.is_read_only() || inode.sb().rdonly() {
        return 0;
    }
    match store_attrs(&mut fs, inode) {
        Ok(()) | Err(EError::NotFound) => 0,
        Err(e) => kerr(e).to_errno(),
    }
}

/// `super_operations::evict_inode`: drop the page cache; delete the inode if it has no links.
///
/// # Safety
///
/// Called by the VFS only, with a ferrofs inode being evicted.
pub(crate) unsafe extern "C" fn evict_inode(inode: *mut bindings::inode) {
    // SAFETY: VFS evict_inode contract: the inode is being evicted, ours now, allocated until
    // we return; its superblock is mounted (inodes are evicted before `put_super`).
    let inode = unsafe { EvictingInode::from_raw(inode) }.clear();
    let sb = inode.sb();
    // the folios are gone (their budgets with them): so is the inode record's charge
    if inode.ferro().ino_budget.swap(false, Ordering::AcqRel) {
        sb.info().budget.release(crate::engine::writeback::BUDGET_PER_INODE);
    }
    // and what `fallocate` held for it (src/extents.rs)
    sb.info().budget.release(inode.ferro().prealloc.swap(0, Ordering::AcqRel));
    if inode.is_unlinked() && !inode.is_bad() && !sb.rdonly() {
        let info = sb.info();
        let ino = inode.ino();
        // Waits while the filesystem is frozen (the engine is read-only then), as ext4.
        let _write = sb.start_intwrite();
        let mut fs = info.lock();
        if !fs.is_read_only() {
            if let Err(e) = fs.evict(ino) {
                pr_warn!("{}: could not free deleted inode {} ({:?}); it stays on the orphan list\n", info.dev, ino, e);
            }
        }
    }
}

/// `inode_operations::setattr`.
///
/// # Safety
///
/// Called by the VFS only, with a positive ferrofs dentry (its inode locked) and the change.
pub(crate) unsafe extern "C" fn setattr(idmap: *mut bindings::mnt_idmap, dentry: *mut bindings::dentry, attr: *mut bindings::iattr) -> c_int {
    // SAFETY: VFS setattr contract: the mount's idmap, a positive ferrofs dentry whose inode
    // the VFS locked, and the change, all live for the call.
    let (idmap, dentry, attr) = unsafe { (Idmap::from_raw(idmap), Dentry::from_raw(dentry), Iattr::from_raw(attr)) };
    from_result(|| {
        attr.prepare(idmap, dentry)?;
        let inode = dentry.inode().ok_or(ENOENT)?;
        let info = inode.info();
        let ino = inode.ino();
        let mut size_changed = false;
        let (valid, size) = (attr.valid(), attr.size());
        if valid & bindings::ATTR_SIZE != 0 {
            if size < 0 {
                return Err(EINVAL);
            }
            let old = inode.size();
            if size != old {
                set_size(inode, old, size)?;
                size_changed = true;
            }
        }
        // A chmod of an inode with an access ACL changes the ACL too, in the same engine call.
        let acl = if valid & bindings::ATTR_MODE != 0 { ChmodAcl::new(inode, attr.mode())? } else { None };
        // The VFS inode and the engine change together under the engine lock, so that
        // `write_inode` (which copies under that lock) never stores an older copy after them.
        let mut fs = info.lock();
        let old = inode.attrs();
        attr.copy_to(idmap, inode);
        if size_changed {
            // truncate(2) through a path does not ask for new times; a size change still
            // updates mtime and ctime (POSIX).
            inode.touch_mtime_ctime();
        }
        let a = inode.attrs();
        let r = match &acl {
            None => fs.setattr(ino, &a, inode.now()),
            Some(acl) => fs.setattr_xattrs(ino, &[acl.change()], &a, inode.now()),
        };
        if let Err(e) = r {
            // nothing half done: the VFS inode keeps what the engine keeps
            inode.restore_attrs(&old);
            return Err(kerr(e));
        }
        drop(fs);
        if let Some(acl) = acl {
            acl.cache(inode);
        }
        Ok(0)
    })
}

/// The size part of `setattr` (truncate, extend; and of a size-changing `fallocate`), under the
/// mapping's invalidate lock so no fault or readahead brings folios back (or dirties one)
/// meanwhile. Shrinking: `truncate_setsize` first (it waits for the writeback of, and drops,
/// the folios past the new size, whose budgets `invalidate_folio` gives back), then the engine
/// cut, so a write-back of a dropped folio can no longer re-extend the file on flash. A cut
/// inside a block first (before `truncate_setsize`, so an I/O error there changes nothing)
/// writes that block's folio back if it is dirty without a budget (an
/// overwrite in place, `data::in_place`: its write-back needs no space and must happen before
/// its record is shortened); a budgeted dirty EOF folio stays dirty, its budget paying its
/// later write-back, so a truncate down never writes anything that needs space. The cut keeps
/// the inode's write-back charge for the folios still dirty; only if the engine refuses it
/// (`NoSpace`: a cut that grows the on-flash size, past data not yet written back, writes an
/// inode record like any other) is the charge given up for it and the cut tried again.
/// Growing: the engine first (it can run out of space, and may use the inode's charge), then
/// `truncate_setsize`. The caller holds the inode lock.
pub(crate) fn set_size(inode: &Inode, old: i64, size: i64) -> Result {
    let info = inode.info();
    let sa = SetAttr { size: Some(size as u64), ..SetAttr::default() };
    let _invalidate = inode.invalidate_lock();
    let give_up_charge = || {
        let had = inode.ferro().ino_budget.swap(false, Ordering::AcqRel);
        if had {
            info.budget.release(crate::engine::writeback::BUDGET_PER_INODE);
        }
        had
    };
    if size > old {
        give_up_charge();
        // stores through a mapping beyond the old EOF (in its last page) must not appear in
        // the grown file: zero that tail in the cache
        inode.truncate_pagecache(old);
        info.lock().setattr(inode.ino(), &sa, inode.now()).map_err(kerr)?;
        inode.truncate_setsize(size);
    } else {
        if size % BLOCK_SIZE as i64 != 0 {
            // a folio admitted as an overwrite in place without budget (`data::in_place`) must
            // never stay dirty over a shortened record, which a later size increase would let
            // grow at write-back: it reaches the flash before the engine shortens its block
            // (in place: the write-back needs no space). A budgeted one stays dirty. This comes
            // before `truncate_setsize`, so that a failed write-back (EIO) leaves the file as it
            // was, its folios past the cut included; nothing re-dirties the folio meanwhile (the
            // inode lock keeps write(2) out, the invalidate lock `page_mkwrite`).
            let at = size - size % BLOCK_SIZE as i64;
            let unbudgeted = inode.lock_cached_folio(at).is_some_and(|f| f.is_dirty() && !f.is_budgeted());
            if unbudgeted {
                inode.write_and_wait_range(at, at + BLOCK_SIZE as i64 - 1)?;
            }
        }
        inode.truncate_setsize(size);
        let mut r = info.lock().setattr(inode.ino(), &sa, inode.now());
        if matches!(r, Err(EError::NoSpace)) && give_up_charge() {
            r = info.lock().setattr(inode.ino(), &sa, inode.now());
        }
        if r.is_err() {
            // the flash still holds the old size (and the data written back before the cut)
            inode.set_size(old);
        }
        r.map_err(kerr)?;
    }
    Ok(())
}

/// `inode_operations::get_link` of a symlink.
///
/// # Safety
///
/// Called by the VFS only, with a live ferrofs symlink.
pub(crate) unsafe extern "C" fn get_link(dentry: *mut bindings::dentry, inode: *mut bindings::inode, done: *mut bindings::delayed_call) -> *const c_char {
    if dentry.is_null() {
        // RCU walk: the engine lock may sleep.
        return ECHILD.to_ptr();
    }
    // SAFETY: VFS get_link contract: a live ferrofs symlink and the lookup's delayed call, for
    // the call.
    let (inode, done) = unsafe { (Inode::from_raw(inode), DelayedCall::from_raw(done)) };
    let size = crate::engine::format::SYMLINK_MAX + 1;
    let mut buf = match KVec::<u8>::from_elem(0u8, size, GFP_KERNEL) {
        Ok(b) => b,
        Err(_) => return ENOMEM.to_ptr(),
    };
    let Some(target) = buf.get_mut(..size - 1) else {
        return EINVAL.to_ptr();
    };
    let n = match inode.info().lock().readlink(inode.ino(), target) {
        Ok(n) => n.min(size - 1),
        Err(e) => return kerr(e).to_ptr(),
    };
    if let Some(nul) = buf.get_mut(n) {
        *nul = 0;
    }
    done.kfree_link(buf)
}
