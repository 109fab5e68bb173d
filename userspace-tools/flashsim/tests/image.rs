//! Image save/load round trips, corrupted images, and ImageFlash over raw image files.

use std::path::PathBuf;

use ferrofs_flashsim::image::read_header;
use ferrofs_flashsim::{
    AnySim, BlockConfig, BlockSim, CutEffect, CutPlan, Error, Flash, FlashError, FlashKind, Geometry, ImageFlash,
    NandConfig, NandSim, ReadStatus, TornFill,
};

struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("ferrofs-flashsim-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn nand() -> NandSim {
    NandSim::new(NandConfig { bad_blocks: vec![6], ..NandConfig::with_layout(512, 8, 8) }).unwrap()
}

#[test]
fn nand_round_trip_keeps_everything() {
    let t = TempFile::new("nand.img");
    let mut s = nand();
    s.write(0, 0, &vec![0x12; 1024]).unwrap();
    s.erase(1).unwrap();
    s.erase(1).unwrap();
    s.write(1, 512, &vec![0x34; 512]).unwrap();
    s.mark_bad(7).unwrap();
    // A torn program that left a page reading 0xFF but programmed must survive the round trip.
    let mut seed = 0;
    loop {
        let mut probe = nand();
        probe.reseed(seed);
        probe.cut_after_with(1, CutPlan { effect: CutEffect::Torn, fill: TornFill::Unwritten, ..CutPlan::default() });
        let _ = probe.write(2, 0, &[0xFF; 512]);
        if probe.is_page_programmed(2, 0) {
            break;
        }
        seed += 1;
    }
    s.reseed(seed);
    s.cut_after_with(1, CutPlan { effect: CutEffect::Torn, fill: TornFill::Unwritten, ..CutPlan::default() });
    let _ = s.write(2, 0, &[0xFF; 512]);
    s.reboot();
    assert!(s.is_page_programmed(2, 0));

    s.save(&t.0).unwrap();
    let h = read_header(&t.0).unwrap();
    assert_eq!(h.geometry, s.geometry());
    assert_eq!(h.bad_blocks, vec![6, 7]);
    assert_eq!(h.data_offset % 4096, 0);

    let mut l = NandSim::load(&t.0).unwrap();
    assert_eq!(l.geometry(), s.geometry());
    assert_eq!(l.data(), s.data());
    assert_eq!(l.programmed_pages(), s.programmed_pages());
    assert_eq!(l.bad_blocks(), vec![6, 7]);
    assert_eq!(l.counters().erase_counts, s.counters().erase_counts);
    assert_eq!(l.is_bad(7), Ok(true));
    // The rules carry over: rewrites and out-of-order writes are still refused.
    assert_eq!(l.write(0, 0, &[0u8; 512]), Err(FlashError::InvalidRequest));
    assert_eq!(l.write(2, 0, &[0u8; 512]), Err(FlashError::InvalidRequest));
    assert_eq!(l.write(1, 0, &[0u8; 512]), Err(FlashError::InvalidRequest));
    l.write(1, 1024, &[0u8; 512]).unwrap();
    // The raw contents sit at data_offset, nanddump style.
    let raw = std::fs::read(&t.0).unwrap();
    assert_eq!(&raw[h.data_offset as usize..], s.data());
}

#[test]
fn block_round_trip_and_any_sim() {
    let t = TempFile::new("block.img");
    let mut s = BlockSim::new(BlockConfig::with_layout(4096, 65536, 4)).unwrap();
    s.write(1, 0, &vec![9u8; 8192]).unwrap();
    s.erase(3).unwrap();
    s.save(&t.0).unwrap();
    let mut l = BlockSim::load(&t.0).unwrap();
    assert_eq!(l.data(), s.data());
    assert_eq!(l.geometry(), s.geometry());
    assert_eq!(l.counters().erase_counts, vec![0, 0, 0, 1]);
    // After a load the write position is unknown: resuming mid-segment is allowed once.
    l.write(1, 4096, &[1u8; 4096]).unwrap();
    assert!(NandSim::load(&t.0).is_err(), "a block image is not a NAND image");
    let mut any = AnySim::load(&t.0).unwrap();
    assert_eq!(any.geometry().kind, FlashKind::Block);
    let mut b = [0u8; 4];
    assert_eq!(any.read(1, 0, &mut b), Ok(ReadStatus::Clean));
    assert_eq!(b, [9; 4]);

    let t2 = TempFile::new("nand-any.img");
    nand().save(&t2.0).unwrap();
    assert!(BlockSim::load(&t2.0).is_err());
    let mut any = AnySim::load(&t2.0).unwrap();
    assert!(matches!(any, AnySim::Nand(_)));
    assert_eq!(any.is_bad(6), Ok(true));
    any.write(0, 0, &[1u8; 512]).unwrap();
    any.save(&t2.0).unwrap();
    assert_eq!(AnySim::load(&t2.0).unwrap().counters().erase_counts.len(), 8);
}

#[test]
fn damaged_images_are_refused_cleanly() {
    let mut good = Vec::new();
    nand().save_to(&mut good).unwrap();
    assert!(NandSim::load_from(&mut &good[..]).is_ok());

    let check = |bytes: &[u8], what: &str| {
        let r = NandSim::load_from(&mut &bytes[..]);
        assert!(matches!(r, Err(Error::BadImage(_)) | Err(Error::UnsupportedImageVersion(_))), "{what}: {r:?}");
    };
    let mut b = good.clone();
    b[0] = b'X';
    check(&b, "magic");
    let mut b = good.clone();
    b[8] = 2;
    check(&b, "version");
    assert!(matches!(NandSim::load_from(&mut &b[..]), Err(Error::UnsupportedImageVersion(2))));
    let mut b = good.clone();
    b[20] ^= 1;
    check(&b, "header checksum");
    let mut b = good.clone();
    b[64] ^= 1;
    check(&b, "metadata checksum");
    check(&good[..good.len() - 1], "truncated contents");
    check(&good[..30], "truncated header");
    check(&[], "empty");
    // Wrong sizes with a valid checksum are refused too.
    let mut b = good.clone();
    b[24..28].copy_from_slice(&0u32.to_le_bytes());
    let crc = ferrofs_flashsim::image::crc32(&b[..56]);
    b[56..60].copy_from_slice(&crc.to_le_bytes());
    assert!(NandSim::load_from(&mut &b[..]).is_err());
    // An absurd geometry with valid checksums is refused without allocating it.
    let mut b = good.clone();
    b[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
    let crc = ferrofs_flashsim::image::crc32(&b[..56]);
    b[56..60].copy_from_slice(&crc.to_le_bytes());
    assert!(NandSim::load_from(&mut &b[..]).is_err());
    let missing = NandSim::load(std::path::Path::new("/nonexistent/dir/x.img"));
    assert!(matches!(missing, Err(Error::Io { .. })));
    let msg = missing.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("/nonexistent/dir/x.img"), "{msg}");
}

#[test]
fn crc32_matches_the_standard_check_value() {
    assert_eq!(ferrofs_flashsim::image::crc32(b"123456789"), 0xCBF4_3926);
}

fn raw_geo() -> Geometry {
    Geometry { kind: FlashKind::Nand, segment_size: 4096, segment_count: 4, write_unit: 512, preferred_write: 512 }
}

#[test]
fn image_flash_over_a_raw_nand_dump() {
    let t = TempFile::new("raw-nand.bin");
    {
        let mut f = ImageFlash::create(&t.0, raw_geo()).unwrap();
        let mut b = [0u8; 16];
        f.read(3, 100, &mut b).unwrap();
        assert_eq!(b, [0xFF; 16]);
        f.write(1, 0, &[1u8; 1024]).unwrap();
        assert_eq!(f.write(1, 0, &[2u8; 512]), Err(FlashError::InvalidRequest));
        f.mark_bad(2).unwrap();
        assert_eq!(f.is_bad(2), Ok(true));
        assert_eq!(f.write(2, 0, &[2u8; 512]), Err(FlashError::InvalidRequest));
        f.flush().unwrap();
        assert_eq!(f.counters().rejected_rewrite, 1);
    }
    // Reopen: programmed pages are found by scanning, the rules still hold.
    let mut f = ImageFlash::open(&t.0, raw_geo()).unwrap();
    assert_eq!(f.write(1, 512, &[3u8; 512]), Err(FlashError::InvalidRequest));
    f.write(1, 1024, &[3u8; 512]).unwrap();
    f.erase(1).unwrap();
    let mut b = [0u8; 2048];
    f.read(1, 0, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0xFF));
    f.write(1, 0, &[4u8; 512]).unwrap();
    assert_eq!(f.is_bad(2), Ok(false), "bad marks are not persistent in a raw dump");
    // Geometry checks.
    assert!(matches!(
        ImageFlash::open(&t.0, Geometry { segment_count: 5, ..raw_geo() }),
        Err(Error::InvalidGeometry(_))
    ));
    let g = ImageFlash::geometry_for_file(&t.0, FlashKind::Nand, 4096, 512).unwrap();
    assert_eq!(g, raw_geo());
    assert!(ImageFlash::geometry_for_file(&t.0, FlashKind::Nand, 3000, 512).is_err());
    assert!(ImageFlash::open(&std::env::temp_dir(), raw_geo()).is_err());
    let mut ro = ImageFlash::open_read_only(&t.0, raw_geo()).unwrap();
    assert!(ro.write(3, 0, &[0u8; 512]).is_err());
    assert!(ro.read(1, 0, &mut b[..512]).is_ok());
}

#[test]
fn nand_sim_contents_readable_through_image_flash() {
    let t = TempFile::new("export.bin");
    let mut s = NandSim::new(NandConfig::with_layout(512, 8, 4)).unwrap();
    s.write(2, 1024, &[0xAB; 1024]).unwrap();
    std::fs::write(&t.0, s.data()).unwrap();
    let mut f = ImageFlash::open(&t.0, s.geometry()).unwrap();
    let mut b = [0u8; 1024];
    f.read(2, 1024, &mut b).unwrap();
    assert_eq!(b, [0xAB; 1024]);
    assert_eq!(f.write(2, 1024, &[0u8; 512]), Err(FlashError::InvalidRequest));
    f.write(2, 2048, &[0u8; 512]).unwrap();
}

#[test]
fn image_flash_over_a_block_image() {
    let t = TempFile::new("raw-block.bin");
    let geo = Geometry { kind: FlashKind::Block, segment_size: 65536, segment_count: 2, write_unit: 4096, preferred_write: 4096 };
    let mut f = ImageFlash::create(&t.0, geo).unwrap();
    assert_eq!(f.write(1, 4096, &[5u8; 4096]), Err(FlashError::InvalidRequest), "a new image starts at 0");
    f.write(0, 0, &[5u8; 8192]).unwrap();
    assert_eq!(f.write(0, 0, &[6u8; 4096]), Err(FlashError::InvalidRequest));
    assert_eq!(f.write(0, 100, &[6u8; 4096]), Err(FlashError::InvalidRequest));
    f.write(0, 8192, &[6u8; 4096]).unwrap();
    f.erase(0).unwrap();
    let mut b = [1u8; 4096];
    f.read(0, 0, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0) || b.iter().all(|&x| x == 5), "discarded: zeroes or stale");
    f.write(0, 0, &[7u8; 4096]).unwrap();
    assert_eq!(f.is_bad(0), Ok(false));
    f.flush().unwrap();
    assert_eq!(f.counters().blocks_erased, 1);
}
