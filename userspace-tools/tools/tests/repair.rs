//! fsck.ferrofs -p / -y: images built through the engine API on the flash simulator, damaged in
//! each of the ways a bad page or a lost record leaves (unreadable records, and records rewritten
//! with their CRC fixed up so that only the meaning is wrong), repaired by the binary; `fsck -n`
//! must then call them clean, and every file the damage did not touch must be intact (content,
//! attributes, xattrs, names). Prints the counts.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use ferrofs_engine::format::{kind, Key, Loc, RecHdr, CP_HDR_SIZE, REC_HDR, S_IFDIR, S_IFIFO, S_IFMT, S_IFREG};
use ferrofs_engine::{CreateArgs, FileType, FormatOptions, MountOptions, Repair, RepairLevel, RepairOutcome, ROOT_INO};
use ferrofs_flashsim::{AnySim, NandConfig, NandSim};
use ferrofs_tools::dev::{open_existing, Dev, GeoHints};
use ferrofs_tools::layout::{newest_valid, read_checkpoints, scan_superblocks, seed};
use ferrofs_tools::walk::{list_dir, read_all, xattrs};
use ferrofs_tools::Fs;

/// What the tree holds at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ent {
    ino: u64,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    size: u64,
    parent: u64,
    /// The entry's type as readdir gives it.
    dtype: FileType,
    /// File content or symlink target.
    data: Vec<u8>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

type Snap = BTreeMap<String, Ent>;

fn snap(fs: &mut Fs) -> Snap {
    let mut out = Snap::new();
    let mut stack = vec![(ROOT_INO, String::new())];
    while let Some((d, prefix)) = stack.pop() {
        for e in list_dir(fs, d).unwrap() {
            let path = format!("{prefix}{}", String::from_utf8_lossy(&e.name));
            let i = fs.getattr(e.ino).unwrap_or_else(|err| panic!("{path}: getattr {err:?}"));
            let data = match i.mode & S_IFMT {
                S_IFREG => read_all(fs, i.ino, i.size).unwrap_or_else(|err| panic!("{path}: read {err:?}")),
                m if m == ferrofs_engine::format::S_IFLNK => {
                    let mut b = vec![0u8; 4096];
                    let n = fs.readlink(i.ino, &mut b).unwrap();
                    b.truncate(n);
                    b
                }
                _ => Vec::new(),
            };
            let mut x = xattrs(fs, i.ino).unwrap();
            x.sort();
            if i.is_dir() {
                stack.push((i.ino, format!("{path}/")));
            }
            out.insert(
                path,
                Ent {
                    ino: i.ino,
                    mode: i.mode,
                    uid: i.uid,
                    gid: i.gid,
                    nlink: i.nlink,
                    size: i.size,
                    parent: i.parent,
                    dtype: e.ftype,
                    data,
                    xattrs: x,
                },
            );
        }
    }
    out
}

fn now() -> ferrofs_engine::Timespec {
    ferrofs_engine::Timespec { sec: 1_700_000_000, nsec: 0 }
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
    fn pick<T: Clone>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize].clone()
    }
}

/// A 20 MiB NAND simulator image populated through the engine: directories three deep, files
/// of 0..40 KiB owned by uid 1000, xattrs, a symlink, a hard link, a fifo, an empty file, and
/// an unlinked file still on the orphan list.
fn build(seed: u64, img: &Path) -> Snap {
    let sim = NandSim::new(NandConfig::with_layout(2048, 64, 160)).unwrap();
    let dev = Fs::format(Dev::Sim(AnySim::Nand(sim)), &FormatOptions { serial: 0x5eed_0000 ^ seed, ..Default::default() }, now())
        .map_err(|(e, _)| e)
        .unwrap();
    let mut fs = Fs::mount(dev, MountOptions::default()).map_err(|(e, _)| e).unwrap();
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let reg = |mode: u32| CreateArgs { mode: S_IFREG | mode, uid: 1000, gid: 100, rdev: 0 };
    let mut dirs = vec![ROOT_INO];
    for i in 0..6 {
        let parent = rng.pick(&dirs);
        let d = fs.mkdir(parent, format!("dir{i}").as_bytes(), 0o750, 1000, 100, now()).unwrap();
        dirs.push(d.ino);
    }
    for i in 0..30 {
        let parent = rng.pick(&dirs);
        let f = fs.create(parent, format!("file{i}").as_bytes(), &reg(0o640), now()).unwrap();
        let n = 1 + rng.below(40_000) as usize;
        fs.write(f.ino, 0, &prng_bytes(seed * 1000 + i, n), now()).unwrap();
        if i % 3 == 0 {
            fs.setxattr(f.ino, b"user.tag", format!("tag of {i}").as_bytes(), 0, now()).unwrap();
            fs.setxattr(f.ino, b"user.more", &prng_bytes(i, 100), 0, now()).unwrap();
        }
    }
    fs.symlink(dirs[1], b"link", b"../file0", 1000, 100, now()).unwrap();
    let f = fs.create(ROOT_INO, b"linked", &reg(0o600), now()).unwrap();
    fs.write(f.ino, 0, b"two names", now()).unwrap();
    fs.link(f.ino, dirs[2], b"linked2", now()).unwrap();
    fs.create(dirs[3], b"fifo", &CreateArgs { mode: S_IFIFO | 0o600, uid: 1000, gid: 100, rdev: 0 }, now()).unwrap();
    fs.create(ROOT_INO, b"empty", &reg(0o644), now()).unwrap();
    // checkpoints: the area in use holds older slots besides the newest
    fs.sync().unwrap();
    fs.sync().unwrap();
    let o = fs.create(ROOT_INO, b"unlinked", &reg(0o644), now()).unwrap();
    fs.write(o.ino, 0, &prng_bytes(77, 9000), now()).unwrap();
    fs.unlink(ROOT_INO, b"unlinked", now()).unwrap();
    let s = snap(&mut fs);
    let mut dev = fs.unmount().map_err(|(e, _)| e).unwrap();
    dev.persist(img).unwrap();
    s
}

/// Rewrite the record at `loc` of a simulator image with `edit` applied to its payload, then
/// fix its CRC (`fix`) or leave it failing (an unreadable record).
fn edit_record(img: &Path, loc: Loc, fix: bool, edit: impl FnOnce(&mut [u8])) {
    let mut dev = open_existing(img, &GeoHints::default(), true).unwrap();
    let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
    drop(dev);
    let base = sim_data_offset(img) + u64::from(loc.seg) * u64::from(sb.segment_size) + u64::from(loc.off);
    let mut b = std::fs::read(img).unwrap();
    let r = base as usize..base as usize + loc.len as usize;
    let rec = &mut b[r];
    let h = RecHdr::decode(rec).unwrap();
    assert_eq!(h.len as usize + REC_HDR, rec.len());
    let (hdr, payload) = rec.split_at_mut(REC_HDR);
    edit(payload);
    if fix {
        hdr[4..8].fill(0);
        let c = ferrofs_engine::crc::crc32c_update(ferrofs_engine::crc::crc32c_update(seed(&sb), hdr), payload);
        hdr[4..8].copy_from_slice(&c.to_le_bytes());
    } else {
        // one payload byte changed (or the header's CRC when the payload is empty)
        match payload.last_mut() {
            Some(x) => *x ^= 0x5a,
            None => hdr[4] ^= 0x5a,
        }
    }
    std::fs::write(img, b).unwrap();
}

/// The location of segment-table chunk 0 of the newest checkpoint.
fn segtab_loc(img: &Path) -> (Loc, u32) {
    let mut dev = open_existing(img, &GeoHints::default(), true).unwrap();
    let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
    let cps = read_checkpoints(dev.flash(), &sb);
    let (e, _, _) = newest_valid(&cps).unwrap();
    let off = u64::from(e.slot) * u64::from(sb.cp_slot_size);
    let ss = u64::from(sb.segment_size);
    let seg = sb.cp_segs[e.area][(off / ss) as usize];
    let mut blob = vec![0u8; CP_HDR_SIZE + Loc::SIZE];
    dev.flash().read(seg, (off % ss) as u32, &mut blob).unwrap();
    let mut r = ferrofs_engine::codec::Reader::new(&blob[CP_HDR_SIZE..]);
    (Loc::get(&mut r).unwrap(), sb.segment_size)
}

/// Every valid checkpoint of an image as (sequence, locations of its SEGTAB records), oldest
/// first.
fn checkpoint_chunks(img: &Path) -> Vec<(u64, Vec<Loc>)> {
    let mut dev = open_existing(img, &GeoHints::default(), true).unwrap();
    let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
    let cps = read_checkpoints(dev.flash(), &sb);
    let ss = u64::from(sb.segment_size);
    let mut out = Vec::new();
    for e in &cps {
        let ferrofs_tools::layout::CpSlot::Valid(h, _) = &e.state else { continue };
        let chunks = h.seg_count.div_ceil(200) as usize;
        let off = u64::from(e.slot) * u64::from(sb.cp_slot_size);
        let mut blob = vec![0u8; CP_HDR_SIZE + chunks * Loc::SIZE];
        // (the blob lies in one segment of the area: slots are far smaller than a segment)
        let seg = sb.cp_segs[e.area][(off / ss) as usize];
        dev.flash().read(seg, (off % ss) as u32, &mut blob).unwrap();
        let mut r = ferrofs_engine::codec::Reader::new(&blob[CP_HDR_SIZE..]);
        out.push((h.seq, (0..chunks).map(|_| Loc::get(&mut r).unwrap()).collect()));
    }
    out.sort_by_key(|c| c.0);
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A data block's record fails its CRC.
    DataUnreadable,
    /// An xattr record fails its CRC.
    XattrUnreadable,
    /// A directory entry fails its CRC.
    EntryUnreadable,
    /// A regular file's inode record fails its CRC.
    FileInodeUnreadable,
    /// A directory's inode record fails its CRC (its entries are in a directory whose inode is missing).
    DirInodeUnreadable,
    /// A file's link count is wrong (CRC fixed up).
    LinkCount,
    /// A directory's size (entry count) is wrong.
    DirSize,
    /// A directory's parent is another directory.
    Parent,
    /// An entry's type differs from its inode's.
    EntryType,
    /// An entry names an inode that does not exist (its file is left without a name).
    Dangling,
    /// An entry names another file: its own file is left without a name (an orphaned inode)
    /// and the other has one name too many.
    Unattached,
    /// The orphan entry names a linked file instead of the unlinked one (the mount would
    /// delete the linked file).
    StaleOrphan,
    /// The orphan record fails its CRC (the unlinked inode is reclaimed by the mount).
    OrphanUnreadable,
    /// The segment table's live bytes of a used segment are wrong (a leaked segment).
    SegtabLive,
    /// A used segment is marked free in the segment table (the mount would reuse it).
    SegtabFree,
    /// A superblock copy fails its CRC (rewritten from the other by the repair's mount).
    SuperblockCopy,
    /// An older checkpoint slot fails its CRC (its area is moved off and erased).
    CheckpointSlot,
}

const KINDS: [Kind; 17] = [
    Kind::DataUnreadable,
    Kind::XattrUnreadable,
    Kind::EntryUnreadable,
    Kind::FileInodeUnreadable,
    Kind::DirInodeUnreadable,
    Kind::LinkCount,
    Kind::DirSize,
    Kind::Parent,
    Kind::EntryType,
    Kind::Dangling,
    Kind::Unattached,
    Kind::StaleOrphan,
    Kind::OrphanUnreadable,
    Kind::SegtabLive,
    Kind::SegtabFree,
    Kind::SuperblockCopy,
    Kind::CheckpointSlot,
];

impl Kind {
    /// Whether `-p` repairs it completely.
    fn preen(self) -> bool {
        !matches!(
            self,
            Kind::DataUnreadable
                | Kind::XattrUnreadable
                | Kind::EntryUnreadable
                | Kind::FileInodeUnreadable
                | Kind::DirInodeUnreadable
        )
    }
}

/// What a damage touched, for the check after the repair.
#[derive(Debug, Default)]
struct Target {
    path: String,
    other: String,
    block: u64,
    /// A name the repair may add: the lost+found entry of the unlinked inode whose orphan
    /// entry a StaleOrphan damage moved. The last unlink does not rewrite an inode record
    /// (the orphan entry alone says it has no links), so without its entry the inode looks
    /// like a file that lost its names, and the repair keeps it (as e2fsck keeps an unattached
    /// inode that counts links) rather than delete it.
    may_add: String,
}

fn files(s: &Snap, pred: impl Fn(&Ent) -> bool) -> Vec<String> {
    s.iter().filter(|(_, e)| pred(e)).map(|(p, _)| p.clone()).collect()
}

fn regular(e: &Ent) -> bool {
    e.mode & S_IFMT == S_IFREG && e.nlink == 1
}

fn dir_key(s: &Snap, path: &str) -> Key {
    // the entry's key: found by scanning the parent's entries in the index
    let (parent_ino, name) = match path.rsplit_once('/') {
        Some((p, n)) => (s[p].ino, n),
        None => (ROOT_INO, path),
    };
    Key::new(parent_ino, kind::DENT, ferrofs_engine::format::name_hash(name.as_bytes()) << 8)
}

/// Damage `img` in the way of `k`; returns what was hit.
fn damage(img: &Path, k: Kind, s: &Snap, rng: &mut Rng) -> Target {
    let mut t = Target::default();
    match k {
        Kind::DataUnreadable => {
            t.path = rng.pick(&files(s, |e| regular(e) && e.size > 4096));
            let e = &s[&t.path];
            t.block = rng.below(e.size.div_ceil(4096));
            edit_record(img, locate(img, Key::new(e.ino, kind::DATA, t.block)), false, |_| {});
        }
        Kind::XattrUnreadable => {
            t.path = rng.pick(&files(s, |e| e.xattrs.len() == 2));
            let key = Key::new(s[&t.path].ino, kind::XATTR, ferrofs_engine::format::name_hash(b"user.tag") << 8);
            edit_record(img, locate(img, key), false, |_| {});
        }
        Kind::EntryUnreadable | Kind::Dangling | Kind::Unattached | Kind::EntryType => {
            t.path = rng.pick(&files(s, |e| regular(e) && e.xattrs.is_empty()));
            let loc = locate(img, dir_key(s, &t.path));
            match k {
                Kind::EntryUnreadable => edit_record(img, loc, false, |_| {}),
                Kind::Dangling => edit_record(img, loc, true, |p| p[..8].copy_from_slice(&999_999u64.to_le_bytes())),
                Kind::Unattached => {
                    t.other = rng.pick(&files(s, |e| regular(e) && e.ino != s[&t.path].ino));
                    let other = s[&t.other].ino;
                    edit_record(img, loc, true, |p| p[..8].copy_from_slice(&other.to_le_bytes()));
                }
                _ => edit_record(img, loc, true, |p| p[8] = FileType::Fifo.dtype()),
            }
        }
        Kind::FileInodeUnreadable => {
            t.path = rng.pick(&files(s, |e| regular(e) && e.size > 0));
            edit_record(img, locate(img, Key::new(s[&t.path].ino, kind::INODE, 0)), false, |_| {});
        }
        Kind::DirInodeUnreadable | Kind::DirSize | Kind::Parent => {
            t.path = rng.pick(&files(s, |e| e.mode & S_IFMT == S_IFDIR && e.size > 0));
            let e = &s[&t.path];
            let loc = locate(img, Key::new(e.ino, kind::INODE, 0));
            match k {
                Kind::DirInodeUnreadable => edit_record(img, loc, false, |_| {}),
                Kind::DirSize => edit_record(img, loc, true, |p| p[24..32].copy_from_slice(&(e.size + 3).to_le_bytes())),
                _ => {
                    t.other = rng.pick(&files(s, |x| x.mode & S_IFMT == S_IFDIR && x.ino != e.parent && x.ino != e.ino));
                    let wrong = s[&t.other].ino;
                    edit_record(img, loc, true, |p| p[80..88].copy_from_slice(&wrong.to_le_bytes()));
                }
            }
        }
        Kind::LinkCount => {
            t.path = rng.pick(&files(s, |e| e.mode & S_IFMT != S_IFDIR));
            let e = &s[&t.path];
            let wrong = e.nlink + 1 + rng.below(3) as u32;
            edit_record(img, locate(img, Key::new(e.ino, kind::INODE, 0)), true, |p| p[20..24].copy_from_slice(&wrong.to_le_bytes()));
        }
        Kind::StaleOrphan | Kind::OrphanUnreadable => {
            t.path = rng.pick(&files(s, regular));
            let victim = s[&t.path].ino;
            let mut dev = open_existing(img, &GeoHints::default(), true).unwrap();
            let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
            let cps = read_checkpoints(dev.flash(), &sb);
            let (_, h, _) = newest_valid(&cps).unwrap();
            let (m, _) = ferrofs_tools::layout::index_entries(dev.flash(), &sb, h, (0, 0)).unwrap();
            let (&okey, &loc) = m.iter().find(|(k, _)| k.kind == kind::ORPHAN).expect("the base has an orphan");
            drop(dev);
            if k == Kind::OrphanUnreadable {
                edit_record(img, loc, false, |_| {});
            } else {
                // the index entry and the record's key both name the victim
                let nkey = Key::new(0, kind::ORPHAN, victim);
                t.may_add = format!("lost+found/#{}", okey.key);
                rekey_index(img, okey, nkey);
                edit_record_header(img, loc, |hdr| hdr[32..40].copy_from_slice(&victim.to_le_bytes()));
            }
        }
        Kind::SuperblockCopy => {
            let mut dev = open_existing(img, &GeoHints::default(), true).unwrap();
            let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
            drop(dev);
            let copy = rng.below(2) as usize;
            t.block = u64::from(sb.sb_segs[copy]);
            flip(img, sb.sb_segs[copy], 20 + rng.below(100), 0x10);
        }
        Kind::CheckpointSlot => {
            let mut dev = open_existing(img, &GeoHints::default(), true).unwrap();
            let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
            let cps = read_checkpoints(dev.flash(), &sb);
            let (newest, _, _) = newest_valid(&cps).unwrap();
            let older: Vec<(usize, u32)> = cps
                .iter()
                // an older slot of the newest's area: not the last written there (that one
                // would be a torn write, a warning)
                .filter(|e| matches!(e.state, ferrofs_tools::layout::CpSlot::Valid(..)) && e.area == newest.area && e.slot < newest.slot)
                .map(|e| (e.area, e.slot))
                .collect();
            drop(dev);
            let (area, slot) = rng.pick(&older);
            let off = u64::from(slot) * u64::from(sb.cp_slot_size) + 30;
            let ss = u64::from(sb.segment_size);
            flip(img, sb.cp_segs[area][(off / ss) as usize], off % ss, 0x01);
        }
        Kind::SegtabLive | Kind::SegtabFree => {
            let (loc, ss) = segtab_loc(img);
            let mut dev = open_existing(img, &GeoHints::default(), true).unwrap();
            let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
            let cps = read_checkpoints(dev.flash(), &sb);
            let (_, h, segs) = newest_valid(&cps).unwrap();
            let heads: Vec<u32> = h.heads.iter().map(|x| x.seg).collect();
            let used: Vec<u32> = (0..segs.len() as u32)
                .filter(|&i| {
                    let si = &segs[i as usize];
                    si.state == ferrofs_engine::format::segstate::FULL && si.live > 0 && !heads.contains(&i) && i != loc.seg
                })
                .collect();
            drop(dev);
            let seg = rng.pick(&used);
            let live = segs[seg as usize].live;
            assert!(seg < 200 && live <= ss);
            t.block = u64::from(seg);
            let at = 6 + 18 * seg as usize;
            edit_record(img, loc, true, |p| {
                if k == Kind::SegtabFree {
                    p[at] = ferrofs_engine::format::segstate::FREE;
                    p[at + 2..at + 6].copy_from_slice(&0u32.to_le_bytes());
                } else {
                    p[at + 2..at + 6].copy_from_slice(&(live / 2 + 7).to_le_bytes());
                }
            });
        }
    }
    t
}

/// Change key `from` to `to` in every index node on the medium that holds it (CRC fixed up),
/// and in the node record's own key when it is the node's first.
fn rekey_index(img: &Path, from: Key, to: Key) {
    let mut dev = open_existing(img, &GeoHints::default(), true).unwrap();
    let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
    let mut nodes = Vec::new();
    for s in 0..sb.segment_count {
        let Ok(sc) = ferrofs_tools::layout::scan_segment(dev.flash(), &sb, s) else { continue };
        nodes.extend(sc.records.into_iter().filter(|r| r.hdr.rtype == ferrofs_engine::format::rtype::INDEX).map(|r| r.loc));
    }
    drop(dev);
    let enc = |k: Key| {
        let mut b = [0u8; Key::SIZE];
        k.put(&mut ferrofs_engine::codec::Writer::new(&mut b)).unwrap();
        b
    };
    let (old, new) = (enc(from), enc(to));
    let mut hits = 0;
    for loc in nodes {
        let mut first = false;
        let mut found = false;
        edit_record(img, loc, true, |p| {
            if p[0] == ferrofs_engine::format::INDEX_COMPACT_LEAF {
                // a compact leaf (format.md 5.1): decoded, rekeyed and encoded at its length
                let mut hit = (false, false);
                let done = ferrofs_tools::hostile::reencode_compact_leaf(p, |v| {
                    for (i, e) in v.iter_mut().enumerate() {
                        if e.0 == from {
                            e.0 = to;
                            hit = (true, i == 0);
                        }
                    }
                });
                if hit.0 {
                    assert!(done, "the rekeyed compact leaf does not fit its record");
                    (found, first) = hit;
                }
                return;
            }
            let count = u16::from_le_bytes([p[1], p[2]]) as usize;
            for i in 0..count {
                let at = 3 + i * (Key::SIZE + Loc::SIZE);
                if p[at..at + Key::SIZE] == old {
                    p[at..at + Key::SIZE].copy_from_slice(&new);
                    found = true;
                    first = i == 0;
                }
            }
        });
        if found {
            hits += 1;
        }
        if first {
            // header key: ino at 24, key at 32, kind at 40
            edit_record_header(img, loc, |h| {
                if h[24..32] == from.ino.to_le_bytes() && h[32..40] == from.key.to_le_bytes() && h[40] == from.kind {
                    h[24..32].copy_from_slice(&to.ino.to_le_bytes());
                    h[32..40].copy_from_slice(&to.key.to_le_bytes());
                    h[40] = to.kind;
                }
            });
        }
    }
    assert!(hits > 0, "no index node holds {from:?}");
}

/// Like [`edit_record`] for the header (key fields), CRC fixed up.
fn edit_record_header(img: &Path, loc: Loc, edit: impl FnOnce(&mut [u8])) {
    let mut dev = open_existing(img, &GeoHints::default(), true).unwrap();
    let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
    drop(dev);
    let base = sim_data_offset(img) + u64::from(loc.seg) * u64::from(sb.segment_size) + u64::from(loc.off);
    let mut b = std::fs::read(img).unwrap();
    let rec = &mut b[base as usize..base as usize + loc.len as usize];
    let (hdr, payload) = rec.split_at_mut(REC_HDR);
    edit(hdr);
    hdr[4..8].fill(0);
    let c = ferrofs_engine::crc::crc32c_update(ferrofs_engine::crc::crc32c_update(seed(&sb), hdr), payload);
    hdr[4..8].copy_from_slice(&c.to_le_bytes());
    std::fs::write(img, b).unwrap();
}

/// Check the repaired tree against the one before the damage: every path the damage did not
/// touch is identical; the touched ones are as the repair says.
fn verify(k: Kind, t: &Target, before: &Snap, after: &Snap) -> Result<(), String> {
    let lf = |p: &str| format!("lost+found/#{}", before[p].ino);
    let mut skip: Vec<String> = vec![t.path.clone()];
    let same_but = |a: &Ent, b: &Ent, what: &str| -> Result<(), String> {
        let mut x = b.clone();
        match what {
            "nlink" => x.nlink = a.nlink,
            "attrs" => {
                x.mode = a.mode;
                x.uid = a.uid;
                x.gid = a.gid;
            }
            _ => {}
        }
        if *a == x {
            Ok(())
        } else {
            Err(format!("{what}: want {a:?}\n got {b:?}"))
        }
    };
    let get = |p: &str| after.get(p).ok_or_else(|| format!("{p} missing after the repair"));
    match k {
        Kind::DataUnreadable => {
            let (a, b) = (&before[&t.path], get(&t.path)?);
            let mut want = a.data.clone();
            let lo = (t.block * 4096) as usize;
            let hi = (lo + 4096).min(want.len());
            want[lo..hi].fill(0);
            if b.size != a.size || b.data != want {
                return Err(format!("{}: block {} not a hole of zeros, or the size changed", t.path, t.block));
            }
        }
        Kind::XattrUnreadable => {
            let (a, b) = (&before[&t.path], get(&t.path)?);
            let want: Vec<_> = a.xattrs.iter().filter(|x| x.0 != b"user.tag").cloned().collect();
            if b.xattrs != want || b.data != a.data {
                return Err(format!("{}: xattrs {:?}", t.path, b.xattrs));
            }
        }
        Kind::EntryUnreadable | Kind::Dangling => {
            if after.contains_key(&t.path) {
                return Err(format!("{}: the damaged entry is still there", t.path));
            }
            let p = lf(&t.path);
            same_but(&before[&t.path], get(&p)?, "")?;
            skip.push(p);
            // its directory has one entry less
            if let Some((d, _)) = t.path.rsplit_once('/') {
                let mut want = before[d].clone();
                want.size -= 1;
                same_but(&want, get(d)?, "")?;
                skip.push(d.to_string());
            }
        }
        Kind::Unattached => {
            let p = lf(&t.path);
            same_but(&before[&t.path], get(&p)?, "")?;
            // the damaged entry now names the other file, which has two names
            let (o, b) = (&before[&t.other], get(&t.path)?);
            let mut want = o.clone();
            want.nlink = 2;
            same_but(&want, b, "")?;
            same_but(&want, get(&t.other)?, "")?;
            skip.push(p);
            skip.push(t.other.clone());
        }
        Kind::FileInodeUnreadable | Kind::DirInodeUnreadable => {
            let (a, b) = (&before[&t.path], get(&t.path)?);
            same_but(a, b, "attrs")?;
            let perm = if k == Kind::DirInodeUnreadable { S_IFDIR | 0o700 } else { S_IFREG | 0o600 };
            if (b.mode, b.uid, b.gid) != (perm, 0, 0) {
                return Err(format!("{}: recreated with mode {:o} owner {}:{}", t.path, b.mode, b.uid, b.gid));
            }
        }
        _ => skip.clear(),
    }
    for (p, a) in before {
        if skip.contains(p) {
            continue;
        }
        let b = get(p)?;
        same_but(a, b, "").map_err(|e| format!("{p} (untouched by the damage): {e}"))?;
    }
    for p in after.keys() {
        if !before.contains_key(p) && !skip.contains(p) && p != "lost+found" && *p != t.may_add {
            return Err(format!("{p}: new after the repair"));
        }
    }
    Ok(())
}

fn copy(src: &Path, dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::copy(src, &p).unwrap();
    p
}

#[test]
fn repair_every_damage_kind() {
    let seeds: u64 = std::env::var("FERROFS_REPAIR_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let t = tmp();
    let (mut cases, mut detected, mut repaired, mut clean, mut intact, mut preen_left) = (0, 0, 0, 0, 0, 0);
    let mut failures = Vec::new();
    for sd in 0..seeds {
        let base = t.path().join(format!("base{sd}.img"));
        let before = build(sd + 1, &base);
        assert_eq!(run(FSCK, &["-n", p(&base)]).code, 0, "the undamaged base is not clean");
        for (ki, &k) in KINDS.iter().enumerate() {
            cases += 1;
            let img = copy(&base, t.path(), "img");
            let mut rng = Rng((sd + 1) * 7919 + ki as u64 * 104_729);
            let tg = damage(&img, k, &before, &mut rng);
            let label = format!("{k:?} seed {sd} ({})", tg.path);
            let damaged = std::fs::read(&img).unwrap();
            let r = run(FSCK, &["-n", p(&img)]);
            if r.code == 4 {
                detected += 1;
            } else {
                failures.push(format!("{label}: fsck -n exit {} on the damaged image:\n{}", r.code, r.all()));
                continue;
            }
            assert!(std::fs::read(&img).unwrap() == damaged, "{label}: -n wrote");
            // without -p or -y nothing is repaired either
            if sd == 0 && ki == 0 {
                let r = run(FSCK, &[p(&img)]);
                assert_eq!(r.code, 4, "{label}: {}", r.all());
                assert!(r.stdout.contains("-y"), "{}", r.stdout);
                assert!(std::fs::read(&img).unwrap() == damaged, "{label}: a plain check wrote");
            }
            // preen: complete for the kinds it may repair, else what it may do and exit 4
            let use_preen = !k.preen() || sd % 2 == 0;
            let mut last = if use_preen {
                let r = run(FSCK, &["-p", p(&img)]);
                if !k.preen() {
                    if r.code == 4 && r.stdout.contains("left (needs -y)") {
                        preen_left += 1;
                    } else {
                        failures.push(format!("{label}: fsck -p exit {}:\n{}", r.code, r.all()));
                        continue;
                    }
                    run(FSCK, &["-y", p(&img)])
                } else {
                    r
                }
            } else {
                run(FSCK, &["-y", p(&img)])
            };
            if last.code == 1 {
                repaired += 1;
            } else {
                failures.push(format!("{label}: repair exit {}:\n{}", last.code, last.all()));
                continue;
            }
            last = run(FSCK, &["-n", p(&img)]);
            if last.code == 0 {
                clean += 1;
            } else {
                failures.push(format!("{label}: fsck -n after the repair exit {}:\n{}", last.code, last.all()));
                continue;
            }
            let after = snap(&mut mount_ro(&img));
            match verify(k, &tg, &before, &after) {
                Ok(()) => intact += 1,
                Err(e) => failures.push(format!("{label}: {e}")),
            }
        }
    }
    eprintln!(
        "fsck repair: {} kinds x {seeds} seeds = {cases} damaged images: {detected} detected by -n (exit 4), \
         {preen_left} partly left by -p (exit 4, need -y), {repaired} repaired (exit 1), {clean} clean afterwards (-n exit 0), \
         {intact} with every untouched file intact",
        KINDS.len()
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n\n"));
}

/// The engine API on the flash simulator: a page made uncorrectable (as NAND's ECC reports it)
/// under records of every kind but the index's; `Engine::repair` (all repairs) on a read-only
/// mount, then fsck is clean and every file with no record in that page is intact.
#[test]
fn repair_uncorrectable_pages_through_the_engine() {
    let t = tmp();
    let img = t.path().join("base.img");
    let before = build(42, &img);
    let AnySim::Nand(base) = AnySim::load(&img).unwrap() else { panic!("not NAND") };
    // every page holding live keyed records and no index node or segment table
    let mut dev = open_existing(&img, &GeoHints::default(), true).unwrap();
    let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
    let cps = read_checkpoints(dev.flash(), &sb);
    let (_, h, _) = newest_valid(&cps).unwrap();
    let (live, _) = ferrofs_tools::layout::index_entries(dev.flash(), &sb, h, (0, u64::MAX)).unwrap();
    let page = sb.write_unit;
    let mut pages: BTreeMap<(u32, u32), Vec<Key>> = BTreeMap::new();
    let mut excluded = std::collections::BTreeSet::new();
    for s in 0..sb.segment_count {
        let Ok(sc) = ferrofs_tools::layout::scan_segment(dev.flash(), &sb, s) else { continue };
        for r in &sc.records {
            if r.hdr.rtype == ferrofs_engine::format::rtype::INDEX || r.hdr.rtype == 9 || r.hdr.rtype == ferrofs_engine::format::rtype::SEGHDR {
                for pg in r.loc.off / page..=(r.loc.off + r.loc.len - 1) / page {
                    excluded.insert((s, pg));
                }
            }
        }
    }
    for (k, l) in &live {
        for pg in l.off / page..=(l.off + l.len - 1) / page {
            pages.entry((l.seg, pg)).or_default().push(*k);
        }
    }
    drop(dev);
    let mut rng = Rng(12345);
    let candidates: Vec<_> = pages.iter().filter(|(p, _)| !excluded.contains(p)).collect();
    // up to 6 pages holding each kind of record (data pages are most of them)
    let mut chosen = Vec::new();
    for k in [kind::INODE, kind::DENT, kind::XATTR, kind::DATA, kind::ORPHAN] {
        let with: Vec<_> = candidates.iter().filter(|(_, keys)| keys.iter().any(|x| x.kind == k)).collect();
        for _ in 0..6.min(with.len()) {
            chosen.push(*with[rng.below(with.len() as u64) as usize]);
        }
    }
    assert!(chosen.len() > 10, "{} pages chosen", chosen.len());
    let (mut tried, mut clean, mut intact) = (0, 0, 0);
    let mut kinds_hit = std::collections::BTreeSet::new();
    for (&(seg, pg), keys) in chosen {
        tried += 1;
        let mut sim = base.clone();
        sim.inject_uncorrectable(seg, pg).unwrap();
        let mut fs = Fs::mount(Dev::Sim(AnySim::Nand(sim)), MountOptions { read_only: true, ..Default::default() })
            .map_err(|(e, _)| e)
            .unwrap();
        assert!(fs.fsck().unwrap().problems > 0, "page {seg}:{pg} damaged, fsck finds nothing");
        let mut made = Vec::new();
        let rep = fs
            .repair(RepairLevel::All, now(), &mut |r: &Repair, o| {
                made.push((*r, o));
                true
            })
            .unwrap();
        assert!(made.iter().all(|(_, o)| *o == RepairOutcome::Done), "page {seg}:{pg}: {made:?}");
        assert_eq!(rep.problems_after, 0, "page {seg}:{pg}: {made:?}");
        let dev = fs.unmount().map_err(|(e, _)| e).unwrap();
        let mut fs = Fs::mount(dev, MountOptions::default()).map_err(|(e, _)| e).unwrap();
        if fs.fsck().unwrap().problems == 0 {
            clean += 1;
        }
        let after = snap(&mut fs);
        let touched: Vec<u64> = keys.iter().map(|k| if k.kind == kind::DENT { u64::MAX } else { k.ino }).collect();
        for k in keys {
            kinds_hit.insert(k.kind);
        }
        let dent_dirs: Vec<u64> = keys.iter().filter(|k| k.kind == kind::DENT).map(|k| k.ino).collect();
        // touched: an inode with a record in the page, or a name in a directory whose entries
        // are in the page (it may now live in /lost+found), and everything below them
        let parent_of = |path: &str| path.rsplit_once('/').map_or(ROOT_INO, |(d, _)| before[d].ino);
        let touched_paths: Vec<&String> =
            before.iter().filter(|(p, a)| touched.contains(&a.ino) || dent_dirs.contains(&parent_of(p))).map(|(p, _)| p).collect();
        let mut ok = true;
        for (path, a) in &before {
            if touched_paths.iter().any(|t| path == *t || path.starts_with(&format!("{t}/"))) {
                continue;
            }
            // a directory that lost an entry has a smaller size (and link count, for a
            // subdirectory): everything else about it stays
            let relaxed = |b: &Ent| {
                let mut b = b.clone();
                if dent_dirs.contains(&a.ino) {
                    (b.size, b.nlink) = (a.size, a.nlink);
                }
                b
            };
            if after.get(path).map(relaxed).as_ref() != Some(a) {
                ok = false;
                eprintln!("page {seg}:{pg} ({keys:?}): {path} differs: {:?}", after.get(path));
            }
        }
        if ok {
            intact += 1;
        }
    }
    eprintln!(
        "fsck repair (engine API, uncorrectable NAND pages): {tried} pages tried, record kinds hit {kinds_hit:?} \
         (0 inode, 1 entry, 2 xattr, 3 data, 4 orphan), {clean} clean afterwards, {intact} with every untouched file intact"
    );
    assert!(kinds_hit.len() >= 4, "{kinds_hit:?}");
    assert_eq!((clean, intact), (tried, tried));
}

/// A checkpoint whose blob names SEGTAB records written by earlier checkpoints (a chunk that
/// does not change is named from two twins in turn): `fsck -n` calls it clean; a wrong entry in
/// such a record (a free segment recorded full with live bytes, CRC fixed up) is found by
/// `-n`, repaired by `-p` and by `-y`, and every file is intact afterwards.
#[test]
fn repair_a_checkpoint_naming_earlier_segment_table_records() {
    let t = tmp();
    let base = t.path().join("twins.img");
    // 512 segments: three chunks; the data stays in the first, the last is always written
    let sim = NandSim::new(NandConfig::with_layout(2048, 64, 512)).unwrap();
    let dev = Fs::format(Dev::Sim(AnySim::Nand(sim)), &FormatOptions { serial: 0x7a15, ..Default::default() }, now())
        .map_err(|(e, _)| e)
        .unwrap();
    let mut fs = Fs::mount(dev, MountOptions::default()).map_err(|(e, _)| e).unwrap();
    let reg = CreateArgs { mode: S_IFREG | 0o644, uid: 1000, gid: 100, rdev: 0 };
    let mut inos = Vec::new();
    for i in 0..8u64 {
        let f = fs.create(ROOT_INO, format!("f{i}").as_bytes(), &reg, now()).unwrap();
        fs.write(f.ino, 0, &prng_bytes(500 + i, 100_000), now()).unwrap();
        inos.push(f.ino);
    }
    for r in 0..6u64 {
        fs.write(inos[r as usize], 4096 * r, &[r as u8 + 1; 4096], now()).unwrap();
        fs.sync().unwrap();
    }
    let before = snap(&mut fs);
    let mut dev = fs.unmount().map_err(|(e, _)| e).unwrap();
    dev.persist(&base).unwrap();
    // the newest checkpoint names a record of the one before the previous (never the previous's)
    let cps = checkpoint_chunks(&base);
    assert!(cps.len() >= 3, "{cps:?}");
    let (newest, prev, older) = (&cps[cps.len() - 1].1, &cps[cps.len() - 2].1, &cps[cps.len() - 3].1);
    assert!(newest.iter().all(|l| !prev.contains(l)), "the newest and the previous checkpoint share a record: {cps:?}");
    let c = (0..newest.len()).find(|&c| newest[c] == older[c]).expect("no chunk named from an earlier checkpoint");
    assert_eq!(run(FSCK, &["-n", p(&base)]).code, 0, "the undamaged image is not clean");
    // a free segment of that chunk recorded full with live bytes (a leak the repair undoes)
    let mut dev = open_existing(&base, &GeoHints::default(), true).unwrap();
    let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
    let all = read_checkpoints(dev.flash(), &sb);
    let segs = newest_valid(&all).unwrap().2.to_vec();
    drop(dev);
    let first = c * 200;
    let seg = (first..(first + 200).min(segs.len()))
        .find(|&i| segs[i].state == ferrofs_engine::format::segstate::FREE)
        .expect("a free segment in the chunk");
    for opt in ["-p", "-y"] {
        let img = copy(&base, t.path(), "img");
        edit_record(&img, newest[c], true, |pl| {
            let at = 6 + 18 * (seg - first);
            pl[at] = ferrofs_engine::format::segstate::FULL;
            pl[at + 2..at + 6].copy_from_slice(&5000u32.to_le_bytes());
        });
        let r = run(FSCK, &["-n", p(&img)]);
        assert_eq!(r.code, 4, "{opt}: the damaged image: {}", r.all());
        let r = run(FSCK, &[opt, p(&img)]);
        assert_eq!(r.code, 1, "fsck {opt}: {}", r.all());
        let r = run(FSCK, &["-n", p(&img)]);
        assert_eq!(r.code, 0, "fsck -n after {opt}: {}", r.all());
        let after = snap(&mut mount_ro(&img));
        assert!(after == before, "{opt}: the files differ after the repair");
    }
}
