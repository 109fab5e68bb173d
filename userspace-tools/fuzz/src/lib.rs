//! Shared code of the ferrofs fuzz targets.
//!
//! - [`Base`]: a valid, formatted and populated NAND image, built deterministically (a clean
//!   one, after unmount, and a crashed one, with an un-checkpointed log tail to replay).
//! - [`run_patched`] (target `mount_and_read`): the input is a list of patches applied to a base
//!   image, optionally followed by a CRC fix-up so that the damaged structures pass their checksums
//!   and the engine's parsers see them.
//! - [`run_raw`] (target `mount_raw`): the input is the raw image itself (device bytes from 0,
//!   the rest erased).
//! - [`exercise`]: mount, walk the whole tree (readdir, lookup, getattr, read, readlink,
//!   listxattr/getxattr), consistency check, a few writes, GC, sync, unmount, remount and walk.
//!   Any error is fine; a panic, an overflow, an allocation storm or a hang is a bug.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use ferrofs_engine::crc::crc32c_update;
use ferrofs_engine::format::{S_IFCHR, S_IFIFO, S_IFREG};
use ferrofs_engine::std_platform::StdEngine;
use ferrofs_engine::{CreateArgs, FileType, Flash, FormatOptions, MountOptions, SetAttr, Timespec, ROOT_INO};
use ferrofs_flashsim::{NandConfig, NandSim};

/// The engine over the NAND simulator.
pub type Fs = StdEngine<NandSim>;

/// Geometry of an image: page size, pages per erase block, erase blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Page size in bytes.
    pub page: u32,
    /// Pages per erase block.
    pub ppb: u32,
    /// Erase blocks.
    pub blocks: u32,
}

impl Layout {
    /// Erase block size.
    pub fn seg_size(&self) -> usize {
        (self.page * self.ppb) as usize
    }
    /// Device size in bytes.
    pub fn device_bytes(&self) -> usize {
        self.seg_size() * self.blocks as usize
    }
}

/// `mount_and_read`: 2 KiB pages, 64 pages per block (128 KiB), 32 blocks = 4 MiB.
pub const PATCH_LAYOUT: Layout = Layout { page: 2048, ppb: 64, blocks: 32 };
/// `mount_raw`: 2 KiB pages, 16 pages per block (32 KiB), 32 blocks = 1 MiB.
pub const RAW_LAYOUT: Layout = Layout { page: 2048, ppb: 16, blocks: 32 };

/// Volume serial used by every base image.
pub const SERIAL: u64 = 0x5eed_f00d;

fn ts(s: i64) -> Timespec {
    Timespec { sec: 1_700_000_000 + s, nsec: 0 }
}

/// An empty simulator with the given layout.
pub fn empty_sim(l: Layout) -> NandSim {
    NandSim::new(NandConfig::with_layout(l.page, l.ppb, l.blocks)).expect("valid fuzz layout")
}

/// Builds a simulator whose contents are `data` (device bytes; erased where all 0xFF), using
/// only the `Flash` interface: every page that is not all 0xFF is programmed, in order.
pub fn sim_from_bytes(l: Layout, data: &[u8]) -> NandSim {
    let mut sim = empty_sim(l);
    load_segments(&mut sim, l, data, 0..l.blocks);
    sim
}

/// Reprograms segments `segs` of `sim` with the matching bytes of `data` (erase, then program
/// every page not all 0xFF).
pub fn load_segments(sim: &mut NandSim, l: Layout, data: &[u8], segs: impl IntoIterator<Item = u32>) {
    let ss = l.seg_size();
    let pg = l.page as usize;
    for s in segs {
        let Some(seg) = data.get(s as usize * ss..(s as usize + 1) * ss) else { continue };
        sim.erase(s).expect("erase in fuzz setup");
        for (p, page) in seg.chunks(pg).enumerate() {
            if page.iter().any(|&b| b != 0xFF) {
                sim.write(s, (p * pg) as u32, page).expect("program in fuzz setup");
            }
        }
    }
    sim.reset_counters();
}

/// A populated filesystem: directories (nested, and one with many entries so the index has
/// several levels), files (small, several blocks, sparse, truncated), symlinks, a hard link,
/// device nodes, xattrs, renames and deletions. `scale` 0 is for the small raw layout.
pub fn populate(fs: &mut Fs, scale: u32) -> Result<(), ferrofs_engine::Error> {
    let mut t = 0i64;
    let mut now = || {
        t += 1;
        ts(t)
    };
    let reg = CreateArgs { mode: S_IFREG | 0o644, uid: 1000, gid: 1000, rdev: 0 };
    let d1 = fs.mkdir(ROOT_INO, b"d1", 0o755, 0, 0, now())?.ino;
    let d2 = fs.mkdir(d1, b"d2", 0o700, 1, 2, now())?.ino;
    let d3 = fs.mkdir(d2, b"d3", 0o755, 0, 0, now())?.ino;
    let small = fs.create(ROOT_INO, b"small", &reg, now())?.ino;
    fs.write(small, 0, b"hello, ferrofs\n", now())?;
    let multi = fs.create(ROOT_INO, b"multi", &reg, now())?.ino;
    let pattern: Vec<u8> = (0..13_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    fs.write(multi, 0, &pattern, now())?;
    let sparse = fs.create(d1, b"sparse", &reg, now())?.ino;
    fs.write(sparse, 40_000, &pattern[..4096], now())?;
    fs.write(sparse, 10, b"start", now())?;
    let deep = fs.create(d3, b"deep", &reg, now())?.ino;
    fs.write(deep, 0, &pattern[..5000], now())?;
    fs.symlink(ROOT_INO, b"link", b"d1/d2/d3/deep", 0, 0, now())?;
    let long_target: Vec<u8> = (0..300).map(|i| b'a' + (i % 26) as u8).collect();
    fs.symlink(d1, b"longlink", &long_target, 0, 0, now())?;
    fs.link(small, d1, b"hard", now())?;
    fs.create(d1, b"chr", &CreateArgs { mode: S_IFCHR | 0o600, uid: 0, gid: 0, rdev: 0x0501 }, now())?;
    fs.create(d1, b"fifo", &CreateArgs { mode: S_IFIFO | 0o644, uid: 0, gid: 0, rdev: 0 }, now())?;
    fs.setxattr(small, b"user.a", b"1", 0, now())?;
    fs.setxattr(small, b"user.big", &pattern[..1000], 0, now())?;
    fs.setxattr(d1, b"security.selinux", b"system_u:object_r:etc_t:s0", 0, now())?;
    let many = fs.mkdir(ROOT_INO, b"many", 0o755, 0, 0, now())?.ino;
    let n = if scale == 0 { 40 } else { 100 };
    for i in 0..n {
        let name = format!("entry-{i:04}-{}", "x".repeat(i % 17));
        let ino = fs.create(many, name.as_bytes(), &reg, now())?.ino;
        if i % 3 == 0 {
            fs.write(ino, 0, &pattern[i..i + 100], now())?;
        }
    }
    for i in (0..n).step_by(5) {
        let name = format!("entry-{i:04}-{}", "x".repeat(i % 17));
        let ino = fs.lookup(many, name.as_bytes())?.ino;
        fs.unlink(many, name.as_bytes(), now())?;
        fs.evict(ino)?;
    }
    fs.rename(d1, b"sparse", d2, b"sparse2", 0, now())?;
    fs.setattr(multi, &SetAttr { size: Some(9000), ..SetAttr::default() }, now())?;
    if scale > 0 {
        let big = fs.create(ROOT_INO, b"big", &reg, now())?.ino;
        for k in 0..24u64 {
            fs.write(big, k * 4096, &pattern[..4096], now())?;
        }
        // overwrite some of it so that segments hold dead records
        for k in (0..24u64).step_by(3) {
            fs.write(big, k * 4096, &pattern[100..4196], now())?;
        }
    }
    fs.sync()?;
    // a tail the checkpoint does not cover
    let tail = fs.create(ROOT_INO, b"tail", &reg, now())?.ino;
    fs.write(tail, 0, &pattern[..3000], now())?;
    fs.setxattr(tail, b"user.t", b"tail", 0, now())?;
    fs.rename(ROOT_INO, b"multi", d3, b"multi-moved", 0, now())?;
    fs.fsync(tail)?;
    Ok(())
}

/// The two valid base images of a layout.
#[derive(Debug, Clone)]
pub struct Base {
    /// Layout of the images.
    pub layout: Layout,
    /// After a clean unmount.
    pub clean: NandSim,
    /// After a crash (engine dropped after the fsync of the tail): mount replays the log.
    pub crashed: NandSim,
    /// Indices of the pages programmed in either image (patch targets).
    pub programmed: Vec<u32>,
}

impl Base {
    /// Builds the base images (deterministic).
    pub fn build(layout: Layout) -> Base {
        let sim = empty_sim(layout);
        let sim = Fs::format(sim, &FormatOptions { serial: SERIAL, ..FormatOptions::default() }, ts(0))
            .unwrap_or_else(|(e, _)| panic!("format {layout:?}: {e:?}"));
        let mut fs = Fs::mount(sim, MountOptions::default()).unwrap_or_else(|(e, _)| panic!("mount fresh {layout:?}: {e:?}"));
        if let Err(e) = populate(&mut fs, if layout == RAW_LAYOUT { 0 } else { 1 }) {
            panic!("populate {layout:?}: {e:?}");
        }
        let crashed = fs.flash().clone();
        let mut clean = fs.unmount().unwrap_or_else(|(e, _)| panic!("unmount {layout:?}: {e:?}"));
        clean.reset_counters();
        let mut crashed = crashed;
        crashed.reset_counters();
        let mut programmed: Vec<u32> = Vec::new();
        let pg = layout.page as usize;
        for (i, (a, b)) in clean.data().chunks(pg).zip(crashed.data().chunks(pg)).enumerate() {
            if a.iter().any(|&x| x != 0xFF) || b.iter().any(|&x| x != 0xFF) {
                programmed.push(i as u32);
            }
        }
        Base { layout, clean, crashed, programmed }
    }

    /// The base of `mount_and_read`, built once.
    pub fn patch_base() -> &'static Base {
        static B: OnceLock<Base> = OnceLock::new();
        B.get_or_init(|| Base::build(PATCH_LAYOUT))
    }
}

/// Superblock magic "FFSB".
pub const SB_MAGIC: u32 = 0x4253_4646;
/// Checkpoint magic "FFCP".
pub const CP_MAGIC: u32 = 0x5043_4646;
/// Record magic.
pub const REC_MAGIC: u16 = 0xF5A5;
const SB_SIZE: usize = 209;
const REC_HDR: usize = 48;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Recomputes every checksum of segment `seg` of `data` (superblock, checkpoint slots, log
/// records, as docs/format.md defines them), so that mutated structures pass validation.
pub fn fix_crcs(l: Layout, data: &mut [u8], seg: u32, seed: u32) {
    let ss = l.seg_size();
    let pg = l.page as usize;
    let Some(s) = data.get_mut(seg as usize * ss..(seg as usize + 1) * ss) else { return };
    if u32_at(s, 0) == Some(SB_MAGIC) {
        s[4..8].fill(0);
        let c = crc32c_update(0, &s[..SB_SIZE]);
        s[4..8].copy_from_slice(&c.to_le_bytes());
        return;
    }
    if u16::from_le_bytes([s[0], s[1]]) == REC_MAGIC {
        let mut pos = 0usize;
        while pos + REC_HDR <= ss {
            let room = pg - pos % pg;
            if room < REC_HDR {
                pos += room;
                continue;
            }
            if u16::from_le_bytes([s[pos], s[pos + 1]]) != REC_MAGIC {
                break;
            }
            let plen = u32_at(s, pos + 44).unwrap_or(u32::MAX) as usize;
            let end = pos.saturating_add(REC_HDR).saturating_add(plen);
            if end > ss {
                break;
            }
            s[pos + 4..pos + 8].fill(0);
            let c = crc32c_update(crc32c_update(seed, &s[pos..pos + REC_HDR]), &s[pos + REC_HDR..end]);
            s[pos + 4..pos + 8].copy_from_slice(&c.to_le_bytes());
            pos = end;
        }
        return;
    }
    // checkpoint slots start at page boundaries
    for p in (0..ss).step_by(pg) {
        if u32_at(s, p) == Some(CP_MAGIC) {
            let len = (u32_at(s, p + 12).unwrap_or(0) as usize).clamp(8, ss - p);
            s[p + 4..p + 8].fill(0);
            let c = crc32c_update(0, &s[p..p + len]);
            s[p + 4..p + 8].copy_from_slice(&c.to_le_bytes());
        }
    }
}

/// The CRC seed of records of the base images.
pub fn record_seed() -> u32 {
    (SERIAL as u32) ^ ((SERIAL >> 32) as u32)
}

/// Input flags of `mount_and_read` (first byte).
pub mod flags {
    /// Start from the crashed base (log replay) instead of the clean one.
    pub const CRASHED: u8 = 1;
    /// Fix every checksum of the patched segments afterwards.
    pub const FIX_CRC: u8 = 2;
    /// Mount read-only.
    pub const READ_ONLY: u8 = 4;
    /// Mount with a tiny index cache (4 nodes).
    pub const TINY_CACHE: u8 = 8;
}

/// Applies the patches of `input` (after its flag byte) to `data`; returns the touched segments.
///
/// Each patch: `kind u8, page u16, offset u16, len u8`, then `len` data bytes for kinds 0 and 1.
/// Kind (low 2 bits): 0 overwrite, 1 xor, 2 fill 0xFF, 3 fill 0x00. Kind bit 7: `page` indexes
/// the whole device; otherwise only the pages programmed in the base images.
pub fn apply_patches(l: Layout, base: &Base, data: &mut [u8], mut input: &[u8]) -> BTreeSet<u32> {
    let pg = l.page as usize;
    let total_pages = (l.device_bytes() / pg) as u32;
    let mut touched = BTreeSet::new();
    while input.len() >= 6 {
        let kind = input[0];
        let page = u32::from(u16::from_le_bytes([input[1], input[2]]));
        let off = usize::from(u16::from_le_bytes([input[3], input[4]])) % pg;
        let len = usize::from(input[5]).max(1);
        input = &input[6..];
        let page = if kind & 0x80 != 0 || base.programmed.is_empty() {
            page % total_pages
        } else {
            base.programmed[page as usize % base.programmed.len()]
        };
        let start = page as usize * pg + off;
        let end = (start + len).min(data.len());
        let Some(dst) = data.get_mut(start..end) else { continue };
        match kind & 3 {
            0 | 1 => {
                let n = dst.len().min(input.len());
                for (d, s) in dst.iter_mut().zip(&input[..n]) {
                    *d = if kind & 3 == 0 { *s } else { *d ^ *s };
                }
                input = &input[n..];
            }
            2 => dst.fill(0xFF),
            _ => dst.fill(0),
        }
        let ss = l.seg_size();
        for s in start / ss..=(end.saturating_sub(1)) / ss {
            touched.insert(s as u32);
        }
    }
    touched
}

/// Target `mount_and_read`: flag byte, then patches over a base image.
pub fn run_patched(input: &[u8]) {
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
    exercise(sim, opts);
}

/// Target `mount_raw`: the input is the raw device (from offset 0; the rest erased).
pub fn run_raw(input: &[u8]) {
    let l = RAW_LAYOUT;
    let mut data = vec![0xFFu8; l.device_bytes()];
    let n = input.len().min(data.len());
    data[..n].copy_from_slice(&input[..n]);
    let sim = sim_from_bytes(l, &data);
    exercise(sim, MountOptions { cache_nodes: 16, ..MountOptions::default() });
}

/// What [`exercise`] did, for tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The first mount succeeded.
    pub mounted: bool,
    /// Inodes visited by the first walk.
    pub visited: usize,
    /// File bytes read by the first walk.
    pub bytes_read: u64,
    /// `check()` found no mismatch.
    pub consistent: bool,
    /// `check()` reported a segment whose recorded live bytes differ from the index's.
    pub mismatch: bool,
    /// The writes, sync and unmount all succeeded.
    pub wrote: bool,
    /// The remount succeeded.
    pub remounted: bool,
    /// Inodes visited after the remount.
    pub visited_after: usize,
}

const MAX_NODES: usize = 400;
const MAX_DIR_ENTRIES: usize = 300;

struct Walk {
    visited: usize,
    bytes: u64,
    files: Vec<(u64, u64)>,
    dirs: Vec<u64>,
}

fn walk(fs: &mut Fs, full: bool) -> Walk {
    let mut w = Walk { visited: 0, bytes: 0, files: Vec::new(), dirs: Vec::new() };
    let mut seen = BTreeSet::new();
    let mut queue = vec![(ROOT_INO, 0u32)];
    let mut buf = vec![0u8; 4096];
    seen.insert(ROOT_INO);
    while let Some((dir, depth)) = queue.pop() {
        w.dirs.push(dir);
        let mut ents: Vec<(Vec<u8>, u64, FileType)> = Vec::new();
        let mut cookie = 0u64;
        // readdir in two calls to exercise cookies
        for _ in 0..2 {
            let mut last = None;
            let mut n = 0usize;
            let r = fs.readdir(dir, cookie, &mut |name, ino, ft, next| {
                ents.push((name.to_vec(), ino, ft));
                last = Some(next);
                n += 1;
                n < MAX_DIR_ENTRIES / 2
            });
            if r.is_err() {
                break;
            }
            match last {
                Some(c) => cookie = c,
                None => break,
            }
        }
        for (name, ino, ft) in ents {
            if w.visited >= MAX_NODES {
                return w;
            }
            w.visited += 1;
            if name == b"." || name == b".." {
                let _ = fs.lookup(dir, &name);
                continue;
            }
            let _ = fs.lookup(dir, &name);
            let attr = fs.getattr(ino);
            if !full {
                if ft == FileType::Dir && depth < 16 && seen.insert(ino) {
                    queue.push((ino, depth + 1));
                }
                continue;
            }
            let mut xl = vec![0u8; 1024];
            if let Ok(n) = fs.listxattr(ino, &mut []) {
                if n <= xl.len() {
                    if let Ok(n) = fs.listxattr(ino, &mut xl) {
                        for name in xl[..n.min(xl.len())].split(|&b| b == 0).filter(|s| !s.is_empty()) {
                            if let Ok(sz) = fs.getxattr(ino, name, &mut []) {
                                let mut v = vec![0u8; sz.min(4096)];
                                let _ = fs.getxattr(ino, name, &mut v);
                            }
                        }
                    }
                }
            }
            let _ = fs.getxattr(ino, b"user.a", &mut xl);
            match ft {
                FileType::Dir => {
                    if depth < 16 && seen.insert(ino) {
                        queue.push((ino, depth + 1));
                    }
                }
                FileType::Symlink => {
                    let _ = fs.readlink(ino, &mut buf);
                }
                _ => {
                    let size = attr.map(|a| a.size).unwrap_or(0);
                    w.files.push((ino, size));
                    // the first 4 blocks, the last block, one in the middle, past the end
                    let mut off = 0u64;
                    for _ in 0..4 {
                        match fs.read(ino, off, &mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                w.bytes += n as u64;
                                off += n as u64;
                            }
                        }
                    }
                    for o in [size.saturating_sub(100), size / 2, size.saturating_add(1), u64::MAX - 10] {
                        if let Ok(n) = fs.read(ino, o, &mut buf) {
                            w.bytes += n as u64;
                        }
                    }
                }
            }
        }
    }
    let _ = fs.statfs();
    w
}

/// Mount, walk, check, write, sync, unmount, remount, walk, unmount. Never panics on a valid
/// engine, whatever the medium holds.
pub fn exercise(sim: NandSim, opts: MountOptions) -> Outcome {
    let mut out = Outcome::default();
    let mut fs = match Fs::mount(sim, opts) {
        Ok(fs) => fs,
        Err(_) => return out,
    };
    out.mounted = true;
    let w = walk(&mut fs, true);
    out.visited = w.visited;
    out.bytes_read = w.bytes;
    match fs.check() {
        Ok(None) => out.consistent = true,
        Ok(Some(_)) => out.mismatch = true,
        Err(_) => {}
    }
    let mut t = 10_000i64;
    let mut now = || {
        t += 1;
        ts(t)
    };
    let reg = CreateArgs { mode: S_IFREG | 0o600, uid: 0, gid: 0, rdev: 0 };
    let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    let mut ok = true;
    let mut chk = |r: bool| ok &= r;
    match fs.create(ROOT_INO, b"fuzz-new", &reg, now()) {
        Ok(i) => {
            chk(fs.write(i.ino, 0, &data, now()).is_ok());
            chk(fs.setxattr(i.ino, b"user.fz", b"v", 0, now()).is_ok());
            chk(fs.fsync(i.ino).is_ok());
        }
        Err(_) => chk(false),
    }
    chk(fs.mkdir(ROOT_INO, b"fuzz-dir", 0o755, 0, 0, now()).is_ok());
    chk(fs.rename(ROOT_INO, b"fuzz-dir", ROOT_INO, b"fuzz-dir2", 0, now()).is_ok());
    // mutate what the walk found
    for &(ino, size) in w.files.iter().take(4) {
        let _ = fs.write(ino, size / 2, &data[..3000], now());
        let _ = fs.setattr(ino, &SetAttr { size: Some(size / 3), ..SetAttr::default() }, now());
        let _ = fs.removexattr(ino, b"user.a", now());
    }
    if let Some(&d) = w.dirs.get(1) {
        let _ = fs.create(d, b"fuzz-in-dir", &reg, now());
        let mut victim = None;
        let _ = fs.readdir(d, 2, &mut |name, ino, _, _| {
            victim = Some((name.to_vec(), ino));
            false
        });
        if let Some((name, ino)) = victim {
            if fs.unlink(d, &name, now()).is_ok() {
                let _ = fs.evict(ino);
            } else {
                let _ = fs.rmdir(d, &name, now());
            }
        }
    }
    for bg in [false, true] {
        let _ = fs.gc_step(bg);
    }
    chk(fs.sync().is_ok());
    let sim = match fs.unmount() {
        Ok(s) => s,
        Err((_, s)) => {
            ok = false;
            s
        }
    };
    out.wrote = ok;
    let mut fs = match Fs::mount(sim, opts) {
        Ok(fs) => fs,
        Err(_) => return out,
    };
    out.remounted = true;
    out.visited_after = walk(&mut fs, false).visited;
    let _ = fs.unmount();
    out
}
