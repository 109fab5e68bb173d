//! The B+tree alone, over an in-memory node store: random inserts/removes/lookups/range scans
//! against a BTreeMap, with a tiny cache (eviction), commits, reloads from the root, and exact
//! live-byte accounting of node records.

use std::collections::{BTreeMap, HashMap};

use ferrofs_engine::format::{Key, Loc};
use ferrofs_engine::index::{NodeIo, Tree};
use ferrofs_engine::std_platform::StdPlatform;
use ferrofs_engine::Error;
use ferrofs_engine_tests::Rng;

#[derive(Default)]
struct Store {
    nodes: HashMap<(u32, u32), Vec<u8>>,
    next: u32,
    live: HashMap<(u32, u32), u32>,
    reads: u64,
}

impl NodeIo for Store {
    fn read_node(&mut self, loc: Loc, buf: &mut [u8]) -> Result<usize, Error> {
        self.reads += 1;
        let n = self.nodes.get(&(loc.seg, loc.off)).ok_or(Error::Corrupt)?;
        buf[..n.len()].copy_from_slice(n);
        Ok(n.len())
    }
    fn write_node(&mut self, payload: &[u8], _first: Key, _level: u8) -> Result<Loc, Error> {
        self.next += 1;
        let loc = Loc { seg: 1, off: self.next, len: payload.len() as u32 + 48 };
        self.nodes.insert((1, self.next), payload.to_vec());
        self.live.insert((1, self.next), loc.len);
        Ok(loc)
    }
    fn dead(&mut self, loc: Loc) {
        if loc.seg == 1 {
            assert!(self.live.remove(&(loc.seg, loc.off)).is_some(), "node {loc:?} dead twice");
        }
    }
}

fn key(k: u64) -> Key {
    Key::new(k % 7, (k % 3) as u8, k)
}

fn val(k: u64, gen: u32) -> Loc {
    Loc { seg: 2, off: gen, len: (k % 1000) as u32 + 1 }
}

#[test]
fn tree_matches_model_with_eviction_and_reloads() {
    let mut rng = Rng::new(99);
    let mut io = Store::default();
    let mut tree: Tree<StdPlatform> = Tree::new(16);
    let mut model: BTreeMap<Key, Loc> = BTreeMap::new();
    for step in 0..60_000u32 {
        let k = rng.below(5000);
        match rng.below(10) {
            0..=4 => {
                let v = val(k, step);
                let old = tree.insert(&mut io, key(k), v).unwrap();
                assert_eq!(old, model.insert(key(k), v));
            }
            5..=6 => {
                let old = tree.remove(&mut io, &key(k)).unwrap();
                assert_eq!(old, model.remove(&key(k)));
            }
            7 => {
                assert_eq!(tree.get(&mut io, &key(k)).unwrap(), model.get(&key(k)).copied());
            }
            8 => {
                let from = key(k);
                let got = tree.next(&mut io, &from).unwrap();
                let exp = model.range(from..).next().map(|(a, b)| (*a, *b));
                assert_eq!(got, exp);
            }
            _ => {
                if tree.needs_commit() || rng.below(20) == 0 {
                    tree.commit(&mut io).unwrap();
                    if rng.below(4) == 0 {
                        // "remount": drop the cache, keep only the root
                        let root = tree.root();
                        tree.set_root(root);
                    }
                }
            }
        }
        if tree.needs_commit() {
            tree.commit(&mut io).unwrap();
        }
        assert!(tree.cached() <= 16, "cache {}", tree.cached());
    }
    tree.commit(&mut io).unwrap();
    // full scan equals the model
    let mut from = Key::default();
    let mut n = 0;
    while let Some((k, v)) = tree.next(&mut io, &from).unwrap() {
        assert_eq!(model.get(&k), Some(&v));
        n += 1;
        from = Key::new(k.ino, k.kind, k.key + 1);
    }
    assert_eq!(n, model.len());
    // every live node record is referenced by the tree exactly once
    let mut seen = 0;
    tree.walk(&mut io, &mut |l, is_node| {
        if is_node {
            seen += 1;
            assert!(l.seg == 1);
        }
    })
    .unwrap();
    assert_eq!(seen, io.live.len(), "live node records vs tree nodes");
    assert!(io.reads > 1000, "evictions forced reloads: {}", io.reads);
}

#[test]
fn tree_shrinks_after_mass_deletion() {
    let mut rng = Rng::new(5);
    let mut io = Store::default();
    let mut tree: Tree<StdPlatform> = Tree::new(64);
    let mut model: BTreeMap<Key, Loc> = BTreeMap::new();
    for k in 0..20_000u64 {
        tree.insert(&mut io, key(k), val(k, 1)).unwrap();
        model.insert(key(k), val(k, 1));
        if tree.needs_commit() {
            tree.commit(&mut io).unwrap();
        }
    }
    tree.commit(&mut io).unwrap();
    let count_nodes = |tree: &mut Tree<StdPlatform>, io: &mut Store| {
        let mut n = 0;
        tree.walk(io, &mut |_, is_node| {
            if is_node {
                n += 1;
            }
        })
        .unwrap();
        n
    };
    let before = count_nodes(&mut tree, &mut io);
    for k in 0..20_000u64 {
        if rng.below(20) != 0 {
            tree.remove(&mut io, &key(k)).unwrap();
            model.remove(&key(k));
            if tree.needs_commit() {
                tree.commit(&mut io).unwrap();
            }
        }
    }
    tree.commit(&mut io).unwrap();
    let after = count_nodes(&mut tree, &mut io);
    eprintln!("nodes: {before} for 20000 keys, {after} for {} keys", model.len());
    assert!(after * 8 < before, "tree did not shrink: {before} -> {after}");
    assert_eq!(io.live.len(), after, "live node records");
    let mut from = Key::default();
    let mut n = 0;
    while let Some((k, v)) = tree.next(&mut io, &from).unwrap() {
        assert_eq!(model.get(&k), Some(&v));
        n += 1;
        from = Key::new(k.ino, k.kind, k.key + 1);
    }
    assert_eq!(n, model.len());
}

/// Every growth of every vector during inserts and removes (node splits, new roots, merges,
/// cache slots) fails in turn, once: the failed call returns `NoMem` and the tree still holds
/// exactly the keys of the model (the failed insert or remove either happened or did not),
/// through commits, evictions and reloads.
#[test]
fn failed_allocations_leave_the_tree_intact() {
    use ferrofs_engine_tests::failalloc::{self, FailPlatform};
    let mut fails = 0u32;
    let only: Option<u64> = std::env::var("FERROFS_INDEX_N").ok().and_then(|v| v.parse().ok());
    for n in 0..4000u64 {
        if only.is_some_and(|o| o != n) {
            continue;
        }
        let mut rng = Rng::new(7);
        let mut io = Store::default();
        let mut tree: Tree<FailPlatform> = Tree::new(16);
        let mut model: BTreeMap<Key, Loc> = BTreeMap::new();
        failalloc::any_growth(true);
        failalloc::arm(Some(n));
        let mut failed = None;
        for step in 0..3000u32 {
            let k = rng.below(1500);
            let r = if rng.below(4) != 0 {
                let v = val(k, step);
                tree.insert(&mut io, key(k), v).map(|_| {
                    model.insert(key(k), v);
                })
            } else {
                tree.remove(&mut io, &key(k)).map(|_| {
                    model.remove(&key(k));
                })
            };
            if let Err(e) = r {
                assert_eq!(e, Error::NoMem, "step {step}");
                failed = Some((step, k));
                break;
            }
            if step % 500 == 499 {
                if let Err(e) = tree.commit(&mut io) {
                    // a failed commit changes no key
                    assert_eq!(e, Error::NoMem, "commit at step {step}");
                    failed = Some((step, u64::MAX));
                    break;
                }
            }
        }
        let fired = failalloc::fired();
        failalloc::arm(None);
        failalloc::any_growth(false);
        if !fired {
            break;
        }
        if let Some((step, k)) = failed {
            fails += 1;
            // the failed operation: either done or not done, nothing else
            if k != u64::MAX {
                match tree.get(&mut io, &key(k)).unwrap() {
                    Some(l) => {
                        model.insert(key(k), l);
                    }
                    None => {
                        model.remove(&key(k));
                    }
                }
            }
            let mut from = Key::new(0, 0, 0);
            let mut seen = BTreeMap::new();
            while let Some((kk, l)) = tree.next(&mut io, &from).unwrap() {
                seen.insert(kk, l);
                from = Key::new(kk.ino, kk.kind, kk.key.wrapping_add(1));
                if kk.key == u64::MAX {
                    break;
                }
            }
            assert_eq!(seen, model, "allocation #{n} failed at step {step}: the tree lost or gained keys");
            tree.commit(&mut io).unwrap();
            let root = tree.root();
            let mut t2: Tree<FailPlatform> = Tree::new(16);
            t2.set_root(root);
            for (kk, l) in &model {
                assert_eq!(t2.get(&mut io, kk), Ok(Some(*l)), "allocation #{n} (step {step}, key {k}): after commit and reload");
            }
        }
    }
    assert!(fails > 500, "only {fails} failures injected");
}

/// A node payload as the tree encodes it: level, count, then (key, loc) pairs.
fn node_bytes(level: u8, entries: &[(Key, Loc)]) -> Vec<u8> {
    let mut v = vec![level];
    v.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for (k, l) in entries {
        v.extend_from_slice(&k.ino.to_le_bytes());
        v.push(k.kind);
        v.extend_from_slice(&k.key.to_le_bytes());
        for x in [l.seg, l.off, l.len] {
            v.extend_from_slice(&x.to_le_bytes());
        }
    }
    v
}

/// A forged tree whose keys do not follow the routing (a leaf holding keys below the range its
/// grandparent routes to it, which its parent alone cannot tell) must not make `next` step
/// backwards: callers loop on `next(k + 1)` and would go round forever. Likewise a child
/// node whose keys fall outside its parent's entries is `Corrupt` when it is loaded.
#[test]
fn forged_key_ranges_are_corrupt_not_cycles() {
    let k = |n: u64| Key::new(n, 0, 0);
    let at = |off: u32| Loc { seg: 1, off, len: 100 };
    let v = |n: u64| Loc { seg: 2, off: n as u32, len: 10 };
    let mut io = Store::default();
    // root (level 2) -> [A (level 1) from 10, B (level 1) from 100]
    io.nodes.insert((1, 1), node_bytes(2, &[(k(10), at(2)), (k(100), at(3))]));
    io.nodes.insert((1, 2), node_bytes(1, &[(k(10), at(4)), (k(50), at(5))]));
    io.nodes.insert((1, 3), node_bytes(1, &[(k(100), at(6)), (k(150), at(7))]));
    io.nodes.insert((1, 4), node_bytes(0, &[(k(10), v(10)), (k(20), v(20))]));
    io.nodes.insert((1, 5), node_bytes(0, &[(k(50), v(50)), (k(60), v(60))]));
    // forged: B's first leaf holds 70, below B's range [100, ..)
    io.nodes.insert((1, 6), node_bytes(0, &[(k(70), v(70)), (k(110), v(110))]));
    io.nodes.insert((1, 7), node_bytes(0, &[(k(150), v(150)), (k(160), v(160))]));
    let mut tree: Tree<StdPlatform> = Tree::new(16);
    tree.set_root(Some((at(1), 2)));
    assert_eq!(tree.next(&mut io, &k(55)).unwrap(), Some((k(60), v(60))));
    assert_eq!(tree.next(&mut io, &k(65)).unwrap(), Some((k(70), v(70))));
    // 75 routes to A's last leaf; the next leaf starts at 70: a step back
    assert!(matches!(tree.next(&mut io, &k(75)), Err(Error::Corrupt)), "next went backwards");
    assert_eq!(tree.next(&mut io, &k(111)).unwrap(), Some((k(150), v(150))));

    // a leaf above its parent's next entry (the root's last separator raised, as in hostile
    // seed 21 image 2128): loading it is Corrupt, lookups of its keys do not silently miss
    let mut io = Store::default();
    io.nodes.insert((1, 1), node_bytes(1, &[(k(10), at(2)), (k(50), at(3)), (k(1 << 62), at(4))]));
    io.nodes.insert((1, 2), node_bytes(0, &[(k(10), v(10)), (k(20), v(20))]));
    io.nodes.insert((1, 3), node_bytes(0, &[(k(50), v(50)), (k(60), v(60))]));
    io.nodes.insert((1, 4), node_bytes(0, &[(k(90), v(90)), (k(95), v(95))]));
    let mut tree: Tree<StdPlatform> = Tree::new(16);
    tree.set_root(Some((at(1), 1)));
    assert_eq!(tree.get(&mut io, &k(20)).unwrap(), Some(v(20)));
    assert_eq!(tree.get(&mut io, &k(60)).unwrap(), Some(v(60)));
    assert!(matches!(tree.next(&mut io, &k(61)), Err(Error::Corrupt)), "leaf 90..95 under separator 2^62 loaded");
    // a leaf reaching into the next entry's range is Corrupt too
    let mut io = Store::default();
    io.nodes.insert((1, 1), node_bytes(1, &[(k(10), at(2)), (k(50), at(3))]));
    io.nodes.insert((1, 2), node_bytes(0, &[(k(10), v(10)), (k(55), v(55))]));
    io.nodes.insert((1, 3), node_bytes(0, &[(k(60), v(60))]));
    let mut tree: Tree<StdPlatform> = Tree::new(16);
    tree.set_root(Some((at(1), 1)));
    assert!(matches!(tree.get(&mut io, &k(10)), Err(Error::Corrupt)));
    assert_eq!(tree.get(&mut io, &k(60)).unwrap(), Some(v(60)));
}
