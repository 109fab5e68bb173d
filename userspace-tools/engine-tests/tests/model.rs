//! Randomized model-based test: random operations against the engine and an in-memory model,
//! with clean remounts and crashes after fsync, under GC pressure and a tiny index cache.

use ferrofs_engine::{MountOptions, ROOT_INO};
use ferrofs_engine_tests::modelrun::{namespace_step, verify, Model};
use ferrofs_engine_tests::*;

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 24, ..Default::default() }
}

fn mount(f: RamFlash) -> Fs {
    Fs::mount(f, opts()).map_err(|e| e.0).expect("mount")
}

fn run(seed: u64, steps: usize) {
    let mut rng = Rng::new(seed);
    let f = RamFlash::new_nand(32 * 1024, 160, 512);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = mount(f);
    let mut m = Model::default();
    let mut t = 1;
    for step in 0..steps {
        t += 1;
        let when = format!("seed {seed} step {step}");
        if let Some(rest) = namespace_step(&mut fs, &mut m, &mut rng, t, &when) {
            match rest.roll {
                87..=89 => {
                    fs = remount_with(fs);
                    verify(&mut fs, &m, &when);
                }
                90..=92 => {
                    // a crash right after an fsync: everything stays
                    fs.fsync(ROOT_INO).unwrap();
                    fs = mount(fs.into_flash());
                    verify(&mut fs, &m, &format!("{when} (after fsync and a crash)"));
                }
                93..=96 => {
                    let _ = fs.gc_step(rng.below(2) == 0).unwrap();
                }
                _ => fs.sync().unwrap(),
            }
        }
        if step % 50 == 0 {
            verify(&mut fs, &m, &when);
        }
    }
    verify(&mut fs, &m, &format!("seed {seed} end"));
    let st = fs.stats();
    eprintln!("seed {seed}: {st:?}");
    let mut fs = remount_with(fs);
    verify(&mut fs, &m, &format!("seed {seed} end, remounted"));
}

fn remount_with(fs: Fs) -> Fs {
    mount(fs.unmount().map_err(|e| e.0).unwrap())
}

#[test]
fn model_seed_1() {
    run(1, 1500);
}

#[test]
fn model_seed_2() {
    run(2, 1500);
}

#[test]
fn model_seed_3() {
    run(3, 1500);
}

#[test]
fn model_many_seeds_short() {
    for s in 10..20 {
        run(s, 300);
    }
}
