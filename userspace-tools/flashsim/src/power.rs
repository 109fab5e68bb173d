//! Power-cut scheduling and the optional operation log, shared by the simulators.

use ferrofs_engine::flash::FlashError;

/// What happens to the operation during which power is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutEffect {
    /// The cut operation has no effect at all.
    NotDone,
    /// The cut operation completes (but the caller still gets `PowerCut`).
    Done,
    /// The cut operation is interrupted half-way: a program writes only a prefix, an erase
    /// leaves the segment partially erased, a discard discards only a prefix.
    Torn,
}

/// What the part of a torn operation that did not complete looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TornFill {
    /// The untouched part keeps its previous contents (0xFF on an erased NAND page; the old
    /// data on a block device; the old data in a half-erased NAND block).
    Unwritten,
    /// The untouched part of the page or sector being written, or of each page of a torn
    /// erase, gets random bits (from the simulator's seeded generator).
    Random,
}

/// How a scheduled power cut behaves. The default is a torn operation that leaves the rest unwritten,
/// counting writes, erases and bad-block marks (not reads, not flushes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutPlan {
    /// Effect on the operation during which power is cut.
    pub effect: CutEffect,
    /// Contents of the incomplete part of a torn operation.
    pub fill: TornFill,
    /// Whether reads count as operations (and can be the cut one).
    pub count_reads: bool,
    /// Whether flushes count as operations (and can be the cut one).
    pub count_flushes: bool,
}

impl Default for CutPlan {
    fn default() -> Self {
        Self { effect: CutEffect::Torn, fill: TornFill::Unwritten, count_reads: false, count_flushes: false }
    }
}

/// What the power gate says about an operation about to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Power is on: do the operation.
    Go,
    /// Power fails during this operation: apply the plan's effect, then report `PowerCut`.
    Cut(CutEffect),
}

/// Kinds of operation, for the power gate and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// `read`
    Read,
    /// `write`
    Write,
    /// `erase`
    Erase,
    /// `mark_bad`
    MarkBad,
    /// `flush`
    Flush,
}

/// One logged operation (see `enable_log` on the simulators).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// Which operation.
    pub kind: OpKind,
    /// Segment (0 for a flush).
    pub seg: u32,
    /// Byte offset inside the segment (0 for erase, mark_bad, flush).
    pub offset: u32,
    /// Length in bytes (0 for erase, mark_bad, flush).
    pub len: u32,
    /// Outcome: `Ok(())` or the error returned (a read's `Corrected` status is logged as `Ok`).
    pub result: Result<(), FlashError>,
}

/// Power state of a simulator.
#[derive(Debug, Clone, Default)]
pub(crate) struct Power {
    /// Counted operations left before the cut one (1 = the next one is cut); `None` = no cut scheduled.
    countdown: Option<u64>,
    pub(crate) off: bool,
    pub(crate) plan: CutPlan,
    /// Operations counted since power-on (for crash-point enumeration).
    pub(crate) counted_ops: u64,
}

impl Power {
    fn counts(&self, kind: OpKind) -> bool {
        match kind {
            OpKind::Write | OpKind::Erase | OpKind::MarkBad => true,
            OpKind::Read => self.plan.count_reads,
            OpKind::Flush => self.plan.count_flushes,
        }
    }

    /// Fails with `PowerCut` when the power is off.
    pub(crate) fn check_on(&self) -> Result<(), FlashError> {
        if self.off {
            Err(FlashError::PowerCut)
        } else {
            Ok(())
        }
    }

    /// Called once a request has been validated, right before it touches the medium.
    pub(crate) fn gate(&mut self, kind: OpKind) -> Gate {
        if !self.counts(kind) {
            return Gate::Go;
        }
        self.counted_ops += 1;
        match self.countdown {
            Some(1) => {
                self.countdown = None;
                self.off = true;
                Gate::Cut(self.plan.effect)
            }
            Some(n) => {
                self.countdown = Some(n.saturating_sub(1));
                Gate::Go
            }
            None => Gate::Go,
        }
    }

    pub(crate) fn schedule(&mut self, n_ops: u64, plan: CutPlan) {
        self.plan = plan;
        if n_ops == 0 {
            self.countdown = None;
            self.off = true;
        } else {
            self.countdown = Some(n_ops);
        }
    }

    pub(crate) fn cancel(&mut self) {
        self.countdown = None;
    }

    pub(crate) fn power_on(&mut self) {
        self.off = false;
        self.countdown = None;
        self.counted_ops = 0;
    }

    pub(crate) fn scheduled(&self) -> Option<u64> {
        self.countdown
    }
}

/// Optional operation log.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpLog {
    pub(crate) ops: Option<Vec<Op>>,
}

impl OpLog {
    pub(crate) fn push(&mut self, kind: OpKind, seg: u32, offset: u32, len: usize, result: Result<(), FlashError>) {
        if let Some(ops) = self.ops.as_mut() {
            let len = u32::try_from(len).unwrap_or(u32::MAX);
            ops.push(Op { kind, seg, offset, len, result });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn countdown_cuts_the_nth_counted_op() {
        let mut p = Power::default();
        p.schedule(3, CutPlan { count_reads: false, ..CutPlan::default() });
        assert_eq!(p.gate(OpKind::Write), Gate::Go);
        assert_eq!(p.gate(OpKind::Read), Gate::Go); // not counted
        assert_eq!(p.gate(OpKind::Erase), Gate::Go);
        assert_eq!(p.gate(OpKind::Write), Gate::Cut(CutEffect::Torn));
        assert_eq!(p.check_on(), Err(FlashError::PowerCut));
        assert_eq!(p.counted_ops, 3);
        p.power_on();
        assert!(p.check_on().is_ok());
        assert_eq!(p.scheduled(), None);
        p.schedule(0, CutPlan::default());
        assert_eq!(p.check_on(), Err(FlashError::PowerCut));
    }
}
