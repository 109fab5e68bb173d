//! An independent reader written from docs/format.md (offsets hard-coded from the document, no
//! engine decoding code): it must find the superblock, the newest checkpoint, the segment table,
//! walk the index and read inodes, directory entries, xattrs and file data back.

use std::collections::BTreeMap;

use ferrofs_engine::crc::{crc32c, crc32c_update};
use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, FormatOptions, MountOptions, ROOT_INO};
use ferrofs_engine_tests::*;

fn u16at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}
fn u32at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

struct Img<'a> {
    raw: &'a [u8],
    seg_size: usize,
    seed: u32,
}

impl Img<'_> {
    fn at(&self, seg: u32, off: u32, len: usize) -> &[u8] {
        let s = seg as usize * self.seg_size + off as usize;
        &self.raw[s..s + len]
    }
    /// Read and verify a record (3.1): returns (type, ino, kind, key, payload).
    fn record(&self, seg: u32, off: u32, len: u32) -> (u8, u64, u8, u64, Vec<u8>) {
        let r = self.at(seg, off, len as usize);
        assert_eq!(u16at(r, 0), 0xF5A5, "record magic");
        let plen = u32at(r, 44) as usize;
        assert_eq!(plen + 48, len as usize);
        let mut h = r[..48].to_vec();
        h[4..8].fill(0);
        let crc = crc32c_update(crc32c_update(self.seed, &h), &r[48..]);
        assert_eq!(crc, u32at(r, 4), "record CRC");
        (r[2], u64at(r, 24), r[40], u64at(r, 32), r[48..].to_vec())
    }
}

type Key = (u64, u8, u64);

thread_local! {
    /// Compact leaves the walk decoded.
    static COMPACT_SEEN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn walk(img: &Img<'_>, seg: u32, off: u32, len: u32, level: u8, out: &mut BTreeMap<Key, (u32, u32, u32)>) {
    let (t, ..) = img.record(seg, off, len);
    assert_eq!(t, 8, "INDEX record");
    let p = img.record(seg, off, len).4;
    let count = u16at(&p, 1) as usize;
    if p[0] == 0x80 {
        // 5.1: a compact leaf, each entry a flags byte and varints against the entry before
        assert_eq!(level, 0, "a compact leaf where the parent says level {level}");
        let varint = |at: &mut usize| {
            let mut v = 0u64;
            for shift in 0..10 {
                let b = p[*at];
                *at += 1;
                v |= u64::from(b & 0x7f) << (7 * shift);
                if b & 0x80 == 0 {
                    return v;
                }
            }
            panic!("varint of more than 10 bytes");
        };
        let (mut pk, mut pl): (Key, (u32, u32, u32)) = ((0, 0, 0), (0, 0, 0));
        let mut at = 3;
        for _ in 0..count {
            let f = p[at];
            at += 1;
            assert_eq!(f & 0xc0, 0, "flag bits 6-7");
            let ino = if f & 1 != 0 { varint(&mut at) } else { pk.0 };
            let kind = if f & 2 != 0 {
                at += 1;
                p[at - 1]
            } else {
                pk.1
            };
            let key = if f & 4 != 0 { varint(&mut at) } else { pk.2 + varint(&mut at) };
            let seg = if f & 8 != 0 { varint(&mut at) as u32 } else { pl.0 };
            let off = varint(&mut at) as u32 | if f & 32 != 0 { 1 << 31 } else { 0 };
            let len = if f & 16 != 0 { varint(&mut at) as u32 } else { pl.2 };
            (pk, pl) = ((ino, kind, key), (seg, off, len));
            out.insert(pk, pl);
        }
        assert_eq!(at, p.len(), "bytes after the last entry");
        COMPACT_SEEN.with(|c| c.set(c.get() + 1));
        return;
    }
    assert_eq!(p[0], level);
    for i in 0..count {
        let e = &p[3 + i * 29..3 + (i + 1) * 29];
        let key = (u64at(e, 0), e[8], u64at(e, 9));
        let loc = (u32at(e, 17), u32at(e, 21), u32at(e, 25));
        if level == 0 {
            out.insert(key, loc);
        } else {
            walk(img, loc.0, loc.1, loc.2, level - 1, out);
        }
    }
}

#[test]
fn independent_reader_follows_the_document() {
    let serial = 0x1234_5678_9abc_def0u64;
    let f = RamFlash::new_nand(32 * 1024, 64, 512);
    let fo = FormatOptions { serial, ..Default::default() };
    let f = mkfs(f, &fo, ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let d = fs.mkdir(ROOT_INO, b"dir", 0o750, 7, 8, ts(1)).unwrap();
    let file = fs.create(d.ino, b"hello.txt", &CreateArgs { mode: S_IFREG | 0o640, uid: 1, gid: 2, rdev: 0 }, ts(2)).unwrap();
    let content: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    fs.write(file.ino, 0, &content, ts(3)).unwrap();
    fs.setxattr(file.ino, b"user.k", b"value", 0, ts(4)).unwrap();
    let flash = fs.unmount().map_err(|e| e.0).unwrap();
    let raw = flash.raw();
    let seg_size = 32 * 1024;

    // 2. superblock at offset 0 of the first good segment
    let sb = &raw[..209];
    assert_eq!(u32at(sb, 0), 0x4253_4646);
    let mut z = sb.to_vec();
    z[4..8].fill(0);
    assert_eq!(crc32c(&z), u32at(sb, 4), "superblock CRC");
    assert_eq!(u32at(sb, 8), 1, "version");
    assert_eq!(u64at(sb, 20) & 1, 1, "hashed dirs");
    assert_eq!(u64at(sb, 20) & 8, 8, "compact index leaves (set by mkfs)");
    assert_eq!(sb[36], 0, "NAND");
    assert_eq!(u32at(sb, 37), seg_size as u32);
    assert_eq!(u32at(sb, 41), 64);
    assert_eq!(u32at(sb, 45), 512);
    assert_eq!(u64at(sb, 57), serial);
    let area_segs = u32at(sb, 73) as usize;
    let slot = u32at(sb, 77) as usize;
    let areas: Vec<Vec<u32>> = (0..2).map(|a| (0..area_segs).map(|i| u32at(sb, 81 + a * 64 + i * 4)).collect()).collect();
    let seed = (serial as u32) ^ ((serial >> 32) as u32);
    let img = Img { raw, seg_size, seed };

    // 4. newest valid checkpoint over both areas
    let mut best: Option<(u64, Vec<u8>)> = None;
    // every valid checkpoint by sequence, with its whole slot (the extension and twin map follow the blob)
    let mut valid: BTreeMap<u64, (Vec<u8>, Vec<u8>)> = BTreeMap::new();
    for area in &areas {
        let bytes: Vec<u8> = area.iter().flat_map(|&s| img.at(s, 0, seg_size).to_vec()).collect();
        for (seq, blob, whole) in area_slots(&bytes, slot, serial) {
            if best.as_ref().is_none_or(|(s, _)| seq > *s) {
                best = Some((seq, blob.clone()));
            }
            valid.insert(seq, (blob, whole));
        }
    }
    let (_, cp) = best.expect("a valid checkpoint");
    assert_eq!(u32at(&cp, 8), 1);
    let segs = u32at(&cp, 186);
    assert_eq!(segs, 64);
    let chunks = segs.div_ceil(200) as usize;
    assert_eq!(cp.len(), 190 + 12 * chunks);
    // segment table
    let mut table = Vec::new();
    for c in 0..chunks {
        let o = 190 + c * 12;
        let (t, ino, kind, key, p) = img.record(u32at(&cp, o), u32at(&cp, o + 4), u32at(&cp, o + 8));
        assert_eq!((t, ino, kind, key), (9, 0, 0, c as u64), "SEGTAB record");
        assert_eq!(u32at(&p, 0) as usize, c * 200);
        let n = u16at(&p, 4) as usize;
        for i in 0..n {
            let e = &p[6 + i * 18..6 + (i + 1) * 18];
            table.push((e[0], u32at(e, 2), u32at(e, 6)));
        }
    }
    assert_eq!(table.len(), 64);
    // 4, twin map
    let cp_seq = u64at(&cp, 16);
    check_twin_map(&img, &valid, cp_seq, chunks);
    // 5. the index from the root
    assert_eq!(cp[45], 1, "has root");
    let mut index = BTreeMap::new();
    walk(&img, u32at(&cp, 32), u32at(&cp, 36), u32at(&cp, 40), cp[44], &mut index);
    assert!(COMPACT_SEEN.with(|c| c.get()) > 0, "the index has no compact leaf");
    // live bytes in the table equal what the index references (plus index nodes): at least
    let referenced: u64 = index.values().map(|l| u64::from(l.2)).sum();
    let table_live: u64 = table.iter().map(|e| u64::from(e.1)).sum();
    assert!(table_live >= referenced);
    // 3.4 root inode
    let rec = |k: Key| {
        let l = index[&k];
        img.record(l.0, l.1, l.2)
    };
    let (t, ino, kind, _, p) = rec((ROOT_INO, 0, 0));
    assert_eq!((t, ino, kind), (2, ROOT_INO, 0));
    assert_eq!(p.len(), 88);
    assert_eq!(u32at(&p, 8) & 0o170000, 0o040000);
    assert_eq!(u32at(&p, 20), 3, "root nlink = 2 + one subdirectory");
    assert_eq!(u64at(&p, 80), ROOT_INO);
    // 3.3 directory entry "dir" in the root, found through the name hash
    let h = {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in b"dir" {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01B3);
        }
        let h = (h ^ (h >> 55)) & ((1u64 << 55) - 1);
        if h == 0 { 1 } else { h }
    };
    let (t, _, _, _, p) = rec((ROOT_INO, 1, h << 8));
    assert_eq!(t, 3);
    assert_eq!(u64at(&p, 0), d.ino);
    assert_eq!(p[8], 4, "DT_DIR");
    assert_eq!(&p[10..10 + p[9] as usize], b"dir");
    let (_, _, _, _, dinode) = rec((d.ino, 0, 0));
    assert_eq!(u32at(&dinode, 8), 0o040750);
    assert_eq!((u32at(&dinode, 12), u32at(&dinode, 16)), (7, 8));
    assert_eq!(u64at(&dinode, 24), 1, "directory size = entries");
    // file inode, data blocks and xattr
    let (_, _, _, _, fin) = rec((file.ino, 0, 0));
    assert_eq!(u64at(&fin, 24), 10_000);
    assert_eq!(u32at(&fin, 20), 1);
    let mut data = Vec::new();
    for blk in 0..3u64 {
        let (t, _, _, _, p) = rec((file.ino, 3, blk));
        assert_eq!(t, 4);
        data.extend_from_slice(&p);
        data.resize(((blk + 1) * 4096) as usize, 0);
    }
    assert_eq!(&data[..10_000], &content[..]);
    let xk = index.keys().find(|k| k.0 == file.ino && k.1 == 2).copied().unwrap();
    let (t, _, _, _, p) = rec(xk);
    assert_eq!(t, 5);
    assert_eq!(&p[1..1 + p[0] as usize], b"user.k");
    assert_eq!(&p[1 + p[0] as usize..], b"value");
}

/// Section 4, twin map: after the blob and the extension's 32 bytes, "FFCT", its CRC over
/// 28 + ceil(chunks / 8) bytes with the CRC zero, this sequence, the previous one, the chunk
/// count, then one bit per chunk: set only where this checkpoint names a SEGTAB record with the
/// same entries as the one the previous checkpoint names for that chunk. Returns the chunks
/// marked twins.
fn check_twin_map(img: &Img<'_>, valid: &BTreeMap<u64, (Vec<u8>, Vec<u8>)>, cp_seq: u64, chunks: usize) -> usize {
    let (cp, slot_bytes) = &valid[&cp_seq];
    let m = &slot_bytes[cp.len() + 32..];
    assert_eq!(u32at(m, 0), 0x5443_4646, "twin map magic after the extension (an unmount's checkpoint has one)");
    let mlen = 28 + chunks.div_ceil(8);
    let mut z = m[..mlen].to_vec();
    z[4..8].fill(0);
    assert_eq!(crc32c(&z), u32at(m, 4), "twin map CRC");
    assert_eq!(u64at(m, 8), cp_seq, "twin map sequence");
    let prev_seq = u64at(m, 16);
    assert!(prev_seq < cp_seq, "the map compares with an earlier checkpoint");
    assert_eq!(u32at(m, 24) as usize, chunks, "twin map chunk count");
    let prev = &valid.get(&prev_seq).expect("the checkpoint the twin map names is still in its area").0;
    let mut twins = 0;
    for c in 0..chunks {
        if m[28 + c / 8] & (1 << (c % 8)) == 0 {
            continue;
        }
        let o = 190 + c * 12;
        let now = img.record(u32at(cp, o), u32at(cp, o + 4), u32at(cp, o + 8)).4;
        let then = img.record(u32at(prev, o), u32at(prev, o + 4), u32at(prev, o + 8)).4;
        assert_eq!(now, then, "chunk {c} marked twin but its entries differ");
        twins += 1;
    }
    twins
}

/// Every valid checkpoint over both areas (section 4), by sequence: (blob, whole slot).
fn checkpoints(img: &Img<'_>, sb: &[u8], serial: u64) -> BTreeMap<u64, (Vec<u8>, Vec<u8>)> {
    let area_segs = u32at(sb, 73) as usize;
    let slot = u32at(sb, 77) as usize;
    let mut valid = BTreeMap::new();
    for a in 0..2 {
        let bytes: Vec<u8> =
            (0..area_segs).flat_map(|i| img.at(u32at(sb, 81 + a * 64 + i * 4), 0, img.seg_size).to_vec()).collect();
        for (seq, blob, whole) in area_slots(&bytes, slot, serial) {
            valid.insert(seq, (blob, whole));
        }
    }
    valid
}

/// A device of several segment-table chunks where a few segments change: the unmount's
/// checkpoint marks the unchanged chunks as twins of the checkpoint before it, and an
/// independent reader finds each marked chunk's entries equal in both.
#[test]
fn the_twin_map_marks_only_unchanged_chunks() {
    let serial = 0x0bad_cafe_1234_5678u64;
    let segs = 700u32; // 4 chunks of 200 entries
    let f = RamFlash::new_nand(32 * 1024, segs, 512);
    let fo = FormatOptions { serial, ..Default::default() };
    let f = mkfs(f, &fo, ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let file = fs.create(ROOT_INO, b"f", &CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 }, ts(1)).unwrap();
    fs.write(file.ino, 0, &[7u8; 3000], ts(2)).unwrap();
    fs.sync().unwrap();
    fs.write(file.ino, 0, &[9u8; 100], ts(3)).unwrap();
    let flash = fs.unmount().map_err(|e| e.0).unwrap();
    let raw = flash.raw();
    let img = Img { raw, seg_size: 32 * 1024, seed: (serial as u32) ^ ((serial >> 32) as u32) };
    let valid = checkpoints(&img, &raw[..209], serial);
    let (&newest, (cp, _)) = valid.iter().next_back().expect("a valid checkpoint");
    let chunks = u32at(cp, 186).div_ceil(200) as usize;
    assert_eq!(chunks, 4);
    let twins = check_twin_map(&img, &valid, newest, chunks);
    assert!(twins > 0 && twins < chunks, "{twins} of {chunks} chunks unchanged: expected some, not all");
}

/// The valid checkpoints in a checkpoint area's bytes (format.md section 4: slots of `slot`
/// bytes, magic FFCP, CRC over the blob with its CRC field zeroed, the volume's serial): each as
/// (sequence, blob, whole slot).
fn area_slots(bytes: &[u8], slot: usize, serial: u64) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for b in bytes.chunks_exact(slot) {
        if u32at(b, 0) != 0x5043_4646 {
            continue;
        }
        let len = u32at(b, 12) as usize;
        let mut z = b[..len].to_vec();
        z[4..8].fill(0);
        if crc32c(&z) == u32at(b, 4) && u64at(b, 24) == serial {
            out.push((u64at(b, 16), b[..len].to_vec(), b.to_vec()));
        }
    }
    out
}
