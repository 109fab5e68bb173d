//! The fuzz targets' bodies in the workspace's `cargo test`: every file of
//! `fuzz/regressions/<target>/` and `fuzz/corpus/<target>/` runs through `run_patched`
//! (`mount_and_read`) or `run_raw` (`mount_raw`), the code libFuzzer runs (`fuzz/src/lib.rs`,
//! included here, not copied: the fuzz crate itself is outside the workspace because of
//! libfuzzer-sys). Also the hostile images of `make hostile` (`ferrofs_tools::hostile`) through
//! the same `exercise` body: mount, walk, read, write, unmount, remount must never panic.

#[path = "../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod fuzz;

use std::path::Path;

use ferrofs_engine::MountOptions;

fn inputs(dir: &str) -> Vec<(String, Vec<u8>)> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz").join(dir);
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&d) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_file() && p.file_name().is_some_and(|n| !n.to_string_lossy().starts_with('.')) {
                v.push((p.display().to_string(), std::fs::read(&p).expect("read fuzz input")));
            }
        }
    }
    v.sort();
    v
}

fn run_all(target: &str, body: fn(&[u8])) -> usize {
    let mut n = 0;
    let mut failed = Vec::new();
    for (name, data) in inputs(&format!("regressions/{target}")).into_iter().chain(inputs(&format!("corpus/{target}"))) {
        n += 1;
        if std::panic::catch_unwind(|| body(&data)).is_err() {
            failed.push(name);
        }
    }
    assert!(failed.is_empty(), "{target}: these inputs panic: {failed:?}");
    n
}

#[test]
fn fuzz_regressions_and_corpus_run_clean() {
    let a = run_all("mount_and_read", fuzz::run_patched);
    let b = run_all("mount_raw", fuzz::run_raw);
    eprintln!("fuzz corpus: {a} mount_and_read inputs, {b} mount_raw inputs");
    // the committed seed corpus must be there: an empty run proves nothing
    assert!(a >= 10, "only {a} mount_and_read inputs found under userspace-tools/fuzz");
}

#[test]
fn hostile_images_in_the_engine() {
    use ferrofs_tools::hostile::{build_bases, image_seed, make_image, parse, sim_from_bytes};
    let n: u32 = std::env::var("FERROFS_HOSTILE_ENGINE_IMAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let master: u64 = std::env::var("FERROFS_HOSTILE_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let bases = build_bases(master).expect("hostile bases");
    let parsed: Vec<_> = bases.iter().map(|b| parse(&b.data).expect("base parses")).collect();
    // the bases themselves are sound
    for b in &bases {
        let o = fuzz::exercise(sim_from_bytes(&b.data).expect("sim"), MountOptions::default());
        assert!(o.mounted && o.consistent && o.wrote && o.remounted && o.visited > 10, "base {}: {o:?}", b.name);
    }
    let mut mounted = 0;
    let mut failed = Vec::new();
    for i in 0..n {
        let img = make_image(&bases, &parsed, image_seed(master, i));
        let sim = sim_from_bytes(&img.data).expect("sim");
        match std::panic::catch_unwind(move || fuzz::exercise(sim, MountOptions { cache_nodes: 32, ..MountOptions::default() })) {
            Ok(o) => mounted += usize::from(o.mounted),
            Err(_) => failed.push(format!("image {i} seed {:#x} {}", img.seed, img.label)),
        }
    }
    eprintln!("hostile images in the engine: {n} tried, {mounted} mounted, {} panics", failed.len());
    assert!(failed.is_empty(), "engine panics on hostile images (master seed {master}): {failed:#?}");
    assert!(mounted > 0 && mounted < n as usize, "{mounted} of {n} mounted: the mutations do not bite");
}
