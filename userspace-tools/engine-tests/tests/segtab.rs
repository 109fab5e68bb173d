//! The segment table in checkpoints: a checkpoint writes only the SEGTAB chunks it needs (a
//! few small writes cost a few chunks, not the whole table), yet never names a record the
//! checkpoint before it names (so one bad page of the newest checkpoint's metadata leaves the
//! previous one loadable, also across a checkpoint-area scrub); the table's summary counters
//! stay equal to a recount; remounts, crashes and fsck agree.

use std::collections::BTreeSet;

use ferrofs_engine::{MountOptions, ROOT_INO};
use ferrofs_engine_tests::crashload::read_state;
use ferrofs_engine_tests::*;

const SEGMENTS: u32 = 2000;
/// 64 KiB segments (128 MiB): a checkpoint always writes the table's last chunk (3.6 KB) and
/// the chunks holding the segments it changed; on 16 KiB segments a checkpoint's own records
/// fill most of a segment, so nearly every checkpoint opens one and changes a chunk more (22.5
/// KB programmed on average there, against 40.8 KB before the twins).
const SEG_SIZE: usize = 64 * 1024;
/// 200 entries per chunk.
const CHUNKS: usize = 10;

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 64, ..Default::default() }
}

/// A fresh filesystem on the test device holding `files` files of `size` random bytes each
/// (seed `seed`), unsynced: the filesystem and the files' inode numbers.
fn spread(files: u32, size: usize, seed: u64) -> (Fs, Vec<u64>) {
    let f = RamFlash::new_nand(SEG_SIZE as u32, SEGMENTS, 512);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
    let mut rng = Rng::new(seed);
    let mut inos = Vec::new();
    for i in 0..files {
        let f = fs.create(ROOT_INO, format!("f{i}").as_bytes(), &reg(), ts(1)).unwrap();
        let mut d = vec![0u8; size];
        rng.fill(&mut d);
        fs.write(f.ino, 0, &d, ts(1)).unwrap();
        inos.push(f.ino);
    }
    (fs, inos)
}

/// The SEGTAB records the newest checkpoint names, as (segment, offset, record sequence: a
/// place may hold another record once its segment is reused) in chunk order: the
/// places `checkpoint_metadata` reports that hold a SEGTAB record (with the checkpoint
/// extension it reports every record the checkpoint wrote, then the SEGTAB records of earlier
/// checkpoints it names). Each chunk must be there exactly once.
fn chunk_records(fs: &mut Fs) -> Vec<(u32, u32, u64)> {
    let mut places = Vec::new();
    fs.checkpoint_metadata(&mut |s, o, l| places.push((s, o, l))).unwrap();
    let raw = fs.flash().raw();
    let mut chunks: Vec<(u64, u32, u32, u64)> = places
        .iter()
        .filter_map(|&(s, o, _)| {
            let r = &raw[s as usize * SEG_SIZE + o as usize..];
            // record magic, type 9 (SEGTAB); the key's offset is the chunk number
            (r[0..2] == [0xA5, 0xF5] && r[2] == 9).then(|| (u64::from_le_bytes(r[32..40].try_into().unwrap()), s, o, u64::from_le_bytes(r[8..16].try_into().unwrap())))
        })
        .collect();
    chunks.sort();
    assert_eq!(chunks.iter().map(|c| c.0).collect::<Vec<_>>(), (0..CHUNKS as u64).collect::<Vec<_>>(), "{places:?}");
    chunks.iter().map(|&(_, s, o, q)| (s, o, q)).collect()
}

#[test]
fn a_checkpoint_writes_only_the_chunks_it_needs() {
    // data spread over many segments, then a few checkpoints so the twins exist
    let (mut fs, inos) = spread(40, 64 * 1024, 3);
    for _ in 0..4 {
        fs.sync().unwrap();
    }
    // the whole table as SEGTAB records: 10 chunks of up to 200 entries of 18 bytes
    let table_bytes = SEGMENTS as u64 * 18;
    let mut prev = chunk_records(&mut fs);
    let mut cp_bytes = Vec::new();
    for round in 0..30u64 {
        // one small overwrite: a data segment, the metadata head and a few index nodes change
        let ino = inos[(round as usize * 7) % inos.len()];
        fs.write(ino, (round % 16) * 4096, &[round as u8; 4096], ts(2)).unwrap();
        fs.fsync(ino).unwrap();
        let before = fs.flash().programmed;
        fs.sync().unwrap();
        cp_bytes.push(fs.flash().programmed - before);
        let cur = chunk_records(&mut fs);
        let shared: Vec<_> = cur.iter().filter(|r| prev.contains(r)).collect();
        assert!(shared.is_empty(), "round {round}: the newest and the previous checkpoint share SEGTAB records {shared:?}");
        let distinct: BTreeSet<_> = cur.iter().collect();
        assert_eq!(distinct.len(), CHUNKS, "round {round}: {cur:?}");
        prev = cur;
    }
    let avg = cp_bytes.iter().sum::<u64>() / cp_bytes.len() as u64;
    eprintln!("checkpoint after a 4 KiB overwrite: {avg} bytes programmed on average (whole table {table_bytes} bytes), {cp_bytes:?}");
    assert!(avg * 2 < table_bytes, "a checkpoint programmed {avg} bytes on average: the whole table is {table_bytes}");
    assert_fsck(&mut fs);
    // the state survives a clean remount and a crash after more checkpoints
    let expect = read_state(&mut fs);
    let mut fs = remount(fs);
    assert_fsck(&mut fs);
    assert!(read_state(&mut fs) == expect);
    for round in 0..5u64 {
        fs.write(inos[round as usize], 0, &[9; 4096], ts(3)).unwrap();
        fs.sync().unwrap();
    }
    let expect = read_state(&mut fs);
    let mut fs = crash_remount(fs);
    assert_fsck(&mut fs);
    assert!(read_state(&mut fs) == expect);
}

/// Every chunk that does not change is named alternately from two records; after a chunk
/// changes it is written again, and the counters match a recount after every step (fsck's
/// `check`), through GC churn on a small device.
#[test]
fn counters_and_chunks_through_gc_churn() {
    let f = RamFlash::new_nand(16 * 1024, 600, 512);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions { cache_nodes: 32, ..Default::default() }).map_err(|e| e.0).unwrap();
    let mut rng = Rng::new(11);
    let f1 = fs.create(ROOT_INO, b"churn", &reg(), ts(1)).unwrap();
    let blocks = (fs.statfs().blocks * 6 / 10).max(8);
    for b in 0..blocks {
        fs.write(f1.ino, b * 4096, &[b as u8; 4096], ts(1)).unwrap();
    }
    for step in 0..3000u64 {
        let b = rng.below(blocks);
        fs.write(f1.ino, b * 4096, &[step as u8; 4096], ts(2)).unwrap();
        if step % 97 == 0 {
            fs.sync().unwrap();
            assert_eq!(fs.check().unwrap(), None, "step {step}");
        }
        if step % 1000 == 999 {
            fs = crash_remount(fs);
            assert_fsck(&mut fs);
        }
    }
    assert_fsck(&mut fs);
    let mut fs = remount(fs);
    assert_fsck(&mut fs);
}

/// A checkpoint-area scrub (an area read through correction: the next checkpoints move to the
/// other area, erasing it, and come back to erase this one) while the checkpoints name records
/// of earlier checkpoints: no checkpoint loses a record it names (a crash after every round
/// remounts without a fallback), and one bad page under any SEGTAB record the newest
/// checkpoint names, its own or an earlier checkpoint's, makes the mount fall back to the
/// previous checkpoint and lose nothing that was synced.
#[test]
fn named_twins_survive_an_area_scrub_and_fall_back_page_by_page() {
    let (mut fs, inos) = spread(20, 48 * 1024, 5);
    fs.sync().unwrap();
    let mut history = vec![chunk_records(&mut fs)];
    let mut reused = 0;
    for round in 0..12u64 {
        if round == 4 {
            // the area of the newest checkpoint's slot reads through correction from now on
            let mut places = Vec::new();
            fs.checkpoint_metadata(&mut |s, o, l| places.push((s, o, l))).unwrap();
            let area_seg = places[0].0;
            fs.flash().corrected.push(area_seg);
            fs.checkpoint_metadata(&mut |_, _, _| {}).unwrap();
            fs.flash().corrected.clear();
        }
        fs.write(inos[round as usize % inos.len()], 4096 * (round % 8), &[round as u8 + 1; 4096], ts(2)).unwrap();
        fs.fsync(inos[round as usize % inos.len()]).unwrap();
        fs.sync().unwrap();
        if round == 4 {
            assert!(fs.fault_stats().cp_area_scrubs >= 1, "{:?}", fs.fault_stats());
        }
        let cur = chunk_records(&mut fs);
        let prev = history.last().unwrap();
        assert!(cur.iter().all(|r| !prev.contains(r)), "round {round}: shared with the previous checkpoint");
        history.push(cur);
        let expect = read_state(&mut fs);
        fs = crash_remount(fs);
        assert_eq!(fs.checkpoint_fallback(), None, "round {round}");
        assert!(read_state(&mut fs) == expect, "round {round}");
        // the mount's checkpoint names twins of the previous checkpoint where it can, never a
        // record of the checkpoint it mounted
        let cur = chunk_records(&mut fs);
        assert!(cur.iter().all(|r| !history.last().unwrap().contains(r)), "round {round}: the mount's checkpoint shares records");
        reused += cur.iter().filter(|r| history.iter().any(|h| h.contains(r))).count();
        history.push(cur);
        for k in 0..3u8 {
            fs.write(inos[(round as usize + 3 + k as usize) % inos.len()], 0, &[7 + k; 4096], ts(2)).unwrap();
            fs.sync().unwrap();
            let cur = chunk_records(&mut fs);
            assert!(cur.iter().all(|r| !history.last().unwrap().contains(r)), "round {round}.{k}: shared");
            reused += cur.iter().filter(|r| history.iter().any(|h| h.contains(r))).count();
            history.push(cur);
        }
    }
    assert!(reused > 0, "no checkpoint named a record of an earlier one");
    // the newest checkpoint, named partly from earlier ones: damage each of its SEGTAB records
    let newest = history.last().unwrap().clone();
    let before = &history[history.len() - 2];
    let twins: Vec<_> = newest.iter().filter(|r| history.iter().rev().skip(2).any(|h| h.contains(r))).collect();
    assert!(!twins.is_empty() && twins.len() < CHUNKS, "newest {newest:?}, previous {before:?}");
    let expect = read_state(&mut fs);
    let img = fs.into_flash();
    for &(s, o, _) in &newest {
        let mut f = img.clone();
        for b in 0..512 {
            f.flip(s, o / 512 * 512 + b, 0x5a);
        }
        let mut fs = Fs::mount(f, opts()).unwrap_or_else(|(e, _)| panic!("record {s}:{o}: mount failed: {e:?}"));
        assert!(fs.checkpoint_fallback().is_some(), "record {s}:{o} damaged, but the mount did not fall back");
        assert_fsck(&mut fs);
        assert!(read_state(&mut fs) == expect, "record {s}:{o}: the state after the fallback differs");
    }
}

/// The segments holding the SEGTAB records the newest checkpoint names, as the engine's
/// `checkpoint_metadata` reports them (every record that reads as a SEGTAB record there).
fn named_segtab_segments(fs: &mut Fs, seg_size: usize) -> BTreeSet<u32> {
    ferrofs_engine_tests::named_segtab_places(fs, seg_size).into_iter().map(|(s, _)| s).collect()
}

/// The previous checkpoint is the fallback of the newest: no segment holding a SEGTAB record
/// it names may be freed by the newest (it could be reused before the next checkpoint). A
/// segment that was already dead when a checkpoint named a record in it (a twin named again,
/// in a segment of SEGTAB records only) kept the mark "dead at the previous checkpoint" under
/// the pin, and the next checkpoint freed it at once (before the pin cleared the mark this test
/// found such a free in round 214).
#[test]
fn the_previous_checkpoints_records_stay_until_the_next_checkpoint() {
    const SEG: usize = 16 * 1024;
    let f = RamFlash::new_nand(SEG as u32, 700, 512);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions { cache_nodes: 64, ..Default::default() }).map_err(|e| e.0).unwrap();
    let mut rng = Rng::new(3);
    let f1 = fs.create(ROOT_INO, b"churn", &reg(), ts(1)).unwrap();
    let blocks = fs.statfs().blocks * 6 / 10;
    for b in 0..blocks {
        fs.write(f1.ino, b * 4096, &[b as u8; 4096], ts(1)).unwrap();
    }
    fs.sync().unwrap();
    let (mut checked, mut freed) = (0, Vec::new());
    for round in 0..2000u64 {
        for _ in 0..8 {
            let b = rng.below(blocks);
            fs.write(f1.ino, b * 4096, &[round as u8; 4096], ts(2)).unwrap();
        }
        fs.fsync(f1.ino).unwrap();
        let prev = named_segtab_segments(&mut fs, SEG);
        let c0 = fs.stats().checkpoints;
        fs.sync().unwrap();
        if fs.stats().checkpoints != c0 + 1 {
            continue;
        }
        checked += 1;
        for s in prev {
            if fs.segment_info(s).unwrap().state == 0 {
                freed.push((round, s));
            }
        }
        if round % 500 == 499 {
            fs = crash_remount(fs);
            assert_eq!(fs.checkpoint_fallback(), None);
            assert_fsck(&mut fs);
        }
    }
    assert!(checked > 1000, "{checked}");
    assert!(freed.is_empty(), "the newest checkpoint freed segments holding the previous one's SEGTAB records: (round, segment) {freed:?}");
}

/// The least-worn free segment as the allocator always chose it: the lowest erase count, the
/// lowest index among equals, by a pass over every entry.
fn least_worn_by_scan(t: &ferrofs_engine::segtab::SegTable<ferrofs_engine::std_platform::StdPlatform>) -> Option<u32> {
    let mut best: Option<(u32, u32)> = None;
    for (i, s) in t.as_slice().iter().enumerate() {
        if s.state == ferrofs_engine::format::segstate::FREE && best.is_none_or(|(_, e)| s.erases < e) {
            best = Some((i as u32, s.erases));
        }
    }
    best.map(|b| b.0)
}

/// `SegTable::least_worn_free` (a cache of the 16 least-worn free segments, refilled by one pass
/// when it runs out or a change could reorder it) hands out exactly what a scan per call
/// would, through allocations, segments freed again with low and high erase counts, erases of
/// free segments, and tables with fewer free segments than the cache holds.
#[test]
fn least_worn_free_matches_a_scan_per_call() {
    use ferrofs_engine::format::{segstate, SegInfo};
    use ferrofs_engine::platform::FallibleVec;
    use ferrofs_engine::segtab::SegTable;
    use ferrofs_engine::std_platform::{StdPlatform, StdVec};
    for seed in 1..=20u64 {
        let mut rng = Rng::new(seed);
        let n = 40 + rng.below(400) as u32;
        let mut v: StdVec<SegInfo> = StdVec::new();
        for _ in 0..n {
            let state = match rng.below(4) {
                0 | 1 => segstate::FREE,
                2 => segstate::FULL,
                _ => segstate::BAD,
            };
            v.try_push(SegInfo { state, erases: rng.below(8) as u32, ..Default::default() }).unwrap();
        }
        let mut t: SegTable<StdPlatform> = SegTable::new(v).unwrap();
        let mut handed = 0u32;
        for _ in 0..3000 {
            match rng.below(10) {
                // allocate: what the allocator does (take it, mark it reserved)
                0..=4 => {
                    let want = least_worn_by_scan(&t);
                    let got = t.least_worn_free();
                    assert_eq!(got, want, "seed {seed}");
                    if let Some(s) = got {
                        t.get_mut(s).unwrap().state = segstate::RESERVED;
                        handed += 1;
                    }
                }
                // a segment in use is freed again (erase counts low and high)
                5 | 6 => {
                    let s = rng.below(u64::from(n)) as u32;
                    let mut si = t.get_mut(s).unwrap();
                    if si.state != segstate::BAD {
                        si.state = segstate::FREE;
                        si.erases = si.erases.saturating_add(rng.below(3) as u32);
                    }
                }
                // a free segment erased (its count grows while it stays free)
                7 => {
                    let s = rng.below(u64::from(n)) as u32;
                    let mut si = t.get_mut(s).unwrap();
                    if si.state == segstate::FREE {
                        si.erases += 1;
                    }
                }
                // a segment filled, or retired
                _ => {
                    let s = rng.below(u64::from(n)) as u32;
                    t.get_mut(s).unwrap().state = if rng.below(8) == 0 { segstate::BAD } else { segstate::FULL };
                }
            }
        }
        assert!(handed > 500, "seed {seed}: {handed} allocations");
    }
}
