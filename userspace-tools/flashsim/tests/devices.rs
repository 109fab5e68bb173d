//! BlockDevice over a temporary file, and clear errors for wrong paths (no MTD on the host).

use std::path::{Path, PathBuf};

use ferrofs_flashsim::{BlockDevice, BlockDeviceOptions, Error, Flash, FlashError, FlashKind, MtdDevice, ReadStatus};

struct TempFile(PathBuf);

impl TempFile {
    fn with_len(name: &str, len: u64) -> Self {
        let p = std::env::temp_dir().join(format!("ferrofs-dev-{}-{name}", std::process::id()));
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(len).unwrap();
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn small() -> BlockDeviceOptions {
    BlockDeviceOptions { segment_size: 65536, ..BlockDeviceOptions::default() }
}

#[test]
fn block_device_on_a_file() {
    let t = TempFile::with_len("blk", 4 * 65536 + 1000);
    let mut d = BlockDevice::open_with(&t.0, small()).unwrap();
    assert!(!d.is_block_device());
    assert_eq!(d.size_bytes(), 4 * 65536 + 1000);
    let g = d.geometry();
    assert_eq!(g.kind, FlashKind::Block);
    assert_eq!((g.write_unit, g.segment_size, g.segment_count, g.preferred_write), (4096, 65536, 4, 16384));

    let data: Vec<u8> = (0..8192u32).map(|i| i as u8).collect();
    d.write(3, 0, &data).unwrap();
    let mut b = vec![0u8; 100];
    assert_eq!(d.read(3, 4000, &mut b), Ok(ReadStatus::Clean));
    assert_eq!(&b[..], &data[4000..4100]);
    assert_eq!(d.write(3, 0, &data), Err(FlashError::InvalidRequest), "not sequential");
    assert_eq!(d.write(3, 8192, &[0u8; 100]), Err(FlashError::InvalidRequest), "partial unit");
    assert_eq!(d.write(4, 0, &data), Err(FlashError::InvalidRequest), "tail beyond the last segment");
    d.write(3, 8192, &[1u8; 4096]).unwrap();
    d.flush().unwrap();
    d.erase(3).unwrap();
    let mut b = vec![0u8; 4096];
    d.read(3, 0, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0) || b[..] == data[..4096], "discard reads zeroes or stale data");
    d.write(3, 0, &[2u8; 4096]).unwrap();
    assert_eq!(d.is_bad(3), Ok(false));
    d.mark_bad(3).unwrap();
    assert_eq!(d.is_bad(3), Ok(false));
    let c = d.counters();
    assert_eq!((c.writes, c.bytes_programmed, c.blocks_erased, c.flushes), (3, 16384, 1, 1));
    assert_eq!(c.invalid_requests, 3);
    drop(d);

    // Reopened, the data is there and the first write of a segment may resume anywhere.
    let mut d = BlockDevice::open_with(&t.0, small()).unwrap();
    let mut b = vec![0u8; 4096];
    d.read(3, 0, &mut b).unwrap();
    assert_eq!(b, vec![2u8; 4096]);
    d.write(3, 4096, &[3u8; 4096]).unwrap();

    let mut ro = BlockDevice::open_with(&t.0, BlockDeviceOptions { read_only: true, ..small() }).unwrap();
    assert!(ro.read(3, 0, &mut b).is_ok());
    assert_eq!(ro.write(0, 0, &[0u8; 4096]), Err(FlashError::Io));

    let loose = BlockDeviceOptions { enforce_sequential: false, ..small() };
    let mut d = BlockDevice::open_with(&t.0, loose).unwrap();
    d.write(0, 8192, &[1u8; 4096]).unwrap();
    d.write(0, 0, &[1u8; 4096]).unwrap();
}

#[test]
fn block_device_wrong_paths_and_sizes() {
    let missing = BlockDevice::open(Path::new("/nonexistent/disk.img"));
    assert!(matches!(missing, Err(Error::Io { .. })), "{missing:?}");
    let dir = BlockDevice::open(&std::env::temp_dir());
    assert!(matches!(dir, Err(Error::WrongDeviceKind(_))), "{dir:?}");
    if Path::new("/dev/null").exists() {
        let null = BlockDevice::open(Path::new("/dev/null"));
        assert!(matches!(null, Err(Error::WrongDeviceKind(_))), "{null:?}");
    }
    let tiny = TempFile::with_len("tiny", 1000);
    let r = BlockDevice::open(&tiny.0);
    assert!(matches!(r, Err(Error::InvalidGeometry(_))), "{r:?}");
    let t = TempFile::with_len("odd", 65536 * 2);
    let bad_unit = BlockDeviceOptions { write_unit: 1000, ..small() };
    assert!(BlockDevice::open_with(&t.0, bad_unit).is_err());
    let bad_seg = BlockDeviceOptions { segment_size: 65536 + 512, ..small() };
    assert!(BlockDevice::open_with(&t.0, bad_seg).is_err());
    let zero_seg = BlockDeviceOptions { segment_size: 0, ..small() };
    assert!(BlockDevice::open_with(&t.0, zero_seg).is_err());
}

#[test]
fn mtd_device_refuses_what_is_not_an_mtd() {
    let t = TempFile::with_len("notmtd", 65536);
    for p in [t.0.as_path(), Path::new("/nonexistent/mtd9"), std::env::temp_dir().as_path()] {
        let r = MtdDevice::open(p);
        assert!(r.is_err(), "{p:?}");
        let msg = r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(!msg.is_empty());
    }
    for p in ["/dev/mtd0", "/dev/mtd1"] {
        // If the host has an MTD (nandsim in the VM), it must open or fail cleanly, never panic.
        let _ = MtdDevice::open_read_only(Path::new(p));
    }
}
