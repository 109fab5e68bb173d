//! fsck.ferrofs: check and repair a ferrofs filesystem.
//!
//! Exit codes (fsck(8)): 0 clean, 1 errors corrected (the log replayed and a checkpoint written,
//! or repairs made), 4 errors left uncorrected, 8 operational error (cannot open, not a
//! ferrofs), 16 usage error, 32 cancelled (SIGINT or SIGTERM during a repair). 2 ("reboot") is
//! never used: a mounted filesystem is only checked (`-n`), never repaired.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;

use clap::Parser;
use ferrofs_engine::format::{segstate, CpHeader, SegInfo, Superblock, S_IFLNK, S_IFMT, S_IFREG};
use ferrofs_engine::{FileType, FsckProblem, Inode, Repair, RepairLevel, RepairOutcome, ROOT_INO};
use ferrofs_tools::dev::{open_existing, Dev, GeoHints};
use ferrofs_tools::layout::{
    damaged_checkpoints, geometry_mismatch, key_str, newest_valid, read_checkpoints, read_seghdr, scan_superblocks,
    state_name, CpSlot, SbCopy,
};
use ferrofs_tools::util::{
    clap_exit, errno_name, human, parse_pairing, parse_size_u32, show_name, utc_date, ToolError, EXIT_CANCELLED, EXIT_CORRECTED,
    EXIT_OK, EXIT_UNCORRECTED,
};
use ferrofs_tools::progress::Progress;
use ferrofs_tools::walk::{list_dir, mount};
use ferrofs_tools::Fs;

/// Check a ferrofs filesystem on an image file, an MTD device or a block device, and repair it
/// with -p or -y.
#[derive(Parser, Debug)]
#[command(name = "fsck.ferrofs", version, about, long_about = None)]
struct Cli {
    /// Image file, /dev/mtdN or block device.
    device: PathBuf,

    /// Check only: open the device read-only, mount read-only, never write.
    #[arg(short = 'n', long = "no-action", conflicts_with_all = ["preen", "yes"])]
    no_action: bool,

    /// Preen: make the repairs that lose nothing readable (counts, sizes, parents, entry types,
    /// the segment table, stale orphan entries, entries naming nothing, unnamed inodes linked
    /// into /lost+found); leave the rest (exit 4).
    #[arg(short = 'p', short_alias = 'a', conflicts_with = "yes")]
    preen: bool,

    /// Make every repair possible, also those that drop unreadable records (a damaged data
    /// block becomes a hole: the file keeps its size and reads zeros there) or recreate lost
    /// inodes.
    #[arg(short = 'y')]
    yes: bool,

    /// Verbose: print every path checked and every problem.
    #[arg(short, long)]
    verbose: bool,

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

    /// The page pairing of an MLC NAND MTD device: dist3 or adjacent (MTD does not report it).
    #[arg(long, value_parser = parse_pairing, value_name = "SCHEME")]
    pairing: Option<ferrofs_engine::Pairing>,
}

struct Checker {
    verbose: bool,
    /// The check after a repair: the summary lines are not printed again.
    quiet: bool,
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
    fn say(&self, s: String) {
        if !self.quiet {
            println!("{s}");
        }
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
    /// The first path found for each inode (for the repair's messages).
    paths: HashMap<u64, Vec<u8>>,
}

fn describe_problem(p: &FsckProblem) -> String {
    match p {
        FsckProblem::BadRecord(k) => {
            format!("the record indexed for key {} is unreadable, fails its CRC or holds another key", key_str(k))
        }
        FsckProblem::Ungrouped(k) => {
            format!("the aligned block indexed for key {} lies in no data group's slot that names it", key_str(k))
        }
        FsckProblem::SegmentUsage { seg, table, computed } => {
            if *table == u32::MAX {
                format!("segment {seg} is marked free but the index has {computed} live bytes in it")
            } else {
                format!("segment {seg}: the segment table says {table} live bytes, the index gives {computed}")
            }
        }
        FsckProblem::NoOwner(k) => format!("record {} belongs to an inode that does not exist", key_str(k)),
        FsckProblem::Misplaced(k) => format!("record {} does not fit its inode's type", key_str(k)),
        FsckProblem::Unattached { ino, nlink } => {
            format!("inode {ino} (link count {nlink}) is named by no directory entry and not on the orphan list")
        }
        FsckProblem::ExtraNames { ino, names } => format!("directory {ino} is named by {names} entries"),
        FsckProblem::Unreachable(ino) => format!("directory {ino} is named, but not reachable from the root"),
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
fn walk_tree(fs: &mut Fs, ck: &mut Checker, sum: &mut Summary, bar: &Progress) {
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
            bar.set(sum.entries);
            let mut path = dpath.clone();
            if path.last() != Some(&b'/') {
                path.push(b'/');
            }
            path.extend_from_slice(&ent.name);
            if ck.verbose && !ck.quiet {
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
            if first {
                sum.paths.insert(child.ino, path.clone());
            }
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
                // the content is not read again: the index check read every data record
                // (CRC, key, owner)
                S_IFREG => {
                    sum.files += 1;
                    sum.bytes = sum.bytes.saturating_add(child.size);
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
            // ends up in a segment the table still records as reserved, and when the table is
            // larger than a segment (e.g. 8192 segments of 128 KiB: 41 records, 150 KB) in one
            // the table records as free (format.md section 4: mount treats the heads' segments
            // as in use). Fine if the segment header agrees.
            Some(s) if s.state == segstate::RESERVED || s.state == segstate::FREE => {
                let when = if s.state == segstate::FREE { "free" } else { "reserved" };
                match read_seghdr(dev.flash(), sb, hd.seg) {
                    Ok((seq, head, ..)) if seq == hd.seg_seq && usize::from(head) == i => {}
                    Ok((seq, head, ..)) => ck.problem(format!(
                        "log head {i} is in segment {} ({when} when the table was captured) whose segment header \
                         has sequence {seq} and head {head}, the checkpoint sequence {}",
                        hd.seg, hd.seg_seq
                    )),
                    Err(why) => ck.problem(format!(
                        "log head {i} is in segment {} ({when} when the table was captured) with no valid segment header ({why})",
                        hd.seg
                    )),
                }
            }
            Some(s) => ck.problem(format!("log head {i} is in segment {} which is {}", hd.seg, state_name(s.state))),
            None => ck.problem(format!("log head {i} names segment {} beyond the device", hd.seg)),
        }
    }
}

/// What one check found.
struct Outcome {
    ck: Checker,
    sum: Summary,
    /// Records after the checkpoint (replayed in RAM by the read-only mount).
    replayed: u64,
    /// Orphans (unlinked inodes the next read-write mount deletes).
    orphans: u64,
}

/// Check the filesystem on `cli.device` without writing (steps 1 to 6 of docs/tools.md): the
/// device is opened read-only and mounted read-only. `quiet`: no summary lines (the check after
/// a repair).
fn check(cli: &Cli, hints: &GeoHints, quiet: bool) -> Result<Outcome, ToolError> {
    let mut dev = open_existing(&cli.device, hints, true)?;
    let mut ck = Checker { verbose: cli.verbose, quiet, problems: Vec::new(), warnings: Vec::new() };
    ck.say(format!("fsck.ferrofs: {}: {}", cli.device.display(), dev.describe()));

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
    ck.say(format!(
        "  superblock: version {}, serial {:#018x}, created {} UTC, copies in segments {} and {}, {}{}",
        sb.version,
        sb.serial,
        utc_date(sb.created),
        sb.sb_segs[0],
        sb.sb_segs[1],
        if limited { format!("at most {} segments open", sb.open_segments) } else { "no open-segment limit".to_string() },
        if paged { format!(", FTL page {}", human(u64::from(sb.ftl_page))) } else { String::new() }
    ));

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
            ck.say(format!(
                "  checkpoint: sequence {} in area {} slot {} ({} valid slots), next inode {}",
                h.seq,
                if *a == 0 { 'A' } else { 'B' },
                s,
                nvalid,
                h.next_ino
            ));
            ck.say(format!("  segments (at the checkpoint): {}", segment_summary(segs)));
            check_segments(&mut dev, &sb, h, segs, &mut ck);
        }
        None => ck.problem("no valid checkpoint in either area".into()),
    }

    // 3. mount read-only: recovery in RAM, nothing written
    let spin = Progress::phase(cli.verbose, "mounting read-only (replaying the log)");
    let mounted = mount(dev, true);
    spin.finish();
    let mut fs = match mounted {
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
        ck.say(format!("  log: {replayed} records written after the checkpoint (replayed in memory)"));
    }

    // 4. the engine's checks: every indexed record's CRC, ownership, link counts, sizes, segment usage
    let mut all: Vec<FsckProblem> = Vec::new();
    let spin = Progress::spinner(cli.verbose, "checking the index: keys");
    let checked = fs.fsck_progress(&mut |p| all.push(*p), &mut |n| spin.set(n));
    spin.finish();
    let orphans = match checked {
        Ok(rep) => {
            ck.say(format!(
                "  index: {} inodes, {} directories, {} entries, {} data blocks, {} xattrs, {} orphans",
                rep.inodes, rep.directories, rep.entries, rep.data_blocks, rep.xattrs, rep.orphans
            ));
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
    let bar = Progress::count(cli.verbose, orphans.as_ref().map_or(0, |r| r.entries), "walking the tree: entries");
    walk_tree(&mut fs, &mut ck, &mut sum, &bar);
    bar.finish();
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
    ck.say(format!(
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
    ));
    ck.say(format!(
        "  space: capacity {}, free {}, {} segments free now",
        human(st.blocks * u64::from(st.block_size)),
        human(st.blocks_free * u64::from(st.block_size)),
        fs.stats().free_segments
    ));
    let norphans = orphans.as_ref().map_or(0, |r| r.orphans);
    Ok(Outcome { ck, sum, replayed, orphans: norphans })
}

/// Replay the log after the checkpoint and delete the orphans (a read-write mount and unmount).
fn recover(cli: &Cli, hints: &GeoHints, out: &Outcome) -> Result<(), ToolError> {
    let dev = open_existing(&cli.device, hints, false)?;
    let fs = match mount(dev, false) {
        Ok(f) => f,
        Err((e, _)) => return Err(ToolError::damaged(format!("recovery mount failed: {e}"))),
    };
    let mut dev =
        fs.unmount().map_err(|(e, _)| ToolError::damaged(format!("writing the recovery checkpoint failed: {}", errno_name(e))))?;
    dev.persist(&cli.device)?;
    println!(
        "  recovered: replayed {} records, reclaimed {} orphans, wrote a new checkpoint",
        out.replayed, out.orphans
    );
    Ok(())
}

/// " (/the/path)" of an inode, when the check found one.
fn at(paths: &HashMap<u64, Vec<u8>>, ino: u64) -> String {
    match paths.get(&ino) {
        Some(p) => format!(" ({})", show_name(p)),
        None if ino == ROOT_INO => " (/)".into(),
        None => String::new(),
    }
}

fn type_name(mode: u32) -> &'static str {
    match FileType::from_mode(mode) {
        Some(FileType::Dir) => "a directory",
        Some(FileType::Regular) => "a regular file",
        Some(FileType::Symlink) => "a symbolic link",
        Some(FileType::CharDev) => "a character device",
        Some(FileType::BlockDev) => "a block device",
        Some(FileType::Fifo) => "a fifo",
        Some(FileType::Socket) => "a socket",
        None => "an inode of unknown type",
    }
}

fn describe_repair(r: &Repair, paths: &HashMap<u64, Vec<u8>>) -> String {
    use ferrofs_engine::format::kind;
    match *r {
        Repair::AcceptLogDamage { first_missing } => format!(
            "the log lost durable records from sequence number {first_missing}: the state recovered after them is kept"
        ),
        Repair::SegmentUsage { seg, table, computed } if table == u32::MAX => {
            format!("segment {seg} was marked free but holds {computed} live bytes: marked in use")
        }
        Repair::SegmentUsage { seg, table, computed } => {
            format!("segment {seg}: live bytes in the segment table {table}, set to the {computed} the index refers to")
        }
        Repair::SuperblockCopy(seg) => {
            format!("the superblock copy in segment {seg} (damaged, unreadable or weak) rewritten from the other copy")
        }
        Repair::CheckpointArea(a) => format!(
            "checkpoint area {} holds a slot that does not read back (or reads only through ECC correction): \
             the checkpoints move off it and erase it",
            if a == 0 { 'A' } else { 'B' }
        ),
        Repair::StaleOrphan(ino) => format!("orphan entry of inode {ino}{} (missing or still linked) removed", at(paths, ino)),
        Repair::DropRecord(k) => match k.kind {
            kind::DATA => format!(
                "data block {} of inode {}{} is unreadable: dropped; the file keeps its size and reads zeros in bytes {}..{}",
                k.key,
                k.ino,
                at(paths, k.ino),
                k.key.saturating_mul(4096),
                k.key.saturating_add(1).saturating_mul(4096)
            ),
            kind::DENT => format!(
                "an unreadable entry of directory {}{} dropped (the inode it named, if it is left without a name, goes to /lost+found)",
                k.ino,
                at(paths, k.ino)
            ),
            kind::XATTR => format!("an unreadable extended attribute of inode {}{} dropped", k.ino, at(paths, k.ino)),
            _ => format!("the unreadable record {} dropped", key_str(&k)),
        },
        Repair::DropMisplaced(k) => format!("record {} does not fit its inode's type: dropped", key_str(&k)),
        Repair::Recreate { ino, mode, size } => format!(
            "inode {ino}{} had no readable inode record: recreated as {} of {size} {} (owner root, mode {:o}, times now)",
            at(paths, ino),
            type_name(mode),
            if mode & S_IFMT == ferrofs_engine::format::S_IFDIR { "entries" } else { "bytes" },
            mode & 0o7777
        ),
        Repair::DropRecords(ino) => {
            format!("the records of inode {ino}, which does not exist and cannot be recreated, dropped")
        }
        Repair::DropEntry { dir, child, .. } => {
            format!("the entry of directory {dir}{} naming inode {child}, of which nothing is left, dropped", at(paths, dir))
        }
        Repair::DropName { dir, child, .. } => format!(
            "a name of directory {child}{} in directory {dir}{} dropped (a directory has one name, and the root none)",
            at(paths, child),
            at(paths, dir)
        ),
        Repair::EntryType { dir, child, dtype, .. } => {
            format!("the entry for inode {child}{} in directory {dir}: type set to {dtype} (the inode's)", at(paths, child))
        }
        Repair::Reconnect(ino) => format!("inode {ino}, which no entry named, linked into /lost+found as #{ino}"),
        Repair::DestroyUnlinked(ino) => {
            format!("inode {ino}, unlinked (link count 0) but not on the orphan list, deleted as a mount deletes orphans")
        }
        Repair::Inode { ino, nlink, size, parent } => {
            let mut what = Vec::new();
            if nlink.0 != nlink.1 {
                what.push(format!("link count {} -> {}", nlink.0, nlink.1));
            }
            if size.0 != size.1 {
                what.push(format!("size {} -> {}", size.0, size.1));
            }
            if parent.0 != parent.1 {
                what.push(format!("parent {} -> {}", parent.0, parent.1));
            }
            format!("inode {ino}{}: {}", at(paths, ino), what.join(", "))
        }
    }
}

/// What a repair run did.
struct Repaired {
    made: u64,
    left: u64,
    cancelled: bool,
}

/// Repair at `level`: mount read-only, [`Fs::repair`], checkpoint (unmount), save.
fn repair(cli: &Cli, hints: &GeoHints, level: RepairLevel, before: &Outcome) -> Result<Repaired, ToolError> {
    let dev = open_existing(&cli.device, hints, false)?;
    let mut fs = mount(dev, true).map_err(|(e, _)| e)?;
    ferrofs_tools::util::cancel_on_signals();
    println!("  repairs ({}):", if level == RepairLevel::All { "-y" } else { "-p" });
    let paths = &before.sum.paths;
    let spin = Progress::spinner(cli.verbose, "repairing: repairs");
    let mut n = 0u64;
    let r = fs.repair(level, ferrofs_tools::util::now(), &mut |r, o| {
        let what = describe_repair(r, paths);
        n += 1;
        spin.set(n);
        spin.suspend(|| match o {
            RepairOutcome::Done => println!("    repaired: {what}"),
            RepairOutcome::NotAllowed => println!("    left (needs -y): {what}"),
            RepairOutcome::Failed(e) => println!("    left (failed: {}): {what}", errno_name(e)),
        });
        !ferrofs_tools::util::cancelled()
    });
    spin.finish();
    match r {
        Ok(rep) => {
            let mut dev = fs
                .unmount()
                .map_err(|(e, _)| ToolError::damaged(format!("writing the checkpoint after the repairs failed: {}", errno_name(e))))?;
            dev.persist(&cli.device)?;
            println!(
                "  {} repairs made in {} passes, {} left{}",
                rep.repaired,
                rep.passes,
                rep.left,
                if rep.cancelled { " (cancelled)" } else { "" }
            );
            Ok(Repaired { made: rep.repaired, left: rep.left, cancelled: rep.cancelled })
        }
        Err(e) => {
            // the repairs made so far are complete operations in the log: keep them
            let mut dev = fs.into_flash();
            dev.persist(&cli.device)?;
            Err(ToolError::damaged(format!("the repair stopped: {}", errno_name(e))))
        }
    }
}

fn list_problems(cli: &Cli, ck: &Checker) {
    for p in &ck.problems {
        if !cli.verbose {
            eprintln!("fsck.ferrofs: problem: {p}");
        }
    }
}

fn run(cli: &Cli) -> Result<i32, ToolError> {
    let hints = GeoHints { block: cli.block, unit: cli.unit, segment: cli.au, pairing: cli.pairing };
    if let Some(dir) = ferrofs_tools::dev::mounted_at(&cli.device) {
        if !cli.no_action {
            return Err(ToolError::op(format!(
                "{} is mounted on {dir}: checking it could damage it; use -n for a read-only check",
                cli.device.display()
            )));
        }
        eprintln!("fsck.ferrofs: warning: {} is mounted on {dir}; the check may see changes in progress", cli.device.display());
    }
    let _ = cli.force;
    let level = if cli.yes {
        Some(RepairLevel::All)
    } else if cli.preen {
        Some(RepairLevel::Preen)
    } else {
        None
    };
    let out = check(cli, &hints, false)?;
    for w in &out.ck.warnings {
        eprintln!("fsck.ferrofs: warning: {w}");
    }
    let warnings = if out.ck.warnings.is_empty() { String::new() } else { format!(", {} warnings", out.ck.warnings.len()) };
    if out.ck.problems.is_empty() {
        let mut code = EXIT_OK;
        if out.replayed > 0 || out.orphans > 0 {
            if cli.no_action {
                println!("  the log since the last checkpoint would be replayed and a new checkpoint written (-n: not done)");
            } else {
                recover(cli, &hints, &out)?;
                code = EXIT_CORRECTED;
            }
        }
        println!("{}: clean, {} inodes, {} in files{warnings}", cli.device.display(), out.sum.inodes, human(out.sum.bytes));
        return Ok(code);
    }
    list_problems(cli, &out.ck);
    let Some(level) = level.filter(|_| !cli.no_action) else {
        println!(
            "{}: {} problems found, left uncorrected{}",
            cli.device.display(),
            out.ck.problems.len(),
            if cli.no_action { "" } else { " (fsck.ferrofs -p makes the safe repairs, -y all of them)" }
        );
        return Ok(EXIT_UNCORRECTED);
    };
    let made = repair(cli, &hints, level, &out)?;
    if made.cancelled {
        println!("{}: repair cancelled after {} repairs", cli.device.display(), made.made);
        return Ok(EXIT_CANCELLED);
    }
    let after = check(cli, &hints, true)?;
    if after.ck.problems.is_empty() && made.left == 0 {
        // (with no repair of its own, the mount's recovery corrected it: orphans deleted)
        println!(
            "{}: clean after {} repairs, {} inodes, {} in files",
            cli.device.display(),
            made.made,
            after.sum.inodes,
            human(after.sum.bytes)
        );
        return Ok(EXIT_CORRECTED);
    }
    list_problems(cli, &after.ck);
    println!(
        "{}: {} repairs made, {} problems left uncorrected{}",
        cli.device.display(),
        made.made,
        after.ck.problems.len().max(usize::try_from(made.left).unwrap_or(usize::MAX)),
        if level == RepairLevel::Preen { " (fsck.ferrofs -y makes the other repairs)" } else { "" }
    );
    Ok(EXIT_UNCORRECTED)
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
