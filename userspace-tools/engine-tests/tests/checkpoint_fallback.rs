//! One bad page in the newest checkpoint's metadata: every write unit of its blob slot, of each
//! of its segment-table records and of its index root is damaged in turn. The mount must fall
//! back to the previous checkpoint (its segments are kept until the next checkpoint), say so
//! (`checkpoint_fallback`), lose nothing that was written before the newer checkpoint (the log
//! since the older one still holds it), pass fsck, and stay writable.

use ferrofs_engine::{MountOptions, SetAttr, ROOT_INO};
use ferrofs_engine_tests::crashload::read_state;
use ferrofs_engine_tests::*;

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 24, ..Default::default() }
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
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
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

/// A checkpoint area lost without a trace (wiped to the erased state): the mount takes the
/// other area's older checkpoint, whose next sequence number lies below the numbers of the
/// lost log still on the medium (segments free in the older table, not erased yet). Mounted
/// from the same table again, the engine allocates the same segments in the same order, so the
/// heads' reserved successors hold stale segment headers naming the new heads' segments as
/// their predecessors. The log written from then on must never chain into them at the next
/// mount: no damage reported, nothing of the lost log resurrected, the new files intact.
#[test]
fn a_lost_checkpoint_area_never_chains_into_the_stale_log() {
    let (mut wrong, mut runs) = (0, 0);
    for variant in 0..6u64 {
        runs += 1;
        let f = RamFlash::new_nand(16 * 1024, 96, 512);
        let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
        // area A holds the format's checkpoint; every later one goes to area B (fewer than
        // its slots are written)
        let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
        let mut places = Vec::new();
        fs.checkpoint_metadata(&mut |s, o, l| places.push((s, o, l))).unwrap();
        let area_b = area_of(&fs.flash().clone(), places[0].0);
        let mut rng = Rng::new(variant + 1);
        for round in 0..(3 + variant * 2) {
            for i in 0..10 {
                let x = fs.create(ROOT_INO, format!("h{round}-{i}").as_bytes(), &reg(), ts(1)).unwrap();
                let mut d = vec![0u8; 200 + rng.below(5000) as usize];
                rng.fill(&mut d);
                fs.write(x.ino, 0, &d, ts(1)).unwrap();
                fs.fsync(x.ino).unwrap();
            }
            fs.sync().unwrap();
        }
        let mut f = fs.into_flash();
        for &s in &area_b {
            for off in 0..16 * 1024 {
                if f.is_programmed(s, off) {
                    let b = f.raw()[s as usize * 16 * 1024 + off as usize];
                    f.flip(s, off, b ^ 0xFF);
                }
            }
        }
        // the mount takes the format's checkpoint; write, fsync, unmount (or crash), mount again
        let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
        let before = read_state(&mut fs);
        let x = fs.create(ROOT_INO, b"after-the-loss", &reg(), ts(3)).unwrap();
        fs.write(x.ino, 0, &[0xa5; 2_000], ts(3)).unwrap();
        fs.fsync(x.ino).unwrap();
        let mut want = before.clone();
        want.insert("after-the-loss".into(), vec![0xa5; 2_000]);
        for (name, crash) in [("unmount", false), ("crash", true)] {
            let f = if crash { fs.into_flash() } else { fs.unmount().map_err(|e| e.0).unwrap() };
            fs = match Fs::mount(f, opts()) {
                Ok(fs) => fs,
                Err((e, f)) => {
                    eprintln!("variant {variant} after {name}: mount failed: {e:?}");
                    wrong += 1;
                    fs = Fs::mount(f, MountOptions { read_only: true, ..opts() }).map_err(|e| e.0).unwrap_or_else(|e| panic!("{e:?}"));
                    break;
                }
            };
            // (records dropped after a gap: the replay read stale segments of the lost log)
            let bad = fs.log_damage().is_some()
                || fs.dropped_records() != 0
                || fs.fsck().map(|r| r.problems).unwrap_or(1) != 0
                || read_state(&mut fs) != want;
            if bad {
                eprintln!(
                    "variant {variant} after {name}: damage {:?}, dropped {}, fsck {:?}",
                    fs.log_damage(),
                    fs.dropped_records(),
                    fs.fsck()
                );
                wrong += 1;
                break;
            }
        }
    }
    eprintln!("lost checkpoint area: {runs} variants, {wrong} chained into the stale log");
    assert_eq!(wrong, 0);
}

/// The segments of the checkpoint area holding segment `seg`.
fn area_of(f: &RamFlash, seg: u32) -> Vec<u32> {
    let mut dev = f.clone();
    let sb = {
        let mut b = vec![0u8; ferrofs_engine::format::SB_FULL_SIZE];
        ferrofs_engine::Flash::read(&mut dev, 0, 0, &mut b).unwrap();
        ferrofs_engine::format::Superblock::decode(&b).unwrap()
    };
    let n = sb.cp_area_segs as usize;
    sb.cp_segs.iter().map(|a| a[..n].to_vec()).find(|a| a.contains(&seg)).expect("a checkpoint-area segment")
}

/// A checkpoint numbered at the end of the sequence space (forged, CRC fixed up, in the slot
/// after the newest) is not valid: its numbers would saturate, and no checkpoint written after
/// it could rank above it (the next mount would load it again and lose what came after). The
/// mount takes the genuine one, and what is written afterwards survives remounts.
#[test]
fn a_checkpoint_at_the_end_of_the_sequence_space_is_not_valid() {
    let f = RamFlash::new_nand(32 * 1024, 48, 512);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
    let a = fs.create(ROOT_INO, b"a", &reg(), ts(1)).unwrap();
    fs.write(a.ino, 0, b"before", ts(1)).unwrap();
    fs.sync().unwrap();
    let mut places = Vec::new();
    fs.checkpoint_metadata(&mut |s, o, l| places.push((s, o, l))).unwrap();
    let mut f = fs.unmount().map_err(|e| e.0).unwrap();
    // the unmount's checkpoint is in the slot after `places[0]`; forge the one after that
    let (seg, off, len) = places[0];
    let src = (seg as usize * 32 * 1024 + (off + len) as usize, off + 2 * len);
    let mut blob = f.raw()[src.0..src.0 + len as usize].to_vec();
    assert_eq!(&blob[..4], &0x5043_4646u32.to_le_bytes(), "the unmount's checkpoint follows");
    blob[16..24].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
    blob[54..62].copy_from_slice(&u64::MAX.to_le_bytes());
    let n = u32::from_le_bytes(blob[12..16].try_into().unwrap()) as usize;
    blob[4..8].fill(0);
    let c = ferrofs_engine::crc::crc32c(&blob[..n]);
    blob[4..8].copy_from_slice(&c.to_le_bytes());
    assert!((src.1 + len) as usize <= 32 * 1024);
    for (i, &b) in blob.iter().enumerate() {
        assert!(!f.is_programmed(seg, src.1 + i as u32), "the slot after is free");
        f.flip(seg, src.1 + i as u32, b ^ 0xFF);
    }
    for round in 0..3 {
        let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
        assert_fsck(&mut fs);
        let x = fs.create(ROOT_INO, format!("after{round}").as_bytes(), &reg(), ts(2)).unwrap();
        fs.write(x.ino, 0, b"written after the forged checkpoint", ts(2)).unwrap();
        f = fs.unmount().map_err(|e| e.0).unwrap();
        let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
        let st = read_state(&mut fs);
        for r in 0..=round {
            assert!(st.contains_key(&format!("after{r}")), "round {round}: after{r} lost: {:?}", st.keys());
        }
        assert_eq!(st["a"], b"before");
        f = fs.unmount().map_err(|e| e.0).unwrap();
    }
}
