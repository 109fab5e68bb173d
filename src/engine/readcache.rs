//! The log's read cache: copies of recently read write units (NAND pages) of the medium, so
//! that small records sharing a page (directory entries, inode records, xattrs, segment
//! headers) cost one flash read instead of one each.
//!
//! Coherence: a line holds exactly what the medium holds at its place. The log drops the
//! lines a program, a fill or an erase touches before it reaches the medium (`invalidate`,
//! `invalidate_seg`; a segment the checkpoint frees or retires is dropped too), and never
//! serves bytes that the head buffers serve instead (reads of unflushed records come from RAM
//! before the cache is asked). `Engine::flash`, which hands out the medium itself, empties the
//! cache. A line is only filled by a read that
//! succeeded (a corrected read included: the data is right), so a failing page is read from
//! the medium again, and fails again, every time.
//!
//! Memory: `READ_CACHE_BYTES` of lines (one write unit each, at most `MAX_LINES`) and 12 bytes
//! of tag per line, allocated on the first read; without memory nothing is cached (reads go to
//! the medium as before).
//! Replacement: CLOCK (a referenced bit per line, set on every hit).

use crate::engine::format::NO_SEG;
use crate::engine::platform::{FallibleVec, Platform};

/// Reads of more than this many lines go straight to the medium: the cache is for small
/// records, and one large read (a readahead span, a replay window) would evict all of them.
pub const MAX_CACHED_READ_LINES: u32 = 2;

/// Size of the cache in bytes: 128 pages of 2 KiB, 64 of 4 KiB.
pub const READ_CACHE_BYTES: usize = 256 << 10;

/// Most lines a cache holds, whatever its size in bytes (the tags are searched linearly).
pub const MAX_LINES: usize = 128;

#[derive(Debug, Clone, Copy)]
struct Tag {
    /// Segment of the line, `NO_SEG` for an empty slot.
    seg: u32,
    /// Offset of the line in the segment (a multiple of the line size).
    off: u32,
    /// Hit since the clock hand last passed.
    referenced: bool,
}

impl Default for Tag {
    fn default() -> Self {
        Tag { seg: NO_SEG, off: 0, referenced: false }
    }
}

/// The cache. See the module documentation.
pub struct ReadCache<P: Platform> {
    /// Bytes per line (the write unit).
    line: u32,
    /// Lines wanted (0: caching off).
    lines: usize,
    tags: P::Vec<Tag>,
    data: P::Vec<u8>,
    hand: usize,
    /// Reads served from the cache (line by line).
    pub hits: u64,
    /// Lines read from the medium into the cache.
    pub misses: u64,
    /// Lines kept from programs of metadata pages (`keep_written`).
    pub written: u64,
}

impl<P: Platform> ReadCache<P> {
    /// A cache of `bytes` bytes in lines of `line` bytes (nothing is allocated yet).
    pub fn new(line: u32, bytes: usize) -> Self {
        let lines = if line == 0 { 0 } else { (bytes / line as usize).min(MAX_LINES) };
        ReadCache { line, lines, tags: P::Vec::new(), data: P::Vec::new(), hand: 0, hits: 0, misses: 0, written: 0 }
    }

    /// Bytes per line (0 when the cache is off).
    pub fn line(&self) -> u32 {
        if self.lines == 0 {
            0
        } else {
            self.line
        }
    }

    /// Whether a read of `len` bytes at `off` should go through the cache.
    pub fn wants(&self, off: u32, len: usize) -> bool {
        if self.lines == 0 || len == 0 {
            return false;
        }
        let l = u64::from(self.line);
        let first = u64::from(off).checked_div(l).unwrap_or(0);
        let last = (u64::from(off).saturating_add(len as u64).saturating_sub(1)).checked_div(l).unwrap_or(0);
        last.saturating_sub(first) < u64::from(MAX_CACHED_READ_LINES)
    }

    fn slot_of(&self, seg: u32, off: u32) -> Option<usize> {
        self.tags.as_slice().iter().position(|t| t.seg == seg && t.off == off && seg != NO_SEG)
    }

    /// The line at `off` (a line boundary) of `seg`, if cached.
    pub fn get(&mut self, seg: u32, off: u32) -> Option<&[u8]> {
        let i = self.slot_of(seg, off)?;
        if let Some(t) = self.tags.as_mut_slice().get_mut(i) {
            t.referenced = true;
        }
        self.hits = self.hits.saturating_add(1);
        let l = self.line as usize;
        self.data.as_slice().get(i.saturating_mul(l)..i.saturating_mul(l).saturating_add(l))
    }

    /// The bytes of slot `i` (a line just filled).
    pub fn line_at(&self, i: usize) -> Option<&[u8]> {
        let l = self.line as usize;
        self.data.as_slice().get(i.saturating_mul(l)..i.saturating_mul(l).saturating_add(l))
    }

    /// A slot for a new line (emptied: it holds nothing until [`ReadCache::fill`]), and its
    /// bytes to read the line into; `None` without memory.
    pub fn victim(&mut self) -> Option<(usize, &mut [u8])> {
        if self.lines == 0 {
            return None;
        }
        if self.tags.len() != self.lines {
            let l = self.line as usize;
            if self.tags.try_resize(self.lines, Tag::default()).is_err()
                || self.data.try_resize(self.lines.saturating_mul(l), 0).is_err()
            {
                // no memory: no cache (and nothing held)
                self.tags = P::Vec::new();
                self.data = P::Vec::new();
                return None;
            }
        }
        let n = self.tags.len();
        // CLOCK: the first slot whose referenced bit is clear, clearing them on the way
        let next = |i: usize| i.saturating_add(1).checked_rem(n).unwrap_or(0);
        let mut i = self.hand.checked_rem(n).unwrap_or(0);
        for _ in 0..n.saturating_mul(2) {
            match self.tags.as_mut_slice().get_mut(i) {
                Some(t) if t.seg != NO_SEG && t.referenced => t.referenced = false,
                _ => break,
            }
            i = next(i);
        }
        self.hand = next(i);
        if let Some(t) = self.tags.as_mut_slice().get_mut(i) {
            *t = Tag::default();
        }
        let l = self.line as usize;
        let bytes = self.data.as_mut_slice().get_mut(i.saturating_mul(l)..i.saturating_mul(l).saturating_add(l))?;
        Some((i, bytes))
    }

    /// Slot `i` (from [`ReadCache::victim`]) now holds the line at `off` of `seg`.
    pub fn fill(&mut self, i: usize, seg: u32, off: u32) {
        self.misses = self.misses.saturating_add(1);
        if let Some(t) = self.tags.as_mut_slice().get_mut(i) {
            *t = Tag { seg, off, referenced: false };
        }
    }

    /// `data`, just programmed at `off` (a line boundary) of `seg`, is what the medium now
    /// holds there: keep its whole lines (at most `MAX_CACHED_READ_LINES`; a larger program is
    /// data streaming out, which would evict the small records the cache is for). The records
    /// of a metadata page are read back soon (a readdir, a rename or unlink finding the entry,
    /// an inode record after the inode cache dropped it) and then cost no flash read.
    pub fn keep_written(&mut self, seg: u32, off: u32, data: &[u8]) {
        let l = self.line as usize;
        if l == 0 || self.lines == 0 || off % self.line != 0 || data.len() / l > MAX_CACHED_READ_LINES as usize {
            return;
        }
        for (k, src) in data.chunks_exact(l).enumerate() {
            let at = off.saturating_add((k * l) as u32);
            // a stale copy cannot exist (the program invalidated its range), but be sure
            self.invalidate(seg, at, at.saturating_add(self.line));
            let Some((i, dst)) = self.victim() else { return };
            if dst.len() != src.len() {
                return;
            }
            dst.copy_from_slice(src);
            if let Some(t) = self.tags.as_mut_slice().get_mut(i) {
                *t = Tag { seg, off: at, referenced: false };
            }
            self.written = self.written.saturating_add(1);
        }
    }

    /// Forget the lines of `seg` that overlap `[from, to)` (the medium is about to change there).
    pub fn invalidate(&mut self, seg: u32, from: u32, to: u32) {
        let l = self.line;
        for t in self.tags.as_mut_slice() {
            if t.seg == seg && t.off < to && t.off.saturating_add(l) > from {
                *t = Tag::default();
            }
        }
    }

    /// Forget every line of `seg` (erased).
    pub fn invalidate_seg(&mut self, seg: u32) {
        self.invalidate(seg, 0, u32::MAX);
    }

    /// Forget everything (the medium may have been changed behind the log's back).
    pub fn clear(&mut self) {
        for t in self.tags.as_mut_slice() {
            *t = Tag::default();
        }
    }
}
