//! Garbage collection in bounded steps, for the background thread: the same work as
//! [`Engine::gc_step`] (one victim segment moved, or a checkpoint), cut into pieces of at most a
//! given number of scanned record bytes, so that the caller can drop the engine lock between
//! pieces and a reader or a page fault never waits behind a whole segment move.
//!
//! The position inside the victim lives in a [`GcCursor`] the caller keeps between calls. Other
//! operations may run between two steps: records of the victim may die, the foreground GC may
//! move the rest of it, a checkpoint may free and reuse it. Each step therefore checks that the
//! victim is still the segment it started on (same state and sequence number) and ends the work
//! quietly when it is not.

use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::segstate;
use crate::engine::fs::Engine;
use crate::engine::gc::GC_MAX_LIVE;
use crate::engine::log::{SEG_PINNED, SEG_SCRUB, SEG_STUCK};
use crate::engine::platform::Platform;

/// Where a background GC stopped inside its victim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcCursor {
    seg: u32,
    seq: u64,
    off: u32,
    /// The victim's flags when the move began (for the scrub count at its end).
    flags0: u8,
}

/// How a new piece of GC work starts.
enum Begin {
    Idle,
    Worked,
    Victim(GcCursor),
}

impl GcCursor {
    /// The victim segment.
    pub fn segment(&self) -> u32 {
        self.seg
    }

    /// The victim's sequence number when the move began.
    pub fn segment_seq(&self) -> u64 {
        self.seq
    }
}

/// What one bounded GC step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcProgress {
    /// Nothing worth doing: no work was done.
    Idle,
    /// A victim is being moved and has live records left: call again with this cursor.
    More(GcCursor),
    /// A unit of work ended (a victim moved completely, or a checkpoint taken).
    Done,
}

impl<P: Platform, F: Flash> Engine<P, F> {
    /// One bounded piece of background GC. With `cur == None`, decide what to do as
    /// [`Engine::gc_step`] does (checkpoint when free segments are short, otherwise pick a
    /// victim by the same rules); with a cursor, continue its victim. At most `max_bytes` of
    /// records are scanned (read, and moved if live) per call, except that one record is always
    /// scanned. The steps of one victim, run back to back, append exactly what `gc_step` would.
    pub fn gc_step_bounded(&mut self, background: bool, cur: Option<GcCursor>, max_bytes: u32) -> Result<GcProgress> {
        if self.log.failed {
            return Err(Error::ReadOnly);
        }
        let c = match cur {
            Some(c) => c,
            None => match self.gc_begin(background)? {
                Begin::Victim(c) => c,
                Begin::Worked => return Ok(GcProgress::Done),
                Begin::Idle => return Ok(GcProgress::Idle),
            },
        };
        self.gc_continue(c, max_bytes)
    }

    /// The decision part of `gc_step` and `gc_once`: nothing to do, the work done here (a
    /// checkpoint), or the cursor of a new victim.
    fn gc_begin(&mut self, background: bool) -> Result<Begin> {
        // (not when the foreground GC found nothing to reclaim and nothing changed since: such
        // a checkpoint frees only what it writes)
        if self.log.free_count() <= self.cp_margin() && self.pending_free() > 0 && !self.gc_futile(u32::MAX) {
            self.checkpoint_to_free()?;
            return Ok(Begin::Worked);
        }
        let v = match self.pick_victim(background, GC_MAX_LIVE, !background) {
            Some(v) => v,
            None => return Ok(Begin::Idle),
        };
        let vi = *self.log.seg(v)?;
        if background {
            // as gc_step: idle work only when useful
            let main = self.main_segments();
            let short = u64::from(self.log.free_count()).saturating_mul(4) < main;
            let cheap = u64::from(vi.live).saturating_mul(2) <= u64::from(self.sb.segment_size);
            let special = vi.flags & SEG_SCRUB != 0 || self.wear_spread() > self.opts.wear_threshold;
            if !(special || (short && cheap)) {
                return Ok(Begin::Idle);
            }
        }
        if vi.live == 0 {
            self.checkpoint_to_free()?;
            return Ok(Begin::Worked);
        }
        if !background
            && u64::from(vi.live).saturating_mul(100) > u64::from(self.sb.segment_size).saturating_mul(u64::from(GC_MAX_LIVE))
            && vi.flags & SEG_SCRUB == 0
        {
            return Ok(Begin::Idle);
        }
        Ok(Begin::Victim(GcCursor { seg: v, seq: vi.seq, off: 0, flags0: vi.flags }))
    }

    /// Whether the cursor's victim is still the segment the move began on and still worth
    /// moving (full, not written to, not pinned by a checkpoint, not given up).
    fn gc_cursor_valid(&self, c: &GcCursor) -> bool {
        match self.log.segs.as_slice().get(c.seg as usize) {
            Some(s) => {
                s.state == segstate::FULL
                    && s.seq == c.seq
                    && s.flags & SEG_STUCK == 0
                    && !self.is_head_seg(c.seg)
                    && s.flags & SEG_PINNED == 0
            }
            None => false,
        }
    }

    fn gc_continue(&mut self, mut c: GcCursor, max_bytes: u32) -> Result<GcProgress> {
        if !self.gc_cursor_valid(&c) {
            // freed, reused or given up meanwhile: the work is over
            return Ok(GcProgress::Done);
        }
        let v = c.seg;
        let mut scanned = 0u32;
        let mut finished = self.log.seg(v)?.live == 0;
        while !finished {
            if scanned >= max_bytes.max(1) {
                return Ok(GcProgress::More(c));
            }
            let loc = match self.gc_move_next(v, c.off, c.seq)? {
                Some(loc) => loc,
                None => break,
            };
            c.off = loc.off.saturating_add(loc.len);
            scanned = scanned.saturating_add(loc.len);
            self.gc_bound_index()?;
            finished = self.log.seg(v)?.live == 0;
        }
        // the end of `move_segment` and `gc_once` (a stuck segment is skipped from now on)
        self.gc_settle(v, c.flags0)?;
        self.gc_after_victim()?;
        Ok(GcProgress::Done)
    }
}
