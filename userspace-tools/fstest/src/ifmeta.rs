//! The metadata interfaces a real userland uses (the ferrofs-ifmeta guest suite): POSIX ACLs
//! through the xattr syscalls with hand-built `system.posix_acl_*` values (what getfacl/setfacl
//! send), their inheritance from default ACLs, chmod and the umask; FS_IOC_GETFLAGS/SETFLAGS
//! (and FS_IOC_FSGETXATTR/FSSETXATTR) with the immutable and append-only flags enforced.
//!
//! ```text
//! ferrofs-fstest ifmeta run DIR      every check, then DIR/persist: ACLs and flags, fsync'd
//! ferrofs-fstest ifmeta verify DIR   DIR/persist after a remount or a power cut (read-only)
//! ```
//!
//! Runs as root, in DIR (relative paths); the permission checks fork children as uids 1000 and
//! 1001.

use std::path::{Path, PathBuf};

use libc::{O_APPEND, O_CREAT, O_DIRECTORY, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY};

use crate::report::Report;
use crate::sys::{self, code, must, Errno, TimeSpec, R};

const ACCESS: &str = "system.posix_acl_access";
const DEFAULT: &str = "system.posix_acl_default";

// ACL entry tags and the id of entries without one (include/uapi/linux/posix_acl.h).
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
const NO_ID: u32 = u32::MAX;

// Inode flags (include/uapi/linux/fs.h).
const FS_SYNC_FL: u32 = 0x8;
const FS_IMMUTABLE_FL: u32 = 0x10;
const FS_APPEND_FL: u32 = 0x20;
const FS_NODUMP_FL: u32 = 0x40;
const FS_NOATIME_FL: u32 = 0x80;
const FS_NOCOW_FL: u32 = 0x0080_0000;
/// ext4 (the peer of the host test, fstest/tests/fstest.rs) reports this on every file; the
/// checks ignore it and keep it, as chattr does.
const FS_EXTENT_FL: u32 = 0x0008_0000;
const FS_XFLAG_APPEND: u32 = 0x10;
const FS_XFLAG_NODUMP: u32 = 0x80;
const FS_IOC_FSGETXATTR: libc::c_ulong = 0x801c_581f;
const FS_IOC_FSSETXATTR: libc::c_ulong = 0x401c_5820;

const U1: u32 = 1000;
const U2: u32 = 1001;

/// The start `ifmeta` and `labels` share: `run|verify DIR` parsed (else usage, exit 2), running
/// as root, the umask set, and DIR made the working directory: paths are relative to it, so the
/// children that drop to other uids need not search the directories above it (a busybox
/// initramfs's / is 0700). `Ok` with whether to run and the report, or the exit status.
pub(crate) fn enter(cmd: &str, args: &[String], umask: libc::mode_t) -> Result<(bool, Report), i32> {
    let (run, dir) = match args {
        [s, d] if s == "run" || s == "verify" => (s == "run", PathBuf::from(d)),
        _ => {
            eprintln!("usage: ferrofs-fstest {cmd} run|verify DIR");
            return Err(2);
        }
    };
    let mut r = Report::new();
    if !sys::is_root() {
        r.fail("running as root", "uid 0", "another uid");
        return Err(r.finish());
    }
    // SAFETY: umask only changes this process's file creation mask.
    unsafe { libc::umask(umask) };
    if let Err(e) = std::env::set_current_dir(&dir) {
        r.fail("chdir DIR", "success", e);
        return Err(r.finish());
    }
    Ok((run, r))
}

/// Entry point for `ferrofs-fstest ifmeta ...`; returns the exit status.
pub fn main(args: &[String]) -> i32 {
    let (run, mut r) = match enter("ifmeta", args, 0o022) {
        Ok(v) => v,
        Err(status) => return status,
    };
    let dir = PathBuf::from(".");
    if run {
        let base = dir.join("ifmeta");
        r.group("setup", |r| {
            r.ok("mkdir ifmeta", sys::mkdir(&base, 0o755));
        });
        r.group("acl-access", |r| acl_access(r, &base));
        r.group("acl-default", |r| acl_default(r, &base));
        r.group("acl-errors", |r| acl_errors(r, &base));
        r.group("flags", |r| flags(r, &base));
        r.group("flags-perms", |r| flags_perms(r, &base));
        r.group("persist-setup", |r| persist_setup(r, &dir.join("persist")));
    }
    r.group("persist", |r| persist_check(r, &dir.join("persist")));
    r.finish()
}

/// A `system.posix_acl_*` value: version 2, then (tag, perm, id) per entry, little-endian.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// user::u, user:1000:n, group::g, mask::m, other::o
fn acl5(u: u16, n: u16, g: u16, m: u16, o: u16) -> Vec<u8> {
    acl(&[(USER_OBJ, u, NO_ID), (USER, n, U1), (GROUP_OBJ, g, NO_ID), (MASK, m, NO_ID), (OTHER, o, NO_ID)])
}

fn mode_of(p: &Path) -> u32 {
    sys::lstat(p).map(|s| s.st_mode as u32 & 0o7777).unwrap_or(u32::MAX)
}

fn get(p: &Path, name: &str) -> R<Vec<u8>> {
    sys::getxattr(p, name)
}

fn set(p: &Path, name: &str, v: &[u8]) -> R<()> {
    sys::setxattr(p, name, v, 0, false)
}

/// Open for writing and reading as `uid` (a child): the two errnos (0: allowed).
pub(crate) fn access_as(uid: u32, p: &Path) -> Vec<i32> {
    let p = p.to_path_buf();
    sys::as_user(uid, uid, move || vec![code(sys::open(&p, O_WRONLY, 0)), code(sys::open(&p, O_RDONLY, 0))]).unwrap_or_else(|e| vec![-1, e.len() as i32])
}

fn acl_access(r: &mut Report, base: &Path) {
    let f = base.join("acc");
    must(sys::write_file(&f, b"data", 0o640), "create acc");
    r.eq("new file without a default ACL: the umask applies (0640 stays)", 0o640, mode_of(&f));
    let a = acl5(6, 6, 4, 6, 0);
    r.ok("setxattr system.posix_acl_access", set(&f, ACCESS, &a));
    r.eq("getxattr gives the ACL back", Ok(a.clone()), get(&f, ACCESS));
    r.eq("getxattr size probe", Ok(a.len()), sys::getxattr_sized(&f, ACCESS, 0, false).map(|v| v.len()));
    r.err("getxattr with a short buffer: ERANGE", sys::getxattr_sized(&f, ACCESS, 8, false), libc::ERANGE);
    r.eq("the mode's group bits are the mask (0660)", 0o660, mode_of(&f));
    r.check("listxattr names system.posix_acl_access", sys::listxattr(&f).map(|l| l.iter().any(|n| n == ACCESS)).unwrap_or(false), "listed", "not listed");
    r.eq("uid 1000 (named entry rw) may write and read", vec![0, 0], access_as(U1, &f));
    r.eq("uid 1001 (other ---) may not", vec![libc::EACCES, libc::EACCES], access_as(U2, &f));
    r.ok("chmod 0640", sys::chmod(&f, 0o640));
    r.eq("chmod rewrote the mask (r--)", Ok(acl5(6, 6, 4, 4, 0)), get(&f, ACCESS));
    r.eq("mode 0640", 0o640, mode_of(&f));
    r.eq("uid 1000 is masked to read only", vec![libc::EACCES, 0], access_as(U1, &f));
    r.ok("chmod 0664", sys::chmod(&f, 0o664));
    r.eq("chmod 0664: mask rw-, other r--", Ok(acl5(6, 6, 4, 6, 4)), get(&f, ACCESS));
    r.eq("uid 1001 (other r--) may read only", vec![libc::EACCES, 0], access_as(U2, &f));
    // an ACL the mode says all of is not stored: only the mode changes
    let minimal = acl(&[(USER_OBJ, 7, NO_ID), (GROUP_OBJ, 5, NO_ID), (OTHER, 1, NO_ID)]);
    r.ok("setxattr a minimal ACL", set(&f, ACCESS, &minimal));
    r.eq("the minimal ACL became the mode 0751", 0o751, mode_of(&f));
    r.err("and is not stored (ENODATA)", get(&f, ACCESS), libc::ENODATA);
    r.ok("setxattr the ACL again", set(&f, ACCESS, &a));
    r.ok("removexattr system.posix_acl_access", sys::removexattr(&f, ACCESS));
    r.err("getxattr after remove: ENODATA", get(&f, ACCESS), libc::ENODATA);
    r.check("listxattr no longer names it", sys::listxattr(&f).map(|l| !l.iter().any(|n| n == ACCESS)).unwrap_or(false), "not listed", "listed");
    r.eq("the mode stays (0660)", 0o660, mode_of(&f));
    r.eq("uid 1000 is other again", vec![libc::EACCES, libc::EACCES], access_as(U1, &f));
    // an ACL on a directory: search and create through a named entry
    let d = base.join("accdir");
    must(sys::mkdir(&d, 0o700), "mkdir accdir");
    r.ok("access ACL on a directory (user:1000:rwx)", set(&d, ACCESS, &acl5(7, 7, 0, 7, 0)));
    r.eq("directory mode 0770", 0o770, mode_of(&d));
    let (d1, d2) = (d.join("by1000"), d.join("by1001"));
    let got = sys::as_user(U1, U1, move || vec![code(sys::write_file(&d1, b"x", 0o600))]);
    r.eq("uid 1000 creates a file in it", Ok(vec![0]), got);
    let got = sys::as_user(U2, U2, move || vec![code(sys::write_file(&d2, b"x", 0o600))]);
    r.eq("uid 1001 may not", Ok(vec![libc::EACCES]), got);
    // a special file takes an ACL too
    let fifo = base.join("fifo");
    must(sys::mknod(&fifo, libc::S_IFIFO | 0o600, 0), "mkfifo");
    r.ok("access ACL on a FIFO", set(&fifo, ACCESS, &acl5(6, 4, 0, 4, 0)));
    r.eq("FIFO ACL read back", Ok(acl5(6, 4, 0, 4, 0)), get(&fifo, ACCESS));
}

fn acl_default(r: &mut Report, base: &Path) {
    let d = base.join("inh");
    must(sys::mkdir(&d, 0o755), "mkdir inh");
    let dacl = acl5(7, 7, 5, 7, 0);
    r.ok("setxattr system.posix_acl_default on a directory", set(&d, DEFAULT, &dacl));
    r.eq("getxattr gives the default ACL back", Ok(dacl.clone()), get(&d, DEFAULT));
    r.eq("a default ACL leaves the directory's mode (0755)", 0o755, mode_of(&d));
    r.err("and gives it no access ACL", get(&d, ACCESS), libc::ENODATA);
    // a file: masked by the create mode 0666, umask ignored
    let f = d.join("file");
    r.ok("create a file 0666 in it", sys::write_file(&f, b"x", 0o666));
    r.eq("the file's mode: 0660 (umask 022 not applied)", 0o660, mode_of(&f));
    r.eq("the file's access ACL is the default ACL masked by 0666", Ok(acl5(6, 7, 5, 6, 0)), get(&f, ACCESS));
    r.err("a file gets no default ACL", get(&f, DEFAULT), libc::ENODATA);
    r.eq("uid 1000 may write it (user:1000:rwx, mask rw-)", vec![0, 0], access_as(U1, &f));
    // a directory: the default ACL too
    let sub = d.join("sub");
    r.ok("mkdir 0777 in it", sys::mkdir(&sub, 0o777));
    r.eq("the directory's mode: 0770", 0o770, mode_of(&sub));
    r.eq("its access ACL", Ok(acl5(7, 7, 5, 7, 0)), get(&sub, ACCESS));
    r.eq("its default ACL is the parent's", Ok(dacl.clone()), get(&sub, DEFAULT));
    let deep = sub.join("deep");
    r.ok("create a file two levels down", sys::write_file(&deep, b"y", 0o640));
    r.eq("two levels down: mode 0640", 0o640, mode_of(&deep));
    r.eq("two levels down: access ACL", Ok(acl5(6, 7, 5, 4, 0)), get(&deep, ACCESS));
    let by1000 = sub.join("by1000");
    let b2 = by1000.clone();
    let got = sys::as_user(U1, U1, move || vec![code(sys::write_file(&b2, b"z", 0o644))]);
    r.eq("uid 1000 creates a file through the inherited ACL", Ok(vec![0]), got);
    r.eq("uid 1000's file inherits too (mode 0640)", 0o640, mode_of(&by1000));
    r.eq("uid 1000's file owner", Ok(U1), sys::lstat(&by1000).map(|s| s.st_uid));
    // a FIFO and a symlink
    let fifo = d.join("fifo");
    r.ok("mknod a FIFO 0644", sys::mknod(&fifo, libc::S_IFIFO | 0o644, 0));
    r.eq("the FIFO's mode: 0640", 0o640, mode_of(&fifo));
    r.eq("the FIFO's access ACL", Ok(acl5(6, 7, 5, 4, 0)), get(&fifo, ACCESS));
    let link = d.join("link");
    r.ok("symlink in it", sys::symlink(b"file", &link));
    r.err("a symlink has no ACLs (EOPNOTSUPP)", sys::getxattr_sized(&link, ACCESS, 64, true), libc::EOPNOTSUPP);
    // a default ACL equivalent to a mode: the umask is still not applied, no access ACL
    let e = base.join("equiv");
    must(sys::mkdir(&e, 0o755), "mkdir equiv");
    r.ok("default ACL u::rwx g::rwx o::rwx", set(&e, DEFAULT, &acl(&[(USER_OBJ, 7, NO_ID), (GROUP_OBJ, 7, NO_ID), (OTHER, 7, NO_ID)])));
    let ef = e.join("f");
    r.ok("create 0666 in it", sys::write_file(&ef, b"x", 0o666));
    r.eq("mode 0666: the default ACL, not the umask", 0o666, mode_of(&ef));
    r.err("no access ACL stored", get(&ef, ACCESS), libc::ENODATA);
    r.ok("removexattr the default ACL", sys::removexattr(&e, DEFAULT));
    let ef2 = e.join("g");
    r.ok("create 0666 after the removal", sys::write_file(&ef2, b"x", 0o666));
    r.eq("the umask applies again (0644)", 0o644, mode_of(&ef2));
    let plain = base.join("plaindir");
    r.ok("mkdir 0777 without a default ACL", sys::mkdir(&plain, 0o777));
    r.eq("umask applied (0755)", 0o755, mode_of(&plain));
}

fn acl_errors(r: &mut Report, base: &Path) {
    let f = base.join("errs");
    must(sys::write_file(&f, b"x", 0o644), "create errs");
    r.err("a default ACL on a file: EACCES", set(&f, DEFAULT, &acl5(7, 7, 5, 7, 0)), libc::EACCES);
    let mut v1 = acl5(6, 6, 4, 6, 0);
    v1[0] = 1;
    r.err("version 1: EOPNOTSUPP", set(&f, ACCESS, &v1), libc::EOPNOTSUPP);
    r.err("a truncated value: EINVAL", set(&f, ACCESS, &acl5(6, 6, 4, 6, 0)[..10]), libc::EINVAL);
    let nomask = acl(&[(USER_OBJ, 6, NO_ID), (USER, 6, U1), (GROUP_OBJ, 4, NO_ID), (OTHER, 0, NO_ID)]);
    r.err("a named entry without a mask: EINVAL", set(&f, ACCESS, &nomask), libc::EINVAL);
    let dup = acl(&[(USER_OBJ, 6, NO_ID), (USER_OBJ, 6, NO_ID), (GROUP_OBJ, 4, NO_ID), (OTHER, 0, NO_ID)]);
    r.err("two owner entries: EINVAL", set(&f, ACCESS, &dup), libc::EINVAL);
    // as on ext4 and tmpfs: removing an ACL that is not there is no error
    r.ok("removexattr of an absent ACL succeeds", sys::removexattr(&f, ACCESS));
    r.eq("nothing changed the mode", 0o644, mode_of(&f));
    r.err("nothing was stored", get(&f, ACCESS), libc::ENODATA);
    let f2 = f.clone();
    let got = sys::as_user(U1, U1, move || vec![code(set(&f2, ACCESS, &acl5(6, 6, 4, 6, 0)))]);
    r.eq("uid 1000 may not set an ACL on root's file (EPERM)", Ok(vec![libc::EPERM]), got);
}

fn rawflags(fd: &sys::Fd) -> R<u32> {
    let mut v: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one int through the pointer; `fd` is open.
    if unsafe { libc::ioctl(fd.raw(), libc::FS_IOC_GETFLAGS as _, &mut v) } < 0 {
        return Err(Errno::last());
    }
    Ok(v as u32)
}

/// FS_IOC_GETFLAGS (all but ext4's extent flag).
fn getflags(p: &Path) -> R<u32> {
    rawflags(&sys::open(p, O_RDONLY | libc::O_NONBLOCK, 0)?).map(|f| f & !FS_EXTENT_FL)
}

/// FS_IOC_SETFLAGS (ext4's extent flag kept, as chattr keeps it).
fn setflags(p: &Path, flags: u32) -> R<()> {
    let fd = sys::open(p, O_RDONLY | libc::O_NONBLOCK, 0)?;
    let v = (flags | (rawflags(&fd)? & FS_EXTENT_FL)) as libc::c_int;
    // SAFETY: FS_IOC_SETFLAGS reads one int through the pointer; `fd` is open.
    if unsafe { libc::ioctl(fd.raw(), libc::FS_IOC_SETFLAGS as _, &v) } < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// `struct fsxattr` (include/uapi/linux/fs.h).
#[repr(C)]
#[derive(Default)]
struct FsXattr {
    xflags: u32,
    extsize: u32,
    nextents: u32,
    projid: u32,
    cowextsize: u32,
    pad: [u8; 8],
}

fn fsxattr(p: &Path, req: libc::c_ulong, x: &mut FsXattr) -> R<()> {
    let fd = sys::open(p, O_RDONLY, 0)?;
    // SAFETY: both requests take a `struct fsxattr` (28 bytes, `FsXattr`); `fd` is open.
    if unsafe { libc::ioctl(fd.raw(), req as _, x as *mut FsXattr) } < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

fn atime(p: &Path) -> i64 {
    sys::stat(p).map(|s| s.st_atime as i64).unwrap_or(-1)
}

fn flags(r: &mut Report, base: &Path) {
    let f = base.join("fl");
    must(sys::write_file(&f, b"abc", 0o644), "create fl");
    r.eq("a new file has no flags", Ok(0), getflags(&f));
    // append-only
    r.ok("FS_IOC_SETFLAGS FS_APPEND_FL", setflags(&f, FS_APPEND_FL));
    r.eq("FS_IOC_GETFLAGS: append-only", Ok(FS_APPEND_FL), getflags(&f));
    let mut x = FsXattr::default();
    r.ok("FS_IOC_FSGETXATTR", fsxattr(&f, FS_IOC_FSGETXATTR, &mut x));
    r.eq("FS_IOC_FSGETXATTR: FS_XFLAG_APPEND", FS_XFLAG_APPEND, x.xflags);
    r.err("append-only: open O_WRONLY: EPERM", sys::open(&f, O_WRONLY, 0), libc::EPERM);
    r.err("append-only: open O_APPEND|O_TRUNC: EPERM", sys::open(&f, O_WRONLY | O_APPEND | O_TRUNC, 0), libc::EPERM);
    let w = sys::open(&f, O_WRONLY | O_APPEND, 0).and_then(|fd| fd.write(b"def"));
    r.eq("append-only: O_APPEND writes", Ok(3), w);
    r.eq("append-only: the data was appended", Ok(b"abcdef".to_vec()), sys::read_file(&f));
    r.err("append-only: truncate: EPERM", sys::truncate(&f, 1), libc::EPERM);
    r.err("append-only: unlink: EPERM", sys::unlink(&f), libc::EPERM);
    r.err("append-only: rename: EPERM", sys::rename(&f, base.join("fl2")), libc::EPERM);
    r.err("append-only: link: EPERM", sys::link(&f, base.join("fl3")), libc::EPERM);
    r.err("append-only: chmod: EPERM", sys::chmod(&f, 0o600), libc::EPERM);
    r.err("append-only: setxattr: EPERM", sys::setxattr(&f, "user.x", b"1", 0, false), libc::EPERM);
    r.err("append-only: set an ACL: EPERM", set(&f, ACCESS, &acl5(6, 6, 4, 6, 0)), libc::EPERM);
    // immutable
    r.ok("FS_IOC_SETFLAGS FS_IMMUTABLE_FL", setflags(&f, FS_IMMUTABLE_FL));
    r.eq("FS_IOC_GETFLAGS: immutable (append-only cleared)", Ok(FS_IMMUTABLE_FL), getflags(&f));
    r.err("immutable: open O_WRONLY|O_APPEND: EPERM", sys::open(&f, O_WRONLY | O_APPEND, 0), libc::EPERM);
    r.err("immutable: open O_RDWR: EPERM", sys::open(&f, O_RDWR, 0), libc::EPERM);
    r.eq("immutable: still readable", Ok(b"abcdef".to_vec()), sys::read_file(&f));
    r.err("immutable: truncate: EPERM", sys::truncate(&f, 0), libc::EPERM);
    r.err("immutable: unlink: EPERM", sys::unlink(&f), libc::EPERM);
    r.err("immutable: rename: EPERM", sys::rename(&f, base.join("fl2")), libc::EPERM);
    r.err("immutable: link: EPERM", sys::link(&f, base.join("fl3")), libc::EPERM);
    r.err("immutable: chmod: EPERM", sys::chmod(&f, 0o600), libc::EPERM);
    r.err("immutable: chown: EPERM", sys::chown(&f, 5, 5), libc::EPERM);
    r.err("immutable: utimes: EPERM", sys::utimens(&f, Some((TimeSpec::At(1, 0), TimeSpec::At(1, 0))), false), libc::EPERM);
    r.err("immutable: setxattr: EPERM", sys::setxattr(&f, "user.x", b"1", 0, false), libc::EPERM);
    r.err("immutable: set an ACL: EPERM", set(&f, ACCESS, &acl5(6, 6, 4, 6, 0)), libc::EPERM);
    // an immutable directory
    let d = base.join("idir");
    must(sys::mkdir(&d, 0o755), "mkdir idir");
    must(sys::write_file(d.join("old"), b"o", 0o644), "create idir/old");
    r.ok("FS_IMMUTABLE_FL on a directory", setflags(&d, FS_IMMUTABLE_FL));
    r.eq("directory flags", Ok(FS_IMMUTABLE_FL), getflags(&d));
    r.err("immutable directory: create: EPERM", sys::open(d.join("new"), O_WRONLY | O_CREAT, 0o644), libc::EPERM);
    r.err("immutable directory: mkdir: EPERM", sys::mkdir(d.join("sub"), 0o755), libc::EPERM);
    r.err("immutable directory: unlink: EPERM", sys::unlink(d.join("old")), libc::EPERM);
    r.ok("clear the directory's flags", setflags(&d, 0));
    r.ok("then unlink works", sys::unlink(d.join("old")));
    // refused flags change nothing
    r.err("an unsupported flag (FS_NOCOW_FL): EOPNOTSUPP", setflags(&f, FS_IMMUTABLE_FL | FS_NOCOW_FL), libc::EOPNOTSUPP);
    r.eq("flags unchanged", Ok(FS_IMMUTABLE_FL), getflags(&f));
    let mut x = FsXattr { projid: 5, ..Default::default() };
    r.err("FS_IOC_FSSETXATTR with a project id: EOPNOTSUPP", fsxattr(&f, FS_IOC_FSSETXATTR, &mut x), libc::EOPNOTSUPP);
    r.ok("clear the flags", setflags(&f, 0));
    r.eq("no flags", Ok(0), getflags(&f));
    let mut x = FsXattr { xflags: FS_XFLAG_NODUMP, ..Default::default() };
    r.ok("FS_IOC_FSSETXATTR FS_XFLAG_NODUMP", fsxattr(&f, FS_IOC_FSSETXATTR, &mut x));
    r.eq("FS_IOC_GETFLAGS: nodump", Ok(FS_NODUMP_FL), getflags(&f));
    // noatime: a read leaves atime (a control read without it moves atime under relatime)
    r.ok("clear the flags again", setflags(&f, 0));
    let old = TimeSpec::At(1_000_000, 0);
    must(sys::utimens(&f, Some((old, TimeSpec::Now)), false), "utimens old atime");
    must(sys::read_file(&f), "read");
    r.check("without FS_NOATIME_FL a read updates atime", atime(&f) > 1_000_000, "> 1000000", atime(&f));
    must(sys::utimens(&f, Some((old, TimeSpec::Now)), false), "utimens old atime");
    r.ok("FS_IOC_SETFLAGS FS_NOATIME_FL", setflags(&f, FS_NOATIME_FL));
    must(sys::read_file(&f), "read");
    r.eq("with FS_NOATIME_FL a read leaves atime", 1_000_000, atime(&f));
    r.ok("FS_IOC_SETFLAGS FS_SYNC_FL|FS_NODUMP_FL", setflags(&f, FS_SYNC_FL | FS_NODUMP_FL));
    r.eq("both kept", Ok(FS_SYNC_FL | FS_NODUMP_FL), getflags(&f));
    let w = sys::open(&f, O_WRONLY | O_APPEND, 0).and_then(|fd| fd.write(b"g"));
    r.eq("a synchronous write", Ok(1), w);
    r.ok("clear", setflags(&f, 0));
    r.ok("unlink after clearing", sys::unlink(&f));
}

fn flags_perms(r: &mut Report, base: &Path) {
    let f = base.join("owned");
    must(sys::write_file(&f, b"x", 0o644), "create owned");
    must(sys::chown(&f, U1, U1), "chown owned to 1000");
    let p = f.clone();
    let got = sys::as_user(U1, U1, move || {
        vec![code(setflags(&p, FS_NODUMP_FL)), code(setflags(&p, FS_NODUMP_FL | FS_IMMUTABLE_FL)), code(setflags(&p, FS_APPEND_FL))]
    });
    r.eq("the owner sets nodump; immutable and append-only need CAP_LINUX_IMMUTABLE", Ok(vec![0, libc::EPERM, libc::EPERM]), got);
    r.eq("nodump set, nothing else", Ok(FS_NODUMP_FL), getflags(&f));
    let p = f.clone();
    let got = sys::as_user(U2, U2, move || vec![code(setflags(&p, 0))]);
    r.eq("another user may not change the flags (EPERM)", Ok(vec![libc::EPERM]), got);
    r.ok("root sets immutable", setflags(&f, FS_IMMUTABLE_FL));
    let p = f.clone();
    let got = sys::as_user(U1, U1, move || vec![code(setflags(&p, 0)), code(sys::open(&p, O_WRONLY, 0))]);
    r.eq("the owner may not clear immutable, nor write", Ok(vec![libc::EPERM, libc::EPERM]), got);
    r.ok("root clears it", setflags(&f, 0));
}

/// DIR/persist: what `verify` checks after a remount and after a power cut.
fn persist_setup(r: &mut Report, p: &Path) {
    must(sys::mkdir(p, 0o755), "mkdir persist");
    let acl_f = p.join("acl");
    must(sys::write_file(&acl_f, b"acl", 0o640), "create persist/acl");
    r.ok("persist/acl: access ACL", set(&acl_f, ACCESS, &acl5(6, 6, 4, 6, 0)));
    let chm = p.join("chmod");
    must(sys::write_file(&chm, b"chmod", 0o640), "create persist/chmod");
    r.ok("persist/chmod: access ACL", set(&chm, ACCESS, &acl5(6, 6, 4, 6, 0)));
    r.ok("persist/chmod: chmod 0604", sys::chmod(&chm, 0o604));
    let inh = p.join("inh");
    must(sys::mkdir(&inh, 0o755), "mkdir persist/inh");
    r.ok("persist/inh: default ACL", set(&inh, DEFAULT, &acl5(7, 7, 5, 7, 0)));
    r.ok("persist/inh/f: inherited", sys::write_file(inh.join("f"), b"f", 0o666));
    r.ok("persist/inh/d: inherited", sys::mkdir(inh.join("d"), 0o777));
    let imm = p.join("immutable");
    must(sys::write_file(&imm, b"immutable", 0o644), "create persist/immutable");
    r.ok("persist/immutable: immutable|nodump", setflags(&imm, FS_IMMUTABLE_FL | FS_NODUMP_FL));
    let app = p.join("append");
    must(sys::write_file(&app, b"append", 0o644), "create persist/append");
    r.ok("persist/append: append-only", setflags(&app, FS_APPEND_FL));
    let noa = p.join("noatime");
    must(sys::write_file(&noa, b"noatime", 0o644), "create persist/noatime");
    r.ok("persist/noatime: noatime|sync", setflags(&noa, FS_NOATIME_FL | FS_SYNC_FL));
    for q in [acl_f, chm, inh.join("f"), inh.join("d"), inh.clone(), imm, app, noa, p.to_path_buf()] {
        let flags = if q.is_dir() { O_RDONLY | O_DIRECTORY } else { O_RDONLY };
        r.ok(&format!("fsync {}", q.display()), sys::open(&q, flags, 0).and_then(|fd| fd.fsync()));
    }
}

fn persist_check(r: &mut Report, p: &Path) {
    let acl_f = p.join("acl");
    r.eq("persist/acl: access ACL", Ok(acl5(6, 6, 4, 6, 0)), get(&acl_f, ACCESS));
    r.eq("persist/acl: mode 0660", 0o660, mode_of(&acl_f));
    r.eq("persist/acl: uid 1000 may write (the ACL from flash)", vec![0, 0], access_as(U1, &acl_f));
    r.eq("persist/acl: uid 1001 may not", vec![libc::EACCES, libc::EACCES], access_as(U2, &acl_f));
    let chm = p.join("chmod");
    r.eq("persist/chmod: the ACL chmod rewrote (mask ---, other r--)", Ok(acl5(6, 6, 4, 0, 4)), get(&chm, ACCESS));
    r.eq("persist/chmod: mode 0604", 0o604, mode_of(&chm));
    let inh = p.join("inh");
    r.eq("persist/inh: default ACL", Ok(acl5(7, 7, 5, 7, 0)), get(&inh, DEFAULT));
    r.eq("persist/inh/f: inherited access ACL", Ok(acl5(6, 7, 5, 6, 0)), get(&inh.join("f"), ACCESS));
    r.eq("persist/inh/f: mode 0660", 0o660, mode_of(&inh.join("f")));
    r.eq("persist/inh/d: inherited default ACL", Ok(acl5(7, 7, 5, 7, 0)), get(&inh.join("d"), DEFAULT));
    r.eq("persist/inh/d: inherited access ACL", Ok(acl5(7, 7, 5, 7, 0)), get(&inh.join("d"), ACCESS));
    r.eq("persist/inh/d: mode 0770", 0o770, mode_of(&inh.join("d")));
    let imm = p.join("immutable");
    r.eq("persist/immutable: flags", Ok(FS_IMMUTABLE_FL | FS_NODUMP_FL), getflags(&imm));
    r.err("persist/immutable: open O_WRONLY: EPERM", sys::open(&imm, O_WRONLY, 0), libc::EPERM);
    r.err("persist/immutable: unlink: EPERM", sys::unlink(&imm), libc::EPERM);
    r.eq("persist/immutable: content", Ok(b"immutable".to_vec()), sys::read_file(&imm));
    let app = p.join("append");
    r.eq("persist/append: flags", Ok(FS_APPEND_FL), getflags(&app));
    r.err("persist/append: open O_WRONLY: EPERM", sys::open(&app, O_WRONLY, 0), libc::EPERM);
    r.err("persist/append: unlink: EPERM", sys::unlink(&app), libc::EPERM);
    r.eq("persist/noatime: flags", Ok(FS_NOATIME_FL | FS_SYNC_FL), getflags(&p.join("noatime")));
}
