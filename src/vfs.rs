// SPDX-License-Identifier: GPL-2.0

//! The VFS layer: superblock, inode, file, directory, address-space and xattr callbacks over
//! the engine. Every callback is a thin `extern "C"` trampoline: it turns raw pointers into
//! engine arguments, takes the engine lock, calls the engine, and maps the result to an errno.
//!
//! Locking: one mutex per superblock around the engine. It is never held while calling back
//! into code that can copy to or from user memory (readdir collects entries first), and every
//! engine call runs in a `memalloc_nofs` scope so reclaim cannot re-enter ferrofs under it.
//!
//! Data path: `write_iter` goes through the page cache (`generic_file_write_iter`), and
//! `write_end` hands the copied bytes to the engine at once (write-through), so ENOSPC and I/O
//! errors reach the writer; the folio stays clean. Shared writable mappings dirty folios, which
//! `writepages` hands to the engine.

use kernel::ffi::{c_char, c_int, c_long, c_uint, c_void};
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use kernel::bindings;
use kernel::error::{from_result, to_result};
use kernel::prelude::*;
use kernel::c_str;
use kernel::sync::{lock::mutex::MutexBackend, lock::Guard, Mutex};

use crate::engine::error::Error as EError;
use crate::engine::format::{FileType, Inode, Timespec, MAX_FILE_SIZE, NAME_MAX, SB_MAGIC, XATTR_VALUE_MAX};
use crate::engine::fs::{Engine, MountOptions};
use crate::engine::posix::{CreateArgs, SetAttr};
use crate::kplatform::KPlatform;
use crate::mtd::MtdFlash;
use crate::shim;

/// The engine as the kernel instantiates it.
pub(crate) type Fs = Engine<KPlatform, MtdFlash>;

/// Mount options.
#[derive(Clone, Copy)]
pub(crate) struct MountOpts {
    /// Seconds between periodic checkpoints (`commit=`).
    pub(crate) commit: u32,
    /// Whether background GC runs (`gc=on|off`).
    pub(crate) gc: bool,
}

impl Default for MountOpts {
    fn default() -> Self {
        MountOpts { commit: 5, gc: true }
    }
}

/// Per-superblock state, owned by `sb->s_fs_info`.
#[pin_data]
pub(crate) struct SbInfo {
    #[pin]
    engine: Mutex<Fs>,
    pub(crate) opts: MountOpts,
    pub(crate) mtd_index: i32,
    /// The background thread (periodic checkpoints, GC), or null.
    bg: AtomicPtr<bindings::task_struct>,
    /// This filesystem's debugfs directory, or null.
    debugfs: AtomicPtr<bindings::dentry>,
    /// Statistics published in debugfs (refreshed every second, at sync and at unmount).
    stats: [AtomicU64; STAT_NAMES.len()],
    /// Counts this state in `LIVE_SUPERBLOCKS` while it exists.
    live: LiveToken,
}

/// Per-superblock states alive (published as /sys/kernel/debug/ferrofs/live_superblocks): with
/// nothing mounted it must be 0, also after failed mounts.
static LIVE_SUPERBLOCKS: AtomicU64 = AtomicU64::new(0);

/// Counts one `SbInfo` in `LIVE_SUPERBLOCKS`.
struct LiveToken;

impl LiveToken {
    fn new() -> Self {
        LIVE_SUPERBLOCKS.fetch_add(1, Ordering::Relaxed);
        LiveToken
    }
}

impl Drop for LiveToken {
    fn drop(&mut self) {
        LIVE_SUPERBLOCKS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The debugfs files under /sys/kernel/debug/ferrofs/mtdN/, in `Stats` order.
const STAT_NAMES: [&CStr; 15] = [
    c_str!("user_bytes"),
    c_str!("programmed_bytes"),
    c_str!("erases"),
    c_str!("gc_records"),
    c_str!("gc_bytes"),
    c_str!("checkpoints"),
    c_str!("replayed_records"),
    c_str!("retired_segments"),
    c_str!("free_segments"),
    // fault counters since the mount (`FaultStats`)
    c_str!("corrected_reads"),
    c_str!("uncorrectable_reads"),
    c_str!("scrubbed_segments"),
    c_str!("program_failures"),
    c_str!("erase_failures"),
    c_str!("io_errors"),
];

/// The module's debugfs root, /sys/kernel/debug/ferrofs.
static DEBUGFS_ROOT: AtomicPtr<bindings::dentry> = AtomicPtr::new(ptr::null_mut());

/// The engine, locked, inside a `memalloc_nofs` scope.
pub(crate) struct Locked<'a> {
    guard: Guard<'a, Fs, MutexBackend>,
    nofs: c_uint,
}

impl core::ops::Deref for Locked<'_> {
    type Target = Fs;
    fn deref(&self) -> &Fs {
        &self.guard
    }
}

impl core::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Fs {
        &mut self.guard
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: restores the flags saved by the matching `memalloc_nofs_save` in `lock`.
        unsafe { shim::ferrofs_memalloc_nofs_restore(self.nofs) };
    }
}

impl SbInfo {
    /// Publish the engine's counters.
    fn publish_stats(&self, fs: &Fs) {
        let s = fs.stats();
        let f = fs.fault_stats();
        let vals = [
            s.user_bytes, s.programmed_bytes, s.erases, s.gc_records, s.gc_bytes, s.checkpoints, s.replayed, s.retired, s.free_segments,
            f.corrected_reads, f.uncorrectable_reads, f.scrubbed_segments, f.program_failures, f.erase_failures, f.io_errors,
        ];
        for (slot, v) in self.stats.iter().zip(vals) {
            slot.store(v, Ordering::Relaxed);
        }
    }

    pub(crate) fn lock(&self) -> Locked<'_> {
        // SAFETY: always paired with the restore in `Locked::drop`.
        let nofs = unsafe { shim::ferrofs_memalloc_nofs_save() };
        Locked { guard: self.engine.lock(), nofs }
    }
}

/// The `SbInfo` of a mounted superblock.
///
/// # Safety
///
/// `sb` must be a ferrofs superblock between `fill_super` and `put_super`.
unsafe fn sbi<'a>(sb: *mut bindings::super_block) -> &'a SbInfo {
    // SAFETY: per the contract, `s_fs_info` points at the `SbInfo` set up by `fill_super`,
    // which lives until `put_super`.
    unsafe { &*((*sb).s_fs_info as *const SbInfo) }
}

/// The `SbInfo` of the filesystem holding `inode`.
///
/// # Safety
///
/// `inode` must be a live ferrofs inode.
unsafe fn isbi<'a>(inode: *mut bindings::inode) -> &'a SbInfo {
    // SAFETY: a live inode's `i_sb` is its mounted superblock.
    unsafe { sbi((*inode).i_sb) }
}

/// An engine error as a kernel error.
fn kerr(e: EError) -> Error {
    Error::from_errno(-e.errno())
}

/// The current time, as the VFS would stamp `inode`.
///
/// # Safety
///
/// `inode` must be valid.
unsafe fn now(inode: *mut bindings::inode) -> Timespec {
    // SAFETY: `inode` is valid per the contract.
    let t = unsafe { bindings::current_time(inode) };
    Timespec { sec: t.tv_sec, nsec: t.tv_nsec as u32 }
}

/// The name of `dentry` as bytes.
///
/// # Safety
///
/// `d` must be valid; the name is valid while the caller holds the dentry (the VFS keeps it
/// stable across the directory operations that receive it).
unsafe fn dname<'a>(d: *const bindings::dentry) -> &'a [u8] {
    let mut len = 0u32;
    // SAFETY: `d` is valid per the contract.
    let p = unsafe { shim::ferrofs_dentry_name(d, &mut len) };
    // SAFETY: `d_name.name` points at `d_name.len` bytes, stable per the contract.
    unsafe { core::slice::from_raw_parts(p, len as usize) }
}

/// A NUL-terminated C string as bytes (without the NUL).
///
/// # Safety
///
/// `s` must be a valid NUL-terminated string that outlives the result.
unsafe fn cstr<'a>(s: *const c_char) -> &'a [u8] {
    // SAFETY: per the contract.
    unsafe { CStr::from_char_ptr(s) }.as_bytes()
}

const SB_RDONLY: u32 = 1;
const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

/// Copy attributes from the engine into a VFS inode. The size of a regular file is taken only
/// when `with_size` (the page cache may hold data the engine has not been given yet).
///
/// # Safety
///
/// `inode` must be valid and its caller must be allowed to update its attributes.
unsafe fn copy_attrs(inode: *mut bindings::inode, a: &Inode, with_size: bool) {
    // SAFETY: `inode` is valid per the contract.
    unsafe {
        (*inode).i_mode = a.mode as u16;
        shim::ferrofs_i_uid_write(inode, a.uid);
        shim::ferrofs_i_gid_write(inode, a.gid);
        bindings::set_nlink(inode, a.nlink);
        if with_size || a.mode & S_IFMT != S_IFREG {
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
unsafe fn iget(sb: *mut bindings::super_block, a: &Inode) -> Result<*mut bindings::inode> {
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
        let ops = &*ptr::addr_of!(OPS);
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
unsafe fn refresh(fs: &mut Fs, inode: *mut bindings::inode) -> Result {
    // SAFETY: `inode` is valid per the contract.
    let ino = unsafe { (*inode).i_ino } as u64;
    let a = fs.getattr(ino).map_err(kerr)?;
    // SAFETY: per the contract.
    unsafe { copy_attrs(inode, &a, false) };
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Operation tables

/// A C operations table, shareable between threads.
#[repr(transparent)]
pub(crate) struct Table<T>(T);
// SAFETY: the tables are immutable after initialisation and hold only function pointers.
unsafe impl<T> Sync for Table<T> {}

pub(crate) struct Ops {
    sops: Table<bindings::super_operations>,
    dir_iops: Table<bindings::inode_operations>,
    file_iops: Table<bindings::inode_operations>,
    symlink_iops: Table<bindings::inode_operations>,
    special_iops: Table<bindings::inode_operations>,
    dir_fops: Table<bindings::file_operations>,
    file_fops: Table<bindings::file_operations>,
    aops: Table<bindings::address_space_operations>,
}

// SAFETY: all-zero is a valid value for these C structs (null function pointers).
const fn zeroed<T>() -> T {
    // SAFETY: only used for the C operation structs above, for which all-zero means "no callback".
    unsafe { core::mem::zeroed() }
}

static OPS: Ops = Ops {
    sops: Table(bindings::super_operations {
        alloc_inode: Some(alloc_inode),
        free_inode: Some(free_inode),
        put_super: Some(put_super),
        statfs: Some(statfs),
        sync_fs: Some(sync_fs),
        write_inode: Some(write_inode),
        evict_inode: Some(evict_inode),
        show_options: Some(show_options),
        freeze_fs: Some(freeze_fs),
        unfreeze_fs: Some(unfreeze_fs),
        ..zeroed()
    }),
    dir_iops: Table(bindings::inode_operations {
        lookup: Some(lookup),
        create: Some(create),
        mkdir: Some(mkdir),
        rmdir: Some(rmdir),
        unlink: Some(unlink),
        link: Some(link),
        symlink: Some(symlink),
        mknod: Some(mknod),
        rename: Some(rename),
        setattr: Some(setattr),
        listxattr: Some(listxattr),
        ..zeroed()
    }),
    file_iops: Table(bindings::inode_operations { setattr: Some(setattr), listxattr: Some(listxattr), ..zeroed() }),
    symlink_iops: Table(bindings::inode_operations {
        get_link: Some(get_link),
        setattr: Some(setattr),
        listxattr: Some(listxattr),
        ..zeroed()
    }),
    special_iops: Table(bindings::inode_operations { setattr: Some(setattr), listxattr: Some(listxattr), ..zeroed() }),
    dir_fops: Table(bindings::file_operations {
        llseek: Some(dir_llseek),
        read: Some(bindings::generic_read_dir),
        iterate_shared: Some(iterate_shared),
        fsync: Some(fsync),
        ..zeroed()
    }),
    file_fops: Table(bindings::file_operations {
        llseek: Some(file_llseek),
        read_iter: Some(bindings::generic_file_read_iter),
        write_iter: Some(bindings::generic_file_write_iter),
        mmap: Some(bindings::generic_file_mmap),
        open: Some(bindings::generic_file_open),
        fsync: Some(fsync),
        splice_read: Some(bindings::filemap_splice_read),
        splice_write: Some(bindings::iter_file_splice_write),
        ..zeroed()
    }),
    aops: Table(bindings::address_space_operations {
        read_folio: Some(read_folio),
        readahead: Some(readahead),
        writepages: Some(writepages),
        dirty_folio: Some(bindings::filemap_dirty_folio),
        write_begin: Some(write_begin),
        write_end: Some(write_end),
        ..zeroed()
    }),
};

// ---------------------------------------------------------------------------------------------
// The inode cache and module-wide state

/// A ferrofs in-memory inode: the VFS inode, allocated from our own slab cache so that
/// `rmmod` can prove that no inode leaked (the cache must be empty to be destroyed).
#[repr(C)]
pub(crate) struct FerroInode {
    vfs: bindings::inode,
}

static INODE_CACHE: AtomicPtr<bindings::kmem_cache> = AtomicPtr::new(ptr::null_mut());

/// Slab constructor: called once per object when its slab page is set up.
unsafe extern "C" fn inode_ctor(p: *mut c_void) {
    // SAFETY: the slab allocator passes an object of our cache, `FerroInode`-sized.
    unsafe { bindings::inode_init_once(ptr::addr_of_mut!((*(p as *mut FerroInode)).vfs)) };
}

unsafe extern "C" fn alloc_inode(sb: *mut bindings::super_block) -> *mut bindings::inode {
    // SAFETY: the cache exists while the module is loaded, and `sb` is being used by the VFS.
    let p = unsafe { shim::ferrofs_alloc_inode_sb(sb, INODE_CACHE.load(Ordering::Acquire)) } as *mut FerroInode;
    if p.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: `p` is a constructed object of our cache.
    unsafe { ptr::addr_of_mut!((*p).vfs) }
}

unsafe extern "C" fn free_inode(inode: *mut bindings::inode) {
    // SAFETY: `inode` came from `alloc_inode`: it is the first field of a `FerroInode`
    // (`repr(C)`), so the pointers coincide.
    unsafe { bindings::kmem_cache_free(INODE_CACHE.load(Ordering::Acquire), inode.cast()) };
}

/// Module load: create the inode cache and the debugfs root.
pub(crate) fn module_init() -> Result {
    // SAFETY: the constructor matches the object size given.
    let cache = unsafe { shim::ferrofs_inode_cache_create(core::mem::size_of::<FerroInode>() as u32, inode_ctor) };
    if cache.is_null() {
        return Err(ENOMEM);
    }
    INODE_CACHE.store(cache, Ordering::Release);
    // SAFETY: a static name; a null parent means the debugfs root. Errors (no debugfs) come
    // back as error pointers, which the other debugfs calls accept and ignore.
    let root = unsafe { shim::ferrofs_debugfs_dir(c_str!("ferrofs").as_char_ptr(), ptr::null_mut()) };
    DEBUGFS_ROOT.store(root, Ordering::Release);
    // SAFETY: a static counter, which outlives the file (removed with the root at module exit).
    unsafe { shim::ferrofs_debugfs_u64(c_str!("live_superblocks").as_char_ptr(), root, LIVE_SUPERBLOCKS.as_ptr()) };
    Ok(())
}

/// Module unload (after the filesystem type is unregistered, so no superblock remains).
pub(crate) fn module_exit() {
    // SAFETY: no ferrofs superblock or inode can exist any more; `rcu_barrier` waits for the
    // RCU-delayed `free_inode` calls before the cache goes away. A leaked inode makes
    // `kmem_cache_destroy` report the cache as still in use.
    unsafe {
        shim::ferrofs_debugfs_remove(DEBUGFS_ROOT.swap(ptr::null_mut(), Ordering::AcqRel));
        bindings::rcu_barrier();
        bindings::kmem_cache_destroy(INODE_CACHE.swap(ptr::null_mut(), Ordering::AcqRel));
    }
}

// ---------------------------------------------------------------------------------------------
// The background thread: periodic checkpoints (commit=) and background GC (gc=on)

unsafe extern "C" fn bg_thread(data: *mut c_void) -> c_int {
    let sb = data as *mut bindings::super_block;
    // SAFETY: `data` is the superblock, which outlives the thread: `put_super` (and a
    // remount read-only) stop the thread before anything is freed.
    let info = unsafe { sbi(sb) };
    let mut last_seq = info.lock().log_seq();
    let mut ticks = 0u32;
    // SAFETY: called from the kthread itself: it takes part in system suspend (the freezer).
    unsafe { shim::ferrofs_set_freezable() };
    // SAFETY: a plain conversion.
    let second = unsafe { bindings::__msecs_to_jiffies(1000) } as c_long;
    loop {
        // The sleep state is set before the stop test, so a `kthread_stop` after the test
        // still wakes the sleep below at once: unmount does not wait for the timeout.
        // SAFETY: called from the kthread itself.
        unsafe { shim::ferrofs_set_current_interruptible() };
        // SAFETY: as above.
        if unsafe { bindings::kthread_should_stop() } {
            // SAFETY: as above.
            unsafe { shim::ferrofs_set_current_running() };
            break;
        }
        // SAFETY: sleeps (freezable) until the timeout or a wake-up; returns running.
        unsafe { bindings::schedule_timeout(second) };
        // SAFETY: called from the kthread itself, running; enters the freezer if a system
        // suspend is freezing tasks.
        if unsafe { bindings::kthread_freezable_should_stop(ptr::null_mut()) } {
            break;
        }
        ticks = ticks.saturating_add(1);
        let mut fs = info.lock();
        // Read-only (remount, freeze, a read-only mount) or failed: nothing to do.
        // SAFETY: `sb` is mounted (see above).
        if fs.is_read_only() || fs.is_failed() || unsafe { shim::ferrofs_sb_rdonly(sb) } {
            continue;
        }
        if info.opts.gc {
            if let Err(e) = fs.gc_step(true) {
                if e != EError::NoSpace {
                    pr_warn!("mtd{}: background GC stopped on error {:?}\n", info.mtd_index, e);
                }
            }
        }
        if ticks >= info.opts.commit && fs.log_seq() != last_seq {
            if let Err(e) = fs.sync() {
                pr_err!("mtd{}: periodic checkpoint failed: {:?}\n", info.mtd_index, e);
            }
            last_seq = fs.log_seq();
            ticks = 0;
        }
        info.publish_stats(&fs);
    }
    0
}

/// Start the background thread of a read-write superblock.
///
/// # Safety
///
/// `sb` must be fully set up by `fill_super` and not being torn down; the caller holds
/// `s_umount` (or is `fill_super`), so `bg` has no concurrent writer.
unsafe fn start_bg(sb: *mut bindings::super_block) {
    // SAFETY: per the contract.
    let info = unsafe { sbi(sb) };
    if !info.bg.load(Ordering::Acquire).is_null() {
        return;
    }
    let mut name = [0u8; 16];
    let mut w = ByteWriter { buf: &mut name, len: 0 };
    let _ = core::fmt::write(&mut w, format_args!("mtd{}", info.mtd_index));
    // SAFETY: `bg_thread` runs until `kthread_stop`; the name format is a plain "%s" and
    // `name` is NUL-terminated (ByteWriter keeps the last byte zero).
    let task = unsafe {
        bindings::kthread_create_on_node(Some(bg_thread), sb.cast(), -1, c_str!("ferrofs/%s").as_char_ptr(), name.as_ptr())
    };
    let task = match kernel::error::from_err_ptr(task) {
        Ok(t) => t,
        Err(e) => {
            pr_warn!("mtd{}: no background thread ({}): checkpoints only at sync and unmount\n", info.mtd_index, e.to_errno());
            return;
        }
    };
    info.bg.store(task, Ordering::Release);
    // SAFETY: `task` is a freshly created kthread.
    unsafe { bindings::wake_up_process(task) };
}

/// Stop the background thread, if it runs (it wakes at once and exits).
fn stop_bg(info: &SbInfo) {
    let task = info.bg.swap(ptr::null_mut(), Ordering::AcqRel);
    if !task.is_null() {
        // SAFETY: `task` is our kthread, which only returns once asked to stop.
        unsafe { bindings::kthread_stop(task) };
    }
}

/// Start the background thread and publish the debugfs statistics of a mounted superblock.
///
/// # Safety
///
/// `sb` must be fully set up by `fill_super`.
unsafe fn start_services(sb: *mut bindings::super_block, read_only: bool) {
    // SAFETY: per the contract.
    let info = unsafe { sbi(sb) };
    let mut name = [0u8; 16];
    let mut w = ByteWriter { buf: &mut name, len: 0 };
    let _ = core::fmt::write(&mut w, format_args!("mtd{}", info.mtd_index));
    // SAFETY: `name` is NUL-terminated (ByteWriter keeps the last byte zero); the parent is our
    // root or an error pointer, which debugfs accepts.
    let dir = unsafe { shim::ferrofs_debugfs_dir(name.as_ptr().cast(), DEBUGFS_ROOT.load(Ordering::Acquire)) };
    info.debugfs.store(dir, Ordering::Release);
    for (n, slot) in STAT_NAMES.iter().zip(info.stats.iter()) {
        // SAFETY: the counters live in `SbInfo`, which outlives the directory (removed first
        // in `put_super`).
        unsafe { shim::ferrofs_debugfs_u64(n.as_char_ptr(), dir, slot.as_ptr()) };
    }
    info.publish_stats(&info.lock());
    if !read_only {
        // SAFETY: per the contract.
        unsafe { start_bg(sb) };
    }
}

// ---------------------------------------------------------------------------------------------
// Mounting

/// `file_system_type::init_fs_context`.
pub(crate) unsafe extern "C" fn init_fs_context(fc: *mut bindings::fs_context) -> c_int {
    from_result(|| {
        let opts = KBox::new(MountOpts::default(), GFP_KERNEL)?;
        // SAFETY: `fc` is valid and ours to set up; ownership of the box passes to the context
        // and comes back in `ferrofs_fc_free`.
        unsafe {
            shim::ferrofs_fc_set_fs_private(fc, KBox::into_raw(opts).cast());
            shim::ferrofs_fc_set_ops(fc);
        }
        Ok(0)
    })
}

/// The mount options being built in `fc`.
///
/// # Safety
///
/// `fc` must be a ferrofs fs_context set up by `init_fs_context` and not yet freed.
unsafe fn fc_opts<'a>(fc: *mut bindings::fs_context) -> &'a mut MountOpts {
    // SAFETY: per the contract, fs_private is the `MountOpts` box set in `init_fs_context`.
    unsafe { &mut *(shim::ferrofs_fc_fs_private(fc) as *mut MountOpts) }
}

/// `fs_context_operations::free`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_fc_free(fc: *mut bindings::fs_context) {
    // SAFETY: `fc` is ours; fs_private is null or the box from `init_fs_context`.
    unsafe {
        let p = shim::ferrofs_fc_fs_private(fc) as *mut MountOpts;
        if !p.is_null() {
            drop(KBox::from_raw(p));
            shim::ferrofs_fc_set_fs_private(fc, ptr::null_mut());
        }
    }
}

/// `fs_context_operations::parse_param`: `commit=SECONDS`, `gc=on|off`. Anything else is left
/// to the VFS (`source`, generic flags such as `ro`), which rejects unknown names by name.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_parse_param(fc: *mut bindings::fs_context, param: *mut bindings::fs_parameter) -> c_int {
    // SAFETY: the VFS passes a valid context and parameter.
    let (key_ptr, val_ptr) = unsafe { (shim::ferrofs_param_key(param), shim::ferrofs_param_string(param)) };
    // SAFETY: `key` is a NUL-terminated string owned by `param`.
    let key = unsafe { cstr(key_ptr) };
    // SAFETY: `val_ptr` is null or a NUL-terminated string owned by `param`.
    let val = if val_ptr.is_null() { None } else { Some(unsafe { cstr(val_ptr) }) };
    // SAFETY: `fc` was set up by `init_fs_context`.
    let opts = unsafe { fc_opts(fc) };
    let bad = || {
        // SAFETY: `fc` and `key_ptr` are valid.
        unsafe { shim::ferrofs_fc_invalid_value(fc, key_ptr) }
    };
    match key {
        b"commit" => match val.and_then(parse_u32) {
            Some(s) if (1..=3600).contains(&s) => opts.commit = s,
            _ => return bad(),
        },
        b"gc" => match val {
            Some(b"on") => opts.gc = true,
            Some(b"off") => opts.gc = false,
            _ => return bad(),
        },
        _ => return -(bindings::ENOPARAM as c_int),
    }
    0
}

fn parse_u32(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 9 {
        return None;
    }
    let mut v = 0u32;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u32::from(c - b'0');
    }
    Some(v)
}

/// `fs_context_operations::get_tree`: find the MTD device named by the source.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_get_tree(fc: *mut bindings::fs_context) -> c_int {
    // SAFETY: `fc` is valid; `fill_super` matches the callback type.
    unsafe { shim::ferrofs_get_tree_mtd(fc, fill_super) }
}

/// `fs_context_operations::reconfigure` (remount).
///
/// rw -> ro: write everything out (`sync_filesystem`), stop the background thread, and switch
/// the engine to read-only (a checkpoint, then nothing more is written, unmount included).
/// ro -> rw: switch the engine back (after a read-only mount this finishes the mount: orphans,
/// new log heads, a checkpoint; a root file system is mounted read-only, then remounted
/// read-write) and restart the background thread. Refused when the log is damaged or the
/// volume has unknown read-only features.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_reconfigure(fc: *mut bindings::fs_context) -> c_int {
    from_result(|| {
        // SAFETY: `fc` is a reconfiguration context of a mounted ferrofs.
        let sb = unsafe { shim::ferrofs_fc_root_sb(fc) };
        // SAFETY: as above.
        let (new_flags, old_ro) = unsafe { (shim::ferrofs_fc_sb_flags(fc), shim::ferrofs_sb_rdonly(sb)) };
        let new_ro = new_flags & SB_RDONLY != 0;
        // SAFETY: `sb` is mounted.
        let info = unsafe { sbi(sb) };
        let fc_err = |msg: &'static CStr| {
            // SAFETY: `fc` is valid; the message is a static string.
            Error::from_errno(unsafe { shim::ferrofs_fc_error(fc, msg.as_char_ptr()) })
        };
        if old_ro && !new_ro {
            let r = {
                let mut fs = info.lock();
                // A read-only MTD (no MTD_WRITEABLE) stays read-only: refused with EROFS and a
                // message, before the engine tries to finish the mount on it.
                match fs.flash().check_writeable(false) {
                    Ok(()) => fs.set_read_only(false),
                    Err(e) => return Err(e),
                }
            };
            match r {
                Ok(()) => {}
                Err(EError::Corrupt) => {
                    return Err(fc_err(c_str!("the log is damaged (see the kernel log); the volume stays read-only")));
                }
                Err(EError::ReadOnly) => {
                    return Err(fc_err(c_str!("the volume has features this version can only read; it stays read-only")));
                }
                Err(e) => {
                    pr_err!("mtd{}: cannot remount read-write: error {:?}\n", info.mtd_index, e);
                    return Err(kerr(e));
                }
            }
            // SAFETY: `sb` is mounted and the caller holds s_umount.
            unsafe { start_bg(sb) };
            pr_info!("mtd{}: remounted read-write\n", info.mtd_index);
            return Ok(0);
        }
        // SAFETY: `sb` is mounted and the caller holds s_umount.
        to_result(unsafe { bindings::sync_filesystem(sb) })?;
        if !old_ro && new_ro {
            stop_bg(info);
            let r = info.lock().set_read_only(true);
            if let Err(e) = r {
                // stay read-write, as the VFS does when this fails
                pr_err!("mtd{}: cannot remount read-only: checkpoint error {:?}\n", info.mtd_index, e);
                let _ = info.lock().set_read_only(false);
                // SAFETY: as above.
                unsafe { start_bg(sb) };
                return Err(kerr(e));
            }
            info.publish_stats(&info.lock());
        }
        Ok(0)
    })
}

/// `super_operations::freeze_fs` (after `freeze_super` synced everything): the engine turns
/// read-only, so neither the background thread nor anything else programs the flash while
/// the filesystem is frozen.
unsafe extern "C" fn freeze_fs(sb: *mut bindings::super_block) -> c_int {
    // SAFETY: `sb` is mounted; the VFS holds s_umount.
    let info = unsafe { sbi(sb) };
    let mut fs = info.lock();
    match fs.set_read_only(true) {
        Ok(()) => 0,
        Err(e) => {
            // the freeze fails: writable again
            let _ = fs.set_read_only(false);
            kerr(e).to_errno()
        }
    }
}

/// `super_operations::unfreeze_fs`.
unsafe extern "C" fn unfreeze_fs(sb: *mut bindings::super_block) -> c_int {
    // SAFETY: `sb` is mounted; the VFS holds s_umount.
    let info = unsafe { sbi(sb) };
    let r = info.lock().set_read_only(false);
    match r {
        Ok(()) => 0,
        Err(e) => kerr(e).to_errno(),
    }
}

/// `fill_super` for `get_tree_mtd`.
unsafe extern "C" fn fill_super(sb: *mut bindings::super_block, fc: *mut bindings::fs_context) -> c_int {
    from_result(|| {
        // SAFETY: `fc` was set up by `init_fs_context`.
        let opts = *unsafe { fc_opts(fc) };
        // SAFETY: `get_tree_mtd` set `s_mtd` to a referenced MTD device before calling us.
        let flash = unsafe { MtdFlash::new(shim::ferrofs_sb_mtd(sb))? };
        let index = flash.index;
        // SAFETY: `sb` is being set up by us.
        let read_only = unsafe { shim::ferrofs_sb_rdonly(sb) };
        flash.check_writeable(read_only)?;
        let mopts = MountOptions { read_only, ..MountOptions::default() };
        let mut fs = match Engine::mount(flash, mopts) {
            Ok(fs) => fs,
            Err((e, _flash)) => {
                match e {
                    EError::BadFormat => pr_err!("mtd{}: no ferrofs filesystem found (run mkfs.ferrofs), or its version is not supported\n", index),
                    EError::Corrupt => pr_err!("mtd{}: cannot mount: the filesystem is corrupt (no valid superblock or checkpoint)\n", index),
                    e => pr_err!("mtd{}: cannot mount: error {:?}\n", index, e),
                }
                return Err(kerr(e));
            }
        };
        let mut read_only = read_only;
        if !read_only && fs.is_failed() {
            pr_err!("mtd{}: the medium failed while the mount wrote its first checkpoint (see above): serving the filesystem read-only\n", index);
            // SAFETY: `sb` is being set up by us.
            unsafe { shim::ferrofs_sb_set_rdonly(sb) };
            read_only = true;
        }
        if let Some(d) = fs.log_damage() {
            if d.seg == u32::MAX {
                pr_err!(
                    "mtd{}: the log is damaged: records made durable (by fsync) are missing from sequence number {} (they read as never written; {} sequence numbers lost); the {} records after the damage were recovered. Mounted read-only: copy the data out, then reformat\n",
                    index, d.first_missing, d.missing, d.after
                );
            } else {
                pr_err!(
                    "mtd{}: the log is damaged: records made durable (by fsync) are missing from sequence number {} (first bad spot: segment {}, offset {}; {} sequence numbers lost); the {} records after the damage were recovered. Mounted read-only: copy the data out, then reformat\n",
                    index, d.first_missing, d.seg, d.off, d.missing, d.after
                );
            }
            // SAFETY: `sb` is being set up by us.
            unsafe { shim::ferrofs_sb_set_rdonly(sb) };
            read_only = true;
        }
        // Check the root before anything is attached to `sb`: a failure then frees everything
        // here (`put_super` never runs for a superblock without a root).
        let root = {
            // SAFETY: paired with the restore below.
            let nofs = unsafe { shim::ferrofs_memalloc_nofs_save() };
            let r = fs.getattr(crate::engine::fs::ROOT_INO);
            // SAFETY: restores the flags saved above.
            unsafe { shim::ferrofs_memalloc_nofs_restore(nofs) };
            r
        };
        let root = match root {
            Ok(r) => r,
            Err(e) => {
                pr_err!("mtd{}: cannot mount: the root directory cannot be read (error {:?})\n", index, e);
                return Err(kerr(e));
            }
        };
        if root.mode & S_IFMT != S_IFDIR {
            pr_err!("mtd{}: corrupt filesystem: the root is not a directory\n", index);
            return Err(Error::from_errno(-(bindings::EUCLEAN as c_int)));
        }
        let info = KBox::pin_init(
            pin_init!(SbInfo {
                engine <- kernel::new_mutex!(fs, "ferrofs_engine"),
                opts,
                mtd_index: index,
                bg: AtomicPtr::new(ptr::null_mut()),
                debugfs: AtomicPtr::new(ptr::null_mut()),
                stats: [const { AtomicU64::new(0) }; STAT_NAMES.len()],
                live: LiveToken::new(),
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: `sb` is being set up by us; nothing else reads `s_fs_info` before we return.
        // The box is unpinned only to be stored as a raw pointer; it is never moved and is
        // freed (in place) by `put_super`, or by `kill_sb` (`free_unmounted`) when this
        // function fails after this point.
        unsafe {
            (*sb).s_fs_info = KBox::into_raw(Pin::into_inner_unchecked(info)).cast();
            (*sb).s_magic = SB_MAGIC as _;
            (*sb).s_op = &(*ptr::addr_of!(OPS)).sops.0;
            (*sb).s_maxbytes = MAX_FILE_SIZE as i64;
            (*sb).s_blocksize = 4096;
            (*sb).s_blocksize_bits = 12;
            (*sb).s_time_gran = 1;
            shim::ferrofs_sb_set_xattr(sb);
        }
        // SAFETY: `sb` is set up with a valid `s_fs_info`.
        let info = unsafe { sbi(sb) };
        // SAFETY: `sb` is set up; `iget` returns a referenced inode, which `d_make_root`
        // consumes (also on failure).
        unsafe {
            let inode = iget(sb, &root)?;
            let d = bindings::d_make_root(inode);
            if d.is_null() {
                return Err(ENOMEM);
            }
            (*sb).s_root = d;
            start_services(sb, read_only);
        }
        let replayed = info.lock().stats().replayed;
        pr_info!(
            "mtd{}: mounted{}, {} log records replayed since the last checkpoint\n",
            index,
            if read_only { " read-only" } else { "" },
            replayed
        );
        Ok(0)
    })
}

/// `super_operations::put_super`: unmount the engine (final checkpoint) and free our state.
unsafe extern "C" fn put_super(sb: *mut bindings::super_block) {
    {
        // SAFETY: the superblock is still set up.
        let info = unsafe { sbi(sb) };
        stop_bg(info);
        // SAFETY: the directory (or null/error pointer) was created by `start_services`.
        unsafe { shim::ferrofs_debugfs_remove(info.debugfs.swap(ptr::null_mut(), Ordering::AcqRel)) };
    }
    // SAFETY: `s_fs_info` is the box set by `fill_super`; after this nothing uses it.
    let info = unsafe { KBox::from_raw((*sb).s_fs_info as *mut SbInfo) };
    // SAFETY: as above.
    unsafe { (*sb).s_fs_info = ptr::null_mut() };
    let index = info.mtd_index;
    let mut fs = info.lock();
    // SAFETY: `sb` is still valid (being shut down).
    if !fs.is_read_only() && !fs.is_failed() && !unsafe { shim::ferrofs_sb_rdonly(sb) } {
        if let Err(e) = fs.sync() {
            pr_err!("mtd{}: error {:?} writing the final checkpoint at unmount; the next mount recovers from the log\n", index, e);
        }
    }
    drop(fs);
    drop(info);
}

/// Called by `kill_sb` after `kill_mtd_super`: free the per-superblock state of a superblock
/// whose `fill_super` failed after attaching it (`put_super` runs only for a superblock with a
/// root, and nulls `s_fs_info`). Nothing is written: the mount wrote its checkpoint already.
///
/// # Safety
///
/// `sb` must be a ferrofs superblock shut down by `kill_mtd_super` (no inode, no thread left).
pub(crate) unsafe fn free_unmounted(sb: *mut bindings::super_block) {
    // SAFETY: `sb` is still allocated during `kill_sb`; nothing else uses it any more.
    let p = unsafe { (*sb).s_fs_info } as *mut SbInfo;
    if p.is_null() {
        return;
    }
    // SAFETY: as above.
    unsafe { (*sb).s_fs_info = ptr::null_mut() };
    // SAFETY: a non-null `s_fs_info` is the box `fill_super` stored; the thread and debugfs
    // directory are created only after `fill_super` can no longer fail.
    let info = unsafe { KBox::from_raw(p) };
    stop_bg(&info);
    drop(info);
}

/// `super_operations::statfs`.
unsafe extern "C" fn statfs(dentry: *mut bindings::dentry, buf: *mut bindings::kstatfs) -> c_int {
    // SAFETY: the VFS passes a valid dentry of a mounted ferrofs and a kstatfs to fill.
    unsafe {
        let (st, serial) = {
            let fs = sbi((*dentry).d_sb).lock();
            (fs.statfs(), fs.serial())
        };
        // Inodes are allocated from free space: as many more as there are free blocks.
        shim::ferrofs_kstatfs_fill(
            buf,
            SB_MAGIC as i64,
            st.block_size,
            st.blocks,
            st.blocks_free,
            st.files.saturating_add(st.blocks_free),
            st.blocks_free,
            NAME_MAX as u32,
            serial,
        );
    }
    0
}

/// `super_operations::sync_fs`: a checkpoint.
unsafe extern "C" fn sync_fs(sb: *mut bindings::super_block, wait: c_int) -> c_int {
    if wait == 0 {
        return 0;
    }
    // SAFETY: `sb` is mounted.
    let info = unsafe { sbi(sb) };
    let mut fs = info.lock();
    if fs.is_read_only() {
        return 0;
    }
    let r = fs.sync();
    info.publish_stats(&fs);
    match r {
        Ok(()) => 0,
        Err(e) => kerr(e).to_errno(),
    }
}

/// `super_operations::show_options`.
unsafe extern "C" fn show_options(m: *mut bindings::seq_file, root: *mut bindings::dentry) -> c_int {
    // SAFETY: `root` belongs to a mounted ferrofs.
    let opts = unsafe { sbi((*root).d_sb) }.opts;
    let mut buf = [0u8; 40];
    let mut w = ByteWriter { buf: &mut buf, len: 0 };
    if opts.commit != MountOpts::default().commit {
        let _ = core::fmt::write(&mut w, format_args!(",commit={}", opts.commit));
    }
    if !opts.gc {
        let _ = core::fmt::write(&mut w, format_args!(",gc=off"));
    }
    let len = w.len.min(buf.len() - 1);
    buf[len] = 0;
    // SAFETY: `buf` is NUL-terminated; `m` is the seq_file being filled.
    unsafe { shim::ferrofs_seq_puts(m, buf.as_ptr().cast()) };
    0
}

struct ByteWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl core::fmt::Write for ByteWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        // Keep one byte for the NUL.
        if end >= self.buf.len() {
            return Err(core::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The VFS inode's attributes as an engine `SetAttr` (everything but the size).
///
/// # Safety
///
/// `inode` must be valid.
unsafe fn vfs_attrs(inode: *mut bindings::inode) -> SetAttr {
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
unsafe extern "C" fn write_inode(inode: *mut bindings::inode, _wbc: *mut bindings::writeback_control) -> c_int {
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
unsafe extern "C" fn evict_inode(inode: *mut bindings::inode) {
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

// ---------------------------------------------------------------------------------------------
// Directory operations

unsafe extern "C" fn lookup(dir: *mut bindings::inode, dentry: *mut bindings::dentry, _flags: c_uint) -> *mut bindings::dentry {
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
unsafe fn make_node(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: u32, rdev: u32, target: Option<&[u8]>) -> Result {
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
            None if mode & S_IFMT == S_IFDIR => fs.mkdir(dino, name, mode & 0o7777, uid, gid, t),
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
                let r = if mode & S_IFMT == S_IFDIR && target.is_none() { fs.rmdir(dino, name, t) } else { fs.unlink(dino, name, t) };
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

/// What `ferrofs_initxattrs` needs: the new inode in the engine.
struct SecCtx<'a> {
    info: &'a SbInfo,
    ino: u64,
    now: Timespec,
}

/// `initxattrs` callback of `security_inode_init_security`: store each LSM attribute as
/// `security.NAME`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_initxattrs(_inode: *mut bindings::inode, xattrs: *const bindings::xattr, fs_data: *mut c_void) -> c_int {
    // SAFETY: `fs_data` is the `SecCtx` that `make_node` passed, alive during the call.
    let ctx = unsafe { &*(fs_data as *const SecCtx<'_>) };
    let mut i = 0usize;
    loop {
        let mut value: *mut c_void = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: the LSM passes an array ended by an entry with a null name.
        let name = unsafe { shim::ferrofs_xattr_entry(xattrs, i, &mut value, &mut len) };
        if name.is_null() {
            return 0;
        }
        // SAFETY: a NUL-terminated suffix owned by the LSM for the call.
        let suffix = unsafe { cstr(name) };
        let val: &[u8] = if value.is_null() || len == 0 {
            &[]
        } else {
            // SAFETY: `value` holds `len` bytes for the call.
            unsafe { core::slice::from_raw_parts(value as *const u8, len) }
        };
        const PREFIX: &[u8] = b"security.";
        let mut full = [0u8; 256];
        let n = PREFIX.len() + suffix.len();
        let Some(dst) = full.get_mut(..n) else {
            return ERANGE.to_errno();
        };
        let (p, s) = dst.split_at_mut(PREFIX.len());
        p.copy_from_slice(PREFIX);
        s.copy_from_slice(suffix);
        let r = ctx.info.lock().setxattr(ctx.ino, dst, val, 0, ctx.now);
        if let Err(e) = r {
            return kerr(e).to_errno();
        }
        i += 1;
    }
}

unsafe extern "C" fn create(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: bindings::umode_t, _excl: bool) -> c_int {
    // SAFETY: VFS create contract.
    from_result(|| unsafe { make_node(idmap, dir, dentry, u32::from(mode) | S_IFREG, 0, None) }.map(|_| 0))
}

unsafe extern "C" fn mkdir(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: bindings::umode_t) -> c_int {
    // SAFETY: VFS mkdir contract.
    from_result(|| unsafe { make_node(idmap, dir, dentry, u32::from(mode) | S_IFDIR, 0, None) }.map(|_| 0))
}

unsafe extern "C" fn mknod(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, mode: bindings::umode_t, dev: bindings::dev_t) -> c_int {
    // SAFETY: VFS mknod contract; encoding a dev_t has no preconditions.
    from_result(|| unsafe { make_node(idmap, dir, dentry, u32::from(mode), shim::ferrofs_new_encode_dev(dev), None) }.map(|_| 0))
}

unsafe extern "C" fn symlink(idmap: *mut bindings::mnt_idmap, dir: *mut bindings::inode, dentry: *mut bindings::dentry, target: *const c_char) -> c_int {
    // SAFETY: VFS symlink contract: `target` is a NUL-terminated kernel string.
    from_result(|| unsafe { make_node(idmap, dir, dentry, S_IFLNK | 0o777, 0, Some(cstr(target))) }.map(|_| 0))
}

unsafe extern "C" fn link(old: *mut bindings::dentry, dir: *mut bindings::inode, dentry: *mut bindings::dentry) -> c_int {
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
unsafe fn remove(dir: *mut bindings::inode, dentry: *mut bindings::dentry, is_dir: bool) -> Result<c_int> {
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

unsafe extern "C" fn unlink(dir: *mut bindings::inode, dentry: *mut bindings::dentry) -> c_int {
    // SAFETY: VFS unlink contract.
    from_result(|| unsafe { remove(dir, dentry, false) })
}

unsafe extern "C" fn rmdir(dir: *mut bindings::inode, dentry: *mut bindings::dentry) -> c_int {
    // SAFETY: VFS rmdir contract.
    from_result(|| unsafe { remove(dir, dentry, true) })
}

unsafe extern "C" fn rename(
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

const SEEK_DATA: c_int = 3;
const SEEK_HOLE: c_int = 4;

/// Regular-file llseek: SEEK_DATA/SEEK_HOLE from the engine's index (4 KiB granularity; the
/// end of the file is a hole), everything else generic.
unsafe extern "C" fn file_llseek(file: *mut bindings::file, offset: bindings::loff_t, whence: c_int) -> bindings::loff_t {
    if whence != SEEK_DATA && whence != SEEK_HOLE {
        // SAFETY: VFS llseek contract.
        return unsafe { bindings::generic_file_llseek(file, offset, whence) };
    }
    let res = (|| -> Result<i64> {
        // SAFETY: VFS llseek contract: `file` is an open ferrofs regular file.
        let inode = unsafe { shim::ferrofs_file_inode(file) };
        // Stores through shared mappings must reach the engine's index first.
        // SAFETY: `inode` is live.
        to_result(unsafe { shim::ferrofs_filemap_write_and_wait((*inode).i_mapping) })?;
        // SAFETY: `inode` is live.
        let (isize, ino, info) = unsafe { (shim::ferrofs_i_size_read(inode), (*inode).i_ino as u64, isbi(inode)) };
        if offset < 0 || offset >= isize {
            return Err(ENXIO);
        }
        let mut fs = info.lock();
        let pos = if whence == SEEK_DATA {
            fs.seek_data(ino, offset as u64).map_err(kerr)?.ok_or(ENXIO)?
        } else {
            fs.seek_hole(ino, offset as u64).map_err(kerr)?
        };
        Ok((pos.min(isize as u64) as i64).max(offset))
    })();
    match res {
        // SAFETY: `file` is open; `vfs_setpos` checks the bound and updates f_pos.
        Ok(pos) => unsafe { bindings::vfs_setpos(file, pos, MAX_FILE_SIZE as i64) },
        Err(e) => e.to_errno() as i64,
    }
}

/// Directory llseek: cookies are opaque 63-bit values.
unsafe extern "C" fn dir_llseek(file: *mut bindings::file, offset: bindings::loff_t, whence: c_int) -> bindings::loff_t {
    // SAFETY: VFS llseek contract.
    unsafe { bindings::generic_file_llseek_size(file, offset, whence, i64::MAX, i64::MAX) }
}

/// Entries collected under the engine lock, emitted after it is dropped (emitting copies to
/// user memory, which may fault on a ferrofs mapping and need the lock).
const DIR_BATCH: usize = 8192;

unsafe extern "C" fn iterate_shared(file: *mut bindings::file, ctx: *mut bindings::dir_context) -> c_int {
    from_result(|| {
        // SAFETY: VFS iterate_shared contract: `file` is an open ferrofs directory.
        let inode = unsafe { shim::ferrofs_file_inode(file) };
        // SAFETY: as above.
        let (info, ino) = unsafe { (isbi(inode), (*inode).i_ino as u64) };
        let mut batch = KVVec::<u8>::with_capacity(DIR_BATCH + NAME_MAX + 32, GFP_KERNEL)?;
        loop {
            // SAFETY: `u8` needs no drop; emptying the vector keeps its capacity.
            unsafe { batch.set_len(0) };
            // SAFETY: `ctx` is valid for the call.
            let start = unsafe { (*ctx).pos } as u64;
            let mut full = false;
            let mut oom = false;
            {
                let mut fs = info.lock();
                let mut fill = |name: &[u8], ino: u64, ft: FileType, next: u64| -> bool {
                    if batch.len() >= DIR_BATCH {
                        full = true;
                        return false;
                    }
                    let ok = batch.extend_from_slice(&ino.to_le_bytes(), GFP_KERNEL).is_ok()
                        && batch.extend_from_slice(&next.to_le_bytes(), GFP_KERNEL).is_ok()
                        && batch.push(ft.dtype(), GFP_KERNEL).is_ok()
                        && batch.push(name.len().min(255) as u8, GFP_KERNEL).is_ok()
                        && batch.extend_from_slice(name, GFP_KERNEL).is_ok();
                    if !ok {
                        oom = true;
                    }
                    ok
                };
                fs.readdir(ino, start, &mut fill).map_err(kerr)?;
            }
            if oom {
                return Err(ENOMEM);
            }
            let mut p = batch.as_slice();
            while p.len() >= 18 {
                let eino = u64::from_le_bytes(p[0..8].try_into().unwrap_or([0; 8]));
                let next = u64::from_le_bytes(p[8..16].try_into().unwrap_or([0; 8]));
                let dt = p[16];
                let nl = p[17] as usize;
                let Some(name) = p.get(18..18 + nl) else { break };
                // SAFETY: `ctx` is valid; `name` is `nl` readable bytes.
                if !unsafe { shim::ferrofs_dir_emit(ctx, name.as_ptr().cast(), nl as c_int, eino, u32::from(dt)) } {
                    return Ok(0);
                }
                // SAFETY: as above.
                unsafe { (*ctx).pos = next as i64 };
                p = &p[18 + nl..];
            }
            if !full {
                return Ok(0);
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Attributes, links, xattrs

unsafe extern "C" fn setattr(idmap: *mut bindings::mnt_idmap, dentry: *mut bindings::dentry, attr: *mut bindings::iattr) -> c_int {
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

unsafe extern "C" fn get_link(dentry: *mut bindings::dentry, inode: *mut bindings::inode, done: *mut bindings::delayed_call) -> *const c_char {
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

/// The full xattr name: the handler's prefix followed by `name`.
///
/// # Safety
///
/// `h` is a ferrofs xattr handler and `name` a NUL-terminated string.
unsafe fn xattr_name(h: *const bindings::xattr_handler, name: *const c_char, out: &mut [u8; 256]) -> Result<usize> {
    // SAFETY: per the contract.
    let (prefix, name) = unsafe { (cstr(shim::ferrofs_xattr_handler_prefix(h)), cstr(name)) };
    let len = prefix.len() + name.len();
    if len > out.len() || name.is_empty() {
        return Err(ERANGE);
    }
    out[..prefix.len()].copy_from_slice(prefix);
    out[prefix.len()..len].copy_from_slice(name);
    Ok(len)
}

/// `xattr_handler::get` (named in shim.c's handler table).
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_xattr_get(
    h: *const bindings::xattr_handler,
    _dentry: *mut bindings::dentry,
    inode: *mut bindings::inode,
    name: *const c_char,
    buffer: *mut c_void,
    size: usize,
) -> c_int {
    from_result(|| {
        let mut full = [0u8; 256];
        // SAFETY: the VFS passes our handler and a NUL-terminated name.
        let len = unsafe { xattr_name(h, name, &mut full)? };
        let mut val = KVVec::<u8>::from_elem(0u8, XATTR_VALUE_MAX, GFP_KERNEL)?;
        // SAFETY: `inode` is live.
        let n = unsafe { isbi(inode).lock().getxattr((*inode).i_ino as u64, &full[..len], val.as_mut_slice()) }.map_err(kerr)?;
        if size != 0 {
            if n > size {
                return Err(ERANGE);
            }
            // SAFETY: `buffer` has room for `size >= n` bytes (a kernel buffer from vfs_getxattr).
            unsafe { ptr::copy_nonoverlapping(val.as_ptr(), buffer as *mut u8, n) };
        }
        Ok(n as c_int)
    })
}

/// `xattr_handler::set` (named in shim.c's handler table); a null value removes.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_xattr_set(
    h: *const bindings::xattr_handler,
    _idmap: *mut bindings::mnt_idmap,
    _dentry: *mut bindings::dentry,
    inode: *mut bindings::inode,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: c_int,
) -> c_int {
    from_result(|| {
        let mut full = [0u8; 256];
        // SAFETY: the VFS passes our handler and a NUL-terminated name.
        let len = unsafe { xattr_name(h, name, &mut full)? };
        // SAFETY: `inode` is live and locked by the VFS.
        unsafe {
            let info = isbi(inode);
            let t = now(inode);
            let ino = (*inode).i_ino as u64;
            let mut fs = info.lock();
            if value.is_null() {
                fs.removexattr(ino, &full[..len], t).map_err(kerr)?;
            } else {
                let v = core::slice::from_raw_parts(value as *const u8, size);
                fs.setxattr(ino, &full[..len], v, flags as u32, t).map_err(kerr)?;
            }
            refresh(&mut fs, inode)?;
        }
        Ok(0)
    })
}

unsafe extern "C" fn listxattr(dentry: *mut bindings::dentry, list: *mut c_char, size: usize) -> isize {
    let res = (|| -> Result<isize> {
        // SAFETY: VFS listxattr contract.
        let inode = unsafe { shim::ferrofs_d_inode(dentry) };
        // SAFETY: `inode` is live.
        let (info, ino) = unsafe { (isbi(inode), (*inode).i_ino as u64) };
        let (all, n) = {
            let mut fs = info.lock();
            let need = fs.listxattr(ino, &mut []).map_err(kerr)?;
            let mut all = KVVec::<u8>::from_elem(0u8, need, GFP_KERNEL)?;
            let n = fs.listxattr(ino, all.as_mut_slice()).map_err(kerr)?;
            (all, n)
        };
        let all = all.as_slice().get(..n).ok_or(EIO)?;
        // trusted.* names only for CAP_SYS_ADMIN (the VFS checks get/set, not list), as ubifs
        let mut admin: Option<bool> = None;
        let mut visible = |name: &[u8]| -> bool {
            if !name.starts_with(b"trusted.") {
                return true;
            }
            // SAFETY: a capability test of the calling task.
            *admin.get_or_insert_with(|| unsafe { bindings::capable(bindings::CAP_SYS_ADMIN as c_int) })
        };
        let mut total = 0usize;
        let mut out: &mut [u8] = if size == 0 {
            &mut []
        } else {
            // SAFETY: `list` is a kernel buffer of `size` bytes from vfs_listxattr.
            unsafe { core::slice::from_raw_parts_mut(list as *mut u8, size) }
        };
        for name in all.split_inclusive(|&b| b == 0) {
            if name.len() <= 1 || !visible(name) {
                continue;
            }
            total += name.len();
            if size != 0 {
                let Some((dst, rest)) = core::mem::take(&mut out).split_at_mut_checked(name.len()) else {
                    return Err(ERANGE);
                };
                dst.copy_from_slice(name);
                out = rest;
            }
        }
        Ok(total as isize)
    })();
    match res {
        Ok(n) => n,
        Err(e) => e.to_errno() as isize,
    }
}


// ---------------------------------------------------------------------------------------------
// Files and the page cache

unsafe extern "C" fn fsync(file: *mut bindings::file, start: bindings::loff_t, end: bindings::loff_t, _datasync: c_int) -> c_int {
    from_result(|| {
        // SAFETY: VFS fsync contract: `file` is open.
        unsafe {
            to_result(bindings::file_write_and_wait_range(file, start, end))?;
            let inode = shim::ferrofs_file_inode(file);
            let info = isbi(inode);
            let ino = (*inode).i_ino as u64;
            let a = vfs_attrs(inode);
            let t = now(inode);
            let mut fs = info.lock();
            if fs.is_read_only() || shim::ferrofs_sb_rdonly((*inode).i_sb) {
                return Ok(0);
            }
            fs.setattr(ino, &a, t).map_err(kerr)?;
            fs.fsync(ino).map_err(kerr)?;
        }
        Ok(0)
    })
}

/// The bytes of a (locked) folio.
///
/// # Safety
///
/// `folio` must be locked by the caller, not in highmem, and stay locked while the slice lives.
unsafe fn folio_bytes<'a>(folio: *mut bindings::folio) -> &'a mut [u8] {
    // SAFETY: per the contract: ferrofs mappings are never highmem, so the address is valid
    // for `folio_size` bytes.
    unsafe { core::slice::from_raw_parts_mut(shim::ferrofs_folio_address(folio) as *mut u8, shim::ferrofs_folio_size(folio)) }
}

/// Fill a locked folio from the engine (zeros past the end of the file).
///
/// # Safety
///
/// `folio` must be a locked folio of `inode`'s mapping.
unsafe fn fill_folio(inode: *mut bindings::inode, folio: *mut bindings::folio) -> Result {
    // SAFETY: per the contract.
    unsafe { fill_folio_locked(&mut isbi(inode).lock(), inode, folio) }
}

/// `fill_folio` with the engine already locked.
///
/// # Safety
///
/// As for `fill_folio`.
unsafe fn fill_folio_locked(fs: &mut Fs, inode: *mut bindings::inode, folio: *mut bindings::folio) -> Result {
    // SAFETY: per the contract.
    unsafe {
        let pos = shim::ferrofs_folio_pos(folio) as u64;
        let buf = folio_bytes(folio);
        let n = fs.read((*inode).i_ino as u64, pos, buf).map_err(kerr)?;
        if let Some(rest) = buf.get_mut(n..) {
            rest.fill(0);
        }
        shim::ferrofs_folio_mark_uptodate(folio);
    }
    Ok(())
}

unsafe extern "C" fn read_folio(_file: *mut bindings::file, folio: *mut bindings::folio) -> c_int {
    // SAFETY: the VFS passes a locked folio of a ferrofs regular file.
    let ret = unsafe { fill_folio(shim::ferrofs_folio_inode(folio), folio) };
    // SAFETY: the folio is locked and ours to unlock.
    unsafe { shim::ferrofs_folio_unlock(folio) };
    match ret {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Readahead: fill the batch of locked folios under one engine lock. A folio that cannot be
/// read stays not-uptodate; `read_folio` then reports the error to the reader.
unsafe extern "C" fn readahead(rac: *mut bindings::readahead_control) {
    // SAFETY: VFS readahead contract: `rac` describes locked folios of a ferrofs file; each
    // folio handed out by `readahead_folio` is locked and ours to unlock.
    unsafe {
        let inode = shim::ferrofs_readahead_inode(rac);
        let mut fs = isbi(inode).lock();
        loop {
            let folio = shim::ferrofs_readahead_folio(rac);
            if folio.is_null() {
                break;
            }
            let _ = fill_folio_locked(&mut fs, inode, folio);
            shim::ferrofs_folio_unlock(folio);
        }
    }
}

unsafe extern "C" fn write_begin(
    _file: *mut bindings::file,
    mapping: *mut bindings::address_space,
    pos: bindings::loff_t,
    len: c_uint,
    foliop: *mut *mut bindings::folio,
    _fsdata: *mut *mut c_void,
) -> c_int {
    // SAFETY: VFS write_begin contract.
    unsafe {
        let folio = match kernel::error::from_err_ptr(shim::ferrofs_write_begin_folio(mapping, pos)) {
            Ok(f) => f,
            Err(e) => return e.to_errno(),
        };
        if folio.is_null() {
            return ENOMEM.to_errno();
        }
        let fpos = shim::ferrofs_folio_pos(folio);
        let fsize = shim::ferrofs_folio_size(folio) as i64;
        let whole = pos == fpos && i64::from(len) == fsize;
        if !shim::ferrofs_folio_test_uptodate(folio) && !whole {
            if let Err(e) = fill_folio((*mapping).host, folio) {
                shim::ferrofs_folio_unlock(folio);
                shim::ferrofs_folio_put(folio);
                return e.to_errno();
            }
        }
        *foliop = folio;
    }
    0
}

unsafe extern "C" fn write_end(
    _file: *mut bindings::file,
    mapping: *mut bindings::address_space,
    pos: bindings::loff_t,
    len: c_uint,
    copied: c_uint,
    folio: *mut bindings::folio,
    _fsdata: *mut c_void,
) -> c_int {
    // SAFETY: VFS write_end contract: `folio` is the locked folio from `write_begin`, and
    // `copied` bytes were copied into it at `pos`.
    unsafe {
        let inode = (*mapping).host;
        let mut copied = copied;
        if !shim::ferrofs_folio_test_uptodate(folio) {
            if copied < len {
                // A short copy into a folio we did not read: retry the whole write.
                copied = 0;
            } else {
                shim::ferrofs_folio_mark_uptodate(folio);
            }
        }
        let mut ret = copied as c_int;
        if copied > 0 {
            let off = (pos - shim::ferrofs_folio_pos(folio)) as usize;
            let data = &folio_bytes(folio)[off..off + copied as usize];
            let info = isbi(inode);
            let t = now(inode);
            match info.lock().write((*inode).i_ino as u64, pos as u64, data, t) {
                Ok(n) if n == copied as usize => {
                    let end = pos + i64::from(copied);
                    if end > shim::ferrofs_i_size_read(inode) {
                        shim::ferrofs_i_size_write(inode, end);
                    }
                }
                Ok(_) => ret = EIO.to_errno(),
                Err(e) => {
                    // The folio holds bytes the engine refused: read it again next time.
                    shim::ferrofs_folio_clear_uptodate(folio);
                    ret = kerr(e).to_errno();
                }
            }
        }
        shim::ferrofs_folio_unlock(folio);
        shim::ferrofs_folio_put(folio);
        ret
    }
}

/// Hand one dirty folio (from a shared writable mapping) to the engine.
///
/// # Safety
///
/// `folio` must be a locked, dirty-cleared folio of `inode` handed out by `writeback_iter`.
unsafe fn write_folio(inode: *mut bindings::inode, folio: *mut bindings::folio) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        let isize = shim::ferrofs_i_size_read(inode);
        let pos = shim::ferrofs_folio_pos(folio);
        if pos >= isize {
            shim::ferrofs_folio_unlock(folio);
            return 0;
        }
        let len = (isize - pos).min(shim::ferrofs_folio_size(folio) as i64) as usize;
        shim::ferrofs_folio_start_writeback(folio);
        let data = &folio_bytes(folio)[..len];
        let t = now(inode);
        let res = isbi(inode).lock().write((*inode).i_ino as u64, pos as u64, data, t);
        shim::ferrofs_folio_unlock(folio);
        shim::ferrofs_folio_end_writeback(folio);
        match res {
            Ok(_) => 0,
            Err(e) => {
                let err = kerr(e).to_errno();
                shim::ferrofs_mapping_set_error((*inode).i_mapping, err);
                err
            }
        }
    }
}

unsafe extern "C" fn writepages(mapping: *mut bindings::address_space, wbc: *mut bindings::writeback_control) -> c_int {
    // SAFETY: VFS writepages contract.
    unsafe {
        let inode = (*mapping).host;
        let mut err: c_int = 0;
        let mut folio: *mut bindings::folio = ptr::null_mut();
        loop {
            folio = bindings::writeback_iter(mapping, wbc, folio, &mut err);
            if folio.is_null() {
                break;
            }
            err = write_folio(inode, folio);
        }
        err
    }
}
