//! Rules, faults and power cuts of the NAND simulator.

use ferrofs_flashsim::{
    CutEffect, CutPlan, Flash, FlashError, FlashKind, NandConfig, NandSim, OpKind, ReadStatus, TornFill,
};

const PAGE: usize = 512;
const PPB: u32 = 8;
const BLOCKS: u32 = 8;

fn sim() -> NandSim {
    NandSim::new(NandConfig::with_layout(PAGE as u32, PPB, BLOCKS)).unwrap()
}

fn page(fill: u8) -> Vec<u8> {
    vec![fill; PAGE]
}

fn pages(n: usize, seed: u8) -> Vec<u8> {
    (0..n * PAGE).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn read_page(s: &mut NandSim, seg: u32, pg: u32) -> Vec<u8> {
    let mut b = page(0);
    s.read(seg, pg * PAGE as u32, &mut b).unwrap();
    b
}

#[test]
fn default_geometry_is_2k_pages_128k_blocks() {
    let s = NandSim::new(NandConfig::new(4)).unwrap();
    let g = s.geometry();
    assert_eq!(g.kind, FlashKind::Nand);
    assert_eq!(g.write_unit, 2048);
    assert_eq!(g.segment_size, 128 * 1024);
    assert_eq!(g.segment_count, 4);
    assert_eq!(g.preferred_write, 2048);
    assert_eq!(s.pages_per_block(), 64);
}

#[test]
fn bad_configs_are_refused() {
    for c in [
        NandConfig::with_layout(0, 8, 8),
        NandConfig::with_layout(512, 0, 8),
        NandConfig::with_layout(512, 8, 0),
        NandConfig::with_layout(u32::MAX, 8, 8),
        NandConfig { bad_blocks: vec![8], ..NandConfig::with_layout(512, 8, 8) },
        NandConfig { preferred_write: 700, ..NandConfig::with_layout(512, 8, 8) },
        NandConfig { kind: FlashKind::Block, ..NandConfig::with_layout(512, 8, 8) },
    ] {
        assert!(NandSim::new(c.clone()).is_err(), "{c:?}");
    }
}

#[test]
fn fresh_device_reads_erased() {
    let mut s = sim();
    let mut b = vec![0u8; 3000];
    assert_eq!(s.read(3, 17, &mut b), Ok(ReadStatus::Clean));
    assert!(b.iter().all(|&x| x == 0xFF));
}

#[test]
fn program_and_read_back_at_any_alignment() {
    let mut s = sim();
    let data = pages(3, 7);
    s.write(2, PAGE as u32, &data).unwrap();
    let mut b = vec![0u8; 100];
    assert_eq!(s.read(2, PAGE as u32 + 50, &mut b), Ok(ReadStatus::Clean));
    assert_eq!(&b[..], &data[50..150]);
    assert!(s.is_page_programmed(2, 1) && s.is_page_programmed(2, 3));
    assert!(!s.is_page_programmed(2, 0) && !s.is_page_programmed(2, 4));
    assert_eq!(s.next_programmable_page(2), Some(4));
    assert_eq!(read_page(&mut s, 2, 0), page(0xFF));
}

#[test]
fn rewrite_is_rejected_and_counted() {
    let mut s = sim();
    s.write(0, 0, &page(1)).unwrap();
    assert_eq!(s.write(0, 0, &page(2)), Err(FlashError::InvalidRequest));
    assert_eq!(read_page(&mut s, 0, 0), page(1), "a rejected rewrite changes nothing");
    // Even rewriting with 0xFF, or the same data, is a rewrite.
    assert_eq!(s.write(0, 0, &page(1)), Err(FlashError::InvalidRequest));
    let c = s.counters();
    assert_eq!(c.rejected_rewrite, 2);
    assert_eq!(c.invalid_requests, 2);
    assert_eq!(c.writes, 1);
}

#[test]
fn out_of_order_is_rejected_but_skipping_is_allowed() {
    let mut s = sim();
    s.write(1, 3 * PAGE as u32, &page(3)).unwrap(); // skip pages 0..3
    assert_eq!(s.write(1, PAGE as u32, &page(1)), Err(FlashError::InvalidRequest));
    assert_eq!(s.counters().rejected_out_of_order, 1);
    assert_eq!(read_page(&mut s, 1, 1), page(0xFF));
    s.write(1, 4 * PAGE as u32, &page(4)).unwrap();
    // Another block is independent.
    s.write(2, 0, &page(9)).unwrap();
}

#[test]
fn misaligned_and_out_of_range_are_rejected() {
    let mut s = sim();
    assert_eq!(s.write(0, 1, &page(1)), Err(FlashError::InvalidRequest));
    assert_eq!(s.write(0, 0, &[1u8; 100]), Err(FlashError::InvalidRequest));
    assert_eq!(s.counters().rejected_misaligned, 2);
    assert_eq!(s.write(BLOCKS, 0, &page(1)), Err(FlashError::InvalidRequest));
    assert_eq!(s.write(0, (PPB - 1) * PAGE as u32, &pages(2, 0)), Err(FlashError::InvalidRequest));
    let mut b = [0u8; 2];
    assert_eq!(s.read(0, PPB * PAGE as u32 - 1, &mut b), Err(FlashError::InvalidRequest));
    assert_eq!(s.erase(BLOCKS), Err(FlashError::InvalidRequest));
    assert_eq!(s.is_bad(BLOCKS), Err(FlashError::InvalidRequest));
    assert_eq!(s.mark_bad(u32::MAX), Err(FlashError::InvalidRequest));
    assert_eq!(s.counters().rejected_out_of_range, 6);
    assert_eq!(s.counters().writes, 0);
}

#[test]
fn erase_restores_ff_and_allows_programming_again() {
    let mut s = sim();
    s.write(4, 0, &pages(PPB as usize, 1)).unwrap();
    s.erase(4).unwrap();
    assert!(s.segment_data(4).unwrap().iter().all(|&b| b == 0xFF));
    assert_eq!(s.next_programmable_page(4), Some(0));
    s.write(4, 0, &page(5)).unwrap();
    s.erase(4).unwrap();
    let c = s.counters();
    assert_eq!(c.blocks_erased, 2);
    assert_eq!(c.erase_counts[4], 2);
    assert_eq!(c.erase_counts[3], 0);
    assert_eq!(c.pages_programmed, PPB as u64 + 1);
    assert_eq!(c.bytes_programmed, (PPB as u64 + 1) * PAGE as u64);
}

#[test]
fn factory_and_marked_bad_blocks() {
    let mut s = NandSim::new(NandConfig { bad_blocks: vec![2], ..NandConfig::with_layout(PAGE as u32, PPB, BLOCKS) })
        .unwrap();
    assert_eq!(s.is_bad(2), Ok(true));
    assert_eq!(s.is_bad(3), Ok(false));
    assert_eq!(s.write(2, 0, &page(1)), Err(FlashError::InvalidRequest));
    assert_eq!(s.erase(2), Err(FlashError::InvalidRequest));
    assert_eq!(s.counters().rejected_bad_block, 2);
    let mut b = page(0);
    assert!(s.read(2, 0, &mut b).is_ok(), "reading a bad block is allowed");
    s.write(3, 0, &page(1)).unwrap();
    s.mark_bad(3).unwrap();
    assert_eq!(s.is_bad(3), Ok(true));
    assert_eq!(s.erase(3), Err(FlashError::InvalidRequest));
    assert_eq!(s.bad_blocks(), vec![2, 3]);
    assert_eq!(s.counters().marked_bad, 1);
}

#[test]
fn weak_page_program_failure() {
    let mut s = sim();
    s.fail_program(0, 2, 0).unwrap();
    assert_eq!(s.write(0, 0, &pages(4, 1)), Err(FlashError::WriteFailed));
    // Pages before the weak one made it, the weak one is spoiled, the rest untouched.
    assert_eq!(read_page(&mut s, 0, 0), pages(4, 1)[..PAGE].to_vec());
    assert!(s.is_page_programmed(0, 2));
    assert!(!s.is_page_programmed(0, 3));
    assert_eq!(s.counters().write_failures, 1);
    // Delayed failure: the first program of the page works, the second (after an erase) fails.
    s.fail_program(1, 0, 1).unwrap();
    s.write(1, 0, &page(1)).unwrap();
    s.erase(1).unwrap();
    assert_eq!(s.write(1, 0, &page(1)), Err(FlashError::WriteFailed));
    assert!(s.fail_program(BLOCKS, 0, 0).is_err());
    assert!(s.fail_program(0, PPB, 0).is_err());
}

#[test]
fn weak_block_erase_failure_after_k_erases() {
    let mut s = sim();
    s.weak_block(5, 2).unwrap();
    s.erase(5).unwrap();
    s.erase(5).unwrap();
    assert_eq!(s.erase(5), Err(FlashError::EraseFailed));
    assert_eq!(s.erase(5), Err(FlashError::EraseFailed));
    let c = s.counters();
    assert_eq!(c.erase_failures, 2);
    assert_eq!(c.erase_counts[5], 2);
}

#[test]
fn grave_page_fails_reads_for_good() {
    let mut s = sim();
    s.write(0, 0, &pages(2, 3)).unwrap();
    s.grave_page(0, 1, 1).unwrap();
    let mut b = page(0);
    assert_eq!(s.read(0, PAGE as u32, &mut b), Ok(ReadStatus::Clean));
    assert_eq!(s.read(0, PAGE as u32, &mut b), Err(FlashError::Uncorrectable));
    // A read of the neighbouring page is fine, a read spanning both fails.
    assert_eq!(s.read(0, 0, &mut b), Ok(ReadStatus::Clean));
    let mut both = vec![0u8; 2 * PAGE];
    assert_eq!(s.read(0, 0, &mut both), Err(FlashError::Uncorrectable));
    s.erase(0).unwrap();
    assert_eq!(s.read(0, PAGE as u32, &mut b), Err(FlashError::Uncorrectable));
    assert_eq!(s.counters().uncorrectable_reads, 3);
}

#[test]
fn injected_bitflip_reports_corrected_with_correct_data_until_erase() {
    let mut s = sim();
    let data = pages(2, 9);
    s.write(6, 0, &data).unwrap();
    s.inject_bitflip(6, 1).unwrap();
    let mut b = vec![0u8; 2 * PAGE];
    assert_eq!(s.read(6, 0, &mut b), Ok(ReadStatus::Corrected));
    assert_eq!(b, data);
    let mut first = page(0);
    assert_eq!(s.read(6, 0, &mut first), Ok(ReadStatus::Clean));
    assert_eq!(s.counters().corrected_reads, 1);
    s.erase(6).unwrap();
    assert_eq!(s.read(6, 0, &mut b), Ok(ReadStatus::Clean));
}

#[test]
fn injected_uncorrectable_page_until_erase() {
    let mut s = sim();
    s.write(6, 0, &page(1)).unwrap();
    s.inject_uncorrectable(6, 0).unwrap();
    let mut b = page(0);
    assert_eq!(s.read(6, 0, &mut b), Err(FlashError::Uncorrectable));
    s.erase(6).unwrap();
    assert_eq!(s.read(6, 0, &mut b), Ok(ReadStatus::Clean));
}

#[test]
fn random_bitflips_are_seeded_and_deterministic() {
    let run = |seed| {
        let mut s = NandSim::new(NandConfig { seed, ..NandConfig::with_layout(PAGE as u32, PPB, BLOCKS) }).unwrap();
        s.set_bitflip_rate(200_000);
        let mut b = page(0);
        (0..200).map(|i| s.read(i % BLOCKS, 0, &mut b) == Ok(ReadStatus::Corrected)).collect::<Vec<_>>()
    };
    let a = run(1);
    assert_eq!(a, run(1));
    let n = a.iter().filter(|&&x| x).count();
    assert!((15..=70).contains(&n), "{n} corrected reads out of 200 at 20%");
    let mut s = sim();
    s.set_uncorrectable_rate(1_000_000);
    let mut b = page(0);
    assert_eq!(s.read(0, 0, &mut b), Err(FlashError::Uncorrectable));
    s.clear_faults();
    assert_eq!(s.read(0, 0, &mut b), Ok(ReadStatus::Clean));
}

#[test]
fn counters_and_log() {
    let mut s = sim();
    s.enable_log(true);
    let before = s.counters();
    s.write(0, 0, &pages(2, 0)).unwrap();
    let mut b = vec![0u8; 700];
    s.read(0, 0, &mut b).unwrap();
    s.erase(1).unwrap();
    s.flush().unwrap();
    let _ = s.write(0, 0, &page(0));
    let d = s.counters().since(&before);
    assert_eq!((d.reads, d.bytes_read), (1, 700));
    assert_eq!((d.writes, d.pages_programmed, d.bytes_programmed), (1, 2, 2 * PAGE as u64));
    assert_eq!((d.blocks_erased, d.flushes, d.invalid_requests), (1, 1, 1));
    assert_eq!(d.write_amplification(PAGE as u64), Some(2.0));
    let log = s.take_log();
    let kinds: Vec<_> = log.iter().map(|o| o.kind).collect();
    assert_eq!(kinds, vec![OpKind::Write, OpKind::Read, OpKind::Erase, OpKind::Flush, OpKind::Write]);
    assert_eq!(log[0].len, 2 * PAGE as u32);
    assert_eq!(log[4].result, Err(FlashError::InvalidRequest));
    assert!(s.take_log().is_empty());
    s.reset_counters();
    assert_eq!(s.counters().writes, 0);
    assert_eq!(s.counters().erase_counts[1], 1, "wear survives a counter reset");
}

fn plan(effect: CutEffect, fill: TornFill) -> CutPlan {
    CutPlan { effect, fill, ..CutPlan::default() }
}

#[test]
fn power_cut_not_done_then_everything_fails_until_reboot() {
    let mut s = sim();
    s.cut_after_with(2, plan(CutEffect::NotDone, TornFill::Unwritten));
    s.write(0, 0, &page(1)).unwrap();
    assert_eq!(s.pending_cut(), Some(1));
    assert_eq!(s.write(0, PAGE as u32, &page(2)), Err(FlashError::PowerCut));
    assert!(!s.is_powered());
    let mut b = page(0);
    assert_eq!(s.read(0, 0, &mut b), Err(FlashError::PowerCut));
    assert_eq!(s.erase(1), Err(FlashError::PowerCut));
    assert_eq!(s.is_bad(1), Err(FlashError::PowerCut));
    assert_eq!(s.flush(), Err(FlashError::PowerCut));
    s.reboot();
    assert!(s.is_powered());
    assert_eq!(read_page(&mut s, 0, 0), page(1));
    assert_eq!(read_page(&mut s, 0, 1), page(0xFF));
    s.write(0, PAGE as u32, &page(2)).unwrap();
    assert_eq!(s.counters().power_cuts, 1);
}

#[test]
fn power_cut_done_completes_the_operation() {
    let mut s = sim();
    s.cut_after_with(1, plan(CutEffect::Done, TornFill::Unwritten));
    assert_eq!(s.write(0, 0, &pages(2, 4)), Err(FlashError::PowerCut));
    s.power_on();
    let mut b = vec![0u8; 2 * PAGE];
    s.read(0, 0, &mut b).unwrap();
    assert_eq!(b, pages(2, 4));
    s.cut_after_with(1, plan(CutEffect::Done, TornFill::Unwritten));
    assert_eq!(s.erase(0), Err(FlashError::PowerCut));
    s.reboot();
    assert!(s.segment_data(0).unwrap().iter().all(|&x| x == 0xFF));
}

#[test]
fn torn_program_keeps_a_prefix_and_leaves_ff() {
    for seed in 0..40 {
        let mut s = NandSim::new(NandConfig { seed, ..NandConfig::with_layout(PAGE as u32, PPB, BLOCKS) }).unwrap();
        let data = pages(4, 11);
        s.cut_after_with(1, plan(CutEffect::Torn, TornFill::Unwritten));
        assert_eq!(s.write(3, 0, &data), Err(FlashError::PowerCut));
        s.reboot();
        let seg = s.segment_data(3).unwrap().to_vec();
        // Contents = a prefix of the data, then 0xFF.
        let prefix = seg.iter().zip(&data).take_while(|(a, b)| a == b).count();
        assert!(prefix < data.len(), "seed {seed}: a torn write is never complete");
        assert!(seg[prefix..].iter().all(|&x| x == 0xFF), "seed {seed}");
        // Pages the torn write started cannot be programmed again; later ones can.
        let next = s.next_programmable_page(3).unwrap();
        for p in 0..next {
            assert!(s.is_page_programmed(3, p));
            assert_eq!(s.write(3, p * PAGE as u32, &page(0)), Err(FlashError::InvalidRequest));
        }
        assert!(next as usize <= prefix.div_ceil(PAGE) + 1);
        s.write(3, next * PAGE as u32, &page(0x55)).unwrap();
    }
}

#[test]
fn torn_program_with_random_fill_is_deterministic() {
    let run = || {
        let mut s = NandSim::new(NandConfig { seed: 77, ..NandConfig::with_layout(PAGE as u32, PPB, BLOCKS) }).unwrap();
        s.cut_after_with(1, plan(CutEffect::Torn, TornFill::Random));
        let _ = s.write(0, 0, &pages(8, 1));
        s.reboot();
        s.data().to_vec()
    };
    let a = run();
    assert_eq!(a, run());
    let seg = &a[..PPB as usize * PAGE];
    let data = pages(8, 1);
    assert_ne!(seg, &data[..]);
}

#[test]
fn torn_erase_leaves_block_partially_erased() {
    let mut saw_partial = false;
    for seed in 0..30 {
        let mut s = NandSim::new(NandConfig { seed, ..NandConfig::with_layout(PAGE as u32, PPB, BLOCKS) }).unwrap();
        let data = pages(PPB as usize, 2);
        s.write(1, 0, &data).unwrap();
        s.cut_after_with(1, plan(CutEffect::Torn, TornFill::Unwritten));
        assert_eq!(s.erase(1), Err(FlashError::PowerCut));
        s.reboot();
        let seg = s.segment_data(1).unwrap().to_vec();
        // Some first pages erased, the others still hold their old data.
        let erased = seg.chunks(PAGE).take_while(|p| p.iter().all(|&x| x == 0xFF)).count();
        for (i, p) in seg.chunks(PAGE).enumerate().skip(erased) {
            assert_eq!(p, &data[i * PAGE..(i + 1) * PAGE], "seed {seed} page {i}");
            assert!(s.is_page_programmed(1, i as u32));
        }
        saw_partial |= erased > 0 && erased < PPB as usize;
        assert_eq!(s.counters().erase_counts[1], 1);
        // The engine recovers by erasing again.
        s.erase(1).unwrap();
        assert!(s.segment_data(1).unwrap().iter().all(|&x| x == 0xFF));
    }
    assert!(saw_partial);
    let mut s = NandSim::new(NandConfig { seed: 5, ..NandConfig::with_layout(PAGE as u32, PPB, BLOCKS) }).unwrap();
    s.write(1, 0, &pages(PPB as usize, 2)).unwrap();
    s.cut_after_with(1, plan(CutEffect::Torn, TornFill::Random));
    assert_eq!(s.erase(1), Err(FlashError::PowerCut));
    s.reboot();
    let old = pages(PPB as usize, 2);
    let mut erased = 0;
    for p in 0..PPB as usize {
        let d = &s.segment_data(1).unwrap()[p * PAGE..(p + 1) * PAGE];
        let all_ff = d.iter().all(|&x| x == 0xFF);
        // Each page is either erased, or random bits (neither erased nor the old data).
        assert_eq!(s.is_page_programmed(1, p as u32), !all_ff, "page {p}");
        assert_ne!(d, &old[p * PAGE..(p + 1) * PAGE]);
        erased += usize::from(all_ff);
    }
    assert!(erased > 0 && erased < PPB as usize, "seed 5 gives a mixed block ({erased} erased)");
}

#[test]
fn reads_count_only_when_asked_and_cut_now() {
    let mut s = sim();
    s.cut_after_with(2, CutPlan { count_reads: true, ..CutPlan::default() });
    let mut b = page(0);
    s.read(0, 0, &mut b).unwrap();
    assert_eq!(s.read(0, 0, &mut b), Err(FlashError::PowerCut));
    s.reboot();
    s.cut_after_with(1, CutPlan { count_reads: false, ..CutPlan::default() });
    s.read(0, 0, &mut b).unwrap();
    s.cancel_cut();
    s.write(0, 0, &page(1)).unwrap();
    s.cut_now();
    assert_eq!(s.read(0, 0, &mut b), Err(FlashError::PowerCut));
    s.reboot();
    s.cut_after(0);
    assert!(!s.is_powered());
    s.reboot();
    assert_eq!(s.counters().power_cuts, 3);
}

#[test]
fn mark_bad_and_flush_can_be_cut() {
    let mut s = sim();
    s.cut_after_with(1, plan(CutEffect::NotDone, TornFill::Unwritten));
    assert_eq!(s.mark_bad(4), Err(FlashError::PowerCut));
    s.reboot();
    assert_eq!(s.is_bad(4), Ok(false));
    s.cut_after_with(1, CutPlan { count_flushes: true, ..CutPlan::default() });
    assert_eq!(s.flush(), Err(FlashError::PowerCut));
}

/// A small workload, replayed with a cut at every operation: the device always comes back
/// usable, with every page either old, new, or a torn prefix of new.
#[test]
fn crash_point_enumeration() {
    fn workload(s: &mut NandSim) -> Result<(), FlashError> {
        s.write(0, 0, &pages(2, 1))?;
        s.write(0, 2 * PAGE as u32, &pages(1, 2))?;
        s.erase(1)?;
        s.write(1, 0, &pages(3, 3))?;
        s.flush()?;
        s.erase(0)?;
        s.write(0, 0, &pages(1, 4))
    }
    let mut s = sim();
    workload(&mut s).unwrap();
    let n = s.ops_since_power_on();
    assert_eq!(n, 6);
    let reference = s.data().to_vec();
    for i in 1..=n {
        for effect in [CutEffect::NotDone, CutEffect::Done, CutEffect::Torn] {
            let mut s = NandSim::new(NandConfig { seed: i, ..NandConfig::with_layout(PAGE as u32, PPB, BLOCKS) })
                .unwrap();
            s.cut_after_with(i, plan(effect, TornFill::Random));
            assert_eq!(workload(&mut s), Err(FlashError::PowerCut), "cut {i} {effect:?}");
            s.reboot();
            // Usable again: erase everything and replay completely.
            for b in 0..BLOCKS {
                s.erase(b).unwrap();
            }
            workload(&mut s).unwrap();
            assert_eq!(s.data(), &reference[..]);
        }
    }
}
