//! Helpers shared by the integration tests: running the binaries, building source trees,
//! reading images back through the engine, corrupting images.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ferrofs_engine::format::{kind, Key, Loc, S_IFLNK, S_IFMT, S_IFREG};
use ferrofs_engine::Inode;
use ferrofs_tools::dev::{open_existing, GeoHints};
use ferrofs_tools::layout::{index_entries, newest_valid, read_checkpoints, scan_superblocks};
use ferrofs_tools::walk::{list_dir, mount, read_all, resolve, xattrs};
use ferrofs_tools::Fs;

pub const MKFS: &str = env!("CARGO_BIN_EXE_mkfs-ferrofs");
pub const FSCK: &str = env!("CARGO_BIN_EXE_fsck-ferrofs");
pub const DUMP: &str = env!("CARGO_BIN_EXE_ferrofs-dump");

/// Result of running a tool.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub raw_stdout: Vec<u8>,
}

impl Run {
    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

pub fn run(bin: &str, args: &[&str]) -> Run {
    let out: Output = Command::new(bin).args(args).output().expect("spawn tool");
    let r = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        raw_stdout: out.stdout,
    };
    assert!(!r.stderr.contains("panicked"), "{bin} {args:?} panicked:\n{}", r.stderr);
    assert_ne!(r.code, 101, "{bin} {args:?} exited 101 (panic?):\n{}", r.stderr);
    r
}

pub fn run_ok(bin: &str, args: &[&str]) -> Run {
    let r = run(bin, args);
    assert_eq!(r.code, 0, "{bin} {args:?} failed:\nstdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    r
}

pub fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

/// Mount an image read-only through the library.
pub fn mount_ro(img: &Path) -> Fs {
    let dev = open_existing(img, &GeoHints::default(), true).expect("open image");
    match mount(dev, true) {
        Ok(f) => f,
        Err((e, _)) => panic!("mount {}: {e}", img.display()),
    }
}

/// Set times (ns) on a path without following symlinks.
pub fn set_times(path: &Path, atime: (i64, i64), mtime: (i64, i64)) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let ts = [
        libc::timespec { tv_sec: atime.0, tv_nsec: atime.1 },
        libc::timespec { tv_sec: mtime.0, tv_nsec: mtime.1 },
    ];
    // SAFETY: valid C string and a 2-element timespec array.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    assert_eq!(r, 0, "utimensat {}: {}", path.display(), std::io::Error::last_os_error());
}

pub fn mkfifo(path: &Path, mode: u32) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C string.
    let r = unsafe { libc::mkfifo(c.as_ptr(), mode) };
    assert_eq!(r, 0, "mkfifo: {}", std::io::Error::last_os_error());
}

/// mknod; false when not permitted (not root).
pub fn mknod(path: &Path, mode: u32, dev: u64) -> bool {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C string.
    unsafe { libc::mknod(c.as_ptr(), mode, dev) == 0 }
}

/// lsetxattr; false when unsupported.
pub fn set_xattr(path: &Path, name: &str, value: &[u8]) -> bool {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings and a value buffer of the given length.
    unsafe { libc::lsetxattr(c.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) == 0 }
}

pub fn lchown(path: &Path, uid: u32, gid: u32) -> bool {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C string.
    unsafe { libc::lchown(c.as_ptr(), uid, gid) == 0 }
}

/// A snapshot of the source metadata taken before mkfs (mkfs's reads change atimes).
#[derive(Debug, Clone)]
pub struct Snap {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u64,
    pub atime: (i64, i64),
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
    pub rdev: u64,
    pub dev_ino: (u64, u64),
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Relative path (bytes) -> snapshot, for every entry under `root` (not the root itself).
pub fn snapshot(root: &Path) -> BTreeMap<Vec<u8>, Snap> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            let md = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(root).unwrap().as_os_str().as_bytes().to_vec();
            if md.is_dir() {
                stack.push(path.clone());
            }
            let xattrs = ferrofs_tools::populate::read_xattrs(&path).unwrap_or_default();
            out.insert(
                rel,
                Snap {
                    mode: md.mode(),
                    uid: md.uid(),
                    gid: md.gid(),
                    size: md.size(),
                    nlink: md.nlink(),
                    atime: (md.atime(), md.atime_nsec()),
                    mtime: (md.mtime(), md.mtime_nsec()),
                    ctime: (md.ctime(), md.ctime_nsec()),
                    rdev: md.rdev(),
                    dev_ino: (md.dev(), md.ino()),
                    xattrs,
                },
            );
        }
    }
    out
}

/// Read a source file without updating its atime.
pub fn read_noatime(path: &Path) -> Vec<u8> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOATIME).open(path).unwrap();
    let mut v = Vec::new();
    f.read_to_end(&mut v).unwrap();
    v
}

fn ts(t: ferrofs_engine::Timespec) -> (i64, i64) {
    (t.sec, i64::from(t.nsec))
}

/// Compare every entry of the image with the snapshot of the source and its current content.
/// Returns the number of entries compared.
pub fn compare_tree(fs: &mut Fs, src: &Path, snap: &BTreeMap<Vec<u8>, Snap>, squash: bool) -> usize {
    let mut by_src_ino: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for (rel, s) in snap {
        let name = String::from_utf8_lossy(rel).into_owned();
        let i: Inode = resolve(fs, rel).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(i.mode & S_IFMT, s.mode & S_IFMT, "{name}: type");
        if i.mode & S_IFMT != S_IFLNK {
            assert_eq!(i.mode & 0o7777, s.mode & 0o7777, "{name}: permissions");
        }
        if squash {
            assert_eq!((i.uid, i.gid), (0, 0), "{name}: squashed owner");
        } else {
            assert_eq!((i.uid, i.gid), (s.uid, s.gid), "{name}: owner");
        }
        assert_eq!(ts(i.mtime), s.mtime, "{name}: mtime");
        if !i.is_dir() {
            // reading a directory (mkfs's pre-scan) may update its atime (relatime)
            assert_eq!(ts(i.atime), s.atime, "{name}: atime");
        }
        assert_eq!(ts(i.ctime), s.ctime, "{name}: ctime");
        if !i.is_dir() {
            assert_eq!(u64::from(i.nlink), s.nlink, "{name}: nlink");
            if let Some(&prev) = by_src_ino.get(&s.dev_ino) {
                assert_eq!(prev, i.ino, "{name}: hard link to another inode");
            }
            by_src_ino.insert(s.dev_ino, i.ino);
        } else {
            // directories: 2 + subdirectories, as on the source
            assert_eq!(u64::from(i.nlink), s.nlink, "{name}: directory nlink");
        }
        let full = src.join(std::ffi::OsStr::from_bytes(rel));
        match s.mode & S_IFMT {
            S_IFREG => {
                assert_eq!(i.size, s.size, "{name}: size");
                let want = read_noatime(&full);
                let got = read_all(fs, i.ino, i.size).unwrap();
                assert!(got == want, "{name}: content differs");
            }
            S_IFLNK => {
                let want = std::fs::read_link(&full).unwrap();
                let mut buf = vec![0u8; 4096];
                let n = fs.readlink(i.ino, &mut buf).unwrap();
                assert_eq!(&buf[..n], want.as_os_str().as_bytes(), "{name}: symlink target");
                assert_eq!(i.size, n as u64, "{name}: symlink size");
            }
            m if m == libc::S_IFCHR || m == libc::S_IFBLK => {
                assert_eq!(ferrofs_tools::util::decode_rdev(i.rdev), (libc::major(s.rdev), libc::minor(s.rdev)), "{name}: rdev");
            }
            _ => {}
        }
        let mut got = xattrs(fs, i.ino).unwrap();
        got.sort();
        let mut want = s.xattrs.clone();
        want.sort();
        assert_eq!(got, want, "{name}: xattrs");
    }
    // nothing extra in the image
    let mut count = 0usize;
    let mut stack = vec![(ferrofs_engine::ROOT_INO, Vec::<u8>::new())];
    while let Some((d, prefix)) = stack.pop() {
        for e in list_dir(fs, d).unwrap() {
            let mut rel = prefix.clone();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(&e.name);
            assert!(snap.contains_key(&rel), "extra entry {:?} in the image", String::from_utf8_lossy(&rel));
            count += 1;
            if e.ftype == ferrofs_engine::FileType::Dir {
                stack.push((e.ino, rel));
            }
        }
    }
    assert_eq!(count, snap.len(), "entry count");
    count
}

/// Offset of the raw contents in a simulator image.
pub fn sim_data_offset(img: &Path) -> u64 {
    let b = std::fs::read(img).unwrap();
    assert_eq!(&b[..8], b"FFSIMIMG");
    u64::from_le_bytes(b[48..56].try_into().unwrap())
}

/// Flip the bits of `mask` in the byte at (seg, off) of a simulator image.
pub fn flip(img: &Path, seg: u32, off: u64, mask: u8) {
    let hdr_off = sim_data_offset(img);
    let mut b = std::fs::read(img).unwrap();
    let ss = u32::from_le_bytes(b[20..24].try_into().unwrap()) as u64;
    let i = (hdr_off + u64::from(seg) * ss + off) as usize;
    b[i] ^= mask;
    std::fs::write(img, b).unwrap();
}

/// Location of a key in the index of the newest checkpoint.
pub fn locate(img: &Path, key: Key) -> Loc {
    let mut dev = open_existing(img, &GeoHints::default(), true).unwrap();
    let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
    let cps = read_checkpoints(dev.flash(), &sb);
    let (_, h, _) = newest_valid(&cps).unwrap();
    let (m, _) = index_entries(dev.flash(), &sb, h, (key.ino, key.ino)).unwrap();
    *m.get(&key).unwrap_or_else(|| panic!("key {key:?} not indexed"))
}

/// Number of DATA records indexed for an inode.
pub fn data_blocks(img: &Path, ino: u64) -> usize {
    let mut dev = open_existing(img, &GeoHints::default(), true).unwrap();
    let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
    let cps = read_checkpoints(dev.flash(), &sb);
    let (_, h, _) = newest_valid(&cps).unwrap();
    let (m, _) = index_entries(dev.flash(), &sb, h, (ino, ino)).unwrap();
    m.keys().filter(|k| k.kind == kind::DATA).count()
}

/// Deterministic pseudo-random bytes.
pub fn prng_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

pub fn img_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}
