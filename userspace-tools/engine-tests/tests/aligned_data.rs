//! Aligned data payloads (issue 13, format.md section 8, incompat bit 1): whole 4 KiB blocks
//! written by `write_blocks` (and moved by the GC) lie at multiples of the volume's data
//! alignment on the medium, with no record header before them, and read back; short blocks
//! stay DATA records; volumes without the bit are unchanged; hostile superblock values are
//! refused.

use ferrofs_engine::flash::{Flash, FlashKind};
use ferrofs_engine::format::{
    Superblock, BLOCK_SIZE, FEATURE_INCOMPAT_ALIGNED_DATA, SB_FULL_SIZE, SB_SIZE,
};
use ferrofs_engine::{Error, FormatOptions, MountOptions, ROOT_INO};
use ferrofs_engine_tests::*;

const BS: usize = BLOCK_SIZE as usize;

/// A block no other block of the test equals: `tag` in its first 8 bytes, pseudo-random rest.
fn block(tag: u64) -> Vec<u8> {
    let mut v = vec![0u8; BS];
    Rng::new(tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).fill(&mut v);
    v[..8].copy_from_slice(&tag.to_le_bytes());
    v
}

/// For each of `bs`, every offset of the medium where it lies whole (one pass over the medium:
/// the blocks' first 8 bytes are distinct tags).
fn all_places(raw: &[u8], bs: &[&[u8]]) -> Vec<Vec<usize>> {
    let tags: std::collections::HashMap<[u8; 8], usize> = bs.iter().enumerate().map(|(i, b)| (b[..8].try_into().unwrap(), i)).collect();
    let mut out = vec![Vec::new(); bs.len()];
    for i in 0..raw.len().saturating_sub(BS - 1) {
        if let Some(&k) = tags.get(&raw[i..i + 8]) {
            if &raw[i..i + BS] == bs[k] {
                out[k].push(i);
            }
        }
    }
    out
}

fn places(raw: &[u8], b: &[u8]) -> Vec<usize> {
    all_places(raw, &[b]).remove(0)
}

fn format(f: RamFlash, align: u32) -> Result<RamFlash, Error> {
    Fs::format(f, &FormatOptions { data_align: align, ..Default::default() }, ts(0)).map_err(|e| e.0)
}

fn superblock(f: &mut RamFlash) -> Superblock {
    for s in 0..4 {
        let mut b = vec![0u8; SB_FULL_SIZE];
        if f.read(s, 0, &mut b).is_ok() {
            if let Ok(sb) = Superblock::decode(&b) {
                return sb;
            }
        }
    }
    panic!("no superblock");
}

fn wb(fs: &mut Fs, ino: u64, first: u64, blocks: &[&[u8]], size: u64, t: i64) {
    fs.write_blocks(ino, first, blocks, size, ts(t), ts(t)).unwrap();
}

fn read_file(fs: &mut Fs, ino: u64) -> Vec<u8> {
    let sz = fs.getattr(ino).unwrap().size as usize;
    let mut v = vec![0u8; sz];
    assert_eq!(fs.read(ino, 0, &mut v).unwrap(), sz);
    v
}

#[test]
fn format_records_the_alignment_and_refuses_what_it_cannot_hold() {
    let mut f = format(RamFlash::new_nand(64 * 1024, 64, 2048), 2048).unwrap();
    let sb = superblock(&mut f);
    assert_ne!(sb.incompat & FEATURE_INCOMPAT_ALIGNED_DATA, 0);
    assert_eq!(sb.data_align, 2048);
    let mut f = format(RamFlash::with_kind(FlashKind::Block, 256 * 1024, 64, 4096), 4096).unwrap();
    assert_eq!(superblock(&mut f).data_align, 4096);
    // without it: no bit, no field (old volumes and the default)
    let mut f = format(RamFlash::new_nand(64 * 1024, 64, 2048), 0).unwrap();
    let sb = superblock(&mut f);
    assert_eq!(sb.incompat & FEATURE_INCOMPAT_ALIGNED_DATA, 0);
    assert_eq!(sb.data_align, 0);
    // not a power of two, out of range, NOR
    for a in [256u32, 3072, 8192, 1] {
        assert_eq!(format(RamFlash::new_nand(64 * 1024, 64, 512), a).err(), Some(Error::Invalid), "alignment {a}");
    }
    assert_eq!(format(RamFlash::with_kind(FlashKind::Nor, 64 * 1024, 64, 512), 512).err(), Some(Error::Invalid));
}

/// Write `sb` (encoded, then `tweak`ed) over both superblock copies of a 64 KiB-segment medium.
fn forge(f: &mut RamFlash, sb: &Superblock, tweak: impl Fn(&mut [u8])) {
    let mut b = vec![0xFFu8; SB_FULL_SIZE];
    sb.encode(&mut b).unwrap();
    tweak(&mut b);
    for seg in sb.sb_segs {
        for (i, &nb) in b.iter().enumerate() {
            let old = f.raw()[seg as usize * 64 * 1024 + i];
            f.flip(seg, i as u32, old ^ nb);
        }
    }
}

/// A superblock whose alignment field is hostile (valid CRCs) is refused at mount, and so is
/// one whose field CRC is broken.
#[test]
fn mount_refuses_a_bad_alignment() {
    let mut good = format(RamFlash::new_nand(64 * 1024, 64, 2048), 2048).unwrap();
    let sb = superblock(&mut good);
    assert!(Fs::mount(good.clone(), MountOptions::default()).is_ok());
    for v in [0u32, 100, 3000, 8192, u32::MAX] {
        let mut f = good.clone();
        forge(&mut f, &Superblock { data_align: v, ..sb }, |_| {});
        assert_eq!(Fs::mount(f, MountOptions::default()).err().map(|e| e.0), Some(Error::BadFormat), "data_align {v}");
    }
    let mut f = good.clone();
    forge(&mut f, &sb, |b| b[SB_SIZE + 20] ^= 1);
    assert!(Fs::mount(f, MountOptions::default()).is_err(), "a broken field CRC mounted");
}

/// Whole blocks lie at multiples of the alignment and read back (through `read`, `read_blocks`,
/// after a remount and after a crash), short blocks stay records, and the GC keeps them
/// aligned when it moves them.
fn aligned_round_trip(f: RamFlash, align: u32) {
    let f = format(f, align).unwrap();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let ino = fs.create(ROOT_INO, b"f", &reg(), ts(1)).unwrap().ino;
    let blocks: Vec<Vec<u8>> = (0..40).map(block).collect();
    let mut tail = block(1000);
    tail.truncate(1000);
    // 40 whole blocks in batches of 1, 3, 32 and 4, then a short EOF block
    let mut at = 0usize;
    for (n, t) in [(1usize, 2i64), (3, 3), (32, 4), (4, 5)] {
        let refs: Vec<&[u8]> = blocks[at..at + n].iter().map(|b| b.as_slice()).collect();
        wb(&mut fs, ino, at as u64, &refs, ((at + n) * BS) as u64, t);
        at += n;
    }
    wb(&mut fs, ino, 40, &[&tail], (40 * BS + 1000) as u64, 6);
    let mut want: Vec<u8> = blocks.concat();
    want.extend_from_slice(&tail);
    let check = |fs: &mut Fs, want: &[u8], what: &str| {
        assert!(read_file(fs, ino) == want, "{what}: content");
        let mut got = vec![Vec::new(); 41];
        fs.read_blocks(ino, 0, 41, &mut |k, b| got[k as usize] = b.to_vec()).unwrap();
        assert!(got.concat() == want, "{what}: read_blocks");
        assert_fsck(fs);
    };
    check(&mut fs, &want, "before flush");
    fs.fsync(ino).unwrap();
    check(&mut fs, &want, "after fsync");
    let raw_check = |fs: &mut Fs, what: &str| {
        let all: Vec<&[u8]> = blocks.iter().map(|b| b.as_slice()).collect();
        for (i, p) in all_places(fs.flash().raw(), &all).into_iter().enumerate() {
            assert!(!p.is_empty(), "{what}: block {i} not on the medium");
            for o in p {
                assert_eq!(o % align as usize, 0, "{what}: block {i} at {o}, not a multiple of {align}");
            }
        }
    };
    raw_check(&mut fs, "after fsync");
    let mut fs = crash_remount(fs);
    check(&mut fs, &want, "after a crash");
    let mut fs = remount(fs);
    check(&mut fs, &want, "after a remount");
    // overwrite half of them many times: the GC moves the rest, which stay aligned
    // a filler file takes 60 % of the capacity, so that free segments run short and the GC
    // has to move live blocks; the odd blocks of `f` are kept, so every segment they are in
    // holds dead blocks too
    let filler = fs.create(ROOT_INO, b"filler", &reg(), ts(7)).unwrap().ino;
    let nfill = fs.statfs().blocks * 6 / 10;
    let fill: Vec<Vec<u8>> = (0..nfill).map(|k| block(1_000_000 + k)).collect();
    let refs: Vec<&[u8]> = fill.iter().map(|b| b.as_slice()).collect();
    wb(&mut fs, filler, 0, &refs, nfill * BS as u64, 8);
    let kept: Vec<&[u8]> = blocks.iter().skip(1).step_by(2).map(|b| b.as_slice()).collect();
    let before = all_places(fs.flash().raw(), &kept);
    let mut round = 0u64;
    loop {
        if round % 4 == 0 && all_places(fs.flash().raw(), &kept) != before {
            break;
        }
        assert!(round < 400, "the GC never moved the blocks kept");
        round += 1;
        for k in (0..40u64).step_by(2) {
            let nb = block(5000 + round * 100 + k);
            wb(&mut fs, ino, k, &[&nb], (k + 1) * BS as u64, 10 + round as i64);
            want[k as usize * BS..(k as usize + 1) * BS].copy_from_slice(&nb);
        }
        fs.fsync(ino).unwrap();
        while fs.gc_step(true).unwrap() {}
    }
    check(&mut fs, &want, "after GC");
    assert!(read_file(&mut fs, filler) == fill.concat(), "filler after GC");
    for (i, p) in all_places(fs.flash().raw(), &kept).iter().enumerate() {
        assert!(!p.is_empty(), "after GC: block {} lost", 2 * i + 1);
        for o in p {
            assert_eq!(o % align as usize, 0, "after GC: block {} at {o}", 2 * i + 1);
        }
    }
    let mut fs = remount(fs);
    check(&mut fs, &want, "after GC and a remount");
}

#[test]
fn nand_2k_pages_blocks_are_page_aligned() {
    aligned_round_trip(RamFlash::new_nand(64 * 1024, 40, 2048), 2048);
}

#[test]
fn nand_512_subpages_blocks_are_2k_aligned() {
    aligned_round_trip(RamFlash::new_nand(32 * 1024, 80, 512), 2048);
}

#[test]
fn block_device_blocks_are_4k_aligned() {
    aligned_round_trip(RamFlash::with_kind(FlashKind::Block, 256 * 1024, 32, 4096), 4096);
}

/// A damaged aligned block is an error of the read, never wrong data.
#[test]
fn a_damaged_block_reads_as_an_error() {
    let f = format(RamFlash::new_nand(64 * 1024, 64, 2048), 2048).unwrap();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let ino = fs.create(ROOT_INO, b"f", &reg(), ts(1)).unwrap().ino;
    let b = block(7);
    wb(&mut fs, ino, 0, &[&b], BS as u64, 2);
    fs.sync().unwrap();
    let raw = fs.flash().raw().to_vec();
    let p = places(&raw, &b);
    assert_eq!(p.len(), 1);
    let ss = 64 * 1024;
    fs.flash().flip((p[0] / ss) as u32, (p[0] % ss + 100) as u32, 0x10);
    let mut v = vec![0u8; BS];
    assert_eq!(fs.read(ino, 0, &mut v).err(), Some(Error::Corrupt));
}

/// `read_block_into` (the kernel's read into a folio): an aligned block is one read of the
/// medium, of 4096 bytes, straight into the buffer; records, holes and EOF read as before.
#[test]
fn read_block_into_reads_an_aligned_block_in_one_read() {
    let f = format(RamFlash::with_kind(FlashKind::Block, 256 * 1024, 32, 4096), 4096).unwrap();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let ino = fs.create(ROOT_INO, b"f", &reg(), ts(1)).unwrap().ino;
    let b: Vec<Vec<u8>> = (0..4).map(|k| block(300 + k)).collect();
    let tail = &block(400)[..100];
    // blocks 0, 1 aligned, 2 a hole, 3 aligned, 4 a short EOF block (a DATA record)
    wb(&mut fs, ino, 0, &[&b[0], &b[1]], 2 * BS as u64, 2);
    wb(&mut fs, ino, 3, &[&b[3], tail], (4 * BS + 100) as u64, 3);
    fs.sync().unwrap();
    let mut out = vec![0xAAu8; BS];
    for k in [0u64, 1, 3] {
        fs.getattr(ino).unwrap();
        let reads = fs.flash().reads;
        assert_eq!(fs.read_block_into(ino, k, &mut out).unwrap(), BS);
        assert_eq!(fs.flash().reads - reads, 1, "block {k}: not one read");
        let (_, off, len) = fs.flash().last_read;
        assert_eq!((off % 4096, len), (0, BS), "block {k}: read of {len} bytes at {off}");
        assert!(out == b[k as usize], "block {k}");
    }
    out.fill(0xAA);
    assert_eq!(fs.read_block_into(ino, 2, &mut out).unwrap(), 0);
    assert!(out.iter().all(|&x| x == 0), "hole");
    out.fill(0xAA);
    assert_eq!(fs.read_block_into(ino, 4, &mut out).unwrap(), 100);
    assert!(out[..100] == *tail && out[100..].iter().all(|&x| x == 0), "EOF block");
    out.fill(0xAA);
    assert_eq!(fs.read_block_into(ino, 9, &mut out).unwrap(), 0, "past EOF");
    assert!(out.iter().all(|&x| x == 0));
}

/// fsck cross-checks every aligned block against the data group of its segment: a block whose
/// group record is damaged (so no valid group covers its slot) is reported `Ungrouped`, a block
/// whose payload fails the index's CRC is reported `BadRecord`; preen (`-p`) leaves both (it
/// never drops data), `-y` drops them (the blocks read as holes) and leaves the volume clean.
#[test]
fn fsck_checks_slots_against_their_groups() {
    use ferrofs_engine::format::{kind, Key};
    use ferrofs_engine::{FsckProblem, RepairLevel};
    const SEG: usize = 64 * 1024;
    let f = format(RamFlash::new_nand(SEG as u32, 64, 2048), 2048).unwrap();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let a = fs.create(ROOT_INO, b"a", &reg(), ts(1)).unwrap().ino;
    let b = fs.create(ROOT_INO, b"b", &reg(), ts(1)).unwrap().ino;
    let ab: Vec<Vec<u8>> = (0..3).map(|k| block(7000 + k)).collect();
    let bb: Vec<Vec<u8>> = (0..2).map(|k| block(8000 + k)).collect();
    wb(&mut fs, a, 0, &ab.iter().map(|v| v.as_slice()).collect::<Vec<_>>(), 3 * BS as u64, 2);
    wb(&mut fs, b, 0, &bb.iter().map(|v| v.as_slice()).collect::<Vec<_>>(), 2 * BS as u64, 2);
    assert_fsck(&mut fs);
    // unmounted cleanly: the checkpoint holds the index, the mount replays no group
    let mut f = fs.unmount().map_err(|e| e.0).unwrap();
    // a's group table: its first entry is (a, block 0, CRC), before a's first slot
    let slot = places(f.raw(), &ab[0]);
    assert_eq!(slot.len(), 1);
    let mut pat = a.to_le_bytes().to_vec();
    pat.extend_from_slice(&0u64.to_le_bytes());
    let seg0 = slot[0] / SEG * SEG;
    let hits: Vec<usize> = (seg0..slot[0]).filter(|&i| f.raw()[i..i + 16] == pat[..]).collect();
    // (the record header's key holds the same 16 bytes; the table entry comes last)
    let entry = *hits.last().expect("a's table entry");
    f.flip((seg0 / SEG) as u32, (entry + 16 - seg0) as u32, 0x01); // its CRC field: the table's record CRC fails
    // one payload byte of b's block 1: its CRC (in the index and the table) fails
    let bslot = places(f.raw(), &bb[1]);
    assert_eq!(bslot.len(), 1);
    f.flip((bslot[0] / SEG) as u32, (bslot[0] % SEG + 100) as u32, 0x10);
    let damaged = f.clone();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    let mut seen = Vec::new();
    let r = fs.fsck_each(&mut |p| seen.push(*p)).unwrap();
    seen.sort_by_key(|p| format!("{p:?}"));
    let mut want: Vec<FsckProblem> = (0..3).map(|k| FsckProblem::Ungrouped(Key::new(a, kind::DATA, k))).collect();
    want.push(FsckProblem::BadRecord(Key::new(b, kind::DATA, 1)));
    want.sort_by_key(|p| format!("{p:?}"));
    assert_eq!(seen, want);
    assert_eq!(r.problems, 4);
    // the payloads of a's blocks are intact: they still read (the damage is in the table only)
    assert!(read_file(&mut fs, a) == ab.concat());
    drop(fs);
    // preen drops nothing readable: all four are left
    let mut fs = Fs::mount(damaged.clone(), MountOptions { read_only: true, ..Default::default() }).map_err(|e| e.0).unwrap();
    let rep = fs.repair(RepairLevel::Preen, ts(5), &mut |_, _| true).unwrap();
    assert_eq!((rep.repaired, rep.left), (0, 4), "{rep:?}");
    drop(fs);
    // -y drops them: holes, the rest intact, clean after a remount
    let mut fs = Fs::mount(damaged, MountOptions { read_only: true, ..Default::default() }).map_err(|e| e.0).unwrap();
    let rep = fs.repair(RepairLevel::All, ts(5), &mut |_, _| true).unwrap();
    assert_eq!((rep.repaired, rep.left, rep.problems_after), (4, 0, 0), "{rep:?}");
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = Fs::mount(f, MountOptions::default()).map_err(|e| e.0).unwrap();
    assert_fsck(&mut fs);
    assert!(read_file(&mut fs, a) == vec![0u8; 3 * BS]);
    let mut wantb = bb[0].clone();
    wantb.extend_from_slice(&[0u8; BS]);
    assert!(read_file(&mut fs, b) == wantb);
}
