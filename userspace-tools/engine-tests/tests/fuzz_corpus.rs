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
    let mut b = run_all("mount_raw", fuzz::run_raw);
    // mount_raw's seeds are not committed (run.sh regenerates them): build them here, so that
    // the target's body always runs on the valid images at least
    let raw = fuzz::Base::build(fuzz::RAW_LAYOUT);
    for img in [raw.clean.data(), raw.crashed.data()] {
        assert!(std::panic::catch_unwind(|| fuzz::run_raw(img)).is_ok(), "mount_raw panics on its seed images");
        b += 1;
    }
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

/// Runs `body` on its own thread; `None` if it has not finished after `secs` seconds (the
/// thread is left behind: the test fails anyway).
fn within<T: Send + 'static>(secs: u64, body: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(body());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs)).ok()
}

/// Deletes everything under `dir` it can (errors ignored): every key range of every inode
/// goes through `destroy_inode`'s delete loop.
fn delete_tree(fs: &mut fuzz::Fs, dir: u64, depth: u32) {
    use ferrofs_engine::{FileType, Timespec};
    let mut ents: Vec<(Vec<u8>, u64, FileType)> = Vec::new();
    let mut cookie = 2;
    // bounded: a readdir that does not advance must not hang the test either
    for _ in 0..10_000 {
        let mut last = None;
        let r = fs.readdir(dir, cookie, &mut |name, ino, ft, next| {
            ents.push((name.to_vec(), ino, ft));
            last = Some(next);
            true
        });
        match (r, last) {
            (Ok(()), Some(n)) if n > cookie => cookie = n,
            _ => break,
        }
    }
    let now = Timespec { sec: 20_000, nsec: 0 };
    for (name, ino, ft) in ents {
        if ft == FileType::Dir {
            if depth < 16 {
                delete_tree(fs, ino, depth + 1);
            }
            let _ = fs.rmdir(dir, &name, now);
        } else if fs.unlink(dir, &name, now).is_ok() {
            let _ = fs.evict(ino);
        }
    }
}

/// `make hostile IMAGES=5000 SEED=21` image 2128 (tree-tail:flipfix-index3) hung the guest: a
/// bit flip (CRC fixed) in the root index node raised the last child's separator key far above
/// the keys that child holds. Lookups then routed those keys to the child before it, so
/// `remove` never found the key `next` kept returning and `idx_del_range` (unlink/evict of an
/// inode in that leaf) looped forever. The same forgery here, on every internal index node of
/// the tree-tail base: mounting, walking, writing, deleting everything and unmounting must
/// finish (with errors, the tree is corrupt).
#[test]
fn forged_separator_key_does_not_hang() {
    use ferrofs_engine::format::{rtype, REC_HDR};
    use ferrofs_tools::hostile::{build_bases, fix_rec, parse, sim_from_bytes};
    let bases = build_bases(21).expect("hostile bases");
    let base = bases.iter().find(|b| b.name == "tree-tail").expect("tree-tail base");
    let p = parse(&base.data).expect("base parses");
    let mut data = base.data.clone();
    let mut forged = 0;
    for r in p.recs.iter().filter(|r| r.hdr.rtype == rtype::INDEX) {
        let pay = r.off + REC_HDR;
        let (level, count) = (data[pay], u16::from_le_bytes([data[pay + 1], data[pay + 2]]) as usize);
        // leaves (a compact one starts with its marker) hold no separator keys
        if level == 0 || level == ferrofs_engine::format::INDEX_COMPACT_LEAF || count < 2 {
            continue;
        }
        // the last entry's key: owner inode (u64 LE) first; bit 62 as in image 2128
        let ino_at = pay + 3 + (count - 1) * (17 + 12);
        data[ino_at + 7] |= 0x40;
        fix_rec(&mut data, r.off, p.seed);
        forged += 1;
    }
    assert!(forged > 0, "the tree-tail base has no internal index node to forge");
    let img = data.clone();
    let out = within(60, move || {
        let o = fuzz::exercise(sim_from_bytes(&img).expect("sim"), MountOptions { cache_nodes: 32, ..MountOptions::default() });
        let mut fs = fuzz::Fs::mount(sim_from_bytes(&img).expect("sim"), MountOptions { cache_nodes: 32, ..MountOptions::default() })
            .expect("the forged image mounts (only a separator key changed)");
        delete_tree(&mut fs, ferrofs_engine::ROOT_INO, 0);
        let _ = fs.unmount();
        o
    });
    let o = out.expect("the engine hangs on a forged index separator key");
    eprintln!("forged separator keys ({forged} nodes): {o:?}");
    assert!(o.mounted, "{o:?}");
}
