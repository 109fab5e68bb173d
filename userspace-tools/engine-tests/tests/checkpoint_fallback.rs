//! One bad page in the newest checkpoint's metadata: every write unit of its blob slot, of each
//! of its segment-table records and of its index root is damaged in turn. The mount must fall
//! back to the previous checkpoint (its segments are kept until the next checkpoint), say so
//! (`checkpoint_fallback`), lose nothing that was written before the newer checkpoint (the log
//! since the older one still holds it), pass fsck, and stay writable.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, MountOptions, SetAttr, ROOT_INO};
use ferrofs_engine_tests::crashload::read_state;
use ferrofs_engine_tests::*;

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 24, ..Default::default() }
}

fn reg() -> CreateArgs {
    CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }
}

#[test]
fn every_page_of_the_newest_checkpoint_metadata() {
    // one segment-table chunk, then four (700 segments)
    run(32 * 1024, 48);
    run(16 * 1024, 700);
}

fn run(segment_size: u32, segments: u32) {
    let wu = 512u32;
    let f = RamFlash::new_nand(segment_size, segments, wu);
    let f = Fs::format(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
    // wear every segment once, so that allocation after N has no never-used segment to
    // prefer over the ones that died before N
    {
        let w = fs.create(ROOT_INO, b"wear", &reg(), ts(0)).unwrap();
        let room = (fs.statfs().blocks_free * 4096 * 9 / 10) as usize;
        let mut off = 0;
        while off < room {
            match fs.write(w.ino, off as u64, &[1u8; 16384], ts(0)) {
                Ok(16384) => off += 16384,
                Ok(_) | Err(ferrofs_engine::Error::NoSpace) => break,
                Err(e) => panic!("wear write: {e:?}"),
            }
        }
        fs.sync().unwrap();
        fs.unlink(ROOT_INO, b"wear", ts(0)).unwrap();
        fs.evict(w.ino).unwrap();
        fs.sync().unwrap();
        fs.sync().unwrap();
    }
    // generation N-1: enough files for a tree of several nodes, some churn
    let mut rng = Rng::new(5);
    let mut inos = Vec::new();
    for i in 0..120 {
        let f = fs.create(ROOT_INO, format!("f{i}").as_bytes(), &reg(), ts(1)).unwrap();
        let mut d = vec![0u8; 500 + rng.below(3000) as usize];
        rng.fill(&mut d);
        fs.write(f.ino, 0, &d, ts(1)).unwrap();
        inos.push(f.ino);
    }
    fs.sync().unwrap();
    // between N-1 and N: overwrites, deletions, renames, a truncate (segments die)
    for (k, &ino) in inos.iter().enumerate().take(60) {
        match k % 4 {
            0 => {
                fs.write(ino, 0, &[k as u8; 4000], ts(2)).unwrap();
            }
            1 => {
                fs.unlink(ROOT_INO, format!("f{k}").as_bytes(), ts(2)).unwrap();
                fs.evict(ino).unwrap();
            }
            2 => fs.rename(ROOT_INO, format!("f{k}").as_bytes(), ROOT_INO, format!("g{k}").as_bytes(), 0, ts(2)).unwrap(),
            _ => {
                fs.setattr(ino, &SetAttr { size: Some(10), ..Default::default() }, ts(2)).unwrap();
            }
        }
    }
    let expect = read_state(&mut fs);
    // make the operations durable in the log, then checkpoint N
    fs.fsync(ROOT_INO).unwrap();
    fs.sync().unwrap();
    let mut places = Vec::new();
    fs.checkpoint_metadata(&mut |s, o, l| places.push((s, o, l))).unwrap();
    // after N: more writes, made durable by fsync but not checkpointed; they take free
    // segments, which must not be the ones the previous checkpoint still refers to
    for (k, &ino) in inos.iter().enumerate().skip(60).take(40) {
        fs.write(ino, 0, &[(k as u8) ^ 0x33; 4096], ts(4)).unwrap();
    }
    fs.fsync(ROOT_INO).unwrap();
    let after_n = read_state(&mut fs);
    assert!(after_n != expect);
    let img = fs.into_flash();
    // undamaged, the mount uses N and keeps the writes after it
    {
        let mut fs = Fs::mount(img.clone(), opts()).map_err(|e| e.0).unwrap();
        assert_eq!(fs.checkpoint_fallback(), None);
        assert!(read_state(&mut fs) == after_n, "undamaged mount");
    }
    // every write unit the metadata touches
    let mut pages = std::collections::BTreeSet::new();
    for &(s, o, l) in &places {
        let mut p = o / wu * wu;
        while p < o + l {
            pages.insert((s, p));
            p += wu;
        }
    }
    assert!(places.len() >= 3 && pages.len() >= 3, "metadata places {places:?}");
    let mut fell_back = 0;
    for &(s, p) in &pages {
        let mut f = img.clone();
        if !f.is_programmed(s, p) && !f.is_programmed(s, p + wu / 2) {
            continue;
        }
        for b in 0..wu {
            f.flip(s, p + b, 0x5a);
        }
        let mut fs = Fs::mount(f, opts()).unwrap_or_else(|(e, _)| panic!("page {s}:{p}: mount failed: {e:?}"));
        let fb = fs.checkpoint_fallback();
        assert!(fb.is_some(), "page {s}:{p} damaged, but the mount did not fall back (places {places:?})");
        fell_back += 1;
        assert!(!fs.is_read_only() && !fs.is_failed(), "page {s}:{p}: not writable after the fallback");
        assert_fsck(&mut fs);
        let got = read_state(&mut fs);
        assert!(got == expect, "page {s}:{p}: the state after the fallback ({fb:?}) differs");
        // keeps working, and the next mount needs no fallback
        let n = fs.create(ROOT_INO, b"after", &reg(), ts(3)).unwrap();
        fs.write(n.ino, 0, &[9; 3000], ts(3)).unwrap();
        let f = fs.unmount().map_err(|e| e.0).unwrap();
        let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
        assert_eq!(fs.checkpoint_fallback(), None, "page {s}:{p}: the second mount fell back again");
        assert_fsck(&mut fs);
        let mut want = expect.clone();
        want.insert("after".into(), vec![9; 3000]);
        assert!(read_state(&mut fs) == want, "page {s}:{p}: state after the second mount");
    }
    eprintln!("checkpoint fallback ({segments} segments): {} metadata pages damaged one at a time, {fell_back} fallbacks", pages.len());
    assert!(fell_back >= 3);
}
