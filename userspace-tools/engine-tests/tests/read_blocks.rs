//! `Engine::read_blocks`, the kernel's readahead path (issue 10, cold sequential reads):
//!
//! - it returns exactly what `read` returns, block by block, for random ranges over files
//!   built by write-back runs, single-block overwrites, holes, truncates, short last blocks,
//!   data still in a head buffer, GC moves and remounts;
//! - records that lie back to back are read with one flash read per span, so a cold read of
//!   a file written by write-back reads each NAND page about once (it read every record, and
//!   so most pages twice, before);
//! - a damaged record ends the call with an error after the blocks before it were handed out,
//!   and the blocks after it still read one by one.
use ferrofs_engine::format::BLOCK_SIZE;
use ferrofs_engine::{Error, SetAttr, ROOT_INO};
use ferrofs_engine_tests::*;

const BS: usize = BLOCK_SIZE as usize;

/// Every block of `first..first + n` as `read_blocks` hands it out, padded to a whole block.
fn via_read_blocks(fs: &mut Fs, ino: u64, first: u64, n: u64) -> Result<Vec<Vec<u8>>, Error> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut order_ok = true;
    fs.read_blocks(ino, first, n, &mut |k, data| {
        order_ok &= k == out.len() as u64;
        assert!(data.len() <= BS, "a block of {} bytes", data.len());
        let mut b = data.to_vec();
        b.resize(BS, 0);
        out.push(b);
    })?;
    assert!(order_ok, "blocks handed out of order");
    assert_eq!(out.len() as u64, n, "every block handed out once");
    Ok(out)
}

/// The same blocks through `read` (zeros past EOF).
fn via_read(fs: &mut Fs, ino: u64, first: u64, n: u64) -> Vec<Vec<u8>> {
    (first..first + n)
        .map(|b| {
            let mut v = vec![0u8; BS];
            fs.read(ino, b * BS as u64, &mut v).expect("read");
            v
        })
        .collect()
}

fn block(rng: &mut Rng) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    rng.fill(&mut b);
    b
}

#[test]
fn read_blocks_matches_read_on_random_layouts() {
    for seed in 1..=12u64 {
        let mut rng = Rng::new(seed);
        let mut fs = fresh(64 * 1024, 96, 2048);
        let f = fs.create(ROOT_INO, b"f", &reg(), ts(1)).unwrap();
        let mut size = 0u64;
        for step in 0..40 {
            match rng.below(6) {
                // a write-back run of contiguous whole blocks
                0 | 1 => {
                    let first = rng.below(48);
                    let n = 1 + rng.below(40) as usize;
                    let mut blocks: Vec<Vec<u8>> = (0..n).map(|_| block(&mut rng)).collect();
                    let mut end = (first + n as u64) * BS as u64;
                    if end > size && rng.below(3) == 0 {
                        // the run extends the file, which now ends inside its last block:
                        // that block is stored truncated to the EOF, as the kernel does
                        let cut = 1 + rng.below(BS as u64 - 1);
                        end -= cut;
                        blocks.last_mut().unwrap().truncate(BS - cut as usize);
                    }
                    size = size.max(end);
                    let refs: Vec<&[u8]> = blocks.iter().map(|b| b.as_slice()).collect();
                    fs.write_blocks(f.ino, first, &refs, size.min(end), ts(step), ts(step)).unwrap();
                }
                // a single-block overwrite through write(): breaks the physical order
                2 => {
                    let b = rng.below(60);
                    let data = block(&mut rng);
                    fs.write(f.ino, b * BS as u64, &data, ts(step)).unwrap();
                    size = size.max((b + 1) * BS as u64);
                }
                // a truncate down or up
                3 => {
                    size = rng.below(70 * BS as u64);
                    fs.setattr(f.ino, &SetAttr { size: Some(size), ..Default::default() }, ts(step)).unwrap();
                }
                // records on the medium (not in a head buffer), or moved by GC
                4 => fs.fsync(f.ino).unwrap(),
                _ => {
                    for _ in 0..4 {
                        fs.gc_step(true).unwrap();
                    }
                }
            }
            if rng.below(8) == 0 {
                fs = remount(fs);
            }
            for _ in 0..4 {
                let first = rng.below(75);
                let n = 1 + rng.below(40);
                let got = via_read_blocks(&mut fs, f.ino, first, n).unwrap();
                let exp = via_read(&mut fs, f.ino, first, n);
                for k in 0..n as usize {
                    assert!(got[k] == exp[k], "seed {seed} step {step}: block {} of {first}+{n} differs", first + k as u64);
                }
            }
        }
        assert_fsck(&mut fs);
    }
}

#[test]
fn contiguous_records_are_read_in_one_span() {
    let mut fs = fresh(256 * 1024, 64, 2048);
    let f = fs.create(ROOT_INO, b"seq", &reg(), ts(1)).unwrap();
    let mut rng = Rng::new(7);
    let blocks: Vec<Vec<u8>> = (0..32).map(|_| block(&mut rng)).collect();
    let refs: Vec<&[u8]> = blocks.iter().map(|b| b.as_slice()).collect();
    fs.write_blocks(f.ino, 0, &refs, 32 * BS as u64, ts(2), ts(2)).unwrap();
    let mut fs = remount(fs);
    fs.getattr(f.ino).unwrap();
    let before = fs.flash().reads;
    let got = via_read_blocks(&mut fs, f.ino, 0, 32).unwrap();
    let span_reads = fs.flash().reads - before;
    for (k, b) in got.iter().enumerate() {
        assert!(*b == blocks[k], "block {k}");
    }
    // 32 records of 4144 bytes: one span of 132 KiB (two if a segment boundary falls inside,
    // plus index nodes the lookup may load)
    assert!(span_reads <= 4, "read_blocks used {span_reads} flash reads for 32 contiguous blocks");
    let before = fs.flash().reads;
    via_read(&mut fs, f.ino, 0, 32);
    let record_reads = fs.flash().reads - before;
    assert!(record_reads >= 32, "read reads record by record ({record_reads} reads)");
}

#[test]
fn a_damaged_record_ends_the_batch_and_the_rest_reads_alone() {
    let mut fs = fresh(256 * 1024, 64, 2048);
    let f = fs.create(ROOT_INO, b"dmg", &reg(), ts(1)).unwrap();
    let mut rng = Rng::new(9);
    let blocks: Vec<Vec<u8>> = (0..16).map(|_| block(&mut rng)).collect();
    let refs: Vec<&[u8]> = blocks.iter().map(|b| b.as_slice()).collect();
    fs.write_blocks(f.ino, 0, &refs, 16 * BS as u64, ts(2), ts(2)).unwrap();
    let mut fs = remount(fs);
    // find block 5's record on the medium by its contents and damage one payload byte
    let raw = fs.flash().raw().to_vec();
    let at = raw.windows(64).position(|w| w == &blocks[5][100..164]).expect("block 5 on the medium");
    let seg_size = 256 * 1024;
    fs.flash().flip((at / seg_size) as u32, (at % seg_size) as u32, 0x10);
    let mut got = 0u64;
    let r = fs.read_blocks(f.ino, 0, 16, &mut |k, data| {
        assert_eq!(k, got);
        assert!(data == blocks[k as usize].as_slice(), "block {k} handed out intact");
        got += 1;
    });
    assert_eq!(r, Err(Error::Corrupt));
    assert_eq!(got, 5, "the blocks before the damaged one were handed out");
    let mut v = vec![0u8; BS];
    assert!(fs.read(f.ino, 5 * BS as u64, &mut v).is_err(), "block 5 stays unreadable");
    for b in 6..16u64 {
        fs.read(f.ino, b * BS as u64, &mut v).unwrap();
        assert!(v == blocks[b as usize], "block {b} reads alone");
    }
}

#[test]
fn directories_are_refused() {
    let mut fs = fresh(64 * 1024, 32, 2048);
    assert_eq!(fs.read_blocks(ROOT_INO, 0, 1, &mut |_, _| {}), Err(Error::IsDir));
}
