//! Background GC in bounded steps (`gc_step_bounded`): the same result as the whole-segment
//! `gc_step`, with other operations between the steps, and victims that go away meanwhile.

use ferrofs_engine::{GcProgress, MountOptions, ROOT_INO};
use ferrofs_engine_tests::*;

/// 20 files of 48 KiB: 22 no longer fit once the capacity counted segments by the block
/// records they hold, and the last ones were short writes the model did not see (the fill now
/// checks every write's length).
const NFILES: usize = 20;
const FSIZE: usize = 48 * 1024;

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 32, ..Default::default() }
}

/// A small filesystem (64 segments of 32 KiB) with files overwritten at random, so that many
/// segments are partly dead and free space is short (the background GC has work). Returns the
/// unmounted image, the inode numbers and the files' contents.
fn churned_image(seed: u64) -> (RamFlash, Vec<u64>, Vec<Vec<u8>>) {
    let f = RamFlash::new_nand(32 * 1024, 64, 512);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
    let mut rng = Rng::new(seed);
    let mut model = vec![vec![0u8; FSIZE]; NFILES];
    let mut inos = Vec::new();
    for (i, m) in model.iter_mut().enumerate() {
        let f = fs.create(ROOT_INO, format!("f{i}").as_bytes(), &reg(), ts(1)).unwrap();
        rng.fill(m);
        assert_eq!(fs.write(f.ino, 0, m, ts(2)).unwrap(), FSIZE, "file {i}");
        inos.push(f.ino);
    }
    for _ in 0..400 {
        let i = rng.below(NFILES as u64) as usize;
        let off = (rng.below((FSIZE / 4096) as u64) * 4096) as usize;
        let mut d = [0u8; 4096];
        rng.fill(&mut d);
        assert_eq!(fs.write(inos[i], off as u64, &d, ts(3)).unwrap(), 4096);
        model[i][off..off + 4096].copy_from_slice(&d);
    }
    // delete every other file: most segments end up about half dead, victims the background
    // GC takes (it moves only segments at most half live while free space is short)
    let mut keep_inos = Vec::new();
    let mut keep = Vec::new();
    for (i, (ino, m)) in inos.into_iter().zip(model).enumerate() {
        if i % 2 == 1 {
            fs.unlink(ROOT_INO, format!("f{i}").as_bytes(), ts(4)).unwrap();
            fs.evict(ino).unwrap();
        } else {
            keep_inos.push(ino);
            keep.push(m);
        }
    }
    (fs.unmount().map_err(|e| e.0).unwrap(), keep_inos, keep)
}

fn mount(f: RamFlash) -> Fs {
    Fs::mount(f, opts()).map_err(|e| e.0).unwrap()
}

fn check_files(fs: &mut Fs, inos: &[u64], model: &[Vec<u8>]) {
    for (i, m) in model.iter().enumerate() {
        let mut b = vec![0u8; m.len()];
        let n = fs.read(inos[i], 0, &mut b).unwrap();
        assert_eq!(n, m.len(), "file {i} length");
        assert!(b == *m, "file {i} contents");
    }
}

/// Run the stepped GC to the end of one unit of work; returns (result, steps taken).
fn stepped_unit(fs: &mut Fs, background: bool, max_bytes: u32) -> (GcProgress, u32) {
    let mut cur = None;
    let mut steps = 0u32;
    loop {
        steps += 1;
        assert!(steps < 100_000, "stepped GC does not end");
        match fs.gc_step_bounded(background, cur, max_bytes).unwrap() {
            GcProgress::More(c) => cur = Some(c),
            p => return (p, steps),
        }
    }
}

#[test]
fn stepped_gc_writes_exactly_what_whole_segment_gc_writes() {
    for (seed, background, max_bytes) in [(1u64, true, 1u32), (2, true, 2048), (3, true, 9000), (4, true, 1 << 20), (5, false, 1), (6, false, 4000)] {
        let (img, inos, model) = churned_image(seed);
        // background: static wear levelling on at any spread, so the background GC has victims
        let o = if background { MountOptions { wear_threshold: 0, ..opts() } } else { opts() };
        let mut whole = Fs::mount(img.clone(), o.clone()).map_err(|e| e.0).unwrap();
        let mut stepped = Fs::mount(img, o).map_err(|e| e.0).unwrap();
        let mut units = 0u32;
        let mut more_steps = 0u32;
        loop {
            let w = whole.gc_step(background).unwrap();
            let (p, steps) = stepped_unit(&mut stepped, background, max_bytes);
            assert_eq!(w, p != GcProgress::Idle, "seed {seed}: unit {units}: gc_step did {w}, stepped {p:?}");
            if !w {
                break;
            }
            units += 1;
            more_steps += steps - 1;
            if units == 40 {
                break;
            }
            // the same appends: the same flash contents and counters after every unit
            assert!(whole.flash().raw() == stepped.flash().raw(), "seed {seed}: flash differs after unit {units}");
            assert_eq!(whole.stats(), stepped.stats(), "seed {seed}: unit {units}");
        }
        eprintln!("seed {seed} background {background} max_bytes {max_bytes}: {units} units, {more_steps} extra steps, {:?}", whole.stats());
        assert!(units > 0, "seed {seed}: the image gave the background GC nothing to do");
        assert!(whole.stats().gc_records > 0, "seed {seed}: {:?}", whole.stats());
        if max_bytes < 4096 {
            // a 32 KiB victim takes several steps of a few KiB
            assert!(more_steps >= units, "seed {seed}: {units} units in {more_steps} extra steps");
        }
        whole.sync().unwrap();
        stepped.sync().unwrap();
        assert!(whole.flash().raw() == stepped.flash().raw(), "seed {seed}: flash differs after sync");
        for fs in [whole, stepped] {
            let mut fs = mount(fs.unmount().map_err(|e| e.0).unwrap());
            assert_consistent(&mut fs);
            check_files(&mut fs, &inos, &model);
        }
    }
}

#[test]
fn stepped_gc_with_writes_and_deletes_between_steps() {
    let (img, mut inos, mut model) = churned_image(11);
    let mut fs = Fs::mount(img, MountOptions { wear_threshold: 0, ..opts() }).map_err(|e| e.0).unwrap();
    let mut stepped_records = 0u64;
    let mut rng = Rng::new(99);
    let mut cur = None;
    let mut dones = 0u32;
    let mut steps = 0u32;
    let gc0 = fs.stats().gc_records;
    for round in 0..3000 {
        let r0 = fs.stats().gc_records;
        let p = fs.gc_step_bounded(true, cur, 1500).unwrap();
        stepped_records += fs.stats().gc_records - r0;
        match p {
            GcProgress::More(c) => cur = Some(c),
            GcProgress::Done => {
                cur = None;
                dones += 1;
            }
            GcProgress::Idle => cur = None,
        }
        steps += 1;
        // something else takes the lock between two steps
        match rng.below(10) {
            0..=6 => {
                let i = rng.below(inos.len() as u64) as usize;
                let off = (rng.below((FSIZE / 4096) as u64) * 4096) as usize;
                let mut d = [0u8; 4096];
                rng.fill(&mut d);
                fs.write(inos[i], off as u64, &d, ts(4)).unwrap();
                model[i][off..off + 4096].copy_from_slice(&d);
            }
            7 if inos.len() > 4 => {
                // delete a file (its records in the victim die), make a new one
                let i = rng.below(inos.len() as u64) as usize;
                let name = fs_name(&mut fs, inos[i]);
                fs.unlink(ROOT_INO, name.as_bytes(), ts(5)).unwrap();
                fs.evict(inos[i]).unwrap();
                inos.remove(i);
                model.remove(i);
                let f = fs.create(ROOT_INO, format!("n{round}").as_bytes(), &reg(), ts(5)).unwrap();
                let mut m = vec![0u8; FSIZE];
                rng.fill(&mut m);
                fs.write(f.ino, 0, &m, ts(5)).unwrap();
                inos.push(f.ino);
                model.push(m);
            }
            8 => {
                // the foreground GC may take the very victim being stepped
                fs.gc_step(false).unwrap();
            }
            _ => {
                if round % 50 == 0 {
                    fs.sync().unwrap();
                }
            }
        }
    }
    eprintln!("{dones} units in {steps} steps, {stepped_records} records moved by them");
    assert!(dones > 0 && stepped_records > 0 && fs.stats().gc_records > gc0, "dones {dones}, steps {steps}, {:?}", fs.stats());
    assert_consistent(&mut fs);
    check_files(&mut fs, &inos, &model);
    let mut fs = mount(fs.unmount().map_err(|e| e.0).unwrap());
    assert_consistent(&mut fs);
    check_files(&mut fs, &inos, &model);
}

/// A cursor whose victim was freed and reused meanwhile ends quietly, with nothing moved.
#[test]
fn stale_cursor_ends_without_work() {
    let (img, inos, model) = churned_image(21);
    let mut fs = Fs::mount(img, MountOptions { wear_threshold: 0, ..opts() }).map_err(|e| e.0).unwrap();
    let c = loop {
        match fs.gc_step_bounded(true, None, 1).unwrap() {
            GcProgress::More(c) => break c,
            GcProgress::Done => continue,
            GcProgress::Idle => panic!("no victim to step"),
        }
    };
    // finish every victim the whole-segment way, then checkpoint: the cursor's segment is freed
    for _ in 0..200 {
        let si = fs.segment_info(c.segment()).unwrap();
        if si.seq != c.segment_seq() {
            break;
        }
        fs.gc_step(true).unwrap();
        fs.gc_step(false).unwrap();
        fs.sync().unwrap();
    }
    let si = fs.segment_info(c.segment()).unwrap();
    assert!(si.seq != c.segment_seq(), "the victim was never freed: {si:?}");
    let before = fs.stats();
    let raw = fs.flash().raw().to_vec();
    assert_eq!(fs.gc_step_bounded(true, Some(c), 1).unwrap(), GcProgress::Done);
    assert_eq!(fs.stats(), before);
    assert!(fs.flash().raw() == &raw[..], "a stale cursor wrote to the flash");
    assert_consistent(&mut fs);
    check_files(&mut fs, &inos, &model);
}

fn fs_name(fs: &mut Fs, ino: u64) -> String {
    let mut found = None;
    fs.readdir(ROOT_INO, 0, &mut |name, i, _t, _c| {
        if i == ino {
            found = Some(String::from_utf8_lossy(name).into_owned());
        }
        true
    })
    .unwrap();
    found.expect("name of inode")
}
