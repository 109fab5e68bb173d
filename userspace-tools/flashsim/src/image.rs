//! Simulator image files, and [`ImageFlash`] over plain raw images.
//!
//! # Simulator image format, version 1
//!
//! A simulator's state ([`NandSim`] or [`BlockSim`]) is saved as a header, a metadata area and
//! the raw contents. All integers are little-endian.
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0  | 8 | magic `FFSIMIMG` |
//! | 8  | 4 | format version (1) |
//! | 12 | 4 | header length (64) |
//! | 16 | 4 | kind: 1 = NAND, 2 = NOR, 3 = block device |
//! | 20 | 4 | segment size (erase block / allocation unit) in bytes |
//! | 24 | 4 | segment count |
//! | 28 | 4 | write unit (page / block size) in bytes |
//! | 32 | 4 | preferred write size in bytes |
//! | 36 | 4 | flags: bit 0 = erase-count table present, bit 1 = programmed-page map present |
//! | 40 | 4 | number of bad segments |
//! | 44 | 4 | CRC-32 (IEEE) of the metadata area (from 64 up to its end, padding excluded) |
//! | 48 | 8 | offset of the raw contents (a multiple of 4096) |
//! | 56 | 4 | CRC-32 (IEEE) of bytes 0..56 |
//! | 60 | 4 | reserved, 0 |
//!
//! The metadata area starts at 64: the bad segments (`u32` each, increasing), then the erase
//! count of every segment (`u64` each) if flag bit 0, then the programmed-page map (one bit per
//! write unit, least significant bit first, `ceil(units / 8)` bytes) if flag bit 1; zero padding
//! up to the raw contents. The raw contents are the whole device, segment after segment, with no
//! OOB: `dd bs=4096 skip=OFFSET/4096` of an image gives a `nanddump`-style raw dump.
//!
//! Loading a NAND image without the page map counts a page as programmed when it is not all
//! 0xFF. Loading a block image leaves every segment's write position unknown (any first write is
//! accepted). Behavioural settings (faults, discard mode, FTL model limits, cut plans) are not
//! saved: they belong to the test, not to the medium.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use ferrofs_engine::flash::{Flash, FlashError, FlashKind, Geometry, ReadStatus};

use crate::block::{block_geometry, BlockSim};
use crate::counters::Counters;
use crate::device::file::{EraseStyle, FileMedium};
use crate::error::{Error, Result};
use crate::nand::{NandConfig, NandSim};

/// Magic number at the start of every simulator image.
pub const IMAGE_MAGIC: [u8; 8] = *b"FFSIMIMG";
/// Current version of the image format.
pub const IMAGE_VERSION: u32 = 1;
const HEADER_LEN: usize = 64;
const FLAG_ERASE_COUNTS: u32 = 1;
const FLAG_PAGE_MAP: u32 = 2;
const DATA_ALIGN: u64 = 4096;

/// The decoded header and metadata of a simulator image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageHeader {
    /// Format version.
    pub version: u32,
    /// Geometry of the saved device.
    pub geometry: Geometry,
    /// Bad segments.
    pub bad_blocks: Vec<u32>,
    /// Per-segment erase counts, when saved.
    pub erase_counts: Option<Vec<u64>>,
    /// Byte offset of the raw contents in the file.
    pub data_offset: u64,
}

/// CRC-32 (IEEE 802.3, reflected, as used by zlib), bitwise.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}

fn kind_code(kind: FlashKind) -> u32 {
    match kind {
        FlashKind::Nand => 1,
        FlashKind::Nor => 2,
        FlashKind::Block => 3,
        FlashKind::MlcNand => 4,
    }
}

fn kind_from_code(code: u32) -> Result<FlashKind> {
    match code {
        1 => Ok(FlashKind::Nand),
        2 => Ok(FlashKind::Nor),
        3 => Ok(FlashKind::Block),
        4 => Ok(FlashKind::MlcNand),
        other => Err(Error::BadImage(format!("unknown device kind {other}"))),
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Writes an image of the given parts to `w`.
fn encode<W: Write>(
    w: &mut W,
    geo: &Geometry,
    bad: &[u32],
    erase_counts: &[u64],
    page_map: Option<&[bool]>,
    data: &[u8],
) -> io::Result<()> {
    let head = header_and_metadata(geo, bad, erase_counts, page_map, None)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    w.write_all(&head)?;
    w.write_all(data)?;
    w.flush()
}

/// The header and metadata of an image, zero-padded to the raw contents: at `data_offset`
/// when given (an image rewritten in place; an error when the metadata does not fit before it),
/// else at the next multiple of 4096.
fn header_and_metadata(
    geo: &Geometry,
    bad: &[u32],
    erase_counts: &[u64],
    page_map: Option<&[bool]>,
    data_offset: Option<u64>,
) -> Result<Vec<u8>> {
    let mut meta = Vec::new();
    for b in bad {
        meta.extend_from_slice(&b.to_le_bytes());
    }
    for c in erase_counts {
        meta.extend_from_slice(&c.to_le_bytes());
    }
    let mut flags = FLAG_ERASE_COUNTS;
    if let Some(map) = page_map {
        flags |= FLAG_PAGE_MAP;
        let mut bits = vec![0u8; map.len().div_ceil(8)];
        for (i, &p) in map.iter().enumerate() {
            if p {
                bits[i / 8] |= 1 << (i % 8);
            }
        }
        meta.extend_from_slice(&bits);
    }
    let need = (HEADER_LEN + meta.len()) as u64;
    let data_offset = match data_offset {
        Some(o) if o >= need => o,
        Some(o) => {
            return Err(Error::BadImage(format!(
                "{} bad segments: the metadata ({need} bytes) no longer fits before the contents at {o}",
                bad.len()
            )))
        }
        None => need.div_ceil(DATA_ALIGN) * DATA_ALIGN,
    };
    let mut h = vec![0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&IMAGE_MAGIC);
    h[8..12].copy_from_slice(&IMAGE_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    h[16..20].copy_from_slice(&kind_code(geo.kind).to_le_bytes());
    h[20..24].copy_from_slice(&geo.segment_size.to_le_bytes());
    h[24..28].copy_from_slice(&geo.segment_count.to_le_bytes());
    h[28..32].copy_from_slice(&geo.write_unit.to_le_bytes());
    h[32..36].copy_from_slice(&geo.preferred_write.to_le_bytes());
    h[36..40].copy_from_slice(&flags.to_le_bytes());
    h[40..44].copy_from_slice(&(bad.len() as u32).to_le_bytes());
    h[44..48].copy_from_slice(&crc32(&meta).to_le_bytes());
    h[48..56].copy_from_slice(&data_offset.to_le_bytes());
    let hcrc = crc32(&h[..56]);
    h[56..60].copy_from_slice(&hcrc.to_le_bytes());
    h.extend_from_slice(&meta);
    h.resize(data_offset as usize, 0);
    Ok(h)
}

fn check_geometry(geo: &Geometry) -> Result<()> {
    match geo.kind {
        FlashKind::Block => {
            block_geometry(geo.write_unit, geo.segment_size, geo.segment_count, geo.preferred_write).map(|_| ())
        }
        FlashKind::Nand | FlashKind::Nor | FlashKind::MlcNand => {
            if geo.write_unit == 0 || !geo.segment_size.is_multiple_of(geo.write_unit) {
                return Err(Error::InvalidGeometry(format!(
                    "segment size {} is not a multiple of the write unit {}",
                    geo.segment_size, geo.write_unit
                )));
            }
            let mut c = NandConfig::with_layout(geo.write_unit, geo.segment_size / geo.write_unit, geo.segment_count);
            c.kind = geo.kind;
            c.preferred_write = geo.preferred_write;
            c.geometry().map(|_| ())
        }
    }
}

/// Reads and checks an image header and its metadata from `r` (which is left at the raw contents).
/// Returns the header and the page map, if any.
fn decode_header<R: Read>(r: &mut R) -> Result<(ImageHeader, Option<Vec<bool>>)> {
    let bad_image = |e: io::Error| Error::BadImage(format!("truncated header: {e}"));
    let mut h = [0u8; HEADER_LEN];
    r.read_exact(&mut h).map_err(bad_image)?;
    if h[0..8] != IMAGE_MAGIC {
        return Err(Error::BadImage("wrong magic number".into()));
    }
    let version = u32_at(&h, 8);
    if version != IMAGE_VERSION {
        return Err(Error::UnsupportedImageVersion(version));
    }
    if crc32(&h[..56]) != u32_at(&h, 56) {
        return Err(Error::BadImage("header checksum mismatch".into()));
    }
    if u32_at(&h, 12) as usize != HEADER_LEN {
        return Err(Error::BadImage(format!("header length {}", u32_at(&h, 12))));
    }
    let geometry = Geometry {
        kind: kind_from_code(u32_at(&h, 16))?,
        segment_size: u32_at(&h, 20),
        segment_count: u32_at(&h, 24),
        write_unit: u32_at(&h, 28),
        preferred_write: u32_at(&h, 32),
    };
    check_geometry(&geometry)?;
    let flags = u32_at(&h, 36);
    let bad_count = u32_at(&h, 40);
    let meta_crc = u32_at(&h, 44);
    let data_offset = u64_at(&h, 48);
    if bad_count > geometry.segment_count {
        return Err(Error::BadImage(format!("{bad_count} bad segments out of {}", geometry.segment_count)));
    }
    let units = u64::from(geometry.segment_count) * u64::from(geometry.units_per_segment());
    let mut meta_len = u64::from(bad_count) * 4;
    if flags & FLAG_ERASE_COUNTS != 0 {
        meta_len += u64::from(geometry.segment_count) * 8;
    }
    if flags & FLAG_PAGE_MAP != 0 {
        meta_len += units.div_ceil(8);
    }
    if data_offset < HEADER_LEN as u64 + meta_len || !data_offset.is_multiple_of(DATA_ALIGN) {
        return Err(Error::BadImage(format!("data offset {data_offset} inconsistent with metadata")));
    }
    let meta = read_bounded(r, meta_len, "metadata")?;
    if crc32(&meta) != meta_crc {
        return Err(Error::BadImage("metadata checksum mismatch".into()));
    }
    let mut at = 0usize;
    let mut bad_blocks = Vec::with_capacity(bad_count as usize);
    for _ in 0..bad_count {
        let b = u32_at(&meta, at);
        at += 4;
        if b >= geometry.segment_count {
            return Err(Error::BadImage(format!("bad segment {b} out of range")));
        }
        bad_blocks.push(b);
    }
    let erase_counts = if flags & FLAG_ERASE_COUNTS != 0 {
        let mut v = Vec::with_capacity(geometry.segment_count as usize);
        for _ in 0..geometry.segment_count {
            v.push(u64_at(&meta, at));
            at += 8;
        }
        Some(v)
    } else {
        None
    };
    let page_map = if flags & FLAG_PAGE_MAP != 0 {
        Some((0..units as usize).map(|i| meta[at + i / 8] & (1 << (i % 8)) != 0).collect())
    } else {
        None
    };
    let skip = data_offset - HEADER_LEN as u64 - meta_len;
    io::copy(&mut r.take(skip), &mut io::sink()).map_err(bad_image)?;
    Ok((ImageHeader { version, geometry, bad_blocks, erase_counts, data_offset }, page_map))
}

/// Reads exactly `len` bytes, reserving memory up front without panicking or aborting when a
/// damaged header asks for an absurd size.
fn read_bounded<R: Read>(r: &mut R, len: u64, what: &str) -> Result<Vec<u8>> {
    let n = usize::try_from(len).map_err(|_| Error::BadImage(format!("{what} of {len} bytes does not fit in memory")))?;
    let mut buf = Vec::new();
    buf.try_reserve_exact(n).map_err(|_| Error::BadImage(format!("{what} of {len} bytes does not fit in memory")))?;
    r.take(len).read_to_end(&mut buf).map_err(|e| Error::BadImage(format!("reading {what}: {e}")))?;
    if buf.len() != n {
        return Err(Error::BadImage(format!("truncated {what}: {} of {len} bytes", buf.len())));
    }
    Ok(buf)
}

fn read_contents<R: Read>(r: &mut R, geo: &Geometry) -> Result<Vec<u8>> {
    read_bounded(r, geo.device_bytes(), "contents")
}

/// Writes to `path` through a temporary file renamed into place, so a crash never leaves half an image.
fn save_atomically(path: &Path, f: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>) -> Result<()> {
    let mut tmp: PathBuf = path.to_path_buf();
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".tmp");
    tmp.set_file_name(name);
    let file = File::create(&tmp).map_err(|e| Error::io(&tmp, "creating image", e))?;
    let mut w = BufWriter::new(file);
    let res = f(&mut w).and_then(|()| w.get_ref().sync_all());
    if let Err(e) = res {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(&tmp, "writing image", e));
    }
    fs::rename(&tmp, path).map_err(|e| Error::io(path, "renaming image into place", e))
}

fn open_reader(path: &Path) -> Result<BufReader<File>> {
    let f = File::open(path).map_err(|e| Error::io(path, "opening image", e))?;
    Ok(BufReader::with_capacity(1 << 20, f))
}

/// Reads only the header and metadata of the image at `path`.
pub fn read_header(path: &Path) -> Result<ImageHeader> {
    decode_header(&mut open_reader(path)?).map(|(h, _)| h)
}

impl NandSim {
    /// Writes the device's state as an image to `w` (see the [module docs](crate::image)).
    pub fn save_to<W: Write>(&self, w: &mut W) -> io::Result<()> {
        let c = self.counters();
        encode(w, &self.geometry(), &self.bad_blocks(), &c.erase_counts, Some(self.programmed_pages()), self.data())
    }

    /// Reads a NAND/NOR image from `r`.
    pub fn load_from<R: Read>(r: &mut R) -> Result<Self> {
        let (h, map) = decode_header(r)?;
        if h.geometry.kind == FlashKind::Block {
            return Err(Error::BadImage("this is a block-device image, not a raw flash image".into()));
        }
        let data = read_contents(r, &h.geometry)?;
        NandSim::from_parts(h.geometry, data, map, &h.bad_blocks, h.erase_counts)
    }

    /// Saves the device's state to the file at `path` (replaced atomically).
    pub fn save(&self, path: &Path) -> Result<()> {
        save_atomically(path, |w| self.save_to(w))
    }

    /// Loads a NAND/NOR image file.
    pub fn load(path: &Path) -> Result<Self> {
        Self::load_from(&mut open_reader(path)?)
    }
}

impl BlockSim {
    /// Writes the device's contents as an image to `w`.
    pub fn save_to<W: Write>(&self, w: &mut W) -> io::Result<()> {
        let c = self.counters();
        encode(w, &self.geometry(), &[], &c.erase_counts, None, self.data())
    }

    /// Reads a block-device image from `r`.
    pub fn load_from<R: Read>(r: &mut R) -> Result<Self> {
        let (h, _) = decode_header(r)?;
        if h.geometry.kind != FlashKind::Block {
            return Err(Error::BadImage("this is a raw flash image, not a block-device image".into()));
        }
        let data = read_contents(r, &h.geometry)?;
        BlockSim::from_parts(h.geometry, data, h.erase_counts)
    }

    /// Saves the device's contents to the file at `path` (replaced atomically).
    pub fn save(&self, path: &Path) -> Result<()> {
        save_atomically(path, |w| self.save_to(w))
    }

    /// Loads a block-device image file.
    pub fn load(path: &Path) -> Result<Self> {
        Self::load_from(&mut open_reader(path)?)
    }
}

/// Either simulator, as loaded from an image of any kind.
#[derive(Debug, Clone)]
pub enum AnySim {
    /// A raw NAND/NOR simulator.
    Nand(NandSim),
    /// A block-device simulator.
    Block(BlockSim),
}

impl AnySim {
    /// Loads an image of any kind.
    pub fn load(path: &Path) -> Result<Self> {
        Self::load_from(&mut open_reader(path)?)
    }

    /// Reads an image of any kind from `r`.
    pub fn load_from<R: Read>(r: &mut R) -> Result<Self> {
        let (h, map) = decode_header(r)?;
        let data = read_contents(r, &h.geometry)?;
        match h.geometry.kind {
            FlashKind::Block => BlockSim::from_parts(h.geometry, data, h.erase_counts).map(AnySim::Block),
            _ => NandSim::from_parts(h.geometry, data, map, &h.bad_blocks, h.erase_counts).map(AnySim::Nand),
        }
    }

    /// Saves the simulator to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        match self {
            AnySim::Nand(s) => s.save(path),
            AnySim::Block(s) => s.save(path),
        }
    }

    /// A snapshot of the simulator's counters.
    pub fn counters(&self) -> Counters {
        match self {
            AnySim::Nand(s) => s.counters(),
            AnySim::Block(s) => s.counters(),
        }
    }

    /// The simulator as a `Flash` trait object.
    pub fn as_flash(&mut self) -> &mut dyn Flash {
        match self {
            AnySim::Nand(s) => s,
            AnySim::Block(s) => s,
        }
    }
}

impl Flash for AnySim {
    fn geometry(&self) -> Geometry {
        match self {
            AnySim::Nand(s) => s.geometry(),
            AnySim::Block(s) => s.geometry(),
        }
    }
    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> std::result::Result<ReadStatus, FlashError> {
        self.as_flash().read(seg, offset, buf)
    }
    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> std::result::Result<(), FlashError> {
        self.as_flash().write(seg, offset, buf)
    }
    fn erase(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        self.as_flash().erase(seg)
    }
    fn is_bad(&mut self, seg: u32) -> std::result::Result<bool, FlashError> {
        self.as_flash().is_bad(seg)
    }
    fn mark_bad(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        self.as_flash().mark_bad(seg)
    }
    fn flush(&mut self) -> std::result::Result<(), FlashError> {
        self.as_flash().flush()
    }
    fn discard_hint(&mut self, seg: u32) {
        self.as_flash().discard_hint(seg)
    }
}

/// A `Flash` working directly on a plain raw image file (no header): a `nanddump`-style raw dump
/// without OOB for `FlashKind::Nand`/`Nor`, or a block image for `FlashKind::Block`. The
/// geometry comes from the caller; the file must be exactly `geometry.device_bytes()` long.
///
/// NAND rules are enforced from the contents: a page counts as programmed when it is not all
/// 0xFF (each segment is scanned on first use), writes must go above the last programmed page,
/// and `erase` fills the segment with 0xFF. A raw dump has no OOB, so bad blocks cannot be
/// recorded: `mark_bad` is remembered only until the `ImageFlash` is dropped.
/// Block rules: whole aligned write units, sequential inside a segment from the first write
/// (any start offset at first), and `erase` punches a hole where the filesystem supports it
/// (reads zeroes) and otherwise leaves the stale data.
#[derive(Debug)]
pub struct ImageFlash {
    inner: FileMedium,
}

impl ImageFlash {
    /// Opens an existing raw image, read-write, with the given geometry.
    pub fn open(path: &Path, geometry: Geometry) -> Result<Self> {
        Self::open_with(path, geometry, true)
    }

    /// Opens an existing raw image read-only (writes, erases and `mark_bad` fail with `Io`).
    pub fn open_read_only(path: &Path, geometry: Geometry) -> Result<Self> {
        Self::open_with(path, geometry, false)
    }

    fn open_with(path: &Path, geometry: Geometry, writable: bool) -> Result<Self> {
        check_geometry(&geometry)?;
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| Error::io(path, "opening raw image", e))?;
        let meta = file.metadata().map_err(|e| Error::io(path, "reading image size", e))?;
        if !meta.is_file() {
            return Err(Error::WrongDeviceKind(format!("{} is not a regular file", path.display())));
        }
        if meta.len() != geometry.device_bytes() {
            return Err(Error::InvalidGeometry(format!(
                "{} is {} bytes but the geometry describes {} bytes",
                path.display(),
                meta.len(),
                geometry.device_bytes()
            )));
        }
        Ok(Self { inner: FileMedium::new(file, path, geometry, style_for(geometry.kind)) })
    }

    /// Creates (or truncates) a raw image for `geometry`: all 0xFF for raw flash, zeroes for a block image.
    pub fn create(path: &Path, geometry: Geometry) -> Result<Self> {
        check_geometry(&geometry)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| Error::io(path, "creating raw image", e))?;
        file.set_len(geometry.device_bytes()).map_err(|e| Error::io(path, "sizing raw image", e))?;
        let mut inner = FileMedium::new(file, path, geometry, style_for(geometry.kind));
        if geometry.kind == FlashKind::Block {
            inner.reset_positions();
        } else {
            inner.fill_all(0xFF).map_err(|e| Error::io(path, "erasing raw image", e))?;
        }
        Ok(Self { inner })
    }

    /// Geometry for a raw image file whose segment count follows from its size.
    pub fn geometry_for_file(path: &Path, kind: FlashKind, segment_size: u32, write_unit: u32) -> Result<Geometry> {
        let len = fs::metadata(path).map_err(|e| Error::io(path, "reading image size", e))?.len();
        if segment_size == 0 || len % u64::from(segment_size) != 0 {
            return Err(Error::InvalidGeometry(format!(
                "{} is {len} bytes, not a whole number of {segment_size}-byte segments",
                path.display()
            )));
        }
        let count = u32::try_from(len / u64::from(segment_size))
            .map_err(|_| Error::InvalidGeometry("too many segments".into()))?;
        let geo = Geometry { kind, segment_size, segment_count: count, write_unit, preferred_write: write_unit };
        check_geometry(&geo)?;
        Ok(geo)
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> Counters {
        self.inner.counters.clone()
    }
}

fn style_for(kind: FlashKind) -> EraseStyle {
    if kind == FlashKind::Block {
        EraseStyle::PunchHole
    } else {
        EraseStyle::FillOnes
    }
}

impl Flash for ImageFlash {
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

/// A simulator image worked on in place: reads and writes go to the file at the contents'
/// offset, so RAM does not grow with the device (an [`AnySim`] loads the whole image). The
/// medium's rules are those [`ImageFlash`] applies to a raw image (NAND: a page counts as
/// programmed when it is not all 0xFF, writes go above the last programmed page of a segment,
/// an erase writes 0xFF; block device: sequential writes inside a segment, an erase punches a
/// hole, which reads zeroes). The bad segments and erase counts are kept in RAM and written to
/// the header by [`SimFile::sync_metadata`], which also makes the file durable. The first change to the
/// contents first drops the programmed-page map from the header (it would go stale; without
/// one, loading derives it from the contents), so that an interrupted run leaves an image whose
/// header matches what is in it.
#[derive(Debug)]
pub struct SimFile {
    inner: FileMedium,
    data_offset: u64,
    /// Erase counts when opened (the medium counts the erases since).
    erases: Vec<u64>,
    writable: bool,
    /// The header no longer carries a page map.
    map_dropped: bool,
}

impl SimFile {
    /// Opens the simulator image at `path` in place, read-write when `writable`.
    pub fn open(path: &Path, writable: bool) -> Result<Self> {
        let (h, map) = decode_header(&mut open_reader(path)?)?;
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| Error::io(path, "opening image", e))?;
        let len = file.metadata().map_err(|e| Error::io(path, "reading image size", e))?.len();
        let want = h.data_offset + h.geometry.device_bytes();
        if len < want {
            return Err(Error::BadImage(format!("{} is {len} bytes, its header describes {want}", path.display())));
        }
        let style = if h.geometry.kind == FlashKind::Block { EraseStyle::PunchHole } else { EraseStyle::FillOnes };
        let mut inner = FileMedium::at(file, path, h.data_offset, h.geometry, style);
        for &b in &h.bad_blocks {
            inner.set_bad(b);
        }
        if h.geometry.kind == FlashKind::Block {
            // like a block simulator loaded from an image: any first write of a segment
            inner.set_enforce_sequential(false);
        }
        let erases = h.erase_counts.unwrap_or_else(|| vec![0; h.geometry.segment_count as usize]);
        Ok(Self { inner, data_offset: h.data_offset, erases, writable, map_dropped: map.is_none() })
    }

    /// Creates (or truncates) a simulator image at `path`: every segment erased (0xFF for raw
    /// flash, zeroes for a block device, a sparse file), `bad` marked bad.
    pub fn create(path: &Path, geometry: Geometry, bad: &[u32]) -> Result<Self> {
        check_geometry(&geometry)?;
        if let Some(b) = bad.iter().find(|&&b| b >= geometry.segment_count) {
            return Err(Error::InvalidGeometry(format!("bad segment {b} beyond the {} segments", geometry.segment_count)));
        }
        let erases = vec![0u64; geometry.segment_count as usize];
        let head = header_and_metadata(&geometry, bad, &erases, None, None)?;
        let data_offset = head.len() as u64;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| Error::io(path, "creating image", e))?;
        file.write_all_at(&head, 0).map_err(|e| Error::io(path, "writing image header", e))?;
        file.set_len(data_offset + geometry.device_bytes()).map_err(|e| Error::io(path, "sizing image", e))?;
        let style = if geometry.kind == FlashKind::Block { EraseStyle::PunchHole } else { EraseStyle::FillOnes };
        let mut inner = FileMedium::at(file, path, data_offset, geometry, style);
        if geometry.kind == FlashKind::Block {
            inner.reset_positions();
        } else {
            inner.fill_all(0xFF).map_err(|e| Error::io(path, "erasing image", e))?;
        }
        for &b in bad {
            inner.set_bad(b);
        }
        Ok(Self { inner, data_offset, erases, writable: true, map_dropped: true })
    }

    /// Writes the bad segments and erase counts to the header (without a page map) and makes
    /// the file durable.
    pub fn sync_metadata(&mut self) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        let counts: Vec<u64> = self
            .erases
            .iter()
            .zip(self.inner.counters.erase_counts.iter().chain(std::iter::repeat(&0)))
            .map(|(a, b)| a + b)
            .collect();
        let head = header_and_metadata(&self.inner.geo, &self.inner.bad_segments(), &counts, None, Some(self.data_offset))?;
        let path = self.inner.path().to_path_buf();
        self.inner.file().write_all_at(&head, 0).map_err(|e| Error::io(&path, "writing image header", e))?;
        self.inner.file().sync_all().map_err(|e| Error::io(&path, "syncing image", e))?;
        self.map_dropped = true;
        Ok(())
    }

    /// Before the first change: the header's page map goes (see the type's documentation).
    fn changing(&mut self) -> std::result::Result<(), FlashError> {
        if !self.writable {
            return Err(FlashError::Io);
        }
        if !self.map_dropped {
            self.sync_metadata().map_err(|_| FlashError::Io)?;
        }
        Ok(())
    }

    /// Whether the image is a block-device image.
    pub fn is_block(&self) -> bool {
        self.inner.geo.kind == FlashKind::Block
    }

}

impl Flash for SimFile {
    fn geometry(&self) -> Geometry {
        self.inner.geo
    }
    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> std::result::Result<ReadStatus, FlashError> {
        self.inner.read(seg, offset, buf)
    }
    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> std::result::Result<(), FlashError> {
        self.changing()?;
        self.inner.write(seg, offset, buf)
    }
    fn erase(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        self.changing()?;
        self.inner.erase(seg)
    }
    fn is_bad(&mut self, seg: u32) -> std::result::Result<bool, FlashError> {
        self.inner.is_bad(seg)
    }
    fn mark_bad(&mut self, seg: u32) -> std::result::Result<(), FlashError> {
        self.changing()?;
        self.inner.mark_bad(seg)
    }
    /// What is written is in the file already (a killed program loses none of it); the file
    /// is made durable on the host by [`SimFile::sync_metadata`], not at every flush of the
    /// engine (an fdatasync of the image at every checkpoint made `mkfs -r` of a large tree
    /// wait on the host's disk).
    fn flush(&mut self) -> std::result::Result<(), FlashError> {
        self.inner.counters.flushes += 1;
        Ok(())
    }
}
