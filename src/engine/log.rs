//! The log: segments written sequentially by a few heads, the segment table, record I/O.

use crate::engine::codec::{Reader, Writer};
use crate::engine::error::{Error, Result};
use crate::engine::flash::{Flash, FlashKind, Geometry, Pairing, ReadStatus};
use crate::engine::format::{
    block_crc, group_count, group_extent, group_table_len, kind, rtype, segstate, GroupEntry, HeadState, Key, Loc, RecHdr,
    SegInfo, Stats, BLOCK_SIZE, FLAG_SYNC, GROUP_MAX, NO_SEG, NUM_HEADS, REC_HDR, SEGHDR_PAYLOAD,
};
use crate::engine::index::NodeIo;
use crate::engine::platform::{FallibleVec, Platform};
use crate::engine::readcache::{ReadCache, READ_CACHE_BYTES};
use crate::engine::segtab::{SegMut, SegTable};

/// Segment flag: a corrected read was seen, scrub (rewrite) the segment.
pub const SEG_SCRUB: u8 = 1;
/// Segment flag: a program failed in it; once its live records are moved it becomes bad.
pub const SEG_RETIRE: u8 = 2;
/// Segment flag: a live record in it cannot be read back (an uncorrectable page): GC no longer
/// picks it (moving it fails every time); with `SEG_RETIRE` it becomes bad once nothing in it is
/// live, never to be programmed again.
pub const SEG_STUCK: u8 = 4;
/// Segment flag (RAM only, never written to the table): the segment was already dead (full,
/// nothing live) when the last checkpoint was written, so no record of that checkpoint or of
/// the one before it lies in it: the next checkpoint frees it. A segment that dies later
/// waits one checkpoint more, so that the previous checkpoint stays readable as a fallback.
pub const SEG_DEAD_CP: u8 = 8;
/// Segment flag (RAM only, never written to the table): the segment is open, i.e. written
/// to since its last erase and not yet closed (written to its end, or given up on a medium
/// where an unwritten tail costs nothing). Counted against the open-segment limit.
pub const SEG_WOPEN: u8 = 16;
/// Segment flag (RAM only, never written to the table): the segment holds a segment-table
/// chunk the newest checkpoint names. Never freed or moved by the GC while set.
pub const SEG_PINNED: u8 = 32;
/// The RAM-only segment flags, cleared when the table is written or loaded.
pub const SEG_RAM_FLAGS: u8 = SEG_DEAD_CP | SEG_WOPEN | SEG_PINNED;

/// Fault counters since the mount (RAM only, not persisted): what the medium reported and
/// what the engine did about it. Published in the kernel's debugfs statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultStats {
    /// Reads whose bit-flips the device's ECC corrected (MTD's -EUCLEAN): the segment is
    /// flagged for scrubbing.
    pub corrected_reads: u64,
    /// Reads the device could not correct (MTD's -EBADMSG).
    pub uncorrectable_reads: u64,
    /// Segments flagged for scrubbing whose live records were all moved elsewhere.
    pub scrubbed_segments: u64,
    /// Programs that failed on the medium (the segment is relocated and retired).
    pub program_failures: u64,
    /// Erases that failed on the medium (the segment is retired at once).
    pub erase_failures: u64,
    /// Other I/O errors on program or erase (transient or a read-only device): the operation
    /// failed and the engine stopped writing; no segment was retired for them.
    pub io_errors: u64,
    /// Superblock copies rewritten by a mount (damaged, unreadable, or read through ECC
    /// correction, while the other copy was intact).
    pub superblock_refreshes: u64,
    /// Checkpoint-area switches made early to scrub an area (a read of it was corrected, or a
    /// slot written in it does not read back).
    pub cp_area_scrubs: u64,
}

/// What [`Log::scan_at`] found at a record position.
#[derive(Debug, Clone, Copy)]
pub enum Scan {
    /// A valid record, and where it is.
    Rec(RecHdr, Loc),
    /// The end of what was written there: erased (or zeroed) bytes, or a stale record of an
    /// earlier use of the segment.
    End,
    /// Bytes that were written but are not a valid record: a torn program at the end of the
    /// log, or damage (an unreadable page, flipped bits).
    Bad,
}

/// Flushes on a block device pad to the FTL page (`preferred_write`) only when a segment holds
/// at least this many pages (4 MiB units of 16 KiB pages hold 256): on small segments a page
/// of padding per flush would eat the space reserves a full filesystem deletes with.
pub const PAD_TO_CHUNK_MIN_PAGES: u64 = 16;

/// Bytes a [`ScanWindow`] reads at once, at most.
pub const SCAN_WINDOW: u64 = 32 << 10;

/// A window over a segment for sequential scans ([`Log::scan_in`]): the bytes of one large
/// read, from which the records are checked instead of being read one by one. Its first read
/// is two write units, each next one twice the last, up to [`SCAN_WINDOW`]: a short scan (the
/// few records of a checkpoint) reads little more than it needs, a long one (the roll-forward)
/// reads in large pieces.
pub struct ScanWindow<P: Platform> {
    seg: u32,
    start: u32,
    /// Bytes of the last read (0: none yet).
    size: u64,
    buf: P::Vec<u8>,
    /// The last window that could not be read (segment, end): not tried again before it.
    failed: Option<(u32, u32)>,
    /// Where the scan ends, when the caller knows it (segment, offset): no window reaches
    /// past it in that segment.
    pub stop_at: Option<(u32, u32)>,
}

impl<P: Platform> ScanWindow<P> {
    /// An empty window (allocates nothing until it is used).
    pub fn new() -> Self {
        ScanWindow { seg: NO_SEG, start: 0, size: 0, buf: P::Vec::new(), failed: None, stop_at: None }
    }
}

impl<P: Platform> ScanWindow<P> {
    /// `[off, off + len)` of `seg`, if the window holds all of it.
    fn holding(&self, seg: u32, off: u32, len: usize) -> Option<&[u8]> {
        if self.seg != seg || off < self.start {
            return None;
        }
        let from = (off - self.start) as usize;
        self.buf.as_slice().get(from..from.checked_add(len)?)
    }
}

impl<P: Platform> Default for ScanWindow<P> {
    fn default() -> Self {
        Self::new()
    }
}

/// One log head.
pub struct Head<P: Platform> {
    /// Current segment or NO_SEG.
    pub seg: u32,
    /// Its sequence number.
    pub seg_seq: u64,
    /// Offset where the next record goes.
    pub pos: u32,
    /// Offset of the first unflushed byte (start of `buf`).
    pub buf_start: u32,
    /// Unflushed bytes.
    pub buf: P::Vec<u8>,
    /// Reserved next segment (written in this segment's header) or NO_SEG.
    pub next: u32,
    /// A program failed in `seg`: nothing more is programmed there, records accumulate in
    /// `buf` until the engine relocates them (see `Engine::relocate_failed`).
    pub ghost: bool,
}

impl<P: Platform> Head<P> {
    fn new() -> Self {
        Head { seg: NO_SEG, seg_seq: 0, pos: 0, buf_start: 0, buf: P::Vec::new(), next: NO_SEG, ghost: false }
    }
}

/// Failed segments whose records may wait in RAM for their relocation at once: the one being
/// relocated, and those whose program failed while its records were written again (a head
/// that fills its segment in ghost mode leaves it as a shadow). More stops the engine.
pub const SHADOWS: usize = 4;

/// Records of a segment whose program failed, kept in RAM until they are relocated.
pub struct Shadow<P: Platform> {
    /// The failed segment.
    pub seg: u32,
    /// Offset of the first byte of `buf` in it.
    pub start: u32,
    /// The bytes that could not be programmed.
    pub buf: P::Vec<u8>,
}

/// The log.
pub struct Log<P: Platform, F: Flash> {
    /// The medium.
    pub flash: F,
    /// Its geometry.
    pub geo: Geometry,
    /// Segment table.
    pub segs: SegTable<P>,
    /// The heads.
    pub heads: [Head<P>; NUM_HEADS],
    /// Next sequence number.
    pub next_seq: u64,
    /// `next_seq` when the medium was last flushed with everything logged before it (an fsync's
    /// `flush_all`, a checkpoint): records at or after it may still be in a volatile cache.
    pub flushed_seq: u64,
    /// Counters.
    pub stats: Stats,
    /// CRC seed (from the volume serial).
    pub seed: u32,
    /// A head had to open a segment that is not chained from its previous one: a checkpoint is
    /// required before the new records are durable.
    pub need_checkpoint: bool,
    /// Set after an unrecoverable write error: every later mutation fails with ReadOnly.
    pub failed: bool,
    /// Scratch buffer for record reads.
    pub scratch: P::Vec<u8>,
    /// Flush size (preferred write, multiple of the write unit).
    pub chunk: u32,
    /// Unprogrammed records of failed segments awaiting relocation (at most [`SHADOWS`]).
    pub shadows: [Option<Shadow<P>>; SHADOWS],
    /// Bytes appended since the last checkpoint (bounds the roll-forward work at mount).
    pub since_checkpoint: u64,
    /// Segments opened so far (lets long operations notice they consumed free segments).
    pub opened: u64,
    /// Fault counters since the mount.
    pub faults: FaultStats,
    /// Sequence number when the running operation passed its checks (`u64::MAX`: no
    /// operation running): an error once the log moved past it stops the engine.
    pub op_mark: u64,
    /// The error that stopped the engine (fail-stop), if one did through [`Log::stop`].
    pub fail_cause: Option<Error>,
    /// Open-segment limit (0: none): see [`Log::set_open_limit`].
    pub open_limit: u32,
    /// Logical head (HEAD_HOT, HEAD_META, HEAD_COLD) -> the head that writes it.
    pub phys: [usize; NUM_HEADS],
    /// Closing a segment writes it to its end (block devices with a limit: an FTL counts a
    /// half-written allocation unit as open until it is written to its end or discarded).
    pub fill_on_close: bool,
    /// Flushes pad to `chunk` (the FTL page on a block device), not just to the write unit
    /// (see `PAD_TO_CHUNK_MIN_PAGES`).
    pub pad_to_chunk: bool,
    /// Segments open now (flag `SEG_WOPEN`).
    pub open_now: u32,
    /// The most segments open at once since the mount.
    pub open_max: u32,
    /// MLC NAND: the medium's page pairing and its largest pair distance in pages (checked at
    /// creation; `None` on other media, or when an MLC medium's pairing is unknown or unusable,
    /// which `format` and `mount` refuse). Durability points pad with it: [`Log::pair_pad`].
    pub pairing: Option<(Pairing, u32)>,
    /// Bytes of MLC pair padding ([`Log::pair_pad`]) programmed since the mount.
    pub pair_pad_bytes: u64,
    /// Copies of recently read write units (see `readcache.rs`).
    pub rcache: ReadCache<P>,
    /// Data alignment of aligned payloads (`FEATURE_INCOMPAT_ALIGNED_DATA`); 0: the volume
    /// has none (whole blocks are DATA records).
    pub data_align: u32,
    /// Live bytes of whole blocks one segment holds when a head writes nothing else into it
    /// ([`Log::block_fill`] of the geometry and the data alignment, computed once).
    pub data_fill: u64,
}

/// Blocks per data group the GC writes (64: a 256 KiB buffer; a group of 64 and its table
/// fill a segment of aligned data at 64/65 = 98.5 %).
pub const GC_GROUP: usize = 64;

impl<P: Platform, F: Flash> Log<P, F> {
    /// Live bytes one segment of `segment_size` bytes on write units of `wu` holds when a head
    /// writes only whole blocks into it, laid out as the log lays them after the segment header
    /// record: the log's own rule, not an estimate.
    /// - `align == 0`: DATA records (header + 4096 bytes, all live), each where
    ///   [`Log::align_pos`] puts it (never in the last `REC_HDR - 1` bytes of a write unit),
    ///   none past the segment's end: on 128 KiB segments 31 (98.0 %), on 16 KiB three (76 %).
    /// - aligned data: data groups of [`GC_GROUP`] blocks (what the GC packs a full
    ///   filesystem into), each a table record and its payloads at the next multiple of
    ///   `align`, 4096 live bytes per block (the table is not counted live), the last group
    ///   as large as still fits.
    pub fn block_fill(segment_size: u32, wu: u32, align: u32) -> u64 {
        let rec = (REC_HDR as u32).saturating_add(BLOCK_SIZE);
        let mut pos = (REC_HDR + SEGHDR_PAYLOAD) as u32;
        let mut live = 0u64;
        loop {
            let start = Self::align_pos(wu.max(1), pos);
            let (n, end) = if align == 0 {
                (1u32, start.checked_add(rec))
            } else {
                let mut n = GC_GROUP as u32;
                loop {
                    match group_extent(start, n, align) {
                        Some((_, end)) if end <= segment_size => break (n, Some(end)),
                        _ if n > 1 => n -= 1,
                        _ => break (0, None),
                    }
                }
            };
            match end {
                Some(end) if n > 0 && end <= segment_size => {
                    let per = if align == 0 { rec } else { BLOCK_SIZE };
                    live = live.saturating_add(u64::from(n).saturating_mul(u64::from(per)));
                    pos = end;
                }
                _ => break,
            }
        }
        live
    }

    /// Set the data alignment (`FEATURE_INCOMPAT_ALIGNED_DATA`; 0: none) and with it what a
    /// segment of blocks holds ([`Log::block_fill`]).
    pub fn set_data_align(&mut self, align: u32) {
        self.data_align = align;
        self.data_fill = Self::block_fill(self.geo.segment_size, self.wu(), align);
    }

    /// A log over `flash` with `segs` as segment table.
    pub fn new(flash: F, segs: SegTable<P>, seed: u32) -> Self {
        let geo = flash.geometry();
        let wu = geo.write_unit.max(1);
        let pairing = Self::medium_pairing(&flash);
        let mut chunk = geo.preferred_write;
        if chunk < wu || !chunk.is_multiple_of(wu) || chunk > geo.segment_size {
            chunk = wu;
        }
        Log {
            flash,
            geo,
            segs,
            heads: [Head::new(), Head::new(), Head::new()],
            next_seq: 1,
            flushed_seq: 1,
            stats: Stats::default(),
            seed,
            need_checkpoint: false,
            failed: false,
            scratch: P::Vec::new(),
            chunk,
            shadows: [None, None, None, None],
            since_checkpoint: 0,
            opened: 0,
            faults: FaultStats::default(),
            op_mark: u64::MAX,
            fail_cause: None,
            open_limit: 0,
            phys: [0, 1, 2],
            fill_on_close: false,
            // (on small segments a page of padding per flush would eat the space reserves)
            pad_to_chunk: geo.kind == FlashKind::Block
                && chunk > wu
                && u64::from(geo.segment_size) >= u64::from(chunk).saturating_mul(PAD_TO_CHUNK_MIN_PAGES),
            open_now: 0,
            open_max: 0,
            pairing,
            pair_pad_bytes: 0,
            rcache: ReadCache::new(wu, READ_CACHE_BYTES),
            data_align: 0,
            data_fill: Self::block_fill(geo.segment_size, wu, 0),
        }
    }

    /// Size the read cache to `bytes` (see `MountOptions::read_cache_bytes`); what it held is
    /// dropped.
    pub fn set_read_cache_bytes(&mut self, bytes: usize) {
        self.rcache = ReadCache::new(self.wu(), bytes);
    }

    /// MLC NAND: the medium's pairing and its largest pair distance over a segment's pages;
    /// `None` on other media, and on MLC when the pairing is unknown or unusable (see
    /// [`Pairing::max_distance`]).
    pub fn medium_pairing(flash: &F) -> Option<(Pairing, u32)> {
        let geo = flash.geometry();
        match flash.pairing() {
            Some(p) if geo.kind == FlashKind::MlcNand => p.max_distance(geo.segment_size / geo.write_unit.max(1)).map(|d| (p, d)),
            _ => None,
        }
    }

    /// Set the open-segment limit (0: none, three heads). With a limit the checkpoint area
    /// takes one open segment and the log heads share the rest: limit 2, every record in one
    /// head (the metadata head); limit 3, file data and metadata in one head, the GC's data
    /// in another; 4 and more, the three heads. On a block device closing a segment then
    /// writes it to its end. A limit below 2 is refused (`NotSupported`): the checkpoint area
    /// and one head are the least this format can have open.
    pub fn set_open_limit(&mut self, limit: u32) -> Result<()> {
        use crate::engine::format::{HEAD_COLD, HEAD_HOT, HEAD_META};
        if limit == 1 {
            return Err(Error::NotSupported);
        }
        self.open_limit = limit;
        let mut phys = [HEAD_HOT, HEAD_META, HEAD_COLD];
        match limit {
            0 => {}
            2 => phys = [HEAD_META; NUM_HEADS],
            3 => {
                if let Some(x) = phys.get_mut(HEAD_HOT) {
                    *x = HEAD_META;
                }
            }
            _ => {}
        }
        self.phys = phys;
        self.fill_on_close = limit != 0 && self.geo.kind == FlashKind::Block;
        Ok(())
    }

    /// The head that writes the records of logical head `h`.
    pub fn phys_head(&self, h: usize) -> usize {
        self.phys.get(h).copied().unwrap_or(h)
    }

    /// Whether head `h` writes records of some logical head (others stay without a segment).
    fn head_used(&self, h: usize) -> bool {
        self.phys.contains(&h)
    }

    /// Before a write of `len` bytes at `off` of `seg`: refuse it if it would open a segment
    /// beyond the open-segment limit (a bug in the engine's placement, reported as an error
    /// instead of a panic; the engine stops writing).
    fn open_check(&mut self, seg: u32, off: u32, len: usize) -> Result<()> {
        if self.open_limit == 0 {
            return Ok(());
        }
        let ss = u64::from(self.geo.segment_size);
        let is_open = self.seg(seg).map(|s| s.flags & SEG_WOPEN != 0).unwrap_or(false);
        if !is_open && u64::from(off).saturating_add(len as u64) < ss && self.open_now >= self.open_limit {
            self.stop(Error::Io);
            return Err(Error::Io);
        }
        Ok(())
    }

    /// After a write of `len` bytes at `off` of `seg`: count the segment open, or closed when
    /// the write reached its end.
    fn note_written(&mut self, seg: u32, off: u32, len: usize) {
        let ss = u64::from(self.geo.segment_size);
        if u64::from(off).saturating_add(len as u64) >= ss {
            self.note_closed(seg);
            return;
        }
        self.mark_open(seg);
    }

    /// `seg` is closed: erased, written to its end, or never to be written again.
    pub fn note_closed(&mut self, seg: u32) {
        let mut was = false;
        if let Ok(mut s) = self.seg_mut(seg) {
            was = s.flags & SEG_WOPEN != 0;
            s.flags &= !SEG_WOPEN;
        }
        if was {
            self.open_now = self.open_now.saturating_sub(1);
        }
    }

    /// Count `seg` open (written to, or a mount found it half-written); a no-op if it already is.
    pub fn mark_open(&mut self, seg: u32) {
        let mut opened = false;
        if let Ok(mut s) = self.seg_mut(seg) {
            if s.flags & SEG_WOPEN == 0 {
                s.flags |= SEG_WOPEN;
                opened = true;
            }
        }
        if opened {
            self.open_now = self.open_now.saturating_add(1);
            self.open_max = self.open_max.max(self.open_now);
        }
    }

    /// Forget every open mark: a new segment table was loaded, whose entries carry no RAM
    /// flags (`SEG_WOPEN` included: the load drops them), so only the count is reset (not a
    /// pass over every entry).
    pub fn reset_open(&mut self) {
        self.open_now = 0;
    }

    /// Write `data` at `off` of a superblock or checkpoint-area segment (not a log head),
    /// counted against the open-segment limit like the log's writes. Errors are returned as
    /// they are (the caller decides about fail-stop).
    pub fn write_fixed(&mut self, seg: u32, off: u32, data: &[u8]) -> Result<()> {
        self.open_check(seg, off, data.len())?;
        self.rcache.invalidate(seg, off, off.saturating_add(data.len() as u32));
        self.flash.write(seg, off, data)?;
        self.stats.programmed_bytes = self.stats.programmed_bytes.saturating_add(data.len() as u64);
        self.note_written(seg, off, data.len());
        Ok(())
    }

    /// Write `seg` from `from` (a write-unit multiple) to its end with 0xFF bytes, which no
    /// reader takes for a record or a checkpoint: the segment is closed for the FTL. Writes
    /// whole chunks from the next chunk boundary on.
    pub fn fill_to_end(&mut self, seg: u32, from: u32, fixed: bool) -> Result<()> {
        let ss = self.geo.segment_size;
        let wu = self.wu();
        if from >= ss {
            self.note_closed(seg);
            return Ok(());
        }
        if !from.is_multiple_of(wu) {
            return Err(Error::Invalid);
        }
        let chunk = self.chunk.max(wu);
        let mut fill: P::Vec<u8> = P::Vec::new();
        fill.try_resize(chunk as usize, 0xFF)?;
        let mut p = from;
        while p < ss {
            let next = (p / chunk).saturating_add(1).saturating_mul(chunk).min(ss);
            let n = next.saturating_sub(p) as usize;
            let part = fill.as_slice().get(..n).ok_or(Error::Invalid)?;
            if fixed {
                if let Err(e) = self.write_fixed(seg, p, part) {
                    self.stop(e);
                    return Err(e);
                }
            } else if !self.program(seg, p, part)? {
                // a failed program: the segment is retired anyway, nothing more goes there
                self.note_closed(seg);
                return Ok(());
            }
            p = next;
        }
        Ok(())
    }

    /// Stop writing for good (fail-stop) because of `e`; the first cause is kept.
    pub fn stop(&mut self, e: Error) {
        if !self.failed && self.fail_cause.is_none() {
            self.fail_cause = Some(e);
        }
        self.failed = true;
    }

    /// Segment info.
    pub fn seg(&self, s: u32) -> Result<&SegInfo> {
        self.segs.get(s)
    }

    /// Mutable segment info (the table's counters follow the change, see [`SegTable`]).
    pub fn seg_mut(&mut self, s: u32) -> Result<SegMut<'_>> {
        self.segs.get_mut(s)
    }

    /// Count live bytes of a record (or an aligned payload).
    pub fn live_add(&mut self, loc: Loc) {
        if let Ok(mut s) = self.seg_mut(loc.seg) {
            s.live = s.live.saturating_add(loc.bytes());
        }
    }

    /// Number of free segments.
    pub fn free_count(&self) -> u32 {
        self.segs.counts().free
    }

    /// Heads' persistent state.
    pub fn head_states(&self) -> [HeadState; NUM_HEADS] {
        let mut out = [HeadState::default(); NUM_HEADS];
        for (o, h) in out.iter_mut().zip(self.heads.iter()) {
            *o = HeadState { seg: h.seg, off: h.pos, seg_seq: h.seg_seq, next: h.next };
        }
        out
    }

    fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq = self.next_seq.saturating_add(1);
        s
    }

    /// Pick the least-worn free segment and mark it reserved.
    pub fn alloc_free(&mut self) -> Option<u32> {
        let i = self.segs.least_worn_free()?;
        if let Ok(mut s) = self.seg_mut(i) {
            s.state = segstate::RESERVED;
        }
        Some(i)
    }

    /// Erase `seg`, counting it. `Ok(true)`: erased. `Ok(false)`: the medium reported an erase
    /// failure (`EraseFailed`): the segment is now BAD (and marked bad on flash). Any other
    /// error (a transient I/O error, a read-only device, a power cut) retires nothing: the
    /// segment's state is left as it was and the engine stops writing (fail-stop).
    pub fn erase(&mut self, seg: u32) -> Result<bool> {
        self.note_closed(seg);
        self.rcache.invalidate_seg(seg);
        match self.flash.erase(seg) {
            Ok(()) => {
                self.stats.erases = self.stats.erases.saturating_add(1);
                let mut s = self.seg_mut(seg)?;
                s.erases = s.erases.saturating_add(1);
                s.flags = 0;
                Ok(true)
            }
            Err(crate::engine::flash::FlashError::EraseFailed) => {
                let _ = self.flash.mark_bad(seg);
                self.stats.retired = self.stats.retired.saturating_add(1);
                self.faults.erase_failures = self.faults.erase_failures.saturating_add(1);
                let mut s = self.seg_mut(seg)?;
                s.state = segstate::BAD;
                s.live = 0;
                Ok(false)
            }
            Err(e) => {
                if e != crate::engine::flash::FlashError::PowerCut {
                    self.faults.io_errors = self.faults.io_errors.saturating_add(1);
                }
                self.failed = true;
                Err(e.into())
            }
        }
    }

    /// Program `buf` at `off` of `seg`. `Ok(false)`: the program failed and the segment must be
    /// retired (the caller keeps the data in RAM). Other errors stop the engine (fail-stop).
    fn program(&mut self, seg: u32, off: u32, buf: &[u8]) -> Result<bool> {
        self.program_as(seg, off, buf, false)
    }

    /// [`Log::program`]; `behind`: through [`Flash::write_behind`] (not on MLC NAND, whose
    /// pair padding is planned against programs already made), a failure of which shows later
    /// ([`Log::reconcile`]).
    fn program_as(&mut self, seg: u32, off: u32, buf: &[u8], behind: bool) -> Result<bool> {
        if self.failed {
            return Err(Error::ReadOnly);
        }
        self.open_check(seg, off, buf.len())?;
        self.rcache.invalidate(seg, off, off.saturating_add(buf.len() as u32));
        let r = if behind && self.pairing.is_none() { self.flash.write_behind(seg, off, buf) } else { self.flash.write(seg, off, buf) };
        match r {
            Ok(()) => {
                self.stats.programmed_bytes = self.stats.programmed_bytes.saturating_add(buf.len() as u64);
                self.note_written(seg, off, buf.len());
                Ok(true)
            }
            Err(crate::engine::flash::FlashError::WriteFailed) => {
                self.faults.program_failures = self.faults.program_failures.saturating_add(1);
                if let Ok(mut s) = self.seg_mut(seg) {
                    s.flags |= SEG_SCRUB | SEG_RETIRE;
                }
                self.lost_numbers();
                Ok(false)
            }
            Err(e) => {
                // Fail-stop: the in-RAM state no longer matches the medium. Nothing is retired:
                // the error says nothing about the block (e.g. -ETIMEDOUT, -ENOMEM, -EROFS).
                if e != crate::engine::flash::FlashError::PowerCut {
                    self.faults.io_errors = self.faults.io_errors.saturating_add(1);
                }
                self.failed = true;
                Err(e.into())
            }
        }
    }

    /// Take back the records of write-behind programs that failed ([`Flash::failed_behind`]):
    /// the head still writing that segment goes ghost with them in front of its buffer, as if
    /// the program had failed when it was made (the segment is scrubbed and retired, the
    /// records relocated by the next checkpoint, `Engine::relocate_failed`). Every location
    /// stays right: the records keep their places, read from the buffer until relocated.
    /// A failure that no head can take (its segment left behind, a gap before the buffer)
    /// stops the engine: those records are in RAM only.
    pub fn reconcile(&mut self) -> Result<()> {
        while let Some((seg, off, len)) = self.flash.failed_behind() {
            let h = self.heads.iter().position(|hd| hd.seg == seg && seg != NO_SEG);
            let fits = h.and_then(|h| self.heads.get(h)).is_some_and(|hd| off.checked_add(len) == Some(hd.buf_start));
            let Some(h) = h.filter(|_| fits) else {
                self.flash.forget_failed(seg);
                self.stop(Error::Io);
                return Err(Error::Io);
            };
            let mut bytes: P::Vec<u8> = P::Vec::new();
            bytes.try_resize(len as usize, 0)?;
            if self.flash.read(seg, off, bytes.as_mut_slice()).is_err() {
                self.flash.forget_failed(seg);
                self.stop(Error::Io);
                return Err(Error::Io);
            }
            bytes.try_extend_from_slice(self.heads.get(h).ok_or(Error::Invalid)?.buf.as_slice())?;
            self.flash.forget_failed(seg);
            let hd = self.heads.get_mut(h).ok_or(Error::Invalid)?;
            hd.buf = bytes;
            hd.buf_start = off;
            hd.ghost = true;
            self.faults.program_failures = self.faults.program_failures.saturating_add(1);
            if let Ok(mut s) = self.seg_mut(seg) {
                s.flags |= SEG_SCRUB | SEG_RETIRE;
            }
            self.lost_numbers();
        }
        Ok(())
    }

    /// A program failed: the records it held (and the ones after it in its head's buffer)
    /// never reach the medium under their sequence numbers (the relocation writes them again
    /// under new ones), so the log has a gap there. Until a checkpoint covers it, no flush may
    /// write a SYNC marker (a cut would show the gap under a marker, which the mount takes for
    /// damage), and every fsync checkpoints (the roll-forward stops at the gap): as after an
    /// append that lost its number (`Log::append`).
    fn lost_numbers(&mut self) {
        self.need_checkpoint = true;
    }

    /// Wait for the write-behind programs, then [`Log::reconcile`]. An `Io` error of one
    /// stops the engine.
    pub fn settle(&mut self) -> Result<()> {
        if let Err(e) = self.flash.settle() {
            self.stop(e.into());
            return Err(e.into());
        }
        self.reconcile()
    }

    /// Whether a head is in ghost mode or a shadow awaits relocation.
    pub fn has_failed_seg(&self) -> bool {
        self.shadows.iter().any(Option::is_some) || self.heads.iter().any(|h| h.ghost)
    }

    /// The shadow holding failed segment `seg`'s unprogrammed bytes, if any.
    pub fn shadow_of(&self, seg: u32) -> Option<&Shadow<P>> {
        self.shadows.iter().flatten().find(|sh| sh.seg == seg && !sh.buf.is_empty())
    }

    /// Move ghost head `h`'s records into a free shadow slot and detach the head from its
    /// segment. With every slot taken the engine stops.
    pub fn ghost_to_shadow(&mut self, h: usize) -> Result<()> {
        // failed write-behind programs of the segment join the buffer before the head leaves
        self.settle()?;
        let (seg, start, next) = {
            let hd = self.heads.get(h).ok_or(Error::Invalid)?;
            (hd.seg, hd.buf_start, hd.next)
        };
        let Some(slot) = self.shadows.iter().position(Option::is_none) else {
            self.failed = true;
            return Err(Error::Io);
        };
        let buf = {
            let hd = self.heads.get_mut(h).ok_or(Error::Invalid)?;
            let b = core::mem::replace(&mut hd.buf, P::Vec::new());
            hd.ghost = false;
            hd.seg = NO_SEG;
            hd.next = NO_SEG;
            hd.pos = 0;
            hd.buf_start = 0;
            b
        };
        if let Some(sl) = self.shadows.get_mut(slot) {
            *sl = Some(Shadow { seg, start, buf });
        }
        if seg != NO_SEG {
            self.seg_mut(seg)?.state = segstate::FULL;
            // a program failed there: nothing more is written to it
            self.note_closed(seg);
        }
        if next != NO_SEG {
            let mut s = self.seg_mut(next)?;
            if s.state == segstate::RESERVED {
                s.state = segstate::FREE;
            }
        }
        Ok(())
    }

    /// Open a new segment for head `h`: use the reserved next segment, or any free one.
    fn open_segment(&mut self, h: usize) -> Result<()> {
        let prev = self.heads.get(h).ok_or(Error::Invalid)?.seg;
        let mut chained = prev != NO_SEG;
        let mut cand = self.heads.get(h).ok_or(Error::Invalid)?.next;
        let seg = loop {
            let s = if cand != NO_SEG {
                cand
            } else {
                chained = false;
                self.alloc_free().ok_or(Error::NoSpace)?
            };
            cand = NO_SEG;
            match self.erase(s) {
                Ok(true) => break s,
                // retired: try another segment
                Ok(false) => continue,
                Err(e) => {
                    // nothing was retired: give the segment back (the engine stopped writing)
                    if let Ok(mut si) = self.seg_mut(s) {
                        if si.state == segstate::RESERVED {
                            si.state = segstate::FREE;
                        }
                    }
                    return Err(e);
                }
            }
        };
        if !chained {
            self.need_checkpoint = true;
        }
        self.opened = self.opened.saturating_add(1);
        let mut next = self.alloc_free().unwrap_or(NO_SEG);
        if next != NO_SEG && !self.fresh_successor(next)? {
            next = NO_SEG;
            self.need_checkpoint = true;
        }
        let seg_seq = self.take_seq();
        {
            let mut si = self.seg_mut(seg)?;
            si.state = segstate::OPEN;
            si.live = 0;
            si.seq = seg_seq;
            si.flags = 0;
        }
        {
            let hd = self.heads.get_mut(h).ok_or(Error::Invalid)?;
            hd.seg = seg;
            hd.seg_seq = seg_seq;
            hd.pos = 0;
            hd.buf_start = 0;
            hd.buf.clear();
            hd.next = next;
            hd.ghost = false;
        }
        let mut payload = [0u8; SEGHDR_PAYLOAD];
        {
            let mut w = Writer::new(&mut payload);
            w.u8(h as u8)?;
            w.u32(prev)?;
            w.u32(next)?;
        }
        if let Err(e) = self.append_raw(h, rtype::SEGHDR, 0, Key::new(0, 0, u64::from(seg)), &payload, seg_seq) {
            // the head is in a segment without a header (the chain would end there): stop
            self.failed = true;
            return Err(e);
        }
        Ok(())
    }

    /// Whether the reserved segment `s` can be named as a head's successor: it must not hold a
    /// valid segment header numbered at or above the sequence the log is at. Such a header is
    /// left by a log this mount does not know (the newest checkpoints were lost, e.g. a wiped
    /// checkpoint area, and an older one mounted: its numbers are reused), and the mount that
    /// follows the chain would take it for the head's continuation (numbered above the
    /// predecessor, naming it) and replay the lost log. Such a segment is erased now; when the
    /// header survives the erase (a block device whose discard keeps the data) or the erase
    /// retires the segment, it is given back (`false`: no successor).
    fn fresh_successor(&mut self, s: u32) -> Result<bool> {
        let mut v = core::mem::replace(&mut self.scratch, P::Vec::new());
        let mut stale = |log: &mut Self| -> Result<bool> {
            let next_seq = log.next_seq;
            Ok(log.read_seghdr(s, &mut v)?.is_some_and(|h| h.0 >= next_seq))
        };
        let r = (|| -> Result<bool> {
            if !stale(self)? {
                return Ok(true);
            }
            if self.erase(s)? && !stale(self)? {
                return Ok(true);
            }
            if let Ok(mut si) = self.seg_mut(s) {
                if si.state == segstate::RESERVED {
                    si.state = segstate::FREE;
                }
            }
            Ok(false)
        })();
        self.scratch = v;
        if r.is_err() {
            if let Ok(mut si) = self.seg_mut(s) {
                if si.state == segstate::RESERVED {
                    si.state = segstate::FREE;
                }
            }
        }
        r
    }

    /// Open a segment for every head that has none (so the next checkpoint chains them).
    pub fn open_heads(&mut self) -> Result<()> {
        for h in 0..NUM_HEADS {
            if self.head_used(h) && self.heads.get(h).ok_or(Error::Invalid)?.seg == NO_SEG {
                self.open_segment(h)?;
            }
        }
        Ok(())
    }

    /// Close head `h`'s segment (flush, mark full).
    fn close_segment(&mut self, h: usize) -> Result<()> {
        // a failed write-behind program there is taken back while the head still holds it
        self.settle()?;
        if self.heads.get(h).ok_or(Error::Invalid)?.ghost {
            // keep the reserved successor: the head continues there
            let next = self.heads.get(h).ok_or(Error::Invalid)?.next;
            let seg = self.heads.get(h).ok_or(Error::Invalid)?.seg;
            self.ghost_to_shadow(h)?;
            let hd = self.heads.get_mut(h).ok_or(Error::Invalid)?;
            hd.seg = seg;
            hd.next = next;
            if next != NO_SEG {
                self.seg_mut(next)?.state = segstate::RESERVED;
            }
            return Ok(());
        }
        self.flush_head_phys(h, false)?;
        let (seg, pos, ghost) = {
            let hd = self.heads.get(h).ok_or(Error::Invalid)?;
            (hd.seg, hd.pos, hd.ghost)
        };
        if seg != NO_SEG {
            if self.fill_on_close && !ghost {
                // the FTL closes an allocation unit only once it is written to its end
                self.fill_to_end(seg, pos, false)?;
            } else {
                // nothing more is written to it: closed (the unwritten tail costs nothing)
                self.note_closed(seg);
            }
            self.seg_mut(seg)?.state = segstate::FULL;
        }
        Ok(())
    }

    fn wu(&self) -> u32 {
        self.geo.write_unit.max(1)
    }

    /// Where a record would start if the head is at `pos`: records never start in the last
    /// `REC_HDR - 1` bytes of a write unit.
    pub fn align_pos(wu: u32, pos: u32) -> u32 {
        let Some(r) = pos.checked_rem(wu) else { return pos };
        let rem = wu.saturating_sub(r);
        if (rem as usize) < REC_HDR && rem != wu {
            pos.saturating_add(rem)
        } else {
            pos
        }
    }

    fn push_bytes(&mut self, h: usize, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            if self.heads.get(h).ok_or(Error::Invalid)?.ghost {
                return self.heads.get_mut(h).ok_or(Error::Invalid)?.buf.try_extend_from_slice(data);
            }
            let chunk = self.chunk as usize;
            let (seg, full) = {
                let hd = self.heads.get_mut(h).ok_or(Error::Invalid)?;
                let space = chunk.saturating_sub(hd.buf.len());
                let take = space.min(data.len());
                let (a, b) = data.split_at(take);
                hd.buf.try_extend_from_slice(a)?;
                data = b;
                (hd.seg, hd.buf.len() >= chunk)
            };
            if full {
                // a write-behind program that failed since makes this head (or another) ghost
                self.reconcile()?;
                if self.heads.get(h).ok_or(Error::Invalid)?.ghost {
                    continue;
                }
                let hot = self.phys_head(crate::engine::format::HEAD_HOT);
                if h == self.phys_head(crate::engine::format::HEAD_META) && hot != h {
                    // ordering: file data reaches the medium before the metadata that refers to it
                    self.flush_head_phys(hot, false)?;
                }
                let start = self.heads.get(h).ok_or(Error::Invalid)?.buf_start;
                let buf = core::mem::replace(&mut self.heads.get_mut(h).ok_or(Error::Invalid)?.buf, P::Vec::new());
                // a full chunk: programmed off the call where the medium allows (write-behind)
                let r = self.program_as(seg, start, buf.as_slice(), true);
                if matches!(r, Ok(true)) && h == self.phys_head(crate::engine::format::HEAD_META) {
                    self.rcache.keep_written(seg, start, buf.as_slice());
                }
                let hd = self.heads.get_mut(h).ok_or(Error::Invalid)?;
                hd.buf = buf;
                if r? {
                    hd.buf.clear();
                    hd.buf_start = start.saturating_add(self.chunk);
                } else {
                    hd.ghost = true;
                }
            }
        }
        Ok(())
    }

    fn append_raw(&mut self, h: usize, rt: u8, flags: u8, key: Key, payload: &[u8], seq: u64) -> Result<Loc> {
        let (buf_start, buf_len) = {
            let hd = self.heads.get(h).ok_or(Error::Invalid)?;
            (hd.buf_start, hd.buf.len())
        };
        let r = self.append_bytes(h, rt, flags, key, payload, seq);
        if r.is_err() {
            self.rollback_head(h, buf_start, buf_len);
        }
        r
    }

    /// After a failed append to head `h` whose buffer started at `buf_start` with `buf_len`
    /// bytes: drop the bytes the failed record left in the buffer, so that the head position
    /// and the buffer agree again (every later location in the head stays right). When part of
    /// the record already reached the medium (the buffer was programmed in between), nothing
    /// can undo it: the engine stops writing (fail-stop).
    fn rollback_head(&mut self, h: usize, buf_start: u32, buf_len: usize) {
        let ok = match self.heads.get_mut(h) {
            Some(hd) if hd.buf_start == buf_start && hd.buf.len() >= buf_len => {
                hd.buf.truncate(buf_len);
                true
            }
            _ => false,
        };
        if !ok {
            self.failed = true;
        }
    }

    fn append_bytes(&mut self, h: usize, rt: u8, flags: u8, key: Key, payload: &[u8], seq: u64) -> Result<Loc> {
        let wu = self.wu();
        let (seg, seg_seq, pos) = {
            let hd = self.heads.get(h).ok_or(Error::Invalid)?;
            (hd.seg, hd.seg_seq, hd.pos)
        };
        let start = Self::align_pos(wu, pos);
        if start > pos {
            let zeros = [0u8; REC_HDR];
            self.push_bytes(h, zeros.get(..(start - pos) as usize).ok_or(Error::Invalid)?)?;
        }
        let hdr = RecHdr { rtype: rt, flags, crc: 0, seq, seg_seq, key, len: payload.len() as u32 };
        let mut hb = [0u8; REC_HDR];
        hdr.encode(self.seed, &mut hb, payload)?;
        self.push_bytes(h, &hb)?;
        self.push_bytes(h, payload)?;
        let len = (REC_HDR + payload.len()) as u32;
        let hd = self.heads.get_mut(h).ok_or(Error::Invalid)?;
        hd.pos = start.saturating_add(len);
        Ok(Loc { seg, off: start, len })
    }

    /// Append a record to head `h`, switching segments as needed. Returns its location.
    pub fn append(&mut self, h: usize, rt: u8, flags: u8, key: Key, payload: &[u8]) -> Result<Loc> {
        if self.failed {
            return Err(Error::ReadOnly);
        }
        let h = self.phys_head(h);
        let need = (REC_HDR + payload.len()) as u32;
        if need.saturating_add(REC_HDR as u32 * 2).saturating_add(self.wu()) > self.geo.segment_size {
            return Err(Error::Invalid);
        }
        let (seg, pos) = {
            let hd = self.heads.get(h).ok_or(Error::Invalid)?;
            (hd.seg, hd.pos)
        };
        if seg == NO_SEG {
            self.open_segment(h)?;
        } else {
            let start = Self::align_pos(self.wu(), pos);
            if start.saturating_add(need) > self.geo.segment_size {
                self.close_segment(h)?;
                self.open_segment(h)?;
            }
        }
        let seq = self.take_seq();
        self.since_checkpoint = self.since_checkpoint.saturating_add(u64::from(need));
        let r = self.append_raw(h, rt, flags, key, payload, seq);
        let kind = match rt {
            rtype::INDEX => Some(&mut self.stats.index_bytes),
            rtype::SEGTAB => Some(&mut self.stats.segtab_bytes),
            rtype::INODE => Some(&mut self.stats.inode_bytes),
            _ => None,
        };
        if let (Some(n), true) = (kind, r.is_ok()) {
            *n = n.saturating_add(u64::from(need));
        }
        if r.is_err() {
            self.since_checkpoint = self.since_checkpoint.saturating_sub(u64::from(need));
            if self.next_seq == seq.saturating_add(1) {
                // nothing else took a number: give it back (the log has no gap)
                self.next_seq = seq;
            } else {
                // The sequence number is now missing from the log, and roll-forward stops at
                // the first missing number: the next fsync must checkpoint instead of relying
                // on the log after it.
                self.need_checkpoint = true;
            }
        }
        r
    }

    /// How many of `max` blocks a data group starting at `start` fits in a segment (0: none).
    fn group_fit(&self, start: u32, max: usize) -> usize {
        let mut n = max.min(GROUP_MAX);
        while n > 0 {
            match group_extent(start, n as u32, self.data_align) {
                Some((_, end)) if end <= self.geo.segment_size => return n,
                _ => n -= 1,
            }
        }
        0
    }

    /// Append a data group (format.md 8.2) to head `h`: the table of `items` (inode, block
    /// index, 4096 bytes each) and their aligned payloads, as many as fit in the head's
    /// segment (a segment switch first when not one does). Pushes each written block's
    /// location to `locs` and returns how many were written. The group takes one sequence
    /// number for its table and one per block; on an error nothing of it stays in the buffer
    /// (fail-stop when part of it was programmed) and its numbers go back when nothing else
    /// took one (else the next fsync checkpoints).
    pub fn append_group(&mut self, h: usize, items: &[(u64, u64, &[u8])], locs: &mut P::Vec<Loc>) -> Result<usize> {
        if self.failed {
            return Err(Error::ReadOnly);
        }
        if self.data_align == 0 || items.is_empty() || items.iter().any(|it| it.2.len() != BLOCK_SIZE as usize) {
            return Err(Error::Invalid);
        }
        let h = self.phys_head(h);
        let mut switched = false;
        let n = loop {
            let (seg, pos) = {
                let hd = self.heads.get(h).ok_or(Error::Invalid)?;
                (hd.seg, hd.pos)
            };
            if seg == NO_SEG {
                self.open_segment(h)?;
                switched = true;
                continue;
            }
            let n = self.group_fit(Self::align_pos(self.wu(), pos), items.len());
            if n > 0 {
                break n;
            }
            if switched {
                // not one block fits in a fresh segment (format refuses such a geometry)
                return Err(Error::Invalid);
            }
            self.close_segment(h)?;
            self.open_segment(h)?;
            switched = true;
        };
        let todo = items.get(..n).ok_or(Error::Invalid)?;
        let mut table: P::Vec<u8> = P::Vec::new();
        table.try_resize(group_table_len(n), 0)?;
        {
            let mut w = Writer::new(table.as_mut_slice());
            w.u32(n as u32)?;
            for &(ino, blk, data) in todo {
                GroupEntry { ino, blk, crc: block_crc(self.seed, data) }.put(&mut w)?;
            }
        }
        let (buf_start, buf_len, seg) = {
            let hd = self.heads.get(h).ok_or(Error::Invalid)?;
            (hd.buf_start, hd.buf.len(), hd.seg)
        };
        let seq = self.next_seq;
        self.next_seq = seq.saturating_add(n as u64 + 1);
        let r = self.append_group_bytes(h, todo, table.as_slice(), seq);
        let (start, end) = match r {
            Ok(x) => x,
            Err(e) => {
                self.rollback_head(h, buf_start, buf_len);
                if self.next_seq == seq.saturating_add(n as u64 + 1) {
                    self.next_seq = seq;
                } else {
                    self.need_checkpoint = true;
                }
                return Err(e);
            }
        };
        self.since_checkpoint = self.since_checkpoint.saturating_add(u64::from(end.saturating_sub(start)));
        let mut off = end.saturating_sub((n as u32).saturating_mul(BLOCK_SIZE));
        for &(_, _, data) in todo {
            locs.try_push(Loc::aligned(seg, off, block_crc(self.seed, data)))?;
            off = off.saturating_add(BLOCK_SIZE);
        }
        Ok(n)
    }

    /// The bytes of a data group into head `h`'s buffer: the record (header + `table`), zeros
    /// to the first slot, the blocks. Returns (start, end of the extent).
    fn append_group_bytes(&mut self, h: usize, todo: &[(u64, u64, &[u8])], table: &[u8], seq: u64) -> Result<(u32, u32)> {
        let &(ino, blk, _) = todo.first().ok_or(Error::Invalid)?;
        let loc = self.append_bytes(h, rtype::DGROUP, 0, Key::new(ino, kind::DATA, blk), table, seq)?;
        let (payload0, end) = group_extent(loc.off, todo.len() as u32, self.data_align).ok_or(Error::Invalid)?;
        let zeros = [0u8; 512];
        let mut gap = payload0.saturating_sub(loc.off.saturating_add(loc.len)) as usize;
        while gap > 0 {
            let k = gap.min(zeros.len());
            self.push_bytes(h, zeros.get(..k).ok_or(Error::Invalid)?)?;
            gap -= k;
        }
        for &(_, _, data) in todo {
            self.push_bytes(h, data)?;
        }
        self.heads.get_mut(h).ok_or(Error::Invalid)?.pos = end;
        Ok((loc.off, end))
    }

    /// Read the aligned payload at `loc` (4096 bytes into `out`) and check it against the CRC
    /// the location carries (format.md 8.3).
    pub fn read_aligned(&mut self, loc: Loc, out: &mut [u8]) -> Result<()> {
        if !self.aligned_loc_ok(loc) || out.len() != BLOCK_SIZE as usize {
            return Err(Error::Corrupt);
        }
        self.read_bytes_as(loc.seg, loc.start(), out, true)?;
        self.check_aligned(out, loc)
    }

    /// Whether `loc` is an aligned location this volume can hold: it has aligned data and the
    /// slot starts at a multiple of the alignment (its end is checked by the read).
    fn aligned_loc_ok(&self, loc: Loc) -> bool {
        let a = self.data_align;
        loc.is_aligned() && a != 0 && loc.start().is_multiple_of(a)
    }

    /// Verify that `b` (the 4096 bytes read at the aligned location `loc`) carry its CRC.
    pub fn check_aligned(&self, b: &[u8], loc: Loc) -> Result<()> {
        if !self.aligned_loc_ok(loc) || b.len() != BLOCK_SIZE as usize || block_crc(self.seed, b) != loc.len {
            return Err(Error::Corrupt);
        }
        Ok(())
    }

    /// Write out (logical) head `h`'s buffer, padding to a write-unit boundary (to a chunk
    /// boundary on a block device).
    pub fn flush_head(&mut self, h: usize) -> Result<()> {
        let p = self.phys_head(h);
        self.flush_head_mark(p, false)
    }

    fn flush_head_phys(&mut self, h: usize, sync: bool) -> Result<()> {
        self.flush_head_mark(h, sync)
    }

    /// The boundary flushes pad to: the write unit, or the chunk (FTL page) on a block device.
    fn pad_align(&self) -> u32 {
        if self.pad_to_chunk {
            self.chunk.max(self.wu())
        } else {
            self.wu()
        }
    }

    /// Whether flushing head `h` writes a padding record (it has buffered bytes and room for a
    /// record header before the next write-unit boundary).
    fn pads(&self, h: usize) -> bool {
        match self.heads.get(h) {
            Some(hd) => {
                let (rem, units) = self.pad_plan(hd.pos);
                hd.seg != NO_SEG && !hd.buf.is_empty() && !hd.ghost && (rem >= REC_HDR as u32 || units > 0)
            }
            None => false,
        }
    }

    /// Write out head `h`'s buffer, padding to a write-unit boundary. With `sync`, the padding
    /// record carries `FLAG_SYNC` (written even when the buffer is empty or the gap to the
    /// boundary is too small for a record, then with a whole unit more), and a device flush
    /// follows it: see [`Log::flush_all`].
    fn flush_head_mark(&mut self, h: usize, sync: bool) -> Result<()> {
        let (buf_start, buf_len) = {
            let hd = self.heads.get(h).ok_or(Error::Invalid)?;
            (hd.buf_start, hd.buf.len())
        };
        let seq = self.next_seq;
        let r = self.flush_head_inner(h, sync);
        if r.is_err() && !self.failed {
            // failed before anything was programmed (no memory for the padding): take the
            // padding back out of the buffer, and its sequence number if nothing else took one
            self.rollback_head(h, buf_start, buf_len);
            if self.next_seq > seq {
                // every number the padding took is unused again (it took one per PAD record)
                self.next_seq = seq;
            }
        }
        r
    }

    /// Push a PAD record (header + `plen` zero bytes) with sequence number `seq` into head
    /// `h`'s buffer. The CRC over the zeros is computed in pieces, without allocating.
    fn push_pad(&mut self, h: usize, seq: u64, flags: u8, seg_seq: u64, plen: usize) -> Result<()> {
        let hdr = RecHdr { rtype: rtype::PAD, flags, crc: 0, seq, seg_seq, key: Key::default(), len: plen as u32 };
        let mut hb = [0u8; REC_HDR];
        let zeros = [0u8; 64];
        hdr.encode(self.seed, &mut hb, &[])?;
        let mut c = crate::engine::crc::crc32c_update(self.seed, &{
            let mut t = hb;
            if let Some(x) = t.get_mut(4..8) {
                x.copy_from_slice(&[0, 0, 0, 0]);
            }
            t
        });
        let mut left = plen;
        while left > 0 {
            let n = left.min(zeros.len());
            c = crate::engine::crc::crc32c_update(c, zeros.get(..n).unwrap_or(&[]));
            left -= n;
        }
        crate::engine::codec::put_u32(&mut hb, 4, c)?;
        let hd = self.heads.get_mut(h).ok_or(Error::Invalid)?;
        hd.buf.try_extend_from_slice(&hb)?;
        let target = hd.buf.len().saturating_add(plen);
        hd.buf.try_resize(target, 0)
    }

    /// The padding a flush of a head at `pos` writes: (zero bytes or PAD record to the next
    /// write-unit boundary `rem`, whole write units from there to the flush boundary `units`).
    /// The flush boundary is the next write unit, or on a block device the next chunk (FTL
    /// page), or the end of the segment if that comes first.
    fn pad_plan(&self, pos: u32) -> (u32, u32) {
        let wu = self.wu();
        let ss = self.geo.segment_size;
        let rem = (wu - pos % wu) % wu;
        let unit_end = pos.saturating_add(rem);
        let align = self.pad_align();
        let target = unit_end.div_ceil(align).saturating_mul(align).min(ss).max(unit_end);
        let target = self.tail_target(target);
        (rem, target.saturating_sub(unit_end) / wu)
    }

    /// Where a flush that would end at `target` ends: there, or on a block device the end of
    /// the segment when less room than one data block's record would be left after `target`.
    /// No data block fits there, so the next data record would close the segment with padding
    /// anyway, after the flush: on a cheap FTL that caches one erase block (mtdblock) that
    /// padding dirties the flushed block again and costs it one more rewrite. Written in the
    /// flush, the padding goes back in the same rewrite.
    fn tail_target(&self, target: u32) -> u32 {
        let ss = self.geo.segment_size;
        if self.geo.kind != FlashKind::Block || target >= ss {
            return target;
        }
        let wu = self.wu();
        let room = (BLOCK_SIZE.saturating_add(REC_HDR as u32)).div_ceil(wu).saturating_mul(wu);
        if ss.saturating_sub(target) < room {
            ss
        } else {
            target
        }
    }

    fn flush_head_inner(&mut self, h: usize, sync: bool) -> Result<()> {
        let wu = self.wu();
        let (seg, len, pos, seg_seq, ghost) = {
            let hd = self.heads.get(h).ok_or(Error::Invalid)?;
            (hd.seg, hd.buf.len(), hd.pos, hd.seg_seq, hd.ghost)
        };
        // never mark once a program failed: the records in RAM are not on the medium
        let sync = sync && !self.has_failed_seg();
        if seg == NO_SEG || ghost || (len == 0 && !sync) {
            return Ok(());
        }
        let (rem, mut units) = self.pad_plan(pos);
        let first_pad = rem as usize >= REC_HDR;
        if !first_pad && units == 0 && sync {
            // the SYNC marker needs a record: one more flush boundary's worth of padding
            let unit_end = u64::from(pos) + u64::from(rem);
            let align = u64::from(self.pad_align());
            let more = align.min(u64::from(self.geo.segment_size).saturating_sub(unit_end));
            let end = self.tail_target(unit_end.saturating_add(more).min(u64::from(u32::MAX)) as u32);
            units = u64::from(end).saturating_sub(unit_end) as u32 / wu;
        }
        // the last PAD written carries the SYNC mark
        let total_pads = u32::from(first_pad).saturating_add(units);
        let mut written = 0u32;
        if first_pad {
            written += 1;
            let flags = if sync && written == total_pads { FLAG_SYNC } else { 0 };
            let seq = self.take_seq();
            self.push_pad(h, seq, flags, seg_seq, rem as usize - REC_HDR)?;
        } else if rem > 0 {
            let hd = self.heads.get_mut(h).ok_or(Error::Invalid)?;
            let target = hd.buf.len().saturating_add(rem as usize);
            hd.buf.try_resize(target, 0)?;
        }
        for _ in 0..units {
            written = written.saturating_add(1);
            let flags = if sync && written == total_pads { FLAG_SYNC } else { 0 };
            let seq = self.take_seq();
            self.push_pad(h, seq, flags, seg_seq, (wu as usize).saturating_sub(REC_HDR))?;
        }
        self.program_buf(h, seg)
    }

    /// Program head `h`'s buffer (whole write units) at its start in `seg`; on a failed
    /// program the head goes ghost with the buffer kept.
    fn program_buf(&mut self, h: usize, seg: u32) -> Result<()> {
        let start = self.heads.get(h).ok_or(Error::Invalid)?.buf_start;
        let buf = core::mem::replace(&mut self.heads.get_mut(h).ok_or(Error::Invalid)?.buf, P::Vec::new());
        if buf.is_empty() {
            self.heads.get_mut(h).ok_or(Error::Invalid)?.buf = buf;
            return Ok(());
        }
        let r = self.program(seg, start, buf.as_slice());
        if matches!(r, Ok(true)) && h == self.phys_head(crate::engine::format::HEAD_META) {
            self.rcache.keep_written(seg, start, buf.as_slice());
        }
        let blen = buf.len() as u32;
        let hd = self.heads.get_mut(h).ok_or(Error::Invalid)?;
        hd.buf = buf;
        if r? {
            hd.buf.clear();
            hd.buf_start = start.saturating_add(blen);
            hd.pos = hd.buf_start;
        } else {
            // the padding stays in the buffer
            hd.ghost = true;
            hd.pos = start.saturating_add(blen);
        }
        Ok(())
    }

    /// The first page from which no page of an erase block of `pages` pages shares cells with
    /// a page before page `a`: padding up to it keeps every page before `a` out of reach of
    /// later programs (a page sharing cells with an earlier one is at most `dist` after it).
    pub fn pair_safe_end(pairing: Pairing, dist: u32, a: u32, pages: u32) -> u32 {
        let mut end = a;
        for q in a..a.saturating_add(dist).min(pages) {
            if pairing.lowest_shared(q, pages).is_some_and(|l| l < a) {
                end = q.saturating_add(1);
            }
        }
        end
    }

    /// MLC NAND, after the flush (and the SYNC marker) of a durability point: pad head `h`
    /// (flushed, at a page boundary) with one PAD record per page up to
    /// [`Log::pair_safe_end`], so that no later program of its segment is the upper page of a
    /// page written before the padding (durable records). The padding is numbered above the
    /// marker: a cut that destroys it later leaves a gap the marker does not vouch for (see
    /// `Engine::look_ahead`). Every head pads, also one idle since the last durability point:
    /// its earlier padding sits below this marker now. On an allocation failure nothing stays
    /// buffered and the sequence numbers are given back.
    fn pair_pad(&mut self, h: usize) -> Result<()> {
        let Some((pairing, dist)) = self.pairing else { return Ok(()) };
        let wu = self.wu();
        let (seg, pos, seg_seq, ghost, buffered, buf_start) = {
            let hd = self.heads.get(h).ok_or(Error::Invalid)?;
            (hd.seg, hd.pos, hd.seg_seq, hd.ghost, hd.buf.len(), hd.buf_start)
        };
        if seg == NO_SEG || ghost || self.has_failed_seg() {
            return Ok(());
        }
        if buffered != 0 || !pos.is_multiple_of(wu) {
            // only called right after the head was flushed
            return Err(Error::Invalid);
        }
        let pages = self.geo.segment_size / wu;
        let a = pos / wu;
        let end = Self::pair_safe_end(pairing, dist, a, pages);
        let seq = self.next_seq;
        let mut r = Ok(());
        for _ in a..end {
            let s = self.take_seq();
            r = self.push_pad(h, s, 0, seg_seq, (wu as usize).saturating_sub(REC_HDR));
            if r.is_err() {
                break;
            }
        }
        if r.is_ok() {
            r = self.program_buf(h, seg);
        }
        if r.is_err() && !self.failed {
            self.rollback_head(h, buf_start, 0);
            self.next_seq = seq;
        }
        if r.is_ok() {
            self.pair_pad_bytes = self.pair_pad_bytes.saturating_add(u64::from(end.saturating_sub(a)).saturating_mul(u64::from(wu)));
        }
        r
    }

    /// Flush every head (data heads first, then metadata) and the device cache.
    ///
    /// When the log is intact (every head chained from the last checkpoint, no failed
    /// program), the last padding record written carries `FLAG_SYNC`: once a record other than
    /// padding with a higher sequence number is on the medium, the device flush after that
    /// marker completed, so every record numbered below it was durable (on MLC NAND padding
    /// follows the marker before the flush: [`Log::pair_pad`]). Recovery uses this to tell damage (a
    /// durable record that no longer reads back) from a crash (records that never reached the
    /// medium). A failed device flush stops the engine, so no later record can vouch for it.
    pub fn flush_all(&mut self) -> Result<()> {
        // every write-behind program made (a failed one turns its head ghost: no marker)
        self.settle()?;
        let logical = [crate::engine::format::HEAD_HOT, crate::engine::format::HEAD_COLD, crate::engine::format::HEAD_META];
        // the heads that write them, each once, in that order (merged heads flush once)
        let mut order = [usize::MAX; NUM_HEADS];
        for (o, &l) in order.iter_mut().zip(logical.iter()) {
            let p = self.phys_head(l);
            if !logical.iter().take_while(|&&x| x != l).any(|&x| self.phys_head(x) == p) {
                *o = p;
            }
        }
        let meta = self.phys_head(crate::engine::format::HEAD_META);
        let mark = if self.need_checkpoint || self.has_failed_seg() {
            None
        } else {
            Some(order.iter().rev().copied().filter(|&h| h != usize::MAX).find(|&h| self.pads(h)).unwrap_or(meta))
        };
        for h in order {
            if h != usize::MAX {
                self.flush_head_mark(h, mark == Some(h))?;
            }
        }
        if self.pairing.is_some() {
            // MLC: after the marker, every head pads past the pages its next programs pair with
            for h in order {
                if h != usize::MAX {
                    self.pair_pad(h)?;
                }
            }
        }
        match self.flash.flush() {
            Ok(()) => {
                self.flushed_seq = self.next_seq;
                Ok(())
            }
            Err(e) => {
                self.failed = true;
                Err(e.into())
            }
        }
    }

    /// Read raw bytes, taking unflushed head buffers into account.
    pub fn read_bytes(&mut self, seg: u32, off: u32, out: &mut [u8]) -> Result<()> {
        self.read_bytes_as(seg, off, out, false)
    }

    /// `read_bytes`; `live`: the bytes belong to a record the index or a checkpoint refers to.
    /// An uncorrectable read of such a record (not a torn tail of the log, which the scanners
    /// read with `live` false) means the page is damaged: the segment is scrubbed (what is still
    /// readable moves elsewhere) and retired (made BAD, never programmed again) once nothing in
    /// it is live.
    fn read_bytes_as(&mut self, seg: u32, off: u32, out: &mut [u8], live: bool) -> Result<()> {
        let end = off.checked_add(out.len() as u32).ok_or(Error::Corrupt)?;
        if end > self.geo.segment_size {
            return Err(Error::Corrupt);
        }
        let mut flash_end = end;
        // (source: head index or NUM_HEADS + k for shadow slot k, start of its buffer)
        let mut from_buf: Option<(usize, u32)> = None;
        for (i, h) in self.heads.iter().enumerate() {
            if h.seg == seg && !h.buf.is_empty() && end > h.buf_start {
                flash_end = flash_end.min(h.buf_start.max(off));
                from_buf = Some((i, h.buf_start));
            }
        }
        for (k, sh) in (0..SHADOWS).zip(self.shadows.iter()) {
            let Some(sh) = sh else { continue };
            if sh.seg == seg && !sh.buf.is_empty() && end > sh.start && from_buf.is_none() {
                flash_end = flash_end.min(sh.start.max(off));
                from_buf = Some((NUM_HEADS.saturating_add(k), sh.start));
            }
        }
        if flash_end > off {
            let n = (flash_end - off) as usize;
            let part = out.get_mut(..n).ok_or(Error::Corrupt)?;
            self.read_medium(seg, off, part, live)?;
        }
        if let Some((h, bstart)) = from_buf {
            let src_buf = if h >= NUM_HEADS {
                let k = h.saturating_sub(NUM_HEADS);
                self.shadows.get(k).and_then(Option::as_ref).map(|s| s.buf.as_slice()).ok_or(Error::Corrupt)?
            } else {
                self.heads.get(h).ok_or(Error::Corrupt)?.buf.as_slice()
            };
            let from = flash_end.max(off);
            let bo = from.checked_sub(bstart).ok_or(Error::Corrupt)? as usize;
            let n = end.checked_sub(from).ok_or(Error::Corrupt)? as usize;
            let src = src_buf.get(bo..bo.saturating_add(n)).ok_or(Error::Corrupt)?;
            let oo = from.checked_sub(off).ok_or(Error::Corrupt)? as usize;
            out.get_mut(oo..oo.saturating_add(n)).ok_or(Error::Corrupt)?.copy_from_slice(src);
        }
        Ok(())
    }

    /// Read `out.len()` bytes at `off` of `seg` from the medium: small reads line by line
    /// through the read cache (a line missing is read whole and kept), larger ones directly.
    fn read_medium(&mut self, seg: u32, off: u32, out: &mut [u8], live: bool) -> Result<()> {
        if !self.rcache.wants(off, out.len()) {
            let r = self.flash.read(seg, off, out);
            return self.read_status(seg, r, live);
        }
        let line = self.rcache.line().max(1);
        let end = off.checked_add(out.len() as u32).ok_or(Error::Corrupt)?;
        let mut p = off;
        while p < end {
            let ls = p.saturating_sub(p.checked_rem(line).unwrap_or(0));
            let part_end = end.min(ls.saturating_add(line));
            let dst = out.get_mut(p.saturating_sub(off) as usize..part_end.saturating_sub(off) as usize).ok_or(Error::Corrupt)?;
            let (a, b) = (p.saturating_sub(ls) as usize, part_end.saturating_sub(ls) as usize);
            if let Some(src) = self.rcache.get(seg, ls) {
                copy_exact(dst, src.get(a..b))?;
            } else if ls.saturating_add(line) <= self.geo.segment_size {
                match self.rcache.victim() {
                    Some((slot, buf)) => {
                        let r = self.flash.read(seg, ls, buf);
                        // a failed read leaves the slot empty
                        self.read_status(seg, r, live)?;
                        self.rcache.fill(slot, seg, ls);
                        copy_exact(dst, self.rcache.line_at(slot).and_then(|l| l.get(a..b)))?;
                    }
                    None => {
                        let r = self.flash.read(seg, p, dst);
                        self.read_status(seg, r, live)?;
                    }
                }
            } else {
                let r = self.flash.read(seg, p, dst);
                self.read_status(seg, r, live)?;
            }
            p = part_end;
        }
        Ok(())
    }

    /// Account for the outcome `r` of a read of `seg`: a corrected read flags the segment for
    /// scrubbing; an uncorrectable read of a `live` record (see `read_bytes_as`) flags it for
    /// retirement.
    fn read_status(&mut self, seg: u32, r: core::result::Result<ReadStatus, crate::engine::flash::FlashError>, live: bool) -> Result<()> {
        match r {
            Ok(ReadStatus::Clean) => Ok(()),
            Ok(ReadStatus::Corrected) => {
                self.faults.corrected_reads = self.faults.corrected_reads.saturating_add(1);
                if let Ok(mut s) = self.seg_mut(seg) {
                    s.flags |= SEG_SCRUB;
                }
                Ok(())
            }
            Err(e) => {
                if e == crate::engine::flash::FlashError::Uncorrectable {
                    self.faults.uncorrectable_reads = self.faults.uncorrectable_reads.saturating_add(1);
                    if live {
                        // move what is still readable off the damaged block, then retire it
                        if let Ok(mut s) = self.seg_mut(seg) {
                            s.flags |= SEG_SCRUB | SEG_RETIRE;
                        }
                    }
                }
                Err(e.into())
            }
        }
    }

    /// Read and verify the live record at `loc` into `out` (header + payload).
    pub fn read_record(&mut self, loc: Loc, out: &mut P::Vec<u8>) -> Result<RecHdr> {
        self.read_record_as(loc, out, true)
    }

    /// `read_record`; `live` as for `read_bytes_as`.
    fn read_record_as(&mut self, loc: Loc, out: &mut P::Vec<u8>, live: bool) -> Result<RecHdr> {
        if (loc.len as usize) < REC_HDR || loc.len > self.geo.segment_size {
            return Err(Error::Corrupt);
        }
        out.clear();
        out.try_resize(loc.len as usize, 0)?;
        self.read_bytes_as(loc.seg, loc.off, out.as_mut_slice(), live)?;
        self.check_record(out.as_slice(), loc)
    }

    /// Read the live bytes `[off, off + out.len())` of `seg` in one flash read (head buffers
    /// taken into account), for several records that lie back to back; `check_record` then
    /// verifies each.
    pub fn read_span(&mut self, seg: u32, off: u32, out: &mut [u8]) -> Result<()> {
        self.read_bytes_as(seg, off, out, true)
    }

    /// Verify that `b` (the `loc.len` bytes read at `loc`) is a valid record: its header, its
    /// length and its CRC.
    pub fn check_record(&self, b: &[u8], loc: Loc) -> Result<RecHdr> {
        if b.len() != loc.len as usize {
            return Err(Error::Corrupt);
        }
        let hdr = RecHdr::decode(b)?;
        if hdr.len as usize + REC_HDR != loc.len as usize {
            return Err(Error::Corrupt);
        }
        let (h, p) = b.split_at(REC_HDR);
        if !hdr.check(self.seed, h, p) {
            return Err(Error::Corrupt);
        }
        Ok(hdr)
    }

    /// Scan the record starting at or after `off` in `seg` whose segment sequence must be
    /// `seg_seq`. Returns the header, its location and the offset after it; None at the end of
    /// the valid log. Reads the record into `out`.
    pub fn scan(&mut self, seg: u32, off: u32, seg_seq: u64, out: &mut P::Vec<u8>) -> Result<Option<(RecHdr, Loc)>> {
        match self.scan_at(seg, off, seg_seq, out)? {
            Scan::Rec(h, l) => Ok(Some((h, l))),
            Scan::End | Scan::Bad => Ok(None),
        }
    }

    /// Like [`Log::scan`], telling the end of what was written (erased or zeroed bytes, a
    /// stale record of an earlier use of the segment) from bytes that were written but do not
    /// read back as a record (a torn program, or damage). Every bound is computed in u64: the
    /// offsets and lengths come from the medium.
    pub fn scan_at(&mut self, seg: u32, off: u32, seg_seq: u64, out: &mut P::Vec<u8>) -> Result<Scan> {
        self.scan_with(seg, off, seg_seq, out, None)
    }

    /// [`Log::scan_at`] for sequential scans: the bytes come from `win`, which reads the
    /// segment ahead in large reads (see [`ScanWindow`]), so each page is read once and a
    /// record's header and body in the same read. Only for scans with no write to the medium
    /// between them (the window is not kept coherent with writes).
    pub fn scan_in(&mut self, seg: u32, off: u32, seg_seq: u64, out: &mut P::Vec<u8>, win: &mut ScanWindow<P>) -> Result<Scan> {
        self.scan_with(seg, off, seg_seq, out, Some(win))
    }

    fn scan_with(&mut self, seg: u32, off: u32, seg_seq: u64, out: &mut P::Vec<u8>, mut win: Option<&mut ScanWindow<P>>) -> Result<Scan> {
        let wu = self.wu();
        let ss = u64::from(self.geo.segment_size);
        let start = Self::align_pos(wu, off);
        if u64::from(start) + REC_HDR as u64 > ss {
            return Ok(Scan::End);
        }
        out.clear();
        out.try_resize(REC_HDR, 0)?;
        match self.read_scanned(seg, start, out.as_mut_slice(), win.as_deref_mut()) {
            Ok(()) => {}
            Err(Error::Corrupt) => return Ok(Scan::Bad),
            Err(e) => return Err(e),
        }
        let hb = out.as_slice();
        if hb.iter().all(|&b| b == 0xFF) || hb.iter().all(|&b| b == 0) {
            return Ok(Scan::End);
        }
        let hdr = match RecHdr::decode(hb) {
            Ok(h) => h,
            Err(_) => return Ok(Scan::Bad),
        };
        if hdr.seg_seq < seg_seq {
            return Ok(Scan::End);
        }
        if hdr.seg_seq != seg_seq {
            return Ok(Scan::Bad);
        }
        let total = u64::from(hdr.len) + REC_HDR as u64;
        if u64::from(start) + total > ss {
            return Ok(Scan::Bad);
        }
        let loc = Loc { seg, off: start, len: total as u32 };
        out.clear();
        out.try_resize(loc.len as usize, 0)?;
        let r = self.read_scanned(seg, start, out.as_mut_slice(), win).and_then(|()| self.check_record(out.as_slice(), loc));
        match r {
            Ok(h) if h.rtype == rtype::DGROUP => Ok(self.group_walk(h, loc, out.as_slice().get(REC_HDR..).unwrap_or(&[]))),
            Ok(h) => Ok(Scan::Rec(h, loc)),
            Err(Error::Corrupt) => Ok(Scan::Bad),
            Err(e) => Err(e),
        }
    }

    /// For the roll-forward's reading of data records without their payloads: the header of
    /// the record at `off` of `seg` (sequence `seg_seq`) when it reads back, decodes and is
    /// a DATA record of a whole block that fits the segment; its location and header, the
    /// payload and the CRC unchecked. `None` for anything else (the caller scans it in full).
    /// From the head's scan window `win` when it holds the header, else one small read
    /// (through the read cache: consecutive headers share no page, a record being longer than
    /// a page).
    pub fn scan_data_header(&mut self, seg: u32, off: u32, seg_seq: u64, win: &ScanWindow<P>) -> Result<Option<(RecHdr, Loc)>> {
        let start = Self::align_pos(self.wu(), off);
        let mut hb = [0u8; REC_HDR];
        if u64::from(start) + REC_HDR as u64 > u64::from(self.geo.segment_size) {
            return Ok(None);
        }
        // the head's scan window may hold it (the first data record after a segment's header
        // is read whole, and the window's last read ran past it)
        if let Some(b) = win.holding(seg, start, REC_HDR) {
            hb.copy_from_slice(b);
            return Ok(self.data_header_at(&hb, seg, start, seg_seq));
        }
        // Through the read cache, a page: reading the header's bytes alone (a sub-page read
        // on NAND with soft ECC) cost more on the rig's nandsim, which charges a page's access
        // and transfer for every read command and takes two for a sub-page read (a mount
        // after a cut: 173 us per read against 124, docs/design.md "Records taken on trust").
        match self.read_bytes_as(seg, start, &mut hb, false) {
            Ok(()) => {}
            Err(Error::Corrupt) => return Ok(None),
            Err(e) => return Err(e),
        }
        Ok(self.data_header_at(&hb, seg, start, seg_seq))
    }

    /// `hb` (read at `start` of `seg`) as `scan_data_header` takes it.
    fn data_header_at(&self, hb: &[u8; REC_HDR], seg: u32, start: u32, seg_seq: u64) -> Option<(RecHdr, Loc)> {
        let h = RecHdr::decode(hb).ok()?;
        let total = u64::from(h.len) + REC_HDR as u64;
        if h.rtype != rtype::DATA || h.seg_seq != seg_seq || h.len != BLOCK_SIZE || u64::from(start) + total > u64::from(self.geo.segment_size) {
            return None;
        }
        Some((h, Loc { seg, off: start, len: total as u32 }))
    }

    /// Whether the record at `loc` reads back whole and valid, read one write unit at a time
    /// through the read cache (the pages holding records' headers, which the roll-forward read
    /// by `scan_data_header`, are then not read again), as a scan reads a torn tail (a failing
    /// read does not mark the segment damaged).
    pub fn record_reads_back(&mut self, loc: Loc, out: &mut P::Vec<u8>) -> Result<bool> {
        out.clear();
        out.try_resize(loc.len as usize, 0)?;
        let wu = self.wu().max(1);
        let mut at = loc.off;
        let mut done = 0usize;
        while done < out.len() {
            let piece = (wu.saturating_sub(at % wu) as usize).min(out.len().saturating_sub(done));
            let Some(dst) = out.as_mut_slice().get_mut(done..done.saturating_add(piece)) else { return Err(Error::Corrupt) };
            match self.read_bytes_as(loc.seg, at, dst, false) {
                Ok(()) => {}
                Err(Error::Corrupt) => return Ok(false),
                Err(e) => return Err(e),
            }
            done = done.saturating_add(piece);
            at = at.saturating_add(piece as u32);
        }
        match self.check_record(out.as_slice(), loc) {
            Ok(_) => Ok(true),
            Err(Error::Corrupt) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The bytes at `off` of `seg` for a scan: from `win` when it can hold them, else read
    /// as a torn tail may be (`read_bytes_as`, not live).
    fn read_scanned(&mut self, seg: u32, off: u32, out: &mut [u8], win: Option<&mut ScanWindow<P>>) -> Result<()> {
        if let Some(w) = win {
            if self.window_fill(w, seg, off, out.len()) {
                if let Some(src) = w.holding(seg, off, out.len()) {
                    return copy_exact(out, Some(src));
                }
            }
        }
        self.read_bytes_as(seg, off, out, false)
    }

    /// Make `w` hold `[off, off + len)` of `seg`: a hit, or one read of the window's next size
    /// (more for a longer record) from the write unit holding `off`, up to the segment's end
    /// and below what the head buffers serve. `false` when it cannot: no memory, bytes a head
    /// buffer serves, or a failed read (an unreadable or torn page somewhere in it; the
    /// window is not tried again before the scan passes it, and the caller reads exactly
    /// what it needs, meeting the same error only if the record itself is on that page).
    fn window_fill(&mut self, w: &mut ScanWindow<P>, seg: u32, off: u32, len: usize) -> bool {
        let end = u64::from(off).saturating_add(len as u64);
        let have = u64::from(w.start).saturating_add(w.buf.len() as u64);
        if w.holding(seg, off, len).is_some() {
            return true;
        }
        if w.failed.is_some_and(|(s, until)| s == seg && end <= u64::from(until)) {
            return false;
        }
        let wu = self.wu();
        let start = off.saturating_sub(off.checked_rem(wu).unwrap_or(0));
        if w.seg != seg || u64::from(start) >= have.saturating_add(SCAN_WINDOW) {
            // a long jump (over a data group's payload or data records read by their headers
            // alone, to another segment): start small again
            w.size = 0;
        }
        // two write units at least, SCAN_WINDOW at most unless two write units are more (no
        // `clamp`: it panics when its bounds cross, which a write unit above half the window
        // would make them)
        let lo = u64::from(wu).saturating_mul(2);
        w.size = w.size.saturating_mul(2).max(lo).min(SCAN_WINDOW.max(lo));
        let mut stop = u64::from(start)
            .saturating_add(w.size.max(end.saturating_sub(u64::from(start))))
            .min(u64::from(self.geo.segment_size));
        for h in self.heads.iter().filter(|h| h.seg == seg && !h.buf.is_empty()) {
            stop = stop.min(u64::from(h.buf_start));
        }
        if let Some((_, at)) = w.stop_at.filter(|&(s, _)| s == seg) {
            // up to the end of the write unit holding the scan's end (never below the request)
            stop = stop.min(u64::from(at).div_ceil(u64::from(wu)).saturating_mul(u64::from(wu)).max(end));
        }
        if let Some(sh) = self.shadow_of(seg) {
            stop = stop.min(u64::from(sh.start));
        }
        // What the window holds from `start` on is kept, and only what follows it is read: a
        // record running past the window's end (the first data record after a segment
        // header, a record after a run read by headers) costs the pages it lacks, not a
        // second read of those it has.
        let kept = if w.seg == seg && start >= w.start && u64::from(start) < have && have < stop {
            let from = start.saturating_sub(w.start) as usize;
            let n = w.buf.len().saturating_sub(from);
            w.buf.as_mut_slice().copy_within(from.., 0);
            w.buf.truncate(n);
            n
        } else {
            0
        };
        w.seg = NO_SEG;
        if stop < end || w.buf.try_resize(stop.saturating_sub(u64::from(start)) as usize, 0).is_err() {
            w.buf.clear();
            return false;
        }
        let at = start.saturating_add(kept as u32);
        let r = match w.buf.as_mut_slice().get_mut(kept..) {
            Some(rest) => self.flash.read(seg, at, rest),
            None => Err(crate::engine::flash::FlashError::Io),
        };
        match r {
            Ok(st) => {
                if st == ReadStatus::Corrected {
                    self.faults.corrected_reads = self.faults.corrected_reads.saturating_add(1);
                    if let Ok(mut s) = self.seg_mut(seg) {
                        s.flags |= SEG_SCRUB;
                    }
                }
                w.seg = seg;
                w.start = start;
                true
            }
            Err(_) => {
                w.buf.clear();
                w.failed = Some((seg, stop as u32));
                false
            }
        }
    }

    /// A valid data group record at `loc` with table `table`, as the walkers see it: its
    /// location with the length of the whole extent (the next record starts after its last
    /// payload slot, format.md 8.2). `Scan::Bad` when the volume has no aligned data, the table
    /// does not decode, does not name the record's key first, or the extent leaves the segment.
    fn group_walk(&self, h: RecHdr, loc: Loc, table: &[u8]) -> Scan {
        let Ok(n) = group_count(table) else { return Scan::Bad };
        let first = crate::engine::format::group_entry(table, 0);
        let key_ok = first.is_ok_and(|e| Key::new(e.ino, kind::DATA, e.blk) == h.key);
        match group_extent(loc.off, n, self.data_align) {
            Some((_, end)) if self.data_align != 0 && key_ok && end <= self.geo.segment_size => {
                Scan::Rec(h, Loc { seg: loc.seg, off: loc.off, len: end.saturating_sub(loc.off) })
            }
            _ => Scan::Bad,
        }
    }

    /// After a bad spot at `from` in `seg`: the first valid record of segment sequence
    /// `seg_seq` that starts after it, searched byte by byte (records need not start on a
    /// write-unit boundary). Unreadable windows are skipped. Used only at mount, once per bad
    /// spot, so reading the rest of the segment is acceptable.
    pub fn resync(&mut self, seg: u32, from: u32, seg_seq: u64, out: &mut P::Vec<u8>) -> Result<Option<(RecHdr, Loc)>> {
        let wu = self.wu();
        let ss = self.geo.segment_size;
        let mut w: P::Vec<u8> = P::Vec::new();
        w.try_resize(wu as usize, 0)?;
        let magic = crate::engine::format::REC_MAGIC.to_le_bytes();
        let mut p = from.saturating_add(1);
        // last byte of the previous window, if it was readable (a magic may straddle windows)
        let mut prev: Option<u8> = None;
        while u64::from(p) + REC_HDR as u64 <= u64::from(ss) {
            // windows end on write-unit boundaries: an unreadable page spoils only its own
            let end = (u64::from(p / wu) + 1).saturating_mul(u64::from(wu)).min(u64::from(ss)) as u32;
            let n = end.saturating_sub(p) as usize;
            let part = w.as_mut_slice().get_mut(..n).ok_or(Error::Corrupt)?;
            match self.read_bytes(seg, p, part) {
                Ok(()) => {}
                Err(Error::Corrupt) => {
                    prev = None;
                    p = end;
                    continue;
                }
                Err(e) => return Err(e),
            }
            let part = w.as_slice().get(..n).ok_or(Error::Corrupt)?;
            let first = part.first().copied();
            if prev == magic.first().copied() && first == magic.get(1).copied() {
                let c = p.saturating_sub(1);
                if c > from && Self::align_pos(wu, c) == c {
                    if let Scan::Rec(h, l) = self.scan_at(seg, c, seg_seq, out)? {
                        return Ok(Some((h, l)));
                    }
                }
            }
            let part = w.as_slice().get(..n).ok_or(Error::Corrupt)?;
            prev = part.last().copied();
            for i in 0..n.saturating_sub(1) {
                let part = w.as_slice().get(..n).ok_or(Error::Corrupt)?;
                if part.get(i) != magic.first() || part.get(i + 1) != magic.get(1) {
                    continue;
                }
                let c = p.saturating_add(i as u32);
                if Self::align_pos(wu, c) != c {
                    continue;
                }
                if let Scan::Rec(h, l) = self.scan_at(seg, c, seg_seq, out)? {
                    return Ok(Some((h, l)));
                }
            }
            p = end;
        }
        Ok(None)
    }

    /// Read a segment header at offset 0 of `seg`: (seg_seq, head, prev, next).
    pub fn read_seghdr(&mut self, seg: u32, out: &mut P::Vec<u8>) -> Result<Option<(u64, u8, u32, u32)>> {
        out.clear();
        out.try_resize(REC_HDR, 0)?;
        if self.read_bytes(seg, 0, out.as_mut_slice()).is_err() {
            return Ok(None);
        }
        let hdr = match RecHdr::decode(out.as_slice()) {
            Ok(h) if h.rtype == rtype::SEGHDR && h.len as usize == SEGHDR_PAYLOAD => h,
            _ => return Ok(None),
        };
        match self.scan(seg, 0, hdr.seg_seq, out)? {
            Some((h, _)) if h.rtype == rtype::SEGHDR => {
                let p = out.as_slice().get(REC_HDR..).ok_or(Error::Corrupt)?;
                let mut r = Reader::new(p);
                let head = r.u8()?;
                let prev = r.u32()?;
                let next = r.u32()?;
                Ok(Some((hdr.seg_seq, head, prev, next)))
            }
            _ => Ok(None),
        }
    }
}

/// `dst.copy_from_slice(src)`, `Corrupt` unless `src` is there and as long.
fn copy_exact(dst: &mut [u8], src: Option<&[u8]>) -> Result<()> {
    match src {
        Some(s) if s.len() == dst.len() => {
            dst.copy_from_slice(s);
            Ok(())
        }
        _ => Err(Error::Corrupt),
    }
}

impl<P: Platform, F: Flash> NodeIo for Log<P, F> {
    fn read_node(&mut self, loc: Loc, buf: &mut [u8]) -> Result<usize> {
        let mut v = core::mem::replace(&mut self.scratch, P::Vec::new());
        let r = self.read_record(loc, &mut v);
        let res = match r {
            Ok(h) if h.rtype == rtype::INDEX => {
                let p = v.as_slice().get(REC_HDR..).ok_or(Error::Corrupt)?;
                let dst = buf.get_mut(..p.len()).ok_or(Error::Corrupt)?;
                dst.copy_from_slice(p);
                Ok(p.len())
            }
            Ok(_) => Err(Error::Corrupt),
            Err(e) => Err(e),
        };
        self.scratch = v;
        res
    }

    fn write_node(&mut self, payload: &[u8], first: Key, _level: u8) -> Result<Loc> {
        let loc = self.append(crate::engine::format::HEAD_META, rtype::INDEX, 0, first, payload)?;
        self.live_add(loc);
        Ok(loc)
    }

    fn dead(&mut self, loc: Loc) {
        if let Ok(mut s) = self.seg_mut(loc.seg) {
            s.live = s.live.saturating_sub(loc.bytes());
        }
    }
}
