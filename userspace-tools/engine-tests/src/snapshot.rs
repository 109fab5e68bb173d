//! The whole visible state of a mounted filesystem, metadata included, for the crash checks:
//! every name (by path) and, per inode, its attributes as `getattr` returns them (mode, uid,
//! gid, nlink, size, the three times, rdev, flags, generation, a directory's parent), its
//! content (file data, symlink target) and every xattr. Two names of one inode (hard links)
//! share one entry, so link identity is compared too.

use std::collections::BTreeMap;

use ferrofs_engine::{Engine, FileType, Flash, Inode, Platform, ROOT_INO};

/// One inode as seen through the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Obj {
    /// The attributes (`getattr`).
    pub inode: Inode,
    /// File content (regular files) or target (symlinks); empty otherwise.
    pub data: Vec<u8>,
    /// Every xattr, name -> value.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// The visible state: path ("/", "/a", "/d/a") -> inode number, and the inodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snap {
    /// Every name, the root included.
    pub names: BTreeMap<String, u64>,
    /// Every reachable inode.
    pub objs: BTreeMap<u64, Obj>,
}

impl Snap {
    /// The inode a path names.
    pub fn obj(&self, path: &str) -> Option<&Obj> {
        self.objs.get(self.names.get(path)?)
    }
}

/// The path of `name` in directory `dir`.
pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn read_obj<P: Platform, F: Flash>(fs: &mut Engine<P, F>, ino: u64) -> Result<Obj, String> {
    let inode = fs.getattr(ino).map_err(|e| format!("getattr {ino}: {e:?}"))?;
    let mut data = Vec::new();
    match inode.file_type() {
        Some(FileType::Regular) => {
            data = vec![0u8; inode.size as usize];
            let n = fs.read(ino, 0, &mut data).map_err(|e| format!("read {ino}: {e:?}"))?;
            if n != data.len() {
                return Err(format!("read {ino}: {n} of {} bytes", data.len()));
            }
        }
        Some(FileType::Symlink) => {
            data = vec![0u8; 4096];
            let n = fs.readlink(ino, &mut data).map_err(|e| format!("readlink {ino}: {e:?}"))?;
            data.truncate(n);
        }
        _ => {}
    }
    let mut list = vec![0u8; 1 << 16];
    let n = fs.listxattr(ino, &mut list).map_err(|e| format!("listxattr {ino}: {e:?}"))?;
    let mut xattrs = BTreeMap::new();
    for name in list[..n].split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let mut v = vec![0u8; ferrofs_engine::format::XATTR_VALUE_MAX];
        let k = fs.getxattr(ino, name, &mut v).map_err(|e| format!("getxattr {ino} {:?}: {e:?}", String::from_utf8_lossy(name)))?;
        v.truncate(k);
        xattrs.insert(name.to_vec(), v);
    }
    Ok(Obj { inode, data, xattrs })
}

fn walk<P: Platform, F: Flash>(fs: &mut Engine<P, F>, dir: u64, path: &str, s: &mut Snap) -> Result<(), String> {
    let mut entries = Vec::new();
    fs.readdir(dir, 0, &mut |n, ino, _, _| {
        entries.push((n.to_vec(), ino));
        true
    })
    .map_err(|e| format!("readdir {path}: {e:?}"))?;
    for (n, ino) in entries {
        if n == b"." || n == b".." {
            continue;
        }
        let name = String::from_utf8(n).map_err(|_| format!("a name in {path} is not UTF-8"))?;
        let p = join(path, &name);
        s.names.insert(p.clone(), ino);
        if s.objs.contains_key(&ino) {
            continue;
        }
        let o = read_obj(fs, ino)?;
        let is_dir = o.inode.is_dir();
        s.objs.insert(ino, o);
        if is_dir {
            walk(fs, ino, &p, s)?;
        }
    }
    Ok(())
}

/// Read the whole visible state. Errors (a read that fails) are returned as text: after a cut
/// they are findings, not panics.
pub fn snapshot<P: Platform, F: Flash>(fs: &mut Engine<P, F>) -> Result<Snap, String> {
    let mut s = Snap::default();
    s.names.insert("/".into(), ROOT_INO);
    let root = read_obj(fs, ROOT_INO)?;
    s.objs.insert(ROOT_INO, root);
    walk(fs, ROOT_INO, "/", &mut s)?;
    Ok(s)
}

fn show_obj(o: &Obj) -> String {
    let i = &o.inode;
    format!(
        "ino {} mode {:o} uid {} gid {} nlink {} size {} atime {} mtime {} ctime {} gen {}",
        i.ino, i.mode, i.uid, i.gid, i.nlink, i.size, i.atime.sec, i.mtime.sec, i.ctime.sec, i.generation
    )
}

/// Human-readable differences (`exp` is what was expected).
pub fn diff(exp: &Snap, got: &Snap) -> Vec<String> {
    let mut d = Vec::new();
    for (p, ino) in &exp.names {
        match got.names.get(p) {
            None => d.push(format!("missing {p}")),
            Some(g) if g != ino => d.push(format!("{p}: inode {g}, expected {ino}")),
            _ => {}
        }
    }
    for p in got.names.keys() {
        if !exp.names.contains_key(p) {
            d.push(format!("extra {p}"));
        }
    }
    for (ino, e) in &exp.objs {
        let Some(g) = got.objs.get(ino) else { continue };
        if g.inode != e.inode {
            d.push(format!("inode {ino}: {} expected {}", show_obj(g), show_obj(e)));
        }
        if g.data != e.data {
            let first = g.data.iter().zip(e.data.iter()).position(|(a, b)| a != b);
            d.push(format!("inode {ino}: data of {} bytes, expected {}, first difference at {first:?}", g.data.len(), e.data.len()));
        }
        if g.xattrs != e.xattrs {
            let names = |m: &BTreeMap<Vec<u8>, Vec<u8>>| m.iter().map(|(k, v)| format!("{}={}B", String::from_utf8_lossy(k), v.len())).collect::<Vec<_>>();
            d.push(format!("inode {ino}: xattrs {:?}, expected {:?}", names(&g.xattrs), names(&e.xattrs)));
        }
    }
    d
}
