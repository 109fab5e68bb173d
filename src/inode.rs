// SPDX-License-Identifier: GPL-2.0

//! Inodes: the inode slab cache, `alloc_inode`/`free_inode`/`evict_inode`/`write_inode`, `iget`,
//! attribute copies between the engine and the VFS inode, `setattr` and `get_link`.

use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use kernel::bindings;
use kernel::error::{from_result, to_result};
use kernel::ffi::{c_char, c_int, c_ulong, c_void};
use kernel::prelude::*;
use kernel::types::Opaque;
use crate::engine::error::Error as EError;
use crate::engine::format::{FileType, Inode as EInode};
use crate::engine::SetAttr;
use crate::shim;
use crate::kfs::{kerr, Dentry, Inode, SuperBlock};
use crate::ops::OPS;
use crate::super_::Fs;

/// Get the VFS inode for `a`, filling it from `a` if it is new. Returns a referenced inode,
/// which the caller must hand on (`d_splice_alias`, `d_instantiate`, `d_make_root`) or `iput`.
pub(crate) fn iget(sb: &SuperBlock, a: &EInode) -> Result<*mut bindings::inode> {
    // The inode cache is keyed on the engine's full 64-bit number (kept in `FerroInode`), not on
    // `i_ino`, an `unsigned long` that truncates it on 32-bit kernels; the hash may truncate.
    let mut key = a.ino;
    // SAFETY: `sb` is a mounted superblock (type invariant); `key` outlives the call, in which
    // `ino_test`/`ino_set` read it.
    let inode = unsafe { bindings::iget5_locked(sb.as_ptr(), a.ino as c_ulong, Some(ino_test), Some(ino_set), ptr::addr_of_mut!(key).cast()) };
    if inode.is_null() {
        return Err(ENOMEM);
    }
    // SAFETY: `iget_locked` returned a referenced inode.
    if unsafe { (*inode).i_state } & bindings::I_NEW == 0 {
        return Ok(inode);
    }
    // SAFETY: a referenced ferrofs inode of a mounted superblock.
    unsafe { Inode::from_raw(inode) }.set_attrs(a, true);
    // SAFETY: the inode is new and locked (I_NEW): nobody else sees it until `unlock_new_inode`.
    unsafe {
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
                pr_err!("{}: corrupt inode {}: bad mode {:o}\n", sb.info().dev, a.ino, a.mode);
                bindings::iget_failed(inode);
                return Err(Error::from_errno(-(bindings::EUCLEAN as c_int)));
            }
        }
        bindings::unlock_new_inode(inode);
    }
    Ok(inode)
}

/// Refresh a VFS inode from the engine (after an operation changed it in the engine). The
/// caller holds the inode's lock (a VFS directory or attribute operation).
pub(crate) fn refresh(fs: &mut Fs, inode: &Inode) -> Result {
    let a = fs.getattr(inode.ino()).map_err(kerr)?;
    inode.set_attrs(&a, false);
    Ok(())
}

/// A ferrofs in-memory inode: the VFS inode, allocated from our own slab cache so that
/// `rmmod` can prove that no inode leaked (the cache must be empty to be destroyed).
#[repr(C)]
pub(crate) struct FerroInode {
    vfs: Opaque<bindings::inode>,
    /// The engine's inode number, set by `ino_set` before the inode is hashed (0 until then).
    ino: u64,
    /// The inode holds a write-back budget of one inode record (`BUDGET_PER_INODE`): charged
    /// by the first folio dirtied, used by the next `write_blocks` call (src/data.rs).
    pub(crate) ino_budget: AtomicBool,
}

/// The engine inode number of a ferrofs inode.
///
/// # Safety
///
/// `inode` is a live inode allocated by `alloc_inode` (the first field of a `FerroInode`).
pub(crate) unsafe fn ferro_ino(inode: *mut bindings::inode) -> u64 {
    // SAFETY: per the contract; `FerroInode` is `repr(C)` with the VFS inode first, so the
    // pointers coincide. `ino` is written once, by `ino_set`, before the inode is visible.
    unsafe { (*inode.cast::<FerroInode>()).ino }
}

/// `iget5_locked`'s test: whether a hashed inode of our superblock is engine inode `*data`.
unsafe extern "C" fn ino_test(inode: *mut bindings::inode, data: *mut c_void) -> c_int {
    // SAFETY: the VFS passes an inode of our superblock (every one is a `FerroInode`) and the
    // `u64` key `iget` gave it.
    unsafe { c_int::from(ferro_ino(inode) == *data.cast::<u64>()) }
}

/// `iget5_locked`'s set: a new inode (not yet visible) becomes engine inode `*data`.
unsafe extern "C" fn ino_set(inode: *mut bindings::inode, data: *mut c_void) -> c_int {
    // SAFETY: the VFS passes our freshly allocated `FerroInode`, under `inode_hash_lock`
    // before anyone else can see it, and the `u64` key `iget` gave it.
    unsafe {
        let ino = *data.cast::<u64>();
        (*inode.cast::<FerroInode>()).ino = ino;
        (*inode).i_ino = ino as c_ulong;
    }
    0
}

pub(crate) static INODE_CACHE: AtomicPtr<bindings::kmem_cache> = AtomicPtr::new(ptr::null_mut());

/// Slab constructor: called once per object when its slab page is set up.
pub(crate) unsafe extern "C" fn inode_ctor(p: *mut c_void) {
    // SAFETY: the slab allocator passes an object of our cache, `FerroInode`-sized.
    unsafe { bindings::inode_init_once(Opaque::raw_get(ptr::addr_of!((*(p as *mut FerroInode)).vfs))) };
}

pub(crate) unsafe extern "C" fn alloc_inode(sb: *mut bindings::super_block) -> *mut bindings::inode {
    // SAFETY: the cache exists while the module is loaded, and `sb` is being used by the VFS.
    let p = unsafe { shim::ferrofs_alloc_inode_sb(sb, INODE_CACHE.load(Ordering::Acquire)) } as *mut FerroInode;
    if p.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: `p` is a constructed object of our cache, not yet visible to anyone.
    unsafe {
        ptr::addr_of_mut!((*p).ino).write(0);
        ptr::addr_of_mut!((*p).ino_budget).write(AtomicBool::new(false));
        Opaque::raw_get(ptr::addr_of!((*p).vfs))
    }
}

pub(crate) unsafe extern "C" fn free_inode(inode: *mut bindings::inode) {
    // SAFETY: `inode` came from `alloc_inode`: it is the first field of a `FerroInode`
    // (`repr(C)`), so the pointers coincide.
    unsafe { bindings::kmem_cache_free(INODE_CACHE.load(Ordering::Acquire), inode.cast()) };
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
pub(crate) unsafe extern "C" fn write_inode(inode: *mut bindings::inode, _wbc: *mut bindings::writeback_control) -> c_int {
    // SAFETY: the VFS passes a live ferrofs inode.
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
pub(crate) unsafe extern "C" fn evict_inode(inode: *mut bindings::inode) {
    // SAFETY: the VFS passes an inode being evicted, which we own now.
    unsafe {
        bindings::truncate_inode_pages_final(&mut (*inode).i_data);
        bindings::clear_inode(inode);
    }
    // SAFETY: the inode stays allocated until `evict_inode` returns, and its superblock is
    // mounted (inodes are evicted before `put_super`).
    let inode = unsafe { Inode::from_raw(inode) };
    let sb = inode.sb();
    // the folios are gone (their budgets with them): so is the inode record's charge
    if inode.ferro().ino_budget.swap(false, Ordering::AcqRel) {
        sb.info().budget.release(crate::engine::writeback::BUDGET_PER_INODE);
    }
    // SAFETY: the inode is live (above).
    let bad = unsafe { bindings::is_bad_inode(inode.as_ptr()) };
    if inode.is_unlinked() && !bad && !sb.rdonly() {
        let info = sb.info();
        let ino = inode.ino();
        // Waits while the filesystem is frozen (the engine is read-only then), as ext4.
        // SAFETY: `sb` is mounted; paired with the end below.
        unsafe { shim::ferrofs_sb_start_intwrite(sb.as_ptr()) };
        let mut fs = info.lock();
        if !fs.is_read_only() {
            if let Err(e) = fs.evict(ino) {
                pr_warn!("{}: could not free deleted inode {} ({:?}); it stays on the orphan list\n", info.dev, ino, e);
            }
        }
        drop(fs);
        // SAFETY: ends the write section started above.
        unsafe { shim::ferrofs_sb_end_intwrite(sb.as_ptr()) };
    }
}

pub(crate) unsafe extern "C" fn setattr(idmap: *mut bindings::mnt_idmap, dentry: *mut bindings::dentry, attr: *mut bindings::iattr) -> c_int {
    from_result(|| {
        // SAFETY: VFS setattr contract: `dentry` positive, `attr` valid.
        to_result(unsafe { bindings::setattr_prepare(idmap, dentry, attr) })?;
        // SAFETY: as above; the inode is locked by the VFS.
        let inode = unsafe { Dentry::from_raw(dentry) }.inode().ok_or(ENOENT)?;
        let info = inode.info();
        let ino = inode.ino();
        let mut size_changed = false;
        // SAFETY: `attr` is valid for the call.
        let (valid, size) = unsafe { ((*attr).ia_valid, (*attr).ia_size) };
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
        // The VFS inode and the engine change together under the engine lock, so that
        // `write_inode` (which copies under that lock) never stores an older copy after them.
        let mut fs = info.lock();
        let old = inode.attrs();
        // SAFETY: the inode is live and locked; `attr` was checked by `setattr_prepare`.
        unsafe { bindings::setattr_copy(idmap, inode.as_ptr(), attr) };
        if size_changed {
            // truncate(2) through a path does not ask for new times; a size change still
            // updates mtime and ctime (POSIX).
            inode.touch_mtime_ctime();
        }
        let a = inode.attrs();
        if let Err(e) = fs.setattr(ino, &a, inode.now()) {
            // nothing half done: the VFS inode keeps what the engine keeps
            inode.restore_attrs(&old);
            return Err(kerr(e));
        }
        Ok(0)
    })
}

/// The size part of `setattr` (truncate, extend), under the mapping's invalidate lock so no
/// fault or readahead brings folios back meanwhile. Shrinking: `truncate_setsize` first (it
/// waits for the writeback of, and drops, the folios past the new size, whose budgets
/// `invalidate_folio` gives back), then the engine cut; a write-back of a dropped folio can
/// then no longer re-extend the file on flash. Growing: the engine first (it can run out of
/// space), then `truncate_setsize`. The cut is budgeted with the inode's write-back charge if
/// it holds one (the engine otherwise keeps reserved space from it: a cut that grows the
/// on-flash size writes an inode record like any other). The caller holds the inode lock.
fn set_size(inode: &Inode, old: i64, size: i64) -> Result {
    let info = inode.info();
    let mapping = inode.mapping();
    if inode.ferro().ino_budget.swap(false, Ordering::AcqRel) {
        info.budget.release(crate::engine::writeback::BUDGET_PER_INODE);
    }
    let sa = SetAttr { size: Some(size as u64), ..SetAttr::default() };
    // SAFETY: the mapping of a live inode; paired with the unlock below.
    unsafe { shim::ferrofs_filemap_invalidate_lock(mapping) };
    let r = if size > old {
        // stores through a mapping beyond the old EOF (in its last page) must not appear in
        // the grown file: zero that tail in the cache
        // SAFETY: the inode is live and locked.
        unsafe { bindings::truncate_pagecache(inode.as_ptr(), old) };
        let r = info.lock().setattr(inode.ino(), &sa, inode.now()).map_err(kerr);
        if r.is_ok() {
            // SAFETY: the inode is live and locked, as `truncate_setsize` requires.
            unsafe { bindings::truncate_setsize(inode.as_ptr(), size) };
        }
        r.map(|_| ())
    } else {
        // SAFETY: as above.
        unsafe { bindings::truncate_setsize(inode.as_ptr(), size) };
        let r = info.lock().setattr(inode.ino(), &sa, inode.now()).map_err(kerr);
        if r.is_err() {
            // the flash still holds the old size (and the data written back before the cut)
            inode.set_size(old);
        }
        r.map(|_| ())
    };
    // SAFETY: taken above.
    unsafe { shim::ferrofs_filemap_invalidate_unlock(mapping) };
    r.map(|_| ())
}

pub(crate) unsafe extern "C" fn get_link(dentry: *mut bindings::dentry, inode: *mut bindings::inode, done: *mut bindings::delayed_call) -> *const c_char {
    if dentry.is_null() {
        // RCU walk: the engine lock may sleep.
        return ECHILD.to_ptr();
    }
    // SAFETY: VFS get_link contract: `inode` is a live symlink.
    let inode = unsafe { Inode::from_raw(inode) };
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
    // A `KVec` is kmalloc'ed (`Kmalloc`), so the VFS's `kfree_link` frees it with `kfree`.
    let (p, _len, _cap) = buf.into_raw_parts();
    // SAFETY: `done` is the VFS's delayed call for this lookup; it takes over `p` and frees
    // it with `kfree` once the VFS is done with the target string.
    unsafe { shim::ferrofs_set_delayed_call_kfree(done, p.cast()) };
    p.cast()
}
