//! Writes the seed corpora of both targets: `cargo run --example make_corpus -- corpus`.
//!
//! - `corpus/mount_raw/seed-clean`, `seed-crashed`: valid raw images (trailing erased bytes trimmed).
//! - `corpus/mount_and_read/seed-*`: flag bytes alone (the unpatched bases) and a few patches
//!   aimed at the superblock, a checkpoint and log records, with and without the CRC fix-up.

use std::path::PathBuf;

use ferrofs_fuzz::{flags, Base, RAW_LAYOUT};

fn trim(d: &[u8]) -> Vec<u8> {
    let end = d.iter().rposition(|&b| b != 0xFF).map_or(0, |p| p + 1);
    d[..end].to_vec()
}

fn patch(kind: u8, page: u16, off: u16, bytes: &[u8]) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend_from_slice(&page.to_le_bytes());
    v.extend_from_slice(&off.to_le_bytes());
    v.push(bytes.len().max(1) as u8);
    v.extend_from_slice(bytes);
    v
}

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "corpus".into()));
    let raw = Base::build(RAW_LAYOUT);
    let rd = dir.join("mount_raw");
    std::fs::create_dir_all(&rd)?;
    std::fs::write(rd.join("seed-clean"), trim(raw.clean.data()))?;
    std::fs::write(rd.join("seed-crashed"), trim(raw.crashed.data()))?;

    let pd = dir.join("mount_and_read");
    std::fs::create_dir_all(&pd)?;
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();
    for f in 0..16u8 {
        seeds.push((format!("seed-flags-{f:02}"), vec![f]));
    }
    let fix = flags::FIX_CRC;
    let cr = flags::CRASHED;
    // superblock: segment count, cp_area_segs, checkpoint segment numbers (absolute page 0)
    seeds.push(("seed-sb-segcount".into(), [vec![fix], patch(0x80, 0, 41, &[0xFF, 0xFF, 0, 0])].concat()));
    seeds.push(("seed-sb-cparea".into(), [vec![fix], patch(0x80, 0, 73, &[16, 0, 0, 0])].concat()));
    seeds.push(("seed-sb-cpseg".into(), [vec![fix], patch(0x80, 0, 81, &[0x40, 0, 0, 0])].concat()));
    // checkpoint blobs are the first programmed pages after the two superblocks
    for (i, off) in [(2u16, 12u16), (2, 32), (2, 44), (2, 62), (3, 190), (2, 186)] {
        seeds.push((format!("seed-cp-{i}-{off}"), [vec![fix | cr], patch(0, i, off, &[0x7F, 0x01, 0x00, 0x80])].concat()));
    }
    // log records: payload lengths, keys, types
    for (i, off) in [(6u16, 44u16), (8, 2), (10, 24), (12, 92), (20, 40), (30, 100)] {
        seeds.push((format!("seed-rec-{i}-{off}"), [vec![fix | cr], patch(1, i, off, &[0x55, 0xAA, 0x01])].concat()));
    }
    seeds.push(("seed-torn-tail".into(), [vec![cr], patch(2, 40, 1000, &[0xFF; 200])].concat()));
    for (name, s) in seeds {
        std::fs::write(pd.join(name), s)?;
    }
    println!("corpora written under {}", dir.display());
    Ok(())
}
