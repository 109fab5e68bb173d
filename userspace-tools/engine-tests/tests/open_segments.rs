//! The open-segment limit (issue 13): on a block device (`BlockSim`, whose cheap-FTL model
//! keeps `open_au_limit` allocation units open), a long random workload with GC, checkpoints,
//! clean remounts and power cuts never has more segments open than the superblock's limit,
//! neither by the simulator's count (`Counters::max_open_segments`: segments written to and
//! neither written to their end nor discarded) nor by the engine's (`Stats::max_open_segments`),
//! and the FTL model never has to close an allocation unit half-written. Flushes pad to the
//! FTL page: every device write starts on a page boundary. The limit lives in the superblock
//! (compat feature bit 0, with its own CRC); hostile values are refused.

use std::collections::BTreeMap;

use ferrofs_engine::format::{Superblock, FEATURE_COMPAT_FTL_PAGE, FEATURE_COMPAT_OPEN_SEGMENTS, SB_FULL_SIZE, SB_SIZE, S_IFREG};
use ferrofs_engine::std_platform::StdPlatform;
use ferrofs_engine::{CreateArgs, Engine, Error, FlashKind, FormatOptions, MountOptions, ROOT_INO};
use ferrofs_engine_tests::{mkfs, ts, Fs, RamFlash, Rng};
use ferrofs_flashsim::{BlockConfig, BlockSim, CutEffect, CutPlan, DiscardMode, OpKind, TornFill};

type E = Engine<StdPlatform, BlockSim>;

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 48, checkpoint_log_bytes: 1 << 20, ..Default::default() }
}

/// 8 MiB of 64 KiB allocation units, 4 KiB blocks, 16 KiB FTL pages, an FTL that keeps
/// `open_au` units open. (Segments this small hold 4 pages: flushes pad to the write unit
/// only, see `PAD_TO_CHUNK_MIN_PAGES`; `sim_big` has 256 KiB units, padded to the page.)
fn sim(open_au: u32, seed: u64) -> BlockSim {
    sim_with(open_au, seed, 64 * 1024, 128, DiscardMode::Stale)
}

/// 16 MiB of 256 KiB allocation units (16 pages of 16 KiB: flushes pad to the page).
fn sim_big(open_au: u32, seed: u64, discard: DiscardMode) -> BlockSim {
    sim_with(open_au, seed, 256 * 1024, 64, discard)
}

fn sim_with(open_au: u32, seed: u64, seg: u32, count: u32, discard: DiscardMode) -> BlockSim {
    let mut c = BlockConfig::with_layout(4096, seg, count);
    c.discard = discard;
    c.open_au_limit = open_au;
    c.seed = seed;
    BlockSim::new(c).unwrap()
}

fn format(s: BlockSim, limit: Option<u32>) -> BlockSim {
    mkfs(s, &FormatOptions { serial: 0x0a5e_9e65, open_segments: limit, ..Default::default() }, ts(0)).map_err(|e| e.0).unwrap()
}

/// Both counts of open segments are within `n`, and the device refused nothing.
fn check_open(fs: &mut E, n: u64, what: &str) {
    let st = fs.stats();
    assert!(st.max_open_segments <= n, "{what}: the engine had {} segments open (limit {n})", st.max_open_segments);
    let c = fs.flash().counters();
    assert!(c.max_open_segments <= n, "{what}: the device saw {} segments open (limit {n})", c.max_open_segments);
    assert_eq!(c.invalid_requests, 0, "{what}: the device refused writes: {c:?}");
}

type Model = BTreeMap<String, Vec<u8>>;

fn ino_of(fs: &mut E, name: &str) -> u64 {
    fs.lookup(ROOT_INO, name.as_bytes()).unwrap().ino
}

fn verify(fs: &mut E, m: &Model, what: &str) {
    let r = fs.fsck().unwrap();
    assert_eq!(r.problems, 0, "{what}: fsck {r:?}");
    let mut names = Vec::new();
    fs.readdir(ROOT_INO, 0, &mut |n, _, _, _| {
        names.push(String::from_utf8_lossy(n).into_owned());
        true
    })
    .unwrap();
    names.retain(|n| n != "." && n != "..");
    names.sort();
    let want: Vec<String> = m.keys().cloned().collect();
    assert_eq!(names, want, "{what}: directory");
    for (name, data) in m {
        let ino = ino_of(fs, name);
        let a = fs.getattr(ino).unwrap();
        assert_eq!(a.size, data.len() as u64, "{what}: size of {name}");
        let mut buf = vec![0u8; data.len()];
        let n = fs.read(ino, 0, &mut buf).unwrap();
        assert_eq!(n, data.len(), "{what}: read of {name}");
        assert!(buf == *data, "{what}: content of {name}");
    }
}

/// One random operation on `fs` and the model; files named `tmp*` are scratch (see the power
/// cut below). Returns false when the device is full (the operation was refused).
fn step(fs: &mut E, m: &mut Model, rng: &mut Rng, t: i64, scratch: bool) -> Result<(), Error> {
    let prefix = if scratch { "tmp" } else { "f" };
    let names: Vec<String> = m.keys().filter(|k| k.starts_with(prefix)).cloned().collect();
    let pick = |rng: &mut Rng| -> Option<String> {
        if names.is_empty() {
            None
        } else {
            Some(names[rng.below(names.len() as u64) as usize].clone())
        }
    };
    let live: usize = m.values().map(|v| v.len()).sum();
    match rng.below(100) {
        0..=14 if names.len() < 40 => {
            let name = format!("{prefix}{}", rng.below(1_000_000));
            if m.contains_key(&name) {
                return Ok(());
            }
            fs.create(ROOT_INO, name.as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(t))?;
            m.insert(name, Vec::new());
        }
        0..=59 => {
            let Some(name) = pick(rng) else { return Ok(()) };
            let ino = ino_of(fs, &name);
            let cur = m[&name].len() as u64;
            let off = rng.below(cur + 8192);
            let big = rng.below(4) == 0;
            let len = 1 + rng.below(if big { 40_000 } else { 6000 }) as usize;
            if live + len > 2 << 20 {
                return Ok(());
            }
            let mut d = vec![0u8; len];
            rng.fill(&mut d);
            let n = fs.write(ino, off, &d, ts(t))?;
            assert_eq!(n, len, "short write");
            let v = m.get_mut(&name).unwrap();
            let end = off as usize + len;
            if v.len() < end {
                v.resize(end, 0);
            }
            v[off as usize..end].copy_from_slice(&d);
        }
        60..=69 => {
            let Some(name) = pick(rng) else { return Ok(()) };
            let ino = ino_of(fs, &name);
            fs.fsync(ino)?;
        }
        70..=77 => {
            let Some(name) = pick(rng) else { return Ok(()) };
            fs.unlink(ROOT_INO, name.as_bytes(), ts(t))?;
            m.remove(&name);
        }
        78..=87 => {
            let Some(name) = pick(rng) else { return Ok(()) };
            let to = if rng.below(2) == 0 { pick(rng).unwrap() } else { format!("{prefix}{}", rng.below(1_000_000)) };
            if to == name {
                return Ok(());
            }
            fs.rename(ROOT_INO, name.as_bytes(), ROOT_INO, to.as_bytes(), 0, ts(t))?;
            let v = m.remove(&name).unwrap();
            m.insert(to, v);
        }
        88..=92 => {
            fs.gc_step(rng.below(2) == 0)?;
        }
        _ => fs.sync()?,
    }
    Ok(())
}

/// The long workload on a device whose FTL keeps `n` units open, formatted with limit `n`
/// (`None`: the default). With power cuts the device's discards (erases and the engine's
/// `discard_hint`s of freed segments) leave what `discard` says. Returns the device's counters.
fn long_workload(n: u32, limit: Option<u32>, seed: u64, steps: usize, power_cuts: bool) -> ferrofs_flashsim::Counters {
    long_workload_with(n, limit, seed, steps, power_cuts, DiscardMode::Stale)
}

fn long_workload_with(n: u32, limit: Option<u32>, seed: u64, steps: usize, power_cuts: bool, discard: DiscardMode) -> ferrofs_flashsim::Counters {
    let what = format!("limit {n}");
    let want = u64::from(n);
    // the power-cut runs on 256 KiB units (flushes padded to the FTL page), the others on
    // 64 KiB units (more segment switches and GC per byte)
    let dev = if power_cuts { sim_big(n, seed, discard) } else { sim(n, seed) };
    let mut fs = E::mount(format(dev, limit), opts()).map_err(|e| e.0).unwrap();
    if limit != Some(0) {
        assert_eq!(fs.open_segment_limit().0, n);
    }
    let mut m = Model::new();
    let mut rng = Rng::new(seed);
    let mut t = 1;
    let mut gc_records = 0;
    for i in 0..steps {
        t += 1;
        step(&mut fs, &mut m, &mut rng, t, false).unwrap_or_else(|e| panic!("{what} step {i}: {e:?}"));
        check_open(&mut fs, want, &format!("{what} step {i}"));
        gc_records = gc_records.max(fs.stats().gc_records);
        if i % 500 == 499 {
            // clean remount
            let f = fs.unmount().map_err(|e| e.0).unwrap();
            fs = E::mount(f, opts()).map_err(|e| e.0).unwrap();
            check_open(&mut fs, want, &format!("{what} remount at {i}"));
            verify(&mut fs, &m, &format!("{what} remount at {i}"));
        }
        if power_cuts && i % 300 == 150 {
            // everything so far durable, then scratch work interrupted by a cut; the GC steps
            // first move durable records, leaving segments the checkpoint still refers to
            fs.sync().unwrap();
            for _ in 0..2 {
                fs.gc_step(false).unwrap();
            }
            let plan = CutPlan { effect: CutEffect::Torn, fill: TornFill::Random, ..CutPlan::default() };
            fs.flash().cut_after_with(1 + rng.below(200), plan);
            let mut scratch = m.clone();
            for _ in 0..60 {
                t += 1;
                if step(&mut fs, &mut scratch, &mut rng, t, true).is_err() {
                    break;
                }
            }
            let mut f = fs.into_flash();
            f.reboot();
            fs = E::mount(f, opts()).map_err(|e| e.0).unwrap_or_else(|e| panic!("{what}: mount after the cut at {i}: {e:?}"));
            check_open(&mut fs, want, &format!("{what} mount after the cut at {i}"));
            // the scratch files may or may not have survived: drop them
            let mut names = Vec::new();
            fs.readdir(ROOT_INO, 0, &mut |nm, _, _, _| {
                names.push(String::from_utf8_lossy(nm).into_owned());
                true
            })
            .unwrap();
            for nm in names.iter().filter(|nm| nm.starts_with("tmp")) {
                fs.unlink(ROOT_INO, nm.as_bytes(), ts(t)).unwrap();
            }
            verify(&mut fs, &m, &format!("{what} after the cut at {i}"));
            check_open(&mut fs, want, &format!("{what} after the cut at {i}"));
        }
    }
    verify(&mut fs, &m, &format!("{what} at the end"));
    let st = fs.stats();
    assert!(st.checkpoints > 20, "{what}: only {} checkpoints", st.checkpoints);
    assert!(gc_records > 0 || st.gc_records > 0, "{what}: the GC never moved a record");
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = E::mount(f, opts()).map_err(|e| e.0).unwrap();
    verify(&mut fs, &m, &format!("{what} final mount"));
    check_open(&mut fs, want, &format!("{what} final mount"));
    let c = fs.flash().counters();
    eprintln!(
        "{what}: {} steps, max open {} (engine {}), {} checkpoints, {} GC records, FTL RMW events {}, page rewrites {}, {} MiB programmed",
        steps,
        c.max_open_segments,
        st.max_open_segments,
        st.checkpoints,
        st.gc_records,
        c.ftl_rmw_events,
        c.ftl_page_rewrites,
        c.bytes_programmed >> 20
    );
    c
}

#[test]
fn open_segment_limit_holds_through_gc_checkpoints_and_remounts() {
    for n in [2u32, 3, 4] {
        let c = long_workload(n, Some(n), 100 + u64::from(n), 3000, false);
        // the FTL never had to close a unit half-written, nor saw a write out of sequence
        assert_eq!(c.ftl_rmw_events, 0, "limit {n}: {c:?}");
    }
}

#[test]
fn open_segment_limit_holds_through_power_cuts() {
    for n in [2u32, 3] {
        long_workload(n, Some(n), 200 + u64::from(n), 2400, true);
    }
}

/// Freed segments are hinted for discard (the kernel's block backend discards them outside the
/// engine lock): with a device whose discards really drop the data (reads return 0xFF or
/// zeroes), nothing is lost through GC, checkpoints, remounts and power cuts, and the hints
/// happened. A hint given too early (a segment the fallback checkpoint or the roll-forward
/// still needs) would show as a lost or damaged file after a cut.
#[test]
fn freed_segments_are_discarded_and_nothing_is_lost() {
    for (mode, seed) in [(DiscardMode::Ones, 301u64), (DiscardMode::Zeroes, 302)] {
        let c = long_workload_with(2, Some(2), seed, 2400, true, mode);
        assert!(c.discard_hints > 20, "{mode:?}: only {} discard hints", c.discard_hints);
    }
}

#[test]
fn block_devices_default_to_two_open_segments() {
    let fs = E::mount(format(sim(2, 1), None), opts()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.open_segment_limit(), (2, 1));
    long_workload(2, None, 7, 800, false);
}

/// The check above is not vacuous: without a limit the same workload keeps more segments open
/// than a 2-unit FTL holds (the three heads and the checkpoint area, plus every segment a head
/// left with an unwritten tail), and that FTL has to close units half-written.
#[test]
fn without_a_limit_more_segments_are_open() {
    let mut fs = E::mount(format(sim(2, 9), Some(0)), opts()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.open_segment_limit(), (0, 3));
    let mut m = Model::new();
    let mut rng = Rng::new(9);
    for i in 0..1500 {
        step(&mut fs, &mut m, &mut rng, i + 1, false).unwrap();
    }
    verify(&mut fs, &m, "no limit");
    let c = fs.flash().counters();
    eprintln!("no limit: max open {} (engine {}), FTL RMW events {}", c.max_open_segments, fs.stats().max_open_segments, c.ftl_rmw_events);
    assert!(c.max_open_segments > 2, "without a limit only {} segments were open", c.max_open_segments);
    assert!(c.ftl_rmw_events > 0, "{c:?}");
    // and the workload's own check fails on such a filesystem (as it did on the engine
    // before the limit existed)
    let r = std::panic::catch_unwind(|| long_workload(2, Some(0), 9, 400, false));
    let msg = match r {
        Ok(_) => panic!("the open-segment check passed on a filesystem without a limit"),
        Err(p) => p.downcast_ref::<String>().cloned().unwrap_or_default(),
    };
    assert!(msg.contains("segments open"), "{msg}");
}

#[test]
fn a_limit_of_one_or_above_the_maximum_is_refused_at_format() {
    for (n, want) in [(1u32, Error::NotSupported), (65, Error::Invalid), (u32::MAX, Error::Invalid)] {
        let r = mkfs(sim(2, 1), &FormatOptions { open_segments: Some(n), ..Default::default() }, ts(0));
        assert_eq!(r.map(|_| ()).map_err(|e| e.0), Err(want), "open_segments {n}");
    }
}

/// Every write the engine issues on a block device is aligned to the FTL page and a whole
/// number of pages (fsync pads the head to the page, the next write starts on the next page),
/// so no FTL page is written twice. 1 MiB units: checkpoint slots are whole pages too.
#[test]
fn fsync_pads_to_the_ftl_page() {
    for limit in [2u32, 4] {
        let mut c = BlockConfig::with_layout(4096, 1 << 20, 24);
        c.preferred_write = 16384;
        c.open_au_limit = limit;
        let mut s = BlockSim::new(c).unwrap();
        s.enable_log(true);
        let s = format(s, Some(limit));
        let mut fs = E::mount(s, opts()).map_err(|e| e.0).unwrap();
        let mut rng = Rng::new(u64::from(limit));
        let mut files = Vec::new();
        for i in 0..6 {
            let f = fs.create(ROOT_INO, format!("f{i}").as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
            files.push(f.ino);
        }
        for t in 0..600 {
            let ino = files[rng.below(files.len() as u64) as usize];
            let mut d = vec![0u8; 1 + rng.below(3000) as usize];
            rng.fill(&mut d);
            fs.write(ino, rng.below(200_000), &d, ts(t)).unwrap();
            if rng.below(3) == 0 {
                fs.fsync(ino).unwrap();
            }
            if t % 200 == 199 {
                let f = fs.unmount().map_err(|e| e.0).unwrap();
                fs = E::mount(f, opts()).map_err(|e| e.0).unwrap();
            }
        }
        fs.sync().unwrap();
        let log = fs.flash().take_log();
        let writes: Vec<_> = log.iter().filter(|o| o.kind == OpKind::Write).collect();
        assert!(writes.len() > 300, "{} writes", writes.len());
        for o in &writes {
            assert!(o.offset % 16384 == 0 && o.len % 16384 == 0, "limit {limit}: write of {} bytes at {} of segment {}", o.len, o.offset, o.seg);
        }
        let c = fs.flash().counters();
        assert_eq!(c.ftl_page_rewrites, 0, "limit {limit}: {c:?}");
        assert!(c.flushes > 100);
        check_open(&mut fs, u64::from(limit), "fsync padding");
    }
}

// ----- the superblock field ---------------------------------------------------------------

const SEG: u32 = 64 * 1024;

fn ram_block(limit: Option<u32>) -> RamFlash {
    let f = RamFlash::with_kind(FlashKind::Block, SEG, 48, 4096);
    mkfs(f, &FormatOptions { open_segments: limit, ..Default::default() }, ts(0)).map_err(|e| e.0).unwrap()
}

fn read_sb(f: &RamFlash, seg: u32) -> Result<Superblock, Error> {
    let at = (seg * SEG) as usize;
    Superblock::decode(&f.raw()[at..at + SB_FULL_SIZE])
}

/// Overwrite both superblock copies with the encoding of `sb`, then apply `tweak` to the bytes.
fn forge(f: &mut RamFlash, sb: &Superblock, tweak: impl Fn(&mut [u8])) {
    let mut b = vec![0xFFu8; SB_FULL_SIZE];
    sb.encode(&mut b).unwrap();
    tweak(&mut b);
    for seg in [0u32, 1] {
        for (i, &nb) in b.iter().enumerate() {
            let old = f.raw()[(seg * SEG) as usize + i];
            f.flip(seg, i as u32, old ^ nb);
        }
    }
}

#[test]
fn the_limit_is_in_the_superblock_and_old_images_mount_without_one() {
    let f = ram_block(Some(3));
    let sb = read_sb(&f, 0).unwrap();
    assert_ne!(sb.compat & FEATURE_COMPAT_OPEN_SEGMENTS, 0);
    assert_eq!(sb.open_segments, 3);
    let fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.open_segment_limit(), (3, 2));
    // the main CRC covers the first 209 bytes only, as before: an engine that does not know
    // the feature reads the same superblock (the extension is ignored)
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let at = 0usize;
    let old = Superblock::decode(&f.raw()[at..at + SB_SIZE]);
    assert!(matches!(old, Err(_)), "the full decode needs the extension when the bit is set");
    let mut bytes = f.raw()[at..at + SB_SIZE].to_vec();
    bytes[4..8].copy_from_slice(&[0; 4]);
    let crc = ferrofs_engine::crc::crc32c(&bytes);
    assert_eq!(crc.to_le_bytes(), f.raw()[4..8], "main CRC over the first SB_SIZE bytes");
    // an image without the bit (as every image before it): no limit, three heads
    let f = ram_block(Some(0));
    let sb = read_sb(&f, 0).unwrap();
    assert_eq!(sb.compat & FEATURE_COMPAT_OPEN_SEGMENTS, 0);
    assert_eq!(sb.open_segments, 0);
    let fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.open_segment_limit(), (0, 3));
    // the MTD default is no limit
    let f = mkfs(RamFlash::new_nand(32 * 1024, 48, 512), &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.open_segment_limit(), (0, 3));
}

#[test]
fn hostile_open_segment_values_are_refused() {
    let f = ram_block(Some(2));
    let sb = read_sb(&f, 0).unwrap();
    for (v, want) in [(0u32, Error::BadFormat), (1, Error::NotSupported), (65, Error::BadFormat), (u32::MAX, Error::BadFormat)] {
        let mut g = f.clone();
        forge(&mut g, &Superblock { open_segments: v, ..sb }, |_| {});
        assert_eq!(read_sb(&g, 0).unwrap().open_segments, v);
        let r = Fs::mount(g, MountOptions::default());
        assert_eq!(r.map(|_| ()).map_err(|e| e.0), Err(want), "open_segments {v}");
    }
    // a damaged extension (its CRC no longer matches): no superblock copy is valid
    let mut g = f.clone();
    forge(&mut g, &sb, |b| b[SB_SIZE] ^= 1);
    assert!(read_sb(&g, 0).is_err());
    assert_eq!(Fs::mount(g, MountOptions::default()).map(|_| ()).map_err(|e| e.0), Err(Error::BadFormat));
    // the genuine one, re-forged, still mounts
    let mut g = f.clone();
    forge(&mut g, &sb, |_| {});
    let fs = Fs::mount(g, MountOptions::default()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.open_segment_limit(), (2, 1));
}

/// A block format records the FTL page (the device's preferred write size) in the superblock
/// (compat bit 2, its own CRC) for the kernel's block backend; raw flash records none; a value
/// that is not whole write units dividing the segment is refused, and a damaged one too.
#[test]
fn the_ftl_page_is_in_the_superblock() {
    let f = ram_block(Some(2));
    let sb = read_sb(&f, 0).unwrap();
    assert_ne!(sb.compat & FEATURE_COMPAT_FTL_PAGE, 0);
    assert_eq!(sb.ftl_page, 8192, "RamFlash's preferred write is 2 write units");
    assert_eq!(read_sb(&f, 0).unwrap(), sb, "both copies agree");
    let nand = mkfs(RamFlash::new_nand(32 * 1024, 48, 512), &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let nsb = Superblock::decode(&nand.raw()[..SB_FULL_SIZE]).unwrap();
    assert_eq!((nsb.compat & FEATURE_COMPAT_FTL_PAGE, nsb.ftl_page), (0, 0));
    for v in [0u32, 4096 + 512, 3 * 4096, 2 * SEG] {
        let mut g = f.clone();
        forge(&mut g, &Superblock { ftl_page: v, ..sb }, |_| {});
        assert_eq!(read_sb(&g, 0).unwrap().ftl_page, v);
        let r = Fs::mount(g, MountOptions::default());
        assert_eq!(r.map(|_| ()).map_err(|e| e.0), Err(Error::BadFormat), "ftl_page {v}");
    }
    let mut g = f.clone();
    forge(&mut g, &sb, |b| b[SB_SIZE + 8] ^= 1);
    assert!(read_sb(&g, 0).is_err(), "a damaged FTL page fails its CRC");
    // without the bit the field is not read (images before it)
    let mut g = f.clone();
    forge(&mut g, &Superblock { compat: sb.compat & !FEATURE_COMPAT_FTL_PAGE, ftl_page: 0, ..sb }, |b| b[SB_SIZE + 8..SB_SIZE + 16].fill(0xFF));
    assert_eq!(read_sb(&g, 0).unwrap().ftl_page, 0);
    Fs::mount(g, MountOptions::default()).map_err(|e| e.0).unwrap();
}

#[test]
fn limits_work_on_nand_too() {
    // MTD: heads merge the same way; a closed segment's tail stays unwritten (NAND cares not)
    let f = mkfs(RamFlash::new_nand(32 * 1024, 64, 512), &FormatOptions { open_segments: Some(2), ..Default::default() }, ts(0))
        .map_err(|e| e.0)
        .unwrap();
    let mut fs = Fs::mount(f, MountOptions { cache_nodes: 32, ..Default::default() }).map_err(|e| e.0).unwrap();
    assert_eq!(fs.open_segment_limit(), (2, 1));
    let mut rng = Rng::new(5);
    let mut live = BTreeMap::new();
    for i in 0..400u64 {
        let name = format!("n{}", i % 23);
        let ino = match fs.lookup(ROOT_INO, name.as_bytes()) {
            Ok(a) => a.ino,
            Err(_) => fs.create(ROOT_INO, name.as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap().ino,
        };
        let mut d = vec![0u8; 1 + rng.below(9000) as usize];
        rng.fill(&mut d);
        fs.setattr(ino, &ferrofs_engine::SetAttr { size: Some(0), ..Default::default() }, ts(2)).unwrap();
        fs.write(ino, 0, &d, ts(2)).unwrap();
        live.insert(name, d);
        if i % 7 == 0 {
            fs.fsync(ino).unwrap();
        }
        assert!(fs.stats().max_open_segments <= 2, "step {i}: {}", fs.stats().max_open_segments);
        if i % 150 == 149 {
            let f = fs.unmount().map_err(|e| e.0).unwrap();
            fs = Fs::mount(f, MountOptions { cache_nodes: 32, ..Default::default() }).map_err(|e| e.0).unwrap();
        }
    }
    assert_eq!(fs.fsck().unwrap().problems, 0);
    for (name, d) in &live {
        let ino = fs.lookup(ROOT_INO, name.as_bytes()).unwrap().ino;
        let mut b = vec![0u8; d.len()];
        assert_eq!(fs.read(ino, 0, &mut b).unwrap(), d.len());
        assert!(b == *d, "{name}");
    }
}

/// The engine's own check: a write that would open one segment more than the limit is refused
/// with an error before it reaches the device, and the log stops writing (fail-stop), instead
/// of a panic or a silent FTL slowdown. Writes to segments already open, and writes that reach
/// a segment's end (closing it), pass.
#[test]
fn the_open_check_refuses_a_segment_beyond_the_limit() {
    use ferrofs_engine::format::SegInfo;
    use ferrofs_engine::log::Log;
    use ferrofs_engine::segtab::SegTable;
    use ferrofs_engine::std_platform::StdVec;
    let s = sim(8, 1);
    let segs = StdVec((0..128).map(|_| SegInfo::default()).collect());
    let mut log: Log<StdPlatform, BlockSim> = Log::new(s, SegTable::new(segs).unwrap(), 7);
    log.set_open_limit(2).unwrap();
    assert_eq!(log.set_open_limit(1), Err(Error::NotSupported));
    log.set_open_limit(2).unwrap();
    let page = vec![0u8; 16384];
    log.write_fixed(10, 0, &page).unwrap();
    log.write_fixed(11, 0, &page).unwrap();
    assert_eq!(log.open_now, 2);
    // more of an open segment: fine
    log.write_fixed(10, 16384, &page).unwrap();
    // a third segment: refused, nothing written, the log stopped
    let before = log.flash.counters().writes;
    assert_eq!(log.write_fixed(12, 0, &page), Err(Error::Io));
    assert_eq!(log.flash.counters().writes, before);
    assert!(log.failed);
    assert_eq!(log.open_max, 2);
    // a segment written to its end is closed: room again (on a log that did not stop)
    let s = sim(8, 2);
    let segs = StdVec((0..128).map(|_| SegInfo::default()).collect());
    let mut log: Log<StdPlatform, BlockSim> = Log::new(s, SegTable::new(segs).unwrap(), 7);
    log.set_open_limit(2).unwrap();
    log.write_fixed(10, 0, &page).unwrap();
    log.write_fixed(11, 0, &page).unwrap();
    log.fill_to_end(11, 16384, true).unwrap();
    assert_eq!(log.open_now, 1);
    log.write_fixed(12, 0, &page).unwrap();
    assert_eq!(log.open_now, 2);
    assert_eq!(log.flash.counters().max_open_segments, 2);
}

/// More seeds of the power-cut workload: `FERROFS_SOAK_SEEDS=N cargo test --release --test
/// open_segments -- --ignored soak`.
#[test]
#[ignore]
fn soak_open_segments() {
    let seeds: u64 = std::env::var("FERROFS_SOAK_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    for seed in 0..seeds {
        for n in [2u32, 3, 4] {
            long_workload(n, Some(n), 1000 + seed * 7 + u64::from(n), 2000, true);
        }
    }
}

/// The replay window comes from the medium when the mount leaves it at 0 (the default): 8 MiB on
/// a block device, where each checkpoint costs a flush and a cheap FTL's rewrites, 3 MiB on raw
/// flash; an explicit value is kept. The kernel and the tools mount with the default.
#[test]
fn the_replay_window_is_chosen_from_the_medium() {
    use ferrofs_engine::{BLOCK_CHECKPOINT_LOG_BYTES, CHECKPOINT_LOG_BYTES};
    assert_eq!(MountOptions::default().checkpoint_log_bytes, 0);
    let fs = E::mount(format(sim(2, 1), None), MountOptions::default()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.checkpoint_log_bytes(), BLOCK_CHECKPOINT_LOG_BYTES);
    assert_eq!(BLOCK_CHECKPOINT_LOG_BYTES, 8 << 20);
    let fs = E::mount(fs.unmount().map_err(|e| e.0).unwrap(), MountOptions { checkpoint_log_bytes: 1 << 20, ..Default::default() })
        .map_err(|e| e.0)
        .unwrap();
    assert_eq!(fs.checkpoint_log_bytes(), 1 << 20);
    let nand = ferrofs_engine_tests::fresh(128 * 1024, 64, 2048);
    assert_eq!(nand.checkpoint_log_bytes(), CHECKPOINT_LOG_BYTES);
    assert_eq!(CHECKPOINT_LOG_BYTES, 5 << 19);
}

/// The periodic commit (`Engine::commit`, the kernel's `commit=` tick): on a block device it
/// flushes the log heads and takes no checkpoint until one is due, and what it committed
/// survives a power cut with a volatile write cache; on raw flash it checkpoints.
#[test]
fn the_periodic_commit_flushes_the_heads_on_a_block_device() {
    let mut s = sim(2, 3);
    s.set_volatile_cache(true);
    let mut fs = E::mount(format(s, None), MountOptions::default()).map_err(|e| e.0).unwrap();
    let ino = fs.create(ROOT_INO, b"f", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap().ino;
    let data: Vec<u8> = (0..48 * 1024u32).map(|i| (i.wrapping_mul(31) >> 3) as u8).collect();
    fs.write(ino, 0, &data, ts(2)).unwrap();
    let cps = fs.stats().checkpoints;
    assert!(!fs.commit().unwrap(), "a commit inside the replay window checkpointed");
    assert_eq!(fs.stats().checkpoints, cps);
    // nothing new: a second commit writes nothing either way
    assert!(!fs.commit().unwrap());
    let mut f = fs.into_flash();
    f.cut_now();
    f.power_on();
    let mut fs = E::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let ino = fs.lookup(ROOT_INO, b"f").unwrap().ino;
    let mut back = vec![0u8; data.len()];
    assert_eq!(fs.read(ino, 0, &mut back).unwrap(), data.len());
    assert!(back == data, "committed data lost at the cut");

    // the log since the checkpoint stays within the window: operations checkpoint at their
    // boundary when it is reached, the commit never has to
    drop(fs);

    // raw flash: a checkpoint
    let mut nand = ferrofs_engine_tests::fresh(128 * 1024, 64, 2048);
    let ino = nand.create(ROOT_INO, b"g", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap().ino;
    nand.write(ino, 0, &data, ts(2)).unwrap();
    let cps = nand.stats().checkpoints;
    assert!(nand.commit().unwrap());
    assert_eq!(nand.stats().checkpoints, cps + 1);
}

/// A checkpoint on a block device flushes the device cache twice: once after the index and the
/// segment table (the one flush covers both), once after its slot. A flush between the index and
/// the table made a cheap FTL that caches one erase block (mtdblock) write the head's block back
/// once more per checkpoint (issue 13's randwrite-buffered form).
#[test]
fn block_checkpoint_flushes_twice() {
    let s = format(sim(2, 7), Some(2));
    let mut fs = E::mount(s, opts()).map_err(|e| e.0).unwrap();
    let f = fs.create(ROOT_INO, b"f", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
    let mut rng = Rng::new(3);
    for round in 0..5u64 {
        for i in 0..40u64 {
            let mut d = vec![0u8; 4096];
            rng.fill(&mut d);
            fs.write(f.ino, rng.below(256) * 4096, &d, ts((2 + round * 40 + i) as i64)).unwrap();
        }
        let before = fs.flash().counters().flushes;
        let cps = fs.stats().checkpoints;
        fs.sync().unwrap();
        assert_eq!(fs.stats().checkpoints, cps + 1);
        let n = fs.flash().counters().flushes - before;
        assert_eq!(n, 2, "round {round}: a checkpoint flushed the device {n} times");
    }
    let f2 = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = E::mount(f2, opts()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.fsck().unwrap().problems, 0);
}
