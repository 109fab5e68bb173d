//! Power-cut recovery: enumerate cut points over a workload of single-operation phases, each
//! followed by fsync (or a checkpoint). After a cut, mount must succeed, the index must agree
//! with the segment table, and the visible state must be the state after the last completed
//! phase or after the one in progress.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, FlashKind, MountOptions, ROOT_INO};
use ferrofs_engine_tests::simcut::prepare;
use ferrofs_engine_tests::crashcheck::Oracle;
use ferrofs_engine_tests::crashload::*;
use ferrofs_engine_tests::snapshot::snapshot;
use ferrofs_engine_tests::*;

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 24, ..Default::default() }
}

fn template(kind: FlashKind) -> RamFlash {
    prepare(RamFlash::with_kind(kind, 32 * 1024, 48, 512))
}

/// Run the workload with a cut after `n` flash operations. Returns the number of phases
/// completed and whether the cut happened.
fn run_with_cut(tpl: &RamFlash, ops: &[Op], n: Option<u64>) -> (RamFlash, usize, bool) {
    let mut fs = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
    fs.flash().cut_in = n;
    let mut done = 0;
    for (i, op) in ops.iter().enumerate() {
        match apply_fs(&mut fs, op, i as i64 + 10) {
            Ok(()) => done += 1,
            Err(e) => {
                assert!(fs.flash().dead, "op {i} {op:?} failed without a power cut: {e:?}");
                return (fs.into_flash(), done, true);
            }
        }
    }
    let cut = fs.flash().dead;
    (fs.into_flash(), done, cut)
}

fn check_recovered(mut f: RamFlash, done: usize, o: &Oracle, label: &str, second_cut: Option<u64>) {
    f.power_on();
    if let Some(m) = second_cut {
        // cut again during recovery
        f.cut_in = Some(m);
        match Fs::mount(f, opts()) {
            Ok(fs) => {
                f = fs.into_flash();
            }
            Err((_, back)) => {
                f = back;
            }
        }
        f.power_on();
    }
    let mut fs = match Fs::mount(f, opts()) {
        Ok(fs) => fs,
        Err((e, _)) => panic!("{label}: mount failed: {e:?}"),
    };
    assert_consistent(&mut fs);
    let got = snapshot(&mut fs).unwrap();
    if let Err(e) = o.check(done, &got) {
        panic!("{label}: state after {done} phases: {e}");
    }
    // the recovered filesystem keeps working
    let f2 = fs.create(ROOT_INO, b"after-recovery", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1000)).unwrap();
    fs.write(f2.ino, 0, &[1u8; 9000], ts(1000)).unwrap();
    let mut fs = remount(fs);
    assert_eq!(fs.lookup(ROOT_INO, b"after-recovery").unwrap().size, 9000);
    assert_consistent(&mut fs);
}

fn enumerate(kind: FlashKind, seed: u64) {
    let tpl = template(kind);
    let ops = workload(seed);
    let base = {
        let mut fs = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
        read_state(&mut fs)
    };
    let o = live_oracle(Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap(), &ops, &states(&base, &ops));
    if std::env::var("PC_DEBUG").is_ok() {
        for (i, o) in ops.iter().enumerate() {
            eprintln!("{i}: {o:?}");
        }
    }
    // how many flash operations does the full run take?
    let (f, done, cut) = run_with_cut(&tpl, &ops, None);
    assert!(!cut);
    assert_eq!(done, ops.len());
    let total = f.writes + f.erases.iter().map(|&e| u64::from(e)).sum::<u64>();
    eprintln!("workload: {} phases, about {total} flash operations", ops.len());
    let mut n = 0u64;
    let mut runs = 0;
    while n < total {
        let (f, done, cut) = run_with_cut(&tpl, &ops, Some(n));
        if !cut {
            break;
        }
        let second = if n % 7 == 3 { Some(n % 11) } else { None };
        check_recovered(f, done, &o, &format!("cut at {n}"), second);
        runs += 1;
        n += 1;
    }
    eprintln!("{kind:?} seed {seed}: {runs} power cuts verified");
    assert!(runs > 100);
}

#[test]
fn power_cut_enumeration_nand() {
    enumerate(FlashKind::Nand, 42);
}

#[test]
fn power_cut_enumeration_nand_seed2() {
    enumerate(FlashKind::Nand, 4242);
}

#[test]
fn power_cut_enumeration_block_stale_discard() {
    enumerate(FlashKind::Block, 77);
}
