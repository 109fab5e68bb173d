//! An uncorrectable page under live data (nandsim's gravepages, a worn NAND page): that file
//! reads with an error, everything else stays readable, and the filesystem keeps accepting
//! writes. Before the fix, garbage collection picked the segment holding the page over and over,
//! failed to move it (the scan stops at the unreadable page) and returned the error to every
//! foreground write that needed space: one bad page made every later write fail with EUCLEAN.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::std_platform::StdPlatform;
use ferrofs_engine::{CreateArgs, Engine, Error, MountOptions, ROOT_INO};
use ferrofs_engine_tests::{mkfs, ts, Rng};
use ferrofs_flashsim::{NandConfig, NandSim};

type E = Engine<StdPlatform, NandSim>;

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 24, ..Default::default() }
}

fn read_ok(fs: &mut E, ino: u64, want: &[u8]) -> Result<bool, Error> {
    let mut b = vec![0u8; want.len()];
    fs.read(ino, 0, &mut b)?;
    Ok(b == want)
}

#[test]
fn grave_page_does_not_stop_writes() {
    let sim = NandSim::new(NandConfig { seed: 3, preferred_write: 512, ..NandConfig::with_layout(512, 64, 48) }).unwrap();
    let f = mkfs(sim, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = E::mount(f, opts()).map_err(|e| e.0).unwrap();
    let mut rng = Rng::new(1);
    let mut files = Vec::new();
    for i in 0..60 {
        let a = fs.create(ROOT_INO, format!("f{i}").as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
        let mut d = vec![0u8; 1500];
        rng.fill(&mut d);
        fs.write(a.ino, 0, &d, ts(1)).unwrap();
        files.push((a.ino, d));
    }
    fs.sync().unwrap();
    // the page holding the middle of f30's data becomes unreadable forever
    let probe = files[30].1[700..764].to_vec();
    let (seg, off) = (0..48)
        .find_map(|s| {
            let data = fs.flash().segment_data(s)?.to_vec();
            data.windows(probe.len()).position(|w| w == probe).map(|o| (s, o))
        })
        .expect("f30's data on the medium");
    fs.flash().grave_page(seg, (off / 512) as u32, 0).unwrap();
    let mut unreadable = Vec::new();
    for (k, (ino, d)) in files.iter().enumerate() {
        match read_ok(&mut fs, *ino, d) {
            Ok(true) => {}
            Ok(false) => panic!("f{k} read back wrong data without an error"),
            Err(e) => unreadable.push((k, e)),
        }
    }
    assert!(!unreadable.is_empty() && unreadable.len() <= 2, "files on the page: {unreadable:?}");
    let si = fs.segment_info(seg).unwrap();
    assert_eq!(si.flags & 3, 3, "a live record was unreadable: scrub, then retire: {si:?}");
    assert_eq!(fs.fault_stats().uncorrectable_reads as usize, unreadable.len());
    let bad = |k: usize| unreadable.iter().any(|u| u.0 == k);
    // free some space around it, then write several times the device through GC
    for k in (0..60).filter(|&k| k % 2 == 0 && !bad(k)) {
        fs.unlink(ROOT_INO, format!("f{k}").as_bytes(), ts(2)).unwrap();
        fs.evict(files[k].0).unwrap();
    }
    let big = fs.create(ROOT_INO, b"big", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(2)).unwrap();
    let mut d = vec![0u8; 200_000];
    for round in 0..60 {
        rng.fill(&mut d);
        if let Err(e) = fs.write(big.ino, 0, &d, ts(3)).and_then(|_| fs.fsync(big.ino)) {
            panic!("round {round}: a write failed with {e:?} after one page went bad");
        }
        fs.gc_step(true).unwrap();
    }
    assert!(!fs.is_failed());
    assert!(read_ok(&mut fs, big.ino, &d).unwrap());
    for (k, (ino, want)) in files.iter().enumerate() {
        if k % 2 == 1 && !bad(k) {
            assert!(read_ok(&mut fs, *ino, want).unwrap(), "f{k}");
        }
    }
    // the segment with the bad page is never picked by GC again, and is retired (not reused)
    // once nothing in it is live
    let si = fs.segment_info(seg).unwrap();
    assert_eq!(si.flags & 6, 6, "segment {seg} flagged stuck and to retire: {si:?}");
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = E::mount(f, opts()).map_err(|e| e.0).unwrap();
    assert!(read_ok(&mut fs, big.ino, &d).unwrap());
    assert_eq!(fs.segment_info(seg).unwrap().flags & 6, 6, "the flags persist");
    // fsck names the unreadable data; once its file is deleted, fsck is clean
    let r = fs.fsck().unwrap();
    assert!(r.problems >= 1, "{r:?}");
    for &(k, _) in &unreadable {
        fs.unlink(ROOT_INO, format!("f{k}").as_bytes(), ts(5)).unwrap();
        fs.evict(files[k].0).unwrap();
    }
    ferrofs_engine_tests::assert_fsck(&mut fs);
    assert_eq!(fs.segment_info(seg).unwrap().live, 0);
    // dead segments are freed (or retired) at the second checkpoint after they died: the
    // previous checkpoint, the fallback, may still refer to them until the next one
    fs.sync().unwrap();
    assert_ne!(fs.segment_info(seg).unwrap().state, ferrofs_engine::format::segstate::BAD, "kept for the previous checkpoint");
    fs.sync().unwrap();
    assert_eq!(fs.segment_info(seg).unwrap().state, ferrofs_engine::format::segstate::BAD, "retired once empty");
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    assert!(f.bad_blocks().contains(&seg), "segment {seg} marked bad: {:?}", f.bad_blocks());
}
