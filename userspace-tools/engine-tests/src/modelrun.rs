//! The random namespace workload against an in-memory model, shared by `model.rs` (on
//! `RamFlash`) and `write_behind.rs` (on `flashsim::WriteBehind`): creates, writes, overwrites,
//! truncates, unlinks, renames and directories, each checked against the model, and the whole
//! tree verified against it after remounts and crashes (which the callers make).

use std::collections::BTreeMap;

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::std_platform::StdPlatform;
use ferrofs_engine::{CreateArgs, Engine, Error, Flash, SetAttr, ROOT_INO};

use crate::{assert_fsck, ts, Rng};

type E<F> = Engine<StdPlatform, F>;

/// What the tree should hold: directory name -> (file name -> content); "" is the root, the
/// other directories are its children.
#[derive(Clone, Debug)]
pub struct Model {
    /// The directories and their files.
    pub dirs: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

impl Default for Model {
    fn default() -> Self {
        let mut dirs = BTreeMap::new();
        dirs.insert(String::new(), BTreeMap::new());
        Model { dirs }
    }
}

/// The inode of directory `d` of the model.
pub fn dir_ino<F: Flash>(fs: &mut E<F>, d: &str) -> u64 {
    if d.is_empty() {
        ROOT_INO
    } else {
        fs.lookup(ROOT_INO, d.as_bytes()).unwrap().ino
    }
}

/// The sorted names in directory `dir`, without "." and "..".
pub fn names_of<F: Flash>(fs: &mut E<F>, dir: u64) -> Vec<String> {
    let mut v = Vec::new();
    fs.readdir(dir, 0, &mut |n, _, _, _| {
        v.push(String::from_utf8(n.to_vec()).unwrap());
        true
    })
    .unwrap();
    v.retain(|n| n != "." && n != "..");
    v.sort();
    v
}

/// fsck is clean and the tree is the model's: names, sizes, contents.
pub fn verify<F: Flash>(fs: &mut E<F>, m: &Model, when: &str) {
    assert_fsck(fs);
    let mut expect: Vec<String> = m.dirs.keys().filter(|k| !k.is_empty()).cloned().collect();
    expect.extend(m.dirs[""].keys().cloned());
    expect.sort();
    assert_eq!(names_of(fs, ROOT_INO), expect, "{when}: root");
    for (d, files) in &m.dirs {
        let di = dir_ino(fs, d);
        let mut names = names_of(fs, di);
        names.retain(|n| !(d.is_empty() && m.dirs.contains_key(n)));
        assert_eq!(names, files.keys().cloned().collect::<Vec<_>>(), "{when}: dir {d:?}");
        for (name, content) in files {
            let i = fs.lookup(di, name.as_bytes()).unwrap();
            assert_eq!(i.size, content.len() as u64, "{when}: size of {d}/{name}");
            let mut buf = vec![0u8; content.len()];
            assert_eq!(fs.read(i.ino, 0, &mut buf).unwrap(), content.len());
            if buf != *content {
                let first = buf.iter().zip(content.iter()).position(|(a, b)| a != b);
                panic!("{when}: content of {d}/{name} differs from byte {first:?} (of {})", content.len());
            }
        }
    }
}

/// A step [`namespace_step`] left to its caller: the roll (87..100, or an operation on a file
/// when the chosen directory has none) and the chosen directory's inode and file names.
pub struct Rest {
    /// The roll, 0..100.
    pub roll: u64,
    /// The chosen directory's inode.
    pub dir: u64,
    /// Its files (in the model).
    pub names: Vec<String>,
}

/// One random step at time `t` on a directory of the model: rolls 0..15 create, 15..55 write
/// (a quarter of them up to 40 000 bytes, a third appending), 55..63 truncate, 63..72 unlink,
/// 72..83 rename (over an existing file too), 83..87 mkdir or rmdir; each checked and applied
/// to the model. `None`: done (or skipped); otherwise what the caller does with the rest.
pub fn namespace_step<F: Flash>(fs: &mut E<F>, m: &mut Model, rng: &mut Rng, t: i64, when: &str) -> Option<Rest> {
    let dirs: Vec<String> = m.dirs.keys().cloned().collect();
    let d = dirs[rng.below(dirs.len() as u64) as usize].clone();
    let di = dir_ino(fs, &d);
    let names: Vec<String> = m.dirs[&d].keys().cloned().collect();
    match rng.below(100) {
        0..=14 => {
            let name = format!("f{}", rng.below(40));
            if d.is_empty() && m.dirs.contains_key(&name) {
                return None;
            }
            let r = fs.create(di, name.as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(t));
            if m.dirs[&d].contains_key(&name) {
                assert_eq!(r.unwrap_err(), Error::Exists, "{when}");
            } else {
                r.unwrap_or_else(|e| panic!("{when}: create: {e:?}"));
                m.dirs.get_mut(&d).unwrap().insert(name, Vec::new());
            }
        }
        15..=54 if !names.is_empty() => {
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
                    assert_eq!(n, len, "{when}");
                    let end = off as usize + len;
                    if content.len() < end {
                        content.resize(end, 0);
                    }
                    content[off as usize..end].copy_from_slice(&data);
                }
                Err(Error::NoSpace) => {}
                Err(e) => panic!("{when}: write: {e:?}"),
            }
        }
        55..=62 if !names.is_empty() => {
            let name = &names[rng.below(names.len() as u64) as usize];
            let ino = fs.lookup(di, name.as_bytes()).unwrap().ino;
            let content = m.dirs.get_mut(&d).unwrap().get_mut(name).unwrap();
            let sz = rng.below(content.len() as u64 + 10_000);
            fs.setattr(ino, &SetAttr { size: Some(sz), ..Default::default() }, ts(t)).unwrap_or_else(|e| panic!("{when}: truncate: {e:?}"));
            content.resize(sz as usize, 0);
        }
        63..=71 if !names.is_empty() => {
            let name = names[rng.below(names.len() as u64) as usize].clone();
            let ino = fs.lookup(di, name.as_bytes()).unwrap().ino;
            fs.unlink(di, name.as_bytes(), ts(t)).unwrap_or_else(|e| panic!("{when}: unlink: {e:?}"));
            fs.evict(ino).unwrap();
            m.dirs.get_mut(&d).unwrap().remove(&name);
        }
        72..=82 if !names.is_empty() => {
            let name = names[rng.below(names.len() as u64) as usize].clone();
            let d2 = dirs[rng.below(dirs.len() as u64) as usize].clone();
            let n2 = format!("f{}", rng.below(40));
            if d2.is_empty() && m.dirs.contains_key(&n2) {
                return None;
            }
            let d2i = dir_ino(fs, &d2);
            let victim = fs.lookup(d2i, n2.as_bytes()).ok().map(|i| i.ino);
            fs.rename(di, name.as_bytes(), d2i, n2.as_bytes(), 0, ts(t)).unwrap_or_else(|e| panic!("{when}: rename: {e:?}"));
            if let Some(v) = victim {
                if !(d == d2 && name == n2) {
                    fs.evict(v).unwrap();
                }
            }
            let c = m.dirs.get_mut(&d).unwrap().remove(&name).unwrap();
            m.dirs.get_mut(&d2).unwrap().insert(n2, c);
        }
        83..=86 => {
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
        roll => return Some(Rest { roll, dir: di, names }),
    }
    None
}
