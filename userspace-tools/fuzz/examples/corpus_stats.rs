//! How deep a corpus gets: for every input of `corpus/<target>` (or the directory given), whether
//! the mount succeeded, the walk found inodes, `check()` agreed, the writes and the remount worked.
//! `cargo run --release --example corpus_stats -- mount_and_read [DIR]`

use std::path::PathBuf;

use ferrofs_engine::MountOptions;
use ferrofs_fuzz::{apply_patches, exercise, fix_crcs, flags, load_segments, record_seed, sim_from_bytes, Base, Outcome, RAW_LAYOUT};

fn outcome(target: &str, input: &[u8]) -> Outcome {
    if target == "mount_raw" {
        let l = RAW_LAYOUT;
        let mut data = vec![0xFFu8; l.device_bytes()];
        let n = input.len().min(data.len());
        data[..n].copy_from_slice(&input[..n]);
        return exercise(sim_from_bytes(l, &data), MountOptions { cache_nodes: 16, ..MountOptions::default() });
    }
    // same as run_patched, keeping the outcome
    let base = Base::patch_base();
    let l = base.layout;
    let f = input.first().copied().unwrap_or(0);
    let src = if f & flags::CRASHED != 0 { &base.crashed } else { &base.clean };
    let mut sim = src.clone();
    let mut data = src.data().to_vec();
    let touched = apply_patches(l, base, &mut data, input.get(1..).unwrap_or(&[]));
    if f & flags::FIX_CRC != 0 {
        for &s in &touched {
            fix_crcs(l, &mut data, s, record_seed());
        }
    }
    load_segments(&mut sim, l, &data, touched);
    let opts = MountOptions {
        cache_nodes: if f & flags::TINY_CACHE != 0 { 4 } else { 64 },
        read_only: f & flags::READ_ONLY != 0,
        ..MountOptions::default()
    };
    exercise(sim, opts)
}

fn main() {
    let target = std::env::args().nth(1).unwrap_or_else(|| "mount_and_read".into());
    let dir = std::env::args().nth(2).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("corpus").join(&target));
    let (mut n, mut mounted, mut walked, mut consistent, mut wrote, mut remounted, mut lost) = (0, 0, 0, 0, 0, 0, 0);
    let (mut inconsistent_fixed, mut mismatch, mut mismatch_fixed) = (0, 0, 0);
    let mut files: Vec<_> = std::fs::read_dir(&dir).expect("corpus dir").flatten().map(|e| e.path()).collect();
    files.sort();
    for p in files {
        let Ok(input) = std::fs::read(&p) else { continue };
        let o = outcome(&target, &input);
        n += 1;
        mounted += usize::from(o.mounted);
        walked += usize::from(o.visited > 1);
        consistent += usize::from(o.consistent);
        wrote += usize::from(o.wrote);
        remounted += usize::from(o.remounted);
        // unmounted cleanly after writing, yet the engine's own image does not mount again
        lost += usize::from(o.wrote && !o.remounted);
        let fixed = target == "mount_and_read" && input.first().is_some_and(|f| f & flags::FIX_CRC != 0);
        if o.mounted && !o.consistent && fixed {
            inconsistent_fixed += 1;
        }
        if o.mismatch && std::env::var_os("VERBOSE").is_some() {
            println!("check() mismatch: {}", p.display());
        }
        mismatch += usize::from(o.mismatch);
        mismatch_fixed += usize::from(o.mismatch && fixed);
    }
    println!(
        "{target}: {n} inputs; mounted {mounted}, walked {walked}, check() clean {consistent}, writes+sync+unmount ok {wrote}, remounted {remounted}, unmount ok but remount failed {lost}; mounted but check() not clean with the CRC fix-up: {inconsistent_fixed}; check() mismatches {mismatch} (with the fix-up {mismatch_fixed})"
    );
}
