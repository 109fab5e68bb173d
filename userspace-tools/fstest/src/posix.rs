//! `posix DIR`: POSIX/Linux semantics of every common operation, with expected results and errnos.
//!
//! Everything runs in one process (TCG guests pay dearly for every spawn); the only forks are for
//! the non-root permission checks. Each group works in its own subdirectory of a fresh work
//! directory `DIR/fstest-posix.<pid>` that is removed at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use libc::{
    EACCES, EBADF, EBUSY, EEXIST, EINVAL, EISDIR, ELOOP, ENAMETOOLONG, ENODATA, ENOENT, ENOTDIR,
    ENOTEMPTY, ENXIO, EPERM, ERANGE, EXDEV, O_APPEND, O_CREAT, O_DIRECTORY, O_EXCL, O_NOFOLLOW,
    O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT,
    S_IFREG, S_IFSOCK,
};

use crate::pattern::{self, Rng};
use crate::report::Report;
use crate::sys::{self, must, Errno, Fd, Mmap, Statx, TimeSpec, Ts, R};

const RENAME_NOREPLACE: u32 = 1;
const RENAME_EXCHANGE: u32 = 2;
const XATTR_CREATE: i32 = 1;
const XATTR_REPLACE: i32 = 2;
const MIB: u64 = 1 << 20;
const NOBODY: u32 = 65534;

#[derive(Debug, Clone)]
pub struct Opts {
    pub dir: PathBuf,
    pub other_dir: Option<PathBuf>,
    /// Size of the large-file check in MiB (0 = skip).
    pub large_mib: u64,
    /// Operations of the random read/write/truncate model check.
    pub fsx_ops: u64,
    /// Entries of the big-directory check.
    pub bigdir: usize,
    /// Drop the page cache before read-back verifications (root only).
    pub drop_caches: bool,
    /// Run only groups whose name contains one of these (empty = all).
    pub only: Vec<String>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            dir: PathBuf::new(),
            other_dir: None,
            large_mib: 16,
            fsx_ops: 3000,
            bigdir: 10_000,
            drop_caches: false,
            only: Vec::new(),
        }
    }
}

struct Ctx<'a> {
    o: &'a Opts,
    root: PathBuf,
}

impl Ctx<'_> {
    /// A fresh subdirectory for one group.
    fn sub(&self, name: &str) -> PathBuf {
        let p = self.root.join(name);
        must(sys::mkdir(&p, 0o755), &format!("mkdir {}", p.display()));
        p
    }
    fn maybe_drop(&self) {
        if self.o.drop_caches {
            sys::drop_caches();
        }
    }
}

fn ftype(mode: u32) -> u32 {
    mode & S_IFMT
}

fn pat(key: u64, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    pattern::fill(key, off, &mut v);
    v
}

fn sx(p: &Path) -> Statx {
    must(sys::statx(p, true), &format!("statx {}", p.display()))
}

fn st(p: &Path) -> libc::stat {
    must(sys::lstat(p), &format!("lstat {}", p.display()))
}

fn touch(p: &Path) {
    must(
        sys::write_file(p, b"", 0o644),
        &format!("create {}", p.display()),
    );
}

fn nlink(p: &Path) -> u64 {
    st(p).st_nlink as u64
}

fn exists(p: &Path) -> bool {
    sys::lstat(p).is_ok()
}

/// Names in a directory (without "." and "..").
fn list(p: &Path) -> R<BTreeSet<Vec<u8>>> {
    let fd = sys::open(p, O_RDONLY | O_DIRECTORY, 0)?;
    Ok(list_all(&fd)?
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n != b"." && n != b"..")
        .collect())
}

/// A directory listing that returns more entries than this never ends (a readdir bug); the
/// listing panics, which fails the group instead of hanging the run.
pub const READDIR_LIMIT: usize = 1_000_000;

/// Every entry including "." and "..", in readdir order.
fn list_all(fd: &Fd) -> R<Vec<sys::Dirent>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 32768];
    loop {
        let ents = fd.getdents(&mut buf)?;
        if ents.is_empty() {
            break;
        }
        out.extend(ents);
        if out.len() > READDIR_LIMIT {
            panic!("readdir returned more than {READDIR_LIMIT} entries without reaching the end");
        }
    }
    Ok(out)
}

/// Timestamp granularity of the filesystem under test in ns (measured by the times group).
static GRAN_NS: AtomicU64 = AtomicU64::new(1);

fn ts_add(t: Ts, ns: u64) -> Ts {
    let total = u64::from(t.nsec) + ns;
    Ts {
        sec: t.sec + (total / 1_000_000_000) as i64,
        nsec: (total % 1_000_000_000) as u32,
    }
}

/// `t` rounded down to the filesystem's timestamp granularity.
fn ts_trunc(t: Ts) -> Ts {
    let g = GRAN_NS.load(Ordering::Relaxed).max(1);
    if g >= 1_000_000_000 {
        Ts {
            sec: t.sec,
            nsec: 0,
        }
    } else {
        Ts {
            sec: t.sec,
            nsec: t.nsec - t.nsec % g as u32,
        }
    }
}

/// Waits until a following inode update must get a timestamp later than those of `s`, even
/// after the filesystem rounds it down to its granularity.
fn tick(s: &Statx) {
    let g = GRAN_NS.load(Ordering::Relaxed).max(1);
    sys::wait_clock_past(ts_add(s.ctime.max(s.mtime).max(s.atime), g - 1));
}

fn join(a: &Path, name: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    a.join(std::ffi::OsStr::from_bytes(name))
}

pub fn run(o: &Opts) -> i32 {
    let mut r = Report::new();
    // SAFETY: umask has no preconditions; modes in the checks are then exactly what we pass.
    unsafe { libc::umask(0) };
    let root = o.dir.join(format!("fstest-posix.{}", std::process::id()));
    if let Err(e) = sys::mkdir(&root, 0o755) {
        r.fail("create work directory", "success", e);
        return r.finish();
    }
    let cx = Ctx {
        o,
        root: root.clone(),
    };
    for (name, f) in GROUPS {
        if !o.only.is_empty() && !o.only.iter().any(|s| s == name) {
            continue;
        }
        r.group(name, |r| f(r, &cx));
    }
    r.group("cleanup", |r| {
        let res = std::fs::remove_dir_all(&root).map_err(|e| Errno(e.raw_os_error().unwrap_or(0)));
        r.ok("remove work directory", res);
    });
    r.finish()
}

type Group = fn(&mut Report, &Ctx);

/// The check groups in run order.
const GROUPS: &[(&str, Group)] = &[
    ("open", g_open),
    ("dirs", g_dirs),
    ("link", g_link),
    ("symlink", g_symlink),
    ("rename", g_rename),
    ("mknod", g_mknod),
    ("attrs", g_attrs),
    ("times", g_times),
    ("names", g_names),
    ("truncate", g_truncate),
    ("sparse", g_sparse),
    ("io", g_io),
    ("fsx", g_fsx),
    ("mmap", g_mmap),
    ("sync", g_sync),
    ("xattr", g_xattr),
    ("bigdir", g_bigdir),
    ("readdir", g_readdir),
    ("perms", g_perms),
    ("statfs", g_statfs),
    ("large", g_large),
];

/// Names of the check groups, for `--only`.
pub fn group_names() -> Vec<&'static str> {
    GROUPS.iter().map(|g| g.0).collect()
}

// ---------------------------------------------------------------------------------------------

fn g_open(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("open");
    let f = d.join("f");
    let fd = r.ok(
        "O_CREAT|O_EXCL creates a new file",
        sys::open(&f, O_CREAT | O_EXCL | O_WRONLY, 0o640),
    );
    let s = sx(&f);
    r.eq(
        "new file mode is S_IFREG|0640 (umask 0)",
        S_IFREG | 0o640,
        s.mode,
    );
    r.eq("new file size 0", 0, s.size);
    r.eq("new file nlink 1", 1, s.nlink);
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    r.eq("new file owner is euid:egid", (uid, gid), (s.uid, s.gid));
    if let Some(fd) = fd {
        r.eq("write 5 bytes", Ok(5), fd.write(b"hello"));
        let mut b = [0u8; 4];
        r.err("read from O_WRONLY fd", fd.read(&mut b), EBADF);
    }
    r.err(
        "O_CREAT|O_EXCL on existing file",
        sys::open(&f, O_CREAT | O_EXCL | O_WRONLY, 0o644),
        EEXIST,
    );
    r.err(
        "O_CREAT|O_EXCL on existing dir",
        sys::open(&d, O_CREAT | O_EXCL | O_WRONLY, 0o644),
        EEXIST,
    );
    must(sys::symlink(b"nowhere", d.join("dangling")), "symlink");
    r.err(
        "O_CREAT|O_EXCL on dangling symlink",
        sys::open(d.join("dangling"), O_CREAT | O_EXCL | O_WRONLY, 0o644),
        EEXIST,
    );
    r.ok(
        "O_CREAT through dangling symlink",
        sys::open(d.join("dangling"), O_CREAT | O_WRONLY, 0o600),
    );
    r.eq(
        "... creates the symlink's target",
        true,
        exists(&d.join("nowhere")),
    );
    r.err(
        "open missing file",
        sys::open(d.join("missing"), O_RDONLY, 0),
        ENOENT,
    );
    r.err(
        "O_CREAT in missing directory",
        sys::open(d.join("missing/x"), O_CREAT | O_WRONLY, 0o644),
        ENOENT,
    );
    r.err(
        "open file/x",
        sys::open(d.join("f/x"), O_RDONLY, 0),
        ENOTDIR,
    );
    r.err("open dir O_WRONLY", sys::open(&d, O_WRONLY, 0), EISDIR);
    r.err("open dir O_RDWR", sys::open(&d, O_RDWR, 0), EISDIR);
    r.err(
        "O_CREAT with trailing slash",
        sys::open(d.join("newf/"), O_CREAT | O_WRONLY, 0o644),
        EISDIR,
    );
    r.err(
        "O_DIRECTORY on a file",
        sys::open(&f, O_RDONLY | O_DIRECTORY, 0),
        ENOTDIR,
    );
    r.ok(
        "O_DIRECTORY on a dir",
        sys::open(&d, O_RDONLY | O_DIRECTORY, 0),
    );
    must(sys::symlink(b"f", d.join("lf")), "symlink");
    r.err(
        "O_NOFOLLOW on symlink",
        sys::open(d.join("lf"), O_RDONLY | O_NOFOLLOW, 0),
        ELOOP,
    );
    must(sys::symlink(b"loop2", d.join("loop1")), "symlink");
    must(sys::symlink(b"loop1", d.join("loop2")), "symlink");
    r.err(
        "symlink loop",
        sys::open(d.join("loop1"), O_RDONLY, 0),
        ELOOP,
    );
    r.ok(
        "O_CREAT without O_EXCL on existing file",
        sys::open(&f, O_CREAT | O_WRONLY, 0o644),
    );
    r.eq(
        "... keeps its content",
        Ok(b"hello".to_vec()),
        sys::read_file(&f),
    );
    r.eq("... keeps its mode", S_IFREG | 0o640, sx(&f).mode);
    let fdr = must(sys::open(&f, O_RDONLY, 0), "open");
    r.err("write to O_RDONLY fd", fdr.write(b"x"), EBADF);
    r.ok("O_TRUNC", sys::open(&f, O_WRONLY | O_TRUNC, 0));
    r.eq("... truncates to 0", 0, sx(&f).size);
    let fd = must(sys::open(&f, O_RDWR, 0), "open");
    must(fd.write(b"abc"), "write");
    let mut b = [0u8; 8];
    r.eq(
        "read after write at position 3 hits EOF",
        Ok(0),
        fd.read(&mut b),
    );
    r.eq("lseek SEEK_SET 0", Ok(0), fd.lseek(0, libc::SEEK_SET));
    r.eq("read returns the 3 bytes", Ok(3), fd.read(&mut b));
    r.err(
        "lseek to negative offset",
        fd.lseek(-1, libc::SEEK_SET),
        EINVAL,
    );
    r.eq("lseek SEEK_END", Ok(3), fd.lseek(0, libc::SEEK_END));
    r.eq(
        "lseek SEEK_CUR +10 past EOF",
        Ok(13),
        fd.lseek(10, libc::SEEK_CUR),
    );
}

fn g_dirs(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("dirs");
    let pn0 = nlink(&d);
    r.eq("fresh dir nlink 2", 2, pn0);
    let a = d.join("a");
    r.ok("mkdir", sys::mkdir(&a, 0o750));
    let s = sx(&a);
    r.eq("mkdir mode S_IFDIR|0750", S_IFDIR | 0o750, s.mode);
    r.eq("new dir nlink 2", 2, s.nlink);
    r.eq("parent nlink +1 after mkdir", pn0 + 1, nlink(&d));
    r.eq(
        "a/.. is the parent",
        st(&d).st_ino,
        st(&a.join("..")).st_ino,
    );
    r.eq("a/. is a", s.ino, st(&a.join(".")).st_ino);
    r.eq("new dir lists empty", Ok(BTreeSet::new()), list(&a));
    let fd = must(sys::open(&a, O_RDONLY | O_DIRECTORY, 0), "open dir");
    let all = must(list_all(&fd), "getdents");
    let mut names: Vec<Vec<u8>> = all.iter().map(|e| e.name.clone()).collect();
    names.sort();
    r.eq(
        "empty dir readdir is exactly . and ..",
        vec![b".".to_vec(), b"..".to_vec()],
        names,
    );
    r.err("mkdir existing dir", sys::mkdir(&a, 0o755), EEXIST);
    touch(&d.join("f"));
    r.err(
        "mkdir over existing file",
        sys::mkdir(d.join("f"), 0o755),
        EEXIST,
    );
    r.err(
        "mkdir in missing dir",
        sys::mkdir(d.join("missing/x"), 0o755),
        ENOENT,
    );
    r.err(
        "mkdir under a file",
        sys::mkdir(d.join("f/x"), 0o755),
        ENOTDIR,
    );
    r.ok("mkdir with trailing slash", sys::mkdir(d.join("t/"), 0o755));
    touch(&a.join("inner"));
    r.err("rmdir non-empty", sys::rmdir(&a), ENOTEMPTY);
    r.err("rmdir a file", sys::rmdir(d.join("f")), ENOTDIR);
    r.err("rmdir missing", sys::rmdir(d.join("missing")), ENOENT);
    r.err("rmdir dir/.", sys::rmdir(a.join(".")), EINVAL);
    r.err("unlink a dir", sys::unlink(&a), EISDIR);
    r.err("unlink missing", sys::unlink(d.join("missing")), ENOENT);
    r.err("unlink file/x", sys::unlink(d.join("f/x")), ENOTDIR);
    r.ok("unlink file", sys::unlink(a.join("inner")));
    r.err("... then lstat", sys::lstat(a.join("inner")), ENOENT);
    r.ok("rmdir empty dir", sys::rmdir(&a));
    r.err("... then lstat", sys::lstat(&a), ENOENT);
    r.eq("parent nlink back after rmdir", pn0 + 1, nlink(&d)); // "t" remains
                                                               // Subdirectory counts.
    for i in 0..50 {
        must(sys::mkdir(d.join(format!("s{i}")), 0o755), "mkdir");
    }
    r.eq("nlink = 2 + subdirs (51)", 2 + 51, nlink(&d));
    for i in 0..50 {
        must(sys::rmdir(d.join(format!("s{i}"))), "rmdir");
    }
    r.eq("nlink after removing 50 subdirs", 3, nlink(&d));
    // Deep nesting.
    let mut p = d.join("deep");
    let mut ok = true;
    for _ in 0..32 {
        ok &= sys::mkdir(&p, 0o755).is_ok();
        p = p.join("d");
    }
    r.check("32-level nested mkdir", ok, "success", "a mkdir failed");
    r.ok(
        "file at depth 32",
        sys::write_file(p.with_file_name("leaf"), b"x", 0o644),
    );
    // rmdir of the cwd-like open dir: removing a directory that is open still works.
    let e = d.join("openrm");
    must(sys::mkdir(&e, 0o755), "mkdir");
    let efd = must(sys::open(&e, O_RDONLY | O_DIRECTORY, 0), "open");
    r.ok("rmdir of an open directory", sys::rmdir(&e));
    r.err(
        "... getdents on it (dead directory)",
        list_all(&efd),
        ENOENT,
    );
    r.eq(
        "... fstat nlink 0",
        0,
        must(efd.fstat(), "fstat").st_nlink as u64,
    );
    // Unlink while open.
    let u = d.join("openunlink");
    must(sys::write_file(&u, b"still here", 0o644), "write");
    let ufd = must(sys::open(&u, O_RDWR, 0), "open");
    r.ok("unlink of an open file", sys::unlink(&u));
    r.eq(
        "... fstat nlink 0",
        0,
        must(ufd.fstat(), "fstat").st_nlink as u64,
    );
    let mut b = [0u8; 10];
    r.eq("... still readable", Ok(10), ufd.pread(&mut b, 0));
    r.eq("... content intact", b"still here".to_vec(), b.to_vec());
    r.eq("... still writable", Ok(3), ufd.pwrite(b"abc", 10));
    r.eq(
        "... fstat size 13",
        13,
        must(ufd.fstat(), "fstat").st_size as u64,
    );
}

fn g_link(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("link");
    let d1 = d.join("d1");
    let d2 = d.join("d2");
    must(sys::mkdir(&d1, 0o755), "mkdir");
    must(sys::mkdir(&d2, 0o755), "mkdir");
    let f = d1.join("f");
    must(sys::write_file(&f, b"data", 0o644), "write");
    r.ok("link across directories", sys::link(&f, d2.join("g")));
    r.eq("nlink 2 on the file", 2, nlink(&f));
    r.eq(
        "same inode via both names",
        st(&f).st_ino,
        st(&d2.join("g")).st_ino,
    );
    must(sys::write_file(d2.join("g"), b"changed", 0o644), "write");
    r.eq(
        "write via one name seen via the other",
        Ok(b"changed".to_vec()),
        sys::read_file(&f),
    );
    r.err("link to existing name", sys::link(&f, d2.join("g")), EEXIST);
    r.err("link a directory", sys::link(&d1, d.join("dl")), EPERM);
    r.err(
        "link missing source",
        sys::link(d1.join("missing"), d.join("x")),
        ENOENT,
    );
    r.err(
        "link into missing dir",
        sys::link(&f, d.join("missing/x")),
        ENOENT,
    );
    r.ok("unlink first name", sys::unlink(&f));
    r.eq("other name nlink 1", 1, nlink(&d2.join("g")));
    r.eq(
        "other name content intact",
        Ok(b"changed".to_vec()),
        sys::read_file(d2.join("g")),
    );
    // Many links.
    let h = d.join("h");
    must(sys::write_file(&h, b"h", 0o644), "write");
    let mut ok = true;
    for i in 0..200 {
        ok &= sys::link(&h, d1.join(format!("h{i}"))).is_ok();
    }
    r.check("200 hard links", ok, "success", "a link failed");
    r.eq("nlink 201", 201, nlink(&h));
    let mut ok = true;
    for i in 0..200 {
        ok &= sys::unlink(d1.join(format!("h{i}"))).is_ok();
    }
    r.check("unlink 200 hard links", ok, "success", "an unlink failed");
    r.eq("nlink 1 after removing them", 1, nlink(&h));
    // Link to a symlink links the symlink itself (linkat without AT_SYMLINK_FOLLOW).
    must(sys::symlink(b"h", d.join("sl")), "symlink");
    r.ok("link of a symlink", sys::link(d.join("sl"), d.join("sl2")));
    r.eq(
        "... is a symlink",
        S_IFLNK,
        ftype(st(&d.join("sl2")).st_mode),
    );
    r.eq("... symlink nlink 2", 2, nlink(&d.join("sl")));
    // Link of an unlinked-but-open file fails with ENOENT.
    if let Some(o) = &cx.o.other_dir {
        let od = o.join(format!("fstest-other.{}", std::process::id()));
        if sys::mkdir(&od, 0o755).is_ok() {
            r.err(
                "link across filesystems",
                sys::link(&h, od.join("x")),
                EXDEV,
            );
            let _ = sys::rmdir(&od);
        }
    }
}

fn g_symlink(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("symlink");
    let mut rng = Rng::new(11);
    for len in [
        1usize, 2, 59, 60, 61, 127, 255, 256, 1000, 2048, 4000, 4094, 4095,
    ] {
        // Printable target bytes with slashes, never NUL.
        let t: Vec<u8> = (0..len)
            .map(|i| {
                if i % 17 == 16 {
                    b'/'
                } else {
                    b'a' + rng.below(26) as u8
                }
            })
            .collect();
        let l = d.join(format!("l{len}"));
        if r.ok(
            &format!("symlink with {len}-byte target"),
            sys::symlink(&t, &l),
        )
        .is_some()
        {
            let got = sys::readlink(&l);
            r.check(
                &format!("readlink {len}-byte target exact"),
                got.as_deref() == Ok(&t[..]),
                format!("{len} bytes equal"),
                format!("{:?}", got.map(|v| v.len())),
            );
            let s = st(&l);
            r.eq(
                &format!("lstat size of {len}-byte symlink"),
                len as i64,
                s.st_size,
            );
            r.eq(
                &format!("{len}-byte symlink is S_IFLNK|0777"),
                S_IFLNK | 0o777,
                s.st_mode,
            );
        }
    }
    r.err(
        "symlink with 4096-byte target",
        sys::symlink(&[b'x'; 4096], d.join("l4096")),
        ENAMETOOLONG,
    );
    r.err(
        "symlink over existing name",
        sys::symlink(b"x", d.join("l1")),
        EEXIST,
    );
    r.err(
        "empty symlink target",
        sys::symlink(b"", d.join("lempty")),
        ENOENT,
    );
    touch(&d.join("file"));
    r.err(
        "readlink on a regular file",
        sys::readlink(d.join("file")),
        EINVAL,
    );
    r.err("readlink missing", sys::readlink(d.join("missing")), ENOENT);
    must(sys::write_file(d.join("target"), b"T", 0o644), "write");
    must(sys::mkdir(d.join("sub"), 0o755), "mkdir");
    must(sys::symlink(b"../target", d.join("sub/rel")), "symlink");
    r.eq(
        "relative ../ symlink resolves",
        Ok(b"T".to_vec()),
        sys::read_file(d.join("sub/rel")),
    );
    must(sys::symlink(b"sub", d.join("ldir")), "symlink");
    r.ok(
        "path through a symlink to a dir",
        sys::lstat(d.join("ldir/rel")),
    );
    r.eq(
        "stat follows, lstat does not",
        (S_IFDIR, S_IFLNK),
        (
            ftype(must(sys::stat(d.join("ldir")), "stat").st_mode),
            ftype(st(&d.join("ldir")).st_mode),
        ),
    );
    must(
        sys::symlink(b"does/not/exist", d.join("dangling")),
        "symlink",
    );
    r.err(
        "stat of dangling symlink",
        sys::stat(d.join("dangling")),
        ENOENT,
    );
    r.ok("lstat of dangling symlink", sys::lstat(d.join("dangling")));
    r.ok("unlink symlink", sys::unlink(d.join("ldir")));
    r.ok("... target dir untouched", sys::stat(d.join("sub")));
    let abs = d.join("target");
    use std::os::unix::ffi::OsStrExt;
    must(
        sys::symlink(abs.as_os_str().as_bytes(), d.join("abs")),
        "symlink",
    );
    r.eq(
        "absolute symlink resolves",
        Ok(b"T".to_vec()),
        sys::read_file(d.join("abs")),
    );
}

fn g_rename(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("rename");
    let w = |n: &str, data: &[u8]| must(sys::write_file(d.join(n), data, 0o644), "write");
    let md = |n: &str| must(sys::mkdir(d.join(n), 0o755), "mkdir");
    // Plain rename.
    w("a", b"A");
    let ino = st(&d.join("a")).st_ino;
    r.ok(
        "rename to a new name",
        sys::rename(d.join("a"), d.join("b")),
    );
    r.err("... old name gone", sys::lstat(d.join("a")), ENOENT);
    r.eq(
        "... same inode under new name",
        ino,
        st(&d.join("b")).st_ino,
    );
    r.eq(
        "... content",
        Ok(b"A".to_vec()),
        sys::read_file(d.join("b")),
    );
    // Over an existing file, which is held open.
    w("c", b"C");
    let cfd = must(sys::open(d.join("c"), O_RDONLY, 0), "open");
    r.ok(
        "rename over existing file",
        sys::rename(d.join("b"), d.join("c")),
    );
    r.eq(
        "... target now has source content",
        Ok(b"A".to_vec()),
        sys::read_file(d.join("c")),
    );
    r.eq(
        "... replaced inode has nlink 0",
        0,
        must(cfd.fstat(), "fstat").st_nlink,
    );
    let mut b = [0u8; 1];
    r.eq(
        "... replaced inode still readable",
        (Ok(1), b'C'),
        (cfd.pread(&mut b, 0), b[0]),
    );
    r.ok(
        "rename file to itself",
        sys::rename(d.join("c"), d.join("c")),
    );
    must(sys::link(d.join("c"), d.join("c2")), "link");
    r.ok(
        "rename between two hard links of one inode",
        sys::rename(d.join("c"), d.join("c2")),
    );
    r.eq(
        "... both names remain (POSIX no-op)",
        (true, true),
        (exists(&d.join("c")), exists(&d.join("c2"))),
    );
    // Directories.
    md("d1");
    md("d2");
    touch(&d.join("d1/x"));
    let n0 = nlink(&d);
    r.ok(
        "rename dir over empty dir",
        sys::rename(d.join("d1"), d.join("d2")),
    );
    r.eq("... content moved", true, exists(&d.join("d2/x")));
    r.eq("... parent nlink -1", n0 - 1, nlink(&d));
    md("d3");
    touch(&d.join("d3/y"));
    r.err(
        "rename dir over non-empty dir",
        sys::rename(d.join("d3"), d.join("d2")),
        ENOTEMPTY,
    );
    r.err(
        "rename file over dir",
        sys::rename(d.join("c"), d.join("d3")),
        EISDIR,
    );
    r.err(
        "rename dir over file",
        sys::rename(d.join("d3"), d.join("c")),
        ENOTDIR,
    );
    r.err(
        "rename into own subdir",
        sys::rename(d.join("d3"), d.join("d3/sub")),
        EINVAL,
    );
    md("d3/s1");
    r.err(
        "rename into own grandchild",
        sys::rename(d.join("d3"), d.join("d3/s1/s2")),
        EINVAL,
    );
    r.err(
        "rename missing source",
        sys::rename(d.join("missing"), d.join("x")),
        ENOENT,
    );
    r.err(
        "rename into missing dir",
        sys::rename(d.join("c"), d.join("missing/x")),
        ENOENT,
    );
    r.err(
        "rename to path under a file",
        sys::rename(d.join("c2"), d.join("c/x")),
        ENOTDIR,
    );
    r.err(
        "rename of dir/.",
        sys::rename(d.join("d3/."), d.join("x")),
        EBUSY,
    );
    // Move a directory to another parent.
    md("p1");
    md("p2");
    md("p1/m");
    let (a1, a2) = (nlink(&d.join("p1")), nlink(&d.join("p2")));
    r.ok(
        "move dir to another parent",
        sys::rename(d.join("p1/m"), d.join("p2/m")),
    );
    r.eq("... source parent nlink -1", a1 - 1, nlink(&d.join("p1")));
    r.eq("... target parent nlink +1", a2 + 1, nlink(&d.join("p2")));
    r.eq(
        "... moved dir's .. is the new parent",
        st(&d.join("p2")).st_ino,
        st(&d.join("p2/m/..")).st_ino,
    );
    // RENAME_NOREPLACE.
    w("n1", b"1");
    w("n2", b"2");
    r.err(
        "RENAME_NOREPLACE over existing",
        sys::rename2(d.join("n1"), d.join("n2"), RENAME_NOREPLACE),
        EEXIST,
    );
    r.eq(
        "... both untouched",
        (Ok(b"1".to_vec()), Ok(b"2".to_vec())),
        (sys::read_file(d.join("n1")), sys::read_file(d.join("n2"))),
    );
    r.ok(
        "RENAME_NOREPLACE to new name",
        sys::rename2(d.join("n1"), d.join("n3"), RENAME_NOREPLACE),
    );
    r.err(
        "RENAME_NOREPLACE|RENAME_EXCHANGE",
        sys::rename2(
            d.join("n2"),
            d.join("n3"),
            RENAME_NOREPLACE | RENAME_EXCHANGE,
        ),
        EINVAL,
    );
    // RENAME_EXCHANGE file <-> dir across parents.
    md("e1");
    md("e2");
    md("e1/dir");
    touch(&d.join("e1/dir/inside"));
    w("e2/file", b"F");
    let (di, fi) = (st(&d.join("e1/dir")).st_ino, st(&d.join("e2/file")).st_ino);
    let (l1, l2) = (nlink(&d.join("e1")), nlink(&d.join("e2")));
    if r.ok(
        "RENAME_EXCHANGE file<->dir",
        sys::rename2(d.join("e1/dir"), d.join("e2/file"), RENAME_EXCHANGE),
    )
    .is_some()
    {
        r.eq(
            "... e1/dir is now the file",
            (S_IFREG, fi),
            (
                ftype(st(&d.join("e1/dir")).st_mode),
                st(&d.join("e1/dir")).st_ino,
            ),
        );
        r.eq(
            "... e2/file is now the dir",
            (S_IFDIR, di),
            (
                ftype(st(&d.join("e2/file")).st_mode),
                st(&d.join("e2/file")).st_ino,
            ),
        );
        r.eq(
            "... dir content travelled",
            true,
            exists(&d.join("e2/file/inside")),
        );
        r.eq(
            "... parents' nlink swapped",
            (l1 - 1, l2 + 1),
            (nlink(&d.join("e1")), nlink(&d.join("e2"))),
        );
        r.eq(
            "... dir's .. is the new parent",
            st(&d.join("e2")).st_ino,
            st(&d.join("e2/file/..")).st_ino,
        );
    }
    r.err(
        "RENAME_EXCHANGE with missing target",
        sys::rename2(d.join("e1/dir"), d.join("e2/none"), RENAME_EXCHANGE),
        ENOENT,
    );
    w("x1", b"one");
    w("x2", b"two");
    r.ok(
        "RENAME_EXCHANGE two files",
        sys::rename2(d.join("x1"), d.join("x2"), RENAME_EXCHANGE),
    );
    r.eq(
        "... contents swapped",
        (Ok(b"two".to_vec()), Ok(b"one".to_vec())),
        (sys::read_file(d.join("x1")), sys::read_file(d.join("x2"))),
    );
    // Symlink rename.
    must(sys::symlink(b"some/target", d.join("sl")), "symlink");
    r.ok(
        "rename a symlink",
        sys::rename(d.join("sl"), d.join("e1/sl")),
    );
    r.eq(
        "... target text intact",
        Ok(b"some/target".to_vec()),
        sys::readlink(d.join("e1/sl")),
    );
    // A ring of renames keeps every file's content.
    md("ring");
    for i in 0..20 {
        w(&format!("ring/f{i}"), format!("content {i}").as_bytes());
    }
    must(
        sys::rename(d.join("ring/f19"), d.join("ring/tmp")),
        "rename",
    );
    for i in (0..19).rev() {
        must(
            sys::rename(
                d.join(format!("ring/f{i}")),
                d.join(format!("ring/f{}", i + 1)),
            ),
            "rename",
        );
    }
    must(sys::rename(d.join("ring/tmp"), d.join("ring/f0")), "rename");
    let ok = (0..20).all(|i| {
        sys::read_file(d.join(format!("ring/f{i}"))).ok()
            == Some(format!("content {}", (i + 19) % 20).into_bytes())
    });
    r.check(
        "ring of 20 renames keeps contents",
        ok,
        "rotated contents",
        "mismatch",
    );
    r.eq(
        "ring dir has exactly 20 entries",
        Ok(20),
        list(&d.join("ring")).map(|s| s.len()),
    );
    // Cross-filesystem.
    match &cx.o.other_dir {
        Some(o) => {
            let od = o.join(format!("fstest-other.{}", std::process::id()));
            let _ = sys::mkdir(&od, 0o755);
            r.err(
                "rename across filesystems",
                sys::rename(d.join("x1"), od.join("x1")),
                EXDEV,
            );
            r.err(
                "RENAME_EXCHANGE across filesystems",
                sys::rename2(d.join("x1"), &od, RENAME_EXCHANGE),
                EXDEV,
            );
            let _ = sys::rmdir(&od);
        }
        None => r.skip("rename across filesystems", "no --other-dir"),
    }
}

fn g_mknod(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("mknod");
    let cases: &[(&str, u32, u64)] = &[
        ("fifo", S_IFIFO, 0),
        ("char 1:3", S_IFCHR, libc::makedev(1, 3)),
        (
            "char 0x123:0x45678 (wide dev_t)",
            S_IFCHR,
            libc::makedev(0x123, 0x45678),
        ),
        ("block 8:1", S_IFBLK, libc::makedev(8, 1)),
        (
            "block 259:0x12345 (wide dev_t)",
            S_IFBLK,
            libc::makedev(259, 0x12345),
        ),
        ("socket", S_IFSOCK, 0),
        ("regular", S_IFREG, 0),
    ];
    for (i, (name, t, dev)) in cases.iter().enumerate() {
        let p = d.join(format!("n{i}"));
        if (*t == S_IFCHR || *t == S_IFBLK) && !sys::is_root() {
            r.err(
                &format!("mknod {name} without CAP_MKNOD"),
                sys::mknod(&p, t | 0o640, *dev),
                EPERM,
            );
            continue;
        }
        if r.ok(&format!("mknod {name}"), sys::mknod(&p, t | 0o640, *dev))
            .is_none()
        {
            continue;
        }
        let s = st(&p);
        r.eq(&format!("{name}: mode"), t | 0o640, s.st_mode);
        if *t == S_IFCHR || *t == S_IFBLK {
            r.eq(&format!("{name}: rdev round trip (stat)"), *dev, s.st_rdev);
            r.eq(
                &format!("{name}: rdev round trip (statx)"),
                *dev,
                sx(&p).rdev,
            );
        }
        if *t != S_IFCHR && *t != S_IFBLK {
            // POSIX leaves st_size of devices unspecified (UBIFS reports 4).
            r.eq(&format!("{name}: size 0"), 0, s.st_size);
        }
    }
    r.err(
        "mknod over existing name",
        sys::mknod(d.join("n0"), S_IFIFO | 0o644, 0),
        EEXIST,
    );
    r.ok(
        "open fifo O_RDONLY|O_NONBLOCK",
        sys::open(d.join("n0"), O_RDONLY | libc::O_NONBLOCK, 0),
    );
    // Readdir d_type.
    let fd = must(sys::open(&d, O_RDONLY | O_DIRECTORY, 0), "open");
    must(sys::mkdir(d.join("dir"), 0o755), "mkdir");
    must(sys::symlink(b"x", d.join("lnk")), "symlink");
    let ents = must(list_all(&fd), "getdents");
    let want: BTreeMap<&[u8], u8> = [
        (&b"n0"[..], libc::DT_FIFO),
        (b"n1", libc::DT_CHR),
        (b"n3", libc::DT_BLK),
        (b"n5", libc::DT_SOCK),
        (b"n6", libc::DT_REG),
        (b"dir", libc::DT_DIR),
        (b"lnk", libc::DT_LNK),
    ]
    .into_iter()
    .collect();
    let mut unknown = 0;
    let mut bad = Vec::new();
    let ents: Vec<_> = ents
        .into_iter()
        .filter(|e| want.contains_key(&e.name[..]))
        .collect();
    let want: BTreeMap<&[u8], u8> = want
        .into_iter()
        .filter(|(k, _)| ents.iter().any(|e| &e.name[..] == *k))
        .collect();
    for e in &ents {
        if let Some(&w) = want.get(&e.name[..]) {
            if e.dtype == libc::DT_UNKNOWN {
                unknown += 1;
            } else if e.dtype != w {
                bad.push(format!("{}={}", String::from_utf8_lossy(&e.name), e.dtype));
            }
        }
    }
    if unknown == want.len() {
        r.skip(
            "readdir d_type of every file type",
            "filesystem reports DT_UNKNOWN",
        );
    } else {
        r.check(
            "readdir d_type of every file type",
            bad.is_empty() && unknown == 0,
            "matching types",
            bad.join(","),
        );
    }
}

fn g_attrs(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("attrs");
    let f = d.join("f");
    touch(&f);
    for m in [0o000u32, 0o777, 0o4755, 0o2755, 0o1777, 0o7777, 0o644] {
        r.ok(&format!("chmod {m:04o}"), sys::chmod(&f, m));
        r.eq(&format!("... mode {m:04o}"), S_IFREG | m, st(&f).st_mode);
    }
    must(sys::mkdir(d.join("dir"), 0o755), "mkdir");
    r.ok("chmod dir 1777", sys::chmod(d.join("dir"), 0o1777));
    r.eq("... mode", S_IFDIR | 0o1777, st(&d.join("dir")).st_mode);
    let fd = must(sys::open(&f, O_RDONLY, 0), "open");
    r.ok("fchmod 0600", fd.fchmod(0o600));
    r.eq("... mode", S_IFREG | 0o600, st(&f).st_mode);
    must(sys::symlink(b"f", d.join("lf")), "symlink");
    r.ok("chmod through symlink", sys::chmod(d.join("lf"), 0o640));
    r.eq("... changes the target", S_IFREG | 0o640, st(&f).st_mode);
    if !sys::is_root() {
        r.skip("chown", "not root");
        return;
    }
    r.ok("chown 1234:5678", sys::chown(&f, 1234, 5678));
    r.eq("... owner", (1234, 5678), (st(&f).st_uid, st(&f).st_gid));
    r.ok("chown -1:-1", sys::chown(&f, u32::MAX, u32::MAX));
    r.eq(
        "... unchanged",
        (1234, 5678),
        (st(&f).st_uid, st(&f).st_gid),
    );
    r.ok("chown uid only", sys::chown(&f, 42, u32::MAX));
    r.eq("... gid kept", (42, 5678), (st(&f).st_uid, st(&f).st_gid));
    r.ok("fchown 7:8", fd.fchown(7, 8));
    r.eq("... owner", (7, 8), (st(&f).st_uid, st(&f).st_gid));
    r.ok("lchown symlink 99:98", sys::lchown(d.join("lf"), 99, 98));
    r.eq(
        "... symlink owner changed",
        (99, 98),
        (st(&d.join("lf")).st_uid, st(&d.join("lf")).st_gid),
    );
    r.eq(
        "... target unchanged",
        (7, 8),
        (st(&f).st_uid, st(&f).st_gid),
    );
    must(sys::chmod(&f, 0o6755), "chmod");
    r.ok("chown of a setuid+setgid file", sys::chown(&f, 1, 1));
    r.eq(
        "... clears S_ISUID and S_ISGID",
        S_IFREG | 0o755,
        st(&f).st_mode,
    );
    // setgid directory inheritance.
    let g = d.join("sgid");
    must(sys::mkdir(&g, 0o755), "mkdir");
    must(sys::chown(&g, 0, 4321), "chown");
    must(sys::chmod(&g, 0o2775), "chmod");
    touch(&g.join("child"));
    must(sys::mkdir(g.join("subdir"), 0o755), "mkdir");
    r.eq(
        "file in setgid dir inherits gid",
        4321,
        st(&g.join("child")).st_gid,
    );
    r.eq(
        "subdir of setgid dir inherits gid and S_ISGID",
        (4321, S_IFDIR | 0o2755),
        (st(&g.join("subdir")).st_gid, st(&g.join("subdir")).st_mode),
    );
}

fn g_times(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("times");
    let f = d.join("f");
    touch(&f);
    let set = |a: TimeSpec, m: TimeSpec| sys::utimens(&f, Some((a, m)), false);
    // Granularity: store a time with all nanosecond digits set and see which survive. The exact
    // round-trip checks below still demand 1 ns; the update-rule checks adapt to it.
    must(
        set(
            TimeSpec::At(1_000_000_000, 999_999_999),
            TimeSpec::At(1_000_000_000, 999_999_999),
        ),
        "utimensat",
    );
    let kept = sx(&f).mtime.nsec;
    let gran = (0..=9u32)
        .map(|k| 10u64.pow(k))
        .find(|&g| u64::from(kept) == 999_999_999 / g * g)
        .unwrap_or(1_000_000_000);
    GRAN_NS.store(gran, Ordering::Relaxed);
    r.note(format!("timestamp granularity {gran} ns"));
    // Exact nanosecond round trips.
    for (name, a, m) in [
        (
            "ns timestamps",
            (1_000_000_000i64, 123_456_789i64),
            (1_500_000_000i64, 987_654_321i64),
        ),
        (
            "post-2038 timestamps",
            (4_000_000_000, 1),
            (4_102_444_800, 999_999_999),
        ),
        ("pre-1970 timestamps", (-1_000_000, 500_000_000), (-1, 0)),
        ("zero timestamps", (0, 0), (0, 1)),
    ] {
        if r.ok(
            &format!("utimensat {name}"),
            set(TimeSpec::At(a.0, a.1), TimeSpec::At(m.0, m.1)),
        )
        .is_some()
        {
            let s = sx(&f);
            r.eq(
                &format!("... {name} atime exact"),
                Ts {
                    sec: a.0,
                    nsec: a.1 as u32,
                },
                s.atime,
            );
            r.eq(
                &format!("... {name} mtime exact"),
                Ts {
                    sec: m.0,
                    nsec: m.1 as u32,
                },
                s.mtime,
            );
        }
    }
    must(
        set(
            TimeSpec::At(1_000_000_000, 111),
            TimeSpec::At(1_000_000_000, 222),
        ),
        "utimens",
    );
    r.ok(
        "utimensat UTIME_OMIT atime",
        set(TimeSpec::Omit, TimeSpec::At(1_200_000_000, 5)),
    );
    let s = sx(&f);
    r.eq(
        "... atime unchanged, mtime set",
        (
            Ts {
                sec: 1_000_000_000,
                nsec: 111,
            },
            Ts {
                sec: 1_200_000_000,
                nsec: 5,
            },
        ),
        (s.atime, s.mtime),
    );
    r.ok(
        "utimensat UTIME_OMIT both",
        set(TimeSpec::Omit, TimeSpec::Omit),
    );
    r.eq(
        "... unchanged",
        (s.atime, s.mtime),
        (sx(&f).atime, sx(&f).mtime),
    );
    let before = ts_trunc(sys::coarse_now());
    r.ok(
        "utimensat UTIME_NOW mtime",
        set(TimeSpec::Omit, TimeSpec::Now),
    );
    let after = sys::now();
    let s2 = sx(&f);
    r.check(
        "... mtime now",
        s2.mtime >= before && s2.mtime <= after,
        format!("in [{before}, {after}]"),
        s2.mtime,
    );
    r.eq("... atime unchanged", s.atime, s2.atime);
    r.check(
        "... ctime now",
        s2.ctime >= before && s2.ctime <= after,
        format!("in [{before}, {after}]"),
        s2.ctime,
    );
    let before = ts_trunc(sys::coarse_now());
    r.ok("utimensat NULL (both now)", sys::utimens(&f, None, false));
    let s3 = sx(&f);
    let after = sys::now();
    r.check(
        "... atime and mtime now",
        s3.atime >= before && s3.mtime >= before && s3.atime <= after,
        format!(">= {before}"),
        format!("{} {}", s3.atime, s3.mtime),
    );
    r.err(
        "utimensat nsec = 1e9",
        set(TimeSpec::At(1, 1_000_000_000), TimeSpec::Omit),
        EINVAL,
    );
    must(sys::symlink(b"f", d.join("lf")), "symlink");
    let fs0 = sx(&f);
    r.ok(
        "utimensat AT_SYMLINK_NOFOLLOW",
        sys::utimens(
            d.join("lf"),
            Some((TimeSpec::At(5, 5), TimeSpec::At(6, 6))),
            true,
        ),
    );
    r.eq(
        "... symlink's mtime set",
        Ts { sec: 6, nsec: 6 },
        sx(&d.join("lf")).mtime,
    );
    r.eq("... target's mtime untouched", fs0.mtime, sx(&f).mtime);
    must(sys::mkdir(d.join("dir"), 0o755), "mkdir");
    r.ok(
        "utimensat on a dir",
        sys::utimens(
            d.join("dir"),
            Some((TimeSpec::At(7, 70), TimeSpec::At(8, 80))),
            false,
        ),
    );
    r.eq(
        "... dir mtime exact",
        Ts { sec: 8, nsec: 80 },
        sx(&d.join("dir")).mtime,
    );
    match sx(&f).btime {
        Some(b) => r.note(format!("statx reports btime ({b})")),
        None => r.note("statx reports no btime"),
    }

    // Updates per POSIX. Each: snapshot, wait for the clock, act, compare.
    let later = |r: &mut Report, name: &str, old: Ts, new: Ts| {
        r.check(name, new > old, format!("> {old}"), new);
    };
    let same = |r: &mut Report, name: &str, old: Ts, new: Ts| {
        r.check(name, new == old, old, new);
    };
    // Create: new file has a=m=c, parent m/c updated.
    let p0 = sx(&d);
    tick(&p0);
    let g = d.join("g");
    touch(&g);
    let gs = sx(&g);
    r.check(
        "create: new file atime=mtime=ctime",
        gs.atime == gs.mtime && gs.mtime == gs.ctime,
        "equal",
        format!("{} {} {}", gs.atime, gs.mtime, gs.ctime),
    );
    let p1 = sx(&d);
    later(r, "create: parent mtime updated", p0.mtime, p1.mtime);
    later(r, "create: parent ctime updated", p0.ctime, p1.ctime);
    // write
    tick(&gs);
    let fd = must(sys::open(&g, O_RDWR, 0), "open");
    must(fd.write(b"hello world"), "write");
    let s1 = sx(&g);
    later(r, "write: mtime updated", gs.mtime, s1.mtime);
    later(r, "write: ctime updated", gs.ctime, s1.ctime);
    // read does not change m/c
    tick(&s1);
    let mut b = [0u8; 4];
    must(fd.pread(&mut b, 0), "pread");
    let s2 = sx(&g);
    same(r, "read: mtime unchanged", s1.mtime, s2.mtime);
    same(r, "read: ctime unchanged", s1.ctime, s2.ctime);
    // ftruncate
    tick(&s2);
    must(fd.ftruncate(3), "ftruncate");
    let s3 = sx(&g);
    later(r, "ftruncate shrink: mtime updated", s2.mtime, s3.mtime);
    later(r, "ftruncate shrink: ctime updated", s2.ctime, s3.ctime);
    tick(&s3);
    must(sys::truncate(&g, 10000), "truncate");
    let s4 = sx(&g);
    later(r, "truncate grow: mtime updated", s3.mtime, s4.mtime);
    later(r, "truncate grow: ctime updated", s3.ctime, s4.ctime);
    // O_TRUNC
    tick(&s4);
    drop(must(sys::open(&g, O_WRONLY | O_TRUNC, 0), "open"));
    let s5 = sx(&g);
    later(r, "open O_TRUNC: mtime updated", s4.mtime, s5.mtime);
    later(r, "open O_TRUNC: ctime updated", s4.ctime, s5.ctime);
    // chmod / chown: ctime only
    tick(&s5);
    must(sys::chmod(&g, 0o600), "chmod");
    let s6 = sx(&g);
    later(r, "chmod: ctime updated", s5.ctime, s6.ctime);
    same(r, "chmod: mtime unchanged", s5.mtime, s6.mtime);
    if sys::is_root() {
        tick(&s6);
        must(sys::chown(&g, 5, 5), "chown");
        let s7 = sx(&g);
        later(r, "chown: ctime updated", s6.ctime, s7.ctime);
        same(r, "chown: mtime unchanged", s6.mtime, s7.mtime);
    }
    // link: file ctime, dir m/c
    let s = sx(&g);
    let p = sx(&d);
    tick(&s);
    tick(&p);
    must(sys::link(&g, d.join("g2")), "link");
    let (sa, pa) = (sx(&g), sx(&d));
    later(r, "link: file ctime updated", s.ctime, sa.ctime);
    later(r, "link: dir mtime updated", p.mtime, pa.mtime);
    later(r, "link: dir ctime updated", p.ctime, pa.ctime);
    // unlink one of two names
    tick(&sa);
    tick(&pa);
    must(sys::unlink(d.join("g2")), "unlink");
    let (sb, pb) = (sx(&g), sx(&d));
    later(
        r,
        "unlink: remaining file ctime updated",
        sa.ctime,
        sb.ctime,
    );
    later(r, "unlink: dir mtime updated", pa.mtime, pb.mtime);
    later(r, "unlink: dir ctime updated", pa.ctime, pb.ctime);
    // rename across dirs
    let d2 = d.join("other");
    must(sys::mkdir(&d2, 0o755), "mkdir");
    let (s, p, q) = (sx(&g), sx(&d), sx(&d2));
    tick(&s);
    tick(&p);
    tick(&q);
    must(sys::rename(&g, d2.join("g")), "rename");
    let (s8, p8, q8) = (sx(&d2.join("g")), sx(&d), sx(&d2));
    later(r, "rename: source dir mtime updated", p.mtime, p8.mtime);
    later(r, "rename: source dir ctime updated", p.ctime, p8.ctime);
    later(r, "rename: target dir mtime updated", q.mtime, q8.mtime);
    later(r, "rename: target dir ctime updated", q.ctime, q8.ctime);
    later(
        r,
        "rename: renamed file ctime updated (Linux convention)",
        s.ctime,
        s8.ctime,
    );
    same(r, "rename: renamed file mtime unchanged", s.mtime, s8.mtime);
    // mkdir / rmdir / symlink: parent m/c
    let p = sx(&d);
    tick(&p);
    must(sys::mkdir(d.join("nd"), 0o755), "mkdir");
    let p9 = sx(&d);
    later(r, "mkdir: parent mtime updated", p.mtime, p9.mtime);
    later(r, "mkdir: parent ctime updated", p.ctime, p9.ctime);
    tick(&p9);
    must(sys::rmdir(d.join("nd")), "rmdir");
    let p10 = sx(&d);
    later(r, "rmdir: parent mtime updated", p9.mtime, p10.mtime);
    later(r, "rmdir: parent ctime updated", p9.ctime, p10.ctime);
    tick(&p10);
    must(sys::symlink(b"x", d.join("nl")), "symlink");
    let p11 = sx(&d);
    later(r, "symlink: parent mtime updated", p10.mtime, p11.mtime);
    // setxattr: ctime only
    let h = d.join("h");
    touch(&h);
    let s = sx(&h);
    tick(&s);
    match sys::setxattr(&h, "user.t", b"v", 0, false) {
        Ok(()) => {
            let sx1 = sx(&h);
            later(r, "setxattr: ctime updated", s.ctime, sx1.ctime);
            same(r, "setxattr: mtime unchanged", s.mtime, sx1.mtime);
        }
        Err(e) => r.skip("setxattr: ctime updated", format!("user xattrs: {e}")),
    }
    // mmap write + msync updates mtime.
    must(sys::write_file(&h, &[1u8; 8192], 0o644), "write");
    let s = sx(&h);
    tick(&s);
    let hfd = must(sys::open(&h, O_RDWR, 0), "open");
    if let Ok(mut m) = Mmap::new(&hfd, 8192, true, true) {
        m.write_at(100, b"xyz");
        must(m.msync(), "msync");
        drop(m);
        let s2 = sx(&h);
        later(r, "mmap write + msync: mtime updated", s.mtime, s2.mtime);
    }
}

fn g_names(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("names");
    let n255 = "n".repeat(250) + "12345";
    let n255b = "m".repeat(255);
    let n256 = "o".repeat(256);
    let p255 = d.join(&n255);
    r.ok(
        "create with 255-byte name",
        sys::write_file(&p255, b"x", 0o644),
    );
    r.ok("stat 255-byte name", sys::lstat(&p255));
    r.eq(
        "readdir returns the 255-byte name",
        Ok([n255.as_bytes().to_vec()]
            .into_iter()
            .collect::<BTreeSet<_>>()),
        list(&d),
    );
    r.ok(
        "rename to another 255-byte name",
        sys::rename(&p255, d.join(&n255b)),
    );
    r.ok("link to a 255-byte name", sys::link(d.join(&n255b), &p255));
    r.ok(
        "unlink 255-byte names",
        sys::unlink(&p255).and(sys::unlink(d.join(&n255b))),
    );
    r.ok("mkdir with 255-byte name", sys::mkdir(&p255, 0o755));
    r.ok(
        "symlink with 255-byte name",
        sys::symlink(b"t", d.join(&n255b)),
    );
    let p256 = d.join(&n256);
    r.err(
        "create with 256-byte name",
        sys::open(&p256, O_CREAT | O_WRONLY, 0o644),
        ENAMETOOLONG,
    );
    r.err(
        "mkdir with 256-byte name",
        sys::mkdir(&p256, 0o755),
        ENAMETOOLONG,
    );
    r.err("lstat 256-byte name", sys::lstat(&p256), ENAMETOOLONG);
    r.err(
        "rename to 256-byte name",
        sys::rename(&p255, &p256),
        ENAMETOOLONG,
    );
    r.err(
        "symlink with 256-byte name",
        sys::symlink(b"t", &p256),
        ENAMETOOLONG,
    );
    r.err(
        "mknod with 256-byte name",
        sys::mknod(&p256, S_IFIFO | 0o644, 0),
        ENAMETOOLONG,
    );
    // Unusual bytes round trip exactly through readdir.
    let e = cx.sub("names-odd");
    let odd: Vec<Vec<u8>> = vec![
        "é✓ unicode".as_bytes().to_vec(),
        b"with space".to_vec(),
        b"new\nline".to_vec(),
        b"\xff\xfe not utf8".to_vec(),
        b"-dash".to_vec(),
        b".hidden".to_vec(),
        b"...".to_vec(),
        b"Case".to_vec(),
        b"case".to_vec(),
        b"tab\there".to_vec(),
        b"x".to_vec(),
    ];
    let mut ok = true;
    for (i, n) in odd.iter().enumerate() {
        ok &= sys::write_file(join(&e, n), format!("{i}").as_bytes(), 0o644).is_ok();
    }
    r.check(
        "create files with unusual name bytes",
        ok,
        "success",
        "a create failed",
    );
    r.eq(
        "readdir returns the exact name bytes",
        Ok(odd.iter().cloned().collect::<BTreeSet<_>>()),
        list(&e),
    );
    let ok = odd
        .iter()
        .enumerate()
        .all(|(i, n)| sys::read_file(join(&e, n)).ok() == Some(format!("{i}").into_bytes()));
    r.check(
        "lookup by each name finds its own file (case-sensitive)",
        ok,
        "all match",
        "mismatch",
    );
}

fn g_truncate(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("truncate");
    let f = d.join("f");
    let data = pat(1, 0, 10000);
    must(sys::write_file(&f, &data, 0o644), "write");
    r.ok("truncate 10000 -> 5000", sys::truncate(&f, 5000));
    r.eq("... size 5000", 5000, st(&f).st_size);
    r.ok("truncate 5000 -> 20000", sys::truncate(&f, 20000));
    let got = must(sys::read_file(&f), "read");
    r.eq("... size 20000", 20000, got.len());
    r.check(
        "... first 5000 bytes intact",
        got.len() >= 5000 && got[..5000] == data[..5000],
        "pattern",
        "differs",
    );
    r.check(
        "... bytes 5000..20000 are zeros (not old data)",
        got.len() == 20000 && got[5000..].iter().all(|&b| b == 0),
        "zeros",
        "non-zero bytes",
    );
    // Page-tail zeroing: shrink into the middle of a page, then grow.
    let data = pat(2, 0, 16384);
    must(sys::write_file(&f, &data, 0o644), "write");
    let fd = must(sys::open(&f, O_RDWR, 0), "open");
    r.ok("ftruncate 16384 -> 4097", fd.ftruncate(4097));
    r.ok("ftruncate 4097 -> 16384", fd.ftruncate(16384));
    let mut buf = vec![0u8; 16384];
    must(fd.pread_full(&mut buf, 0), "pread");
    r.check(
        "... 4097 bytes intact",
        buf[..4097] == data[..4097],
        "pattern",
        "differs",
    );
    let nz = buf[4097..].iter().position(|&b| b != 0);
    r.check(
        "... tail of the page and beyond zeroed",
        nz.is_none(),
        "zeros",
        format!("non-zero at {:?}", nz.map(|i| i + 4097)),
    );
    cx.maybe_drop();
    must(fd.pread_full(&mut buf, 0), "pread");
    r.check(
        "... same after cache drop",
        buf[..4097] == data[..4097] && buf[4097..].iter().all(|&b| b == 0),
        "pattern then zeros",
        "differs",
    );
    // Shrink then write past EOF without truncating up.
    must(fd.ftruncate(100), "ftruncate");
    must(fd.pwrite(b"Z", 9000), "pwrite");
    must(fd.pread_full(&mut buf[..9001], 0), "pread");
    r.check(
        "write past EOF after shrink leaves zeros in between",
        buf[100..9000].iter().all(|&b| b == 0) && buf[9000] == b'Z',
        "zeros then Z",
        "differs",
    );
    r.ok("truncate to 0", fd.ftruncate(0));
    r.eq(
        "... size 0 and 0 blocks",
        (0, 0),
        (
            must(fd.fstat(), "fstat").st_size,
            must(fd.fstat(), "fstat").st_blocks,
        ),
    );
    r.ok("truncate to 1 GiB (sparse)", fd.ftruncate(1 << 30));
    r.eq(
        "... size 1 GiB",
        1i64 << 30,
        must(fd.fstat(), "fstat").st_size,
    );
    let mut b = [1u8; 16];
    r.eq(
        "... read in the middle returns zeros",
        (Ok(16), [0u8; 16]),
        (fd.pread(&mut b, 700_000_000), b),
    );
    must(fd.ftruncate(0), "ftruncate");
    r.err(
        "ftruncate negative",
        {
            // SAFETY: plain syscall on an owned descriptor.
            let x = unsafe { libc::ftruncate(fd.raw(), -1) };
            if x < 0 {
                Err::<(), _>(Errno::last())
            } else {
                Ok(())
            }
        },
        EINVAL,
    );
    r.err("truncate a directory", sys::truncate(&d, 0), EISDIR);
    let rfd = must(sys::open(&f, O_RDONLY, 0), "open");
    r.err_any(
        "ftruncate on O_RDONLY fd",
        rfd.ftruncate(0),
        &[EINVAL, EBADF],
    );
    r.err(
        "truncate missing",
        sys::truncate(d.join("missing"), 0),
        ENOENT,
    );
}

fn g_sparse(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("sparse");
    let f = d.join("f");
    let fd = must(sys::open(&f, O_CREAT | O_RDWR, 0o644), "create");
    let off = 100 * MIB;
    let data = pat(3, off, 4096);
    r.eq("pwrite 4 KiB at 100 MiB", Ok(4096), fd.pwrite(&data, off));
    let s = must(fd.fstat(), "fstat");
    r.eq("size 100 MiB + 4 KiB", (off + 4096) as i64, s.st_size);
    must(fd.fsync(), "fsync");
    let alloc = must(fd.fstat(), "fstat").st_blocks as u64 * 512;
    r.check(
        "allocated space is small (hole not written)",
        alloc < 4 * MIB,
        "< 4 MiB",
        format!("{alloc} bytes"),
    );
    cx.maybe_drop();
    let mut buf = vec![0xAAu8; 65536];
    let mut zero_ok = true;
    for o in [0, 12345, 50 * MIB, off - 65536] {
        zero_ok &= fd.pread_full(&mut buf, o).ok() == Some(65536) && buf.iter().all(|&b| b == 0);
    }
    r.check(
        "hole reads as zeros",
        zero_ok,
        "zeros",
        "non-zero or short read",
    );
    let mut b = vec![0u8; 4096];
    r.eq(
        "data after the hole intact",
        (Ok(4096), true),
        (fd.pread_full(&mut b, off), b == data),
    );
    // SEEK_DATA / SEEK_HOLE.
    let size = (off + 4096) as i64;
    match fd.lseek(0, libc::SEEK_DATA) {
        Err(Errno(EINVAL)) => r.skip("SEEK_DATA/SEEK_HOLE", "unsupported (EINVAL)"),
        res => {
            match res {
                Ok(0) => r.skip(
                    "SEEK_DATA from 0 finds the data at 100 MiB",
                    "holes not reported (generic lseek)",
                ),
                Ok(x) => {
                    r.check(
                        "SEEK_DATA from 0 finds the data at 100 MiB",
                        x <= off as i64 && x > (off - 4 * MIB) as i64,
                        format!("<= {off}, near it"),
                        x,
                    );
                }
                Err(e) => r.fail("SEEK_DATA from 0", "offset", e),
            };
            match fd.lseek(0, libc::SEEK_HOLE) {
                Ok(x) if x == size => r.skip(
                    "SEEK_HOLE from 0 is 0",
                    "holes not reported (generic lseek)",
                ),
                Ok(x) => {
                    r.eq("SEEK_HOLE from 0 is 0", 0, x);
                }
                Err(e) => r.fail("SEEK_HOLE from 0", "0", e),
            };
            r.eq(
                "SEEK_HOLE from the data is EOF",
                Ok(size),
                fd.lseek(off as i64, libc::SEEK_HOLE),
            );
            r.eq(
                "SEEK_DATA inside the data",
                Ok(off as i64 + 10),
                fd.lseek(off as i64 + 10, libc::SEEK_DATA),
            );
            r.err("SEEK_DATA at EOF", fd.lseek(size, libc::SEEK_DATA), ENXIO);
            r.err("SEEK_HOLE at EOF", fd.lseek(size, libc::SEEK_HOLE), ENXIO);
        }
    }
    // Small write inside the hole.
    let mid = 50 * MIB + 123;
    r.eq(
        "pwrite 7 bytes inside the hole",
        Ok(7),
        fd.pwrite(b"inthole", mid),
    );
    let mut b = vec![1u8; 8192];
    must(fd.pread_full(&mut b, mid - 4000), "pread");
    r.check(
        "... neighbours stay zero",
        b[..4000].iter().all(|&x| x == 0)
            && &b[4000..4007] == b"inthole"
            && b[4007..].iter().all(|&x| x == 0),
        "zeros, data, zeros",
        "differs",
    );
    // Unaligned small hole.
    let g = d.join("g");
    let gfd = must(sys::open(&g, O_CREAT | O_RDWR, 0o644), "create");
    must(gfd.pwrite(b"0123456789", 0), "pwrite");
    must(gfd.pwrite(b"abcdefghij", 10000), "pwrite");
    let got = must(sys::read_file(&g), "read");
    r.check(
        "small unaligned hole reads as zeros",
        got.len() == 10010
            && got[10..10000].iter().all(|&x| x == 0)
            && &got[..10] == b"0123456789"
            && &got[10000..] == b"abcdefghij",
        "data, zeros, data",
        "differs",
    );
}

fn g_io(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("io");
    let f = d.join("app");
    must(sys::write_file(&f, &[b'a'; 100], 0o644), "write");
    let fd = must(sys::open(&f, O_WRONLY | O_APPEND, 0), "open");
    must(fd.lseek(0, libc::SEEK_SET), "lseek");
    r.eq(
        "O_APPEND write after lseek 0",
        Ok(50),
        fd.write(&[b'b'; 50]),
    );
    r.eq(
        "... file position is the new EOF",
        Ok(150),
        fd.lseek(0, libc::SEEK_CUR),
    );
    let got = must(sys::read_file(&f), "read");
    r.check(
        "... data appended at the end",
        got.len() == 150
            && got[..100].iter().all(|&x| x == b'a')
            && got[100..].iter().all(|&x| x == b'b'),
        "100 a + 50 b",
        format!("{} bytes", got.len()),
    );
    let fd2 = must(sys::open(&f, O_WRONLY | O_APPEND, 0), "open");
    for i in 0..20u8 {
        let which = if i % 2 == 0 { &fd } else { &fd2 };
        must(which.write(&[b'0' + i; 7]), "write");
    }
    let got = must(sys::read_file(&f), "read");
    let mut exp = got[..150].to_vec();
    for i in 0..20u8 {
        exp.extend_from_slice(&[b'0' + i; 7]);
    }
    r.check(
        "two O_APPEND fds interleave without overwriting",
        got == exp,
        format!("{} bytes in order", exp.len()),
        format!("{} bytes", got.len()),
    );
    // pwrite/pread at odd offsets and across page boundaries, compared with a model.
    let g = d.join("odd");
    let fd = must(sys::open(&g, O_CREAT | O_RDWR, 0o644), "create");
    let mut model = vec![0u8; 0];
    let ops: &[(u64, usize)] = &[
        (4093, 8200),
        (1, 1),
        (65535, 3),
        (12287, 4099),
        (0, 4096),
        (4095, 2),
        (8191, 1),
        (100_000, 70_000),
        (131_071, 2),
        (3, 5),
    ];
    let mut ok = true;
    for (i, &(off, len)) in ops.iter().enumerate() {
        let data = pat(100 + i as u64, off, len);
        ok &= fd.pwrite(&data, off).ok() == Some(len);
        let end = off as usize + len;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[off as usize..end].copy_from_slice(&data);
    }
    r.check(
        "pwrite at odd offsets",
        ok,
        "full writes",
        "short or failed write",
    );
    let mut back = vec![0u8; model.len() + 10];
    let n = fd.pread_full(&mut back, 0);
    r.eq("... pread whole file", Ok(model.len()), n);
    r.check(
        "... contents match the model",
        back[..model.len()] == model[..],
        "equal",
        "differs",
    );
    let mut okr = true;
    for &(off, len) in &[
        (4090u64, 20usize),
        (4095, 1),
        (4096, 1),
        (65534, 5),
        (12280, 5000),
        (170_000, 2000),
    ] {
        let mut b = vec![0u8; len];
        let n = must(fd.pread(&mut b, off), "pread");
        let avail = model.len().saturating_sub(off as usize).min(len);
        okr &= n == avail && b[..n] == model[off as usize..off as usize + n];
    }
    r.check(
        "pread at odd offsets and short read at EOF",
        okr,
        "model bytes",
        "differs",
    );
    let mut b = [0u8; 4];
    r.eq(
        "pread at EOF returns 0",
        Ok(0),
        fd.pread(&mut b, model.len() as u64),
    );
    r.eq(
        "pread past EOF returns 0",
        Ok(0),
        fd.pread(&mut b, model.len() as u64 + 10000),
    );
    let sz0 = must(fd.fstat(), "fstat").st_size;
    r.eq(
        "zero-length write returns 0",
        Ok(0),
        fd.pwrite(&[], 1 << 30),
    );
    r.eq("... size unchanged", sz0, must(fd.fstat(), "fstat").st_size);
    // Write after lseek past EOF.
    must(fd.lseek(sz0 + 5000, libc::SEEK_SET), "lseek");
    must(fd.write(b"end"), "write");
    let mut b = vec![1u8; 5003];
    must(fd.pread_full(&mut b, sz0 as u64), "pread");
    r.check(
        "write after lseek past EOF leaves zeros",
        b[..5000].iter().all(|&x| x == 0) && &b[5000..] == b"end",
        "zeros + end",
        "differs",
    );
    // One large write.
    let h = d.join("big");
    let data = pat(7, 0, 3 * MIB as usize + 777);
    let fd = must(sys::open(&h, O_CREAT | O_RDWR, 0o644), "create");
    r.ok(
        "single 3 MiB write",
        fd.pwrite_all(&data, 0).map_err(|(_, e)| e),
    );
    cx.maybe_drop();
    let mut back = vec![0u8; data.len()];
    r.eq("... read back", Ok(data.len()), fd.pread_full(&mut back, 0));
    r.check("... content", back == data, "equal", "differs");
    // O_DIRECT (optional).
    let od = d.join("direct");
    match sys::open(&od, O_CREAT | O_RDWR | libc::O_DIRECT, 0o644) {
        Err(e) => r.skip("O_DIRECT", format!("open: {e}")),
        Ok(fd) => {
            let layout = std::alloc::Layout::from_size_align(65536, 4096).expect("layout");
            // SAFETY: non-zero size layout; freed below with the same layout.
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            if p.is_null() {
                r.skip("O_DIRECT", "allocation failed");
                return;
            }
            // SAFETY: `p` points to 65536 bytes we own exclusively until dealloc.
            let buf = unsafe { std::slice::from_raw_parts_mut(p, 65536) };
            pattern::fill(8, 0, buf);
            let expect = buf.to_vec();
            match fd.pwrite(buf, 4096) {
                Err(e) if e.0 == EINVAL => r.skip("O_DIRECT", "write EINVAL"),
                w => {
                    r.eq("O_DIRECT aligned write", Ok(65536), w);
                    buf.fill(0);
                    r.eq("O_DIRECT aligned read", Ok(65536), fd.pread(buf, 4096));
                    r.check("... content", buf[..] == expect[..], "equal", "differs");
                    drop(fd);
                    let all = must(sys::read_file(&od), "read");
                    r.check(
                        "... buffered read sees it",
                        all.len() == 4096 + 65536
                            && all[4096..] == expect[..]
                            && all[..4096].iter().all(|&x| x == 0),
                        "zeros + data",
                        "differs",
                    );
                }
            }
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(p, layout) };
        }
    }
}

/// The fsx checker ([`crate::fsx`]) in-process on one file: random reads, writes, appends,
/// truncates, holes, mapped reads and writes, syncs and reopens against an in-memory model (with
/// `--drop-caches`, the page cache is dropped at its barriers and as one of its operations).
fn g_fsx(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("fsx");
    let one = crate::fsx::One {
        id: 0,
        path: d.join("f"),
        seed: 0xF5,
        ops: cx.o.fsx_ops,
        barrier_every: (cx.o.fsx_ops / 2).max(1),
        max_len: 300 * 1024,
        inject: None,
        drop_caches: cx.o.drop_caches,
    };
    let mut b = crate::fsx::LocalBarrier {
        drop_caches: cx.o.drop_caches,
    };
    let out = crate::fsx::run_one(&one, &mut b, None);
    let counts: Vec<String> = crate::fsx::KINDS
        .iter()
        .zip(out.counts)
        .filter(|(_, c)| *c > 0)
        .map(|(k, c)| format!("{c} {}", k.name()))
        .collect();
    match &out.problem {
        None => r.eq(
            &format!("random ops match the model ({})", counts.join(", ")),
            cx.o.fsx_ops,
            out.ops,
        ),
        Some(m) => r.check("random ops match the model", false, "no divergence", m),
    };
}

fn g_mmap(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("mmap");
    let f = d.join("f");
    let len = 3 * 4096 + 100;
    let data = pat(9, 0, len);
    must(sys::write_file(&f, &data, 0o644), "write");
    let fd = must(sys::open(&f, O_RDWR, 0), "open");
    let m = r.ok("mmap read-only", Mmap::new(&fd, len, false, true));
    if let Some(m) = &m {
        r.check(
            "... content equals file",
            m.as_slice() == &data[..],
            "equal",
            "differs",
        );
    }
    must(fd.pwrite(b"PWRITE", 5000), "pwrite");
    if let Some(m) = &m {
        r.eq(
            "... pwrite visible through existing mapping",
            b"PWRITE".to_vec(),
            m.as_slice()[5000..5006].to_vec(),
        );
    }
    drop(m);
    let mut model = data.clone();
    model[5000..5006].copy_from_slice(b"PWRITE");
    if let Some(mut m) = r.ok("mmap shared writable", Mmap::new(&fd, len, true, true)) {
        for (off, bytes) in [
            (0usize, &b"start"[..]),
            (4094, b"across"),
            (8190, b"page2-3"),
            (len - 3, b"END"),
        ] {
            m.write_at(off, bytes);
            model[off..off + bytes.len()].copy_from_slice(bytes);
        }
        let mut b = vec![0u8; len];
        must(fd.pread_full(&mut b, 0), "pread");
        r.check(
            "... stores visible to read() before msync",
            b == model,
            "equal",
            "differs",
        );
        r.ok("msync MS_SYNC", m.msync());
        drop(m);
        drop(fd);
        cx.maybe_drop();
        r.eq(
            "... read back via read() after munmap",
            Ok(true),
            sys::read_file(&f).map(|v| v == model),
        );
        r.eq("... size unchanged", len as i64, st(&f).st_size);
    }
    // Private mapping writes never reach the file.
    let fd = must(sys::open(&f, O_RDWR, 0), "open");
    if let Some(mut m) = r.ok("mmap private writable", Mmap::new(&fd, len, true, false)) {
        m.write_at(10, b"private");
        drop(m);
        r.eq(
            "... private stores not in the file",
            Ok(true),
            sys::read_file(&f).map(|v| v == model),
        );
    }
    // Stores beyond EOF within the last page must not appear after extending the file.
    let g = d.join("eof");
    must(sys::write_file(&g, &pat(10, 0, 5000), 0o644), "write");
    let gfd = must(sys::open(&g, O_RDWR, 0), "open");
    if let Ok(mut m) = Mmap::new(&gfd, 8192, true, true) {
        m.write_at(6000, b"beyond");
        let _ = m.msync();
        drop(m);
        r.eq(
            "store beyond EOF in last page: size unchanged",
            5000,
            st(&g).st_size,
        );
        must(gfd.ftruncate(8192), "ftruncate");
        let mut b = [1u8; 6];
        must(gfd.pread_full(&mut b, 6000), "pread");
        let tmpfs = sys::statfs(&g)
            .map(|s| s.f_type as i64 == 0x0102_1994)
            .unwrap_or(false);
        if b != [0u8; 6] && tmpfs {
            // tmpfs never writes pages back, so nothing zeroes the tail of the EOF page.
            r.skip(
                "... extended region reads zeros",
                "tmpfs keeps mmap stores beyond EOF (known)",
            );
        } else {
            r.eq("... extended region reads zeros", [0u8; 6], b);
        }
    }
    r.err("mmap length 0", Mmap::new(&gfd, 0, false, true), EINVAL);
}

fn g_sync(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("sync");
    let f = d.join("f");
    must(sys::write_file(&f, &pat(11, 0, 100_000), 0o644), "write");
    let fd = must(sys::open(&f, O_RDWR, 0), "open");
    must(fd.pwrite(b"dirty", 50_000), "pwrite");
    r.ok("fsync file", fd.fsync());
    must(fd.pwrite(b"dirty", 60_000), "pwrite");
    r.ok("fdatasync file", fd.fdatasync());
    r.ok("fsync clean file", fd.fsync());
    let dfd = must(sys::open(&d, O_RDONLY | O_DIRECTORY, 0), "open");
    touch(&d.join("g"));
    r.ok("fsync directory", dfd.fsync());
    r.ok("syncfs", fd.syncfs());
    let rfd = must(sys::open(&f, O_RDONLY, 0), "open");
    r.ok("fsync O_RDONLY fd", rfd.fsync());
    let e = d.join("empty");
    touch(&e);
    let efd = must(sys::open(&e, O_RDONLY, 0), "open");
    r.ok("fsync empty file", efd.fsync());
    r.ok("close after fsync", fd.close());
}

fn g_xattr(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("xattr");
    let f = d.join("f");
    touch(&f);
    // What a new file lists before any set: the LSM's labels (security.SMACK64 on the test
    // kernels, which run Smack), nothing else. The lists below leave those names out and the
    // size query counts them.
    let lsm = sys::listxattr(&f).unwrap_or_default();
    r.check(
        "a new file lists only LSM labels (security.*)",
        lsm.iter().all(|n| n.starts_with("security.")),
        "none or security.*",
        format!("{lsm:?}"),
    );
    let lsm_bytes: usize = lsm.iter().map(|n| n.len() + 1).sum();
    let list = |p: &Path| sys::listxattr(p).map(|v| v.into_iter().filter(|n| !lsm.contains(n)).collect::<Vec<_>>());
    match sys::setxattr(&f, "user.a", b"v1", 0, false) {
        Err(e) if e.0 == libc::EOPNOTSUPP => {
            r.skip("user xattrs", "EOPNOTSUPP");
            return;
        }
        res => {
            r.ok("set user.a", res);
        }
    }
    r.eq(
        "get user.a",
        Ok(b"v1".to_vec()),
        sys::getxattr(&f, "user.a"),
    );
    r.eq(
        "size query",
        Ok(2),
        sys::getxattr_sized(&f, "user.a", 0, false).map(|v| v.len()),
    );
    r.eq(
        "list has user.a",
        Ok(vec!["user.a".to_string()]),
        list(&f),
    );
    r.err(
        "XATTR_CREATE on existing",
        sys::setxattr(&f, "user.a", b"x", XATTR_CREATE, false),
        EEXIST,
    );
    r.err(
        "XATTR_REPLACE on missing",
        sys::setxattr(&f, "user.none", b"x", XATTR_REPLACE, false),
        ENODATA,
    );
    r.ok(
        "XATTR_REPLACE on existing",
        sys::setxattr(&f, "user.a", b"value-two", XATTR_REPLACE, false),
    );
    r.eq(
        "... new value",
        Ok(b"value-two".to_vec()),
        sys::getxattr(&f, "user.a"),
    );
    r.ok(
        "XATTR_CREATE on new",
        sys::setxattr(&f, "user.b", b"B", XATTR_CREATE, false),
    );
    r.err(
        "get with too small buffer",
        sys::getxattr_sized(&f, "user.a", 3, false),
        ERANGE,
    );
    r.eq(
        "list size query",
        Ok(14 + lsm_bytes),
        sys::listxattr_sized(&f, 0, false).map(|x| x.0),
    );
    r.err(
        "list with too small buffer",
        sys::listxattr_sized(&f, 5, false),
        ERANGE,
    );
    r.err("get missing", sys::getxattr(&f, "user.none"), ENODATA);
    r.err("remove missing", sys::removexattr(&f, "user.none"), ENODATA);
    r.ok("remove user.a", sys::removexattr(&f, "user.a"));
    r.err("... get after remove", sys::getxattr(&f, "user.a"), ENODATA);
    r.eq(
        "... list after remove",
        Ok(vec!["user.b".to_string()]),
        list(&f),
    );
    r.ok(
        "set empty value",
        sys::setxattr(&f, "user.empty", b"", 0, false),
    );
    r.eq(
        "... get empty value",
        Ok(Vec::new()),
        sys::getxattr(&f, "user.empty"),
    );
    let big = pat(12, 0, 4000);
    r.ok(
        "set 4000-byte binary value",
        sys::setxattr(&f, "user.big", &big, 0, false),
    );
    r.eq(
        "... round trip",
        Ok(true),
        sys::getxattr(&f, "user.big").map(|v| v == big),
    );
    r.err(
        "set 65537-byte value",
        sys::setxattr(&f, "user.huge", &vec![1u8; 65537], 0, false),
        libc::E2BIG,
    );
    let n255 = format!("user.{}", "n".repeat(250));
    // On a fresh inode: with the 4000-byte value an ext4 inode's single xattr block is full.
    let ln = d.join("longname");
    touch(&ln);
    r.ok(
        "set 255-byte name",
        sys::setxattr(&ln, &n255, b"x", 0, false),
    );
    r.eq("... get", Ok(b"x".to_vec()), sys::getxattr(&ln, &n255));
    r.eq("... list", Ok(vec![n255.clone()]), list(&ln));
    r.err(
        "set 256-byte name",
        sys::setxattr(&f, &format!("user.{}", "n".repeat(251)), b"x", 0, false),
        ERANGE,
    );
    r.err(
        "set unknown namespace",
        sys::setxattr(&f, "bogus.x", b"x", 0, false),
        libc::EOPNOTSUPP,
    );
    r.err(
        "set empty name after prefix",
        sys::setxattr(&f, "user.", b"x", 0, false),
        EINVAL,
    );
    // Many attributes on one inode.
    let g = d.join("many");
    touch(&g);
    let mut ok = true;
    let mut want = BTreeSet::new();
    for i in 0..64 {
        let n = format!("user.attr{i:02}");
        ok &= sys::setxattr(&g, &n, format!("value {i}").as_bytes(), XATTR_CREATE, false).is_ok();
        want.insert(n);
    }
    r.check("set 64 xattrs", ok, "success", "a set failed");
    r.eq(
        "... list all 64 exactly",
        Ok(want.clone()),
        list(&g).map(|v| v.into_iter().collect::<BTreeSet<_>>()),
    );
    let ok = (0..64).all(|i| {
        sys::getxattr(&g, &format!("user.attr{i:02}")).ok()
            == Some(format!("value {i}").into_bytes())
    });
    r.check("... each value", ok, "all match", "mismatch");
    let ok = (0..64).all(|i| sys::removexattr(&g, &format!("user.attr{i:02}")).is_ok());
    r.check("... remove all", ok, "success", "a remove failed");
    r.eq("... list empty", Ok(Vec::new()), list(&g));
    // Namespaces that need privilege.
    if sys::is_root() {
        for ns in ["trusted", "security"] {
            let n = format!("{ns}.fstest");
            let res = sys::setxattr(&f, &n, b"priv", 0, false);
            if ns == "security" && res == Err(Errno(libc::EOPNOTSUPP)) {
                // ext4 without CONFIG_EXT4_FS_SECURITY (and other filesystems built without a
                // security handler) refuse the namespace.
                r.skip(
                    &format!("set {n}"),
                    "EOPNOTSUPP: no security.* handler in this build",
                );
                continue;
            }
            if r.ok(&format!("set {n}"), res).is_some() {
                r.eq(
                    &format!("get {n}"),
                    Ok(b"priv".to_vec()),
                    sys::getxattr(&f, &n),
                );
                r.eq(
                    &format!("list has {n}"),
                    Ok(true),
                    sys::listxattr(&f).map(|v| v.contains(&n)),
                );
                r.ok(&format!("remove {n}"), sys::removexattr(&f, &n));
                r.err(
                    &format!("get {n} after remove"),
                    sys::getxattr(&f, &n),
                    ENODATA,
                );
            }
        }
    } else {
        r.skip("trusted./security. xattrs", "not root");
    }
    // Directories, symlinks, hard links, rename.
    must(sys::mkdir(d.join("dir"), 0o755), "mkdir");
    r.ok(
        "user xattr on a directory",
        sys::setxattr(d.join("dir"), "user.d", b"D", 0, false),
    );
    r.eq(
        "... get",
        Ok(b"D".to_vec()),
        sys::getxattr(d.join("dir"), "user.d"),
    );
    must(sys::symlink(b"f", d.join("lnk")), "symlink");
    r.err(
        "user xattr on a symlink (lsetxattr)",
        sys::setxattr(d.join("lnk"), "user.l", b"L", 0, true),
        EPERM,
    );
    if sys::is_root() {
        r.ok(
            "trusted xattr on a symlink",
            sys::setxattr(d.join("lnk"), "trusted.l", b"L", 0, true),
        );
        r.eq(
            "... lgetxattr",
            Ok(b"L".to_vec()),
            sys::getxattr_sized(d.join("lnk"), "trusted.l", 100, true),
        );
        r.err(
            "... not on the target",
            sys::getxattr(&f, "trusted.l"),
            ENODATA,
        );
    }
    must(sys::link(&f, d.join("f2")), "link");
    r.eq(
        "hard link shares xattrs",
        Ok(b"B".to_vec()),
        sys::getxattr(d.join("f2"), "user.b"),
    );
    must(sys::rename(&f, d.join("dir/moved")), "rename");
    r.eq(
        "xattrs survive rename",
        Ok(b"B".to_vec()),
        sys::getxattr(d.join("dir/moved"), "user.b"),
    );
    cx.maybe_drop();
    r.eq(
        "xattrs after cache drop",
        Ok(true),
        sys::getxattr(d.join("dir/moved"), "user.big").map(|v| v == big),
    );
}

fn g_bigdir(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("bigdir");
    let n = cx.o.bigdir;
    // Varying name lengths spread entries over many directory blocks.
    let name = |i: usize| format!("e{i}_{}", "x".repeat(i % 97));
    let mut created = 0usize;
    let mut first_err = None;
    for i in 0..n {
        match sys::open(d.join(name(i)), O_CREAT | O_EXCL | O_WRONLY, 0o644) {
            Ok(_) => created += 1,
            Err(e) => {
                first_err.get_or_insert(format!("{}: {e}", name(i)));
            }
        }
    }
    r.check(
        &format!("create {n} entries"),
        created == n,
        n,
        format!("{created} ({first_err:?})"),
    );
    let fd = must(sys::open(&d, O_RDONLY | O_DIRECTORY, 0), "open");
    let ents = must(list_all(&fd), "getdents");
    let mut seen: BTreeMap<Vec<u8>, (u32, u64)> = BTreeMap::new();
    for e in &ents {
        let s = seen.entry(e.name.clone()).or_insert((0, e.ino));
        s.0 += 1;
    }
    let dups = seen.values().filter(|v| v.0 > 1).count();
    let missing = (0..n)
        .filter(|&i| !seen.contains_key(name(i).as_bytes()))
        .count();
    let extra = seen
        .keys()
        .filter(|k| k != &&b"."[..] && k != &&b".."[..])
        .count()
        .saturating_sub(n - missing);
    r.eq("readdir: no duplicates", 0, dups);
    r.eq("readdir: none missing", 0, missing);
    r.eq("readdir: no extra entries", 0, extra);
    r.eq(
        "readdir: . and .. once each",
        (Some(1), Some(1)),
        (
            seen.get(&b"."[..]).map(|v| v.0),
            seen.get(&b".."[..]).map(|v| v.0),
        ),
    );
    let mut bad_lookup = 0;
    let mut bad_ino = 0;
    for i in 0..n {
        match sys::lstat(d.join(name(i))) {
            Ok(s) => {
                if seen.get(name(i).as_bytes()).map(|v| v.1) != Some(s.st_ino) {
                    bad_ino += 1;
                }
            }
            Err(_) => bad_lookup += 1,
        }
    }
    r.eq("lookup of every entry", 0, bad_lookup);
    r.eq("d_ino equals st_ino for every entry", 0, bad_ino);
    let neg = (0..100)
        .filter(|i| sys::lstat(d.join(format!("absent{i}"))).err() == Some(Errno(ENOENT)))
        .count();
    r.eq("100 negative lookups give ENOENT", 100, neg);
    r.eq("dir nlink stays 2 (files only)", 2, nlink(&d));
    let mut bad_unlink = 0;
    for i in 0..n {
        if sys::unlink(d.join(name(i))).is_err() {
            bad_unlink += 1;
        }
    }
    r.eq(&format!("unlink all {n}"), 0, bad_unlink);
    r.eq("dir empty afterwards", Ok(0), list(&d).map(|s| s.len()));
    r.ok("rmdir it", sys::rmdir(&d));
}

fn g_readdir(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("readdir");
    let n = 1500usize;
    for i in 0..n {
        must(
            sys::open(d.join(format!("keep{i}")), O_CREAT | O_WRONLY, 0o644),
            "create",
        );
        must(
            sys::open(d.join(format!("vol{i}")), O_CREAT | O_WRONLY, 0o644),
            "create",
        );
    }
    // A small buffer so the listing takes many getdents calls; mutate between calls.
    let fd = must(sys::open(&d, O_RDONLY | O_DIRECTORY, 0), "open");
    let mut buf = vec![0u8; 1024];
    let mut rng = Rng::new(99);
    let mut count: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
    let mut calls = 0;
    let mut created = 0;
    let mut deleted = 0;
    let mut err = None;
    let mut returned = 0usize;
    let started = std::time::Instant::now();
    loop {
        // A listing may legitimately include some entries created meanwhile, but it must end.
        if returned > 10 * (2 * n + created) {
            r.fail(
                "readdir with concurrent create/unlink reaches the end",
                "end of directory",
                format!("{returned} entries after {calls} calls"),
            );
            break;
        }
        let ents = match fd.getdents(&mut buf) {
            Ok(e) => e,
            Err(e) => {
                err = Some(e);
                break;
            }
        };
        if ents.is_empty() {
            break;
        }
        calls += 1;
        returned += ents.len();
        if calls % 1000 == 0 {
            r.note(format!(
                "{calls} getdents calls, {returned} entries so far, {:.1} s",
                started.elapsed().as_secs_f64()
            ));
        }
        for e in ents {
            *count.entry(e.name).or_insert(0) += 1;
        }
        // Mutate during the first 300 calls only (a normal listing takes about 100): after
        // that the directory is stable and the listing has to end.
        for _ in 0..if calls <= 300 { 10 } else { 0 } {
            let v = rng.below(n as u64);
            if sys::unlink(d.join(format!("vol{v}"))).is_ok() {
                deleted += 1;
            }
            if sys::open(d.join(format!("new{created}")), O_CREAT | O_WRONLY, 0o644).is_ok() {
                created += 1;
            }
        }
    }
    r.check(
        "readdir with concurrent create/unlink completes",
        err.is_none(),
        "no error",
        format!("{err:?}"),
    );
    r.note(format!(
        "{calls} getdents calls, {deleted} unlinked and {created} created meanwhile"
    ));
    let missing = (0..n)
        .filter(|i| !count.contains_key(format!("keep{i}").as_bytes()))
        .count();
    let dups: Vec<String> = count
        .iter()
        .filter(|(_, &c)| c > 1)
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .take(5)
        .collect();
    r.eq("no entry that existed throughout is missed", 0, missing);
    r.check(
        "no entry returned twice",
        dups.is_empty(),
        "none",
        dups.join(","),
    );
    r.eq(
        ". and .. once each",
        (Some(&1), Some(&1)),
        (count.get(&b"."[..]), count.get(&b".."[..])),
    );
    // Rewind gives the current state.
    must(fd.lseek(0, libc::SEEK_SET), "lseek");
    let now: BTreeSet<Vec<u8>> = must(list_all(&fd), "getdents")
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n != b"." && n != b"..")
        .collect();
    r.eq(
        "after rewind readdir equals a fresh listing",
        Ok(now),
        list(&d),
    );
    // telldir/seekdir: d_off cookies resume right after their entry.
    must(fd.lseek(0, libc::SEEK_SET), "lseek");
    let all = must(list_all(&fd), "getdents");
    let mut bad = 0;
    let mut tried = 0;
    for k in [
        0usize,
        1,
        2,
        17,
        all.len() / 3,
        all.len() / 2,
        all.len().saturating_sub(2),
    ] {
        if k + 1 >= all.len() {
            continue;
        }
        tried += 1;
        let ok = fd.lseek(all[k].off, libc::SEEK_SET).is_ok()
            && fd
                .getdents(&mut buf)
                .ok()
                .and_then(|v| v.into_iter().next())
                .map(|e| e.name)
                == Some(all[k + 1].name.clone());
        if !ok {
            bad += 1;
        }
    }
    r.check(
        &format!("seek to d_off cookie resumes at the next entry ({tried} positions)"),
        bad == 0,
        "all resume correctly",
        format!("{bad} wrong"),
    );
    let last = all.last().map(|e| e.off).unwrap_or(0);
    must(fd.lseek(last, libc::SEEK_SET), "lseek");
    r.eq(
        "seek to the last cookie gives end of directory",
        Ok(0),
        fd.getdents(&mut buf).map(|v| v.len()),
    );
    // d_type and d_ino match lstat.
    let mut mism = 0;
    let mut checked = 0;
    for e in all
        .iter()
        .filter(|e| e.name != b"." && e.name != b"..")
        .take(200)
    {
        if let Ok(s) = sys::lstat(join(&d, &e.name)) {
            checked += 1;
            if s.st_ino != e.ino || !(e.dtype == libc::DT_REG || e.dtype == libc::DT_UNKNOWN) {
                mism += 1;
            }
        }
    }
    r.check(
        &format!("d_ino and d_type agree with lstat ({checked} entries)"),
        mism == 0 && checked > 0,
        "all agree",
        format!("{mism} differ"),
    );
}

/// Permission checks as uid/gid 65534 in a forked child.
fn g_perms(r: &mut Report, cx: &Ctx) {
    if !sys::is_root() {
        r.skip("EACCES/EPERM as uid 65534", "not root");
        return;
    }
    let d = cx.sub("perms");
    must(sys::chmod(&d, 0o755), "chmod");
    let priv_dir = d.join("rootdir"); // 0755 root
    must(sys::mkdir(&priv_dir, 0o755), "mkdir");
    touch(&priv_dir.join("existing"));
    let secret = d.join("secret"); // 0600 root
    must(sys::write_file(&secret, b"s", 0o600), "write");
    let other = d.join("others"); // 0666 owned by uid 1000
    must(sys::write_file(&other, b"o", 0o666), "write");
    must(sys::chown(&other, 1000, 1000), "chown");
    let sticky = d.join("sticky");
    must(sys::mkdir(&sticky, 0o1777), "mkdir");
    must(
        sys::write_file(sticky.join("rootfile"), b"r", 0o666),
        "write",
    );
    let closed = d.join("closed"); // 0700 root: no search
    must(sys::mkdir(&closed, 0o700), "mkdir");
    touch(&closed.join("inside"));
    let suid = d.join("suid"); // 06777 root, writable by all
    must(sys::write_file(&suid, b"x", 0o644), "write");
    must(sys::chmod(&suid, 0o6777), "chmod");
    let mine = d.join("mine"); // owned by nobody
    touch(&mine);
    must(sys::chown(&mine, NOBODY, NOBODY), "chown");
    let expects: Vec<(&str, i32)> = vec![
        ("create in 0755 root-owned dir", EACCES),
        ("mkdir in 0755 root-owned dir", EACCES),
        ("unlink in 0755 root-owned dir", EACCES),
        ("rename within 0755 root-owned dir", EACCES),
        ("open 0600 root file for reading", EACCES),
        ("open 0600 root file for writing", EACCES),
        ("chmod someone else's file", EPERM),
        ("chown someone else's file", EPERM),
        ("chown own file to root", EPERM),
        ("chgrp own file to a group not a member of", EPERM),
        (
            "utimensat explicit times on someone else's writable file",
            EPERM,
        ),
        (
            "utimensat now on someone else's writable file (write access suffices)",
            0,
        ),
        ("utimensat now on a file without write access", EACCES),
        ("create own file in sticky dir", 0),
        ("unlink root's file in sticky dir", EPERM),
        ("rename root's file in sticky dir", EPERM),
        ("unlink own file in sticky dir", 0),
        ("lookup through a 0700 dir", EACCES),
        ("list a 0700 dir", EACCES),
        ("setxattr trusted.* as non-root", EPERM),
        ("setxattr user.* on someone else's 0666 file is allowed", 0),
        ("chmod own file", 0),
        ("truncate 0600 root file", EACCES),
        ("write to setuid file", 0),
        ("link to someone else's 0666 file", 0),
        ("setuid bit cleared after non-owner write", 0),
    ];
    // The child works relative to `d` via fchdir: it needs search permission on `d` only, not on
    // the ancestors of the directory under test (which may be a private mount point).
    let dfd = must(sys::open(&d, O_RDONLY | O_DIRECTORY, 0), "open");
    let rel = |p: &Path| {
        p.strip_prefix(&d)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| p.to_path_buf())
    };
    let (pd, sec, oth, stk, cl, su, mi) = (
        rel(&priv_dir),
        rel(&secret),
        rel(&other),
        rel(&sticky),
        rel(&closed),
        rel(&suid),
        rel(&mine),
    );
    let draw = dfd.raw();
    let child = move || -> Vec<i32> {
        use sys::code;
        let mut v = Vec::new();
        // SAFETY: `draw` is an open directory descriptor inherited from the parent.
        if unsafe { libc::fchdir(draw) } != 0 {
            return v;
        }
        v.push(code(sys::open(pd.join("new"), O_CREAT | O_WRONLY, 0o644)));
        v.push(code(sys::mkdir(pd.join("newdir"), 0o755)));
        v.push(code(sys::unlink(pd.join("existing"))));
        v.push(code(sys::rename(pd.join("existing"), pd.join("renamed"))));
        v.push(code(sys::open(&sec, O_RDONLY, 0)));
        v.push(code(sys::open(&sec, O_WRONLY, 0)));
        v.push(code(sys::chmod(&oth, 0o777)));
        v.push(code(sys::chown(&oth, NOBODY, NOBODY)));
        v.push(code(sys::chown(&mi, 0, u32::MAX)));
        v.push(code(sys::chown(&mi, u32::MAX, 0)));
        v.push(code(sys::utimens(
            &oth,
            Some((TimeSpec::At(1, 0), TimeSpec::At(1, 0))),
            false,
        )));
        v.push(code(sys::utimens(&oth, None, false)));
        v.push(code(sys::utimens(&sec, None, false)));
        v.push(code(sys::write_file(stk.join("nobodys"), b"n", 0o644)));
        v.push(code(sys::unlink(stk.join("rootfile"))));
        v.push(code(sys::rename(stk.join("rootfile"), stk.join("stolen"))));
        v.push(code(sys::unlink(stk.join("nobodys"))));
        v.push(code(sys::lstat(cl.join("inside"))));
        v.push(code(sys::open(&cl, O_RDONLY | O_DIRECTORY, 0)));
        v.push(code(sys::setxattr(&oth, "trusted.x", b"x", 0, false)));
        v.push(code(sys::setxattr(&oth, "user.x", b"x", 0, false)));
        v.push(code(sys::chmod(&mi, 0o640)));
        v.push(code(sys::truncate(&sec, 0)));
        v.push(code(
            sys::open(&su, O_WRONLY, 0).and_then(|fd| fd.write(b"y")),
        ));
        v.push(code(sys::link(&oth, stk.join("hl")).map(|_| ())));
        // Filled in by the parent from the mode; the child reports 0.
        v.push(0);
        v
    };
    match sys::as_user(NOBODY, NOBODY, child) {
        Err(e) => r.fail("run checks as uid 65534", "child results", e),
        Ok(got) if got.len() != expects.len() => r.fail(
            "run checks as uid 65534",
            format!("{} results", expects.len()),
            format!("{got:?}"),
        ),
        Ok(got) => {
            for (i, ((name, want), g)) in expects.iter().zip(&got).enumerate() {
                if i == expects.len() - 1 {
                    let m = st(&suid).st_mode;
                    r.eq(name, S_IFREG | 0o777, m);
                } else if name.starts_with("link to someone") {
                    if *g == EPERM {
                        r.skip(name, "fs.protected_hardlinks=1");
                    } else {
                        r.eq(name, Errno(*want), Errno(*g));
                    }
                } else if name.starts_with("setxattr user.*") && *g == libc::EOPNOTSUPP {
                    r.skip(name, "no user xattrs");
                } else {
                    r.eq(name, Errno(*want), Errno(*g));
                }
            }
        }
    }
    r.eq(
        "root's file in sticky dir survived",
        true,
        exists(&sticky.join("rootfile")),
    );
    r.eq(
        "secret file untouched",
        Ok(b"s".to_vec()),
        sys::read_file(&secret),
    );
}

fn g_statfs(r: &mut Report, cx: &Ctx) {
    let d = cx.sub("statfs");
    let s = match sys::statfs(&d) {
        Ok(s) => s,
        Err(e) => {
            r.fail("statfs", "success", e);
            return;
        }
    };
    r.pass("statfs");
    r.note(format!(
        "type {:#x} bsize {} blocks {} bfree {} bavail {} files {} ffree {} namelen {}",
        s.f_type, s.f_bsize, s.f_blocks, s.f_bfree, s.f_bavail, s.f_files, s.f_ffree, s.f_namelen
    ));
    r.check(
        "f_bsize is a power of two >= 512",
        s.f_bsize >= 512 && (s.f_bsize as u64).is_power_of_two(),
        ">= 512, 2^n",
        s.f_bsize,
    );
    r.check("f_blocks > 0", s.f_blocks > 0, "> 0", s.f_blocks);
    r.check(
        "f_bfree <= f_blocks",
        s.f_bfree <= s.f_blocks,
        format!("<= {}", s.f_blocks),
        s.f_bfree,
    );
    r.check(
        "f_bavail <= f_bfree",
        s.f_bavail <= s.f_bfree,
        format!("<= {}", s.f_bfree),
        s.f_bavail,
    );
    r.check(
        "f_ffree <= f_files",
        s.f_ffree <= s.f_files,
        format!("<= {}", s.f_files),
        s.f_ffree,
    );
    r.eq("f_namelen 255", 255, s.f_namelen);
    let fsid: [i32; 2] = {
        // SAFETY: fsid_t is two ints; reading its bytes as such is valid.
        unsafe { std::mem::transmute_copy(&s.f_fsid) }
    };
    r.note(format!("fsid {:#x}:{:#x}", fsid[0], fsid[1]));
    let free0 = (s.f_bfree as u64) * s.f_bsize as u64;
    let want = 4 * MIB;
    if free0 < 3 * want {
        r.skip(
            "free space drops after writing 4 MiB",
            "filesystem too full",
        );
        return;
    }
    let f = d.join("fill");
    let fd = must(sys::open(&f, O_CREAT | O_WRONLY, 0o644), "create");
    must(
        fd.pwrite_all(&pat(13, 0, want as usize), 0)
            .map_err(|(_, e)| e),
        "write",
    );
    must(fd.fsync(), "fsync");
    must(fd.syncfs(), "syncfs");
    let s1 = must(sys::statfs(&d), "statfs");
    let free1 = (s1.f_bfree as u64) * s1.f_bsize as u64;
    r.check(
        "free space drops by >= 2 MiB after writing 4 MiB + syncfs",
        free1 + 2 * MIB <= free0,
        format!("<= {}", free0 - 2 * MIB),
        free1,
    );
    drop(fd);
    must(sys::unlink(&f), "unlink");
    must(sys::syncfs_path(&d), "sync");
    let s2 = must(sys::statfs(&d), "statfs");
    let free2 = (s2.f_bfree as u64) * s2.f_bsize as u64;
    r.check(
        "free space returns after unlink + syncfs",
        free2 + MIB >= free0,
        format!(">= {}", free0 - MIB),
        free2,
    );
}

fn g_large(r: &mut Report, cx: &Ctx) {
    let n = cx.o.large_mib;
    if n == 0 {
        r.skip("large file", "--large-mib 0");
        return;
    }
    let d = cx.sub("large");
    let f = d.join("large");
    let fd = must(sys::open(&f, O_CREAT | O_RDWR | O_TRUNC, 0o644), "create");
    let key = pattern::key_for(0x1A46E, b"large");
    let mut buf = vec![0u8; MIB as usize];
    let mut werr = None;
    for i in 0..n {
        pattern::fill(key, i * MIB, &mut buf);
        if let Err((_, e)) = fd.pwrite_all(&buf, i * MIB) {
            werr = Some(format!("at {} MiB: {e}", i));
            break;
        }
    }
    r.check(
        &format!("write {n} MiB"),
        werr.is_none(),
        "success",
        format!("{werr:?}"),
    );
    r.ok("fsync", fd.fsync());
    r.eq("size", (n * MIB) as i64, must(fd.fstat(), "fstat").st_size);
    drop(fd);
    cx.maybe_drop();
    let fd = must(sys::open(&f, O_RDONLY, 0), "open");
    let mut scratch = Vec::new();
    let mut bad = None;
    for i in 0..n {
        match fd.pread_full(&mut buf, i * MIB) {
            Ok(m) if m == buf.len() => {
                if let Some(at) = pattern::first_mismatch(key, i * MIB, &buf, &mut scratch) {
                    bad = Some(format!("mismatch at byte {at}"));
                    break;
                }
            }
            Ok(m) => {
                bad = Some(format!("short read {m} at {} MiB", i));
                break;
            }
            Err(e) => {
                bad = Some(format!("read at {} MiB: {e}", i));
                break;
            }
        }
    }
    r.check(
        &format!("read back and verify {n} MiB"),
        bad.is_none(),
        "pattern",
        bad.unwrap_or_default(),
    );
    drop(fd);
    r.ok("unlink", sys::unlink(&f));
}
