//! `Engine::repair` on randomly damaged media: a few bytes of programmed pages flipped (records
//! that fail their CRC, wherever they are: data, entries, inodes, orphans, index nodes, segment
//! tables). The repair must never panic; it reaches a state fsck calls clean, or stops with an
//! error when what is damaged is the index itself (not repairable: the index is not rebuilt
//! from the log). A repaired filesystem remounts clean and writable.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, Error, MountOptions, RepairLevel, ROOT_INO};
use ferrofs_engine_tests::*;

fn populated() -> RamFlash {
    let mut fs = fresh(32 * 1024, 64, 512);
    let mut rng = Rng::new(11);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(1)).unwrap();
    let e = fs.mkdir(d.ino, b"e", 0o755, 0, 0, ts(1)).unwrap();
    for i in 0..40 {
        let dir = [ROOT_INO, d.ino, e.ino][i % 3];
        let f = fs.create(dir, format!("f{i}").as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
        let mut b = vec![0u8; 1 + rng.below(12_000) as usize];
        rng.fill(&mut b);
        fs.write(f.ino, 0, &b, ts(1)).unwrap();
        if i % 4 == 0 {
            fs.setxattr(f.ino, b"user.x", &b[..b.len().min(40)], 0, ts(1)).unwrap();
        }
        if i % 7 == 0 {
            fs.link(f.ino, ROOT_INO, format!("h{i}").as_bytes(), ts(1)).unwrap();
        }
    }
    let o = fs.create(ROOT_INO, b"open-unlinked", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
    fs.write(o.ino, 0, &[7; 5000], ts(1)).unwrap();
    fs.unlink(ROOT_INO, b"open-unlinked", ts(1)).unwrap();
    fs.unmount().map_err(|e| e.0).unwrap()
}

#[test]
fn repair_of_random_damage_reaches_clean_or_says_why_not() {
    let base = populated();
    let mut rng = Rng::new(2024);
    let (mut mounted, mut clean, mut index_damage, mut repairs) = (0, 0, 0, 0u64);
    let rounds = 120;
    for round in 0..rounds {
        let mut f = base.clone();
        let flips = 1 + rng.below(3);
        let mut done = 0;
        while done < flips {
            let seg = rng.below(64) as u32;
            let off = rng.below(32 * 1024) as u32;
            if f.is_programmed(seg, off) {
                f.flip(seg, off, 1 << rng.below(8));
                done += 1;
            }
        }
        let Ok(mut fs) = Fs::mount(f, MountOptions { read_only: true, ..Default::default() }) else { continue };
        mounted += 1;
        let level = if round % 2 == 0 { RepairLevel::All } else { RepairLevel::Preen };
        match fs.repair(level, ts(5), &mut |_, _| true) {
            Ok(rep) => {
                repairs += rep.repaired;
                if level == RepairLevel::All {
                    assert_eq!(rep.problems_after, 0, "round {round}: {rep:?}");
                    assert_eq!(rep.left, 0, "round {round}: {rep:?}");
                }
                assert_eq!(rep.problems_after == 0, rep.left == 0, "round {round}: {rep:?}");
                if rep.problems_after != 0 {
                    continue;
                }
                clean += 1;
                let f = fs.unmount().map_err(|e| e.0).unwrap_or_else(|e| panic!("round {round}: unmount {e:?}"));
                let mut fs = Fs::mount(f, MountOptions::default()).unwrap_or_else(|e| panic!("round {round}: remount {:?}", e.0));
                assert_fsck(&mut fs);
                let n = fs.create(ROOT_INO, b"new-after-repair", &CreateArgs { mode: S_IFREG | 0o600, ..Default::default() }, ts(6)).unwrap();
                fs.write(n.ino, 0, b"still writable", ts(6)).unwrap();
                let f = fs.unmount().map_err(|e| e.0).unwrap();
                let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
                assert_fsck(&mut fs);
            }
            // an index node (or the index root path) does not read back
            Err(Error::Corrupt) => index_damage += 1,
            Err(e) => panic!("round {round}: repair failed with {e:?}"),
        }
    }
    eprintln!(
        "repair of random damage: {rounds} images, {mounted} mounted, {clean} clean after the repair ({repairs} repairs), \
         {index_damage} stopped at a damaged index node"
    );
    assert!(clean >= mounted / 2 && clean > 20, "clean {clean} of {mounted}");
}

/// A repair needs a read-only mount (its first fixes must come before the mount writes).
#[test]
fn repair_needs_a_fresh_read_only_mount() {
    let base = populated();
    let mut fs = Fs::mount(base, MountOptions::default()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.repair(RepairLevel::All, ts(5), &mut |_, _| true).unwrap_err(), Error::Invalid);
}

/// The callback stops a repair (fsck's SIGINT): the repairs made so far are complete
/// operations, the rest is left, and a later repair finishes the job.
#[test]
fn a_cancelled_repair_leaves_complete_repairs_only() {
    let mut f = populated();
    // damage data records: walk every segment's records by the format's rules and flip a
    // payload byte of each DATA record (stale copies too: only the live ones matter)
    let (ss, wu) = (32 * 1024u32, 512u32);
    let mut hit = 0;
    for seg in 0..64u32 {
        let mut pos = 0u32;
        while pos + 48 <= ss {
            if wu - pos % wu < 48 {
                pos += wu - pos % wu;
                continue;
            }
            let at = (seg * ss + pos) as usize;
            let h = &f.raw()[at..at + 48];
            if h[0..2] != 0xF5A5u16.to_le_bytes() {
                break;
            }
            let len = u32::from_le_bytes(h[44..48].try_into().unwrap());
            if h[2] == 4 && len > 10 && pos + 48 + len <= ss {
                f.flip(seg, pos + 48 + 5, 0x20);
                hit += 1;
            }
            pos += 48 + len;
        }
    }
    assert!(hit > 5, "{hit} data records found");
    let mut fs = Fs::mount(f, MountOptions { read_only: true, ..Default::default() }).map_err(|e| e.0).unwrap();
    let before = fs.fsck().unwrap().problems;
    assert!(before >= 2, "{before} problems");
    let mut n = 0;
    let rep = fs
        .repair(RepairLevel::All, ts(7), &mut |_, _| {
            n += 1;
            false
        })
        .unwrap();
    assert!(rep.cancelled && rep.repaired == 1 && n == 1, "{rep:?}");
    assert!(rep.problems_after > 0 && rep.problems_after < before, "{rep:?}, {before} before");
    // what was made is on the medium; a second repair finishes
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions { read_only: true, ..Default::default() }).map_err(|e| e.0).unwrap();
    assert_eq!(fs.fsck().unwrap().problems, rep.problems_after);
    let rep = fs.repair(RepairLevel::All, ts(8), &mut |_, _| true).unwrap();
    assert!(!rep.cancelled && rep.problems_after == 0, "{rep:?}");
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    assert_fsck(&mut fs);
}
