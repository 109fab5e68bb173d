// SPDX-License-Identifier: GPL-2.0

//! `MtdDev`: a mounted superblock's `struct mtd_info` (raw NAND/NOR), the raw-pointer side of
//! the MTD backend (`src/mtd.rs`).

use kernel::bindings;

use crate::shim;

/// `MTD_NANDFLASH` and `MTD_MLCNANDFLASH` (include/uapi/mtd/mtd-abi.h, a stable user ABI): the
/// 6.12 bindings include no MTD header, so they are copied here.
pub(crate) const MTD_NANDFLASH: u8 = 4;
pub(crate) const MTD_MLCNANDFLASH: u8 = 8;

/// The MTD device under a mounted superblock (`sb->s_mtd`, referenced by `get_tree_mtd` and
/// released by `kill_mtd_super`).
///
/// # Invariants
///
/// `mtd` is a valid, referenced MTD device for the life of the value.
pub(crate) struct MtdDev {
    mtd: *mut bindings::mtd_info,
}

// SAFETY: the device stays referenced (by the superblock) for as long as the value lives, and
// MTD operations may be called from any thread (MTD drivers lock internally).
unsafe impl Send for MtdDev {}
// SAFETY: every method takes `&self` and calls an MTD operation, which drivers serialise
// internally (the NAND core's chip lock), so two threads may share one device: the engine's
// reads and the write-behind thread's programs (`src/mtd.rs`).
unsafe impl Sync for MtdDev {}

impl MtdDev {
    /// # Safety
    ///
    /// `mtd` must be a referenced MTD device that stays referenced for the life of the result
    /// (the `s_mtd` of a superblock set up by `get_tree_mtd`, which outlives the engine).
    pub(crate) unsafe fn from_raw(mtd: *mut bindings::mtd_info) -> Self {
        MtdDev { mtd }
    }

    /// Size in bytes.
    pub(crate) fn size(&self) -> u64 {
        // SAFETY: `mtd` is valid (type invariant).
        unsafe { shim::ferrofs_mtd_size(self.mtd) }
    }

    pub(crate) fn erasesize(&self) -> u32 {
        // SAFETY: `mtd` is valid (type invariant).
        unsafe { shim::ferrofs_mtd_erasesize(self.mtd) }
    }

    pub(crate) fn writesize(&self) -> u32 {
        // SAFETY: `mtd` is valid (type invariant).
        unsafe { shim::ferrofs_mtd_writesize(self.mtd) }
    }

    /// The device type (`MTD_NANDFLASH`...).
    pub(crate) fn kind(&self) -> u8 {
        // SAFETY: `mtd` is valid (type invariant).
        unsafe { shim::ferrofs_mtd_type(self.mtd) }
    }

    /// The MTD index (the N of mtdN).
    pub(crate) fn index(&self) -> i32 {
        // SAFETY: `mtd` is valid (type invariant).
        unsafe { shim::ferrofs_mtd_index(self.mtd) }
    }

    /// `MTD_WRITEABLE` is set.
    pub(crate) fn writeable(&self) -> bool {
        // SAFETY: `mtd` is valid (type invariant).
        unsafe { shim::ferrofs_mtd_writeable(self.mtd) }
    }

    /// Pages sharing a cell (`mtd_pairing_groups`): 1 without a pairing scheme, 2 on MLC.
    pub(crate) fn pairing_groups(&self) -> i32 {
        // SAFETY: `mtd` is valid (type invariant).
        unsafe { shim::ferrofs_mtd_pairing_groups(self.mtd) }
    }

    /// The (pair, group) of write unit `wunit` of an erase block (`mtd_wunit_to_pairing_info`),
    /// or the error it returns.
    pub(crate) fn wunit_pairing(&self, wunit: i32) -> core::result::Result<(i32, i32), i32> {
        let (mut pair, mut group) = (0, 0);
        // SAFETY: `mtd` is valid (type invariant); `pair` and `group` are valid for writes.
        let r = unsafe { shim::ferrofs_mtd_wunit_to_pairing_info(self.mtd, wunit, &mut pair, &mut group) };
        if r < 0 {
            Err(r)
        } else {
            Ok((pair, group))
        }
    }

    /// The device can have bad blocks (`mtd_can_have_bb`).
    pub(crate) fn can_have_bb(&self) -> bool {
        // SAFETY: `mtd` is valid (type invariant).
        unsafe { shim::ferrofs_mtd_can_have_bb(self.mtd) }
    }

    /// `mtd_read` into `buf` at byte `at`: (the return code, the bytes read).
    pub(crate) fn read(&self, at: i64, buf: &mut [u8]) -> (i32, usize) {
        let mut retlen = 0usize;
        // SAFETY: `mtd` is valid (type invariant); `buf` is writable for `buf.len()` bytes.
        let ret = unsafe { shim::ferrofs_mtd_read(self.mtd, at, buf.len(), &mut retlen, buf.as_mut_ptr()) };
        (ret, retlen)
    }

    /// `mtd_write` of `buf` at byte `at`: (the return code, the bytes written).
    pub(crate) fn write(&self, at: i64, buf: &[u8]) -> (i32, usize) {
        let mut retlen = 0usize;
        // SAFETY: `mtd` is valid (type invariant); `buf` is readable for `buf.len()` bytes.
        let ret = unsafe { shim::ferrofs_mtd_write(self.mtd, at, buf.len(), &mut retlen, buf.as_ptr()) };
        (ret, retlen)
    }

    /// `mtd_erase` of `len` bytes at `at` (the return code).
    pub(crate) fn erase(&self, at: i64, len: u64) -> i32 {
        // SAFETY: `mtd` is valid (type invariant); the range is checked by the MTD core.
        unsafe { shim::ferrofs_mtd_erase(self.mtd, at, len) }
    }

    /// `mtd_block_isbad` (negative: error, 0: good, positive: bad).
    pub(crate) fn block_isbad(&self, at: i64) -> i32 {
        // SAFETY: `mtd` is valid (type invariant); the offset is checked by the MTD core.
        unsafe { shim::ferrofs_mtd_block_isbad(self.mtd, at) }
    }

    /// `mtd_block_markbad` (the return code).
    pub(crate) fn block_markbad(&self, at: i64) -> i32 {
        // SAFETY: `mtd` is valid (type invariant); the offset is checked by the MTD core.
        unsafe { shim::ferrofs_mtd_block_markbad(self.mtd, at) }
    }

    /// `mtd_sync`: wait for the device to finish pending operations.
    pub(crate) fn sync(&self) {
        // SAFETY: `mtd` is valid (type invariant).
        unsafe { shim::ferrofs_mtd_sync(self.mtd) }
    }
}
