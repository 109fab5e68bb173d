// SPDX-License-Identifier: GPL-2.0

//! The background thread (periodic checkpoints at `commit=`, background GC at `gc=on`) and the
//! debugfs statistics it refreshes.

use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::bindings;
use kernel::c_str;
use kernel::ffi::{c_int, c_long, c_void};
use kernel::prelude::*;
use crate::engine::error::Error as EError;
use crate::engine::gcstep::GcProgress;
use crate::shim;
use crate::kfs::sbi;
use crate::super_::{ByteWriter, SbInfo};

/// The debugfs files under /sys/kernel/debug/ferrofs/mtdN/, in `Stats` order.
pub(crate) const STAT_NAMES: [&CStr; 38] = [
    c_str!("user_bytes"),
    c_str!("programmed_bytes"),
    c_str!("erases"),
    c_str!("gc_records"),
    c_str!("gc_bytes"),
    c_str!("checkpoints"),
    c_str!("replayed_records"),
    c_str!("retired_segments"),
    c_str!("free_segments"),
    // segments written to and not yet closed (log heads and the checkpoint area), and the most
    // at once since the mount: never above the superblock's open-segment limit
    c_str!("open_segments"),
    c_str!("max_open_segments"),
    // fault counters since the mount (`FaultStats`)
    c_str!("corrected_reads"),
    c_str!("uncorrectable_reads"),
    c_str!("scrubbed_segments"),
    c_str!("program_failures"),
    c_str!("erase_failures"),
    c_str!("io_errors"),
    // the engine's inode cache: getattr calls served without / with a flash read
    c_str!("icache_hits"),
    c_str!("icache_misses"),
    // the engine lock (`LockStats`): acquisitions, hold time max/p99/p99.9, wait time
    // max/p99/p99.9, in ns (quantiles: the top of a 19 %-wide histogram bucket)
    c_str!("lock_acquisitions"),
    c_str!("lock_hold_max_ns"),
    c_str!("lock_hold_p99_ns"),
    c_str!("lock_hold_p999_ns"),
    c_str!("lock_wait_max_ns"),
    c_str!("lock_wait_p99_ns"),
    c_str!("lock_wait_p999_ns"),
    // what the block backend sent to the device (`blk::IoStats`; 0 on MTD): write bios, their
    // bytes, the smallest, those not whole aligned FTL pages, batches (one wait each); read
    // bios, bytes, reads served from the last page read; cache flushes; segment discards, and
    // those issued under the engine lock; the most segments open at once as the device saw it
    c_str!("dev_write_bios"),
    c_str!("dev_write_bytes"),
    c_str!("dev_write_min_bytes"),
    c_str!("dev_writes_unaligned"),
    c_str!("dev_write_batches"),
    c_str!("dev_read_bios"),
    c_str!("dev_read_bytes"),
    c_str!("dev_read_hits"),
    c_str!("dev_flushes"),
    c_str!("dev_discards"),
    c_str!("dev_discards_locked"),
    c_str!("dev_max_open_segments"),
];

/// The module's debugfs root, /sys/kernel/debug/ferrofs.
pub(crate) static DEBUGFS_ROOT: AtomicPtr<bindings::dentry> = AtomicPtr::new(ptr::null_mut());

pub(crate) unsafe extern "C" fn bg_thread(data: *mut c_void) -> c_int {
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
        if info.opts.gc {
            bg_gc(info, sb);
        }
        let mut fs = info.lock();
        // Read-only (remount, freeze, a read-only mount) or failed: nothing to do.
        // SAFETY: `sb` is mounted (see above).
        if fs.is_read_only() || fs.is_failed() || unsafe { shim::ferrofs_sb_rdonly(sb) } {
            continue;
        }
        if ticks >= info.opts.commit && fs.log_seq() != last_seq {
            if let Err(e) = fs.sync() {
                pr_err!("{}: periodic checkpoint failed: {:?}\n", info.dev, e);
            }
            last_seq = fs.log_seq();
            ticks = 0;
        }
        info.publish_stats(&mut fs);
    }
    0
}

/// Record bytes the background GC scans (reads, and moves if live) per hold of the engine
/// lock: a reader or a page fault waits behind at most this much GC work, not a whole
/// segment move (256 KiB to 4 MiB on NAND).
pub(crate) const GC_STEP_BYTES: u32 = 32 * 1024;

/// One unit of background GC (a victim segment moved, or a checkpoint), in steps of at most
/// `GC_STEP_BYTES` with the engine lock dropped between steps. Stops early (the victim is
/// taken up again later, from its start) when the thread is asked to stop or the filesystem
/// turns read-only.
fn bg_gc(info: &SbInfo, sb: *mut bindings::super_block) {
    let mut cur = None;
    loop {
        let r = {
            let mut fs = info.lock();
            // SAFETY: `sb` is mounted (see `bg_thread`).
            if fs.is_read_only() || fs.is_failed() || unsafe { shim::ferrofs_sb_rdonly(sb) } {
                return;
            }
            fs.gc_step_bounded(true, cur, GC_STEP_BYTES)
        };
        match r {
            Ok(GcProgress::More(c)) => cur = Some(c),
            Ok(GcProgress::Done | GcProgress::Idle) => return,
            Err(EError::NoSpace) => return,
            Err(e) => {
                pr_warn!("{}: background GC stopped on error {:?}\n", info.dev, e);
                return;
            }
        }
        // SAFETY: called from the kthread itself.
        if unsafe { bindings::kthread_should_stop() } {
            return;
        }
    }
}

/// Start the background thread of a read-write superblock.
///
/// # Safety
///
/// `sb` must be fully set up by `fill_super` and not being torn down; the caller holds
/// `s_umount` (or is `fill_super`), so `bg` has no concurrent writer.
pub(crate) unsafe fn start_bg(sb: *mut bindings::super_block) {
    // SAFETY: per the contract.
    let info = unsafe { sbi(sb) };
    if !info.bg.load(Ordering::Acquire).is_null() {
        return;
    }
    let mut name = [0u8; 16];
    let mut w = ByteWriter { buf: &mut name, len: 0 };
    let _ = core::fmt::write(&mut w, format_args!("{}", info.dev));
    // SAFETY: `bg_thread` runs until `kthread_stop`; the name format is a plain "%s" and
    // `name` is NUL-terminated (ByteWriter keeps the last byte zero).
    let task = unsafe {
        bindings::kthread_create_on_node(Some(bg_thread), sb.cast(), -1, c_str!("ferrofs/%s").as_char_ptr(), name.as_ptr())
    };
    let task = match kernel::error::from_err_ptr(task) {
        Ok(t) => t,
        Err(e) => {
            pr_warn!("{}: no background thread ({}): checkpoints only at sync and unmount\n", info.dev, e.to_errno());
            return;
        }
    };
    info.bg.store(task, Ordering::Release);
    // SAFETY: `task` is a freshly created kthread.
    unsafe { bindings::wake_up_process(task) };
}

/// Stop the background thread, if it runs (it wakes at once and exits).
pub(crate) fn stop_bg(info: &SbInfo) {
    let task = info.bg.swap(ptr::null_mut(), Ordering::AcqRel);
    if !task.is_null() {
        // SAFETY: `task` is our kthread, which only returns once asked to stop.
        unsafe { bindings::kthread_stop(task) };
    }
}
