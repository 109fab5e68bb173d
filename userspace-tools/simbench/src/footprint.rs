//! The engine's footprint at two device sizes: the RAM it holds (per segment, per cached index
//! node) and the bytes a checkpoint programs, after a small write and after 1 MiB of random
//! overwrites.
//!
//! RAM is measured exactly: the engine runs over [`MeterPlatform`], whose vectors add their
//! capacity to a global counter, so every byte the engine allocates is counted (plus the
//! `Engine` value itself). Per segment: the difference between the two devices' empty mounts
//! over the difference in segments (the segment table is the only per-segment structure).
//! Per cached index node: the growth while a read of every block fills the cache, over the
//! nodes it added. The log's read cache is off here (`read_cache_bytes: Some(0)`): it is a
//! bounded cache of pages that grows with what is read (up to the mount's size: 256 KiB by
//! default, 1/256 of RAM up to 4 MiB in the kernel), not a cost of the device's size, and it
//! would blur both differences.

use std::sync::atomic::{AtomicI64, Ordering};

use ferrofs_engine::format::{segtab_chunks, REC_HDR, SEGINFO_SIZE, S_IFREG};
use ferrofs_engine::{CreateArgs, Engine, Error, FallibleVec, FormatOptions, MountOptions, Platform, ROOT_INO};
use ferrofs_flashsim::{NandConfig, NandSim};
use serde::Serialize;

use crate::{now, BenchError, Result, Rng, MIB, PAGES_PER_BLOCK, PAGE_SIZE, SEGMENT_SIZE, WRITE_SIZE};

/// Bytes the engine's vectors hold now (all `MeterVec`s together).
static HEAP: AtomicI64 = AtomicI64::new(0);

fn heap() -> i64 {
    HEAP.load(Ordering::Relaxed)
}

/// A platform whose vectors count their capacity in [`HEAP`].
#[derive(Debug, Clone, Copy, Default)]
pub struct MeterPlatform;

/// A `Vec` whose capacity (in bytes) is counted while it lives.
#[derive(Debug, Default)]
pub struct MeterVec<T>(Vec<T>);

impl<T> MeterVec<T> {
    fn counted<R>(&mut self, f: impl FnOnce(&mut Vec<T>) -> R) -> R {
        let before = self.0.capacity();
        let r = f(&mut self.0);
        let grown = self.0.capacity() as i64 - before as i64;
        HEAP.fetch_add(grown * std::mem::size_of::<T>() as i64, Ordering::Relaxed);
        r
    }
}

impl<T> Drop for MeterVec<T> {
    fn drop(&mut self) {
        HEAP.fetch_sub((self.0.capacity() * std::mem::size_of::<T>()) as i64, Ordering::Relaxed);
    }
}

impl<T> FallibleVec<T> for MeterVec<T> {
    fn new() -> Self {
        MeterVec(Vec::new())
    }
    fn try_push(&mut self, v: T) -> std::result::Result<(), Error> {
        self.counted(|x| {
            x.try_reserve(1).map_err(|_| Error::NoMem)?;
            x.push(v);
            Ok(())
        })
    }
    fn pop(&mut self) -> Option<T> {
        self.0.pop()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn as_slice(&self) -> &[T] {
        &self.0
    }
    fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.0
    }
    fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }
    fn try_extend_from_slice(&mut self, s: &[T]) -> std::result::Result<(), Error>
    where
        T: Copy,
    {
        self.counted(|x| {
            x.try_reserve(s.len()).map_err(|_| Error::NoMem)?;
            x.extend_from_slice(s);
            Ok(())
        })
    }
    fn try_resize(&mut self, len: usize, v: T) -> std::result::Result<(), Error>
    where
        T: Copy,
    {
        self.counted(|x| {
            if len > x.len() {
                x.try_reserve(len - x.len()).map_err(|_| Error::NoMem)?;
            }
            x.resize(len, v);
            Ok(())
        })
    }
}

impl Platform for MeterPlatform {
    type Vec<T> = MeterVec<T>;
}

type MFs = Engine<MeterPlatform, NandSim>;

/// What the footprint experiment measured on one device.
#[derive(Debug, Clone, Serialize)]
pub struct FootprintResult {
    /// Device size in MiB.
    pub device_mib: u32,
    /// Segments (erase blocks of 128 KiB).
    pub segments: u32,
    /// Segment-table chunks (SEGTAB records of up to 200 entries).
    pub chunks: u32,
    /// The whole segment table as SEGTAB records (what every checkpoint wrote before).
    pub table_bytes: u64,
    /// Index cache capacity and dirty limit the mount chose (nodes).
    pub cache_nodes: usize,
    /// Dirty-node limit.
    pub dirty_limit: usize,
    /// Engine RAM after mounting the empty filesystem (bytes, the `Engine` value included).
    pub ram_empty: i64,
    /// Engine RAM after a remount of the filled filesystem (nothing cached but the root path).
    pub ram_remounted: i64,
    /// Engine RAM once a read of every block filled the index cache.
    pub ram_cache_full: i64,
    /// Index nodes cached after the remount and after the reads.
    pub cached_before: usize,
    /// Index nodes cached after the reads.
    pub cached_after: usize,
    /// RAM per cached index node: the growth during the reads over the nodes added.
    pub ram_per_node: f64,
    /// User data written (bytes).
    pub data_bytes: u64,
    /// Bytes a checkpoint programmed after one fsync'd 4 KiB overwrite, averaged.
    pub cp_bytes_small: f64,
    /// Bytes a checkpoint programmed after 1 MiB of fsync'd random 4 KiB overwrites, averaged.
    pub cp_bytes_1mib: f64,
}

/// Both devices and the per-segment RAM derived from them.
#[derive(Debug, Clone, Serialize)]
pub struct FootprintReport {
    /// One result per device size.
    pub devices: Vec<FootprintResult>,
    /// RAM per segment: empty-mount RAM difference over the segment difference.
    pub ram_per_segment: f64,
}

fn engine(what: &'static str) -> impl Fn((Error, NandSim)) -> BenchError {
    move |(e, _)| BenchError::Engine(what, e)
}

/// The mount options measured: the defaults with the read cache off (see the module doc).
fn opts() -> MountOptions {
    MountOptions { read_cache_bytes: Some(0), ..MountOptions::default() }
}

/// Measure one device of `device_mib` MiB filled to `fill` of its capacity.
pub fn run_device(device_mib: u32, fill: f64, seed: u64, log: &mut dyn FnMut(&str)) -> Result<FootprintResult> {
    let eng = |what: &'static str| move |e: Error| BenchError::Engine(what, e);
    let segments = device_mib.saturating_mul((MIB / u64::from(SEGMENT_SIZE)) as u32);
    let cfg = NandConfig { seed, ..NandConfig::with_layout(PAGE_SIZE, PAGES_PER_BLOCK, segments) };
    let sim = NandSim::new(cfg).map_err(|e| BenchError::Sim(e.to_string()))?;
    let sim = MFs::format(sim, &FormatOptions::default(), now(0)).map_err(engine("format"))?;
    let base = heap();
    let mut fs = MFs::mount(sim, opts()).map_err(engine("mount"))?;
    let own = std::mem::size_of::<MFs>() as i64;
    let ram_empty = heap() - base + own;
    let (cache_nodes, dirty_limit) = fs.index_cache_limits();
    // fill with 1 MiB files
    let target = (fs.statfs().blocks as f64 * 4096.0 * fill) as u64;
    let mut rng = Rng::new(seed);
    let mut op = 0u64;
    let mut files = Vec::new();
    let mut data_bytes = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    while data_bytes < target {
        op += 1;
        let name = format!("f{:06}", files.len());
        let args = CreateArgs { mode: S_IFREG | 0o644, ..Default::default() };
        let ino = fs.create(ROOT_INO, name.as_bytes(), &args, now(op)).map_err(eng("create"))?.ino;
        let mut off = 0u64;
        while off < MIB && data_bytes < target {
            fill_random(&mut rng, &mut buf);
            op += 1;
            let n = fs.write(ino, off, &buf, now(op)).map_err(eng("fill write"))?;
            off += n as u64;
            data_bytes += n as u64;
        }
        files.push((ino, off));
    }
    log(&format!("footprint {device_mib} MiB: {} files, {} MiB written", files.len(), data_bytes >> 20));
    let sim = fs.unmount().map_err(engine("unmount"))?;
    let base = heap();
    let mut fs = MFs::mount(sim, opts()).map_err(engine("remount"))?;
    let ram_remounted = heap() - base + own;
    let cached_before = fs.cached_nodes();
    let mut one = [0u8; 1];
    for &(ino, size) in &files {
        let mut off = 0;
        while off < size {
            fs.read(ino, off, &mut one).map_err(eng("read"))?;
            off += WRITE_SIZE as u64;
        }
    }
    let ram_cache_full = heap() - base + own;
    let cached_after = fs.cached_nodes();
    let ram_per_node = (ram_cache_full - ram_remounted) as f64 / (cached_after.saturating_sub(cached_before)).max(1) as f64;
    // settle: a few checkpoints so that twins of the unchanged chunks exist
    for _ in 0..3 {
        fs.sync().map_err(eng("sync"))?;
    }
    let mut w = Overwriter { files: &files, buf, rng, op };
    let cp_bytes_small = w.checkpoint_bytes(&mut fs, 1, 40)?;
    let cp_bytes_1mib = w.checkpoint_bytes(&mut fs, (MIB / WRITE_SIZE as u64) as u32, 10)?;
    let chunks = segtab_chunks(segments);
    let table_bytes = u64::from(chunks) * (REC_HDR + 6) as u64 + u64::from(segments) * SEGINFO_SIZE as u64;
    Ok(FootprintResult {
        device_mib,
        segments,
        chunks,
        table_bytes,
        cache_nodes,
        dirty_limit,
        ram_empty,
        ram_remounted,
        ram_cache_full,
        cached_before,
        cached_after,
        ram_per_node,
        data_bytes,
        cp_bytes_small,
        cp_bytes_1mib,
    })
}

fn fill_random(rng: &mut Rng, buf: &mut [u8]) {
    for c in buf.chunks_mut(8) {
        let v = rng.next_u64().to_le_bytes();
        c.copy_from_slice(&v[..c.len()]);
    }
}

/// Random 4 KiB overwrites of the files written by the fill.
struct Overwriter<'a> {
    files: &'a [(u64, u64)],
    buf: Vec<u8>,
    rng: Rng,
    op: u64,
}

impl Overwriter<'_> {
    fn overwrite(&mut self, fs: &mut MFs) -> Result<u64> {
        let (ino, size) = self.files[self.rng.below(self.files.len() as u64) as usize];
        let blk = self.rng.below(size.div_ceil(WRITE_SIZE as u64).max(1));
        fill_random(&mut self.rng, &mut self.buf[..WRITE_SIZE]);
        self.op += 1;
        fs.write(ino, blk * WRITE_SIZE as u64, &self.buf[..WRITE_SIZE], now(self.op))
            .map_err(|e| BenchError::Engine("overwrite", e))?;
        Ok(ino)
    }

    /// Bytes programmed by a checkpoint after `writes` fsync'd overwrites, averaged over
    /// `rounds`.
    fn checkpoint_bytes(&mut self, fs: &mut MFs, writes: u32, rounds: u32) -> Result<f64> {
        let mut total = 0u64;
        for _ in 0..rounds {
            let mut ino = ROOT_INO;
            for _ in 0..writes {
                ino = self.overwrite(fs)?;
            }
            fs.fsync(ino).map_err(|e| BenchError::Engine("fsync", e))?;
            let p0 = fs.flash().counters().bytes_programmed;
            fs.sync().map_err(|e| BenchError::Engine("sync", e))?;
            total += fs.flash().counters().bytes_programmed - p0;
        }
        Ok(total as f64 / f64::from(rounds.max(1)))
    }
}

/// Both device sizes (`small` and `large` MiB), filled to `fill`.
pub fn run_footprint(small: u32, large: u32, fill: f64, seed: u64, log: &mut dyn FnMut(&str)) -> Result<FootprintReport> {
    let a = run_device(small, fill, seed, log)?;
    let b = run_device(large, fill, seed, log)?;
    let ram_per_segment = (b.ram_empty - a.ram_empty) as f64 / f64::from(b.segments.saturating_sub(a.segments).max(1));
    Ok(FootprintReport { devices: vec![a, b], ram_per_segment })
}

/// The report as a Markdown table.
pub fn footprint_markdown(r: &FootprintReport) -> String {
    let kib = |b: f64| format!("{:.1} KiB", b / 1024.0);
    let mut s = String::new();
    s.push_str("### Engine footprint (NandSim 2 KiB pages, 128 KiB erase blocks, default mount options, read cache off)\n\n");
    s.push_str("| device | segments | index cache / dirty limit (nodes) | RAM empty mount | RAM after remount | RAM, cache full (nodes) | RAM per cached node | whole table as SEGTAB | checkpoint after a 4 KiB write | checkpoint after 1 MiB of random 4 KiB writes |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for d in &r.devices {
        s.push_str(&format!(
            "| {} MiB | {} | {} / {} | {} | {} | {} ({}) | {:.0} B | {} | {} | {} |\n",
            d.device_mib,
            d.segments,
            d.cache_nodes,
            d.dirty_limit,
            kib(d.ram_empty as f64),
            kib(d.ram_remounted as f64),
            kib(d.ram_cache_full as f64),
            d.cached_after,
            d.ram_per_node,
            kib(d.table_bytes as f64),
            kib(d.cp_bytes_small),
            kib(d.cp_bytes_1mib),
        ));
    }
    s.push_str(&format!("\nRAM per segment (empty mounts, difference over the segment difference): {:.1} B\n", r.ram_per_segment));
    s
}
