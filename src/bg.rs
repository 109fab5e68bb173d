// SPDX-License-Identifier: GPL-2.0

//! The background thread (periodic checkpoints at `commit=`, background GC at `gc=on`) and the
//! debugfs statistics it refreshes.

use kernel::c_str;
use kernel::prelude::*;
use crate::engine::error::Error as EError;
use crate::engine::gcstep::GcProgress;
use crate::kfs::{KthreadCtx, SbThread, SuperBlock, ThreadSlot};
use crate::super_::dev_cstr;

/// The debugfs files under /sys/kernel/debug/ferrofs/mtdN/, in `Stats` order.
pub(crate) const STAT_NAMES: [&CStr; 53] = [
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
    // the log's read cache (`read_cache=`): write units allocated now and at most, line reads
    // served from it, lines read into it from the medium
    c_str!("rcache_lines"),
    c_str!("rcache_max_lines"),
    c_str!("rcache_hits"),
    c_str!("rcache_misses"),
    // the engine lock (`LockStats`): acquisitions, hold time max/p99/p99.9, wait time
    // max/p99/p99.9, in ns (quantiles: the top of a 19 %-wide histogram bucket)
    c_str!("lock_acquisitions"),
    c_str!("lock_hold_max_ns"),
    c_str!("lock_hold_p99_ns"),
    c_str!("lock_hold_p999_ns"),
    c_str!("lock_wait_max_ns"),
    c_str!("lock_wait_p99_ns"),
    c_str!("lock_wait_p999_ns"),
    // the total hold time since the mount, ns
    c_str!("lock_hold_sum_ns"),
    // what the block backend sent to the device (`blk::IoStats`; 0 on MTD): write bios, their
    // bytes, the smallest, those not whole aligned FTL pages, batches, the per-segment groups
    // they went out in (one wait each); read
    // bios, bytes, reads served from the last page read; cache flushes; segment discards, and
    // those issued under the engine lock; the most segments open at once as the device saw it
    c_str!("dev_write_bios"),
    c_str!("dev_write_bytes"),
    c_str!("dev_write_min_bytes"),
    c_str!("dev_writes_unaligned"),
    c_str!("dev_write_batches"),
    c_str!("dev_write_groups"),
    c_str!("dev_read_bios"),
    c_str!("dev_read_bytes"),
    c_str!("dev_read_hits"),
    c_str!("dev_flushes"),
    c_str!("dev_discards"),
    c_str!("dev_discards_locked"),
    c_str!("dev_max_open_segments"),
    // a model of an FTL that caches one erase block (mtdblock) fed with the writes and flushes
    // as sent, a segment taken as its erase block: write-backs when a write goes to another
    // block, at a cache flush, switches that left a block before its end, and switches into or
    // out of a superblock or checkpoint-area segment
    c_str!("dev_ftl1_switch_rewrites"),
    c_str!("dev_ftl1_flush_rewrites"),
    c_str!("dev_ftl1_early_switches"),
    c_str!("dev_ftl1_fixed_switches"),
    // requests to the MTD device (0 on a block device) and the time in them, ns: reads,
    // read time, writes (programs), write time, erase time (nandsim's busy-waits included)
    c_str!("mtd_reads"),
    c_str!("mtd_read_ns"),
    c_str!("mtd_writes"),
    c_str!("mtd_write_ns"),
    c_str!("mtd_erase_ns"),
];

/// The background thread: every second, background GC (`gc=on`), a commit every `commit=`
/// seconds when anything was logged (a checkpoint on MTD, the log heads flushed on a block
/// device: `Engine::commit`), and the statistics. It sleeps in the freezer
/// during system suspend; unmount and remount read-only stop it (at once: see
/// `KthreadCtx::sleep`).
struct Bg;

impl SbThread for Bg {
    fn run(sb: &SuperBlock, t: &KthreadCtx) {
        let info = sb.info();
        let (mut last_seq, mut flushed, block) = {
            let fs = info.lock();
            (fs.log_seq(), fs.flushed_seq(), fs.is_block())
        };
        let mut ticks = 0u32;
        // seconds since the medium was last flushed (by anyone: fsync, checkpoint, this thread)
        let mut flush_age = 0u32;
        while t.sleep(1000) {
            ticks = ticks.saturating_add(1);
            if info.opts.gc {
                bg_gc(sb, t);
            }
            let mut fs = info.lock();
            // Read-only (remount, freeze, a read-only mount) or failed: nothing to do.
            if fs.is_read_only() || fs.is_failed() || sb.rdonly() {
                continue;
            }
            if fs.flushed_seq() != flushed {
                flushed = fs.flushed_seq();
                flush_age = 0;
            } else {
                flush_age = flush_age.saturating_add(1);
            }
            // On a block device the commit is a flush of the log heads (unless a checkpoint is
            // due): it is needed only when records wait for a flush and nothing flushed them for
            // a whole `commit=` interval. Flushing between an fsync's write-back and its own
            // flush would make a cheap FTL rewrite that erase block twice (issue 13's
            // randwrite-sync1); records logged after the last flush still reach the medium
            // within `commit=` seconds and a tick of that flush.
            let due = if block {
                fs.checkpoint_due() || (fs.log_seq() != fs.flushed_seq() && flush_age >= info.opts.commit)
            } else {
                fs.log_seq() != last_seq
            };
            if ticks >= info.opts.commit && due {
                // a checkpoint on MTD; on a block device the log heads flushed unless a
                // checkpoint is due (`Engine::commit`)
                if let Err(e) = fs.commit() {
                    pr_err!("{}: periodic commit failed: {:?}\n", info.dev, e);
                }
                last_seq = fs.log_seq();
                flushed = fs.flushed_seq();
                flush_age = 0;
                ticks = 0;
            }
            info.publish_stats(&mut fs);
        }
    }
}

/// Record bytes the background GC scans (reads, and moves if live) per hold of the engine
/// lock: a reader or a page fault waits behind at most this much GC work, not a whole
/// segment move (256 KiB to 4 MiB on NAND).
pub(crate) const GC_STEP_BYTES: u32 = 32 * 1024;

/// One unit of background GC (a victim segment moved, or a checkpoint), in steps of at most
/// `GC_STEP_BYTES` with the engine lock dropped between steps. Stops early (the victim is
/// taken up again later, from its start) when the thread is asked to stop or the filesystem
/// turns read-only.
fn bg_gc(sb: &SuperBlock, t: &KthreadCtx) {
    let info = sb.info();
    let mut cur = None;
    loop {
        let r = {
            let mut fs = info.lock();
            if fs.is_read_only() || fs.is_failed() || sb.rdonly() {
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
        if t.should_stop() {
            return;
        }
    }
}

/// Start the background thread of a read-write superblock (if it does not run yet). The
/// caller holds `s_umount` or is `fill_super`.
pub(crate) fn start_bg(sb: &SuperBlock) {
    let info = sb.info();
    let mut name = [0u8; 16];
    if let Err(e) = ThreadSlot::start::<Bg>(sb, dev_cstr(&info.dev, &mut name)) {
        pr_warn!("{}: no background thread ({}): checkpoints only at sync and unmount\n", info.dev, e.to_errno());
    }
}
