//! The `Flash` interface: everything the engine needs from the medium, and nothing more.
//!
//! One on-flash format serves two backends. What differs between them is captured here:
//! - raw flash through MTD (NAND/NOR): a segment is one erase block; pages are programmed only
//!   when erased, in increasing order inside an erase block, never twice; blocks can be bad;
//!   reads can report corrected bit-flips (`ReadStatus::Corrected`) or fail (`FlashError::Uncorrectable`).
//! - managed flash (SD/eMMC/USB/CF) through a block device: a segment is one allocation unit
//!   (default 4 MiB); writes are whole `write_unit`s, aligned, sequential inside a segment;
//!   `erase` is a discard, after which the old contents may still read back (so the engine must
//!   never rely on "erased reads as 0xFF" on this kind: it validates everything by sequence and CRC).
//!
//! The kernel layer implements this over `struct mtd_info` or a `struct block_device`; userspace
//! implements it over the flash simulator and over image files.

/// What kind of medium is under the filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlashKind {
    /// Raw NAND: program erased pages in order, no rewrite, bad blocks, bit-flips.
    Nand,
    /// Raw NOR: byte-programmable, erase blocks, no bad blocks. Treated with NAND rules by the engine.
    Nor,
    /// A block device with an FTL: aligned whole-unit sequential writes, discard instead of erase.
    Block,
    /// MLC (or TLC) NAND: cells hold several bits, and the pages sharing a cell are programmed
    /// separately ("paired pages"). A power cut while programming an upper page can destroy
    /// its already-written lower page, which may hold data fsync made durable. The engine
    /// pads its durability points so that no later program is the upper page of a page
    /// holding durable records (docs/design.md, "MLC NAND"), which needs the pairing:
    /// [`Flash::pairing`]. Without it `format` and `mount` refuse this kind with
    /// `Error::NotSupported` (use the part in an SLC mode, or a pSLC partition, as NAND).
    MlcNand,
}

/// The medium's geometry, fixed for the life of a mounted filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Medium kind, which selects the write rules.
    pub kind: FlashKind,
    /// Bytes per segment: the erase block on MTD, the allocation unit on a block device.
    pub segment_size: u32,
    /// Number of segments on the device (including bad ones).
    pub segment_count: u32,
    /// Minimum write unit in bytes: the NAND page, or the block size (4096) on a block device.
    /// Every write's offset and length are multiples of it.
    pub write_unit: u32,
    /// Preferred write size in bytes (a multiple of `write_unit`): what the medium writes fastest,
    /// e.g. the FTL page size (16-32 KiB) on cheap managed flash. The engine batches up to it.
    pub preferred_write: u32,
}

impl Geometry {
    /// Total bytes of the device.
    pub fn device_bytes(&self) -> u64 {
        u64::from(self.segment_size) * u64::from(self.segment_count)
    }

    /// Byte address on the device of `len` bytes at `offset` in segment `seg`; `None` when the
    /// range is not inside one segment of the device. Every backend checks requests with it.
    pub fn byte_addr(&self, seg: u32, offset: u32, len: usize) -> Option<u64> {
        let end = u64::from(offset).checked_add(len as u64)?;
        if seg >= self.segment_count || end > u64::from(self.segment_size) {
            return None;
        }
        Some(u64::from(seg) * u64::from(self.segment_size) + u64::from(offset))
    }

    /// Write units per segment.
    pub fn units_per_segment(&self) -> u32 {
        if self.write_unit == 0 {
            0
        } else {
            self.segment_size / self.write_unit
        }
    }
}

/// Where a page of an MLC erase block sits among the pages sharing its cells (Linux's
/// `struct mtd_pairing_info`): `pair` numbers the cells, `group` the bit (0: the lower page,
/// programmed first; 1: the upper page; 2 on TLC ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairInfo {
    /// The pair (cell group) the page belongs to.
    pub pair: u32,
    /// Its group in the pair: 0 the lower page.
    pub group: u32,
}

/// The pairing schemes the engine knows (Linux's `struct mtd_pairing_scheme` kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairingScheme {
    /// Linux's `dist3_pairing_scheme` (drivers/mtd/nand/raw/nand_base.c, set by the Hynix
    /// H27UCG8T2ETR-BC and Toshiba TC58TEG5DCLTA00 MLC drivers): page 0 and the odd pages are lower pages, an even page 2k > 0 is the
    /// upper page of page 2k - 3 (page 2 of page 0): pairs three pages apart.
    Dist3,
    /// Pairs without distance: pages 2k (lower) and 2k + 1 (upper) share their cells.
    Adjacent,
}

/// The page pairing of an MLC part: `groups` pages share a cell (2 on MLC), laid out by
/// `scheme`. A pure function of the page index in an erase block of `pages` pages, both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pairing {
    /// Pages sharing a cell (Linux's `ngroups`): 2 on MLC.
    pub groups: u32,
    /// How the pages of an erase block pair up.
    pub scheme: PairingScheme,
}

impl Pairing {
    /// The pair and group of page `page` of an erase block of `pages` pages (Linux's
    /// `mtd_wunit_to_pairing_info`); `None` out of range.
    pub fn info(&self, page: u32, pages: u32) -> Option<PairInfo> {
        if page >= pages {
            return None;
        }
        Some(match self.scheme {
            PairingScheme::Dist3 => {
                let dist = if page == pages.saturating_sub(1) { 2 } else { 3 };
                if page == 0 || page & 1 == 1 {
                    PairInfo { pair: page.div_ceil(2), group: 0 }
                } else {
                    PairInfo { pair: page.saturating_add(1).saturating_sub(dist) / 2, group: 1 }
                }
            }
            PairingScheme::Adjacent => PairInfo { pair: page / 2, group: page & 1 },
        })
    }

    /// The page of `info` in an erase block of `pages` pages (Linux's
    /// `mtd_pairing_info_to_wunit`); `None` when no page has it.
    pub fn wunit(&self, info: PairInfo, pages: u32) -> Option<u32> {
        let page = match self.scheme {
            PairingScheme::Dist3 => {
                let lastpair = pages.checked_sub(1)? / 2;
                if info.group == 0 && info.pair == 0 {
                    0
                } else if info.group == 0 {
                    info.pair.checked_mul(2)?.checked_sub(1)?
                } else if info.group == 1 {
                    // (Linux's get_wunit returns page 0 for the upper page of pair 0, which its
                    // get_info places at page 2: here it is page 2, so that every page maps back)
                    let dist = if info.pair == lastpair && info.pair != 0 { 2 } else { 3 };
                    info.pair.checked_mul(2)?.checked_add(dist)?.checked_sub(1)?
                } else {
                    return None;
                }
            }
            PairingScheme::Adjacent if info.group < 2 => info.pair.checked_mul(2)?.checked_add(info.group)?,
            PairingScheme::Adjacent => return None,
        };
        (page < pages).then_some(page)
    }

    /// Check the pairing over an erase block of `pages` pages and return the largest distance
    /// (in pages) between a page and an earlier page sharing its cells (0: no page shares
    /// cells). `None` when the description is unusable: a group at or above `groups` (or fewer
    /// than 2 groups), a page whose pairing does not map back to it, or a page sharing cells
    /// with a page that is not programmed before it.
    pub fn max_distance(&self, pages: u32) -> Option<u32> {
        if self.groups < 2 || pages == 0 {
            return None;
        }
        let mut dist = 0u32;
        for page in 0..pages {
            let i = self.info(page, pages)?;
            if i.group >= self.groups || self.wunit(i, pages)? != page {
                return None;
            }
            for g in 0..i.group {
                let other = self.wunit(PairInfo { pair: i.pair, group: g }, pages)?;
                if other >= page {
                    return None;
                }
                dist = dist.max(page.saturating_sub(other));
            }
        }
        Some(dist)
    }

    /// The earliest page programmed before `page` that shares its cells (its lower page), if
    /// any: a cut while `page` is programmed can destroy it. Pages of a checked pairing only.
    pub fn lowest_shared(&self, page: u32, pages: u32) -> Option<u32> {
        let i = self.info(page, pages)?;
        (0..i.group).filter_map(|g| self.wunit(PairInfo { pair: i.pair, group: g }, pages)).min()
    }
}

/// Result of a successful read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadStatus {
    /// Data read without correction.
    Clean,
    /// Data correct, but ECC had to correct bit-flips (MTD's -EUCLEAN): the segment should be scrubbed.
    Corrected,
}

/// Errors reported by a `Flash` implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlashError {
    /// The read could not be corrected (MTD's -EBADMSG): the data in range is lost.
    Uncorrectable,
    /// A program operation failed: the segment must be retired and its data relocated.
    WriteFailed,
    /// An erase failed: the segment must be retired.
    EraseFailed,
    /// The request violates the medium's rules (misaligned, out of range, rewrite of a NAND page,
    /// out-of-order programming). This is a bug in the caller, reported instead of corrupting data.
    InvalidRequest,
    /// Any other I/O error from the device.
    Io,
    /// Simulator only: power was cut during or before this operation. Nothing after it happens.
    PowerCut,
}

/// The medium under a ferrofs filesystem.
pub trait Flash {
    /// The geometry of the medium.
    fn geometry(&self) -> Geometry;

    /// MLC NAND (`FlashKind::MlcNand`): how the pages of an erase block (a segment) pair up.
    /// `None` (the default): unknown, and the engine refuses MLC. Ignored on other kinds.
    fn pairing(&self) -> Option<Pairing> {
        None
    }

    /// Read `buf.len()` bytes at `offset` inside segment `seg`. Any alignment is allowed.
    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> Result<ReadStatus, FlashError>;

    /// Program `buf` at `offset` inside segment `seg`. `offset` and `buf.len()` are multiples of
    /// `write_unit`. On NAND the range must be erased and lie after everything already programmed
    /// in the segment. On a block device the write must follow the previous write in the segment.
    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError>;

    /// Program `buf` like [`Flash::write`], possibly later (write-behind): the call may return
    /// once the bytes are queued, and the program is made in the order of the calls, before any
    /// later `write`, `erase`, `mark_bad` or `flush` (those wait for the queue first, a power
    /// cut loses a suffix of it, as if it came earlier). Until the program is made, `read`
    /// returns the queued bytes. A failed program is not returned here but kept with every
    /// later queued program of its segment (none of them is made) for
    /// [`Flash::failed_behind`]; a `write` or `write_behind` to that segment fails with
    /// `WriteFailed` (nothing queued) until [`Flash::forget_failed`]. An error that says nothing about the medium (`Io`) is returned
    /// by the next call. The default programs at once.
    fn write_behind(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        self.write(seg, offset, buf)
    }

    /// Wait until every write-behind program is made or has failed (an `Io` error of one is
    /// returned).
    fn settle(&mut self) -> Result<(), FlashError> {
        Ok(())
    }

    /// The oldest write-behind program that failed, if any: its segment, and the range of that
    /// segment (offset, length) its queued programs covered from it on, which `read` returns
    /// until [`Flash::forget_failed`].
    fn failed_behind(&mut self) -> Option<(u32, u32, u32)> {
        None
    }

    /// Drop the failed write-behind programs of segment `seg` (the caller took their bytes).
    fn forget_failed(&mut self, _seg: u32) {}

    /// Erase segment `seg` (NAND/NOR erase; discard on a block device).
    fn erase(&mut self, seg: u32) -> Result<(), FlashError>;

    /// Whether segment `seg` is marked bad. Always false on a block device.
    fn is_bad(&mut self, seg: u32) -> Result<bool, FlashError>;

    /// Mark segment `seg` bad, so that it is never used again.
    fn mark_bad(&mut self, seg: u32) -> Result<(), FlashError>;

    /// Make every completed write durable (a cache flush on a block device; a no-op on raw flash).
    fn flush(&mut self) -> Result<(), FlashError>;

    /// Segment `seg` was freed: nothing in it will be read again (the checkpoint that freed it
    /// is durable, and the one before it did not refer to it either). A block device may
    /// discard it when convenient (tell its FTL the data is garbage, so the FTL stops copying
    /// it); a hint nothing relies on, with no result. The default does nothing: raw flash is
    /// erased when a segment is reused.
    fn discard_hint(&mut self, _seg: u32) {}
}
