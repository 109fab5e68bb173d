//! The write-back engine API (issue 10): `Budget`, `budget_cost`/`budget_avail`/`set_reserved`,
//! `write_blocks`, `getxattr_len` and the inode cache.
//!
//! - the budget never over-commits: a device filled through `try_reserve` + `write_blocks`
//!   until `try_reserve` fails keeps live bytes (after a commit) within the capacity, every
//!   reserved `write_blocks` succeeds, other operations get `NoSpace` while reservations are
//!   held, deletions still work;
//! - `write_blocks` content and size semantics, errors, one inode record per call, remount;
//! - a crash enumeration over write-back workloads (the shared oracle, `crashcheck`): after a
//!   cut each block holds its old or its new content, the new ones a prefix of the batch, the
//!   on-flash size never covers a block not written, everything written before the last
//!   fsync/sync is intact, and the filesystem keeps working.
#![allow(clippy::needless_range_loop)]

use ferrofs_engine::format::BLOCK_SIZE;
use ferrofs_engine::flash::FlashKind;
use ferrofs_engine::{Budget, Error, Flash, MountOptions, SetAttr, Timespec, ROOT_INO};
use ferrofs_engine_tests::crashcheck::{check_after_cut, CutCheck, Oracle, WriteShape};
use ferrofs_engine_tests::snapshot::{diff, snapshot};
use ferrofs_engine_tests::*;

const BS: usize = BLOCK_SIZE as usize;

fn block(b: u8) -> Vec<u8> {
    vec![b; BS]
}

/// write_blocks with the budget taken and given back the way the kernel does.
fn wb(fs: &mut Fs, budget: &Budget, ino: u64, first: u64, blocks: &[&[u8]], size: u64, t: i64) -> Result<(), Error> {
    let cost = fs.budget_cost(blocks.len() as u64, 1);
    budget.publish(fs.budget_avail());
    assert!(budget.try_reserve(cost), "no budget for {} blocks", blocks.len());
    fs.set_reserved(budget.reserved());
    let r = fs.write_blocks(ino, first, blocks, size, ts(t), ts(t));
    budget.release(cost);
    fs.set_reserved(budget.reserved());
    budget.publish(fs.budget_avail());
    r
}

fn read_all(fs: &mut Fs, ino: u64) -> Vec<u8> {
    let sz = fs.getattr(ino).unwrap().size as usize;
    let mut v = vec![0u8; sz];
    let n = fs.read(ino, 0, &mut v).unwrap();
    assert_eq!(n, sz);
    v
}

#[test]
fn budget_is_lock_free_counter() {
    let b = Budget::new();
    assert!(!b.try_reserve(1), "nothing published yet");
    assert!(b.try_reserve(0));
    b.publish(100);
    assert!(b.try_reserve(60));
    assert!(!b.try_reserve(41));
    assert!(b.try_reserve(40));
    assert_eq!(b.reserved(), 100);
    assert!(!b.try_reserve(1));
    b.release(30);
    assert_eq!(b.reserved(), 70);
    b.publish(50); // shrinking below what is held keeps the holdings, refuses new ones
    assert_eq!(b.reserved(), 70);
    assert!(!b.try_reserve(1));
    b.release(1000);
    assert_eq!(b.reserved(), 0);
    assert!(!b.try_reserve(u64::MAX));
    // concurrent reservations never exceed the published figure
    let b = std::sync::Arc::new(Budget::new());
    b.publish(10_000);
    let hs: Vec<_> = (0..4)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || (0..10_000).filter(|_| b.try_reserve(3)).count())
        })
        .collect();
    let got: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(got, 10_000 / 3);
    assert_eq!(b.reserved(), 3 * (10_000 / 3) as u64);
}

#[test]
fn budget_cost_formula() {
    let fs = fresh(32 * 1024, 64, 512);
    // linear: per-folio and per-inode reservations add up to a batch's cost
    assert_eq!(fs.budget_cost(16, 1), 16 * fs.budget_cost(1, 0) + fs.budget_cost(0, 1));
    assert_eq!(fs.budget_cost(0, 0), 0);
    // at least the DATA records (header + block) and the inode record
    assert!(fs.budget_cost(1, 0) >= 48 + 4096 + 29, "{}", fs.budget_cost(1, 0));
    assert!(fs.budget_cost(0, 1) >= 48 + 88 + 29);
    // and not absurd: under 5 % over the payload per block
    assert!(fs.budget_cost(1, 0) < 4096 * 105 / 100);
    // the capacity budgets are handed out against is the one statfs reports and every other
    // operation checks (it counts segments by what block records fill of them: 16 KiB
    // segments hold 3 blocks, 32 KiB ones 7; delete_when_full.rs)
    let (cap, _, _) = fs.budget_figures();
    let st = fs.statfs();
    assert_eq!(cap / 4096, st.blocks);
    let small = fresh(16 * 1024, 64, 2048);
    let (c2, _, _) = small.budget_figures();
    assert_eq!(c2 / 4096, small.statfs().blocks);
    // per segment: 16 KiB segments hold 3 blocks of records, 32 KiB ones 7 (the same number of
    // segments, the same reserves in segments except the segment table's)
    assert!(c2 * 7 <= cap * 3, "{c2} vs {cap}");
    assert_eq!(fs.budget_cost(u64::MAX, 1), u64::MAX);
    eprintln!("budget_cost(1, 0) = {}, budget_cost(0, 1) = {}", fs.budget_cost(1, 0), fs.budget_cost(0, 1));
}

/// Fill the device through the budget: hold several reservations at once, then write them
/// back; every reserved write_blocks succeeds; after each commit live bytes stay within the
/// capacity. Ends when try_reserve fails right after a checkpoint.
#[test]
fn budget_never_overcommits_fill() {
    for (seg, segs, wu, nblk) in [(32 * 1024u32, 96u32, 512u32, 16usize), (16 * 1024, 128, 2048, 7), (128 * 1024, 40, 2048, 64)] {
        let mut fs = fresh(seg, segs, wu);
        let budget = Budget::new();
        let mut files = Vec::new();
        for i in 0..3 {
            files.push(fs.create(ROOT_INO, format!("f{i}").as_bytes(), &reg(), ts(1)).unwrap().ino);
        }
        let mut next = [0u64; 3];
        let data: Vec<Vec<u8>> = (0..nblk).map(|k| block(k as u8 + 1)).collect();
        let refs: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
        let cost = fs.budget_cost(nblk as u64, 1);
        let mut written = 0u64;
        let mut rounds = 0;
        loop {
            fs.sync().unwrap();
            let (cap, live, dirty) = fs.budget_figures();
            assert_eq!(dirty, 0);
            assert!(live <= cap, "over-committed: live {live} > capacity {cap} after {written} bytes");
            budget.publish(fs.budget_avail());
            let mut held = Vec::new();
            while held.len() < 6 && budget.try_reserve(cost) {
                let f = (rounds + held.len()) % 3;
                held.push((f, next[f]));
                next[f] += nblk as u64;
            }
            fs.set_reserved(budget.reserved());
            if held.is_empty() {
                break;
            }
            for (f, first) in held {
                let end = (first + nblk as u64) * BS as u64;
                fs.write_blocks(files[f], first, &refs, end, ts(2), ts(2))
                    .unwrap_or_else(|e| panic!("reserved write_blocks failed: {e:?} after {written} bytes"));
                written += (nblk * BS) as u64;
                budget.release(cost);
                fs.set_reserved(budget.reserved());
                budget.publish(fs.budget_avail());
            }
            rounds += 1;
        }
        let (cap, live, _) = fs.budget_figures();
        eprintln!("geometry {seg}/{segs}/{wu}: {written} bytes through the budget, capacity {cap}, live {live}");
        // the budget is not absurdly pessimistic either: most of the capacity was handed out
        assert!(written >= cap * 85 / 100, "only {written} of {cap} bytes written");
        assert_consistent(&mut fs);
        // hold all that is left: every other space-consuming operation gets NoSpace
        budget.publish(fs.budget_avail());
        let rest = budget.avail() - budget.reserved();
        assert!(budget.try_reserve(rest));
        fs.set_reserved(budget.reserved());
        assert_eq!(fs.create(ROOT_INO, b"x", &reg(), ts(3)).err(), Some(Error::NoSpace));
        let size0 = fs.getattr(files[0]).unwrap().size;
        assert_eq!(fs.write(files[0], size0, &[1u8; 4096], ts(3)).err(), Some(Error::NoSpace));
        // an overwrite in place adds no live bytes: it takes nothing the budget handed out
        // (docs/design.md "Space, garbage collection, wear")
        assert_eq!(fs.write(files[0], 0, &[1u8; 4096], ts(3)), Ok(4096));
        // deletions still work, and free space
        fs.unlink(ROOT_INO, b"f1", ts(4)).unwrap();
        fs.evict(files[1]).unwrap();
        fs.set_reserved(0);
        budget.release(rest);
        fs.sync().unwrap();
        budget.publish(fs.budget_avail());
        assert!(budget.try_reserve(cost), "deleting a file gave no budget back");
        budget.release(cost);
        assert_consistent(&mut fs);
        // everything is there after a remount
        let mut fs = remount(fs);
        for f in [0usize, 2] {
            let c = read_all(&mut fs, files[f]);
            assert_eq!(c.len() as u64, next[f] * BS as u64);
            for (k, chunk) in c.chunks(BS).enumerate() {
                assert!(chunk.iter().all(|&b| b == (k % nblk) as u8 + 1), "file {f} block {k}");
            }
        }
    }
}

/// While a reservation is held, every space-consuming operation refuses to use it (here on an
/// almost empty filesystem: without the reservation each of them would succeed).
#[test]
fn reservation_blocks_other_operations() {
    let mut fs = fresh(32 * 1024, 64, 512);
    let budget = Budget::new();
    let a = fs.create(ROOT_INO, b"a", &reg(), ts(1)).unwrap();
    fs.write(a.ino, 0, &[7u8; 10_000], ts(1)).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(1)).unwrap();
    fs.sync().unwrap();
    budget.publish(fs.budget_avail());
    let all = budget.avail();
    assert!(all > 100_000);
    assert!(budget.try_reserve(all));
    fs.set_reserved(budget.reserved());
    let ns = Some(Error::NoSpace);
    assert_eq!(fs.create(ROOT_INO, b"n", &reg(), ts(2)).err(), ns, "create");
    assert_eq!(fs.mkdir(ROOT_INO, b"m", 0o755, 0, 0, ts(2)).err(), ns, "mkdir");
    assert_eq!(fs.symlink(ROOT_INO, b"s", b"target", 0, 0, ts(2)).err(), ns, "symlink");
    assert_eq!(fs.link(a.ino, ROOT_INO, b"h", ts(2)).err(), ns, "link");
    assert_eq!(fs.setxattr(a.ino, b"user.x", &[1u8; 100], 0, ts(2)).err(), ns, "setxattr");
    assert_eq!(fs.write(a.ino, 10_000, &[1u8; 100], ts(2)).err(), ns, "write");
    assert_eq!(fs.setattr(a.ino, &SetAttr { size: Some(1 << 20), ..Default::default() }, ts(2)).err(), ns, "setattr grow");
    // no space needed: chmod, shrinking, reads, deletions
    fs.setattr(a.ino, &SetAttr { mode: Some(0o600), ..Default::default() }, ts(3)).unwrap();
    fs.setattr(a.ino, &SetAttr { size: Some(5000), ..Default::default() }, ts(3)).unwrap();
    assert_eq!(read_all(&mut fs, a.ino), vec![7u8; 5000]);
    fs.rmdir(ROOT_INO, b"d", ts(3)).unwrap();
    fs.evict(d.ino).unwrap();
    // write_blocks within the held budget succeeds
    let cost = fs.budget_cost(2, 1);
    let b1 = block(9);
    fs.write_blocks(a.ino, 0, &[&b1, &b1[..100]], 4096 + 100, ts(4), ts(4)).unwrap();
    assert!(cost <= budget.reserved());
    // released: everything works again
    budget.release(all);
    fs.set_reserved(budget.reserved());
    fs.create(ROOT_INO, b"n", &reg(), ts(5)).unwrap();
    fs.setxattr(a.ino, b"user.x", &[1u8; 100], 0, ts(5)).unwrap();
    fs.link(a.ino, ROOT_INO, b"h", ts(5)).unwrap();
    fs.write(a.ino, 8192, &[1u8; 100], ts(5)).unwrap();
    assert_consistent(&mut fs);
}

/// Without a reservation covering it, write_blocks refuses (nothing written) when there is no
/// room; with one it never fails with NoSpace.
#[test]
fn write_blocks_without_budget_on_a_full_fs() {
    let mut fs = fresh(32 * 1024, 48, 512);
    let a = fs.create(ROOT_INO, b"a", &reg(), ts(1)).unwrap();
    let chunk = vec![3u8; 64 * 1024];
    let mut off = 0u64;
    loop {
        match fs.write(a.ino, off, &chunk, ts(1)) {
            Ok(n) if n > 0 => off += n as u64,
            _ => break,
        }
    }
    fs.sync().unwrap();
    let b = block(5);
    let seq = fs.log_seq();
    let blocks: Vec<&[u8]> = vec![&b; 8];
    assert_eq!(fs.write_blocks(a.ino, 1000, &blocks, 1008 * 4096, ts(2), ts(2)).err(), Some(Error::NoSpace));
    assert_eq!(fs.log_seq(), seq, "a refused write_blocks appended something");
    assert!(!fs.is_failed());
    assert_consistent(&mut fs);
}

#[test]
fn write_blocks_semantics() {
    let mut fs = fresh(64 * 1024, 64, 512);
    let budget = Budget::new();
    let f = fs.create(ROOT_INO, b"f", &reg(), ts(1)).unwrap().ino;
    let (a, b, c) = (block(0xA), block(0xB), vec![0xCu8; 100]);
    wb(&mut fs, &budget, f, 0, &[&a, &b, &c], 8192 + 100, 5).unwrap();
    let i = fs.getattr(f).unwrap();
    assert_eq!(i.size, 8292);
    assert_eq!(i.mtime, ts(5));
    assert_eq!(i.ctime, ts(5));
    let mut exp = [a.clone(), b.clone(), c.clone()].concat();
    assert_eq!(read_all(&mut fs, f), exp);
    // overwrite the middle block passing a smaller size: the size never shrinks
    let d = block(0xD);
    wb(&mut fs, &budget, f, 1, &[&d], 8192, 6).unwrap();
    exp[4096..8192].copy_from_slice(&d);
    assert_eq!(read_all(&mut fs, f), exp);
    assert_eq!(fs.getattr(f).unwrap().mtime, ts(6));
    // a run past EOF: the gap reads as zeros
    let e = block(0xE);
    wb(&mut fs, &budget, f, 5, &[&e], 6 * 4096, 7).unwrap();
    exp.resize(5 * 4096, 0);
    exp.extend_from_slice(&e);
    assert_eq!(read_all(&mut fs, f), exp);
    // one data record per block and ONE inode record per call (on an aligned volume the 8
    // blocks are one group: its table takes one more number, format.md 8.2)
    let table = u64::from(test_data_align(&RamFlash::new_nand(64 * 1024, 64, 512).geometry()).is_some());
    let (r0, s0) = (fs.inode_records(), fs.log_seq());
    let blocks: Vec<Vec<u8>> = (0..8).map(|k| block(k + 1)).collect();
    let refs: Vec<&[u8]> = blocks.iter().map(|v| v.as_slice()).collect();
    wb(&mut fs, &budget, f, 6, &refs, 14 * 4096, 8).unwrap();
    assert_eq!(fs.inode_records() - r0, 1);
    assert_eq!(fs.log_seq() - s0, 9 + table, "8 data records (+ a group table) + 1 inode record (no segment switch here)");
    for (k, v) in blocks.iter().enumerate() {
        exp.extend_from_slice(v);
        let _ = k;
    }
    assert_eq!(read_all(&mut fs, f), exp);
    // size below the end of the run: blocks past it stay invisible, and a later run past
    // EOF drops them (no stale data in the gap)
    let g = fs.create(ROOT_INO, b"g", &reg(), ts(1)).unwrap().ino;
    let (x, y) = (block(0x11), block(0x22));
    wb(&mut fs, &budget, g, 0, &[&x, &y, &y], 4096 + 10, 9).unwrap();
    assert_eq!(fs.getattr(g).unwrap().size, 4106);
    let z = block(0x33);
    wb(&mut fs, &budget, g, 4, &[&z], 5 * 4096, 10).unwrap();
    let mut ge = x.clone();
    ge.extend_from_slice(&y[..10]);
    ge.resize(4 * 4096, 0);
    ge.extend_from_slice(&z);
    assert_eq!(read_all(&mut fs, g), ge, "stale blocks past EOF showed through the gap");
    // errors, nothing written
    let dir = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(1)).unwrap().ino;
    let sl = fs.symlink(ROOT_INO, b"s", b"t", 0, 0, ts(1)).unwrap().ino;
    let seq = fs.log_seq();
    assert_eq!(fs.write_blocks(dir, 0, &[&a], 4096, ts(1), ts(1)).err(), Some(Error::IsDir));
    assert_eq!(fs.write_blocks(sl, 0, &[&a], 4096, ts(1), ts(1)).err(), Some(Error::Invalid));
    assert_eq!(fs.write_blocks(f, 0, &[], 0, ts(1), ts(1)).err(), Some(Error::Invalid));
    assert_eq!(fs.write_blocks(f, 0, &[&c, &a], 8192, ts(1), ts(1)).err(), Some(Error::Invalid), "short block in the middle");
    assert_eq!(fs.write_blocks(f, 0, &[&a, &[]], 4096, ts(1), ts(1)).err(), Some(Error::Invalid), "empty block");
    let big = vec![0u8; BS + 1];
    assert_eq!(fs.write_blocks(f, 0, &[&big], 4096, ts(1), ts(1)).err(), Some(Error::Invalid), "oversized block");
    assert_eq!(fs.write_blocks(f, 0, &[&a], 4097, ts(1), ts(1)).err(), Some(Error::Invalid), "size past the run");
    assert_eq!(fs.write_blocks(f, u64::MAX / 4096, &[&a], 0, ts(1), ts(1)).err(), Some(Error::FileTooBig));
    assert_eq!(fs.write_blocks(999_999, 0, &[&a], 4096, ts(1), ts(1)).err(), Some(Error::NotFound));
    assert_eq!(fs.log_seq(), seq);
    assert!(!fs.is_failed());
    // persistence: after fsync and a crash, and after a clean remount
    fs.fsync(f).unwrap();
    let mut fs = crash_remount(fs);
    assert_eq!(read_all(&mut fs, f), exp);
    assert_eq!(read_all(&mut fs, g), ge);
    let mut fs = remount(fs);
    assert_eq!(read_all(&mut fs, f), exp);
    assert_eq!(fs.getattr(f).unwrap().mtime, ts(8));
    assert_consistent(&mut fs);
}

/// A batch much larger than a segment: GC and checkpoints run inside it (same bounds as
/// write()), on a filesystem that is already dirty.
#[test]
fn long_batches_keep_gc_and_checkpoint_bounds() {
    let f = RamFlash::new_nand(32 * 1024, 64, 512);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions { cache_nodes: 24, checkpoint_log_bytes: 256 * 1024, ..Default::default() }).map_err(|e| e.0).unwrap();
    let budget = Budget::new();
    let ino = fs.create(ROOT_INO, b"big", &reg(), ts(1)).unwrap().ino;
    let mut rng = Rng::new(7);
    let mut model = vec![0u8; 0];
    let blocks_total = 200u64; // about 800 KiB of a 2.5 MiB device
    let cps = fs.stats().checkpoints;
    for round in 0..12u64 {
        let first = if round < 4 { round * 50 } else { rng.below(blocks_total - 64) };
        let n = if round < 4 { 50 } else { 1 + rng.below(64) as usize };
        let data: Vec<Vec<u8>> = (0..n).map(|_| block(rng.below(250) as u8 + 1)).collect();
        let refs: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
        let end = (first + n as u64) * BS as u64;
        wb(&mut fs, &budget, ino, first, &refs, end, round as i64).unwrap();
        if model.len() < end as usize {
            model.resize(end as usize, 0);
        }
        for (k, d) in data.iter().enumerate() {
            let o = (first as usize + k) * BS;
            model[o..o + BS].copy_from_slice(d);
        }
        assert!(fs.stats().free_segments >= 2, "the reserve was eaten");
    }
    assert!(fs.stats().checkpoints > cps + 2, "no checkpoint inside long batches");
    assert!(fs.stats().gc_records > 0, "no GC ran");
    assert_eq!(read_all(&mut fs, ino), model);
    assert_consistent(&mut fs);
    let mut fs = crash_remount(fs);
    // un-fsynced: whatever reached the medium is a valid state; sync'd data is intact
    fs.sync().unwrap();
    assert_consistent(&mut fs);
}

#[test]
fn getxattr_len_probe() {
    let mut fs = fresh(32 * 1024, 64, 512);
    let a = fs.create(ROOT_INO, b"a", &reg(), ts(1)).unwrap().ino;
    assert_eq!(fs.getxattr_len(a, b"user.x"), Err(Error::NoData));
    fs.setxattr(a, b"user.x", &[5u8; 1234], 0, ts(1)).unwrap();
    fs.setxattr(a, b"user.empty", &[], 0, ts(1)).unwrap();
    assert_eq!(fs.getxattr_len(a, b"user.x"), Ok(1234));
    assert_eq!(fs.getxattr_len(a, b"user.empty"), Ok(0));
    assert_eq!(fs.getxattr_len(a, b""), Err(Error::Range));
    assert_eq!(fs.getxattr_len(999, b"user.x"), Err(Error::NotFound));
}

#[test]
fn inode_cache_hits_and_stays_right() {
    let mut fs = fresh(32 * 1024, 48, 512);
    let mut inos = Vec::new();
    // more files than cache slots, so slots are shared and replaced
    for i in 0..80 {
        inos.push(fs.create(ROOT_INO, format!("f{i}").as_bytes(), &reg(), ts(1)).unwrap().ino);
    }
    let (h0, m0) = fs.icache_stats();
    let x = fs.getattr(inos[79]).unwrap();
    let y = fs.getattr(inos[79]).unwrap();
    assert_eq!(x, y);
    let (h1, m1) = fs.icache_stats();
    assert_eq!((h1 - h0, m1 - m0), (2, 0), "a just-written inode is served from the cache");
    // every change shows through the cache; GC moves and slot conflicts never serve stale data
    let mut rng = Rng::new(3);
    let mut mode = vec![0o644u32; inos.len()];
    let mut size = vec![0u64; inos.len()];
    for step in 0..3000 {
        let k = rng.below(inos.len() as u64) as usize;
        match rng.below(4) {
            0 => {
                mode[k] = 0o600 | rng.below(0o100) as u32;
                fs.setattr(inos[k], &SetAttr { mode: Some(mode[k]), ..Default::default() }, ts(step)).unwrap();
            }
            1 => {
                let n = fs.write(inos[k], size[k], &[1u8; 3000], ts(step)).unwrap();
                size[k] += n as u64;
            }
            2 => {
                let blk = rng.below(4);
                let b = block(2);
                let end = (blk + 1) * 4096;
                fs.write_blocks(inos[k], blk, &[&b], end, ts(step), ts(step)).unwrap();
                size[k] = size[k].max(end);
            }
            _ => {
                let i = fs.getattr(inos[k]).unwrap();
                assert_eq!((i.mode & 0o7777, i.size), (mode[k], size[k]), "step {step} inode {}", inos[k]);
            }
        }
        if size[k] > 8_000 {
            fs.setattr(inos[k], &SetAttr { size: Some(0), ..Default::default() }, ts(step)).unwrap();
            size[k] = 0;
        }
    }
    assert!(fs.stats().gc_records > 0, "the GC never moved records");
    let (h, m) = fs.icache_stats();
    assert!(h > m, "the cache hardly hits: {h} hits, {m} misses ({} GC records moved, {} checkpoints)", fs.stats().gc_records, fs.stats().checkpoints);
    // evict: the cached inode is gone
    fs.unlink(ROOT_INO, b"f0", ts(9000)).unwrap();
    fs.evict(inos[0]).unwrap();
    assert_eq!(fs.getattr(inos[0]).err(), Some(Error::NotFound));
    let mut fs = remount(fs);
    for (k, &ino) in inos.iter().enumerate().skip(1) {
        let i = fs.getattr(ino).unwrap();
        assert_eq!((i.mode & 0o7777, i.size), (mode[k], size[k]));
    }
    assert_consistent(&mut fs);
}

// ---------------------------------------------------------------------- crash enumeration

#[derive(Clone, Debug)]
enum WOp {
    /// Write back blocks `first..first+n` of file `f` with content byte `b` (the last block
    /// `last` bytes long when it becomes the EOF block).
    Wb { f: usize, first: u64, n: usize, b: u8, last: usize },
    Fsync(usize),
    Sync,
}

const FILES: usize = 2;

fn wworkload(w: u64) -> Vec<WOp> {
    let mut rng = Rng::new(0xB10C ^ w.wrapping_mul(0x9E37_79B9));
    let n = 6 + rng.below(6) as usize;
    let mut ops = Vec::new();
    let mut sizes = [0u64; FILES];
    while ops.len() < n {
        let r = rng.below(100);
        if r < 70 {
            let f = rng.below(FILES as u64) as usize;
            let first = rng.below(12);
            let big = rng.below(5) == 0;
            let nb = if big { 8 + rng.below(9) as usize } else { 1 + rng.below(4) as usize };
            let end_full = (first + nb as u64) * BS as u64;
            // a short last block only where it becomes the EOF block
            let last = if end_full >= sizes[f] && rng.below(2) == 0 { 1 + rng.below(BS as u64 - 1) as usize } else { BS };
            let end = end_full - (BS - last) as u64;
            sizes[f] = sizes[f].max(end);
            ops.push(WOp::Wb { f, first, n: nb, b: rng.below(250) as u8 + 1, last });
        } else if r < 88 {
            ops.push(WOp::Fsync(rng.below(FILES as u64) as usize));
        } else {
            ops.push(WOp::Sync);
        }
    }
    ops
}

/// Per file: the content (by block) and size after each operation.
#[derive(Clone, Debug, Default)]
struct FileModel {
    blocks: Vec<Vec<u8>>,
    size: u64,
}

fn apply_model(m: &mut [FileModel; FILES], op: &WOp) {
    if let WOp::Wb { f, first, n, b, last } = op {
        let fm = &mut m[*f];
        for k in 0..*n {
            let blk = *first as usize + k;
            if fm.blocks.len() <= blk {
                fm.blocks.resize(blk + 1, Vec::new());
            }
            let len = if k + 1 == *n { *last } else { BS };
            fm.blocks[blk] = vec![*b; len];
        }
        let end = (*first + *n as u64 - 1) * BS as u64 + *last as u64;
        fm.size = fm.size.max(end);
    }
}

/// A small index cache and a checkpoint every 20 KiB of log: batches of up to 16 blocks span
/// segments and take checkpoints in the middle.
fn wopts() -> MountOptions {
    MountOptions { cache_nodes: 24, checkpoint_log_bytes: 20 * 1024, ..Default::default() }
}

/// `data_align`: 0, DATA records; else aligned data payloads (format.md section 8). `block`: a
/// block device of 64 KiB segments and 4 KiB blocks, else NAND of 16 KiB segments and 512-byte
/// write units.
fn wtemplate(data_align: u32, block: bool) -> (RamFlash, [u64; FILES]) {
    let f = if block { RamFlash::with_kind(FlashKind::Block, 64 * 1024, 64, 4096) } else { RamFlash::new_nand(16 * 1024, 64, 512) };
    let f = mkfs(f, &ferrofs_engine::FormatOptions { data_align, ..Default::default() }, ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, wopts()).map_err(|e| e.0).unwrap();
    let mut inos = [0u64; FILES];
    for (i, ino) in inos.iter_mut().enumerate() {
        *ino = fs.create(ROOT_INO, format!("w{i}").as_bytes(), &reg(), ts(1)).unwrap().ino;
    }
    (fs.unmount().map_err(|e| e.0).unwrap(), inos)
}

fn run_wop(fs: &mut Fs, budget: &Budget, inos: &[u64; FILES], op: &WOp, t: i64) -> Result<(), Error> {
    match op {
        WOp::Wb { f, first, n, b, last } => {
            let full = vec![*b; BS];
            let mut refs: Vec<&[u8]> = vec![&full; *n];
            refs[*n - 1] = &full[..*last];
            let end = (*first + *n as u64 - 1) * BS as u64 + *last as u64;
            let cost = fs.budget_cost(*n as u64, 1);
            budget.publish(fs.budget_avail());
            assert!(budget.try_reserve(cost));
            fs.set_reserved(budget.reserved());
            let r = fs.write_blocks(inos[*f], *first, &refs, end, ts(t), ts(t));
            budget.release(cost);
            fs.set_reserved(budget.reserved());
            r
        }
        WOp::Fsync(f) => fs.fsync(inos[*f]),
        WOp::Sync => fs.sync(),
    }
}

/// The model's content of file `f` in state `m`.
fn model_content(m: &[FileModel; FILES], f: usize) -> Vec<u8> {
    let fm = &m[f];
    let mut v = vec![0u8; fm.size as usize];
    for (blk, b) in fm.blocks.iter().enumerate() {
        let at = blk * BS;
        let n = b.len().min(v.len().saturating_sub(at));
        v[at..at + n].copy_from_slice(&b[..n]);
    }
    v
}

/// The states of an uninterrupted run (snapshots, checked against the model) and the shape of
/// each write-back.
fn woracle(tpl: &RamFlash, inos: &[u64; FILES], ops: &[WOp]) -> Oracle {
    let mut fs = Fs::mount(tpl.clone(), wopts()).map_err(|e| e.0).unwrap();
    let budget = Budget::new();
    let mut m: [FileModel; FILES] = Default::default();
    let mut o = Oracle { states: vec![snapshot(&mut fs).unwrap()], ..Default::default() };
    for (i, op) in ops.iter().enumerate() {
        o.partial.push(match op {
            WOp::Wb { f, first, n, last, .. } => {
                Some(WriteShape { ino: inos[*f], off: *first * BS as u64, end: (*first + *n as u64 - 1) * BS as u64 + *last as u64, intermediate: false })
            }
            _ => None,
        });
        o.persists.push(!matches!(op, WOp::Wb { .. }));
        run_wop(&mut fs, &budget, inos, op, 10 + i as i64).unwrap();
        apply_model(&mut m, op);
        for f in 0..FILES {
            assert!(read_all(&mut fs, inos[f]) == model_content(&m, f), "op {i} {op:?}: file {f} differs from the model\n{ops:?}");
        }
        o.states.push(snapshot(&mut fs).unwrap());
    }
    o
}

/// Run `ops` with a cut after `cut` device operations (`loss`: the block device's write cache,
/// lost at the cut as it says); the medium and the operations done, or None when the run ended
/// before the cut.
fn wrun_cut(tpl: &RamFlash, inos: &[u64; FILES], ops: &[WOp], cut: u64, tear: bool, loss: Option<CacheLoss>) -> Option<(RamFlash, usize)> {
    let mut fs = Fs::mount(tpl.clone(), wopts()).map_err(|e| e.0).unwrap();
    fs.flash().cut_in = Some(cut);
    fs.flash().tear = tear;
    if let Some(l) = loss {
        fs.flash().set_write_cache(l);
    }
    let budget = Budget::new();
    let mut done = 0;
    for (i, op) in ops.iter().enumerate() {
        match run_wop(&mut fs, &budget, inos, op, 10 + i as i64) {
            Ok(()) => done += 1,
            Err(e) => {
                assert!(fs.flash().dead, "op {i} {op:?} failed without a power cut: {e:?}");
                break;
            }
        }
    }
    let f = fs.into_flash();
    f.dead.then_some((f, done))
}

/// Every cut point of 24 write-back workloads (batches of up to 16 blocks, checkpoints and
/// segment switches inside them), checked with the shared oracle: each block old or new, the
/// new ones a prefix of the batch, the size old or the batch's (never over unwritten blocks),
/// everything before the last fsync/sync intact, every attribute compared; then the recovered
/// filesystem keeps writing, and every 8th cut also cuts its recovery.
#[test]
fn crash_enumeration_write_blocks() {
    crash_enumeration_wb(0, false);
}

/// The same with aligned data payloads (format.md section 8: data groups, 2 KiB alignment on
/// 512-byte write units): a cut in a group's table or payload applies a prefix of its blocks.
#[test]
fn crash_enumeration_write_blocks_aligned() {
    crash_enumeration_wb(2048, false);
}

/// Aligned data on a block device (4 KiB alignment) with a volatile write cache: at each cut
/// all, none or a random subset of the writes since the last flush reach the medium, torn at
/// 512-byte sectors, so a group's table, any of its blocks or the records after it can be
/// missing while later ones are there.
#[test]
fn crash_enumeration_write_blocks_aligned_block_cache() {
    crash_enumeration_wb(4096, true);
}

fn crash_enumeration_wb(data_align: u32, block: bool) {
    let full = std::env::var_os("FERROFS_CRASH_FULL").is_some();
    let stride: u64 = std::env::var("FERROFS_CRASH_STRIDE").ok().and_then(|v| v.parse().ok()).unwrap_or(2).max(1);
    let (tpl, inos) = wtemplate(data_align, block);
    let workloads = 24u64;
    let mut checked = 0u64;
    let mut recovery = 0u64;
    let mut failures = Vec::new();
    for w in 0..workloads {
        let ops = wworkload(w);
        let o = woracle(&tpl, &inos, &ops);
        let cc = CutCheck { opts: wopts(), oracle: &o, recovery_cuts: false };
        // uninterrupted, then a crash after a final sync: everything is there
        {
            let mut fs = Fs::mount(tpl.clone(), wopts()).map_err(|e| e.0).unwrap();
            let budget = Budget::new();
            for (i, op) in ops.iter().enumerate() {
                run_wop(&mut fs, &budget, &inos, op, 10 + i as i64).unwrap();
            }
            fs.sync().unwrap();
            let mut fs = crash_remount_with(fs);
            let got = snapshot(&mut fs).unwrap();
            assert!(got == *o.states.last().unwrap(), "workload {w}: after sync+crash: {:?}", diff(o.states.last().unwrap(), &got));
        }
        for tear in [false, true] {
            let mut cut = if full { 0 } else { (w + u64::from(tear)) % stride };
            let mut i = 0u64;
            let loss = |i: u64| match (block, i % 3) {
                (false, _) => None,
                (true, 0) => Some(CacheLoss::Subset(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ w)),
                (true, 1) => Some(CacheLoss::LoseAll),
                (true, _) => Some(CacheLoss::KeepAll),
            };
            while let Some((f, done)) = wrun_cut(&tpl, &inos, &ops, cut, tear, loss(i + w)) {
                let cc = CutCheck { recovery_cuts: full || (i + w) % 8 == 0, ..cc.clone() };
                checked += 1;
                match check_after_cut(&cc, f, done) {
                    Ok(n) => recovery += n - 1,
                    Err(e) => failures.push(format!("workload {w} cut {cut} tear {tear}: {e}\n  ops: {ops:?}")),
                }
                cut += if full { 1 } else { stride };
                i += 1;
                assert!(cut < 100_000, "workload {w}: the cut never happened");
            }
        }
    }
    let all = checked + recovery;
    let what = match (data_align, block) {
        (0, _) => "write-back batches",
        (_, false) => "write-back batches, aligned data",
        (_, true) => "write-back batches, aligned data, block device with a write cache",
    };
    println!("crash enumeration ({what}): {workloads} workloads, {all} cut points checked ({recovery} in recoveries), {} failures", failures.len());
    eprintln!("crash enumeration ({what}): {workloads} workloads, {all} cut points checked ({recovery} in recoveries), {} failures", failures.len());
    for f in failures.iter().take(8) {
        eprintln!("{f}");
    }
    assert!(checked > 500, "only {checked} cut points");
    assert!(failures.is_empty(), "{} failures", failures.len());
}

fn crash_remount_with(fs: Fs) -> Fs {
    Fs::mount(fs.into_flash(), wopts()).map_err(|e| e.0).unwrap()
}

// ---------------------------------------------------------------------- measurement

/// write_blocks batches of 16 blocks vs write() per 4 KiB, sequential and random overwrite, on
/// a 64 MiB simulated NAND (2 KiB pages, 128 KiB blocks): bytes programmed per user byte and
/// inode records per MiB. `cargo test --release --test write_blocks -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_write_blocks_vs_write() {
    let mib = 24u64;
    for mode in ["write() 4 KiB", "write_blocks x16"] {
        for pattern in ["sequential", "random overwrite"] {
            let f = RamFlash::new_nand(128 * 1024, 512, 2048);
            let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
            let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
            let ino = fs.create(ROOT_INO, b"m", &reg(), ts(1)).unwrap().ino;
            let blocks = mib * 256;
            if pattern == "random overwrite" {
                // lay the file down first (not measured)
                let chunk = vec![1u8; 1 << 20];
                for i in 0..mib {
                    fs.write(ino, i << 20, &chunk, ts(1)).unwrap();
                }
                fs.sync().unwrap();
            }
            let p0 = fs.flash().programmed;
            let r0 = fs.inode_records();
            let u0 = fs.stats().user_bytes;
            let mut rng = Rng::new(5);
            let t = std::time::Instant::now();
            let b = block(7);
            let refs: Vec<&[u8]> = vec![&b; 16];
            let mut k = 0u64;
            while k < blocks {
                let first = if pattern == "sequential" { k } else { rng.below(blocks / 16) * 16 };
                if mode.starts_with("write()") {
                    for j in 0..16 {
                        fs.write(ino, (first + j) * 4096, &b, ts(2)).unwrap();
                    }
                } else {
                    let end = (first + 16) * 4096;
                    let cur = fs.getattr(ino).unwrap().size;
                    fs.write_blocks(ino, first, &refs, end.max(cur).min(end), ts(2), ts(2)).unwrap();
                }
                k += 16;
            }
            fs.sync().unwrap();
            let dt = t.elapsed().as_secs_f64();
            let user = fs.stats().user_bytes - u0;
            let prog = fs.flash().programmed - p0;
            let inodes = fs.inode_records() - r0;
            eprintln!(
                "{mode:18} {pattern:17}: {:.3} bytes programmed per user byte, {:.1} inode records per MiB, {:.0} MiB/s engine CPU",
                prog as f64 / user as f64,
                inodes as f64 / (user as f64 / (1 << 20) as f64),
                user as f64 / (1 << 20) as f64 / dt
            );
        }
    }
}

#[allow(dead_code)]
fn _t(_: Timespec) {}
