//! Power cuts on the team's flash simulators (`ferrofs-flashsim`), shared by `flashsim.rs` and
//! `write_behind.rs`: the [`Sim`] trait over `NandSim`, `BlockSim` and `WriteBehind`, the
//! prepared volume and the cut-point enumeration of one `crashload` workload.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::std_platform::StdPlatform;
use ferrofs_engine::{CreateArgs, Engine, Flash, MountOptions, ROOT_INO};
use ferrofs_flashsim::{BlockSim, CutPlan, NandSim, WriteBehind};

use crate::crashload::{apply_fs, live_oracle, read_state, states, workload};
use crate::snapshot::snapshot;
use crate::{mkfs, ts, Rng};

type E<F> = Engine<StdPlatform, F>;

/// The mount options of the enumerations (a small index cache, so that nodes are written often).
pub fn cut_opts() -> MountOptions {
    MountOptions { cache_nodes: 24, ..Default::default() }
}

/// A simulator whose power can be cut.
pub trait Sim: Flash + Clone {
    /// Cut the power at the `n`th device operation from now, as `plan` says.
    fn cut(&mut self, n: u64, plan: CutPlan);
    /// Power back on (after a cut).
    fn reboot_sim(&mut self);
    /// Device operations since power-on.
    fn ops(&self) -> u64;
    /// Whether the power is on.
    fn powered(&self) -> bool;
}

/// `Sim` for a flashsim device (its own cut, reboot and counters).
macro_rules! sim_for_device {
    ($($t:ty),*) => {$(
        impl Sim for $t {
            fn cut(&mut self, n: u64, plan: CutPlan) {
                self.cut_after_with(n, plan);
            }
            fn reboot_sim(&mut self) {
                self.reboot();
            }
            fn ops(&self) -> u64 {
                self.ops_since_power_on()
            }
            fn powered(&self) -> bool {
                self.is_powered()
            }
        }
    )*};
}

sim_for_device!(NandSim, BlockSim);

/// The cut is scheduled on the medium, counting programs when the queue makes them; a reboot
/// loses the queue (RAM).
impl<F: Sim> Sim for WriteBehind<F> {
    fn cut(&mut self, n: u64, plan: CutPlan) {
        self.inner_mut().cut(n, plan);
    }
    fn reboot_sim(&mut self) {
        self.power_lost();
        self.inner_mut().reboot_sim();
    }
    fn ops(&self) -> u64 {
        self.inner().ops()
    }
    fn powered(&self) -> bool {
        self.inner().powered()
    }
}

/// Format `f` and write four 30 000-byte files (so that GC and replay have work).
pub fn prepare<F: Flash>(f: F) -> F {
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = E::<F>::mount(f, cut_opts()).map_err(|e| e.0).unwrap();
    let mut rng = Rng::new(1);
    for i in 0..4 {
        let f = fs.create(ROOT_INO, format!("base{i}").as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
        let mut d = vec![0u8; 30_000];
        rng.fill(&mut d);
        fs.write(f.ino, 0, &d, ts(1)).unwrap();
    }
    fs.unmount().map_err(|e| e.0).unwrap()
}

/// Every cut point of `crashload` workload `seed` on a copy of `tpl`, each checked: the mount
/// works, reports no damage and is writable, fsck is clean, the state is the fsync'd one or a
/// later one (the shared oracle), and new work survives a remount. `at_cut` sees the medium
/// right after each cut run, before the reboot. Returns the cut points verified.
pub fn enumerate_cuts<F: Sim>(tpl: F, seed: u64, plan: CutPlan, label: &str, mut at_cut: impl FnMut(&mut F)) -> usize {
    let ops = workload(seed);
    let base = {
        let mut fs = E::<F>::mount(tpl.clone(), cut_opts()).map_err(|e| e.0).unwrap();
        read_state(&mut fs)
    };
    let o = live_oracle(E::<F>::mount(tpl.clone(), cut_opts()).map_err(|e| e.0).unwrap(), &ops, &states(&base, &ops));
    // dry run: how many operations after the mount
    let total = {
        let mut fs = E::<F>::mount(tpl.clone(), cut_opts()).map_err(|e| e.0).unwrap();
        let before = fs.flash().ops();
        for (i, op) in ops.iter().enumerate() {
            apply_fs(&mut fs, op, i as i64 + 10).unwrap();
        }
        fs.flash().ops() - before
    };
    let mut runs = 0;
    for n in 1..=total {
        let mut fs = E::<F>::mount(tpl.clone(), cut_opts()).map_err(|e| e.0).unwrap();
        fs.flash().cut(n, plan);
        let mut done = 0;
        for (i, op) in ops.iter().enumerate() {
            match apply_fs(&mut fs, op, i as i64 + 10) {
                Ok(()) => done += 1,
                Err(e) => {
                    assert!(!fs.flash().powered(), "{label} cut {n}: op {i} failed without a cut: {e:?}");
                    break;
                }
            }
        }
        let mut f = fs.into_flash();
        at_cut(&mut f);
        f.reboot_sim();
        let mut fs = match E::<F>::mount(f, cut_opts()) {
            Ok(fs) => fs,
            Err((e, _)) => panic!("{label} cut {n}: mount failed: {e:?}"),
        };
        // a cut (torn or not) is never reported as damage, and the mount stays writable
        assert_eq!(fs.log_damage(), None, "{label} cut {n}: a power cut taken for log damage");
        assert!(!fs.is_read_only(), "{label} cut {n}");
        let r = fs.fsck().unwrap();
        assert_eq!(r.problems, 0, "{label} cut {n}: fsck {r:?}");
        let got = snapshot(&mut fs).unwrap();
        if let Err(e) = o.check(done, &got) {
            panic!("{label} cut {n} after {done} phases: {e}");
        }
        // keeps working
        let f2 = fs.create(ROOT_INO, b"after", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(999));
        let f2 = f2.unwrap_or_else(|e| panic!("{label} cut {n}: create after the remount: {e:?}"));
        if let Err(e) = fs.write(f2.ino, 0, &[3u8; 5000], ts(999)) {
            panic!("{label} cut {n}: write after the remount: {e:?}");
        }
        let f = fs.unmount().map_err(|e| e.0).unwrap_or_else(|e| panic!("{label} cut {n}: unmount after the remount: {e:?}"));
        let mut fs = E::<F>::mount(f, cut_opts()).map_err(|e| e.0).unwrap_or_else(|e| panic!("{label} cut {n}: second mount: {e:?}"));
        assert_eq!(fs.lookup(ROOT_INO, b"after").unwrap().size, 5000);
        runs += 1;
    }
    eprintln!("{label}: {runs} cut points verified");
    runs
}

/// Six files under 400 random overwrites of up to 6 000 bytes within their first 40 000 (an
/// fsync every 25th, a clean remount every 100th), as the failed-program tests run them:
/// `before_remount` sees the engine before each unmount, `unmounted` the medium between unmount
/// and mount. Returns the engine and the files' expected contents ([`check_files`]).
pub fn random_overwrites<F: Flash>(mut fs: E<F>, mut before_remount: impl FnMut(&mut E<F>), mut unmounted: impl FnMut(&F)) -> (E<F>, Vec<(u64, Vec<u8>)>) {
    let mut rng = Rng::new(13);
    let mut model: Vec<(u64, Vec<u8>)> = Vec::new();
    for i in 0..6 {
        let a = fs.create(ROOT_INO, format!("r{i}").as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(2)).unwrap();
        model.push((a.ino, Vec::new()));
    }
    for step in 0..400 {
        let k = rng.below(model.len() as u64) as usize;
        let (ino, content) = &mut model[k];
        let off = rng.below(40_000) as usize;
        let len = 1 + rng.below(6000) as usize;
        let mut d = vec![0u8; len];
        rng.fill(&mut d);
        fs.write(*ino, off as u64, &d, ts(3)).unwrap_or_else(|e| panic!("step {step}: {e:?}"));
        if content.len() < off + len {
            content.resize(off + len, 0);
        }
        content[off..off + len].copy_from_slice(&d);
        if step % 25 == 0 {
            fs.fsync(*ino).unwrap();
        }
        if step % 100 == 99 {
            before_remount(&mut fs);
            let f = fs.unmount().map_err(|e| e.0).unwrap();
            unmounted(&f);
            fs = E::<F>::mount(f, cut_opts()).map_err(|e| e.0).unwrap();
        }
    }
    (fs, model)
}

/// Every file of `model` reads back whole and equal.
pub fn check_files<F: Flash>(fs: &mut E<F>, model: &[(u64, Vec<u8>)]) {
    for (ino, content) in model {
        let mut b = vec![0u8; content.len()];
        assert_eq!(fs.read(*ino, 0, &mut b).unwrap(), content.len());
        assert!(b == *content, "inode {ino} differs");
    }
}
