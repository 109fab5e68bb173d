//! Power-cut recovery: enumerate cut points over a workload of single-operation phases, each
//! followed by fsync (or a checkpoint). After a cut, mount must succeed, the index must agree
//! with the segment table, and the visible state must be the state after the last completed
//! phase or after the one in progress.

use std::collections::BTreeMap;

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, Error, FlashKind, MountOptions, SetAttr, ROOT_INO};
use ferrofs_engine_tests::*;

type State = BTreeMap<String, Vec<u8>>;

#[derive(Clone, Debug)]
enum Op {
    Create(String),
    Write(String, u64, usize, u8),
    Truncate(String, u64),
    Rename(String, String),
    Unlink(String),
    Sync,
    Gc,
}

fn workload(seed: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut ops = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for i in 0..70 {
        let r = rng.below(100);
        if names.len() < 3 || r < 15 {
            let n = format!("n{i}");
            names.push(n.clone());
            ops.push(Op::Create(n));
        } else if r < 60 {
            let n = names[rng.below(names.len() as u64) as usize].clone();
            let off = rng.below(6) * 4096 + if rng.below(2) == 0 { 0 } else { rng.below(3000) };
            let len = 1 + rng.below(4096 - (off % 4096)) as usize;
            ops.push(Op::Write(n, off, len, rng.below(250) as u8 + 1));
        } else if r < 70 {
            let n = names[rng.below(names.len() as u64) as usize].clone();
            ops.push(Op::Truncate(n, rng.below(20_000)));
        } else if r < 80 {
            let a = names[rng.below(names.len() as u64) as usize].clone();
            let b = if rng.below(2) == 0 { names[rng.below(names.len() as u64) as usize].clone() } else { format!("m{i}") };
            if a != b {
                names.retain(|x| *x != b);
                let p = names.iter().position(|x| *x == a).unwrap();
                names[p] = b.clone();
                ops.push(Op::Rename(a, b));
            }
        } else if r < 88 {
            let p = rng.below(names.len() as u64) as usize;
            ops.push(Op::Unlink(names.remove(p)));
        } else if r < 94 {
            ops.push(Op::Sync);
        } else {
            ops.push(Op::Gc);
        }
    }
    ops
}

fn apply_model(s: &mut State, op: &Op) {
    match op {
        Op::Create(n) => {
            s.insert(n.clone(), Vec::new());
        }
        Op::Write(n, off, len, b) => {
            let c = s.get_mut(n).unwrap();
            let end = *off as usize + len;
            if c.len() < end {
                c.resize(end, 0);
            }
            c[*off as usize..end].fill(*b);
        }
        Op::Truncate(n, sz) => s.get_mut(n).unwrap().resize(*sz as usize, 0),
        Op::Rename(a, b) => {
            let c = s.remove(a).unwrap();
            s.insert(b.clone(), c);
        }
        Op::Unlink(n) => {
            s.remove(n);
        }
        Op::Sync | Op::Gc => {}
    }
}

fn apply_fs(fs: &mut Fs, op: &Op, t: i64) -> Result<(), Error> {
    let look = |fs: &mut Fs, n: &str| fs.lookup(ROOT_INO, n.as_bytes()).map(|i| i.ino);
    match op {
        Op::Create(n) => {
            fs.create(ROOT_INO, n.as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(t))?;
        }
        Op::Write(n, off, len, b) => {
            let ino = look(fs, n)?;
            fs.write(ino, *off, &vec![*b; *len], ts(t))?;
        }
        Op::Truncate(n, sz) => {
            let ino = look(fs, n)?;
            fs.setattr(ino, &SetAttr { size: Some(*sz), ..Default::default() }, ts(t))?;
        }
        Op::Rename(a, b) => {
            let victim = look(fs, b).ok();
            fs.rename(ROOT_INO, a.as_bytes(), ROOT_INO, b.as_bytes(), 0, ts(t))?;
            if let Some(v) = victim {
                fs.evict(v)?;
            }
        }
        Op::Unlink(n) => {
            let ino = look(fs, n)?;
            fs.unlink(ROOT_INO, n.as_bytes(), ts(t))?;
            fs.evict(ino)?;
        }
        Op::Sync => return fs.sync(),
        Op::Gc => {
            fs.gc_step(false)?;
        }
    }
    fs.fsync(ROOT_INO)
}

fn read_state(fs: &mut Fs) -> State {
    let mut names = Vec::new();
    fs.readdir(ROOT_INO, 0, &mut |n, ino, _, _| {
        names.push((String::from_utf8(n.to_vec()).unwrap(), ino));
        true
    })
    .unwrap();
    let mut s = State::new();
    for (n, ino) in names {
        if n == "." || n == ".." {
            continue;
        }
        let i = fs.getattr(ino).unwrap();
        let mut b = vec![0u8; i.size as usize];
        fs.read(ino, 0, &mut b).unwrap();
        s.insert(n, b);
    }
    s
}

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 24, ..Default::default() }
}

fn template(kind: FlashKind) -> RamFlash {
    let f = RamFlash::with_kind(kind, 32 * 1024, 48, 512);
    let f = Fs::format(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    // fill with some pre-existing data so GC and replay have work
    let mut fs = Fs::mount(f, opts()).map_err(|e| e.0).unwrap();
    let mut rng = Rng::new(1);
    for i in 0..4 {
        let f = fs.create(ROOT_INO, format!("base{i}").as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap();
        let mut d = vec![0u8; 30_000];
        rng.fill(&mut d);
        fs.write(f.ino, 0, &d, ts(1)).unwrap();
    }
    fs.unmount().map_err(|e| e.0).unwrap()
}

fn states(base: &State, ops: &[Op]) -> Vec<State> {
    let mut v = vec![base.clone()];
    let mut s = base.clone();
    for op in ops {
        apply_model(&mut s, op);
        v.push(s.clone());
    }
    v
}

/// Run the workload with a cut after `n` flash operations. Returns the number of phases
/// completed and whether the cut happened.
fn run_with_cut(tpl: &RamFlash, ops: &[Op], n: Option<u64>) -> (RamFlash, usize, bool) {
    let mut fs = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
    fs.flash().cut_in = n;
    let mut done = 0;
    for (i, op) in ops.iter().enumerate() {
        match apply_fs(&mut fs, op, i as i64 + 10) {
            Ok(()) => done += 1,
            Err(e) => {
                assert!(fs.flash().dead, "op {i} {op:?} failed without a power cut: {e:?}");
                return (fs.into_flash(), done, true);
            }
        }
    }
    let cut = fs.flash().dead;
    (fs.into_flash(), done, cut)
}

/// A write interrupted by a cut is not atomic: each byte may be old or new, and the size may be
/// the old or the new one.
fn partial_write_ok(before: &State, after: &State, got: &State, op: Option<&Op>) -> bool {
    let Some(Op::Write(n, ..)) = op else { return false };
    if before.keys().ne(got.keys()) {
        return false;
    }
    for (k, g) in got {
        if k != n {
            if before.get(k) != Some(g) {
                return false;
            }
            continue;
        }
        let (b, a) = (&before[k], &after[k]);
        if g.len() != b.len() && g.len() != a.len() {
            return false;
        }
        for (i, x) in g.iter().enumerate() {
            let ob = b.get(i).copied().unwrap_or(0);
            let nb = a.get(i).copied().unwrap_or(0);
            if *x != ob && *x != nb {
                return false;
            }
        }
    }
    true
}

fn check_recovered(mut f: RamFlash, done: usize, all: &[State], ops: &[Op], label: &str, second_cut: Option<u64>) {
    f.power_on();
    if let Some(m) = second_cut {
        // cut again during recovery
        f.cut_in = Some(m);
        match Fs::mount(f, opts()) {
            Ok(fs) => {
                f = fs.into_flash();
            }
            Err((_, back)) => {
                f = back;
            }
        }
        f.power_on();
    }
    let mut fs = match Fs::mount(f, opts()) {
        Ok(fs) => fs,
        Err((e, _)) => panic!("{label}: mount failed: {e:?}"),
    };
    assert_consistent(&mut fs);
    let got = read_state(&mut fs);
    let ok = got == all[done]
        || all.get(done + 1).is_some_and(|s| *s == got)
        || all.get(done + 1).is_some_and(|s| partial_write_ok(&all[done], s, &got, ops.get(done)));
    if !ok {
        let exp = &all[done];
        let mut diffs = Vec::new();
        for (k, v) in exp.iter() {
            match got.get(k) {
                None => diffs.push(format!("missing {k}")),
                Some(g) if g != v => {
                    let first = g.iter().zip(v.iter()).position(|(a, b)| a != b);
                    let last = g.iter().zip(v.iter()).rposition(|(a, b)| a != b);
                    diffs.push(format!("{k}: len {} vs expected {}, differ {first:?}..{last:?}", g.len(), v.len()))
                }
                _ => {}
            }
        }
        for k in got.keys() {
            if !exp.contains_key(k) {
                diffs.push(format!("extra {k}"));
            }
        }
        panic!("{label}: state after {done} phases does not match: {diffs:?}");
    }
    // the recovered filesystem keeps working
    let f2 = fs.create(ROOT_INO, b"after-recovery", &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1000)).unwrap();
    fs.write(f2.ino, 0, &[1u8; 9000], ts(1000)).unwrap();
    let mut fs = remount(fs);
    assert_eq!(fs.lookup(ROOT_INO, b"after-recovery").unwrap().size, 9000);
    assert_consistent(&mut fs);
}

fn enumerate(kind: FlashKind, seed: u64) {
    let tpl = template(kind);
    let ops = workload(seed);
    let base = {
        let mut fs = Fs::mount(tpl.clone(), opts()).map_err(|e| e.0).unwrap();
        read_state(&mut fs)
    };
    let all = states(&base, &ops);
    if std::env::var("PC_DEBUG").is_ok() {
        for (i, o) in ops.iter().enumerate() {
            eprintln!("{i}: {o:?}");
        }
    }
    // how many flash operations does the full run take?
    let (f, done, cut) = run_with_cut(&tpl, &ops, None);
    assert!(!cut);
    assert_eq!(done, ops.len());
    let total = f.writes + f.erases.iter().map(|&e| u64::from(e)).sum::<u64>();
    eprintln!("workload: {} phases, about {total} flash operations", ops.len());
    let mut n = 0u64;
    let mut runs = 0;
    while n < total {
        let (f, done, cut) = run_with_cut(&tpl, &ops, Some(n));
        if !cut {
            break;
        }
        let second = if n % 7 == 3 { Some(n % 11) } else { None };
        check_recovered(f, done, &all, &ops, &format!("cut at {n}"), second);
        runs += 1;
        n += 1;
    }
    eprintln!("{kind:?} seed {seed}: {runs} power cuts verified");
    assert!(runs > 100);
}

#[test]
fn power_cut_enumeration_nand() {
    enumerate(FlashKind::Nand, 42);
}

#[test]
fn power_cut_enumeration_nand_seed2() {
    enumerate(FlashKind::Nand, 4242);
}

#[test]
fn power_cut_enumeration_block_stale_discard() {
    enumerate(FlashKind::Block, 77);
}
