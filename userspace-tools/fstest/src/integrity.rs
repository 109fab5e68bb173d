//! `integrity write|verify DIR --seed S --total-mib N`: a deterministic tree of nested directories,
//! files of mixed sizes (0 B to several MiB) and symlinks under `DIR/fstest-integrity.<seed>`.
//!
//! Nothing but the tree itself is written: the tree plan (names, sizes, modes, mtimes, symlink
//! targets) is a function of `(seed, total-mib)` and file content is the seekable pattern keyed by
//! `(seed, relative path)`, so `verify` recomputes everything, e.g. after a remount or a reboot.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use libc::{O_CREAT, O_DIRECTORY, O_EXCL, O_RDONLY, O_WRONLY, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};

use crate::pattern::{self, Rng};
use crate::report::Report;
use crate::sys::{self, TimeSpec};

const MIB: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Mode and mtime are applied after the whole tree is written.
    Dir {
        mode: u32,
        mtime: (i64, u32),
    },
    /// `xattr`: length of a `user.fstest` value (pattern bytes of the path's xattr key).
    File {
        size: u64,
        mode: u32,
        mtime: (i64, u32),
        xattr: Option<usize>,
    },
    Symlink {
        target: Vec<u8>,
    },
    /// A second name of the earlier file `target`.
    HardLink {
        target: String,
    },
}

const XATTR_NAME: &str = "user.fstest";

/// The value of the planned `user.fstest` xattr of `path`.
pub fn xattr_value(seed: u64, path: &str, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    pattern::fill(pattern::key_for(seed ^ 0xA77, path.as_bytes()), 0, &mut v);
    v
}

fn mtime(rng: &mut Rng) -> (i64, u32) {
    (
        rng.range(0, 4_000_000_000) as i64,
        rng.below(1_000_000_000) as u32,
    )
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path relative to the tree root, '/'-separated; parents precede children.
    pub path: String,
    pub kind: Kind,
}

#[derive(Debug, Clone)]
pub struct Opts {
    pub dir: PathBuf,
    pub seed: u64,
    pub total_mib: u64,
    /// fsync every file after writing it (default: one syncfs at the end).
    pub fsync: bool,
    /// Do not set (write) or check (verify) the planned user xattrs.
    pub no_xattrs: bool,
    pub drop_caches: bool,
}

/// Name of the tree root inside DIR.
pub fn root_name(seed: u64) -> String {
    format!("fstest-integrity.{seed}")
}

/// File size drawn from a mixed distribution: many small files, some large ones.
fn draw_size(rng: &mut Rng) -> u64 {
    let k = rng.below(100);
    let s = if k < 5 {
        0
    } else if k < 35 {
        rng.range(1, 512)
    } else if k < 62 {
        rng.range(513, 16 * 1024)
    } else if k < 82 {
        rng.range(16 * 1024, 256 * 1024)
    } else if k < 96 {
        rng.range(256 * 1024, 2 * MIB)
    } else {
        rng.range(2 * MIB, 6 * MIB)
    };
    // Page- and block-aligned sizes and their neighbours are where off-by-one bugs live.
    if s > 0 && rng.chance(15) {
        let page = 4096 * rng.range(1, (s / 4096).max(1));
        return match rng.below(3) {
            0 => page - 1,
            1 => page,
            _ => page + 1,
        };
    }
    s
}

/// The deterministic tree for `(seed, total_mib)`: file bytes add up to about `total_mib` MiB.
pub fn plan(seed: u64, total_mib: u64) -> Vec<Entry> {
    let mut rng = Rng::new(seed ^ 0x1A7E_6121_7E57);
    let total = total_mib.saturating_mul(MIB);
    let mut out = Vec::new();
    // (path, depth)
    let mut dirs: Vec<(String, u32)> = vec![(String::new(), 0)];
    let mut files: Vec<String> = Vec::new();
    let mut bytes = 0u64;
    let mut n = 0u64;
    let join = |dir: &str, name: String| {
        if dir.is_empty() {
            name
        } else {
            format!("{dir}/{name}")
        }
    };
    while bytes < total || n < 12 {
        n += 1;
        let parent = dirs[rng.below(dirs.len() as u64) as usize].clone();
        let k = rng.below(100);
        if k < 10 && parent.1 < 6 {
            let p = join(&parent.0, format!("d{n}"));
            dirs.push((p.clone(), parent.1 + 1));
            let mode = [0o755, 0o750, 0o700, 0o1777][rng.below(4) as usize];
            out.push(Entry {
                path: p,
                kind: Kind::Dir {
                    mode,
                    mtime: mtime(&mut rng),
                },
            });
        } else if k < 14 {
            let len = rng.range(1, 300) as usize;
            let target: Vec<u8> = (0..len).map(|_| b'a' + rng.below(26) as u8).collect();
            out.push(Entry {
                path: join(&parent.0, format!("l{n}")),
                kind: Kind::Symlink { target },
            });
        } else if k < 17 && !files.is_empty() {
            let target = files[rng.below(files.len() as u64) as usize].clone();
            out.push(Entry {
                path: join(&parent.0, format!("h{n}")),
                kind: Kind::HardLink { target },
            });
        } else {
            let size = draw_size(&mut rng).min(total.saturating_sub(bytes).max(512));
            bytes += size;
            let mode = [0o644, 0o600, 0o755, 0o640][rng.below(4) as usize];
            let mtime = mtime(&mut rng);
            let xattr = if rng.chance(20) {
                Some(rng.range(0, 200) as usize)
            } else {
                None
            };
            // Long names now and then.
            let name = if rng.chance(5) {
                format!("f{n}_{}", "n".repeat(rng.range(10, 240) as usize))
            } else {
                format!("f{n}")
            };
            let path = join(&parent.0, name);
            files.push(path.clone());
            out.push(Entry {
                path,
                kind: Kind::File {
                    size,
                    mode,
                    mtime,
                    xattr,
                },
            });
        }
    }
    out
}

fn key(seed: u64, path: &str) -> u64 {
    pattern::key_for(seed, path.as_bytes())
}

struct Counts {
    dirs: u64,
    files: u64,
    links: u64,
    hardlinks: u64,
    xattrs: u64,
    bytes: u64,
}

fn counts(p: &[Entry]) -> Counts {
    let mut c = Counts {
        dirs: 0,
        files: 0,
        links: 0,
        hardlinks: 0,
        xattrs: 0,
        bytes: 0,
    };
    for e in p {
        match &e.kind {
            Kind::Dir { .. } => c.dirs += 1,
            Kind::File { size, xattr, .. } => {
                c.files += 1;
                c.bytes += size;
                c.xattrs += u64::from(xattr.is_some());
            }
            Kind::Symlink { .. } => c.links += 1,
            Kind::HardLink { .. } => c.hardlinks += 1,
        }
    }
    c
}

fn describe(c: &Counts) -> String {
    format!(
        "{} dirs, {} files ({} bytes, {} with an xattr), {} symlinks, {} hard links",
        c.dirs, c.files, c.bytes, c.xattrs, c.links, c.hardlinks
    )
}

/// Collects up to 20 failure details; the rest are only counted.
struct Problems {
    list: Vec<String>,
    n: u64,
}

impl Problems {
    fn new() -> Self {
        Problems {
            list: Vec::new(),
            n: 0,
        }
    }
    fn add(&mut self, s: String) {
        self.n += 1;
        if self.list.len() < 20 {
            self.list.push(s);
        }
    }
    fn report(self, r: &mut Report, name: &str, expected: impl std::fmt::Display) {
        if self.n == 0 {
            r.pass(name);
        } else {
            for l in &self.list {
                r.note(l);
            }
            r.fail(
                name,
                expected,
                format!(
                    "{} problems, first: {}",
                    self.n,
                    self.list.first().cloned().unwrap_or_default()
                ),
            );
        }
    }
}

pub fn write(o: &Opts) -> i32 {
    let mut r = Report::new();
    // SAFETY: umask has no preconditions; modes are then exactly the planned ones.
    unsafe { libc::umask(0) };
    let root = o.dir.join(root_name(o.seed));
    let p = plan(o.seed, o.total_mib);
    let c = counts(&p);
    r.note(format!("plan: {} under {}", describe(&c), root.display()));
    r.group("write", |r| {
        if r.ok(
            "create tree root (must not exist)",
            sys::mkdir(&root, 0o755),
        )
        .is_none()
        {
            return;
        }
        let mut dirs = Problems::new();
        let mut files = Problems::new();
        let mut links = Problems::new();
        let mut hard = Problems::new();
        let mut buf = vec![0u8; MIB as usize];
        let mut chunk_rng = Rng::new(o.seed ^ 0xC4A2);
        for e in &p {
            let path = root.join(&e.path);
            match &e.kind {
                Kind::Dir { .. } => {
                    if let Err(err) = sys::mkdir(&path, 0o755) {
                        dirs.add(format!("mkdir {}: {err}", e.path));
                    }
                }
                Kind::HardLink { target } => {
                    if let Err(err) = sys::link(root.join(target), &path) {
                        hard.add(format!("link {} -> {}: {err}", e.path, target));
                    }
                }
                Kind::Symlink { target } => {
                    if let Err(err) = sys::symlink(target, &path) {
                        links.add(format!("symlink {}: {err}", e.path));
                    }
                }
                Kind::File {
                    size,
                    mode,
                    mtime,
                    xattr,
                } => {
                    let res = (|| -> Result<(), String> {
                        let fd = sys::open(&path, O_CREAT | O_EXCL | O_WRONLY, *mode)
                            .map_err(|e| format!("create: {e}"))?;
                        let k = key(o.seed, &e.path);
                        let mut off = 0u64;
                        while off < *size {
                            // Varying chunk sizes: writers and readers must not share boundaries.
                            let n = chunk_rng.range(1, MIB).min(size - off) as usize;
                            pattern::fill(k, off, &mut buf[..n]);
                            fd.pwrite_all(&buf[..n], off)
                                .map_err(|(w, e)| format!("write at {}: {e}", off + w as u64))?;
                            off += n as u64;
                        }
                        if o.fsync {
                            fd.fsync().map_err(|e| format!("fsync: {e}"))?;
                        }
                        fd.close().map_err(|e| format!("close: {e}"))?;
                        if let (Some(len), false) = (xattr, o.no_xattrs) {
                            sys::setxattr(
                                &path,
                                XATTR_NAME,
                                &xattr_value(o.seed, &e.path, *len),
                                0,
                                false,
                            )
                            .map_err(|e| format!("setxattr: {e}"))?;
                        }
                        sys::utimens(
                            &path,
                            Some((
                                TimeSpec::At(mtime.0, 0),
                                TimeSpec::At(mtime.0, i64::from(mtime.1)),
                            )),
                            false,
                        )
                        .map_err(|e| format!("utimensat: {e}"))
                    })();
                    if let Err(m) = res {
                        files.add(format!("{}: {m}", e.path));
                    }
                }
            }
        }
        // Directory modes and mtimes last, deepest first: later entries would change the mtimes.
        for e in p.iter().rev() {
            if let Kind::Dir { mode, mtime } = &e.kind {
                let path = root.join(&e.path);
                let res = sys::chmod(&path, *mode).and_then(|_| {
                    sys::utimens(
                        &path,
                        Some((
                            TimeSpec::At(mtime.0, 0),
                            TimeSpec::At(mtime.0, i64::from(mtime.1)),
                        )),
                        false,
                    )
                });
                if let Err(err) = res {
                    dirs.add(format!("chmod/utimensat {}: {err}", e.path));
                }
            }
        }
        dirs.report(r, &format!("create {} dirs", c.dirs), "no errors");
        files.report(
            r,
            &format!(
                "write {} files ({} bytes, {} xattrs)",
                c.files,
                c.bytes,
                if o.no_xattrs { 0 } else { c.xattrs }
            ),
            "no errors",
        );
        links.report(r, &format!("create {} symlinks", c.links), "no errors");
        hard.report(
            r,
            &format!("create {} hard links", c.hardlinks),
            "no errors",
        );
        r.ok("syncfs", sys::syncfs_path(&root));
    });
    r.finish()
}

pub fn verify(o: &Opts) -> i32 {
    let mut r = Report::new();
    let root = o.dir.join(root_name(o.seed));
    let p = plan(o.seed, o.total_mib);
    let c = counts(&p);
    r.note(format!("plan: {} under {}", describe(&c), root.display()));
    if o.drop_caches {
        let dropped = sys::drop_caches();
        r.note(if dropped {
            "caches dropped"
        } else {
            "could not drop caches"
        });
    }
    r.group("verify", |r| {
        if r.ok("tree root exists", sys::lstat(&root)).is_none() {
            return;
        }
        // Expected children of every directory ("" is the root).
        let mut children: BTreeMap<String, BTreeSet<Vec<u8>>> = BTreeMap::new();
        children.insert(String::new(), BTreeSet::new());
        for e in &p {
            let (parent, name) = match e.path.rfind('/') {
                Some(i) => (e.path[..i].to_string(), e.path[i + 1..].to_string()),
                None => (String::new(), e.path.clone()),
            };
            children
                .entry(parent)
                .or_default()
                .insert(name.into_bytes());
            if matches!(e.kind, Kind::Dir { .. }) {
                children.entry(e.path.clone()).or_default();
            }
        }
        let mut shape = Problems::new();
        for (dir, want) in &children {
            let path = if dir.is_empty() {
                root.clone()
            } else {
                root.join(dir)
            };
            match list(&path) {
                Err(e) => shape.add(format!("list {dir:?}: {e}")),
                Ok(got) => {
                    let show = |n: &[u8]| {
                        let n = String::from_utf8_lossy(n);
                        if dir.is_empty() {
                            n.into_owned()
                        } else {
                            format!("{dir}/{n}")
                        }
                    };
                    for m in want.difference(&got) {
                        shape.add(format!("{}: missing", show(m)));
                    }
                    for x in got.difference(want) {
                        shape.add(format!("{}: unexpected entry", show(x)));
                    }
                }
            }
        }
        shape.report(
            r,
            &format!(
                "tree shape: {} dirs hold exactly the planned entries",
                children.len()
            ),
            "exact entries",
        );
        let mut meta = Problems::new();
        let mut data = Problems::new();
        let mut links = Problems::new();
        let mut hard = Problems::new();
        let mut xattrs = Problems::new();
        let mut buf = vec![0u8; MIB as usize];
        let mut scratch = Vec::new();
        let mut verified = 0u64;
        // Expected link counts and inode numbers of files.
        let mut nlinks: BTreeMap<&str, u64> = BTreeMap::new();
        for e in &p {
            match &e.kind {
                Kind::File { .. } => *nlinks.entry(e.path.as_str()).or_insert(0) += 1,
                Kind::HardLink { target } => *nlinks.entry(target.as_str()).or_insert(0) += 1,
                _ => {}
            }
        }
        let mut inos: BTreeMap<&str, u64> = BTreeMap::new();
        for e in &p {
            let path = root.join(&e.path);
            let st = match sys::lstat(&path) {
                Ok(s) => s,
                Err(err) => {
                    // Already reported by the shape check when missing; count it once more here.
                    meta.add(format!("{}: lstat: {err}", e.path));
                    continue;
                }
            };
            match &e.kind {
                Kind::Dir { mode, mtime } => {
                    if st.st_mode != S_IFDIR | mode {
                        meta.add(format!(
                            "{}: mode {:o}, want {:o}",
                            e.path,
                            st.st_mode,
                            S_IFDIR | mode
                        ));
                    }
                    if (st.st_mtime as i64, st.st_mtime_nsec as u32) != *mtime {
                        meta.add(format!(
                            "{}: dir mtime {}.{:09}, want {}.{:09}",
                            e.path, st.st_mtime, st.st_mtime_nsec, mtime.0, mtime.1
                        ));
                    }
                }
                Kind::HardLink { target } => {
                    if st.st_mode & S_IFMT != S_IFREG {
                        hard.add(format!(
                            "{}: mode {:o}, want a regular file",
                            e.path, st.st_mode
                        ));
                    } else if inos.get(target.as_str()) != Some(&(st.st_ino as u64)) {
                        hard.add(format!(
                            "{}: inode {}, want {:?} of {target}",
                            e.path,
                            st.st_ino,
                            inos.get(target.as_str())
                        ));
                    }
                }
                Kind::Symlink { target } => match sys::readlink(&path) {
                    Ok(t) if &t == target => {}
                    Ok(t) => links.add(format!("{}: target {} bytes differs", e.path, t.len())),
                    Err(err) => links.add(format!(
                        "{}: readlink: {err} (mode {:o}, want {:o})",
                        e.path, st.st_mode, S_IFLNK
                    )),
                },
                Kind::File {
                    size,
                    mode,
                    mtime,
                    xattr,
                } => {
                    inos.insert(e.path.as_str(), st.st_ino as u64);
                    let want_nlink = nlinks.get(e.path.as_str()).copied().unwrap_or(1);
                    if st.st_nlink as u64 != want_nlink {
                        hard.add(format!(
                            "{}: nlink {}, want {want_nlink}",
                            e.path, st.st_nlink
                        ));
                    }
                    if !o.no_xattrs {
                        let got = sys::getxattr(&path, XATTR_NAME);
                        match (xattr, got) {
                            (None, Err(sys::Errno(libc::ENODATA))) => {}
                            (Some(len), Ok(v)) if v == xattr_value(o.seed, &e.path, *len) => {}
                            (want, got) => xattrs.add(format!(
                                "{}: {XATTR_NAME} is {:?}, want {want:?} bytes",
                                e.path,
                                got.map(|v| v.len())
                            )),
                        }
                    }
                    if st.st_mode != S_IFREG | mode {
                        meta.add(format!(
                            "{}: mode {:o}, want {:o}",
                            e.path,
                            st.st_mode,
                            S_IFREG | mode
                        ));
                    }
                    if st.st_size as u64 != *size {
                        meta.add(format!("{}: size {}, want {size}", e.path, st.st_size));
                    }
                    if (st.st_mtime as i64, st.st_mtime_nsec as u32) != *mtime {
                        meta.add(format!(
                            "{}: mtime {}.{:09}, want {}.{:09}",
                            e.path, st.st_mtime, st.st_mtime_nsec, mtime.0, mtime.1
                        ));
                    }
                    let k = key(o.seed, &e.path);
                    let res = (|| -> Result<(), String> {
                        let fd = sys::open(&path, O_RDONLY, 0).map_err(|e| format!("open: {e}"))?;
                        let mut off = 0u64;
                        loop {
                            let n = fd
                                .pread_full(&mut buf, off)
                                .map_err(|e| format!("read at {off}: {e}"))?;
                            if let Some(at) =
                                pattern::first_mismatch(k, off, &buf[..n], &mut scratch)
                            {
                                let zero = buf[(at - off) as usize..n]
                                    .iter()
                                    .take(4096)
                                    .all(|&b| b == 0);
                                return Err(format!(
                                    "content differs at byte {at}{}",
                                    if zero { " (zeros)" } else { "" }
                                ));
                            }
                            off += n as u64;
                            if n < buf.len() {
                                break;
                            }
                        }
                        if off != *size {
                            return Err(format!("read {off} bytes, want {size}"));
                        }
                        Ok(())
                    })();
                    match res {
                        Ok(()) => verified += 1,
                        Err(m) => data.add(format!("{}: {m}", e.path)),
                    }
                }
            }
        }
        meta.report(
            r,
            &format!("{} entries: type, size, mode, mtime", p.len()),
            "planned metadata",
        );
        data.report(
            r,
            &format!("{} files ({} bytes) byte for byte", c.files, c.bytes),
            "pattern content",
        );
        links.report(
            r,
            &format!("{} symlink targets", c.links),
            "planned targets",
        );
        hard.report(
            r,
            &format!("{} hard links: same inode, link counts", c.hardlinks),
            "planned links",
        );
        if o.no_xattrs {
            r.skip("xattrs", "--no-xattrs");
        } else {
            xattrs.report(
                r,
                &format!(
                    "{} files' {XATTR_NAME} xattr (and its absence elsewhere)",
                    c.files
                ),
                "planned xattrs",
            );
        }
        r.note(format!("verified {verified} of {} files", c.files));
    });
    r.finish()
}

fn list(p: &Path) -> sys::R<BTreeSet<Vec<u8>>> {
    let fd = sys::open(p, O_RDONLY | O_DIRECTORY, 0)?;
    let mut out = BTreeSet::new();
    let mut buf = vec![0u8; 32768];
    let mut returned = 0usize;
    loop {
        let ents = fd.getdents(&mut buf)?;
        if ents.is_empty() {
            break;
        }
        for e in ents {
            if e.name != b"." && e.name != b".." {
                out.insert(e.name);
            }
        }
        returned += 1;
        if returned > crate::posix::READDIR_LIMIT / 16 {
            panic!("readdir of {} did not reach the end", p.display());
        }
    }
    Ok(out)
}

/// Removes a tree written by `write` (used by tests and `integrity clean`).
pub fn clean(dir: &Path, seed: u64) -> std::io::Result<()> {
    let root = dir.join(root_name(seed));
    std::fs::remove_dir_all(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_is_deterministic_and_sized() {
        let a = plan(3, 8);
        let b = plan(3, 8);
        assert_eq!(a, b);
        assert_ne!(a, plan(4, 8));
        let c = counts(&a);
        assert!(
            c.bytes >= 8 * MIB && c.bytes < 8 * MIB + 8 * MIB,
            "{}",
            c.bytes
        );
        assert!(c.files > 10 && c.dirs > 0 && c.links > 0 && c.hardlinks > 0 && c.xattrs > 0);
        // Parents precede children and names are unique.
        let mut seen = BTreeSet::new();
        seen.insert(String::new());
        let dirs: BTreeSet<&str> = a
            .iter()
            .filter(|e| matches!(e.kind, Kind::Dir { .. }))
            .map(|e| e.path.as_str())
            .collect();
        let files: BTreeSet<&str> = a
            .iter()
            .filter(|e| matches!(e.kind, Kind::File { .. }))
            .map(|e| e.path.as_str())
            .collect();
        for e in &a {
            let parent = e.path.rfind('/').map(|i| &e.path[..i]).unwrap_or("");
            assert!(parent.is_empty() || dirs.contains(parent), "{}", e.path);
            assert!(seen.insert(e.path.clone()), "duplicate {}", e.path);
            if let Kind::HardLink { target } = &e.kind {
                assert!(
                    files.contains(target.as_str()) && seen.contains(target),
                    "{}",
                    e.path
                );
            }
            assert!(e.path.split('/').all(|c| !c.is_empty() && c.len() <= 255));
        }
    }

    #[test]
    fn tiny_plan_still_has_entries() {
        let p = plan(1, 0);
        assert!(p.len() >= 12);
    }
}
