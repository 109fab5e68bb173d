//! Rough throughput figures on a 256 MiB simulated NAND (run with --release --ignored).

use std::time::Instant;

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, MountOptions, ROOT_INO};
use ferrofs_engine_tests::*;

#[test]
#[ignore]
fn perf_figures() {
    let f = RamFlash::new_nand(128 * 1024, 2048, 2048);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let t = Instant::now();
    let a = fs.create(ROOT_INO, b"seq", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
    let chunk = vec![7u8; 1 << 20];
    for i in 0..100u64 {
        fs.write(a.ino, i << 20, &chunk, ts(1)).unwrap();
    }
    fs.sync().unwrap();
    let dt = t.elapsed().as_secs_f64();
    eprintln!("sequential write 100 MiB: {:.0} MiB/s (engine CPU)", 100.0 / dt);
    let t = Instant::now();
    let mut b = vec![0u8; 1 << 20];
    for i in 0..100u64 {
        fs.read(a.ino, i << 20, &mut b).unwrap();
    }
    eprintln!("sequential read 100 MiB: {:.0} MiB/s", 100.0 / t.elapsed().as_secs_f64());
    let t = Instant::now();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(1)).unwrap();
    for i in 0..20_000 {
        fs.create(d.ino, format!("f{i}").as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
    }
    eprintln!("create: {:.0} files/s", 20_000.0 / t.elapsed().as_secs_f64());
    let mut rng = Rng::new(1);
    let t = Instant::now();
    let d4 = [1u8; 4096];
    for _ in 0..20_000 {
        fs.write(a.ino, rng.below(25_600) * 4096, &d4, ts(1)).unwrap();
    }
    eprintln!("random 4 KiB overwrite: {:.0} IOPS", 20_000.0 / t.elapsed().as_secs_f64());
    let st = fs.stats();
    eprintln!("{st:?}");
    let t = Instant::now();
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let _fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    eprintln!("unmount+mount: {:?}", t.elapsed());
}

#[test]
#[ignore]
fn perf_write_amplification_when_full() {
    let f = RamFlash::new_nand(128 * 1024, 512, 2048); // 64 MiB
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let cap = fs.statfs().blocks * 4096;
    for (pct, label) in [(50u64, "50%"), (75, "75%")] {
        let target = cap * pct / 100;
        let files = (target / (1 << 20)) as usize;
        let mut inos = Vec::new();
        for i in 0..files {
            let f = fs.create(ROOT_INO, format!("{label}-{i}").as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
            fs.write(f.ino, 0, &vec![1u8; 1 << 20], ts(1)).unwrap();
            inos.push(f.ino);
        }
        fs.sync().unwrap();
        let s0 = fs.stats();
        let mut rng = Rng::new(pct);
        let d = [2u8; 4096];
        let n = 40_000;
        let t = Instant::now();
        for _ in 0..n {
            let ino = inos[rng.below(inos.len() as u64) as usize];
            fs.write(ino, rng.below(256) * 4096, &d, ts(2)).unwrap();
        }
        let s1 = fs.stats();
        let user = s1.user_bytes - s0.user_bytes;
        let prog = s1.programmed_bytes - s0.programmed_bytes;
        eprintln!(
            "{label} full: {n} random 4 KiB overwrites, WAF {:.2}, GC moved {} records, {} erases, {} checkpoints, {:.0} IOPS",
            prog as f64 / user as f64,
            s1.gc_records - s0.gc_records,
            s1.erases - s0.erases,
            s1.checkpoints - s0.checkpoints,
            n as f64 / t.elapsed().as_secs_f64()
        );
        for (i, ino) in inos.iter().enumerate() {
            fs.unlink(ROOT_INO, format!("{label}-{i}").as_bytes(), ts(3)).unwrap();
            fs.evict(*ino).unwrap();
        }
    }
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let used: Vec<u32> = f.erases.clone();
    eprintln!("erase counts: min {} max {}", used.iter().min().unwrap(), used.iter().max().unwrap());
}

/// CRC32C throughput of the engine's slice-by-8 (`crc32c`) beside the byte-at-a-time loop it
/// replaced (a table built here the same way), over 4 KiB records: `--release -- --ignored
/// perf_crc32c --nocapture`. Both must agree.
#[test]
#[ignore]
fn perf_crc32c() {
    let mut table = [0u32; 256];
    for (i, t) in table.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
        }
        *t = c;
    }
    let bytewise = |data: &[u8]| {
        let mut c = !0u32;
        for &b in data {
            c = table[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
        }
        !c
    };
    let mut rng = Rng::new(7);
    let mut buf = vec![0u8; 4096 + 48];
    rng.fill(&mut buf);
    let rounds = 50_000u32;
    let mib = f64::from(rounds) * buf.len() as f64 / f64::from(1u32 << 20);
    let t = Instant::now();
    let mut acc = 0u32;
    for r in 0..rounds {
        buf[0] = r as u8;
        acc ^= ferrofs_engine::crc::crc32c(std::hint::black_box(&buf));
    }
    let fast = mib / t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut acc2 = 0u32;
    for r in 0..rounds {
        buf[0] = r as u8;
        acc2 ^= bytewise(std::hint::black_box(&buf));
    }
    let slow = mib / t.elapsed().as_secs_f64();
    assert_eq!(acc, acc2, "slice-by-8 and bytewise CRC32C disagree");
    eprintln!("crc32c over 4 KiB records: slice-by-8 {fast:.0} MiB/s, byte at a time {slow:.0} MiB/s ({:.1}x)", fast / slow);
}
