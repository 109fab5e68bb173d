//! fsck.ferrofs: check a ferrofs filesystem.
//!
//! Exit codes (fsck(8)): 0 clean, 1 errors corrected (the log was replayed and a checkpoint
//! written), 4 errors left uncorrected, 8 operational error (cannot open, not a ferrofs),
//! 16 usage error.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;

use clap::Parser;
use ferrofs_engine::format::{segstate, CpHeader, SegInfo, Superblock, S_IFLNK, S_IFMT, S_IFREG};
use ferrofs_engine::{FileType, Flash, FsckProblem, Inode, ROOT_INO};
use ferrofs_tools::dev::{open_existing, Dev, GeoHints};
use ferrofs_tools::layout::{
    damaged_checkpoints, geometry_mismatch, key_str, newest_valid, read_checkpoints, read_seghdr, scan_superblocks,
    state_name, CpSlot, SbCopy,
};
use ferrofs_tools::util::{
    clap_exit, errno_name, human, parse_size_u32, show_name, utc_date, ToolError, EXIT_CORRECTED, EXIT_OK,
    EXIT_UNCORRECTED,
};
use ferrofs_tools::walk::{list_dir, mount};
use ferrofs_tools::Fs;

/// Check a ferrofs filesystem on an image file, an MTD device or a block device.
#[derive(Parser, Debug)]
#[command(name = "fsck.ferrofs", version, about, long_about = None)]
struct Cli {
    /// Image file, /dev/mtdN or block device.
    device: PathBuf,

    /// Check only: open the device read-only, mount read-only, never write.
    #[arg(short = 'n', long = "no-action")]
    no_action: bool,

    /// Verbose: print every path checked and every problem.
    #[arg(short, long)]
    verbose: bool,

    /// Accepted for fsck(8) compatibility (repair automatically); recovery of an unclean log is
    /// the only repair this version makes.
    #[arg(short = 'a', short_alias = 'p')]
    auto: bool,

    /// Accepted for fsck(8) compatibility (answer yes).
    #[arg(short = 'y')]
    yes: bool,

    /// Accepted for fsck(8) compatibility (force a check: every check is always done).
    #[arg(short = 'f')]
    force: bool,

    /// Raw or block image whose superblock cannot be found: it is a block image.
    #[arg(long)]
    block: bool,

    /// Write unit (NAND page or block-device unit) when it cannot be read from the superblock.
    #[arg(long, value_parser = parse_size_u32, alias = "page")]
    unit: Option<u32>,

    /// Segment size (erase block or allocation unit) when it cannot be read from the superblock.
    #[arg(long, value_parser = parse_size_u32, alias = "erase")]
    au: Option<u32>,
}

struct Checker {
    verbose: bool,
    problems: Vec<String>,
    warnings: Vec<String>,
}

impl Checker {
    fn problem(&mut self, s: String) {
        if self.verbose {
            eprintln!("fsck.ferrofs: problem: {s}");
        }
        self.problems.push(s);
    }
    fn warn(&mut self, s: String) {
        if self.verbose {
            eprintln!("fsck.ferrofs: warning: {s}");
        }
        self.warnings.push(s);
    }
}

#[derive(Default)]
struct Summary {
    inodes: u64,
    dirs: u64,
    files: u64,
    symlinks: u64,
    others: u64,
    entries: u64,
    bytes: u64,
    xattrs: u64,
    hardlinked: u64,
}

fn describe_problem(p: &FsckProblem) -> String {
    match p {
        FsckProblem::BadRecord(k) => {
            format!("the record indexed for key {} is unreadable, fails its CRC or holds another key", key_str(k))
        }
        FsckProblem::SegmentUsage { seg, table, computed } => {
            if *table == u32::MAX {
                format!("segment {seg} is marked free but the index has {computed} live bytes in it")
            } else {
                format!("segment {seg}: the segment table says {table} live bytes, the index gives {computed}")
            }
        }
        FsckProblem::NoOwner(k) => format!("record {} belongs to an inode that does not exist", key_str(k)),
        FsckProblem::Dangling { dir, child } => format!("directory {dir} has an entry for inode {child}, which does not exist"),
        FsckProblem::LinkCount { ino, nlink, expected } => {
            format!("inode {ino} has link count {nlink}, the directory tree gives {expected}")
        }
        FsckProblem::DirSize { ino, size, entries } => format!("directory {ino} has size {size} but {entries} entries"),
        FsckProblem::Parent { ino, parent } => format!("directory {ino} records parent {parent}, which does not hold it"),
        FsckProblem::EntryType { dir, child } => {
            format!("the entry for inode {child} in directory {dir} has a type that differs from the inode's")
        }
        FsckProblem::Orphan(ino) => format!("orphan entry for inode {ino}, which is missing or still linked"),
        FsckProblem::NoRoot => "the root directory is missing or not a directory".into(),
        FsckProblem::LogDamage { first_missing, seg, off } => {
            if *seg == u32::MAX {
                format!("the log after the checkpoint lost durable records from sequence number {first_missing} (the later ones were recovered)")
            } else {
                format!("the log after the checkpoint lost durable records from sequence number {first_missing}, first bad spot at segment {seg} offset {off} (the later ones were recovered)")
            }
        }
    }
}

fn type_of(i: &Inode) -> Option<FileType> {
    i.file_type()
}

/// Walk the tree from the root through the public API.
fn walk_tree(fs: &mut Fs, ck: &mut Checker, sum: &mut Summary) {
    let root = match fs.getattr(ROOT_INO) {
        Ok(r) => r,
        Err(e) => {
            ck.problem(format!("the root inode cannot be read: {}", errno_name(e)));
            return;
        }
    };
    // ino -> (inode, names seen, subdirectories seen)
    let mut seen: HashMap<u64, (Inode, u32, u32)> = HashMap::new();
    seen.insert(ROOT_INO, (root, 0, 0));
    let mut dirs_done: HashSet<u64> = HashSet::new();
    let mut queue: VecDeque<(u64, u64, Vec<u8>)> = VecDeque::new();
    queue.push_back((ROOT_INO, ROOT_INO, b"/".to_vec()));
    let mut buf = vec![0u8; 1 << 20];
    while let Some((dino, parent, dpath)) = queue.pop_front() {
        if !dirs_done.insert(dino) {
            ck.problem(format!("directory {} (inode {dino}) is reachable by more than one path", show_name(&dpath)));
            continue;
        }
        let entries = match list_dir(fs, dino) {
            Ok(e) => e,
            Err(e) => {
                ck.problem(format!("directory {} (inode {dino}) cannot be listed: {}", show_name(&dpath), errno_name(e)));
                continue;
            }
        };
        // ".." must name the parent
        match fs.lookup(dino, b"..") {
            Ok(p) if p.ino != parent => ck.problem(format!(
                "directory {}: '..' is inode {}, but the directory is held by inode {parent}",
                show_name(&dpath),
                p.ino
            )),
            Ok(_) => {}
            Err(e) => ck.problem(format!("directory {}: '..' cannot be resolved: {}", show_name(&dpath), errno_name(e))),
        }
        for ent in entries {
            sum.entries += 1;
            let mut path = dpath.clone();
            if path.last() != Some(&b'/') {
                path.push(b'/');
            }
            path.extend_from_slice(&ent.name);
            if ck.verbose {
                println!("{}", show_name(&path));
            }
            let child = match fs.getattr(ent.ino) {
                Ok(c) => c,
                Err(e) => {
                    ck.problem(format!("{}: entry names inode {} which cannot be read: {}", show_name(&path), ent.ino, errno_name(e)));
                    continue;
                }
            };
            match fs.lookup(dino, &ent.name) {
                Ok(l) if l.ino == ent.ino => {}
                Ok(l) => ck.problem(format!("{}: lookup finds inode {}, readdir inode {}", show_name(&path), l.ino, ent.ino)),
                Err(e) => ck.problem(format!("{}: listed but lookup fails: {}", show_name(&path), errno_name(e))),
            }
            if type_of(&child) != Some(ent.ftype) {
                ck.problem(format!(
                    "{}: the entry says {:?} but inode {} has mode {:o}",
                    show_name(&path),
                    ent.ftype,
                    child.ino,
                    child.mode
                ));
            }
            if child.nlink == 0 {
                ck.problem(format!("{}: inode {} is linked but has link count 0", show_name(&path), child.ino));
            }
            let first = !seen.contains_key(&child.ino);
            {
                let e = seen.entry(child.ino).or_insert((child, 0, 0));
                e.1 = e.1.saturating_add(1);
            }
            if child.is_dir() {
                if let Some(d) = seen.get_mut(&dino) {
                    d.2 = d.2.saturating_add(1);
                }
                if child.parent != dino {
                    ck.problem(format!(
                        "{}: directory inode {} records parent {}, but is held by {dino}",
                        show_name(&path),
                        child.ino,
                        child.parent
                    ));
                }
                queue.push_back((child.ino, dino, path.clone()));
            }
            if !first {
                continue;
            }
            match child.mode & S_IFMT {
                S_IFREG => {
                    sum.files += 1;
                    let mut off = 0u64;
                    loop {
                        match fs.read(child.ino, off, &mut buf) {
                            Ok(0) => break,
                            Ok(n) => off = off.saturating_add(n as u64),
                            Err(e) => {
                                ck.problem(format!(
                                    "{}: read error at offset {off} of inode {}: {}",
                                    show_name(&path),
                                    child.ino,
                                    errno_name(e)
                                ));
                                break;
                            }
                        }
                    }
                    sum.bytes = sum.bytes.saturating_add(off);
                }
                S_IFLNK => {
                    sum.symlinks += 1;
                    let mut t = vec![0u8; 4096];
                    match fs.readlink(child.ino, &mut t) {
                        Ok(n) if n as u64 == child.size && n > 0 => {}
                        Ok(n) => ck.problem(format!(
                            "{}: symlink target of {n} bytes, inode size {}",
                            show_name(&path),
                            child.size
                        )),
                        Err(e) => ck.problem(format!("{}: readlink fails: {}", show_name(&path), errno_name(e))),
                    }
                }
                _ if child.is_dir() => sum.dirs += 1,
                _ => sum.others += 1,
            }
            match ferrofs_tools::walk::xattrs(fs, child.ino) {
                Ok(x) => sum.xattrs += x.len() as u64,
                Err(e) => ck.problem(format!("{}: extended attributes unreadable: {}", show_name(&path), errno_name(e))),
            }
        }
    }
    if let Ok(x) = ferrofs_tools::walk::xattrs(fs, ROOT_INO) {
        sum.xattrs += x.len() as u64;
    }
    sum.dirs += 1; // the root
    sum.inodes = seen.len() as u64;
    let mut links: Vec<(u64, Inode, u32, u32)> = seen.into_iter().map(|(k, v)| (k, v.0, v.1, v.2)).collect();
    links.sort_by_key(|x| x.0);
    for (ino, i, names, subdirs) in links {
        if i.is_dir() {
            let want = subdirs.saturating_add(2);
            if i.nlink != want {
                ck.problem(format!("directory inode {ino}: link count {} but {subdirs} subdirectories (expected {want})", i.nlink));
            }
            if ino != ROOT_INO && names != 1 {
                ck.problem(format!("directory inode {ino} has {names} names"));
            }
        } else {
            if names > 1 {
                sum.hardlinked += 1;
            }
            if i.nlink != names {
                ck.problem(format!("inode {ino}: link count {} but {names} directory entries name it", i.nlink));
            }
        }
    }
}

fn segment_summary(segs: &[SegInfo]) -> String {
    let mut c = [0u64; 6];
    let mut live = 0u64;
    let mut max_e = 0u32;
    let mut min_e = u32::MAX;
    for s in segs {
        if let Some(x) = c.get_mut(s.state as usize) {
            *x += 1;
        }
        live += u64::from(s.live);
        if s.state != segstate::BAD && s.state != segstate::META {
            max_e = max_e.max(s.erases);
            min_e = min_e.min(s.erases);
        }
    }
    let used = c[segstate::FULL as usize] + c[segstate::OPEN as usize] + c[segstate::RESERVED as usize];
    format!(
        "{} total: {} free, {} used ({} full, {} open, {} reserved), {} meta, {} bad; {} live; erase counts {}..{}",
        segs.len(),
        c[segstate::FREE as usize],
        used,
        c[segstate::FULL as usize],
        c[segstate::OPEN as usize],
        c[segstate::RESERVED as usize],
        c[segstate::META as usize],
        c[segstate::BAD as usize],
        human(live),
        if min_e == u32::MAX { 0 } else { min_e },
        max_e
    )
}

/// Segment accounting of the checkpoint in use against the medium: every segment in use must
/// carry a valid segment header with the recorded sequence, the meta segments must be exactly
/// the superblock and checkpoint segments, live bytes must fit in their segment, the heads must
/// point at segments in use.
fn check_segments(dev: &mut Dev, sb: &Superblock, h: &CpHeader, segs: &[SegInfo], ck: &mut Checker) {
    let meta: HashSet<u32> = sb
        .sb_segs
        .iter()
        .chain(sb.cp_segs.iter().flat_map(|a| a.iter().take(sb.cp_area_segs as usize)))
        .copied()
        .collect();
    for (i, s) in segs.iter().enumerate() {
        let seg = i as u32;
        if s.live > sb.segment_size {
            ck.problem(format!("segment {seg}: {} live bytes in a {}-byte segment", s.live, sb.segment_size));
        }
        let is_meta = meta.contains(&seg);
        if is_meta != (s.state == segstate::META) {
            ck.problem(format!(
                "segment {seg} is {} in the segment table but {} a superblock or checkpoint segment",
                state_name(s.state),
                if is_meta { "is" } else { "is not" }
            ));
        }
        if s.state == segstate::FREE && s.live != 0 {
            ck.problem(format!("segment {seg} is free but has {} live bytes", s.live));
        }
        if s.state == segstate::FULL || s.state == segstate::OPEN {
            match read_seghdr(dev.flash(), sb, seg) {
                Ok((seq, ..)) if seq == s.seq => {}
                Ok((seq, ..)) => ck.problem(format!(
                    "segment {seg} ({}, {} live bytes): its segment header has sequence {seq}, the table {}",
                    state_name(s.state),
                    s.live,
                    s.seq
                )),
                Err(why) => ck.problem(format!(
                    "segment {seg} ({}, {} live bytes): no valid segment header ({why})",
                    state_name(s.state),
                    s.live
                )),
            }
        }
    }
    for (i, hd) in h.heads.iter().enumerate() {
        if hd.seg == ferrofs_engine::format::NO_SEG {
            continue;
        }
        match segs.get(hd.seg as usize) {
            Some(s) if s.state == segstate::OPEN || s.state == segstate::FULL => {}
            // The checkpoint captures the segment table before appending it to the metadata
            // head; when those records cross into the head's reserved next segment, the head
            // ends up in a segment the table still records as reserved (format.md section 4:
            // mount treats the heads' segments as in use). Fine if the segment header agrees.
            Some(s) if s.state == segstate::RESERVED => match read_seghdr(dev.flash(), sb, hd.seg) {
                Ok((seq, head, ..)) if seq == hd.seg_seq && usize::from(head) == i => {}
                Ok((seq, head, ..)) => ck.problem(format!(
                    "log head {i} is in segment {} (reserved when the table was captured) whose segment header \
                     has sequence {seq} and head {head}, the checkpoint sequence {}",
                    hd.seg, hd.seg_seq
                )),
                Err(why) => ck.problem(format!(
                    "log head {i} is in segment {} (reserved when the table was captured) with no valid segment header ({why})",
                    hd.seg
                )),
            },
            Some(s) => ck.problem(format!("log head {i} is in segment {} which is {}", hd.seg, state_name(s.state))),
            None => ck.problem(format!("log head {i} names segment {} beyond the device", hd.seg)),
        }
    }
}

fn run(cli: &Cli) -> Result<i32, ToolError> {
    let hints = GeoHints { block: cli.block, unit: cli.unit, segment: cli.au };
    if let Some(dir) = ferrofs_tools::dev::mounted_at(&cli.device) {
        if !cli.no_action {
            return Err(ToolError::op(format!(
                "{} is mounted on {dir}: checking it could damage it; use -n for a read-only check",
                cli.device.display()
            )));
        }
        eprintln!("fsck.ferrofs: warning: {} is mounted on {dir}; the check may see changes in progress", cli.device.display());
    }
    let mut dev = open_existing(&cli.device, &hints, cli.no_action)?;
    let _ = (cli.auto, cli.yes, cli.force);
    let mut ck = Checker { verbose: cli.verbose, problems: Vec::new(), warnings: Vec::new() };
    println!("fsck.ferrofs: {}: {}", cli.device.display(), dev.describe());

    // 1. superblocks
    let scan = scan_superblocks(dev.flash());
    let (sb_seg, sb) = match scan.sb {
        Some(x) => x,
        None => {
            let damaged: Vec<String> = scan
                .copies
                .iter()
                .filter_map(|(s, c)| match c {
                    SbCopy::Damaged(r) => Some(format!("segment {s}: {r}")),
                    SbCopy::Unreadable(r) => Some(format!("segment {s}: unreadable ({r})")),
                    _ => None,
                })
                .collect();
            return Err(if damaged.is_empty() {
                ToolError::op(format!("{}: not a ferrofs filesystem (no superblock found)", cli.device.display()))
            } else {
                ToolError::op(format!(
                    "{}: no valid ferrofs superblock: damaged copies in {}",
                    cli.device.display(),
                    damaged.join(", ")
                ))
            });
        }
    };
    if let Some(m) = geometry_mismatch(dev.flash(), &sb) {
        return Err(ToolError::op(format!("{}: geometry mismatch: {m}", cli.device.display())));
    }
    if sb.version != ferrofs_engine::format::FORMAT_VERSION
        || sb.incompat & !ferrofs_engine::format::FEATURE_INCOMPAT_SUPPORTED != 0
    {
        return Err(ToolError::op(format!(
            "{}: unsupported format version {} or incompatible features {:#x}",
            cli.device.display(),
            sb.version,
            sb.incompat
        )));
    }
    for &s in &sb.sb_segs {
        let state = scan.copies.iter().find(|(x, _)| *x == s).map(|(_, c)| c.clone());
        match state {
            Some(SbCopy::Valid(other)) if other == sb => {}
            Some(SbCopy::Valid(_)) => ck.problem(format!("the superblock copy in segment {s} differs from the one in segment {sb_seg}")),
            Some(SbCopy::Damaged(r)) => ck.problem(format!("the superblock copy in segment {s} is damaged ({r})")),
            Some(SbCopy::Missing) => ck.problem(format!("the superblock copy in segment {s} is missing")),
            Some(SbCopy::Bad) => ck.problem(format!("superblock segment {s} is marked bad")),
            Some(SbCopy::Unreadable(r)) => ck.problem(format!("the superblock copy in segment {s} is unreadable ({r})")),
            None => ck.problem(format!("superblock segment {s} is out of range")),
        }
    }
    let limited = sb.compat & ferrofs_engine::format::FEATURE_COMPAT_OPEN_SEGMENTS != 0;
    if limited
        && !(ferrofs_engine::format::OPEN_SEGMENTS_MIN..=ferrofs_engine::format::OPEN_SEGMENTS_MAX).contains(&sb.open_segments)
    {
        ck.problem(format!(
            "the superblock's open-segment limit {} is outside {}..={} (the filesystem does not mount)",
            sb.open_segments,
            ferrofs_engine::format::OPEN_SEGMENTS_MIN,
            ferrofs_engine::format::OPEN_SEGMENTS_MAX
        ));
    }
    let paged = sb.compat & ferrofs_engine::format::FEATURE_COMPAT_FTL_PAGE != 0;
    if paged && (sb.ftl_page == 0 || sb.ftl_page % sb.write_unit.max(1) != 0 || sb.segment_size % sb.ftl_page != 0) {
        ck.problem(format!(
            "the superblock's FTL page {} is not a whole number of write units dividing the segment (the filesystem does not mount)",
            sb.ftl_page
        ));
    }
    println!(
        "  superblock: version {}, serial {:#018x}, created {} UTC, copies in segments {} and {}, {}{}",
        sb.version,
        sb.serial,
        utc_date(sb.created),
        sb.sb_segs[0],
        sb.sb_segs[1],
        if limited { format!("at most {} segments open", sb.open_segments) } else { "no open-segment limit".to_string() },
        if paged { format!(", FTL page {}", human(u64::from(sb.ftl_page))) } else { String::new() }
    );

    // 2. checkpoints
    let cps = read_checkpoints(dev.flash(), &sb);
    let nvalid = cps.iter().filter(|e| matches!(e.state, CpSlot::Valid(..))).count();
    for d in damaged_checkpoints(&cps) {
        let what = format!(
            "checkpoint area {} slot {}{} is damaged: {}",
            if d.area == 0 { 'A' } else { 'B' },
            d.slot,
            d.seq.map(|s| format!(" (sequence {s})")).unwrap_or_default(),
            d.reason
        );
        if d.maybe_torn {
            ck.warn(format!("{what}; it is the last one written in its area, probably an interrupted checkpoint write"));
        } else {
            ck.problem(what);
        }
    }
    let newest = newest_valid(&cps).map(|(e, h, segs)| (e.area, e.slot, *h, segs.to_vec()));
    let newest_seq = newest.as_ref().map_or(0, |n| n.2.seq);
    for e in &cps {
        if let CpSlot::Stale(h, why) = &e.state {
            if h.seq > newest_seq {
                ck.problem(format!(
                    "the newest checkpoint (area {} slot {}, sequence {}) has an unreadable segment table: {why}",
                    if e.area == 0 { 'A' } else { 'B' },
                    e.slot,
                    h.seq
                ));
            }
        }
    }
    match &newest {
        Some((a, s, h, segs)) => {
            println!(
                "  checkpoint: sequence {} in area {} slot {} ({} valid slots), next inode {}",
                h.seq,
                if *a == 0 { 'A' } else { 'B' },
                s,
                nvalid,
                h.next_ino
            );
            println!("  segments (at the checkpoint): {}", segment_summary(segs));
            check_segments(&mut dev, &sb, h, segs, &mut ck);
        }
        None => ck.problem("no valid checkpoint in either area".into()),
    }

    // 3. mount read-only: recovery in RAM, nothing written
    let mut fs = match mount(dev, true) {
        Ok(f) => f,
        Err((e, _)) => {
            for p in &ck.problems {
                eprintln!("fsck.ferrofs: problem: {p}");
            }
            return Err(e);
        }
    };
    let replayed = fs.stats().replayed;
    if replayed > 0 {
        println!("  log: {replayed} records written after the checkpoint (replayed in memory)");
    }

    // 4. the engine's checks: every indexed record's CRC, ownership, link counts, sizes, segment usage
    let mut all: Vec<FsckProblem> = Vec::new();
    let orphans = match fs.fsck_each(&mut |p| all.push(*p)) {
        Ok(rep) => {
            println!(
                "  index: {} inodes, {} directories, {} entries, {} data blocks, {} xattrs, {} orphans",
                rep.inodes, rep.directories, rep.entries, rep.data_blocks, rep.xattrs, rep.orphans
            );
            // every problem of the index check, up to a limit
            const LIST_MAX: usize = 200;
            for p in all.iter().take(LIST_MAX) {
                ck.problem(describe_problem(p));
            }
            if rep.problems > LIST_MAX as u64 {
                ck.problem(format!("... and {} more problems found by the index check", rep.problems - LIST_MAX as u64));
            }
            Some(rep)
        }
        Err(e) => {
            ck.problem(format!("the index check stopped: {}", errno_name(e)));
            None
        }
    };

    // 5. walk the tree through the POSIX operations
    let mut sum = Summary::default();
    walk_tree(&mut fs, &mut ck, &mut sum);
    if let Some(rep) = &orphans {
        let reachable = sum.inodes;
        let expected = rep.inodes.saturating_sub(rep.orphans);
        if rep.problems == 0 && reachable != expected {
            ck.problem(format!(
                "{} inodes are indexed (without orphans) but {reachable} are reachable from the root",
                expected
            ));
        }
    }
    let st = fs.statfs();
    println!(
        "  tree: {} inodes ({} directories, {} files, {} symlinks, {} other; {} hard-linked), {} entries, {} in files, {} xattrs",
        sum.inodes,
        sum.dirs,
        sum.files,
        sum.symlinks,
        sum.others,
        sum.hardlinked,
        sum.entries,
        human(sum.bytes),
        sum.xattrs
    );
    println!(
        "  space: capacity {}, free {}, {} segments free now",
        human(st.blocks * u64::from(st.block_size)),
        human(st.blocks_free * u64::from(st.block_size)),
        fs.stats().free_segments
    );
    let norphans = orphans.as_ref().map_or(0, |r| r.orphans);

    // 6. repair what can be repaired: replay the log (and reclaim orphans) into a new checkpoint
    let mut code = EXIT_OK;
    let mut dev = fs.into_flash();
    if ck.problems.is_empty() && (replayed > 0 || norphans > 0) {
        if cli.no_action {
            println!("  the log since the last checkpoint would be replayed and a new checkpoint written (-n: not done)");
        } else {
            let fs = match mount(dev, false) {
                Ok(f) => f,
                Err((e, _)) => return Err(ToolError::damaged(format!("recovery mount failed: {e}"))),
            };
            dev = fs.unmount().map_err(|(e, _)| ToolError::damaged(format!("writing the recovery checkpoint failed: {}", errno_name(e))))?;
            dev.persist(&cli.device)?;
            println!("  recovered: replayed {replayed} records, reclaimed {norphans} orphans, wrote a new checkpoint");
            code = EXIT_CORRECTED;
        }
    }
    let _ = dev.geometry();
    for w in &ck.warnings {
        eprintln!("fsck.ferrofs: warning: {w}");
    }
    if !ck.problems.is_empty() {
        for p in &ck.problems {
            if !cli.verbose {
                eprintln!("fsck.ferrofs: problem: {p}");
            }
        }
        println!("{}: {} problems found, left uncorrected", cli.device.display(), ck.problems.len());
        return Ok(EXIT_UNCORRECTED);
    }
    println!(
        "{}: clean, {} inodes, {} in files{}",
        cli.device.display(),
        sum.inodes,
        human(sum.bytes),
        if ck.warnings.is_empty() { String::new() } else { format!(", {} warnings", ck.warnings.len()) }
    );
    Ok(code)
}

fn main() {
    ferrofs_tools::util::default_sigpipe();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => clap_exit::<Cli>(e),
    };
    match run(&cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("fsck.ferrofs: error: {e}");
            std::process::exit(e.code);
        }
    }
}
