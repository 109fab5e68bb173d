//! What the kernel says about a block device's flash (sysfs), and the geometry mkfs.ferrofs
//! takes from it when the command line does not give one.
//!
//! A block device does not report its FTL's allocation unit; the closest hints are an SD card's
//! `device/preferred_erase_size` (its allocation unit), an eMMC's erase group
//! (`device/preferred_erase_size`, `device/erase_size`), mtdblock's erase block (its parent is
//! the MTD device: `device/erasesize`; mtdblock rewrites a whole erase block at every flush), and
//! the queue's `discard_granularity`, `optimal_io_size`, `minimum_io_size` and
//! `physical_block_size`.
//! Everything missing falls back to a default, and each choice carries where it came from, for
//! mkfs to say.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Default segment (allocation unit) when nothing better is known: 4 MiB, the common SD AU.
pub const DEFAULT_SEGMENT: u32 = 4 << 20;
/// Default open-segment limit on a block device (the engine's, `DEFAULT_BLOCK_OPEN_SEGMENTS`).
pub const DEFAULT_OPEN_SEGMENTS: u32 = 2;
/// Smallest segment ferrofs formats.
pub const MIN_SEGMENT: u32 = 16 << 10;
/// Largest segment whose superblock copy the tools and the kernel find (`m * 2^k` up to 64 MiB).
pub const MAX_SEGMENT: u32 = 64 << 20;

/// The sysfs attributes of one block device, in bytes; 0 when absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SysfsHints {
    /// `queue/logical_block_size`.
    pub logical_block: u32,
    /// `queue/physical_block_size`.
    pub physical_block: u32,
    /// `queue/minimum_io_size`.
    pub minimum_io: u32,
    /// `queue/optimal_io_size`.
    pub optimal_io: u32,
    /// `queue/discard_granularity`.
    pub discard_granularity: u32,
    /// `device/preferred_erase_size` (SD: the allocation unit; eMMC: the high-capacity erase group).
    pub preferred_erase: u32,
    /// `device/erase_size` (MMC: the erase group).
    pub erase: u32,
    /// `device/erasesize` (mtdblock: the erase block of the MTD device under it).
    pub mtd_erase: u32,
}

/// A value mkfs chose and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The value (bytes, or a count).
    pub value: u32,
    /// Where it came from, for messages ("device/preferred_erase_size", "default", ...).
    pub source: String,
}

impl Choice {
    /// A value and its source.
    pub fn new(value: u32, source: &str) -> Self {
        Choice { value, source: source.to_string() }
    }

    /// Whether the value is mkfs's default rather than something the device told or showed.
    pub fn is_default(&self) -> bool {
        self.source.starts_with("default")
    }
}

/// The block-device geometry mkfs would use without command-line values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defaults {
    /// Segment = allocation unit.
    pub segment: Choice,
    /// FTL page (the preferred write size).
    pub ftl_page: Choice,
    /// Segments open at once.
    pub open_segments: Choice,
}

fn read_u32(p: &Path) -> u32 {
    std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<u64>().ok()).map(|v| v.min(u64::from(u32::MAX)) as u32).unwrap_or(0)
}

/// The hints of the block device whose sysfs directory is `dir` (`/sys/dev/block/MAJ:MIN`
/// resolved; for a partition the queue and the device are its disk's, one level up).
pub fn hints_in(dir: &Path) -> SysfsHints {
    let disk: PathBuf = if dir.join("partition").exists() { dir.join("..") } else { dir.to_path_buf() };
    let q = disk.join("queue");
    let d = disk.join("device");
    SysfsHints {
        logical_block: read_u32(&q.join("logical_block_size")),
        physical_block: read_u32(&q.join("physical_block_size")),
        minimum_io: read_u32(&q.join("minimum_io_size")),
        optimal_io: read_u32(&q.join("optimal_io_size")),
        discard_granularity: read_u32(&q.join("discard_granularity")),
        preferred_erase: read_u32(&d.join("preferred_erase_size")),
        erase: read_u32(&d.join("erase_size")),
        mtd_erase: read_u32(&d.join("erasesize")),
    }
}

/// The hints of block device `dev` (a device node), from `/sys/dev/block/MAJ:MIN`; `None` when
/// it is not a block device or sysfs has no entry for it.
pub fn sysfs_hints(dev: &Path) -> Option<SysfsHints> {
    use std::os::unix::fs::FileTypeExt;
    let m = std::fs::metadata(dev).ok()?;
    if !m.file_type().is_block_device() {
        return None;
    }
    let rdev = m.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let dir = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    dir.exists().then(|| hints_in(&dir))
}

/// A power of two in `lo..=hi`.
fn pow2_in(v: u32, lo: u32, hi: u32) -> bool {
    v.is_power_of_two() && (lo..=hi).contains(&v)
}

/// The geometry from the hints (`None`: no sysfs entry), for write unit `wu`: the segment from
/// the SD/eMMC erase size, else mtdblock's erase block, else a discard granularity of at least
/// 16 KiB, else 4 MiB; the FTL
/// page from the optimal, else the minimum I/O size, else the physical block size when larger
/// than the write unit, else 4 write units; the open-segment limit is the default (no kernel
/// attribute tells it).
pub fn defaults_from(h: Option<&SysfsHints>, wu: u32) -> Defaults {
    let h = h.copied().unwrap_or_default();
    let segment = if pow2_in(h.preferred_erase, MIN_SEGMENT, MAX_SEGMENT) {
        Choice::new(h.preferred_erase, "the kernel: device/preferred_erase_size (the SD allocation unit or eMMC erase group)")
    } else if pow2_in(h.erase, MIN_SEGMENT, MAX_SEGMENT) {
        Choice::new(h.erase, "the kernel: device/erase_size (the MMC erase group)")
    } else if pow2_in(h.mtd_erase, MIN_SEGMENT, MAX_SEGMENT) {
        Choice::new(h.mtd_erase, "the kernel: device/erasesize (the erase block of the MTD under mtdblock)")
    } else if pow2_in(h.discard_granularity, MIN_SEGMENT, MAX_SEGMENT) {
        Choice::new(h.discard_granularity, "the kernel: queue/discard_granularity")
    } else {
        Choice::new(DEFAULT_SEGMENT, "default: the kernel reports no erase size")
    };
    // a page must be whole write units and leave at least 16 of them per segment
    let page_ok = |p: u32| p > wu && p.is_power_of_two() && p % wu.max(1) == 0 && p <= segment.value / 16;
    let ftl_page = if page_ok(h.optimal_io) {
        Choice::new(h.optimal_io, "the kernel: queue/optimal_io_size")
    } else if page_ok(h.minimum_io) {
        Choice::new(h.minimum_io, "the kernel: queue/minimum_io_size")
    } else if page_ok(h.physical_block) {
        Choice::new(h.physical_block, "the kernel: queue/physical_block_size")
    } else {
        Choice::new(wu.saturating_mul(4), "default: 4 write units, the kernel reports no larger I/O size")
    };
    let open_segments = Choice::new(DEFAULT_OPEN_SEGMENTS, "default: no kernel attribute tells it");
    Defaults { segment, ftl_page, open_segments }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(disk: &Path, q: &[(&str, u32)], dev: &[(&str, u32)]) {
        std::fs::create_dir_all(disk.join("queue")).unwrap();
        std::fs::create_dir_all(disk.join("device")).unwrap();
        for (n, v) in q {
            std::fs::write(disk.join("queue").join(n), format!("{v}\n")).unwrap();
        }
        for (n, v) in dev {
            std::fs::write(disk.join("device").join(n), format!("{v}\n")).unwrap();
        }
    }

    #[test]
    fn an_sd_card_gives_its_allocation_unit() {
        let t = tempfile::tempdir().unwrap();
        let disk = t.path().join("mmcblk0");
        fake(&disk, &[("logical_block_size", 512), ("physical_block_size", 512), ("minimum_io_size", 512), ("optimal_io_size", 0), ("discard_granularity", 4 << 20)], &[("preferred_erase_size", 4 << 20), ("erase_size", 512)]);
        // a partition reads its disk's attributes
        let part = disk.join("mmcblk0p1");
        std::fs::create_dir_all(&part).unwrap();
        std::fs::write(part.join("partition"), "1\n").unwrap();
        let h = hints_in(&part);
        assert_eq!(h.preferred_erase, 4 << 20);
        let d = defaults_from(Some(&h), 4096);
        assert_eq!(d.segment.value, 4 << 20);
        assert!(d.segment.source.contains("preferred_erase_size"), "{}", d.segment.source);
        assert_eq!(d.ftl_page.value, 16384);
        assert!(d.ftl_page.is_default());
        assert_eq!(d.open_segments.value, 2);
    }

    #[test]
    fn queue_limits_give_the_page_and_a_large_discard_granularity_the_segment() {
        let t = tempfile::tempdir().unwrap();
        let disk = t.path().join("sda");
        fake(&disk, &[("logical_block_size", 512), ("physical_block_size", 4096), ("minimum_io_size", 32768), ("optimal_io_size", 65536), ("discard_granularity", 1 << 20)], &[]);
        let d = defaults_from(Some(&hints_in(&disk)), 4096);
        assert_eq!((d.segment.value, d.ftl_page.value), (1 << 20, 65536));
        assert!(d.segment.source.contains("discard_granularity") && d.ftl_page.source.contains("optimal_io_size"));
        // an optimal size that is no power of two, then a minimum one too small: the next one
        fake(&disk, &[("optimal_io_size", 3 * 65536), ("minimum_io_size", 4096)], &[]);
        let d = defaults_from(Some(&hints_in(&disk)), 4096);
        assert!(d.ftl_page.source.contains("default"), "physical 4096 = the write unit is no larger page: {:?}", d.ftl_page);
    }

    #[test]
    fn mtdblock_gives_the_erase_block_of_its_mtd() {
        let t = tempfile::tempdir().unwrap();
        let disk = t.path().join("mtdblock0");
        // what mtdblock over nandsim shows: 512-byte queue limits, the MTD's attributes under device/
        fake(&disk, &[("logical_block_size", 512), ("physical_block_size", 512), ("minimum_io_size", 512), ("optimal_io_size", 0), ("discard_granularity", 0)], &[("erasesize", 128 << 10), ("writesize", 2048)]);
        let d = defaults_from(Some(&hints_in(&disk)), 4096);
        assert_eq!(d.segment.value, 128 << 10);
        assert!(d.segment.source.contains("device/erasesize"), "{}", d.segment.source);
        // an erase block below the smallest segment is no segment: the default
        fake(&disk, &[], &[("erasesize", 8 << 10)]);
        assert!(defaults_from(Some(&hints_in(&disk)), 4096).segment.is_default());
    }

    #[test]
    fn a_virtio_disk_or_no_sysfs_gives_the_defaults() {
        let t = tempfile::tempdir().unwrap();
        let disk = t.path().join("vda");
        fake(&disk, &[("logical_block_size", 512), ("physical_block_size", 512), ("minimum_io_size", 512), ("optimal_io_size", 0), ("discard_granularity", 512)], &[]);
        for d in [defaults_from(Some(&hints_in(&disk)), 4096), defaults_from(None, 4096)] {
            assert_eq!((d.segment.value, d.ftl_page.value, d.open_segments.value), (4 << 20, 16384, 2));
            assert!(d.segment.is_default() && d.ftl_page.is_default() && d.open_segments.is_default());
        }
    }
}
