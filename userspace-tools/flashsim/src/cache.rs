//! [`WriteCache`]: a block device's volatile write cache, for power cuts. The device reports
//! a write (or a discard) complete while it may still sit in the cache; only a flush makes the
//! writes before it durable. At a power cut, the writes since the last flush reach the medium
//! as a reordered subset: each is kept, lost, or torn (a random subset of its sectors kept),
//! independently of the order in which they were issued.

use std::collections::BTreeMap;

use crate::rng::SimRng;

/// What a power cut keeps of the cached writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheLoss {
    /// Every cached write reached the medium.
    KeepAll,
    /// None did: the medium is as of the last flush.
    LoseAll,
    /// A subset drawn from the seed: each write is kept (1/2), lost (3/8) or torn (1/8: each of
    /// its sectors kept with probability 1/2), so a later write may survive an earlier one.
    Subset(u64),
}

/// The writes since the last flush, over a byte array of sectors.
#[derive(Debug, Clone)]
pub struct WriteCache {
    sector: usize,
    /// Content at the last flush of every sector written since.
    base: BTreeMap<usize, Vec<u8>>,
    /// The writes since the last flush, in order: (first byte, bytes written).
    writes: Vec<(usize, Vec<u8>)>,
}

impl WriteCache {
    /// An empty cache over sectors of `sector` bytes.
    pub fn new(sector: usize) -> Self {
        WriteCache { sector: sector.max(1), base: BTreeMap::new(), writes: Vec::new() }
    }

    /// Whether nothing was written since the last flush.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Store `src` at byte `at` of `data` through the cache.
    pub fn write(&mut self, data: &mut [u8], at: usize, src: &[u8]) {
        let s = self.sector;
        for sec in at / s..(at + src.len()).div_ceil(s) {
            self.base.entry(sec).or_insert_with(|| data[sec * s..(sec + 1) * s].to_vec());
        }
        data[at..at + src.len()].copy_from_slice(src);
        self.writes.push((at, src.to_vec()));
    }

    /// A flush: everything written so far is durable.
    pub fn flush(&mut self) {
        self.base.clear();
        self.writes.clear();
    }

    /// Power lost: leave in `data` what `loss` keeps of the cached writes, and empty the cache.
    pub fn power_loss(&mut self, data: &mut [u8], loss: CacheLoss) {
        let s = self.sector;
        for (sec, old) in std::mem::take(&mut self.base) {
            data[sec * s..(sec + 1) * s].copy_from_slice(&old);
        }
        let mut rng = match loss {
            CacheLoss::Subset(seed) => Some(SimRng::new(seed)),
            _ => None,
        };
        for (at, bytes) in std::mem::take(&mut self.writes) {
            let fate = match (loss, rng.as_mut()) {
                (CacheLoss::KeepAll, _) => 0,
                (CacheLoss::LoseAll, _) => 4,
                (_, Some(r)) => r.below(8),
                (_, None) => 0,
            };
            match fate {
                0..=3 => data[at..at + bytes.len()].copy_from_slice(&bytes),
                4..=6 => {}
                _ => {
                    for (k, chunk) in bytes.chunks(s).enumerate() {
                        if rng.as_mut().is_some_and(|r| r.coin()) {
                            let p = at + k * s;
                            data[p..p + chunk.len()].copy_from_slice(chunk);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushed_writes_stay_and_a_subset_of_the_rest_may_be_any() {
        let (mut reordered, mut torn) = (false, false);
        for seed in 0..64 {
            let mut data = vec![0u8; 4096];
            let mut c = WriteCache::new(512);
            c.write(&mut data, 0, &[1; 1024]);
            c.flush();
            c.write(&mut data, 1024, &[2; 1024]);
            c.write(&mut data, 2048, &[3; 2048]);
            c.power_loss(&mut data, CacheLoss::Subset(seed));
            assert!(data[..1024].iter().all(|&b| b == 1));
            let two = data[1024..2048].iter().all(|&b| b == 2);
            let none2 = data[1024..2048].iter().all(|&b| b == 0);
            let three = data[2048..].iter().all(|&b| b == 3);
            reordered |= three && none2;
            torn |= !two && !none2 || data[2048..].iter().any(|&b| b == 3) && !three;
            assert!(c.is_empty());
        }
        assert!(reordered && torn);
    }
}
