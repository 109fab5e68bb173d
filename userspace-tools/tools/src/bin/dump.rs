//! ferrofs-dump: show the on-flash structures of a ferrofs filesystem, list directories and
//! print files. Never writes: the device is opened read-only and mounted read-only.
//!
//! Exit codes: 0 success, 1 a requested object is missing or unreadable, 8 cannot open the
//! device or it is not a ferrofs, 16 usage error.

use std::io::Write;
use std::path::PathBuf;

use clap::Parser;
use ferrofs_engine::format::{segstate, Superblock, S_IFBLK, S_IFCHR, S_IFLNK, S_IFMT, S_IFREG};
use ferrofs_engine::{Flash, Inode};
use ferrofs_tools::dev::{open_existing, Dev, GeoHints};
use ferrofs_tools::layout::{
    describe_payload, index_entries, key_str, newest_valid, read_checkpoints, rtype_name, scan_segment,
    scan_superblocks, seg_name, state_name, CpSlot, SbCopy,
};
use ferrofs_tools::util::{
    clap_exit, decode_rdev, errno_name, fmt_time, human, mode_string, parse_pairing, parse_size_u32, show_name, utc_date, ToolError,
    EXIT_FAILURE,
};
use ferrofs_tools::walk::{list_dir, mount, resolve};
use ferrofs_tools::Fs;

/// Show the structures of a ferrofs filesystem (superblock, checkpoints, segment table, an
/// inode's records), list a directory or print a file. Without a selection: superblock,
/// checkpoints and the segment table summary.
#[derive(Parser, Debug)]
#[command(name = "ferrofs-dump", version, about, long_about = None)]
struct Cli {
    /// Image file, /dev/mtdN or block device.
    device: PathBuf,

    /// Show the superblock (both copies).
    #[arg(short = 's', long)]
    superblock: bool,

    /// Show every checkpoint slot of both areas with sequence and validity.
    #[arg(short = 'c', long)]
    checkpoints: bool,

    /// Show the segment table of the newest checkpoint (state, live bytes, erase counts).
    #[arg(short = 'S', long)]
    segments: bool,

    /// Show the valid records of segment N.
    #[arg(long, value_name = "N")]
    segment: Option<u32>,

    /// Show inode N: its attributes and every record of it in the log.
    #[arg(short = 'i', long, value_name = "N")]
    inode: Option<u64>,

    /// List directory PATH (ls -l style; a non-directory is shown alone).
    #[arg(short = 'l', long, value_name = "PATH")]
    ls: Option<String>,

    /// Write the content of file PATH to stdout.
    #[arg(long, value_name = "PATH")]
    cat: Option<String>,

    /// Superblock, checkpoints and the full segment table.
    #[arg(short = 'a', long)]
    all: bool,

    /// Raw or block image whose superblock cannot be found: it is a block image.
    #[arg(long)]
    block: bool,

    /// Write unit when it cannot be read from the superblock.
    #[arg(long, value_parser = parse_size_u32, alias = "page")]
    unit: Option<u32>,

    /// Segment size when it cannot be read from the superblock.
    #[arg(long, value_parser = parse_size_u32, alias = "erase")]
    au: Option<u32>,

    /// The page pairing of an MLC NAND MTD device: dist3 or adjacent (MTD does not report it).
    #[arg(long, value_parser = parse_pairing, value_name = "SCHEME")]
    pairing: Option<ferrofs_engine::Pairing>,
}

macro_rules! out {
    ($o:expr, $($arg:tt)*) => {
        writeln!($o, $($arg)*).map_err(write_error)?
    };
}

/// A closed pipe ends the dump quietly (exit 0); any other output error is reported.
fn write_error(e: std::io::Error) -> ToolError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        ToolError::new(0, "")
    } else {
        ToolError::fail(format!("cannot write output: {e}"))
    }
}

fn the_superblock(dev: &mut Dev) -> Result<(u32, Superblock), ToolError> {
    let scan = scan_superblocks(dev.flash());
    match scan.sb {
        Some(x) => Ok(x),
        None => {
            let damaged: Vec<String> = scan
                .copies
                .iter()
                .filter_map(|(s, c)| match c {
                    SbCopy::Damaged(r) => Some(format!("segment {s}: {r}")),
                    _ => None,
                })
                .collect();
            Err(if damaged.is_empty() {
                ToolError::op("not a ferrofs filesystem (no superblock found)")
            } else {
                ToolError::op(format!("no valid ferrofs superblock: damaged copies in {}", damaged.join(", ")))
            })
        }
    }
}

fn show_superblock(o: &mut dyn Write, dev: &mut Dev, sb_seg: u32, sb: &Superblock) -> Result<(), ToolError> {
    out!(o, "superblock (segment {sb_seg}):");
    out!(o, "  magic           FFSB");
    out!(o, "  version         {}", sb.version);
    out!(o, "  features        compat {:#x} incompat {:#x} ro_compat {:#x}", sb.compat, sb.incompat, sb.ro_compat);
    let kind = match sb.kind {
        0 => "NAND",
        1 => "NOR",
        2 => "block",
        _ => "unknown",
    };
    out!(o, "  kind            {} ({kind})", sb.kind);
    out!(o, "  segment_size    {} ({})", sb.segment_size, human(u64::from(sb.segment_size)));
    out!(o, "  segment_count   {}", sb.segment_count);
    out!(o, "  write_unit      {}", sb.write_unit);
    out!(o, "  device_bytes    {} ({})", u64::from(sb.segment_size) * u64::from(sb.segment_count), human(u64::from(sb.segment_size) * u64::from(sb.segment_count)));
    out!(o, "  created         {} UTC ({})", utc_date(sb.created), sb.created);
    out!(o, "  serial          {:#018x}", sb.serial);
    out!(o, "  sb_segments     {} {}", sb.sb_segs[0], sb.sb_segs[1]);
    out!(o, "  cp_area_segs    {}", sb.cp_area_segs);
    out!(o, "  cp_slot_size    {}", sb.cp_slot_size);
    if sb.compat & ferrofs_engine::format::FEATURE_COMPAT_OPEN_SEGMENTS != 0 {
        out!(o, "  open_segments   {} (log heads and the checkpoint area open at once)", sb.open_segments);
    } else {
        out!(o, "  open_segments   no limit (three log heads)");
    }
    if sb.incompat & ferrofs_engine::format::FEATURE_INCOMPAT_ALIGNED_DATA != 0 {
        out!(o, "  data_align      {} (whole blocks are aligned payloads after data group records)", sb.data_align);
    }
    if sb.compat & ferrofs_engine::format::FEATURE_COMPAT_FTL_PAGE != 0 {
        out!(o, "  ftl_page        {} ({}: the block device's preferred write size)", sb.ftl_page, human(u64::from(sb.ftl_page)));
    }
    for (i, a) in sb.cp_segs.iter().enumerate() {
        let segs: Vec<String> = a.iter().take(sb.cp_area_segs as usize).map(|s| seg_name(*s)).collect();
        out!(o, "  cp_area_{}       {}", if i == 0 { 'A' } else { 'B' }, segs.join(" "));
    }
    for &s in &sb.sb_segs {
        let state = match ferrofs_tools::layout::read_sb_copy(dev.flash(), s) {
            SbCopy::Valid(x) if x == *sb => "valid".to_string(),
            SbCopy::Valid(_) => "valid but different".to_string(),
            SbCopy::Damaged(r) => format!("DAMAGED ({r})"),
            SbCopy::Missing => "MISSING".into(),
            SbCopy::Bad => "segment bad".into(),
            SbCopy::Unreadable(r) => format!("unreadable ({r})"),
        };
        out!(o, "  copy in segment {s}: {state}");
    }
    Ok(())
}

fn show_checkpoints(o: &mut dyn Write, dev: &mut Dev, sb: &Superblock) -> Result<(), ToolError> {
    let cps = read_checkpoints(dev.flash(), sb);
    let newest = newest_valid(&cps).map(|(e, _, _)| (e.area, e.slot));
    out!(o, "checkpoints ({} slots per area):", ferrofs_tools::layout::slots_per_area(sb));
    for e in &cps {
        let area = if e.area == 0 { 'A' } else { 'B' };
        let mark = if newest == Some((e.area, e.slot)) { " <- in use" } else { "" };
        match &e.state {
            CpSlot::Empty => {}
            CpSlot::Valid(h, _) => {
                out!(o, "  {area}{:<3} seq {:<10} valid{mark}", e.slot, h.seq);
                out!(
                    o,
                    "        root {}:{}+{} level {} has_root {}, next_ino {}, next_seq {}",
                    h.root.seg,
                    h.root.off,
                    h.root.len,
                    h.root_level,
                    h.has_root,
                    h.next_ino,
                    h.next_seq
                );
                for (i, hd) in h.heads.iter().enumerate() {
                    out!(
                        o,
                        "        head {i} ({}): segment {} offset {} seq {} next {}",
                        ["hot", "meta", "cold"].get(i).copied().unwrap_or("?"),
                        seg_name(hd.seg),
                        hd.off,
                        hd.seg_seq,
                        seg_name(hd.next)
                    );
                }
                let s = &h.stats;
                out!(
                    o,
                    "        stats: user {} programmed {} erases {} gc_records {} gc_bytes {} checkpoints {} replayed {} retired {}",
                    s.user_bytes,
                    s.programmed_bytes,
                    s.erases,
                    s.gc_records,
                    s.gc_bytes,
                    s.checkpoints,
                    s.replayed,
                    s.retired
                );
            }
            CpSlot::Foreign(h) => out!(o, "  {area}{:<3} seq {:<10} valid, other volume (serial {:#x}): ignored", e.slot, h.seq, h.serial),
            CpSlot::Stale(h, why) => out!(o, "  {area}{:<3} seq {:<10} intact, segment table gone ({why})", e.slot, h.seq),
            CpSlot::Damaged { hdr, reason } => out!(
                o,
                "  {area}{:<3} seq {:<10} INVALID: {reason}",
                e.slot,
                hdr.map(|h| h.seq.to_string()).unwrap_or_else(|| "?".into())
            ),
        }
    }
    if newest.is_none() {
        out!(o, "  no valid checkpoint");
    }
    Ok(())
}

fn show_segments(o: &mut dyn Write, dev: &mut Dev, sb: &Superblock, full: bool) -> Result<(), ToolError> {
    let cps = read_checkpoints(dev.flash(), sb);
    let Some((_, h, segs)) = newest_valid(&cps) else {
        out!(o, "segment table: no valid checkpoint");
        return Ok(());
    };
    let mut counts = [0u64; 6];
    for s in segs {
        if let Some(c) = counts.get_mut(s.state as usize) {
            *c += 1;
        }
    }
    out!(
        o,
        "segment table (checkpoint seq {}): {} segments: {} free, {} open, {} full, {} bad, {} reserved, {} meta",
        h.seq,
        segs.len(),
        counts[segstate::FREE as usize],
        counts[segstate::OPEN as usize],
        counts[segstate::FULL as usize],
        counts[segstate::BAD as usize],
        counts[segstate::RESERVED as usize],
        counts[segstate::META as usize]
    );
    if full {
        out!(o, "  {:>6} {:<8} {:>5} {:>10} {:>7} {:>10}", "seg", "state", "flags", "live", "erases", "seq");
        for (i, s) in segs.iter().enumerate() {
            out!(o, "  {:>6} {:<8} {:>5} {:>10} {:>7} {:>10}", i, state_name(s.state), s.flags, s.live, s.erases, s.seq);
        }
    }
    Ok(())
}

fn show_segment(o: &mut dyn Write, dev: &mut Dev, sb: &Superblock, seg: u32) -> Result<(), ToolError> {
    if seg >= sb.segment_count {
        return Err(ToolError::fail(format!("segment {seg} is beyond the {} segments", sb.segment_count)));
    }
    let sc = scan_segment(dev.flash(), sb, seg).map_err(ToolError::fail)?;
    match (sc.seg_seq, sc.seghdr) {
        (Some(sq), Some((h, p, n))) => {
            out!(o, "segment {seg}: seq {sq}, head {h}, previous {}, next {}, valid log ends at {}", seg_name(p), seg_name(n), sc.end)
        }
        _ => out!(o, "segment {seg}: no valid segment header (free, erased, superblock or checkpoint segment)"),
    }
    for r in &sc.records {
        out!(
            o,
            "  {:>8} {:>6} {:<7} seq {:<8} key {} {}{}",
            r.loc.off,
            r.loc.len,
            rtype_name(r.hdr.rtype),
            r.hdr.seq,
            key_str(&r.hdr.key),
            describe_payload(&r.hdr, &r.payload),
            if r.hdr.flags & 1 != 0 { " [CONT]" } else { "" }
        );
    }
    Ok(())
}

fn inode_line(i: &Inode) -> String {
    let sz = match i.mode & S_IFMT {
        S_IFCHR | S_IFBLK => {
            let (ma, mi) = decode_rdev(i.rdev);
            format!("{ma}, {mi}")
        }
        _ => i.size.to_string(),
    };
    format!(
        "{} {:>3} {:>5} {:>5} {:>10} {} {:>7}",
        mode_string(i.mode),
        i.nlink,
        i.uid,
        i.gid,
        sz,
        utc_date(i.mtime.sec),
        i.ino
    )
}

fn show_inode(o: &mut dyn Write, dev: Dev, sb: &Superblock, ino: u64) -> Result<(Dev, bool), ToolError> {
    let mut ok = true;
    // the engine's view
    let mut dev = match mount(dev, true) {
        Ok(mut fs) => {
            match fs.getattr(ino) {
                Ok(i) => {
                    out!(o, "inode {ino}:");
                    out!(o, "  mode       {:o} ({})", i.mode, mode_string(i.mode));
                    out!(o, "  uid/gid    {} {}", i.uid, i.gid);
                    out!(o, "  nlink      {}", i.nlink);
                    out!(o, "  size       {}", i.size);
                    out!(o, "  atime      {}", fmt_time(i.atime));
                    out!(o, "  mtime      {}", fmt_time(i.mtime));
                    out!(o, "  ctime      {}", fmt_time(i.ctime));
                    out!(o, "  rdev       {:#x}", i.rdev);
                    out!(o, "  flags      {:#x}", i.flags);
                    out!(o, "  generation {}", i.generation);
                    out!(o, "  parent     {}", i.parent);
                    if i.mode & S_IFMT == S_IFLNK {
                        let mut t = vec![0u8; 4096];
                        if let Ok(n) = fs.readlink(ino, &mut t) {
                            out!(o, "  target     {}", show_name(t.get(..n).unwrap_or(&[])));
                        }
                    }
                    match ferrofs_tools::walk::xattrs(&mut fs, ino) {
                        Ok(x) => {
                            for (n, v) in x {
                                out!(o, "  xattr      {} = {} bytes", show_name(&n), v.len());
                            }
                        }
                        Err(e) => out!(o, "  xattrs unreadable: {}", errno_name(e)),
                    }
                }
                Err(e) => {
                    ok = false;
                    out!(o, "inode {ino}: {}", if e == ferrofs_engine::Error::NotFound { "does not exist".to_string() } else { errno_name(e).to_string() });
                }
            }
            fs.into_flash()
        }
        Err((e, d)) => {
            out!(o, "inode {ino}: cannot mount ({e}); raw records only");
            d
        }
    };
    // the records on flash, and which of them the checkpoint's index points at
    let cps = read_checkpoints(dev.flash(), sb);
    let (cp_seq, live) = match newest_valid(&cps) {
        Some((_, h, _)) => {
            let h = *h;
            match index_entries(dev.flash(), sb, &h, (ino, ino)) {
                Ok((m, _)) => (h.seq, m),
                Err(e) => {
                    out!(o, "  index unreadable: {e}");
                    (h.seq, Default::default())
                }
            }
        }
        None => (0, Default::default()),
    };
    let meta: Vec<u32> = sb.sb_segs.iter().chain(sb.cp_segs.iter().flatten()).copied().collect();
    let mut recs = Vec::new();
    for seg in 0..sb.segment_count {
        if meta.contains(&seg) || dev.is_bad(seg).unwrap_or(true) {
            continue;
        }
        let sc = match scan_segment(dev.flash(), sb, seg) {
            Ok(s) => s,
            Err(e) => {
                out!(o, "  {e}");
                continue;
            }
        };
        for r in sc.records {
            let k = r.hdr.key;
            let mine = (k.ino == ino && r.hdr.rtype != 8 && r.hdr.rtype != 0)
                || (k.ino == 0 && k.kind == 4 && k.key == ino && r.hdr.rtype == 6);
            if mine {
                recs.push(r);
            }
        }
    }
    recs.sort_by_key(|r| r.hdr.seq);
    out!(o, "records of inode {ino} on flash ({} found; 'live' = indexed by checkpoint {cp_seq}):", recs.len());
    for r in &recs {
        let state = if live.get(&r.hdr.key) == Some(&r.loc) {
            "live"
        } else if r.hdr.seq >= cp_seq {
            "after-cp"
        } else {
            "stale"
        };
        out!(
            o,
            "  seq {:<8} {:>5}:{:<8} {:>6} {:<7} {:<8} key {} {}",
            r.hdr.seq,
            r.loc.seg,
            r.loc.off,
            r.loc.len,
            rtype_name(r.hdr.rtype),
            state,
            key_str(&r.hdr.key),
            describe_payload(&r.hdr, &r.payload)
        );
    }
    Ok((dev, ok))
}

fn ls_line(fs: &mut Fs, name: &[u8], i: &Inode) -> String {
    let mut s = format!("{} {}", inode_line(i), show_name(name));
    if i.mode & S_IFMT == S_IFLNK {
        let mut t = vec![0u8; 4096];
        if let Ok(n) = fs.readlink(i.ino, &mut t) {
            s.push_str(" -> ");
            s.push_str(&show_name(t.get(..n).unwrap_or(&[])));
        }
    }
    s
}

fn do_ls(o: &mut dyn Write, fs: &mut Fs, path: &str) -> Result<bool, ToolError> {
    let i = resolve(fs, path.as_bytes())?;
    if !i.is_dir() {
        let l = ls_line(fs, path.as_bytes(), &i);
        out!(o, "{l}");
        return Ok(true);
    }
    let mut ok = true;
    let entries = list_dir(fs, i.ino).map_err(|e| ToolError::fail(format!("{path}: cannot list: {}", errno_name(e))))?;
    out!(o, "{}: {} entries", path, entries.len());
    for e in entries {
        match fs.getattr(e.ino) {
            Ok(c) => {
                let l = ls_line(fs, &e.name, &c);
                out!(o, "{l}");
            }
            Err(err) => {
                ok = false;
                out!(o, "?????????? inode {} unreadable ({}) {}", e.ino, errno_name(err), show_name(&e.name));
            }
        }
    }
    Ok(ok)
}

fn do_cat(o: &mut dyn Write, fs: &mut Fs, path: &str) -> Result<(), ToolError> {
    let i = resolve(fs, path.as_bytes())?;
    if i.mode & S_IFMT != S_IFREG {
        return Err(ToolError::fail(format!("{path}: not a regular file (mode {})", mode_string(i.mode))));
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    loop {
        let n = fs
            .read(i.ino, off, &mut buf)
            .map_err(|e| ToolError::fail(format!("{path}: read error at offset {off}: {}", errno_name(e))))?;
        if n == 0 {
            break;
        }
        match o.write_all(buf.get(..n).unwrap_or(&[])) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(ToolError::fail(format!("cannot write output: {e}"))),
        }
        off = off.saturating_add(n as u64);
    }
    Ok(())
}

fn run(cli: &Cli) -> Result<i32, ToolError> {
    let hints = GeoHints { block: cli.block, unit: cli.unit, segment: cli.au, pairing: cli.pairing };
    let mut dev = open_existing(&cli.device, &hints, true)?;
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let o: &mut dyn Write = &mut lock;
    let any = cli.superblock || cli.checkpoints || cli.segments || cli.segment.is_some() || cli.inode.is_some() || cli.ls.is_some() || cli.cat.is_some();
    let (sb_sb, sb_cp, sb_segs) = if cli.all || !any { (true, true, true) } else { (cli.superblock, cli.checkpoints, cli.segments) };
    let mut code = 0;
    let needs_sb = sb_sb || sb_cp || sb_segs || cli.segment.is_some() || cli.inode.is_some();
    let sbinfo = if needs_sb { Some(the_superblock(&mut dev)?) } else { None };
    if let Some((seg, sb)) = &sbinfo {
        if sb_sb {
            out!(o, "device: {}", dev.describe());
            show_superblock(o, &mut dev, *seg, sb)?;
        }
        if sb_cp {
            show_checkpoints(o, &mut dev, sb)?;
        }
        if sb_segs {
            show_segments(o, &mut dev, sb, cli.segments || cli.all)?;
        }
        if let Some(n) = cli.segment {
            show_segment(o, &mut dev, sb, n)?;
        }
        if let Some(ino) = cli.inode {
            let (d, ok) = show_inode(o, dev, sb, ino)?;
            dev = d;
            if !ok {
                code = EXIT_FAILURE;
            }
        }
    }
    if cli.ls.is_some() || cli.cat.is_some() {
        let mut fs = mount(dev, true).map_err(|(e, _)| e)?;
        if let Some(p) = &cli.ls {
            if !do_ls(o, &mut fs, p)? {
                code = EXIT_FAILURE;
            }
        }
        if let Some(p) = &cli.cat {
            do_cat(o, &mut fs, p)?;
        }
    }
    match o.flush() {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(ToolError::fail(format!("cannot write output: {e}"))),
    }
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
        Err(e) if e.code == 0 => std::process::exit(0),
        Err(e) => {
            eprintln!("ferrofs-dump: error: {e}");
            std::process::exit(e.code);
        }
    }
}
