//! Pre-generated, page-aligned data buffers and the deterministic generator behind them.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Alignment good for O_DIRECT on every device we meet (logical blocks up to 4 KiB).
pub const ALIGN: usize = 4096;

/// splitmix64: tiny, deterministic, good enough to make incompressible data and random choices.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x6a09_e667_f3bc_c909)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n` > 0; 0 returns 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            ((self.next_u64() as u128 * n as u128) >> 64) as u64
        }
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// A heap buffer whose usable part starts on an [`ALIGN`] boundary, filled once from a seed.
/// Built without `unsafe`: an over-allocated `Vec` and an offset.
pub struct DataBuf {
    storage: Vec<u8>,
    off: usize,
    len: usize,
    stamp: u64,
}

impl DataBuf {
    /// `len` bytes of pseudo-random (incompressible) data from `seed`.
    pub fn new(len: usize, seed: u64) -> Self {
        let storage = vec![0u8; len + ALIGN];
        let off = storage.as_ptr().align_offset(ALIGN).min(ALIGN);
        let mut b = DataBuf { storage, off, len, stamp: 0 };
        let mut rng = Rng::new(seed);
        for chunk in b.as_mut_slice().chunks_mut(8) {
            let v = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.off..self.off + self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.off..self.off + self.len]
    }

    /// The first `n` bytes (aligned start), after writing a fresh counter into the first 8 bytes
    /// of every 4 KiB so no two written blocks are identical (defeats dedup, keeps data
    /// incompressible). Costs one 8-byte store per 4 KiB.
    pub fn next_block(&mut self, n: usize) -> &[u8] {
        self.stamp = self.stamp.wrapping_add(1);
        let stamp = self.stamp.to_le_bytes();
        let n = n.min(self.len);
        let s = &mut self.storage[self.off..self.off + n];
        for chunk in s.chunks_mut(ALIGN) {
            let k = chunk.len().min(8);
            chunk[..k].copy_from_slice(&stamp[..k]);
        }
        &self.storage[self.off..self.off + n]
    }
}

/// A progress bar shown only when stdout is a terminal (and not disabled). A terminal without
/// `TERM` or with `TERM=dumb` (a QEMU serial console under a bare init) gets no bar either: its
/// redraws would only fill the console log.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    pub fn new(enabled: bool, len: u64, msg: &str) -> Self {
        let term_ok = std::env::var("TERM").is_ok_and(|t| !t.is_empty() && t != "dumb");
        if !enabled || !term_ok || !std::io::stdout().is_terminal() {
            return Progress(None);
        }
        let pb = ProgressBar::new(len);
        if let Ok(style) = ProgressStyle::with_template("{msg:24} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}") {
            pb.set_style(style.progress_chars("=> "));
        }
        pb.set_message(msg.to_string());
        Progress(Some(pb))
    }

    pub fn inc(&self, n: u64) {
        if let Some(p) = &self.0 {
            p.inc(n);
        }
    }

    pub fn finish(self) {
        if let Some(p) = self.0 {
            p.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_deterministic() {
        let a = DataBuf::new(3 * ALIGN + 5, 7);
        let b = DataBuf::new(3 * ALIGN + 5, 7);
        let c = DataBuf::new(3 * ALIGN + 5, 8);
        assert_eq!(a.as_slice().as_ptr() as usize % ALIGN, 0);
        assert_eq!(a.len(), 3 * ALIGN + 5);
        assert_eq!(a.as_slice(), b.as_slice());
        assert_ne!(a.as_slice(), c.as_slice());
    }

    #[test]
    fn blocks_differ() {
        let mut a = DataBuf::new(2 * ALIGN, 1);
        let x = a.next_block(2 * ALIGN).to_vec();
        let y = a.next_block(2 * ALIGN).to_vec();
        assert_ne!(x[..8], y[..8]);
        assert_ne!(x[ALIGN..ALIGN + 8], y[ALIGN..ALIGN + 8]);
        assert_eq!(x[8..ALIGN], y[8..ALIGN]);
        assert_eq!(a.next_block(10 * ALIGN).len(), 2 * ALIGN);
    }

    #[test]
    fn rng() {
        let mut r = Rng::new(1);
        let mut s = Rng::new(1);
        assert_eq!(r.next_u64(), s.next_u64());
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
        }
        assert_eq!(r.below(0), 0);
        let mut v: Vec<u32> = (0..100).collect();
        r.shuffle(&mut v);
        let mut w = v.clone();
        w.sort();
        assert_eq!(w, (0..100).collect::<Vec<_>>());
        assert_ne!(v, w);
    }
}
