//! On-flash format: constants and byte-exact encodings. `docs/format.md` describes the same layout.

use crate::engine::codec::{Reader, Writer};
use crate::engine::crc::{crc32c, crc32c_update};
use crate::engine::error::{Error, Result};

/// Format version written by this engine.
pub const FORMAT_VERSION: u32 = 1;
/// Superblock magic, "FFSB" little-endian.
pub const SB_MAGIC: u32 = 0x4253_4646;
/// Checkpoint magic, "FFCP".
pub const CP_MAGIC: u32 = 0x5043_4646;
/// Record magic (u16).
pub const REC_MAGIC: u16 = 0xF5A5;

/// Compatible feature flags written by default: the checkpoint extension.
pub const FEATURE_COMPAT: u64 = FEATURE_COMPAT_CP_EXT;
/// Compatible feature bit 1: checkpoint slots are sized to hold, after the blob's `len` bytes,
/// a [`CpExt`] (own magic and CRC) giving where the checkpoint's own records start in the
/// metadata log, so that a mount can read back every page the checkpoint wrote (every index
/// node, not only the root path) and fall back to the previous checkpoint when one does not.
/// Engines that do not know the bit ignore the bytes after `len` (the slot padding).
pub const FEATURE_COMPAT_CP_EXT: u64 = 2;
/// Compatible feature bit 0: the superblock carries the open-segment limit in an extension
/// after its first `SB_SIZE` bytes (`SB_EXT_SIZE` bytes with their own CRC, see
/// [`Superblock::open_segments`]). Engines that do not know the bit ignore the extension (the
/// main CRC covers only the first `SB_SIZE` bytes) and write with three heads: the filesystem
/// stays valid, only the limit is not kept.
pub const FEATURE_COMPAT_OPEN_SEGMENTS: u64 = 1;
/// Compatible feature bit 2: the superblock carries the FTL page size a block device was
/// formatted for (`Superblock::ftl_page`, in the extension at `SB_SIZE + 8` with its own CRC):
/// the preferred write size the kernel's block backend writes and reads in. Engines that do
/// not know the bit ignore it and guess the page from the device.
pub const FEATURE_COMPAT_FTL_PAGE: u64 = 4;
/// Smallest open-segment limit a superblock may carry: one log head and the checkpoint area.
pub const OPEN_SEGMENTS_MIN: u32 = 2;
/// Largest open-segment limit a superblock may carry (anything above 4 behaves as 4: three
/// heads and the checkpoint area).
pub const OPEN_SEGMENTS_MAX: u32 = 64;
/// Incompatible feature flags understood by this engine: bit 0 = hashed directories.
pub const FEATURE_INCOMPAT_HASHED_DIRS: u64 = 1;
/// Incompatible feature bit 1: whole 4 KiB data blocks are written as aligned payloads after a
/// data group record (`rtype::DGROUP`, format.md section 8), and the superblock carries the
/// data alignment (`Superblock::data_align`, extension part at `SB_SIZE + 16`).
pub const FEATURE_INCOMPAT_ALIGNED_DATA: u64 = 2;
/// Incompatible feature bit 2, lean deletions (format.md 3.3): DELETE records may carry a short
/// payload (none for a single key, the header's; only the last key of a range otherwise), and
/// the last unlink leaves the inode record as it was, the orphan entry alone saying the inode
/// has no links. Set by `format`; an engine writes either only on a volume with the bit, and
/// reads all three DELETE forms and applies the orphan rule on any volume (where the bit is not
/// set, an orphan's record says `nlink` 0 anyway).
pub const FEATURE_INCOMPAT_LEAN_DELETE: u64 = 4;
/// Incompatible feature bit 3, compact index leaves (format.md 5.1): a leaf node may be
/// written in the compact encoding (first byte [`INDEX_COMPACT_LEAF`]: each entry's key and
/// location as a flags byte and variable-length differences from the entry before it). Set by
/// `format`; an engine writes compact leaves only on a volume with the bit, and reads both
/// encodings on any volume.
pub const FEATURE_INCOMPAT_COMPACT_INDEX: u64 = 8;
/// All incompatible features this engine supports.
pub const FEATURE_INCOMPAT_SUPPORTED: u64 = FEATURE_INCOMPAT_HASHED_DIRS
    | FEATURE_INCOMPAT_ALIGNED_DATA
    | FEATURE_INCOMPAT_LEAN_DELETE
    | FEATURE_INCOMPAT_COMPACT_INDEX;
/// First byte of a compact leaf node's payload (in place of the level, which is 0).
pub const INDEX_COMPACT_LEAF: u8 = 0x80;
/// Smallest data alignment (`Superblock::data_align`).
pub const DATA_ALIGN_MIN: u32 = 512;
/// Largest data alignment: one block.
pub const DATA_ALIGN_MAX: u32 = BLOCK_SIZE;
/// Read-only-compatible features understood (none defined).
pub const FEATURE_RO_COMPAT_SUPPORTED: u64 = 0;

/// Size of file data blocks (bytes of payload in one data record at most).
pub const BLOCK_SIZE: u32 = 4096;
/// Maximum name length.
pub const NAME_MAX: usize = 255;
/// Maximum symlink target length.
pub const SYMLINK_MAX: usize = 4095;
/// Maximum xattr name length.
pub const XATTR_NAME_MAX: usize = 255;
/// Maximum xattr value length (Linux's XATTR_SIZE_MAX). A value is one XATTR record, which must
/// fit in a segment: on segments smaller than about 66 KiB the limit is lower, see
/// `Engine::xattr_value_max`.
pub const XATTR_VALUE_MAX: usize = 65536;
/// Maximum file size.
pub const MAX_FILE_SIZE: u64 = 1 << 44;

/// Number of log heads.
pub const NUM_HEADS: usize = 3;
/// Head for user file data.
pub const HEAD_HOT: usize = 0;
/// Head for metadata (inodes, dentries, xattrs, tombstones) and index nodes.
pub const HEAD_META: usize = 1;
/// Head for data moved by the garbage collector.
pub const HEAD_COLD: usize = 2;

/// "No segment".
pub const NO_SEG: u32 = u32::MAX;

/// Maximum number of segments per checkpoint area.
pub const MAX_CP_SEGS: usize = 16;

/// Record types.
pub mod rtype {
    /// Padding to the end of a write unit.
    pub const PAD: u8 = 0;
    /// Segment header, first record of every log segment.
    pub const SEGHDR: u8 = 1;
    /// Inode attributes.
    pub const INODE: u8 = 2;
    /// Directory entry.
    pub const DENT: u8 = 3;
    /// File data block.
    pub const DATA: u8 = 4;
    /// Extended attribute.
    pub const XATTR: u8 = 5;
    /// Orphan marker (unlinked but still open inode).
    pub const ORPHAN: u8 = 6;
    /// Range deletion (tombstone).
    pub const DELETE: u8 = 7;
    /// Index (B+tree) node.
    pub const INDEX: u8 = 8;
    /// A chunk of the segment table written by a checkpoint.
    pub const SEGTAB: u8 = 9;
    /// Data group: the table of the aligned payloads that follow it (format.md section 8).
    pub const DGROUP: u8 = 10;
}

/// Segment-table entries per SEGTAB record.
pub const SEGTAB_ENTRIES: u32 = 200;

/// Number of SEGTAB records for `segments` segments.
pub fn segtab_chunks(segments: u32) -> u32 {
    segments.div_ceil(SEGTAB_ENTRIES)
}

/// Record flag: more records of the same atomic operation follow in this head.
pub const FLAG_CONT: u8 = 1;
/// Padding-record flag: a device flush followed this record (written by fsync's flush of the
/// heads). A record numbered higher on the medium proves that flush completed, so every record
/// numbered lower was durable (recovery tells damage from a crash with it). Older engines
/// ignore it: they skip padding.
pub const FLAG_SYNC: u8 = 2;

/// Key kinds, in index order.
pub mod kind {
    /// Inode record, key 0.
    pub const INODE: u8 = 0;
    /// Directory entry, key = name hash << 8 | collision index.
    pub const DENT: u8 = 1;
    /// Extended attribute, key = name hash << 8 | collision index.
    pub const XATTR: u8 = 2;
    /// Data block, key = block index.
    pub const DATA: u8 = 3;
    /// Orphan, owner 0, key = inode number.
    pub const ORPHAN: u8 = 4;
}

/// An index key: (owner inode, kind, key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Key {
    /// Owner inode number.
    pub ino: u64,
    /// Kind (see [`kind`]).
    pub kind: u8,
    /// Kind-specific key.
    pub key: u64,
}

impl Key {
    /// Build a key.
    pub const fn new(ino: u64, kind: u8, key: u64) -> Self {
        Key { ino, kind, key }
    }
    /// Encoded size.
    pub const SIZE: usize = 17;
    /// Encode.
    pub fn put(&self, w: &mut Writer<'_>) -> Result<()> {
        w.u64(self.ino)?;
        w.u8(self.kind)?;
        w.u64(self.key)
    }
    /// Decode.
    pub fn get(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Key { ino: r.u64()?, kind: r.u8()?, key: r.u64()? })
    }
}

/// The inclusive key range a DELETE record names, from its header key and its payload: an
/// empty payload deletes the header key alone, one key deletes from the header key to it, two
/// keys (the long form, the only one without `FEATURE_INCOMPAT_LEAN_DELETE`) name both ends.
/// Any other length is `Corrupt`.
pub fn delete_range(hkey: Key, payload: &[u8]) -> Result<(Key, Key)> {
    let mut r = Reader::new(payload);
    match payload.len() {
        0 => Ok((hkey, hkey)),
        Key::SIZE => Ok((hkey, Key::get(&mut r)?)),
        n if n == 2 * Key::SIZE => Ok((Key::get(&mut r)?, Key::get(&mut r)?)),
        _ => Err(Error::Corrupt),
    }
}

/// Encode the payload of a DELETE record of `a..=b` (its header key is `a`) into `p`; returns
/// the payload's length. `short`: the volume has `FEATURE_INCOMPAT_LEAN_DELETE`.
pub fn put_delete(a: Key, b: Key, short: bool, p: &mut [u8; 2 * Key::SIZE]) -> Result<usize> {
    let mut w = Writer::new(p);
    if !short {
        a.put(&mut w)?;
        b.put(&mut w)?;
        return Ok(2 * Key::SIZE);
    }
    if a == b {
        return Ok(0);
    }
    b.put(&mut w)?;
    Ok(Key::SIZE)
}

/// The location of a record on flash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Loc {
    /// Segment number.
    pub seg: u32,
    /// Byte offset of the record header inside the segment.
    pub off: u32,
    /// Total record length (header + payload).
    pub len: u32,
}

/// Bit 31 of `Loc::off`: the location is an aligned data payload (format.md 8.3): `off` without
/// the bit is the offset of its 4096 bytes, `len` is their CRC.
pub const LOC_ALIGNED: u32 = 1 << 31;

impl Loc {
    /// Encoded size.
    pub const SIZE: usize = 12;
    /// Encode.
    pub fn put(&self, w: &mut Writer<'_>) -> Result<()> {
        w.u32(self.seg)?;
        w.u32(self.off)?;
        w.u32(self.len)
    }
    /// Decode.
    pub fn get(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Loc { seg: r.u32()?, off: r.u32()?, len: r.u32()? })
    }
    /// The location of an aligned payload of 4096 bytes at `off` (no bit 31) in `seg` whose
    /// CRC (seeded with the record seed) is `crc`.
    pub const fn aligned(seg: u32, off: u32, crc: u32) -> Self {
        Loc { seg, off: off | LOC_ALIGNED, len: crc }
    }
    /// Whether this is an aligned payload's location.
    pub const fn is_aligned(&self) -> bool {
        self.off & LOC_ALIGNED != 0
    }
    /// The first byte it occupies in its segment.
    pub const fn start(&self) -> u32 {
        self.off & !LOC_ALIGNED
    }
    /// The bytes it occupies (and counts as live): 4096 for an aligned payload, else the record.
    pub const fn bytes(&self) -> u32 {
        if self.is_aligned() {
            BLOCK_SIZE
        } else {
            self.len
        }
    }
}

/// Size of one data group table entry: ino u64, block u64, CRC u32.
pub const GROUP_ENTRY_SIZE: usize = 20;
/// Most blocks in one data group.
pub const GROUP_MAX: usize = 255;

/// One entry of a data group's table (format.md 8.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupEntry {
    /// Owner inode.
    pub ino: u64,
    /// Block index in the file.
    pub blk: u64,
    /// CRC32C of the 4096 payload bytes, seeded with the record seed.
    pub crc: u32,
}

impl GroupEntry {
    /// Encode.
    pub fn put(&self, w: &mut Writer<'_>) -> Result<()> {
        w.u64(self.ino)?;
        w.u64(self.blk)?;
        w.u32(self.crc)
    }
    /// Decode.
    pub fn get(r: &mut Reader<'_>) -> Result<Self> {
        Ok(GroupEntry { ino: r.u64()?, blk: r.u64()?, crc: r.u32()? })
    }
}

/// Payload length of a data group record of `count` entries.
pub const fn group_table_len(count: usize) -> usize {
    4 + count * GROUP_ENTRY_SIZE
}

/// The CRC of an aligned payload (format.md 8.2).
pub fn block_crc(seed: u32, data: &[u8]) -> u32 {
    crc32c_update(seed, data)
}

/// A data group's layout in its segment: the record at `off` with `count` entries, alignment
/// `align`. Returns (offset of the first payload slot, end of the extent), or `None` when it
/// overflows (the caller checks the end against the segment).
pub fn group_extent(off: u32, count: u32, align: u32) -> Option<(u32, u32)> {
    let table_end = u64::from(off) + REC_HDR as u64 + group_table_len(count as usize) as u64;
    let a = u64::from(align.max(1));
    let payload0 = table_end.div_ceil(a).checked_mul(a)?;
    let end = payload0.checked_add(u64::from(count).checked_mul(u64::from(BLOCK_SIZE))?)?;
    Some((u32::try_from(payload0).ok()?, u32::try_from(end).ok()?))
}

/// Decode a data group table (the record's payload): the entry count, checked against the
/// payload length.
pub fn group_count(payload: &[u8]) -> Result<u32> {
    let mut r = Reader::new(payload);
    let n = r.u32()?;
    if n == 0 || n as usize > GROUP_MAX || group_table_len(n as usize) != payload.len() {
        return Err(Error::Corrupt);
    }
    Ok(n)
}

/// Entry `i` of a data group table (the record's payload).
pub fn group_entry(payload: &[u8], i: u32) -> Result<GroupEntry> {
    let at = 4usize.checked_add((i as usize).checked_mul(GROUP_ENTRY_SIZE).ok_or(Error::Corrupt)?).ok_or(Error::Corrupt)?;
    let b = payload.get(at..at.saturating_add(GROUP_ENTRY_SIZE)).ok_or(Error::Corrupt)?;
    GroupEntry::get(&mut Reader::new(b))
}

/// Size of a record header.
pub const REC_HDR: usize = 48;

/// A record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecHdr {
    /// Record type (see [`rtype`]).
    pub rtype: u8,
    /// Flags (see [`FLAG_CONT`]).
    pub flags: u8,
    /// CRC32C of the header (with this field zero) and the payload.
    pub crc: u32,
    /// Global sequence number of the record.
    pub seq: u64,
    /// Sequence number of the segment it lives in (from the segment header).
    pub seg_seq: u64,
    /// Index key of the record.
    pub key: Key,
    /// Payload length.
    pub len: u32,
}

impl RecHdr {
    /// Encode into the first `REC_HDR` bytes of `out`, computing the CRC over `payload`.
    pub fn encode(&self, seed: u32, out: &mut [u8], payload: &[u8]) -> Result<()> {
        let hdr = out.get_mut(..REC_HDR).ok_or(Error::Invalid)?;
        {
            let mut w = Writer::new(hdr);
            w.u16(REC_MAGIC)?;
            w.u8(self.rtype)?;
            w.u8(self.flags)?;
            w.u32(0)?;
            w.u64(self.seq)?;
            w.u64(self.seg_seq)?;
            w.u64(self.key.ino)?;
            w.u64(self.key.key)?;
            w.u8(self.key.kind)?;
            w.bytes(&[0, 0, 0])?;
            w.u32(self.len)?;
        }
        let crc = crc32c_update(crc32c_update(seed, hdr), payload);
        crate::engine::codec::put_u32(hdr, 4, crc)
    }

    /// Decode a header (no CRC check; see [`RecHdr::check`]).
    pub fn decode(b: &[u8]) -> Result<Self> {
        let mut r = Reader::new(b);
        if r.u16()? != REC_MAGIC {
            return Err(Error::Corrupt);
        }
        let rtype = r.u8()?;
        let flags = r.u8()?;
        let crc = r.u32()?;
        let seq = r.u64()?;
        let seg_seq = r.u64()?;
        let ino = r.u64()?;
        let key = r.u64()?;
        let kind = r.u8()?;
        r.bytes(3)?;
        let len = r.u32()?;
        Ok(RecHdr { rtype, flags, crc, seq, seg_seq, key: Key { ino, kind, key }, len })
    }

    /// Verify the CRC of header bytes `hdr` (as read) and `payload`.
    pub fn check(&self, seed: u32, hdr: &[u8], payload: &[u8]) -> bool {
        let mut h = [0u8; REC_HDR];
        match hdr.get(..REC_HDR) {
            Some(s) => h.copy_from_slice(s),
            None => return false,
        }
        if let Some(c) = h.get_mut(4..8) {
            c.copy_from_slice(&[0, 0, 0, 0]);
        }
        crc32c_update(crc32c_update(seed, &h), payload) == self.crc
    }
}

/// Seconds + nanoseconds timestamp (passed in by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct Timespec {
    /// Seconds since the epoch.
    pub sec: i64,
    /// Nanoseconds, < 1e9.
    pub nsec: u32,
}

/// File type bits of `mode` (S_IFMT).
pub const S_IFMT: u32 = 0o170000;
/// Socket.
pub const S_IFSOCK: u32 = 0o140000;
/// Symlink.
pub const S_IFLNK: u32 = 0o120000;
/// Regular file.
pub const S_IFREG: u32 = 0o100000;
/// Block device.
pub const S_IFBLK: u32 = 0o060000;
/// Directory.
pub const S_IFDIR: u32 = 0o040000;
/// Character device.
pub const S_IFCHR: u32 = 0o020000;
/// FIFO.
pub const S_IFIFO: u32 = 0o010000;

/// File types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    /// Regular file.
    Regular,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Character device.
    CharDev,
    /// Block device.
    BlockDev,
    /// Named pipe.
    Fifo,
    /// Unix socket.
    Socket,
}

impl FileType {
    /// Type from mode bits.
    pub fn from_mode(mode: u32) -> Option<FileType> {
        Some(match mode & S_IFMT {
            S_IFREG => FileType::Regular,
            S_IFDIR => FileType::Dir,
            S_IFLNK => FileType::Symlink,
            S_IFCHR => FileType::CharDev,
            S_IFBLK => FileType::BlockDev,
            S_IFIFO => FileType::Fifo,
            S_IFSOCK => FileType::Socket,
            _ => return None,
        })
    }
    /// The type bits of a mode (S_IFREG...): what a recreated inode gets (repair).
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => S_IFREG,
            FileType::Dir => S_IFDIR,
            FileType::Symlink => S_IFLNK,
            FileType::CharDev => S_IFCHR,
            FileType::BlockDev => S_IFBLK,
            FileType::Fifo => S_IFIFO,
            FileType::Socket => S_IFSOCK,
        }
    }
    /// The `d_type` value used by readdir (DT_*).
    pub fn dtype(self) -> u8 {
        match self {
            FileType::Fifo => 1,
            FileType::CharDev => 2,
            FileType::Dir => 4,
            FileType::BlockDev => 6,
            FileType::Regular => 8,
            FileType::Symlink => 10,
            FileType::Socket => 12,
        }
    }
}

/// Inode attributes as stored on flash and returned to callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Inode {
    /// Inode number.
    pub ino: u64,
    /// Type and permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Link count.
    pub nlink: u32,
    /// Size in bytes (for directories: number of entries).
    pub size: u64,
    /// Access time.
    pub atime: Timespec,
    /// Modification time.
    pub mtime: Timespec,
    /// Status change time.
    pub ctime: Timespec,
    /// Device number for device nodes.
    pub rdev: u32,
    /// Inode flags (FS_*_FL), stored but not interpreted.
    pub flags: u32,
    /// Generation number (for NFS-style handles).
    pub generation: u32,
    /// Parent directory (directories only; the root is its own parent).
    pub parent: u64,
}

/// Encoded inode payload size.
pub const INODE_SIZE: usize = 8 + 4 * 4 + 8 + 3 * 12 + 4 * 3 + 8;

impl Inode {
    /// The file type.
    pub fn file_type(&self) -> Option<FileType> {
        FileType::from_mode(self.mode)
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
    /// Encode into `out` (INODE_SIZE bytes).
    pub fn encode(&self, out: &mut [u8]) -> Result<()> {
        let mut w = Writer::new(out);
        w.u64(self.ino)?;
        w.u32(self.mode)?;
        w.u32(self.uid)?;
        w.u32(self.gid)?;
        w.u32(self.nlink)?;
        w.u64(self.size)?;
        for t in [self.atime, self.mtime, self.ctime] {
            w.i64(t.sec)?;
            w.u32(t.nsec)?;
        }
        w.u32(self.rdev)?;
        w.u32(self.flags)?;
        w.u32(self.generation)?;
        w.u64(self.parent)
    }
    /// Decode.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let mut r = Reader::new(b);
        let ino = r.u64()?;
        let mode = r.u32()?;
        let uid = r.u32()?;
        let gid = r.u32()?;
        let nlink = r.u32()?;
        let size = r.u64()?;
        let mut ts = [Timespec::default(); 3];
        for t in ts.iter_mut() {
            t.sec = r.i64()?;
            t.nsec = r.u32()?;
        }
        let rdev = r.u32()?;
        let flags = r.u32()?;
        let generation = r.u32()?;
        let parent = r.u64()?;
        let [atime, mtime, ctime] = ts;
        Ok(Inode { ino, mode, uid, gid, nlink, size, atime, mtime, ctime, rdev, flags, generation, parent })
    }
}

/// The superblock, written twice at format time and never rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    /// Format version.
    pub version: u32,
    /// Compatible features.
    pub compat: u64,
    /// Incompatible features.
    pub incompat: u64,
    /// Read-only-compatible features.
    pub ro_compat: u64,
    /// Medium kind (0 NAND, 1 NOR, 2 block).
    pub kind: u8,
    /// Segment size.
    pub segment_size: u32,
    /// Segment count.
    pub segment_count: u32,
    /// Write unit.
    pub write_unit: u32,
    /// Creation time (seconds), also used as a volume identifier.
    pub created: i64,
    /// Volume serial number.
    pub serial: u64,
    /// The two superblock segments.
    pub sb_segs: [u32; 2],
    /// Segments per checkpoint area.
    pub cp_area_segs: u32,
    /// Checkpoint slot size in bytes (multiple of the write unit).
    pub cp_slot_size: u32,
    /// Checkpoint area segments: area A then area B.
    pub cp_segs: [[u32; MAX_CP_SEGS]; 2],
    /// Open-segment limit (`FEATURE_COMPAT_OPEN_SEGMENTS`): at no time are more segments
    /// written to and not yet closed than this, the log heads and the checkpoint area
    /// counted. 0: no limit (the bit is clear; three heads). Stored at offset 209 as u32,
    /// followed by a CRC32C (unseeded) of those 4 bytes.
    pub open_segments: u32,
    /// FTL page size in bytes (`FEATURE_COMPAT_FTL_PAGE`; block devices): a multiple of the
    /// write unit that divides the segment. 0: not recorded (the bit is clear). Stored at
    /// offset 217 as u32, followed by a CRC32C (unseeded) of those 4 bytes.
    pub ftl_page: u32,
    /// Data alignment `A` (`FEATURE_INCOMPAT_ALIGNED_DATA`): aligned payloads start at
    /// multiples of it; a power of two in `DATA_ALIGN_MIN..=DATA_ALIGN_MAX` dividing the
    /// segment. 0: not recorded (the bit is clear). Stored at offset 225 as u32, followed by a
    /// CRC32C (unseeded) of those 4 bytes.
    pub data_align: u32,
}

/// Encoded superblock size (the part the main CRC covers).
pub const SB_SIZE: usize = 4 + 4 + 4 + 8 * 3 + 1 + 4 * 3 + 8 + 8 + 8 + 4 + 4 + 4 * MAX_CP_SEGS * 2;
/// Size of the superblock extension after `SB_SIZE`: the open-segment limit (u32 + its CRC32C,
/// compat bit 0), the FTL page (u32 + its CRC32C, compat bit 2), then the data alignment (u32 +
/// its CRC32C, incompat bit 1). Each part is meaningful only with its bit.
pub const SB_EXT_SIZE: usize = 24;
/// Bytes of the superblock a mount reads and a format writes (before padding).
pub const SB_FULL_SIZE: usize = SB_SIZE + SB_EXT_SIZE;

impl Superblock {
    /// Encode into `out` (SB_SIZE bytes).
    pub fn encode(&self, out: &mut [u8]) -> Result<()> {
        let b = out.get_mut(..SB_SIZE).ok_or(Error::Invalid)?;
        {
            let mut w = Writer::new(b);
            w.u32(SB_MAGIC)?;
            w.u32(0)?;
            w.u32(self.version)?;
            w.u64(self.compat)?;
            w.u64(self.incompat)?;
            w.u64(self.ro_compat)?;
            w.u8(self.kind)?;
            w.u32(self.segment_size)?;
            w.u32(self.segment_count)?;
            w.u32(self.write_unit)?;
            w.i64(self.created)?;
            w.u64(self.serial)?;
            w.u32(self.sb_segs[0])?;
            w.u32(self.sb_segs[1])?;
            w.u32(self.cp_area_segs)?;
            w.u32(self.cp_slot_size)?;
            for a in &self.cp_segs {
                for s in a {
                    w.u32(*s)?;
                }
            }
        }
        let crc = crc32c(b);
        crate::engine::codec::put_u32(b, 4, crc)?;
        let parts = [
            (self.compat & FEATURE_COMPAT_OPEN_SEGMENTS != 0, SB_SIZE, self.open_segments),
            (self.compat & FEATURE_COMPAT_FTL_PAGE != 0, SB_SIZE + 8, self.ftl_page),
            (self.incompat & FEATURE_INCOMPAT_ALIGNED_DATA != 0, SB_SIZE + 16, self.data_align),
        ];
        for (present, at, v) in parts {
            if present {
                let e = out.get_mut(at..at + 8).ok_or(Error::Invalid)?;
                crate::engine::codec::put_u32(e, 0, v)?;
                let c = crc32c(e.get(..4).ok_or(Error::Invalid)?);
                crate::engine::codec::put_u32(e, 4, c)?;
            }
        }
        Ok(())
    }

    /// Decode and validate (magic + CRC; with `FEATURE_COMPAT_OPEN_SEGMENTS`,
    /// `FEATURE_COMPAT_FTL_PAGE` or `FEATURE_INCOMPAT_ALIGNED_DATA`, the extension's CRCs too:
    /// `b` must then hold `SB_FULL_SIZE` bytes). The values' ranges are checked by the mount (`Engine::mount`), which says why
    /// it refuses.
    pub fn decode(full: &[u8]) -> Result<Self> {
        let b = full.get(..SB_SIZE).ok_or(Error::Corrupt)?;
        let mut r = Reader::new(b);
        if r.u32()? != SB_MAGIC {
            return Err(Error::BadFormat);
        }
        let crc = r.u32()?;
        let mut tmp = [0u8; SB_SIZE];
        tmp.copy_from_slice(b);
        crate::engine::codec::put_u32(&mut tmp, 4, 0)?;
        if crc32c(&tmp) != crc {
            return Err(Error::Corrupt);
        }
        let version = r.u32()?;
        let compat = r.u64()?;
        let incompat = r.u64()?;
        let ro_compat = r.u64()?;
        let kind = r.u8()?;
        let segment_size = r.u32()?;
        let segment_count = r.u32()?;
        let write_unit = r.u32()?;
        let created = r.i64()?;
        let serial = r.u64()?;
        let sb_segs = [r.u32()?, r.u32()?];
        let cp_area_segs = r.u32()?;
        let cp_slot_size = r.u32()?;
        let mut cp_segs = [[NO_SEG; MAX_CP_SEGS]; 2];
        for a in cp_segs.iter_mut() {
            for s in a.iter_mut() {
                *s = r.u32()?;
            }
        }
        let ext = |present: bool, at: usize| -> Result<u32> {
            if !present {
                return Ok(0);
            }
            let e = full.get(at..at + 8).ok_or(Error::Corrupt)?;
            let mut er = Reader::new(e);
            let v = er.u32()?;
            let c = er.u32()?;
            if crc32c(e.get(..4).ok_or(Error::Corrupt)?) != c {
                return Err(Error::Corrupt);
            }
            Ok(v)
        };
        let open_segments = ext(compat & FEATURE_COMPAT_OPEN_SEGMENTS != 0, SB_SIZE)?;
        let ftl_page = ext(compat & FEATURE_COMPAT_FTL_PAGE != 0, SB_SIZE + 8)?;
        let data_align = ext(incompat & FEATURE_INCOMPAT_ALIGNED_DATA != 0, SB_SIZE + 16)?;
        Ok(Superblock {
            data_align,
            open_segments,
            ftl_page,
            version,
            compat,
            incompat,
            ro_compat,
            kind,
            segment_size,
            segment_count,
            write_unit,
            created,
            serial,
            sb_segs,
            cp_area_segs,
            cp_slot_size,
            cp_segs,
        })
    }
}

/// Segment states in the segment table.
pub mod segstate {
    /// Free: may be erased and allocated.
    pub const FREE: u8 = 0;
    /// Being written by a log head.
    pub const OPEN: u8 = 1;
    /// Written; may hold live records.
    pub const FULL: u8 = 2;
    /// Bad block, never used.
    pub const BAD: u8 = 3;
    /// Reserved as the next segment of a log head.
    pub const RESERVED: u8 = 4;
    /// Superblock or checkpoint area.
    pub const META: u8 = 5;
}

/// One segment-table entry (persisted in every checkpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SegInfo {
    /// State (see [`segstate`]).
    pub state: u8,
    /// Flags: bit 0 = scrub requested (a corrected read was seen), bit 1 = retire once dead (a
    /// program failed in it), bit 2 = GC skips it (a live record is unreadable): `log::SEG_*`.
    pub flags: u8,
    /// Bytes of live records.
    pub live: u32,
    /// Erase count.
    pub erases: u32,
    /// Sequence number of the segment header (when last opened).
    pub seq: u64,
}

/// Encoded size of a segment-table entry.
pub const SEGINFO_SIZE: usize = 18;

/// Per-head state persisted in a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeadState {
    /// Current segment (NO_SEG if none).
    pub seg: u32,
    /// Next write offset in it.
    pub off: u32,
    /// Its segment sequence number.
    pub seg_seq: u64,
    /// Reserved next segment (NO_SEG if none).
    pub next: u32,
}

/// Statistics counters (persisted in checkpoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Bytes of file data written by users.
    pub user_bytes: u64,
    /// Bytes programmed to the medium (log, checkpoints).
    pub programmed_bytes: u64,
    /// Segment erases.
    pub erases: u64,
    /// Records moved by the garbage collector.
    pub gc_records: u64,
    /// Bytes moved by the garbage collector.
    pub gc_bytes: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Records replayed at the last mount.
    pub replayed: u64,
    /// Segments retired as bad at run time.
    pub retired: u64,
    /// Free segments (computed, not persisted meaningfully).
    pub free_segments: u64,
    /// The most segments open at once since the mount (written to and not yet closed, log
    /// heads and checkpoint area counted; RAM only, not persisted). Never above the
    /// superblock's open-segment limit when it has one.
    pub max_open_segments: u64,
    /// Segments open now (RAM only).
    pub open_segments: u64,
    /// Bytes of MLC pair padding programmed since the mount (RAM only): the pages durability
    /// points add on MLC NAND so that no later program shares cells with durable records.
    pub pair_pad_bytes: u64,
    /// Bytes of index-node records (header included) appended since the mount (RAM only).
    pub index_bytes: u64,
    /// Bytes of SEGTAB records (header included) appended since the mount (RAM only).
    pub segtab_bytes: u64,
    /// Bytes of inode records (header included) appended since the mount (RAM only).
    pub inode_bytes: u64,
}

/// Sequence numbers stay below this (2^62, far beyond any log: 146 000 years at a million
/// records a second). A checkpoint numbered at or above it (or whose next number is not above
/// its own) is not valid: a forged one would leave the log no numbers to grow into (they
/// saturate), and a newer checkpoint could not rank above it.
pub const SEQ_LIMIT: u64 = 1 << 62;

/// Checkpoint header size (before the segment table).
pub const CP_HDR_SIZE: usize = 4 + 4 + 4 + 4 + 8 + 8 + 12 + 1 + 1 + 8 + 8 + NUM_HEADS * 20 + 8 * 8 + 4;

/// Magic of a checkpoint extension ("FFCX").
pub const CP_EXT_MAGIC: u32 = 0x5843_4646;
/// Size of a checkpoint extension.
pub const CP_EXT_SIZE: usize = 32;

/// The checkpoint extension (`FEATURE_COMPAT_CP_EXT`), right after the blob's `len` bytes in
/// its slot: where the checkpoint's own records (the index nodes it committed, padding, the
/// segment headers of segments it crossed into, its SEGTAB records) start in the metadata
/// head. They run from there, through the head's chain, to the end of its last SEGTAB record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpExt {
    /// The checkpoint's sequence (must equal the blob's).
    pub seq: u64,
    /// Segment of the first record.
    pub seg: u32,
    /// Its offset.
    pub off: u32,
    /// Segment sequence of that segment.
    pub seg_seq: u64,
}

impl CpExt {
    /// Encode into `out` (at least `CP_EXT_SIZE` bytes).
    pub fn encode(&self, out: &mut [u8]) -> Result<()> {
        let b = out.get_mut(..CP_EXT_SIZE).ok_or(Error::Invalid)?;
        {
            let mut w = Writer::new(b);
            w.u32(CP_EXT_MAGIC)?;
            w.u32(0)?;
            w.u64(self.seq)?;
            w.u32(self.seg)?;
            w.u32(self.off)?;
            w.u64(self.seg_seq)?;
        }
        let crc = crate::engine::crc::crc32c(b);
        crate::engine::codec::put_u32(b, 4, crc)
    }

    /// Decode and validate (magic, CRC); `None` when absent or damaged.
    pub fn decode(b: &[u8]) -> Option<CpExt> {
        let b = b.get(..CP_EXT_SIZE)?;
        let mut r = Reader::new(b);
        if r.u32().ok()? != CP_EXT_MAGIC {
            return None;
        }
        let crc = r.u32().ok()?;
        let e = CpExt { seq: r.u64().ok()?, seg: r.u32().ok()?, off: r.u32().ok()?, seg_seq: r.u64().ok()? };
        let c = crate::engine::crc::crc32c_update(
            crate::engine::crc::crc32c_update(crate::engine::crc::crc32c(b.get(..4)?), &[0, 0, 0, 0]),
            b.get(8..)?,
        );
        (c == crc).then_some(e)
    }
}

/// Magic of a checkpoint's twin map ("FFCT").
pub const CP_TWINS_MAGIC: u32 = 0x5443_4646;
/// Size of a twin map before its bits.
pub const CP_TWINS_HDR: usize = 28;

/// Bytes of the twin map of a checkpoint with `chunks` segment-table chunks.
pub fn cp_twins_len(chunks: u32) -> usize {
    CP_TWINS_HDR.saturating_add(chunks.div_ceil(8) as usize)
}

/// The twin map of a checkpoint (format.md section 4), after its extension in the slot: for
/// each segment-table chunk, whether the SEGTAB record the checkpoint names holds the same
/// entries as the record checkpoint `prev` names for it. A mount that loads the checkpoint can
/// then name the previous records again (without rewriting the table) where they are twins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpTwins {
    /// The checkpoint's sequence (must equal the blob's).
    pub seq: u64,
    /// The sequence of the checkpoint the bits compare with (the one before it).
    pub prev: u64,
    /// Number of chunks.
    pub chunks: u32,
}

impl CpTwins {
    /// Encode into `out` (at least [`cp_twins_len`] bytes): `twins[i]` non-zero sets bit `i`.
    pub fn encode(&self, twins: &[u8], out: &mut [u8]) -> Result<()> {
        let len = cp_twins_len(self.chunks);
        if twins.len() != self.chunks as usize {
            return Err(Error::Invalid);
        }
        let b = out.get_mut(..len).ok_or(Error::Invalid)?;
        b.fill(0);
        {
            let mut w = Writer::new(b);
            w.u32(CP_TWINS_MAGIC)?;
            w.u32(0)?;
            w.u64(self.seq)?;
            w.u64(self.prev)?;
            w.u32(self.chunks)?;
        }
        for (i, &t) in twins.iter().enumerate() {
            if t != 0 {
                let byte = b.get_mut(CP_TWINS_HDR.saturating_add(i / 8)).ok_or(Error::Invalid)?;
                *byte |= 1 << (i % 8);
            }
        }
        let crc = crate::engine::crc::crc32c(b);
        crate::engine::codec::put_u32(b, 4, crc)
    }

    /// Decode and validate (magic, CRC, `chunks`); `None` when absent or damaged. Returns the
    /// map and its bits.
    pub fn decode(b: &[u8], chunks: u32) -> Option<(CpTwins, &[u8])> {
        let b = b.get(..cp_twins_len(chunks))?;
        let mut r = Reader::new(b);
        if r.u32().ok()? != CP_TWINS_MAGIC {
            return None;
        }
        let crc = r.u32().ok()?;
        let t = CpTwins { seq: r.u64().ok()?, prev: r.u64().ok()?, chunks: r.u32().ok()? };
        if t.chunks != chunks {
            return None;
        }
        let c = crate::engine::crc::crc32c_update(
            crate::engine::crc::crc32c_update(crate::engine::crc::crc32c(b.get(..4)?), &[0, 0, 0, 0]),
            b.get(8..)?,
        );
        (c == crc).then_some((t, b.get(CP_TWINS_HDR..)?))
    }

    /// Bit `i` of `bits` (from [`CpTwins::decode`]).
    pub fn bit(bits: &[u8], i: usize) -> bool {
        bits.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0)
    }
}

/// The fixed part of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpHeader {
    /// Checkpoint sequence: every record with a smaller seq is covered by it.
    pub seq: u64,
    /// Volume serial (must match the superblock).
    pub serial: u64,
    /// Total blob length in bytes.
    pub len: u32,
    /// Index root location (valid if `has_root`).
    pub root: Loc,
    /// Level of the root node (0 = leaf).
    pub root_level: u8,
    /// Whether the index has a root.
    pub has_root: bool,
    /// Next inode number to allocate.
    pub next_ino: u64,
    /// Next sequence number.
    pub next_seq: u64,
    /// Log heads.
    pub heads: [HeadState; NUM_HEADS],
    /// Counters.
    pub stats: Stats,
    /// Number of segment entries that follow.
    pub seg_count: u32,
}

impl CpHeader {
    /// Encode the header (CRC field left zero).
    pub fn encode(&self, w: &mut Writer<'_>) -> Result<()> {
        w.u32(CP_MAGIC)?;
        w.u32(0)?; // crc
        w.u32(FORMAT_VERSION)?;
        w.u32(self.len)?;
        w.u64(self.seq)?;
        w.u64(self.serial)?;
        self.root.put(w)?;
        w.u8(self.root_level)?;
        w.u8(u8::from(self.has_root))?;
        w.u64(self.next_ino)?;
        w.u64(self.next_seq)?;
        for h in &self.heads {
            w.u32(h.seg)?;
            w.u32(h.off)?;
            w.u64(h.seg_seq)?;
            w.u32(h.next)?;
        }
        let s = &self.stats;
        for v in [
            s.user_bytes,
            s.programmed_bytes,
            s.erases,
            s.gc_records,
            s.gc_bytes,
            s.checkpoints,
            s.replayed,
            s.retired,
        ] {
            w.u64(v)?;
        }
        w.u32(self.seg_count)
    }

    /// Decode the header; returns it and the stored CRC.
    pub fn decode(r: &mut Reader<'_>) -> Result<(Self, u32)> {
        if r.u32()? != CP_MAGIC {
            return Err(Error::Corrupt);
        }
        let crc = r.u32()?;
        if r.u32()? != FORMAT_VERSION {
            return Err(Error::Corrupt);
        }
        let len = r.u32()?;
        let seq = r.u64()?;
        let serial = r.u64()?;
        let root = Loc::get(r)?;
        let root_level = r.u8()?;
        let has_root = r.u8()? != 0;
        let next_ino = r.u64()?;
        let next_seq = r.u64()?;
        let mut heads = [HeadState::default(); NUM_HEADS];
        for h in heads.iter_mut() {
            h.seg = r.u32()?;
            h.off = r.u32()?;
            h.seg_seq = r.u64()?;
            h.next = r.u32()?;
        }
        let stats = Stats {
            user_bytes: r.u64()?,
            programmed_bytes: r.u64()?,
            erases: r.u64()?,
            gc_records: r.u64()?,
            gc_bytes: r.u64()?,
            checkpoints: r.u64()?,
            replayed: r.u64()?,
            retired: r.u64()?,
            free_segments: 0,
            max_open_segments: 0,
            pair_pad_bytes: 0,
            open_segments: 0,
            index_bytes: 0,
            segtab_bytes: 0,
            inode_bytes: 0,
        };
        let seg_count = r.u32()?;
        Ok((
            CpHeader { seq, serial, len, root, root_level, has_root, next_ino, next_seq, heads, stats, seg_count },
            crc,
        ))
    }
}

/// Encode a segment-table entry.
pub fn put_seginfo(w: &mut Writer<'_>, s: &SegInfo) -> Result<()> {
    w.u8(s.state)?;
    w.u8(s.flags)?;
    w.u32(s.live)?;
    w.u32(s.erases)?;
    w.u64(s.seq)
}

/// Decode a segment-table entry.
pub fn get_seginfo(r: &mut Reader<'_>) -> Result<SegInfo> {
    Ok(SegInfo { state: r.u8()?, flags: r.u8()?, live: r.u32()?, erases: r.u32()?, seq: r.u64()? })
}

/// Decode a segment-table entry from its [`SEGINFO_SIZE`] bytes (what [`get_seginfo`] reads,
/// without a bounds check per field: the mount decodes every entry of the table).
pub fn seginfo_from(b: &[u8; SEGINFO_SIZE]) -> SegInfo {
    let [state, flags, l0, l1, l2, l3, e0, e1, e2, e3, s0, s1, s2, s3, s4, s5, s6, s7] = *b;
    SegInfo {
        state,
        flags,
        live: u32::from_le_bytes([l0, l1, l2, l3]),
        erases: u32::from_le_bytes([e0, e1, e2, e3]),
        seq: u64::from_le_bytes([s0, s1, s2, s3, s4, s5, s6, s7]),
    }
}

/// Segment header payload: head id, previous segment, next (reserved) segment.
pub const SEGHDR_PAYLOAD: usize = 1 + 4 + 4;

/// Name hash used for directory entries and xattrs (FNV-1a 64, folded to 55 bits, never 0).
pub fn name_hash(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    let h = (h ^ (h >> 55)) & ((1u64 << 55) - 1);
    if h == 0 {
        1
    } else {
        h
    }
}
