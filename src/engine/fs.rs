//! The filesystem object: format, mount, checkpoint, recovery, garbage collection, statistics.
//! POSIX operations are in `posix.rs`.

use crate::engine::codec::{Reader, Writer};
use crate::engine::error::{Error, Result};
use crate::engine::flash::{Flash, FlashKind};
use crate::engine::format::{
    get_seginfo, kind, put_seginfo, rtype, segstate, CpHeader, Inode, Key, Loc, RecHdr, SegInfo,
    Stats, Superblock, Timespec, CP_HDR_SIZE, SEGTAB_ENTRIES, FEATURE_COMPAT, FEATURE_COMPAT_FTL_PAGE, FEATURE_COMPAT_OPEN_SEGMENTS, FEATURE_INCOMPAT_HASHED_DIRS,
    FEATURE_INCOMPAT_SUPPORTED, FEATURE_RO_COMPAT_SUPPORTED, FLAG_CONT, FLAG_SYNC, FORMAT_VERSION,
    HEAD_COLD, HEAD_META, INODE_SIZE, MAX_CP_SEGS, NO_SEG, NUM_HEADS, REC_HDR,
    OPEN_SEGMENTS_MAX, OPEN_SEGMENTS_MIN, SB_FULL_SIZE, SEGINFO_SIZE, S_IFDIR,
};
use crate::engine::index::Tree;
use crate::engine::log::{Log, Scan, SEG_DEAD_CP, SEG_RAM_FLAGS, SEG_RETIRE, SEG_SCRUB, SEG_STUCK};
use crate::engine::platform::{FallibleVec, Platform};

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
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions { serial: 0x5eed_f00d, root_uid: 0, root_gid: 0, root_mode: 0o755, open_segments: None }
    }
}

/// Default open-segment limit of a block device (one log head and the checkpoint area: what
/// cheap SD/CF FTLs with few open allocation units sustain).
pub const DEFAULT_BLOCK_OPEN_SEGMENTS: u32 = 2;

/// Options for [`Engine::mount`].
#[derive(Debug, Clone, Copy)]
pub struct MountOptions {
    /// Maximum number of index nodes cached in RAM (each about 2 KiB).
    pub cache_nodes: usize,
    /// Static wear levelling threshold: when the erase-count spread exceeds it, background GC
    /// moves the least-worn full segment.
    pub wear_threshold: u32,
    /// Take a checkpoint once this many bytes were appended to the log since the last one:
    /// bounds the roll-forward work (and so the mount time) after a crash.
    pub checkpoint_log_bytes: u64,
    /// Mount read-only: recover in RAM only and never write to the medium (for `ro` mounts,
    /// fsck and dump tools). Every mutation returns `ReadOnly`. The index cache may grow up to
    /// 8x `cache_nodes` to hold what the log since the checkpoint changed.
    pub read_only: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions { cache_nodes: 256, wear_threshold: 1000, checkpoint_log_bytes: 8 << 20, read_only: false }
    }
}

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

/// Segments always kept free for the metadata, the GC and the checkpoint of a full filesystem.
pub const RESERVE_SEGS: u32 = 6;
/// Segments kept free below which even deletions are refused.
pub const RESERVE_DELETE: u32 = 2;
/// Extra segments the foreground GC frees per checkpoint (hysteresis), at least.
pub const GC_BATCH: u32 = 4;
/// The foreground GC refuses victims more than this percentage live.
pub const GC_MAX_LIVE: u32 = 90;
/// Cleaning ahead of need (free segments above the need) takes victims at most this live.
pub const GC_AHEAD_MAX_LIVE: u32 = 75;

/// A mounted ferrofs filesystem.
pub struct Engine<P: Platform, F: Flash> {
    pub(crate) log: Log<P, F>,
    pub(crate) tree: Tree<P>,
    pub(crate) sb: Superblock,
    pub(crate) next_ino: u64,
    cp_area: usize,
    cp_next_slot: u32,
    pub(crate) buf: P::Vec<u8>,
    pub(crate) buf2: P::Vec<u8>,
    pub(crate) opts: MountOptions,
    pub(crate) in_checkpoint: bool,
    /// Segments holding the segment table of the newest checkpoint: never freed before the
    /// next checkpoint.
    pub(crate) pinned: P::Vec<u32>,
    /// Records the last mount's roll-forward dropped: after a gap in the sequence numbers, of an
    /// incomplete group, or of an inode without an inode record.
    dropped: u64,
    /// Roll-forward: the last inode found to exist (0 = none), reset by every DELETE.
    replay_ok_ino: u64,
    /// Damage the last mount found in the log (the mount is then read-only for good).
    damage: Option<LogDamage>,
    /// Mounted read-only: the end of the mount (orphans, new heads, first checkpoint) is
    /// still to do before the first write (see [`Engine::set_read_only`]).
    mount_pending: bool,
    /// `log.failed` as it was when a read-write mount turned read-only.
    failed_before_ro: bool,
    /// Unknown read-only-compatible features: never writable.
    ro_compat_unknown: bool,
    /// Bytes reserved outside the engine (write-back budget, see `writeback.rs`).
    pub(crate) reserved: u64,
    /// The inode cache (`writeback.rs`): fixed size, allocated on first use.
    pub(crate) icache: P::Vec<crate::engine::writeback::ICacheSlot>,
    pub(crate) icache_hits: u64,
    pub(crate) icache_misses: u64,
    /// Inode records written since the mount (measurements).
    pub(crate) inode_records: u64,
    /// The last mount could not load the newest checkpoint and used an older one.
    fallback: Option<CpFallback>,
    /// Roll-forward from an older checkpoint: every gap ends it (see `load_checkpoint`).
    replay_fallback: bool,
    /// Half-written segments the mount found (the heads' last segments: (segment, offset of
    /// the end of their valid records rounded up to a write unit); the checkpoint area's
    /// current segment): written to their end before anything else when the medium is a
    /// block device with an open-segment limit (`finish_mount`).
    mount_tails: [(u32, u32); NUM_HEADS + 1],
}

/// The mount could not load the newest checkpoint (a bad page in its blob, its segment table,
/// its index root, or a read error in its roll-forward) and mounted an older one: what was
/// written after the newer checkpoint is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpFallback {
    /// Sequence number of the newest checkpoint found (not loadable), 0 when its header
    /// itself could not be read.
    pub newest: u64,
    /// Sequence number of the checkpoint mounted.
    pub used: u64,
    /// Records after the gap that ended the roll-forward (dropped).
    pub dropped: u64,
}

fn round_up(v: u64, m: u64) -> u64 {
    if m == 0 {
        v
    } else {
        v.div_ceil(m).saturating_mul(m)
    }
}

impl<P: Platform, F: Flash> Engine<P, F> {
    // ------------------------------------------------------------------ format

    /// Create a new, empty filesystem on `flash` (mkfs). Returns the flash.
    pub fn format(mut flash: F, fo: &FormatOptions, now: Timespec) -> core::result::Result<F, (Error, F)> {
        let geo = flash.geometry();
        if geo.kind == FlashKind::MlcNand {
            // paired pages are not handled (see `FlashKind::MlcNand`)
            return Err((Error::NotSupported, flash));
        }
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
        let blob = CP_HDR_SIZE as u64 + u64::from(chunks) * Loc::SIZE as u64;
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
        let mut compat = FEATURE_COMPAT;
        if limit != 0 {
            compat |= FEATURE_COMPAT_OPEN_SEGMENTS;
        }
        if ftl_page != 0 {
            compat |= FEATURE_COMPAT_FTL_PAGE;
        }
        let sb = Superblock {
            open_segments: limit,
            ftl_page,
            version: FORMAT_VERSION,
            compat,
            incompat: FEATURE_INCOMPAT_HASHED_DIRS,
            ro_compat: 0,
            kind: match geo.kind {
                FlashKind::Nand => 0,
                FlashKind::Nor => 1,
                FlashKind::Block => 2,
                FlashKind::MlcNand => return Err((Error::NotSupported, flash)),
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
        let mut log: Log<P, F> = Log::new(flash, segs, fo.serial as u32 ^ (fo.serial >> 32) as u32);
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
        let wu = self.log.geo.write_unit as usize;
        // a write unit, or on a block device the FTL page (a chunk)
        let align = if self.log.pad_to_chunk { (self.log.chunk as usize).max(wu) } else { wu };
        let mut page = P::Vec::new();
        page.try_resize(round_up(SB_FULL_SIZE as u64, align as u64) as usize, 0xFFu8)?;
        self.sb.encode(page.as_mut_slice())?;
        for s in self.sb.sb_segs {
            self.log.write_fixed(s, 0, page.as_slice())?;
            if self.log.fill_on_close {
                // written once: closed at once, so that it never counts as open
                self.log.fill_to_end(s, page.len() as u32, true)?;
            } else {
                self.log.note_closed(s);
            }
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

    // ------------------------------------------------------------------ mount

    /// Mount the filesystem on `flash`: newest valid checkpoint + roll-forward of the log.
    pub fn mount(flash: F, opts: MountOptions) -> core::result::Result<Self, (Error, F)> {
        let geo = flash.geometry();
        if geo.kind == FlashKind::MlcNand {
            // paired pages are not handled (see `FlashKind::MlcNand`): refused, read-only too
            // (a read-only mount of an MLC part is safe, but a later remount,rw would not be)
            return Err((Error::NotSupported, flash));
        }
        let mut log: Log<P, F> = Log::new(flash, P::Vec::new(), 0);
        // superblock
        let mut sb = None;
        let mut page = P::Vec::new();
        let wu = geo.write_unit.max(1) as usize;
        if let Err(e) = page.try_resize(round_up(SB_FULL_SIZE as u64, wu as u64) as usize, 0u8) {
            return Err((e, log.flash));
        }
        let mut bad_format = false;
        for s in 0..geo.segment_count.min(64) {
            if log.flash.is_bad(s).unwrap_or(true) {
                continue;
            }
            if log.flash.read(s, 0, page.as_mut_slice()).is_err() {
                continue;
            }
            match Superblock::decode(page.as_slice()) {
                Ok(x) => {
                    sb = Some(x);
                    break;
                }
                Err(Error::BadFormat) => bad_format = true,
                Err(_) => {}
            }
            let _ = bad_format;
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
        let ro = sb.ro_compat & !FEATURE_RO_COMPAT_SUPPORTED != 0;
        log.seed = sb.serial as u32 ^ (sb.serial >> 32) as u32;
        let mut eng = Self::assemble(log, sb, opts, opts.cache_nodes);
        eng.ro_compat_unknown = ro;
        if ro && !opts.read_only {
            // unknown read-only-compatible features: only a read-only mount is safe
            return Err((Error::ReadOnly, eng.log.flash));
        }
        match eng.mount_inner() {
            Ok(()) => Ok(eng),
            Err(e) => Err((e, eng.log.flash)),
        }
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

    /// An engine over `log` and `sb` with empty caches and no checkpoint position yet: the one
    /// place that lists every field, for format and mount alike.
    fn assemble(log: Log<P, F>, sb: Superblock, opts: MountOptions, cache_nodes: usize) -> Self {
        Engine {
            log,
            tree: Tree::new(cache_nodes),
            sb,
            next_ino: ROOT_INO + 1,
            cp_area: 0,
            cp_next_slot: 0,
            buf: P::Vec::new(),
            buf2: P::Vec::new(),
            opts,
            in_checkpoint: false,
            pinned: P::Vec::new(),
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
            fallback: None,
            replay_fallback: false,
            mount_tails: [(NO_SEG, 0); NUM_HEADS + 1],
        }
    }

    /// Length of a checkpoint blob for `segments` segments.
    fn cp_blob_len(segments: u32) -> u64 {
        CP_HDR_SIZE as u64 + u64::from(crate::engine::format::segtab_chunks(segments)) * Loc::SIZE as u64
    }

    fn slots_per_area(&self) -> u32 {
        let area = u64::from(self.sb.cp_area_segs) * u64::from(self.sb.segment_size);
        (area / u64::from(self.sb.cp_slot_size.max(1))) as u32
    }

    /// Read `out.len()` bytes of checkpoint area `a` at linear offset `off`.
    /// The piece of a `len`-byte access at linear offset `off` of checkpoint area `a` that
    /// starts `done` bytes in: (segment, offset in it, length), stopping at the segment's end.
    fn cp_piece(&self, a: usize, off: u64, done: usize, len: usize) -> Result<(u32, u32, usize)> {
        let ss = u64::from(self.sb.segment_size);
        if ss == 0 {
            return Err(Error::Corrupt);
        }
        let pos = off.saturating_add(done as u64);
        let so = (pos % ss) as u32;
        let seg = *self.sb.cp_segs.get(a).and_then(|x| x.get((pos / ss) as usize)).ok_or(Error::Corrupt)?;
        let n = (ss.saturating_sub(u64::from(so)) as usize).min(len.saturating_sub(done));
        Ok((seg, so, n))
    }

    fn cp_read(&mut self, a: usize, off: u64, out: &mut [u8]) -> Result<()> {
        let mut done = 0usize;
        while done < out.len() {
            let (seg, so, n) = self.cp_piece(a, off, done, out.len())?;
            self.log.flash.read(seg, so, out.get_mut(done..done + n).ok_or(Error::Corrupt)?)?;
            done = done.saturating_add(n);
        }
        Ok(())
    }

    fn cp_write(&mut self, a: usize, off: u64, data: &[u8]) -> Result<()> {
        let mut done = 0usize;
        while done < data.len() {
            let (seg, so, n) = self.cp_piece(a, off, done, data.len())?;
            self.log.write_fixed(seg, so, data.get(done..done + n).ok_or(Error::Corrupt)?)?;
            done = done.saturating_add(n);
        }
        Ok(())
    }

    fn mount_inner(&mut self) -> Result<()> {
        // 1. newest valid checkpoint
        let slots = self.slots_per_area();
        let slot_size = u64::from(self.sb.cp_slot_size);
        // Only the blob's own length is read (validated against the slot size at mount), in
        // a heap buffer (MTD drivers may DMA into it).
        let blob_len = usize::try_from(Self::cp_blob_len(self.sb.segment_count)).map_err(|_| Error::BadFormat)?;
        let mut blob = P::Vec::new();
        blob.try_resize(blob_len.max(CP_HDR_SIZE), 0u8)?;
        // One pass over the slots collects the candidate headers; the newest are then
        // validated, each once (not one pass over every slot per candidate).
        let mut cands: P::Vec<(u64, u8, u32)> = P::Vec::new();
        // per area, the last slot that was written but holds no readable header (a torn or
        // damaged checkpoint): a valid checkpoint before it is not the newest one
        let mut last_bad: [Option<u32>; 2] = [None, None];
        // per area, the slots written since its last erase: the run of valid headers with
        // increasing sequence numbers from slot 0 (stale slots of an earlier round after it
        // have lower ones): (slots in the run, sequence of its last)
        let mut run: [(u32, u64, bool); 2] = [(0, 0, true); 2];
        for a in 0..2u8 {
            for s in 0..slots {
                let hb = blob.as_mut_slice().get_mut(..CP_HDR_SIZE).ok_or(Error::Corrupt)?;
                if self.cp_read(usize::from(a), u64::from(s) * slot_size, hb).is_err() {
                    if let Some(x) = last_bad.get_mut(usize::from(a)) {
                        *x = Some(s);
                    }
                    continue;
                }
                let erased = hb.iter().all(|&b| b == 0xFF);
                let decoded = CpHeader::decode(&mut Reader::new(hb));
                if let Some(r) = run.get_mut(usize::from(a)) {
                    match decoded {
                        Ok((ref h, _)) if r.2 && h.serial == self.sb.serial && (r.0 == 0 || h.seq > r.1) => {
                            *r = (r.0.saturating_add(1), h.seq, true);
                        }
                        _ => r.2 = false,
                    }
                }
                match decoded {
                    Ok((h, _)) if h.serial == self.sb.serial => cands.try_push((h.seq, a, s))?,
                    _ if !erased => {
                        if let Some(x) = last_bad.get_mut(usize::from(a)) {
                            *x = Some(s);
                        }
                    }
                    _ => {}
                }
            }
        }
        // newest first, at most CP_TRIES of them (no sort: it could panic on a bad order)
        const CP_TRIES: u32 = 16;
        let mut below = u64::MAX;
        // The newest valid checkpoint whose segment table, index root and log after it read
        // back; when one does not (a bad page in its metadata), the one before it: its
        // segments are kept until the next checkpoint is written (see SEG_DEAD_CP), and the
        // roll-forward from it stops at the first missing record (at the latest the newer
        // checkpoint's own number), so at most what came after the newer one is lost.
        let mut newest: Option<u64> = None;
        let mut loaded = false;
        let mut last_err = Error::Corrupt;
        for _ in 0..CP_TRIES {
            let mut best: Option<(u64, u8, u32)> = None;
            for &c in cands.as_slice() {
                if c.0 < below && best.is_none_or(|b| c.0 > b.0) {
                    best = Some(c);
                }
            }
            let Some((seq, a, s)) = best else { break };
            below = seq;
            if newest.is_none() {
                newest = Some(seq);
            }
            if self.cp_read(usize::from(a), u64::from(s) * slot_size, blob.as_mut_slice()).is_err() {
                continue;
            }
            let h = match self.validate_cp(blob.as_slice()) {
                Ok(h) => h,
                Err(_) => continue,
            };
            // a written but unreadable slot after this one in its area, or in the other area
            // when that holds no valid checkpoint at all (it was erased for a newer one)
            let other = 1 - usize::from(a).min(1);
            let other_valid = cands.as_slice().iter().any(|c| usize::from(c.1) == other);
            let later_bad = last_bad.get(usize::from(a)).copied().flatten().is_some_and(|b| b > s)
                || (!other_valid && last_bad.get(other).copied().flatten().is_some());
            let fallback = newest != Some(h.seq) || later_bad;
            match self.load_checkpoint(h, usize::from(a), blob.as_slice(), fallback) {
                Ok(()) => {
                    // the area's segment holding the end of its run of written slots
                    let end = u64::from(run.get(usize::from(a)).map(|r| r.0).unwrap_or(0)).saturating_mul(slot_size);
                    let ss = u64::from(self.sb.segment_size.max(1));
                    let idx = (end / ss) as usize;
                    if let (Some(&seg), Some(t)) = (
                        self.sb.cp_segs.get(usize::from(a)).and_then(|x| x.get(idx)).filter(|_| idx < self.sb.cp_area_segs as usize),
                        self.mount_tails.get_mut(NUM_HEADS),
                    ) {
                        if end % ss != 0 {
                            *t = (seg, (end % ss) as u32);
                        }
                    }
                    if fallback {
                        // (0: the newer checkpoint's header itself is unreadable)
                        let nw = if newest == Some(h.seq) { 0 } else { newest.unwrap_or(0) };
                        self.fallback = Some(CpFallback { newest: nw, used: h.seq, dropped: self.dropped });
                        // the next checkpoint must rank above the one that failed to load
                        self.log.next_seq = self.log.next_seq.max(nw.saturating_add(1));
                    }
                    loaded = true;
                    break;
                }
                // unreadable or damaged metadata of this checkpoint: try the one before
                Err(e @ (Error::Corrupt | Error::Io)) => {
                    last_err = e;
                    self.reset_for_reload();
                }
                Err(e) => return Err(e),
            }
        }
        drop(cands);
        drop(blob);
        if !loaded {
            return Err(last_err);
        }
        if self.damage.is_some() {
            // durable records were lost in the middle of the log: what follows was recovered,
            // but the state is not one the operations produced. Never write on top of it.
            self.opts.read_only = true;
        }
        if self.opts.read_only {
            // nothing may be written: keep the replayed changes in RAM
            self.tree.set_replay(true);
            self.log.failed = true;
            self.mount_pending = true;
            return Ok(());
        }
        match self.finish_mount() {
            // The medium failed under these writes (e.g. a worn-out block of a checkpoint area,
            // which every mount erases and which cannot be relocated): recovery is complete in
            // RAM, so serve it read-only (`is_failed`) instead of refusing the mount.
            Err(Error::Io) if self.log.failed => {
                self.tree.set_replay(true);
                Ok(())
            }
            r => r,
        }
    }

    /// Load checkpoint `cp` (from area `a`, blob `blob`): its segment table and index root,
    /// then roll the log after it forward. With `fallback` (an older checkpoint, the newest
    /// could not be loaded), every gap in the sequence numbers ends the roll-forward (the
    /// newer checkpoint's own number is one): what follows belongs to after the newer
    /// checkpoint and is dropped rather than reported as damage.
    fn load_checkpoint(&mut self, cp: CpHeader, a: usize, blob: &[u8], fallback: bool) -> Result<()> {
        // The slots after the newest valid checkpoint may hold a torn write: never program
        // them again; the next checkpoint goes to the other area (erased first).
        self.cp_area = a;
        self.cp_next_slot = u32::MAX;
        // segment table, from the SEGTAB records the checkpoint names
        {
            let chunks = crate::engine::format::segtab_chunks(cp.seg_count);
            let mut locs: P::Vec<Loc> = P::Vec::new();
            {
                let mut r = Reader::new(blob.get(CP_HDR_SIZE..).ok_or(Error::Corrupt)?);
                for _ in 0..chunks {
                    locs.try_push(Loc::get(&mut r)?)?;
                }
            }
            let mut segs: P::Vec<SegInfo> = P::Vec::new();
            let mut rec = P::Vec::new();
            for (i, l) in (0..chunks).zip(locs.as_slice().iter()) {
                let h = self.log.read_record(*l, &mut rec)?;
                if h.rtype != rtype::SEGTAB || h.key != Key::new(0, 0, u64::from(i)) {
                    return Err(Error::Corrupt);
                }
                let mut r = Reader::new(rec.as_slice().get(REC_HDR..).ok_or(Error::Corrupt)?);
                let first = r.u32()?;
                let count = u32::from(r.u16()?);
                if first != i.saturating_mul(SEGTAB_ENTRIES) || count > SEGTAB_ENTRIES {
                    return Err(Error::Corrupt);
                }
                for _ in 0..count {
                    let mut si = get_seginfo(&mut r)?;
                    if si.state > segstate::META || si.live > self.sb.segment_size {
                        return Err(Error::Corrupt);
                    }
                    if si.state == segstate::OPEN {
                        si.state = segstate::FULL;
                    }
                    segs.try_push(si)?;
                }
            }
            if segs.len() != cp.seg_count as usize {
                return Err(Error::Corrupt);
            }
            for si in segs.as_mut_slice() {
                si.flags &= !SEG_RAM_FLAGS;
            }
            self.log.segs = segs;
            self.log.reset_open();
            self.pinned.clear();
            for l in locs.as_slice() {
                let si = self.log.seg_mut(l.seg)?;
                if si.state == segstate::FREE || si.state == segstate::RESERVED {
                    si.state = segstate::FULL;
                }
                if !self.pinned.as_slice().contains(&l.seg) {
                    self.pinned.try_push(l.seg)?;
                }
            }
            // the heads' segments may have been opened after the table was captured
            for hs in cp.heads.iter().filter(|h| h.seg != NO_SEG) {
                let si = self.log.seg_mut(hs.seg)?;
                si.state = segstate::FULL;
                si.seq = hs.seg_seq;
            }
            // Segments the table records full and dead were dead at this checkpoint: the
            // next checkpoint may free them. (Not the heads' segments: the log after this
            // checkpoint starts there.)
            let n = self.log.segs.len() as u32;
            for i in 0..n {
                let keep = self.pinned.as_slice().contains(&i) || cp.heads.iter().any(|h| h.seg == i);
                if let Some(si) = self.log.segs.as_mut_slice().get_mut(i as usize) {
                    si.flags &= !SEG_DEAD_CP;
                    if si.state == segstate::FULL && si.live == 0 && !keep {
                        si.flags |= SEG_DEAD_CP;
                    }
                }
            }
        }
        self.log.next_seq = cp.next_seq.max(cp.seq.saturating_add(1));
        self.log.stats = cp.stats;
        self.next_ino = cp.next_ino.max(ROOT_INO + 1);
        self.tree.set_root(if cp.has_root { Some((cp.root, cp.root_level)) } else { None });
        // the index root and the path to the first leaf must read back (cheap: a node per level)
        self.tree.set_replay(true);
        let first = self.idx_next(&Key::default());
        self.tree.set_replay(false);
        first?;
        self.replay_fallback = fallback;
        // 2. chains of segments written after the checkpoint
        let mut streams: [Stream; NUM_HEADS] = [Stream::default(); NUM_HEADS];
        let mut chains: P::Vec<(u32, u64)> = P::Vec::new();
        for (h, st) in streams.iter_mut().enumerate() {
            let hs = cp.heads.get(h).copied().unwrap_or_default();
            st.chain_start = chains.len();
            if hs.seg == NO_SEG {
                st.chain_end = chains.len();
                if hs.next != NO_SEG {
                    self.release_reserved(hs.next)?;
                }
                continue;
            }
            if hs.off > self.sb.segment_size {
                return Err(Error::Corrupt);
            }
            chains.try_push((hs.seg, hs.seg_seq))?;
            let (mut cur, mut cur_seq, mut next) = (hs.seg, hs.seg_seq, hs.next);
            let mut guard = 0u32;
            while next != NO_SEG && guard < self.sb.segment_count {
                guard += 1;
                let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
                let r = self.log.read_seghdr(next, &mut tmp);
                self.buf = tmp;
                match r? {
                    Some((sq, head, prev, nn)) if sq > cur_seq && prev == cur && head as usize == h => {
                        let si = self.log.seg_mut(next)?;
                        si.state = segstate::FULL;
                        si.seq = sq;
                        si.live = 0;
                        chains.try_push((next, sq))?;
                        cur = next;
                        cur_seq = sq;
                        next = nn;
                    }
                    _ => {
                        self.release_reserved(next)?;
                        break;
                    }
                }
            }
            if guard >= self.sb.segment_count {
                return Err(Error::Corrupt);
            }
            if next != NO_SEG {
                self.release_reserved(next)?;
            }
            st.chain_end = chains.len();
            st.idx = st.chain_start;
            st.off = hs.off;
        }
        // any other reserved segment goes back to the free pool
        for s in self.log.segs.as_mut_slice() {
            if s.state == segstate::RESERVED {
                s.state = segstate::FREE;
            }
        }
        // 3. roll forward
        self.tree.set_replay(true);
        let replayed = self.replay(&mut streams, chains.as_slice(), cp.seq, cp.next_seq)?;
        self.tree.set_replay(false);
        self.replay_fallback = false;
        self.log.stats.replayed = replayed;
        // 4. where each head's last segment ends (only needed to close it, see `finish_mount`)
        self.mount_tails = [(NO_SEG, 0); NUM_HEADS + 1];
        if self.log.fill_on_close {
            let wu = self.log.geo.write_unit.max(1);
            for (h, st) in streams.iter().enumerate() {
                if st.chain_end <= st.chain_start {
                    continue;
                }
                let last = st.chain_end - 1;
                let (seg, seg_seq) = *chains.as_slice().get(last).ok_or(Error::Corrupt)?;
                let mut off = if last == st.chain_start { cp.heads.get(h).map(|x| x.off).unwrap_or(0) } else { 0 };
                let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
                let mut guard = self.sb.segment_size;
                let r = loop {
                    match self.log.scan_at(seg, off, seg_seq, &mut tmp) {
                        Ok(Scan::Rec(_, l)) if guard > 0 => {
                            guard = guard.saturating_sub(1);
                            off = l.off.saturating_add(l.len);
                        }
                        Ok(_) => break Ok(()),
                        Err(e) => break Err(e),
                    }
                };
                self.buf = tmp;
                r?;
                let from = off.div_ceil(wu).saturating_mul(wu);
                if let Some(t) = self.mount_tails.get_mut(h) {
                    *t = (seg, from);
                }
            }
        }
        Ok(())
    }

    /// Forget what a failed `load_checkpoint` set up, before the next candidate.
    fn reset_for_reload(&mut self) {
        self.tree.set_replay(false);
        self.tree.set_root(None);
        self.log.segs.clear();
        self.pinned.clear();
        self.dropped = 0;
        self.damage = None;
        self.replay_ok_ino = 0;
        self.replay_fallback = false;
    }

    /// The writing part of a mount: reclaim orphans, open new heads (torn tails are never
    /// programmed again), checkpoint so the next mount starts here.
    fn finish_mount(&mut self) -> Result<()> {
        self.tree.set_replay(false);
        if self.log.fill_on_close {
            // Close what the previous mount left half-written before anything opens: the
            // heads' last segments (their torn tails are never used for records again) and
            // the checkpoint area's current segment (the first checkpoint goes to the other
            // area). 0xFF reads as the end of the records and as an erased slot.
            let tails = self.mount_tails;
            let ss = self.sb.segment_size;
            for &(seg, _) in tails.iter().filter(|t| t.0 != NO_SEG && t.1 < ss) {
                self.log.mark_open(seg);
            }
            for (i, &(seg, from)) in tails.iter().enumerate().filter(|t| t.1 .0 != NO_SEG) {
                self.log.fill_to_end(seg, from, i == NUM_HEADS)?;
                self.log.note_closed(seg);
            }
            self.mount_tails = [(NO_SEG, 0); NUM_HEADS + 1];
        }
        let all_heads = (2 * NUM_HEADS as u32).saturating_add(self.segtab_segments());
        if self.log.free_count() < all_heads && self.pending_free() > 0 {
            // Short of free segments (a crash on a full device): a checkpoint first (it opens
            // the metadata head only) turns the segments whose records all died into free ones.
            self.checkpoint()?;
        }
        self.reclaim_orphans()?;
        if self.log.free_count() >= all_heads {
            self.log.open_heads()?;
        }
        // otherwise the data heads open on their first record (not chained: the next fsync
        // checkpoints), and torn tails are never programmed again either way
        self.checkpoint()
    }

    /// Switch between read-only and read-write at run time (`mount -o remount,ro|rw`).
    ///
    /// To read-only: checkpoint (everything reaches the medium), then refuse every mutation
    /// with `ReadOnly` and write nothing, `unmount` included. To read-write: after a
    /// read-only mount, finish the mount (orphans, new heads, a checkpoint); after a
    /// read-write mount turned read-only, simply resume. Refused (`ReadOnly`, nothing
    /// changed) when the volume has unknown read-only features, and (`Corrupt`) when the
    /// mount found damage in the log (see [`Engine::log_damage`]). A failed checkpoint on
    /// the way to read-only still leaves the engine read-only, and returns the error.
    pub fn set_read_only(&mut self, ro: bool) -> Result<()> {
        if ro == self.opts.read_only {
            return Ok(());
        }
        if ro {
            let r = if self.log.failed { Ok(()) } else { self.checkpoint() };
            self.failed_before_ro = self.log.failed;
            self.log.failed = true;
            self.opts.read_only = true;
            return r;
        }
        if self.damage.is_some() {
            return Err(Error::Corrupt);
        }
        if self.ro_compat_unknown {
            return Err(Error::ReadOnly);
        }
        if self.mount_pending {
            self.log.failed = false;
            self.opts.read_only = false;
            if let Err(e) = self.finish_mount() {
                // leave the engine read-only; the in-RAM replay state stays usable for reads
                self.tree.set_replay(true);
                self.log.failed = true;
                self.opts.read_only = true;
                return Err(e);
            }
            self.mount_pending = false;
            return Ok(());
        }
        self.log.failed = self.failed_before_ro;
        self.opts.read_only = false;
        Ok(())
    }

    /// Report the places of the newest checkpoint's metadata as `(segment, offset, length)`:
    /// its blob's slot in the checkpoint area, each segment-table record, and the index root
    /// node (valid right after a checkpoint). For tests and tools (scrubbing, corruption
    /// tests); reads the blob back from the medium.
    pub fn checkpoint_metadata(&mut self, f: &mut dyn FnMut(u32, u32, u32)) -> Result<()> {
        let slot = self.cp_next_slot.checked_sub(1).ok_or(Error::Invalid)?;
        if slot >= self.slots_per_area() {
            return Err(Error::Invalid);
        }
        let ss = u64::from(self.sb.segment_size.max(1));
        let off = u64::from(slot) * u64::from(self.sb.cp_slot_size);
        let a = self.cp_area;
        let mut blob: P::Vec<u8> = P::Vec::new();
        blob.try_resize(usize::try_from(Self::cp_blob_len(self.sb.segment_count)).map_err(|_| Error::Invalid)?, 0)?;
        self.cp_read(a, off, blob.as_mut_slice())?;
        // the slot may span segments of the area
        let mut done = 0u64;
        let len = u64::from(self.sb.cp_slot_size);
        while done < len {
            let pos = off + done;
            let seg = *self.sb.cp_segs.get(a).and_then(|x| x.get((pos / ss) as usize)).ok_or(Error::Corrupt)?;
            let n = (ss - pos % ss).min(len - done);
            f(seg, (pos % ss) as u32, n as u32);
            done += n;
        }
        let h = self.validate_cp(blob.as_slice())?;
        let chunks = crate::engine::format::segtab_chunks(h.seg_count);
        let mut r = Reader::new(blob.as_slice().get(CP_HDR_SIZE..).ok_or(Error::Corrupt)?);
        for _ in 0..chunks {
            let l = Loc::get(&mut r)?;
            f(l.seg, l.off, l.len);
        }
        if h.has_root {
            f(h.root.seg, h.root.off, h.root.len);
        }
        Ok(())
    }

    /// Whether the last mount fell back to an older checkpoint because the newest one could
    /// not be loaded (the caller reports it: what came after the newer checkpoint is lost).
    pub fn checkpoint_fallback(&self) -> Option<CpFallback> {
        self.fallback
    }

    /// Damage found in the log by the mount (durable records lost in the middle of the log,
    /// valid records after them): the mount recovered what follows and is read-only.
    pub fn log_damage(&self) -> Option<LogDamage> {
        self.damage
    }

    fn release_reserved(&mut self, s: u32) -> Result<()> {
        let si = self.log.seg_mut(s)?;
        if si.state == segstate::RESERVED {
            si.state = segstate::FREE;
        }
        Ok(())
    }

    fn validate_cp(&self, b: &[u8]) -> Result<CpHeader> {
        let (h, crc) = CpHeader::decode(&mut Reader::new(b))?;
        let len = h.len as usize;
        if len > b.len() || len < CP_HDR_SIZE || h.serial != self.sb.serial || h.seg_count != self.sb.segment_count {
            return Err(Error::Corrupt);
        }
        if len != CP_HDR_SIZE + crate::engine::format::segtab_chunks(h.seg_count) as usize * Loc::SIZE {
            return Err(Error::Corrupt);
        }
        let body = b.get(..len).ok_or(Error::Corrupt)?;
        let c = crate::engine::crc::crc32c_update(
            crate::engine::crc::crc32c_update(crate::engine::crc::crc32c(body.get(..4).ok_or(Error::Corrupt)?), &[0, 0, 0, 0]),
            body.get(8..).ok_or(Error::Corrupt)?,
        );
        if c != crc {
            return Err(Error::Corrupt);
        }
        Ok(h)
    }

    /// Peek the next valid record of a stream.
    fn stream_peek(&mut self, st: &mut Stream, chains: &[(u32, u64)], min_seq: u64) -> Result<()> {
        if st.peeked.is_some() || st.done {
            return Ok(());
        }
        loop {
            if st.idx >= st.chain_end {
                st.done = true;
                return Ok(());
            }
            let (seg, seg_seq) = *chains.get(st.idx).ok_or(Error::Corrupt)?;
            let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
            let r = match self.log.scan_at(seg, st.off, seg_seq, &mut tmp) {
                Ok(Scan::Rec(h, l)) => Ok(Some((h, l))),
                Ok(Scan::End) => Ok(None),
                Ok(Scan::Bad) => {
                    // A torn program (nothing valid follows: the end of the log) or damage
                    // (valid records of this segment follow): continue after it. Whether
                    // what it held was durable is decided at the gap it leaves, see `replay`.
                    let at = Log::<P, F>::align_pos(self.log.geo.write_unit.max(1), st.off);
                    let r = self.log.resync(seg, at, seg_seq, &mut tmp);
                    if let Ok(Some(_)) = r {
                        if st.bad.is_none() {
                            st.bad = Some((seg, at));
                        }
                    }
                    r
                }
                Err(e) => Err(e),
            };
            self.buf = tmp;
            match r? {
                Some((h, loc)) => {
                    st.off = loc.off.saturating_add(loc.len);
                    if h.seq < min_seq {
                        // stale data from before the checkpoint: the stream ends
                        st.done = true;
                        return Ok(());
                    }
                    st.peeked = Some((h, loc));
                    return Ok(());
                }
                None => {
                    // end of this segment's valid records; continue with the next segment of
                    // the chain only if this one was properly completed (the next exists).
                    st.idx += 1;
                    st.off = 0;
                }
            }
        }
    }

    /// Roll forward: apply the records of every head in global sequence order, starting at the
    /// checkpoint's `next_seq`, and stop at the first missing sequence number. Every record
    /// (padding, segment headers, index nodes and segment-table chunks included) takes one
    /// sequence number, so a gap is a record that never reached the medium (a head buffer lost
    /// in the crash) and everything after it belongs to later operations: applying it would
    /// recover a state no prefix of the operations produced (e.g. file data written out by the
    /// hot head while the metadata of earlier operations was still in the meta head's buffer).
    /// Groups (`CONT`) are applied only once their last record arrived.
    fn replay(&mut self, streams: &mut [Stream; NUM_HEADS], chains: &[(u32, u64)], min_seq: u64, first_seq: u64) -> Result<u64> {
        let mut count = 0u64;
        let mut expected = first_seq;
        let mut group: P::Vec<(RecHdr, Loc)> = P::Vec::new();
        let mut group_stream = usize::MAX;
        let mut gap = false;
        let mut damaged_gaps = 0u32;
        loop {
            for st in streams.iter_mut() {
                self.stream_peek(st, chains, min_seq)?;
            }
            let mut best: Option<(usize, u64)> = None;
            for (i, st) in streams.iter().enumerate() {
                if let Some((h, _)) = st.peeked {
                    if best.is_none_or(|b| h.seq < b.1) {
                        best = Some((i, h.seq));
                    }
                }
            }
            let (i, seq) = match best {
                Some(b) => b,
                None => break,
            };
            if seq != expected {
                // A missing record: lost in a crash (a head buffer never written out, a torn
                // program), or damage: a record that was durable no longer reads back.
                // (each damaged spot costs a read of the rest of the log: at most MAX_DAMAGE)
                const MAX_DAMAGE: u32 = 64;
                let look = self.look_ahead(streams, chains, min_seq, expected)?;
                if !look.durable || damaged_gaps >= MAX_DAMAGE || self.replay_fallback {
                    gap = true;
                    self.log.next_seq = self.log.next_seq.max(look.max_seq.saturating_add(1));
                    self.dropped = self.dropped.saturating_add(look.records).saturating_add(group.len() as u64);
                    group.clear();
                    break;
                }
                // Damage in the middle of the log: report it and recover what follows (the
                // mount turns read-only, see `mount_inner`). An incomplete group before it
                // lost its end: drop it.
                let at = streams.iter().find_map(|s| s.bad);
                let d = self.damage.get_or_insert(LogDamage { seg: NO_SEG, off: 0, first_missing: expected, missing: 0, after: 0 });
                if d.seg == NO_SEG {
                    if let Some((sg, of)) = at {
                        d.seg = sg;
                        d.off = of;
                    }
                }
                d.missing = d.missing.saturating_add(seq.saturating_sub(expected));
                damaged_gaps = damaged_gaps.saturating_add(1);
                d.after = d.after.max(look.records);
                self.dropped = self.dropped.saturating_add(group.len() as u64);
                group.clear();
                expected = seq;
                continue;
            }
            let st = streams.get_mut(i).ok_or(Error::Corrupt)?;
            let (h, loc) = st.peeked.take().ok_or(Error::Corrupt)?;
            expected = expected.saturating_add(1);
            self.log.next_seq = self.log.next_seq.max(h.seq.saturating_add(1));
            if h.rtype == rtype::PAD || h.rtype == rtype::SEGHDR || h.rtype == rtype::INDEX || h.rtype == rtype::SEGTAB {
                continue;
            }
            if !group.is_empty() && group_stream != i {
                // Groups are written by one operation to the meta head, so only padding and
                // segment headers of other heads interleave; anything else stands alone.
                self.apply(&h, loc, false)?;
                count = count.saturating_add(1);
                continue;
            }
            group.try_push((h, loc))?;
            group_stream = i;
            if h.flags & FLAG_CONT != 0 {
                continue;
            }
            for (h, loc) in group.as_slice() {
                // a group that creates an inode may write its records before the inode record
                // (a symlink's target)
                let created = group.as_slice().iter().any(|(g, _)| g.rtype == rtype::INODE && g.key.ino == h.key.ino);
                self.apply(h, *loc, created)?;
                count = count.saturating_add(1);
            }
            group.clear();
        }
        // an incomplete group and everything after a gap (counted by `look_ahead`) are
        // dropped; the sequence numbers of what is on the medium stay unused
        if !gap {
            self.dropped = self.dropped.saturating_add(group.len() as u64);
        }
        Ok(count)
    }

    /// At a gap (record `missing` absent): read the rest of every stream (on copies) and tell
    /// whether `missing` was durable: a `FLAG_SYNC` padding record numbered above it is on the
    /// medium, and so is a record numbered above that marker (which proves the device flush
    /// after the marker completed, see `Log::flush_all`). Torn tails and lost head buffers
    /// never satisfy this; damage to data that fsync or a checkpoint's flush made durable
    /// does. Also returns the highest sequence number and the number of records (padding,
    /// segment headers, index nodes and table chunks aside) that follow.
    fn look_ahead(&mut self, streams: &[Stream; NUM_HEADS], chains: &[(u32, u64)], min_seq: u64, missing: u64) -> Result<LookAhead> {
        let mut copy = *streams;
        let mut max_seq = 0u64;
        let mut records = 0u64;
        // the two highest markers above `missing`
        let (mut m1, mut m2) = (0u64, 0u64);
        for st in copy.iter_mut() {
            loop {
                self.stream_peek(st, chains, min_seq)?;
                match st.peeked.take() {
                    Some((h, _)) => {
                        max_seq = max_seq.max(h.seq);
                        if h.rtype == rtype::PAD && h.flags & FLAG_SYNC != 0 && h.seq > missing {
                            if h.seq > m1 {
                                m2 = m1;
                                m1 = h.seq;
                            } else if h.seq > m2 {
                                m2 = h.seq;
                            }
                        }
                        if !matches!(h.rtype, rtype::PAD | rtype::SEGHDR | rtype::INDEX | rtype::SEGTAB) {
                            records = records.saturating_add(1);
                        }
                    }
                    None => break,
                }
            }
        }
        let durable = (m1 != 0 && m1 < max_seq) || m2 != 0;
        Ok(LookAhead { durable, max_seq, records })
    }

    /// Apply one replayed record to the index.
    fn apply(&mut self, h: &RecHdr, loc: Loc, created: bool) -> Result<()> {
        match h.rtype {
            rtype::INODE | rtype::DENT | rtype::DATA | rtype::XATTR | rtype::ORPHAN => {
                if h.rtype == rtype::INODE {
                    self.next_ino = self.next_ino.max(h.key.ino.saturating_add(1));
                } else if h.key.ino != 0 && h.key.ino != self.replay_ok_ino && !created {
                    // A record of an inode without an inode record: its creation did not reach
                    // the medium (the hot head is written out before the metadata head). Never
                    // index it: drop it (its space stays dead) and count it.
                    if self.idx_get(&Key::new(h.key.ino, kind::INODE, 0))?.is_none() {
                        self.dropped = self.dropped.saturating_add(1);
                        return Ok(());
                    }
                    self.replay_ok_ino = h.key.ino;
                }
                self.idx_set(h.key, loc)
            }
            rtype::DELETE => {
                let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
                let r = self.log.read_record(loc, &mut tmp);
                let range = r.and_then(|_| {
                    let mut rd = Reader::new(tmp.as_slice().get(REC_HDR..).ok_or(Error::Corrupt)?);
                    Ok((Key::get(&mut rd)?, Key::get(&mut rd)?))
                });
                self.buf = tmp;
                let (a, b) = range?;
                self.replay_ok_ino = 0;
                self.idx_del_range(a, b)
            }
            _ => Ok(()),
        }
    }

    // ------------------------------------------------------------------ index helpers

    /// Point `key` at `loc`, keeping the segment usage table right.
    pub(crate) fn idx_set(&mut self, key: Key, loc: Loc) -> Result<()> {
        let old = self.tree.insert(&mut self.log, key, loc)?;
        self.log.live_add(loc);
        if let Some(o) = old {
            crate::engine::index::NodeIo::dead(&mut self.log, o);
        }
        Ok(())
    }

    /// Look `key` up.
    pub(crate) fn idx_get(&mut self, key: &Key) -> Result<Option<Loc>> {
        self.tree.get(&mut self.log, key)
    }

    /// First key >= `from`.
    pub(crate) fn idx_next(&mut self, from: &Key) -> Result<Option<(Key, Loc)>> {
        self.tree.next(&mut self.log, from)
    }

    /// Remove every key in `[a, b]`.
    ///
    /// Each key `next` finds must be removable: a key that lookups do not reach (a forged
    /// index node holding keys outside its parent's range) would otherwise come back from
    /// `next` forever. Such a tree is `Corrupt`.
    pub(crate) fn idx_del_range(&mut self, a: Key, b: Key) -> Result<()> {
        let mut from = a;
        loop {
            let (k, _) = match self.tree.next(&mut self.log, &from)? {
                Some(x) if x.0 <= b => x,
                _ => return Ok(()),
            };
            match self.tree.remove(&mut self.log, &k)? {
                Some(o) => crate::engine::index::NodeIo::dead(&mut self.log, o),
                None => return Err(Error::Corrupt),
            }
            from = k;
        }
    }

    /// Append a DELETE record for `[a, b]` to the metadata head and apply it.
    pub(crate) fn delete_range(&mut self, a: Key, b: Key, flags: u8) -> Result<()> {
        let mut p = [0u8; 2 * Key::SIZE];
        {
            let mut w = Writer::new(&mut p);
            a.put(&mut w)?;
            b.put(&mut w)?;
        }
        self.log.append(HEAD_META, rtype::DELETE, flags, a, &p)?;
        self.idx_del_range(a, b)
    }

    /// Write an inode record and index it.
    pub(crate) fn write_inode(&mut self, ino: &Inode, flags: u8) -> Result<()> {
        let mut p = [0u8; INODE_SIZE];
        ino.encode(&mut p)?;
        let key = Key::new(ino.ino, kind::INODE, 0);
        let loc = self.log.append(HEAD_META, rtype::INODE, flags, key, &p)?;
        self.icache_forget(ino.ino);
        self.inode_records = self.inode_records.saturating_add(1);
        self.idx_set(key, loc)?;
        self.icache_put(loc, ino);
        Ok(())
    }

    /// Append a keyed record and index it.
    pub(crate) fn put_record(&mut self, head: usize, rt: u8, flags: u8, key: Key, payload: &[u8]) -> Result<Loc> {
        let loc = self.log.append(head, rt, flags, key, payload)?;
        self.idx_set(key, loc)?;
        Ok(loc)
    }

    /// Read the record for `key` into `self.buf`; returns the payload length.
    pub(crate) fn read_key(&mut self, key: &Key) -> Result<Option<usize>> {
        let loc = match self.idx_get(key)? {
            Some(l) => l,
            None => return Ok(None),
        };
        let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
        let r = self.log.read_record(loc, &mut tmp);
        self.buf = tmp;
        let h = r?;
        if h.key != *key {
            return Err(Error::Corrupt);
        }
        Ok(Some(h.len as usize))
    }

    /// Read the record for `key` at `loc` (a location the index just returned, e.g. from
    /// `idx_next`) into `self.buf`, without descending the index again; returns the payload length.
    pub(crate) fn read_at(&mut self, key: &Key, loc: Loc) -> Result<usize> {
        let mut tmp = core::mem::replace(&mut self.buf, P::Vec::new());
        let r = self.log.read_record(loc, &mut tmp);
        self.buf = tmp;
        let h = r?;
        if h.key != *key {
            return Err(Error::Corrupt);
        }
        Ok(h.len as usize)
    }

    /// Payload of the record last read by `read_key` or `read_at`.
    pub(crate) fn payload(&self) -> &[u8] {
        self.buf.as_slice().get(REC_HDR..).unwrap_or(&[])
    }

    // ------------------------------------------------------------------ checkpoint

    /// Write a checkpoint: commit the index, flush every head, persist the segment table.
    /// Segments whose records are all dead become free once it is on flash.
    pub fn checkpoint(&mut self) -> Result<()> {
        if self.log.failed {
            return Err(Error::ReadOnly);
        }
        self.in_checkpoint = true;
        let r = self.checkpoint_inner();
        self.in_checkpoint = false;
        r
    }

    fn checkpoint_inner(&mut self) -> Result<()> {
        let mut rounds = 0u32;
        let mut locs: P::Vec<Loc> = P::Vec::new();
        loop {
            if self.log.has_failed_seg() {
                rounds = rounds.saturating_add(1);
                if rounds > 8 {
                    self.log.failed = true;
                    return Err(Error::Io);
                }
                self.relocate_failed()?;
            }
            // the checkpoint's own records start on a fresh write unit: a bad page of its
            // metadata then holds no record of the operations before it (which a mount
            // falling back to the previous checkpoint replays)
            for h in [crate::engine::format::HEAD_HOT, HEAD_COLD, HEAD_META] {
                self.log.flush_head(h)?;
            }
            self.tree.commit(&mut self.log)?;
            self.log.flush_all()?;
            if self.log.has_failed_seg() {
                continue;
            }
            // capture the segment table, then write it to the metadata log
            let mut table = core::mem::replace(&mut self.buf2, P::Vec::new());
            let r = self.write_segtab(&mut table, &mut locs);
            self.buf2 = table;
            r?;
            self.log.flush_all()?;
            if !self.log.has_failed_seg() {
                break;
            }
        }
        let seq = self.log.next_seq;
        self.log.next_seq = seq.saturating_add(1);
        let (root, root_level, has_root) = match self.tree.root() {
            Some((l, lv)) => (l, lv, true),
            None => (Loc::default(), 0, false),
        };
        let count = self.log.segs.len();
        let len = CP_HDR_SIZE + locs.len() * Loc::SIZE;
        let mut stats = self.log.stats;
        stats.checkpoints = stats.checkpoints.saturating_add(1);
        let hdr = CpHeader {
            seq,
            serial: self.sb.serial,
            len: len as u32,
            root,
            root_level,
            has_root,
            next_ino: self.next_ino,
            next_seq: self.log.next_seq,
            heads: self.log.head_states(),
            stats,
            seg_count: count as u32,
        };
        let mut blob = core::mem::replace(&mut self.buf2, P::Vec::new());
        let r = self.encode_cp(&hdr, locs.as_slice(), &mut blob);
        if r.is_err() {
            self.buf2 = blob;
            return r;
        }
        // choose a slot
        let slots = self.slots_per_area();
        if self.cp_next_slot >= slots {
            if self.log.fill_on_close && self.cp_next_slot != u32::MAX {
                // the full area's last segment may end in a part no slot fits: close it
                let ss = u64::from(self.sb.segment_size.max(1));
                let end = u64::from(self.cp_next_slot) * u64::from(self.sb.cp_slot_size);
                let idx = (end / ss) as usize;
                if end % ss != 0 && idx < self.sb.cp_area_segs as usize {
                    let seg = *self.sb.cp_segs.get(self.cp_area).and_then(|x| x.get(idx)).ok_or(Error::Corrupt)?;
                    if let Err(e) = self.log.fill_to_end(seg, (end % ss) as u32, true) {
                        self.buf2 = blob;
                        return Err(e);
                    }
                }
            }
            let other = 1 - self.cp_area.min(1);
            for i in 0..self.sb.cp_area_segs as usize {
                let s = *self.sb.cp_segs.get(other).and_then(|a| a.get(i)).ok_or(Error::Corrupt)?;
                match self.log.erase(s) {
                    Ok(true) => {}
                    // a checkpoint-area block failed: no checkpoint can be written any more
                    Ok(false) => {
                        self.buf2 = blob;
                        self.log.failed = true;
                        return Err(Error::Io);
                    }
                    Err(e) => {
                        self.buf2 = blob;
                        self.log.failed = true;
                        return Err(e);
                    }
                }
                // the checkpoint area keeps its META state even if erase accounting touched it
                if let Ok(si) = self.log.seg_mut(s) {
                    si.state = segstate::META;
                }
            }
            self.cp_area = other;
            self.cp_next_slot = 0;
        }
        let off = u64::from(self.cp_next_slot) * u64::from(self.sb.cp_slot_size);
        let r = self.cp_write(self.cp_area, off, blob.as_slice());
        self.buf2 = blob;
        if let Err(e) = r {
            self.log.failed = true;
            return Err(e);
        }
        self.cp_next_slot = self.cp_next_slot.saturating_add(1);
        self.log.flash.flush()?;
        self.log.stats = stats;
        self.log.need_checkpoint = false;
        self.log.since_checkpoint = 0;
        self.pinned.clear();
        for l in locs.as_slice() {
            if !self.pinned.as_slice().contains(&l.seg) {
                self.pinned.try_push(l.seg)?;
            }
        }
        // Free the segments that were dead at the previous checkpoint already (neither this
        // checkpoint nor the previous one, the fallback, refers to them); retire failed ones.
        // The ones that died since wait for the next checkpoint.
        for i in 0..self.log.segs.len() {
            let pinned = self.pinned.as_slice().contains(&(i as u32));
            let si = match self.log.segs.as_mut_slice().get_mut(i) {
                Some(s) => s,
                None => break,
            };
            if si.state == segstate::FULL && si.live == 0 && !pinned && si.flags & SEG_DEAD_CP == 0 {
                si.flags |= SEG_DEAD_CP;
                continue;
            }
            if si.state == segstate::FULL && si.live == 0 && !pinned {
                si.flags &= !SEG_DEAD_CP;
                if si.flags & SEG_RETIRE != 0 {
                    si.state = segstate::BAD;
                    self.log.stats.retired = self.log.stats.retired.saturating_add(1);
                    let _ = self.log.flash.mark_bad(i as u32);
                } else {
                    si.state = segstate::FREE;
                    // a block device may tell its FTL now, off the write path
                    self.log.flash.discard_hint(i as u32);
                }
            }
        }
        Ok(())
    }

    /// Capture the segment table (segments whose records are all dead recorded as free, or bad
    /// when retiring) and append it as SEGTAB records to the metadata head.
    fn write_segtab(&mut self, table: &mut P::Vec<u8>, locs: &mut P::Vec<Loc>) -> Result<()> {
        let count = self.log.segs.len();
        table.clear();
        table.try_resize(count.saturating_mul(SEGINFO_SIZE), 0u8)?;
        {
            let mut w = Writer::new(table.as_mut_slice());
            for s in self.log.segs.as_slice() {
                let mut e = *s;
                // freed by this checkpoint only when it was dead at the previous one (see
                // SEG_DEAD_CP); otherwise recorded full, so a mount from this checkpoint keeps
                // it for the fallback to the previous one
                if e.state == segstate::FULL && e.live == 0 && e.flags & SEG_DEAD_CP != 0 {
                    e.state = if e.flags & SEG_RETIRE != 0 { segstate::BAD } else { segstate::FREE };
                }
                e.flags &= !SEG_RAM_FLAGS;
                put_seginfo(&mut w, &e)?;
            }
        }
        locs.clear();
        let per = SEGTAB_ENTRIES as usize;
        let mut payload: P::Vec<u8> = P::Vec::new();
        let mut first = 0usize;
        let mut idx = 0u64;
        while first < count {
            let n = per.min(count - first);
            payload.clear();
            payload.try_extend_from_slice(&(first as u32).to_le_bytes())?;
            payload.try_extend_from_slice(&(n as u16).to_le_bytes())?;
            let a = first.saturating_mul(SEGINFO_SIZE);
            let b = a.saturating_add(n.saturating_mul(SEGINFO_SIZE));
            payload.try_extend_from_slice(table.as_slice().get(a..b).ok_or(Error::Invalid)?)?;
            let loc = self.log.append(HEAD_META, rtype::SEGTAB, 0, Key::new(0, 0, idx), payload.as_slice())?;
            locs.try_push(loc)?;
            first = first.saturating_add(n);
            idx = idx.saturating_add(1);
        }
        Ok(())
    }

    fn encode_cp(&mut self, hdr: &CpHeader, locs: &[Loc], blob: &mut P::Vec<u8>) -> Result<()> {
        let slot = self.sb.cp_slot_size as usize;
        blob.clear();
        blob.try_resize(slot, 0u8)?;
        let len = hdr.len as usize;
        {
            let b = blob.as_mut_slice();
            let mut w = Writer::new(b);
            hdr.encode(&mut w)?;
            for l in locs {
                l.put(&mut w)?;
            }
            if w.pos() != len {
                return Err(Error::Invalid);
            }
        }
        let crc = crate::engine::crc::crc32c(blob.as_slice().get(..len).ok_or(Error::Invalid)?);
        crate::engine::codec::put_u32(blob.as_mut_slice(), 4, crc)
    }

    // ------------------------------------------------------------------ orphans

    fn reclaim_orphans(&mut self) -> Result<()> {
        loop {
            let k = match self.idx_next(&Key::new(0, kind::ORPHAN, 0))? {
                Some((k, _)) if k.ino == 0 && k.kind == kind::ORPHAN => k,
                _ => return Ok(()),
            };
            self.destroy_inode(k.key)?;
            self.maybe_commit()?;
        }
    }

    /// Delete every record of inode `ino` and its orphan entry (one atomic group).
    pub(crate) fn destroy_inode(&mut self, ino: u64) -> Result<()> {
        self.icache_forget(ino);
        self.delete_range(Key::new(ino, 0, 0), Key::new(ino, u8::MAX, u64::MAX), FLAG_CONT)?;
        let ok = Key::new(0, kind::ORPHAN, ino);
        self.delete_range(ok, ok, 0)
    }

    /// Checkpoint if the index cache is getting full of dirty nodes or a head lost its chain.
    pub(crate) fn maybe_commit(&mut self) -> Result<()> {
        if self.should_checkpoint() || self.log.need_checkpoint || self.log.has_failed_seg() {
            self.checkpoint()?;
        }
        Ok(())
    }

    // ------------------------------------------------------------------ space and GC

    /// Make sure at least `min_free` segments are free, running the GC if needed.
    pub(crate) fn ensure_space(&mut self, min_free: u32) -> Result<()> {
        if self.log.failed {
            return Err(Error::ReadOnly);
        }
        // Clean ahead of need: start when free segments fall below `low` (the need plus a
        // batch) and collect victims until the segments waiting for a checkpoint cover the need
        // plus two batches, then checkpoint once (a checkpoint writes the dirty index and the
        // segment table, so it must free many segments to pay for itself). Above the need, one
        // unit of work per call (a victim or a checkpoint) spreads the cleaning over the writes.
        let batch = self.gc_batch();
        let low = min_free.saturating_add(batch);
        let high = low.saturating_add(batch);
        let mut guard = self.sb.segment_count.saturating_mul(2);
        let mut worked = false;
        loop {
            let free = self.log.free_count();
            if free >= low || (worked && free >= min_free) {
                return Ok(());
            }
            if guard == 0 {
                return if free >= min_free { Ok(()) } else { Err(Error::NoSpace) };
            }
            guard -= 1;
            let need = free < min_free;
            let pending = self.pending_free();
            if pending > 0 && (free.saturating_add(pending) >= high || free <= self.cp_margin()) {
                self.checkpoint()?;
                worked = true;
                continue;
            }
            // Ahead of need, only victims that pay for their move (at most 3/4 live): on a
            // nearly full filesystem moving 90 %-live segments and checkpointing would consume
            // the reserve instead of adding to it.
            // When the need is urgent, greedy (the most space per move); ahead of need,
            // cost-benefit (see `pick_victim`).
            let max_live = if need { GC_MAX_LIVE } else { GC_AHEAD_MAX_LIVE };
            if !self.gc_once(false, max_live, need)? {
                if need && pending > 0 {
                    self.checkpoint()?;
                    worked = true;
                    continue;
                }
                return if free >= min_free { Ok(()) } else { Err(Error::NoSpace) };
            }
            worked = true;
        }
    }

    /// Segments the foreground GC frees per checkpoint, and how far ahead of need it starts
    /// cleaning: grows with what a checkpoint writes (its segment table) and with the device
    /// (1/64 of the log segments, a small part of the 1/8 kept out of the capacity).
    pub(crate) fn gc_batch(&self) -> u32 {
        let fixed = GC_BATCH.saturating_add(self.segtab_segments().saturating_mul(4));
        let scaled = (self.main_segments() / 64).min(u64::from(u32::MAX)) as u32;
        fixed.max(scaled)
    }

    pub(crate) fn pending_free(&self) -> u32 {
        let pinned = self.pinned.as_slice();
        let n = self.log.segs.len() as u32;
        (0..n)
            .zip(self.log.segs.as_slice().iter())
            .filter(|(i, s)| s.state == segstate::FULL && s.live == 0 && !pinned.contains(i))
            .fold(0u32, |a, _| a.saturating_add(1))
    }

    /// Bytes of user-visible capacity (data + metadata) allowed before writes fail with NoSpace.
    pub(crate) fn capacity_bytes(&self) -> u64 {
        let main = self
            .log
            .segs
            .as_slice()
            .iter()
            .filter(|s| s.state != segstate::BAD && s.state != segstate::META)
            .fold(0u64, |a, _| a.saturating_add(1));
        let usable = main.saturating_sub(
            u64::from(RESERVE_SEGS) + NUM_HEADS as u64 * 2 + 2 * u64::from(self.segtab_segments()),
        );
        usable.saturating_mul(u64::from(self.sb.segment_size)) / 8 * 7
    }

    pub(crate) fn live_bytes(&self) -> u64 {
        self.log.segs.as_slice().iter().fold(0u64, |a, s| a.saturating_add(u64::from(s.live)))
    }

    pub(crate) fn is_head_seg(&self, s: u32) -> bool {
        self.log.heads.iter().any(|h| h.seg == s || h.next == s)
    }

    pub(crate) fn pick_victim(&self, background: bool, max_live: u32, greedy: bool) -> Option<u32> {
        let ss = u64::from(self.sb.segment_size);
        let now = self.log.next_seq;
        let mut best: Option<(u32, u64)> = None;
        let mut minmax: Option<(u32, u32, u32)> = None; // (min erases full seg, its idx, max erases)
        let mut maxe = 0u32;
        let n = self.log.segs.len() as u32;
        for (i, s) in (0..n).zip(self.log.segs.as_slice().iter()) {
            if s.state != segstate::BAD && s.state != segstate::META {
                maxe = maxe.max(s.erases);
            }
            if s.state != segstate::FULL || self.is_head_seg(i) || self.pinned.as_slice().contains(&i) || s.flags & SEG_STUCK != 0 {
                continue;
            }
            if s.live == 0 {
                // already dead: freed by the next checkpoint, nothing to move
                continue;
            }
            if s.flags & SEG_SCRUB != 0 {
                return Some(i);
            }
            if minmax.is_none_or(|m| s.erases < m.0) {
                minmax = Some((s.erases, i, 0));
            }
            let live = u64::from(s.live);
            if !background && live.saturating_mul(100) > ss.saturating_mul(u64::from(max_live)) {
                // moving it would gain too little (gc_once refuses it)
                continue;
            }
            // Cost-benefit (1 - u) * age / (1 + u), scaled, unless the need is urgent. Greedy
            // (least live) keeps picking young metadata segments (index nodes, inode updates,
            // segment tables) whose records would soon die anyway; moving their index nodes
            // dirties the index and forces a checkpoint, which writes new such segments: at
            // 90 % fill with small files it cleaned about one victim per checkpoint. When free
            // segments are short, though, only the space a move gains counts (an old, almost
            // full victim would consume the last free segments).
            let score = if greedy {
                ss.saturating_sub(live)
            } else {
                let age = now.saturating_sub(s.seq).max(1);
                ss.saturating_sub(live).saturating_mul(age) / ss.saturating_add(live).max(1)
            };
            if live < ss && best.is_none_or(|b| score > b.1) {
                best = Some((i, score));
            }
        }
        if background {
            if let Some((mine, idx, _)) = minmax {
                if maxe.saturating_sub(mine) > self.opts.wear_threshold {
                    return Some(idx);
                }
            }
        }
        best.map(|b| b.0)
    }

    /// One bounded step of garbage collection: move the live records of one victim segment.
    /// `background` selects cost-benefit victim choice and static wear levelling; otherwise
    /// greedy. Returns whether any work was done.
    pub fn gc_step(&mut self, background: bool) -> Result<bool> {
        if self.log.failed {
            return Err(Error::ReadOnly);
        }
        if self.log.free_count() <= self.cp_margin() && self.pending_free() > 0 {
            self.checkpoint()?;
            return Ok(true);
        }
        if background {
            // Idle work only when useful: scrubbing, wear levelling, or space getting short
            // (fewer than a quarter of the log segments free) with a victim at most half live.
            let v = match self.pick_victim(true, GC_MAX_LIVE, false) {
                Some(v) => v,
                None => return Ok(false),
            };
            let si = *self.log.seg(v)?;
            let main = self.main_segments();
            let short = u64::from(self.log.free_count()).saturating_mul(4) < main;
            let cheap = u64::from(si.live).saturating_mul(2) <= u64::from(self.sb.segment_size);
            let special = si.flags & SEG_SCRUB != 0 || self.wear_spread() > self.opts.wear_threshold;
            if !(special || (short && cheap)) {
                return Ok(false);
            }
        }
        self.gc_once(background, GC_MAX_LIVE, !background)
    }

    /// Whether the dirty index or the log since the last checkpoint grew past its bound.
    pub(crate) fn should_checkpoint(&self) -> bool {
        self.tree.needs_commit() || self.log.since_checkpoint >= self.opts.checkpoint_log_bytes.max(1)
    }

    /// Free segments a mount needs before it can free any: a new segment for the metadata
    /// head with its reserved successor, and the segment table and index nodes of the mount's
    /// checkpoint (pending segments become free only once that checkpoint is written). The
    /// data heads open at the mount only when there is room for them too (`finish_mount`),
    /// otherwise on their first record. Every operation keeps at least this many segments free
    /// or reserved as a head's successor (a mount returns those to the pool), deletions
    /// included: see `mount_floor`.
    pub fn mount_need(&self) -> u32 {
        2u32.saturating_add(self.segtab_segments()).saturating_add(1)
    }

    /// The free segments to keep before an operation so that a mount after a crash finds
    /// `mount_need`: the segments reserved as heads' successors go back to the pool at mount,
    /// and the operation's own records may open one segment (taking a free one as successor).
    pub(crate) fn mount_floor(&self) -> u32 {
        let reserved = self.log.segs.as_slice().iter().filter(|s| s.state == segstate::RESERVED).fold(0u32, |a, _| a.saturating_add(1));
        self.mount_need().saturating_add(1).saturating_sub(reserved)
    }

    /// Free segments below which a checkpoint must be taken now: what a checkpoint itself
    /// needs (its segment table and index nodes) plus the deletion reserve.
    pub(crate) fn cp_margin(&self) -> u32 {
        RESERVE_DELETE.saturating_add(self.segtab_segments())
    }

    /// Segments a checkpoint's segment table (SEGTAB records) may occupy, kept in reserve on
    /// top of the fixed reserves (the previous table stays pinned until the next one is written).
    pub(crate) fn segtab_segments(&self) -> u32 {
        let bytes = u64::from(crate::engine::format::segtab_chunks(self.sb.segment_count))
            .saturating_mul(u64::from(SEGTAB_ENTRIES) * SEGINFO_SIZE as u64 + REC_HDR as u64 + 64);
        let ss = u64::from(self.sb.segment_size).max(1);
        (bytes.div_ceil(ss) as u32).saturating_add(1)
    }

    pub(crate) fn main_segments(&self) -> u64 {
        self.log
            .segs
            .as_slice()
            .iter()
            .filter(|s| s.state != segstate::BAD && s.state != segstate::META)
            .fold(0u64, |a, _| a.saturating_add(1))
    }

    pub(crate) fn wear_spread(&self) -> u32 {
        let mut lo = u32::MAX;
        let mut hi = 0u32;
        for s in self.log.segs.as_slice() {
            if s.state != segstate::BAD && s.state != segstate::META {
                lo = lo.min(s.erases);
                hi = hi.max(s.erases);
            }
        }
        hi.saturating_sub(lo)
    }

    /// Move one victim (foreground: at most `max_live` percent live; `greedy`: least live
    /// rather than cost-benefit). Returns whether any work was done.
    fn gc_once(&mut self, background: bool, max_live: u32, greedy: bool) -> Result<bool> {
        let v = match self.pick_victim(background, max_live, greedy && !background) {
            Some(v) => v,
            None => return Ok(false),
        };
        let vi = *self.log.seg(v)?;
        if vi.live == 0 {
            self.checkpoint()?;
            return Ok(true);
        }
        if !background
            && u64::from(vi.live).saturating_mul(100) > u64::from(self.sb.segment_size).saturating_mul(u64::from(max_live))
            && vi.flags & SEG_SCRUB == 0
        {
            // moving this segment would gain (almost) nothing
            return Ok(false);
        }
        match self.move_segment(v) {
            Ok(()) => {}
            // an unreadable live record keeps the victim (now skipped): what could be moved was
            Err(Error::Corrupt) if self.log.seg(v)?.flags & SEG_STUCK != 0 => {}
            Err(e) => return Err(e),
        }
        self.gc_after_victim()?;
        Ok(true)
    }

    /// Move every live record out of segment `v` (to the cold head for file data, to the meta
    /// head for metadata; live index nodes are dirtied). The segment becomes free (or bad, if it
    /// is being retired) at the next checkpoint.
    fn move_segment(&mut self, v: u32) -> Result<()> {
        let vi = *self.log.seg(v)?;
        let mut off = 0u32;
        while let Some(loc) = self.gc_move_next(v, off, vi.seq)? {
            off = loc.off.saturating_add(loc.len);
            self.gc_bound_index()?;
            if self.log.seg(v)?.live == 0 {
                break;
            }
        }
        if self.gc_settle(v, vi.flags)? {
            return Err(Error::Corrupt);
        }
        Ok(())
    }

    /// Move the first record of segment `v` (sequence `seq`) at or after `off` (see
    /// `gc_record`); returns where it was, or `None` at the end of the segment.
    pub(crate) fn gc_move_next(&mut self, v: u32, off: u32, seq: u64) -> Result<Option<Loc>> {
        let mut tmp = core::mem::replace(&mut self.buf2, P::Vec::new());
        let res = match self.log.scan(v, off, seq, &mut tmp) {
            Ok(Some((h, loc))) => self.gc_record(&h, loc, &tmp).map(|()| Some(loc)),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        self.buf2 = tmp;
        res
    }

    /// Keep the dirty part of the index bounded while moving a large segment.
    pub(crate) fn gc_bound_index(&mut self) -> Result<()> {
        if self.should_checkpoint() {
            if self.in_checkpoint {
                self.tree.commit(&mut self.log)?;
            } else {
                self.checkpoint()?;
            }
        }
        Ok(())
    }

    /// After moving what could be moved out of segment `v` (whose flags were `flags0` when the
    /// move began): returns true when something live is left in it, which is then stuck.
    pub(crate) fn gc_settle(&mut self, v: u32, flags0: u8) -> Result<bool> {
        if self.log.seg(v)?.live != 0 {
            // Something live could not be read back (an uncorrectable page stops the scan):
            // keep the segment, never erase live data, and never pick it again (every later
            // move would fail the same way, and the foreground GC would fail every write).
            // Once nothing in it is live it is retired, not reused.
            let si = self.log.seg_mut(v)?;
            si.flags &= !SEG_SCRUB;
            si.flags |= SEG_STUCK | SEG_RETIRE;
            return Ok(true);
        }
        if flags0 & SEG_SCRUB != 0 && flags0 & SEG_RETIRE == 0 {
            self.log.faults.scrubbed_segments = self.log.faults.scrubbed_segments.saturating_add(1);
        }
        Ok(false)
    }

    /// After a victim: commit if due, and checkpoint when free segments ran down to the margin.
    pub(crate) fn gc_after_victim(&mut self) -> Result<()> {
        self.maybe_commit()?;
        if self.log.free_count() <= self.cp_margin() {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Relocate the records of segments whose program failed (heads in ghost mode and the
    /// shadow), so that the next checkpoint can retire them.
    fn relocate_failed(&mut self) -> Result<()> {
        let mut guard = 0u32;
        loop {
            guard = guard.saturating_add(1);
            if guard > 16 {
                self.log.failed = true;
                return Err(Error::Io);
            }
            if self.log.shadow.is_none() {
                match self.log.heads.iter().position(|h| h.ghost) {
                    Some(h) => self.log.ghost_to_shadow(h)?,
                    None => return Ok(()),
                }
            }
            let seg = match &self.log.shadow {
                Some(sh) => sh.seg,
                None => continue,
            };
            if seg != NO_SEG {
                let r = self.move_segment(seg);
                if r.is_err() {
                    self.log.failed = true;
                }
                r?;
            }
            self.log.shadow = None;
        }
    }

    pub(crate) fn gc_record(&mut self, h: &RecHdr, loc: Loc, rec: &P::Vec<u8>) -> Result<()> {
        match h.rtype {
            rtype::INODE | rtype::DENT | rtype::DATA | rtype::XATTR | rtype::ORPHAN => {
                if self.idx_get(&h.key)? == Some(loc) {
                    let payload = rec.as_slice().get(REC_HDR..).ok_or(Error::Corrupt)?;
                    let head = if h.rtype == rtype::DATA { HEAD_COLD } else { HEAD_META };
                    let nl = match self.log.append(head, h.rtype, 0, h.key, payload) {
                        Ok(nl) => nl,
                        Err(e) => {
                            if h.rtype == rtype::INODE {
                                self.icache_forget(h.key.ino);
                            }
                            return Err(e);
                        }
                    };
                    if h.rtype == rtype::INODE {
                        // the same bytes at a new place: a cached copy stays right
                        self.icache_moved(h.key.ino, loc, nl);
                    }
                    self.idx_set(h.key, nl)?;
                    self.log.stats.gc_records = self.log.stats.gc_records.saturating_add(1);
                    self.log.stats.gc_bytes = self.log.stats.gc_bytes.saturating_add(u64::from(loc.len));
                }
                Ok(())
            }
            rtype::INDEX => {
                let level = *rec.as_slice().get(REC_HDR).ok_or(Error::Corrupt)?;
                if self.tree.node_live(&mut self.log, loc, &h.key, level, true)? {
                    self.log.stats.gc_records = self.log.stats.gc_records.saturating_add(1);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    // ------------------------------------------------------------------ misc

    /// Write a checkpoint (the `sync` of the VFS).
    pub fn sync(&mut self) -> Result<()> {
        self.checkpoint()
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

    /// Borrow the medium.
    pub fn flash(&mut self) -> &mut F {
        &mut self.log.flash
    }

    /// Sequence number of the next record. It changes whenever anything is appended to the
    /// log, so a caller can tell whether a periodic checkpoint has anything to commit.
    pub fn log_seq(&self) -> u64 {
        self.log.next_seq
    }

    /// The volume serial (mkfs's random serial), e.g. for statfs `f_fsid`.
    pub fn serial(&self) -> u64 {
        self.sb.serial
    }

    /// Records the last mount's roll-forward dropped: records after the first missing sequence
    /// number (a head buffer lost in the crash: later records would not give a state any prefix
    /// of the operations produced), of an incomplete atomic group, or of an inode without an
    /// inode record.
    pub fn dropped_records(&self) -> u64 {
        self.dropped
    }

    /// The segment table entry of segment `s` (state, flags, live bytes, erases, sequence).
    pub fn segment_info(&self, s: u32) -> Option<crate::engine::format::SegInfo> {
        self.log.seg(s).ok().copied()
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

    /// Filesystem usage for statfs.
    pub fn statfs(&self) -> StatFs {
        let cap = self.capacity_bytes();
        let live = self.live_bytes();
        StatFs {
            block_size: crate::engine::format::BLOCK_SIZE,
            blocks: cap / u64::from(crate::engine::format::BLOCK_SIZE),
            blocks_free: cap.saturating_sub(live) / u64::from(crate::engine::format::BLOCK_SIZE),
            files: self.next_ino.saturating_sub(1),
            name_max: crate::engine::format::NAME_MAX as u32,
        }
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

    /// Consistency check: recompute every segment's live bytes from the index and compare them
    /// with the segment table. Returns the first mismatch as (segment, table, computed).
    pub fn check(&mut self) -> Result<Option<(u32, u32, u32)>> {
        let mut live: P::Vec<u32> = P::Vec::new();
        live.try_resize(self.log.segs.len(), 0)?;
        {
            let lv = &mut live;
            let mut bad = false;
            self.tree.walk(&mut self.log, &mut |l: Loc, _node: bool| {
                match lv.as_mut_slice().get_mut(l.seg as usize) {
                    Some(x) => *x = x.saturating_add(l.len),
                    None => bad = true,
                }
            })?;
            if bad {
                return Err(Error::Corrupt);
            }
        }
        let n = self.log.segs.len() as u32;
        for (i, (s, c)) in (0..n).zip(self.log.segs.as_slice().iter().zip(live.as_slice())) {
            if s.live != *c {
                return Ok(Some((i, s.live, *c)));
            }
            if *c != 0 && s.state == segstate::FREE {
                return Ok(Some((i, u32::MAX, *c)));
            }
        }
        Ok(None)
    }
}

/// What [`Engine::look_ahead`] found after a gap.
struct LookAhead {
    durable: bool,
    max_seq: u64,
    records: u64,
}

/// Damage found in the log after the checkpoint by the last mount: records that had been made
/// durable (by fsync or a checkpoint's flush) no longer read back, and valid records follow.
/// Recovery skipped the damaged records and applied what follows; the mount is read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogDamage {
    /// Segment of the first unreadable spot found, or `u32::MAX` when the lost records read
    /// as never written (e.g. erased).
    pub seg: u32,
    /// Its offset in the segment.
    pub off: u32,
    /// Sequence number of the first missing record.
    pub first_missing: u64,
    /// Sequence numbers missing in total (records of every kind, padding included).
    pub missing: u64,
    /// Records (data and metadata) found after the first damaged spot.
    pub after: u64,
}

/// Replay cursor over one head's chain.
#[derive(Debug, Clone, Copy, Default)]
struct Stream {
    /// First bad spot (segment, offset) this stream resynchronised after.
    bad: Option<(u32, u32)>,
    chain_start: usize,
    chain_end: usize,
    idx: usize,
    off: u32,
    peeked: Option<(RecHdr, Loc)>,
    done: bool,
}
