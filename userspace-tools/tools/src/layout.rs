//! Read-only parsing of the on-flash structures, independent of a mount: superblock copies,
//! checkpoint slots, segment tables, log records and index nodes (`docs/format.md`).
//!
//! Everything is bounds-checked and returns errors instead of panicking on damaged media.

use std::collections::BTreeMap;

use ferrofs_engine::codec::Reader;
use ferrofs_engine::crc::crc32c;
use ferrofs_engine::format::{
    get_seginfo, group_count, group_entry, group_extent, rtype, CpHeader, Inode, Key, Loc, RecHdr, SegInfo, Superblock, CP_HDR_SIZE, CP_MAGIC, MAX_CP_SEGS,
    NO_SEG, REC_HDR, SB_FULL_SIZE, SB_MAGIC, SEGINFO_SIZE,
};
use ferrofs_engine::{Error, Flash};

/// State of one superblock location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SbCopy {
    /// Valid copy.
    Valid(Superblock),
    /// The segment is bad.
    Bad,
    /// Magic present, CRC or content wrong.
    Damaged(String),
    /// No superblock magic.
    Missing,
    /// The read failed.
    Unreadable(String),
}

/// Read the superblock location of segment `seg`.
pub fn read_sb_copy(f: &mut dyn Flash, seg: u32) -> SbCopy {
    match f.is_bad(seg) {
        Ok(true) => return SbCopy::Bad,
        Ok(false) => {}
        Err(e) => return SbCopy::Unreadable(format!("{e:?}")),
    }
    // the main part and the extension (open-segment limit, FTL page) compat features may add
    let mut b = [0u8; SB_FULL_SIZE];
    if let Err(e) = f.read(seg, 0, &mut b) {
        return SbCopy::Unreadable(format!("{e:?}"));
    }
    match Superblock::decode(&b) {
        Ok(sb) => SbCopy::Valid(sb),
        Err(Error::BadFormat) => {
            if b.get(..4) == Some(&SB_MAGIC.to_le_bytes()[..]) {
                SbCopy::Damaged("undecodable".into())
            } else {
                SbCopy::Missing
            }
        }
        Err(_) => SbCopy::Damaged("CRC mismatch".into()),
    }
}

/// What a superblock scan found: the copy the engine uses (the first valid one among segments
/// 0..63) and the state of every location inspected.
#[derive(Debug, Clone)]
pub struct SbScan {
    /// The first valid superblock and its segment.
    pub sb: Option<(u32, Superblock)>,
    /// Segments 0..63 inspected, with their state.
    pub copies: Vec<(u32, SbCopy)>,
}

/// Scan segments 0..63 for superblocks as the engine's mount does.
pub fn scan_superblocks(f: &mut dyn Flash) -> SbScan {
    let n = f.geometry().segment_count.min(64);
    let mut copies = Vec::new();
    let mut sb = None;
    for s in 0..n {
        let c = read_sb_copy(f, s);
        if let SbCopy::Valid(x) = &c {
            if sb.is_none() {
                sb = Some((s, *x));
            }
        }
        copies.push((s, c));
    }
    SbScan { sb, copies }
}

/// Check the geometry recorded in the superblock against the medium.
pub fn geometry_mismatch(f: &dyn Flash, sb: &Superblock) -> Option<String> {
    let g = f.geometry();
    if sb.segment_size != g.segment_size || sb.segment_count != g.segment_count || sb.write_unit != g.write_unit {
        Some(format!(
            "the superblock describes {} segments of {} bytes with a {}-byte write unit, the device has {} segments \
             of {} bytes with a {}-byte write unit",
            sb.segment_count, sb.segment_size, sb.write_unit, g.segment_count, g.segment_size, g.write_unit
        ))
    } else {
        None
    }
}

/// One checkpoint slot.
#[derive(Debug, Clone)]
pub enum CpSlot {
    /// No checkpoint magic: never written (or erased).
    Empty,
    /// A valid checkpoint with its segment table.
    Valid(CpHeader, Vec<SegInfo>),
    /// A valid checkpoint of another volume (stale data on a block device).
    Foreign(CpHeader),
    /// An intact older checkpoint whose segment-table records were since reclaimed by the
    /// garbage collector (normal for superseded checkpoints of the SEGTAB layout).
    Stale(CpHeader, String),
    /// Checkpoint magic present but the checkpoint fails validation.
    Damaged {
        /// The header, when it decodes.
        hdr: Option<CpHeader>,
        /// Why it is invalid.
        reason: String,
    },
}

/// A checkpoint slot with its position.
#[derive(Debug, Clone)]
pub struct CpEntry {
    /// Area (0 = A, 1 = B).
    pub area: usize,
    /// Slot index inside the area.
    pub slot: u32,
    /// Contents.
    pub state: CpSlot,
}

/// Number of checkpoint slots per area.
pub fn slots_per_area(sb: &Superblock) -> u32 {
    if sb.cp_slot_size == 0 {
        return 0;
    }
    let area = u64::from(sb.cp_area_segs.min(MAX_CP_SEGS as u32)) * u64::from(sb.segment_size);
    u32::try_from(area / u64::from(sb.cp_slot_size)).unwrap_or(0)
}

fn cp_read(f: &mut dyn Flash, sb: &Superblock, area: usize, off: u64, out: &mut [u8]) -> Result<(), String> {
    let ss = u64::from(sb.segment_size);
    if ss == 0 {
        return Err("segment size 0".into());
    }
    let mut done = 0usize;
    while done < out.len() {
        let pos = off.saturating_add(done as u64);
        let idx = usize::try_from(pos / ss).map_err(|_| "offset overflow".to_string())?;
        let so = (pos % ss) as u32;
        let seg = *sb.cp_segs.get(area).and_then(|a| a.get(idx)).ok_or("checkpoint outside its area")?;
        if seg == NO_SEG {
            return Err("checkpoint area segment missing".into());
        }
        let n = (ss.saturating_sub(u64::from(so)) as usize).min(out.len().saturating_sub(done));
        let part = out.get_mut(done..done.saturating_add(n)).ok_or("bad range")?;
        f.read(seg, so, part).map_err(|e| format!("read error in segment {seg}: {e:?}"))?;
        done = done.saturating_add(n);
    }
    Ok(())
}

/// Record type of a segment-table chunk (format with the segment table out of the checkpoint).
pub const RTYPE_SEGTAB: u8 = 9;
/// Segment-table entries per SEGTAB record.
pub const SEGTAB_ENTRIES: u32 = 200;

/// How a checkpoint stores its segment table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegTabLayout {
    /// Inline after the checkpoint header.
    Inline,
    /// In SEGTAB records of the log, whose locations follow the checkpoint header.
    Records,
}

fn parse_seginfos(r: &mut Reader<'_>, n: u32, sb: &Superblock, out: &mut Vec<SegInfo>) -> Result<(), String> {
    for _ in 0..n {
        let si = get_seginfo(r).map_err(|_| "segment table truncated".to_string())?;
        if si.state > 5 || si.live > sb.segment_size {
            return Err(format!("segment table entry {} is invalid (state {}, live {})", out.len(), si.state, si.live));
        }
        out.push(si);
    }
    Ok(())
}

/// Validate a checkpoint blob as the engine's mount does, and load its segment table (inline,
/// or from the SEGTAB records it names).
pub fn decode_cp(f: &mut dyn Flash, sb: &Superblock, blob: &[u8]) -> CpSlot {
    if blob.get(..4) != Some(&CP_MAGIC.to_le_bytes()[..]) {
        return CpSlot::Empty;
    }
    let (h, crc) = match CpHeader::decode(&mut Reader::new(blob)) {
        Ok(x) => x,
        Err(_) => return CpSlot::Damaged { hdr: None, reason: "header does not decode (version or length)".into() },
    };
    let len = h.len as usize;
    let inline_len = CP_HDR_SIZE.saturating_add((h.seg_count as usize).saturating_mul(SEGINFO_SIZE));
    let chunks = h.seg_count.div_ceil(SEGTAB_ENTRIES);
    let records_len = CP_HDR_SIZE.saturating_add((chunks as usize).saturating_mul(Loc::SIZE));
    let layout = if len == inline_len {
        SegTabLayout::Inline
    } else if len == records_len {
        SegTabLayout::Records
    } else {
        return CpSlot::Damaged { hdr: Some(h), reason: format!("length {len} inconsistent with {} segments", h.seg_count) };
    };
    if len > blob.len() {
        return CpSlot::Damaged { hdr: Some(h), reason: format!("length {len} larger than the slot") };
    }
    let mut body = match blob.get(..len) {
        Some(b) => b.to_vec(),
        None => return CpSlot::Damaged { hdr: Some(h), reason: "truncated".into() },
    };
    if let Some(c) = body.get_mut(4..8) {
        c.copy_from_slice(&[0; 4]);
    }
    if crc32c(&body) != crc {
        return CpSlot::Damaged { hdr: Some(h), reason: "CRC mismatch".into() };
    }
    if h.serial != sb.serial {
        return CpSlot::Foreign(h);
    }
    if h.seq >= ferrofs_engine::format::SEQ_LIMIT || h.next_seq >= ferrofs_engine::format::SEQ_LIMIT || h.next_seq <= h.seq {
        return CpSlot::Damaged {
            hdr: Some(h),
            reason: format!("sequence numbers out of range ({}, next {})", h.seq, h.next_seq),
        };
    }
    if h.seg_count != sb.segment_count {
        return CpSlot::Damaged {
            hdr: Some(h),
            reason: format!("segment count {} differs from the superblock's {}", h.seg_count, sb.segment_count),
        };
    }
    let mut r = Reader::new(body.get(CP_HDR_SIZE..).unwrap_or(&[]));
    let mut segs = Vec::with_capacity(h.seg_count as usize);
    match layout {
        SegTabLayout::Inline => {
            if let Err(e) = parse_seginfos(&mut r, h.seg_count, sb, &mut segs) {
                return CpSlot::Damaged { hdr: Some(h), reason: e };
            }
        }
        SegTabLayout::Records => {
            for i in 0..chunks {
                let loc = match Loc::get(&mut r) {
                    Ok(l) => l,
                    Err(_) => return CpSlot::Stale(h, "segment table locations truncated".into()),
                };
                let rec = match read_record(f, sb, loc) {
                    Ok(x) => x,
                    Err(e) => return CpSlot::Stale(h, format!("segment table chunk {i}: {e}")),
                };
                if rec.hdr.rtype != RTYPE_SEGTAB || rec.hdr.key != Key::new(0, 0, u64::from(i)) {
                    return CpSlot::Stale(h, format!("segment table chunk {i} points at a {} record", rtype_name(rec.hdr.rtype)));
                }
                let mut rr = Reader::new(&rec.payload);
                let (first, count) = match (rr.u32(), rr.u16()) {
                    (Ok(a), Ok(b)) => (a, u32::from(b)),
                    _ => return CpSlot::Stale(h, format!("segment table chunk {i} truncated")),
                };
                if first != i.saturating_mul(SEGTAB_ENTRIES) || count > SEGTAB_ENTRIES {
                    return CpSlot::Stale(h, format!("segment table chunk {i} out of order"));
                }
                if let Err(e) = parse_seginfos(&mut rr, count, sb, &mut segs) {
                    return CpSlot::Stale(h, e);
                }
            }
            if segs.len() != h.seg_count as usize {
                return CpSlot::Stale(h, "segment table incomplete".into());
            }
        }
    }
    CpSlot::Valid(h, segs)
}

/// Read every checkpoint slot of both areas.
pub fn read_checkpoints(f: &mut dyn Flash, sb: &Superblock) -> Vec<CpEntry> {
    let slots = slots_per_area(sb);
    let mut out = Vec::new();
    let mut blob = vec![0u8; sb.cp_slot_size as usize];
    for area in 0..2 {
        for slot in 0..slots {
            let off = u64::from(slot) * u64::from(sb.cp_slot_size);
            let state = match cp_read(f, sb, area, off, &mut blob) {
                Ok(()) => decode_cp(f, sb, &blob),
                Err(e) => CpSlot::Damaged { hdr: None, reason: e },
            };
            out.push(CpEntry { area, slot, state });
        }
    }
    out
}

/// The newest valid checkpoint (highest sequence), as the mount picks it.
pub fn newest_valid(cps: &[CpEntry]) -> Option<(&CpEntry, &CpHeader, &[SegInfo])> {
    let mut best: Option<(&CpEntry, &CpHeader, &[SegInfo])> = None;
    for e in cps {
        if let CpSlot::Valid(h, segs) = &e.state {
            if best.is_none_or(|b| h.seq > b.1.seq) {
                best = Some((e, h, segs.as_slice()));
            }
        }
    }
    best
}

/// A damaged checkpoint slot and whether it can be a torn write of a power cut (it is the last
/// written slot of its area and newer than every valid checkpoint of that area).
#[derive(Debug, Clone)]
pub struct DamagedCp {
    /// Area.
    pub area: usize,
    /// Slot.
    pub slot: u32,
    /// Sequence, when the header decodes.
    pub seq: Option<u64>,
    /// Why it is invalid.
    pub reason: String,
    /// Plausibly an interrupted checkpoint write rather than corruption.
    pub maybe_torn: bool,
}

/// Classify the damaged checkpoint slots.
pub fn damaged_checkpoints(cps: &[CpEntry]) -> Vec<DamagedCp> {
    let mut out = Vec::new();
    for area in 0..2usize {
        let in_area: Vec<&CpEntry> = cps.iter().filter(|e| e.area == area).collect();
        let last_written = in_area.iter().rposition(|e| !matches!(e.state, CpSlot::Empty));
        let max_valid = in_area
            .iter()
            .filter_map(|e| match &e.state {
                CpSlot::Valid(h, _) => Some(h.seq),
                _ => None,
            })
            .max();
        for (i, e) in in_area.iter().enumerate() {
            if let CpSlot::Damaged { hdr, reason } = &e.state {
                let seq = hdr.map(|h| h.seq);
                let newer = match (seq, max_valid) {
                    (Some(s), Some(m)) => s > m,
                    _ => true,
                };
                out.push(DamagedCp {
                    area,
                    slot: e.slot,
                    seq,
                    reason: reason.clone(),
                    maybe_torn: Some(i) == last_written && newer,
                });
            }
        }
    }
    out
}

/// Segment state name.
pub fn state_name(s: u8) -> &'static str {
    match s {
        0 => "free",
        1 => "open",
        2 => "full",
        3 => "bad",
        4 => "reserved",
        5 => "meta",
        _ => "invalid",
    }
}

/// Record type name.
pub fn rtype_name(t: u8) -> &'static str {
    match t {
        rtype::PAD => "PAD",
        rtype::SEGHDR => "SEGHDR",
        rtype::INODE => "INODE",
        rtype::DENT => "DENT",
        rtype::DATA => "DATA",
        rtype::XATTR => "XATTR",
        rtype::ORPHAN => "ORPHAN",
        rtype::DELETE => "DELETE",
        rtype::INDEX => "INDEX",
        RTYPE_SEGTAB => "SEGTAB",
        rtype::DGROUP => "DGROUP",
        _ => "UNKNOWN",
    }
}

/// Record CRC seed of a volume.
pub fn seed(sb: &Superblock) -> u32 {
    sb.serial as u32 ^ (sb.serial >> 32) as u32
}

/// A record found in a segment.
#[derive(Debug, Clone)]
pub struct Rec {
    /// Header.
    pub hdr: RecHdr,
    /// Location.
    pub loc: Loc,
    /// Payload.
    pub payload: Vec<u8>,
}

/// The valid records of a segment, and why the scan stopped.
#[derive(Debug, Clone)]
pub struct SegScan {
    /// Segment sequence from the SEGHDR at offset 0 (None: no valid segment header).
    pub seg_seq: Option<u64>,
    /// SEGHDR payload: head, previous, next.
    pub seghdr: Option<(u8, u32, u32)>,
    /// Valid records in order.
    pub records: Vec<Rec>,
    /// Offset where the valid log ends.
    pub end: u32,
}

fn align_pos(wu: u32, pos: u32) -> u32 {
    if wu == 0 {
        return pos;
    }
    let rem = wu - pos % wu;
    if (rem as usize) < REC_HDR && rem != wu {
        pos.saturating_add(rem)
    } else {
        pos
    }
}

/// Scan the valid records of segment `seg` (the reader's rules of format.md 3.2).
pub fn scan_segment(f: &mut dyn Flash, sb: &Superblock, seg: u32) -> Result<SegScan, String> {
    let ss = sb.segment_size as usize;
    let mut data = vec![0u8; ss];
    f.read(seg, 0, &mut data).map_err(|e| format!("segment {seg}: read error {e:?}"))?;
    let seed = seed(sb);
    let mut out = SegScan { seg_seq: None, seghdr: None, records: Vec::new(), end: 0 };
    let first = match data.get(..REC_HDR).map(RecHdr::decode) {
        Some(Ok(h)) if h.rtype == rtype::SEGHDR => h,
        _ => return Ok(out),
    };
    let seg_seq = first.seg_seq;
    let mut pos = 0u32;
    loop {
        let start = align_pos(sb.write_unit, pos);
        let s = start as usize;
        let hb = match data.get(s..s.saturating_add(REC_HDR)) {
            Some(b) => b,
            None => break,
        };
        let h = match RecHdr::decode(hb) {
            Ok(h) => h,
            Err(_) => break,
        };
        if h.seg_seq != seg_seq {
            break;
        }
        let total = (h.len as usize).saturating_add(REC_HDR);
        let payload = match data.get(s.saturating_add(REC_HDR)..s.saturating_add(total)) {
            Some(p) => p,
            None => break,
        };
        if !h.check(seed, hb, payload) {
            break;
        }
        if out.records.is_empty() {
            if h.rtype != rtype::SEGHDR {
                break;
            }
            out.seg_seq = Some(seg_seq);
            let mut r = Reader::new(payload);
            if let (Ok(hd), Ok(p), Ok(n)) = (r.u8(), r.u32(), r.u32()) {
                out.seghdr = Some((hd, p, n));
            }
        }
        // a data group's extent runs to the end of its last payload slot (format.md 8.2): the
        // next record starts there, and nothing in the payload is read as a header
        let walk = if h.rtype == rtype::DGROUP {
            let n = group_count(payload).map_err(|_| ()).and_then(|n| group_extent(start, n, sb.data_align).ok_or(()));
            match n {
                Ok((_, end)) if sb.data_align != 0 && end <= sb.segment_size => end - start,
                _ => break,
            }
        } else {
            total as u32
        };
        out.records.push(Rec { hdr: h, loc: Loc { seg, off: start, len: total as u32 }, payload: payload.to_vec() });
        pos = start.saturating_add(walk);
        out.end = pos;
    }
    Ok(out)
}

/// Read and verify the record at `loc`.
pub fn read_record(f: &mut dyn Flash, sb: &Superblock, loc: Loc) -> Result<Rec, String> {
    if (loc.len as usize) < REC_HDR || loc.len > sb.segment_size || loc.seg >= sb.segment_count {
        return Err(format!("invalid location {}:{}+{}", loc.seg, loc.off, loc.len));
    }
    if u64::from(loc.off) + u64::from(loc.len) > u64::from(sb.segment_size) {
        return Err(format!("location {}:{}+{} crosses the segment end", loc.seg, loc.off, loc.len));
    }
    let mut b = vec![0u8; loc.len as usize];
    f.read(loc.seg, loc.off, &mut b).map_err(|e| format!("read error at {}:{}: {e:?}", loc.seg, loc.off))?;
    let h = RecHdr::decode(&b).map_err(|_| format!("no record magic at {}:{}", loc.seg, loc.off))?;
    if h.len as usize + REC_HDR != b.len() {
        return Err(format!("record length {} does not match the index ({})", h.len, loc.len));
    }
    let (hb, p) = b.split_at(REC_HDR);
    if !h.check(seed(sb), hb, p) {
        return Err(format!("CRC mismatch in the record at {}:{}", loc.seg, loc.off));
    }
    Ok(Rec { hdr: h, loc, payload: p.to_vec() })
}

/// Walk the on-flash index from the checkpoint root and collect the leaf entries whose inode is
/// in `ino_range` (inclusive). Also returns the number of index nodes read.
pub fn index_entries(
    f: &mut dyn Flash,
    sb: &Superblock,
    cp: &CpHeader,
    ino_range: (u64, u64),
) -> Result<(BTreeMap<Key, Loc>, u64), String> {
    let mut out = BTreeMap::new();
    let mut nodes = 0u64;
    if !cp.has_root {
        return Ok((out, 0));
    }
    let mut stack: Vec<(Loc, u8, u32)> = vec![(cp.root, cp.root_level, 0)];
    while let Some((loc, level, depth)) = stack.pop() {
        if depth > 13 {
            return Err("index deeper than 13 levels".into());
        }
        let rec = read_record(f, sb, loc)?;
        nodes = nodes.saturating_add(1);
        if rec.hdr.rtype != rtype::INDEX {
            return Err(format!("index points at a {} record at {}:{}", rtype_name(rec.hdr.rtype), loc.seg, loc.off));
        }
        let mut entries = Vec::new();
        let lv = ferrofs_engine::index::decode_node(&rec.payload, &mut |k, l| {
            entries.push((k, l));
            Ok(())
        })
        .map_err(|_| format!("index node at {}:{} does not decode", loc.seg, loc.off))?;
        if lv != level {
            return Err(format!("index node at {}:{} has level {lv}, expected {level}", loc.seg, loc.off));
        }
        if level == 0 {
            for (k, l) in entries {
                if k.ino >= ino_range.0 && k.ino <= ino_range.1 {
                    out.insert(k, l);
                }
            }
        } else {
            for (i, (k, l)) in entries.iter().enumerate() {
                let next = entries.get(i + 1).map(|e| e.0);
                // child i covers [k, next) (the first child also everything below k)
                let lo_ok = next.is_none_or(|n| n.ino >= ino_range.0);
                let hi_ok = i == 0 || k.ino <= ino_range.1;
                if lo_ok && hi_ok {
                    stack.push((*l, level.saturating_sub(1), depth + 1));
                }
            }
        }
    }
    Ok((out, nodes))
}

/// One-line description of a record's payload.
pub fn describe_payload(h: &RecHdr, p: &[u8]) -> String {
    let mut r = Reader::new(p);
    match h.rtype {
        rtype::SEGHDR => match (r.u8(), r.u32(), r.u32()) {
            (Ok(hd), Ok(prev), Ok(next)) => format!("head {hd} prev {} next {}", seg_name(prev), seg_name(next)),
            _ => "truncated".into(),
        },
        rtype::INODE => match Inode::decode(p) {
            Ok(i) => format!(
                "ino {} mode {:o} uid {} gid {} nlink {} size {} mtime {}.{:09} parent {}",
                i.ino, i.mode, i.uid, i.gid, i.nlink, i.size, i.mtime.sec, i.mtime.nsec, i.parent
            ),
            Err(_) => "truncated inode".into(),
        },
        rtype::DENT => match (r.u64(), r.u8(), r.u8()) {
            (Ok(child), Ok(dt), Ok(nl)) => {
                let name = r.bytes(nl as usize).unwrap_or(&[]);
                format!("child {child} type {dt} name \"{}\"", crate::util::show_name(name))
            }
            _ => "truncated entry".into(),
        },
        rtype::DATA => {
            let nz = p.iter().filter(|&&b| b != 0).count();
            format!("block {} ({} bytes, {} non-zero)", h.key.key, p.len(), nz)
        }
        rtype::XATTR => match r.u8() {
            Ok(nl) => {
                let name = r.bytes(nl as usize).unwrap_or(&[]);
                format!("name \"{}\" value {} bytes", crate::util::show_name(name), p.len().saturating_sub(1 + nl as usize))
            }
            _ => "truncated xattr".into(),
        },
        rtype::ORPHAN => format!("orphan inode {}", h.key.key),
        rtype::DELETE => match ferrofs_engine::format::delete_range(h.key, p) {
            Ok((a, b)) => format!("range {} .. {}", key_str(&a), key_str(&b)),
            _ => "truncated".into(),
        },
        rtype::INDEX => match (r.u8(), r.u16()) {
            (Ok(l), Ok(c)) if l == ferrofs_engine::format::INDEX_COMPACT_LEAF => format!("level 0 (compact), {c} entries"),
            (Ok(l), Ok(c)) => format!("level {l}, {c} entries"),
            _ => "truncated".into(),
        },
        rtype::PAD => format!("{} bytes", p.len()),
        rtype::DGROUP => match group_count(p) {
            Ok(n) => {
                let blocks: Vec<String> = (0..n)
                    .filter_map(|i| group_entry(p, i).ok())
                    .map(|e| format!("{}:{} crc {:08x}", e.ino, e.blk, e.crc))
                    .collect();
                format!("{n} aligned blocks: {}", blocks.join(", "))
            }
            Err(_) => "bad table".into(),
        },
        RTYPE_SEGTAB => match (r.u32(), r.u16()) {
            (Ok(a), Ok(c)) => format!("segment table entries {a}..{}", u64::from(a) + u64::from(c)),
            _ => "truncated".into(),
        },
        _ => format!("{} bytes", p.len()),
    }
}

/// `ino/kind/key` of a key.
pub fn key_str(k: &Key) -> String {
    let kind = match k.kind {
        0 => "inode",
        1 => "dent",
        2 => "xattr",
        3 => "data",
        4 => "orphan",
        _ => "?",
    };
    format!("({} {} {:#x})", k.ino, kind, k.key)
}

/// A segment number or `none`.
pub fn seg_name(s: u32) -> String {
    if s == NO_SEG {
        "none".into()
    } else {
        s.to_string()
    }
}

/// Read and verify the SEGHDR record at offset 0 of `seg`: (segment sequence, head, previous,
/// next), or why it is not valid.
pub fn read_seghdr(f: &mut dyn Flash, sb: &Superblock, seg: u32) -> Result<(u64, u8, u32, u32), String> {
    let mut b = [0u8; REC_HDR + 9];
    f.read(seg, 0, &mut b).map_err(|e| format!("read error {e:?}"))?;
    let h = RecHdr::decode(&b).map_err(|_| "no record magic".to_string())?;
    if h.rtype != rtype::SEGHDR || h.len != 9 {
        return Err(format!("first record is a {} of {} bytes", rtype_name(h.rtype), h.len));
    }
    let (hb, p) = b.split_at(REC_HDR);
    if !h.check(seed(sb), hb, p) {
        return Err("CRC mismatch".into());
    }
    let mut r = Reader::new(p);
    match (r.u8(), r.u32(), r.u32()) {
        (Ok(hd), Ok(prev), Ok(next)) => Ok((h.seg_seq, hd, prev, next)),
        _ => Err("truncated".into()),
    }
}
