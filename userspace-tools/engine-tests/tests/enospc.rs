//! A filesystem filled to ENOSPC with live data: failing operations must not wear the flash
//! (checkpoints per failed operation), `setxattr` must not eat the GC's reserve, and an
//! overwrite in place (no growth of the file's usage) must still succeed (docs/design.md
//! "Space, garbage collection, wear").

use ferrofs_engine::format::S_IFDIR;
use ferrofs_engine::{Error, FormatOptions, MountOptions, ROOT_INO};
use ferrofs_engine_tests::*;

/// One geometry: segment size, page (write unit), device size, replay window, index cache.
#[derive(Clone, Copy, Debug)]
struct Geo {
    seg: u32,
    page: u32,
    dev_mib: u32,
    cp_mib: u64,
    cache: usize,
}

const GEOS: &[Geo] = &[
    // a segment table spanning three 16 KiB segments (gc.rs enospc_with_a_segment_table_spanning_segments)
    Geo { seg: 16 << 10, page: 512, dev_mib: 32, cp_mib: 3, cache: 64 },
    Geo { seg: 16 << 10, page: 2048, dev_mib: 16, cp_mib: 2, cache: 32 },
    Geo { seg: 32 << 10, page: 512, dev_mib: 2, cp_mib: 1, cache: 32 },
    Geo { seg: 32 << 10, page: 2048, dev_mib: 16, cp_mib: 8, cache: 32 },
    Geo { seg: 128 << 10, page: 2048, dev_mib: 32, cp_mib: 2, cache: 0 },
];

fn opts(g: &Geo) -> MountOptions {
    MountOptions { cache_nodes: g.cache, checkpoint_log_bytes: g.cp_mib << 20, ..Default::default() }
}

fn mount_new(g: &Geo) -> Fs {
    let f = RamFlash::new_nand(g.seg, (u64::from(g.dev_mib) << 20) as u32 / g.seg, g.page);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    Fs::mount(f, opts(g)).map_err(|e| e.0).unwrap()
}

fn remount_with(fs: Fs, g: &Geo) -> Fs {
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    Fs::mount(f, opts(g)).map_err(|e| e.0).unwrap()
}

/// Files of 256 KiB with distinct contents, written in 64 KiB pieces until `NoSpace`; returns
/// (name, inode, contents) of every file, the last one possibly short. Afterwards a write of
/// one more byte fails: the committed bytes are at the capacity.
fn fill(fs: &mut Fs, seed: u64) -> Vec<(String, u64, Vec<u8>)> {
    let mut rng = Rng::new(seed);
    let mut files = Vec::new();
    'fill: for i in 0.. {
        let name = format!("f{i}");
        let f = match fs.create(ROOT_INO, name.as_bytes(), &reg(), ts(1)) {
            Ok(f) => f,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("create: {e:?}"),
        };
        let mut data = vec![0u8; 256 << 10];
        rng.fill(&mut data);
        let mut off = 0usize;
        while off < data.len() {
            match fs.write(f.ino, off as u64, &data[off..(off + (64 << 10)).min(data.len())], ts(1)) {
                Ok(0) | Err(Error::NoSpace) => {
                    data.truncate(off);
                    files.push((name, f.ino, data));
                    break 'fill;
                }
                Ok(k) => off += k,
                Err(e) => panic!("write: {e:?}"),
            }
        }
        files.push((name, f.ino, data));
    }
    // top up: the last bytes the capacity allows
    let (_, ino, data) = files.last_mut().unwrap();
    top_up(fs, *ino, data);
    pad_with_creates(fs, &mut files);
    assert!(files.len() > 2, "filled with {} files", files.len());
    files
}

/// Create empty files until `NoSpace`: the few bytes left below the capacity (a write keeps a
/// block's worth more than a create).
fn pad_with_creates(fs: &mut Fs, files: &mut Vec<(String, u64, Vec<u8>)>) {
    for i in 0.. {
        let name = format!("pad{i}");
        match fs.create(ROOT_INO, name.as_bytes(), &reg(), ts(1)) {
            Ok(f) => files.push((name, f.ino, Vec::new())),
            Err(Error::NoSpace) => break,
            Err(e) => panic!("create: {e:?}"),
        }
    }
}

/// Files with one xattr of about 5/8 of a segment each until `NoSpace`: records that pack
/// worse than block records (one per segment), so the free segments run out below the
/// capacity and the fill ends in the GC with nothing left to reclaim; then data up to the
/// capacity. Returns the files and the checkpoints the operation that ended the xattr fill
/// took.
fn fill_xattrs(fs: &mut Fs, seg: u32) -> (Vec<(String, u64, Vec<u8>)>, u64) {
    let len = fs.xattr_value_max().min(seg as usize * 5 / 8);
    let mut files = Vec::new();
    let mut cps = 0;
    for i in 0.. {
        let cp0 = fs.stats().checkpoints;
        let name = format!("x{i}");
        let f = match fs.create(ROOT_INO, name.as_bytes(), &reg(), ts(1)) {
            Ok(f) => f,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("create: {e:?}"),
        };
        files.push((name, f.ino, Vec::new()));
        match fs.setxattr(f.ino, b"user.v", &vec![(i % 251) as u8; len], 0, ts(1)) {
            Ok(()) => {}
            Err(Error::NoSpace) => {
                cps = fs.stats().checkpoints - cp0;
                break;
            }
            Err(e) => panic!("setxattr: {e:?}"),
        }
    }
    assert!(files.len() > 4, "filled with {} files", files.len());
    let (_, ino, data) = files.last_mut().unwrap();
    top_up(fs, *ino, data);
    pad_with_creates(fs, &mut files);
    (files, cps)
}

/// Append to `ino` (contents `data`) until `NoSpace`, also after a checkpoint (which turns the
/// dirty index's estimate into the nodes' real size): the committed bytes end at the capacity.
fn top_up(fs: &mut Fs, ino: u64, data: &mut Vec<u8>) {
    let mut after_cp = false;
    loop {
        match fs.write(ino, data.len() as u64, &[7u8; 512], ts(1)) {
            Ok(0) | Err(Error::NoSpace) if after_cp => break,
            Ok(0) | Err(Error::NoSpace) => {
                fs.checkpoint().unwrap();
                after_cp = true;
            }
            Ok(k) => {
                data.extend_from_slice(&[7u8; 512][..k]);
                after_cp = false;
            }
            Err(e) => panic!("top-up write: {e:?}"),
        }
    }
}

fn verify(fs: &mut Fs, files: &[(String, u64, Vec<u8>)]) {
    for (name, ino, data) in files {
        let mut b = vec![0u8; data.len()];
        assert_eq!(fs.read(*ino, 0, &mut b).unwrap(), data.len(), "{name}");
        assert!(b == *data, "{name}: contents differ");
    }
}

/// Fault: on a filesystem full of live data, the foreground GC of every failing operation
/// could write checkpoint after checkpoint (each one programs the segment table and a slot:
/// wear and time) before returning `NoSpace`, since the segments a checkpoint frees are the
/// ones its predecessor wrote. A failing operation may take at most one checkpoint, and once
/// an attempt has shown that nothing can be reclaimed, the next ones (with nothing freed in
/// between) take none and program nothing.
#[test]
fn failing_operations_on_a_full_filesystem_do_not_checkpoint_repeatedly() {
    for (g, xattrs) in GEOS.iter().flat_map(|g| [(g, false), (g, true)]) {
        let mut fs = mount_new(g);
        let (files, fill_cps) = if xattrs { fill_xattrs(&mut fs, g.seg) } else { (fill(&mut fs, 3), 0) };
        // the first NoSpace found through the GC: the checkpoints that freed nothing are cut
        // short, and so are cleaning cycles that gain nothing (records that pack badly:
        // victims moved that gain nothing took 516 checkpoints on 32 KiB segments before)
        assert!(fill_cps <= 12, "{g:?} xattrs {xattrs}: the operation that ended the fill took {fill_cps} checkpoints");
        eprintln!("{g:?} xattrs {xattrs}: after fill {} files, statfs {:?}, {:?}", files.len(), fs.statfs(), fs.stats());
        let ino = files[0].1;
        let big = files[0].2.len() as u64;
        let before = fs.stats();
        let mut worst = 0u64;
        let mut per_op = Vec::new();
        for k in 0..60u64 {
            let st0 = fs.stats();
            let r = match k % 4 {
                3 => fs.setxattr(ino, format!("user.n{k}").as_bytes(), &[3u8; 8000], 0, ts(2)),
                0 => fs.write(ino, big + k * 4096, &[1u8; 4096], ts(2)).map(|_| ()),
                1 => fs.create(ROOT_INO, format!("new{k}").as_bytes(), &reg(), ts(2)).map(|_| ()),
                _ => fs.mkdir(ROOT_INO, format!("dir{k}").as_bytes(), S_IFDIR | 0o755, 0, 0, ts(2)).map(|_| ()),
            };
            assert_eq!(r, Err(Error::NoSpace), "{g:?} xattrs {xattrs}: op {k} on a full filesystem");
            let st1 = fs.stats();
            let cps = st1.checkpoints - st0.checkpoints;
            worst = worst.max(cps);
            per_op.push((cps, st1.programmed_bytes - st0.programmed_bytes, st1.erases - st0.erases));
        }
        let after = fs.stats();
        eprintln!(
            "{g:?} xattrs {xattrs}: fill ended with {fill_cps} checkpoints; 60 failing ops: {} checkpoints, {} bytes programmed, {} erases; first ops {:?}",
            after.checkpoints - before.checkpoints,
            after.programmed_bytes - before.programmed_bytes,
            after.erases - before.erases,
            &per_op[..6]
        );
        assert!(worst <= 1, "{g:?} xattrs {xattrs}: a failing operation took {worst} checkpoints: {per_op:?}");
        // after the first failure nothing was freed: the later attempts program nothing
        let later: u64 = per_op[3..].iter().map(|p| p.1).sum();
        assert_eq!(later, 0, "{g:?} xattrs {xattrs}: failing operations programmed {later} bytes: {per_op:?}");
        // a deletion frees space: creating works again
        for (name, ino, _) in &files[1..4] {
            fs.unlink(ROOT_INO, name.as_bytes(), ts(3)).unwrap();
            fs.evict(*ino).unwrap();
        }
        let cp0 = fs.stats().checkpoints;
        let f = match fs.create(ROOT_INO, b"after", &reg(), ts(3)) {
            Ok(f) => f,
            Err(e) => panic!(
                "{g:?} xattrs {xattrs}: create after deleting 3 of {} files: {e:?}, statfs {:?}, {} checkpoints, {:?}",
                files.len(),
                fs.statfs(),
                fs.stats().checkpoints - cp0,
                fs.stats()
            ),
        };
        eprintln!("{g:?} xattrs {xattrs}: create after deleting took {} checkpoints", fs.stats().checkpoints - cp0);
        assert_eq!(fs.write(f.ino, 0, &[9u8; 4096], ts(3)).unwrap(), 4096);
        let mut fs = remount_with(fs, g);
        assert_consistent(&mut fs);
        let mut rest = files.clone();
        rest.drain(1..4);
        verify(&mut fs, &rest);
    }
}

/// Fault: `setxattr` checked the capacity only while a write-back budget was reserved, so on
/// a full filesystem large values went on into the reserve the GC and deletions need. It must
/// fail with `NoSpace`, and the filesystem must still delete, remount and pass fsck.
#[test]
fn setxattr_on_a_full_filesystem_fails_cleanly() {
    for g in GEOS {
        let mut fs = mount_new(g);
        let files = fill(&mut fs, 5);
        let free0 = fs.statfs().blocks_free;
        let len = fs.xattr_value_max().min(10_000);
        let mut ok = 0;
        for k in 0..200usize {
            let ino = files[k % files.len()].1;
            let v = vec![(k % 251) as u8; len];
            match fs.setxattr(ino, format!("user.x{k}").as_bytes(), &v, 0, ts(2)) {
                Ok(()) => ok += 1,
                Err(Error::NoSpace) => {}
                Err(e) => panic!("{g:?}: setxattr {k}: {e:?}"),
            }
        }
        eprintln!("{g:?}: {ok} setxattr of {len} bytes succeeded on a full filesystem (blocks free {free0}), statfs {:?}", fs.statfs());
        assert_eq!(ok, 0, "{g:?}: setxattr of {len} bytes beyond the capacity");
        assert_consistent(&mut fs);
        let mut fs = remount_with(fs, g);
        assert_consistent(&mut fs);
        verify(&mut fs, &files);
        // everything can be deleted, and the space comes back
        for (name, ino, _) in &files {
            fs.unlink(ROOT_INO, name.as_bytes(), ts(3)).unwrap();
            fs.evict(*ino).unwrap();
        }
        assert_consistent(&mut fs);
        let f = fs.create(ROOT_INO, b"again", &reg(), ts(4)).unwrap();
        fs.setxattr(f.ino, b"user.x", &vec![1u8; len], 0, ts(4)).unwrap();
        let mut fs = remount_with(fs, g);
        assert_consistent(&mut fs);
    }
}

/// Fault: with the committed bytes at the capacity, an overwrite of an existing block in place
/// (a new record of the same size, the old one dead: no growth) got `NoSpace`. It succeeds, as
/// on ext4 and UBIFS, while a write that grows the usage still fails; hundreds of overwrites
/// (which make the GC work) keep the filesystem consistent across a remount.
#[test]
fn overwrite_in_place_at_full_capacity_succeeds() {
    for g in GEOS {
        let mut fs = mount_new(g);
        let mut files = fill(&mut fs, 7);
        let mut rng = Rng::new(13);
        // appending still fails
        let (_, ino0, d0) = &files[0];
        assert_eq!(fs.write(*ino0, d0.len() as u64, &[1u8; 4096], ts(2)), Err(Error::NoSpace), "{g:?}");
        let whole: Vec<usize> = (0..files.len()).filter(|&i| files[i].2.len() >= 8192).collect();
        let n_ow = 400;
        for k in 0..n_ow {
            let i = whole[rng.below(whole.len() as u64) as usize];
            let (_, ino, data) = &mut files[i];
            let blocks = data.len() / 4096;
            let b = rng.below(blocks as u64) as usize;
            let mut d = [0u8; 4096];
            rng.fill(&mut d);
            match fs.write(*ino, (b * 4096) as u64, &d, ts(3)) {
                Ok(4096) => data[b * 4096..(b + 1) * 4096].copy_from_slice(&d),
                r => panic!("{g:?}: overwrite {k} of block {b} at full capacity: {r:?} (statfs {:?})", fs.statfs()),
            }
            // a partial overwrite inside a block does not grow it either
            let o = rng.below(4000) as usize;
            match fs.write(*ino, (b * 4096 + o) as u64, &d[..64], ts(3)) {
                Ok(64) => data[b * 4096 + o..b * 4096 + o + 64].copy_from_slice(&d[..64]),
                r => panic!("{g:?}: partial overwrite {k} at full capacity: {r:?}"),
            }
        }
        // still full: growth is refused
        let (_, ino0, d0) = &files[0];
        assert_eq!(fs.write(*ino0, d0.len() as u64, &[1u8; 4096], ts(4)), Err(Error::NoSpace), "{g:?}");
        assert_eq!(fs.create(ROOT_INO, b"new", &reg(), ts(4)).map(|_| ()), Err(Error::NoSpace), "{g:?}");
        eprintln!("{g:?}: {n_ow} overwrites at full capacity, statfs {:?}, {:?}", fs.statfs(), fs.stats());
        assert_consistent(&mut fs);
        verify(&mut fs, &files);
        let mut fs = remount_with(fs, g);
        assert_consistent(&mut fs);
        verify(&mut fs, &files);
        // and deletions still work
        for (name, ino, _) in &files {
            fs.unlink(ROOT_INO, name.as_bytes(), ts(5)).unwrap();
            fs.evict(*ino).unwrap();
        }
        let mut fs = remount_with(fs, g);
        assert_consistent(&mut fs);
    }
}

/// Fault (kernel side, ferrofs-enospc's overwrite checks): the kernel's write-back budget
/// charged every dirtied folio, so at full capacity an overwrite through the page cache got
/// ENOSPC. The kernel now admits folios of whole blocks that write-back rewrites in place
/// without a reservation (`blocks_in_place`), and `write_blocks` must then never refuse them:
/// with nothing reserved, many overwrite batches (1 to 64 blocks, GC and checkpoints inside)
/// succeed on a filesystem at its capacity, the live bytes stay within the capacity after a
/// commit, growth is still refused with nothing appended, and every byte survives a remount.
/// Also on a volume with aligned data (old records DATA records, the new ones aligned).
#[test]
fn write_blocks_in_place_at_full_capacity_needs_no_budget() {
    let aligned = Geo { seg: 32 << 10, page: 512, dev_mib: 16, cp_mib: 2, cache: 32 };
    for (g, align) in GEOS.iter().map(|g| (*g, 0)).chain([(aligned, 2048)]) {
        let mut fs = if align == 0 {
            mount_new(&g)
        } else {
            let f = RamFlash::new_nand(g.seg, (u64::from(g.dev_mib) << 20) as u32 / g.seg, g.page);
            let f = Fs::format(f, &FormatOptions { data_align: align, ..Default::default() }, ts(0)).map_err(|e| e.0).unwrap();
            Fs::mount(f, opts(&g)).map_err(|e| e.0).unwrap()
        };
        let mut files = fill(&mut fs, 11);
        fs.set_reserved(0);
        let whole: Vec<usize> = (0..files.len()).filter(|&i| files[i].2.len() >= 8192).collect();
        // what is in place: whole blocks inside the size; not the short EOF block, not past EOF
        let (_, ino0, d0) = &files[whole[0]];
        let nb = (d0.len() / 4096) as u64;
        assert_eq!(fs.blocks_in_place(*ino0, 0, nb).unwrap(), nb, "{g:?}");
        assert_eq!(fs.blocks_in_place(*ino0, nb, 2).unwrap(), 0, "{g:?}");
        if let Some((_, ino, d)) = files.iter().find(|f| f.2.len() % 4096 != 0) {
            assert_eq!(fs.blocks_in_place(*ino, (d.len() / 4096) as u64, 1).unwrap(), 0, "{g:?}: the short EOF block");
        }
        // growth is refused with nothing appended: a run with one block past the EOF
        let (_, ino0, d0) = &files[whole[0]];
        let nb = (d0.len() / 4096) as u64;
        let b = vec![9u8; 4096];
        let seq = fs.log_seq();
        assert_eq!(fs.write_blocks(*ino0, nb - 1, &[&b, &b], (nb + 1) * 4096, ts(4), ts(4)).err(), Some(Error::NoSpace), "{g:?}");
        assert_eq!(fs.log_seq(), seq, "{g:?}: a refused write_blocks appended something");
        let mut rng = Rng::new(17);
        let n_batches = 120;
        for k in 0..n_batches {
            let i = whole[rng.below(whole.len() as u64) as usize];
            let (_, ino, data) = &mut files[i];
            let blocks = (data.len() / 4096) as u64;
            let n = (1 + rng.below(64)).min(blocks);
            let first = rng.below(blocks - n + 1);
            let mut bufs = vec![vec![0u8; 4096]; n as usize];
            for b in bufs.iter_mut() {
                rng.fill(b);
            }
            let refs: Vec<&[u8]> = bufs.iter().map(|b| b.as_slice()).collect();
            let size = data.len() as u64;
            match fs.write_blocks(*ino, first, &refs, ((first + n) * 4096).min(size), ts(3), ts(3)) {
                Ok(()) => {
                    for (j, b) in bufs.iter().enumerate() {
                        let at = (first as usize + j) * 4096;
                        data[at..at + 4096].copy_from_slice(b);
                    }
                }
                r => panic!("{g:?}: in-place batch {k} ({n} blocks at {first}) at full capacity: {r:?} (statfs {:?})", fs.statfs()),
            }
        }
        fs.sync().unwrap();
        let (cap, live, dirty) = fs.budget_figures();
        assert!(live + dirty <= cap, "{g:?}: live {live} + dirty {dirty} over the capacity {cap} after in-place write-back");
        eprintln!("{g:?} align {align}: {n_batches} in-place batches at full capacity, statfs {:?}, {:?}", fs.statfs(), fs.stats());
        assert_consistent(&mut fs);
        verify(&mut fs, &files);
        let mut fs = remount_with(fs, &g);
        assert_consistent(&mut fs);
        verify(&mut fs, &files);
    }
}

/// Fault: on a volume filled with records that pack badly (one xattr of 5/8 of a segment per
/// segment: every segment mostly live, its dead space too small for another such record), the
/// first operation that failed moved victim after victim and checkpointed until the foreground
/// GC's guard ran out (two units of work per segment): each move freed one segment and filled
/// another, and each checkpoint ate what the moves gained. Before the GC compared its cleaning
/// cycles (gc.rs `ensure_space_gc`): 2 048 checkpoints and 9 216 erases on 16 KiB segments of a
/// 32 MiB volume, 820 / 2 867 on 16 KiB of 16 MiB, 84 / 128 on 2 MiB, 516 / 1 034 on 32 KiB of
/// 16 MiB, 340 / 512 on 128 KiB of 32 MiB. Bound: a constant, whatever the segment count (two
/// cleaning cycles of at most two checkpoints each, the two checkpoints that free what waits,
/// and a few more that bound the dirty index while moving), and at most 4 erases per
/// checkpoint (its segment table and index nodes, and the victims' new segments).
#[test]
fn first_failure_on_a_volume_of_badly_packing_records_is_bounded() {
    for g in GEOS {
        let mut fs = mount_new(g);
        let segs = (u64::from(g.dev_mib) << 20) / u64::from(g.seg);
        let len = fs.xattr_value_max().min(g.seg as usize * 5 / 8);
        let mut worst_ok = (0, 0);
        let mut first_fail = None;
        for i in 0..segs {
            let st0 = fs.stats();
            let name = format!("x{i}");
            let r = fs
                .create(ROOT_INO, name.as_bytes(), &reg(), ts(1))
                .and_then(|f| fs.setxattr(f.ino, b"user.v", &vec![(i % 251) as u8; len], 0, ts(1)));
            let st1 = fs.stats();
            let c = (st1.checkpoints - st0.checkpoints, st1.erases - st0.erases);
            match r {
                Ok(()) => worst_ok = worst_ok.max(c),
                Err(Error::NoSpace) => {
                    first_fail = Some((i, c));
                    break;
                }
                Err(e) => panic!("{g:?}: file {i}: {e:?}"),
            }
        }
        let (n, (cps, erases)) = first_fail.unwrap_or_else(|| panic!("{g:?}: {segs} files of {len}-byte xattrs fit"));
        eprintln!("{g:?}: {segs} segments, {n} files of a {len}-byte xattr; the first failure took {cps} checkpoints, {erases} erases (worst success {worst_ok:?})");
        assert!(n > segs / 2, "{g:?}: NoSpace after {n} files");
        assert!(cps <= 12, "{g:?}: the first failing operation took {cps} checkpoints ({segs} segments)");
        assert!(erases <= 48, "{g:?}: the first failing operation erased {erases} segments ({segs} segments)");
        // The background GC (the kernel's thread steps it every few seconds on an idle volume)
        // must not go on moving victims that the foreground found to gain nothing: every such
        // move is an erase for no room, for as long as the volume stays full.
        let st0 = fs.stats();
        let mut steps = 0;
        while steps < 200 && fs.gc_step(true).unwrap() {
            steps += 1;
        }
        let st1 = fs.stats();
        eprintln!("{g:?}: then {steps} background steps, {} erases", st1.erases - st0.erases);
        assert!(steps <= 2, "{g:?}: the background GC took {steps} steps ({} erases) after the foreground gave up", st1.erases - st0.erases);
        assert_consistent(&mut fs);
    }
}
