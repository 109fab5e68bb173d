//! mkfs.ferrofs: create a ferrofs filesystem on an image file, an MTD device or a block device,
//! optionally populated from a directory tree.

use std::path::PathBuf;

use clap::Parser;
use ferrofs_engine::space::RESERVE_SEGS;
use ferrofs_engine::{Error, FlashKind, FormatOptions, Geometry, ROOT_INO};
use ferrofs_flashsim::{BlockDevice, BlockDeviceOptions, Flash, ImageFlash, MtdDevice, SimFile};
use ferrofs_engine::format::{DATA_ALIGN_MAX, DATA_ALIGN_MIN, OPEN_SEGMENTS_MAX, OPEN_SEGMENTS_MIN};
use ferrofs_tools::dev::{mounted_at, path_kind, Dev, PathKind};
use ferrofs_tools::devhints::{defaults_from, sysfs_hints, Choice, MAX_SEGMENT, MIN_SEGMENT};
use ferrofs_tools::probe::{probe, DirectDevice, ProbeOptions, ProbeReport, ProbeTarget};
use ferrofs_tools::populate::{nospace_message, populate_with_progress, prescan, PopulateError, PopulateOptions, TreeStats};
use ferrofs_tools::progress::Progress;
use ferrofs_tools::util::{clap_exit, errno_name, human, now, parse_pairing, parse_size, random_u64, ToolError, EXIT_FAILURE, EXIT_USAGE};
use ferrofs_tools::walk::mount;
use ferrofs_tools::Fs;

/// Create a ferrofs filesystem.
///
/// TARGET is an image file (a flash simulator image by default, or a plain raw image with
/// --raw), an MTD character device (/dev/mtdN; geometry from the device) or a block device.
#[derive(Parser, Debug)]
#[command(name = "mkfs.ferrofs", version, about, long_about = None)]
struct Cli {
    /// Image file, /dev/mtdN or block device.
    target: PathBuf,

    /// NAND image geometry: PAGE,PAGES_PER_BLOCK,BLOCKS (e.g. 2048,64,2048 = 256 MiB).
    #[arg(long, value_name = "PAGE,PPB,BLOCKS", conflicts_with_all = ["size", "page", "erase", "block"])]
    nand: Option<String>,

    /// Image size (e.g. 256M). Default: the existing file's size with --raw, else 64M.
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,

    /// NAND page size of an image (default 2k).
    #[arg(long, value_parser = parse_size)]
    page: Option<u64>,

    /// NAND erase block size of an image (default 128k).
    #[arg(long, value_parser = parse_size)]
    erase: Option<u64>,

    /// Make a block-device image (FTL backend) instead of a raw flash image.
    #[arg(long)]
    block: bool,

    /// Allocation unit (segment) of a block device or block image. Default: on a block device
    /// what the kernel reports (an SD card's preferred erase size, an eMMC's erase group, a
    /// large discard granularity) or what --probe measures, else 4M; on an image 4M.
    #[arg(long, visible_alias = "segment-size", value_name = "BYTES", value_parser = parse_size)]
    au: Option<u64>,

    /// Time the block device first (flashbench-style: reads and writes across boundaries,
    /// writes to N allocation units round robin) to find its FTL page, allocation unit and
    /// how many units it keeps open, and format with them. Writes over the whole device.
    #[arg(long)]
    probe: bool,

    /// Say what would be made (the geometry and where each value comes from), write nothing.
    /// Block devices only.
    #[arg(short = 'n', long)]
    dry_run: bool,

    /// Let --probe write over the device although --dry-run formats nothing (destroys what
    /// is on it).
    #[arg(long)]
    destructive: bool,

    /// Segments written to at once (log heads and the checkpoint area), 2..64, stored in the
    /// superblock: what the device's FTL keeps open without slowing down. 2 (the default on a
    /// block device): one log head; 3: data+metadata and GC heads; 4 or more: three heads.
    /// 0: no limit (the default on raw flash).
    #[arg(long, value_name = "N")]
    open_segments: Option<u32>,

    /// EXPERIMENTAL (issue 13, format.md section 8, not finished): write whole 4 KiB blocks as
    /// aligned payloads at multiples of BYTES (a power of two, 512..4096, dividing the segment;
    /// 4096 on a block device, the page size on NAND). Sets incompat feature bit 1: engines
    /// before it refuse the filesystem. 0 (the default): none.
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    data_align: Option<u64>,

    /// The page pairing of an MLC NAND MTD device (MTD does not report it to userspace):
    /// dist3 (Linux's dist3 scheme) or adjacent. Required for MLC, refused for anything else.
    #[arg(long, value_parser = parse_pairing, value_name = "SCHEME")]
    pairing: Option<ferrofs_engine::Pairing>,

    /// Write unit of a block device or block image (default 4k).
    #[arg(long, value_parser = parse_size)]
    unit: Option<u64>,

    /// Write a plain raw image (no simulator header): a raw NAND dump, or a block image.
    #[arg(long)]
    raw: bool,

    /// Factory bad blocks of a simulator NAND image (comma-separated segment numbers).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    bad_blocks: Vec<u32>,

    /// Populate the new filesystem from this directory tree.
    #[arg(short = 'r', long = "root", value_name = "DIR")]
    root: Option<PathBuf>,

    /// Make every file owned by root (uid 0, gid 0).
    #[arg(long)]
    squash_uids: bool,

    /// Volume serial number (hex, e.g. 0x1234abcd); default random.
    #[arg(long, value_parser = parse_hex)]
    serial: Option<u64>,

    /// Erase every good segment first (marking blocks whose erase fails bad).
    #[arg(long)]
    erase_all: bool,

    /// Print every file copied.
    #[arg(short, long)]
    verbose: bool,

    /// Print nothing but errors and warnings.
    #[arg(short, long)]
    quiet: bool,
}

fn parse_hex(s: &str) -> Result<u64, String> {
    let t = s.trim_start_matches("0x").trim_start_matches("0X");
    u64::from_str_radix(t, 16).map_err(|_| format!("invalid hex number '{s}'"))
}

fn to_u32(v: u64, what: &str) -> Result<u32, ToolError> {
    u32::try_from(v).map_err(|_| ToolError::usage(format!("{what} {v} is too large")))
}

/// The checks of `Engine::format`, with messages, plus "is there any room for data".
fn check_geometry(g: &Geometry, bad: usize) -> Result<(), ToolError> {
    let ss = g.segment_size;
    let wu = g.write_unit;
    if wu == 0 || ss == 0 || !ss.is_multiple_of(wu) {
        return Err(ToolError::fail(format!(
            "geometry does not fit: segment size {ss} is not a multiple of the write unit {wu}"
        )));
    }
    if ss < 16384 || ss < wu.saturating_mul(4) {
        return Err(ToolError::fail(format!(
            "geometry does not fit: segments of {ss} bytes are too small (ferrofs needs at least 16 KiB and 4 write units of {wu})"
        )));
    }
    if g.segment_count < 16 {
        return Err(ToolError::fail(format!(
            "device too small: {} segments of {} (ferrofs needs at least 16 segments, here at least {})",
            g.segment_count,
            human(u64::from(ss)),
            human(16 * u64::from(ss))
        )));
    }
    // one segment per checkpoint area at least; the engine checks the exact layout
    let area = 1u64;
    let overhead = 2 + 2 * area + u64::from(RESERVE_SEGS) + 6;
    let good = u64::from(g.segment_count).saturating_sub(bad as u64);
    if good <= overhead {
        return Err(ToolError::fail(format!(
            "device too small: {} good segments of {}, but ferrofs uses {} for superblocks, checkpoints, log heads \
             and reserves; at least {} segments ({}) are needed for any data",
            good,
            human(u64::from(ss)),
            overhead,
            overhead + 1,
            human((overhead + 1) * u64::from(ss))
        )));
    }
    Ok(())
}

fn image_geometry(cli: &Cli, existing_len: Option<u64>) -> Result<Geometry, ToolError> {
    if let Some(n) = &cli.nand {
        let parts: Vec<&str> = n.split(',').collect();
        let [p, ppb, blocks] = parts.as_slice() else {
            return Err(ToolError::usage(format!("--nand wants PAGE,PAGES_PER_BLOCK,BLOCKS, got '{n}'")));
        };
        let p = to_u32(parse_size(p).map_err(ToolError::usage)?, "page size")?;
        let ppb: u32 = ppb.trim().parse().map_err(|_| ToolError::usage(format!("invalid pages per block '{ppb}'")))?;
        let blocks: u32 = blocks.trim().parse().map_err(|_| ToolError::usage(format!("invalid block count '{blocks}'")))?;
        let ss = p.checked_mul(ppb).ok_or_else(|| ToolError::usage("erase block size overflows 32 bits"))?;
        return Ok(Geometry { kind: FlashKind::Nand, segment_size: ss, segment_count: blocks, write_unit: p, preferred_write: p });
    }
    let size = cli.size.or(existing_len).unwrap_or(64 << 20);
    let (kind, unit, seg) = if cli.block {
        if cli.page.is_some() || cli.erase.is_some() {
            return Err(ToolError::usage("--page/--erase describe raw flash; use --unit/--au with --block"));
        }
        (FlashKind::Block, cli.unit.unwrap_or(4096), cli.au.unwrap_or(4 << 20))
    } else {
        if cli.unit.is_some() || cli.au.is_some() {
            return Err(ToolError::usage("--unit/--au describe a block device; add --block, or use --page/--erase"));
        }
        (FlashKind::Nand, cli.page.unwrap_or(2048), cli.erase.unwrap_or(128 << 10))
    };
    let unit = to_u32(unit, "write unit")?;
    let seg = to_u32(seg, "segment size")?;
    if seg == 0 || !size.is_multiple_of(u64::from(seg)) {
        return Err(ToolError::fail(format!(
            "geometry does not fit: the size {size} is not a multiple of the {} segment size {seg}",
            if kind == FlashKind::Block { "allocation unit" } else { "erase block" }
        )));
    }
    let count = to_u32(size / u64::from(seg), "segment count")?;
    Ok(Geometry { kind, segment_size: seg, segment_count: count, write_unit: unit, preferred_write: unit })
}

/// What mkfs writes to, before the filesystem is made.
struct Target {
    dev: Dev,
    bad: usize,
    /// A block device's geometry and where it came from.
    block: Option<BlockGeo>,
    /// A new simulator image is written under this name, renamed to the target when complete.
    tmp: Option<TempImage>,
}

/// The geometry of a block device, each value with its source (docs/tools.md).
struct BlockGeo {
    write_unit: u32,
    segment: Choice,
    ftl_page: Choice,
    open_segments: Choice,
}

impl BlockGeo {
    fn describe(&self) -> String {
        format!(
            "segment {} ({}), FTL page {} ({}), at most {} segments open ({})",
            human(u64::from(self.segment.value)),
            self.segment.source,
            human(u64::from(self.ftl_page.value)),
            self.ftl_page.source,
            self.open_segments.value,
            self.open_segments.source
        )
    }
}

/// The geometry for block device `path`: the command line's values, else the probe's
/// findings (`--probe`), else what sysfs says, else the defaults.
fn block_geometry(cli: &Cli, path: &std::path::Path) -> Result<BlockGeo, ToolError> {
    let hints = sysfs_hints(path);
    let lbs = hints.map(|h| h.logical_block).filter(|&b| b >= 512 && b.is_power_of_two()).unwrap_or(512);
    let wu = match cli.unit {
        Some(u) => to_u32(u, "write unit")?,
        None => 4096u32.max(lbs),
    };
    let mut d = defaults_from(hints.as_ref(), wu);
    if cli.probe {
        let r = run_probe(cli, path, lbs)?;
        if let Some(au) = r.au.value {
            // a segment is whole AUs, 16 KiB to 64 MiB
            let v = au.clamp(u64::from(MIN_SEGMENT), u64::from(MAX_SEGMENT)) as u32;
            d.segment = Choice::new(v, &format!("the probe: {} allocation unit, {}", human(au), r.au.sureness.word()));
        }
        if let Some(p) = r.page.value {
            let v = (p.min(u64::from(u32::MAX)) as u32).max(wu);
            let why = if u64::from(v) == p { String::new() } else { format!(", raised to the {} write unit", human(u64::from(wu))) };
            d.ftl_page = Choice::new(v, &format!("the probe: {} page, {}{why}", human(p), r.page.sureness.word()));
        }
        if let Some(n) = r.open.value {
            let v = n.clamp(u64::from(OPEN_SEGMENTS_MIN), u64::from(OPEN_SEGMENTS_MAX)) as u32;
            let why = if n < u64::from(OPEN_SEGMENTS_MIN) { format!("; ferrofs needs {OPEN_SEGMENTS_MIN}: the checkpoint area and one log head") } else { String::new() };
            d.open_segments = Choice::new(v, &format!("the probe: {n} open allocation unit{}, {}{why}", if n == 1 { "" } else { "s" }, r.open.sureness.word()));
        }
        if r.au.value.is_none() && r.page.value.is_none() && !cli.quiet {
            println!(
                "mkfs.ferrofs: the probe found no structure on {}: using segment {} ({}), FTL page {} ({}), {} segments open ({})",
                path.display(),
                human(u64::from(d.segment.value)),
                d.segment.source,
                human(u64::from(d.ftl_page.value)),
                d.ftl_page.source,
                d.open_segments.value,
                d.open_segments.source
            );
        }
    }
    if let Some(a) = cli.au {
        d.segment = Choice::new(to_u32(a, "allocation unit")?, "--au");
    }
    if let Some(n) = cli.open_segments {
        d.open_segments = Choice::new(n, "--open-segments");
    }
    // the page is whole write units dividing the segment
    let (ss, p) = (d.segment.value, d.ftl_page.value);
    if p == 0 || p % wu.max(1) != 0 || ss % p != 0 {
        let quad = wu.saturating_mul(4);
        let v = if quad != 0 && ss % quad == 0 { quad } else { wu };
        d.ftl_page = Choice::new(v, &format!("{} does not divide the {} segment: {}", human(u64::from(p)), human(u64::from(ss)), if v == wu { "the write unit" } else { "4 write units" }));
    }
    Ok(BlockGeo { write_unit: wu, segment: d.segment, ftl_page: d.ftl_page, open_segments: d.open_segments })
}

/// Run the probe on `path` (writes over it unless this is a dry run without --destructive,
/// which `check_flags` refuses), print what it found.
fn run_probe(cli: &Cli, path: &std::path::Path, lbs: u32) -> Result<ProbeReport, ToolError> {
    if !cli.quiet {
        if cli.dry_run {
            println!("mkfs.ferrofs: --probe --destructive writes test data over all of {}: what is on it is lost (nothing is formatted)", path.display());
        } else {
            println!("mkfs.ferrofs: --probe writes test data over all of {} before formatting it: what is on it is lost", path.display());
        }
    }
    let mut dev = DirectDevice::open(path, lbs, true).map_err(|e| ToolError::fail(format!("cannot probe {}: {e}", path.display())))?;
    let r = probe(&mut dev, &ProbeOptions::default()).map_err(|e| ToolError::fail(format!("the probe of {} failed: {e}", path.display())))?;
    if !cli.quiet {
        if cli.verbose {
            for l in &r.table {
                println!("  {l}");
            }
        }
        println!("mkfs.ferrofs: probe of {} ({}, {}-byte blocks):", path.display(), human(dev.size()), lbs);
        for (what, f, size) in [("FTL page", &r.page, true), ("allocation unit", &r.au, true), ("open allocation units", &r.open, false)] {
            let v = match f.value {
                Some(v) if size => format!("{} ({})", human(v), f.sureness.word()),
                Some(v) => format!("{v} ({})", f.sureness.word()),
                None => "none found".to_string(),
            };
            println!("  {what}: {v}: {}", f.evidence);
        }
    }
    Ok(r)
}

/// Usage errors of --probe, --dry-run and --destructive.
fn check_flags(cli: &Cli) -> Result<(), ToolError> {
    let kind = path_kind(&cli.target);
    if (cli.probe || cli.dry_run) && kind != PathKind::BlockDev {
        return Err(ToolError::usage(format!(
            "--probe and --dry-run work on a block device; {} is not one",
            cli.target.display()
        )));
    }
    if cli.dry_run && cli.probe && !cli.destructive {
        return Err(ToolError::usage(format!(
            "--probe writes test data over {} and destroys what is on it, and --dry-run formats nothing: \
             add --destructive to probe anyway (or drop --dry-run to probe and format)",
            cli.target.display()
        )));
    }
    if cli.destructive && !(cli.dry_run && cli.probe) {
        return Err(ToolError::usage("--destructive only lets --probe write during a --dry-run"));
    }
    Ok(())
}

/// A simulator image being made: removed unless [`TempImage::install`] renames it into place
/// (a failed mkfs leaves no image behind, and an existing one untouched).
struct TempImage(PathBuf);

impl TempImage {
    fn install(mut self, target: &std::path::Path) -> Result<(), ToolError> {
        let tmp = std::mem::take(&mut self.0);
        std::fs::rename(&tmp, target)
            .map_err(|e| ToolError::fail(format!("cannot rename {} to {}: {e}", tmp.display(), target.display())))
    }
}

impl Drop for TempImage {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// `DIR/.NAME.mkfs-PID`, next to `path` (same filesystem: the rename is atomic).
fn temp_path(path: &std::path::Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.mkfs-{}", std::process::id()))
}

fn open_target(cli: &Cli) -> Result<Target, ToolError> {
    let path = &cli.target;
    let kind = path_kind(path);
    let image_opts = cli.nand.is_some() || cli.size.is_some() || cli.page.is_some() || cli.erase.is_some() || cli.raw;
    if cli.pairing.is_some() && !matches!(kind, PathKind::CharDev) {
        return Err(ToolError::usage("--pairing describes an MLC NAND MTD device (/dev/mtdN); images and block devices have none"));
    }
    match kind {
        PathKind::Dir => Err(ToolError::fail(format!("{} is a directory, not an image file or a device", path.display()))),
        PathKind::Other => Err(ToolError::fail(format!("{} is not an image file, an MTD device or a block device", path.display()))),
        PathKind::CharDev | PathKind::BlockDev if mounted_at(path).is_some() => Err(ToolError::fail(format!(
            "{} is mounted on {}: unmount it first",
            path.display(),
            mounted_at(path).unwrap_or_default()
        ))),
        PathKind::CharDev => {
            if image_opts || cli.block || !cli.bad_blocks.is_empty() {
                return Err(ToolError::usage("the geometry of an MTD device is read from the device: drop --nand/--size/--page/--erase/--raw/--block"));
            }
            let mut d = MtdDevice::open(path).map_err(|e| ToolError::fail(format!("cannot use {}: {e}", path.display())))?;
            let mlc = d.geometry().kind == FlashKind::MlcNand;
            if mlc != cli.pairing.is_some() {
                return Err(ToolError::usage(if mlc {
                    "this MTD device is MLC NAND: give its page pairing with --pairing dist3|adjacent (the scheme of its driver)"
                } else {
                    "--pairing describes MLC NAND; this MTD device is not MLC"
                }));
            }
            d.set_pairing(cli.pairing);
            Ok(Target { dev: Dev::Mtd(d), bad: 0, block: None, tmp: None })
        }
        PathKind::BlockDev => {
            if image_opts || !cli.bad_blocks.is_empty() {
                return Err(ToolError::usage("a block device's size is its own: drop --nand/--size/--page/--erase/--raw"));
            }
            let g = block_geometry(cli, path)?;
            let opts = BlockDeviceOptions {
                write_unit: g.write_unit,
                segment_size: g.segment.value,
                preferred_write: g.ftl_page.value,
                ..BlockDeviceOptions::default()
            };
            let d = BlockDevice::open_with(path, opts).map_err(|e| ToolError::fail(format!("cannot use {}: {e}", path.display())))?;
            Ok(Target { dev: Dev::Block(d), bad: 0, block: Some(g), tmp: None })
        }
        PathKind::Missing | PathKind::File => {
            let existing = if cli.raw && kind == PathKind::File {
                std::fs::metadata(path).ok().map(|m| m.len()).filter(|&l| l > 0)
            } else {
                None
            };
            let geo = image_geometry(cli, existing)?;
            if !cli.bad_blocks.is_empty() && (cli.raw || geo.kind == FlashKind::Block) {
                return Err(ToolError::usage("--bad-blocks applies to simulator NAND images only"));
            }
            if let Some(b) = cli.bad_blocks.iter().find(|&&b| b >= geo.segment_count) {
                return Err(ToolError::usage(format!("bad block {b} is beyond the {} blocks", geo.segment_count)));
            }
            let mut bad = cli.bad_blocks.clone();
            bad.sort_unstable();
            bad.dedup();
            check_geometry(&geo, bad.len())?;
            let e = |e: ferrofs_flashsim::Error| ToolError::fail(format!("cannot create {}: {e}", path.display()));
            let dev = if cli.raw {
                if geo.kind == FlashKind::Block {
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .open(path)
                        .map_err(|er| ToolError::fail(format!("cannot create {}: {er}", path.display())))?;
                    f.set_len(geo.device_bytes()).map_err(|er| ToolError::fail(format!("cannot size {}: {er}", path.display())))?;
                    drop(f);
                    let opts = BlockDeviceOptions {
                        write_unit: geo.write_unit,
                        segment_size: geo.segment_size,
                        ..BlockDeviceOptions::default()
                    };
                    Dev::Block(BlockDevice::open_with(path, opts).map_err(e)?)
                } else {
                    Dev::Raw(ImageFlash::create(path, geo).map_err(e)?)
                }
            } else {
                // written in place, next to the target, renamed over it once complete
                let tmp = temp_path(path);
                let sim = SimFile::create(&tmp, geo, &bad).map_err(e)?;
                return Ok(Target { dev: Dev::SimFile(sim), bad: bad.len(), block: None, tmp: Some(TempImage(tmp)) });
            };
            Ok(Target { dev, bad: bad.len(), block: None, tmp: None })
        }
    }
}

fn count_bad(dev: &mut Dev) -> Result<usize, ToolError> {
    let n = dev.geometry().segment_count;
    let mut bad = 0;
    for s in 0..n {
        if dev.is_bad(s).map_err(|e| ToolError::fail(format!("bad block check of segment {s} failed: {e:?}")))? {
            bad += 1;
        }
    }
    Ok(bad)
}

fn erase_all(dev: &mut Dev, quiet: bool) -> Result<(), ToolError> {
    let n = dev.geometry().segment_count;
    let mut marked = 0;
    for s in 0..n {
        if dev.is_bad(s).unwrap_or(true) {
            continue;
        }
        if dev.erase(s).is_err() {
            let _ = dev.mark_bad(s);
            marked += 1;
        }
    }
    if !quiet && marked > 0 {
        eprintln!("mkfs.ferrofs: warning: {marked} segments failed to erase and were marked bad");
    }
    Ok(())
}

/// `--open-segments`, checked with the reasons the engine would refuse it.
fn open_segments(cli: &Cli) -> Result<Option<u32>, ToolError> {
    use ferrofs_engine::format::{OPEN_SEGMENTS_MAX, OPEN_SEGMENTS_MIN};
    match cli.open_segments {
        None => Ok(None),
        Some(1) => Err(ToolError::usage(format!(
            "--open-segments 1 is not supported: the checkpoint area and one log head are open at once, so the least is \
             {OPEN_SEGMENTS_MIN} (checkpoints inside the log are not implemented)"
        ))),
        Some(n) if n > OPEN_SEGMENTS_MAX => Err(ToolError::usage(format!(
            "--open-segments {n} is too large: at most {OPEN_SEGMENTS_MAX} (from 4 on ferrofs writes with all three heads; 0 = no limit)"
        ))),
        Some(n) => Ok(Some(n)),
    }
}

fn run(cli: &Cli) -> Result<(), ToolError> {
    check_flags(cli)?;
    let open_segments = open_segments(cli)?;
    if cli.dry_run {
        if let Some(m) = mounted_at(&cli.target) {
            return Err(ToolError::fail(format!("{} is mounted on {m}: unmount it first", cli.target.display())));
        }
        let g = block_geometry(cli, &cli.target)?;
        println!("mkfs.ferrofs: {} (dry run, nothing written): write unit {}, {}", cli.target.display(), human(u64::from(g.write_unit)), g.describe());
        return Ok(());
    }
    // Look at the source tree first: an unreadable tree fails before anything is written.
    let need = match &cli.root {
        Some(r) => Some(prescan(r)?),
        None => None,
    };
    let mut t = open_target(cli)?;
    let geo = t.dev.geometry();
    if !matches!(t.dev, Dev::Sim(_) | Dev::SimFile(_)) {
        t.bad = count_bad(&mut t.dev)?;
        check_geometry(&geo, t.bad)?;
    }
    if cli.erase_all {
        erase_all(&mut t.dev, cli.quiet)?;
    }
    let serial = cli.serial.unwrap_or_else(random_u64);
    let open_segments = match &t.block {
        Some(g) => {
            if !cli.quiet {
                println!("mkfs.ferrofs: {}: {}", cli.target.display(), g.describe());
            }
            Some(g.open_segments.value)
        }
        None => open_segments,
    };
    let data_align = to_u32(cli.data_align.unwrap_or(0), "--data-align")?;
    if data_align != 0
        && (!data_align.is_power_of_two()
            || !(DATA_ALIGN_MIN..=DATA_ALIGN_MAX).contains(&data_align)
            || !geo.segment_size.is_multiple_of(data_align)
            || geo.kind == FlashKind::Nor)
    {
        return Err(ToolError::usage(format!(
            "--data-align {data_align}: want a power of two from {DATA_ALIGN_MIN} to {DATA_ALIGN_MAX} that divides the segment size {}, not on NOR",
            geo.segment_size
        )));
    }
    let fo = FormatOptions { serial, open_segments, data_align, ..FormatOptions::default() };
    let dev = Fs::format(t.dev, &fo, now()).map_err(|(e, _)| match e {
        Error::Invalid => ToolError::fail(format!(
            "geometry does not fit ferrofs ({} segments of {} bytes, write unit {}): the checkpoint with the \
             segment table must fit 16 segments per area; use bigger segments",
            geo.segment_count, geo.segment_size, geo.write_unit
        )),
        Error::NoSpace => ToolError::fail("device too small, or too many bad blocks, for the superblocks and checkpoint areas"),
        Error::Io => ToolError::fail(
            "cannot write the superblocks: the first two good segments must be among segments 0..63, or the device failed",
        ),
        Error::NotSupported => ToolError::fail("this medium is not supported (MLC NAND without a usable page pairing), or the open-segment limit is below 2"),
        e => ToolError::fail(format!("format failed: {}", errno_name(e))),
    })?;
    let mut copied: Option<(TreeStats, Vec<String>)> = None;
    let mut dev = dev;
    if let (Some(root), Some(need)) = (&cli.root, need.as_ref()) {
        let mut fs = mount(dev, false).map_err(|(e, _)| ToolError::fail(format!("cannot mount the new filesystem: {e}")))?;
        let opts = PopulateOptions { squash_uids: cli.squash_uids, verbose: cli.verbose, fixed_time: None };
        // on a terminal: a bar over the content bytes, with the entries copied
        let bar = Progress::bytes(cli.quiet || cli.verbose, need.bytes, "copying");
        let entries = need.inodes().saturating_sub(1) + need.hardlinks;
        let mut tick = |st: &TreeStats| {
            bar.set(st.bytes);
            let done = st.files + st.dirs + st.symlinks + st.specials + st.hardlinks;
            if done.is_multiple_of(64) {
                bar.message(format!("copying {done}/{entries} entries"));
            }
        };
        let r = populate_with_progress(&mut fs, root, opts, &mut tick);
        bar.finish();
        match r {
            Ok(c) => copied = Some(c),
            Err(PopulateError::NoSpace { path, copied }) => {
                let cap = fs.statfs().blocks.saturating_mul(u64::from(fs.statfs().block_size));
                return Err(ToolError::fail(nospace_message(&path, copied, need, cap, geo.segment_size)));
            }
            Err(PopulateError::Other(e)) => return Err(e),
        }
        dev = fs.unmount().map_err(|(e, _)| ToolError::fail(format!("final checkpoint failed: {}", errno_name(e))))?;
    }
    // Statistics from a read-only mount, which also proves the result mounts.
    let mut fs = mount(dev, true).map_err(|(e, _)| ToolError::fail(format!("the new filesystem does not mount: {e}")))?;
    let st = fs.statfs();
    if st.blocks == 0 {
        return Err(ToolError::fail(format!(
            "device too small: after superblocks, checkpoint areas and reserves no space is left for data \
             ({} segments of {})",
            geo.segment_count,
            human(u64::from(geo.segment_size))
        )));
    }
    let root = fs.getattr(ROOT_INO).map_err(|e| ToolError::fail(format!("the new root is unreadable: {}", errno_name(e))))?;
    let (limit, heads) = fs.open_segment_limit();
    let mut dev = fs.into_flash();
    dev.persist(&cli.target)?;
    if let Some(tmp) = t.tmp.take() {
        tmp.install(&cli.target)?;
    }
    if !cli.quiet {
        let what = dev.describe();
        println!("mkfs.ferrofs: {}: {what}", cli.target.display());
        println!(
            "  serial {serial:#018x}, {} segments ({} bad), capacity {}, free {}, root mode {:o}",
            geo.segment_count,
            t.bad,
            human(st.blocks * u64::from(st.block_size)),
            human(st.blocks_free * u64::from(st.block_size)),
            root.mode & 0o7777
        );
        if limit != 0 {
            println!(
                "  at most {limit} segments open at once: {heads} log head{} and the checkpoint area",
                if heads == 1 { "" } else { "s" }
            );
        } else {
            println!("  no open-segment limit: {heads} log heads and the checkpoint area");
        }
        if let Some((c, warnings)) = &copied {
            println!(
                "  copied {} files ({}, {} stored), {} directories, {} symlinks, {} hard links, {} special nodes, {} xattrs",
                c.files,
                human(c.bytes),
                human(c.stored_bytes),
                c.dirs,
                c.symlinks,
                c.hardlinks,
                c.specials,
                c.xattrs
            );
            for w in warnings {
                eprintln!("mkfs.ferrofs: warning: {w}");
            }
        }
    } else if let Some((_, warnings)) = &copied {
        for w in warnings {
            eprintln!("mkfs.ferrofs: warning: {w}");
        }
    }
    Ok(())
}

fn main() {
    ferrofs_tools::util::default_sigpipe();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => clap_exit::<Cli>(e),
    };
    if let Err(e) = run(&cli) {
        eprintln!("mkfs.ferrofs: error: {e}");
        std::process::exit(if e.code == EXIT_USAGE { EXIT_USAGE } else { EXIT_FAILURE });
    }
}
