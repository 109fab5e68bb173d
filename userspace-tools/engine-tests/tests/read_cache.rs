//! The log's read cache (src/engine/readcache.rs): a page read once serves the records that
//! share it, and never outlives what the medium holds there (an erase, a program).

use ferrofs_engine::flash::Flash;
use ferrofs_engine::format::{SegInfo, S_IFREG};
use ferrofs_engine::log::Log;
use ferrofs_engine::segtab::SegTable;
use ferrofs_engine::std_platform::{StdPlatform, StdVec};
use ferrofs_engine::{CreateArgs, ROOT_INO};
use ferrofs_engine_tests::*;

const WU: u32 = 2048;

fn log() -> Log<StdPlatform, RamFlash> {
    let f = RamFlash::new_nand(64 * 1024, 16, WU);
    let segs = StdVec((0..16).map(|_| SegInfo::default()).collect());
    Log::new(f, SegTable::new(segs).unwrap(), 7)
}

fn page(fill: u8) -> Vec<u8> {
    (0..WU).map(|i| fill ^ (i as u8)).collect()
}

fn read(log: &mut Log<StdPlatform, RamFlash>, seg: u32, off: u32, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    log.read_bytes(seg, off, &mut b).unwrap();
    b
}

/// Two small reads of one page cost one read of the medium; after the segment is erased the
/// same place reads erased (0xFF), not the page it held.
#[test]
fn a_cached_page_is_dropped_when_its_segment_is_erased() {
    let mut log = log();
    let a = page(0xA5);
    log.write_fixed(5, 0, &a).unwrap();
    let r0 = log.flash.reads;
    assert_eq!(read(&mut log, 5, 16, 64), a[16..80]);
    assert_eq!(read(&mut log, 5, 200, 100), a[200..300]);
    assert_eq!(log.flash.reads, r0 + 1, "the second read of the page is served from the cache");
    assert!(log.erase(5).unwrap());
    assert_eq!(read(&mut log, 5, 16, 64), vec![0xFF; 64], "an erased segment reads erased");
    // and the page programmed again reads the new bytes
    let b = page(0x3C);
    log.write_fixed(5, 0, &b).unwrap();
    assert_eq!(read(&mut log, 5, 16, 64), b[16..80]);
}

/// A page read while erased (the cache holds 0xFF) and then programmed reads the program.
#[test]
fn a_cached_page_is_dropped_when_it_is_programmed() {
    let mut log = log();
    log.write_fixed(6, 0, &page(1)).unwrap();
    assert_eq!(read(&mut log, 6, WU + 10, 32), vec![0xFF; 32]);
    let b = page(0x77);
    log.write_fixed(6, WU, &b).unwrap();
    assert_eq!(read(&mut log, 6, WU + 10, 32), b[10..42]);
    // a read across two pages, one cached and one not
    assert_eq!(read(&mut log, 6, WU - 8, 16), [&page(1)[WU as usize - 8..], &b[..8]].concat());
}

/// readdir of a directory whose entries were written together reads the medium once per page,
/// not once per entry, also after a remount (cold caches).
#[test]
fn readdir_reads_pages_not_entries() {
    let mut fs = fresh(64 * 1024, 64, WU);
    let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(1)).unwrap().ino;
    for i in 0..200 {
        fs.create(d, format!("file-{i}").as_bytes(), &args, ts(2)).unwrap();
    }
    fs.sync().unwrap();
    let mut fs = remount(fs);
    let r0 = fs.flash_ref().reads;
    let mut n = 0;
    fs.readdir(d, 0, &mut |_, _, _, _| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 202);
    let reads = fs.flash_ref().reads - r0;
    assert!(reads * 4 < n, "{reads} reads for {n} entries");
    assert_consistent(&mut fs);
}

/// The kernel completes each engine call's I/O through `flash_io` when it drops the engine
/// lock: that keeps the read cache, so renames of files created together read each page once
/// (through `flash`, which empties the cache, every rename read its entry's page again).
#[test]
fn the_cache_outlives_the_io_completed_after_each_call() {
    let mut fs = fresh(64 * 1024, 64, WU);
    let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(1)).unwrap().ino;
    let n = 200;
    for i in 0..n {
        fs.create(d, format!("f{i}").as_bytes(), &args, ts(2)).unwrap();
    }
    fs.sync().unwrap();
    let mut fs = remount(fs);
    let r0 = fs.flash_ref().reads;
    for i in 0..n {
        fs.rename(d, format!("f{i}").as_bytes(), d, format!("f{i}.r").as_bytes(), 0, ts(3)).unwrap();
        fs.flash_io().flush().unwrap();
    }
    let reads = fs.flash_ref().reads - r0;
    assert!(reads * 2 < n, "{reads} flash reads for {n} renames");
    assert_consistent(&mut fs);
}

/// The metadata pages the log programs are kept in the cache as written: the rig's meta
/// experiment lists, renames and unlinks files it has just created, and those reads (of
/// entries and inode records) must not go to the medium. Data pages are not kept (they would
/// evict the metadata the cache is for). Everything read back is what a remount reads.
#[test]
fn metadata_pages_just_programmed_are_read_without_the_medium() {
    let mut fs = fresh(64 * 1024, 64, WU);
    let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(1)).unwrap().ino;
    let n = 50;
    for i in 0..n {
        fs.create(d, format!("file-{i}").as_bytes(), &args, ts(2)).unwrap();
    }
    let programmed = fs.stats().programmed_bytes;
    assert!(programmed >= 4 * u64::from(WU), "the creates filled pages ({programmed} bytes programmed)");
    let r0 = fs.flash_ref().reads;
    let list = |fs: &mut Fs| {
        let mut names = Vec::new();
        fs.readdir(d, 0, &mut |name, _, _, _| {
            names.push(name.to_vec());
            true
        })
        .unwrap();
        names
    };
    let names = list(&mut fs);
    assert_eq!(names.len(), n + 2);
    assert_eq!(fs.flash_ref().reads, r0, "readdir of entries just written read the medium");
    for i in 0..n {
        fs.rename(d, format!("file-{i}").as_bytes(), d, format!("file-{i}.r").as_bytes(), 0, ts(3)).unwrap();
    }
    assert_eq!(fs.flash_ref().reads, r0, "renames of entries just written read the medium");
    let renamed = list(&mut fs);
    fs.sync().unwrap();
    let mut fs = remount(fs);
    assert_eq!(list(&mut fs), renamed, "the cached pages held what the medium holds");
    assert_consistent(&mut fs);
}

/// `getattr` of each of a few hundred inodes just created is served by the inode cache (the
/// kernel's unlink and rename read the inode they change; 32 slots missed nearly all of them).
#[test]
fn inodes_of_a_few_hundred_files_stay_in_the_inode_cache() {
    let mut fs = fresh(64 * 1024, 64, WU);
    let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(1)).unwrap().ino;
    let inos: Vec<u64> = (0..300).map(|i| fs.create(d, format!("f{i}").as_bytes(), &args, ts(2)).unwrap().ino).collect();
    let (_, m0) = fs.icache_stats();
    for &ino in &inos {
        assert_eq!(fs.getattr(ino).unwrap().ino, ino);
    }
    let (_, m1) = fs.icache_stats();
    assert_eq!(m1 - m0, 0, "inode cache misses");
}
