//! Targets of the tools as one [`Flash`]: simulator images, raw images, MTD and block devices.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;

use ferrofs_engine::format::{Superblock, SB_FULL_SIZE};
use ferrofs_flashsim::{
    AnySim, BlockDevice, BlockDeviceOptions, Flash, FlashError, FlashKind, Geometry, ImageFlash, MtdDevice, ReadStatus,
    SimFile,
};

use crate::util::ToolError;

/// Magic of a flash simulator image.
pub const SIM_MAGIC: &[u8; 8] = b"FFSIMIMG";

/// A medium the tools work on.
#[derive(Debug)]
pub enum Dev {
    /// A simulator in memory (tests; saved explicitly with [`Dev::persist`]).
    Sim(AnySim),
    /// A simulator image file, worked on in place (its header updated by [`Dev::persist`]).
    SimFile(SimFile),
    /// A raw NAND/NOR image file (no header, no OOB).
    Raw(ImageFlash),
    /// An MTD character device.
    Mtd(MtdDevice),
    /// A block device, or a regular file used as a raw block image.
    Block(BlockDevice),
}

impl Dev {
    /// The medium as a trait object.
    pub fn flash(&mut self) -> &mut dyn Flash {
        match self {
            Dev::Sim(s) => s,
            Dev::SimFile(s) => s,
            Dev::Raw(s) => s,
            Dev::Mtd(s) => s,
            Dev::Block(s) => s,
        }
    }

    /// What this target is, for messages.
    pub fn describe(&self) -> String {
        let g = self.geometry();
        let what = match self {
            Dev::Sim(AnySim::Nand(_)) => "simulator image (raw flash)",
            Dev::Sim(AnySim::Block(_)) => "simulator image (block device)",
            Dev::SimFile(s) if s.is_block() => "simulator image (block device)",
            Dev::SimFile(_) => "simulator image (raw flash)",
            Dev::Raw(_) => "raw flash image",
            Dev::Mtd(_) => "MTD device",
            Dev::Block(b) => {
                if b.is_block_device() {
                    "block device"
                } else {
                    "raw block image"
                }
            }
        };
        format!(
            "{what}, {:?}, {} segments of {} bytes, write unit {} ({} bytes)",
            g.kind,
            g.segment_count,
            g.segment_size,
            g.write_unit,
            g.device_bytes()
        )
    }

    /// Make the medium's state durable at `path`: save an in-memory simulator (atomically),
    /// write a simulator image's header and sync it, flush anything else.
    pub fn persist(&mut self, path: &Path) -> Result<(), ToolError> {
        match self {
            Dev::Sim(s) => s.save(path).map_err(|e| ToolError::op(format!("cannot save image: {e}"))),
            Dev::SimFile(s) => s.sync_metadata().map_err(|e| ToolError::op(format!("cannot save image: {e}"))),
            other => other.flash().flush().map_err(|e| ToolError::op(format!("{}: flush failed: {e:?}", path.display()))),
        }
    }
}

impl Flash for Dev {
    fn geometry(&self) -> Geometry {
        match self {
            Dev::Sim(s) => s.geometry(),
            Dev::SimFile(s) => s.geometry(),
            Dev::Raw(s) => s.geometry(),
            Dev::Mtd(s) => s.geometry(),
            Dev::Block(s) => s.geometry(),
        }
    }
    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> Result<ReadStatus, FlashError> {
        self.flash().read(seg, offset, buf)
    }
    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        self.flash().write(seg, offset, buf)
    }
    fn erase(&mut self, seg: u32) -> Result<(), FlashError> {
        self.flash().erase(seg)
    }
    fn is_bad(&mut self, seg: u32) -> Result<bool, FlashError> {
        self.flash().is_bad(seg)
    }
    fn mark_bad(&mut self, seg: u32) -> Result<(), FlashError> {
        self.flash().mark_bad(seg)
    }
    fn flush(&mut self) -> Result<(), FlashError> {
        self.flash().flush()
    }
    fn discard_hint(&mut self, seg: u32) {
        self.flash().discard_hint(seg)
    }
}

/// Geometry hints for raw images and block devices whose superblock cannot be found
/// (all optional: the geometry is normally read from the superblock).
#[derive(Debug, Clone, Copy, Default)]
pub struct GeoHints {
    /// The image is a block-device image.
    pub block: bool,
    /// NAND page size (raw flash) or block-device write unit.
    pub unit: Option<u32>,
    /// Erase block size (raw flash) or allocation unit (block device).
    pub segment: Option<u32>,
    /// The page pairing of an MLC NAND MTD device (`--pairing`), which MTD does not report to
    /// userspace: without it the engine refuses MLC.
    pub pairing: Option<ferrofs_engine::Pairing>,
}

/// Look for a ferrofs superblock in a raw file or block device: at offset 0, then at
/// `m * 2^k` for segment sizes 16 KiB..64 MiB (the second copy, or the first when segment 0 is
/// bad). Returns the superblock and the offset it was found at.
pub fn probe_superblock(file: &File, len: u64) -> Option<(Superblock, u64)> {
    let mut buf = [0u8; SB_FULL_SIZE];
    let mut try_at = |off: u64| -> Option<Superblock> {
        if off.checked_add(SB_FULL_SIZE as u64)? > len {
            return None;
        }
        file.read_exact_at(&mut buf, off).ok()?;
        let sb = Superblock::decode(&buf).ok()?;
        if sb.segment_size == 0 || !off.is_multiple_of(u64::from(sb.segment_size)) {
            return None;
        }
        Some(sb)
    };
    if let Some(sb) = try_at(0) {
        return Some((sb, 0));
    }
    for k in 14..=26u32 {
        for m in 1..=4u64 {
            let off = m << k;
            if let Some(sb) = try_at(off) {
                return Some((sb, off));
            }
        }
    }
    None
}

fn sb_geometry(sb: &Superblock) -> Result<Geometry, ToolError> {
    let kind = match sb.kind {
        0 => FlashKind::Nand,
        1 => FlashKind::Nor,
        2 => FlashKind::Block,
        k => return Err(ToolError::op(format!("superblock names an unknown medium kind {k}"))),
    };
    Ok(Geometry {
        kind,
        segment_size: sb.segment_size,
        segment_count: sb.segment_count,
        write_unit: sb.write_unit,
        // the FTL page mkfs recorded (block devices), else the write unit
        preferred_write: if sb.ftl_page != 0 { sb.ftl_page } else { sb.write_unit },
    })
}

/// Open an existing ferrofs medium at `path`, read-only when `read_only`.
///
/// - a character device is an MTD (`/dev/mtdN`), geometry from the device;
/// - a block device uses the block backend, geometry from its superblock (or `hints`);
/// - a regular file starting with `FFSIMIMG` is a simulator image (worked on in place);
/// - any other regular file is a raw image, geometry from its superblock (or `hints`).
///
/// Errors have exit code 8 (operational).
pub fn open_existing(path: &Path, hints: &GeoHints, read_only: bool) -> Result<Dev, ToolError> {
    let meta = std::fs::metadata(path).map_err(|e| ToolError::op(format!("cannot open {}: {e}", path.display())))?;
    let ft = meta.file_type();
    if ft.is_char_device() {
        let r = if read_only { MtdDevice::open_read_only(path) } else { MtdDevice::open(path) };
        let mut d = r.map_err(|e| ToolError::op(format!("cannot open {}: {e}", path.display())))?;
        if d.geometry().kind == FlashKind::MlcNand && hints.pairing.is_none() {
            return Err(ToolError::op(format!(
                "{} is MLC NAND: give its page pairing with --pairing dist3|adjacent (the scheme of its driver)",
                path.display()
            )));
        }
        d.set_pairing(hints.pairing);
        return Ok(Dev::Mtd(d));
    }
    if ft.is_dir() {
        return Err(ToolError::op(format!("{} is a directory, not a ferrofs image or device", path.display())));
    }
    if !ft.is_block_device() && !ft.is_file() {
        return Err(ToolError::op(format!(
            "{} is neither an image file, an MTD character device nor a block device",
            path.display()
        )));
    }
    let mut file = File::open(path).map_err(|e| ToolError::op(format!("cannot open {}: {e}", path.display())))?;
    if ft.is_file() {
        let mut magic = [0u8; 8];
        let n = read_up_to(&mut file, &mut magic);
        if n == 8 && &magic == SIM_MAGIC {
            drop(file);
            return SimFile::open(path, !read_only)
                .map(Dev::SimFile)
                .map_err(|e| ToolError::op(format!("cannot load {}: {e}", path.display())));
        }
    }
    let len = if ft.is_block_device() {
        use std::io::Seek;
        file.seek(std::io::SeekFrom::End(0)).map_err(|e| ToolError::op(format!("{}: {e}", path.display())))?
    } else {
        meta.len()
    };
    let geo = match probe_superblock(&file, len) {
        Some((sb, _)) => {
            let mut g = sb_geometry(&sb)?;
            if let Some(u) = hints.unit {
                g.write_unit = u;
            }
            if let Some(s) = hints.segment {
                g.segment_size = s;
            }
            g
        }
        None => match (hints.unit, hints.segment) {
            (Some(u), Some(s)) => Geometry {
                kind: if hints.block || ft.is_block_device() { FlashKind::Block } else { FlashKind::Nand },
                segment_size: s,
                segment_count: 0,
                write_unit: u,
                preferred_write: u,
            },
            _ => {
                return Err(ToolError::op(format!(
                    "{} is not a ferrofs filesystem: no simulator image header and no valid ferrofs superblock \
                     found (to open a raw image anyway, give its geometry with --unit and --au, plus --block for a block image)",
                    path.display()
                )))
            }
        },
    };
    drop(file);
    if geo.kind == FlashKind::Block {
        let opts = BlockDeviceOptions {
            write_unit: geo.write_unit,
            segment_size: geo.segment_size,
            preferred_write: if geo.preferred_write > geo.write_unit { geo.preferred_write } else { 0 },
            read_only,
            enforce_sequential: true,
        };
        BlockDevice::open_with(path, opts)
            .map(Dev::Block)
            .map_err(|e| ToolError::op(format!("cannot open {}: {e}", path.display())))
    } else {
        let g = ImageFlash::geometry_for_file(path, geo.kind, geo.segment_size, geo.write_unit)
            .map_err(|e| ToolError::op(format!("cannot open {}: {e}", path.display())))?;
        let r = if read_only { ImageFlash::open_read_only(path, g) } else { ImageFlash::open(path, g) };
        r.map(Dev::Raw).map_err(|e| ToolError::op(format!("cannot open {}: {e}", path.display())))
    }
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match f.read(buf.get_mut(n..).unwrap_or(&mut [])) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    n
}

/// What kind of path a target is, for mkfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// Does not exist yet.
    Missing,
    /// A regular file.
    File,
    /// A character device (MTD).
    CharDev,
    /// A block device.
    BlockDev,
    /// A directory.
    Dir,
    /// Anything else (fifo, socket).
    Other,
}

/// Classify `path` (following symlinks).
pub fn path_kind(path: &Path) -> PathKind {
    match std::fs::metadata(path) {
        Err(_) => PathKind::Missing,
        Ok(m) => {
            let ft = m.file_type();
            if ft.is_file() {
                PathKind::File
            } else if ft.is_dir() {
                PathKind::Dir
            } else if ft.is_char_device() {
                PathKind::CharDev
            } else if ft.is_block_device() {
                PathKind::BlockDev
            } else {
                PathKind::Other
            }
        }
    }
}

/// Where `path` (a block or MTD device) is mounted, from `/proc/self/mounts`. MTD devices are
/// also matched by the names `mtdN` and `mtd:NAME` that `get_tree_mtd` accepts.
pub fn mounted_at(path: &Path) -> Option<String> {
    let canon = std::fs::canonicalize(path).ok()?;
    let mut names = vec![canon.to_string_lossy().into_owned()];
    if let Some(base) = canon.file_name().map(|b| b.to_string_lossy().into_owned()) {
        if let Some(n) = base.strip_prefix("mtd").filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
            names.push(format!("mtd{n}"));
            if let Ok(label) = std::fs::read_to_string(format!("/sys/class/mtd/mtd{n}/name")) {
                names.push(format!("mtd:{}", label.trim()));
            }
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    for line in mounts.lines() {
        let mut it = line.split_whitespace();
        let (Some(src), Some(dir)) = (it.next(), it.next()) else { continue };
        let src_canon = std::fs::canonicalize(src).map(|p| p.to_string_lossy().into_owned()).unwrap_or_else(|_| src.to_string());
        if names.iter().any(|n| *n == src || *n == src_canon) {
            return Some(dir.replace("\\040", " "));
        }
    }
    None
}
