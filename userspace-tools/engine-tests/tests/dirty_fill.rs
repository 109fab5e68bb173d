//! The dirty-fill workload of `ferrofs-bench dirty` (and `ferrofs-simbench --dirty-fill`) on a
//! small NAND: 32 KiB files in directories of 256, each written in 4 KiB calls (as the kernel
//! hands over folios) and fsync'd; fill to a statfs level, delete half of all files at random,
//! sync, fill to the level again; 50, 80 and 90 %. Before the foreground GC cleaned ahead of
//! need with cost-benefit victims, the 90 % refill on a 256 MiB device checkpointed after about
//! every victim (WA 7.8, 4585 checkpoints for 100 MB); here the index cache is small so that the
//! index outgrows it as it does on the larger device.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::std_platform::StdEngine;
use ferrofs_engine::{CreateArgs, Error, FormatOptions, MountOptions, Timespec, ROOT_INO};
use ferrofs_flashsim::{NandConfig, NandSim};

type Fs = StdEngine<NandSim>;

fn ts(s: i64) -> Timespec {
    Timespec { sec: 1_700_000_000 + s, nsec: 0 }
}

fn used(fs: &Fs) -> f64 {
    let s = fs.statfs();
    s.blocks.saturating_sub(s.blocks_free) as f64 / s.blocks as f64
}

fn content(id: u64, buf: &mut [u8], off: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        let p = off + i as u64;
        *b = (p.wrapping_mul(31) ^ id.wrapping_mul(0x9E37_79B9) ^ (p >> 8)) as u8;
    }
}

const FILE: u64 = 32 << 10;

#[test]
fn dirty_fill_to_90_percent_completes_with_bounded_amplification() {
    // 32 MiB: 256 erase blocks of 64 x 2 KiB pages
    let cfg = NandConfig { seed: 3, ..NandConfig::with_layout(2048, 64, 256) };
    let sim = NandSim::new(cfg).unwrap();
    let sim = ferrofs_engine_tests::mkfs(sim, &FormatOptions::default(), ts(0)).map_err(|e| e.0).unwrap();
    let opts = MountOptions { cache_nodes: 32, ..Default::default() };
    let mut fs = Fs::mount(sim, opts).map_err(|e| e.0).unwrap();
    let args = CreateArgs { mode: S_IFREG | 0o644, ..Default::default() };
    let top = fs.mkdir(ROOT_INO, b"fill", 0o755, 0, 0, ts(0)).unwrap().ino;
    let mut dirs: Vec<u64> = Vec::new();
    let mut files: Vec<(u64, u64, u64)> = Vec::new(); // id, dir, ino
    let mut next = 0u64;
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut rand = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut buf = vec![0u8; 4096];
    for level in [0.5, 0.8, 0.9] {
        for phase in 0..2 {
            if phase == 1 {
                let n = files.len() / 2;
                for i in (1..files.len()).rev() {
                    files.swap(i, rand(i as u64 + 1) as usize);
                }
                for (id, dir, ino) in files.drain(..n) {
                    fs.unlink(dir, format!("f{id}").as_bytes(), ts(1)).unwrap();
                    fs.evict(ino).unwrap();
                }
                fs.sync().unwrap();
            }
            let p0 = fs.flash().counters().bytes_programmed;
            let cp0 = fs.stats().checkpoints;
            let mut user = 0u64;
            while used(&fs) < level {
                let id = next;
                next += 1;
                let d = (id / 256) as usize;
                if d >= dirs.len() {
                    dirs.push(fs.mkdir(top, format!("d{d}").as_bytes(), 0o755, 0, 0, ts(1)).unwrap().ino);
                }
                let ino = fs.create(dirs[d], format!("f{id}").as_bytes(), &args, ts(1)).unwrap().ino;
                for off in (0..FILE).step_by(4096) {
                    content(id, &mut buf, off);
                    assert_eq!(fs.write(ino, off, &buf, ts(1)).unwrap(), 4096, "level {level} file {id}");
                }
                fs.fsync(ino).unwrap();
                files.push((id, dirs[d], ino));
                user += FILE;
            }
            let wa = (fs.flash().counters().bytes_programmed - p0) as f64 / user.max(1) as f64;
            let cps = fs.stats().checkpoints - cp0;
            let mb = user as f64 / 1e6;
            eprintln!("level {level} phase {phase}: {mb:.1} MB, WA {wa:.2}, {cps} checkpoints");
            // the 90 % fill is short (a few MB) and pays for cleaning what the 80 % level left
            let bound = if level < 0.85 { 2.5 } else { 3.5 };
            assert!(wa < bound, "level {level} phase {phase}: WA {wa:.2}");
            assert!((cps as f64) < 8.0 * mb + 10.0, "level {level} phase {phase}: {cps} checkpoints for {mb:.1} MB");
        }
    }
    let check = |fs: &mut Fs, files: &[(u64, u64, u64)]| {
        let r = fs.fsck().unwrap();
        assert_eq!(r.problems, 0, "{r:?}");
        let mut got = vec![0u8; FILE as usize];
        let mut want = vec![0u8; FILE as usize];
        for &(id, _, ino) in files {
            assert_eq!(fs.read(ino, 0, &mut got).unwrap(), FILE as usize);
            content(id, &mut want, 0);
            assert!(got == want, "file {id}");
        }
    };
    check(&mut fs, &files);
    let sim = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(sim, opts).map_err(|e| e.0).unwrap();
    check(&mut fs, &files);
    // still writable up to ENOSPC, and mountable after
    let mut n = 0u64;
    loop {
        let ino = match fs.create(dirs[0], format!("x{n}").as_bytes(), &args, ts(2)) {
            Ok(i) => i.ino,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("{e:?}"),
        };
        n += 1;
        match fs.write(ino, 0, &buf, ts(2)) {
            Ok(_) => {}
            Err(Error::NoSpace) => break,
            Err(e) => panic!("{e:?}"),
        }
        assert!(n < 100_000);
    }
    assert!(used(&fs) > 0.97, "ENOSPC at {:.1} % used", used(&fs) * 100.0);
    let sim = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(sim, opts).map_err(|e| e.0).unwrap();
    check(&mut fs, &files);
}
