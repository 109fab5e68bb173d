// SPDX-License-Identifier: GPL-2.0

//! `BlockDev` (a mounted superblock's `struct block_device`) and `PageBuf` (owned order-0 pages
//! that synchronous bios read into and write from): the raw-pointer side of the block backend
//! (`src/blk.rs`).

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

    /// Read (`write` false) or write `len` bytes at `sector` through the first pages of `buf`
    /// with one bio, and wait for it (`submit_bio_wait`). `len` must be a non-zero multiple of
    /// the logical block size and at most `buf.capacity()` (so at most `BIO_MAX_VECS` pages).
    /// Returns the negative errno on failure (`EINVAL` for a bad request).
    pub(crate) fn submit_sync(&self, write: bool, sector: u64, buf: &mut PageBuf, len: usize) -> Result<(), i32> {
        let einval = -(bindings::EINVAL as i32);
        if len == 0 || len > buf.capacity() {
            return Err(einval);
        }
        let npages = len.div_ceil(PAGE_BYTES);
        let nr_vecs = u16::try_from(npages).map_err(|_| einval)?;
        // SAFETY: `bdev` is open (type invariant). With a sleeping GFP mask `bio_alloc` draws
        // on the filesystem bio mempool and cannot fail, but a null is still handled.
        let bio = unsafe { shim::ferrofs_bio_alloc(self.bdev, nr_vecs, write, sector) };
        if bio.is_null() {
            return Err(-(bindings::ENOMEM as i32));
        }
        let mut left = len;
        for &page in buf.pages.iter().take(npages) {
            let n = left.min(PAGE_BYTES);
            // SAFETY: `bio` was allocated above with room for `npages` vectors and is not
            // submitted yet; `page` is an order-0 page owned by `buf` (its invariant), which
            // the caller borrows mutably for the whole synchronous I/O.
            if !unsafe { shim::ferrofs_bio_add_page(bio, page, n as c_uint) } {
                // SAFETY: `bio` is ours and was never submitted.
                unsafe { shim::ferrofs_bio_put(bio) };
                return Err(einval);
            }
            left -= n;
        }
        // SAFETY: `bio` is fully built; `submit_bio_wait` returns once the I/O completed, so
        // the pages are not touched by the device after this, and the bio is ours to put.
        let ret = unsafe {
            let r = shim::ferrofs_submit_bio_wait(bio);
            shim::ferrofs_bio_put(bio);
            r
        };
        if ret == 0 { Ok(()) } else { Err(ret) }
    }
}

/// Order-0 pages owned for synchronous bios (a bounce buffer: the engine's buffers come from
/// `KVVec`, which may be vmalloc memory and is not aligned to the device's blocks).
///
/// # Invariants
///
/// Every entry of `pages` is a page allocated by `alloc_page` (lowmem: no `__GFP_HIGHMEM`, so
/// `page_address` maps it), owned by this value and freed in `drop`.
pub(crate) struct PageBuf {
    pages: KVec<*mut bindings::page>,
    /// At most this many pages (`BIO_MAX_VECS`: one bio).
    max_pages: usize,
}

// SAFETY: the pages are owned by the value and only reached through `&mut self` or `&self`.
unsafe impl Send for PageBuf {}

impl PageBuf {
    /// An empty buffer that grows (`reserve`) up to one bio's worth of pages.
    pub(crate) fn new() -> Self {
        // SAFETY: a constant of the block layer, no preconditions.
        let max = unsafe { shim::ferrofs_bio_max_vecs() } as usize;
        PageBuf { pages: KVec::new(), max_pages: max.max(1) }
    }

    /// The most bytes one bio through this buffer can carry.
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

    /// Copy `src` into the buffer from byte 0 (`src.len()` at most `capacity`).
    pub(crate) fn fill(&mut self, src: &[u8]) -> Result {
        if src.len() > self.capacity() {
            return Err(EINVAL);
        }
        for (chunk, &page) in src.chunks(PAGE_BYTES).zip(self.pages.iter()) {
            // SAFETY: `page` is an owned lowmem page (invariant), so its address maps
            // `PAGE_BYTES` writable bytes; `chunk` is at most that long and cannot overlap it
            // (the page is not reachable from any Rust slice).
            unsafe {
                let dst = shim::ferrofs_page_address(page).cast::<u8>();
                core::ptr::copy_nonoverlapping(chunk.as_ptr(), dst, chunk.len());
            }
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
            // it (every bio is waited for in `submit_sync`).
            unsafe { shim::ferrofs_free_page(page) };
        }
    }
}
