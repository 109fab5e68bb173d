//! The hostile-image generator (`ferrofs-hostile`, `make hostile`): reproducible, and its CRC
//! fix-up is exact (a no-op on intact structures), so that forged fields pass the checksums.

use ferrofs_engine::format::rtype;
use ferrofs_tools::hostile::{build_bases, fix_cp, fix_rec, fix_sb, image_seed, make_image, parse, write_disk};

#[test]
fn bases_parse_and_the_crc_fixup_is_exact() {
    let bases = build_bases(1).expect("bases");
    assert_eq!(bases.len(), 5);
    for b in &bases {
        let p = parse(&b.data).expect("parse");
        assert_eq!(p.sb_offs.len(), 2, "{}: both superblock copies", b.name);
        assert!(!p.cps.is_empty(), "{}: a checkpoint", b.name);
        for t in [rtype::SEGHDR, rtype::INODE, rtype::DENT, rtype::DATA, rtype::INDEX, rtype::SEGTAB] {
            assert!(p.recs.iter().any(|r| r.hdr.rtype == t), "{}: no record of type {t}", b.name);
        }
        let mut d = b.data.clone();
        for &o in &p.sb_offs {
            fix_sb(&mut d, o);
        }
        for &(o, _) in &p.cps {
            fix_cp(&mut d, o, p.sb.cp_slot_size as usize);
        }
        for r in &p.recs {
            fix_rec(&mut d, r.off, p.seed);
        }
        assert!(d == b.data, "{}: the CRC fix-up changed an intact image", b.name);
    }
    // the history bases hold several checkpoints; the bigdir base a deep index
    assert!(parse(&bases[2].data).expect("parse").cps.len() >= 2);
}

#[test]
fn images_are_reproducible_and_mutated() {
    let bases = build_bases(7).expect("bases");
    // the bases do not depend on the host's clock or file times
    for (a, b) in bases.iter().zip(build_bases(7).expect("bases again").iter()) {
        assert!(a.data == b.data, "base {} differs between two builds", a.name);
    }
    let parsed: Vec<_> = bases.iter().map(|b| parse(&b.data).expect("parse")).collect();
    let mut changed = 0;
    for i in 0..200 {
        let a = make_image(&bases, &parsed, image_seed(7, i));
        let b = make_image(&bases, &parsed, image_seed(7, i));
        assert!(a.data == b.data && a.label == b.label, "image {i} differs between two runs");
        changed += usize::from(a.data != bases[a.base as usize].data);
    }
    // a few mutations can be no-ops (e.g. a bit flipped twice); most change the image
    assert!(changed > 180, "only {changed} of 200 images differ from their base");
    let dir = tempfile::tempdir().expect("tempdir");
    let (x, y) = (dir.path().join("x"), dir.path().join("y"));
    let lx = write_disk(&x, 7, 50, &bases).expect("disk");
    let ly = write_disk(&y, 7, 50, &bases).expect("disk");
    assert_eq!(lx, ly);
    assert!(std::fs::read(&x).expect("read") == std::fs::read(&y).expect("read"), "the disk is not reproducible");
}

/// `Engine::repair` (all repairs) on hostile images (forged fields with their CRCs fixed up):
/// never a panic; an image the repair calls clean remounts read-write clean.
#[test]
fn repair_of_hostile_images() {
    use ferrofs_engine::{MountOptions, RepairLevel};
    use ferrofs_flashsim::AnySim;
    use ferrofs_tools::dev::Dev;
    use ferrofs_tools::hostile::sim_from_bytes;
    use ferrofs_tools::Fs;
    let bases = build_bases(3).expect("bases");
    let parsed: Vec<_> = bases.iter().map(|b| parse(&b.data).expect("parse")).collect();
    let ts = ferrofs_engine::Timespec { sec: 1_800_000_000, nsec: 0 };
    let (mut mounted, mut repaired_clean, mut left, mut stopped) = (0, 0, 0, 0);
    let n = 300;
    for i in 0..n {
        let img = make_image(&bases, &parsed, image_seed(3, i));
        let sim = sim_from_bytes(&img.data).expect("sim");
        if std::env::var("DBG_IMG").ok() == Some(i.to_string()) {
            sim.save(std::path::Path::new("/tmp/dbg.img")).unwrap();
        }
        let ro = MountOptions { read_only: true, cache_nodes: 64, ..MountOptions::default() };
        let Ok(mut fs) = Fs::mount(Dev::Sim(AnySim::Nand(sim)), ro) else { continue };
        mounted += 1;
        match fs.repair(RepairLevel::All, ts, &mut |_, _| true) {
            Ok(rep) if rep.problems_after == 0 && rep.left == 0 => {
                let dev = match fs.unmount() {
                    Ok(d) => d,
                    Err((e, _)) => panic!("image {i} ({}): unmount after the repair: {e:?}", img.label),
                };
                let mut fs = match Fs::mount(dev, MountOptions { cache_nodes: 64, ..MountOptions::default() }) {
                    Ok(f) => f,
                    Err((e, _)) => panic!("image {i} ({}): remount after the repair: {e:?}", img.label),
                };
                let r = fs.fsck().unwrap_or_else(|e| panic!("image {i} ({}): fsck after the repair: {e:?}", img.label));
                assert_eq!(r.problems, 0, "image {i} ({}): {r:?}, fallback {:?}, damage {:?}", img.label, fs.checkpoint_fallback(), fs.log_damage());
                repaired_clean += 1;
            }
            Ok(_) => left += 1,
            Err(_) => stopped += 1,
        }
    }
    eprintln!(
        "repair of hostile images: {n} images, {mounted} mounted read-only, {repaired_clean} repaired to clean \
         (and clean after a read-write remount), {left} with repairs left, {stopped} stopped with an error"
    );
    assert!(repaired_clean > mounted / 2, "{repaired_clean} of {mounted}");
}
