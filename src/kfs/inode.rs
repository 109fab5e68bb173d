// SPDX-License-Identifier: GPL-2.0

//! Inodes: `FerroInode` (our inode container, from our own slab cache) and its cache, `Inode`
//! (a borrowed ferrofs VFS inode, with accessors for what the callbacks read and write),
//! `InodeRef` (an owned reference, `iput` on drop), `NewInode` (an `I_NEW` inode from `iget`,
//! failed on drop unless unlocked), `EvictingInode`, and the arguments of inode operations
//! (`Idmap`, `Iattr`, `DelayedCall`).

use core::ops::Deref;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use kernel::bindings;
use kernel::error::to_result;
use kernel::ffi::{c_char, c_int, c_ulong, c_void};
use kernel::prelude::*;
use kernel::types::Opaque;

use crate::engine::format::{Inode as EInode, Timespec};
use crate::engine::SetAttr;
use crate::kfs::{Dentry, LockedFolio, SuperBlock, Table};
use crate::shim;
use crate::super_::SbInfo;

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
    /// Write-back budget bytes `fallocate` holds for the file's next folios (src/falloc.rs):
    /// `write_begin` and `page_mkwrite` draw from it before the shared pool; given back at
    /// eviction.
    pub(crate) prealloc: AtomicU64,
}

/// The inode slab cache, or null while the module holds none.
static INODE_CACHE: AtomicPtr<bindings::kmem_cache> = AtomicPtr::new(ptr::null_mut());

/// The `ferrofs_inode` slab cache, destroyed on drop.
///
/// # Invariants
///
/// One value at a time, made at module init and dropped at module exit, when no ferrofs inode
/// can be allocated any more (no superblock remains).
pub(crate) struct InodeCache(());

impl InodeCache {
    /// # Safety
    ///
    /// At most one value exists at a time, and it is dropped only when no ferrofs superblock
    /// remains (at module exit).
    pub(crate) unsafe fn create() -> Result<Self> {
        // SAFETY: the constructor matches the object size given.
        let cache = unsafe { shim::ferrofs_inode_cache_create(core::mem::size_of::<FerroInode>() as u32, inode_ctor) };
        if cache.is_null() {
            return Err(ENOMEM);
        }
        INODE_CACHE.store(cache, Ordering::Release);
        Ok(InodeCache(()))
    }
}

impl Drop for InodeCache {
    fn drop(&mut self) {
        // SAFETY: no ferrofs superblock or inode can exist any more (type invariant);
        // `rcu_barrier` waits for the RCU-delayed `free_inode` calls before the cache goes
        // away. A leaked inode makes `kmem_cache_destroy` report the cache as still in use.
        unsafe {
            bindings::rcu_barrier();
            bindings::kmem_cache_destroy(INODE_CACHE.swap(ptr::null_mut(), Ordering::AcqRel));
        }
    }
}

/// Slab constructor: called once per object when its slab page is set up.
///
/// # Safety
///
/// `p` is an object of the inode cache.
unsafe extern "C" fn inode_ctor(p: *mut c_void) {
    // SAFETY: the slab allocator passes an object of our cache, `FerroInode`-sized.
    unsafe { bindings::inode_init_once(Opaque::raw_get(ptr::addr_of!((*(p as *mut FerroInode)).vfs))) };
}

/// `super_operations::alloc_inode`.
///
/// # Safety
///
/// Called by the VFS for a live ferrofs superblock.
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
        ptr::addr_of_mut!((*p).prealloc).write(AtomicU64::new(0));
        Opaque::raw_get(ptr::addr_of!((*p).vfs))
    }
}

/// `super_operations::free_inode`.
///
/// # Safety
///
/// Called by the VFS (after an RCU grace period) for an inode from `alloc_inode`.
pub(crate) unsafe extern "C" fn free_inode(inode: *mut bindings::inode) {
    // SAFETY: `inode` came from `alloc_inode`: it is the first field of a `FerroInode`
    // (`repr(C)`), so the pointers coincide.
    unsafe { bindings::kmem_cache_free(INODE_CACHE.load(Ordering::Acquire), inode.cast()) };
}

/// The engine inode number of a ferrofs inode.
///
/// # Safety
///
/// `inode` is a live inode allocated by `alloc_inode` (the first field of a `FerroInode`).
unsafe fn ferro_ino(inode: *mut bindings::inode) -> u64 {
    // SAFETY: per the contract; `FerroInode` is `repr(C)` with the VFS inode first, so the
    // pointers coincide. `ino` is written once, by `ino_set`, before the inode is visible.
    unsafe { (*inode.cast::<FerroInode>()).ino }
}

/// `iget5_locked`'s test: whether a hashed inode of our superblock is engine inode `*data`.
///
/// # Safety
///
/// `inode` is an inode of a ferrofs superblock, `data` the `u64` key `iget` passed.
unsafe extern "C" fn ino_test(inode: *mut bindings::inode, data: *mut c_void) -> c_int {
    // SAFETY: per the contract (every inode of our superblocks is a `FerroInode`).
    unsafe { c_int::from(ferro_ino(inode) == *data.cast::<u64>()) }
}

/// `iget5_locked`'s set: a new inode (not yet visible) becomes engine inode `*data`.
///
/// # Safety
///
/// `inode` is our freshly allocated `FerroInode`, not yet visible (the VFS calls this under
/// `inode_hash_lock`), `data` the `u64` key `iget` passed.
unsafe extern "C" fn ino_set(inode: *mut bindings::inode, data: *mut c_void) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        let ino = *data.cast::<u64>();
        (*inode.cast::<FerroInode>()).ino = ino;
        (*inode).i_ino = ino as c_ulong;
    }
    0
}

/// A device number in the form ferrofs stores (`new_encode_dev`).
pub(crate) fn new_encode_dev(dev: bindings::dev_t) -> u32 {
    // SAFETY: a pure computation.
    unsafe { shim::ferrofs_new_encode_dev(dev) }
}

/// What `iget` found.
pub(crate) enum Iget {
    /// An inode already in the cache, set up.
    Cached(InodeRef),
    /// A new inode to fill in, then `unlock`.
    New(NewInode),
}

/// Get the VFS inode of engine inode `ino` from the inode cache, or a new one to fill in. The
/// cache is keyed on the engine's full 64-bit number (kept in `FerroInode`), not on `i_ino`,
/// an `unsigned long` that truncates it on 32-bit kernels; the hash may truncate.
pub(crate) fn iget(sb: &SuperBlock, ino: u64) -> Result<Iget> {
    let mut key = ino;
    // SAFETY: `sb` is a mounted superblock (type invariant); `key` outlives the call, in which
    // `ino_test`/`ino_set` read it.
    let p = unsafe { bindings::iget5_locked(sb.as_ptr(), ino as c_ulong, Some(ino_test), Some(ino_set), ptr::addr_of_mut!(key).cast()) };
    let p = NonNull::new(p).ok_or(ENOMEM)?;
    // SAFETY: `iget5_locked` returned a referenced inode of `sb`, whose reference passes to the
    // wrapper; `I_NEW` is stable until `unlock_new_inode`, which only the new inode's owner (us)
    // calls.
    Ok(if unsafe { (*p.as_ptr()).i_state } & bindings::I_NEW == 0 {
        Iget::Cached(InodeRef(p))
    } else {
        Iget::New(NewInode(p))
    })
}

/// A live ferrofs inode.
///
/// # Invariants
///
/// The inode is live (referenced, by the VFS for the callback or by the caller) for the
/// lifetime of the reference, and belongs to a ferrofs superblock between `fill_super` and
/// `put_super` (every inode is evicted before `put_super`).
///
/// Attribute fields are read and written with plain loads and stores, as the C filesystems do:
/// the VFS serialises writers (the inode lock, or `I_NEW`), and readers tolerate a torn view.
#[repr(transparent)]
pub(crate) struct Inode(Opaque<bindings::inode>);

impl Inode {
    /// # Safety
    ///
    /// `p` is a live ferrofs inode of a mounted superblock for `'a` (the type invariant).
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::inode) -> &'a Inode {
        // SAFETY: `Inode` is a transparent wrapper of `bindings::inode`; valid per the contract.
        unsafe { &*p.cast::<Inode>() }
    }

    /// The host inode of a ferrofs file's mapping.
    ///
    /// # Safety
    ///
    /// `m` is the mapping of a live ferrofs inode (as the VFS passes to the address space
    /// operations), live for `'a`.
    pub(crate) unsafe fn from_mapping<'a>(m: *mut bindings::address_space) -> &'a Inode {
        // SAFETY: per the contract, `host` is the live ferrofs inode owning the mapping.
        unsafe { Inode::from_raw((*m).host) }
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::inode {
        self.0.get()
    }

    /// The engine's 64-bit inode number (set before the inode is visible and never changed;
    /// `i_ino` holds it truncated to `unsigned long`).
    pub(crate) fn ino(&self) -> u64 {
        // SAFETY: a live ferrofs inode (type invariant) comes from `alloc_inode`.
        unsafe { ferro_ino(self.as_ptr()) }
    }

    /// `i_size_read`.
    pub(crate) fn size(&self) -> i64 {
        // SAFETY: the inode is live (type invariant).
        unsafe { shim::ferrofs_i_size_read(self.as_ptr()) }
    }

    /// `i_size_write` (the caller holds the inode lock, or the folio lock in `write_end`, as the
    /// VFS requires of every `i_size_write`).
    pub(crate) fn set_size(&self, size: i64) {
        // SAFETY: the inode is live (type invariant); writers are serialised by the VFS locks.
        unsafe { shim::ferrofs_i_size_write(self.as_ptr(), size) }
    }

    /// `i_mode`.
    pub(crate) fn mode(&self) -> u32 {
        // SAFETY: the inode is live (type invariant).
        u32::from(unsafe { (*self.as_ptr()).i_mode })
    }

    pub(crate) fn uid(&self) -> u32 {
        // SAFETY: the inode is live (type invariant).
        unsafe { shim::ferrofs_i_uid_read(self.as_ptr()) }
    }

    pub(crate) fn gid(&self) -> u32 {
        // SAFETY: the inode is live (type invariant).
        unsafe { shim::ferrofs_i_gid_read(self.as_ptr()) }
    }

    /// The link count is zero.
    pub(crate) fn is_unlinked(&self) -> bool {
        // SAFETY: the inode is live (type invariant).
        unsafe { (*self.as_ptr()).__bindgen_anon_1.i_nlink == 0 }
    }

    /// `clear_nlink`.
    pub(crate) fn clear_nlink(&self) {
        // SAFETY: the inode is live (type invariant); the VFS callers hold its lock.
        unsafe { bindings::clear_nlink(self.as_ptr()) }
    }

    /// Set `i_ctime`.
    pub(crate) fn set_ctime(&self, t: Timespec) {
        // SAFETY: the inode is live (type invariant); writers are serialised by the VFS locks.
        unsafe {
            (*self.as_ptr()).i_ctime_sec = t.sec;
            (*self.as_ptr()).i_ctime_nsec = t.nsec;
        }
    }

    /// Set `i_ctime` to now (`inode_set_ctime_current`) and `i_mtime` to the same time.
    pub(crate) fn touch_mtime_ctime(&self) {
        // SAFETY: the inode is live (type invariant); the caller (setattr) holds its lock.
        unsafe {
            let t = bindings::inode_set_ctime_current(self.as_ptr());
            (*self.as_ptr()).i_mtime_sec = t.tv_sec;
            (*self.as_ptr()).i_mtime_nsec = t.tv_nsec as u32;
        }
    }

    /// `i_mtime`.
    pub(crate) fn mtime(&self) -> Timespec {
        // SAFETY: the inode is live (type invariant); a plain read (torn views tolerated).
        unsafe { Timespec { sec: (*self.as_ptr()).i_mtime_sec, nsec: (*self.as_ptr()).i_mtime_nsec } }
    }

    /// `i_ctime`.
    pub(crate) fn ctime(&self) -> Timespec {
        // SAFETY: as `mtime`.
        unsafe { Timespec { sec: (*self.as_ptr()).i_ctime_sec, nsec: (*self.as_ptr()).i_ctime_nsec } }
    }

    /// `i_state` (a racy read, as `__generic_file_fsync` does).
    pub(crate) fn state(&self) -> u32 {
        // SAFETY: the inode is live (type invariant).
        unsafe { (*self.as_ptr()).i_state }
    }

    /// A new reference to the inode (`ihold`).
    pub(crate) fn ihold(&self) -> InodeRef {
        // SAFETY: the inode is live (type invariant), so it may be referenced once more; the
        // new reference passes to the result.
        unsafe { bindings::ihold(self.as_ptr()) };
        InodeRef(NonNull::from(&self.0).cast())
    }

    /// Whether the inode is marked bad (`is_bad_inode`).
    pub(crate) fn is_bad(&self) -> bool {
        // SAFETY: the inode is live (type invariant).
        unsafe { bindings::is_bad_inode(self.as_ptr()) }
    }

    /// `mark_inode_dirty`.
    pub(crate) fn mark_dirty(&self) {
        // SAFETY: the inode is live (type invariant).
        unsafe { shim::ferrofs_mark_inode_dirty(self.as_ptr()) }
    }

    /// `sync_inode_metadata(inode, wait)`: write the inode through `write_inode` and wait.
    pub(crate) fn sync_metadata(&self) -> Result {
        // SAFETY: the inode is live (type invariant).
        to_result(unsafe { bindings::sync_inode_metadata(self.as_ptr(), 1) })
    }

    /// `pagecache_isize_extended`: after `i_size` grew from `from` to `to`, write-protect the
    /// old EOF folio's mapping so a store there faults (and is budgeted). The caller holds the
    /// inode lock and no folio lock.
    pub(crate) fn pagecache_isize_extended(&self, from: i64, to: i64) {
        // SAFETY: the inode is live (type invariant); the caller's locks are as required.
        unsafe { bindings::pagecache_isize_extended(self.as_ptr(), from, to) }
    }

    /// `truncate_pagecache(inode, from)`: drop the cache past `from`, zeroing the partial folio
    /// at `from`. The caller holds the inode lock.
    pub(crate) fn truncate_pagecache(&self, from: i64) {
        // SAFETY: the inode is live (type invariant); the caller holds its lock.
        unsafe { bindings::truncate_pagecache(self.as_ptr(), from) }
    }

    /// `truncate_setsize`: set `i_size` and drop the cache past it. The caller holds the inode
    /// lock.
    pub(crate) fn truncate_setsize(&self, size: i64) {
        // SAFETY: the inode is live (type invariant); the caller holds its lock.
        unsafe { bindings::truncate_setsize(self.as_ptr(), size) }
    }

    /// `truncate_pagecache_range(inode, from, to)`: drop the cached folios inside bytes
    /// `from..=to` and zero the parts of the folios at its ends that lie inside it. The caller
    /// holds the inode lock and the invalidate lock.
    pub(crate) fn truncate_pagecache_range(&self, from: i64, to: i64) {
        // SAFETY: the inode is live (type invariant); the caller holds its locks.
        unsafe { bindings::truncate_pagecache_range(self.as_ptr(), from, to) }
    }

    /// `inode_newsize_ok`: whether the file may grow to `size` (EFBIG past the limits, as
    /// `RLIMIT_FSIZE` sends SIGXFSZ).
    pub(crate) fn newsize_ok(&self, size: i64) -> Result {
        // SAFETY: the inode is live (type invariant).
        to_result(unsafe { bindings::inode_newsize_ok(self.as_ptr(), size) })
    }

    /// `set_nlink`. The caller holds the inode's lock or the inode is not yet visible.
    pub(crate) fn set_nlink(&self, nlink: u32) {
        // SAFETY: the inode is live (type invariant); writers are serialised by the caller.
        unsafe { bindings::set_nlink(self.as_ptr(), nlink) }
    }

    /// Take the inode lock (`inode_lock`: `i_rwsem` for writing), released when the guard is
    /// dropped. For the file operations the VFS calls without it (`fallocate`).
    pub(crate) fn lock(&self) -> InodeLock<'_> {
        // SAFETY: the inode is live (type invariant); the guard releases the lock.
        unsafe { bindings::down_write(ptr::addr_of_mut!((*self.as_ptr()).i_rwsem)) };
        InodeLock(self)
    }

    /// Take the mapping's invalidate lock (exclusive), released when the guard is dropped.
    pub(crate) fn invalidate_lock(&self) -> InvalidateLock<'_> {
        // SAFETY: the mapping of a live inode (type invariant); the guard unlocks it.
        unsafe { shim::ferrofs_filemap_invalidate_lock(self.mapping()) };
        InvalidateLock(self)
    }

    /// Take the mapping's invalidate lock shared (`filemap_invalidate_lock_shared`, as ext4's
    /// `page_mkwrite` does): excludes truncate and hole punching, which hold it exclusively.
    pub(crate) fn invalidate_lock_shared(&self) -> InvalidateLockShared<'_> {
        // SAFETY: the mapping of a live inode (type invariant); the guard unlocks it.
        unsafe { shim::ferrofs_filemap_invalidate_lock_shared(self.mapping()) };
        InvalidateLockShared(self)
    }

    /// Whether the mapping has dirty folios (`mapping_tagged(.., PAGECACHE_TAG_DIRTY)`).
    pub(crate) fn has_dirty_folios(&self) -> bool {
        // SAFETY: the mapping of a live inode (type invariant).
        unsafe { shim::ferrofs_mapping_has_dirty(self.mapping()) }
    }

    /// `inode_init_owner`: the VFS's ownership rules for a new inode in `dir` (setgid
    /// directories, idmapped mounts). Only on an inode not yet visible through a dentry, with
    /// `dir` locked.
    pub(crate) fn init_owner(&self, idmap: &Idmap, dir: &Inode, mode: u32) {
        // SAFETY: both inodes are live (type invariant); the caller's conditions are as the
        // VFS requires.
        unsafe { bindings::inode_init_owner(idmap.as_ptr(), self.as_ptr(), dir.as_ptr(), mode as bindings::umode_t) }
    }

    /// The locked folio at `pos` for `write_begin` (`__filemap_get_folio` with
    /// `FGP_WRITEBEGIN`: created if missing).
    pub(crate) fn write_begin_folio(&self, pos: i64) -> Result<LockedFolio> {
        // SAFETY: the mapping of a live inode (type invariant).
        let raw = unsafe { shim::ferrofs_write_begin_folio(self.mapping(), pos) };
        let raw = kernel::error::from_err_ptr(raw)?;
        // SAFETY: a locked, referenced folio of the mapping (or null), both passing to us.
        unsafe { LockedFolio::from_locked_owned(raw) }.ok_or(ENOMEM)
    }

    /// The cached folio at `pos`, locked (`filemap_lock_folio`), if there is one.
    pub(crate) fn lock_cached_folio(&self, pos: i64) -> Option<LockedFolio> {
        // SAFETY: the mapping of a live inode (type invariant).
        let raw = unsafe { shim::ferrofs_filemap_lock_folio(self.mapping(), pos) };
        let raw = kernel::error::from_err_ptr(raw).ok()?;
        // SAFETY: a locked, referenced folio (or null), both passing to us.
        unsafe { LockedFolio::from_locked_owned(raw) }
    }

    /// The ferrofs part of the inode.
    pub(crate) fn ferro(&self) -> &FerroInode {
        // SAFETY: every ferrofs inode is allocated by `alloc_inode` as the first field of a
        // `repr(C)` `FerroInode`, which lives as long as the inode.
        unsafe { &*self.as_ptr().cast::<FerroInode>() }
    }

    /// The page cache mapping (`i_mapping`).
    pub(crate) fn mapping(&self) -> *mut bindings::address_space {
        // SAFETY: the inode is live (type invariant).
        unsafe { (*self.as_ptr()).i_mapping }
    }

    /// `filemap_write_and_wait` of the inode's mapping, as an errno (0 on success).
    pub(crate) fn write_and_wait(&self) -> kernel::ffi::c_int {
        // SAFETY: the mapping of a live inode is valid.
        unsafe { shim::ferrofs_filemap_write_and_wait(self.mapping()) }
    }

    /// `filemap_write_and_wait_range` of bytes `start..=end` of the inode's mapping.
    pub(crate) fn write_and_wait_range(&self, start: i64, end: i64) -> Result {
        // SAFETY: the mapping of a live inode is valid.
        to_result(unsafe { shim::ferrofs_filemap_write_and_wait_range(self.mapping(), start, end) })
    }

    /// `mapping_set_error` on the inode's mapping.
    pub(crate) fn set_mapping_error(&self, err: kernel::ffi::c_int) {
        // SAFETY: the mapping of a live inode is valid.
        unsafe { shim::ferrofs_mapping_set_error(self.mapping(), err) }
    }

    /// The superblock.
    pub(crate) fn sb(&self) -> &SuperBlock {
        // SAFETY: a live ferrofs inode's `i_sb` is its mounted superblock (type invariant), which
        // outlives the inode.
        unsafe { SuperBlock::from_raw((*self.as_ptr()).i_sb) }
    }

    /// The per-superblock state.
    pub(crate) fn info(&self) -> &SbInfo {
        self.sb().info()
    }

    /// The current time, as the VFS would stamp this inode (`current_time`).
    pub(crate) fn now(&self) -> Timespec {
        // SAFETY: the inode is live (type invariant).
        let t = unsafe { bindings::current_time(self.as_ptr()) };
        Timespec { sec: t.tv_sec, nsec: t.tv_nsec as u32 }
    }

    /// The VFS inode's attributes as an engine `SetAttr` (everything but the size).
    pub(crate) fn attrs(&self) -> SetAttr {
        let p = self.as_ptr();
        // SAFETY: the inode is live (type invariant); plain reads of its attribute fields.
        unsafe {
            SetAttr {
                mode: Some(u32::from((*p).i_mode)),
                uid: Some(shim::ferrofs_i_uid_read(p)),
                gid: Some(shim::ferrofs_i_gid_read(p)),
                size: None,
                atime: Some(Timespec { sec: (*p).i_atime_sec, nsec: (*p).i_atime_nsec }),
                mtime: Some(Timespec { sec: (*p).i_mtime_sec, nsec: (*p).i_mtime_nsec }),
                ctime: Some(Timespec { sec: (*p).i_ctime_sec, nsec: (*p).i_ctime_nsec }),
                flags: None,
            }
        }
    }

    /// Put back attributes saved with `attrs` (mode, owner, times; `None` fields are left).
    /// The caller holds the inode's lock.
    pub(crate) fn restore_attrs(&self, a: &SetAttr) {
        let p = self.as_ptr();
        // SAFETY: the inode is live (type invariant); the caller holds its lock.
        unsafe {
            if let Some(m) = a.mode {
                (*p).i_mode = m as u16;
            }
            if let Some(u) = a.uid {
                shim::ferrofs_i_uid_write(p, u);
            }
            if let Some(g) = a.gid {
                shim::ferrofs_i_gid_write(p, g);
            }
            if let Some(t) = a.atime {
                (*p).i_atime_sec = t.sec;
                (*p).i_atime_nsec = t.nsec;
            }
            if let Some(t) = a.mtime {
                (*p).i_mtime_sec = t.sec;
                (*p).i_mtime_nsec = t.nsec;
            }
            if let Some(t) = a.ctime {
                (*p).i_ctime_sec = t.sec;
                (*p).i_ctime_nsec = t.nsec;
            }
        }
    }

    /// `set_nlink` and `i_ctime` from the engine: what a rename changes in its source and
    /// target inodes, which the VFS does not always lock (a directory renamed inside its
    /// parent), so nothing else of theirs is written.
    pub(crate) fn set_nlink_ctime(&self, nlink: u32, t: Timespec) {
        // SAFETY: the inode is live (type invariant). `vfs_rename` locks the target, except a
        // directory exchanged with another inside one parent, whose link count a rename does
        // not change (the same value is stored again).
        unsafe { bindings::set_nlink(self.as_ptr(), nlink) };
        self.set_ctime(t);
    }

    /// Copy attributes from the engine into the VFS inode. The size of a regular file is taken
    /// only when `with_size` (the page cache may hold data the engine has not been given yet).
    /// The caller holds the inode's lock, or the inode is new (`I_NEW`), as the VFS requires of
    /// attribute writers.
    pub(crate) fn set_attrs(&self, a: &EInode, with_size: bool) {
        let p = self.as_ptr();
        // SAFETY: the inode is live (type invariant); writers are serialised by the caller's
        // lock (see above).
        unsafe {
            (*p).i_mode = a.mode as u16;
            shim::ferrofs_i_uid_write(p, a.uid);
            shim::ferrofs_i_gid_write(p, a.gid);
            bindings::set_nlink(p, a.nlink);
            if with_size || a.mode & bindings::S_IFMT != bindings::S_IFREG {
                shim::ferrofs_i_size_write(p, a.size as i64);
            }
            (*p).i_atime_sec = a.atime.sec;
            (*p).i_atime_nsec = a.atime.nsec;
            (*p).i_mtime_sec = a.mtime.sec;
            (*p).i_mtime_nsec = a.mtime.nsec;
            (*p).i_ctime_sec = a.ctime.sec;
            (*p).i_ctime_nsec = a.ctime.nsec;
            (*p).i_generation = a.generation;
            (*p).i_blocks = a.size.div_ceil(4096) * 8;
        }
    }
}


/// The inode lock (`inode_lock`), held.
pub(crate) struct InodeLock<'a>(&'a Inode);

impl Drop for InodeLock<'_> {
    fn drop(&mut self) {
        // SAFETY: releases the lock `lock` took (`inode_unlock`).
        unsafe { bindings::up_write(ptr::addr_of_mut!((*self.0.as_ptr()).i_rwsem)) }
    }
}

/// The mapping's invalidate lock, held exclusively (`filemap_invalidate_lock`).
pub(crate) struct InvalidateLock<'a>(&'a Inode);

impl Drop for InvalidateLock<'_> {
    fn drop(&mut self) {
        // SAFETY: releases the lock `invalidate_lock` took.
        unsafe { shim::ferrofs_filemap_invalidate_unlock(self.0.mapping()) }
    }
}

/// The mapping's invalidate lock, held shared (`filemap_invalidate_lock_shared`).
pub(crate) struct InvalidateLockShared<'a>(&'a Inode);

impl Drop for InvalidateLockShared<'_> {
    fn drop(&mut self) {
        // SAFETY: releases the lock `invalidate_lock_shared` took.
        unsafe { shim::ferrofs_filemap_invalidate_unlock_shared(self.0.mapping()) }
    }
}

/// An owned reference to a ferrofs inode, dropped with `iput`.
///
/// # Invariants
///
/// The pointer is a live ferrofs inode of a mounted superblock, and the value owns one of its
/// references.
pub(crate) struct InodeRef(NonNull<bindings::inode>);

impl InodeRef {
    /// Hand the reference to the caller (`d_instantiate`, `d_splice_alias`, `d_make_root`).
    pub(crate) fn into_raw(self) -> *mut bindings::inode {
        let p = self.0.as_ptr();
        core::mem::forget(self);
        p
    }
}

impl Deref for InodeRef {
    type Target = Inode;
    fn deref(&self) -> &Inode {
        // SAFETY: the inode is live while we hold a reference (type invariant).
        unsafe { Inode::from_raw(self.0.as_ptr()) }
    }
}

impl Drop for InodeRef {
    fn drop(&mut self) {
        // SAFETY: drops the reference we own (type invariant). `iput` may evict the inode, so
        // it is never called under the engine lock (callers drop the lock first).
        unsafe { bindings::iput(self.0.as_ptr()) }
    }
}

/// A new inode from `iget`, locked (`I_NEW`) and invisible to others until `unlock`;
/// dropping it instead fails it (`iget_failed`: marked bad, unlocked, put).
///
/// # Invariants
///
/// The pointer is a referenced, `I_NEW` ferrofs inode of a mounted superblock that this value
/// owns (its reference and the right to set it up).
pub(crate) struct NewInode(NonNull<bindings::inode>);

impl NewInode {
    fn as_ptr(&self) -> *mut bindings::inode {
        self.0.as_ptr()
    }

    /// Set the inode's operations and, for a regular file, its address space operations (with
    /// the mapping's allocations made `GFP_NOFS`).
    pub(crate) fn set_ops(
        &self,
        iops: &'static Table<bindings::inode_operations>,
        fops: Option<&'static Table<bindings::file_operations>>,
        aops: Option<&'static Table<bindings::address_space_operations>>,
    ) {
        let p = self.as_ptr();
        // SAFETY: the inode is new and ours to set up (type invariant); the tables are static.
        unsafe {
            (*p).i_op = &iops.0;
            if let Some(f) = fops {
                (*p).__bindgen_anon_3.i_fop = &f.0;
            }
            if let Some(a) = aops {
                (*(*p).i_mapping).a_ops = &a.0;
                shim::ferrofs_mapping_set_gfp_nofs((*p).i_mapping);
            }
        }
    }

    /// `inode_nohighmem` (symlinks: `page_get_link` needs a directly mapped page).
    pub(crate) fn set_nohighmem(&self) {
        // SAFETY: the inode is new and ours to set up (type invariant).
        unsafe { bindings::inode_nohighmem(self.as_ptr()) }
    }

    /// `init_special_inode` for a device, FIFO or socket (`rdev` in `new_encode_dev` form).
    pub(crate) fn init_special(&self, mode: u32, rdev: u32) {
        // SAFETY: the inode is new and ours to set up (type invariant); decoding has no
        // preconditions.
        unsafe { bindings::init_special_inode(self.as_ptr(), mode as bindings::umode_t, shim::ferrofs_new_decode_dev(rdev)) }
    }

    /// `unlock_new_inode`: the inode is set up and visible; the reference passes on.
    pub(crate) fn unlock(self) -> InodeRef {
        let p = self.0;
        core::mem::forget(self);
        // SAFETY: the inode is new and ours (type invariant); unlocked once (self consumed).
        unsafe { bindings::unlock_new_inode(p.as_ptr()) };
        InodeRef(p)
    }
}

impl Deref for NewInode {
    type Target = Inode;
    fn deref(&self) -> &Inode {
        // SAFETY: a referenced ferrofs inode of a mounted superblock (type invariant); attribute
        // writes are serialised by `I_NEW` (only we see it).
        unsafe { Inode::from_raw(self.as_ptr()) }
    }
}

impl Drop for NewInode {
    fn drop(&mut self) {
        // SAFETY: the inode is new and ours (type invariant): `iget_failed` marks it bad,
        // unlocks it and drops our reference.
        unsafe { bindings::iget_failed(self.as_ptr()) }
    }
}

/// An inode handed to `evict_inode`.
///
/// # Invariants
///
/// The inode is being evicted (no other user), a ferrofs inode of a mounted superblock, live
/// for `'a`. Not `Copy`: `clear` runs once.
pub(crate) struct EvictingInode<'a>(&'a Inode);

impl<'a> EvictingInode<'a> {
    /// # Safety
    ///
    /// `p` is the inode the VFS passes to `evict_inode`, live for `'a`.
    pub(crate) unsafe fn from_raw(p: *mut bindings::inode) -> Self {
        // SAFETY: per the contract, a live ferrofs inode of a mounted superblock (inodes are
        // evicted before `put_super`).
        EvictingInode(unsafe { Inode::from_raw(p) })
    }

    /// Drop the page cache (`truncate_inode_pages_final`) and `clear_inode`; what is left is
    /// the inode's identity (number, link count, superblock) for the caller to act on.
    pub(crate) fn clear(self) -> &'a Inode {
        let p = self.0.as_ptr();
        // SAFETY: the inode is being evicted and ours (type invariant), as both require.
        unsafe {
            bindings::truncate_inode_pages_final(ptr::addr_of_mut!((*p).i_data));
            bindings::clear_inode(p);
        }
        self.0
    }
}

/// The idmap of the mount an operation came through.
///
/// # Invariants
///
/// Live for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct Idmap(Opaque<bindings::mnt_idmap>);

impl Idmap {
    /// # Safety
    ///
    /// `p` is the idmap the VFS passes to an inode operation, live for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::mnt_idmap) -> &'a Idmap {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<Idmap>() }
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::mnt_idmap {
        self.0.get()
    }
}

/// The attribute change of a `setattr`.
///
/// # Invariants
///
/// Live and not changed by others for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct Iattr(Opaque<bindings::iattr>);

impl Iattr {
    /// # Safety
    ///
    /// `p` is the `iattr` the VFS passes to `setattr`, live for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::iattr) -> &'a Iattr {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<Iattr>() }
    }

    fn as_ptr(&self) -> *mut bindings::iattr {
        self.0.get()
    }

    /// `ia_valid`: which attributes change (`ATTR_*`).
    pub(crate) fn valid(&self) -> u32 {
        // SAFETY: live (type invariant).
        unsafe { (*self.as_ptr()).ia_valid }
    }

    /// `ia_mode`: the new mode, with `ATTR_MODE`.
    pub(crate) fn mode(&self) -> u32 {
        // SAFETY: live (type invariant).
        u32::from(unsafe { (*self.as_ptr()).ia_mode })
    }

    /// `ia_size`: the new size, with `ATTR_SIZE`.
    pub(crate) fn size(&self) -> i64 {
        // SAFETY: live (type invariant).
        unsafe { (*self.as_ptr()).ia_size }
    }

    /// `setattr_prepare`: the VFS's permission and limit checks for this change of `dentry`.
    pub(crate) fn prepare(&self, idmap: &Idmap, dentry: &Dentry) -> Result {
        // SAFETY: all three are live (type invariants).
        to_result(unsafe { bindings::setattr_prepare(idmap.as_ptr(), dentry.as_ptr(), self.as_ptr()) })
    }

    /// `setattr_copy`: apply the change (all but the size) to `inode`, whose lock the caller
    /// holds, after `prepare` accepted it.
    pub(crate) fn copy_to(&self, idmap: &Idmap, inode: &Inode) {
        // SAFETY: all three are live (type invariants); the caller holds the inode lock.
        unsafe { bindings::setattr_copy(idmap.as_ptr(), inode.as_ptr(), self.as_ptr()) }
    }
}

/// The delayed call of a `get_link` (what frees the link target once the VFS is done).
///
/// # Invariants
///
/// Live for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct DelayedCall(Opaque<bindings::delayed_call>);

impl DelayedCall {
    /// # Safety
    ///
    /// `p` is the delayed call the VFS passes to `get_link`, live for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::delayed_call) -> &'a DelayedCall {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<DelayedCall>() }
    }

    /// Hand `target` (a NUL-terminated string) to the VFS, which frees it with `kfree` through
    /// this delayed call (`kfree_link`; a `KVec` is kmalloc'ed). Returns the string for
    /// `get_link` to return.
    pub(crate) fn kfree_link(&self, target: KVec<u8>) -> *const c_char {
        let (p, _len, _cap) = target.into_raw_parts();
        // SAFETY: the delayed call is live (type invariant); it takes over `p` and frees it
        // with `kfree` once the VFS is done with the target string.
        unsafe { shim::ferrofs_set_delayed_call_kfree(self.0.get(), p.cast()) };
        p.cast()
    }
}
