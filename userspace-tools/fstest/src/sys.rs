//! Thin syscall wrappers returning `Result<T, Errno>`: the checks compare errnos, so every call
//! reports the raw errno rather than an `io::Error`.

use std::ffi::CString;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A raw errno value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    pub fn last() -> Errno {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&ename(self.0))
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

pub type R<T> = Result<T, Errno>;

/// Symbolic name of an errno (falls back to the number).
pub fn ename(e: i32) -> String {
    let n = match e {
        0 => "success",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENODEV => "ENODEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ETXTBSY => "ETXTBSY",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::ESPIPE => "ESPIPE",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::ERANGE => "ERANGE",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENODATA => "ENODATA",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EDQUOT => "EDQUOT",
        libc::ESTALE => "ESTALE",
        libc::EUCLEAN => "EUCLEAN",
        libc::ENOTTY => "ENOTTY",
        _ => return format!("errno {e}"),
    };
    n.to_string()
}

fn ret(r: libc::c_int) -> R<libc::c_int> {
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r)
    }
}

fn ret_l(r: libc::c_long) -> R<i64> {
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r as i64)
    }
}

fn ret_s(r: libc::ssize_t) -> R<usize> {
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r as usize)
    }
}

/// NUL-terminated copy of a path. Paths built by this program never contain NUL; one that does
/// maps to EINVAL like the kernel would.
pub fn cpath<P: AsRef<Path>>(p: P) -> R<CString> {
    CString::new(p.as_ref().as_os_str().as_bytes()).map_err(|_| Errno(libc::EINVAL))
}

fn cbytes(b: &[u8]) -> R<CString> {
    CString::new(b).map_err(|_| Errno(libc::EINVAL))
}

/// An owned file descriptor, closed on drop.
#[derive(Debug)]
pub struct Fd(pub libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        if self.0 >= 0 {
            // SAFETY: we own this descriptor; closing it once here.
            unsafe { libc::close(self.0) };
        }
    }
}

impl Fd {
    pub fn raw(&self) -> libc::c_int {
        self.0
    }

    /// Closes explicitly, reporting close's errno (close can report deferred write errors).
    pub fn close(mut self) -> R<()> {
        let fd = self.0;
        self.0 = -1;
        // SAFETY: we own this descriptor and it is closed exactly once (drop sees -1).
        ret(unsafe { libc::close(fd) }).map(|_| ())
    }

    pub fn write(&self, buf: &[u8]) -> R<usize> {
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes.
        ret_s(unsafe { libc::write(self.0, buf.as_ptr().cast(), buf.len()) })
    }

    pub fn read(&self, buf: &mut [u8]) -> R<usize> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        ret_s(unsafe { libc::read(self.0, buf.as_mut_ptr().cast(), buf.len()) })
    }

    pub fn pwrite(&self, buf: &[u8], off: u64) -> R<usize> {
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes.
        ret_s(unsafe { libc::pwrite(self.0, buf.as_ptr().cast(), buf.len(), off as libc::off_t) })
    }

    pub fn pread(&self, buf: &mut [u8], off: u64) -> R<usize> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        ret_s(unsafe {
            libc::pread(
                self.0,
                buf.as_mut_ptr().cast(),
                buf.len(),
                off as libc::off_t,
            )
        })
    }

    /// Writes all of `buf` at `off`, looping over short writes; a short write followed by an error
    /// returns the error together with how much was written.
    pub fn pwrite_all(&self, buf: &[u8], off: u64) -> Result<(), (usize, Errno)> {
        let mut done = 0usize;
        while done < buf.len() {
            match self.pwrite(&buf[done..], off + done as u64) {
                Ok(0) => return Err((done, Errno(libc::EIO))),
                Ok(n) => done += n,
                Err(Errno(libc::EINTR)) => {}
                Err(e) => return Err((done, e)),
            }
        }
        Ok(())
    }

    /// Reads until `buf` is full or EOF; returns the byte count.
    pub fn pread_full(&self, buf: &mut [u8], off: u64) -> R<usize> {
        let mut done = 0usize;
        while done < buf.len() {
            match self.pread(&mut buf[done..], off + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(Errno(libc::EINTR)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    pub fn lseek(&self, off: i64, whence: libc::c_int) -> R<i64> {
        // SAFETY: plain syscall on an owned descriptor.
        let r = unsafe { libc::lseek(self.0, off as libc::off_t, whence) };
        if r < 0 {
            Err(Errno::last())
        } else {
            Ok(r as i64)
        }
    }

    pub fn fsync(&self) -> R<()> {
        // SAFETY: plain syscall on an owned descriptor.
        ret(unsafe { libc::fsync(self.0) }).map(|_| ())
    }

    pub fn fdatasync(&self) -> R<()> {
        // SAFETY: plain syscall on an owned descriptor.
        ret(unsafe { libc::fdatasync(self.0) }).map(|_| ())
    }

    pub fn syncfs(&self) -> R<()> {
        // SAFETY: plain syscall on an owned descriptor.
        ret(unsafe { libc::syncfs(self.0) }).map(|_| ())
    }

    pub fn ftruncate(&self, len: u64) -> R<()> {
        // SAFETY: plain syscall on an owned descriptor.
        ret(unsafe { libc::ftruncate(self.0, len as libc::off_t) }).map(|_| ())
    }

    pub fn fstat(&self) -> R<libc::stat> {
        // SAFETY: `stat` is plain old data; all-zero is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a valid, writable `struct stat`.
        ret(unsafe { libc::fstat(self.0, &mut st) })?;
        Ok(st)
    }

    pub fn fchmod(&self, mode: u32) -> R<()> {
        // SAFETY: plain syscall on an owned descriptor.
        ret(unsafe { libc::fchmod(self.0, mode as libc::mode_t) }).map(|_| ())
    }

    pub fn fchown(&self, uid: u32, gid: u32) -> R<()> {
        // SAFETY: plain syscall on an owned descriptor.
        ret(unsafe { libc::fchown(self.0, uid, gid) }).map(|_| ())
    }

    /// One getdents64 call into `buf`; returns the entries decoded from it (empty at end).
    pub fn getdents(&self, buf: &mut [u8]) -> R<Vec<Dirent>> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, self.0, buf.as_mut_ptr(), buf.len()) };
        let n = ret_l(n)? as usize;
        Ok(parse_dirents(&buf[..n]))
    }
}

/// One decoded `linux_dirent64`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirent {
    pub ino: u64,
    pub off: i64,
    pub dtype: u8,
    pub name: Vec<u8>,
}

fn parse_dirents(mut b: &[u8]) -> Vec<Dirent> {
    let mut out = Vec::new();
    while b.len() >= 19 {
        let ino = u64::from_ne_bytes(b[0..8].try_into().unwrap_or([0; 8]));
        let off = i64::from_ne_bytes(b[8..16].try_into().unwrap_or([0; 8]));
        let reclen = u16::from_ne_bytes([b[16], b[17]]) as usize;
        let dtype = b[18];
        if reclen < 19 || reclen > b.len() {
            break;
        }
        let raw = &b[19..reclen];
        let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
        out.push(Dirent {
            ino,
            off,
            dtype,
            name: raw[..end].to_vec(),
        });
        b = &b[reclen..];
    }
    out
}

pub fn open<P: AsRef<Path>>(p: P, flags: libc::c_int, mode: u32) -> R<Fd> {
    let c = cpath(p)?;
    // SAFETY: `c` is NUL-terminated; mode is passed as the variadic argument open expects.
    let fd = ret(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) })?;
    Ok(Fd(fd))
}

pub fn openat(dir: &Fd, name: &[u8], flags: libc::c_int, mode: u32) -> R<Fd> {
    let c = cbytes(name)?;
    // SAFETY: `c` is NUL-terminated; `dir` is an open descriptor.
    let fd = ret(unsafe {
        libc::openat(
            dir.0,
            c.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    Ok(Fd(fd))
}

/// Creates (or truncates) a regular file with `mode` and writes `data`.
pub fn write_file<P: AsRef<Path>>(p: P, data: &[u8], mode: u32) -> R<()> {
    let fd = open(p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode)?;
    fd.pwrite_all(data, 0).map_err(|(_, e)| e)?;
    fd.close()
}

/// Reads a whole file.
pub fn read_file<P: AsRef<Path>>(p: P) -> R<Vec<u8>> {
    let fd = open(p, libc::O_RDONLY, 0)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = fd.read(&mut buf)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    Ok(out)
}

macro_rules! path_call {
    ($(#[$m:meta])* $name:ident ( $($arg:ident : $ty:ty),* ) => |$c:ident| $body:expr) => {
        $(#[$m])*
        pub fn $name<P: AsRef<Path>>(p: P $(, $arg: $ty)*) -> R<()> {
            let $c = cpath(p)?;
            // SAFETY: the path is NUL-terminated and all other arguments are plain values.
            ret(unsafe { $body }).map(|_| ())
        }
    };
}

path_call!(mkdir(mode: u32) => |c| libc::mkdir(c.as_ptr(), mode as libc::mode_t));
path_call!(rmdir() => |c| libc::rmdir(c.as_ptr()));
path_call!(unlink() => |c| libc::unlink(c.as_ptr()));
path_call!(chmod(mode: u32) => |c| libc::chmod(c.as_ptr(), mode as libc::mode_t));
path_call!(chown(uid: u32, gid: u32) => |c| libc::chown(c.as_ptr(), uid, gid));
path_call!(lchown(uid: u32, gid: u32) => |c| libc::lchown(c.as_ptr(), uid, gid));
path_call!(truncate(len: u64) => |c| libc::truncate(c.as_ptr(), len as libc::off_t));
path_call!(mknod(mode: u32, dev: u64) => |c| libc::mknod(c.as_ptr(), mode as libc::mode_t, dev as libc::dev_t));

pub fn link<P: AsRef<Path>, Q: AsRef<Path>>(a: P, b: Q) -> R<()> {
    let (a, b) = (cpath(a)?, cpath(b)?);
    // SAFETY: both paths are NUL-terminated.
    ret(unsafe { libc::link(a.as_ptr(), b.as_ptr()) }).map(|_| ())
}

/// `linkat(fd, "", AT_FDCWD, to, AT_EMPTY_PATH)`: give the open file (an O_TMPFILE one) a name.
pub fn linkat_empty(fd: &Fd, to: &Path) -> R<()> {
    let c = cpath(to)?;
    // SAFETY: `c` is NUL-terminated, the empty path is a static C string, `fd` is open.
    ret(unsafe { libc::linkat(fd.raw(), c"".as_ptr(), libc::AT_FDCWD, c.as_ptr(), libc::AT_EMPTY_PATH) }).map(|_| ())
}

pub fn symlink<Q: AsRef<Path>>(target: &[u8], linkpath: Q) -> R<()> {
    let (a, b) = (cbytes(target)?, cpath(linkpath)?);
    // SAFETY: both strings are NUL-terminated.
    ret(unsafe { libc::symlink(a.as_ptr(), b.as_ptr()) }).map(|_| ())
}

pub fn readlink<P: AsRef<Path>>(p: P) -> R<Vec<u8>> {
    let c = cpath(p)?;
    let mut buf = vec![0u8; 8192];
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
    let n = ret_s(unsafe { libc::readlink(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
    buf.truncate(n);
    Ok(buf)
}

pub fn rename<P: AsRef<Path>, Q: AsRef<Path>>(a: P, b: Q) -> R<()> {
    let (a, b) = (cpath(a)?, cpath(b)?);
    // SAFETY: both paths are NUL-terminated.
    ret(unsafe { libc::rename(a.as_ptr(), b.as_ptr()) }).map(|_| ())
}

pub fn rename2<P: AsRef<Path>, Q: AsRef<Path>>(a: P, b: Q, flags: u32) -> R<()> {
    let (a, b) = (cpath(a)?, cpath(b)?);
    // SAFETY: both paths are NUL-terminated; raw syscall so no libc version dependency.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    ret_l(r).map(|_| ())
}

fn do_stat(p: &Path, follow: bool) -> R<libc::stat> {
    let c = cpath(p)?;
    // SAFETY: `stat` is plain old data; all-zero is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` a valid, writable `struct stat`.
    let r = unsafe {
        if follow {
            libc::stat(c.as_ptr(), &mut st)
        } else {
            libc::lstat(c.as_ptr(), &mut st)
        }
    };
    ret(r)?;
    Ok(st)
}

pub fn stat<P: AsRef<Path>>(p: P) -> R<libc::stat> {
    do_stat(p.as_ref(), true)
}

pub fn lstat<P: AsRef<Path>>(p: P) -> R<libc::stat> {
    do_stat(p.as_ref(), false)
}

/// A timestamp with nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ts {
    pub sec: i64,
    pub nsec: u32,
}

impl fmt::Display for Ts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}", self.sec, self.nsec)
    }
}

/// The statx fields the checks use.
#[derive(Debug, Clone, Copy)]
pub struct Statx {
    pub mask: u32,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub atime: Ts,
    pub mtime: Ts,
    pub ctime: Ts,
    pub btime: Option<Ts>,
    pub rdev: u64,
}

pub fn statx<P: AsRef<Path>>(p: P, nofollow: bool) -> R<Statx> {
    let c = cpath(p)?;
    // SAFETY: `statx` is plain old data; all-zero is valid.
    let mut sx: libc::statx = unsafe { std::mem::zeroed() };
    let flags = if nofollow {
        libc::AT_SYMLINK_NOFOLLOW
    } else {
        0
    };
    // SAFETY: `c` is NUL-terminated and `sx` a valid, writable `struct statx`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_statx,
            libc::AT_FDCWD,
            c.as_ptr(),
            flags,
            libc::STATX_BASIC_STATS | libc::STATX_BTIME,
            &mut sx as *mut libc::statx,
        )
    };
    ret_l(r)?;
    let ts = |t: libc::statx_timestamp| Ts {
        sec: t.tv_sec,
        nsec: t.tv_nsec,
    };
    Ok(Statx {
        mask: sx.stx_mask,
        mode: u32::from(sx.stx_mode),
        nlink: sx.stx_nlink,
        uid: sx.stx_uid,
        gid: sx.stx_gid,
        ino: sx.stx_ino,
        size: sx.stx_size,
        blocks: sx.stx_blocks,
        atime: ts(sx.stx_atime),
        mtime: ts(sx.stx_mtime),
        ctime: ts(sx.stx_ctime),
        btime: if sx.stx_mask & libc::STATX_BTIME != 0 {
            Some(ts(sx.stx_btime))
        } else {
            None
        },
        rdev: libc::makedev(sx.stx_rdev_major, sx.stx_rdev_minor),
    })
}

/// Either a concrete time, `UTIME_NOW` or `UTIME_OMIT`.
#[derive(Debug, Clone, Copy)]
pub enum TimeSpec {
    At(i64, i64),
    Now,
    Omit,
}

fn to_timespec(t: TimeSpec) -> libc::timespec {
    match t {
        TimeSpec::At(s, ns) => libc::timespec {
            tv_sec: s as libc::time_t,
            tv_nsec: ns as libc::c_long,
        },
        TimeSpec::Now => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        TimeSpec::Omit => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    }
}

/// utimensat; `times == None` passes NULL (both set to now, needs only write permission).
pub fn utimens<P: AsRef<Path>>(p: P, times: Option<(TimeSpec, TimeSpec)>, nofollow: bool) -> R<()> {
    let c = cpath(p)?;
    let flags = if nofollow {
        libc::AT_SYMLINK_NOFOLLOW
    } else {
        0
    };
    let r = match times {
        // SAFETY: `c` is NUL-terminated; NULL times is allowed.
        None => unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), std::ptr::null(), flags) },
        Some((a, m)) => {
            let ts = [to_timespec(a), to_timespec(m)];
            // SAFETY: `c` is NUL-terminated; `ts` is an array of two timespecs.
            unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), flags) }
        }
    };
    ret(r).map(|_| ())
}

pub fn setxattr<P: AsRef<Path>>(
    p: P,
    name: &str,
    value: &[u8],
    flags: i32,
    nofollow: bool,
) -> R<()> {
    let (c, n) = (cpath(p)?, cbytes(name.as_bytes())?);
    // SAFETY: strings are NUL-terminated and `value` is valid for `value.len()` bytes.
    let r = unsafe {
        if nofollow {
            libc::lsetxattr(
                c.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
            )
        } else {
            libc::setxattr(
                c.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
            )
        }
    };
    ret(r).map(|_| ())
}

/// getxattr into a buffer of `size` bytes (0 = size query); returns the bytes (or the size as a
/// zero-filled vector of that length for a size query).
pub fn getxattr_sized<P: AsRef<Path>>(p: P, name: &str, size: usize, nofollow: bool) -> R<Vec<u8>> {
    let (c, n) = (cpath(p)?, cbytes(name.as_bytes())?);
    let mut buf = vec![0u8; size];
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: strings are NUL-terminated; `ptr` is NULL (size 0) or valid for `size` bytes.
    let r = unsafe {
        if nofollow {
            libc::lgetxattr(c.as_ptr(), n.as_ptr(), ptr, size)
        } else {
            libc::getxattr(c.as_ptr(), n.as_ptr(), ptr, size)
        }
    };
    let len = ret_s(r)?;
    buf.resize(len, 0);
    Ok(buf)
}

pub fn getxattr<P: AsRef<Path>>(p: P, name: &str) -> R<Vec<u8>> {
    getxattr_sized(p, name, 65536, false)
}

/// listxattr with a buffer of `size` bytes (0 = size query); returns the names.
pub fn listxattr_sized<P: AsRef<Path>>(
    p: P,
    size: usize,
    nofollow: bool,
) -> R<(usize, Vec<String>)> {
    let c = cpath(p)?;
    let mut buf = vec![0u8; size];
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: `c` is NUL-terminated; `ptr` is NULL (size 0) or valid for `size` bytes.
    let r = unsafe {
        if nofollow {
            libc::llistxattr(c.as_ptr(), ptr, size)
        } else {
            libc::listxattr(c.as_ptr(), ptr, size)
        }
    };
    let len = ret_s(r)?;
    if size == 0 {
        return Ok((len, Vec::new()));
    }
    let names = buf[..len]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    Ok((len, names))
}

pub fn listxattr<P: AsRef<Path>>(p: P) -> R<Vec<String>> {
    listxattr_sized(p, 65536, false).map(|(_, v)| v)
}

pub fn removexattr<P: AsRef<Path>>(p: P, name: &str) -> R<()> {
    let (c, n) = (cpath(p)?, cbytes(name.as_bytes())?);
    // SAFETY: both strings are NUL-terminated.
    ret(unsafe { libc::removexattr(c.as_ptr(), n.as_ptr()) }).map(|_| ())
}

pub fn statfs<P: AsRef<Path>>(p: P) -> R<libc::statfs> {
    let c = cpath(p)?;
    // SAFETY: `statfs` is plain old data; all-zero is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` valid and writable.
    ret(unsafe { libc::statfs(c.as_ptr(), &mut st) })?;
    Ok(st)
}

/// Free bytes available to unprivileged users (f_bavail * f_bsize).
pub fn avail_bytes<P: AsRef<Path>>(p: P) -> R<u64> {
    let s = statfs(p)?;
    Ok((s.f_bavail as u64).saturating_mul(s.f_bsize as u64))
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `sync` then drop the page, dentry and inode caches (root only), so later reads come from the
/// medium. Returns whether caches were dropped.
pub fn drop_caches() -> bool {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    match open("/proc/sys/vm/drop_caches", libc::O_WRONLY, 0) {
        Ok(fd) => fd.write(b"3\n").is_ok(),
        Err(_) => false,
    }
}

/// A shared or private memory mapping, unmapped on drop.
pub struct Mmap {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mmap {
    pub fn new(fd: &Fd, len: usize, writable: bool, shared: bool) -> R<Mmap> {
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        let flags = if shared {
            libc::MAP_SHARED
        } else {
            libc::MAP_PRIVATE
        };
        // SAFETY: a fresh mapping chosen by the kernel; `fd` is open.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd.0, 0) };
        if p == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        Ok(Mmap { ptr: p, len })
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is `len` bytes and lives as long as `self`. Pages past EOF would
        // SIGBUS; callers only map within the file size.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }

    /// Writes bytes into the mapping at `off` (must be mapped writable).
    pub fn write_at(&mut self, off: usize, data: &[u8]) {
        let end = off.saturating_add(data.len()).min(self.len);
        if off >= end {
            return;
        }
        // SAFETY: [off, end) lies inside the mapping, which is writable by the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), (self.ptr as *mut u8).add(off), end - off)
        };
    }

    pub fn msync(&self) -> R<()> {
        // SAFETY: the range is exactly our mapping.
        ret(unsafe { libc::msync(self.ptr, self.len, libc::MS_SYNC) }).map(|_| ())
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// Waits until the coarse realtime clock (what inode timestamps use) has moved past `t`, so a
/// following update must produce a strictly later timestamp.
pub fn wait_clock_past(t: Ts) {
    for _ in 0..2000 {
        if coarse_now() > t {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

pub fn coarse_now() -> Ts {
    // SAFETY: `timespec` is plain old data.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is valid and writable.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    Ts {
        sec: ts.tv_sec as i64,
        nsec: ts.tv_nsec as u32,
    }
}

pub fn now() -> Ts {
    // SAFETY: `timespec` is plain old data.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is valid and writable.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    Ts {
        sec: ts.tv_sec as i64,
        nsec: ts.tv_nsec as u32,
    }
}

/// Result of running a closure as another user in a forked child.
pub fn as_user(uid: u32, gid: u32, f: impl FnOnce() -> Vec<i32>) -> Result<Vec<i32>, String> {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is an array of two ints.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(format!("pipe: {}", Errno::last()));
    }
    // SAFETY: the program is single-threaded; the child only runs `f` and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", Errno::last()));
    }
    if pid == 0 {
        // Child.
        // SAFETY: closing the read end we do not use.
        unsafe { libc::close(fds[0]) };
        crate::report::reset_fatal_signal_handler();
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: plain credential syscalls; group first, then the user.
            let ok = unsafe {
                libc::setgroups(0, std::ptr::null()) == 0
                    && libc::setgid(gid) == 0
                    && libc::setuid(uid) == 0
            };
            if !ok {
                return format!("setuid {}", Errno::last());
            }
            let v = f();
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        }))
        .unwrap_or_else(|_| "panic".to_string());
        let b = out.as_bytes();
        // SAFETY: writing our buffer to the pipe, then exiting without unwinding or atexit.
        unsafe {
            libc::write(fds[1], b.as_ptr().cast(), b.len());
            libc::_exit(0);
        }
    }
    // SAFETY: closing the write end we do not use.
    unsafe { libc::close(fds[1]) };
    let rd = Fd(fds[0]);
    let mut s = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = rd.read(&mut buf) {
        if n == 0 {
            break;
        }
        s.extend_from_slice(&buf[..n]);
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let s = String::from_utf8_lossy(&s).into_owned();
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(' ')
        .map(|t| t.parse::<i32>().map_err(|_| format!("child: {s}")))
        .collect()
}

/// 0 on success, else the errno: the encoding `as_user` children report with.
pub fn code<T>(r: R<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.0,
    }
}

/// Unwraps a setup step; a failure panics, which the enclosing group reports as one FAIL.
pub fn must<T>(r: R<T>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("setup step failed: {what}: {e}"),
    }
}

/// syncfs on the filesystem holding `p`.
pub fn syncfs_path<P: AsRef<Path>>(p: P) -> R<()> {
    open(p, libc::O_RDONLY, 0)?.syncfs()
}

// MEMGETINFO = _IOR('M', 1, struct mtd_info_user), MEMERASE = _IOW('M', 2, struct erase_info_user)
const MEMGETINFO: libc::c_ulong = 0x8020_4d01;
const MEMERASE: libc::c_ulong = 0x4008_4d02;

/// `struct mtd_info_user` (include/uapi/mtd/mtd-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct MtdInfoUser {
    pub ty: u8,
    pub flags: u32,
    pub size: u32,
    pub erasesize: u32,
    pub writesize: u32,
    pub oobsize: u32,
    pub padding: u64,
}

#[repr(C)]
struct EraseInfoUser {
    start: u32,
    length: u32,
}

/// MEMGETINFO of an MTD character device.
pub fn mtd_info(fd: &Fd) -> Result<MtdInfoUser, Errno> {
    let mut info = MtdInfoUser::default();
    // SAFETY: MEMGETINFO writes one mtd_info_user into `info`, which outlives the call.
    let r = unsafe { libc::ioctl(fd.raw(), MEMGETINFO as _, &mut info as *mut MtdInfoUser) };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(info)
}

/// MEMERASE of `length` bytes at `start` of an MTD character device.
pub fn mtd_erase(fd: &Fd, start: u32, length: u32) -> Result<(), Errno> {
    let e = EraseInfoUser { start, length };
    // SAFETY: MEMERASE reads one erase_info_user from `e`, which outlives the call.
    let r = unsafe { libc::ioctl(fd.raw(), MEMERASE as _, &e as *const EraseInfoUser) };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// A buffer of `len` bytes aligned to 4096 (for O_DIRECT), with room for the same length one
/// byte later (a misaligned view, for the EINVAL checks).
pub struct AlignedBuf {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize) -> AlignedBuf {
        let v = vec![0u8; len + 8192];
        let off = (4096 - (v.as_ptr() as usize % 4096)) % 4096;
        AlignedBuf { v, off, len }
    }
    pub fn get(&self) -> &[u8] {
        &self.v[self.off..self.off + self.len]
    }
    pub fn get_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.len]
    }
    /// The same length starting one byte later.
    pub fn misaligned_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.off + 1..self.off + 1 + self.len]
    }
}
