//! The probe on simulated devices whose timing is known: a cheap card (flashsim's `BlockSim`,
//! whose FTL model keeps a few allocation units open, with costs put on its counters), the
//! naive mtdblock FTL over NAND (one cached erase block), and a device with no structure at
//! all; with and without noise.

use super::*;
use ferrofs_flashsim::{BlockConfig, BlockSim, Flash};

const US: u64 = 1000;

/// A small xorshift generator (deterministic noise).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Noise on top of a model's time: up to +25 %, and now and then a 3 ms stall.
struct Noise(Rng);

impl Noise {
    fn apply(&mut self, ns: u64) -> u64 {
        let r = self.0.next();
        let mut t = ns + ns * (r % 26) / 100;
        if r % 29 == 0 {
            t += 3000 * US;
        }
        t
    }
}

/// A cheap card: `BlockSim` with AUs of `au` bytes, FTL pages of `page`, `open` units open.
/// Reads: 30 µs + 100 µs per page touched + 300 µs when they cross an AU. Writes: 50 µs +
/// 200 µs per page touched + 1.5 ms per AU the FTL opens + 2 µs per KiB it copies.
struct Card {
    sim: BlockSim,
    au: u64,
    page: u64,
    noise: Option<Noise>,
}

impl Card {
    fn new(au: u32, page: u32, open: u32, count: u32, noise: Option<u64>) -> Self {
        let mut c = BlockConfig::with_layout(512, au, count);
        c.preferred_write = page;
        c.open_au_limit = open;
        c.enforce_sequential = false;
        Card { sim: BlockSim::new(c).unwrap(), au: u64::from(au), page: u64::from(page), noise: noise.map(|s| Noise(Rng(s))) }
    }

    fn pages(&self, off: u64, len: usize) -> u64 {
        (off + len as u64 - 1) / self.page - off / self.page + 1
    }

    fn pieces(&self, off: u64, len: usize) -> Vec<(u32, u32, usize)> {
        let mut v = Vec::new();
        let mut p = off;
        let end = off + len as u64;
        while p < end {
            let seg = p / self.au;
            let n = (end.min((seg + 1) * self.au) - p) as usize;
            v.push((seg as u32, (p % self.au) as u32, n));
            p += n as u64;
        }
        v
    }

    fn noisy(&mut self, ns: u64) -> u64 {
        match self.noise.as_mut() {
            Some(n) => n.apply(ns),
            None => ns,
        }
    }
}

impl ProbeTarget for Card {
    fn size(&self) -> u64 {
        self.sim.geometry().device_bytes()
    }
    fn block(&self) -> u32 {
        512
    }
    fn read_ns(&mut self, off: u64, len: usize) -> io::Result<u64> {
        let pieces = self.pieces(off, len);
        for &(seg, o, n) in &pieces {
            let mut b = vec![0u8; n];
            self.sim.read(seg, o, &mut b).map_err(|e| io::Error::other(format!("{e:?}")))?;
        }
        let ns = 30 * US + 100 * US * self.pages(off, len) + if pieces.len() > 1 { 300 * US } else { 0 };
        Ok(self.noisy(ns))
    }
    fn write_ns(&mut self, off: u64, len: usize) -> io::Result<u64> {
        let before = self.sim.counters();
        for (seg, o, n) in self.pieces(off, len) {
            self.sim.write(seg, o, &vec![0x5a; n]).map_err(|e| io::Error::other(format!("{e:?}")))?;
        }
        let d = self.sim.counters().since(&before);
        let ns = 50 * US + 200 * US * self.pages(off, len) + 1500 * US * d.ftl_au_opens + 2 * US * (d.ftl_bytes_copied / 1024);
        Ok(self.noisy(ns))
    }
}

/// mtdblock over NAND with `eb`-byte erase blocks and `page`-byte pages: 512-byte sectors, one
/// cached erase block; a sector outside it is read from NAND (76 µs per page, the NAND page
/// buffer holds the last page read); writing a sector outside it writes the cached block back
/// (2 ms erase, 301 µs per page programmed) and reads the new one in. 30 µs per request.
struct Mtdblock {
    size: u64,
    eb: u64,
    page: u64,
    cached: Option<u64>,
    dirty: bool,
    nand_page: Option<u64>,
}

impl Mtdblock {
    fn new(size: u64, eb: u64, page: u64) -> Self {
        Mtdblock { size, eb, page, cached: None, dirty: false, nand_page: None }
    }
}

impl ProbeTarget for Mtdblock {
    fn size(&self) -> u64 {
        self.size
    }
    fn block(&self) -> u32 {
        512
    }
    fn read_ns(&mut self, off: u64, len: usize) -> io::Result<u64> {
        let mut ns = 30 * US;
        for s in (off..off + len as u64).step_by(512) {
            if self.cached == Some(s / self.eb) {
                ns += US;
            } else if self.nand_page != Some(s / self.page) {
                ns += 76 * US;
                self.nand_page = Some(s / self.page);
            }
        }
        Ok(ns)
    }
    fn write_ns(&mut self, off: u64, len: usize) -> io::Result<u64> {
        let mut ns = 30 * US;
        let pages = self.eb / self.page;
        for s in (off..off + len as u64).step_by(512) {
            let e = s / self.eb;
            if self.cached != Some(e) {
                if self.dirty {
                    ns += 2000 * US + 301 * US * pages;
                }
                ns += 76 * US * pages;
                self.cached = Some(e);
                self.nand_page = Some((e + 1) * pages - 1);
            }
            ns += US;
            self.dirty = true;
        }
        Ok(ns)
    }
}

/// A device with no structure (a virtio disk over a host file): 120 µs a read, 150 µs a
/// write, plus 1 µs per KiB, with noise.
struct Flat {
    size: u64,
    noise: Noise,
}

impl ProbeTarget for Flat {
    fn size(&self) -> u64 {
        self.size
    }
    fn block(&self) -> u32 {
        512
    }
    fn read_ns(&mut self, _off: u64, len: usize) -> io::Result<u64> {
        Ok(self.noise.apply(120 * US + US * len as u64 / 1024))
    }
    fn write_ns(&mut self, _off: u64, len: usize) -> io::Result<u64> {
        Ok(self.noise.apply(150 * US + US * len as u64 / 1024))
    }
}

fn run(t: &mut dyn ProbeTarget) -> ProbeReport {
    let r = probe(t, &ProbeOptions::default()).unwrap();
    for l in &r.table {
        eprintln!("{l}");
    }
    eprintln!("page {:?}\nau {:?}\nopen {:?}", r.page, r.au, r.open);
    r
}

#[test]
fn a_cheap_card_shows_its_page_allocation_unit_and_open_units() {
    for (open, noise) in [(2u32, None), (3, None), (3, Some(7u64)), (1, Some(11))] {
        let mut card = Card::new(1 << 20, 16384, open, 64, noise);
        let r = run(&mut card);
        let what = format!("open {open}, noise {noise:?}");
        assert_eq!(r.page.value, Some(16384), "{what}: page {:?}", r.page);
        assert_eq!(r.au.value, Some(1 << 20), "{what}: au {:?}", r.au);
        assert_eq!(r.au.sureness, Sureness::Sure, "{what}: {:?}", r.au);
        assert_eq!(r.open.value, Some(u64::from(open)), "{what}: open {:?}", r.open);
    }
}

#[test]
fn mtdblock_shows_the_erase_block_and_one_open_unit() {
    let mut m = Mtdblock::new(256 << 20, 128 << 10, 2048);
    let r = run(&mut m);
    assert_eq!(r.au.value, Some(128 << 10), "{:?}", r.au);
    assert_eq!(r.au.sureness, Sureness::Sure);
    assert_eq!(r.page.value, Some(2048), "{:?}", r.page);
    assert_eq!(r.open.value, Some(1), "{:?}", r.open);
    assert_eq!(r.open.sureness, Sureness::Sure);
}

#[test]
fn a_device_without_structure_shows_none() {
    for seed in [3u64, 5, 9] {
        let mut f = Flat { size: 256 << 20, noise: Noise(Rng(seed)) };
        let r = run(&mut f);
        assert_eq!(r.page.value, None, "seed {seed}: {:?}", r.page);
        assert_eq!(r.au.value, None, "seed {seed}: {:?}", r.au);
        assert_eq!(r.open.value, None, "seed {seed}: {:?}", r.open);
        assert_eq!(r.au.sureness, Sureness::NotFound);
    }
}

#[test]
fn without_writes_nothing_is_written() {
    let mut m = Mtdblock::new(64 << 20, 128 << 10, 2048);
    let r = probe(&mut m, &ProbeOptions { writes: false, ..ProbeOptions::default() }).unwrap();
    assert!(!m.dirty, "the read-only probe wrote");
    assert_eq!(r.page.value, Some(2048));
    assert_eq!(r.au.value, None);
    assert_eq!(r.open.value, None);
}
