//! Operation counters shared by every backend, with helpers for benchmarks.

/// A snapshot of a device's operation counters.
///
/// Take one before and one after a workload and use [`Counters::since`] to get the workload's
/// own numbers; then [`Counters::write_amplification`] and friends turn them into ratios.
/// Fields that make no sense for a backend stay zero (e.g. the FTL fields on raw NAND).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Successful or failed read requests that reached the medium.
    pub reads: u64,
    /// Bytes returned by reads.
    pub bytes_read: u64,
    /// Write units (NAND pages) touched by reads: a read of a few bytes still loads a page.
    pub pages_read: u64,
    /// Write (program) requests that reached the medium.
    pub writes: u64,
    /// Bytes programmed (written) on the medium, torn prefixes included.
    pub bytes_programmed: u64,
    /// Write units (NAND pages, block-device sectors of `write_unit` bytes) programmed.
    pub pages_programmed: u64,
    /// Segments erased (NAND erase blocks; discards on a block device), torn erases included.
    pub blocks_erased: u64,
    /// Erase count of each segment, indexed by segment number.
    pub erase_counts: Vec<u64>,
    /// Flush requests.
    pub flushes: u64,
    /// Segments the engine freed and hinted for discard (`Flash::discard_hint`; block simulator).
    pub discard_hints: u64,
    /// Segments marked bad through `mark_bad`.
    pub marked_bad: u64,

    /// Requests rejected with `InvalidRequest`, all causes together (the sum of the next five).
    pub invalid_requests: u64,
    /// Rejected: segment, offset or length outside the device.
    pub rejected_out_of_range: u64,
    /// Rejected: offset or length not a multiple of the write unit.
    pub rejected_misaligned: u64,
    /// Rejected: a NAND page programmed twice without an erase in between.
    pub rejected_rewrite: u64,
    /// Rejected: out-of-order programming (NAND: below the last programmed page;
    /// block device: not following the previous write of the segment).
    pub rejected_out_of_order: u64,
    /// Rejected: write or erase of a segment marked bad.
    pub rejected_bad_block: u64,

    /// Reads that reported `ReadStatus::Corrected`.
    pub corrected_reads: u64,
    /// Reads that failed with `Uncorrectable`.
    pub uncorrectable_reads: u64,
    /// Writes that failed with `WriteFailed`.
    pub write_failures: u64,
    /// Erases that failed with `EraseFailed`.
    pub erase_failures: u64,
    /// Power cuts that happened (simulators only).
    pub power_cuts: u64,

    /// Cheap-FTL model (block simulator): read-modify-write events, i.e. non-sequential writes
    /// inside an allocation unit and allocation units closed half-written because too many were open.
    pub ftl_rmw_events: u64,
    /// Cheap-FTL model: bytes the FTL copied internally because of those events.
    pub ftl_bytes_copied: u64,
    /// Highest number of segments open at once (written, but neither full nor erased since).
    pub max_open_segments: u64,
    /// Cheap-FTL model: writes that start inside an FTL page (`preferred_write` bytes, aligned
    /// in the segment), i.e. not on a page boundary: the page's first part was written by an
    /// earlier write, so the FTL writes (or merges) that page twice.
    pub ftl_page_rewrites: u64,
    /// Cheap-FTL model: allocation units the FTL opened (a write to a unit it did not hold
    /// open: a fresh erase block to allocate).
    pub ftl_au_opens: u64,
}

impl Counters {
    /// Counters for a device of `segments` segments, all zero.
    pub fn new(segments: u32) -> Self {
        Self { erase_counts: vec![0; segments as usize], ..Self::default() }
    }

    /// What happened between `earlier` and `self` (field-wise saturating difference;
    /// `max_open_segments` is kept as the later value, being a high-water mark).
    pub fn since(&self, earlier: &Counters) -> Counters {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        Counters {
            reads: d(self.reads, earlier.reads),
            bytes_read: d(self.bytes_read, earlier.bytes_read),
            pages_read: d(self.pages_read, earlier.pages_read),
            writes: d(self.writes, earlier.writes),
            bytes_programmed: d(self.bytes_programmed, earlier.bytes_programmed),
            pages_programmed: d(self.pages_programmed, earlier.pages_programmed),
            blocks_erased: d(self.blocks_erased, earlier.blocks_erased),
            erase_counts: self
                .erase_counts
                .iter()
                .enumerate()
                .map(|(i, &c)| d(c, earlier.erase_counts.get(i).copied().unwrap_or(0)))
                .collect(),
            flushes: d(self.flushes, earlier.flushes),
            discard_hints: d(self.discard_hints, earlier.discard_hints),
            marked_bad: d(self.marked_bad, earlier.marked_bad),
            invalid_requests: d(self.invalid_requests, earlier.invalid_requests),
            rejected_out_of_range: d(self.rejected_out_of_range, earlier.rejected_out_of_range),
            rejected_misaligned: d(self.rejected_misaligned, earlier.rejected_misaligned),
            rejected_rewrite: d(self.rejected_rewrite, earlier.rejected_rewrite),
            rejected_out_of_order: d(self.rejected_out_of_order, earlier.rejected_out_of_order),
            rejected_bad_block: d(self.rejected_bad_block, earlier.rejected_bad_block),
            corrected_reads: d(self.corrected_reads, earlier.corrected_reads),
            uncorrectable_reads: d(self.uncorrectable_reads, earlier.uncorrectable_reads),
            write_failures: d(self.write_failures, earlier.write_failures),
            erase_failures: d(self.erase_failures, earlier.erase_failures),
            power_cuts: d(self.power_cuts, earlier.power_cuts),
            ftl_rmw_events: d(self.ftl_rmw_events, earlier.ftl_rmw_events),
            ftl_bytes_copied: d(self.ftl_bytes_copied, earlier.ftl_bytes_copied),
            max_open_segments: self.max_open_segments,
            ftl_page_rewrites: d(self.ftl_page_rewrites, earlier.ftl_page_rewrites),
            ftl_au_opens: d(self.ftl_au_opens, earlier.ftl_au_opens),
        }
    }

    /// Write amplification seen by the medium interface: `bytes_programmed / user_bytes`.
    /// `None` when `user_bytes` is 0.
    pub fn write_amplification(&self, user_bytes: u64) -> Option<f64> {
        ratio(self.bytes_programmed, user_bytes)
    }

    /// Bytes the flash itself wrote: programmed bytes plus what the FTL model copied.
    pub fn device_bytes_written(&self) -> u64 {
        self.bytes_programmed.saturating_add(self.ftl_bytes_copied)
    }

    /// Write amplification including the cheap-FTL model's internal copies:
    /// `(bytes_programmed + ftl_bytes_copied) / user_bytes`. `None` when `user_bytes` is 0.
    pub fn device_write_amplification(&self, user_bytes: u64) -> Option<f64> {
        ratio(self.device_bytes_written(), user_bytes)
    }

    /// Bytes erased, given the segment size.
    pub fn bytes_erased(&self, segment_size: u32) -> u64 {
        self.blocks_erased.saturating_mul(u64::from(segment_size))
    }

    /// Erases per user byte written, scaled to erases per MiB of user data. `None` when `user_bytes` is 0.
    pub fn erases_per_user_mib(&self, user_bytes: u64) -> Option<f64> {
        if user_bytes == 0 {
            None
        } else {
            Some(self.blocks_erased as f64 * 1_048_576.0 / user_bytes as f64)
        }
    }

    /// Smallest per-segment erase count (0 for a device with no segment).
    pub fn min_erase_count(&self) -> u64 {
        self.erase_counts.iter().copied().min().unwrap_or(0)
    }

    /// Largest per-segment erase count (0 for a device with no segment).
    pub fn max_erase_count(&self) -> u64 {
        self.erase_counts.iter().copied().max().unwrap_or(0)
    }

    /// Mean per-segment erase count (0.0 for a device with no segment).
    pub fn mean_erase_count(&self) -> f64 {
        if self.erase_counts.is_empty() {
            0.0
        } else {
            self.erase_counts.iter().sum::<u64>() as f64 / self.erase_counts.len() as f64
        }
    }

    /// Wear-levelling spread: largest minus smallest erase count.
    pub fn wear_spread(&self) -> u64 {
        self.max_erase_count() - self.min_erase_count()
    }

    pub(crate) fn note_erase(&mut self, seg: u32) {
        self.blocks_erased += 1;
        if let Some(c) = self.erase_counts.get_mut(seg as usize) {
            *c += 1;
        }
    }

    pub(crate) fn reject(&mut self, why: Reject) {
        self.invalid_requests += 1;
        match why {
            Reject::OutOfRange => self.rejected_out_of_range += 1,
            Reject::Misaligned => self.rejected_misaligned += 1,
            Reject::Rewrite => self.rejected_rewrite += 1,
            Reject::OutOfOrder => self.rejected_out_of_order += 1,
            Reject::BadBlock => self.rejected_bad_block += 1,
        }
    }
}

/// Why a request was rejected with `InvalidRequest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reject {
    OutOfRange,
    Misaligned,
    Rewrite,
    OutOfOrder,
    BadBlock,
}

fn ratio(num: u64, den: u64) -> Option<f64> {
    if den == 0 {
        None
    } else {
        Some(num as f64 / den as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_and_ratios() {
        let mut a = Counters::new(3);
        a.bytes_programmed = 100;
        a.note_erase(1);
        let mut b = a.clone();
        b.bytes_programmed = 500;
        b.ftl_bytes_copied = 100;
        b.note_erase(1);
        b.note_erase(2);
        b.max_open_segments = 4;
        let d = b.since(&a);
        assert_eq!(d.bytes_programmed, 400);
        assert_eq!(d.blocks_erased, 2);
        assert_eq!(d.erase_counts, vec![0, 1, 1]);
        assert_eq!(d.max_open_segments, 4);
        assert_eq!(d.write_amplification(200), Some(2.0));
        assert_eq!(d.device_write_amplification(250), Some(2.0));
        assert_eq!(d.write_amplification(0), None);
        assert_eq!(b.max_erase_count(), 2);
        assert_eq!(b.min_erase_count(), 0);
        assert_eq!(b.wear_spread(), 2);
        assert_eq!(d.bytes_erased(4096), 8192);
        let mut c = Counters::default();
        c.reject(Reject::Rewrite);
        c.reject(Reject::BadBlock);
        assert_eq!((c.invalid_requests, c.rejected_rewrite, c.rejected_bad_block), (2, 1, 1));
    }
}
