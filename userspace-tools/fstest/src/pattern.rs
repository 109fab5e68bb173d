//! Deterministic data: a seekable byte pattern and a small PRNG.
//!
//! The pattern is a pure function of `(key, absolute offset)`, so any byte range of a file can be
//! recomputed without reading what came before it: writers may use any chunking, verifiers any other.
//! Keys are derived from a seed and a path ([`key_for`]), which is how `integrity verify` finds the
//! expected content of every file with nothing recorded on disk.

/// SplitMix64 finaliser: a bijective 64-bit mixer with good avalanche.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a over bytes, then mixed; stable across runs and platforms.
pub fn hash_bytes(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    mix64(h)
}

/// Pattern key of the file at `path` (relative path bytes) for `seed`.
pub fn key_for(seed: u64, path: &[u8]) -> u64 {
    mix64(seed ^ hash_bytes(path).rotate_left(17))
}

/// The 8-byte word of the pattern covering offsets `8*word .. 8*word+8`.
#[inline]
fn word(key: u64, word: u64) -> u64 {
    // Two rounds so neighbouring words of neighbouring keys do not correlate.
    mix64(mix64(key) ^ word.wrapping_mul(0xD6E8_FEB8_6659_FD93))
}

/// Fills `buf` with the pattern bytes of `key` for absolute offsets `offset .. offset + buf.len()`.
pub fn fill(key: u64, offset: u64, buf: &mut [u8]) {
    let mut pos = 0usize;
    let mut off = offset;
    // Leading partial word.
    let lead = (off % 8) as usize;
    if lead != 0 && !buf.is_empty() {
        let w = word(key, off / 8).to_le_bytes();
        let n = (8 - lead).min(buf.len());
        buf[..n].copy_from_slice(&w[lead..lead + n]);
        pos = n;
        off += n as u64;
    }
    // Whole words.
    while buf.len() - pos >= 8 {
        let w = word(key, off / 8).to_le_bytes();
        buf[pos..pos + 8].copy_from_slice(&w);
        pos += 8;
        off += 8;
    }
    // Trailing partial word.
    if pos < buf.len() {
        let w = word(key, off / 8).to_le_bytes();
        let n = buf.len() - pos;
        buf[pos..].copy_from_slice(&w[..n]);
    }
}

/// Byte of the pattern at one offset (slow path, for tests and diagnostics).
pub fn byte_at(key: u64, offset: u64) -> u8 {
    word(key, offset / 8).to_le_bytes()[(offset % 8) as usize]
}

/// Compares `data` with the pattern of `key` at `offset`; returns the absolute offset of the
/// first differing byte, or `None` when they match.
pub fn first_mismatch(key: u64, offset: u64, data: &[u8], scratch: &mut Vec<u8>) -> Option<u64> {
    scratch.resize(data.len(), 0);
    fill(key, offset, scratch);
    if scratch[..] == data[..] {
        return None;
    }
    data.iter()
        .zip(scratch.iter())
        .position(|(a, b)| a != b)
        .map(|i| offset + i as u64)
}

/// Small deterministic PRNG (SplitMix64 stream). Not for cryptography.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(mix64(seed ^ 0x5EED_F00D_CAFE_BABE))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`; returns 0 when `n == 0`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-shift; the tiny bias is irrelevant for test data.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_is_deterministic() {
        let mut a = vec![0u8; 1000];
        let mut b = vec![0u8; 1000];
        fill(42, 12345, &mut a);
        fill(42, 12345, &mut b);
        assert_eq!(a, b);
    }

    #[test]
    fn chunking_does_not_matter() {
        let key = key_for(7, b"a/b/c");
        let mut whole = vec![0u8; 10_007];
        fill(key, 3, &mut whole);
        // Every split point and odd chunk sizes give the same bytes.
        for chunk in [1usize, 3, 7, 8, 9, 13, 64, 4095, 4097] {
            let mut got = vec![0u8; whole.len()];
            let mut pos = 0;
            while pos < got.len() {
                let n = chunk.min(got.len() - pos);
                fill(key, 3 + pos as u64, &mut got[pos..pos + n]);
                pos += n;
            }
            assert_eq!(got, whole, "chunk {chunk}");
        }
        for (i, &b) in whole.iter().enumerate().step_by(97) {
            assert_eq!(b, byte_at(key, 3 + i as u64));
        }
    }

    #[test]
    fn empty_and_tiny_buffers() {
        let mut e: [u8; 0] = [];
        fill(1, 5, &mut e);
        for off in 0..20u64 {
            let mut one = [0u8; 1];
            fill(9, off, &mut one);
            assert_eq!(one[0], byte_at(9, off));
            let mut three = [0u8; 3];
            fill(9, off, &mut three);
            assert_eq!(
                three,
                [byte_at(9, off), byte_at(9, off + 1), byte_at(9, off + 2)]
            );
        }
    }

    #[test]
    fn keys_differ_and_data_is_not_zero_heavy() {
        let k1 = key_for(1, b"dir/file");
        let k2 = key_for(1, b"dir/filf");
        let k3 = key_for(2, b"dir/file");
        assert_ne!(k1, k2);
        assert_ne!(k1, k3);
        let mut a = vec![0u8; 65536];
        let mut b = vec![0u8; 65536];
        fill(k1, 0, &mut a);
        fill(k2, 0, &mut b);
        assert_ne!(a, b);
        // A hole (zeros) or a stale page of another file must never verify: no 8-byte zero run,
        // and two keys agree on about 1/256 of the bytes.
        assert!(a.windows(8).all(|w| w != [0u8; 8]));
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert!(same < 65536 / 100, "{same}");
        // Same key at a shifted offset differs too (catches data written at the wrong offset).
        let mut c = vec![0u8; 65536];
        fill(k1, 4096, &mut c);
        assert_ne!(a, c);
    }

    #[test]
    fn mismatch_reports_first_offset() {
        let mut s = Vec::new();
        let mut d = vec![0u8; 5000];
        fill(77, 100, &mut d);
        assert_eq!(first_mismatch(77, 100, &d, &mut s), None);
        d[4000] ^= 1;
        d[4500] ^= 1;
        assert_eq!(first_mismatch(77, 100, &d, &mut s), Some(4100));
        assert_eq!(first_mismatch(77, 101, &d, &mut s), Some(101));
    }

    #[test]
    fn rng_is_deterministic_and_bounded() {
        let mut a = Rng::new(5);
        let mut b = Rng::new(5);
        let mut c = Rng::new(6);
        let va: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        let vb: Vec<u64> = (0..100).map(|_| b.next_u64()).collect();
        let vc: Vec<u64> = (0..100).map(|_| c.next_u64()).collect();
        assert_eq!(va, vb);
        assert_ne!(va, vc);
        let mut r = Rng::new(1);
        let mut seen = [false; 10];
        for _ in 0..10_000 {
            let x = r.below(10);
            assert!(x < 10);
            seen[x as usize] = true;
            let y = r.range(5, 7);
            assert!((5..=7).contains(&y));
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(r.below(0), 0);
        assert_eq!(r.range(9, 3), 9);
    }

    /// Golden values: the pattern must never change silently, or trees written by an older
    /// binary (e.g. before a guest reboot) would fail to verify.
    #[test]
    fn golden() {
        assert_eq!(mix64(0), 0xE220_A839_7B1D_CDAF);
        let mut b = [0u8; 8];
        fill(key_for(1, b"x"), 0, &mut b);
        let again = {
            let mut c = [0u8; 8];
            for (i, x) in c.iter_mut().enumerate() {
                *x = byte_at(key_for(1, b"x"), i as u64);
            }
            c
        };
        assert_eq!(b, again);
        assert_eq!(b, [0x5c, 0x05, 0xa7, 0x01, 0x46, 0x2d, 0x5a, 0x17]);
        let mut c = [0u8; 4];
        fill(key_for(1, b"x"), 6, &mut c);
        assert_eq!(c, [0x5a, 0x17, 0xa0, 0x5e]);
    }
}
