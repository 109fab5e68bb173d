//! The experiments. Each returns its typed results; `run` wraps them in a [`RunRecord`].

pub mod concurrency;
pub mod dirty;
pub mod fill;
pub mod gc;
pub mod latency;
pub mod meta;
pub mod mount;
pub mod randwrite;
pub mod raw;
pub mod sweep;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::buf::{DataBuf, Rng};
use crate::cli::{Common, Pattern};
use crate::error::{Context, Result};
use crate::record::RunRecord;
use crate::wa::WaConfig;

/// State shared by an experiment run.
pub struct Ctx {
    pub label: String,
    pub seed: u64,
    pub progress: bool,
    pub wa: WaConfig,
    pub events: Vec<String>,
}

impl Ctx {
    pub fn new(c: &Common) -> Self {
        Ctx {
            label: c.label.clone(),
            seed: c.seed,
            progress: !c.no_progress,
            wa: WaConfig {
                counters_file: c.counters_file.clone(),
                counter_key: c.counter_key.clone(),
                counter_scale: c.counter_scale,
                diskstats_dev: c.diskstats_dev.clone(),
                diskstats_path: PathBuf::from("/proc/diskstats"),
            },
            events: Vec::new(),
        }
    }

    /// Records an event for the JSON and tells the user on stderr.
    pub fn event(&mut self, msg: impl Into<String>) {
        let m = msg.into();
        eprintln!("ferrofs-bench: {m}");
        self.events.push(m);
    }

    pub fn record(self, experiment: &str, target: &str, started: (u64, Instant), params: serde_json::Value, results: serde_json::Value) -> RunRecord {
        RunRecord {
            schema_version: crate::record::SCHEMA_VERSION,
            tool: "ferrofs-bench".into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            experiment: experiment.into(),
            label: self.label,
            seed: self.seed,
            target: target.into(),
            kernel: crate::sys::kernel_release(),
            started_unix: started.0,
            elapsed_s: started.1.elapsed().as_secs_f64(),
            params,
            results,
            events: self.events,
        }
    }
}

/// Checks that `dir` exists and is a directory, with a clear message otherwise.
pub fn check_dir(dir: &Path) -> Result<()> {
    let md = std::fs::metadata(dir).with_ctx(|| format!("target directory {}", dir.display()))?;
    if !md.is_dir() {
        crate::bail!("target {} is not a directory", dir.display());
    }
    Ok(())
}

/// Creates (or empties) the benchmark's own subdirectory of `dir`.
pub fn work_dir(dir: &Path, name: &str) -> Result<PathBuf> {
    check_dir(dir)?;
    let w = dir.join(name);
    if w.exists() {
        std::fs::remove_dir_all(&w).with_ctx(|| format!("removing leftover {}", w.display()))?;
    }
    std::fs::create_dir(&w).with_ctx(|| format!("creating {}", w.display()))?;
    Ok(w)
}

/// Removes the benchmark's directory; a failure is only reported.
pub fn cleanup(ctx: &mut Ctx, w: &Path) {
    if let Err(e) = std::fs::remove_dir_all(w) {
        ctx.event(format!("cleanup of {} failed: {e}", w.display()));
    }
    crate::sys::sync_all();
}

/// Writes a file of `size` bytes sequentially in `chunk` pieces and fsyncs it.
pub fn write_file(path: &Path, size: u64, chunk: u64, buf: &mut DataBuf, extra_flags: i32) -> Result<File> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(extra_flags)
        .open(path)
        .with_ctx(|| format!("creating {}", path.display()))?;
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk).min(buf.len() as u64) as usize;
        f.write_all(buf.next_block(n)).with_ctx(|| format!("writing {}", path.display()))?;
        left -= n as u64;
    }
    f.sync_all().with_ctx(|| format!("fsync {}", path.display()))?;
    Ok(f)
}

/// In-place overwrites of a work file, sequential (wrapping) or at random block-aligned offsets.
pub struct Overwriter {
    pub file: File,
    slots: u64,
    bs: u64,
    next: u64,
    pattern: Pattern,
    rng: Rng,
    pub buf: DataBuf,
}

impl Overwriter {
    /// `file_size` is rounded down to whole blocks (at least one).
    pub fn new(file: File, file_size: u64, bs: u64, pattern: Pattern, seed: u64, buf: DataBuf) -> Self {
        let slots = (file_size / bs).max(1);
        Overwriter { file, slots, bs, next: 0, pattern, rng: Rng::new(seed ^ 0x0f0f), buf }
    }

    /// One block-sized overwrite.
    pub fn write_one(&mut self) -> std::io::Result<()> {
        let slot = match self.pattern {
            Pattern::Seq => {
                let s = self.next;
                self.next = (self.next + 1) % self.slots;
                s
            }
            Pattern::Random => self.rng.below(self.slots),
        };
        let data = self.buf.next_block(self.bs as usize);
        self.file.write_all_at(data, slot * self.bs)
    }

    pub fn block_size(&self) -> u64 {
        self.bs
    }
}

/// Median of a list (sorted copy; mean of the two middle values for even lengths).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    Some(if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 })
}

impl Overwriter {
    /// Gives the buffer back for the next data point.
    pub fn into_buf(self) -> DataBuf {
        self.buf
    }
}

/// Outcome of `n` overwrites: bytes done, seconds, and the error that stopped it, if any.
pub fn overwrite_n(ow: &mut Overwriter, n: u64, fsync_at_end: bool, pb: &crate::buf::Progress) -> (u64, f64, Option<std::io::Error>) {
    let bs = ow.block_size();
    let t = Instant::now();
    let mut done = 0;
    for _ in 0..n {
        if let Err(e) = ow.write_one() {
            return (done, t.elapsed().as_secs_f64(), Some(e));
        }
        done += bs;
        pb.inc(bs);
    }
    if fsync_at_end {
        if let Err(e) = ow.file.sync_all() {
            return (done, t.elapsed().as_secs_f64(), Some(e));
        }
    }
    (done, t.elapsed().as_secs_f64(), None)
}

/// Opens an existing work file for in-place overwrites.
pub fn open_rw(path: &Path, extra_flags: i32) -> Result<File> {
    OpenOptions::new().read(true).write(true).custom_flags(extra_flags).open(path).with_ctx(|| format!("opening {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(pattern: Pattern, file_size: u64, bs: u64, n: usize) -> Vec<u64> {
        // Each write changes its block's first bytes (the buffer's stamp): the first differing
        // byte after a write tells which block it hit.
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("w");
        let mut buf = DataBuf::new(bs as usize, 3);
        drop(write_file(&p, file_size, bs, &mut buf, 0).unwrap());
        let mut ow = Overwriter::new(open_rw(&p, 0).unwrap(), file_size, bs, pattern, 5, DataBuf::new(bs as usize, 4));
        let mut seen = Vec::new();
        let mut before = std::fs::read(&p).unwrap();
        for _ in 0..n {
            ow.write_one().unwrap();
            let after = std::fs::read(&p).unwrap();
            assert_eq!(after.len() as u64, file_size, "overwrites never grow the file");
            let first = before.iter().zip(&after).position(|(a, b)| a != b).unwrap();
            seen.push(first as u64 / bs * bs);
            before = after;
        }
        seen
    }

    #[test]
    fn sequential_overwrite_wraps() {
        assert_eq!(offsets(Pattern::Seq, 4 * 4096, 4096, 6), vec![0, 4096, 8192, 12288, 0, 4096]);
    }

    #[test]
    fn random_overwrite_stays_in_file_and_is_seeded() {
        let a = offsets(Pattern::Random, 8 * 4096, 4096, 20);
        assert!(a.iter().all(|&o| o % 4096 == 0 && o < 8 * 4096));
        assert_eq!(a, offsets(Pattern::Random, 8 * 4096, 4096, 20), "same seed, same offsets");
        assert!(a.iter().collect::<std::collections::BTreeSet<_>>().len() > 2);
    }

    #[test]
    fn median_and_dirs() {
        assert_eq!(median(&[1.0]), Some(1.0));
        let d = tempfile::tempdir().unwrap();
        assert!(check_dir(d.path()).is_ok());
        assert!(check_dir(&d.path().join("none")).is_err());
        let w = work_dir(d.path(), "x").unwrap();
        std::fs::write(w.join("leftover"), "1").unwrap();
        let w = work_dir(d.path(), "x").unwrap();
        assert!(std::fs::read_dir(&w).unwrap().next().is_none(), "leftovers removed");
    }
}
