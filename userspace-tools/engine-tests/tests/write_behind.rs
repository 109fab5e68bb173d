//! The engine over a write-behind medium (`ferrofs_flashsim::WriteBehind`, the model of the
//! kernel MTD backend's queue): full log chunks are queued by `Flash::write_behind` and made
//! later (when the queue is full, before every synchronous call, at seeded random points),
//! read back from the queue meanwhile; a program that fails there is reported later
//! (`failed_behind`) and taken back by the engine (`Log::reconcile`); a power cut loses what
//! was still queued.


use ferrofs_engine::std_platform::StdPlatform;
use ferrofs_engine::{Engine, Flash, FlashError, MountOptions, ReadStatus, ROOT_INO};
use ferrofs_engine_tests::modelrun::{namespace_step, verify, Model};
use ferrofs_engine_tests::simcut::{check_files, enumerate_cuts, prepare, random_overwrites, Sim};
use ferrofs_engine_tests::{assert_fsck, mkfs, ts, Rng};
use ferrofs_flashsim::{BehindConfig, BehindStats, CutEffect, CutPlan, NandConfig, NandSim, TornFill, WriteBehind};

type WB = WriteBehind<NandSim>;
type E<F> = Engine<StdPlatform, F>;

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 24, ..Default::default() }
}

/// `simcut::enumerate_cuts` on a write-behind medium: returns the cut points verified and the
/// write-behind counters summed over the cut runs.
fn enumerate<F: Sim>(tpl: WriteBehind<F>, seed: u64, plan: CutPlan, label: &str) -> (usize, BehindStats) {
    let t0 = tpl.stats();
    let mut sum = BehindStats::default();
    let runs = enumerate_cuts(tpl, seed, plan, label, |f| {
        let st = f.stats();
        sum.deferred += st.deferred - t0.deferred;
        sum.lost_to_power_cut += st.lost_to_power_cut - t0.lost_to_power_cut + f.queued_programs() as u64;
        sum.queue_only_reads += st.queue_only_reads - t0.queue_only_reads;
        sum.failures_reported += st.failures_reported - t0.failures_reported;
    });
    eprintln!(
        "{label}: {} programs made late, {} queued programs lost to the cuts, {} failures reported",
        sum.deferred, sum.lost_to_power_cut, sum.failures_reported
    );
    (runs, sum)
}

/// 512-byte pages, 64 pages per block (32 KiB blocks), `blocks` blocks, factory bad blocks 1
/// and 17, chunks of two pages, under a queue of `max_queued` pages.
fn small_wb(blocks: u32, seed: u64, max_queued: u32) -> WB {
    let nand = NandSim::new(NandConfig { bad_blocks: vec![1, 17], seed, preferred_write: 1024, ..NandConfig::with_layout(512, 64, blocks) }).unwrap();
    WriteBehind::with_config(nand, BehindConfig { max_queued, drain_percent: 30, seed: seed ^ 0x5eed })
}

/// Every cut point of seeded workloads over a write-behind NAND (cut plans, queue sizes).
#[test]
fn write_behind_power_cuts() {
    let mut total = 0;
    let mut late = 0;
    let mut lost = 0;
    let plans = [
        (CutEffect::Torn, TornFill::Unwritten, 8),
        (CutEffect::Torn, TornFill::Random, 4),
        (CutEffect::NotDone, TornFill::Unwritten, 16),
        (CutEffect::Done, TornFill::Random, 8),
        (CutEffect::Torn, TornFill::Random, 2),
        (CutEffect::NotDone, TornFill::Random, 64),
        (CutEffect::Torn, TornFill::Unwritten, 32),
        (CutEffect::Torn, TornFill::Random, 8),
    ];
    for (k, (effect, fill, max_queued)) in plans.into_iter().enumerate() {
        let k = k as u64;
        let plan = CutPlan { effect, fill, ..CutPlan::default() };
        let (runs, st) = enumerate(prepare(small_wb(48, 40 + k, max_queued)), 7000 + k, plan, &format!("write-behind {effect:?}/{fill:?}/{max_queued}"));
        assert!(runs > 100, "{runs} cut points");
        total += runs;
        late += st.deferred;
        lost += st.lost_to_power_cut;
    }
    eprintln!("write-behind power cuts: {total} cut points, {late} programs made late, {lost} queued programs lost");
    assert!(late > 0, "no program was made later than its call");
    assert!(lost > 0, "no cut found queued programs to lose");
}

/// A prepared 48-block write-behind NAND on which every sixth block from block `2 + k % 6`
/// fails every program of its page 5 (even blocks) or 40 (odd blocks).
fn failing_wb(k: u64, max_queued: u32) -> WB {
    let mut tpl = prepare(small_wb(48, 60 + k, max_queued));
    for seg in ((2 + k as u32 % 6)..48).step_by(6) {
        tpl.inner_mut().fail_program(seg, if seg % 2 == 0 { 5 } else { 40 }, 0).unwrap();
    }
    tpl
}

/// Cut points of workloads during which write-behind programs fail: cuts while a failure is
/// taken back (`Log::reconcile`) and its segment relocated. The cases are the first eight `k`
/// from 11 on (of the 48 flashsim.rs `nandsim_power_cuts_after_failed_programs` runs without a
/// queue) whose runs see write-behind failures: which do depends on how many bytes the
/// workload's operations append. A case that sees none is still checked at every cut point.
#[test]
fn write_behind_power_cuts_with_failed_programs() {
    let mut total = 0;
    let mut reported = 0;
    let mut cases = 0;
    for k in 11u64..48 {
        if cases == 8 {
            break;
        }
        let effect = [CutEffect::Torn, CutEffect::NotDone, CutEffect::Done][k as usize % 3];
        let max_queued = [8, 4, 16, 2][k as usize % 4];
        let plan = CutPlan { effect, fill: TornFill::Random, ..CutPlan::default() };
        let (runs, st) = enumerate(failing_wb(k, max_queued), 7100 + k, plan, &format!("write-behind failing {k} {effect:?}/{max_queued}"));
        assert!(runs > 100, "{runs} cut points");
        if st.failures_reported > 0 {
            cases += 1;
        }
        total += runs;
        reported += st.failures_reported;
    }
    assert_eq!(cases, 8, "fewer than 8 workloads of k in 11..48 saw a write-behind failure");
    eprintln!("write-behind power cuts with failed programs: {cases} workloads with failures, {total} cut points, {reported} failures reported by failed_behind");
}

// ----- a random workload against a model ----------------------------------------------------

fn mount(f: WB) -> E<WB> {
    E::<WB>::mount(f, opts()).map_err(|e| e.0).expect("mount")
}

/// Unmount cleanly (nothing may stay queued or failed: the kernel's backend would then make or
/// drop it with nobody to take a failure back) and mount again.
fn remount(fs: E<WB>, when: &str) -> E<WB> {
    let f = fs.unmount().map_err(|e| e.0).expect("unmount");
    assert_eq!((f.queued_programs(), f.failed_entries()), (0, 0), "{when}: programs left queued or failed by an unmount");
    mount(f)
}

/// The random workload of model.rs over a write-behind NAND: every file checked after each
/// remount, over a queue of `max_queued` pages made at `drain_percent` of the calls; `fail` also makes page 5 of every eighth block of 10..90 fail every program.
/// `max_queued` 0: no queue (the control). Returns the last engine, the queue's counters over
/// the whole run and the program failures the engine counted.
fn model_run(seed: u64, steps: usize, max_queued: u32, drain_percent: u32, fail: bool) -> (E<WB>, BehindStats, u64) {
    let mut rng = Rng::new(seed);
    let nand = NandSim::new(NandConfig { bad_blocks: vec![3], seed, preferred_write: 1024, ..NandConfig::with_layout(512, 64, 96) }).unwrap();
    let f = WriteBehind::with_config(nand, BehindConfig { max_queued, drain_percent, seed: seed.wrapping_mul(77) });
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = mount(f);
    if fail {
        // blocks 10, 18 .. 82 (not in a row: eight failed segments in one checkpoint stop the
        // engine with or without write-behind, `checkpoint_write`)
        for seg in (10..90).step_by(8) {
            fs.flash().inner_mut().fail_program(seg, 5, 0).unwrap();
        }
    }
    let mut m = Model::default();
    let mut failures = 0;
    let mut t = 1;
    for step in 0..steps {
        t += 1;
        let when = format!("seed {seed} step {step}");
        if let Some(rest) = namespace_step(&mut fs, &mut m, &mut rng, t, &when) {
            match rest.roll {
                87..=89 => {
                    failures += fs.fault_stats().program_failures;
                    fs = remount(fs, &when);
                    verify(&mut fs, &m, &when);
                }
                90..=91 => {
                    // fsync, then the power goes: what the queue still held is lost
                    fs.fsync(ROOT_INO).unwrap_or_else(|e| panic!("{when}: fsync: {e:?}"));
                    failures += fs.fault_stats().program_failures;
                    let mut f = fs.into_flash();
                    f.inner_mut().cut_now();
                    f.power_lost();
                    f.inner_mut().reboot();
                    fs = mount(f);
                    verify(&mut fs, &m, &format!("{when} (after fsync and a power cut)"));
                }
                92..=95 if !rest.names.is_empty() => {
                    let name = &rest.names[rng.below(rest.names.len() as u64) as usize];
                    let ino = fs.lookup(rest.dir, name.as_bytes()).unwrap().ino;
                    fs.fsync(ino).unwrap_or_else(|e| panic!("{when}: fsync: {e:?}"));
                }
                96..=97 => {
                    fs.gc_step(rng.below(2) == 0).unwrap_or_else(|e| panic!("{when}: gc: {e:?}"));
                }
                _ => fs.sync().unwrap_or_else(|e| panic!("{when}: sync: {e:?}")),
            }
        }
        assert!(!fs.is_failed(), "{when}: the engine stopped");
        if step % 100 == 0 {
            verify(&mut fs, &m, &when);
        }
    }
    verify(&mut fs, &m, &format!("seed {seed} end"));
    failures += fs.fault_stats().program_failures;
    let fs = remount(fs, &format!("seed {seed} end"));
    let mut fs = fs;
    verify(&mut fs, &m, &format!("seed {seed} end, remounted"));
    let st = fs.flash().stats();
    (fs, st, failures)
}

/// The random workload of model.rs (creates, writes, overwrites, truncates, renames, unlinks,
/// directories, fsync, sync, GC, clean remounts, power cuts after fsync) over queues of
/// several sizes made at several rates.
#[test]
fn write_behind_random_workload() {
    let mut late = 0;
    let mut queue_only = 0;
    for seed in 1..11u64 {
        let max_queued = [8, 2, 32, 4, 64][seed as usize % 5];
        let drain = [30, 0, 80][seed as usize % 3];
        let (fs, st, _) = model_run(seed, 1500, max_queued, drain, false);
        eprintln!("seed {seed}: {:?}\n  {st:?}", fs.stats());
        assert_eq!(st.failed_programs, 0);
        assert!(st.deferred > 0, "seed {seed}: no program made later than its call: {st:?}");
        late += st.deferred;
        queue_only += st.queue_only_reads;
    }
    eprintln!("write-behind random workload: {late} programs made late, {queue_only} reads served by the queue alone");
}

fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

/// The random workload on a NAND where page 5 of every eighth block of 10..90 fails every
/// program, for 16 seeds and several queue sizes; the same seeds without write-behind
/// (`max_queued` 0: every program made in the call) as the control.
#[test]
fn write_behind_failed_programs_are_relocated() {
    let mut reported = 0;
    let mut engine_failures = 0;
    let mut broken = Vec::new();
    for seed in 100..116u64 {
        let max_queued = [2, 4, 8, 16][seed as usize % 4];
        for q in [0, max_queued] {
            let r = std::panic::catch_unwind(|| {
                let (fs, st, failures) = model_run(seed, 900, q, 30, true);
                assert!(failures > 0, "seed {seed}: no program failure seen by the engine");
                if q > 0 {
                    assert!(st.failures_reported > 0, "seed {seed}: no failure reported by failed_behind: {st:?}");
                    assert_eq!(st.failures_reported, st.failures_forgotten, "seed {seed}: every reported failure taken back");
                    assert_eq!((st.failed_gaps, st.erased_with_failed), (0, 0), "seed {seed}: {st:?}");
                    assert!(st.deferred > 0, "{st:?}");
                }
                let f = fs.unmount().map_err(|e| e.0).unwrap();
                assert!(f.inner().bad_blocks().len() > 1, "seed {seed}: failed blocks retired: {:?}", f.inner().bad_blocks());
                (st, failures)
            });
            match r {
                Ok((st, failures)) if q > 0 => {
                    reported += st.failures_reported;
                    engine_failures += failures;
                }
                Ok(_) => {}
                Err(e) => broken.push(format!("seed {seed} max_queued {q}: {}", panic_text(&*e))),
            }
        }
    }
    eprintln!("write-behind failed programs: {reported} failures reported by failed_behind, {engine_failures} program failures counted by the engine");
    assert!(broken.is_empty(), "{} runs failed:\n{}", broken.len(), broken.join("\n"));
}

/// The failed-program test of flashsim.rs (page 5 of blocks 10..22 never programs), on a
/// write-behind NAND.
#[test]
fn write_behind_failed_programs_like_nandsim() {
    let mut fs = E::<WB>::mount(prepare(small_wb(48, 12, 8)), opts()).map_err(|e| e.0).unwrap();
    for seg in 10..22 {
        fs.flash().inner_mut().fail_program(seg, 5, 0).unwrap();
    }
    let mut failures = 0;
    let (mut fs, model) = random_overwrites(
        fs,
        |fs| failures += fs.fault_stats().program_failures,
        |f| assert_eq!((f.queued_programs(), f.failed_entries()), (0, 0)),
    );
    assert!(!fs.is_failed());
    failures += fs.fault_stats().program_failures;
    let st = fs.flash().stats();
    eprintln!("{:?}\n{st:?}", fs.stats());
    assert!(failures > 0, "program failures seen by the engine");
    assert!(st.failures_reported > 0, "failures reported by failed_behind: {st:?}");
    assert!(st.deferred > 0);
    assert!(fs.stats().retired >= 3, "segments retired after failed programs: {:?}", fs.stats());
    assert_fsck(&mut fs);
    check_files(&mut fs, &model);
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    assert!(f.inner().bad_blocks().len() >= 2 + 3, "{:?}", f.inner().bad_blocks());
    let mut fs = E::<WB>::mount(f, opts()).map_err(|e| e.0).unwrap();
    check_files(&mut fs, &model);
    assert_fsck(&mut fs);
}

// ----- the wrapper itself -------------------------------------------------------------------

#[test]
fn write_behind_wrapper_semantics() {
    const P: usize = 512;
    let page = |n: usize, s: u8| (0..n * P).map(|i| (i as u8).wrapping_mul(13).wrapping_add(s)).collect::<Vec<u8>>();
    let nand = NandSim::new(NandConfig::with_layout(P as u32, 16, 8)).unwrap();
    let mut f = WriteBehind::with_config(nand, BehindConfig { max_queued: 6, drain_percent: 0, seed: 1 });
    f.inner_mut().enable_log(true);
    let (a, b, c) = (page(2, 1), page(1, 2), page(3, 3));
    f.write_behind(2, 0, &a).unwrap();
    f.write_behind(5, 0, &b).unwrap();
    f.write_behind(2, 2 * P as u32, &c).unwrap();
    assert_eq!(f.queued_programs(), 3);
    assert!(f.inner_mut().take_log().is_empty(), "nothing made yet");
    // read-after-write_behind: the queued bytes, across entries, partly over the erased rest
    let mut buf = vec![0u8; 6 * P];
    f.read(2, 0, &mut buf).unwrap();
    assert_eq!(&buf[..5 * P], &[a.clone(), c.clone()].concat()[..]);
    assert!(buf[5 * P..].iter().all(|&x| x == 0xFF));
    let mut mid = vec![0u8; 900];
    assert_eq!(f.read(2, 700, &mut mid), Ok(ReadStatus::Clean));
    assert_eq!(mid, [&a[700..], &c[..900 - (2 * P - 700)]].concat());
    let st = f.stats();
    assert_eq!((st.overlay_reads, st.queue_only_reads), (2, 1));
    assert!(f.inner_mut().take_log().iter().all(|o| o.kind == ferrofs_flashsim::OpKind::Read), "reads only");
    // a full queue makes the oldest first; a sync write makes all, in call order, first
    f.write_behind(6, 0, &b).unwrap(); // 2 + 1 + 3 + 1 > 6 pages: (2, 0) is made
    let made: Vec<(u32, u32)> = f.inner_mut().take_log().iter().map(|o| (o.seg, o.offset)).collect();
    assert_eq!(made, vec![(2, 0)]);
    f.write(7, 0, &b).unwrap();
    let made: Vec<(u32, u32, u32)> = f.inner_mut().take_log().iter().map(|o| (o.seg, o.offset, o.len)).collect();
    assert_eq!(made, vec![(5, 0, P as u32), (2, 2 * P as u32, 3 * P as u32), (6, 0, P as u32), (7, 0, P as u32)]);
    assert_eq!(f.stats().deferred, 4, "all four made in later calls");
    f.read(2, 0, &mut buf).unwrap();
    assert_eq!(&buf[..5 * P], &[a.clone(), c.clone()].concat()[..]);

    // a failed program: it and the later programs of its segment are kept, read, reported
    f.inner_mut().fail_program(3, 1, 0).unwrap();
    f.write_behind(3, 0, &b).unwrap();
    f.write_behind(3, P as u32, &a).unwrap(); // pages 1-2: fails
    f.write_behind(4, 0, &b).unwrap();
    f.write_behind(3, 3 * P as u32, &b).unwrap(); // not made
    assert_eq!(f.failed_behind(), None, "nothing made yet");
    f.settle().unwrap();
    assert_eq!(f.failed_behind(), Some((3, P as u32, 3 * P as u32)));
    assert!(f.inner().is_page_programmed(4, 0), "other segments go on");
    assert!(!f.inner().is_page_programmed(3, 3), "nothing more made in a failed segment");
    // read until forget_failed, over the medium's garbage and erased pages
    let mut fb = vec![0u8; 6 * P];
    f.read(3, P as u32, &mut fb).unwrap();
    assert_eq!(&fb[..3 * P], &[a.clone(), b.clone()].concat()[..]);
    assert!(fb[3 * P..].iter().all(|&x| x == 0xFF));
    assert_ne!(f.inner().segment_data(3).unwrap()[P..2 * P], a[..P], "the medium holds garbage there");
    // nothing more goes to the segment: programs refused, nothing queued
    assert_eq!(f.write_behind(3, 4 * P as u32, &c), Err(FlashError::WriteFailed));
    assert_eq!(f.write(3, 7 * P as u32, &b), Err(FlashError::WriteFailed));
    assert_eq!(f.queued_programs(), 0);
    assert_eq!(f.failed_behind(), Some((3, P as u32, 3 * P as u32)));
    // a second failed segment comes after the first
    f.inner_mut().fail_program(6, 1, 0).unwrap();
    f.write_behind(6, P as u32, &b).unwrap();
    f.settle().unwrap();
    assert_eq!(f.failed_behind(), Some((3, P as u32, 3 * P as u32)), "the oldest failure first");
    f.forget_failed(3);
    assert_eq!(f.failed_behind(), Some((6, P as u32, P as u32)));
    f.read(3, P as u32, &mut fb).unwrap();
    assert_ne!(&fb[..2 * P], &a[..], "after forget_failed the medium's bytes read");
    assert!(fb[2 * P..].iter().all(|&x| x == 0xFF));
    f.forget_failed(6);
    assert_eq!(f.failed_behind(), None);
    f.write(3, 7 * P as u32, &b).unwrap();
    let st = f.stats();
    assert_eq!((st.failed_programs, st.failed_unmade, st.refused_writes, st.failures_forgotten), (2, 1, 2, 2));

    // an Io error of a program comes with the next call
    f.fail_io_after(1);
    f.write_behind(0, 0, &b).unwrap();
    assert_eq!(f.flush(), Err(FlashError::Io));
    assert_eq!(f.failed_behind(), Some((0, 0, P as u32)));
    f.forget_failed(0);
    assert_eq!(f.flush(), Ok(()));

    // a power cut loses the queue's suffix; every call fails until the reboot
    f.inner_mut().cut_after_with(2, CutPlan { effect: CutEffect::NotDone, ..CutPlan::default() });
    for i in 0..4u32 {
        f.write_behind(1, i * P as u32, &b).unwrap();
    }
    assert_eq!(f.settle(), Err(FlashError::PowerCut));
    assert_eq!(f.write_behind(1, 4 * P as u32, &b), Err(FlashError::PowerCut));
    assert_eq!(f.read(1, 0, &mut mid), Err(FlashError::PowerCut));
    assert!(!f.powered());
    assert_eq!(f.stats().lost_to_power_cut, 2);
    f.reboot_sim();
    assert_eq!(f.queued_programs(), 0);
    let mut one = vec![0u8; 2 * P];
    f.read(1, 0, &mut one).unwrap();
    assert_eq!(&one[..P], &b[..]);
    assert!(one[P..].iter().all(|&x| x == 0xFF), "the cut program and the rest lost");
}

/// Random drains: the programs are made in call order whatever the points, and the medium ends
/// equal to the same programs made synchronously.
#[test]
fn write_behind_random_points_keep_order() {
    const P: usize = 512;
    for seed in 0..20u64 {
        let nand = NandSim::new(NandConfig::with_layout(P as u32, 16, 8)).unwrap();
        let mut f = WriteBehind::with_config(nand.clone(), BehindConfig { max_queued: 1 + seed as u32 % 7, drain_percent: 50, seed });
        let mut sync = nand;
        f.inner_mut().enable_log(true);
        sync.enable_log(true);
        let mut rng = Rng::new(seed);
        let mut next = [0u32; 8];
        let mut expect: Vec<(u32, u32)> = Vec::new();
        for i in 0..200 {
            let seg = rng.below(8) as u32;
            let n = 1 + rng.below(3) as u32;
            if next[seg as usize] + n > 16 {
                continue;
            }
            let mut d = vec![0u8; n as usize * P];
            rng.fill(&mut d);
            let off = next[seg as usize] * P as u32;
            if i % 17 == 0 {
                f.write(seg, off, &d).unwrap();
            } else {
                f.write_behind(seg, off, &d).unwrap();
            }
            sync.write(seg, off, &d).unwrap();
            expect.push((seg, off));
            next[seg as usize] += n;
            // read a random range back: the queue over the medium equals the synchronous medium
            let rs = rng.below(8) as u32;
            let ro = rng.below(16 * P as u64 - 1) as u32;
            let rl = 1 + rng.below(16 * P as u64 - u64::from(ro)) as usize;
            let (mut x, mut y) = (vec![0u8; rl], vec![0u8; rl]);
            f.read(rs, ro, &mut x).unwrap();
            sync.read(rs, ro, &mut y).unwrap();
            assert!(x == y, "seed {seed} step {i}: read {rs}:{ro}+{rl} differs");
        }
        f.settle().unwrap();
        let made: Vec<(u32, u32)> = f.inner_mut().take_log().iter().filter(|o| o.kind == ferrofs_flashsim::OpKind::Write).map(|o| (o.seg, o.offset)).collect();
        assert_eq!(made, expect, "seed {seed}: programs out of call order");
        assert!(f.inner().data() == sync.data(), "seed {seed}");
        assert!(f.stats().deferred > 0 && f.stats().made_at_random > 0, "{:?}", f.stats());
    }
}

