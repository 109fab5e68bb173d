//! `mkfs.ferrofs --probe`: a flashbench-style timing probe of a block device's FTL (Arnd
//! Bergmann's method, flashbench 2011): it finds the FTL page, the allocation unit (AU) and how
//! many AUs the device keeps open, from how long reads and writes take.
//!
//! 1. **Reads across boundaries** (read-only): two logical blocks read just before a candidate
//!    boundary (`pre`), across it (`on`) and just after it (`post`), for every power of two from
//!    two blocks up. Where a boundary is real the `on` read costs more (a second page, a second
//!    unit's mapping): the smallest size from which every larger boundary shows it is the page;
//!    a second, higher step is an AU.
//! 2. **Writes across boundaries** (destructive): a write just before a candidate boundary,
//!    then one just after the first (`pre`/`post`: same unit) or just across the boundary
//!    (`on`). Only the second is timed: crossing into another AU makes the FTL open (and close)
//!    one, a copy; mtdblock writes its cached erase block back. The smallest size from which
//!    every larger boundary shows it is the AU.
//! 3. **Open AUs** (destructive): half AUs written in chunks, round robin over N units, N = 1,
//!    2, ...: once N exceeds what the FTL keeps open, every switch is a copy and the cost per
//!    byte jumps. The largest N before the jump is the number of open AUs.
//!
//! Every cell is the minimum of several repetitions (noise only ever adds time), each of the
//! four boundaries of a size placed across the device; a size counts only when the difference
//! stands out from the noise (the spread between `pre` and `post`, which no structure
//! separates). What is found comes with its evidence and how sure it is.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

/// A device the probe can time. Offsets and lengths are multiples of `block()`.
pub trait ProbeTarget {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// The smallest transfer (the logical block size).
    fn block(&self) -> u32;
    /// Read `len` bytes at `off`, past every cache of the host; the time it took in ns.
    fn read_ns(&mut self, off: u64, len: usize) -> io::Result<u64>;
    /// Write `len` bytes of test data at `off`, past every cache of the host, waiting for
    /// the device; the time it took in ns.
    fn write_ns(&mut self, off: u64, len: usize) -> io::Result<u64>;
}

/// How sure the probe is of a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sureness {
    /// A large, consistent difference (at least 1.5 times the time, ten times the noise).
    Sure,
    /// A consistent difference, but small next to the time itself.
    Likely,
    /// Nothing stood out.
    NotFound,
}

impl Sureness {
    /// The word mkfs prints.
    pub fn word(self) -> &'static str {
        match self {
            Sureness::Sure => "sure",
            Sureness::Likely => "likely",
            Sureness::NotFound => "not found",
        }
    }
}

/// One result of the probe.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// The size in bytes (page, AU) or the count (open AUs); `None` when nothing was found.
    pub value: Option<u64>,
    /// How sure.
    pub sureness: Sureness,
    /// The numbers behind it, one line.
    pub evidence: String,
}

impl Finding {
    fn none(evidence: String) -> Self {
        Finding { value: None, sureness: Sureness::NotFound, evidence }
    }
}

/// What the probe found, with the measurements.
#[derive(Debug, Clone)]
pub struct ProbeReport {
    /// The FTL page (from reads).
    pub page: Finding,
    /// The allocation unit (from writes, else from reads).
    pub au: Finding,
    /// How many AUs the device writes at once without copying.
    pub open: Finding,
    /// The measurement tables, for `--verbose`.
    pub table: Vec<String>,
}

/// How far the probe goes.
#[derive(Debug, Clone, Copy)]
pub struct ProbeOptions {
    /// Repetitions of every cell (the minimum counts).
    pub reps: u32,
    /// Largest boundary tried (at most a quarter of the device).
    pub max_unit: u64,
    /// Most open AUs tried.
    pub max_open: u32,
    /// Run the destructive tests (writes).
    pub writes: bool,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions { reps: 5, max_unit: 64 << 20, max_open: 8, writes: true }
    }
}

/// One boundary size's minima, in ns.
#[derive(Debug, Clone, Copy)]
struct Cell {
    size: u64,
    pre: u64,
    on: u64,
    post: u64,
}

impl Cell {
    fn base(&self) -> u64 {
        self.pre.max(self.post)
    }
    fn diff(&self) -> u64 {
        self.on.saturating_sub(self.base())
    }
    fn ratio(&self) -> f64 {
        self.on as f64 / self.base().max(1) as f64
    }
}

/// `count` boundaries that are odd multiples of `s` (so no multiple of `2s`), spread over the
/// device after its first eighth, with room for the accesses around them.
fn boundaries(size: u64, s: u64, count: u64, room: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let start = size / 8;
    let span = size - start;
    for j in 0..count {
        let target = start + span * (2 * j + 1) / (2 * count);
        let mut k = target / s;
        if k % 2 == 0 {
            k = if k > 0 { k - 1 } else { 1 };
        }
        let b = k * s;
        if b >= room && b + room <= size && !out.contains(&b) {
            out.push(b);
        }
    }
    out
}

/// Powers of two from `from` up to `max` (and a quarter of the device).
fn candidates(from: u64, max: u64, size: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = from.max(1);
    while s <= max && s <= size / 4 {
        v.push(s);
        s *= 2;
    }
    v
}

/// The noise of a table: the median spread between `pre` and `post`, which no boundary tells
/// apart.
fn noise(cells: &[Cell]) -> u64 {
    let mut d: Vec<u64> = cells.iter().map(|c| c.pre.abs_diff(c.post)).collect();
    d.sort_unstable();
    d.get(d.len() / 2).copied().unwrap_or(0)
}

/// Whether a cell's boundary stands out: the crossing costs clearly more than both sides, by
/// more than the noise.
fn stands_out(c: &Cell, noise: u64) -> bool {
    let d = c.diff();
    d > 0 && d >= noise.saturating_mul(4) && d as f64 >= 0.1 * c.base() as f64
}

/// The first index from which the boundaries stand out: that cell and the next one do (unless
/// it is the only cell), and at least three quarters of all cells from it on.
fn first_step(cells: &[Cell], sig: &[bool]) -> Option<usize> {
    let n = cells.len();
    (0..n).find(|&i| {
        let next_ok = i + 1 >= n || sig[i + 1];
        let from = &sig[i..];
        let share = from.iter().filter(|&&b| b).count() as f64 / from.len() as f64;
        sig[i] && next_ok && share >= 0.75 && (n == 1 || i + 1 < n)
    })
}

fn sureness_of(cells: &[Cell], noise: u64) -> Sureness {
    let min_ratio = cells.iter().map(Cell::ratio).fold(f64::INFINITY, f64::min);
    let min_diff = cells.iter().map(Cell::diff).min().unwrap_or(0);
    if min_ratio >= 1.5 && min_diff >= noise.saturating_mul(10) {
        Sureness::Sure
    } else {
        Sureness::Likely
    }
}

fn us(ns: u64) -> String {
    if ns >= 10_000_000 {
        format!("{:.0}ms", ns as f64 / 1e6)
    } else if ns >= 10_000 {
        format!("{:.0}µs", ns as f64 / 1e3)
    } else {
        format!("{:.1}µs", ns as f64 / 1e3)
    }
}

fn size_name(b: u64) -> String {
    if b >= 1 << 20 && b % (1 << 20) == 0 {
        format!("{} MiB", b >> 20)
    } else if b >= 1024 && b % 1024 == 0 {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

fn table_lines(what: &str, cells: &[Cell], noise: u64, out: &mut Vec<String>) {
    out.push(format!("{what} (minimum of the repetitions; noise {}):", us(noise)));
    for c in cells {
        out.push(format!(
            "  {:>8}  pre {:>8}  on {:>8}  post {:>8}  diff {:>8}  x{:.2}",
            size_name(c.size),
            us(c.pre),
            us(c.on),
            us(c.post),
            us(c.diff()),
            c.ratio()
        ));
    }
}

/// Test 1: reads across boundaries. Before every timed read an untimed one far away leaves
/// the device's read caches (a NAND page buffer) holding something else.
fn read_cells(t: &mut dyn ProbeTarget, o: &ProbeOptions) -> io::Result<Vec<Cell>> {
    let b = u64::from(t.block().max(512));
    let size = t.size();
    let mut cells = Vec::new();
    for s in candidates(2 * b, o.max_unit, size) {
        let mut m = [u64::MAX; 3];
        for bd in boundaries(size, s, 4, 2 * b) {
            for r in 0..o.reps.max(1) {
                for (i, off) in [bd - 2 * b, bd - b, bd].into_iter().enumerate() {
                    let away = if (r as u64 + i as u64) % 2 == 0 { 0 } else { (size / 2) / b * b };
                    t.read_ns(away, b as usize)?;
                    let ns = t.read_ns(off, 2 * b as usize)?;
                    m[i] = m[i].min(ns);
                }
            }
        }
        if m[0] != u64::MAX {
            cells.push(Cell { size: s, pre: m[0], on: m[1], post: m[2] });
        }
    }
    Ok(cells)
}

/// Test 2: writes across boundaries, `w` bytes each: the first one untimed (it puts the
/// device in the first unit), the second timed. A boundary whose crossing is ten times slower
/// than both sides after a round is not repeated (a unit switch on mtdblock costs a whole erase
/// block written back); others get up to three rounds.
fn write_cells(t: &mut dyn ProbeTarget, o: &ProbeOptions, w: u64) -> io::Result<Vec<Cell>> {
    let size = t.size();
    let mut cells = Vec::new();
    for s in candidates(2 * w, o.max_unit, size) {
        let mut m = [u64::MAX; 3];
        for bd in boundaries(size, s, 4, 2 * w) {
            let mut r = [u64::MAX; 3];
            for _ in 0..o.reps.clamp(1, 3) {
                for (i, (p1, p2)) in [(bd - 2 * w, bd - w), (bd - w, bd), (bd, bd + w)].into_iter().enumerate() {
                    t.write_ns(p1, w as usize)?;
                    let ns = t.write_ns(p2, w as usize)?;
                    r[i] = r[i].min(ns);
                }
                if r[1] / 10 > r[0].max(r[2]) {
                    break;
                }
            }
            for (mi, ri) in m.iter_mut().zip(r) {
                *mi = (*mi).min(ri);
            }
        }
        if m[0] != u64::MAX {
            cells.push(Cell { size: s, pre: m[0], on: m[1], post: m[2] });
        }
    }
    Ok(cells)
}

/// Test 3: half AUs written in `chunk`-byte pieces round robin over N units (each stream from
/// its unit's start); the cost per KiB (ns) for N = 1, 2, ... until it jumped four times over
/// once, or three times over twice.
fn open_costs(t: &mut dyn ProbeTarget, o: &ProbeOptions, au: u64, chunk: u64) -> io::Result<Vec<(u32, u64)>> {
    let size = t.size();
    let first = size.div_ceil(8).div_ceil(au);
    let units = (size / au).saturating_sub(first);
    let mut next = 0u64;
    let mut out: Vec<(u32, u64)> = Vec::new();
    let mut jumps = 0;
    for n in 1..=o.max_open.max(1) {
        if u64::from(n) > units {
            break;
        }
        let streams: Vec<u64> = (0..u64::from(n)).map(|i| (first + (next + i) % units) * au).collect();
        next = (next + u64::from(n)) % units;
        let mut ns = 0u64;
        let mut off = 0u64;
        while off < au / 2 {
            for &s in &streams {
                ns = ns.saturating_add(t.write_ns(s + off, chunk as usize)?);
            }
            off += chunk;
        }
        let per_kib = ns / (u64::from(n) * (au / 2) / 1024).max(1);
        out.push((n, per_kib));
        if let Some(&(_, one)) = out.first() {
            if per_kib > one.saturating_mul(4) {
                break;
            }
            if per_kib > one.saturating_mul(3) {
                jumps += 1;
                if jumps >= 2 {
                    break;
                }
            }
        }
    }
    Ok(out)
}

/// Run the probe. With `o.writes` false only the read test runs (nothing is written).
pub fn probe(t: &mut dyn ProbeTarget, o: &ProbeOptions) -> io::Result<ProbeReport> {
    let mut table = Vec::new();
    let b = u64::from(t.block().max(512));
    // 1. reads: the page, maybe an AU
    let rc = read_cells(t, o)?;
    let rn = noise(&rc);
    table_lines("reads of 2 blocks across boundaries", &rc, rn, &mut table);
    let rsig: Vec<bool> = rc.iter().map(|c| stands_out(c, rn)).collect();
    let mut page = Finding::none(format!("no read boundary stood out from the noise ({}) between {} and {}", us(rn), size_name(2 * b), rc.last().map(|c| size_name(c.size)).unwrap_or_default()));
    let mut read_au: Option<(u64, Sureness, String)> = None;
    if let Some(i) = first_step(&rc, &rsig) {
        let c = rc[i];
        let from = &rc[i..];
        page = Finding {
            value: Some(c.size),
            sureness: sureness_of(from, rn),
            evidence: format!("reads across a {} boundary take {} longer than beside it (x{:.2}), at every larger boundary too", size_name(c.size), us(c.diff()), c.ratio()),
        };
        // a second, higher step: the AU
        for j in i + 1..rc.len() {
            let below = rc[i..j].iter().map(Cell::diff).max().unwrap_or(0);
            let above = rc[j..].iter().map(Cell::diff).min().unwrap_or(0);
            if rc.len() - j >= 2 && above as f64 >= 1.5 * below as f64 && above - below >= rn.saturating_mul(4) {
                let c = rc[j];
                read_au = Some((c.size, sureness_of(&rc[j..], rn), format!("reads across a {} boundary cost {} more than across a {} one", size_name(c.size), us(above - below), size_name(rc[j - 1].size))));
                break;
            }
        }
    }
    // 2. writes: the AU
    let mut au = Finding::none("no write boundary stood out".to_string());
    let mut open = Finding::none("not measured (no allocation unit found)".to_string());
    if o.writes {
        let w = b.max(4096);
        let wc = write_cells(t, o, w)?;
        let wn = noise(&wc);
        table_lines(&format!("second write of {} across boundaries", size_name(w)), &wc, wn, &mut table);
        let wsig: Vec<bool> = wc.iter().map(|c| stands_out(c, wn)).collect();
        au = match first_step(&wc, &wsig) {
            Some(i) => {
                let c = wc[i];
                Finding {
                    value: Some(c.size),
                    sureness: sureness_of(&wc[i..], wn),
                    evidence: format!("a write across a {} boundary takes {} (x{:.1} the {} beside it), at every larger boundary too", size_name(c.size), us(c.on), c.ratio(), us(c.base())),
                }
            }
            None => Finding::none(format!("no write boundary stood out from the noise ({}) between {} and {}", us(wn), size_name(2 * w), wc.last().map(|c| size_name(c.size)).unwrap_or_default())),
        };
    }
    if au.value.is_none() {
        if let Some((v, s, e)) = read_au {
            au = Finding { value: Some(v), sureness: s, evidence: e };
        }
    }
    // 3. open AUs
    if let (true, Some(a)) = (o.writes, au.value) {
        let chunk = page.value.unwrap_or(4096).max(4096).max(a / 64).min(a / 2).max(1);
        let costs = open_costs(t, o, a, chunk)?;
        table.push(format!("round-robin writes of {} over N allocation units, cost per KiB:", size_name(chunk)));
        for (n, c) in &costs {
            table.push(format!("  N={n}  {}", us(*c)));
        }
        let one = costs.first().map(|&(_, c)| c).unwrap_or(0);
        let fast = costs.iter().take_while(|&&(_, c)| c <= one.saturating_mul(2)).count();
        let jump = costs.get(fast).map(|&(_, c)| c as f64 / one.max(1) as f64);
        open = match jump {
            Some(r) => Finding {
                value: Some(fast as u64),
                sureness: if r >= 4.0 { Sureness::Sure } else { Sureness::Likely },
                evidence: format!("writing {} units round robin costs x{:.1} what writing 1 does, {} cost at most x2", fast + 1, r, fast),
            },
            None if fast > 0 => Finding {
                value: Some(fast as u64),
                sureness: Sureness::Likely,
                evidence: format!("no slowdown up to {fast} units (the most tried): at least {fast}"),
            },
            None => Finding::none("no measurement".to_string()),
        };
    }
    Ok(ProbeReport { page, au, open, table })
}

/// A block device opened for the probe: `O_DIRECT` reads and writes through an aligned buffer
/// of pseudo-random bytes, timed with the monotonic clock.
pub struct DirectDevice {
    file: File,
    size: u64,
    block: u32,
    buf: Vec<u8>,
}

impl DirectDevice {
    /// Open `path` (writable when `write`), whose logical block size is `block`.
    pub fn open(path: &Path, block: u32, write: bool) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(write).custom_flags(libc::O_DIRECT).open(path)?;
        let size = {
            use std::io::Seek;
            let mut f = &file;
            f.seek(io::SeekFrom::End(0))?
        };
        // pseudo-random contents (an FTL that compresses or deduplicates sees real data)
        let mut buf = vec![0u8; (8 << 20) + 4096];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for chunk in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = chunk.len();
            chunk.copy_from_slice(&x.to_le_bytes()[..n]);
        }
        Ok(DirectDevice { file, size, block: block.max(512), buf })
    }
}

/// `len` bytes of `buf` starting on a 4 KiB boundary (`O_DIRECT` wants aligned memory).
fn aligned(buf: &mut [u8], len: usize) -> io::Result<&mut [u8]> {
    let skew = (4096 - buf.as_ptr() as usize % 4096) % 4096;
    buf.get_mut(skew..skew + len).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "probe transfer too large"))
}

impl ProbeTarget for DirectDevice {
    fn size(&self) -> u64 {
        self.size
    }
    fn block(&self) -> u32 {
        self.block
    }
    fn read_ns(&mut self, off: u64, len: usize) -> io::Result<u64> {
        let b = aligned(&mut self.buf, len)?;
        let t0 = Instant::now();
        self.file.read_exact_at(b, off)?;
        Ok(t0.elapsed().as_nanos() as u64)
    }
    fn write_ns(&mut self, off: u64, len: usize) -> io::Result<u64> {
        let b = aligned(&mut self.buf, len)?;
        let t0 = Instant::now();
        self.file.write_all_at(b, off)?;
        Ok(t0.elapsed().as_nanos() as u64)
    }
}

#[cfg(test)]
mod tests;
