// SPDX-License-Identifier: GPL-2.0

//! The superblock: per-superblock state (`SbInfo`, the engine lock `Locked`), `fill_super`,
//! `put_super`, `statfs`, `sync_fs`, `show_options`, freeze/unfreeze, and the start of the
//! per-mount services (debugfs statistics, background thread).
//!
//! Locking: one mutex per superblock around the engine. It is never held while calling back
//! into code that can copy to or from user memory (readdir collects entries first), and every
//! engine call runs in a `memalloc_nofs` scope so reclaim cannot re-enter ferrofs under it.

use core::mem::ManuallyDrop;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use kernel::bindings;
use kernel::c_str;
use kernel::error::from_result;
use kernel::ffi::{c_int, c_uint, c_void};
use kernel::types::ForeignOwnable;
use kernel::prelude::*;
use kernel::sync::{lock::mutex::MutexBackend, lock::Guard, Mutex};
use crate::engine::budget::Budget;
use crate::engine::error::Error as EError;
use crate::engine::flash::{Flash, FlashKind};
use crate::engine::format::{MAX_FILE_SIZE, NAME_MAX, SB_MAGIC};
use crate::engine::fs::{Engine, MountOptions};
use crate::kplatform::KPlatform;
use crate::backend::KFlash;
use crate::blk::{BlkFlash, DevName};
use crate::mtd::MtdFlash;
use crate::shim;
use crate::bg::{start_bg, stop_bg, DEBUGFS_ROOT, STAT_NAMES};
use crate::context::{fc_opts, MountOpts};
use crate::inode::{iget, inode_ctor, FerroInode, INODE_CACHE};
use crate::kfs::{kerr, sbi, SuperBlock, SB_NOSEC};
use crate::ops::OPS;

/// The engine as the kernel instantiates it.
pub(crate) type Fs = Engine<KPlatform, KFlash>;

/// Per-superblock state, owned by `sb->s_fs_info`.
#[pin_data]
pub(crate) struct SbInfo {
    #[pin]
    pub(crate) engine: Mutex<Fs>,
    pub(crate) opts: MountOpts,
    /// The device's name for messages, debugfs and the thread ("mtd0", "vda").
    pub(crate) dev: DevName,
    /// The background thread (periodic checkpoints, GC), or null.
    pub(crate) bg: AtomicPtr<bindings::task_struct>,
    /// This filesystem's debugfs directory, or null.
    pub(crate) debugfs: AtomicPtr<bindings::dentry>,
    /// Statistics published in debugfs (refreshed every second, at sync and at unmount).
    pub(crate) stats: [AtomicU64; STAT_NAMES.len()],
    /// Engine lock hold and wait times (published in debugfs with the statistics).
    pub(crate) lockstat: LockStats,
    /// The write-back budget (issue 10): space reserved for dirty folios and inodes, outside
    /// the engine lock. `Locked` hands the reservation to the engine when it locks and
    /// publishes the engine's `budget_avail` when it unlocks.
    pub(crate) budget: Budget,
    /// Counts this state in `LIVE_SUPERBLOCKS` while it exists.
    live: LiveToken,
}

/// Buckets of a latency histogram: 4 per power of two (about 19 % wide) up to 2^40 ns.
const HIST_BUCKETS: usize = 160;

/// A lock-free latency histogram in nanoseconds.
pub(crate) struct Hist {
    buckets: [AtomicU64; HIST_BUCKETS],
    max: AtomicU64,
    count: AtomicU64,
}

impl Hist {
    const fn new() -> Self {
        Hist { buckets: [const { AtomicU64::new(0) }; HIST_BUCKETS], max: AtomicU64::new(0), count: AtomicU64::new(0) }
    }

    /// Bucket of `ns`: exact below 4, then 4 buckets per power of two.
    fn bucket(ns: u64) -> usize {
        if ns < 4 {
            return ns as usize;
        }
        let l = 63 - ns.leading_zeros() as usize;
        let sub = ((ns >> (l - 2)) & 3) as usize;
        ((l - 1) * 4 + sub).min(HIST_BUCKETS - 1)
    }

    /// The largest value that falls in bucket `b`.
    fn upper(b: usize) -> u64 {
        if b < 4 {
            return b as u64;
        }
        let l = b / 4 + 1;
        let sub = (b % 4) as u64;
        ((4 + sub + 1) << (l - 2)) - 1
    }

    fn record(&self, ns: u64) {
        if let Some(slot) = self.buckets.get(Self::bucket(ns)) {
            slot.fetch_add(1, Ordering::Relaxed);
        }
        self.max.fetch_max(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// An upper bound of the `per_mille`/1000 quantile (the top of its bucket, at most the max).
    fn quantile(&self, per_mille: u64) -> u64 {
        let total: u64 = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).fold(0, u64::saturating_add);
        if total == 0 {
            return 0;
        }
        let rank = total.saturating_mul(per_mille).div_ceil(1000).max(1);
        let mut seen = 0u64;
        for (i, b) in self.buckets.iter().enumerate() {
            seen = seen.saturating_add(b.load(Ordering::Relaxed));
            if seen >= rank {
                return Self::upper(i).min(self.max.load(Ordering::Relaxed));
            }
        }
        self.max.load(Ordering::Relaxed)
    }
}

/// Engine lock timings: how long it is held per acquisition and how long takers wait for it.
pub(crate) struct LockStats {
    pub(crate) hold: Hist,
    pub(crate) wait: Hist,
}

impl LockStats {
    const fn new() -> Self {
        LockStats { hold: Hist::new(), wait: Hist::new() }
    }

    /// The published figures, in `LOCK_STAT_NAMES` order.
    pub(crate) fn figures(&self) -> [u64; 7] {
        [
            self.hold.count.load(Ordering::Relaxed),
            self.hold.max.load(Ordering::Relaxed),
            self.hold.quantile(990),
            self.hold.quantile(999),
            self.wait.max.load(Ordering::Relaxed),
            self.wait.quantile(990),
            self.wait.quantile(999),
        ]
    }
}

/// Monotonic time in nanoseconds.
fn now_ns() -> u64 {
    // SAFETY: `ktime_get` has no preconditions (timekeeping is up before any mount).
    unsafe { bindings::ktime_get() as u64 }
}

/// Per-superblock states alive (published as /sys/kernel/debug/ferrofs/live_superblocks): with
/// nothing mounted it must be 0, also after failed mounts.
pub(crate) static LIVE_SUPERBLOCKS: AtomicU64 = AtomicU64::new(0);

/// Counts one `SbInfo` in `LIVE_SUPERBLOCKS`.
pub(crate) struct LiveToken;

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

/// The engine, locked, inside a `memalloc_nofs` scope. Its drop sends what the engine call
/// wrote (the block backend queues writes: one wait for all of them), records the hold time,
/// unlocks, and only then issues the discards the call queued.
pub(crate) struct Locked<'a> {
    guard: ManuallyDrop<Guard<'a, Fs, MutexBackend>>,
    budget: &'a Budget,
    nofs: c_uint,
    stats: &'a LockStats,
    since: u64,
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
        // the writes of this engine call go out together; a failure was reported by the
        // backend, which now fails every write (the engine stops at its next one)
        let _ = self.guard.flash().complete();
        let discards = self.guard.flash().take_discards();
        // still under the lock: what the budget may hand out after this operation
        self.budget.publish(self.guard.budget_avail());
        // taken before the guard's drop unlocks: the whole hold is counted
        self.stats.hold.record(now_ns().saturating_sub(self.since));
        // SAFETY: dropped exactly once, here; `self.guard` is not used after this.
        unsafe { ManuallyDrop::drop(&mut self.guard) };
        // off the engine lock: a writer of one of these segments waits for its discard
        if let Some(d) = discards {
            d.issue();
        }
        // SAFETY: restores the flags saved by the matching `memalloc_nofs_save` in `lock`.
        unsafe { shim::ferrofs_memalloc_nofs_restore(self.nofs) };
    }
}

impl SbInfo {
    /// Publish the engine's counters.
    pub(crate) fn publish_stats(&self, fs: &mut Fs) {
        let s = fs.stats();
        let f = fs.fault_stats();
        let vals = [
            s.user_bytes, s.programmed_bytes, s.erases, s.gc_records, s.gc_bytes, s.checkpoints, s.replayed, s.retired, s.free_segments,
            s.open_segments, s.max_open_segments,
            f.corrected_reads, f.uncorrectable_reads, f.scrubbed_segments, f.program_failures, f.erase_failures, f.io_errors,
        ];
        let (hits, misses) = fs.icache_stats();
        let lock = self.lockstat.figures();
        let d = fs.flash().io_stats();
        let dev = [
            d.write_bios, d.write_bytes, d.write_min_bytes, d.writes_unaligned, d.write_batches, d.read_bios, d.read_bytes, d.read_hits,
            d.flushes, d.discards, d.discards_locked, d.max_open_segments,
        ];
        let vals = Iterator::chain(Iterator::chain(Iterator::chain(vals.iter().copied(), [hits, misses]), lock), dev);
        for (slot, v) in self.stats.iter().zip(vals) {
            slot.store(v, Ordering::Relaxed);
        }
    }

    pub(crate) fn lock(&self) -> Locked<'_> {
        // SAFETY: always paired with the restore in `Locked::drop`.
        let nofs = unsafe { shim::ferrofs_memalloc_nofs_save() };
        let t0 = now_ns();
        let mut guard = self.engine.lock();
        let since = now_ns();
        self.lockstat.wait.record(since.saturating_sub(t0));
        // space consumers other than write-back must leave the reserved space alone
        guard.set_reserved(self.budget.reserved());
        Locked { guard: ManuallyDrop::new(guard), budget: &self.budget, nofs, stats: &self.lockstat, since }
    }
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

/// Start the background thread and publish the debugfs statistics of a mounted superblock.
///
/// # Safety
///
/// `sb` must be fully set up by `fill_super`.
pub(crate) unsafe fn start_services(sb: *mut bindings::super_block, read_only: bool) {
    // SAFETY: per the contract.
    let info = unsafe { sbi(sb) };
    let mut name = [0u8; 16];
    let mut w = ByteWriter { buf: &mut name, len: 0 };
    let _ = core::fmt::write(&mut w, format_args!("{}", info.dev));
    // SAFETY: `name` is NUL-terminated (ByteWriter keeps the last byte zero); the parent is our
    // root or an error pointer, which debugfs accepts.
    let dir = unsafe { shim::ferrofs_debugfs_dir(name.as_ptr().cast(), DEBUGFS_ROOT.load(Ordering::Acquire)) };
    info.debugfs.store(dir, Ordering::Release);
    for (n, slot) in STAT_NAMES.iter().zip(info.stats.iter()) {
        // SAFETY: the counters live in `SbInfo`, which outlives the directory (removed first
        // in `put_super`).
        unsafe { shim::ferrofs_debugfs_u64(n.as_char_ptr(), dir, slot.as_ptr()) };
    }
    info.publish_stats(&mut info.lock());
    if !read_only {
        // SAFETY: per the contract.
        unsafe { start_bg(sb) };
    }
}

/// `super_operations::freeze_fs` (after `freeze_super` synced everything): the engine turns
/// read-only, so neither the background thread nor anything else programs the flash while
/// the filesystem is frozen.
pub(crate) unsafe extern "C" fn freeze_fs(sb: *mut bindings::super_block) -> c_int {
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
pub(crate) unsafe extern "C" fn unfreeze_fs(sb: *mut bindings::super_block) -> c_int {
    // SAFETY: `sb` is mounted; the VFS holds s_umount.
    let info = unsafe { sbi(sb) };
    let r = info.lock().set_read_only(false);
    match r {
        Ok(()) => 0,
        Err(e) => kerr(e).to_errno(),
    }
}

/// `fill_super` for `get_tree_mtd`: the MTD backend.
pub(crate) unsafe extern "C" fn fill_super_mtd(sb: *mut bindings::super_block, fc: *mut bindings::fs_context) -> c_int {
    from_result(|| {
        // SAFETY: `get_tree_mtd` set `s_mtd` to a referenced MTD device before calling us; it
        // stays referenced until `kill_mtd_super`, after the engine is gone.
        let flash = unsafe { MtdFlash::new(shim::ferrofs_sb_mtd(sb))? };
        // SAFETY: `sb` and `fc` are being set up by `get_tree_mtd` for us.
        unsafe { fill_super(sb, fc, KFlash::Mtd(flash)) }
    })
}

/// `fill_super` for `get_tree_bdev`: the block backend.
pub(crate) unsafe extern "C" fn fill_super_bdev(sb: *mut bindings::super_block, fc: *mut bindings::fs_context) -> c_int {
    from_result(|| {
        // SAFETY: `sb` is being set up; `get_tree_bdev` filled `s_id` (NUL-terminated).
        let name = DevName::new(unsafe { crate::kfs::cstr(shim::ferrofs_sb_id(sb)) });
        // SAFETY: `get_tree_bdev` opened `s_bdev` before calling us; it stays open until
        // `kill_block_super`, after the engine (and both handles) are gone.
        let (dev, discard_dev) = unsafe {
            let bdev = shim::ferrofs_sb_bdev(sb);
            (crate::kfs::BlockDev::from_raw(bdev), crate::kfs::BlockDev::from_raw(bdev))
        };
        let flash = KBox::new(BlkFlash::new(dev, discard_dev, name)?, GFP_KERNEL)?;
        // SAFETY: `sb` and `fc` are being set up by `get_tree_bdev` for us.
        unsafe { fill_super(sb, fc, KFlash::Blk(flash)) }
    })
}

/// The rest of `fill_super` for either backend: mount the engine on `flash`, build the root.
///
/// # Safety
///
/// `sb` must be a new superblock being set up by `get_tree_mtd`/`get_tree_bdev` for us, `fc`
/// its ferrofs context, and `flash` the medium the superblock holds.
unsafe fn fill_super(sb: *mut bindings::super_block, fc: *mut bindings::fs_context, flash: KFlash) -> Result<c_int> {
    // SAFETY: `fc` was set up by `init_fs_context`.
    let opts = *unsafe { fc_opts(fc) };
    let name = flash.name();
    let mlc = flash.geometry().kind == FlashKind::MlcNand;
    // SAFETY: `sb` is being set up by us.
    let read_only = unsafe { shim::ferrofs_sb_rdonly(sb) };
    flash.check_writeable(read_only)?;
    let mopts = MountOptions { read_only, ..MountOptions::default() };
    let mut fs = match Engine::mount(flash, mopts) {
        Ok(fs) => fs,
        Err((e, _flash)) => {
            match e {
                EError::BadFormat => pr_err!("{}: no ferrofs filesystem found (run mkfs.ferrofs), or its version is not supported\n", name),
                EError::Corrupt => pr_err!("{}: cannot mount: the filesystem is corrupt (no valid superblock or checkpoint)\n", name),
                EError::NotSupported if mlc => pr_err!("{}: cannot mount: MLC NAND is not supported yet (a power cut while programming a page can destroy its paired page); use the chip in an SLC mode\n", name),
                e => pr_err!("{}: cannot mount: error {:?}\n", name, e),
            }
            return Err(kerr(e));
        }
    };
    let mut read_only = read_only;
    // what the mount wrote after its last flush reaches the device now (the block backend
    // queues writes); a failure there is a failure of the mount's writes
    let sent = fs.flash().complete();
    if !read_only && (fs.is_failed() || sent.is_err()) {
        pr_err!("{}: the medium failed while the mount wrote its first checkpoint (see above): serving the filesystem read-only\n", name);
        // SAFETY: `sb` is being set up by us.
        unsafe { shim::ferrofs_sb_set_rdonly(sb) };
        read_only = true;
    }
    if let Some(d) = fs.log_damage() {
        if d.seg == u32::MAX {
            pr_err!(
                "{}: the log is damaged: records made durable (by fsync) are missing from sequence number {} (they read as never written; {} sequence numbers lost); the {} records after the damage were recovered. Mounted read-only: copy the data out, then reformat\n",
                name, d.first_missing, d.missing, d.after
            );
        } else {
            pr_err!(
                "{}: the log is damaged: records made durable (by fsync) are missing from sequence number {} (first bad spot: segment {}, offset {}; {} sequence numbers lost); the {} records after the damage were recovered. Mounted read-only: copy the data out, then reformat\n",
                name, d.first_missing, d.seg, d.off, d.missing, d.after
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
            pr_err!("{}: cannot mount: the root directory cannot be read (error {:?})\n", name, e);
            return Err(kerr(e));
        }
    };
    if root.mode & bindings::S_IFMT != bindings::S_IFDIR {
        pr_err!("{}: corrupt filesystem: the root is not a directory\n", name);
        return Err(Error::from_errno(-(bindings::EUCLEAN as c_int)));
    }
    let info = KBox::pin_init(
        pin_init!(SbInfo {
            engine <- kernel::new_mutex!(fs, "ferrofs_engine"),
            opts,
            dev: name,
            bg: AtomicPtr::new(ptr::null_mut()),
            debugfs: AtomicPtr::new(ptr::null_mut()),
            stats: [const { AtomicU64::new(0) }; STAT_NAMES.len()],
            lockstat: LockStats::new(),
            budget: Budget::new(),
            live: LiveToken::new(),
        }),
        GFP_KERNEL,
    )?;
    // SAFETY: `sb` is being set up by us; nothing else reads `s_fs_info` before we return.
    // The pinned box passes to `s_fs_info` (`ForeignOwnable`) and comes back, unmoved, in
    // `put_super`, or in `kill_sb` (`free_unmounted`) when this function fails after this
    // point.
    unsafe {
        (*sb).s_fs_info = info.into_foreign() as *mut c_void;
        (*sb).s_magic = SB_MAGIC as _;
        (*sb).s_op = &OPS.sops.0;
        (*sb).s_maxbytes = MAX_FILE_SIZE as i64;
        (*sb).s_blocksize = 4096;
        (*sb).s_blocksize_bits = 12;
        (*sb).s_time_gran = 1;
        (*sb).s_flags |= SB_NOSEC;
        shim::ferrofs_sb_set_xattr(sb);
    }
    // SAFETY: `sb` is set up with a valid `s_fs_info`.
    let info = unsafe { sbi(sb) };
    // SAFETY: `sb` is set up; `iget` returns a referenced inode, which `d_make_root`
    // consumes (also on failure).
    unsafe {
        let inode = iget(SuperBlock::from_raw(sb), &root)?;
        let d = bindings::d_make_root(inode);
        if d.is_null() {
            return Err(ENOMEM);
        }
        (*sb).s_root = d;
        start_services(sb, read_only);
    }
    let replayed = info.lock().stats().replayed;
    pr_info!(
        "{}: mounted{}, {} log records replayed since the last checkpoint\n",
        name,
        if read_only { " read-only" } else { "" },
        replayed
    );
    Ok(0)
}

/// `super_operations::put_super`: unmount the engine (final checkpoint) and free our state.
pub(crate) unsafe extern "C" fn put_super(sb: *mut bindings::super_block) {
    {
        // SAFETY: the superblock is still set up.
        let info = unsafe { sbi(sb) };
        stop_bg(info);
        // SAFETY: the directory (or null/error pointer) was created by `start_services`.
        unsafe { shim::ferrofs_debugfs_remove(info.debugfs.swap(ptr::null_mut(), Ordering::AcqRel)) };
    }
    // SAFETY: `s_fs_info` is the pinned box `fill_super` passed through `into_foreign`; after
    // this nothing uses it (it is nulled below, before the box is dropped).
    let info = unsafe { <Pin<KBox<SbInfo>> as ForeignOwnable>::from_foreign((*sb).s_fs_info) };
    // SAFETY: as above.
    unsafe { (*sb).s_fs_info = ptr::null_mut() };
    let name = info.dev;
    let mut fs = info.lock();
    // SAFETY: `sb` is still valid (being shut down).
    if !fs.is_read_only() && !fs.is_failed() && !unsafe { shim::ferrofs_sb_rdonly(sb) } {
        if let Err(e) = fs.sync() {
            pr_err!("{}: error {:?} writing the final checkpoint at unmount; the next mount recovers from the log\n", name, e);
        }
    }
    drop(fs);
    drop(info);
}

/// Called by `kill_sb` after `kill_mtd_super` or `kill_block_super`: free the per-superblock state of a superblock
/// whose `fill_super` failed after attaching it (`put_super` runs only for a superblock with a
/// root, and nulls `s_fs_info`). Nothing is written: the mount wrote its checkpoint already.
///
/// # Safety
///
/// `sb` must be a ferrofs superblock shut down by `kill_mtd_super` or `kill_block_super` (no inode, no thread left).
pub(crate) unsafe fn free_unmounted(sb: *mut bindings::super_block) {
    // SAFETY: `sb` is still allocated during `kill_sb`; nothing else uses it any more.
    let p = unsafe { (*sb).s_fs_info };
    if p.is_null() {
        return;
    }
    // SAFETY: as above.
    unsafe { (*sb).s_fs_info = ptr::null_mut() };
    // SAFETY: a non-null `s_fs_info` is the box `fill_super` stored; the thread and debugfs
    // directory are created only after `fill_super` can no longer fail.
    let info = unsafe { <Pin<KBox<SbInfo>> as ForeignOwnable>::from_foreign(p) };
    stop_bg(&info);
    drop(info);
}

/// `super_operations::statfs`.
pub(crate) unsafe extern "C" fn statfs(dentry: *mut bindings::dentry, buf: *mut bindings::kstatfs) -> c_int {
    // SAFETY: the VFS passes a valid dentry of a mounted ferrofs.
    let info = unsafe { sbi((*dentry).d_sb) };
    let (mut st, serial) = {
        let fs = info.lock();
        (fs.statfs(), fs.serial())
    };
    // space the write-back budget holds for dirty data is not free
    st.blocks_free = st.blocks_free.saturating_sub(info.budget.reserved().div_ceil(u64::from(st.block_size.max(1))));
    // Inodes are allocated from free space: as many more as there are free blocks.
    // SAFETY: `buf` is the kstatfs the VFS asks us to fill.
    unsafe {
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
        )
    };
    0
}

/// `super_operations::sync_fs`: a checkpoint.
pub(crate) unsafe extern "C" fn sync_fs(sb: *mut bindings::super_block, wait: c_int) -> c_int {
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
    info.publish_stats(&mut fs);
    match r {
        Ok(()) => 0,
        Err(e) => kerr(e).to_errno(),
    }
}

/// `super_operations::show_options`.
pub(crate) unsafe extern "C" fn show_options(m: *mut bindings::seq_file, root: *mut bindings::dentry) -> c_int {
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

pub(crate) struct ByteWriter<'a> {
    pub(crate) buf: &'a mut [u8],
    pub(crate) len: usize,
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
