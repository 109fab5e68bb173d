//! Replays every input under `regressions/<target>/` (crashes found by the fuzzer, minimized)
//! and the seed corpora through the targets' code, without libFuzzer. Each must run without panic.
//! Also checks the base images and the CRC fix-up against the engine.

use std::path::Path;

use ferrofs_engine::MountOptions;
use ferrofs_fuzz::{exercise, fix_crcs, record_seed, run_patched, run_raw, sim_from_bytes, Base, PATCH_LAYOUT, RAW_LAYOUT};

fn inputs(dir: &str) -> Vec<(String, Vec<u8>)> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&d) {
        for e in rd.flatten() {
            if e.path().is_file() {
                v.push((e.path().display().to_string(), std::fs::read(e.path()).expect("read input")));
            }
        }
    }
    v.sort();
    v
}

#[test]
fn base_images_mount_walk_write_and_remount() {
    for l in [PATCH_LAYOUT, RAW_LAYOUT] {
        let b = Base::build(l);
        for sim in [b.clean.clone(), b.crashed.clone()] {
            let o = exercise(sim, MountOptions::default());
            assert!(o.mounted && o.consistent && o.wrote && o.remounted, "{l:?}: {o:?}");
            assert!(o.visited > 20 && o.bytes_read > 10_000, "{l:?}: {o:?}");
            assert!(o.visited_after >= o.visited, "{l:?}: {o:?}");
        }
    }
}

#[test]
fn crc_fixup_is_identity_on_valid_images() {
    for l in [PATCH_LAYOUT, RAW_LAYOUT] {
        let b = Base::build(l);
        for sim in [&b.clean, &b.crashed] {
            let mut d = sim.data().to_vec();
            for s in 0..l.blocks {
                fix_crcs(l, &mut d, s, record_seed());
            }
            assert!(d == sim.data(), "{l:?}: the fix-up changed a valid image");
            // and the raw round trip mounts
            let o = exercise(sim_from_bytes(l, &d), MountOptions::default());
            assert!(o.mounted && o.remounted, "{o:?}");
        }
    }
}

#[test]
fn regressions_and_seeds_run_clean() {
    for (name, data) in inputs("regressions/mount_and_read").into_iter().chain(inputs("corpus/mount_and_read")) {
        eprintln!("mount_and_read {name}");
        run_patched(&data);
    }
    for (name, data) in inputs("regressions/mount_raw").into_iter().chain(inputs("corpus/mount_raw")) {
        eprintln!("mount_raw {name}");
        run_raw(&data);
    }
}
