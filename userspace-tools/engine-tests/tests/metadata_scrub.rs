//! The superblock copies and the checkpoint areas are refreshed: a copy that reads only through
//! ECC correction, is damaged or missing is rewritten from the other one by a read-write mount
//! (one copy per mount, never both at once, so a power cut during the rewrite leaves the other);
//! a checkpoint area read through correction, or holding a slot that does not read back, is
//! moved off and erased by the next checkpoints.

use ferrofs_engine::format::{Superblock, SB_FULL_SIZE};
use ferrofs_engine::std_platform::StdPlatform;
use ferrofs_engine::{Engine, Flash, MountOptions, ReadStatus, ROOT_INO};
use ferrofs_engine_tests::{mkfs, reg, ts, RamFlash};
use ferrofs_flashsim::{CutEffect, CutPlan, NandConfig, NandSim};

type E<F> = Engine<StdPlatform, F>;

fn populated_nand() -> NandSim {
    let n = NandSim::new(NandConfig::new(64)).unwrap();
    let f = mkfs(n, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = E::<NandSim>::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    for i in 0..20 {
        let x = fs.create(ROOT_INO, format!("f{i}").as_bytes(), &reg(), ts(1)).unwrap();
        fs.write(x.ino, 0, &vec![i as u8; 3000 + i * 100], ts(1)).unwrap();
    }
    fs.unmount().map_err(|e| e.0).unwrap()
}

fn superblock<F: Flash>(f: &mut F) -> Superblock {
    let mut b = vec![0u8; 4096];
    for s in 0..64 {
        if f.read(s, 0, &mut b[..SB_FULL_SIZE]).is_ok() {
            if let Ok(sb) = Superblock::decode(&b[..SB_FULL_SIZE]) {
                return sb;
            }
        }
    }
    panic!("no superblock");
}

/// Both copies read back clean and equal.
fn copies_intact<F: Flash>(f: &mut F, sb: &Superblock) -> bool {
    sb.sb_segs.iter().all(|&s| {
        let mut b = vec![0u8; SB_FULL_SIZE];
        matches!(f.read(s, 0, &mut b), Ok(ReadStatus::Clean)) && Superblock::decode(&b).is_ok_and(|x| x == *sb)
    })
}

fn check_files<F: Flash>(fs: &mut E<F>) {
    for i in 0..20usize {
        let x = fs.lookup(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
        let mut b = vec![0u8; 3000 + i * 100];
        assert_eq!(fs.read(x.ino, 0, &mut b).unwrap(), b.len());
        assert!(b.iter().all(|&c| c == i as u8));
    }
}

/// A copy whose reads are corrected (bit flips the ECC still fixes) is rewritten by the next
/// read-write mount, and only then: a read-only mount writes nothing.
#[test]
fn a_weak_superblock_copy_is_rewritten() {
    for copy in 0..2 {
        let mut n = populated_nand();
        let sb = superblock(&mut n);
        let seg = sb.sb_segs[copy];
        n.inject_bitflip(seg, 0).unwrap();
        let erases = n.counters().erase_counts[seg as usize];
        // read-only: nothing
        let fs = E::<NandSim>::mount(n, MountOptions { read_only: true, ..Default::default() }).map_err(|e| e.0).unwrap();
        assert_eq!(fs.fault_stats().superblock_refreshes, 0);
        let mut n = fs.into_flash();
        assert_eq!(n.counters().erase_counts[seg as usize], erases);
        assert!(!copies_intact(&mut n, &sb));
        // read-write: rewritten (the erase heals the weak page), the files intact
        let mut fs = E::<NandSim>::mount(n, MountOptions::default()).map_err(|e| e.0).unwrap();
        assert_eq!(fs.fault_stats().superblock_refreshes, 1, "copy {copy}");
        check_files(&mut fs);
        let mut n = fs.unmount().map_err(|e| e.0).unwrap();
        assert_eq!(n.counters().erase_counts[seg as usize], erases + 1);
        assert!(copies_intact(&mut n, &sb), "copy {copy}");
        let fs = E::<NandSim>::mount(n, MountOptions::default()).map_err(|e| e.0).unwrap();
        assert_eq!(fs.fault_stats().superblock_refreshes, 0, "the next mount has nothing to do");
    }
}

/// Both copies weak: one per mount, the other at the next.
#[test]
fn two_weak_copies_take_two_mounts() {
    let mut n = populated_nand();
    let sb = superblock(&mut n);
    for &s in &sb.sb_segs {
        n.inject_bitflip(s, 0).unwrap();
    }
    let fs = E::<NandSim>::mount(n, MountOptions::default()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.fault_stats().superblock_refreshes, 1);
    let n = fs.unmount().map_err(|e| e.0).unwrap();
    let fs = E::<NandSim>::mount(n, MountOptions::default()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.fault_stats().superblock_refreshes, 1);
    let mut n = fs.unmount().map_err(|e| e.0).unwrap();
    assert!(copies_intact(&mut n, &sb));
}

/// A damaged copy (a flipped bit, its CRC fails) is rewritten from the other, whichever copy
/// it is; the mount itself never depended on it.
#[test]
fn a_damaged_superblock_copy_is_rewritten() {
    for copy in 0..2 {
        let f = RamFlash::new_nand(32 * 1024, 48, 512);
        let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
        let mut f = f;
        let sb = superblock(&mut f);
        f.flip(sb.sb_segs[copy], 100, 0x04);
        assert!(!copies_intact(&mut f, &sb));
        let fs = E::<RamFlash>::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
        assert_eq!(fs.fault_stats().superblock_refreshes, 1);
        let mut f = fs.unmount().map_err(|e| e.0).unwrap();
        assert!(copies_intact(&mut f, &sb), "copy {copy} not rewritten");
    }
}

/// A power cut at every device operation of the mount that rewrites a damaged copy: every
/// next mount succeeds (the other copy is never touched), and a mount that completes leaves
/// both copies intact.
#[test]
fn a_cut_while_a_copy_is_rewritten_leaves_the_other() {
    let mut base = populated_nand();
    let sb = superblock(&mut base);
    // copy 0 damaged: its rewrite is the mount's first write
    let mut b = vec![0u8; 2048];
    base.read(sb.sb_segs[0], 0, &mut b).unwrap();
    base.inject_uncorrectable(sb.sb_segs[0], 0).unwrap();
    let mut cuts = 0;
    for n in 1..40u64 {
        let mut f = base.clone();
        f.cut_after_with(n, CutPlan { effect: CutEffect::Torn, ..CutPlan::default() });
        let r = E::<NandSim>::mount(f, MountOptions::default());
        let mut f = match r {
            Ok(fs) => fs.into_flash(),
            Err((_, f)) => f,
        };
        if f.is_powered() {
            continue;
        }
        cuts += 1;
        f.reboot();
        let mut fs = E::<NandSim>::mount(f, MountOptions::default()).unwrap_or_else(|e| panic!("cut {n}: mount failed: {:?}", e.0));
        check_files(&mut fs);
        let mut f = fs.unmount().map_err(|e| e.0).unwrap();
        f.clear_faults();
        assert!(copies_intact(&mut f, &sb), "cut {n}: copies not both intact after a completed mount");
    }
    eprintln!("superblock rewrite: {cuts} cut points, every next mount succeeded and finished the rewrite");
    assert!(cuts >= 3);
}

/// A checkpoint area read through correction is moved off and erased by the next checkpoints
/// (the mount's and the one after), which heals it; nothing is lost.
#[test]
fn a_weak_checkpoint_area_is_scrubbed() {
    let mut n = populated_nand();
    let sb = superblock(&mut n);
    // a page of the newest checkpoint's slot: the mount reads it
    let fs = E::<NandSim>::mount(n, MountOptions { read_only: true, ..Default::default() }).map_err(|e| e.0).unwrap();
    let mut n = fs.into_flash();
    let mut newest = None;
    for a in 0..2 {
        for &s in &sb.cp_segs[a][..sb.cp_area_segs as usize] {
            let mut b = vec![0u8; 8];
            n.read(s, 0, &mut b).unwrap();
            if b[..4] == 0x5043_4646u32.to_le_bytes() {
                newest = Some((a, s));
            }
        }
    }
    let (area, seg) = newest.expect("a written checkpoint area");
    n.inject_bitflip(seg, 0).unwrap();
    let before: Vec<u64> = sb.cp_segs[area][..sb.cp_area_segs as usize].iter().map(|&s| n.counters().erase_counts[s as usize]).collect();
    let mut fs = E::<NandSim>::mount(n, MountOptions::default()).map_err(|e| e.0).unwrap();
    check_files(&mut fs);
    fs.sync().unwrap();
    assert!(fs.fault_stats().cp_area_scrubs >= 1, "{:?}", fs.fault_stats());
    let n = fs.unmount().map_err(|e| e.0).unwrap();
    let after: Vec<u64> = sb.cp_segs[area][..sb.cp_area_segs as usize].iter().map(|&s| n.counters().erase_counts[s as usize]).collect();
    assert!(after.iter().zip(&before).all(|(a, b)| a > b), "area {area} not erased: {before:?} -> {after:?}");
    let mut fs = E::<NandSim>::mount(n, MountOptions::default()).map_err(|e| e.0).unwrap();
    assert_eq!(fs.fault_stats().corrected_reads, 0, "healed");
    check_files(&mut fs);
}
