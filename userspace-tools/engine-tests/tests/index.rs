//! The B+tree alone, over an in-memory node store: random inserts/removes/lookups/range scans
//! against a BTreeMap, with a tiny cache (eviction), commits, reloads from the root, and exact
//! live-byte accounting of node records.

use std::collections::{BTreeMap, HashMap};

use ferrofs_engine::format::{Key, Loc, INDEX_COMPACT_LEAF, LOC_ALIGNED};
use ferrofs_engine::index::{decode_node, encode_compact_leaf, COMPACT_WORST};
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
    tree_matches_model(false);
}

/// The same with compact leaves (incompat bit 3): every reload decodes them.
#[test]
fn tree_with_compact_leaves_matches_model_with_eviction_and_reloads() {
    tree_matches_model(true);
    // and the leaves it wrote are compact, each no longer than its fixed encoding
    let mut io = Store::default();
    let mut tree: Tree<StdPlatform> = Tree::new(256);
    tree.set_compact(true);
    for k in 0..2000u64 {
        tree.insert(&mut io, Key::new(5, 3, k), Loc { seg: 10 + (k / 31) as u32, off: (k % 31) as u32 * 4144 + 64, len: 4144 }).unwrap();
        if k % 100 == 99 {
            tree.commit(&mut io).unwrap();
        }
    }
    tree.commit(&mut io).unwrap();
    let leaves: Vec<&Vec<u8>> = io.nodes.values().filter(|n| n[0] == INDEX_COMPACT_LEAF).collect();
    assert!(!leaves.is_empty(), "no compact leaf written");
    for n in &leaves {
        let count = u16::from_le_bytes([n[1], n[2]]) as usize;
        assert!(n.len() <= 3 + 29 * count, "a compact leaf of {count} entries takes {} bytes", n.len());
    }
    // a file's blocks in order: about 5 bytes an entry instead of 29
    let (bytes, entries) = leaves.iter().fold((0, 0), |(b, e), n| (b + n.len(), e + u16::from_le_bytes([n[1], n[2]]) as usize));
    assert!(bytes * 4 < entries * 29, "{bytes} bytes for {entries} entries");
}

fn tree_matches_model(compact: bool) {
    let mut rng = Rng::new(99);
    let mut io = Store::default();
    let mut tree: Tree<StdPlatform> = Tree::new(16);
    tree.set_compact(compact);
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

fn decoded(b: &[u8]) -> Result<(u8, Vec<(Key, Loc)>), Error> {
    let mut v = Vec::new();
    let level = decode_node(b, &mut |k, l| {
        v.push((k, l));
        Ok(())
    })?;
    Ok((level, v))
}

fn compact_bytes(entries: &[(Key, Loc)]) -> Vec<u8> {
    let mut out = vec![0u8; COMPACT_WORST];
    let n = encode_compact_leaf(entries.len(), &mut |i| Ok(entries[i]), &mut out).unwrap();
    out.truncate(n);
    out
}

/// Compact leaves (format.md 5.1) decode to exactly the entries the fixed encoding holds, for
/// entries of every shape: random owners, kinds and keys (each field changing or not from the
/// entry before), segments, offsets, lengths, aligned locations of data keys, extreme values.
#[test]
fn compact_leaves_decode_to_the_fixed_leaves_entries() {
    let mut rng = Rng::new(7);
    for round in 0..3000 {
        let n = 1 + rng.below(64) as usize;
        let mut keys: Vec<Key> = Vec::new();
        let mut ino = rng.below(3);
        for _ in 0..n * 2 {
            if rng.below(4) == 0 {
                ino += 1 + [0, 1, 1000, u64::MAX / 4][rng.below(4) as usize];
            }
            let kind = [0u8, 1, 2, 3, 4, 255][rng.below(6) as usize];
            let key = match rng.below(4) {
                0 => rng.next(),
                1 => u64::MAX - rng.below(3),
                _ => rng.below(200),
            };
            keys.push(Key::new(ino, kind, key));
        }
        keys.sort();
        keys.dedup();
        keys.truncate(n);
        let mut seg = rng.below(50) as u32;
        let entries: Vec<(Key, Loc)> = keys
            .iter()
            .map(|k| {
                if rng.below(3) == 0 {
                    seg = [rng.below(1 << 20) as u32, u32::MAX, 0][rng.below(3) as usize];
                }
                let off = [rng.below(1 << 17) as u32, 0x7fff_ffff, 0][rng.below(3) as usize];
                let l = if k.kind == 3 && rng.below(4) == 0 {
                    Loc::aligned(seg, off & !4095, rng.next() as u32)
                } else {
                    Loc { seg, off, len: [4144u32, 48, rng.next() as u32, u32::MAX][rng.below(4) as usize] }
                };
                (*k, l)
            })
            .collect();
        let c = compact_bytes(&entries);
        let f = node_bytes(0, &entries);
        assert_eq!(decoded(&c).unwrap(), (0, entries.clone()), "round {round}: compact");
        assert_eq!(decoded(&f).unwrap(), (0, entries.clone()), "round {round}: fixed");
        assert!(c.len() <= COMPACT_WORST);
    }
}

/// What a hostile compact leaf may hold is `Corrupt`, never a panic or a wrong tree: bytes
/// after the last entry, unknown flag bits, a varint of 11 bytes or past 64 bits, a segment,
/// offset or length past 32 bits, an offset with bit 31 (only the flag sets it), a key
/// difference that overflows, keys not increasing, an aligned location of a non-data key, a
/// truncated entry; an overlong but valid varint decodes.
#[test]
fn hostile_compact_leaves_are_corrupt() {
    let e = [(Key::new(9, 3, 1), Loc { seg: 4, off: 100, len: 4144 }), (Key::new(9, 3, 2), Loc { seg: 4, off: 4244, len: 4144 })];
    let good = compact_bytes(&e);
    assert_eq!(decoded(&good).unwrap().1, e.to_vec());
    // header + first entry: flags, ino, kind, key, seg, off, len
    let hdr = |n: u16| {
        let mut v = vec![INDEX_COMPACT_LEAF];
        v.extend_from_slice(&n.to_le_bytes());
        v
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("trailing byte", [good.clone(), vec![0]].concat()),
        ("truncated", good[..good.len() - 1].to_vec()),
        ("flag bit 6", [hdr(1), vec![0x40 | 0x1f, 1, 3, 1, 4, 100, 1]].concat()),
        ("varint of 11 bytes", [hdr(1), vec![0x1f], vec![0x80; 10], vec![0, 3, 1, 4, 100, 1]].concat()),
        ("varint past 64 bits", [hdr(1), vec![0x1f], vec![0xff; 9], vec![0x02, 3, 1, 4, 100, 1]].concat()),
        ("segment past 32 bits", [hdr(1), vec![0x1f, 1, 3, 1, 0x80, 0x80, 0x80, 0x80, 0x10, 100, 1]].concat()),
        ("offset with bit 31", [hdr(1), vec![0x1f, 1, 3, 1, 4, 0x80, 0x80, 0x80, 0x80, 0x08, 1]].concat()),
        ("key difference overflows", [hdr(2), vec![0x1f, 1, 3], vec![0xff; 9], vec![0x01, 4, 100, 1, 0x00, 1, 100]].concat()),
        ("keys not increasing", [hdr(2), vec![0x1f, 1, 3, 5, 4, 100, 1, 0x04, 5, 100]].concat()),
        ("aligned non-data key", [hdr(1), vec![0x3f, 1, 2, 1, 4, 0, 1]].concat()),
        ("count past 64", [hdr(65), good[3..].to_vec()].concat()),
    ];
    for (what, b) in &cases {
        assert!(matches!(decoded(b), Err(Error::Corrupt)), "{what}: {:?}", decoded(b));
    }
    // overlong forms of valid values are accepted (the hostile-image tool pads with them)
    let padded = [hdr(1), vec![0x1f, 0x81, 0x00, 3, 0x81, 0x80, 0x00, 0x84, 0x00, 100 | 0x80, 0x80, 0x00, 0x81, 0x80, 0x80, 0x80, 0x00]].concat();
    assert_eq!(decoded(&padded).unwrap().1, vec![(Key::new(1, 3, 1), Loc { seg: 4, off: 100, len: 1 })]);
    assert_eq!(LOC_ALIGNED, 1 << 31);
    // and random bytes behind the marker never panic, whatever they decode to
    let mut rng = Rng::new(3);
    for _ in 0..20_000 {
        let n = rng.below(200) as usize;
        let mut b = hdr(rng.below(70) as u16);
        b.extend((0..n).map(|_| rng.next() as u8));
        let _ = decoded(&b);
    }
}
