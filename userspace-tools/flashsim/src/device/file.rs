//! A `Flash` over a file descriptor (regular file or block device), shared by `ImageFlash`
//! and `BlockDevice`.

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use ferrofs_engine::flash::{FlashError, FlashKind, Geometry, ReadStatus};

use crate::counters::{Counters, Reject};
use crate::device::flash_error_from_io;
use crate::device::ioctl;
use crate::power::OpKind;

/// How `erase` is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EraseStyle {
    /// Write 0xFF over the segment (raw NAND/NOR image).
    FillOnes,
    /// Punch a hole in a regular file where supported; otherwise leave the stale data.
    PunchHole,
    /// `BLKDISCARD` on a block device where supported; otherwise leave the stale data.
    BlkDiscard,
}

#[derive(Debug)]
pub(crate) struct FileMedium {
    file: File,
    path: PathBuf,
    /// Offset of the medium in the file (the contents of a simulator image follow its header).
    base: u64,
    pub(crate) geo: Geometry,
    /// NAND: next programmable page, `None` = not scanned yet.
    /// Block: next write offset, `None` = unknown (any start accepted).
    wp: Vec<Option<u32>>,
    bad: BTreeSet<u32>,
    style: EraseStyle,
    enforce_sequential: bool,
    pub(crate) counters: Counters,
}

impl FileMedium {
    pub(crate) fn new(file: File, path: &Path, geo: Geometry, style: EraseStyle) -> Self {
        Self::at(file, path, 0, geo, style)
    }

    /// A medium that starts `base` bytes into the file.
    pub(crate) fn at(file: File, path: &Path, base: u64, geo: Geometry, style: EraseStyle) -> Self {
        Self {
            file,
            path: path.to_path_buf(),
            base,
            geo,
            wp: vec![None; geo.segment_count as usize],
            bad: BTreeSet::new(),
            style,
            enforce_sequential: true,
            counters: Counters::new(geo.segment_count),
        }
    }

    pub(crate) fn set_enforce_sequential(&mut self, on: bool) {
        self.enforce_sequential = on;
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn raw(&self) -> bool {
        self.geo.kind != FlashKind::Block
    }

    fn abs(&self, seg: u32, offset: u32) -> u64 {
        self.base + u64::from(seg) * u64::from(self.geo.segment_size) + u64::from(offset)
    }

    /// The file.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Segments marked bad (raw flash).
    pub(crate) fn bad_segments(&self) -> Vec<u32> {
        self.bad.iter().copied().collect()
    }

    /// Declare `seg` bad without counting it (factory bad blocks of a loaded image).
    pub(crate) fn set_bad(&mut self, seg: u32) {
        if self.raw() {
            self.bad.insert(seg);
        }
    }

    fn check_range(&mut self, seg: u32, offset: u32, len: usize) -> Result<(), FlashError> {
        if self.geo.byte_addr(seg, offset, len).is_none() {
            self.counters.reject(Reject::OutOfRange);
            return Err(FlashError::InvalidRequest);
        }
        Ok(())
    }

    /// Fills the whole medium with `byte` (used to create an erased raw image).
    pub(crate) fn fill_all(&mut self, byte: u8) -> io::Result<()> {
        let chunk = vec![byte; 1 << 20];
        let total = self.geo.device_bytes();
        let mut at = 0u64;
        while at < total {
            let n = (total - at).min(chunk.len() as u64) as usize;
            self.file.write_all_at(&chunk[..n], self.base + at)?;
            at += n as u64;
        }
        self.reset_positions();
        Ok(())
    }

    /// Declares every segment freshly erased/discarded (position 0), for a newly created medium.
    pub(crate) fn reset_positions(&mut self) {
        for w in &mut self.wp {
            *w = Some(0);
        }
    }

    /// NAND: the next programmable page of `seg`, scanning the segment on first use.
    fn nand_next_page(&mut self, seg: u32) -> Result<u32, FlashError> {
        if let Some(p) = self.wp[seg as usize] {
            return Ok(p);
        }
        let mut buf = vec![0u8; self.geo.segment_size as usize];
        self.file.read_exact_at(&mut buf, self.abs(seg, 0)).map_err(|e| flash_error_from_io(&e, OpKind::Read))?;
        let unit = self.geo.write_unit as usize;
        let next = buf.chunks(unit).rposition(|p| p.iter().any(|&b| b != 0xFF)).map_or(0, |i| i as u32 + 1);
        self.wp[seg as usize] = Some(next);
        Ok(next)
    }

    pub(crate) fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> Result<ReadStatus, FlashError> {
        self.check_range(seg, offset, buf.len())?;
        self.counters.reads += 1;
        self.file.read_exact_at(buf, self.abs(seg, offset)).map_err(|e| {
            let fe = flash_error_from_io(&e, OpKind::Read);
            if fe == FlashError::Uncorrectable {
                self.counters.uncorrectable_reads += 1;
            }
            fe
        })?;
        self.counters.bytes_read += buf.len() as u64;
        Ok(ReadStatus::Clean)
    }

    pub(crate) fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        self.check_range(seg, offset, buf.len())?;
        let unit = self.geo.write_unit;
        if !offset.is_multiple_of(unit) || !buf.len().is_multiple_of(unit as usize) {
            self.counters.reject(Reject::Misaligned);
            return Err(FlashError::InvalidRequest);
        }
        if buf.is_empty() {
            return Ok(());
        }
        let len = buf.len() as u32;
        if self.raw() {
            if self.bad.contains(&seg) {
                self.counters.reject(Reject::BadBlock);
                return Err(FlashError::InvalidRequest);
            }
            let next = self.nand_next_page(seg)?;
            if offset / unit < next {
                let mut page = vec![0u8; unit as usize];
                let programmed = self.file.read_exact_at(&mut page, self.abs(seg, offset)).is_ok()
                    && page.iter().any(|&b| b != 0xFF);
                self.counters.reject(if programmed { Reject::Rewrite } else { Reject::OutOfOrder });
                return Err(FlashError::InvalidRequest);
            }
        } else if let Some(p) = self.wp[seg as usize] {
            if p != offset && self.enforce_sequential {
                self.counters.reject(Reject::OutOfOrder);
                return Err(FlashError::InvalidRequest);
            }
        }
        self.counters.writes += 1;
        if let Err(e) = self.file.write_all_at(buf, self.abs(seg, offset)) {
            let fe = flash_error_from_io(&e, OpKind::Write);
            if fe == FlashError::WriteFailed {
                self.counters.write_failures += 1;
            }
            // The state of the range is unknown now: rescan (NAND) or accept any start (block).
            self.wp[seg as usize] = None;
            return Err(fe);
        }
        self.counters.bytes_programmed += u64::from(len);
        self.counters.pages_programmed += u64::from(len / unit);
        self.wp[seg as usize] = Some(if self.raw() { (offset + len) / unit } else { offset + len });
        Ok(())
    }

    pub(crate) fn erase(&mut self, seg: u32) -> Result<(), FlashError> {
        self.check_range(seg, 0, 0)?;
        if self.raw() && self.bad.contains(&seg) {
            self.counters.reject(Reject::BadBlock);
            return Err(FlashError::InvalidRequest);
        }
        let start = self.abs(seg, 0);
        let len = u64::from(self.geo.segment_size);
        let res = match self.style {
            EraseStyle::FillOnes => self.file.write_all_at(&vec![0xFF; len as usize], start),
            EraseStyle::PunchHole => tolerate_unsupported(ioctl::punch_hole(&self.file, start, len)),
            EraseStyle::BlkDiscard => tolerate_unsupported(ioctl::blk_discard(&self.file, start, len)),
        };
        if let Err(e) = res {
            let fe = flash_error_from_io(&e, OpKind::Erase);
            if fe == FlashError::EraseFailed {
                self.counters.erase_failures += 1;
            }
            self.wp[seg as usize] = None;
            return Err(fe);
        }
        self.counters.note_erase(seg);
        self.wp[seg as usize] = Some(0);
        Ok(())
    }

    pub(crate) fn is_bad(&mut self, seg: u32) -> Result<bool, FlashError> {
        self.check_range(seg, 0, 0)?;
        Ok(self.raw() && self.bad.contains(&seg))
    }

    pub(crate) fn mark_bad(&mut self, seg: u32) -> Result<(), FlashError> {
        self.check_range(seg, 0, 0)?;
        if self.raw() {
            self.bad.insert(seg);
        }
        self.counters.marked_bad += 1;
        Ok(())
    }

    pub(crate) fn flush(&mut self) -> Result<(), FlashError> {
        self.counters.flushes += 1;
        self.file.sync_data().map_err(|e| flash_error_from_io(&e, OpKind::Flush))
    }
}

/// Discard is a hint: "not supported" leaves stale data, which the engine copes with.
fn tolerate_unsupported(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::ENOTTY)) => Ok(()),
        other => other,
    }
}
