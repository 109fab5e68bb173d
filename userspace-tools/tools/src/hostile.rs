//! Hostile images (`ferrofs-hostile`, `make hostile`): real, populated ferrofs images mutated in
//! seeded, reproducible ways, packed on a disk that the guest program
//! (`ferrofs-fstest hostile`) mounts one by one.
//!
//! Bases ([`build_bases`]): a tree copied by `mkfs.ferrofs -r`'s code (files of several sizes,
//! directories, symlinks, hard links, xattrs, a fifo), the same tree with a log tail after its
//! last checkpoint, and an engine-written filesystem with history (overwrites, deletes, renames,
//! truncates, garbage collection, several checkpoints), cleanly unmounted and with a log tail.
//!
//! Mutations ([`mutate`]): random bit flips; zeroed or erased records, pages, segments;
//! truncation; forged record headers, inode/dentry/xattr/delete/segment-header/segment-table
//! payloads, index nodes (levels, counts, unsorted keys, out-of-range pointers, self loops,
//! cycles to the root, cross-links, pointers to non-index records), checkpoint fields and
//! superblock fields (slot size, segment count/size, write unit, area layout, features) set to
//! extremes — all of those with the CRCs fixed up so that the checks behind the CRC run.
//!
//! The geometry is that of `mtdram total_size=4096 erase_size=64` as the kernel sees it: NOR,
//! 64 segments of 64 KiB, 512-byte write unit (4 MiB).

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use ferrofs_engine::crc::{crc32c, crc32c_update};
use ferrofs_engine::format::{rtype, CpHeader, Key, Loc, INDEX_COMPACT_LEAF, RecHdr, Superblock, CP_MAGIC, FEATURE_COMPAT_FTL_PAGE, FEATURE_COMPAT_OPEN_SEGMENTS, MAX_CP_SEGS, NO_SEG, REC_HDR, SB_FULL_SIZE, SB_SIZE, S_IFREG};
use ferrofs_engine::index::{decode_node, encode_compact_leaf, node_level, COMPACT_WORST};
use ferrofs_engine::{CreateArgs, FlashKind, FormatOptions, MountOptions, SetAttr, Timespec, ROOT_INO};
use ferrofs_flashsim::{AnySim, NandConfig, NandSim};

use crate::dev::Dev;
use crate::populate::{populate, PopulateOptions};
use crate::Fs;

/// Write unit (the kernel's minimum for an MTD with writesize 1).
pub const WRITE_UNIT: u32 = 512;
/// Segment (erase block) size.
pub const SEG_SIZE: u32 = 64 * 1024;
/// Segments.
pub const SEG_COUNT: u32 = 64;
/// Bytes of one image.
pub const IMAGE_BYTES: usize = (SEG_SIZE * SEG_COUNT) as usize;
/// Volume serial of every base.
pub const SERIAL: u64 = 0x0bad_1ace_5eed_0042;
/// Disk magic.
pub const DISK_MAGIC: &[u8; 8] = b"FFHOSTL1";
/// Disk header size (bases follow it).
pub const DISK_HDR: usize = 4096;
/// Size of one image-table entry.
pub const ENTRY_SIZE: usize = 128;
/// Bytes of the label in an image-table entry.
pub const LABEL_BYTES: usize = ENTRY_SIZE - 24;

/// The simulator configuration matching the guest's mtdram.
pub fn sim_config() -> NandConfig {
    NandConfig {
        kind: FlashKind::Nor,
        ..NandConfig::with_layout(WRITE_UNIT, SEG_SIZE / WRITE_UNIT, SEG_COUNT)
    }
}

/// An empty simulator with the hostile geometry.
pub fn empty_sim() -> NandSim {
    // the configuration is a constant that NandSim accepts (checked by the tests)
    NandSim::new(sim_config()).unwrap_or_else(|e| unreachable_geometry(&e.to_string()))
}

fn unreachable_geometry(e: &str) -> NandSim {
    panic!("hostile geometry rejected by the simulator: {e}")
}

/// A simulator holding `data` (every page that is not all 0xFF programmed).
pub fn sim_from_bytes(data: &[u8]) -> Result<NandSim, String> {
    use ferrofs_flashsim::Flash;
    let mut sim = empty_sim();
    let ss = SEG_SIZE as usize;
    let wu = WRITE_UNIT as usize;
    for (s, seg) in data.chunks(ss).enumerate().take(SEG_COUNT as usize) {
        for (p, page) in seg.chunks(wu).enumerate() {
            if page.iter().any(|&b| b != 0xFF) {
                sim.write(s as u32, (p * wu) as u32, page).map_err(|e| format!("program {s}:{p}: {e:?}"))?;
            }
        }
    }
    sim.reset_counters();
    Ok(sim)
}

/// SplitMix64: small, seeded, reproducible.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (0 if n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    /// Uniform index into a slice of length `n`.
    pub fn idx(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
    /// True with probability `pct` percent.
    pub fn pct(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
    /// Fill with random bytes.
    pub fn fill(&mut self, b: &mut [u8]) {
        for c in b.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// The per-image seed of image `i` of a run with master seed `master`.
pub fn image_seed(master: u64, i: u32) -> u64 {
    Rng::new(master ^ (u64::from(i) << 32 | u64::from(i))).next_u64()
}

fn ts(s: i64) -> Timespec {
    Timespec { sec: 1_760_000_000 + s, nsec: (s as u32).wrapping_mul(7919) % 1_000_000_000 }
}

/// A base image.
#[derive(Debug, Clone)]
pub struct Base {
    /// Name, for labels.
    pub name: &'static str,
    /// Device bytes.
    pub data: Vec<u8>,
}

fn sim_data(dev: &Dev) -> Result<Vec<u8>, String> {
    match dev {
        Dev::Sim(AnySim::Nand(s)) => Ok(s.data().to_vec()),
        _ => Err("the base is not on the simulator".into()),
    }
}

fn format_dev() -> Result<Dev, String> {
    let dev = Dev::Sim(AnySim::Nand(empty_sim()));
    Fs::format(dev, &FormatOptions { serial: SERIAL, ..FormatOptions::default() }, ts(0))
        .map_err(|(e, _)| format!("format: {e:?}"))
}

fn mount_rw(dev: Dev) -> Result<Fs, String> {
    Fs::mount(dev, MountOptions { cache_nodes: 64, ..MountOptions::default() }).map_err(|(e, _)| format!("mount: {e:?}"))
}

fn err<E: std::fmt::Debug>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e:?}")
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) -> Result<(), String> {
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(err("path"))?;
    let n = std::ffi::CString::new(name).map_err(err("name"))?;
    // SAFETY: valid NUL-terminated strings and a buffer of value.len() bytes.
    let r = unsafe { libc::lsetxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r != 0 {
        return Err(format!("setxattr {}: {}", path.display(), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Builds the host directory tree copied by the `tree` bases under `dir`. Returns whether the
/// host filesystem took the xattrs.
pub fn build_tree(dir: &Path, rng: &mut Rng) -> Result<bool, String> {
    let w = |p: PathBuf, n: usize, rng: &mut Rng| -> Result<(), String> {
        let mut b = vec![0u8; n];
        rng.fill(&mut b);
        fs::write(&p, &b).map_err(|e| format!("write {}: {e}", p.display()))
    };
    let mk = |p: PathBuf| fs::create_dir_all(&p).map_err(|e| format!("mkdir {}: {e}", p.display()));
    mk(dir.join("etc/conf.d"))?;
    mk(dir.join("usr/lib/deep/deeper/deepest"))?;
    mk(dir.join("var/log"))?;
    mk(dir.join("empty"))?;
    for (i, n) in [0usize, 1, 100, 511, 512, 513, 4095, 4096, 4097, 12_000, 65_536, 100_000, 250_000].iter().enumerate() {
        w(dir.join(format!("usr/lib/f{i:02}-{n}")), *n, rng)?;
    }
    w(dir.join("usr/lib/deep/deeper/deepest/leaf"), 3000, rng)?;
    for i in 0..60 {
        w(dir.join(format!("etc/conf.d/entry-{i:03}-{}", "n".repeat(i % 23))), (i * 37) % 700, rng)?;
    }
    fs::write(dir.join("etc/hostname"), b"hostile\n").map_err(err("hostname"))?;
    let sl = |t: &str, l: PathBuf| std::os::unix::fs::symlink(t, &l).map_err(|e| format!("symlink {}: {e}", l.display()));
    sl("../usr/lib/f05-512", dir.join("etc/short"))?;
    sl(&"x/".repeat(150), dir.join("etc/long"))?;
    sl("/nonexistent/target", dir.join("var/dangling"))?;
    sl("usr/lib/deep", dir.join("deeplink"))?;
    fs::hard_link(dir.join("usr/lib/f08-4097"), dir.join("var/hard1")).map_err(err("link"))?;
    fs::hard_link(dir.join("usr/lib/f08-4097"), dir.join("etc/hard2")).map_err(err("link"))?;
    let fifo = std::ffi::CString::new(dir.join("var/fifo").as_os_str().as_bytes()).map_err(err("fifo"))?;
    // SAFETY: a valid NUL-terminated path.
    unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) };
    let mut big = vec![0u8; 2000];
    rng.fill(&mut big);
    let xa = set_xattr(&dir.join("etc/hostname"), "user.small", b"v")
        .and_then(|_| set_xattr(&dir.join("etc/hostname"), "user.big", &big))
        .and_then(|_| set_xattr(&dir.join("etc"), "user.dir", b"a directory xattr"))
        .and_then(|_| set_xattr(&dir.join("usr/lib/f08-4097"), "user.linked", b"on a hard-linked file"));
    Ok(xa.is_ok())
}

fn tree_base(rng: &mut Rng) -> Result<(Base, Base), String> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("ferrofs-hostile-tree-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).map_err(err("tree dir"))?;
    let r = (|| {
        build_tree(&dir, rng)?;
        let mut fs = mount_rw(format_dev()?)?;
        populate(&mut fs, &dir, PopulateOptions { squash_uids: true, verbose: false, fixed_time: Some(ts(50)) }).map_err(|e| format!("populate: {e:?}"))?;
        let dev = fs.unmount().map_err(|(e, _)| format!("unmount: {e:?}"))?;
        let clean = sim_data(&dev)?;
        // the same tree with a log tail: changes fsync'd after the last checkpoint
        let mut fs = mount_rw(dev)?;
        let etc = fs.lookup(ROOT_INO, b"etc").map_err(err("lookup etc"))?.ino;
        let reg = CreateArgs { mode: S_IFREG | 0o640, uid: 7, gid: 8, rdev: 0 };
        let n = fs.create(etc, b"tail-new", &reg, ts(100)).map_err(err("create"))?.ino;
        let mut b = vec![0u8; 9000];
        rng.fill(&mut b);
        fs.write(n, 0, &b, ts(101)).map_err(err("write"))?;
        fs.setxattr(n, b"user.tail", b"in the tail", 0, ts(102)).map_err(err("setxattr"))?;
        let h = fs.lookup(etc, b"hostname").map_err(err("lookup"))?.ino;
        fs.write(h, 2, b"STILE", ts(103)).map_err(err("overwrite"))?;
        fs.unlink(etc, b"hard2", ts(104)).map_err(err("unlink"))?;
        fs.rename(ROOT_INO, b"deeplink", etc, b"deeplink-moved", 0, ts(105)).map_err(err("rename"))?;
        fs.fsync(n).map_err(err("fsync"))?;
        fs.fsync(h).map_err(err("fsync"))?;
        let tail = sim_data(fs.flash())?;
        Ok((Base { name: "tree", data: clean }, Base { name: "tree-tail", data: tail }))
    })();
    let _ = fs::remove_dir_all(&dir);
    r
}

fn history_base(rng: &mut Rng) -> Result<(Base, Base), String> {
    let mut fs = mount_rw(format_dev()?)?;
    let mut t = 1000i64;
    let mut now = || {
        t += 1;
        ts(t)
    };
    let reg = CreateArgs { mode: S_IFREG | 0o644, uid: 1000, gid: 1000, rdev: 0 };
    let mut pat = vec![0u8; 200_000];
    rng.fill(&mut pat);
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0, now()).map_err(err("mkdir"))?.ino;
    let b = fs.mkdir(a, b"b", 0o750, 1, 1, now()).map_err(err("mkdir"))?.ino;
    let mut files = Vec::new();
    for i in 0..40usize {
        let dir = if i % 3 == 0 { b } else { a };
        let name = format!("file-{i:02}");
        let ino = fs.create(dir, name.as_bytes(), &reg, now()).map_err(err("create"))?.ino;
        let n = (i * 2711) % 30_000;
        fs.write(ino, 0, &pat[i..i + n], now()).map_err(err("write"))?;
        if i % 4 == 0 {
            fs.setxattr(ino, b"user.i", name.as_bytes(), 0, now()).map_err(err("setxattr"))?;
        }
        files.push((dir, name, ino));
    }
    fs.symlink(a, b"sym", b"b/file-00", 0, 0, now()).map_err(err("symlink"))?;
    fs.sync().map_err(err("sync 1"))?;
    // overwrites, deletes, renames, truncates
    for (i, (dir, name, ino)) in files.iter().enumerate() {
        match i % 5 {
            0 => {
                fs.write(*ino, 100, &pat[1000..5000], now()).map_err(err("overwrite"))?;
            }
            1 => {
                fs.unlink(*dir, name.as_bytes(), now()).map_err(err("unlink"))?;
                fs.evict(*ino).map_err(err("evict"))?;
            }
            2 => {
                let nn = format!("{name}-renamed");
                fs.rename(*dir, name.as_bytes(), b, nn.as_bytes(), 0, now()).map_err(err("rename"))?;
            }
            3 => {
                fs.setattr(*ino, &SetAttr { size: Some(1234), ..SetAttr::default() }, now()).map_err(err("truncate"))?;
            }
            _ => {}
        }
    }
    fs.checkpoint().map_err(err("checkpoint 2"))?;
    // a big file overwritten until the garbage collector has to move data
    let big = fs.create(ROOT_INO, b"big", &reg, now()).map_err(err("create big"))?.ino;
    for round in 0..4u64 {
        for k in 0..200u64 {
            let o = (round * 997 + k * 13) as usize % 100_000;
            fs.write(big, k * 4096, &pat[o..o + 4096], now()).map_err(err("write big"))?;
        }
        while fs.gc_step(true).map_err(err("gc"))? {}
        fs.sync().map_err(err("sync"))?;
    }
    fs.setattr(big, &SetAttr { size: Some(300_000), ..SetAttr::default() }, now()).map_err(err("truncate big"))?;
    fs.setxattr(a, b"user.dirattr", &pat[..3000], 0, now()).map_err(err("setxattr"))?;
    fs.checkpoint().map_err(err("checkpoint 3"))?;
    // the log tail
    let tdir = fs.mkdir(ROOT_INO, b"tail", 0o700, 0, 0, now()).map_err(err("mkdir tail"))?.ino;
    let mut last = 0;
    for i in 0..12usize {
        let name = format!("t{i}");
        let ino = fs.create(tdir, name.as_bytes(), &reg, now()).map_err(err("create tail"))?.ino;
        fs.write(ino, 0, &pat[i * 100..i * 100 + 2000 + i * 500], now()).map_err(err("write tail"))?;
        last = ino;
    }
    fs.unlink(tdir, b"t3", now()).map_err(err("unlink tail"))?;
    fs.rename(tdir, b"t4", ROOT_INO, b"t4-up", 0, now()).map_err(err("rename tail"))?;
    fs.link(last, a, b"tail-link", now()).map_err(err("link tail"))?;
    fs.write(big, 50_000, &pat[..20_000], now()).map_err(err("write big tail"))?;
    fs.fsync(big).map_err(err("fsync"))?;
    fs.fsync(last).map_err(err("fsync"))?;
    let tail = sim_data(fs.flash())?;
    let dev = fs.unmount().map_err(|(e, _)| format!("unmount: {e:?}"))?;
    Ok((Base { name: "history", data: sim_data(&dev)? }, Base { name: "history-tail", data: tail }))
}

/// A directory with many entries, so that the index has three levels, with a log tail.
fn bigdir_base(rng: &mut Rng) -> Result<Base, String> {
    let mut fs = mount_rw(format_dev()?)?;
    let mut t = 5000i64;
    let mut now = || {
        t += 1;
        ts(t)
    };
    let reg = CreateArgs { mode: S_IFREG | 0o600, uid: 3, gid: 3, rdev: 0 };
    let mut pat = vec![0u8; 8192];
    rng.fill(&mut pat);
    let d = fs.mkdir(ROOT_INO, b"many", 0o755, 0, 0, now()).map_err(err("mkdir"))?.ino;
    for i in 0..1500usize {
        let name = format!("n{i:05}-{}", "q".repeat(i % 40));
        let ino = fs.create(d, name.as_bytes(), &reg, now()).map_err(err("create"))?.ino;
        if i % 4 == 0 {
            fs.write(ino, 0, &pat[i % 4000..i % 4000 + 100 + i % 900], now()).map_err(err("write"))?;
        }
        if i % 50 == 0 {
            fs.setxattr(ino, b"user.n", name.as_bytes(), 0, now()).map_err(err("setxattr"))?;
        }
        if i % 300 == 299 {
            fs.checkpoint().map_err(err("checkpoint"))?;
        }
    }
    for i in (0..1500usize).step_by(7) {
        let name = format!("n{i:05}-{}", "q".repeat(i % 40));
        let ino = fs.lookup(d, name.as_bytes()).map_err(err("lookup"))?.ino;
        fs.unlink(d, name.as_bytes(), now()).map_err(err("unlink"))?;
        fs.evict(ino).map_err(err("evict"))?;
    }
    fs.checkpoint().map_err(err("checkpoint"))?;
    for i in 0..30usize {
        let name = format!("late-{i}");
        let ino = fs.create(d, name.as_bytes(), &reg, now()).map_err(err("create"))?.ino;
        fs.write(ino, 0, &pat[..500 + i * 50], now()).map_err(err("write"))?;
        fs.fsync(ino).map_err(err("fsync"))?;
    }
    Ok(Base { name: "bigdir-tail", data: sim_data(fs.flash())? })
}

/// Builds the bases (deterministic for a seed, apart from the host's xattr support).
pub fn build_bases(seed: u64) -> Result<Vec<Base>, String> {
    let mut rng = Rng::new(seed ^ 0xba5e);
    let (t, tt) = tree_base(&mut rng)?;
    let (h, ht) = history_base(&mut rng)?;
    let b = bigdir_base(&mut rng)?;
    Ok(vec![t, tt, h, ht, b])
}

// ---------------------------------------------------------------- parsing

fn get32(d: &[u8], at: usize) -> u32 {
    d.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).unwrap_or(0)
}
fn put32(d: &mut [u8], at: usize, v: u32) {
    if let Some(b) = d.get_mut(at..at + 4) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}
fn get64(d: &[u8], at: usize) -> u64 {
    u64::from(get32(d, at)) | u64::from(get32(d, at + 4)) << 32
}
fn put64(d: &mut [u8], at: usize, v: u64) {
    if let Some(b) = d.get_mut(at..at + 8) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}
fn put16(d: &mut [u8], at: usize, v: u16) {
    if let Some(b) = d.get_mut(at..at + 2) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

/// A record found in the image.
#[derive(Debug, Clone, Copy)]
pub struct RecAt {
    /// Absolute byte offset of its header.
    pub off: usize,
    /// Segment.
    pub seg: u32,
    /// Its header.
    pub hdr: RecHdr,
}

impl RecAt {
    /// Total length (header and payload).
    pub fn total(&self) -> usize {
        REC_HDR + self.hdr.len as usize
    }
    /// Its location as the index stores it.
    pub fn loc(&self) -> (u32, u32, u32) {
        (self.seg, (self.off % SEG_SIZE as usize) as u32, self.total() as u32)
    }
}

/// What a base holds, as offsets into its bytes.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The superblock.
    pub sb: Superblock,
    /// Offsets of the valid superblock copies.
    pub sb_offs: Vec<usize>,
    /// Valid checkpoints: offset, header.
    pub cps: Vec<(usize, CpHeader)>,
    /// Valid log records.
    pub recs: Vec<RecAt>,
    /// Record CRC seed.
    pub seed: u32,
    /// Meta segments (superblocks, checkpoint areas).
    pub meta: Vec<u32>,
}

impl Parsed {
    /// The newest valid checkpoint.
    pub fn newest(&self) -> Option<(usize, CpHeader)> {
        self.cps.iter().max_by_key(|(_, h)| h.seq).copied()
    }
    fn rec_at(&self, seg: u32, off: u32) -> Option<RecAt> {
        let abs = seg as usize * SEG_SIZE as usize + off as usize;
        self.recs.iter().find(|r| r.off == abs).copied()
    }
    fn of_type(&self, t: u8) -> Vec<RecAt> {
        self.recs.iter().filter(|r| r.hdr.rtype == t).copied().collect()
    }
}

fn align_pos(pos: usize) -> usize {
    let wu = WRITE_UNIT as usize;
    let rem = wu - pos % wu;
    if rem < REC_HDR && rem != wu {
        pos + rem
    } else {
        pos
    }
}

fn rec_crc(seed: u32, hdr: &[u8], payload: &[u8]) -> u32 {
    let mut h = [0u8; REC_HDR];
    h.copy_from_slice(&hdr[..REC_HDR]);
    h[4..8].fill(0);
    crc32c_update(crc32c_update(seed, &h), payload)
}

/// Parses a base image (superblock, checkpoints, records).
pub fn parse(data: &[u8]) -> Result<Parsed, String> {
    let ss = SEG_SIZE as usize;
    let mut sb = None;
    let mut sb_offs = Vec::new();
    for s in 0..SEG_COUNT.min(64) as usize {
        if let Some(b) = data.get(s * ss..s * ss + SB_FULL_SIZE) {
            if let Ok(x) = Superblock::decode(b) {
                sb_offs.push(s * ss);
                sb.get_or_insert(x);
            }
        }
    }
    let sb = sb.ok_or("no valid superblock")?;
    let seed = sb.serial as u32 ^ (sb.serial >> 32) as u32;
    let mut meta: Vec<u32> = sb_offs.iter().map(|o| (o / ss) as u32).collect();
    let mut cps = Vec::new();
    let n = (sb.cp_area_segs as usize).min(MAX_CP_SEGS);
    for area in &sb.cp_segs {
        let segs: Vec<u32> = area[..n].to_vec();
        meta.extend(&segs);
        let area_bytes = n * ss;
        let slot = sb.cp_slot_size as usize;
        if slot == 0 {
            continue;
        }
        for k in 0..area_bytes / slot {
            let lin = k * slot;
            let off = segs[lin / ss] as usize * ss + lin % ss;
            let Some(b) = data.get(off..off + slot) else { continue };
            if get32(b, 0) != CP_MAGIC {
                continue;
            }
            let mut r = ferrofs_engine::codec::Reader::new(b);
            let Ok((h, crc)) = CpHeader::decode(&mut r) else { continue };
            let len = (h.len as usize).min(slot);
            let mut tmp = b[..len].to_vec();
            tmp[4..8].fill(0);
            if crc32c(&tmp) == crc {
                cps.push((off, h));
            }
        }
    }
    let mut recs = Vec::new();
    for s in 0..SEG_COUNT {
        if meta.contains(&s) {
            continue;
        }
        let seg = &data[s as usize * ss..(s as usize + 1) * ss];
        let Ok(first) = RecHdr::decode(seg) else { continue };
        if first.rtype != rtype::SEGHDR {
            continue;
        }
        let mut pos = 0usize;
        loop {
            pos = align_pos(pos);
            let Some(hb) = seg.get(pos..pos + REC_HDR) else { break };
            let Ok(h) = RecHdr::decode(hb) else { break };
            if h.seg_seq != first.seg_seq {
                break;
            }
            let end = pos + REC_HDR + h.len as usize;
            let Some(p) = seg.get(pos + REC_HDR..end) else { break };
            if rec_crc(seed, hb, p) != h.crc {
                break;
            }
            recs.push(RecAt { off: s as usize * ss + pos, seg: s, hdr: h });
            pos = end;
        }
    }
    Ok(Parsed { sb, sb_offs, cps, recs, seed, meta })
}

// ---------------------------------------------------------------- CRC fix-ups

/// Recomputes the CRC of the superblock copy at `off` (and of the parts of its extension that
/// the compat feature bits say it has: the open-segment limit, the FTL page).
pub fn fix_sb(d: &mut [u8], off: usize) {
    if let Some(b) = d.get_mut(off..off + SB_SIZE) {
        b[4..8].fill(0);
        let c = crc32c(b);
        b[4..8].copy_from_slice(&c.to_le_bytes());
    }
    let compat = d.get(off + 12..off + 20).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).unwrap_or(0);
    for (bit, at) in [(FEATURE_COMPAT_OPEN_SEGMENTS, SB_SIZE), (FEATURE_COMPAT_FTL_PAGE, SB_SIZE + 8)] {
        if compat & bit != 0 {
            if let Some(e) = d.get_mut(off + at..off + at + 8) {
                let c = crc32c(&e[..4]);
                e[4..8].copy_from_slice(&c.to_le_bytes());
            }
        }
    }
}

/// Recomputes the CRC of the checkpoint blob at `off` over its (possibly forged) length,
/// clamped to the slot.
pub fn fix_cp(d: &mut [u8], off: usize, slot: usize) {
    let len = (get32(d, off + 12) as usize).clamp(8, slot.max(8));
    if let Some(b) = d.get_mut(off..off + len) {
        b[4..8].fill(0);
        let c = crc32c(b);
        b[4..8].copy_from_slice(&c.to_le_bytes());
    }
}

/// Recomputes the CRC of the record at `off` over its (possibly forged) length, if the record
/// then still ends inside its segment.
pub fn fix_rec(d: &mut [u8], off: usize, seed: u32) {
    let ss = SEG_SIZE as usize;
    let seg_end = (off / ss + 1) * ss;
    let len = get32(d, off + 44) as usize;
    let end = off.saturating_add(REC_HDR).saturating_add(len);
    if end > seg_end || end > d.len() {
        return;
    }
    let c = rec_crc(seed, &d[off..off + REC_HDR], &d[off + REC_HDR..end]);
    put32(d, off + 4, c);
}

// ---------------------------------------------------------------- mutations

fn extreme32(rng: &mut Rng, orig: u32) -> u32 {
    match rng.below(15) {
        0 => 0,
        1 => 1,
        2 => orig.wrapping_add(1),
        3 => orig.wrapping_sub(1),
        4 => orig.wrapping_mul(2),
        5 => orig / 2,
        6 => 0x7fff_ffff,
        7 => 0x8000_0000,
        8 => u32::MAX,
        9 => u32::MAX - 1,
        10 => rng.next_u64() as u32,
        11 => rng.below(256) as u32,
        12 => 1 << rng.below(32),
        13 => orig ^ (1 << rng.below(32)),
        _ => orig.wrapping_add(SEG_SIZE),
    }
}

fn extreme64(rng: &mut Rng, orig: u64) -> u64 {
    match rng.below(12) {
        0 => 0,
        1 => 1,
        2 => orig.wrapping_add(1),
        3 => orig.wrapping_sub(1),
        4 => u64::MAX,
        5 => u64::MAX - 1,
        6 => i64::MAX as u64,
        7 => 1 << rng.below(64),
        8 => rng.next_u64(),
        9 => orig ^ (1 << rng.below(64)),
        10 => u64::from(u32::MAX) + 1,
        _ => orig.wrapping_mul(2),
    }
}

fn programmed_page(rng: &mut Rng, d: &[u8]) -> usize {
    let wu = WRITE_UNIT as usize;
    let pages: Vec<usize> = (0..d.len() / wu).filter(|&p| d[p * wu..(p + 1) * wu].iter().any(|&b| b != 0xFF)).collect();
    if pages.is_empty() {
        0
    } else {
        pages[rng.idx(pages.len())] * wu
    }
}

fn pick<T: Copy>(rng: &mut Rng, v: &[T]) -> Option<T> {
    if v.is_empty() {
        None
    } else {
        Some(v[rng.idx(v.len())])
    }
}

/// Index nodes reachable from the newest checkpoint's root (breadth first, cycle-safe).
fn live_index_nodes(p: &Parsed, d: &[u8]) -> Vec<RecAt> {
    let mut out: Vec<RecAt> = Vec::new();
    let Some((_, cp)) = p.newest() else { return out };
    if !cp.has_root {
        return out;
    }
    let mut queue = vec![(cp.root.seg, cp.root.off)];
    while let Some((s, o)) = queue.pop() {
        let Some(r) = p.rec_at(s, o) else { continue };
        if r.hdr.rtype != rtype::INDEX || out.iter().any(|x| x.off == r.off) || out.len() > 500 {
            continue;
        }
        out.push(r);
        let pl = r.off + REC_HDR;
        let level = node_level(d[pl]);
        let count = u16::from_le_bytes([d[pl + 1], d[pl + 2]]) as usize;
        if level > 0 {
            for e in 0..count.min(64) {
                let eo = pl + 3 + 29 * e + 17;
                queue.push((get32(d, eo), get32(d, eo + 4)));
            }
        }
    }
    out
}

/// The kinds of mutation, by name; each image draws one to three of them.
pub const KINDS: &[&str] = &[
    "flip", "flip-fixed", "wipe-rec", "wipe-page", "wipe-seg", "truncate", "rec-hdr", "payload", "index", "cp", "sb",
    "dup-rec", "dir-loop",
];

/// Applies one mutation of kind `k` to `d` (parsed as `p`); returns its label.
pub fn mutate_one(k: &str, rng: &mut Rng, p: &Parsed, d: &mut [u8]) -> String {
    let ss = SEG_SIZE as usize;
    let wu = WRITE_UNIT as usize;
    match k {
        "flip" => {
            let n = 1 + rng.below(8);
            for _ in 0..n {
                let pg = programmed_page(rng, d);
                let at = pg + rng.idx(wu);
                d[at] ^= 1 << rng.below(8);
            }
            format!("flip{n}")
        }
        "flip-fixed" => {
            let n = 1 + rng.below(4);
            match rng.below(10) {
                0 if !p.sb_offs.is_empty() => {
                    let o = p.sb_offs[rng.idx(p.sb_offs.len())];
                    for _ in 0..n {
                        let at = o + 8 + rng.idx(SB_SIZE - 8);
                        d[at] ^= 1 << rng.below(8);
                    }
                    fix_sb(d, o);
                    format!("flipfix-sb{n}")
                }
                1 if !p.cps.is_empty() => {
                    let (o, h) = p.cps[rng.idx(p.cps.len())];
                    for _ in 0..n {
                        let at = o + 8 + rng.idx((h.len as usize).saturating_sub(8).max(1));
                        d[at] ^= 1 << rng.below(8);
                    }
                    fix_cp(d, o, p.sb.cp_slot_size as usize);
                    format!("flipfix-cp{n}")
                }
                _ => {
                    let Some(r) = pick(rng, &p.recs) else { return "none".into() };
                    for _ in 0..n {
                        let mut at = r.off + 8 + rng.idx(r.total() - 8);
                        if at >= r.off + 41 && at < r.off + 44 {
                            at = r.off + 40; // keep the reserved bytes: they are not checked
                        }
                        d[at] ^= 1 << rng.below(8);
                    }
                    fix_rec(d, r.off, p.seed);
                    format!("flipfix-{}{n}", rt(r.hdr.rtype))
                }
            }
        }
        "wipe-rec" => {
            let Some(r) = pick(rng, &p.recs) else { return "none".into() };
            let v = if rng.pct(50) { 0 } else { 0xFF };
            let end = (r.off + r.total()).min(d.len());
            d[r.off..end].fill(v);
            format!("wipe{v:x}-{}", rt(r.hdr.rtype))
        }
        "wipe-page" => {
            let pg = programmed_page(rng, d);
            let v = if rng.pct(50) { 0 } else { 0xFF };
            let n = 1 + rng.idx(4);
            let end = (pg + n * wu).min(d.len());
            d[pg..end].fill(v);
            format!("wipe{v:x}-page{n}")
        }
        "wipe-seg" => {
            let what = rng.below(4);
            let seg = match what {
                0 => pick(rng, &p.meta).unwrap_or(0),
                _ => pick(rng, &p.recs).map(|r| r.seg).unwrap_or(10),
            } as usize;
            let v = if rng.pct(60) { 0xFF } else { 0 };
            d[seg * ss..(seg + 1) * ss].fill(v);
            format!("wipe{v:x}-seg{}", if what == 0 { "meta" } else { "log" })
        }
        "truncate" => {
            let pg = programmed_page(rng, d) + rng.idx(wu);
            if rng.pct(50) {
                d[pg..].fill(0xFF);
                "truncate-image".into()
            } else {
                let end = (pg / ss + 1) * ss;
                d[pg..end].fill(0xFF);
                "truncate-seg".into()
            }
        }
        "rec-hdr" => {
            let Some(r) = pick(rng, &p.recs) else { return "none".into() };
            let f = rng.below(8);
            let name = match f {
                0 => {
                    let v = extreme32(rng, r.hdr.len);
                    put32(d, r.off + 44, v);
                    "len"
                }
                1 => {
                    let v = extreme64(rng, r.hdr.seq);
                    put64(d, r.off + 8, v);
                    "seq"
                }
                2 => {
                    let v = extreme64(rng, r.hdr.seg_seq);
                    put64(d, r.off + 16, v);
                    "segseq"
                }
                3 => {
                    let v = extreme64(rng, r.hdr.key.ino);
                    put64(d, r.off + 24, v);
                    "ino"
                }
                4 => {
                    let v = extreme64(rng, r.hdr.key.key);
                    put64(d, r.off + 32, v);
                    "key"
                }
                5 => {
                    d[r.off + 40] = rng.below(256) as u8;
                    "kind"
                }
                6 => {
                    d[r.off + 2] = if rng.pct(50) { rng.below(10) as u8 } else { rng.below(256) as u8 };
                    "type"
                }
                _ => {
                    d[r.off + 3] ^= 1;
                    "cont"
                }
            };
            fix_rec(d, r.off, p.seed);
            format!("hdr-{}-{name}", rt(r.hdr.rtype))
        }
        "payload" => payload(rng, p, d),
        "index" => index(rng, p, d),
        "cp" => cp(rng, p, d),
        "sb" => sb(rng, p, d),
        "dup-rec" => {
            // a valid record copied over another one (the copy takes the target segment's
            // sequence): the same key twice, with another sequence number
            let (Some(a), Some(b)) = (pick(rng, &p.recs), pick(rng, &p.recs)) else { return "none".into() };
            if a.hdr.rtype == rtype::SEGHDR || b.hdr.rtype == rtype::SEGHDR || a.off == b.off {
                return "dup-none".into();
            }
            let src = d[a.off..a.off + a.total()].to_vec();
            let seg_end = (b.off / ss + 1) * ss;
            let n = src.len().min(seg_end - b.off);
            d[b.off..b.off + n].copy_from_slice(&src[..n]);
            put64(d, b.off + 16, get64(d, b.seg as usize * ss + 16));
            if rng.pct(50) {
                put64(d, b.off + 8, b.hdr.seq);
            }
            fix_rec(d, b.off, p.seed);
            format!("dup-{}-over-{}", rt(a.hdr.rtype), rt(b.hdr.rtype))
        }
        "dir-loop" => {
            let dents = p.of_type(rtype::DENT);
            let Some(r) = pick(rng, &dents) else { return "none".into() };
            let pl = r.off + REC_HDR;
            let dirs: Vec<u64> = dents.iter().filter(|x| d[x.off + REC_HDR + 8] == 4).map(|x| get64(d, x.off + REC_HDR)).collect();
            let (v, name) = match rng.below(4) {
                0 => (ROOT_INO, "root"),
                1 => (r.hdr.key.ino, "self"),
                2 => (pick(rng, &dirs).unwrap_or(ROOT_INO), "dir"),
                _ => (get64(d, pl).wrapping_add(1), "next"),
            };
            put64(d, pl, v);
            if rng.pct(50) {
                d[pl + 8] = 4; // DT_DIR
            }
            fix_rec(d, r.off, p.seed);
            format!("dent-to-{name}")
        }
        _ => "none".into(),
    }
}

fn rt(t: u8) -> &'static str {
    match t {
        rtype::PAD => "pad",
        rtype::SEGHDR => "seghdr",
        rtype::INODE => "inode",
        rtype::DENT => "dent",
        rtype::DATA => "data",
        rtype::XATTR => "xattr",
        rtype::ORPHAN => "orphan",
        rtype::DELETE => "delete",
        rtype::INDEX => "index",
        rtype::SEGTAB => "segtab",
        _ => "rec",
    }
}

fn payload(rng: &mut Rng, p: &Parsed, d: &mut [u8]) -> String {
    let types = [rtype::INODE, rtype::DENT, rtype::XATTR, rtype::DELETE, rtype::SEGHDR, rtype::SEGTAB, rtype::DATA];
    let t = types[rng.idx(types.len())];
    let Some(r) = pick(rng, &p.of_type(t)) else { return format!("payload-no-{}", rt(t)) };
    let pl = r.off + REC_HDR;
    let plen = r.hdr.len as usize;
    let f;
    match t {
        rtype::INODE => {
            let (at, w, name) = [
                (0, 8, "ino"),
                (8, 4, "mode"),
                (20, 4, "nlink"),
                (24, 8, "size"),
                (32, 8, "atime"),
                (40, 4, "nsec"),
                (68, 4, "rdev"),
                (72, 4, "flags"),
                (80, 8, "parent"),
            ][rng.idx(9)];
            f = name;
            if name == "mode" && rng.pct(50) {
                let modes = [0o040755u32, 0o100644, 0o120777, 0o020600, 0o060600, 0o010644, 0o140755, 0o170777, 0];
                put32(d, pl + 8, modes[rng.idx(modes.len())]);
            } else if w == 8 {
                let v = extreme64(rng, get64(d, pl + at));
                put64(d, pl + at, v);
            } else {
                let v = extreme32(rng, get32(d, pl + at));
                put32(d, pl + at, v);
            }
        }
        rtype::DENT => match rng.below(4) {
            0 => {
                let v = extreme64(rng, get64(d, pl));
                put64(d, pl, v);
                f = "child";
            }
            1 => {
                d[pl + 8] = rng.below(16) as u8;
                f = "dtype";
            }
            2 => {
                d[pl + 9] = if rng.pct(50) { 0 } else { 255 };
                f = "namelen";
            }
            _ => {
                let n = d[pl + 9] as usize;
                if n > 0 && pl + 10 + n <= pl + plen {
                    d[pl + 10 + rng.idx(n)] = if rng.pct(50) { b'/' } else { 0 };
                }
                f = "name";
            }
        },
        rtype::XATTR => {
            d[pl] = match rng.below(3) {
                0 => 0,
                1 => 255,
                _ => d[pl].wrapping_add(1),
            };
            f = "namelen";
        }
        rtype::DELETE => {
            // The range's ends. `from` is the payload's first key on the long form (34 bytes)
            // and the header key (ino @24, kind @40 of the header) on the short ones; `to` is
            // the payload's last key (ino @0, kind @8, key @9 of its 17 bytes), or the header
            // key itself on the one-key form (no payload).
            let hk = r.off;
            let (from_ino, from_kind, to) = match plen {
                34 => (pl, pl + 8, Some(pl + 17)),
                17 => (hk + 24, hk + 40, Some(pl)),
                _ => (hk + 24, hk + 40, None),
            };
            match (rng.below(4), to) {
                (0, _) => {
                    put64(d, from_ino, 0);
                    if let Some(t) = to {
                        put64(d, t, u64::MAX);
                    }
                    f = "everything";
                }
                (1, _) => {
                    put64(d, from_ino, ROOT_INO);
                    d[from_kind] = 0;
                    if let Some(t) = to {
                        put64(d, t, ROOT_INO);
                        d[t + 8] = 255;
                    }
                    f = "root";
                }
                (2, Some(t)) => {
                    let a = get64(d, from_ino);
                    put64(d, from_ino, a.wrapping_add(1));
                    put64(d, t, a.saturating_sub(1));
                    f = "inverted";
                }
                (_, Some(t)) => {
                    let v = extreme64(rng, get64(d, t + 9));
                    put64(d, t + 9, v);
                    f = "tokey";
                }
                (_, None) => {
                    d[from_kind] = rng.below(256) as u8;
                    f = "kind";
                }
            }
        }
        rtype::SEGHDR => {
            match rng.below(3) {
                0 => d[pl] = rng.below(256) as u8,
                1 => {
                    let v = extreme32(rng, get32(d, pl + 1));
                    put32(d, pl + 1, v);
                }
                _ => {
                    let v = if rng.pct(50) { r.seg } else { extreme32(rng, get32(d, pl + 5)) };
                    put32(d, pl + 5, v);
                }
            }
            f = "fields";
        }
        rtype::SEGTAB => {
            match rng.below(4) {
                0 => {
                    let v = extreme32(rng, get32(d, pl));
                    put32(d, pl, v);
                    f = "first";
                }
                1 => {
                    put16(d, pl + 4, [0u16, 1, 201, u16::MAX][rng.idx(4)]);
                    f = "count";
                }
                2 => {
                    let n = (plen.saturating_sub(6)) / 18;
                    for _ in 0..1 + rng.below(8) {
                        let e = pl + 6 + 18 * rng.idx(n.max(1));
                        d[e] = rng.below(8) as u8;
                    }
                    f = "states";
                }
                _ => {
                    let n = (plen.saturating_sub(6)) / 18;
                    let e = pl + 6 + 18 * rng.idx(n.max(1));
                    let v = extreme32(rng, get32(d, e + 2));
                    put32(d, e + 2, v);
                    f = "live";
                }
            }
        }
        _ => {
            // DATA: content changes with a valid CRC (undetectable), or a forged length
            let v = extreme32(rng, r.hdr.len);
            put32(d, r.off + 44, v);
            f = "len";
        }
    }
    fix_rec(d, r.off, p.seed);
    format!("payload-{}-{f}", rt(t))
}

/// A mutation of the compact leaf `r` (format.md 3.4): its marker, its count, raw bytes of its
/// entries, or one entry changed as the fixed-encoding mutations change them (a location at
/// itself, at the root, at another node or a non-index record, an extreme key or location, two
/// keys swapped) and the leaf encoded again at its old length, the varints padded (overlong
/// forms decode as well), so that the record and its parent's location stay consistent.
fn compact_leaf(rng: &mut Rng, p: &Parsed, d: &mut [u8], r: RecAt, live: &[RecAt]) -> String {
    let pl = r.off + REC_HDR;
    let len = r.hdr.len as usize;
    let count = u16::from_le_bytes([d[pl + 1], d[pl + 2]]) as usize;
    let f = match rng.below(6) {
        0 => {
            d[pl] = [0u8, 1, 12, 0x81, 0xff, 0x7f][rng.idx(6)];
            "marker"
        }
        1 => {
            put16(d, pl + 1, [0u16, 65, u16::MAX, (count as u16).wrapping_add(1), (count as u16).saturating_sub(1)][rng.idx(5)]);
            "count"
        }
        2 if len > 3 => {
            for _ in 0..1 + rng.below(3) {
                let at = pl + 3 + rng.idx(len - 3);
                d[at] = [0u8, 0x7f, 0x80, 0xff, d[at] ^ (1 << rng.below(8))][rng.idx(5)];
            }
            "bytes"
        }
        _ => {
            let e = rng.idx(count.max(1));
            let root = p.newest().map(|(_, c)| c.root).unwrap_or_default();
            let at = |x: &RecAt| {
                let (seg, off, len) = x.loc();
                Loc { seg, off, len }
            };
            let other = pick(rng, live).unwrap_or(r);
            let rng_key = rng.below(1 << 20);
            let (what, pick_what, x1, x2) = (rng.below(7), rng.below(3), extreme64(rng, rng_key), rng.idx(8));
            let mut label = "none";
            let ok = reencode_compact_leaf(&mut d[pl..pl + len], |v| {
                let n = v.len();
                let i = e % n.max(1);
                label = match what {
                    0 => {
                        v[i].1 = at(&r);
                        "self-loop"
                    }
                    1 => {
                        v[i].1 = root;
                        "cycle-to-root"
                    }
                    2 => {
                        v[i].1 = at(&other);
                        "to-index"
                    }
                    3 => {
                        let l = &mut v[i].1;
                        match pick_what {
                            0 => l.seg = [NO_SEG, SEG_COUNT, SEG_COUNT - 1, 0][x2 % 4],
                            1 => l.off = [0, 1, l.off.wrapping_add(1), l.off / 2, 0x7fff_ffff][x2 % 5],
                            _ => l.len = [0u32, 1, 47, 48, 49, SEG_SIZE, SEG_SIZE + 1, u32::MAX][x2],
                        }
                        "loc"
                    }
                    4 if n > 1 => {
                        let e2 = (i + 1) % n;
                        let k = v[i].0;
                        v[i].0 = v[e2].0;
                        v[e2].0 = k;
                        "unsorted"
                    }
                    _ => {
                        v[i].0.key = x1;
                        "key"
                    }
                };
            });
            if !ok {
                return format!("index-compact-{label}-no-room");
            }
            label
        }
    };
    fix_rec(d, r.off, p.seed);
    format!("index-compact-{f}")
}

/// Decode the compact leaf `payload` (format.md 5.1), let `edit` change its entries, and encode
/// them back at exactly the old length, the last varint padded with overlong bytes (which
/// decode the same), so that the record and its parent's location stay consistent. False (and
/// `payload` unchanged) when the leaf does not decode or the edited entries need more bytes
/// than it has (or more padding than the last varint can take).
pub fn reencode_compact_leaf(payload: &mut [u8], edit: impl FnOnce(&mut Vec<(Key, Loc)>)) -> bool {
    let mut v: Vec<(Key, Loc)> = Vec::new();
    let decoded = decode_node(payload, &mut |k, l| {
        v.push((k, l));
        Ok(())
    });
    if decoded != Ok(0) || payload.first() != Some(&INDEX_COMPACT_LEAF) || v.is_empty() {
        return false;
    }
    edit(&mut v);
    let mut out = vec![0u8; COMPACT_WORST];
    let Ok(n) = encode_compact_leaf(v.len(), &mut |i| v.get(i).copied().ok_or(ferrofs_engine::Error::Invalid), &mut out) else {
        return false;
    };
    let pad = payload.len().saturating_sub(n);
    if n > payload.len() || n < 4 || pad > 5 {
        return false;
    }
    out.truncate(n);
    if pad > 0 {
        let last = out.pop().unwrap_or(0);
        out.push(last | 0x80);
        out.extend(std::iter::repeat_n(0x80u8, pad - 1));
        out.push(0);
    }
    payload.copy_from_slice(&out);
    true
}

fn index(rng: &mut Rng, p: &Parsed, d: &mut [u8]) -> String {
    let live = live_index_nodes(p, d);
    let all = p.of_type(rtype::INDEX);
    // every level equally often (leaves outnumber the inner nodes by far)
    let mut levels: Vec<u8> = live.iter().map(|r| node_level(d[r.off + REC_HDR])).collect();
    levels.sort_unstable();
    levels.dedup();
    let node = if !live.is_empty() && rng.pct(85) {
        let l = pick(rng, &levels).unwrap_or(0);
        let at: Vec<RecAt> = live.iter().filter(|r| node_level(d[r.off + REC_HDR]) == l).copied().collect();
        pick(rng, &at)
    } else {
        pick(rng, &all)
    };
    let Some(r) = node else { return "index-none".into() };
    let pl = r.off + REC_HDR;
    if d[pl] == INDEX_COMPACT_LEAF {
        return compact_leaf(rng, p, d, r, &live);
    }
    let level = d[pl];
    let count = u16::from_le_bytes([d[pl + 1], d[pl + 2]]) as usize;
    let ent = |i: usize| pl + 3 + 29 * i;
    let e = rng.idx(count.max(1));
    let root = p.newest().map(|(_, c)| (c.root.seg, c.root.off, c.root.len)).unwrap_or((0, 0, 0));
    let f = match rng.below(12) {
        0 => {
            d[pl] = [0u8, 1, 12, 13, 255, level.wrapping_add(1), level.wrapping_sub(1)][rng.idx(7)];
            "level"
        }
        1 => {
            put16(d, pl + 1, [0u16, 65, u16::MAX, (count as u16).wrapping_add(1), (count as u16).saturating_sub(1)][rng.idx(5)]);
            "count"
        }
        2 => {
            let v = [NO_SEG, SEG_COUNT, SEG_COUNT - 1, 0, 1, p.meta.get(2).copied().unwrap_or(2)][rng.idx(6)];
            put32(d, ent(e) + 17, v);
            "loc-seg"
        }
        3 => {
            let v = extreme32(rng, get32(d, ent(e) + 21));
            put32(d, ent(e) + 21, v);
            "loc-off"
        }
        4 => {
            let v = [0u32, 1, 47, 48, 49, SEG_SIZE, SEG_SIZE + 1, u32::MAX][rng.idx(8)];
            put32(d, ent(e) + 25, v);
            "loc-len"
        }
        5 => {
            let (s, o, l) = r.loc();
            put32(d, ent(e) + 17, s);
            put32(d, ent(e) + 21, o);
            put32(d, ent(e) + 25, l);
            "self-loop"
        }
        6 => {
            put32(d, ent(e) + 17, root.0);
            put32(d, ent(e) + 21, root.1);
            put32(d, ent(e) + 25, root.2);
            "cycle-to-root"
        }
        7 => {
            // cross-link: two entries (or two nodes) share a child
            let other = pick(rng, &live).unwrap_or(r);
            let (s, o, l) = if rng.pct(50) && count > 1 {
                let e2 = (e + 1) % count;
                (get32(d, ent(e2) + 17), get32(d, ent(e2) + 21), get32(d, ent(e2) + 25))
            } else {
                other.loc()
            };
            put32(d, ent(e) + 17, s);
            put32(d, ent(e) + 21, o);
            put32(d, ent(e) + 25, l);
            "cross-link"
        }
        8 => {
            let non: Vec<RecAt> = p.recs.iter().filter(|x| x.hdr.rtype != rtype::INDEX).copied().collect();
            if let Some(x) = pick(rng, &non) {
                let (s, o, l) = x.loc();
                put32(d, ent(e) + 17, s);
                put32(d, ent(e) + 21, o);
                put32(d, ent(e) + 25, l);
            }
            "to-non-index"
        }
        9 => {
            if count > 1 {
                let e2 = (e + 1) % count;
                let a = d[ent(e)..ent(e) + 17].to_vec();
                let b = d[ent(e2)..ent(e2) + 17].to_vec();
                d[ent(e)..ent(e) + 17].copy_from_slice(&b);
                if rng.pct(50) {
                    d[ent(e2)..ent(e2) + 17].copy_from_slice(&a);
                }
            }
            "unsorted"
        }
        10 => {
            let v = extreme64(rng, get64(d, ent(e)));
            put64(d, ent(e), v);
            d[ent(e) + 8] = if rng.pct(30) { rng.below(256) as u8 } else { d[ent(e) + 8] };
            "key"
        }
        _ => {
            // a leaf entry pointing at an index node, or an internal one at a data record
            let target = if level == 0 { pick(rng, &live) } else { pick(rng, &p.of_type(rtype::DATA)) };
            if let Some(x) = target {
                let (s, o, l) = x.loc();
                put32(d, ent(e) + 17, s);
                put32(d, ent(e) + 21, o);
                put32(d, ent(e) + 25, l);
            }
            "level-confusion"
        }
    };
    fix_rec(d, r.off, p.seed);
    format!("index-l{level}-{f}")
}

fn cp(rng: &mut Rng, p: &Parsed, d: &mut [u8]) -> String {
    let Some((newest, _)) = p.newest() else { return "cp-none".into() };
    let (o, forged_old) = if p.cps.len() > 1 && rng.pct(15) {
        let (o, _) = p.cps[rng.idx(p.cps.len())];
        put64(d, o + 16, u64::MAX - 1);
        (o, true)
    } else {
        (newest, false)
    };
    let slot = p.sb.cp_slot_size as usize;
    let seg_count = get32(d, o + 186);
    let f = match rng.below(14) {
        0 => {
            let v = [0u32, 7, 8, 189, 190, 191, slot as u32, slot as u32 + 1, u32::MAX][rng.idx(9)];
            put32(d, o + 12, v);
            "len"
        }
        1 => {
            let v = extreme64(rng, get64(d, o + 16));
            put64(d, o + 16, v);
            "seq"
        }
        2 => {
            let v = [NO_SEG, SEG_COUNT, 0, 2][rng.idx(4)];
            put32(d, o + 32, v);
            "root-seg"
        }
        3 => {
            let v = extreme32(rng, get32(d, o + 36));
            put32(d, o + 36, v);
            "root-off"
        }
        4 => {
            let v = [0u32, 1, 48, 51, SEG_SIZE, u32::MAX][rng.idx(6)];
            put32(d, o + 40, v);
            "root-len"
        }
        5 => {
            d[o + 44] = [0u8, 1, 2, 12, 13, 255][rng.idx(6)];
            "root-level"
        }
        6 => {
            d[o + 45] ^= 1;
            "has-root"
        }
        7 => {
            let v = [0u64, 1, 2, u64::MAX, u64::MAX - 1, 1 << 63][rng.idx(6)];
            put64(d, o + 46, v);
            "next-ino"
        }
        8 => {
            let v = extreme64(rng, get64(d, o + 54));
            put64(d, o + 54, v);
            "next-seq"
        }
        9 | 10 => {
            let h = o + 62 + 20 * rng.idx(3);
            match rng.below(4) {
                0 => put32(d, h, [NO_SEG, SEG_COUNT, 0, 2, u32::MAX - 1][rng.idx(5)]),
                1 => {
                    let v = [SEG_SIZE, SEG_SIZE - 1, 1, 47, u32::MAX, get32(d, h + 4).wrapping_add(512)][rng.idx(6)];
                    put32(d, h + 4, v);
                }
                2 => {
                    let v = extreme64(rng, get64(d, h + 8));
                    put64(d, h + 8, v);
                }
                _ => put32(d, h + 16, [NO_SEG - 1, SEG_COUNT, 0, get32(d, h)][rng.idx(4)]),
            }
            "head"
        }
        11 => {
            let v = [0u32, 1, seg_count.wrapping_add(1), seg_count.saturating_sub(1), 201, u32::MAX, 1 << 20][rng.idx(7)];
            put32(d, o + 186, v);
            "seg-count"
        }
        12 => {
            let c = o + 190;
            let which = rng.below(3) as usize;
            let v = match which {
                0 => [NO_SEG, SEG_COUNT, 0][rng.idx(3)],
                1 => extreme32(rng, get32(d, c + 4)),
                _ => [0u32, 48, u32::MAX, SEG_SIZE][rng.idx(4)],
            };
            put32(d, c + 4 * which, v);
            "segtab-loc"
        }
        _ => {
            for i in 0..8 {
                let v = extreme64(rng, get64(d, o + 122 + 8 * i));
                put64(d, o + 122 + 8 * i, v);
            }
            "stats"
        }
    };
    fix_cp(d, o, slot);
    format!("cp{}-{f}", if forged_old { "-old" } else { "" })
}

fn sb(rng: &mut Rng, p: &Parsed, d: &mut [u8]) -> String {
    let both = rng.pct(80);
    // one forgery, the same in both copies (or only in the first)
    let field = rng.below(15);
    let cp_slot = p.sb.cp_slot_size;
    let r1 = rng.next_u64();
    let mut label = "";
    for (n, &o) in p.sb_offs.iter().enumerate() {
        if n > 0 && !both {
            break;
        }
        let mut rr = Rng::new(r1);
        let rng = &mut rr;
        label = match field {
            0 => {
                put32(d, o + 8, [0u32, 2, u32::MAX][rng.idx(3)]);
                "version"
            }
            1 => {
                let at = [12usize, 20, 28][rng.idx(3)];
                let v = get64(d, o + at) | 1 << (1 + rng.below(63));
                put64(d, o + at, v);
                "features"
            }
            2 => {
                d[o + 36] = [0u8, 2, 3, 255][rng.idx(4)];
                "kind"
            }
            3 => {
                put32(d, o + 37, [0u32, 1, 512, 16384, SEG_SIZE / 2, SEG_SIZE * 2, u32::MAX, 1 << 31][rng.idx(8)]);
                "seg-size"
            }
            4 => {
                put32(d, o + 41, [0u32, 1, 15, 16, SEG_COUNT - 1, SEG_COUNT + 1, u32::MAX, 1 << 24][rng.idx(8)]);
                "seg-count"
            }
            5 => {
                put32(d, o + 45, [0u32, 1, 3, 256, 1024, 4096, SEG_SIZE, u32::MAX][rng.idx(8)]);
                "write-unit"
            }
            6 => {
                let i = rng.idx(2);
                put32(d, o + 65 + 4 * i, [NO_SEG, SEG_COUNT, 2, 5, get32(d, o + 65 + 4 * (1 - i))][rng.idx(5)]);
                "sb-segs"
            }
            7 => {
                put32(d, o + 73, [0u32, 2, 3, 16, 17, 255, u32::MAX][rng.idx(7)]);
                "cp-area-segs"
            }
            8..=10 => {
                let v = [
                    0u32,
                    1,
                    48,
                    cp_slot - 1,
                    cp_slot + 1,
                    cp_slot * 2,
                    SEG_SIZE,
                    SEG_SIZE * 16,
                    SEG_SIZE * 16 + 512,
                    1 << 30,
                    1 << 31,
                    u32::MAX,
                    u32::MAX - 511,
                ][rng.idx(13)];
                put32(d, o + 77, v);
                "cp-slot-size"
            }
            11 | 12 => {
                let a = rng.idx(2);
                let lim = if rng.pct(70) { 1 } else { MAX_CP_SEGS };
                let i = rng.idx(lim);
                let v = [NO_SEG, SEG_COUNT, 0, 1, get32(d, o + 81 + 64 * (1 - a)), 10, u32::MAX - 1][rng.idx(7)];
                put32(d, o + 81 + 64 * a + 4 * i, v);
                "cp-segs"
            }
            13 => {
                let v = extreme64(rng, get64(d, o + 57));
                put64(d, o + 57, v);
                "serial"
            }
            _ => {
                // geometry consistent with itself but not with the medium
                put32(d, o + 37, SEG_SIZE / 2);
                put32(d, o + 41, SEG_COUNT * 2);
                "half-segments"
            }
        };
        fix_sb(d, o);
    }
    format!("sb{}-{label}", if both { "" } else { "1" })
}

/// One hostile image: the base it came from, its seed, its label and its bytes.
#[derive(Debug, Clone)]
pub struct Image {
    /// Index into the bases.
    pub base: u32,
    /// Per-image seed.
    pub seed: u64,
    /// What was done.
    pub label: String,
    /// Device bytes.
    pub data: Vec<u8>,
}

/// Builds image `seed` from the bases (parsed as `parsed`).
pub fn make_image(bases: &[Base], parsed: &[Parsed], seed: u64) -> Image {
    let mut rng = Rng::new(seed);
    let b = rng.idx(bases.len());
    let mut data = bases[b].data.clone();
    let n = match rng.below(10) {
        0..=6 => 1,
        7 | 8 => 2,
        _ => 3,
    };
    let mut labels = vec![bases[b].name.to_string()];
    for _ in 0..n {
        let k = KINDS[rng.idx(KINDS.len())];
        labels.push(mutate_one(k, &mut rng, &parsed[b], &mut data));
    }
    Image { base: b as u32, seed, label: labels.join(":"), data }
}

/// Index entries differing between `base` and `img`, as (offset, bytes) runs of whole
/// write units.
pub fn diff(base: &[u8], img: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let wu = WRITE_UNIT as usize;
    let mut out: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut u = 0;
    let n = base.len().min(img.len()) / wu;
    while u < n {
        if base[u * wu..(u + 1) * wu] == img[u * wu..(u + 1) * wu] {
            u += 1;
            continue;
        }
        let start = u;
        while u < n && base[u * wu..(u + 1) * wu] != img[u * wu..(u + 1) * wu] {
            u += 1;
        }
        out.push(((start * wu) as u32, img[start * wu..u * wu].to_vec()));
    }
    out
}

/// Writes the disk: header, bases, image table, patches. Returns the images' labels.
pub fn write_disk(path: &Path, master: u64, count: u32, bases: &[Base]) -> Result<Vec<(u64, String)>, String> {
    let parsed: Vec<Parsed> = bases.iter().map(|b| parse(&b.data)).collect::<Result<_, _>>()?;
    let table_off = DISK_HDR + bases.len() * IMAGE_BYTES;
    let patch_start = table_off + count as usize * ENTRY_SIZE;
    let mut table = vec![0u8; count as usize * ENTRY_SIZE];
    let mut patches: Vec<u8> = Vec::new();
    let mut labels = Vec::new();
    for i in 0..count {
        let seed = image_seed(master, i);
        let img = make_image(bases, &parsed, seed);
        let off = patch_start + patches.len();
        for (o, b) in diff(&bases[img.base as usize].data, &img.data) {
            patches.extend_from_slice(&o.to_le_bytes());
            patches.extend_from_slice(&(b.len() as u32).to_le_bytes());
            patches.extend_from_slice(&b);
        }
        let e = &mut table[i as usize * ENTRY_SIZE..(i as usize + 1) * ENTRY_SIZE];
        put64(e, 0, seed);
        put32(e, 8, img.base);
        put32(e, 12, (patch_start + patches.len() - off) as u32);
        put64(e, 16, off as u64);
        let l = img.label.as_bytes();
        let n = l.len().min(LABEL_BYTES - 1);
        e[24..24 + n].copy_from_slice(&l[..n]);
        labels.push((seed, img.label));
    }
    let mut hdr = vec![0u8; DISK_HDR];
    hdr[..8].copy_from_slice(DISK_MAGIC);
    put32(&mut hdr, 8, 1);
    put32(&mut hdr, 12, bases.len() as u32);
    put32(&mut hdr, 16, count);
    put32(&mut hdr, 20, SEG_SIZE);
    put32(&mut hdr, 24, SEG_COUNT);
    put32(&mut hdr, 28, WRITE_UNIT);
    put64(&mut hdr, 32, IMAGE_BYTES as u64);
    put64(&mut hdr, 40, table_off as u64);
    put64(&mut hdr, 48, master);
    for (k, b) in bases.iter().enumerate() {
        let n = b.name.len().min(15);
        hdr[56 + 16 * k..56 + 16 * k + n].copy_from_slice(&b.name.as_bytes()[..n]);
    }
    let mut out = hdr;
    for b in bases {
        out.extend_from_slice(&b.data);
    }
    out.extend_from_slice(&table);
    out.extend_from_slice(&patches);
    // round up to a sector for the virtio disk
    out.resize(out.len().div_ceil(4096) * 4096, 0);
    fs::write(path, &out).map_err(|e| format!("write {}: {e}", path.display()))?;
    Ok(labels)
}
