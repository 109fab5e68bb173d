//! MLC NAND (paired pages): the pairing schemes, format and mount with and without a usable
//! pairing, the cost of the padding that keeps durable records out of reach of later programs,
//! and a check that the medium model bites: a device that misreports its pairing (so that the
//! engine pads too little) loses fsync'd data at some cut point, the same device reporting it
//! right loses none, on `RamFlash` and on flashsim's `NandSim`.

use ferrofs_engine::std_platform::StdPlatform;
use ferrofs_engine::{Engine, Error, Flash, FlashKind, MountOptions, PairInfo, Pairing, PairingScheme, ROOT_INO};
use ferrofs_engine_tests::*;
use ferrofs_flashsim::{CutEffect, CutPlan, NandConfig, NandSim, TornFill};

const DIST3: Pairing = Pairing { groups: 2, scheme: PairingScheme::Dist3 };
const ADJACENT: Pairing = Pairing { groups: 2, scheme: PairingScheme::Adjacent };

/// Linux's dist3 scheme (nand_base.c), page by page on a 128-page block, both ways; adjacent
/// pairs; the distances the engine pads by; pairings that describe no block are refused.
#[test]
fn pairing_schemes_map_pages_like_linux() {
    // (page, pair, group) as Linux's nand_pairing_dist3_get_info gives them
    let want = [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 2, 0), (4, 1, 1), (5, 3, 0), (6, 2, 1), (7, 4, 0), (124, 61, 1), (125, 63, 0), (126, 62, 1), (127, 64, 0)];
    for (page, pair, group) in want {
        assert_eq!(DIST3.info(page, 128), Some(PairInfo { pair, group }), "page {page}");
        assert_eq!(DIST3.wunit(PairInfo { pair, group }, 128), Some(page), "page {page}");
    }
    for page in 0..128 {
        let lower = DIST3.lowest_shared(page, 128);
        let expect = match page {
            2 => Some(0),
            p if p > 2 && p % 2 == 0 => Some(p - 3),
            _ => None,
        };
        assert_eq!(lower, expect, "dist3 page {page}");
        assert_eq!(ADJACENT.lowest_shared(page, 128), (page % 2 == 1).then(|| page - 1), "adjacent page {page}");
    }
    assert_eq!(DIST3.max_distance(128), Some(3));
    assert_eq!(DIST3.max_distance(64), Some(3));
    assert_eq!(ADJACENT.max_distance(128), Some(1));
    assert_eq!(DIST3.info(128, 128), None);
    assert_eq!(DIST3.wunit(PairInfo { pair: 64, group: 1 }, 128), None);
    assert_eq!(DIST3.wunit(PairInfo { pair: 3, group: 2 }, 128), None);
    assert_eq!(DIST3.wunit(PairInfo { pair: u32::MAX, group: 1 }, 128), None);
    assert_eq!(ADJACENT.wunit(PairInfo { pair: u32::MAX, group: 1 }, u32::MAX), None);
    // hostile descriptions: fewer than two groups, or groups the scheme exceeds, or no pages
    for groups in [0, 1] {
        for scheme in [PairingScheme::Dist3, PairingScheme::Adjacent] {
            assert_eq!(Pairing { groups, scheme }.max_distance(128), None, "{groups} groups {scheme:?}");
        }
    }
    assert_eq!(DIST3.max_distance(0), None);
    assert_eq!(Pairing { groups: u32::MAX, scheme: PairingScheme::Dist3 }.max_distance(128), Some(3));
}

fn fill(fs: &mut Fs, rounds: u32) -> Vec<u8> {
    let f = fs.create(ROOT_INO, b"f", &reg(), ts(1)).unwrap();
    let mut want = Vec::new();
    for i in 0..rounds {
        let d = vec![i as u8 + 1; 3000];
        fs.write(f.ino, want.len() as u64, &d, ts(2)).unwrap();
        want.extend_from_slice(&d);
        fs.fsync(f.ino).unwrap();
    }
    want
}

fn read_f<F: Flash>(fs: &mut Engine<StdPlatform, F>) -> Result<Vec<u8>, Error> {
    let ino = fs.lookup(ROOT_INO, b"f")?.ino;
    let size = fs.getattr(ino)?.size as usize;
    let mut buf = vec![0u8; size];
    let n = fs.read(ino, 0, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// MLC NAND without a pairing, or with one that describes no block, is refused by format and
/// mount (read-only too) with NotSupported; with dist3 or adjacent pairs it formats, mounts and
/// keeps data; an image formatted for SLC NAND (checkpoint slots without the pairing distance)
/// is refused on MLC; an MLC image mounts as SLC NAND.
#[test]
fn mlc_needs_a_usable_pairing() {
    let bare = RamFlash::with_kind(FlashKind::MlcNand, 64 * 1024, 64, 2048);
    assert_eq!(mkfs(bare, &Default::default(), ts(0)).err().map(|e| e.0), Some(Error::NotSupported));
    for groups in [0, 1] {
        let f = RamFlash::new_mlc(64 * 1024, 64, 2048, Pairing { groups, ..DIST3 });
        assert_eq!(mkfs(f, &Default::default(), ts(0)).err().map(|e| e.0), Some(Error::NotSupported), "{groups} groups");
        let mut f = mkfs(RamFlash::new_mlc(64 * 1024, 64, 2048, DIST3), &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
        f.reported = Some(Pairing { groups, ..DIST3 });
        for ro in [false, true] {
            let (e, back) = Fs::mount(f, MountOptions { read_only: ro, ..Default::default() }).err().expect("mount with a broken pairing");
            assert_eq!(e, Error::NotSupported);
            f = back;
        }
    }
    for p in [DIST3, ADJACENT] {
        let f = mkfs(RamFlash::new_mlc(64 * 1024, 64, 2048, p), &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
        let mut fs = Fs::mount(f, Default::default()).map_err(|e| e.0).unwrap();
        let want = fill(&mut fs, 5);
        assert!(fs.stats().pair_pad_bytes > 0, "{p:?}: no pair padding");
        let mut fs = crash_remount(fs);
        assert_eq!(read_f(&mut fs).unwrap(), want, "{p:?}");
        assert_consistent(&mut fs);
        let mut f = fs.unmount().map_err(|e| e.0).unwrap();
        // the same image as SLC NAND
        f.set_kind(FlashKind::Nand);
        let mut fs = Fs::mount(f, Default::default()).map_err(|e| e.0).unwrap();
        assert_eq!(read_f(&mut fs).unwrap(), want, "{p:?} as SLC");
        assert_eq!(fs.stats().pair_pad_bytes, 0);
    }
    // formatted for SLC: the checkpoint slots are too close together for paired pages
    let mut f = mkfs(RamFlash::new_nand(64 * 1024, 64, 2048), &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    f.set_kind(FlashKind::MlcNand);
    f.reported = Some(DIST3);
    for ro in [false, true] {
        let (e, back) = Fs::mount(f, MountOptions { read_only: ro, ..Default::default() }).err().expect("SLC image mounted on MLC");
        assert_eq!(e, Error::NotSupported);
        f = back;
    }
}

/// What the padding costs per fsync with Linux's dist3 pairing on 4 KiB pages, 128 pages per
/// block: a 3000-byte append and fsync, 200 times, all heads open (the default) and under an
/// open-segment limit of 2 (one log head); the same on SLC NAND for comparison.
#[test]
fn fsync_padding_cost_dist3_4k_pages() {
    let fsyncs = 200u64;
    let mut per = Vec::new();
    for (label, mlc, open) in [("SLC, 3 heads", false, None), ("MLC dist3, 3 heads", true, None), ("SLC, 1 head", false, Some(2)), ("MLC dist3, 1 head", true, Some(2))] {
        let f = if mlc { RamFlash::new_mlc(512 * 1024, 48, 4096, DIST3) } else { RamFlash::new_nand(512 * 1024, 48, 4096) };
        let fo = ferrofs_engine::FormatOptions { open_segments: open, ..Default::default() };
        let f = mkfs(f, &fo, ts(0)).map_err(|e| e.0).unwrap();
        let mut fs = Fs::mount(f, MountOptions { checkpoint_log_bytes: u64::MAX, ..Default::default() }).map_err(|e| e.0).unwrap();
        let ino = fs.create(ROOT_INO, b"f", &reg(), ts(1)).unwrap().ino;
        fs.fsync(ino).unwrap();
        let (p0, pad0, cp0) = (fs.stats().programmed_bytes, fs.stats().pair_pad_bytes, fs.stats().checkpoints);
        for i in 0..fsyncs {
            fs.write(ino, i * 3000, &[i as u8; 3000], ts(2)).unwrap();
            fs.fsync(ino).unwrap();
        }
        let s = fs.stats();
        let prog = (s.programmed_bytes - p0) / fsyncs;
        let pad = (s.pair_pad_bytes - pad0) / fsyncs;
        println!("{label}: {prog} bytes programmed per fsync, {pad} of them pair padding ({} checkpoints)", s.checkpoints - cp0);
        eprintln!("{label}: {prog} bytes programmed per fsync, {pad} of them pair padding ({} checkpoints)", s.checkpoints - cp0);
        per.push((prog, pad));
    }
    // SLC pads nothing for pairs; MLC pads at most 3 pages per head and flush
    assert_eq!(per[0].1, 0);
    assert_eq!(per[2].1, 0);
    assert!(per[1].1 > 0 && per[1].1 <= 3 * 3 * 4096, "{per:?}");
    assert!(per[3].1 > 0 && per[3].1 <= 3 * 4096, "{per:?}");
    assert!(per[1].0 > per[0].0 && per[3].0 > per[2].0, "{per:?}");
}

/// A medium with power cuts, for [`cut_each_point`].
trait CutFlash: Flash + Clone {
    /// Cut the power at the `n`-th device operation from now (a program torn half-way).
    fn arm(&mut self, n: u64);
    /// Whether the power is off.
    fn is_dead(&self) -> bool;
    /// Power on again.
    fn restore(&mut self);
    /// Pages destroyed by pairing so far.
    fn paired_lost(&self) -> u64;
}

impl CutFlash for RamFlash {
    fn arm(&mut self, n: u64) {
        self.cut_in = Some(n);
        self.tear = true;
    }
    fn is_dead(&self) -> bool {
        self.dead
    }
    fn restore(&mut self) {
        self.power_on();
    }
    fn paired_lost(&self) -> u64 {
        self.pair_losses
    }
}

impl CutFlash for NandSim {
    fn arm(&mut self, n: u64) {
        // a seed per cut point: which page of the write is torn, and whether it was started
        self.reseed(n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x31c);
        self.cut_after_with(n + 1, CutPlan { effect: CutEffect::Torn, fill: TornFill::Random, ..CutPlan::default() });
    }
    fn is_dead(&self) -> bool {
        !self.is_powered()
    }
    fn restore(&mut self) {
        self.reboot();
    }
    fn paired_lost(&self) -> u64 {
        self.paired_pages_lost()
    }
}

/// Cut points checked, cuts after which fsync'd data was lost (or the mount failed or found
/// damage), pages destroyed by pairing.
#[derive(Debug, Default)]
struct Losses {
    cuts: u64,
    lost: u64,
    paired: u64,
}

/// Append 700 bytes and fsync, `rounds` times, on a formatted `tpl`, cutting the power at
/// every device operation in turn: after each cut the remount must succeed without damage
/// and the file must hold at least what the last completed fsync made durable.
fn cut_each_point<F: CutFlash>(tpl: &F, rounds: u64) -> Losses {
    let mut out = Losses::default();
    let mut n = 0u64;
    loop {
        let mut fs = Engine::<StdPlatform, F>::mount(tpl.clone(), Default::default()).map_err(|e| e.0).unwrap();
        fs.flash().arm(n);
        let mut durable: Vec<u8> = Vec::new();
        let mut written: Vec<u8> = Vec::new();
        let mut cut = false;
        let run = (|| -> Result<(), Error> {
            let ino = fs.create(ROOT_INO, b"f", &reg(), ts(1))?.ino;
            fs.fsync(ino)?;
            for i in 0..rounds {
                let d = vec![i as u8 + 1; 700];
                fs.write(ino, written.len() as u64, &d, ts(2))?;
                written.extend_from_slice(&d);
                fs.fsync(ino)?;
                durable = written.clone();
            }
            Ok(())
        })();
        if run.is_err() {
            assert!(fs.flash().is_dead(), "cut {n}: failed without a cut: {run:?}");
            cut = true;
        }
        let mut f = fs.into_flash();
        if !cut {
            return out;
        }
        out.cuts += 1;
        out.paired += f.paired_lost();
        f.restore();
        let ok = match Engine::<StdPlatform, F>::mount(f, Default::default()) {
            Ok(mut fs) => fs.log_damage().is_none() && !fs.is_read_only() && read_f(&mut fs).map_or(durable.is_empty(), |got| got.len() >= durable.len() && got[..durable.len()] == durable[..]),
            Err(_) => false,
        };
        if !ok {
            out.lost += 1;
        }
        n += 1;
    }
}

/// The model bites: MLC NAND whose cells pair as dist3 but which reports adjacent pairs (so
/// that the engine pads by one page where three are needed) loses fsync'd data at some cut
/// points; the same device reporting dist3 loses none, on `RamFlash` and on `NandSim`.
#[test]
fn misreported_pairing_loses_fsynced_data() {
    for (name, reported) in [("dist3 reported", DIST3), ("adjacent reported", ADJACENT)] {
        let mut f = RamFlash::new_mlc(32 * 1024, 40, 512, DIST3);
        f.reported = Some(reported);
        let tpl = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
        let l = cut_each_point(&tpl, 12);
        println!("RamFlash, dist3 cells, {name}: {l:?}");
        eprintln!("RamFlash, dist3 cells, {name}: {l:?}");
        assert!(l.paired > 0, "{name}: no paired page destroyed");
        if reported == DIST3 {
            assert_eq!(l.lost, 0, "{name}: fsync'd data lost");
        } else {
            assert!(l.lost > 0, "{name}: too little padding lost nothing: the model does not bite");
        }
    }
    for (name, reported) in [("dist3 reported", DIST3), ("adjacent reported", ADJACENT)] {
        let cfg = NandConfig { kind: FlashKind::MlcNand, pairing: Some(DIST3), seed: 7, ..NandConfig::with_layout(512, 64, 40) };
        let sim = NandSim::new(cfg).unwrap();
        let sim = mkfs(sim, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
        let tpl = MisreportingSim { sim, reported };
        let l = cut_each_point(&tpl, 12);
        println!("NandSim, dist3 cells, {name}: {l:?}");
        eprintln!("NandSim, dist3 cells, {name}: {l:?}");
        assert!(l.paired > 0, "{name}: no paired page destroyed");
        if reported == DIST3 {
            assert_eq!(l.lost, 0, "{name}: fsync'd data lost");
        } else {
            assert!(l.lost > 0, "{name}: too little padding lost nothing: the model does not bite");
        }
    }
}

/// A `NandSim` reporting a pairing of our choosing.
#[derive(Clone)]
struct MisreportingSim {
    sim: NandSim,
    reported: Pairing,
}

impl Flash for MisreportingSim {
    fn geometry(&self) -> ferrofs_engine::Geometry {
        self.sim.geometry()
    }
    fn pairing(&self) -> Option<Pairing> {
        Some(self.reported)
    }
    fn read(&mut self, seg: u32, off: u32, buf: &mut [u8]) -> Result<ferrofs_engine::ReadStatus, ferrofs_engine::FlashError> {
        self.sim.read(seg, off, buf)
    }
    fn write(&mut self, seg: u32, off: u32, buf: &[u8]) -> Result<(), ferrofs_engine::FlashError> {
        self.sim.write(seg, off, buf)
    }
    fn erase(&mut self, seg: u32) -> Result<(), ferrofs_engine::FlashError> {
        self.sim.erase(seg)
    }
    fn is_bad(&mut self, seg: u32) -> Result<bool, ferrofs_engine::FlashError> {
        self.sim.is_bad(seg)
    }
    fn mark_bad(&mut self, seg: u32) -> Result<(), ferrofs_engine::FlashError> {
        self.sim.mark_bad(seg)
    }
    fn flush(&mut self) -> Result<(), ferrofs_engine::FlashError> {
        self.sim.flush()
    }
}

impl CutFlash for MisreportingSim {
    fn arm(&mut self, n: u64) {
        self.sim.arm(n);
    }
    fn is_dead(&self) -> bool {
        self.sim.is_dead()
    }
    fn restore(&mut self) {
        self.sim.restore();
    }
    fn paired_lost(&self) -> u64 {
        self.sim.paired_lost()
    }
}

/// flashsim's MLC mode: a torn program of an upper page makes its programmed lower page
/// uncorrectable (until the block is erased), a torn lower page or a cut before the program
/// destroys nothing else, and a pairing needs the MLC kind and must describe the block.
#[test]
fn nandsim_mlc_cut_destroys_the_paired_lower_page() {
    let cfg = NandConfig { kind: FlashKind::MlcNand, pairing: Some(DIST3), ..NandConfig::with_layout(512, 64, 4) };
    let mut base = NandSim::new(cfg.clone()).unwrap();
    assert_eq!(base.pairing(), Some(DIST3));
    for p in 0..2u32 {
        base.write(0, p * 512, &[p as u8; 512]).unwrap();
    }
    let mut destroyed = 0;
    for seed in 0..64 {
        // page 2 is the upper page of page 0
        let mut s = base.clone();
        s.reseed(seed);
        s.cut_after_with(1, CutPlan { effect: CutEffect::Torn, ..CutPlan::default() });
        assert!(s.write(0, 2 * 512, &[9; 512]).is_err());
        s.reboot();
        let mut b = [0u8; 512];
        assert!(s.read(0, 512, &mut b).is_ok(), "page 1 shares no cell with page 2");
        if s.paired_pages_lost() > 0 {
            destroyed += 1;
            assert_eq!(s.read(0, 0, &mut b), Err(ferrofs_engine::FlashError::Uncorrectable));
            s.erase(0).unwrap();
            assert!(s.read(0, 0, &mut b).is_ok());
        } else {
            assert!(s.read(0, 0, &mut b).is_ok());
        }
        // a cut before the program starts destroys nothing
        let mut s = base.clone();
        s.cut_after_with(1, CutPlan { effect: CutEffect::NotDone, ..CutPlan::default() });
        assert!(s.write(0, 2 * 512, &[9; 512]).is_err());
        s.reboot();
        assert_eq!(s.paired_pages_lost(), 0);
        // page 3 is a lower page: its torn program destroys nothing else
        let mut s = base.clone();
        s.write(0, 2 * 512, &[2; 512]).unwrap();
        s.reseed(seed);
        s.cut_after_with(1, CutPlan { effect: CutEffect::Torn, ..CutPlan::default() });
        assert!(s.write(0, 3 * 512, &[3; 512]).is_err());
        assert_eq!(s.paired_pages_lost(), 0);
    }
    assert!(destroyed > 0, "no torn upper page destroyed its lower page");
    assert!(NandSim::new(NandConfig { kind: FlashKind::Nand, ..cfg.clone() }).is_err());
    assert!(NandSim::new(NandConfig { pairing: Some(Pairing { groups: 1, ..DIST3 }), ..cfg }).is_err());
}
