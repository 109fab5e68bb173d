//! Randomized model-based test: random operations against the engine and an in-memory model,
//! with clean remounts and crashes after fsync, under GC pressure and a tiny index cache.

use std::collections::BTreeMap;

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, Error, MountOptions, SetAttr, ROOT_INO};
use ferrofs_engine_tests::*;

#[derive(Default, Clone, Debug)]
struct Model {
    // dir name -> (file name -> content); "" is the root
    dirs: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 24, ..Default::default() }
}

fn mount(f: RamFlash) -> Fs {
    Fs::mount(f, opts()).map_err(|e| e.0).expect("mount")
}

fn dir_ino(fs: &mut Fs, d: &str) -> u64 {
    if d.is_empty() {
        ROOT_INO
    } else {
        fs.lookup(ROOT_INO, d.as_bytes()).unwrap().ino
    }
}

fn verify(fs: &mut Fs, m: &Model) {
    assert_consistent(fs);
    let mut root = Vec::new();
    fs.readdir(ROOT_INO, 0, &mut |n, _, _, _| {
        root.push(String::from_utf8(n.to_vec()).unwrap());
        true
    })
    .unwrap();
    root.retain(|n| n != "." && n != "..");
    root.sort();
    let mut expect: Vec<String> = m.dirs.keys().filter(|k| !k.is_empty()).cloned().collect();
    expect.extend(m.dirs[""].keys().cloned());
    expect.sort();
    assert_eq!(root, expect);
    for (d, files) in &m.dirs {
        let di = dir_ino(fs, d);
        let mut names = Vec::new();
        fs.readdir(di, 0, &mut |n, _, _, _| {
            names.push(String::from_utf8(n.to_vec()).unwrap());
            true
        })
        .unwrap();
        names.retain(|n| n != "." && n != ".." && !(d.is_empty() && m.dirs.contains_key(n)));
        names.sort();
        let want: Vec<String> = files.keys().cloned().collect();
        assert_eq!(names, want, "dir {d:?}");
        for (name, content) in files {
            let i = fs.lookup(di, name.as_bytes()).unwrap();
            assert_eq!(i.size, content.len() as u64, "{d}/{name}");
            let mut buf = vec![0u8; content.len()];
            assert_eq!(fs.read(i.ino, 0, &mut buf).unwrap(), content.len());
            assert!(buf == *content, "content of {d}/{name}");
        }
    }
}

fn run(seed: u64, steps: usize) {
    let mut rng = Rng::new(seed);
    let f = RamFlash::new_nand(32 * 1024, 160, 512);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).unwrap();
    let mut fs = mount(f);
    let mut m = Model::default();
    m.dirs.insert(String::new(), BTreeMap::new());
    let mut t = 1;
    for step in 0..steps {
        t += 1;
        let dirs: Vec<String> = m.dirs.keys().cloned().collect();
        let d = dirs[rng.below(dirs.len() as u64) as usize].clone();
        let di = dir_ino(&mut fs, &d);
        let op = rng.below(100);
        let names: Vec<String> = m.dirs[&d].keys().cloned().collect();
        match op {
            0..=14 => {
                let name = format!("f{}", rng.below(40));
                if m.dirs.contains_key(&name) && d.is_empty() {
                    continue;
                }
                let r = fs.create(di, name.as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(t));
                if m.dirs[&d].contains_key(&name) {
                    assert_eq!(r.unwrap_err(), Error::Exists);
                } else {
                    r.unwrap();
                    m.dirs.get_mut(&d).unwrap().insert(name, Vec::new());
                }
            }
            15..=49 if !names.is_empty() => {
                let name = &names[rng.below(names.len() as u64) as usize];
                let ino = fs.lookup(di, name.as_bytes()).unwrap().ino;
                let content = m.dirs.get_mut(&d).unwrap().get_mut(name).unwrap();
                let off = if rng.below(3) == 0 { content.len() as u64 } else { rng.below(content.len() as u64 + 20_000) };
                let lim = if rng.below(4) == 0 { 40_000 } else { 3000 };
                let len = 1 + rng.below(lim) as usize;
                let mut data = vec![0u8; len];
                rng.fill(&mut data);
                match fs.write(ino, off, &data, ts(t)) {
                    Ok(n) => {
                        assert_eq!(n, len);
                        let end = off as usize + len;
                        if content.len() < end {
                            content.resize(end, 0);
                        }
                        content[off as usize..end].copy_from_slice(&data);
                    }
                    Err(Error::NoSpace) => {}
                    Err(e) => panic!("write: {e:?}"),
                }
            }
            50..=59 if !names.is_empty() => {
                let name = &names[rng.below(names.len() as u64) as usize];
                let ino = fs.lookup(di, name.as_bytes()).unwrap().ino;
                let content = m.dirs.get_mut(&d).unwrap().get_mut(name).unwrap();
                let sz = rng.below(content.len() as u64 + 10_000);
                fs.setattr(ino, &SetAttr { size: Some(sz), ..Default::default() }, ts(t)).unwrap();
                content.resize(sz as usize, 0);
            }
            60..=71 if !names.is_empty() => {
                let name = names[rng.below(names.len() as u64) as usize].clone();
                let ino = fs.lookup(di, name.as_bytes()).unwrap().ino;
                fs.unlink(di, name.as_bytes(), ts(t)).unwrap();
                fs.evict(ino).unwrap();
                m.dirs.get_mut(&d).unwrap().remove(&name);
            }
            72..=84 if !names.is_empty() => {
                let name = names[rng.below(names.len() as u64) as usize].clone();
                let d2 = dirs[rng.below(dirs.len() as u64) as usize].clone();
                let n2 = format!("f{}", rng.below(40));
                if d2.is_empty() && m.dirs.contains_key(&n2) {
                    continue;
                }
                let d2i = dir_ino(&mut fs, &d2);
                let victim = fs.lookup(d2i, n2.as_bytes()).ok().map(|i| i.ino);
                fs.rename(di, name.as_bytes(), d2i, n2.as_bytes(), 0, ts(t)).unwrap();
                if let Some(v) = victim {
                    if !(d == d2 && name == n2) {
                        fs.evict(v).unwrap();
                    }
                }
                let c = m.dirs.get_mut(&d).unwrap().remove(&name).unwrap();
                m.dirs.get_mut(&d2).unwrap().insert(n2, c);
            }
            85..=88 => {
                let name = format!("d{}", rng.below(4));
                if m.dirs.contains_key(&name) {
                    if m.dirs[&name].is_empty() {
                        let ino = fs.lookup(ROOT_INO, name.as_bytes()).unwrap().ino;
                        fs.rmdir(ROOT_INO, name.as_bytes(), ts(t)).unwrap();
                        fs.evict(ino).unwrap();
                        m.dirs.remove(&name);
                    } else {
                        assert_eq!(fs.rmdir(ROOT_INO, name.as_bytes(), ts(t)).unwrap_err(), Error::NotEmpty);
                    }
                } else if !m.dirs[""].contains_key(&name) {
                    fs.mkdir(ROOT_INO, name.as_bytes(), 0o755, 0, 0, ts(t)).unwrap();
                    m.dirs.insert(name, BTreeMap::new());
                }
            }
            89..=91 => {
                fs = remount_with(fs);
                verify(&mut fs, &m);
            }
            92..=94 => {
                fs.fsync(ROOT_INO).unwrap();
                fs = mount(fs.into_flash());
                verify(&mut fs, &m);
            }
            95..=97 => {
                let _ = fs.gc_step(rng.below(2) == 0).unwrap();
            }
            _ => {
                fs.sync().unwrap();
            }
        }
        if step % 50 == 0 {
            verify(&mut fs, &m);
        }
    }
    verify(&mut fs, &m);
    let st = fs.stats();
    eprintln!("seed {seed}: {st:?}");
    let mut fs = remount_with(fs);
    verify(&mut fs, &m);
}

fn remount_with(fs: Fs) -> Fs {
    mount(fs.unmount().map_err(|e| e.0).unwrap())
}

#[test]
fn model_seed_1() {
    run(1, 1500);
}

#[test]
fn model_seed_2() {
    run(2, 1500);
}

#[test]
fn model_seed_3() {
    run(3, 1500);
}

#[test]
fn model_many_seeds_short() {
    for s in 10..20 {
        run(s, 300);
    }
}
