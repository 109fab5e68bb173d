//! Throughput, percentiles and the log-log latency histogram.

use serde::{Deserialize, Serialize};

/// Megabytes (10^6 bytes) per second; 0 when no time elapsed.
pub fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / 1e6 / secs
    } else {
        0.0
    }
}

/// Nearest-rank percentile of an ascending slice: the smallest sample such that at least `p` percent
/// of the samples are at or below it. `p` is clamped to [0, 100]; `None` for an empty slice.
pub fn percentile_sorted(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 100.0) };
    let n = sorted.len();
    // rank = ceil(p/100 * n), in integers (p in thousandths of a percent) so that 99.9 % of 100 000
    // samples is exactly rank 99 900, not 99 901 through floating-point rounding.
    let milli = (p * 1000.0).round() as u128;
    let rank = (milli * n as u128).div_ceil(100_000).max(1) as usize;
    Some(sorted[rank.min(n) - 1])
}

/// Summary of a set of latencies, in microseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min_us: f64,
    pub median_us: f64,
    pub mean_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// Summarises latencies given in nanoseconds; sorts the slice in place. `None` when empty.
pub fn summarize_ns(samples: &mut [u64]) -> Option<LatencySummary> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let us = |ns: u64| ns as f64 / 1000.0;
    let sum: u128 = samples.iter().map(|&s| s as u128).sum();
    Some(LatencySummary {
        count: samples.len() as u64,
        min_us: us(samples[0]),
        median_us: us(percentile_sorted(samples, 50.0)?),
        mean_us: sum as f64 / samples.len() as f64 / 1000.0,
        p99_us: us(percentile_sorted(samples, 99.0)?),
        p999_us: us(percentile_sorted(samples, 99.9)?),
        max_us: us(samples[samples.len() - 1]),
    })
}

/// One histogram bucket: samples with `lo_us <= latency < hi_us`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub lo_us: u64,
    pub hi_us: u64,
    pub count: u64,
}

/// Bucket index for a latency in nanoseconds: bucket 0 is [0, 1) µs, bucket k >= 1 is [2^(k-1), 2^k) µs.
pub fn bucket_index(ns: u64) -> usize {
    let us = ns / 1000;
    if us == 0 {
        0
    } else {
        (64 - us.leading_zeros()) as usize
    }
}

/// Bounds in µs of bucket `k` (see [`bucket_index`]).
pub fn bucket_bounds(k: usize) -> (u64, u64) {
    match k {
        0 => (0, 1),
        k if k >= 64 => (1u64 << 63, u64::MAX),
        k => (1u64 << (k - 1), 1u64 << k),
    }
}

/// Power-of-two histogram of latencies in ns, from bucket 0 up to the highest non-empty bucket.
pub fn log2_histogram(samples_ns: &[u64]) -> Vec<Bucket> {
    let mut counts = [0u64; 65];
    for &s in samples_ns {
        counts[bucket_index(s)] += 1;
    }
    let Some(last) = counts.iter().rposition(|&c| c > 0) else {
        return Vec::new();
    };
    counts[..=last]
        .iter()
        .enumerate()
        .map(|(k, &count)| {
            let (lo_us, hi_us) = bucket_bounds(k);
            Bucket { lo_us, hi_us, count }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput() {
        assert_eq!(mb_per_s(2_000_000, 2.0), 1.0);
        assert_eq!(mb_per_s(5, 0.0), 0.0);
    }

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile_sorted(&v, 50.0), Some(50));
        assert_eq!(percentile_sorted(&v, 99.0), Some(99));
        assert_eq!(percentile_sorted(&v, 99.9), Some(100));
        assert_eq!(percentile_sorted(&v, 100.0), Some(100));
        assert_eq!(percentile_sorted(&v, 0.0), Some(1));
        assert_eq!(percentile_sorted(&v, 150.0), Some(100));
        assert_eq!(percentile_sorted(&v, f64::NAN), Some(1));
        assert_eq!(percentile_sorted(&[], 50.0), None);
        assert_eq!(percentile_sorted(&[7], 99.9), Some(7));
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile_sorted(&v, 99.9), Some(999));
        assert_eq!(percentile_sorted(&v, 99.0), Some(990));
        let v: Vec<u64> = (1..=100_000).collect();
        assert_eq!(percentile_sorted(&v, 99.9), Some(99_900));
        assert_eq!(percentile_sorted(&v, 50.0), Some(50_000));
    }

    #[test]
    fn summary() {
        let mut v = vec![3000, 1000, 2000, 4000];
        let s = summarize_ns(&mut v).unwrap();
        assert_eq!(s.count, 4);
        assert_eq!(s.min_us, 1.0);
        assert_eq!(s.median_us, 2.0);
        assert_eq!(s.mean_us, 2.5);
        assert_eq!(s.p99_us, 4.0);
        assert_eq!(s.max_us, 4.0);
        assert!(summarize_ns(&mut []).is_none());
    }

    #[test]
    fn buckets() {
        assert_eq!(bucket_index(0), 0);
        assert_eq!(bucket_index(999), 0);
        assert_eq!(bucket_index(1000), 1);
        assert_eq!(bucket_index(1999), 1);
        assert_eq!(bucket_index(2000), 2);
        assert_eq!(bucket_index(3999), 2);
        assert_eq!(bucket_index(4000), 3);
        assert_eq!(bucket_index(1_000_000), 10); // 1000 µs in [512, 1024)
        assert_eq!(bucket_index(u64::MAX), 55);
        for k in 0..55 {
            let (lo, hi) = bucket_bounds(k);
            assert_eq!(bucket_index(lo * 1000), k, "lo of bucket {k}");
            assert_eq!(bucket_index(hi * 1000 - 1), k, "hi of bucket {k}");
        }
        assert_eq!(bucket_bounds(64), (1 << 63, u64::MAX));
    }

    #[test]
    fn histogram() {
        let h = log2_histogram(&[500, 1500, 1600, 5000, 3_300_000_000]);
        assert_eq!(h[0], Bucket { lo_us: 0, hi_us: 1, count: 1 });
        assert_eq!(h[1], Bucket { lo_us: 1, hi_us: 2, count: 2 });
        assert_eq!(h[2].count, 0);
        assert_eq!(h[3], Bucket { lo_us: 4, hi_us: 8, count: 1 });
        let last = h.last().unwrap();
        assert_eq!(last.count, 1);
        assert!(last.lo_us <= 3_300_000 && 3_300_000 < last.hi_us);
        assert_eq!(h.iter().map(|b| b.count).sum::<u64>(), 5);
        assert!(log2_histogram(&[]).is_empty());
    }
}
