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

/// Whatever the cache's size (off, a few lines, more lines than the medium has pages), every
/// read returns what the medium holds, through a seeded mix of programs, erases and reads of
/// one or two pages or more; a cache at least as large as the medium serves every page read
/// twice from RAM.
#[test]
fn reads_always_match_the_medium_whatever_the_cache_size() {
    let pages_per_seg = 64 * 1024 / WU;
    for &bytes in &[0usize, 3 * WU as usize, 40 * WU as usize, 4 << 20] {
        let mut log = log();
        log.set_read_cache_bytes(bytes);
        // model: the bytes of every page, None while erased
        let mut model: Vec<Vec<Option<Vec<u8>>>> = vec![vec![None; pages_per_seg as usize]; 16];
        let mut next_free = [0u32; 16];
        let mut x: u64 = 0x9E37_79B9 ^ bytes as u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for step in 0..6000u32 {
            let seg = rnd(16) as u32;
            match rnd(10) {
                0..=3 => {
                    // program the next page of the segment (NAND: in order, once per erase)
                    let p = next_free[seg as usize];
                    if p < pages_per_seg {
                        let data = page(step as u8 ^ seg as u8);
                        log.write_fixed(seg, p * WU, &data).unwrap();
                        model[seg as usize][p as usize] = Some(data);
                        next_free[seg as usize] = p + 1;
                    }
                }
                4 => {
                    if rnd(8) == 0 {
                        log.erase(seg).unwrap();
                        model[seg as usize] = vec![None; pages_per_seg as usize];
                        next_free[seg as usize] = 0;
                    }
                }
                _ => {
                    let seg_bytes = pages_per_seg * WU;
                    let off = rnd(u64::from(seg_bytes)) as u32;
                    let max = (seg_bytes - off).min(if rnd(4) == 0 { 5 * WU } else { WU + 100 });
                    let len = 1 + rnd(u64::from(max)) as usize;
                    let got = read(&mut log, seg, off, len);
                    let want: Vec<u8> = (off as usize..off as usize + len)
                        .map(|b| match &model[seg as usize][b / WU as usize] {
                            Some(d) => d[b % WU as usize],
                            None => 0xFF,
                        })
                        .collect();
                    assert_eq!(got, want, "cache of {bytes} bytes, step {step}: read of {len} at {seg}:{off}");
                }
            }
            assert!(log.rcache.consistent(), "cache of {bytes} bytes, step {step}: the hash index lost or duplicated a line");
        }
    }
    // a cache larger than the medium: it holds only what was read (doubling from 16 lines),
    // and the second pass over every page reads nothing
    let mut log = log();
    log.set_read_cache_bytes(4 << 20);
    assert_eq!(log.rcache.capacity_lines(), 2048);
    assert_eq!(log.rcache.allocated_lines(), 0, "nothing is allocated before the first read");
    log.write_fixed(0, 0, &page(9)).unwrap();
    assert_eq!(read(&mut log, 0, 10, 20), page(9)[10..30]);
    assert_eq!(log.rcache.allocated_lines(), 16, "one page read: the first 16 lines");
    log.erase(0).unwrap();
    for s in 0..16u32 {
        for p in 0..pages_per_seg {
            log.write_fixed(s, p * WU, &page((s * 31 + p) as u8)).unwrap();
        }
    }
    for s in 0..16u32 {
        for p in 0..pages_per_seg {
            assert_eq!(read(&mut log, s, p * WU + 7, 40), page((s * 31 + p) as u8)[7..47]);
        }
    }
    let r0 = log.flash.reads;
    for s in (0..16u32).rev() {
        for p in 0..pages_per_seg {
            assert_eq!(read(&mut log, s, p * WU + 100, 60), page((s * 31 + p) as u8)[100..160]);
        }
    }
    assert_eq!(log.flash.reads, r0, "all 512 pages were served from the cache");
    assert_eq!(log.rcache.allocated_lines(), 512, "grown to what was read, not to its ceiling");
    assert!(log.rcache.consistent());
}

/// Lines dropped by an erase leave holes that the next pages fill: nothing still valid is
/// evicted while a hole is left, and the cache does not grow past what it holds.
#[test]
fn holes_left_by_an_erase_are_filled_before_anything_is_evicted() {
    let pages_per_seg = 64 * 1024 / WU;
    let mut log = log();
    log.set_read_cache_bytes(4 << 20);
    for s in 0..16u32 {
        for p in 0..pages_per_seg {
            log.write_fixed(s, p * WU, &page((s + p) as u8)).unwrap();
            assert_eq!(read(&mut log, s, p * WU, 8), page((s + p) as u8)[..8]);
        }
    }
    assert_eq!(log.rcache.allocated_lines(), 512);
    // segment 15 erased (32 holes), written and read again
    log.erase(15).unwrap();
    for p in 0..pages_per_seg {
        log.write_fixed(15, p * WU, &page(p as u8 ^ 0x5A)).unwrap();
        assert_eq!(read(&mut log, 15, p * WU, 8), page(p as u8 ^ 0x5A)[..8]);
    }
    assert_eq!(log.rcache.allocated_lines(), 512, "the holes were reused, the cache did not grow");
    let r0 = log.flash.reads;
    for s in 0..15u32 {
        for p in 0..pages_per_seg {
            assert_eq!(read(&mut log, s, p * WU + 9, 8), page((s + p) as u8)[9..17]);
        }
    }
    assert_eq!(log.flash.reads, r0, "no page of segments 0-14 was evicted");
    assert!(log.rcache.consistent());
}

/// The roll-forward of a mount after a cut reads each record after the checkpoint once: the
/// cache serves it at its default size (256 KiB), and grows past that only once the mount is
/// done (otherwise a large cache would allocate and copy lines nothing reads again).
#[test]
fn the_roll_forward_does_not_grow_the_cache_past_its_default_size() {
    use ferrofs_engine::readcache::READ_CACHE_BYTES;
    use ferrofs_engine::MountOptions;
    let big = MountOptions { read_cache_bytes: Some(4 << 20), ..MountOptions::default() };
    let f = RamFlash::new_nand(64 * 1024, 256, WU);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, big).map_err(|e| e.0).unwrap();
    let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
    fs.commit().unwrap();
    // hundreds of pages of records after the checkpoint, made durable (fsync), then a cut
    let mut last = 0;
    for d in 0..10 {
        let dir = fs.mkdir(ROOT_INO, format!("d{d}").as_bytes(), 0o755, 0, 0, ts(1)).unwrap().ino;
        for i in 0..100 {
            last = fs.create(dir, format!("f{i}").as_bytes(), &args, ts(2)).unwrap().ino;
            fs.write(last, 0, &[7u8; 1000], ts(3)).unwrap();
        }
    }
    fs.fsync(last).unwrap();
    // the roll-forward that reads data records by their headers (a log of 2 MiB or more in
    // the kernel: a page read per header, through the cache)
    let lazy = MountOptions { lazy_replay_min_log: 1, ..big };
    let mut fs = Fs::mount(fs.into_flash(), lazy).map_err(|e| e.0).unwrap();
    assert!(fs.stats().replayed > 1000, "the mount rolled {} records forward", fs.stats().replayed);
    let (lines, max) = fs.read_cache_lines();
    assert_eq!(max, 2048);
    assert!(lines * WU as usize <= READ_CACHE_BYTES, "{lines} lines after the roll-forward");
    // after the mount the cache grows with what is read
    for d in 0..10 {
        let dir = fs.lookup(ROOT_INO, format!("d{d}").as_bytes()).unwrap().ino;
        fs.readdir(dir, 0, &mut |_, _, _, _| true).unwrap();
    }
    for d in 0..10 {
        let dir = fs.lookup(ROOT_INO, format!("d{d}").as_bytes()).unwrap().ino;
        for i in 0..100 {
            let ino = fs.lookup(dir, format!("f{i}").as_bytes()).unwrap().ino;
            let mut b = [0u8; 10];
            fs.read(ino, 0, &mut b).unwrap();
        }
    }
    let (grown, _) = fs.read_cache_lines();
    assert!(grown * WU as usize > READ_CACHE_BYTES, "{grown} lines after reading the tree");
    assert_consistent(&mut fs);
}

/// A roll-forward that takes data records by their headers reads each page of the log about
/// once: a header the head's scan window already holds is taken from it, and a record running
/// past the window's end costs the pages the window lacks, not a second read of those it has
/// (on the rig's nandsim every page read costs its access and transfer, 76 us).
#[test]
fn the_roll_forward_reads_each_page_of_the_log_about_once() {
    use ferrofs_engine::MountOptions;
    // the rig's nandsim geometry: 2 KiB pages, 128 KiB erase blocks
    let f = RamFlash::new_nand(128 * 1024, 256, WU);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
    let ino = fs.create(ROOT_INO, b"f", &args, ts(1)).unwrap().ino;
    fs.commit().unwrap();
    const N: u64 = 300;
    let block = |i: u64| -> Vec<u8> { (0..4096u32).map(|j| (i as u8).wrapping_mul(31) ^ (j as u8)).collect() };
    for i in 0..N {
        let b = block(i);
        fs.write_blocks(ino, i, &[b.as_slice()], (i + 1) * 4096, ts(2), ts(2)).unwrap();
    }
    fs.fsync(ino).unwrap();
    // records after the fsync's marker prove it durable (`Engine::replay`): the data records
    // before it are not read back whole
    let g = fs.create(ROOT_INO, b"g", &args, ts(3)).unwrap().ino;
    fs.fsync(g).unwrap();
    let mut flash = fs.into_flash();
    flash.read_log = Some(Vec::new());
    let lazy = MountOptions { lazy_replay_min_log: 1, ..MountOptions::default() };
    let mut fs = Fs::mount(flash, lazy).map_err(|e| e.0).unwrap();
    let lz = fs.replay_lazy();
    assert!(lz.trusted >= N * 3 / 4, "{} data records taken by their headers", lz.trusted);
    let log = fs.flash().read_log.take().unwrap();
    let mut pages = std::collections::HashMap::new();
    for &(seg, off, len) in &log {
        for p in off / WU..=(off + len as u32 - 1) / WU {
            *pages.entry((seg, p)).or_insert(0u32) += 1;
        }
    }
    let again: u32 = pages.values().map(|&n| n - 1).sum();
    // before: 81 of 525 pages read again (a window's second read from its start, a header's
    // page read through the cache after a window read it), now 34: each segment's first
    // page (read for the chain, then by the window) and a page or two at its end
    assert!(again * 10 < pages.len() as u32, "{again} pages read again, {} pages read, {} reads", pages.len(), log.len());
    for i in 0..N {
        let mut b = vec![0u8; 4096];
        assert_eq!(fs.read(ino, i * 4096, &mut b).unwrap(), 4096);
        assert_eq!(b, block(i), "block {i}");
    }
    assert_consistent(&mut fs);
}
