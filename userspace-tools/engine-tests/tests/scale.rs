//! RAM stays bounded as the filesystem grows; mount work is bounded by the log since the last
//! checkpoint.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, MountOptions, ROOT_INO};
use ferrofs_engine_tests::*;

#[test]
fn index_cache_is_bounded_and_mount_replays_only_recent_log() {
    let cap = 32;
    let opts = MountOptions { cache_nodes: cap, ..Default::default() };
    let f = RamFlash::new_nand(128 * 1024, 256, 2048); // 32 MiB
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts).map_err(|e| e.0).unwrap();
    let d = fs.mkdir(ROOT_INO, b"many", 0o755, 0, 0, ts(1)).unwrap();
    let mut max_cached = 0;
    for i in 0..6000u32 {
        let f = fs.create(d.ino, format!("file-{i:05}").as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(2)).unwrap();
        fs.write(f.ino, 0, &i.to_le_bytes(), ts(2)).unwrap();
        max_cached = max_cached.max(fs.cached_nodes());
    }
    let big = fs.create(ROOT_INO, b"big", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(3)).unwrap();
    let chunk = vec![0x5Au8; 64 * 1024];
    for i in 0..160u64 {
        fs.write(big.ino, i * chunk.len() as u64, &chunk, ts(3)).unwrap();
        max_cached = max_cached.max(fs.cached_nodes());
    }
    assert!(max_cached <= cap, "cached {max_cached} > {cap}");
    // a clean unmount leaves nothing to replay
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts).map_err(|e| e.0).unwrap();
    assert_eq!(fs.stats().replayed, 0);
    // a few operations after the checkpoint, then a crash: only those are replayed
    for i in 0..10u32 {
        fs.create(ROOT_INO, format!("late{i}").as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(4)).unwrap();
    }
    fs.fsync(ROOT_INO).unwrap();
    let mut fs = Fs::mount(fs.into_flash(), opts).map_err(|e| e.0).unwrap();
    let replayed = fs.stats().replayed;
    assert!(replayed >= 30 && replayed < 100, "replayed {replayed}");
    assert!(fs.cached_nodes() <= cap * 8);
    // everything is there
    for i in (0..6000u32).step_by(97) {
        let ino = fs.lookup(d.ino, format!("file-{i:05}").as_bytes()).unwrap().ino;
        let mut b = [0u8; 4];
        fs.read(ino, 0, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), i);
    }
    let mut n = 0;
    fs.readdir(d.ino, 0, &mut |_, _, _, _| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 6002);
    assert_eq!(fs.lookup(ROOT_INO, b"big").unwrap().size, 160 * 64 * 1024);
    assert_consistent(&mut fs);
    assert!(fs.cached_nodes() <= cap * 8);
}

#[test]
fn log_since_checkpoint_is_bounded() {
    let opts = MountOptions { checkpoint_log_bytes: 256 * 1024, ..Default::default() };
    let f = RamFlash::new_nand(64 * 1024, 128, 2048);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, opts).map_err(|e| e.0).unwrap();
    let a = fs.create(ROOT_INO, b"hot", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
    let block = [9u8; 4096];
    for _ in 0..2000 {
        fs.write(a.ino, 0, &block, ts(2)).unwrap();
    }
    fs.fsync(a.ino).unwrap();
    let fs = Fs::mount(fs.into_flash(), opts).map_err(|e| e.0).unwrap();
    let replayed = fs.stats().replayed;
    // 256 KiB of log at most: about 60 data records and their inode updates
    assert!(replayed <= 140, "replayed {replayed} records");
}
