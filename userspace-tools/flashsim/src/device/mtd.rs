//! [`MtdDevice`]: the `Flash` interface over a Linux MTD character device (`/dev/mtdN`).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};

use ferrofs_engine::flash::{Flash, FlashError, FlashKind, Geometry, Pairing, ReadStatus};

use crate::counters::{Counters, Reject};
use crate::device::flash_error_from_io;
use crate::device::ioctl;
use crate::error::{Error, Result};
use crate::power::OpKind;

/// `MTD_ABSENT` from `<mtd/mtd-abi.h>`.
pub const MTD_ABSENT: u8 = 0;
/// `MTD_RAM`.
pub const MTD_RAM: u8 = 1;
/// `MTD_ROM`.
pub const MTD_ROM: u8 = 2;
/// `MTD_NORFLASH`.
pub const MTD_NORFLASH: u8 = 3;
/// `MTD_NANDFLASH`.
pub const MTD_NANDFLASH: u8 = 4;
/// `MTD_DATAFLASH`.
pub const MTD_DATAFLASH: u8 = 6;
/// `MTD_UBIVOLUME`.
pub const MTD_UBIVOLUME: u8 = 7;
/// `MTD_MLCNANDFLASH`.
pub const MTD_MLCNANDFLASH: u8 = 8;
/// `MTD_WRITEABLE` flag.
pub const MTD_WRITEABLE: u32 = 0x400;
/// The smallest write unit ferrofs uses on bit-programmable MTDs (NOR, RAM, block2mtd); the
/// kernel module uses the same.
pub const MIN_WRITE_UNIT: u32 = 512;
/// `MTD_NO_ERASE` flag.
pub const MTD_NO_ERASE: u32 = 0x1000;

/// What `MEMGETINFO` says about an MTD device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MtdInfo {
    /// `MTD_NANDFLASH`, `MTD_NORFLASH`...
    pub mtd_type: u8,
    /// `MTD_WRITEABLE`, `MTD_NO_ERASE`...
    pub flags: u32,
    /// Total size in bytes.
    pub size: u32,
    /// Erase block size in bytes.
    pub erase_size: u32,
    /// Minimal writable unit (NAND page) in bytes.
    pub write_size: u32,
    /// OOB bytes per page.
    pub oob_size: u32,
}

impl MtdInfo {
    /// The ferrofs geometry of this MTD, or a clear error when ferrofs cannot use it
    /// (absent, ROM or UBI volume; read-only while `writable` is asked; bad sizes).
    /// `MTD_NO_ERASE` (RAM-like devices such as block2mtd and mtdram) means that erasing is not
    /// needed, not that it is impossible: such devices are used like NOR. On bit-programmable
    /// media (NOR, RAM) the write unit is at least 512 bytes, as in the kernel module.
    pub fn geometry(&self, writable: bool) -> Result<Geometry> {
        let kind = match self.mtd_type {
            MTD_NANDFLASH => FlashKind::Nand,
            // its page pairing is not reported to userspace: see `MtdDevice::set_pairing`
            MTD_MLCNANDFLASH => FlashKind::MlcNand,
            MTD_NORFLASH | MTD_DATAFLASH | MTD_RAM => FlashKind::Nor,
            MTD_ABSENT => return Err(Error::WrongDeviceKind("the MTD device is absent".into())),
            MTD_ROM => return Err(Error::WrongDeviceKind("the MTD device is a ROM".into())),
            MTD_UBIVOLUME => {
                return Err(Error::WrongDeviceKind("the MTD device is an emulated UBI volume, not raw flash".into()))
            }
            t => return Err(Error::WrongDeviceKind(format!("unknown MTD type {t}"))),
        };
        if writable && self.flags & MTD_WRITEABLE == 0 {
            return Err(Error::WrongDeviceKind("the MTD device is read-only".into()));
        }
        if self.erase_size == 0 || self.write_size == 0 || self.size == 0 {
            return Err(Error::InvalidGeometry(format!(
                "MTD size {}, erase size {}, write size {}: all must be non-zero",
                self.size, self.erase_size, self.write_size
            )));
        }
        if !self.erase_size.is_multiple_of(self.write_size) || !self.size.is_multiple_of(self.erase_size) {
            return Err(Error::InvalidGeometry(format!(
                "MTD size {}, erase size {}, write size {}: sizes do not nest",
                self.size, self.erase_size, self.write_size
            )));
        }
        Ok(Geometry {
            kind,
            segment_size: self.erase_size,
            segment_count: self.size / self.erase_size,
            write_unit: if kind == FlashKind::Nor { self.write_size.max(MIN_WRITE_UNIT) } else { self.write_size },
            preferred_write: if kind == FlashKind::Nor { self.write_size.max(MIN_WRITE_UNIT) } else { self.write_size },
        })
    }
}

impl From<ioctl::MtdInfoUser> for MtdInfo {
    fn from(u: ioctl::MtdInfoUser) -> Self {
        Self {
            mtd_type: u.type_,
            flags: u.flags,
            size: u.size,
            erase_size: u.erasesize,
            write_size: u.writesize,
            oob_size: u.oobsize,
        }
    }
}

/// A `Flash` over `/dev/mtdN`.
///
/// Reads use `pread`. In normal file mode the MTD character device returns the data even when
/// ECC corrected bit-flips (`-EUCLEAN`) or failed (`-EBADMSG`), so, like `nanddump`, the backend
/// compares the device's `ECCGETSTATS` counters before and after each read to report
/// `ReadStatus::Corrected` or `FlashError::Uncorrectable`; a read that fails with `EUCLEAN` or
/// `EBADMSG` itself is mapped the same way. Writes use `pwrite` (whole pages), erases
/// `MEMERASE`, bad blocks `MEMGETBADBLOCK`/`MEMSETBADBLOCK`; `flush` is a no-op.
/// The ECC counters are device-wide, so concurrent users of the same MTD can blur the status.
#[derive(Debug)]
pub struct MtdDevice {
    file: File,
    path: PathBuf,
    info: MtdInfo,
    geo: Geometry,
    counters: Counters,
    pairing: Option<Pairing>,
}

impl MtdDevice {
    /// Opens an MTD character device read-write.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, true)
    }

    /// Opens an MTD character device read-only (for dump and check tools).
    pub fn open_read_only(path: &Path) -> Result<Self> {
        Self::open_with(path, false)
    }

    fn open_with(path: &Path, writable: bool) -> Result<Self> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, "looking up MTD device", e))?;
        if !meta.file_type().is_char_device() {
            let what = if meta.file_type().is_block_device() {
                "a block device (use /dev/mtdN, not /dev/mtdblockN, or the block backend)"
            } else if meta.is_dir() {
                "a directory"
            } else {
                "not a character device"
            };
            return Err(Error::WrongDeviceKind(format!("{} is {what}", path.display())));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| Error::io(path, "opening MTD device", e))?;
        let info: MtdInfo = match ioctl::mem_get_info(&file) {
            Ok(u) => u.into(),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTTY) | Some(libc::EINVAL)) => {
                return Err(Error::WrongDeviceKind(format!("{} is not an MTD character device", path.display())))
            }
            Err(e) => return Err(Error::io(path, "MEMGETINFO", e)),
        };
        let geo = info.geometry(writable)?;
        Ok(Self { file, path: path.to_path_buf(), info, geo, counters: Counters::new(geo.segment_count), pairing: None })
    }

    /// MLC NAND: the page pairing of the chip (its driver's scheme), which the MTD ioctls do not
    /// report; the engine refuses MLC without one. Ignored on other kinds.
    pub fn set_pairing(&mut self, pairing: Option<Pairing>) {
        self.pairing = pairing.filter(|_| self.geo.kind == FlashKind::MlcNand);
    }

    /// What `MEMGETINFO` reported.
    pub fn info(&self) -> MtdInfo {
        self.info
    }

    /// The device path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> Counters {
        self.counters.clone()
    }

    fn abs(&self, seg: u32, offset: u32) -> u64 {
        u64::from(seg) * u64::from(self.geo.segment_size) + u64::from(offset)
    }

    fn check_range(&mut self, seg: u32, offset: u32, len: usize) -> std::result::Result<(), FlashError> {
        if self.geo.byte_addr(seg, offset, len).is_none() {
            self.counters.reject(Reject::OutOfRange);
            return Err(FlashError::InvalidRequest);
        }
        Ok(())
    }
}

/// Classifies a read from the ECC statistics taken around it.
pub(crate) fn read_status_from_ecc(
    before: Option<ioctl::MtdEccStats>,
    after: Option<ioctl::MtdEccStats>,
) -> std::result::Result<ReadStatus, FlashError> {
    match (before, after) {
        (Some(b), Some(a)) if a.failed != b.failed => Err(FlashError::Uncorrectable),
        (Some(b), Some(a)) if a.corrected != b.corrected => Ok(ReadStatus::Corrected),
        _ => Ok(ReadStatus::Clean),
    }
}

impl Flash for MtdDevice {
    fn geometry(&self) -> Geometry {
        self.geo
    }

    fn pairing(&self) -> Option<Pairing> {
        self.pairing
    }

    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> std::result::Result<ReadStatus, FlashError> {
        self.check_range(seg, offset, buf.len())?;
        self.counters.reads += 1;
        let before = ioctl::ecc_get_stats(&self.file).ok();
        let mut done = 0usize;
        let mut status = ReadStatus::Clean;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], self.abs(seg, offset) + done as u64) {
                Ok(0) => return Err(FlashError::Io),
                Ok(n) => done += n,
                Err(e) if e.raw_os_error() == Some(libc::EUCLEAN) => {
                    // Some drivers report the correction through the error code; the data is
                    // still in the buffer only if the whole read completed, so read again.
                    status = ReadStatus::Corrected;
                    let n = self
                        .file
                        .read_at(&mut buf[done..], self.abs(seg, offset) + done as u64)
                        .map_err(|e| flash_error_from_io(&e, OpKind::Read))?;
                    if n == 0 {
                        return Err(FlashError::Io);
                    }
                    done += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let fe = flash_error_from_io(&e, OpKind::Read);
                    if fe == FlashError::Uncorrectable {
                        self.counters.uncorrectable_reads += 1;
                    }
                    return Err(fe);
                }
            }
        }
        let after = ioctl::ecc_get_stats(&self.file).ok();
        match read_status_from_ecc(before, after) {
            Err(e) => {
                self.counters.uncorrectable_reads += 1;
                Err(e)
            }
            Ok(s) => {
                self.counters.bytes_read += buf.len() as u64;
                if s == ReadStatus::Corrected || status == ReadStatus::Corrected {
                    self.counters.corrected_reads += 1;
                    Ok(ReadStatus::Corrected)
                } else {
                    Ok(ReadStatus::Clean)
                }
            }
        }
    }

    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> std::result::Result<(), FlashError> {
        self.check_range(seg, offset, buf.len())?;
        let unit = self.geo.write_unit;
        if !offset.is_multiple_of(unit) || !buf.len().is_multiple_of(unit as usize) {
            self.counters.reject(Reject::Misaligned);
            return Err(FlashError::InvalidRequest);
        }
        self.counters.writes += 1;
        self.file.write_all_at(buf, self.abs(seg, offset)).map_err(|e| {
            let fe = flash_error_from_io(&e, OpKind::Write);
            if fe == FlashError::WriteFailed {
                self.counters.write_failures += 1;
            }
            fe
        })?;
        self.counters.bytes_programmed += buf.len() as u64;
        self.counters.pages_programmed += buf.len() as u64 / u64::from(unit);
        Ok(())
    }

    fn erase(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        self.check_range(seg, 0, 0)?;
        let start = u32::try_from(self.abs(seg, 0)).map_err(|_| FlashError::InvalidRequest)?;
        ioctl::mem_erase(&self.file, start, self.geo.segment_size).map_err(|e| {
            let fe = flash_error_from_io(&e, OpKind::Erase);
            if fe == FlashError::EraseFailed {
                self.counters.erase_failures += 1;
            }
            fe
        })?;
        self.counters.note_erase(seg);
        Ok(())
    }

    fn is_bad(&mut self, seg: u32) -> std::result::Result<bool, FlashError> {
        self.check_range(seg, 0, 0)?;
        let off = i64::try_from(self.abs(seg, 0)).map_err(|_| FlashError::InvalidRequest)?;
        match ioctl::mem_get_bad_block(&self.file, off) {
            Ok(bad) => Ok(bad),
            // NOR and RAM devices have no bad blocks.
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(false),
            Err(e) => Err(flash_error_from_io(&e, OpKind::MarkBad)),
        }
    }

    fn mark_bad(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        self.check_range(seg, 0, 0)?;
        let off = i64::try_from(self.abs(seg, 0)).map_err(|_| FlashError::InvalidRequest)?;
        ioctl::mem_set_bad_block(&self.file, off).map_err(|e| flash_error_from_io(&e, OpKind::MarkBad))?;
        self.counters.marked_bad += 1;
        Ok(())
    }

    fn flush(&mut self) -> std::result::Result<(), FlashError> {
        self.counters.flushes += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::ioctl::MtdEccStats;

    fn nand_info() -> MtdInfo {
        MtdInfo {
            mtd_type: MTD_NANDFLASH,
            flags: MTD_WRITEABLE,
            size: 256 << 20,
            erase_size: 128 << 10,
            write_size: 2048,
            oob_size: 64,
        }
    }

    #[test]
    fn nand_geometry_parses() {
        let g = nand_info().geometry(true).unwrap();
        assert_eq!(g.kind, FlashKind::Nand);
        assert_eq!(g.segment_size, 128 << 10);
        assert_eq!(g.segment_count, 2048);
        assert_eq!(g.write_unit, 2048);
        let nor = MtdInfo { mtd_type: MTD_NORFLASH, write_size: 1, ..nand_info() };
        assert_eq!(nor.geometry(true).unwrap().kind, FlashKind::Nor);
        let mlc = MtdInfo { mtd_type: MTD_MLCNANDFLASH, ..nand_info() };
        assert_eq!(mlc.geometry(true).unwrap().kind, FlashKind::MlcNand);
    }

    #[test]
    fn unusable_mtds_are_refused() {
        let kinds = [MTD_ABSENT, MTD_ROM, MTD_UBIVOLUME, 99];
        for t in kinds {
            let r = MtdInfo { mtd_type: t, ..nand_info() }.geometry(false);
            assert!(matches!(r, Err(Error::WrongDeviceKind(_))), "type {t}");
        }
        let ro = MtdInfo { flags: 0, ..nand_info() };
        assert!(matches!(ro.geometry(true), Err(Error::WrongDeviceKind(_))));
        assert!(ro.geometry(false).is_ok());
        // block2mtd and mtdram: RAM type, MTD_NO_ERASE, 1-byte writes: usable, 512-byte units.
        let ram = MtdInfo { mtd_type: MTD_RAM, flags: MTD_WRITEABLE | MTD_NO_ERASE, write_size: 1, ..nand_info() };
        let g = ram.geometry(true).expect("block2mtd-like device");
        assert_eq!((g.kind, g.write_unit), (FlashKind::Nor, 512));
        for bad in [
            MtdInfo { erase_size: 0, ..nand_info() },
            MtdInfo { write_size: 0, ..nand_info() },
            MtdInfo { size: (256 << 20) + 4096, ..nand_info() },
            MtdInfo { write_size: 3000, ..nand_info() },
        ] {
            assert!(matches!(bad.geometry(true), Err(Error::InvalidGeometry(_))), "{bad:?}");
        }
    }

    #[test]
    fn ecc_stats_classify_reads() {
        let s = |c, f| Some(MtdEccStats { corrected: c, failed: f, badblocks: 0, bbtblocks: 0 });
        assert_eq!(read_status_from_ecc(s(1, 0), s(1, 0)), Ok(ReadStatus::Clean));
        assert_eq!(read_status_from_ecc(s(1, 0), s(3, 0)), Ok(ReadStatus::Corrected));
        assert_eq!(read_status_from_ecc(s(1, 0), s(2, 1)), Err(FlashError::Uncorrectable));
        assert_eq!(read_status_from_ecc(None, s(2, 1)), Ok(ReadStatus::Clean));
    }

    #[test]
    fn opening_wrong_paths_gives_clear_errors() {
        let missing = MtdDevice::open(Path::new("/nonexistent/mtd0"));
        assert!(matches!(missing, Err(Error::Io { .. })));
        let dir = MtdDevice::open(&std::env::temp_dir());
        assert!(matches!(dir, Err(Error::WrongDeviceKind(_))));
        let path = std::env::temp_dir().join(format!("ferrofs-mtd-test-{}", std::process::id()));
        std::fs::write(&path, [0u8; 16]).unwrap();
        let file = MtdDevice::open(&path);
        assert!(matches!(file, Err(Error::WrongDeviceKind(_))));
        std::fs::remove_file(&path).unwrap();
        // A character device that is not an MTD.
        if Path::new("/dev/null").exists() {
            let null = MtdDevice::open_read_only(Path::new("/dev/null"));
            assert!(matches!(null, Err(Error::WrongDeviceKind(_))), "{null:?}");
        }
    }
}
