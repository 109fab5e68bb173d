// SPDX-License-Identifier: GPL-2.0

//! `BlockDev` (a mounted superblock's `struct block_device`), `PageBuf` (owned order-0 pages that
//! bios read into and write from) and `Run` (one contiguous transfer): the raw-pointer side of the
//! block backend (`src/blk.rs`). `BlockDev::submit_runs` sends any number of runs as large bios
//! under one block plug, chained so that a single wait covers them all.

use kernel::bindings;
use kernel::ffi::c_uint;
use kernel::prelude::*;

use crate::shim;

/// Bytes per sector in the block layer's addressing (`SECTOR_SHIFT`), whatever the device's
/// logical block size.
pub(crate) const SECTOR_SIZE: u64 = 512;

/// Bytes per page (`PAGE_SIZE`).
pub(crate) const PAGE_BYTES: usize = kernel::page::PAGE_SIZE;

/// The block device under a mounted superblock (`sb->s_bdev`, opened by `get_tree_bdev` and
/// released by `kill_block_super`).
///
/// # Invariants
///
/// `bdev` is a valid, opened block device for the life of the value.
pub(crate) struct BlockDev {
    bdev: *mut bindings::block_device,
}

// SAFETY: the block device stays open (held by the superblock) for as long as the value lives,
// and the block layer's submission and query functions may be called from any thread.
unsafe impl Send for BlockDev {}

// SAFETY: every method takes `&self` and only calls block-layer functions that may run
// concurrently on one device (queries, discards, flushes, bio submission); the value has no
// state of its own besides the pointer.
unsafe impl Sync for BlockDev {}

impl BlockDev {
    /// # Safety
    ///
    /// `bdev` must be an opened block device that stays open for the life of the result (the
    /// `s_bdev` of a superblock set up by `get_tree_bdev`, which outlives the mounted engine).
    pub(crate) unsafe fn from_raw(bdev: *mut bindings::block_device) -> Self {
        BlockDev { bdev }
    }

    /// Size of the device in bytes.
    pub(crate) fn nr_bytes(&self) -> u64 {
        // SAFETY: `bdev` is open (type invariant).
        unsafe { shim::ferrofs_bdev_nr_bytes(self.bdev) }
    }

    /// The logical block size: the smallest unit the device reads and writes.
    pub(crate) fn logical_block_size(&self) -> u32 {
        // SAFETY: `bdev` is open (type invariant).
        unsafe { shim::ferrofs_bdev_logical_block_size(self.bdev) }
    }

    /// The physical block size (what the device writes without a read-modify-write).
    pub(crate) fn physical_block_size(&self) -> u32 {
        // SAFETY: `bdev` is open (type invariant).
        unsafe { shim::ferrofs_bdev_physical_block_size(self.bdev) }
    }

    /// Whether the device refuses writes (`bdev_read_only`: `blockdev --setro`, `losetup -r`,
    /// a write-protected card).
    pub(crate) fn read_only(&self) -> bool {
        // SAFETY: `bdev` is open (type invariant).
        unsafe { shim::ferrofs_bdev_read_only(self.bdev) }
    }

    /// The largest discard the device takes, in sectors: 0 when it has no discard.
    pub(crate) fn max_discard_sectors(&self) -> u32 {
        // SAFETY: `bdev` is open (type invariant).
        unsafe { shim::ferrofs_bdev_max_discard_sectors(self.bdev) }
    }

    /// Discard `nr_sects` sectors from `sector` (`blkdev_issue_discard`, which splits the range
    /// into what the device takes and waits). Returns the negative errno on failure.
    pub(crate) fn discard(&self, sector: u64, nr_sects: u64) -> Result<(), i32> {
        // SAFETY: `bdev` is open (type invariant); the range is checked by the block layer.
        match unsafe { shim::ferrofs_blkdev_issue_discard(self.bdev, sector, nr_sects) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// Flush the device's volatile write cache (`blkdev_issue_flush`: an empty
    /// `REQ_PREFLUSH` bio, waited for). Returns the negative errno on failure.
    pub(crate) fn flush(&self) -> Result<(), i32> {
        // SAFETY: `bdev` is open (type invariant).
        match unsafe { shim::ferrofs_blkdev_issue_flush(self.bdev) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// The largest bio of whole pages the queue takes without splitting it, in bytes: at most
    /// its `max_sectors`, one page per segment of its `max_segments` (the pages of a bio are
    /// not physically contiguous), `BIO_MAX_VECS` pages; at least one page.
    pub(crate) fn max_bio_bytes(&self) -> usize {
        // SAFETY: `bdev` is open (type invariant); a constant of the block layer.
        let (sectors, segments, vecs) = unsafe {
            (shim::ferrofs_bdev_max_sectors(self.bdev), shim::ferrofs_bdev_max_segments(self.bdev), shim::ferrofs_bio_max_vecs())
        };
        let by_sectors = (sectors as usize).saturating_mul(SECTOR_SIZE as usize) / PAGE_BYTES * PAGE_BYTES;
        let pages = (segments as usize).min(vecs as usize);
        by_sectors.min(pages.saturating_mul(PAGE_BYTES)).max(PAGE_BYTES)
    }

    /// Read (`write` false) into or write from `buf` the byte ranges `runs`, and wait for all
    /// of them once. Under one block plug, each run goes out as bios of at most `max_bio`
    /// bytes (`max_bio_bytes`, rounded down to whole pages), chained (`blk_next_bio`) so that the
    /// last one completes only after every other: `submit_bio_wait` on it is the single wait.
    /// Every run's device offset, buffer offset and length must be multiples of 512 and its
    /// bytes inside `buf`. Returns the number of bios, or the negative errno of the first
    /// failure (`EINVAL` for a bad request, before anything is submitted).
    pub(crate) fn submit_runs(&self, write: bool, runs: &[Run], buf: &PageBuf, max_bio: usize) -> Result<u64, i32> {
        let einval = -(bindings::EINVAL as i32);
        let max_bio = max_bio / PAGE_BYTES * PAGE_BYTES;
        let sector = SECTOR_SIZE as usize;
        for r in runs {
            let end = r.buf_at.checked_add(r.len).ok_or(einval)?;
            if r.len == 0 || r.len % sector != 0 || r.buf_at % sector != 0 || r.dev_at % SECTOR_SIZE != 0 || end > buf.capacity() {
                return Err(einval);
            }
        }
        if runs.is_empty() || max_bio == 0 {
            return Ok(0);
        }
        let mut plug = core::mem::MaybeUninit::<bindings::blk_plug>::uninit();
        // SAFETY: `blk_start_plug` initialises the plug, which stays on this stack frame,
        // unmoved, until `blk_finish_plug` below (every path reaches it).
        unsafe { bindings::blk_start_plug(plug.as_mut_ptr()) };
        let mut bio: *mut bindings::bio = core::ptr::null_mut();
        let mut bios = 0u64;
        let mut err = 0i32;
        'runs: for r in runs {
            let mut done = 0usize;
            while done < r.len {
                let n = (r.len - done).min(max_bio);
                let first = r.buf_at + done;
                let npages = (first + n - 1) / PAGE_BYTES - first / PAGE_BYTES + 1;
                // at most BIO_MAX_VECS: `max_bio` is at most that many pages, and a piece not
                // starting on a page boundary spans one more only when shorter than `max_bio`
                let nr_vecs = match u16::try_from(npages) {
                    Ok(v) if (v as u32) <= max_vecs() => v,
                    _ => {
                        err = einval;
                        break 'runs;
                    }
                };
                let at = (r.dev_at + done as u64) / SECTOR_SIZE;
                // SAFETY: `bdev` is open (type invariant). The previous bio (if any) is chained
                // to the new one and submitted; its pages stay owned by `buf`, which the caller
                // borrows until the wait below. With a sleeping GFP mask the allocation draws on
                // the bio mempool and cannot fail.
                bio = unsafe { shim::ferrofs_blk_next_bio(bio, self.bdev, nr_vecs, write, at) };
                bios += 1;
                let mut left = n;
                let mut pos = first;
                while left > 0 {
                    let (pi, po) = (pos / PAGE_BYTES, pos % PAGE_BYTES);
                    let len = left.min(PAGE_BYTES - po);
                    let page = match buf.pages.get(pi) {
                        Some(&p) => p,
                        None => {
                            err = einval;
                            break 'runs;
                        }
                    };
                    // SAFETY: `bio` is the unsubmitted bio allocated above with room for every
                    // page of this piece; `page` is an order-0 page owned by `buf` (its
                    // invariant), `po + len <= PAGE_BYTES`. A fresh bio always takes its first
                    // page, so a failure (not expected) leaves a non-empty bio to submit.
                    if !unsafe { shim::ferrofs_bio_add_page(bio, page, len as c_uint, po as c_uint) } {
                        err = einval;
                        break 'runs;
                    }
                    left -= len;
                    pos += len;
                }
                done += n;
            }
        }
        let ret = if bio.is_null() {
            0
        } else {
            // SAFETY: `bio` is built and not submitted; every earlier bio is chained to it, so
            // `submit_bio_wait` returns once all of them completed (the pages are then no
            // longer touched by the device), with the first error of the chain. The bio is
            // ours to put afterwards.
            unsafe {
                let r = shim::ferrofs_submit_bio_wait(bio);
                shim::ferrofs_bio_put(bio);
                r
            }
        };
        // SAFETY: the plug started above, on this frame.
        unsafe { bindings::blk_finish_plug(plug.as_mut_ptr()) };
        if err != 0 {
            Err(err)
        } else if ret != 0 {
            Err(ret)
        } else {
            Ok(bios)
        }
    }
}

/// `BIO_MAX_VECS`.
fn max_vecs() -> u32 {
    // SAFETY: a constant of the block layer, no preconditions.
    unsafe { shim::ferrofs_bio_max_vecs() }
}

/// One contiguous transfer of `BlockDev::submit_runs`: `len` bytes at byte `dev_at` of the
/// device, through bytes `buf_at..buf_at + len` of the page buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) dev_at: u64,
    pub(crate) buf_at: usize,
    pub(crate) len: usize,
}

/// Order-0 pages owned for bios (a bounce buffer: the engine's buffers come from `KVVec`, which
/// may be vmalloc memory and is not aligned to the device's blocks).
///
/// # Invariants
///
/// Every entry of `pages` is a page allocated by `alloc_page` (lowmem: no `__GFP_HIGHMEM`, so
/// `page_address` maps it), owned by this value and freed in `drop`.
pub(crate) struct PageBuf {
    pages: KVec<*mut bindings::page>,
    /// At most this many pages.
    max_pages: usize,
}

// SAFETY: the pages are owned by the value and only reached through `&mut self` or `&self`.
unsafe impl Send for PageBuf {}

impl PageBuf {
    /// An empty buffer that grows (`reserve`) up to `max_bytes` (at least one page).
    pub(crate) fn new(max_bytes: usize) -> Self {
        PageBuf { pages: KVec::new(), max_pages: max_bytes.div_ceil(PAGE_BYTES).max(1) }
    }

    /// The most bytes the buffer can hold.
    pub(crate) fn max_bytes(&self) -> usize {
        self.max_pages * PAGE_BYTES
    }

    /// Bytes the buffer holds now.
    pub(crate) fn capacity(&self) -> usize {
        self.pages.len() * PAGE_BYTES
    }

    /// Grow to hold at least `bytes` (at most `max_bytes`). Fallible: `ENOMEM`.
    pub(crate) fn reserve(&mut self, bytes: usize) -> Result {
        if bytes > self.max_bytes() {
            return Err(EINVAL);
        }
        let want = bytes.div_ceil(PAGE_BYTES);
        while self.pages.len() < want {
            self.pages.reserve(1, GFP_KERNEL)?;
            // SAFETY: no preconditions; the page is owned by `self` from here (invariant).
            let page = unsafe { shim::ferrofs_alloc_page() };
            if page.is_null() {
                return Err(ENOMEM);
            }
            // cannot fail (capacity reserved above), but a failure must not leak the page
            if let Err(e) = self.pages.push(page, GFP_KERNEL) {
                // SAFETY: allocated just above and not stored anywhere.
                unsafe { shim::ferrofs_free_page(page) };
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Copy `src` into the buffer from byte `at` (`at + src.len()` at most `capacity`).
    pub(crate) fn fill_at(&mut self, at: usize, src: &[u8]) -> Result {
        let end = at.checked_add(src.len()).ok_or(EINVAL)?;
        if end > self.capacity() {
            return Err(EINVAL);
        }
        let mut done = 0usize;
        while done < src.len() {
            let pos = at + done;
            let (pi, po) = (pos / PAGE_BYTES, pos % PAGE_BYTES);
            let n = (PAGE_BYTES - po).min(src.len() - done);
            let page = *self.pages.get(pi).ok_or(EINVAL)?;
            let from = src.get(done..done + n).ok_or(EINVAL)?;
            // SAFETY: `page` is an owned lowmem page (invariant), so its address maps
            // `PAGE_BYTES` writable bytes; `po + n <= PAGE_BYTES`, and `from` cannot overlap it
            // (the page is not reachable from any Rust slice).
            unsafe {
                let dst = shim::ferrofs_page_address(page).cast::<u8>().add(po);
                core::ptr::copy_nonoverlapping(from.as_ptr(), dst, n);
            }
            done += n;
        }
        Ok(())
    }

    /// Copy `dst.len()` bytes starting at byte `from` of the buffer into `dst`.
    pub(crate) fn copy_out(&self, from: usize, dst: &mut [u8]) -> Result {
        let end = from.checked_add(dst.len()).ok_or(EINVAL)?;
        if end > self.capacity() {
            return Err(EINVAL);
        }
        let mut done = 0usize;
        while done < dst.len() {
            let at = from + done;
            let (pi, po) = (at / PAGE_BYTES, at % PAGE_BYTES);
            let n = (PAGE_BYTES - po).min(dst.len() - done);
            let page = *self.pages.get(pi).ok_or(EINVAL)?;
            let out = dst.get_mut(done..done + n).ok_or(EINVAL)?;
            // SAFETY: `page` is an owned lowmem page (invariant); `po + n <= PAGE_BYTES`, so
            // the source range lies inside it; `out` is a distinct Rust slice of `n` bytes.
            unsafe {
                let src = shim::ferrofs_page_address(page).cast::<u8>().add(po);
                core::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), n);
            }
            done += n;
        }
        Ok(())
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        for &page in self.pages.iter() {
            // SAFETY: allocated by `alloc_page` and owned by `self` (invariant); no bio holds
            // it (`submit_runs` waits for every bio it submits while it borrows the buffer).
            unsafe { shim::ferrofs_free_page(page) };
        }
    }
}
