// SPDX-License-Identifier: GPL-2.0

//! The address space operations: `read_folio`, `readahead`, `write_begin`/`write_end`,
//! `writepages`, `invalidate_folio`/`release_folio`, `direct_IO` (O_DIRECT, served by the page
//! cache), and `page_mkwrite` for shared mappings.
//!
//! Data path (delayed allocation, as UBIFS; docs/kernel.md "Write-back"): `write_begin`
//! reserves the worst-case log space of the folio it hands out (`BUDGET_PER_BLOCK`, and once per
//! dirtied inode `BUDGET_PER_INODE`) from the superblock's `Budget`, lock-free and outside the
//! engine lock, and marks the folio as budgeted (PG_private), so a re-dirtied folio is never
//! charged twice. When the reservation fails, a folio whose blocks write-back rewrites in
//! place (whole blocks already on flash: no growth) is admitted without one (`in_place`, with
//! the invariant that keeps its write-back from ever needing space; `page_mkwrite` does the
//! same for a store through a shared mapping); otherwise it writes back
//! dirty data and checkpoints, tries once more, and then returns ENOSPC to write(2). `write_end` only copies and marks the folio
//! and the inode dirty: no engine call, no flash I/O. `writepages` gives each run of contiguous
//! dirty folios to the engine as one `write_blocks` call and releases their budget.

use core::sync::atomic::Ordering;

use kernel::bindings;
use kernel::error::from_result;
use kernel::ffi::{c_int, c_uint, c_void};
use kernel::prelude::*;

use crate::engine::error::Error as EError;
use crate::engine::format::BLOCK_SIZE;
use crate::engine::writeback::{BUDGET_PER_BLOCK, BUDGET_PER_INODE};
use crate::kfs::{kerr, kerr_data, File, Folio, Inode, IovIter, Kiocb, LockedFolio, Readahead, Vma, VmFault, Writeback};
use crate::super_::{Fs, SbInfo};

const BS: usize = BLOCK_SIZE as usize;

/// Folios per `write_blocks` call at most (256 KiB).
pub(crate) const MAX_RUN: usize = 64;

/// Fill a locked folio of `inode` from the engine (zeros past the end of the file).
fn fill_folio(inode: &Inode, folio: &mut LockedFolio) -> Result {
    fill_folio_locked(&mut inode.info().lock(), inode, folio)
}

/// `fill_folio` with the engine already locked.
///
/// A 4 KiB folio is one block: `read_block_into` reads an aligned block (format.md section 8)
/// from the device straight into it, and zero-fills what the file does not hold.
fn fill_folio_locked(fs: &mut Fs, inode: &Inode, folio: &mut LockedFolio) -> Result {
    let pos = folio.pos() as u64;
    let one_block = folio.size() == BS && pos % BS as u64 == 0;
    folio.with_bytes_mut(|buf| -> Result {
        if one_block {
            fs.read_block_into(inode.ino(), pos / BS as u64, buf).map_err(kerr_data)?;
            return Ok(());
        }
        let n = fs.read(inode.ino(), pos, buf).map_err(kerr_data)?;
        if let Some(rest) = buf.get_mut(n..) {
            rest.fill(0);
        }
        Ok(())
    })?;
    folio.mark_uptodate();
    Ok(())
}

/// `address_space_operations::read_folio`.
///
/// # Safety
///
/// Called by the VFS only, with a locked folio of a ferrofs regular file.
pub(crate) unsafe extern "C" fn read_folio(_file: *mut bindings::file, folio: *mut bindings::folio) -> c_int {
    // SAFETY: the VFS passes a locked folio of a ferrofs regular file, ours to unlock; the VFS
    // holds its reference; the host of a locked folio's mapping is a live ferrofs inode.
    let (folio, inode) = unsafe { (LockedFolio::from_locked(folio), Inode::from_locked_folio(folio)) };
    let Some(mut folio) = folio else {
        return EINVAL.to_errno();
    };
    // dropping `folio` unlocks it
    match fill_folio(inode, &mut folio) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Folios filled by one `Engine::read_blocks` call in `readahead` at most (the default
/// readahead window is 32 pages).
const READ_BATCH: usize = 32;

/// Readahead: fill the batch of locked folios under one engine lock, `READ_BATCH` contiguous
/// 4 KiB folios per `Engine::read_blocks` call (one flash read for records that lie back to
/// back). Where that fails part way (a damaged record or page), the folios it did not fill are
/// read one by one, so only the damaged block's folio stays not-uptodate; `read_folio` then
/// reports the error to the reader.
///
/// # Safety
///
/// Called by the VFS only, with a readahead request of a ferrofs regular file.
pub(crate) unsafe extern "C" fn readahead(rac: *mut bindings::readahead_control) {
    // SAFETY: VFS readahead contract: `rac` describes folios of a live ferrofs file.
    let rac = unsafe { Readahead::from_raw(rac) };
    let inode = rac.inode();
    let mut fs = inode.info().lock();
    let mut batch: [Option<LockedFolio>; READ_BATCH] = [const { None }; READ_BATCH];
    let mut last = false;
    while !last {
        let mut n = 0usize;
        let mut first = 0u64;
        while n < READ_BATCH {
            let Some(folio) = rac.next_folio() else {
                last = true;
                break;
            };
            let idx = folio.pos() as u64 / BS as u64;
            let fits = folio.size() == BS && (n == 0 || idx == first + n as u64);
            if !fits {
                // not a 4 KiB folio continuing the batch: read it on its own (after the batch)
                let mut folio = folio;
                read_batch(&mut fs, inode, &mut batch[..n], first);
                n = 0;
                let _ = fill_folio_locked(&mut fs, inode, &mut folio);
                continue;
            }
            if n == 0 {
                first = idx;
            }
            batch[n] = Some(folio);
            n += 1;
        }
        read_batch(&mut fs, inode, &mut batch[..n], first);
    }
}

/// Fill the contiguous 4 KiB folios `batch` (page index `first` on) with one `read_blocks`
/// call, folios it did not fill one at a time; then unlock them all.
fn read_batch(fs: &mut Fs, inode: &Inode, batch: &mut [Option<LockedFolio>], first: u64) {
    if batch.is_empty() {
        return;
    }
    let mut filled = 0usize;
    let _ = fs.read_blocks(inode.ino(), first, batch.len() as u64, &mut |k, data| {
        if let Some(Some(f)) = batch.get_mut(k as usize) {
            f.with_bytes_mut(|buf| {
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                buf[n..].fill(0);
            });
            f.mark_uptodate();
            filled = k as usize + 1;
        }
    });
    for slot in batch.iter_mut().skip(filled) {
        if let Some(f) = slot.as_mut() {
            let _ = fill_folio_locked(fs, inode, f);
        }
    }
    for slot in batch.iter_mut() {
        // dropping the folio unlocks it
        *slot = None;
    }
}

// ---------------------------------------------------------------------- budget

/// The budget of one folio of `size` bytes.
fn folio_cost(size: usize) -> u64 {
    (size.div_ceil(BS) as u64).saturating_mul(BUDGET_PER_BLOCK)
}

/// Fast path: reserve one folio's budget (and the inode record's, if the inode holds none
/// yet). The folio's part comes from the file's `fallocate` hold (`FerroInode::prealloc`,
/// already reserved) when it has one, else from the shared pool, as the inode record's part
/// (from the hold too when the pool has no room). Lock-free; false when the budget is
/// exhausted.
fn try_budget(inode: &Inode, size: usize) -> bool {
    let b = &inode.info().budget;
    let flag = &inode.ferro().ino_budget;
    let need_ino = !flag.load(Ordering::Acquire);
    let ino_bytes = if need_ino { BUDGET_PER_INODE } else { 0 };
    let cost = folio_cost(size);
    let got = if take_held(inode, cost) {
        if ino_bytes == 0 || b.try_reserve(ino_bytes) || take_held(inode, ino_bytes) {
            true
        } else {
            inode.ferro().prealloc.fetch_add(cost, Ordering::AcqRel);
            false
        }
    } else {
        b.try_reserve(cost.saturating_add(ino_bytes))
    };
    if !got {
        return false;
    }
    if need_ino && flag.swap(true, Ordering::AcqRel) {
        // another writer charged the inode meanwhile
        b.release(BUDGET_PER_INODE);
    }
    true
}

/// Take `bytes` of the file's `fallocate` hold, if it holds that much.
fn take_held(inode: &Inode, bytes: u64) -> bool {
    inode.ferro().prealloc.fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| h.checked_sub(bytes)).is_ok()
}

/// Slow path (UBIFS's `make_free_space`): write back this file, then the dirty data of the
/// whole filesystem (which turns reservations into records: overwrites free the space of the
/// blocks they replace), then checkpoint (which drops the index growth the budget holds back
/// for dirty index nodes). The caller holds no folio lock. `in_fault`: the caller is inside a
/// page-fault write section (`page_mkwrite`), where the other inodes' write-back is skipped
/// when `s_umount` is not free at once (a freeze holds it while it waits for the fault).
pub(crate) fn make_free_space(inode: &Inode, in_fault: bool) {
    let sb = inode.sb();
    let info = sb.info();
    // Each step only where it can gain something, so that repeated ENOSPC on a full
    // filesystem stays cheap: write-back only while something is reserved, a checkpoint only
    // while index nodes are dirty.
    if info.budget.reserved() > 0 {
        let _ = inode.write_and_wait();
        // `writeback_inodes_sb` requires `s_umount` held, which we take for reading as
        // UBIFS's `shrink_liability` does (write(2) and page faults never hold it). write(2)
        // may wait for it: `freeze_super` drops it while it waits for writers. A fault may
        // not: `freeze_super` holds it while it waits for page faults to end.
        if in_fault {
            if let Some(umount) = sb.umount_try_read() {
                umount.writeback_inodes();
            }
        } else {
            sb.umount_read().writeback_inodes();
        }
    }
    let mut fs = info.lock();
    if !fs.is_read_only() && !fs.is_failed() && fs.budget_figures().2 > 0 {
        let _ = fs.sync();
    }
    // dropping `fs` publishes the new `budget_avail`
}

/// Reserve one folio's budget before the folio is locked: fast path, else the slow path and
/// one more try. `ENOSPC` when there is no room even then.
fn budget_unlocked(inode: &Inode, size: usize, in_fault: bool) -> Result {
    if try_budget(inode, size) {
        return Ok(());
    }
    make_free_space(inode, in_fault);
    if try_budget(inode, size) {
        Ok(())
    } else {
        Err(ENOSPC)
    }
}

/// Whether the locked folio covers only blocks that write-back rewrites in place
/// (`Engine::blocks_in_place`: whole blocks the flash holds inside the on-flash size, whose
/// new records are no bigger than the old ones). `write_begin` admits such a folio without a
/// reservation when the budget is short (a full filesystem still takes overwrites, as ext4
/// and UBIFS do) and leaves it unmarked, so nothing is released for it later.
///
/// The invariant that keeps write-back of such a folio from ever needing space (and so from
/// failing for lack of it, which would lose data write(2) accepted): while the folio stays
/// dirty, every block it covers keeps, on flash, a whole-block record inside the on-flash
/// size. It is checked under the folio lock, by `write_begin` with the writer holding the
/// inode lock and by `page_mkwrite` holding the mapping's invalidate lock shared (truncate and
/// hole punching hold both, the invalidate lock exclusively, from before they write the
/// range back until the engine and the cache have both been cut), and only these change such
/// a record: write-back itself (a new whole-block record: still true), the GC (moves a record
/// unchanged), truncate (drops the folios wholly past the new size; `inode::set_size` writes
/// a dirty unbudgeted EOF folio back before the engine cuts its block, so no such folio is
/// left over a shortened record that a later size increase could let grow), hole punching
/// (`extents::zero_range` writes the range back and cuts engine and cache under both locks),
/// and unlink/evict (drops the folios). A concurrent `write_begin` or `page_mkwrite` on the
/// same folio finds it dirty and unmarked and makes the same test or reserves: either keeps
/// the invariant. `Engine::write_blocks` recomputes the same test and charges only the other
/// blocks, so a run of such folios needs no reservation and is never refused `NoSpace`.
fn in_place(inode: &Inode, folio: &LockedFolio) -> bool {
    let first = folio.pos() as u64 / BS as u64;
    let n = folio.size().div_ceil(BS) as u64;
    matches!(inode.info().lock().blocks_in_place(inode.ino(), first, n), Ok(k) if k == n)
}

/// Release the budget of a folio whose mark was just removed.
fn release_folio_budget(info: &SbInfo, size: usize) {
    info.budget.release(folio_cost(size));
}

// ---------------------------------------------------------------------- write(2)

/// Before a write at `pos` beyond the EOF `isize` that starts in a later folio: zero the tail
/// of the EOF folio past `isize` if it is cached (stores through a shared mapping may have
/// left bytes there, which the grown file must not show).
fn zero_eof_tail(inode: &Inode, isize: i64) {
    if isize as usize % BS == 0 {
        return;
    }
    if let Some(mut f) = inode.lock_cached_folio(isize) {
        if f.mapping() == inode.mapping() && f.is_uptodate() {
            let off = (isize - f.pos()) as usize;
            f.zero(off, f.size());
        }
    }
}

/// `address_space_operations::write_begin`.
///
/// # Safety
///
/// Called by the VFS only (write_begin contract).
pub(crate) unsafe extern "C" fn write_begin(
    _file: *mut bindings::file,
    mapping: *mut bindings::address_space,
    pos: bindings::loff_t,
    len: c_uint,
    foliop: *mut *mut bindings::folio,
    _fsdata: *mut *mut c_void,
) -> c_int {
    // SAFETY: VFS write_begin contract: `mapping` is the mapping of a live ferrofs file, whose
    // inode lock the caller holds; `foliop` is the VFS's out pointer, for the call.
    let (inode, foliop) = unsafe { (Inode::from_mapping(mapping), &mut *foliop) };
    let isize = inode.size();
    if pos > isize && (pos as usize / BS) > (isize as usize / BS) {
        zero_eof_tail(inode, isize);
    }
    // a reservation made by the slow path before the folio was grabbed again
    let mut prepaid = false;
    let mut folio = loop {
        let mut folio = match inode.write_begin_folio(pos) {
            Ok(f) => f,
            Err(e) => {
                if prepaid {
                    release_folio_budget(inode.info(), BS);
                }
                return e.to_errno();
            }
        };
        if folio.is_budgeted() {
            if prepaid {
                release_folio_budget(inode.info(), folio.size());
            }
            break folio;
        }
        if prepaid || try_budget(inode, folio.size()) {
            folio.set_budgeted();
            break folio;
        }
        if prepaid {
            return ENOSPC.to_errno();
        }
        if in_place(inode, &folio) {
            // an overwrite in place: admitted without a reservation (see `in_place`)
            break folio;
        }
        // the slow path writes folios back: not with this one locked
        drop(folio);
        if let Err(e) = budget_unlocked(inode, BS, false) {
            return e.to_errno();
        }
        prepaid = true;
    };
    let whole = pos == folio.pos() && i64::from(len) == folio.size() as i64;
    if !folio.is_uptodate() && !whole {
        if let Err(e) = fill_folio(inode, &mut folio) {
            if !folio.is_dirty() && folio.clear_budgeted() {
                release_folio_budget(inode.info(), folio.size());
            }
            // dropping `folio` unlocks and puts it
            return e.to_errno();
        }
    }
    if pos > isize && isize >= folio.pos() && folio.is_uptodate() {
        // an extending write inside the EOF folio: the gap reads as zeros
        let from = (isize - folio.pos()) as usize;
        folio.zero(from, (pos - isize) as usize);
    }
    // the lock and reference pass to the VFS, which hands them back in `write_end`
    *foliop = folio.into_raw();
    0
}

/// `address_space_operations::write_end`.
///
/// # Safety
///
/// Called by the VFS only (write_end contract).
pub(crate) unsafe extern "C" fn write_end(
    _file: *mut bindings::file,
    mapping: *mut bindings::address_space,
    pos: bindings::loff_t,
    len: c_uint,
    copied: c_uint,
    folio: *mut bindings::folio,
    _fsdata: *mut c_void,
) -> c_int {
    // SAFETY: VFS write_end contract: `folio` is the locked, referenced folio from
    // `write_begin`, both passing back to us, and `copied` bytes were copied into it at `pos`.
    let (inode, folio) = unsafe { (Inode::from_mapping(mapping), LockedFolio::from_locked_owned(folio)) };
    let Some(mut folio) = folio else {
        return EINVAL.to_errno();
    };
    let mut copied = copied;
    if !folio.is_uptodate() {
        if copied < len {
            // A short copy into a folio we did not read: retry the whole write.
            copied = 0;
        } else {
            folio.mark_uptodate();
        }
    }
    let old = inode.size();
    let end = pos + i64::from(copied);
    if copied > 0 {
        folio.mark_dirty();
        if end > old {
            // under the folio lock, as the VFS requires of `i_size_write` in write_end
            inode.set_size(end);
        }
    } else if !folio.is_dirty() && folio.clear_budgeted() {
        // nothing copied into a clean folio: it needs no budget
        release_folio_budget(inode.info(), folio.size());
    }
    drop(folio);
    if copied > 0 && end > old {
        // the writer holds the inode lock; the folio is unlocked (`pagecache_isize_extended`
        // locks the old EOF folio to write-protect its mapping)
        inode.pagecache_isize_extended(old, end);
        inode.mark_dirty();
    }
    copied as c_int
}

// ---------------------------------------------------------------------- writeback

/// A run of contiguous dirty folios of one file, locked and under writeback, waiting for one
/// `write_blocks` call.
struct Run {
    folios: [Option<LockedFolio>; MAX_RUN],
    n: usize,
    /// The page index of the first folio.
    first: u64,
    /// The inode record's budget (`BUDGET_PER_INODE`) this writeback holds, or 0: taken by
    /// the first run that needs it and kept for the file's later runs of the same `writepages`
    /// call, whose inode records each replace the previous one (so together they cost no more
    /// than the first); given back by `release_inode_charge` at the end. Taken per run and
    /// given back after each (as before), a later run found the inode's charge spent and, on a
    /// full volume, nothing to take a new one from: `write_blocks` refused it with `NoSpace`
    /// and syncfs reported ENOSPC with the folios left dirty.
    ino_part: u64,
}

impl Run {
    fn new() -> Self {
        Run { folios: [const { None }; MAX_RUN], n: 0, first: 0, ino_part: 0 }
    }

    /// Give back the inode record's budget this writeback held (`ino_part`): to the inode
    /// while its mapping still has dirty folios (a range-limited or `nr_to_write`-limited
    /// writeback, or folios dirtied meanwhile: their write-back writes an inode record too,
    /// and on a full volume the pool may have nothing left to charge it from, so a later
    /// writepages, or truncate's write-back of the EOF folio, would get `NoSpace`), else to
    /// the pool (or when a writer charged the inode again meanwhile).
    fn release_inode_charge(&mut self, inode: &Inode) {
        let part = core::mem::take(&mut self.ino_part);
        if part == 0 {
            return;
        }
        if inode.has_dirty_folios() && !inode.ferro().ino_budget.swap(true, Ordering::AcqRel) {
            return;
        }
        inode.info().budget.release(part);
    }

    /// Whether a folio at page index `index` continues the run.
    fn continues(&self, index: u64) -> bool {
        self.n < MAX_RUN && index == self.first + self.n as u64
    }

    fn push(&mut self, index: u64, f: LockedFolio) {
        if self.n == 0 {
            self.first = index;
        }
        if let Some(slot) = self.folios.get_mut(self.n) {
            *slot = Some(f);
            self.n += 1;
        }
    }

    /// Write the run as one `write_blocks` call, end writeback and unlock its folios.
    fn flush(&mut self, inode: &Inode, wb: &Writeback<'_>) -> c_int {
        let n = core::mem::take(&mut self.n);
        if n == 0 {
            return 0;
        }
        let info = inode.info();
        let isize = inode.size().max(0) as u64;
        let start = self.first * BS as u64;
        let run_end = start + (n * BS) as u64;
        // the EOF folio: zero its tail past the EOF in the cache too (mmap stores there must
        // never show once the file grows), and store it truncated to the EOF
        let mut lens = [0usize; MAX_RUN];
        for (k, slot) in self.folios.iter_mut().take(n).enumerate() {
            if let Some(f) = slot.as_mut() {
                let fpos = start + (k * BS) as u64;
                let len = isize.saturating_sub(fpos).min(f.size() as u64) as usize;
                if len < f.size() {
                    f.zero(len, f.size());
                }
                lens[k] = len;
            }
        }
        // folios wholly past the EOF (the run was collected before a truncate finished)
        // are not stored
        let mut m = n;
        while m > 0 && lens[m - 1] == 0 {
            m -= 1;
        }
        let mut err = 0;
        let mut redirty = false;
        if m > 0 {
            let size = isize.min(run_end);
            let (mtime, ctime) = (inode.mtime(), inode.ctime());
            let flag = &inode.ferro().ino_budget;
            // the inode record of this call: the charge this writeback holds (`ino_part`), else
            // the inode's, else a fresh one, else the slack of the global reservation
            if self.ino_part == 0 && (flag.swap(false, Ordering::AcqRel) || info.budget.try_reserve(BUDGET_PER_INODE)) {
                self.ino_part = BUDGET_PER_INODE;
            }
            let mut blocks: [&[u8]; MAX_RUN] = [&[]; MAX_RUN];
            for (k, slot) in self.folios.iter().take(m).enumerate() {
                if let Some(f) = slot.as_ref() {
                    blocks[k] = f.bytes(lens[k]);
                }
            }
            let mut fs = info.lock();
            fs.set_reserved(info.budget.reserved());
            let r = fs.write_blocks(inode.ino(), self.first, &blocks[..m], size, mtime, ctime);
            // the block backend sends the run's writes now and waits for them: a device error
            // is this run's error, reported through the mapping (issue 13)
            let r = r.and_then(|()| fs.flash_io().complete().map_err(EError::from));
            match r {
                Ok(()) => {}
                Err(EError::NoSpace) => {
                    // not budgeted (nothing was written): keep the folios dirty
                    redirty = true;
                    err = ENOSPC.to_errno();
                }
                Err(e) => {
                    err = kerr(e).to_errno();
                    if err == EROFS.to_errno() {
                        err = EIO.to_errno();
                    }
                }
            }
            if redirty && self.ino_part > 0 {
                // the folios stay dirty: the charge goes back to the inode (unless a writer
                // charged it again meanwhile)
                if flag.swap(true, Ordering::AcqRel) {
                    info.budget.release(self.ino_part);
                }
                self.ino_part = 0;
            }
            if !redirty {
                for slot in self.folios.iter_mut().take(n) {
                    if let Some(f) = slot.as_mut() {
                        if f.clear_budgeted() {
                            release_folio_budget(info, f.size());
                        }
                    }
                }
            }
            fs.set_reserved(info.budget.reserved());
            drop(fs);
        } else {
            for slot in self.folios.iter_mut().take(n) {
                if let Some(f) = slot.as_mut() {
                    if f.clear_budgeted() {
                        release_folio_budget(info, f.size());
                    }
                }
            }
        }
        if err != 0 {
            inode.set_mapping_error(err);
        }
        for slot in self.folios.iter_mut().take(n) {
            if let Some(f) = slot.take() {
                if redirty {
                    f.redirty(wb);
                }
                f.unlock_end_writeback();
            }
        }
        err
    }
}

/// `address_space_operations::writepages`.
///
/// # Safety
///
/// Called by the VFS only (writepages contract).
pub(crate) unsafe extern "C" fn writepages(mapping: *mut bindings::address_space, wbc: *mut bindings::writeback_control) -> c_int {
    // SAFETY: VFS writepages contract: `mapping` is the mapping of a live ferrofs file and
    // `wbc` its writeback control, for the call.
    let mut wb = unsafe { Writeback::new(mapping, wbc) };
    let inode = wb.inode();
    let mut first_err: c_int = 0;
    let mut run = Run::new();
    // each folio is locked, its dirty bit cleared, and referenced by the wrapper
    while let Some(mut f) = wb.next_folio() {
        let index = (f.pos() as u64) / BS as u64;
        if f.pos() >= inode.size() {
            // wholly past the EOF (truncated meanwhile): nothing to store
            if f.clear_budgeted() {
                release_folio_budget(inode.info(), f.size());
            }
            wb.err = 0;
            continue;
        }
        wb.err = 0;
        if run.n > 0 && !run.continues(index) {
            wb.err = run.flush(inode, &wb);
            if first_err == 0 {
                first_err = wb.err;
            }
        }
        f.start_writeback();
        run.push(index, f);
    }
    let e = run.flush(inode, &wb);
    run.release_inode_charge(inode);
    if first_err == 0 {
        first_err = e;
    }
    if first_err != 0 {
        first_err
    } else {
        wb.err
    }
}

/// `invalidate_folio`: a dirty folio dropped whole (truncate, eviction) gives its budget back.
///
/// # Safety
///
/// Called by the VM only, with a locked folio of a ferrofs mapping.
pub(crate) unsafe extern "C" fn invalidate_folio(folio: *mut bindings::folio, offset: usize, len: usize) {
    // SAFETY: the VM passes a locked folio of a ferrofs mapping, for the call.
    let folio = unsafe { Folio::from_locked(folio) };
    let size = folio.size();
    if offset != 0 || len < size {
        return;
    }
    if folio.clear_budgeted() {
        release_folio_budget(folio.inode().info(), size);
    }
}

/// `release_folio`: a clean folio being freed. A budget mark on a clean folio is stale (its
/// data was never copied or already written); give it back.
///
/// # Safety
///
/// Called by the VM only, with a locked folio of a ferrofs mapping.
pub(crate) unsafe extern "C" fn release_folio(folio: *mut bindings::folio, _gfp: bindings::gfp_t) -> bool {
    // SAFETY: the VM passes a locked folio of a ferrofs mapping, for the call.
    let folio = unsafe { Folio::from_locked(folio) };
    if folio.is_dirty() {
        return false;
    }
    let size = folio.size();
    if folio.clear_budgeted() {
        release_folio_budget(folio.inode().info(), size);
    }
    true
}

// ---------------------------------------------------------------------- mmap

/// `vm_operations_struct::page_mkwrite`: budget the folio a store through a shared mapping
/// dirties, or admit it without a budget when write-back rewrites it in place (`in_place`, as
/// `write_begin` does); SIGBUS when there is no room (as UBIFS), then lock and dirty it.
///
/// The fault holds the mapping's invalidate lock shared throughout (as ext4's does), so no
/// truncate or hole punch (which hold it exclusively) runs between the `in_place` check and
/// the folio being dirtied: the same exclusion `write_begin` gets from the inode lock.
///
/// # Safety
///
/// Called by the VM only, with a write fault on a shared mapping of a ferrofs file.
pub(crate) unsafe extern "C" fn page_mkwrite(vmf: *mut bindings::vm_fault) -> bindings::vm_fault_t {
    // SAFETY: the VM's page_mkwrite contract: `vmf` is a write fault on a shared mapping of an
    // open ferrofs file, whose folio the fault holds referenced (not locked), for the call.
    let vmf = unsafe { VmFault::from_raw(vmf) };
    let file = vmf.file();
    let inode = file.inode();
    let _fault = inode.sb().start_pagefault();
    let _ = file.update_time();
    let _invalidate = inode.invalidate_lock_shared();
    let mut prepaid = false;
    loop {
        let Some(mut folio) = vmf.lock_folio() else {
            if prepaid {
                release_folio_budget(inode.info(), BS);
            }
            return bindings::vm_fault_reason_VM_FAULT_SIGBUS;
        };
        if folio.mapping() != inode.mapping() || folio.pos() >= inode.size() {
            // truncated meanwhile: let the fault retry
            if prepaid {
                release_folio_budget(inode.info(), BS);
            }
            return bindings::vm_fault_reason_VM_FAULT_NOPAGE;
        }
        if folio.is_budgeted() {
            if prepaid {
                release_folio_budget(inode.info(), BS);
            }
        } else if prepaid || try_budget(inode, folio.size()) {
            folio.set_budgeted();
        } else if in_place(inode, &folio) {
            // an overwrite in place: admitted without a reservation (see `in_place`)
        } else {
            // the slow path writes folios back: not with this one locked
            drop(folio);
            if budget_unlocked(inode, BS, true).is_err() {
                return bindings::vm_fault_reason_VM_FAULT_SIGBUS;
            }
            prepaid = true;
            continue;
        }
        folio.mark_dirty();
        folio.wait_stable();
        // the lock passes to the VM (VM_FAULT_LOCKED); the fault keeps its reference
        let _ = folio.into_raw();
        return bindings::vm_fault_reason_VM_FAULT_LOCKED;
    }
}

/// `file_operations::mmap`: the generic one, with our `vm_operations` (page_mkwrite).
///
/// # Safety
///
/// Called by the VFS only, with an open ferrofs regular file and the area being set up.
pub(crate) unsafe extern "C" fn file_mmap(file: *mut bindings::file, vma: *mut bindings::vm_area_struct) -> c_int {
    // SAFETY: the VFS mmap contract: an open ferrofs file and the area being set up for it.
    let (file, vma) = unsafe { (File::from_raw(file), Vma::from_raw(vma)) };
    from_result(|| {
        file.mmap(vma, &crate::ops::OPS.vm_ops)?;
        Ok(0)
    })
}

/// `address_space_operations::direct_IO`: O_DIRECT through the page cache. Its presence lets
/// open(2) take O_DIRECT (`FMODE_CAN_ODIRECT`); it checks the request as a block device would
/// (file position and every user buffer address and length aligned to 512 bytes, else
/// EINVAL) and then transfers nothing, so the generic paths fall back as they do for a
/// partial direct transfer: a read is served from the page cache after the range was written
/// back (`kiocb_write_and_wait`), a write goes through `write_begin`/`write_end` (with the
/// budget) and is then written back to the engine and dropped from the cache
/// (`direct_write_fallback`: `filemap_write_and_wait_range`, `invalidate_mapping_pages`)
/// before write(2) returns. ferrofs has no block mapping for the data to go to (every block is
/// a log record with a header, written by `write_blocks` under the engine lock), so this is
/// what UBIFS and JFFS2 would do if they took O_DIRECT at all. As on other filesystems,
/// O_DIRECT alone is not a durability promise: the log heads are flushed by fsync/O_SYNC.
///
/// # Safety
///
/// Called by the VFS only (`generic_file_read_iter`/`generic_file_direct_write` of an open
/// ferrofs regular file).
pub(crate) unsafe extern "C" fn direct_io(iocb: *mut bindings::kiocb, iter: *mut bindings::iov_iter) -> isize {
    // SAFETY: VFS direct_IO contract: the request and its user memory, live for the call.
    let (iocb, iter) = unsafe { (Kiocb::from_raw(iocb), IovIter::from_raw(iter)) };
    let mask = u64::from(bindings::SECTOR_SIZE) - 1;
    if (iocb.pos() as u64 | iter.alignment()) & mask != 0 {
        return EINVAL.to_errno() as isize;
    }
    0
}
