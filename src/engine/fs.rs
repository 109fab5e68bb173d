//! The filesystem object: the [`Engine`] struct, its options, format and mount entry points,
//! operation boundaries (`begin_mutation`, `end_op`) and small accessors. The rest of the
//! engine's methods are in the files of their job (see `mod.rs`).

use crate::engine::readcache::READ_CACHE_BYTES;
use crate::engine::error::{Error, Result};
use crate::engine::flash::{Flash, FlashKind, ReadStatus};
use crate::engine::format::{
    segstate, Inode, Loc, SegInfo, Stats, Superblock, Timespec, CP_HDR_SIZE, DATA_ALIGN_MAX, DATA_ALIGN_MIN, FEATURE_COMPAT,
    FEATURE_COMPAT_FTL_PAGE, FEATURE_COMPAT_OPEN_SEGMENTS, FEATURE_INCOMPAT_ALIGNED_DATA, FEATURE_INCOMPAT_HASHED_DIRS, FEATURE_INCOMPAT_LEAN_DELETE, FEATURE_INCOMPAT_COMPACT_INDEX,
    FEATURE_INCOMPAT_SUPPORTED,
    FEATURE_RO_COMPAT_SUPPORTED, FORMAT_VERSION, LOC_ALIGNED, MAX_CP_SEGS, NO_SEG, NUM_HEADS, OPEN_SEGMENTS_MAX,
    OPEN_SEGMENTS_MIN, SB_FULL_SIZE, SEGINFO_SIZE, SEGTAB_ENTRIES, S_IFDIR,
};
use crate::engine::index::Tree;
use crate::engine::log::Log;
use crate::engine::platform::{FallibleVec, Platform};
use crate::engine::recovery::{CpFallback, LogDamage};
use crate::engine::segtab::SegTable;
use crate::engine::space::DIRTY_NODE;

/// Inode number of the root directory.
pub const ROOT_INO: u64 = 1;

/// Options for [`Engine::format`].
#[derive(Debug, Clone, Copy)]
pub struct FormatOptions {
    /// Volume serial number (mkfs should pass a random value).
    pub serial: u64,
    /// Owner of the root directory.
    pub root_uid: u32,
    /// Group of the root directory.
    pub root_gid: u32,
    /// Permission bits of the root directory.
    pub root_mode: u32,
    /// Open-segment limit stored in the superblock (see `Superblock::open_segments`):
    /// `None`, the medium's default (2 on a block device, none on MTD); `Some(0)`, no limit
    /// (three log heads); `Some(n)`, at most `n` segments open at once, `n` in
    /// `OPEN_SEGMENTS_MIN..=OPEN_SEGMENTS_MAX` (1: `NotSupported`; above the maximum: `Invalid`).
    pub open_segments: Option<u32>,
    /// Aligned data payloads (`FEATURE_INCOMPAT_ALIGNED_DATA`, format.md section 8): 0, none
    /// (the default until the feature is complete, issue 13); else the data alignment, a power
    /// of two in 512..=4096 dividing the segment (mkfs: 4096 on a block device, the page size
    /// on NAND), `Invalid` otherwise and on NOR.
    pub data_align: u32,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions { serial: 0x5eed_f00d, root_uid: 0, root_gid: 0, root_mode: 0o755, open_segments: None, data_align: 0 }
    }
}

/// Default open-segment limit of a block device (one log head and the checkpoint area: what
/// cheap SD/CF FTLs with few open allocation units sustain).
pub const DEFAULT_BLOCK_OPEN_SEGMENTS: u32 = 2;

/// Options for [`Engine::mount`].
#[derive(Debug, Clone, Copy)]
pub struct MountOptions {
    /// Index nodes cached in RAM (about 2.6 KiB each); 0: scaled to the device (one per
    /// `AUTO_CACHE_BYTES_PER_NODE` of it, from `AUTO_CACHE_MIN` to `AUTO_CACHE_MAX`).
    pub cache_nodes: usize,
    /// Dirty index nodes at which a checkpoint is taken; 0: 3/4 of the cache, at most what
    /// 1/32 of the segments hold (the next checkpoint writes them). Capped at 3/4 of the cache.
    pub dirty_nodes: usize,
    /// Static wear levelling threshold: when the erase-count spread exceeds it, background GC
    /// moves the least-worn full segment.
    pub wear_threshold: u32,
    /// Take a checkpoint once this many bytes were appended to the log since the last one:
    /// bounds the roll-forward work (and so the mount time) after a crash. 0 (the default):
    /// chosen from the medium, [`default_checkpoint_log_bytes`] ([`CHECKPOINT_LOG_BYTES`] on
    /// raw flash, [`BLOCK_CHECKPOINT_LOG_BYTES`] on a block device).
    pub checkpoint_log_bytes: u64,
    /// A read-write mount whose log after the checkpoint spans at least this many bytes of
    /// segments reads data records by their headers where the log proves them durable
    /// (`Engine::replay`, docs/design.md "Records taken on trust at mount"); 0 (the default):
    /// `recovery::LAZY_REPLAY_MIN_LOG` (2 MiB); `u64::MAX`: never. Tests set 1 to take every roll-forward
    /// that way.
    pub lazy_replay_min_log: u64,
    /// Mount read-only: recover in RAM only and never write to the medium (for `ro` mounts,
    /// fsck and dump tools). Every mutation returns `ReadOnly`. The index cache may grow up to
    /// 8x `cache_nodes` to hold what the log since the checkpoint changed.
    pub read_only: bool,
    /// Bytes of the log's read cache of recently read and written metadata pages
    /// (`readcache.rs`); `None`: `READ_CACHE_BYTES` (256 KiB). `Some(0)` turns it off. The
    /// kernel passes 1/256 of RAM (`read_cache=` overrides it).
    pub read_cache_bytes: Option<usize>,
}

/// Default `MountOptions::checkpoint_log_bytes`: 2.5 MiB. A mount after a power cut reads the
/// log since the last checkpoint once: the records in full, data records but their headers
/// where the log proves them durable (`Engine::replay`), about a page read per 4 KiB data
/// record on the rig's nandsim (25 us + 2 KiB x 25 ns per 2 KiB page). A smaller bound
/// shortens that but costs write amplification (the extra checkpoints rewrite dirty index
/// nodes sooner): simbench's 4 KiB overwrites at 80 % fill give WA 2.51 / 2.33 (uniform /
/// 80-20) with 3 MiB, 2.59 / 2.42 with 2.5 MiB (95 %: 4.66 / 4.23 and 4.67 / 4.21), while a cut
/// just before the bound costs the rig's mount up to clean + 0.104 s with 3 MiB and at most
/// clean + 0.094 s in four runs with 2.5 MiB (issue 12's bound: clean + 0.1 s): docs/design.md,
/// "Reading the log at mount".
pub const CHECKPOINT_LOG_BYTES: u64 = 5 << 19;

/// Default `MountOptions::checkpoint_log_bytes` on a block device: 8 MiB. There every checkpoint
/// costs a device flush and, on a cheap FTL, a rewrite of the erase blocks it interrupts (the
/// rig's mtdblock: twice the NAND erases of 4 KiB overwrites with 4 MiB against 8 MiB, and a
/// third of the buffered throughput), while reading the log back at mount is cheap (no
/// per-page command overhead of raw NAND): docs/design.md, "Reading the log at mount".
pub const BLOCK_CHECKPOINT_LOG_BYTES: u64 = 8 << 20;

/// The replay window a mount uses on a medium of `kind` when `MountOptions` leaves it at 0.
pub fn default_checkpoint_log_bytes(kind: FlashKind) -> u64 {
    if kind == FlashKind::Block {
        BLOCK_CHECKPOINT_LOG_BYTES
    } else {
        CHECKPOINT_LOG_BYTES
    }
}

/// How a mount's roll-forward read the log's data records (`Engine::replay`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayLazy {
    /// Records taken by their headers (or a data group's table) alone.
    pub trusted: u64,
    /// Of those, the ones the log did not prove durable, read back whole at the end.
    pub reread: u64,
    /// One of those did not read back: the roll-forward ran again reading every record.
    pub retried: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions { cache_nodes: 0, dirty_nodes: 0, wear_threshold: 1000, checkpoint_log_bytes: 0, lazy_replay_min_log: 0, read_only: false, read_cache_bytes: None }
    }
}

/// Device bytes per cached index node of the automatic cache size: a full device of 4 KiB blocks
/// indexed by half-full leaves (32 keys) fits.
pub const AUTO_CACHE_BYTES_PER_NODE: u64 = 128 << 10;
/// Smallest automatic index cache, in nodes.
pub const AUTO_CACHE_MIN: usize = 256;
/// Largest automatic index cache, in nodes (about 10 MiB of RAM).
pub const AUTO_CACHE_MAX: usize = 4096;

/// Filesystem statistics for statfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatFs {
    /// Block size for the counts below.
    pub block_size: u32,
    /// Blocks usable for user data.
    pub blocks: u64,
    /// Blocks free.
    pub blocks_free: u64,
    /// Inodes allocated so far (next inode number - 1).
    pub files: u64,
    /// Maximum name length.
    pub name_max: u32,
}

/// A mounted ferrofs filesystem.
pub struct Engine<P: Platform, F: Flash> {
    pub(crate) log: Log<P, F>,
    pub(crate) tree: Tree<P>,
    pub(crate) sb: Superblock,
    pub(crate) next_ino: u64,
    pub(super) cp_area: usize,
    pub(super) cp_next_slot: u32,
    pub(crate) buf: P::Vec<u8>,
    pub(crate) buf2: P::Vec<u8>,
    pub(crate) opts: MountOptions,
    pub(crate) in_checkpoint: bool,
    /// The log position (`log.next_seq`) and the free-segment need of the last foreground GC
    /// that ended in `NoSpace` with nothing left to reclaim: while nothing was appended since
    /// (nothing died, nothing was freed), another attempt at that need or above would only
    /// write checkpoints that free what they write (`Engine::ensure_space`).
    pub(crate) gc_futile: Option<(u64, u32)>,
    /// The foreground GC last gave up because its cleaning cycles gained nothing: until a
    /// call at the need succeeds again, calls above their need clean nothing ahead of it
    /// (`Engine::ensure_space`).
    pub(crate) gc_flat: bool,
    /// Where the newest checkpoint has each segment-table chunk (their segments are pinned:
    /// `SEG_PINNED`), and where the previous one has it (see `Engine::write_segtab`).
    pub(crate) segtab_locs: P::Vec<Loc>,
    pub(crate) segtab_prev_locs: P::Vec<Loc>,
    /// Per chunk, non-zero when the two records above hold the same entries.
    pub(crate) segtab_twin: P::Vec<u8>,
    /// Sequence of the checkpoint that names `segtab_locs` (0: none), which the next
    /// checkpoint's twin map compares with.
    pub(crate) segtab_seq: u64,
    /// Records the last mount's roll-forward dropped: after a gap in the sequence numbers, of an
    /// incomplete group, or of an inode without an inode record.
    pub(super) dropped: u64,
    /// Roll-forward: the last inode found to exist (0 = none), reset by every DELETE.
    pub(super) replay_ok_ino: u64,
    /// Damage the last mount found in the log (the mount is then read-only for good).
    pub(super) damage: Option<LogDamage>,
    /// Mounted read-only: the end of the mount (orphans, new heads, first checkpoint) is
    /// still to do before the first write (see [`Engine::set_read_only`]).
    pub(super) mount_pending: bool,
    /// `log.failed` as it was when a read-write mount turned read-only.
    pub(super) failed_before_ro: bool,
    /// Unknown read-only-compatible features: never writable.
    pub(super) ro_compat_unknown: bool,
    /// Bytes reserved outside the engine (write-back budget, see `writeback.rs`).
    pub(crate) reserved: u64,
    /// The inode cache (`writeback.rs`): fixed size, allocated on first use.
    pub(crate) icache: P::Vec<crate::engine::writeback::ICacheSlot>,
    pub(crate) icache_hits: u64,
    pub(crate) icache_misses: u64,
    /// Inode records written since the mount (measurements).
    pub(crate) inode_records: u64,
    /// Bytes programmed by checkpoints since the mount (measurements, see `checkpoint_bytes`).
    pub(crate) cp_bytes: u64,
    /// The last mount could not load the newest checkpoint and used an older one.
    pub(super) fallback: Option<CpFallback>,
    /// Roll-forward from an older checkpoint: every gap ends it (see `load_checkpoint`).
    pub(super) replay_fallback: bool,
    /// Roll-forward reading every data group block's payload (see `Engine::replay`): set for
    /// a second roll-forward when a block taken on trust by the first did not read back.
    pub(super) replay_verify_all: bool,
    /// The last `load_checkpoint` failed only for such a block: load it again with
    /// `replay_verify_all`.
    pub(super) replay_retry: bool,
    /// The last mount's roll-forward: records taken by their headers or group tables alone,
    /// those of them read back whole at its end, and whether it ran again reading everything.
    pub(super) replay_lazy: ReplayLazy,
    /// Half-written segments the mount found (the heads' last segments: (segment, offset of
    /// the end of their valid records rounded up to a write unit); the checkpoint area's
    /// current segment): written to their end before anything else when the medium is a
    /// block device with an open-segment limit (`finish_mount`).
    pub(super) mount_tails: [(u32, u32); NUM_HEADS + 1],
    /// The superblock copy the mount found damaged, unreadable, different or read only
    /// through ECC correction while the other copy is intact: rewritten by `finish_mount`
    /// (one copy per mount, never both at once).
    pub(super) sb_refresh: Option<u32>,
    /// Per checkpoint area: a read of it was corrected, or a slot written in it does not read
    /// back: the next checkpoints move off it and erase it (see `checkpoint`).
    pub(super) cp_scrub: [bool; 2],
}

fn round_up(v: u64, m: u64) -> u64 {
    if m == 0 {
        v
    } else {
        v.div_ceil(m).saturating_mul(m)
    }
}

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Create a new, empty filesystem on `flash` (mkfs). Returns the flash.
    pub fn format(mut flash: F, fo: &FormatOptions, now: Timespec) -> core::result::Result<F, (Error, F)> {
        let geo = flash.geometry();
        // MLC NAND: the pairing must be known (see `FlashKind::MlcNand`)
        let pair_dist = match Log::<P, F>::medium_pairing(&flash) {
            Some((_, d)) => d,
            None if geo.kind == FlashKind::MlcNand => return Err((Error::NotSupported, flash)),
            None => 0,
        };
        let wu = geo.write_unit;
        if wu == 0
            || !geo.segment_size.is_multiple_of(wu)
            || geo.segment_size < 16384
            || geo.segment_size < wu.saturating_mul(4)
            || geo.segment_count < 16
        {
            return Err((Error::Invalid, flash));
        }
        let mut segs = P::Vec::new();
        for i in 0..geo.segment_count {
            let bad = match flash.is_bad(i) {
                Ok(b) => b,
                Err(e) => return Err((e.into(), flash)),
            };
            let st = if bad { segstate::BAD } else { segstate::FREE };
            if let Err(e) = segs.try_push(SegInfo { state: st, ..SegInfo::default() }) {
                return Err((e, flash));
            }
        }
        let limit = match fo.open_segments {
            None if geo.kind == FlashKind::Block => DEFAULT_BLOCK_OPEN_SEGMENTS,
            None => 0,
            Some(n) => n,
        };
        if limit == 1 {
            return Err((Error::NotSupported, flash));
        }
        if limit > OPEN_SEGMENTS_MAX {
            return Err((Error::Invalid, flash));
        }
        let chunks = crate::engine::format::segtab_chunks(geo.segment_count);
        // the blob and its extension (FEATURE_COMPAT_CP_EXT)
        let blob = CP_HDR_SIZE as u64 + u64::from(chunks) * Loc::SIZE as u64 + crate::engine::format::CP_EXT_SIZE as u64;
        let ss64 = u64::from(geo.segment_size);
        // at least 64 slots per area: each area is erased once per 128 checkpoints (or mounts)
        let area_of = |slot: u64| round_up(slot.saturating_mul(64), ss64) / ss64.max(1);
        let mut slot = round_up(blob, u64::from(wu));
        // on a block device a checkpoint slot is whole FTL pages (so that no page is written
        // twice) when that does not make the areas bigger
        if geo.kind == FlashKind::Block && geo.preferred_write > wu && geo.preferred_write.is_multiple_of(wu) && geo.preferred_write <= geo.segment_size {
            let page_slot = round_up(blob, u64::from(geo.preferred_write));
            if area_of(page_slot) <= area_of(slot) {
                slot = page_slot;
            }
        }
        // MLC NAND: every slot ends with pages enough that the next slot's programs share no
        // cell with this one's blob (`mlc_slot_ok`)
        slot = slot.saturating_add(u64::from(pair_dist) * u64::from(wu));
        let area_segs = area_of(slot);
        if u64::from(SEGTAB_ENTRIES) * SEGINFO_SIZE as u64 + 512 > u64::from(geo.segment_size) / 2 {
            return Err((Error::Invalid, flash));
        }
        if area_segs as usize > MAX_CP_SEGS || slot > u64::from(u32::MAX) {
            return Err((Error::Invalid, flash));
        }
        let nsegs = segs.len() as u32;
        let mut good = (0..nsegs).zip(segs.as_slice().iter()).filter(|(_, s)| s.state == segstate::FREE).map(|(i, _)| i);
        let mut sb_segs = [NO_SEG; 2];
        for s in sb_segs.iter_mut() {
            *s = match good.next() {
                Some(g) if g < 64 => g,
                _ => return Err((Error::Io, flash)),
            };
        }
        let mut cp_segs = [[NO_SEG; MAX_CP_SEGS]; 2];
        for area in cp_segs.iter_mut() {
            for s in area.iter_mut().take(area_segs as usize) {
                *s = match good.next() {
                    Some(g) => g,
                    None => return Err((Error::NoSpace, flash)),
                };
            }
        }
        // a block device's FTL page (the preferred write size), recorded for the kernel
        let ftl_page = if geo.kind == FlashKind::Block { geo.preferred_write } else { 0 };
        let data_align = fo.data_align;
        if data_align != 0 && (geo.kind == FlashKind::Nor || !Self::data_align_ok(data_align, geo.segment_size)) {
            return Err((Error::Invalid, flash));
        }
        let mut compat = FEATURE_COMPAT;
        if limit != 0 {
            compat |= FEATURE_COMPAT_OPEN_SEGMENTS;
        }
        if ftl_page != 0 {
            compat |= FEATURE_COMPAT_FTL_PAGE;
        }
        let sb = Superblock {
            data_align,
            open_segments: limit,
            ftl_page,
            version: FORMAT_VERSION,
            compat,
            incompat: FEATURE_INCOMPAT_HASHED_DIRS
                | FEATURE_INCOMPAT_LEAN_DELETE
                | FEATURE_INCOMPAT_COMPACT_INDEX
                | if data_align != 0 { FEATURE_INCOMPAT_ALIGNED_DATA } else { 0 },
            ro_compat: 0,
            kind: match geo.kind {
                // MLC follows the NAND rules; its pairing comes from the device at each mount
                FlashKind::Nand | FlashKind::MlcNand => 0,
                FlashKind::Nor => 1,
                FlashKind::Block => 2,
            },
            segment_size: geo.segment_size,
            segment_count: geo.segment_count,
            write_unit: wu,
            created: now.sec,
            serial: fo.serial,
            sb_segs,
            cp_area_segs: area_segs as u32,
            cp_slot_size: slot as u32,
            cp_segs,
        };
        let meta: [u32; 2 + 2 * MAX_CP_SEGS] = {
            let mut m = [NO_SEG; 2 + 2 * MAX_CP_SEGS];
            for (x, s) in m.iter_mut().zip(sb_segs.iter().chain(cp_segs.iter().flatten())) {
                *x = *s;
            }
            m
        };
        for &m in meta.iter().filter(|&&m| m != NO_SEG) {
            if let Some(s) = segs.as_mut_slice().get_mut(m as usize) {
                s.state = segstate::META;
            }
        }
        let table = match SegTable::new(segs) {
            Ok(t) => t,
            Err(e) => return Err((e, flash)),
        };
        let mut log: Log<P, F> = Log::new(flash, table, fo.serial as u32 ^ (fo.serial >> 32) as u32);
        log.set_data_align(data_align);
        if let Err(e) = log.set_open_limit(limit) {
            return Err((e, log.flash));
        }
        let mut eng = Self::assemble(log, sb, MountOptions::default(), 64);
        eng.cp_area = 1;
        eng.cp_next_slot = u32::MAX;
        let r = eng.format_inner(fo, now, &meta);
        match r {
            Ok(()) => Ok(eng.log.flash),
            Err(e) => Err((e, eng.log.flash)),
        }
    }

    fn format_inner(&mut self, fo: &FormatOptions, now: Timespec, meta: &[u32]) -> Result<()> {
        for &m in meta.iter().filter(|&&m| m != NO_SEG) {
            if !self.log.erase(m)? {
                return Err(Error::Io);
            }
        }
        for s in self.sb.sb_segs {
            self.write_superblock(s)?;
        }
        let root = Inode {
            ino: ROOT_INO,
            mode: S_IFDIR | (fo.root_mode & 0o7777),
            uid: fo.root_uid,
            gid: fo.root_gid,
            nlink: 2,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            rdev: 0,
            flags: 0,
            generation: 0,
            parent: ROOT_INO,
        };
        self.write_inode(&root, 0)?;
        self.log.open_heads()?;
        self.checkpoint()
    }

    /// Write the superblock at offset 0 of the (erased) segment `s`: a write unit (on a block
    /// device, an FTL page) of it, padded with 0xFF; with an open-segment limit the rest of the
    /// segment is written with 0xFF too (closed at once, it never counts as open).
    fn write_superblock(&mut self, s: u32) -> Result<()> {
        let wu = self.log.geo.write_unit as usize;
        // a write unit, or on a block device the FTL page (a chunk)
        let align = if self.log.pad_to_chunk { (self.log.chunk as usize).max(wu) } else { wu };
        let mut page = P::Vec::new();
        page.try_resize(round_up(SB_FULL_SIZE as u64, align as u64) as usize, 0xFFu8)?;
        self.sb.encode(page.as_mut_slice())?;
        self.log.write_fixed(s, 0, page.as_slice())?;
        if self.log.fill_on_close {
            self.log.fill_to_end(s, page.len() as u32, true)?;
        } else {
            self.log.note_closed(s);
        }
        Ok(())
    }

    /// Rewrite the superblock copy in segment `s` (`sb_refresh`): erase, write, flush. Only
    /// called while the other copy is intact, at the start of a read-write mount's writes
    /// (nothing else is open then: the open-segment limit holds). A cut in between leaves the
    /// other copy, which the next mount finds and refreshes from again. A segment whose erase
    /// fails is retired (bad): the filesystem keeps one copy.
    pub(super) fn refresh_superblock(&mut self, s: u32) -> Result<()> {
        if !self.log.erase(s)? {
            return Ok(());
        }
        if let Ok(mut si) = self.log.seg_mut(s) {
            si.state = segstate::META;
        }
        self.write_superblock(s)?;
        self.log.flash.flush()?;
        self.log.faults.superblock_refreshes = self.log.faults.superblock_refreshes.saturating_add(1);
        Ok(())
    }

    /// MLC NAND (`pairing`: the medium's, with its largest pair distance): whether the
    /// checkpoint slots of `sb` leave, after the blob and its extension, pages enough that
    /// the programs of the next slot share no cell with it (slot k holds its blob in its first
    /// `b` pages; a page shares cells with one at most `dist` pages before it, so slot k + 1,
    /// from page `(k + 1) * slot` on, pairs only with pages from `(k + 1) * slot - dist >=
    /// k * slot + b` on when `slot >= b + dist`). Always true on other media.
    fn mlc_slot_ok(sb: &Superblock, pairing: Option<(crate::engine::flash::Pairing, u32)>) -> bool {
        let Some((_, dist)) = pairing else { return true };
        let wu = u64::from(sb.write_unit.max(1));
        let blob = Self::cp_blob_len(sb.segment_count).saturating_add(crate::engine::format::CP_EXT_SIZE as u64);
        u64::from(sb.cp_slot_size) >= round_up(blob, wu).saturating_add(u64::from(dist).saturating_mul(wu))
    }

    /// Mount the filesystem on `flash`: newest valid checkpoint + roll-forward of the log.
    pub fn mount(flash: F, opts: MountOptions) -> core::result::Result<Self, (Error, F)> {
        let mut eng = Self::open(flash, opts)?;
        match eng.mount_log() {
            Ok(()) => Ok(eng),
            Err(e) => Err((e, eng.log.flash)),
        }
    }

    /// The first half of [`Engine::mount`]: find and check the superblock and build the engine
    /// (nothing replayed yet). The kernel boxes the result before [`Engine::mount_log`], so
    /// the deep call chains of the roll-forward do not run under the frames that held the
    /// engine by value (several KiB each).
    #[inline(never)]
    pub fn open(flash: F, opts: MountOptions) -> core::result::Result<Self, (Error, F)> {
        let geo = flash.geometry();
        if geo.kind == FlashKind::MlcNand && Log::<P, F>::medium_pairing(&flash).is_none() {
            // paired pages cannot be handled without the pairing (see `FlashKind::MlcNand`):
            // refused, read-only too (a read-only mount of an MLC part is safe, but a later
            // remount,rw would not be)
            return Err((Error::NotSupported, flash));
        }
        let mut log: Log<P, F> = Log::new(flash, SegTable::empty(), 0);
        if let Some(bytes) = opts.read_cache_bytes {
            log.set_read_cache_bytes(bytes);
        }
        // the roll-forward reads each record once: a default-sized cache serves it
        log.rcache.limit_growth(Some(READ_CACHE_BYTES));
        // superblock
        let mut sb = None;
        let mut page = P::Vec::new();
        let wu = geo.write_unit.max(1) as usize;
        if let Err(e) = page.try_resize(round_up(SB_FULL_SIZE as u64, wu as u64) as usize, 0u8) {
            return Err((e, log.flash));
        }
        for s in 0..geo.segment_count.min(64) {
            if log.flash.is_bad(s).unwrap_or(true) {
                continue;
            }
            if log.flash.read(s, 0, page.as_mut_slice()).is_err() {
                continue;
            }
            if let Ok(x) = Superblock::decode(page.as_slice()) {
                sb = Some(x);
                break;
            }
        }
        let sb = match sb {
            Some(s) => s,
            None => return Err((Error::BadFormat, log.flash)),
        };
        if sb.version != FORMAT_VERSION
            || sb.incompat & !FEATURE_INCOMPAT_SUPPORTED != 0
            || sb.segment_size != geo.segment_size
            || sb.segment_count != geo.segment_count
            || sb.write_unit != geo.write_unit
            || sb.cp_area_segs as usize > MAX_CP_SEGS
            || sb.cp_area_segs == 0
        {
            return Err((Error::BadFormat, log.flash));
        }
        if let Err(e) = Self::check_superblock(&sb) {
            return Err((e, log.flash));
        }
        if !Self::mlc_slot_ok(&sb, log.pairing) {
            // formatted for SLC: the checkpoint slots are too close for paired pages
            return Err((Error::NotSupported, log.flash));
        }
        if sb.compat & FEATURE_COMPAT_FTL_PAGE != 0 {
            // whole write units that divide the segment (what format records)
            let p = sb.ftl_page;
            if p == 0 || !p.is_multiple_of(sb.write_unit.max(1)) || !sb.segment_size.is_multiple_of(p) {
                return Err((Error::BadFormat, log.flash));
            }
        }
        if sb.compat & FEATURE_COMPAT_OPEN_SEGMENTS != 0 {
            // a limit of 1 would need checkpoints inside the log (not supported); 0 contradicts
            // the feature bit; a huge one is not what any format wrote
            let r = match sb.open_segments {
                1 => Err(Error::NotSupported),
                n if !(OPEN_SEGMENTS_MIN..=OPEN_SEGMENTS_MAX).contains(&n) => Err(Error::BadFormat),
                n => log.set_open_limit(n),
            };
            if let Err(e) = r {
                return Err((e, log.flash));
            }
        }
        // Both copies the superblock names: one that does not read back clean and equal to
        // the one found is rewritten by the mount's first writes (`finish_mount`), while the
        // other copy is intact; one per mount, so that never both are written at once.
        let mut intact = [false; 2];
        let mut fresh = [false; 2];
        for (i, &s) in sb.sb_segs.iter().enumerate() {
            if log.flash.is_bad(s).unwrap_or(true) {
                continue;
            }
            let st = log.flash.read(s, 0, page.as_mut_slice());
            let same = Superblock::decode(page.as_slice()).is_ok_and(|x| x == sb);
            if let (Some(ok), Some(f)) = (intact.get_mut(i), fresh.get_mut(i)) {
                *ok = same && st.is_ok();
                *f = same && st == Ok(ReadStatus::Clean);
                if st == Ok(ReadStatus::Corrected) {
                    log.faults.corrected_reads = log.faults.corrected_reads.saturating_add(1);
                }
            }
        }
        let sb_refresh = match (fresh, intact) {
            ([false, _], [_, true]) if !log.flash.is_bad(sb.sb_segs[0]).unwrap_or(true) => Some(sb.sb_segs[0]),
            ([_, false], [true, _]) if !log.flash.is_bad(sb.sb_segs[1]).unwrap_or(true) => Some(sb.sb_segs[1]),
            _ => None,
        };
        let ro = sb.ro_compat & !FEATURE_RO_COMPAT_SUPPORTED != 0;
        log.set_data_align(sb.data_align);
        log.seed = sb.serial as u32 ^ (sb.serial >> 32) as u32;
        let (cache, dirty) = Self::index_budget(&sb, &opts);
        let mut eng = Self::assemble(log, sb, opts, cache);
        eng.tree.set_dirty_limit(dirty);
        eng.ro_compat_unknown = ro;
        eng.sb_refresh = sb_refresh;
        if ro && !opts.read_only {
            // unknown read-only-compatible features: only a read-only mount is safe
            return Err((Error::ReadOnly, eng.log.flash));
        }
        Ok(eng)
    }

    /// The second half of [`Engine::mount`] on an engine from [`Engine::open`]: the newest
    /// valid checkpoint and the roll-forward of the log. After an error the engine is only
    /// good for giving the medium back (`into_flash`).
    pub fn mount_log(&mut self) -> Result<()> {
        self.mount_inner()?;
        self.log.rcache.limit_growth(None);
        Ok(())
    }

    /// Validate the superblock fields that size allocations, loops and reads at mount (the
    /// version, features and geometry are checked by the caller). The CRC only proves that
    /// the superblock is intact, not that whoever wrote it was honest: every field is
    /// checked against what `format` can produce, with the arithmetic in u64.
    fn check_superblock(sb: &Superblock) -> Result<()> {
        let wu = u64::from(sb.write_unit);
        let ss = u64::from(sb.segment_size);
        if wu == 0 || ss % wu != 0 || ss < 16384 || ss < wu.saturating_mul(4) || sb.segment_count < 16 {
            return Err(Error::BadFormat);
        }
        let area_segs = sb.cp_area_segs as usize;
        if area_segs == 0 || area_segs > MAX_CP_SEGS {
            return Err(Error::BadFormat);
        }
        if sb.incompat & FEATURE_INCOMPAT_ALIGNED_DATA != 0 && !Self::data_align_ok(sb.data_align, sb.segment_size) {
            return Err(Error::BadFormat);
        }
        // the checkpoint blob: exactly CP_HDR_SIZE + one location per segment-table chunk
        let need = Self::cp_blob_len(sb.segment_count);
        let slot = u64::from(sb.cp_slot_size);
        let area = u64::from(sb.cp_area_segs).saturating_mul(ss);
        if slot < need || slot % wu != 0 || slot > area {
            return Err(Error::BadFormat);
        }
        // superblock and checkpoint segments: on the device, all distinct
        let mut seen = [NO_SEG; 2 + 2 * MAX_CP_SEGS];
        let mut n = 0usize;
        let used = sb.sb_segs.iter().chain(sb.cp_segs.iter().flat_map(|a| a.iter().take(area_segs)));
        for &s in used {
            if s >= sb.segment_count || seen.get(..n).is_some_and(|x| x.contains(&s)) {
                return Err(Error::BadFormat);
            }
            if let Some(x) = seen.get_mut(n) {
                *x = s;
            }
            n = n.saturating_add(1);
        }
        Ok(())
    }

    /// The index cache size and dirty limit of a mount with `opts` (0: automatic, see
    /// [`MountOptions`]).
    fn index_budget(sb: &Superblock, opts: &MountOptions) -> (usize, usize) {
        let device = u64::from(sb.segment_count).saturating_mul(u64::from(sb.segment_size));
        let cache = match opts.cache_nodes {
            0 => usize::try_from(device / AUTO_CACHE_BYTES_PER_NODE).unwrap_or(usize::MAX).clamp(AUTO_CACHE_MIN, AUTO_CACHE_MAX),
            n => n,
        };
        let dirty = match opts.dirty_nodes {
            0 => {
                let segs = u64::from((sb.segment_count / 32).max(2));
                let room = segs.saturating_mul(u64::from(sb.segment_size)) / DIRTY_NODE;
                usize::try_from(room).unwrap_or(usize::MAX).min(cache / 4 * 3)
            }
            n => n,
        };
        (cache, dirty)
    }

    /// A data alignment format.md 8.1 allows: a power of two in `DATA_ALIGN_MIN..=DATA_ALIGN_MAX`
    /// dividing the segment, on segments below 2 GiB (aligned locations use bit 31).
    fn data_align_ok(a: u32, segment_size: u32) -> bool {
        a.is_power_of_two() && (DATA_ALIGN_MIN..=DATA_ALIGN_MAX).contains(&a) && segment_size.is_multiple_of(a) && segment_size < LOC_ALIGNED
    }

    /// An engine over `log` and `sb` with empty caches and no checkpoint position yet: the one
    /// place that lists every field, for format and mount alike.
    fn assemble(log: Log<P, F>, sb: Superblock, mut opts: MountOptions, cache_nodes: usize) -> Self {
        if opts.checkpoint_log_bytes == 0 {
            opts.checkpoint_log_bytes = default_checkpoint_log_bytes(log.flash.geometry().kind);
        }
        let mut tree = Tree::new(cache_nodes);
        tree.set_compact(sb.incompat & FEATURE_INCOMPAT_COMPACT_INDEX != 0);
        Engine {
            log,
            tree,
            sb,
            next_ino: ROOT_INO + 1,
            cp_area: 0,
            cp_next_slot: 0,
            buf: P::Vec::new(),
            buf2: P::Vec::new(),
            opts,
            in_checkpoint: false,
            gc_futile: None,
            gc_flat: false,
            segtab_locs: P::Vec::new(),
            segtab_prev_locs: P::Vec::new(),
            segtab_twin: P::Vec::new(),
            segtab_seq: 0,
            dropped: 0,
            replay_ok_ino: 0,
            damage: None,
            mount_pending: false,
            failed_before_ro: false,
            ro_compat_unknown: false,
            reserved: 0,
            icache: P::Vec::new(),
            icache_hits: 0,
            icache_misses: 0,
            inode_records: 0,
            cp_bytes: 0,
            fallback: None,
            replay_fallback: false,
            replay_verify_all: false,
            replay_retry: false,
            replay_lazy: ReplayLazy::default(),
            mount_tails: [(NO_SEG, 0); NUM_HEADS + 1],
            sb_refresh: None,
            cp_scrub: [false; 2],
        }
    }

    /// Write a checkpoint (the `sync` of the VFS).
    pub fn sync(&mut self) -> Result<()> {
        self.checkpoint()
    }

    /// The periodic commit (the kernel's background thread, every `commit=` seconds): make
    /// everything logged durable. On raw flash that is a checkpoint, which keeps the log a mount
    /// after a cut reads short. On a block device a checkpoint costs a device flush and, on a
    /// cheap FTL, rewrites of the erase blocks it interrupts, while reading the log back is
    /// cheap: there the log heads are flushed as `fsync` does, and a checkpoint is taken only
    /// when one is due anyway (the replay window or the dirty index limit reached, a head
    /// without its chain, a failed program). Returns whether it checkpointed.
    pub fn commit(&mut self) -> Result<bool> {
        if self.opts.read_only {
            return Ok(false);
        }
        if self.log.failed {
            return Err(Error::ReadOnly);
        }
        let block = self.log.flash.geometry().kind == FlashKind::Block;
        if !block || self.should_checkpoint() {
            self.checkpoint()?;
            return Ok(true);
        }
        self.flush_log()
    }

    /// Make everything logged durable by flushing the log heads (`fsync`, and the periodic
    /// commit on a block device); a checkpoint instead when a head lost its chain or a program
    /// failed (before or while writing out: relocate, then make everything durable). Returns
    /// whether it checkpointed. Read-only mounts write nothing.
    pub(crate) fn flush_log(&mut self) -> Result<bool> {
        if self.opts.read_only {
            return Ok(false);
        }
        if self.log.failed {
            return Err(Error::ReadOnly);
        }
        if self.log.need_checkpoint || self.log.has_failed_seg() {
            self.checkpoint()?;
            return Ok(true);
        }
        self.log.flush_all()?;
        if self.log.has_failed_seg() {
            self.checkpoint()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Checkpoint and give the medium back (read-only mounts write nothing).
    pub fn unmount(mut self) -> core::result::Result<F, (Error, F)> {
        if self.opts.read_only {
            return Ok(self.log.flash);
        }
        match self.checkpoint() {
            Ok(()) => Ok(self.log.flash),
            Err(e) => Err((e, self.log.flash)),
        }
    }

    /// Give the medium back without writing anything (what a crash leaves behind, modulo
    /// unflushed buffers).
    pub fn into_flash(self) -> F {
        self.log.flash
    }

    /// Borrow the medium (to change it, e.g. to inject faults): the log's read cache is
    /// emptied, since what it holds may no longer be what the medium holds.
    pub fn flash(&mut self) -> &mut F {
        self.log.rcache.clear();
        &mut self.log.flash
    }

    /// Borrow the medium to finish or account the engine's own I/O without changing what it
    /// holds (complete the writes the engine issued, take the discards it queued, read
    /// counters): the log's read cache is kept, since the lines of the pages those writes and
    /// discards touch were dropped when the engine issued them. The kernel calls this at the
    /// end of every engine call; `flash`, which empties the cache, would make every page read
    /// again after each call.
    pub fn flash_io(&mut self) -> &mut F {
        &mut self.log.flash
    }

    /// Look at the medium (its counters, its contents) without changing it.
    pub fn flash_ref(&self) -> &F {
        &self.log.flash
    }

    /// The log's read cache (see `readcache.rs`) since the mount: (line reads served from it,
    /// lines read into it from the medium).
    pub fn read_cache_stats(&self) -> (u64, u64) {
        (self.log.rcache.hits, self.log.rcache.misses)
    }

    /// Lines (write units) of the log's read cache: allocated now, and at most (0: off).
    pub fn read_cache_lines(&self) -> (usize, usize) {
        (self.log.rcache.allocated_lines(), self.log.rcache.capacity_lines())
    }

    /// Bytes programmed by checkpoints since the mount (RAM only): the write-out of the heads'
    /// buffers (their padding, and the records still buffered), the index nodes, the segment
    /// table and the blob.
    pub fn checkpoint_bytes(&self) -> u64 {
        self.cp_bytes
    }

    /// The replay window this mount uses (`MountOptions::checkpoint_log_bytes`, resolved from
    /// the medium when it was 0).
    pub fn checkpoint_log_bytes(&self) -> u64 {
        self.opts.checkpoint_log_bytes
    }

    /// How the last mount's roll-forward read the data records (see [`ReplayLazy`]).
    pub fn replay_lazy(&self) -> ReplayLazy {
        self.replay_lazy
    }

    /// Sequence number of the next record. It changes whenever anything is appended to the
    /// log, so a caller can tell whether a periodic checkpoint has anything to commit.
    pub fn log_seq(&self) -> u64 {
        self.log.next_seq
    }

    /// `log_seq` when the medium was last flushed with everything logged before it (fsync,
    /// checkpoint, `commit`): equal to `log_seq` when nothing logged since is waiting for a flush.
    pub fn flushed_seq(&self) -> u64 {
        self.log.flushed_seq
    }

    /// Whether this medium is a block device (`Engine::commit` then only flushes the log heads,
    /// unless a checkpoint is due).
    pub fn is_block(&self) -> bool {
        self.log.flash.geometry().kind == FlashKind::Block
    }

    /// Whether the next `commit` would checkpoint on a block device (the dirty-node limit or the
    /// replay window reached, or a checkpoint required).
    pub fn checkpoint_due(&self) -> bool {
        self.should_checkpoint() || self.log.need_checkpoint || self.log.has_failed_seg()
    }

    /// The volume serial (mkfs's random serial), e.g. for statfs `f_fsid`.
    pub fn serial(&self) -> u64 {
        self.sb.serial
    }

    /// Fault counters since the mount (corrected and uncorrectable reads, scrubs, failed
    /// programs and erases, other I/O errors).
    pub fn fault_stats(&self) -> crate::engine::log::FaultStats {
        self.log.faults
    }

    /// Statistics counters.
    pub fn stats(&self) -> Stats {
        let mut s = self.log.stats;
        s.free_segments = u64::from(self.log.free_count());
        s.max_open_segments = u64::from(self.log.open_max);
        s.pair_pad_bytes = self.log.pair_pad_bytes;
        s.open_segments = u64::from(self.log.open_now);
        s
    }

    /// The open-segment limit of this filesystem (the superblock's; 0: none) and the log
    /// heads it writes with (3 without a limit or from 4 on, 2 at limit 3, 1 at limit 2).
    pub fn open_segment_limit(&self) -> (u32, u32) {
        let mut n = 0u32;
        for h in 0..NUM_HEADS {
            if self.log.phys.contains(&h) {
                n = n.saturating_add(1);
            }
        }
        (self.log.open_limit, n)
    }

    /// End of a mutating operation: an error returned after the operation's first append
    /// (once the log moved past `log.op_mark`, set by `begin_mutation` when the checks passed)
    /// may leave the RAM index or an open atomic group half done, and the next operation's
    /// records would close that group. Stop writing (fail-stop, see [`Engine::failure`]):
    /// nothing more reaches the medium, and the next mount drops the incomplete group.
    /// Errors before the first append (checks, lookups, a full filesystem) leave everything
    /// as it was and the engine writable.
    pub(crate) fn end_op<T>(&mut self, r: Result<T>) -> Result<T> {
        let mark = core::mem::replace(&mut self.log.op_mark, u64::MAX);
        if let Err(e) = &r {
            if mark != u64::MAX && self.log.next_seq != mark && !self.opts.read_only {
                self.log.stop(*e);
            }
        }
        r
    }

    /// Why the engine stopped writing (fail-stop), for the one message the caller prints:
    /// the error of the operation that failed half way (`NoMem`, `Corrupt` from an unreadable
    /// index node, ...) or the I/O error of the medium (`Io`, `PowerCut`). `None` while the
    /// engine writes (and on a read-only mount that never wrote).
    pub fn failure(&self) -> Option<Error> {
        if !self.log.failed || self.opts.read_only {
            return None;
        }
        Some(self.log.fail_cause.unwrap_or(Error::Io))
    }

    /// Whether the engine stopped accepting writes after an I/O failure.
    pub fn is_failed(&self) -> bool {
        self.log.failed && !self.opts.read_only
    }

    /// Whether the filesystem was mounted read-only.
    pub fn is_read_only(&self) -> bool {
        self.opts.read_only
    }

    /// Number of index nodes cached in RAM.
    pub fn cached_nodes(&self) -> usize {
        self.tree.cached()
    }

    /// The index cache's capacity in nodes and the dirty-node count at which a checkpoint is
    /// taken (what `MountOptions::cache_nodes` and `dirty_nodes` resolved to).
    pub fn index_cache_limits(&self) -> (usize, usize) {
        (self.tree.capacity(), self.tree.dirty_limit())
    }

    /// Start a mutating operation: refuse it on a stopped engine, checkpoint if due, run the
    /// foreground GC until `min_free` (plus the segment table, and never below what a mount
    /// needs) segments are free, then mark the log position its records start at (`end_op`).
    pub(super) fn begin_mutation(&mut self, min_free: u32) -> Result<()> {
        if self.log.failed {
            return Err(Error::ReadOnly);
        }
        self.maybe_commit()?;
        // never below what the next mount needs (deletions run down to this floor)
        let need = min_free.saturating_add(self.cp_segments()).max(self.mount_floor());
        self.ensure_space(need)?;
        // from here on the operation's own records follow: see `end_op`
        self.log.op_mark = self.log.next_seq;
        Ok(())
    }
}
