//! The JSON written by every experiment: a common envelope and one typed result per experiment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Context, Result};
use crate::stats::{Bucket, LatencySummary};
use crate::sys::CmdRun;
use crate::wa::WaSample;

pub const SCHEMA_VERSION: u32 = 1;

/// One run of one experiment against one filesystem (or device).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub schema_version: u32,
    pub tool: String,
    pub tool_version: String,
    /// "sweep", "dirty", "latency", "gc", "smallfiles", "meta" or "mount".
    pub experiment: String,
    /// The filesystem under test as the caller names it ("ferrofs", "jffs2", "ubifs", ...).
    pub label: String,
    pub seed: u64,
    /// Directory or device measured.
    pub target: String,
    pub kernel: Option<String>,
    pub started_unix: u64,
    pub elapsed_s: f64,
    /// The experiment's parameters as given (after defaults).
    pub params: serde_json::Value,
    /// One of the `*Results` types below, by `experiment`.
    pub results: serde_json::Value,
    /// Things that happened and matter for reading the numbers (ENOSPC during fill, fallbacks...).
    #[serde(default)]
    pub events: Vec<String>,
}

impl RunRecord {
    pub fn results_as<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_value(self.results.clone()).with_ctx(|| format!("results of {} run {:?}", self.experiment, self.label))
    }

    /// Writes `<dir>/<label>-<experiment>.json` and returns its path.
    pub fn write_json(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).with_ctx(|| format!("creating output directory {}", dir.display()))?;
        let path = dir.join(format!("{}-{}.json", sanitize(&self.label), self.experiment));
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(&path, text + "\n").with_ctx(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

/// A label usable in a file name.
pub fn sanitize(s: &str) -> String {
    let t: String = s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' }).collect();
    if t.is_empty() || t.starts_with('.') {
        format!("run{t}")
    } else {
        t
    }
}

/// Outcome of a timed phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// "ok", "unsupported", "error" or "skipped".
    pub status: String,
    pub bytes: u64,
    pub seconds: f64,
    /// MB/s with MB = 10^6 bytes; present when status is "ok".
    pub mb_s: Option<f64>,
    pub error: Option<String>,
}

impl Phase {
    pub fn ok(bytes: u64, seconds: f64) -> Self {
        Phase { status: "ok".into(), bytes, seconds, mb_s: Some(crate::stats::mb_per_s(bytes, seconds)), error: None }
    }
    pub fn failed(status: &str, bytes: u64, seconds: f64, error: impl Into<String>) -> Self {
        Phase { status: status.into(), bytes, seconds, mb_s: None, error: Some(error.into()) }
    }
    pub fn skipped(why: impl Into<String>) -> Self {
        Phase::failed("skipped", 0, 0.0, why)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    pub block_size: u64,
    /// "buffered", "direct", "raw-mtd" or "raw-block".
    pub mode: String,
    pub write: Phase,
    pub read: Phase,
    /// How caches were emptied between write and read ("drop_caches", "remount", "none (...)").
    pub cache_drop: Option<String>,
    /// Raw MTD: time spent erasing the region before the write phase (not in write.seconds).
    pub erase_seconds: Option<f64>,
    pub wa: Option<WaSample>,
}

/// Geometry of a raw device measured with `sweep --raw`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawDevice {
    /// "mtd" or "block".
    pub kind: String,
    pub size: u64,
    pub erase_size: Option<u32>,
    pub write_size: Option<u32>,
    pub offset: u64,
    pub region_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepResults {
    pub points: Vec<SweepPoint>,
    pub raw_device: Option<RawDevice>,
}

/// What a fill (and fragmentation) phase achieved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct FillReport {
    pub target_fraction: f64,
    /// statvfs used fraction after the phase.
    pub achieved_fraction: Option<f64>,
    pub files_written: u64,
    pub bytes_written: u64,
    pub files_deleted: u64,
    pub bytes_deleted: u64,
    /// The filesystem ran out of space before reaching the target (handled, not fatal).
    pub enospc: bool,
    /// `--max-fill-bytes` stopped the fill before the target.
    pub capped: bool,
    pub seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirtyPoint {
    /// 0 for the clean filesystem, else the fill target fraction.
    pub fill: f64,
    /// "clean" or "dirty".
    pub state: String,
    pub block_size: u64,
    /// The measured overwrite (same byte count for every point).
    pub overwrite: Phase,
    pub wa: Option<WaSample>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirtyResults {
    pub work_file_bytes: u64,
    pub overwrite_bytes: u64,
    pub warmup_bytes: u64,
    pub fills: Vec<FillReport>,
    pub points: Vec<DirtyPoint>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyResults {
    pub block_size: u64,
    pub writes: u64,
    /// "none", "fsync" (after every write, included) or "dsync" (O_DSYNC).
    pub sync: String,
    pub summary: Option<LatencySummary>,
    /// Power-of-two buckets in µs ([0,1), [1,2), [2,4), ...).
    pub histogram: Vec<Bucket>,
    pub total: Phase,
    pub wa: Option<WaSample>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GcWindow {
    /// Start of the window, seconds since the run began.
    pub t_s: f64,
    pub seconds: f64,
    pub bytes: u64,
    pub mb_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GcResults {
    pub block_size: u64,
    pub window_s: f64,
    pub windows: Vec<GcWindow>,
    pub total: Phase,
    pub min_window_mb_s: Option<f64>,
    pub max_window_mb_s: Option<f64>,
    /// Coefficient of variation of the windows' MB/s (stddev / mean).
    pub cov: Option<f64>,
    /// "duration", "max_bytes" or "error".
    pub stopped_by: String,
    pub fill: Option<FillReport>,
    pub wa: Option<WaSample>,
    /// Per-write sync: "none" (buffered; each window ends with fsync unless --no-window-fsync),
    /// "fsync" (after every write) or "dsync" (O_DSYNC). Absent in older runs: "none".
    #[serde(default = "sync_none")]
    pub sync: String,
    /// The slowest full window's MB/s as a percentage of the run's mean (total bytes / total
    /// seconds); windows shorter than 90 % of `window_s` (the last one) are left out.
    #[serde(default)]
    pub slowest_window_pct_of_mean: Option<f64>,
}

/// `randwrite-syncN` / `randwrite-buffered`: random overwrites of a large, laid-out file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RandwriteResults {
    pub block_size: u64,
    pub file_size: u64,
    /// An fsync after every this many writes; 0 = buffered (one fsync, at the end).
    pub fsync_every: u64,
    /// Writes and fsyncs done in the timed phase (the last fsync is the final one).
    pub writes: u64,
    pub fsyncs: u64,
    /// The timed phase: every write and every fsync.
    pub total: Phase,
    /// The fsyncs' own durations.
    pub fsync_latency: Option<LatencySummary>,
    /// The last fsync, seconds (for the buffered form: the write-back of what the dirty limit held).
    pub final_fsync_s: Option<f64>,
    /// vm.dirty_bytes in force during the timed phase (`None`: the kernel's setting, untouched).
    pub dirty_bytes: Option<u64>,
    /// The untimed sequential write of the file (1 MiB writes and an fsync); `None` when a file
    /// an earlier run left (`--keep`) was reused.
    pub layout: Option<Phase>,
    /// "amount", "duration" (--max-duration) or "error".
    pub stopped_by: String,
    pub wa: Option<WaSample>,
    /// The counters file's key behind `counter_per_fsync` (`None`: no counters file).
    pub counter_key: Option<String>,
    /// That counter's delta per fsync (the rig: NAND erase blocks erased per fsync).
    pub counter_per_fsync: Option<f64>,
}

fn sync_none() -> String {
    "none".into()
}

/// A reader phase of `concurrency`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReaderPhase {
    pub bytes: u64,
    pub seconds: f64,
    pub mb_s: f64,
    /// Number of reads and the slowest one, µs.
    pub reads: u64,
    pub max_read_us: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConcurrencyResults {
    pub read_file_bytes: u64,
    pub read_block: u64,
    pub write_file_bytes: u64,
    pub write_block: u64,
    pub writer_fsync_every: u64,
    /// CPUs online in the machine that ran it.
    pub cpus: u64,
    /// The reader alone, the file cached.
    pub idle: Option<ReaderPhase>,
    /// The reader while the writer process runs.
    pub loaded: Option<ReaderPhase>,
    /// loaded MB/s / idle MB/s x 100.
    pub loaded_pct_of_idle: Option<f64>,
    /// The writer's own throughput over its whole run (fsyncs included).
    pub writer: Phase,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpRate {
    pub op: String,
    pub count: u64,
    pub seconds: f64,
    pub ops_per_s: f64,
    pub error: Option<String>,
}

/// `smallfiles` and `meta`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpsResults {
    pub ops: Vec<OpRate>,
    pub wa: Option<WaSample>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MountRun {
    pub umount: Option<CmdRun>,
    pub mount: CmdRun,
    /// Change of /proc/meminfo fields (kB) across the mount command.
    pub meminfo_delta_kb: BTreeMap<String, i64>,
    /// Total change of slab bytes in use (active objects x size) without the excluded caches, if
    /// /proc/slabinfo is readable.
    pub slab_delta_bytes: Option<i64>,
    /// The caches that grew or shrank most.
    pub slab_top_delta_bytes: BTreeMap<String, i64>,
    pub cache_drop: String,
    /// Kernel memory the mounted filesystem holds, kB: the change of meminfo's Slab (which
    /// also counts kmalloc allocations above 8 KiB, served by the page allocator) less the
    /// excluded slab caches' change (/proc/slabinfo: nandsim), plus VmallocUsed and Percpu
    /// (/proc/meminfo), from before the mount to after it, both read after `sync` and dropping
    /// the page, dentry and inode caches (so read-back caches do not count; what the filesystem
    /// keeps in RAM, e.g. JFFS2's node map or an index cache, does). Direct page allocations
    /// (alloc_pages outside kmalloc) are not counted, for any filesystem.
    #[serde(default)]
    pub held_kb: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MountResults {
    pub runs: Vec<MountRun>,
    pub min_s: Option<f64>,
    pub median_s: Option<f64>,
    pub max_s: Option<f64>,
    /// Seconds of each run of the floor command (a shell and mount(8) mounting a tmpfs): what
    /// spawning the mount command costs, whatever it mounts.
    #[serde(default)]
    pub floor_runs_s: Vec<f64>,
    /// Median of `floor_runs_s`.
    #[serde(default)]
    pub floor_s: Option<f64>,
    /// `median_s - floor_s`: the mount itself (for UBIFS, with UBI attach).
    #[serde(default)]
    pub net_median_s: Option<f64>,
}
