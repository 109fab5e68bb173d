//! [`BlockDevice`]: the `Flash` interface over a block device (SD, eMMC, USB, CF...) or a
//! regular file, for the FTL-aware backend.

use std::fs::OpenOptions;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use ferrofs_engine::flash::{Flash, FlashError, Geometry, ReadStatus};

use crate::block::{block_geometry, DEFAULT_SEGMENT_SIZE, DEFAULT_WRITE_UNIT};
use crate::counters::Counters;
use crate::device::file::{EraseStyle, FileMedium};
use crate::device::ioctl;
use crate::error::{Error, Result};

/// How to open a [`BlockDevice`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockDeviceOptions {
    /// Write unit; 0 = the larger of 4096 and the device's logical sector size.
    pub write_unit: u32,
    /// Segment (allocation unit) size. Default 4 MiB.
    pub segment_size: u32,
    /// Preferred write size; 0 = 4 write units.
    pub preferred_write: u32,
    /// Open read-only (for dump and check tools).
    pub read_only: bool,
    /// Reject (true, default) or allow writes that do not follow the previous write of their segment.
    pub enforce_sequential: bool,
}

impl Default for BlockDeviceOptions {
    fn default() -> Self {
        Self {
            write_unit: 0,
            segment_size: DEFAULT_SEGMENT_SIZE,
            preferred_write: 0,
            read_only: false,
            enforce_sequential: true,
        }
    }
}

/// A `Flash` of kind `FlashKind::Block` over a block device or a regular file.
///
/// The device is cut into `size / segment_size` segments (a tail smaller than a segment is
/// unused). Reads and writes use `pread`/`pwrite`; writes must be whole aligned write units,
/// sequential inside a segment (the first write of a segment after opening may start anywhere).
/// `erase` discards: `BLKDISCARD` on a block device, a punched hole in a regular file; where
/// that is not supported the old data simply stays (allowed for this kind). `flush` is
/// `fdatasync`. `is_bad` is always false; `mark_bad` is only counted.
#[derive(Debug)]
pub struct BlockDevice {
    inner: FileMedium,
    size: u64,
    is_block_device: bool,
}

impl BlockDevice {
    /// Opens `path` with default options (4 KiB write unit, 4 MiB segments, read-write).
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, BlockDeviceOptions::default())
    }

    /// Opens `path` with the given options.
    pub fn open_with(path: &Path, opts: BlockDeviceOptions) -> Result<Self> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, "looking up device", e))?;
        let ft = meta.file_type();
        let is_block_device = ft.is_block_device();
        if !is_block_device && !ft.is_file() {
            let what = if ft.is_char_device() {
                "a character device (an MTD? use the MTD backend)"
            } else if ft.is_dir() {
                "a directory"
            } else {
                "neither a block device nor a regular file"
            };
            return Err(Error::WrongDeviceKind(format!("{} is {what}", path.display())));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(!opts.read_only)
            .open(path)
            .map_err(|e| Error::io(path, "opening device", e))?;
        let (size, sector) = if is_block_device {
            let size = ioctl::blk_get_size64(&file).map_err(|e| Error::io(path, "BLKGETSIZE64", e))?;
            let sector = ioctl::blk_ssz_get(&file).unwrap_or(512);
            (size, sector)
        } else {
            (meta.len(), 512)
        };
        let write_unit = if opts.write_unit != 0 { opts.write_unit } else { DEFAULT_WRITE_UNIT.max(sector) };
        if write_unit % sector != 0 {
            return Err(Error::InvalidGeometry(format!(
                "write unit {write_unit} is not a multiple of the {sector}-byte logical sector"
            )));
        }
        if opts.segment_size == 0 || size < u64::from(opts.segment_size) {
            return Err(Error::InvalidGeometry(format!(
                "{} has {size} bytes, less than one {}-byte segment",
                path.display(),
                opts.segment_size
            )));
        }
        let count = u32::try_from(size / u64::from(opts.segment_size))
            .map_err(|_| Error::InvalidGeometry("too many segments".into()))?;
        let geo = block_geometry(write_unit, opts.segment_size, count, opts.preferred_write)?;
        let style = if is_block_device { EraseStyle::BlkDiscard } else { EraseStyle::PunchHole };
        let mut inner = FileMedium::new(file, path, geo, style);
        inner.set_enforce_sequential(opts.enforce_sequential);
        Ok(Self { inner, size, is_block_device })
    }

    /// Size of the device or file in bytes (the part beyond the last whole segment is unused).
    pub fn size_bytes(&self) -> u64 {
        self.size
    }

    /// Whether `path` was a block device (false: a regular file).
    pub fn is_block_device(&self) -> bool {
        self.is_block_device
    }

    /// The path opened.
    pub fn path(&self) -> &Path {
        self.inner.path()
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> Counters {
        self.inner.counters.clone()
    }
}

impl Flash for BlockDevice {
    fn geometry(&self) -> Geometry {
        self.inner.geo
    }
    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> std::result::Result<ReadStatus, FlashError> {
        self.inner.read(seg, offset, buf)
    }
    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> std::result::Result<(), FlashError> {
        self.inner.write(seg, offset, buf)
    }
    fn erase(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        self.inner.erase(seg)
    }
    fn is_bad(&mut self, seg: u32) -> std::result::Result<bool, FlashError> {
        self.inner.is_bad(seg)
    }
    fn mark_bad(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        self.inner.mark_bad(seg)
    }
    fn flush(&mut self) -> std::result::Result<(), FlashError> {
        self.inner.flush()
    }
}
