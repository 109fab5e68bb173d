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
//! Memory: the mount chooses the size (`MountOptions::read_cache_bytes`; the kernel takes
//! 1/256 of RAM, from `READ_CACHE_BYTES` to `READ_CACHE_AUTO_MAX`, or `read_cache=`): at most
//! that many whole lines (one write unit each, at most `MAX_LINES`), plus 24 to 28 bytes of tag,
//! free-list entry and bucket per line. Nothing is allocated until the first read; then the cache doubles from
//! `GROW_MIN` lines each time every line is in use, so it holds what the workload touched, not
//! its ceiling. Allocation is fallible: when growing fails the cache keeps what it has and stops
//! growing (reads go to the medium as before when it has nothing). A line is found through a
//! hash of its place (chained buckets, one per line rounded up to a power of two, re-linked when
//! the bucket count grows), so a lookup, a fill and the invalidation a program makes cost the
//! same whatever the size; only the invalidation of a whole segment (an erase) walks every tag.
//! Replacement: an empty slot first (a free list of the slots invalidations emptied), then a
//! larger cache, and only then CLOCK (a referenced bit per line, set on every hit). Without the
//! free list the holes an erase leaves kept the cache from growing while the hand evicted the
//! oldest lines still valid: in the rig's meta run the directory entries written first.

use crate::engine::format::NO_SEG;
use crate::engine::platform::{FallibleVec, Platform};

/// Reads of more than this many lines go straight to the medium: the cache is for small
/// records, and one large read (a readahead span, a replay window) would evict all of them.
pub const MAX_CACHED_READ_LINES: u32 = 2;

/// Default size of the cache in bytes (`MountOptions::read_cache_bytes` left at `None`, and the
/// kernel's floor): 128 pages of 2 KiB, 64 of 4 KiB.
pub const READ_CACHE_BYTES: usize = 256 << 10;

/// The kernel's automatic size is at most this: 2 048 pages of 2 KiB. On the rig (1 GiB guest)
/// the meta benchmark's 2 000 creates (about 330 pages of directory entries and inodes)
/// stay cached, and a readdir right after them reads nothing from the flash.
pub const READ_CACHE_AUTO_MAX: usize = 4 << 20;

/// Largest cache a mount accepts (`read_cache=` is capped here).
pub const READ_CACHE_MAX_BYTES: usize = 64 << 20;

/// Most lines a cache holds, whatever its size in bytes.
pub const MAX_LINES: usize = 1 << 16;

/// Lines of the first allocation; the cache doubles from there as it fills.
const GROW_MIN: usize = 16;

/// End of a bucket chain.
const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Tag {
    /// Segment of the line, `NO_SEG` for an empty slot.
    seg: u32,
    /// Offset of the line in the segment (a multiple of the line size).
    off: u32,
    /// Next slot in the same bucket, `NIL` at the end.
    next: u32,
    /// Hit since the clock hand last passed.
    referenced: bool,
}

impl Default for Tag {
    fn default() -> Self {
        Tag { seg: NO_SEG, off: 0, next: NIL, referenced: false }
    }
}

/// The cache. See the module documentation.
pub struct ReadCache<P: Platform> {
    /// Bytes per line (the write unit).
    line: u32,
    /// Lines wanted (0: caching off).
    lines: usize,
    tags: P::Vec<Tag>,
    /// First slot of each bucket (`NIL`: empty); a power of two of them, at least one per slot,
    /// once anything is allocated.
    buckets: P::Vec<u32>,
    data: P::Vec<u8>,
    hand: usize,
    /// Lines the cache may grow to for now (`limit_growth`), at most `lines`.
    grow_limit: usize,
    /// Empty slots (after an invalidation, a growth, a clear), taken before any line is evicted;
    /// its capacity is reserved as the cache grows, so pushing never allocates.
    free: P::Vec<u32>,
    /// Reads served from the cache (line by line).
    pub hits: u64,
    /// Lines read from the medium into the cache.
    pub misses: u64,
    /// Lines kept from programs of metadata pages (`keep_written`).
    pub written: u64,
}

impl<P: Platform> ReadCache<P> {
    /// A cache of `bytes` bytes (at most `READ_CACHE_MAX_BYTES`) in lines of `line` bytes
    /// (nothing is allocated yet).
    pub fn new(line: u32, bytes: usize) -> Self {
        let bytes = bytes.min(READ_CACHE_MAX_BYTES);
        let lines = if line == 0 { 0 } else { (bytes / line as usize).min(MAX_LINES) };
        ReadCache { line, lines, tags: P::Vec::new(), buckets: P::Vec::new(), data: P::Vec::new(), hand: 0, grow_limit: usize::MAX, free: P::Vec::new(), hits: 0, misses: 0, written: 0 }
    }

    /// Lines the cache may hold (0: off); it allocates them as it fills.
    pub fn capacity_lines(&self) -> usize {
        self.lines
    }

    /// Grow to at most `bytes` for now (`None`: to the cache's size). The mount's roll-forward
    /// reads the headers of the records after the checkpoint once each: grown for them, the
    /// cache would allocate and copy up to its full size for lines nothing reads again.
    pub fn limit_growth(&mut self, bytes: Option<usize>) {
        self.grow_limit = match bytes {
            Some(b) => b.checked_div(self.line as usize).unwrap_or(0),
            None => usize::MAX,
        };
    }

    /// Lines allocated now (the RAM the cache holds: this many write units).
    pub fn allocated_lines(&self) -> usize {
        self.tags.len()
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

    /// The bucket of the line at `off` of `seg` (`buckets` is allocated: a power of two long).
    fn bucket(&self, seg: u32, off: u32) -> usize {
        let n = self.buckets.len();
        let key = (u64::from(seg) << 32) | u64::from(off.checked_div(self.line).unwrap_or(0));
        // Fibonacci hashing: the top bits of the product, as many as the bucket count needs
        let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let bits = n.trailing_zeros();
        if bits == 0 {
            0
        } else {
            (h >> (64 - bits)) as usize
        }
    }

    fn slot_of(&self, seg: u32, off: u32) -> Option<usize> {
        if seg == NO_SEG || self.buckets.is_empty() {
            return None;
        }
        let mut i = *self.buckets.as_slice().get(self.bucket(seg, off))?;
        // a chain is never longer than the cache (bounded walk even if it were broken)
        for _ in 0..self.tags.len() {
            let t = self.tags.as_slice().get(i as usize)?;
            if t.seg == seg && t.off == off {
                return Some(i as usize);
            }
            i = t.next;
        }
        None
    }

    /// Make slot `i` empty, taking it out of its bucket's chain.
    fn unlink(&mut self, i: usize) {
        let Some(&t) = self.tags.as_slice().get(i) else { return };
        if t.seg != NO_SEG {
            let b = self.bucket(t.seg, t.off);
            let head = self.buckets.as_slice().get(b).copied().unwrap_or(NIL);
            if head as usize == i {
                if let Some(h) = self.buckets.as_mut_slice().get_mut(b) {
                    *h = t.next;
                }
            } else {
                let mut p = head;
                for _ in 0..self.tags.len() {
                    let Some(pt) = self.tags.as_slice().get(p as usize).copied() else { break };
                    if pt.next as usize == i {
                        if let Some(x) = self.tags.as_mut_slice().get_mut(p as usize) {
                            x.next = t.next;
                        }
                        break;
                    }
                    p = pt.next;
                }
            }
        }
        if let Some(x) = self.tags.as_mut_slice().get_mut(i) {
            *x = Tag::default();
        }
    }

    /// Slot `i` (empty) now holds the line at `off` of `seg`.
    fn link(&mut self, i: usize, seg: u32, off: u32) {
        let b = self.bucket(seg, off);
        let Some(head) = self.buckets.as_slice().get(b).copied() else { return };
        if let Some(t) = self.tags.as_mut_slice().get_mut(i) {
            *t = Tag { seg, off, next: head, referenced: false };
            if let Some(h) = self.buckets.as_mut_slice().get_mut(b) {
                *h = i as u32;
            }
        }
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

    /// Grow by doubling (from `GROW_MIN` lines) toward `lines` when no slot is empty:
    /// lines, then buckets (re-linking the slots held), then tags, each fallibly, so a failure
    /// leaves a consistent, smaller cache, which then stops growing.
    fn grow(&mut self) {
        let cur = self.tags.len();
        let cap = self.lines.min(self.grow_limit);
        if cur >= cap {
            return;
        }
        let new = cur.saturating_mul(2).max(GROW_MIN).min(cap);
        let l = self.line as usize;
        let nb = new.checked_next_power_of_two().unwrap_or(0);
        if nb == 0 || self.data.try_resize(new.saturating_mul(l), 0).is_err() {
            self.lines = cur;
            return;
        }
        if nb != self.buckets.len() {
            if self.buckets.try_resize(nb, NIL).is_err() {
                self.lines = cur;
                return;
            }
            // the bucket of a place depends on the bucket count: chain every line held again
            for b in self.buckets.as_mut_slice() {
                *b = NIL;
            }
            for i in 0..cur {
                let Some(t) = self.tags.as_slice().get(i).copied().filter(|t| t.seg != NO_SEG) else { continue };
                let b = self.bucket(t.seg, t.off);
                if let (Some(h), Some(x)) = (self.buckets.as_mut_slice().get_mut(b), self.tags.as_mut_slice().get_mut(i)) {
                    x.next = *h;
                    *h = i as u32;
                }
            }
        }
        if self.tags.try_resize(new, Tag::default()).is_err() {
            self.lines = cur;
            return;
        }
        // room for every slot on the free list, then the new slots on it (lowest taken first)
        let n = self.free.len();
        if self.free.try_resize(new, 0).is_ok() {
            self.free.truncate(n);
        }
        for i in (cur..new).rev() {
            let _ = self.free.try_push(i as u32);
        }
    }

    /// An empty slot from the free list.
    fn take_free(&mut self) -> Option<usize> {
        while let Some(i) = self.free.pop() {
            if self.tags.as_slice().get(i as usize).is_some_and(|t| t.seg == NO_SEG) {
                return Some(i as usize);
            }
        }
        None
    }

    /// A slot for a new line (emptied: it holds nothing until [`ReadCache::fill`]), and its
    /// bytes to read the line into; `None` without memory.
    pub fn victim(&mut self) -> Option<(usize, &mut [u8])> {
        if self.lines == 0 {
            return None;
        }
        // an empty slot first, then a larger cache, and only then an eviction
        let i = match self.take_free() {
            Some(i) => i,
            None => {
                self.grow();
                match self.take_free() {
                    Some(i) => i,
                    None => self.clock()?,
                }
            }
        };
        self.unlink(i);
        let l = self.line as usize;
        let bytes = self.data.as_mut_slice().get_mut(i.saturating_mul(l)..i.saturating_mul(l).saturating_add(l))?;
        Some((i, bytes))
    }

    /// CLOCK: the first slot from the hand whose referenced bit is clear (or that is empty),
    /// clearing the bits on the way.
    fn clock(&mut self) -> Option<usize> {
        let n = self.tags.len();
        if n == 0 {
            return None;
        }
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
        Some(i)
    }

    /// Slot `i` (from [`ReadCache::victim`]) now holds the line at `off` of `seg`.
    pub fn fill(&mut self, i: usize, seg: u32, off: u32) {
        self.misses = self.misses.saturating_add(1);
        self.link(i, seg, off);
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
            self.link(i, seg, at);
            self.written = self.written.saturating_add(1);
        }
    }

    /// Forget the lines of `seg` that overlap `[from, to)` (the medium is about to change there).
    pub fn invalidate(&mut self, seg: u32, from: u32, to: u32) {
        if self.buckets.is_empty() || self.line == 0 || from >= to {
            return;
        }
        let l = self.line;
        let first = from / l;
        let last = to.saturating_sub(1) / l;
        if last.saturating_sub(first) as usize >= self.tags.len() {
            // a range wider than the cache (a whole segment): walk the tags
            for i in 0..self.tags.len() {
                let hit = self.tags.as_slice().get(i).is_some_and(|t| t.seg == seg && t.off < to && t.off.saturating_add(l) > from);
                if hit {
                    self.forget(i);
                }
            }
            return;
        }
        for k in first..=last {
            if let Some(i) = self.slot_of(seg, k.saturating_mul(l)) {
                self.forget(i);
            }
        }
    }

    /// Empty slot `i` and put it on the free list.
    fn forget(&mut self, i: usize) {
        self.unlink(i);
        // `i` was not on the list (it held a line), whose capacity was reserved for every slot
        // as the cache grew; if that reservation failed and so does this push, the empty slot
        // is still taken by the clock hand, which stops at empty slots
        let _ = self.free.try_push(i as u32);
    }

    /// Forget every line of `seg` (erased).
    pub fn invalidate_seg(&mut self, seg: u32) {
        self.invalidate(seg, 0, u32::MAX);
    }

    /// Whether the hash index agrees with the tags: every slot holding a line is reached from
    /// its bucket, once, and the chains hold nothing else; the free list holds empty slots only,
    /// each once (for tests; O(lines^2) at worst).
    pub fn consistent(&self) -> bool {
        let n = self.tags.len();
        let mut reached = 0usize;
        for b in 0..self.buckets.len() {
            let mut i = self.buckets.as_slice().get(b).copied().unwrap_or(NIL);
            let mut steps = 0usize;
            while i != NIL {
                let Some(t) = self.tags.as_slice().get(i as usize) else { return false };
                if t.seg == NO_SEG || self.bucket(t.seg, t.off) != b || steps > n {
                    return false;
                }
                reached += 1;
                steps += 1;
                i = t.next;
            }
        }
        let held = self.tags.as_slice().iter().filter(|t| t.seg != NO_SEG).count();
        let free = self.free.as_slice();
        let free_ok = free.iter().all(|&i| self.tags.as_slice().get(i as usize).is_some_and(|t| t.seg == NO_SEG))
            && free.len() <= n
            && free.iter().enumerate().all(|(k, i)| !free.get(..k).unwrap_or(&[]).contains(i));
        reached == held && free_ok
    }

    /// Forget everything (the medium may have been changed behind the log's back).
    pub fn clear(&mut self) {
        for t in self.tags.as_mut_slice() {
            *t = Tag::default();
        }
        for b in self.buckets.as_mut_slice() {
            *b = NIL;
        }
        self.free.truncate(0);
        for i in (0..self.tags.len()).rev() {
            let _ = self.free.try_push(i as u32);
        }
    }
}
