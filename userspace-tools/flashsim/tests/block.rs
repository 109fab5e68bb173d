//! Rules, discard semantics, the cheap-FTL cost model and power cuts of the block simulator.

use ferrofs_flashsim::{
    BlockConfig, BlockSim, CutEffect, CutPlan, DiscardMode, Flash, FlashError, FlashKind, ReadStatus, TornFill,
};

const UNIT: usize = 4096;
const SEG: u32 = 64 * 1024;
const SEGS: u32 = 8;

fn config() -> BlockConfig {
    BlockConfig::with_layout(UNIT as u32, SEG, SEGS)
}

fn sim() -> BlockSim {
    BlockSim::new(config()).unwrap()
}

fn units(n: usize, seed: u8) -> Vec<u8> {
    (0..n * UNIT).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed)).collect()
}

fn read(s: &mut BlockSim, seg: u32, off: u32, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    assert_eq!(s.read(seg, off, &mut b), Ok(ReadStatus::Clean));
    b
}

#[test]
fn default_geometry() {
    let s = BlockSim::new(BlockConfig::new(2)).unwrap();
    let g = s.geometry();
    assert_eq!(g.kind, FlashKind::Block);
    assert_eq!(g.write_unit, 4096);
    assert_eq!(g.segment_size, 4 << 20);
    assert_eq!(g.segment_count, 2);
    assert_eq!(g.preferred_write, 16384);
    for bad in [
        BlockConfig::with_layout(0, SEG, 1),
        BlockConfig::with_layout(4096, 5000, 1),
        BlockConfig::with_layout(4096, SEG, 0),
        BlockConfig { preferred_write: 5000, ..config() },
        BlockConfig { sector_size: 3000, ..config() },
    ] {
        assert!(BlockSim::new(bad.clone()).is_err(), "{bad:?}");
    }
}

#[test]
fn whole_aligned_units_only() {
    let mut s = sim();
    assert_eq!(s.write(0, 512, &units(1, 0)), Err(FlashError::InvalidRequest));
    assert_eq!(s.write(0, 0, &[0u8; 512]), Err(FlashError::InvalidRequest));
    assert_eq!(s.write(SEGS, 0, &units(1, 0)), Err(FlashError::InvalidRequest));
    assert_eq!(s.write(0, SEG - UNIT as u32, &units(2, 0)), Err(FlashError::InvalidRequest));
    let c = s.counters();
    assert_eq!((c.rejected_misaligned, c.rejected_out_of_range, c.writes), (2, 2, 0));
    // Reads may be unaligned.
    s.write(0, 0, &units(1, 3)).unwrap();
    assert_eq!(read(&mut s, 0, 7, 100), units(1, 3)[7..107].to_vec());
}

#[test]
fn sequential_inside_a_segment_and_erase_rewinds() {
    let mut s = sim();
    s.write(1, 0, &units(2, 1)).unwrap();
    assert_eq!(s.write_position(1), Some(2 * UNIT as u32));
    // A gap, a rewrite and a backward write are all refused.
    assert_eq!(s.write(1, 3 * UNIT as u32, &units(1, 2)), Err(FlashError::InvalidRequest));
    assert_eq!(s.write(1, UNIT as u32, &units(1, 2)), Err(FlashError::InvalidRequest));
    assert_eq!(s.counters().rejected_out_of_order, 2);
    s.write(1, 2 * UNIT as u32, &units(1, 2)).unwrap();
    // A fresh segment starts at 0 only.
    assert_eq!(s.write(2, UNIT as u32, &units(1, 2)), Err(FlashError::InvalidRequest));
    s.erase(1).unwrap();
    assert_eq!(s.write_position(1), Some(0));
    s.write(1, 0, &units(1, 9)).unwrap();
    assert_eq!(s.is_bad(1), Ok(false));
    s.mark_bad(1).unwrap();
    assert_eq!(s.is_bad(1), Ok(false), "no bad blocks on a block device");
    assert_eq!(s.counters().marked_bad, 1);
}

#[test]
fn discard_modes() {
    for (mode, expect) in [(DiscardMode::Zeroes, Some(0u8)), (DiscardMode::Ones, Some(0xFF)), (DiscardMode::Stale, None)] {
        let mut s = BlockSim::new(BlockConfig { discard: mode, ..config() }).unwrap();
        let data = units(2, 5);
        s.write(3, 0, &data).unwrap();
        s.erase(3).unwrap();
        let got = read(&mut s, 3, 0, 2 * UNIT);
        match expect {
            Some(b) => assert!(got.iter().all(|&x| x == b), "{mode:?}"),
            None => assert_eq!(got, data, "stale data stays readable"),
        }
        assert_eq!(s.counters().blocks_erased, 1);
    }
    let mut s = sim();
    s.set_discard_mode(DiscardMode::Zeroes);
    s.write(0, 0, &units(1, 1)).unwrap();
    s.erase(0).unwrap();
    assert!(read(&mut s, 0, 0, UNIT).iter().all(|&x| x == 0));
}

#[test]
fn ftl_cost_of_sequential_versus_interleaved_writes() {
    // Two streams, limit 2: no cost.
    let mut s = sim();
    for i in 0..4u32 {
        for seg in [0, 1] {
            s.write(seg, i * UNIT as u32, &units(1, 0)).unwrap();
        }
    }
    let c = s.counters();
    assert_eq!(c.ftl_rmw_events, 0);
    assert_eq!(c.max_open_segments, 2);
    assert_eq!(c.device_write_amplification(c.bytes_programmed), Some(1.0));

    // Three streams, limit 2: every switch evicts a half-written AU.
    let mut s = sim();
    for i in 0..4u32 {
        for seg in [0, 1, 2] {
            s.write(seg, i * UNIT as u32, &units(1, 0)).unwrap();
        }
    }
    let c = s.counters();
    assert!(c.ftl_rmw_events >= 9, "{}", c.ftl_rmw_events);
    assert!(c.ftl_bytes_copied > 0);
    assert_eq!(c.max_open_segments, 3);
    assert!(c.device_write_amplification(c.bytes_programmed).unwrap_or(0.0) > 2.0);

    // The same with a roomier FTL costs nothing.
    let mut s = BlockSim::new(BlockConfig { open_au_limit: 4, ..config() }).unwrap();
    for i in 0..4u32 {
        for seg in [0, 1, 2] {
            s.write(seg, i * UNIT as u32, &units(1, 0)).unwrap();
        }
    }
    assert_eq!(s.counters().ftl_rmw_events, 0);

    // Filling a segment closes it: it no longer counts as open.
    let mut s = sim();
    s.write(0, 0, &vec![0u8; SEG as usize]).unwrap();
    assert_eq!(s.open_segments(), 0);
    assert_eq!(s.counters().max_open_segments, 0);
}

#[test]
fn non_sequential_writes_counted_when_not_enforced() {
    let mut s = BlockSim::new(BlockConfig { enforce_sequential: false, ..config() }).unwrap();
    s.write(0, 0, &units(1, 0)).unwrap();
    s.write(0, 4 * UNIT as u32, &units(1, 0)).unwrap();
    s.write(0, 0, &units(1, 7)).unwrap();
    let c = s.counters();
    assert_eq!(c.invalid_requests, 0);
    assert_eq!(c.ftl_rmw_events, 2);
    assert_eq!(c.ftl_bytes_copied, 2 * u64::from(SEG));
    assert_eq!(read(&mut s, 0, 0, UNIT), units(1, 7));
    s.set_enforce_sequential(true);
    assert_eq!(s.write(0, 0, &units(1, 7)), Err(FlashError::InvalidRequest));
}

#[test]
fn torn_write_keeps_a_sector_multiple_prefix() {
    for seed in 0..30 {
        let mut s = BlockSim::new(BlockConfig { seed, ..config() }).unwrap();
        let old = units(2, 1);
        s.write(0, 0, &old).unwrap();
        s.erase(0).unwrap(); // stale: old data stays
        let new = units(2, 2);
        s.cut_after_with(1, CutPlan { effect: CutEffect::Torn, fill: TornFill::Unwritten, ..CutPlan::default() });
        assert_eq!(s.write(0, 0, &new), Err(FlashError::PowerCut));
        s.reboot();
        let got = read(&mut s, 0, 0, 2 * UNIT);
        let prefix = got.iter().zip(&new).take_while(|(a, b)| a == b).count() / 512 * 512;
        assert_eq!(&got[..prefix], &new[..prefix]);
        assert_eq!(&got[prefix..], &old[prefix..], "seed {seed}: the rest keeps the old data");
    }
    let mut s = BlockSim::new(BlockConfig { seed: 3, ..config() }).unwrap();
    s.cut_after_with(1, CutPlan { effect: CutEffect::Torn, fill: TornFill::Random, ..CutPlan::default() });
    let new = units(2, 2);
    assert_eq!(s.write(0, 0, &new), Err(FlashError::PowerCut));
    s.reboot();
    let got = read(&mut s, 0, 0, 2 * UNIT);
    assert_ne!(got, new);
    assert!(got.iter().any(|&x| x != 0), "some new or random bytes landed");
}

#[test]
fn power_cut_then_reboot_resumes_anywhere_once() {
    let mut s = sim();
    s.write(2, 0, &units(3, 1)).unwrap();
    s.cut_after_with(1, CutPlan { effect: CutEffect::NotDone, ..CutPlan::default() });
    assert_eq!(s.write(2, 3 * UNIT as u32, &units(1, 1)), Err(FlashError::PowerCut));
    let mut b = vec![0u8; UNIT];
    assert_eq!(s.read(2, 0, &mut b), Err(FlashError::PowerCut));
    assert_eq!(s.flush(), Err(FlashError::PowerCut));
    assert_eq!(s.erase(2), Err(FlashError::PowerCut));
    s.reboot();
    assert_eq!(s.write_position(2), None);
    assert_eq!(read(&mut s, 2, 0, 3 * UNIT), units(3, 1));
    // Recovery found the end at unit 2 (say): the engine may overwrite from there.
    s.write(2, 2 * UNIT as u32, &units(1, 5)).unwrap();
    assert_eq!(s.write(2, 0, &units(1, 5)), Err(FlashError::InvalidRequest));
    assert_eq!(s.counters().power_cuts, 1);
}

#[test]
fn torn_discard_and_done_cut() {
    let mut s = BlockSim::new(BlockConfig { discard: DiscardMode::Zeroes, seed: 4, ..config() }).unwrap();
    s.write(0, 0, &vec![7u8; SEG as usize]).unwrap();
    s.cut_after(1);
    assert_eq!(s.erase(0), Err(FlashError::PowerCut));
    s.reboot();
    let got = read(&mut s, 0, 0, SEG as usize);
    let zeroes = got.iter().take_while(|&&x| x == 0).count();
    assert_eq!(zeroes % UNIT, 0);
    assert!(got[zeroes..].iter().all(|&x| x == 7));
    s.cut_after_with(1, CutPlan { effect: CutEffect::Done, ..CutPlan::default() });
    assert_eq!(s.erase(0), Err(FlashError::PowerCut));
    s.reboot();
    assert!(read(&mut s, 0, 0, SEG as usize).iter().all(|&x| x == 0));
}

#[test]
fn volatile_cache_loses_a_reordered_subset_of_unflushed_sectors() {
    let (mut reordered, mut torn, mut kept, mut lost) = (false, false, false, false);
    for seed in 0..40 {
        let mut s = BlockSim::new(BlockConfig { volatile_cache: true, seed, ..config() }).unwrap();
        s.write(0, 0, &units(2, 1)).unwrap();
        s.flush().unwrap();
        s.write(0, 2 * UNIT as u32, &units(1, 2)).unwrap();
        s.write(0, 3 * UNIT as u32, &units(1, 3)).unwrap();
        s.cut_now();
        s.reboot();
        assert_eq!(read(&mut s, 0, 0, 2 * UNIT), units(2, 1), "flushed data survives");
        let u2 = read(&mut s, 0, 2 * UNIT as u32, UNIT);
        let u3 = read(&mut s, 0, 3 * UNIT as u32, UNIT);
        // every 512-byte sector is old (zeroes) or new, independently of the others
        for (u, new) in [(&u2, units(1, 2)), (&u3, units(1, 3))] {
            for (got, want) in u.chunks(512).zip(new.chunks(512)) {
                assert!(got == want || got.iter().all(|&b| b == 0), "seed {seed}: a sector neither old nor new");
            }
            torn |= *u != new && u.iter().any(|&b| b != 0);
            kept |= *u == new;
            lost |= u.iter().all(|&b| b == 0);
        }
        // the later write reached the medium while the earlier one did not
        reordered |= u3 == units(1, 3) && u2.iter().all(|&b| b == 0);
    }
    assert!(reordered && torn && kept && lost, "reordered {reordered} torn {torn} kept {kept} lost {lost}");
}

#[test]
fn counters_since_and_wa() {
    let mut s = sim();
    let a = s.counters();
    s.write(0, 0, &units(4, 0)).unwrap();
    s.erase(1).unwrap();
    let d = s.counters().since(&a);
    assert_eq!(d.bytes_programmed, 4 * UNIT as u64);
    assert_eq!(d.pages_programmed, 4);
    assert_eq!(d.blocks_erased, 1);
    assert_eq!(d.write_amplification(2 * UNIT as u64), Some(2.0));
    assert_eq!(d.bytes_erased(SEG), u64::from(SEG));
}

#[test]
fn injected_medium_errors() {
    let mut s = sim();
    s.write(0, 0, &units(3, 1)).unwrap();
    s.inject_read_error(0, 1).unwrap();
    let mut b = vec![0u8; UNIT];
    assert_eq!(s.read(0, 0, &mut b), Ok(ReadStatus::Clean));
    assert_eq!(s.read(0, UNIT as u32 + 10, &mut b[..10]), Err(FlashError::Uncorrectable));
    let mut all = vec![0u8; 3 * UNIT];
    assert_eq!(s.read(0, 0, &mut all), Err(FlashError::Uncorrectable));
    // Rewriting the unit (after a discard) heals it.
    s.erase(0).unwrap();
    assert_eq!(s.read(0, UNIT as u32, &mut b), Err(FlashError::Uncorrectable));
    s.write(0, 0, &units(2, 2)).unwrap();
    assert_eq!(s.read(0, UNIT as u32, &mut b), Ok(ReadStatus::Clean));
    s.inject_write_error(1).unwrap();
    assert_eq!(s.write(1, 0, &units(1, 1)), Err(FlashError::WriteFailed));
    assert_eq!(s.write_position(1), Some(0));
    s.clear_faults();
    s.write(1, 0, &units(1, 1)).unwrap();
    let c = s.counters();
    assert_eq!((c.uncorrectable_reads, c.write_failures), (3, 1));
    assert!(s.inject_read_error(SEGS, 0).is_err());
    assert!(s.inject_read_error(0, SEG / UNIT as u32).is_err());
    assert!(s.inject_write_error(SEGS).is_err());
}
