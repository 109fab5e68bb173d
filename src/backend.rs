// SPDX-License-Identifier: GPL-2.0

//! `KFlash`: the one `Flash` type of the kernel's engine, either backend (raw flash through MTD,
//! or a block device), chosen at mount by the source (`context::ferrofs_get_tree`).

use crate::blk::{BlkFlash, DevName, DiscardBatch, IoStats};
use crate::engine::flash::{Flash, FlashError, Geometry, ReadStatus};
use crate::mtd::MtdFlash;
use kernel::prelude::*;

/// The medium under a mounted ferrofs.
pub(crate) enum KFlash {
    /// Raw NAND/NOR (`sb->s_mtd`).
    Mtd(MtdFlash),
    /// A block device (`sb->s_bdev`); boxed: its queues would make every engine move (and
    /// the mount's stack frames) a kilobyte larger.
    Blk(KBox<BlkFlash>),
}

impl KFlash {
    /// Refuse a read-write mount or remount of a medium that does not accept writes, with
    /// `EROFS` and a message; a read-only mount is fine.
    pub(crate) fn check_writeable(&self, read_only: bool) -> Result {
        let (writeable, what) = match self {
            KFlash::Mtd(m) => (m.writeable(), "MTD device"),
            KFlash::Blk(b) => (b.writeable(), "block device"),
        };
        if read_only || writeable {
            return Ok(());
        }
        pr_err!("{}: the {} is read-only: refusing a read-write mount (mount it with -o ro)\n", self.name(), what);
        Err(EROFS)
    }

    /// Send the writes the engine call queued and wait for them, once (the block backend
    /// queues; MTD writes are synchronous already). An error stops every later write.
    pub(crate) fn complete(&mut self) -> Result<(), FlashError> {
        match self {
            KFlash::Mtd(_) => Ok(()),
            KFlash::Blk(b) => b.complete(),
        }
    }

    /// The discards the engine call queued, to issue after the engine lock is dropped.
    pub(crate) fn take_discards(&mut self) -> Option<DiscardBatch> {
        match self {
            KFlash::Mtd(_) => None,
            KFlash::Blk(b) => b.take_discards(),
        }
    }

    /// What the block backend sent to the device (zeros on MTD).
    /// Requests to the MTD device and the time in them (zero on a block device).
    pub(crate) fn mtd_times(&self) -> crate::mtd::MtdTimes {
        match self {
            KFlash::Mtd(m) => m.times(),
            KFlash::Blk(_) => crate::mtd::MtdTimes::default(),
        }
    }

    pub(crate) fn io_stats(&self) -> IoStats {
        match self {
            KFlash::Mtd(_) => IoStats::default(),
            KFlash::Blk(b) => b.io_stats(),
        }
    }

    /// The device's name for messages ("mtd0", "vda").
    pub(crate) fn name(&self) -> DevName {
        match self {
            KFlash::Mtd(m) => DevName::mtd(m.index),
            KFlash::Blk(b) => b.name,
        }
    }
}

impl Flash for KFlash {
    fn geometry(&self) -> Geometry {
        match self {
            KFlash::Mtd(m) => m.geometry(),
            KFlash::Blk(b) => b.geometry(),
        }
    }

    fn pairing(&self) -> Option<crate::engine::flash::Pairing> {
        match self {
            KFlash::Mtd(m) => m.pairing(),
            KFlash::Blk(_) => None,
        }
    }

    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> Result<ReadStatus, FlashError> {
        match self {
            KFlash::Mtd(m) => m.read(seg, offset, buf),
            KFlash::Blk(b) => b.read(seg, offset, buf),
        }
    }

    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        match self {
            KFlash::Mtd(m) => m.write(seg, offset, buf),
            KFlash::Blk(b) => b.write(seg, offset, buf),
        }
    }

    fn write_behind(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        match self {
            KFlash::Mtd(m) => m.write_behind(seg, offset, buf),
            // the block backend queues within the engine call already (`complete`)
            KFlash::Blk(b) => b.write(seg, offset, buf),
        }
    }

    fn settle(&mut self) -> Result<(), FlashError> {
        match self {
            KFlash::Mtd(m) => m.settle(),
            KFlash::Blk(_) => Ok(()),
        }
    }

    fn failed_behind(&mut self) -> Option<(u32, u32, u32)> {
        match self {
            KFlash::Mtd(m) => m.failed_behind(),
            KFlash::Blk(_) => None,
        }
    }

    fn forget_failed(&mut self, seg: u32) {
        if let KFlash::Mtd(m) = self {
            m.forget_failed(seg);
        }
    }

    fn erase(&mut self, seg: u32) -> Result<(), FlashError> {
        match self {
            KFlash::Mtd(m) => m.erase(seg),
            KFlash::Blk(b) => b.erase(seg),
        }
    }

    fn is_bad(&mut self, seg: u32) -> Result<bool, FlashError> {
        match self {
            KFlash::Mtd(m) => m.is_bad(seg),
            KFlash::Blk(b) => b.is_bad(seg),
        }
    }

    fn mark_bad(&mut self, seg: u32) -> Result<(), FlashError> {
        match self {
            KFlash::Mtd(m) => m.mark_bad(seg),
            KFlash::Blk(b) => b.mark_bad(seg),
        }
    }

    fn flush(&mut self) -> Result<(), FlashError> {
        match self {
            KFlash::Mtd(m) => m.flush(),
            KFlash::Blk(b) => b.flush(),
        }
    }

    fn discard_hint(&mut self, seg: u32) {
        match self {
            KFlash::Mtd(m) => m.discard_hint(seg),
            KFlash::Blk(b) => b.discard_hint(seg),
        }
    }
}
