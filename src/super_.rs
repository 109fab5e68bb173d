// SPDX-License-Identifier: GPL-2.0

//! The superblock: per-superblock state (`SbInfo`, the engine lock `Locked`), `fill_super`,
//! `put_super`, `statfs`, `sync_fs`, `show_options`, freeze/unfreeze, and the start of the
//! per-mount services (debugfs statistics, background thread).
//!
//! Locking: one mutex per superblock around the engine. It is never held while calling back
//! into code that can copy to or from user memory (readdir collects entries first), and every
//! engine call runs in a `memalloc_nofs` scope so reclaim cannot re-enter ferrofs under it.

use core::mem::ManuallyDrop;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::bindings;
use kernel::c_str;
use kernel::error::from_result;
use kernel::ffi::c_int;
use kernel::prelude::*;
use kernel::sync::{lock::mutex::MutexBackend, lock::Guard, Mutex};
use kernel::time::Ktime;
use crate::engine::budget::Budget;
use crate::engine::error::Error as EError;
use crate::engine::flash::{Flash, FlashKind};
use crate::engine::format::{BLOCK_SIZE, MAX_FILE_SIZE, NAME_MAX, SB_MAGIC};
use crate::engine::fs::{Engine, MountOptions};
use crate::engine::readcache::{READ_CACHE_AUTO_MAX, READ_CACHE_BYTES};
use crate::kplatform::KPlatform;
use crate::backend::KFlash;
use crate::blk::{BlkFlash, DevName};
use crate::mtd::MtdFlash;
use crate::bg::{start_bg, STAT_NAMES};
use crate::context::MountOpts;
use crate::inode::iget;
use crate::kfs::{kerr, DyingSuperBlock, FsContext, Kstatfs, NewSuperBlock, NofsScope, SbParams, SeqFile, Statfs, StatsDir, SuperBlock, ThreadSlot, totalram_bytes};
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
    /// The background thread (periodic checkpoints, GC), if it runs.
    pub(crate) bg: ThreadSlot,
    /// Statistics published in this filesystem's debugfs directory (refreshed every second, at
    /// sync and at unmount).
    pub(crate) stats: StatsDir<{ STAT_NAMES.len() }>,
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
    /// Total hold time (ns) since the mount.
    pub(crate) hold_sum: AtomicU64,
}

impl LockStats {
    const fn new() -> Self {
        LockStats { hold: Hist::new(), wait: Hist::new(), hold_sum: AtomicU64::new(0) }
    }

    /// The published figures, in `LOCK_STAT_NAMES` order.
    pub(crate) fn figures(&self) -> [u64; 8] {
        [
            self.hold.count.load(Ordering::Relaxed),
            self.hold.max.load(Ordering::Relaxed),
            self.hold.quantile(990),
            self.hold.quantile(999),
            self.wait.max.load(Ordering::Relaxed),
            self.wait.quantile(990),
            self.wait.quantile(999),
            self.hold_sum.load(Ordering::Relaxed),
        ]
    }
}

/// Monotonic time in nanoseconds.
pub(crate) fn now_ns() -> u64 {
    Ktime::ktime_get().to_ns() as u64
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
/// unlocks, issues the discards the call queued (off the engine lock), then ends the NOFS
/// scope.
pub(crate) struct Locked<'a> {
    _nofs: NofsScope,
    guard: ManuallyDrop<Guard<'a, Fs, MutexBackend>>,
    budget: &'a Budget,
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
        let _ = self.guard.flash_io().complete();
        let discards = self.guard.flash_io().take_discards();
        // still under the lock: what the budget may hand out after this operation
        self.budget.publish(self.guard.budget_avail());
        // taken before the guard's drop unlocks: the whole hold is counted
        let held = now_ns().saturating_sub(self.since);
        self.stats.hold.record(held);
        self.stats.hold_sum.fetch_add(held, Ordering::Relaxed);
        // SAFETY: dropped exactly once, here; `self.guard` is not used after this.
        unsafe { ManuallyDrop::drop(&mut self.guard) };
        // off the engine lock: a writer of one of these segments waits for its discard
        if let Some(d) = discards {
            d.issue();
        }
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
        let (rhits, rmisses) = fs.read_cache_stats();
        let (rlines, rmax) = fs.read_cache_lines();
        let rcache = [rlines as u64, rmax as u64, rhits, rmisses];
        let lock = self.lockstat.figures();
        let d = fs.flash_ref().io_stats();
        let dev = [
            d.write_bios, d.write_bytes, d.write_min_bytes, d.writes_unaligned, d.write_batches, d.write_groups, d.read_bios, d.read_bytes, d.read_hits,
            d.flushes, d.discards, d.discards_locked, d.max_open_segments, d.ftl1_switch_rewrites, d.ftl1_flush_rewrites, d.ftl1_early_switches, d.ftl1_fixed_switches,
        ];
        let m = fs.flash_ref().mtd_times();
        let mtd = [m.reads, m.read_ns, m.writes, m.write_ns, m.erase_ns];
        let vals = Iterator::chain(Iterator::chain(Iterator::chain(Iterator::chain(Iterator::chain(vals.iter().copied(), [hits, misses]), rcache), lock), dev), mtd);
        for (slot, v) in self.stats.vals().iter().zip(vals) {
            slot.store(v, Ordering::Relaxed);
        }
    }

    pub(crate) fn lock(&self) -> Locked<'_> {
        let nofs = NofsScope::new();
        let t0 = now_ns();
        let mut guard = self.engine.lock();
        let since = now_ns();
        self.lockstat.wait.record(since.saturating_sub(t0));
        // space consumers other than write-back must leave the reserved space alone
        guard.set_reserved(self.budget.reserved());
        Locked { _nofs: nofs, guard: ManuallyDrop::new(guard), budget: &self.budget, stats: &self.lockstat, since }
    }
}

/// Publish the statistics of a mounted superblock and start its background thread.
fn start_services(sb: &SuperBlock, read_only: bool) {
    let info = sb.info();
    info.publish_stats(&mut info.lock());
    if !read_only {
        start_bg(sb);
    }
}

/// The device's name as a C string in `buf` (at most 15 bytes: the kernel cuts a thread's
/// name to 16 with the NUL anyway).
pub(crate) fn dev_cstr<'a>(dev: &DevName, buf: &'a mut [u8; 16]) -> &'a CStr {
    let b = dev.as_bytes();
    let n = b.len().min(buf.len() - 1);
    buf[..n].copy_from_slice(&b[..n]);
    buf[n] = 0;
    // printable ASCII without NUL (`DevName`), so this does not fail
    CStr::from_bytes_with_nul(&buf[..=n]).unwrap_or(c_str!("?"))
}

/// `super_operations::freeze_fs` (after `freeze_super` synced everything): the engine turns
/// read-only, so neither the background thread nor anything else programs the flash while
/// the filesystem is frozen.
///
/// # Safety
///
/// Called by the VFS only, with a mounted ferrofs superblock.
pub(crate) unsafe extern "C" fn freeze_fs(sb: *mut bindings::super_block) -> c_int {
    // SAFETY: VFS freeze_fs contract: `sb` is mounted; the VFS holds s_umount.
    let sb = unsafe { SuperBlock::from_raw(sb) };
    let mut fs = sb.info().lock();
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
///
/// # Safety
///
/// Called by the VFS only, with a mounted ferrofs superblock.
pub(crate) unsafe extern "C" fn unfreeze_fs(sb: *mut bindings::super_block) -> c_int {
    // SAFETY: VFS unfreeze_fs contract: `sb` is mounted; the VFS holds s_umount.
    let sb = unsafe { SuperBlock::from_raw(sb) };
    let r = sb.info().lock().set_read_only(false);
    match r {
        Ok(()) => 0,
        Err(e) => kerr(e).to_errno(),
    }
}

/// `fill_super` for `get_tree_mtd`: the MTD backend.
///
/// # Safety
///
/// Called by `get_tree_mtd` only, with a new superblock (`s_mtd` set) and our context.
pub(crate) unsafe extern "C" fn fill_super_mtd(sb: *mut bindings::super_block, fc: *mut bindings::fs_context) -> c_int {
    // SAFETY: `get_tree_mtd` hands us a new superblock, locked and ours to set up, and the
    // ferrofs context it serves, for the call.
    let (sb, fc) = unsafe { (NewSuperBlock::from_raw(sb), FsContext::from_raw(fc)) };
    from_result(|| {
        let flash = MtdFlash::new(sb.mtd().ok_or(EINVAL)?, sb.mtd().ok_or(EINVAL)?)?;
        fill_super(sb, fc, KFlash::Mtd(flash))
    })
}

/// `fill_super` for `get_tree_bdev`: the block backend.
///
/// # Safety
///
/// Called by `get_tree_bdev` only, with a new superblock (`s_bdev` set) and our context.
pub(crate) unsafe extern "C" fn fill_super_bdev(sb: *mut bindings::super_block, fc: *mut bindings::fs_context) -> c_int {
    // SAFETY: `get_tree_bdev` hands us a new superblock, locked and ours to set up, and the
    // ferrofs context it serves, for the call.
    let (sb, fc) = unsafe { (NewSuperBlock::from_raw(sb), FsContext::from_raw(fc)) };
    from_result(|| {
        let name = DevName::new(sb.id());
        // a second handle on the device for the discards issued outside the engine lock
        let (dev, discard_dev) = (sb.bdev().ok_or(EINVAL)?, sb.bdev().ok_or(EINVAL)?);
        let flash = new_blk_flash(dev, discard_dev, name)?;
        fill_super(sb, fc, KFlash::Blk(flash))
    })
}

/// `BlkFlash` is large: built in a frame of its own that is gone before the mount (whose
/// writes reach the device on this stack: mtdblock programs the MTD in the submitter's
/// context), not in `fill_super_bdev`'s.
#[inline(never)]
fn new_blk_flash(dev: crate::kfs::BlockDev, discard_dev: crate::kfs::BlockDev, name: DevName) -> Result<KBox<BlkFlash>> {
    Ok(KBox::new(BlkFlash::new(dev, discard_dev, name)?, GFP_KERNEL)?)
}

/// The rest of `fill_super` for either backend: mount the engine on `flash`, build the root.
///
/// The engine is a large value: it lives in `mount_engine`'s frame while the mount runs and
/// in `attach_engine`'s while the superblock is built, never in a frame that stays on the
/// stack under the mount's device writes (the mount writes its first checkpoint, and on
/// mtdblock the whole MTD program runs on this stack; a 16 KiB kernel stack has no room for
/// both).
fn fill_super(sb: &NewSuperBlock, fc: &FsContext, flash: KFlash) -> Result<c_int> {
    let opts = fc.opts().ok_or(EINVAL)?;
    let name = flash.name();
    let read_only = sb.rdonly();
    let fs = mount_engine(flash, read_only, read_cache_bytes(&opts), name)?;
    attach_engine(sb, opts, name, read_only, fs)
}

/// The read cache a mount with `opts` gets: `read_cache=` KiB, else 1/256 of RAM from
/// `READ_CACHE_BYTES` (256 KiB) to `READ_CACHE_AUTO_MAX` (4 MiB). The cache keeps recently
/// read and written metadata pages (directory entries, inodes) so that a readdir or lookup of
/// what was recently touched reads nothing from the flash; a machine of 64 MiB keeps the
/// floor, one of 1 GiB or more the ceiling (docs/kernel.md, mount options; docs/design.md,
/// "Read cache").
fn read_cache_bytes(opts: &MountOpts) -> usize {
    match opts.read_cache_kib {
        Some(k) => (k as usize).saturating_mul(1024),
        None => usize::try_from(totalram_bytes() / 256).unwrap_or(usize::MAX).clamp(READ_CACHE_BYTES, READ_CACHE_AUTO_MAX),
    }
}

/// Mount the engine on `flash`; the engine goes to the heap before this frame is left.
#[inline(never)]
fn mount_engine(flash: KFlash, read_only: bool, read_cache: usize, name: DevName) -> Result<KBox<Fs>> {
    let kind = flash.geometry().kind;
    let mlc = kind == FlashKind::MlcNand;
    flash.check_writeable(read_only)?;
    // the replay window comes from the medium (8 MiB on a block device, 2.5 MiB on raw flash:
    // `engine::fs::default_checkpoint_log_bytes`, docs/kernel.md)
    let mopts = MountOptions { read_only, read_cache_bytes: Some(read_cache), ..MountOptions::default() };
    // The engine is boxed before the roll-forward runs: a mount rolling the log forward on
    // block2mtd (whose reads go through the page cache and the block layer) overflowed the
    // 16 KiB kernel stack when this frame held the engine by value (7 KiB: three copies).
    let r = open_boxed(flash, mopts).and_then(|mut b| b.mount_log().map(|()| b));
    r.map_err(|e| {
        match e {
            EError::BadFormat => pr_err!("{}: no ferrofs filesystem found (run mkfs.ferrofs), or its version is not supported\n", name),
            EError::Corrupt => pr_err!("{}: cannot mount: the filesystem is corrupt (no valid superblock or checkpoint)\n", name),
            EError::NotSupported if mlc => pr_err!("{}: cannot mount: MLC NAND whose page pairing ferrofs does not know (a power cut while programming a page can destroy its paired page), or a filesystem formatted for SLC NAND (its checkpoint slots leave no room for the pairing); use the chip in an SLC mode, or format it on the MLC device\n", name),
            e => pr_err!("{}: cannot mount: error {:?}\n", name, e),
        }
        kerr(e)
    })
}

/// `Engine::open` into a box, in a frame of its own (the engine passes through it by value)
/// that is gone before the roll-forward runs.
#[inline(never)]
fn open_boxed(flash: KFlash, mopts: MountOptions) -> core::result::Result<KBox<Fs>, EError> {
    let fs = Engine::open(flash, mopts).map_err(|(e, _flash)| e)?;
    KBox::new(fs, GFP_KERNEL).map_err(|_| EError::NoMem)
}

/// Check the mounted engine `fs`, hand it to the superblock and build the root.
#[inline(never)]
fn attach_engine(sb: &NewSuperBlock, opts: MountOpts, name: DevName, read_only: bool, mut fs: KBox<Fs>) -> Result<c_int> {
    let mut read_only = read_only;
    // what the mount wrote after its last flush reaches the device now (the block backend
    // queues writes); a failure there is a failure of the mount's writes
    let sent = fs.flash_io().complete();
    if !read_only && (fs.is_failed() || sent.is_err()) {
        pr_err!("{}: the medium failed while the mount wrote its first checkpoint (see above): serving the filesystem read-only\n", name);
        sb.set_rdonly();
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
        sb.set_rdonly();
        read_only = true;
    }
    // Check the root before anything is attached to `sb`: a failure then frees everything
    // here (`put_super` never runs for a superblock without a root).
    let root = {
        let _nofs = NofsScope::new();
        fs.getattr(crate::engine::fs::ROOT_INO)
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
    let mut dname = [0u8; 16];
    let stats = StatsDir::new(dev_cstr(&name, &mut dname), &STAT_NAMES)?;
    let info = KBox::pin_init(
        pin_init!(SbInfo {
            engine <- kernel::new_mutex!(KBox::into_inner(fs), "ferrofs_engine"),
            opts,
            dev: name,
            bg: ThreadSlot::new(),
            stats,
            lockstat: LockStats::new(),
            budget: Budget::new(),
            live: LiveToken::new(),
        }),
        GFP_KERNEL,
    )?;
    // The state comes back in `put_super`, or in `kill_sb` when this function fails after
    // this point.
    let params = SbParams { magic: SB_MAGIC.into(), ops: &OPS.sops, max_bytes: MAX_FILE_SIZE as i64, block_bits: BLOCK_SIZE.trailing_zeros() as u8 };
    let sb_m = sb.attach(info, params);
    sb.set_root(iget(sb_m, &root)?)?;
    start_services(sb_m, read_only);
    let replayed = sb_m.info().lock().stats().replayed;
    pr_info!(
        "{}: mounted{}, {} log records replayed since the last checkpoint\n",
        name,
        if read_only { " read-only" } else { "" },
        replayed
    );
    Ok(0)
}

/// `super_operations::put_super`: unmount the engine (final checkpoint) and free our state.
///
/// # Safety
///
/// Called by the VFS only, with a ferrofs superblock being shut down.
pub(crate) unsafe extern "C" fn put_super(sb: *mut bindings::super_block) {
    // SAFETY: VFS put_super contract: the superblock is being shut down (every inode evicted,
    // `s_umount` held), allocated for the call.
    let sb = unsafe { DyingSuperBlock::from_raw(sb) };
    // stops the background thread
    let Some(info) = sb.take_info() else {
        return;
    };
    let name = info.dev;
    let mut fs = info.lock();
    if !fs.is_read_only() && !fs.is_failed() && !sb.rdonly() {
        if let Err(e) = fs.sync() {
            pr_err!("{}: error {:?} writing the final checkpoint at unmount; the next mount recovers from the log\n", name, e);
        }
    }
    drop(fs);
    // removes the debugfs directory
    drop(info);
}

/// `super_operations::statfs`.
///
/// # Safety
///
/// Called by the VFS only, with a dentry of a mounted ferrofs and the buffer to fill.
pub(crate) unsafe extern "C" fn statfs(dentry: *mut bindings::dentry, buf: *mut bindings::kstatfs) -> c_int {
    // SAFETY: VFS statfs contract: a live dentry of a mounted ferrofs and the kstatfs to fill,
    // for the call.
    let (sb, buf) = unsafe { (SuperBlock::from_dentry(dentry), Kstatfs::from_raw(buf)) };
    let info = sb.info();
    let (mut st, serial) = {
        let fs = info.lock();
        (fs.statfs(), fs.serial())
    };
    // space the write-back budget holds for dirty data is not free
    st.blocks_free = st.blocks_free.saturating_sub(info.budget.reserved().div_ceil(u64::from(st.block_size.max(1))));
    buf.fill(&Statfs {
        fs_type: SB_MAGIC.into(),
        bsize: st.block_size,
        frsize: st.block_size,
        blocks: st.blocks,
        bfree: st.blocks_free,
        // no blocks are reserved for root
        bavail: st.blocks_free,
        // Inodes are allocated from free space: as many more as there are free blocks.
        files: st.files.saturating_add(st.blocks_free),
        ffree: st.blocks_free,
        namelen: NAME_MAX as u32,
        fsid: serial,
    });
    0
}

/// `super_operations::sync_fs`: a checkpoint.
///
/// # Safety
///
/// Called by the VFS only, with a mounted ferrofs superblock.
pub(crate) unsafe extern "C" fn sync_fs(sb: *mut bindings::super_block, wait: c_int) -> c_int {
    if wait == 0 {
        return 0;
    }
    // SAFETY: VFS sync_fs contract: `sb` is mounted.
    let sb = unsafe { SuperBlock::from_raw(sb) };
    let info = sb.info();
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
///
/// # Safety
///
/// Called by the VFS only, with the `seq_file` to fill and the root of a mounted ferrofs.
pub(crate) unsafe extern "C" fn show_options(m: *mut bindings::seq_file, root: *mut bindings::dentry) -> c_int {
    // SAFETY: VFS show_options contract: the seq_file being filled and the root dentry of a
    // mounted ferrofs, for the call.
    let (m, sb) = unsafe { (SeqFile::from_raw(m), SuperBlock::from_dentry(root)) };
    let opts = sb.info().opts;
    let mut buf = [0u8; 64];
    let mut w = ByteWriter { buf: &mut buf, len: 0 };
    if opts.commit != MountOpts::default().commit {
        let _ = core::fmt::write(&mut w, format_args!(",commit={}", opts.commit));
    }
    if !opts.gc {
        let _ = core::fmt::write(&mut w, format_args!(",gc=off"));
    }
    if let Some(k) = opts.read_cache_kib {
        let _ = core::fmt::write(&mut w, format_args!(",read_cache={}", k));
    }
    let len = w.len.min(buf.len() - 1);
    buf[len] = 0;
    // NUL-terminated just above
    m.puts(CStr::from_bytes_with_nul(&buf[..=len]).unwrap_or(c_str!("")));
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
