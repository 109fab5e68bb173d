//! The mount after a clean unmount writes what changed, not the whole segment table: its
//! checkpoint names the previous checkpoint's records again for the chunks that did not change
//! (the twin map of the checkpoint it mounted says which are twins), so what it programs does
//! not grow with the device. Cuts at every device operation of such a mount, and of the work
//! after it, recover a state the operations allow.

use std::collections::BTreeSet;

use ferrofs_engine::{MountOptions, ROOT_INO};
use ferrofs_engine_tests::crashcheck::{check_after_cut, CutCheck, Oracle, WriteShape};
use ferrofs_engine_tests::crashload::read_state;
use ferrofs_engine_tests::snapshot::snapshot;
use ferrofs_engine_tests::*;

const SEG: u32 = 16 * 1024;

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 32, ..Default::default() }
}

/// A filesystem of `segments` segments of 16 KiB holding the same files whatever its size,
/// with a few checkpoints, the last of them what `unmount` writes (a checkpoint, nothing after
/// it): the medium and the places of the SEGTAB records that last checkpoint names.
fn image(segments: u32) -> (RamFlash, BTreeSet<(u32, u32)>) {
    let f = RamFlash::new_nand(SEG, segments, 512);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
    let mut rng = Rng::new(7);
    for i in 0..24 {
        let f = fs.create(ROOT_INO, format!("f{i}").as_bytes(), &reg(), ts(1)).unwrap();
        let mut d = vec![0u8; 4096 * (1 + rng.below(12) as usize)];
        rng.fill(&mut d);
        fs.write(f.ino, 0, &d, ts(1)).unwrap();
        if i % 8 == 7 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    // the unmount's checkpoint
    fs.sync().unwrap();
    let last = named(&mut fs);
    (fs.into_flash(), last)
}

/// The places of the SEGTAB records the newest checkpoint names.
fn named(fs: &mut Fs) -> BTreeSet<(u32, u32)> {
    ferrofs_engine_tests::named_segtab_places(fs, SEG as usize)
}

/// On 40 chunks of segment table (main at e5f6d2e: the mount programmed 151 040 bytes there,
/// the whole table, against 13 312 on 3 chunks), the clean mount programs about what it programs on
/// 3 chunks; its checkpoint names none of the records of the checkpoint it mounted, some of
/// the one before, and everything survives a crash right after the mount and a remount.
#[test]
fn a_clean_mount_programs_what_changed_not_the_table() {
    let mut programmed = Vec::new();
    // 3 segment-table chunks (600 segments, 9.4 MiB), then 40 (8000 segments, 125 MiB)
    for segments in [600u32, 8000] {
        let (img, loaded) = image(segments);
        let p0 = img.programmed;
        let mut fs = Fs::mount(img, opts()).map_err(|e| e.0).unwrap();
        let bytes = fs.flash().programmed - p0;
        let mine = named(&mut fs);
        let chunks = segments.div_ceil(200) as usize;
        eprintln!("{segments} segments: the clean mount programmed {bytes} bytes, its checkpoint names {} records of its own or earlier ones", mine.len());
        programmed.push(bytes);
        assert!(mine.len() >= chunks, "{mine:?}");
        assert!(mine.is_disjoint(&loaded), "the mount's checkpoint names records of the checkpoint it mounted");
        assert_fsck(&mut fs);
        let expect = read_state(&mut fs);
        let mut fs = Fs::mount(fs.into_flash(), opts()).map_err(|e| e.0).unwrap();
        assert_eq!(fs.checkpoint_fallback(), None);
        assert!(read_state(&mut fs) == expect);
        let mut fs = Fs::mount(fs.unmount().map_err(|e| e.0).unwrap(), opts()).map_err(|e| e.0).unwrap();
        assert!(read_state(&mut fs) == expect);
        assert_fsck(&mut fs);
    }
    assert!(programmed[1] <= programmed[0] + 8192, "the clean mount programmed {programmed:?} bytes (600 and 8000 segments)");
    assert!(programmed[1] <= 32 * 1024, "the clean mount on 8000 segments programmed {} bytes", programmed[1]);
}

/// What the workload after the mount does.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// Overwrite file `f{0}` at block `1` with 4 KiB of byte `2`.
    Write(u32, u64, u8),
    /// fsync file `f{0}`.
    Fsync(u32),
    /// Checkpoint.
    Sync,
}

const OPS: [Op; 7] = [Op::Write(3, 0, 0x11), Op::Fsync(3), Op::Sync, Op::Write(250, 1, 0x22), Op::Write(5, 0, 0x33), Op::Sync, Op::Sync];

fn ino(fs: &mut Fs, f: u32) -> u64 {
    fs.lookup(ROOT_INO, format!("f{}", f % 24).as_bytes()).unwrap().ino
}

fn run(fs: &mut Fs, op: Op) -> Result<(), ferrofs_engine::Error> {
    match op {
        Op::Write(f, b, v) => {
            let i = ino(fs, f);
            fs.write(i, b * 4096, &[v; 4096], ts(5)).map(|_| ())
        }
        Op::Fsync(f) => {
            let i = ino(fs, f);
            fs.fsync(i)
        }
        Op::Sync => fs.sync(),
    }
}

/// A cut at every device operation of the mount after a clean unmount (whose checkpoint names
/// records of the checkpoint before the one it mounted) and of the writes and checkpoints
/// after it, both with the interrupted program torn and lost; every 3rd with each device
/// operation of the recovery cut too: every recovery is a state the operations allow, passes
/// fsck, keeps writing, and the state of the checkpoint the clean mount loaded is never lost.
#[test]
fn a_cut_at_every_device_operation_of_a_clean_mount_and_after() {
    let (tpl, _) = image(600);
    // the oracle: the states of an uninterrupted run
    let mut fs = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
    let mut o = Oracle { states: vec![snapshot(&mut fs).unwrap()], ..Default::default() };
    for op in OPS {
        o.partial.push(match op {
            Op::Write(f, b, _) => Some(WriteShape { ino: ino(&mut fs, f), off: b * 4096, end: b * 4096 + 4096, intermediate: true }),
            _ => None,
        });
        o.persists.push(!matches!(op, Op::Write(..)));
        run(&mut fs, op).unwrap();
        o.states.push(snapshot(&mut fs).unwrap());
    }
    let total = {
        let f = fs.into_flash();
        f.writes + f.erases.iter().map(|&e| u64::from(e)).sum::<u64>() - tpl.writes - tpl.erases.iter().map(|&e| u64::from(e)).sum::<u64>()
    };
    let (mut checked, mut in_mount, mut failures) = (0u64, 0u64, Vec::new());
    for tear in [false, true] {
        for n in 0..total + 2 {
            let mut f = tpl.clone();
            f.cut_in = Some(n);
            f.tear = tear;
            let (f, done) = match Fs::mount(f, opts()) {
                Err((_, f)) => {
                    assert!(f.dead, "cut {n}: the mount failed without a cut");
                    in_mount += 1;
                    (f, 0)
                }
                Ok(mut fs) => {
                    let mut done = 0;
                    for op in OPS {
                        if run(&mut fs, op).is_err() {
                            break;
                        }
                        done += 1;
                    }
                    (fs.into_flash(), done)
                }
            };
            if !f.dead {
                continue;
            }
            let cc = CutCheck { opts: opts(), oracle: &o, recovery_cuts: n % 3 == 0 };
            match check_after_cut(&cc, f, done) {
                Ok(k) => checked += k,
                Err(e) => failures.push(format!("cut {n} tear {tear} after {done} operations: {e}")),
            }
        }
    }
    eprintln!("{checked} cut points checked ({in_mount} in the clean mount), {} failures", failures.len());
    assert!(in_mount > 4, "{in_mount}");
    assert!(failures.is_empty(), "{failures:#?}");
}
