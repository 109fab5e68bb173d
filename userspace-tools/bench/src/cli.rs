//! Command-line interface (clap).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::units::{parse_block_size, parse_duration, parse_fill, parse_nonzero_size, parse_size, MAX_BLOCK};

/// A size (zero allowed) of at most [`MAX_BLOCK`].
fn parse_size_max_block(s: &str) -> Result<u64, String> {
    match parse_size(s)? {
        n if n > MAX_BLOCK => Err(format!("size {s:?} is larger than the maximum, 256M")),
        n => Ok(n),
    }
}

#[derive(Debug, Parser)]
#[command(name = "ferrofs-bench", version, about = "Flash filesystem benchmark: throughput sweep, dirty-fs overwrite, write latency, GC fluctuation, small files, metadata, mount time, write amplification; plus a host-side report")]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Sequential write (with final fsync) then read throughput by block size, buffered and O_DIRECT; or a raw device.
    Sweep(SweepArgs),
    /// Overwrite throughput by block size on a clean filesystem and after filling to 50/80/90 % and fragmenting.
    Dirty(DirtyArgs),
    /// Per-write latency: min, median, p99, p99.9, max and a log2 histogram.
    Latency(LatencyArgs),
    /// Throughput in short windows over a long overwrite run (GC fluctuation).
    Gc(GcArgs),
    /// Random overwrites of a large file with an fsync every N writes, or buffered under a dirty limit.
    Randwrite(RandwriteArgs),
    /// A reader streaming a cached file, idle and while another process overwrites a different file.
    Concurrency(ConcurrencyArgs),
    /// Internal: the overwriting process of `concurrency` (started by it, not by hand).
    #[command(hide = true)]
    ConcurrencyWriter(WriterArgs),
    /// Create+write+fsync then unlink of many small files.
    Smallfiles(SmallfilesArgs),
    /// mkdir / create / stat / readdir / rename / unlink / rmdir rates.
    Meta(MetaArgs),
    /// Time a caller-given mount command after a clean unmount; memory deltas from /proc.
    Mount(MountArgs),
    /// Host side: combine JSON results of several filesystems into Markdown tables with ratios and SVG plots.
    Report(ReportArgs),
}

/// Options shared by every measuring subcommand.
#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Name of the filesystem under test in the results (jffs2, ubifs, ferrofs, ...).
    #[arg(long, default_value = "fs")]
    pub label: String,
    /// Seed of all generated data and random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Directory for the JSON (and Markdown) results.
    #[arg(long, default_value = ".")]
    pub out_dir: PathBuf,
    /// Never show a progress bar (it is shown only when stdout is a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,
    /// File of key=value device counters read before and after each measured phase (write amplification).
    #[arg(long)]
    pub counters_file: Option<PathBuf>,
    /// Key of --counters-file that counts writes to the medium.
    #[arg(long, default_value = "bytes_written")]
    pub counter_key: String,
    /// Bytes per unit of --counter-key (e.g. the page size when it counts pages).
    #[arg(long, default_value_t = 1.0)]
    pub counter_scale: f64,
    /// Never write /proc/sys/vm/drop_caches (sweep: between write and read; mount: before mounting).
    #[arg(long)]
    pub no_drop_caches: bool,
    /// Block device name in /proc/diskstats (vda, mtdblock0) whose sectors written give write amplification.
    #[arg(long)]
    pub diskstats_dev: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IoMode {
    Buffered,
    Direct,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    /// Overwrite the work file front to back, wrapping around.
    Seq,
    /// Overwrite block-aligned offsets chosen at random (from --seed).
    Random,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyncMode {
    /// Plain write(2); the page cache absorbs what it can.
    None,
    /// fsync after every write, inside the timed region.
    Fsync,
    /// Open with O_DSYNC.
    Dsync,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub common: Common,
    /// Directory on the mounted filesystem to measure (omit with --raw).
    #[arg(required_unless_present = "raw", conflicts_with = "raw")]
    pub dir: Option<PathBuf>,
    /// Raw device instead of a filesystem: MTD char device (/dev/mtdN) or block device. DESTROYS ITS DATA.
    #[arg(long)]
    pub raw: Option<PathBuf>,
    /// Required with --raw: acknowledges that the device's contents are overwritten.
    #[arg(long)]
    pub destructive: bool,
    /// Byte offset on the raw device (rounded up to an erase block for MTD).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub raw_offset: u64,
    /// Block sizes, comma-separated.
    #[arg(long, default_value = "4k,16k,32k,64k,128k,1M,16M", value_delimiter = ',', value_parser = parse_block_size)]
    pub block_sizes: Vec<u64>,
    /// Bytes written (and read) per data point (rounded up to a whole block).
    #[arg(long, default_value = "64M", value_parser = parse_nonzero_size)]
    pub total: u64,
    /// I/O modes for filesystem runs.
    #[arg(long, value_delimiter = ',', default_value = "buffered,direct")]
    pub modes: Vec<IoMode>,
    /// Shell command run between write and read phases to empty caches (e.g. "umount /mnt && mount ...").
    #[arg(long)]
    pub remount_cmd: Option<String>,
}

/// How the filesystem is filled and fragmented before dirty measurements.
#[derive(Debug, Args, Clone)]
pub struct FillArgs {
    /// Size of each fill file; small files make live and dead data share erase blocks.
    #[arg(long, default_value = "32k", value_parser = parse_nonzero_size)]
    pub fill_file_size: u64,
    /// Fraction of fill files deleted at random (then the fill is topped up again).
    #[arg(long, default_value_t = 0.5)]
    pub delete_fraction: f64,
    /// Stop filling after this many bytes even below the target (0 = no cap).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub max_fill_bytes: u64,
}

#[derive(Debug, Args)]
pub struct DirtyArgs {
    #[command(flatten)]
    pub common: Common,
    pub dir: PathBuf,
    /// Fill levels (percent or fraction of statvfs size), comma-separated; a clean run always comes first.
    #[arg(long, default_value = "50,80,90", value_delimiter = ',', value_parser = parse_fill)]
    pub fill: Vec<f64>,
    #[arg(long, default_value = "4k,16k,64k,128k,1M", value_delimiter = ',', value_parser = parse_block_size)]
    pub block_sizes: Vec<u64>,
    /// Bytes overwritten per data point (the same for every point).
    #[arg(long, default_value = "32M", value_parser = parse_nonzero_size)]
    pub amount: u64,
    /// Size of the file being overwritten.
    #[arg(long, default_value = "4M", value_parser = parse_nonzero_size)]
    pub work_size: u64,
    /// Untimed overwrite before each measurement (default: one pass over the work file).
    #[arg(long, value_parser = parse_size)]
    pub warmup: Option<u64>,
    #[arg(long, value_enum, default_value = "random")]
    pub pattern: Pattern,
    #[command(flatten)]
    pub fill_args: FillArgs,
    /// Leave the benchmark's files behind.
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug, Args)]
pub struct LatencyArgs {
    #[command(flatten)]
    pub common: Common,
    pub dir: PathBuf,
    /// Number of timed writes.
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
    #[arg(long, default_value = "4k", value_parser = parse_block_size)]
    pub block_size: u64,
    /// Size of the file being overwritten.
    #[arg(long, default_value = "16M", value_parser = parse_nonzero_size)]
    pub file_size: u64,
    #[arg(long, value_enum, default_value = "none")]
    pub sync: SyncMode,
    #[arg(long, value_enum, default_value = "seq")]
    pub pattern: Pattern,
    /// Also store every sample (ns) in the JSON.
    #[arg(long)]
    pub keep_samples: bool,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    #[command(flatten)]
    pub common: Common,
    pub dir: PathBuf,
    /// Length of the overwrite run.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Throughput window.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub window: Duration,
    /// Stop after this many bytes even before --duration (0 = no limit).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub max_bytes: u64,
    #[arg(long, default_value = "64k", value_parser = parse_block_size)]
    pub block_size: u64,
    #[arg(long, default_value = "16M", value_parser = parse_nonzero_size)]
    pub file_size: u64,
    /// Fill and fragment the filesystem to this level first (percent or fraction); 0 = no fill.
    #[arg(long, default_value = "0", value_parser = parse_fill)]
    pub fill: f64,
    #[arg(long, value_enum, default_value = "random")]
    pub pattern: Pattern,
    /// Do not fsync at the end of each window (then windows measure the page cache, too).
    #[arg(long)]
    pub no_window_fsync: bool,
    /// Per-write sync: `fsync` (after every write, in the window) or `dsync` (O_DSYNC) make the run
    /// device-bound (recorded as experiment `gc-fsync` / `gc-dsync`); `none` = buffered writes.
    #[arg(long, value_enum, default_value = "none")]
    pub sync: SyncMode,
    #[command(flatten)]
    pub fill_args: FillArgs,
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug, Args)]
pub struct RandwriteArgs {
    #[command(flatten)]
    pub common: Common,
    pub dir: PathBuf,
    /// Size of the file being overwritten (written sequentially and fsynced first, untimed).
    #[arg(long, default_value = "64M", value_parser = parse_nonzero_size)]
    pub file_size: u64,
    #[arg(long, default_value = "4k", value_parser = parse_block_size)]
    pub block_size: u64,
    /// Bytes overwritten at random block-aligned offsets in the timed phase (whole blocks).
    #[arg(long, default_value = "4M", value_parser = parse_nonzero_size)]
    pub amount: u64,
    /// fsync after every N writes, inside the timing (recorded as experiment `randwrite-syncN`);
    /// 0: buffered, one fsync at the end, timed (`randwrite-buffered`).
    #[arg(long, default_value_t = 0)]
    pub fsync_every: u64,
    /// Set vm.dirty_bytes to this for the timed phase and restore the kernel's setting after it
    /// (root only; a setting that cannot be made is an error).
    #[arg(long, value_parser = parse_nonzero_size)]
    pub dirty_bytes: Option<u64>,
    /// Stop writing after this long even before --amount (the pending fsync still runs).
    #[arg(long, value_parser = parse_duration)]
    pub max_duration: Option<Duration>,
    /// Leave the work file behind, and reuse one left by an earlier run when its size matches
    /// (several forms over one laid-out file).
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug, Args)]
pub struct ConcurrencyArgs {
    #[command(flatten)]
    pub common: Common,
    pub dir: PathBuf,
    /// Size of the file the reader streams (read once to cache it before measuring).
    #[arg(long, default_value = "4M", value_parser = parse_nonzero_size)]
    pub read_size: u64,
    /// Reader's block size.
    #[arg(long, default_value = "64k", value_parser = parse_block_size)]
    pub read_block: u64,
    /// Length of each measured phase (idle, then with the writer).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Size of the writer's file (a different file).
    #[arg(long, default_value = "4M", value_parser = parse_nonzero_size)]
    pub write_size: u64,
    /// Writer's block size (random block-aligned overwrites).
    #[arg(long, default_value = "64k", value_parser = parse_block_size)]
    pub write_block: u64,
    /// The writer fsyncs after every this many bytes (default: the size of its file; 0 = never),
    /// so its overwrites reach the device while the reader runs.
    #[arg(long, value_parser = parse_size)]
    pub writer_fsync_every: Option<u64>,
}

/// The writer process of `concurrency`: random overwrites of an existing file for a duration,
/// then one line `bytes=N seconds=S` on stdout.
#[derive(Debug, Args)]
pub struct WriterArgs {
    pub file: PathBuf,
    #[arg(long, value_parser = parse_nonzero_size)]
    pub size: u64,
    #[arg(long, value_parser = parse_block_size)]
    pub block: u64,
    #[arg(long, value_parser = parse_duration)]
    pub duration: Duration,
    #[arg(long, value_parser = parse_size)]
    pub fsync_every: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Debug, Args)]
pub struct SmallfilesArgs {
    #[command(flatten)]
    pub common: Common,
    pub dir: PathBuf,
    #[arg(long, default_value_t = 2000)]
    pub count: u64,
    #[arg(long, default_value = "4k", value_parser = parse_size_max_block)]
    pub size: u64,
    /// Files per subdirectory.
    #[arg(long, default_value_t = 500)]
    pub per_dir: u64,
    /// Skip the fsync after each file.
    #[arg(long)]
    pub no_fsync: bool,
}

#[derive(Debug, Args)]
pub struct MetaArgs {
    #[command(flatten)]
    pub common: Common,
    pub dir: PathBuf,
    #[arg(long, default_value_t = 20)]
    pub dirs: u64,
    #[arg(long, default_value_t = 100)]
    pub files_per_dir: u64,
    /// Rounds of the stat pass.
    #[arg(long, default_value_t = 3)]
    pub stat_rounds: u64,
}

#[derive(Debug, Args)]
pub struct MountArgs {
    #[command(flatten)]
    pub common: Common,
    /// Shell command that mounts the filesystem (timed).
    #[arg(long)]
    pub mount_cmd: String,
    /// Shell command that unmounts it cleanly (run before each timed mount).
    #[arg(long)]
    pub umount_cmd: Option<String>,
    /// The filesystem is not mounted yet: skip the first unmount.
    #[arg(long)]
    pub not_mounted: bool,
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// What came before the mount: `clean` (an unmount) or `powercut` (the caller restored a flash
    /// image taken while a writer ran; recorded as experiment `mount-powercut`).
    #[arg(long, default_value = "clean", value_parser = ["clean", "powercut"])]
    pub after: String,
    /// Slab caches left out of the memory figures: not the filesystem's memory (default: nandsim,
    /// the emulated flash's page store, which grows and shrinks as pages are programmed and erased).
    #[arg(long = "exclude-slab", default_values_t = vec!["nandsim".to_string()])]
    pub exclude_slab: Vec<String>,
    /// Floor of the timed command, measured before the runs: the same shell and mount(8)
    /// spawn mounting a tmpfs (`--floor-cmd`, default `mount -t tmpfs ferrofs-bench-floor
    /// DIR` on a directory the tool makes), so that mount time minus floor is the mount itself.
    /// Runs of the floor command (0: no floor).
    #[arg(long, default_value_t = 3)]
    pub floor_runs: u32,
    /// The floor command (timed); `{dir}` stands for the tool's empty directory.
    #[arg(long, default_value = "mount -t tmpfs ferrofs-bench-floor {dir}")]
    pub floor_cmd: String,
    /// Undoes the floor command (not timed); `{dir}` as above.
    #[arg(long, default_value = "umount {dir}")]
    pub floor_undo_cmd: String,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Directory holding JSON results (searched recursively, 3 levels).
    pub results_dir: PathBuf,
    /// Output directory for report.md and the SVG plots (default RESULTS_DIR/report).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Label whose numbers are divided by each peer's in the ratio columns.
    #[arg(long, default_value = "ferrofs")]
    pub reference: String,
    /// Skip the plots.
    #[arg(long)]
    pub no_plots: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("ferrofs-bench").chain(args.iter().copied()))
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn sweep_defaults_and_lists() {
        let Cmd::Sweep(a) = parse(&["sweep", "/mnt"]).unwrap().cmd else { panic!("not sweep") };
        assert_eq!(a.block_sizes, vec![4096, 16384, 32768, 65536, 131072, 1 << 20, 16 << 20]);
        assert_eq!(a.total, 64 << 20);
        assert_eq!(a.modes, vec![IoMode::Buffered, IoMode::Direct]);
        assert_eq!(a.common.seed, 1);
        assert_eq!(a.common.label, "fs");
        assert!(!a.common.no_drop_caches);
        let Cmd::Sweep(a) = parse(&["sweep", "/mnt", "--block-sizes", "4k,1M", "--modes", "direct", "--label", "jffs2", "--seed", "9", "--remount-cmd", "umount /mnt && mount /mnt"]).unwrap().cmd else { panic!() };
        assert_eq!(a.block_sizes, vec![4096, 1 << 20]);
        assert_eq!(a.modes, vec![IoMode::Direct]);
        assert_eq!(a.common.label, "jffs2");
        assert_eq!(a.common.seed, 9);
        assert_eq!(a.remount_cmd.as_deref(), Some("umount /mnt && mount /mnt"));
        let Cmd::Sweep(a) = parse(&["sweep", "--raw", "/dev/mtd0", "--destructive"]).unwrap().cmd else { panic!() };
        assert!(a.dir.is_none() && a.destructive);
    }

    #[test]
    fn sweep_rejects_bad_input() {
        assert!(parse(&["sweep"]).is_err(), "needs dir or --raw");
        assert!(parse(&["sweep", "/mnt", "--raw", "/dev/mtd0"]).is_err(), "dir and --raw conflict");
        assert!(parse(&["sweep", "/mnt", "--block-sizes", "4k,0"]).is_err());
        assert!(parse(&["sweep", "/mnt", "--block-sizes", "4q"]).is_err());
        assert!(parse(&["sweep", "/mnt", "--modes", "fast"]).is_err());
        assert!(parse(&["sweep", "/mnt", "--total", "0"]).is_err());
        assert!(parse(&["sweep", "/mnt", "--block-sizes", "64G"]).is_err(), "buffers are allocated whole");
        assert!(parse(&["smallfiles", "/mnt", "--size", "1G"]).is_err());
        assert!(parse(&["smallfiles", "/mnt", "--size", "0"]).is_ok());
    }

    #[test]
    fn other_subcommands() {
        let Cmd::Dirty(a) = parse(&["dirty", "/mnt", "--fill", "50,0.8,90%"]).unwrap().cmd else { panic!() };
        assert_eq!(a.fill, vec![0.5, 0.8, 0.9]);
        assert_eq!(a.pattern, Pattern::Random);
        assert_eq!(a.fill_args.fill_file_size, 32 << 10);
        assert!(parse(&["dirty", "/mnt", "--fill", "100"]).is_err());
        let Cmd::Latency(a) = parse(&["latency", "/mnt"]).unwrap().cmd else { panic!() };
        assert_eq!((a.count, a.block_size, a.sync), (100_000, 4096, SyncMode::None));
        assert!(parse(&["latency", "/mnt", "--sync", "fsync"]).is_ok());
        let Cmd::Gc(a) = parse(&["gc", "/mnt", "--duration", "10m", "--window", "250ms", "--fill", "80"]).unwrap().cmd else { panic!() };
        assert_eq!(a.duration, Duration::from_secs(600));
        assert_eq!(a.window, Duration::from_millis(250));
        assert_eq!(a.fill, 0.8);
        assert!(parse(&["gc", "/mnt", "--window", "0"]).is_err());
        assert_eq!(a.sync, SyncMode::None);
        let Cmd::Gc(a) = parse(&["gc", "/mnt", "--sync", "fsync"]).unwrap().cmd else { panic!() };
        assert_eq!(a.sync, SyncMode::Fsync);
        let Cmd::Randwrite(a) = parse(&["randwrite", "/mnt"]).unwrap().cmd else { panic!() };
        assert_eq!((a.file_size, a.block_size, a.amount, a.fsync_every, a.dirty_bytes, a.max_duration, a.keep), (64 << 20, 4096, 4 << 20, 0, None, None, false));
        let Cmd::Randwrite(a) = parse(&["randwrite", "/mnt", "--file-size", "128M", "--fsync-every", "16", "--dirty-bytes", "4M", "--max-duration", "2m", "--keep"]).unwrap().cmd else { panic!() };
        assert_eq!((a.file_size, a.fsync_every, a.dirty_bytes, a.max_duration, a.keep), (128 << 20, 16, Some(4 << 20), Some(Duration::from_secs(120)), true));
        assert!(parse(&["randwrite", "/mnt", "--dirty-bytes", "0"]).is_err(), "a zero dirty limit is not a setting");
        assert!(parse(&["randwrite", "/mnt", "--fsync-every", "-1"]).is_err());
        let Cmd::Concurrency(a) = parse(&["concurrency", "/mnt"]).unwrap().cmd else { panic!() };
        assert_eq!((a.read_size, a.read_block, a.write_size, a.write_block, a.writer_fsync_every), (4 << 20, 64 << 10, 4 << 20, 64 << 10, None));
        assert_eq!(a.duration, Duration::from_secs(5));
        assert!(parse(&["concurrency", "/mnt", "--read-block", "0"]).is_err());
        let Cmd::Mount(a) = parse(&["mount", "--mount-cmd", "mount /dev/mtdblock0 /mnt", "--umount-cmd", "umount /mnt", "--repeat", "3"]).unwrap().cmd else { panic!() };
        assert_eq!(a.repeat, 3);
        assert!(parse(&["mount"]).is_err(), "--mount-cmd is required");
        let Cmd::Report(a) = parse(&["report", "results"]).unwrap().cmd else { panic!() };
        assert_eq!(a.reference, "ferrofs");
        let Cmd::Smallfiles(a) = parse(&["smallfiles", "/mnt", "--counters-file", "/sys/fs/ferrofs/stats", "--counter-key", "pages_written", "--counter-scale", "2048", "--diskstats-dev", "vda"]).unwrap().cmd else { panic!() };
        assert_eq!(a.common.counter_key, "pages_written");
        assert_eq!(a.common.counter_scale, 2048.0);
        assert_eq!(a.common.diskstats_dev.as_deref(), Some("vda"));
        assert!(parse(&["meta", "/mnt", "--dirs", "x"]).is_err());
        assert!(parse(&["frobnicate"]).is_err());
    }
}
