// SPDX-License-Identifier: GPL-2.0

//! The MTD backend: the engine's `Flash` over a raw NAND/NOR `struct mtd_info`.

use crate::engine::flash::{Flash, FlashError, FlashKind, Geometry, PairInfo, Pairing, PairingScheme, ReadStatus};
use crate::kfs::{MtdDev, MTD_MLCNANDFLASH, MTD_NANDFLASH};
use kernel::bindings;
use kernel::prelude::*;
/// The engine writes in units of at least this many bytes, even on bit-programmable media.
const MIN_WRITE_UNIT: u32 = 512;

/// An MTD device held by a mounted superblock (`sb->s_mtd`, released by `kill_mtd_super`).
pub(crate) struct MtdFlash {
    mtd: MtdDev,
    geo: Geometry,
    /// MTD index, for messages.
    pub(crate) index: i32,
    /// The device accepts writes and erases (`MTD_WRITEABLE`): false for a partition marked
    /// read-only or one that does not start and end on erase-block boundaries.
    writeable: bool,
    /// MLC NAND: the page pairing, when it is one the engine knows (see [`identify_pairing`]).
    pairing: Option<Pairing>,
    /// Time spent in MTD calls since the mount (`MtdTimes`, debugfs `mtd_*`).
    pub(crate) times: MtdTimes,
}

/// Requests to the MTD device and the time spent in them (ns, `ktime_get`), since the mount:
/// on nandsim with timing, the busy-waits of its page reads and programs are in here.
#[derive(Clone, Copy, Default)]
pub(crate) struct MtdTimes {
    pub(crate) reads: u64,
    pub(crate) read_ns: u64,
    pub(crate) writes: u64,
    pub(crate) write_ns: u64,
    pub(crate) erase_ns: u64,
}

impl MtdFlash {
    /// Describe `mtd` for the engine.
    pub(crate) fn new(mtd: MtdDev) -> Result<Self> {
        let (size, erase, write, ty, index, writeable) = (mtd.size(), mtd.erasesize(), mtd.writesize(), mtd.kind(), mtd.index(), mtd.writeable());
        let kind = match ty {
            MTD_NANDFLASH => FlashKind::Nand,
            // the engine pads for paired pages when it knows the pairing (`FlashKind::MlcNand`)
            MTD_MLCNANDFLASH => FlashKind::MlcNand,
            // NOR, and the bit-programmable RAM/ROM devices (block2mtd: MTD_RAM)
            _ => FlashKind::Nor,
        };
        let write_unit = write.max(MIN_WRITE_UNIT);
        if erase == 0 || erase % write_unit != 0 {
            pr_err!("mtd{}: unsupported geometry: erase size {} is not a multiple of {}\n", index, erase, write_unit);
            return Err(EINVAL);
        }
        let count = size / u64::from(erase);
        let segment_count = u32::try_from(count).map_err(|_| EFBIG)?;
        let pairing = if kind == FlashKind::MlcNand && write_unit == write { identify_pairing(&mtd, erase / write) } else { None };
        if kind == FlashKind::MlcNand && pairing.is_none() {
            pr_warn!("mtd{}: MLC NAND with {} pages sharing a cell in a pairing scheme ferrofs does not know (dist3, adjacent pairs)\n", index, mtd.pairing_groups());
        }
        Ok(MtdFlash {
            mtd,
            geo: Geometry { kind, segment_size: erase, segment_count, write_unit, preferred_write: write_unit },
            index,
            writeable,
            pairing,
            times: MtdTimes::default(),
        })
    }

    /// Whether the MTD device accepts writes (`MTD_WRITEABLE` set). On one that does not, every
    /// program and erase would fail with -EROFS, so `KFlash::check_writeable` refuses a
    /// read-write mount with `EROFS` (busybox and util-linux `mount` then retry read-only).
    pub(crate) fn writeable(&self) -> bool {
        self.writeable
    }

    fn addr(&self, seg: u32, offset: u32, len: usize) -> Result<i64, FlashError> {
        let at = self.geo.byte_addr(seg, offset, len).ok_or(FlashError::InvalidRequest)?;
        i64::try_from(at).map_err(|_| FlashError::InvalidRequest)
    }
}

/// The pairing scheme of an MLC device of `pages` pages per erase block, if it is one the engine
/// knows: two pages per cell, and `mtd_wunit_to_pairing_info` agrees with the scheme on every
/// page it answers for. Linux 6.12 answers only for write units below `pages / groups` (it
/// compares the write unit with the number of pairs), which tells dist3 and adjacent pairs
/// apart (they differ from page 2 on); a driver whose scheme is neither is not recognised.
fn identify_pairing(mtd: &MtdDev, pages: u32) -> Option<Pairing> {
    let groups = mtd.pairing_groups();
    if groups != 2 || pages < 8 {
        return None;
    }
    let asked = pages / 2;
    [PairingScheme::Dist3, PairingScheme::Adjacent].into_iter().map(|scheme| Pairing { groups: 2, scheme }).find(|p| {
        p.max_distance(pages).is_some()
            && (0..asked).all(|w| {
                let Ok(wi) = i32::try_from(w) else { return false };
                match mtd.wunit_pairing(wi) {
                    Ok((pair, group)) => match (u32::try_from(pair), u32::try_from(group)) {
                        (Ok(pair), Ok(group)) => p.info(w, pages) == Some(PairInfo { pair, group }),
                        _ => false,
                    },
                    Err(_) => false,
                }
            })
    })
}

/// What an MTD program or erase error says about the block. Only -EIO (the chip reported a
/// failed program or erase; also what the NAND core returns for an erase of a bad block) and
/// -EBADMSG are media errors, which retire the block (`media`). Everything else (-ETIMEDOUT,
/// -ENOMEM, -EINTR, -EROFS from a read-only device, a short write with no error) says nothing
/// about the block: `Io`, which fails the operation and stops the engine writing, retiring
/// nothing.
fn media_error(ret: i32, media: FlashError) -> FlashError {
    if ret == -(bindings::EIO as i32) || ret == -(bindings::EBADMSG as i32) {
        media
    } else {
        FlashError::Io
    }
}

impl Flash for MtdFlash {
    fn geometry(&self) -> Geometry {
        self.geo
    }

    fn pairing(&self) -> Option<Pairing> {
        self.pairing
    }

    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> Result<ReadStatus, FlashError> {
        let at = self.addr(seg, offset, buf.len())?;
        let t0 = crate::super_::now_ns();
        let (ret, retlen) = self.mtd.read(at, buf);
        self.times.reads = self.times.reads.saturating_add(1);
        self.times.read_ns = self.times.read_ns.saturating_add(crate::super_::now_ns().saturating_sub(t0));
        match -ret {
            0 if retlen == buf.len() => Ok(ReadStatus::Clean),
            c if c == bindings::EUCLEAN as i32 && retlen == buf.len() => Ok(ReadStatus::Corrected),
            c if c == bindings::EBADMSG as i32 => {
                pr_warn!("mtd{}: uncorrectable ECC error reading {} bytes at segment {} offset {}\n", self.index, buf.len(), seg, offset);
                Err(FlashError::Uncorrectable)
            }
            // block2mtd waits killably for its page cache: a fatal signal (the reader is being
            // killed, e.g. by the shutdown scripts) says nothing about the flash: no warning
            c if c == bindings::EINTR as i32 => Err(FlashError::Io),
            _ => {
                pr_warn!("mtd{}: read failed ({}) at segment {} offset {}\n", self.index, ret, seg, offset);
                Err(FlashError::Io)
            }
        }
    }

    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        let at = self.addr(seg, offset, buf.len())?;
        let wu = self.geo.write_unit;
        if offset.checked_rem(wu) != Some(0) || (buf.len() as u64).checked_rem(u64::from(wu)) != Some(0) {
            return Err(FlashError::InvalidRequest);
        }
        let t0 = crate::super_::now_ns();
        let (ret, retlen) = self.mtd.write(at, buf);
        self.times.writes = self.times.writes.saturating_add(1);
        self.times.write_ns = self.times.write_ns.saturating_add(crate::super_::now_ns().saturating_sub(t0));
        if ret == 0 && retlen == buf.len() {
            return Ok(());
        }
        let e = media_error(ret, FlashError::WriteFailed);
        if e == FlashError::WriteFailed {
            pr_warn!("mtd{}: program failed ({}) at segment {} offset {}: relocating its data and retiring the block\n", self.index, ret, seg, offset);
        } else {
            pr_err!("mtd{}: write error ({}, {} of {} bytes) at segment {} offset {}: not a media error; ferrofs stops writing (read-only until remounted)\n", self.index, ret, retlen, buf.len(), seg, offset);
        }
        Err(e)
    }

    fn erase(&mut self, seg: u32) -> Result<(), FlashError> {
        let at = self.addr(seg, 0, self.geo.segment_size as usize)?;
        let t0 = crate::super_::now_ns();
        let ret = self.mtd.erase(at, u64::from(self.geo.segment_size));
        self.times.erase_ns = self.times.erase_ns.saturating_add(crate::super_::now_ns().saturating_sub(t0));
        if ret == 0 {
            return Ok(());
        }
        let e = media_error(ret, FlashError::EraseFailed);
        if e == FlashError::EraseFailed {
            pr_warn!("mtd{}: erase failed ({}) for segment {}: retiring the block\n", self.index, ret, seg);
        } else {
            pr_err!("mtd{}: erase error ({}) for segment {}: not a media error; ferrofs stops writing (read-only until remounted)\n", self.index, ret, seg);
        }
        Err(e)
    }

    fn is_bad(&mut self, seg: u32) -> Result<bool, FlashError> {
        if !self.mtd.can_have_bb() {
            return Ok(false);
        }
        let at = self.addr(seg, 0, 0)?;
        match self.mtd.block_isbad(at) {
            0 => Ok(false),
            r if r > 0 => Ok(true),
            _ => Err(FlashError::Io),
        }
    }

    fn mark_bad(&mut self, seg: u32) -> Result<(), FlashError> {
        if !self.mtd.can_have_bb() {
            return Ok(());
        }
        let at = self.addr(seg, 0, 0)?;
        pr_warn!("mtd{}: retiring segment {} as a bad block\n", self.index, seg);
        match self.mtd.block_markbad(at) {
            0 => Ok(()),
            _ => Err(FlashError::Io),
        }
    }

    fn flush(&mut self) -> Result<(), FlashError> {
        self.mtd.sync();
        Ok(())
    }
}
