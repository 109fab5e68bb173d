// SPDX-License-Identifier: GPL-2.0

//! Inodes: the inode slab cache, `alloc_inode`/`free_inode`/`evict_inode`/`write_inode`, `iget`,
//! attribute copies between the engine and the VFS inode, `setattr` and `get_link`.

use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::bindings;
use kernel::error::{from_result, to_result};
use kernel::ffi::{c_char, c_int, c_void};
use kernel::prelude::*;
use crate::engine::error::Error as EError;
use crate::engine::format::{FileType, Inode, Timespec};
use crate::engine::posix::SetAttr;
use crate::shim;
use crate::kfs::{isbi, kerr, now, sbi};
use crate::ops::OPS;
use crate::super_::Fs;

/// Copy attributes from the engine into a VFS inode. The size of a regular file is taken only
/// when `with_size` (the page cache may hold data the engine has not been given yet).
///
/// # Safety
///
/// `inode` must be valid and its caller must be allowed to update its attributes.
pub(crate) unsafe fn copy_attrs(inode: *mut bindings::inode, a: &Inode, with_size: bool) {
    // SAFETY: `inode` is valid per the contract.
    unsafe {
        (*inode).i_mode = a.mode as u16;
        shim::ferrofs_i_uid_write(inode, a.uid);
        shim::ferrofs_i_gid_write(inode, a.gid);
        bindings::set_nlink(inode, a.nlink);
        if with_size || a.mode & bindings::S_IFMT != bindings::S_IFREG {
            shim::ferrofs_i_size_write(inode, a.size as i64);
        }
        (*inode).i_atime_sec = a.atime.sec;
        (*inode).i_atime_nsec = a.atime.nsec;
        (*inode).i_mtime_sec = a.mtime.sec;
        (*inode).i_mtime_nsec = a.mtime.nsec;
        (*inode).i_ctime_sec = a.ctime.sec;
        (*inode).i_ctime_nsec = a.ctime.nsec;
        (*inode).i_generation = a.generation;
        (*inode).i_blocks = a.size.div_ceil(4096) * 8;
    }
}

/// Get the VFS inode for `a`, filling it from `a` if it is new.
///
/// # Safety
///
/// `sb` must be a mounted ferrofs superblock.
pub(crate) unsafe fn iget(sb: *mut bindings::super_block, a: &Inode) -> Result<*mut bindings::inode> {
    // SAFETY: `sb` is valid per the contract.
    let inode = unsafe { bindings::iget_locked(sb, a.ino as _) };
    if inode.is_null() {
        return Err(ENOMEM);
    }
    // SAFETY: `iget_locked` returned a referenced inode.
    if unsafe { (*inode).i_state } & bindings::I_NEW == 0 {
        return Ok(inode);
    }
    // SAFETY: the inode is new and locked (I_NEW): nobody else sees it until `unlock_new_inode`.
    unsafe {
        copy_attrs(inode, a, true);
        let ops = &OPS;
        match FileType::from_mode(a.mode) {
            Some(FileType::Regular) => {
                (*inode).i_op = &ops.file_iops.0;
                (*inode).__bindgen_anon_3.i_fop = &ops.file_fops.0;
                (*(*inode).i_mapping).a_ops = &ops.aops.0;
                shim::ferrofs_mapping_set_gfp_nofs((*inode).i_mapping);
            }
            Some(FileType::Dir) => {
                (*inode).i_op = &ops.dir_iops.0;
                (*inode).__bindgen_anon_3.i_fop = &ops.dir_fops.0;
            }
            Some(FileType::Symlink) => {
                (*inode).i_op = &ops.symlink_iops.0;
                bindings::inode_nohighmem(inode);
            }
            Some(_) => {
                (*inode).i_op = &ops.special_iops.0;
                bindings::init_special_inode(inode, a.mode as u16, shim::ferrofs_new_decode_dev(a.rdev));
            }
            None => {
                pr_err!("mtd{}: corrupt inode {}: bad mode {:o}\n", sbi(sb).mtd_index, a.ino, a.mode);
                bindings::iget_failed(inode);
                return Err(Error::from_errno(-(bindings::EUCLEAN as c_int)));
            }
        }
        bindings::unlock_new_inode(inode);
    }
    Ok(inode)
}

/// Refresh a VFS inode from the engine (after an operation changed it in the engine).
///
/// # Safety
///
/// `inode` must be a live ferrofs inode whose caller may update its attributes.
pub(crate) unsafe fn refresh(fs: &mut Fs, inode: *mut bindings::inode) -> Result {
    // SAFETY: `inode` is valid per the contract.
    let ino = unsafe { (*inode).i_ino } as u64;
    let a = fs.getattr(ino).map_err(kerr)?;
    // SAFETY: per the contract.
    unsafe { copy_attrs(inode, &a, false) };
    Ok(())
}

/// A ferrofs in-memory inode: the VFS inode, allocated from our own slab cache so that
/// `rmmod` can prove that no inode leaked (the cache must be empty to be destroyed).
#[repr(C)]
pub(crate) struct FerroInode {
    vfs: bindings::inode,
}

pub(crate) static INODE_CACHE: AtomicPtr<bindings::kmem_cache> = AtomicPtr::new(ptr::null_mut());

/// Slab constructor: called once per object when its slab page is set up.
pub(crate) unsafe extern "C" fn inode_ctor(p: *mut c_void) {
    // SAFETY: the slab allocator passes an object of our cache, `FerroInode`-sized.
    unsafe { bindings::inode_init_once(ptr::addr_of_mut!((*(p as *mut FerroInode)).vfs)) };
}

pub(crate) unsafe extern "C" fn alloc_inode(sb: *mut bindings::super_block) -> *mut bindings::inode {
    // SAFETY: the cache exists while the module is loaded, and `sb` is being used by the VFS.
    let p = unsafe { shim::ferrofs_alloc_inode_sb(sb, INODE_CACHE.load(Ordering::Acquire)) } as *mut FerroInode;
    if p.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: `p` is a constructed object of our cache.
    unsafe { ptr::addr_of_mut!((*p).vfs) }
}

pub(crate) unsafe extern "C" fn free_inode(inode: *mut bindings::inode) {
    // SAFETY: `inode` came from `alloc_inode`: it is the first field of a `FerroInode`
    // (`repr(C)`), so the pointers coincide.
    unsafe { bindings::kmem_cache_free(INODE_CACHE.load(Ordering::Acquire), inode.cast()) };
}

/// The VFS inode's attributes as an engine `SetAttr` (everything but the size).
///
/// # Safety
///
/// `inode` must be valid.
pub(crate) unsafe fn vfs_attrs(inode: *mut bindings::inode) -> SetAttr {
    // SAFETY: `inode` is valid per the contract.
    unsafe {
        SetAttr {
            mode: Some(u32::from((*inode).i_mode)),
            uid: Some(shim::ferrofs_i_uid_read(inode)),
            gid: Some(shim::ferrofs_i_gid_read(inode)),
            size: None,
            atime: Some(Timespec { sec: (*inode).i_atime_sec, nsec: (*inode).i_atime_nsec }),
            mtime: Some(Timespec { sec: (*inode).i_mtime_sec, nsec: (*inode).i_mtime_nsec }),
            ctime: Some(Timespec { sec: (*inode).i_ctime_sec, nsec: (*inode).i_ctime_nsec }),
            flags: None,
        }
    }
}

/// `super_operations::write_inode`: record the VFS's timestamp and attribute updates.
pub(crate) unsafe extern "C" fn write_inode(inode: *mut bindings::inode, _wbc: *mut bindings::writeback_control) -> c_int {
    // SAFETY: the VFS passes a live inode.
    let (info, ino, a, t) = unsafe { (isbi(inode), (*inode).i_ino as u64, vfs_attrs(inode), now(inode)) };
    let mut fs = info.lock();
    // SAFETY: the inode's superblock is mounted.
    if fs.is_read_only() || unsafe { shim::ferrofs_sb_rdonly((*inode).i_sb) } {
        return 0;
    }
    match fs.setattr(ino, &a, t) {
        Ok(_) | Err(EError::NotFound) => 0,
        Err(e) => kerr(e).to_errno(),
    }
}

/// `super_operations::evict_inode`: drop the page cache; delete the inode if it has no links.
pub(crate) unsafe extern "C" fn evict_inode(inode: *mut bindings::inode) {
    // SAFETY: the VFS passes an inode being evicted, which we own now.
    unsafe {
        bindings::truncate_inode_pages_final(&mut (*inode).i_data);
        bindings::clear_inode(inode);
        let sb = (*inode).i_sb;
        if (*inode).__bindgen_anon_1.i_nlink == 0 && !bindings::is_bad_inode(inode) && !shim::ferrofs_sb_rdonly(sb) {
            let info = isbi(inode);
            let ino = (*inode).i_ino as u64;
            // Waits while the filesystem is frozen (the engine is read-only then), as ext4.
            shim::ferrofs_sb_start_intwrite(sb);
            let mut fs = info.lock();
            if !fs.is_read_only() {
                if let Err(e) = fs.evict(ino) {
                    pr_warn!("mtd{}: could not free deleted inode {} ({:?}); it stays on the orphan list\n", info.mtd_index, ino, e);
                }
            }
            drop(fs);
            shim::ferrofs_sb_end_intwrite(sb);
        }
    }
}

pub(crate) unsafe extern "C" fn setattr(idmap: *mut bindings::mnt_idmap, dentry: *mut bindings::dentry, attr: *mut bindings::iattr) -> c_int {
    from_result(|| {
        // SAFETY: VFS setattr contract: `dentry` positive and its inode locked.
        unsafe {
            to_result(bindings::setattr_prepare(idmap, dentry, attr))?;
            let inode = shim::ferrofs_d_inode(dentry);
            let info = isbi(inode);
            let ino = (*inode).i_ino as u64;
            let mut size_changed = false;
            if (*attr).ia_valid & bindings::ATTR_SIZE != 0 {
                let size = (*attr).ia_size;
                if size < 0 {
                    return Err(EINVAL);
                }
                let old = shim::ferrofs_i_size_read(inode);
                // Let mmap writers' dirty folios reach the engine before it cuts the file.
                to_result(shim::ferrofs_filemap_write_and_wait((*inode).i_mapping))?;
                if size > old {
                    // mmap stores beyond the old EOF (in its last page) must not appear in the
                    // grown file: zero the tail of that page in the cache.
                    bindings::truncate_pagecache(inode, old);
                }
                let sa = SetAttr { size: Some(size as u64), ..SetAttr::default() };
                info.lock().setattr(ino, &sa, now(inode)).map_err(kerr)?;
                bindings::truncate_setsize(inode, size);
                size_changed = size != old;
            }
            bindings::setattr_copy(idmap, inode, attr);
            if size_changed {
                // truncate(2) through a path does not ask for new times; a size change still
                // updates mtime and ctime (POSIX).
                let t = bindings::inode_set_ctime_current(inode);
                (*inode).i_mtime_sec = t.tv_sec;
                (*inode).i_mtime_nsec = t.tv_nsec as u32;
            }
            let a = vfs_attrs(inode);
            info.lock().setattr(ino, &a, now(inode)).map_err(kerr)?;
        }
        Ok(0)
    })
}

pub(crate) unsafe extern "C" fn get_link(dentry: *mut bindings::dentry, inode: *mut bindings::inode, done: *mut bindings::delayed_call) -> *const c_char {
    if dentry.is_null() {
        // RCU walk: the engine lock may sleep.
        return ECHILD.to_ptr();
    }
    // SAFETY: VFS get_link contract: `inode` is a live symlink.
    unsafe {
        let size = (crate::engine::format::SYMLINK_MAX + 1) as usize;
        let buf = bindings::__kmalloc_noprof(size, bindings::GFP_KERNEL) as *mut u8;
        if buf.is_null() {
            return ENOMEM.to_ptr();
        }
        let slice = core::slice::from_raw_parts_mut(buf, size - 1);
        match isbi(inode).lock().readlink((*inode).i_ino as u64, slice) {
            Ok(n) => {
                *buf.add(n.min(size - 1)) = 0;
                shim::ferrofs_set_delayed_call_kfree(done, buf.cast());
                buf.cast()
            }
            Err(e) => {
                bindings::kfree(buf.cast());
                kerr(e).to_ptr()
            }
        }
    }
}
