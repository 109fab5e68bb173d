//! Deletion on a filesystem filled to ENOSPC: whatever filled it (big files, many small files
//! in directories, a few files overwritten at random, big xattrs rewritten at random), on every
//! geometry and replay window, unlink + evict, truncate to 0 and rmdir must succeed with a few
//! checkpoints at most, the space must come back, and the filesystem must stay consistent
//! across remounts (docs/design.md "Space, garbage collection, wear": what guarantees deletion).

use ferrofs_engine::format::S_IFDIR;
use ferrofs_engine::{Error, FormatOptions, MountOptions, SetAttr, ROOT_INO};
use ferrofs_engine_tests::*;

/// One geometry: segment size, page (write unit), device size, replay window, index cache.
#[derive(Clone, Copy, Debug)]
struct Geo {
    seg: u32,
    page: u32,
    dev_mib: u32,
    cp_mib: u64,
    cache: usize,
    /// Data alignment (`FormatOptions::data_align`; 0: DATA records).
    align: u32,
}

const GEOS: &[Geo] = &[
    // the geometry of gc.rs's enospc_with_a_segment_table_spanning_segments (36 KiB segment
    // table over 16 KiB segments), with the replay windows around the default
    Geo { seg: 16 << 10, page: 512, dev_mib: 32, cp_mib: 3, cache: 64, align: 0 },
    Geo { seg: 16 << 10, page: 512, dev_mib: 32, cp_mib: 1, cache: 0, align: 0 },
    Geo { seg: 16 << 10, page: 2048, dev_mib: 16, cp_mib: 4, cache: 64, align: 0 },
    Geo { seg: 16 << 10, page: 2048, dev_mib: 16, cp_mib: 2, cache: 32, align: 0 },
    Geo { seg: 32 << 10, page: 2048, dev_mib: 32, cp_mib: 8, cache: 32, align: 0 },
    Geo { seg: 64 << 10, page: 2048, dev_mib: 32, cp_mib: 1, cache: 0, align: 0 },
    Geo { seg: 128 << 10, page: 2048, dev_mib: 32, cp_mib: 2, cache: 32, align: 0 },
    Geo { seg: 128 << 10, page: 4096, dev_mib: 64, cp_mib: 8, cache: 0, align: 0 },
    // aligned data: the GC packs groups of 64 blocks, 98.5 % of a segment at best
    Geo { seg: 128 << 10, page: 2048, dev_mib: 32, cp_mib: 2, cache: 32, align: 2048 },
    Geo { seg: 64 << 10, page: 2048, dev_mib: 32, cp_mib: 1, cache: 0, align: 4096 },
];

fn opts(g: &Geo) -> MountOptions {
    MountOptions { cache_nodes: g.cache, checkpoint_log_bytes: g.cp_mib << 20, ..Default::default() }
}

fn mount_new(g: &Geo) -> Fs {
    let f = RamFlash::new_nand(g.seg, (u64::from(g.dev_mib) << 20) as u32 / g.seg, g.page);
    let f = mkfs(f, &FormatOptions { data_align: g.align, ..Default::default() }, ts(0)).map_err(|e| e.0).unwrap();
    Fs::mount(f, opts(g)).map_err(|e| e.0).unwrap()
}

fn remount_with(fs: Fs, g: &Geo) -> Fs {
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    Fs::mount(f, opts(g)).map_err(|e| e.0).unwrap()
}

/// What filled the filesystem: (directory inode or ROOT_INO, name, inode, is a directory).
type Names = Vec<(u64, String, u64, bool)>;

/// Write `len` bytes to `ino` in pieces of `chunk`; false at `NoSpace`.
fn write_up_to(fs: &mut Fs, ino: u64, len: u64, chunk: &[u8]) -> bool {
    let mut off = 0u64;
    while off < len {
        let n = (len - off).min(chunk.len() as u64) as usize;
        match fs.write(ino, off, &chunk[..n], ts(1)) {
            Ok(0) => return false,
            Ok(k) => off += k as u64,
            Err(Error::NoSpace) => return false,
            Err(e) => panic!("write: {e:?}"),
        }
    }
    true
}

/// Files of 1 MiB written in 256 KiB pieces until `NoSpace`.
fn fill_big(fs: &mut Fs, names: &mut Names) {
    let chunk = vec![0xA5u8; 256 << 10];
    for i in 0.. {
        let name = format!("big{i}");
        let f = match fs.create(ROOT_INO, name.as_bytes(), &reg(), ts(1)) {
            Ok(f) => f,
            Err(Error::NoSpace) => return,
            Err(e) => panic!("create: {e:?}"),
        };
        names.push((ROOT_INO, name, f.ino, false));
        if !write_up_to(fs, f.ino, 1 << 20, &chunk) {
            return;
        }
    }
}

/// Directories of small files (1..12 KiB) until `NoSpace` from create, mkdir or write.
fn fill_small(fs: &mut Fs, names: &mut Names) {
    let mut rng = Rng::new(11);
    let mut buf = vec![0u8; 12 << 10];
    for d in 0.. {
        let dname = format!("d{d}");
        let dir = match fs.mkdir(ROOT_INO, dname.as_bytes(), S_IFDIR | 0o755, 0, 0, ts(1)) {
            Ok(i) => i.ino,
            Err(Error::NoSpace) => return,
            Err(e) => panic!("mkdir: {e:?}"),
        };
        names.push((ROOT_INO, dname, dir, true));
        for k in 0..64 {
            let name = format!("s{k}");
            let f = match fs.create(dir, name.as_bytes(), &reg(), ts(1)) {
                Ok(f) => f,
                Err(Error::NoSpace) => return,
                Err(e) => panic!("create: {e:?}"),
            };
            // after their directory: deleted in reverse order, so before it
            names.push((dir, name, f.ino, false));
            let len = 1024 + rng.below(11 << 10);
            rng.fill(&mut buf[..len as usize]);
            if !write_up_to(fs, f.ino, len, &buf) {
                return;
            }
        }
    }
}

/// Eight files written to 97 % of the capacity, random 4 KiB overwrites of them (three times the
/// device: the dead space ends up spread over every segment), then writing on to `NoSpace`.
fn fill_overwrite(fs: &mut Fs, names: &mut Names, dev_bytes: u64) {
    let chunk = vec![0x5Au8; 256 << 10];
    let st = fs.statfs();
    let per = st.blocks * u64::from(st.block_size) * 97 / 100 / 8 / 4096 * 4096;
    let mut inos = Vec::new();
    for i in 0..8 {
        let name = format!("ow{i}");
        let f = fs.create(ROOT_INO, name.as_bytes(), &reg(), ts(1)).unwrap();
        names.push((ROOT_INO, name, f.ino, false));
        inos.push(f.ino);
        assert!(write_up_to(fs, f.ino, per, &chunk), "NoSpace below the capacity");
    }
    let mut rng = Rng::new(5);
    let mut d = [0u8; 4096];
    for _ in 0..3 * dev_bytes / 4096 {
        let ino = inos[rng.below(inos.len() as u64) as usize];
        let size = fs.getattr(ino).unwrap().size;
        if size < 4096 {
            continue;
        }
        rng.fill(&mut d[..16]);
        let off = rng.below(size / 4096) * 4096;
        assert_eq!(fs.write(ino, off, &d, ts(2)).unwrap(), 4096);
    }
    let last = *inos.last().unwrap();
    let size = fs.getattr(last).unwrap().size;
    let mut off = size;
    loop {
        match fs.write(last, off, &chunk, ts(3)) {
            Ok(0) | Err(Error::NoSpace) => break,
            Ok(n) => off += n as u64,
            Err(e) => panic!("write: {e:?}"),
        }
    }
}

/// Delete everything in `names` (every third file truncated to 0 first, directories by rmdir
/// once empty), with a remount half way; then check the space came back and is writable.
fn delete_all(mut fs: Fs, g: &Geo, names: &Names, what: &str) {
    let cap = fs.statfs().blocks;
    let full = fs.statfs().blocks_free;
    let half = names.len() / 2;
    let mut most_cps = 0;
    for (k, (dir, name, ino, is_dir)) in names.iter().rev().enumerate() {
        if k == half {
            fs = remount_with(fs, g);
        }
        let cps = fs.stats().checkpoints;
        let ctx = format!("{what} {g:?}: {} of {} ({name})", k + 1, names.len());
        if *is_dir {
            fs.rmdir(*dir, name.as_bytes(), ts(4)).unwrap_or_else(|e| panic!("rmdir {ctx}: {e:?}"));
        } else {
            if k % 3 == 0 {
                let a = SetAttr { size: Some(0), ..Default::default() };
                fs.setattr(*ino, &a, ts(4)).unwrap_or_else(|e| panic!("truncate {ctx}: {e:?}"));
            }
            fs.unlink(*dir, name.as_bytes(), ts(4)).unwrap_or_else(|e| panic!("unlink {ctx}: {e:?}"));
        }
        fs.evict(*ino).unwrap_or_else(|e| panic!("evict {ctx}: {e:?}"));
        most_cps = most_cps.max(fs.stats().checkpoints - cps);
    }
    eprintln!("{what} {g:?}: {} deletions, at most {most_cps} checkpoints in one", names.len());
    // A deletion frees room: the GC it needs ends after a cleaning cycle's checkpoints (two when
    // victims emptied since the last one wait, `checkpoint_to_free`) or its two checkpoints that
    // gained nothing. With 1/8 of the log kept dead every fill here took 2 at most; with 3/32
    // (29/32 offered) the least-live victims of a full volume hold more, and one deletion of the
    // 40 fills took 6 (overwrites, 128 KiB segments), two took 3. A GC walking on towards its
    // guard (two rounds per log segment) would take hundreds.
    assert!(most_cps <= 8, "{what} {g:?}: a deletion took {most_cps} checkpoints");
    let mut fs = remount_with(fs, g);
    assert_consistent(&mut fs);
    let st = fs.statfs();
    assert!(st.blocks_free + st.blocks / 50 >= cap, "{what} {g:?}: {} of {cap} blocks free after deleting everything (full: {full})", st.blocks_free);
    // and the space is usable again
    let f = fs.create(ROOT_INO, b"again", &reg(), ts(5)).unwrap();
    let chunk = vec![1u8; 256 << 10];
    let want = (st.blocks_free * 4096 / 2).min(4 << 20);
    assert!(write_up_to(&mut fs, f.ino, want, &chunk), "{what} {g:?}: NoSpace writing {want} bytes after deleting everything");
    let mut fs = remount_with(fs, g);
    assert_eq!(fs.lookup(ROOT_INO, b"again").unwrap().size, want);
    assert_consistent(&mut fs);
}

/// Files holding one xattr of 55 to 90 % of a segment (at most 60 000 bytes, and at most
/// `Engine::xattr_value_max`) until `NoSpace`,
/// then the xattrs rewritten at random with new sizes (twice the device, refused or not), then
/// new files and data on to `NoSpace` again. Such
/// records pack badly: one or two fit a segment, and what is left of it is dead or too small
/// for the next, so the GC gains less per victim than with block records.
fn fill_xattrs(fs: &mut Fs, names: &mut Names, dev_bytes: u64) {
    use ferrofs_engine::Flash;
    let seg = u64::from(fs.flash().geometry().segment_size);
    let mut rng = Rng::new(17);
    let mut val = vec![0u8; 60_000];
    let vmax = fs.xattr_value_max().min(60_000) as u64;
    let size = |rng: &mut Rng| (seg * (55 + rng.below(36)) / 100).min(vmax) as usize;
    let mut inos = Vec::new();
    for i in 0.. {
        let n = size(&mut rng);
        rng.fill(&mut val[..16]);
        match xattr_file(fs, names, format!("x{i}"), &val[..n], 1) {
            Some((ino, true)) => inos.push(ino),
            _ => break,
        }
    }
    assert!(inos.len() > 2, "only {} xattrs", inos.len());
    let mut written = 0u64;
    while written < 2 * dev_bytes {
        let ino = inos[rng.below(inos.len() as u64) as usize];
        let n = size(&mut rng);
        rng.fill(&mut val[..16]);
        match fs.setxattr(ino, b"user.big", &val[..n], 0, ts(2)) {
            Ok(()) | Err(Error::NoSpace) => {}
            Err(e) => panic!("setxattr: {e:?}"),
        }
        written += n as u64;
    }
    // then on to `NoSpace`: new files with big xattrs, the last one's data written until refused
    let chunk = vec![0x3Cu8; 64 << 10];
    for i in 0.. {
        let n = size(&mut rng);
        match xattr_file(fs, names, format!("y{i}"), &val[..n], 3) {
            Some((_, true)) => {}
            Some((ino, false)) => {
                assert!(!write_up_to(fs, ino, dev_bytes, &chunk), "wrote the device's size");
                return;
            }
            None => return,
        }
    }
}

/// A new file `name` in the root holding `user.big` = `value`: `None` when the create gets
/// `NoSpace`, else its inode and whether the xattr was stored (false: `NoSpace`).
fn xattr_file(fs: &mut Fs, names: &mut Names, name: String, value: &[u8], t: i64) -> Option<(u64, bool)> {
    let f = match fs.create(ROOT_INO, name.as_bytes(), &reg(), ts(t)) {
        Ok(f) => f,
        Err(Error::NoSpace) => return None,
        Err(e) => panic!("create: {e:?}"),
    };
    names.push((ROOT_INO, name, f.ino, false));
    match fs.setxattr(f.ino, b"user.big", value, 0, ts(t)) {
        Ok(()) => Some((f.ino, true)),
        Err(Error::NoSpace) => Some((f.ino, false)),
        Err(e) => panic!("setxattr: {e:?}"),
    }
}

fn run(what: &str, fill: fn(&mut Fs, &mut Names, u64)) {
    for g in GEOS {
        let mut fs = mount_new(g);
        let mut names = Names::new();
        fill(&mut fs, &mut names, u64::from(g.dev_mib) << 20);
        assert!(names.len() > 2, "{what} {g:?}: only {} names", names.len());
        // ENOSPC is the capacity check's answer, not the GC's: a new file gets it at once
        assert!(matches!(fs.create(ROOT_INO, b"late", &reg(), ts(1)).map(|f| fs.write(f.ino, 0, &[0u8; 8192], ts(1))), Err(Error::NoSpace) | Ok(Err(Error::NoSpace)) | Ok(Ok(0))), "{what} {g:?}: not full");
        if fs.lookup(ROOT_INO, b"late").is_ok() {
            let ino = fs.lookup(ROOT_INO, b"late").unwrap().ino;
            names.push((ROOT_INO, "late".into(), ino, false));
        }
        // deleting right away, and after a remount (the checkpoint margin starts over)
        let fs = if names.len() % 2 == 0 { remount_with(fs, g) } else { fs };
        delete_all(fs, g, &names, what);
    }
}

#[test]
fn delete_after_filling_with_big_files() {
    run("big files", |fs, names, _| fill_big(fs, names));
}

#[test]
fn delete_after_filling_with_small_files_in_directories() {
    run("small files", |fs, names, _| fill_small(fs, names));
}

#[test]
fn delete_after_filling_and_overwriting_at_random() {
    run("overwrites", fill_overwrite);
}

#[test]
fn delete_after_filling_with_big_xattrs_rewritten_at_random() {
    run("big xattrs", fill_xattrs);
}
