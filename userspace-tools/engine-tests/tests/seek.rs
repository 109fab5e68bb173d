//! SEEK_DATA / SEEK_HOLE at the 4 KiB block granularity of the index, and the volume serial.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, Error, FormatOptions, SetAttr, ROOT_INO};
use ferrofs_engine_tests::*;

const B: u64 = 4096;

#[test]
fn seek_data_and_hole() {
    let mut fs = fresh(32 * 1024, 64, 512);
    let f = fs.create(ROOT_INO, b"sparse", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
    // empty file: no data, every offset is past EOF
    assert_eq!(fs.seek_data(f.ino, 0).unwrap(), None);
    assert_eq!(fs.seek_hole(f.ino, 0), Err(Error::NoSuchAddress));
    assert_eq!(Error::NoSuchAddress.errno(), 6);
    // layout: hole [0, 2B), data [2B, 4B), hole [4B, 10B), data [10B, 10B + 100) = EOF
    fs.write(f.ino, 2 * B + 10, &[7u8; 2 * B as usize - 10], ts(1)).unwrap();
    fs.write(f.ino, 10 * B, &[9u8; 100], ts(1)).unwrap();
    let size = 10 * B + 100;
    for round in 0..2 {
        assert_eq!(fs.getattr(f.ino).unwrap().size, size);
        assert_eq!(fs.seek_data(f.ino, 0).unwrap(), Some(2 * B), "round {round}");
        assert_eq!(fs.seek_data(f.ino, 2 * B + 5).unwrap(), Some(2 * B + 5));
        assert_eq!(fs.seek_data(f.ino, 3 * B + 1).unwrap(), Some(3 * B + 1));
        assert_eq!(fs.seek_data(f.ino, 4 * B).unwrap(), Some(10 * B));
        assert_eq!(fs.seek_data(f.ino, 10 * B + 99).unwrap(), Some(10 * B + 99));
        assert_eq!(fs.seek_data(f.ino, size).unwrap(), None);
        assert_eq!(fs.seek_data(f.ino, u64::MAX).unwrap(), None);
        assert_eq!(fs.seek_hole(f.ino, 0).unwrap(), 0);
        assert_eq!(fs.seek_hole(f.ino, B + 7).unwrap(), B + 7);
        assert_eq!(fs.seek_hole(f.ino, 2 * B).unwrap(), 4 * B);
        assert_eq!(fs.seek_hole(f.ino, 3 * B + 9).unwrap(), 4 * B);
        assert_eq!(fs.seek_hole(f.ino, 5 * B).unwrap(), 5 * B);
        // the last block is data up to EOF: EOF is the hole
        assert_eq!(fs.seek_hole(f.ino, 10 * B).unwrap(), size);
        assert_eq!(fs.seek_hole(f.ino, size), Err(Error::NoSuchAddress));
        fs = remount(fs);
    }
    // truncating into the data: blocks past the new size are gone, EOF is a hole
    fs.setattr(f.ino, &SetAttr { size: Some(3 * B), ..SetAttr::default() }, ts(2)).unwrap();
    assert_eq!(fs.seek_data(f.ino, 0).unwrap(), Some(2 * B));
    assert_eq!(fs.seek_hole(f.ino, 2 * B).unwrap(), 3 * B);
    // growing by truncate adds a hole, not data
    fs.setattr(f.ino, &SetAttr { size: Some(20 * B), ..SetAttr::default() }, ts(2)).unwrap();
    assert_eq!(fs.seek_hole(f.ino, 2 * B).unwrap(), 3 * B);
    assert_eq!(fs.seek_data(f.ino, 3 * B).unwrap(), None);
    // a fully written file has its only hole at EOF
    let g = fs.create(ROOT_INO, b"dense", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(3)).unwrap();
    fs.write(g.ino, 0, &vec![1u8; 5 * B as usize + 1], ts(3)).unwrap();
    assert_eq!(fs.seek_data(g.ino, 0).unwrap(), Some(0));
    assert_eq!(fs.seek_hole(g.ino, 0).unwrap(), 5 * B + 1);
    // directories are refused
    assert_eq!(fs.seek_data(ROOT_INO, 0), Err(Error::IsDir));
    assert_eq!(fs.seek_hole(ROOT_INO, 0), Err(Error::IsDir));
    assert!(fs.seek_data(9999, 0).is_err());
}

#[test]
fn serial_is_the_volume_serial() {
    let f = RamFlash::new_nand(32 * 1024, 64, 512);
    let fo = FormatOptions { serial: 0x1234_5678_9abc_def0, ..Default::default() };
    let f = mkfs(f, &fo, ts(0)).map_err(|e| e.0).unwrap();
    let fs = Fs::mount(f, Default::default()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.serial(), 0x1234_5678_9abc_def0);
    let fs = remount(fs);
    assert_eq!(fs.serial(), 0x1234_5678_9abc_def0);
}
