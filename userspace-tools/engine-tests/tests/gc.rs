//! Garbage collection under pressure, ENOSPC and recovery from it, wear levelling, bad blocks.

use ferrofs_engine::{Error, MountOptions, ROOT_INO};
use ferrofs_engine_tests::*;

fn small_fs(segs: u32) -> Fs {
    let f = RamFlash::new_nand(32 * 1024, segs, 512);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    Fs::mount(f, MountOptions { cache_nodes: 32, ..Default::default() }).map_err(|e| e.0).unwrap()
}

fn remount_small(fs: Fs) -> Fs {
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    Fs::mount(f, MountOptions { cache_nodes: 32, ..Default::default() }).map_err(|e| e.0).unwrap()
}

#[test]
fn overwrite_churn_forces_gc() {
    let mut fs = small_fs(64);
    let mut rng = Rng::new(7);
    let nfiles = 10;
    let fsize = 60 * 1024usize;
    let mut model = vec![vec![0u8; fsize]; nfiles];
    let mut inos = Vec::new();
    for (i, m) in model.iter_mut().enumerate() {
        let f = fs.create(ROOT_INO, format!("f{i}").as_bytes(), &reg(), ts(1)).unwrap();
        rng.fill(m);
        fs.write(f.ino, 0, m, ts(2)).unwrap();
        inos.push(f.ino);
    }
    for step in 0..3000 {
        let i = rng.below(nfiles as u64) as usize;
        let off = rng.below((fsize - 4096) as u64) as usize;
        let mut d = [0u8; 4096];
        rng.fill(&mut d);
        fs.write(inos[i], off as u64, &d, ts(3)).unwrap();
        model[i][off..off + 4096].copy_from_slice(&d);
        if step % 200 == 0 {
            fs.gc_step(true).unwrap();
        }
        if step % 1000 == 999 {
            fs = remount_small(fs);
            assert_consistent(&mut fs);
        }
    }
    let st = fs.stats();
    eprintln!("{st:?}");
    assert!(st.gc_records > 100, "GC moved records: {st:?}");
    assert!(st.user_bytes >= 3000 * 4096);
    let mut fs = remount_small(fs);
    assert_consistent(&mut fs);
    for (i, m) in model.iter().enumerate() {
        let mut b = vec![0u8; fsize];
        fs.read(inos[i], 0, &mut b).unwrap();
        assert!(b == *m, "file {i}");
    }
}

#[test]
fn fill_to_enospc_then_delete_and_keep_writing() {
    let mut fs = small_fs(64);
    let mut rng = Rng::new(9);
    for round in 0..4 {
        // fill with files until NoSpace
        let mut n = 0;
        let mut written = Vec::new();
        'fill: loop {
            let name = format!("r{round}_{n}");
            let f = match fs.create(ROOT_INO, name.as_bytes(), &reg(), ts(1)) {
                Ok(f) => f,
                Err(Error::NoSpace) => break 'fill,
                Err(e) => panic!("{e:?}"),
            };
            let mut data = vec![0u8; 50_000];
            rng.fill(&mut data);
            let mut off = 0;
            while off < data.len() {
                match fs.write(f.ino, off as u64, &data[off..(off + 10_000).min(data.len())], ts(2)) {
                    Ok(k) => off += k,
                    Err(Error::NoSpace) => {
                        data.truncate(off);
                        written.push((name, f.ino, data));
                        break 'fill;
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
            written.push((name, f.ino, data));
            n += 1;
        }
        assert!(written.len() > 5, "round {round}: wrote {} files", written.len());
        let sf = fs.statfs();
        eprintln!("round {round}: {} files, statfs {sf:?}, {:?}", written.len(), fs.stats());
        // the full filesystem stays mountable and consistent
        fs = remount_small(fs);
        assert_consistent(&mut fs);
        for (_, ino, data) in &written {
            let mut b = vec![0u8; data.len()];
            fs.read(*ino, 0, &mut b).unwrap();
            assert!(b == *data);
        }
        // delete everything and keep going
        for (name, ino, _) in &written {
            fs.unlink(ROOT_INO, name.as_bytes(), ts(3)).unwrap();
            fs.evict(*ino).unwrap();
        }
        assert_consistent(&mut fs);
    }
    let st = fs.stats();
    eprintln!("{st:?}");
}

#[test]
fn wear_levelling_spreads_erases() {
    let f = RamFlash::new_nand(32 * 1024, 64, 512);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions { cache_nodes: 32, wear_threshold: 8, ..Default::default() }).map_err(|e| e.0).unwrap();
    // static data occupying part of the device
    let cold = fs.create(ROOT_INO, b"cold", &reg(), ts(1)).unwrap();
    fs.write(cold.ino, 0, &vec![5u8; 400_000], ts(1)).unwrap();
    let hot = fs.create(ROOT_INO, b"hot", &reg(), ts(1)).unwrap();
    let mut rng = Rng::new(3);
    for i in 0..6000 {
        let mut d = [0u8; 4096];
        rng.fill(&mut d);
        fs.write(hot.ino, rng.below(16) * 4096, &d, ts(2)).unwrap();
        if i % 20 == 0 {
            fs.gc_step(true).unwrap();
        }
    }
    let flash = fs.unmount().map_err(|e| e.0).unwrap();
    let used: Vec<u32> = flash.erases.iter().copied().filter(|&e| e > 0).collect();
    let max = *used.iter().max().unwrap();
    let min_all = *flash.erases[8..].iter().min().unwrap();
    eprintln!("erases: {:?}", flash.erases);
    assert!(max - min_all <= 40, "erase spread too wide: max {max} min {min_all}");
    let mut fs = Fs::mount(flash, MountOptions::default()).map_err(|e| e.0).unwrap();
    let mut b = vec![0u8; 400_000];
    fs.read(cold.ino, 0, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 5));
    assert_consistent(&mut fs);
}

#[test]
fn factory_bad_blocks_and_failed_erase() {
    let mut f = RamFlash::new_nand(32 * 1024, 64, 512);
    f.set_bad(0);
    f.set_bad(3);
    f.set_bad(20);
    f.set_bad(21);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    // make some erases fail
    for s in [30, 31, 40] {
        fs.flash().fail_erase.push(s);
    }
    let a = fs.create(ROOT_INO, b"a", &reg(), ts(1)).unwrap();
    let mut rng = Rng::new(5);
    let mut model = vec![0u8; 200_000];
    rng.fill(&mut model);
    for _ in 0..10 {
        fs.write(a.ino, 0, &model, ts(2)).unwrap();
    }
    assert!(fs.stats().retired >= 1, "{:?}", fs.stats());
    let mut fs = remount(fs);
    let mut b = vec![0u8; 200_000];
    fs.read(a.ino, 0, &mut b).unwrap();
    assert!(b == model);
    assert_consistent(&mut fs);
}

#[test]
fn corrected_reads_schedule_scrub() {
    let mut fs = small_fs(64);
    let a = fs.create(ROOT_INO, b"a", &reg(), ts(1)).unwrap();
    fs.write(a.ino, 0, &vec![9u8; 100_000], ts(2)).unwrap();
    fs.sync().unwrap();
    // every segment now reports corrected reads
    let segs: Vec<u32> = (0..64).collect();
    fs.flash().corrected = segs;
    let mut b = vec![0u8; 100_000];
    fs.read(a.ino, 0, &mut b).unwrap();
    fs.flash().corrected.clear();
    let before = fs.stats().gc_records;
    for _ in 0..10 {
        fs.gc_step(true).unwrap();
    }
    assert!(fs.stats().gc_records > before, "scrub moved records");
    fs.read(a.ino, 0, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 9));
    assert_consistent(&mut fs);
}

#[test]
fn gc_of_large_segments_with_small_cache() {
    // 1 MiB segments (a block device's allocation units), 256 records per segment, 16-node cache
    let f = RamFlash::with_kind(ferrofs_engine::FlashKind::Block, 1 << 20, 24, 4096);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let opts = MountOptions { cache_nodes: 16, ..Default::default() };
    let mut fs = Fs::mount(f, opts).map_err(|e| e.0).unwrap();
    let mut rng = Rng::new(21);
    let n = 40;
    let mut inos = Vec::new();
    let mut model = Vec::new();
    for i in 0..n {
        let f = fs.create(ROOT_INO, format!("f{i}").as_bytes(), &reg(), ts(1)).unwrap();
        let mut d = vec![0u8; 64 * 1024];
        rng.fill(&mut d);
        fs.write(f.ino, 0, &d, ts(1)).unwrap();
        inos.push(f.ino);
        model.push(d);
    }
    // scattered overwrites so that every segment holds blocks of many files
    for _ in 0..4000 {
        let k = rng.below(n) as usize;
        let off = rng.below(16) as usize * 4096;
        let mut d = [0u8; 4096];
        rng.fill(&mut d);
        fs.write(inos[k], off as u64, &d, ts(2)).unwrap();
        model[k][off..off + 4096].copy_from_slice(&d);
    }
    for _ in 0..10 {
        fs.gc_step(true).unwrap();
    }
    assert!(fs.stats().gc_records > 200, "{:?}", fs.stats());
    assert!(fs.cached_nodes() <= 32);
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts).map_err(|e| e.0).unwrap();
    assert_consistent(&mut fs);
    for (k, d) in model.iter().enumerate() {
        let mut b = vec![0u8; d.len()];
        fs.read(inos[k], 0, &mut b).unwrap();
        assert!(b == *d, "file {k}");
    }
}

#[test]
fn enospc_with_a_segment_table_spanning_segments() {
    // 2048 segments of 16 KiB: the segment table (36 KiB) spans three segments. With a 3 MiB
    // replay window an `evict` got `NoSpace` (before the capacity counted segments by what
    // DATA records fill of them: the fill ended when the GC gave up, with no dead space left);
    // every window from 1 to 4 MiB must pass.
    for window in 1..=4u64 {
        enospc_with_a_segment_table_spanning_segments_window(window << 20);
    }
}

fn enospc_with_a_segment_table_spanning_segments_window(checkpoint_log_bytes: u64) {
    let f = RamFlash::new_nand(16 * 1024, 2048, 512);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let opts = MountOptions { cache_nodes: 64, checkpoint_log_bytes, ..Default::default() };
    let mut fs = Fs::mount(f, opts).map_err(|e| e.0).unwrap();
    let chunk = vec![0xA5u8; 256 * 1024];
    let mut files = Vec::new();
    'fill: for i in 0.. {
        let f = match fs.create(ROOT_INO, format!("big{i}").as_bytes(), &reg(), ts(1)) {
            Ok(f) => f,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("{e:?}"),
        };
        files.push(f.ino);
        let mut off = 0u64;
        while off < 1 << 20 {
            match fs.write(f.ino, off, &chunk, ts(1)) {
                Ok(n) => off += n as u64,
                Err(Error::NoSpace) => break 'fill,
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    assert!(files.len() > 15, "{} files", files.len());
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts).map_err(|e| e.0).unwrap();
    for (i, ino) in files.iter().enumerate().step_by(2) {
        fs.unlink(ROOT_INO, format!("big{i}").as_bytes(), ts(2)).unwrap_or_else(|e| panic!("window {checkpoint_log_bytes}: unlink {i}: {e:?}"));
        fs.evict(*ino).unwrap_or_else(|e| panic!("window {checkpoint_log_bytes}: evict {i}: {e:?}"));
    }
    let g = fs.create(ROOT_INO, b"again", &reg(), ts(3)).unwrap();
    for k in 0..8u64 {
        assert_eq!(fs.write(g.ino, k * chunk.len() as u64, &chunk, ts(3)).unwrap(), chunk.len());
    }
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts).map_err(|e| e.0).unwrap();
    assert_eq!(fs.lookup(ROOT_INO, b"again").unwrap().size, 8 * chunk.len() as u64);
    assert_consistent(&mut fs);
}

/// Random 4 KiB overwrites of a 64 MiB NAND (2 KiB pages, 128 KiB blocks) filled with 1 MiB
/// files to 95 % of the capacity statfs offers: the write amplification (bytes programmed over
/// user bytes, after a warm-up of twice the device) stays at most 4.8. This workload measured
/// 6.24 while a checkpoint the GC took freed only the victims of the interval before it and
/// cleaning ahead of need took no victim above 75 % live (at this fill none is), so that the GC
/// checkpointed every few victims; 5.03 after that (bound 5.4, issue 12 asks for 6 in
/// simbench). Since the capacity counts segments by the block records they hold (30 of 128
/// KiB, 94.8 %), 95 % of it is 48 MiB of data instead of about 51: 3.61. Since that count
/// follows the log's own layout rule (31 records, 98.0 %: `Log::block_record_fill`), 95 % is
/// 50 MiB: 4.43.
#[test]
fn write_amplification_at_95_percent_fill() {
    let f = RamFlash::new_nand(128 * 1024, 512, 2048);
    let f = Fs::format(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let st = fs.statfs();
    let target = st.blocks * u64::from(st.block_size) * 95 / 100;
    let file = vec![1u8; 1 << 20];
    let mut inos = Vec::new();
    for i in 0..target >> 20 {
        let f = fs.create(ROOT_INO, format!("f{i}").as_bytes(), &reg(), ts(1)).unwrap();
        assert_eq!(fs.write(f.ino, 0, &file, ts(1)).unwrap(), 1 << 20);
        inos.push(f.ino);
    }
    let data = (inos.len() as u64) << 20;
    let blocks = data / 4096;
    let mut rng = Rng::new(95);
    let mut d = [0u8; 4096];
    let device_blocks = 64 * 256;
    let mut overwrite = |fs: &mut Fs| {
        let b = rng.below(blocks);
        rng.fill(&mut d[..16]);
        assert_eq!(fs.write(inos[(b / 256) as usize], b % 256 * 4096, &d, ts(2)).unwrap(), 4096);
    };
    for _ in 0..2 * device_blocks {
        overwrite(&mut fs);
    }
    let s0 = fs.stats();
    for _ in 0..device_blocks {
        overwrite(&mut fs);
    }
    let s1 = fs.stats();
    let wa = (s1.programmed_bytes - s0.programmed_bytes) as f64 / (s1.user_bytes - s0.user_bytes) as f64;
    eprintln!("{} MiB of data, WA {wa:.2}, {} checkpoints", data >> 20, s1.checkpoints - s0.checkpoints);
    assert!(wa <= 4.8, "write amplification {wa:.2} at 95 % fill");
    assert_consistent(&mut fs);
}
