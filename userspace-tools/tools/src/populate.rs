//! Copy a directory tree into a mounted filesystem (`mkfs.ferrofs -r DIR`).
//!
//! Regular files (all-zero 4 KiB blocks are left as holes), directories, symlinks, hard links
//! (one inode per source (dev, ino)), device, fifo and socket nodes, owners, permission bits
//! including setuid/setgid/sticky, atime/mtime/ctime with nanoseconds, extended attributes.
//! Attributes are applied in a last pass, after every entry exists, so that creating children
//! and links does not disturb the copied times.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::{self, File, Metadata};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ferrofs_engine::format::{
    BLOCK_SIZE, NAME_MAX, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK, SYMLINK_MAX,
    XATTR_NAME_MAX,
};
use ferrofs_engine::{CreateArgs, Error, SetAttr, Timespec, ROOT_INO};

use crate::util::{errno_name, human, now, ToolError};
use crate::Fs;

/// Options of the copy.
#[derive(Debug, Clone, Copy, Default)]
pub struct PopulateOptions {
    /// Make every file owned by root (uid 0, gid 0).
    pub squash_uids: bool,
    /// Print every path copied.
    pub verbose: bool,
    /// Use this time for every timestamp (and as "now") instead of the source's and the clock's:
    /// reproducible images (ferrofs-hostile).
    pub fixed_time: Option<Timespec>,
}

/// What a tree holds (from [`prescan`]) or what was copied (from [`populate`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Regular files (inodes, hard links counted once).
    pub files: u64,
    /// Directories (without the root).
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Device, fifo and socket nodes.
    pub specials: u64,
    /// Extra names of hard-linked inodes.
    pub hardlinks: u64,
    /// Bytes of regular file content (file sizes).
    pub bytes: u64,
    /// Bytes of file content stored (without the holes skipped).
    pub stored_bytes: u64,
    /// Extended attributes.
    pub xattrs: u64,
    /// Bytes of xattr names and values.
    pub xattr_bytes: u64,
    /// Bytes of names.
    pub name_bytes: u64,
    /// Xattrs that could not be copied (too large, or not readable).
    pub xattrs_skipped: u64,
}

impl TreeStats {
    /// Inodes (including the root).
    pub fn inodes(&self) -> u64 {
        self.files + self.dirs + self.symlinks + self.specials + 1
    }

    /// Rough number of bytes of flash the tree needs once written (records, index, slack).
    pub fn estimated_flash_bytes(&self) -> u64 {
        let blocks = self.stored_bytes.div_ceil(u64::from(BLOCK_SIZE));
        let names = self.inodes() + self.hardlinks;
        // data: payload + record header + ~32 bytes of index per block
        let data = self.stored_bytes + blocks * (48 + 32);
        // per inode: INODE record (136) + index; per name: DENT record (58 + name) + index
        let meta = self.inodes() * (136 + 32) + names * (58 + 32) + self.name_bytes;
        let xattr = self.xattrs * (49 + 32) + self.xattr_bytes;
        // superseded inode records and index nodes rewritten by checkpoints: +25 %
        (data + meta + xattr).saturating_mul(5) / 4
    }
}

/// An error of the copy: out of space (with what was needed), or anything else.
#[derive(Debug)]
pub enum PopulateError {
    /// The filesystem filled up while copying `path`.
    NoSpace {
        /// The file being copied.
        path: PathBuf,
        /// Content bytes copied so far.
        copied: u64,
    },
    /// Any other failure.
    Other(ToolError),
}

impl From<ToolError> for PopulateError {
    fn from(e: ToolError) -> Self {
        PopulateError::Other(e)
    }
}

fn engine_err(path: &Path, what: &str, e: Error, copied: u64) -> PopulateError {
    if e == Error::NoSpace {
        return PopulateError::NoSpace { path: path.to_path_buf(), copied };
    }
    PopulateError::Other(ToolError::fail(format!("{}: {what}: {}", path.display(), errno_name(e))))
}

fn io_err(path: &Path, what: &str, e: io::Error) -> ToolError {
    ToolError::fail(format!("{}: {what}: {e}", path.display()))
}

fn sorted_entries(dir: &Path) -> Result<Vec<(Vec<u8>, PathBuf)>, ToolError> {
    let rd = fs::read_dir(dir).map_err(|e| io_err(dir, "cannot read directory", e))?;
    let mut v = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| io_err(dir, "cannot read directory", e))?;
        let name = ent.file_name().as_bytes().to_vec();
        v.push((name, ent.path()));
    }
    v.sort();
    Ok(v)
}

/// Walk the tree once to count what it holds and find unreadable parts early.
pub fn prescan(root: &Path) -> Result<TreeStats, ToolError> {
    let md = fs::symlink_metadata(root).map_err(|e| io_err(root, "cannot access the source directory", e))?;
    if !md.is_dir() {
        return Err(ToolError::fail(format!("{}: the source is not a directory", root.display())));
    }
    let mut st = TreeStats::default();
    let mut seen: HashMap<(u64, u64), ()> = HashMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for (name, path) in sorted_entries(&dir)? {
            if name.len() > NAME_MAX {
                return Err(ToolError::fail(format!("{}: name longer than {NAME_MAX} bytes", path.display())));
            }
            let md = fs::symlink_metadata(&path).map_err(|e| io_err(&path, "cannot stat", e))?;
            st.name_bytes += name.len() as u64;
            if !md.is_dir() && md.nlink() > 1 && seen.insert((md.dev(), md.ino()), ()).is_some() {
                st.hardlinks += 1;
                continue;
            }
            match md.mode() & S_IFMT {
                S_IFDIR => {
                    st.dirs += 1;
                    stack.push(path);
                }
                S_IFREG => {
                    st.files += 1;
                    st.bytes += md.size();
                    st.stored_bytes += md.size().min(md.blocks().saturating_mul(512));
                }
                S_IFLNK => st.symlinks += 1,
                _ => st.specials += 1,
            }
        }
    }
    Ok(st)
}

fn ts(sec: i64, nsec: i64) -> Timespec {
    Timespec { sec, nsec: u32::try_from(nsec.clamp(0, 999_999_999)).unwrap_or(0) }
}

/// Read a path's extended attributes (without following a final symlink). Filesystems without
/// xattr support give an empty list.
pub fn read_xattrs(path: &Path) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut names = Vec::new();
    loop {
        // SAFETY: `c` is a valid NUL-terminated string; a null buffer with size 0 asks for the size.
        let n = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOTSUP) | Some(libc::ENOSYS) => Ok(Vec::new()),
                _ => Err(e),
            };
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        names.resize(n as usize, 0);
        // SAFETY: `names` has `names.len()` writable bytes.
        let m = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
        if m < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) {
                continue;
            }
            return Err(e);
        }
        names.truncate(m as usize);
        break;
    }
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cn = match CString::new(name) {
            Ok(c) => c,
            Err(_) => continue,
        };
        let mut val: Vec<u8> = Vec::new();
        loop {
            // SAFETY: valid NUL-terminated strings; null buffer with size 0 asks for the size.
            let n = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), std::ptr::null_mut(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ENODATA) {
                    break;
                }
                return Err(e);
            }
            val.resize(n as usize, 0);
            // SAFETY: `val` has `val.len()` writable bytes.
            let m = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), val.as_mut_ptr().cast(), val.len()) };
            if m < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ERANGE) {
                    continue;
                }
                if e.raw_os_error() == Some(libc::ENODATA) {
                    break;
                }
                return Err(e);
            }
            val.truncate(m as usize);
            out.push((name.to_vec(), std::mem::take(&mut val)));
            break;
        }
    }
    Ok(out)
}

struct Copier<'a> {
    fs: &'a mut Fs,
    opts: PopulateOptions,
    links: HashMap<(u64, u64), u64>,
    attrs: Vec<(u64, SetAttr)>,
    stats: TreeStats,
    buf: Vec<u8>,
    now: Timespec,
    warnings: Vec<String>,
    progress: &'a mut dyn FnMut(&TreeStats),
}

/// Copy the tree under `root` into the filesystem's root directory. Returns what was copied and
/// the warnings (xattrs skipped).
pub fn populate(fs: &mut Fs, root: &Path, opts: PopulateOptions) -> Result<(TreeStats, Vec<String>), PopulateError> {
    populate_with_progress(fs, root, opts, &mut |_| {})
}

/// [`populate`], calling `progress` with what was copied so far after every entry.
pub fn populate_with_progress(
    fs: &mut Fs,
    root: &Path,
    opts: PopulateOptions,
    progress: &mut dyn FnMut(&TreeStats),
) -> Result<(TreeStats, Vec<String>), PopulateError> {
    let md = fs::symlink_metadata(root).map_err(|e| io_err(root, "cannot access the source directory", e))?;
    if !md.is_dir() {
        return Err(ToolError::fail(format!("{}: the source is not a directory", root.display())).into());
    }
    let mut c = Copier {
        fs,
        opts,
        links: HashMap::new(),
        attrs: Vec::new(),
        stats: TreeStats::default(),
        buf: vec![0u8; 1 << 20],
        now: opts.fixed_time.unwrap_or_else(now),
        warnings: Vec::new(),
        progress,
    };
    c.copy_xattrs(root, ROOT_INO)?;
    c.push_attrs(ROOT_INO, &md, false);
    c.copy_dir(root, ROOT_INO, 0)?;
    let attrs = std::mem::take(&mut c.attrs);
    for (ino, sa) in attrs {
        c.fs.setattr(ino, &sa, c.now).map_err(|e| engine_err(root, "setting attributes", e, c.stats.stored_bytes))?;
    }
    Ok((c.stats, c.warnings))
}

impl Copier<'_> {
    fn owner(&self, md: &Metadata) -> (u32, u32) {
        if self.opts.squash_uids {
            (0, 0)
        } else {
            (md.uid(), md.gid())
        }
    }

    fn push_attrs(&mut self, ino: u64, md: &Metadata, symlink: bool) {
        let (uid, gid) = self.owner(md);
        let sa = SetAttr {
            mode: if symlink { None } else { Some(md.mode() & 0o7777) },
            uid: Some(uid),
            gid: Some(gid),
            size: None,
            atime: Some(self.opts.fixed_time.unwrap_or_else(|| ts(md.atime(), md.atime_nsec()))),
            mtime: Some(self.opts.fixed_time.unwrap_or_else(|| ts(md.mtime(), md.mtime_nsec()))),
            ctime: Some(self.opts.fixed_time.unwrap_or_else(|| ts(md.ctime(), md.ctime_nsec()))),
            flags: None,
        };
        self.attrs.push((ino, sa));
    }

    fn copy_xattrs(&mut self, path: &Path, ino: u64) -> Result<(), PopulateError> {
        let list = match read_xattrs(path) {
            Ok(l) => l,
            Err(e) => {
                self.warnings.push(format!("{}: cannot read extended attributes: {e}", path.display()));
                return Ok(());
            }
        };
        let max = self.fs.xattr_value_max();
        for (name, value) in list {
            if name.len() > XATTR_NAME_MAX || value.len() > max {
                self.stats.xattrs_skipped += 1;
                self.warnings.push(format!(
                    "{}: extended attribute {} skipped: value of {} bytes (ferrofs holds at most {max} with this segment size)",
                    path.display(),
                    crate::util::show_name(&name),
                    value.len()
                ));
                continue;
            }
            match self.fs.setxattr(ino, &name, &value, 0, self.now) {
                Ok(()) => {
                    self.stats.xattrs += 1;
                    self.stats.xattr_bytes += (name.len() + value.len()) as u64;
                }
                Err(Error::NoSpace) => {
                    return Err(PopulateError::NoSpace { path: path.to_path_buf(), copied: self.stats.stored_bytes })
                }
                Err(e) => {
                    self.stats.xattrs_skipped += 1;
                    self.warnings.push(format!(
                        "{}: extended attribute {} skipped: {}",
                        path.display(),
                        crate::util::show_name(&name),
                        errno_name(e)
                    ));
                }
            }
        }
        Ok(())
    }

    fn copy_dir(&mut self, dir: &Path, dino: u64, depth: u32) -> Result<(), PopulateError> {
        if depth > 4096 {
            return Err(ToolError::fail(format!("{}: directory tree too deep", dir.display())).into());
        }
        for (name, path) in sorted_entries(dir)? {
            self.copy_entry(&path, &name, dino, depth)?;
        }
        Ok(())
    }

    fn copy_entry(&mut self, path: &Path, name: &[u8], dino: u64, depth: u32) -> Result<(), PopulateError> {
        let r = self.copy_entry_inner(path, name, dino, depth);
        (self.progress)(&self.stats);
        r
    }

    fn copy_entry_inner(&mut self, path: &Path, name: &[u8], dino: u64, depth: u32) -> Result<(), PopulateError> {
        let md = fs::symlink_metadata(path).map_err(|e| io_err(path, "cannot stat", e))?;
        let fmt = md.mode() & S_IFMT;
        let copied = self.stats.stored_bytes;
        if self.opts.verbose {
            println!("{}", path.display());
        }
        self.stats.name_bytes += name.len() as u64;
        if fmt != S_IFDIR && md.nlink() > 1 {
            if let Some(&ino) = self.links.get(&(md.dev(), md.ino())) {
                self.fs.link(ino, dino, name, self.now).map_err(|e| engine_err(path, "cannot create hard link", e, copied))?;
                self.stats.hardlinks += 1;
                return Ok(());
            }
        }
        let (uid, gid) = self.owner(&md);
        let ino = match fmt {
            S_IFDIR => {
                let i = self
                    .fs
                    .mkdir(dino, name, md.mode() & 0o7777, uid, gid, self.now)
                    .map_err(|e| engine_err(path, "cannot create directory", e, copied))?;
                self.stats.dirs += 1;
                self.copy_xattrs(path, i.ino)?;
                self.push_attrs(i.ino, &md, false);
                self.copy_dir(path, i.ino, depth + 1)?;
                return Ok(());
            }
            S_IFLNK => {
                let target = fs::read_link(path).map_err(|e| io_err(path, "cannot read symlink", e))?;
                let t = target.as_os_str().as_bytes();
                if t.len() > SYMLINK_MAX {
                    return Err(ToolError::fail(format!(
                        "{}: symlink target of {} bytes is longer than {SYMLINK_MAX}",
                        path.display(),
                        t.len()
                    ))
                    .into());
                }
                let i = self
                    .fs
                    .symlink(dino, name, t, uid, gid, self.now)
                    .map_err(|e| engine_err(path, "cannot create symlink", e, copied))?;
                self.stats.symlinks += 1;
                self.copy_xattrs(path, i.ino)?;
                self.push_attrs(i.ino, &md, true);
                i.ino
            }
            S_IFREG => {
                let args = CreateArgs { mode: S_IFREG | (md.mode() & 0o7777), uid, gid, rdev: 0 };
                let i = self.fs.create(dino, name, &args, self.now).map_err(|e| engine_err(path, "cannot create file", e, copied))?;
                self.stats.files += 1;
                let size = self.copy_content(path, i.ino)?;
                self.stats.bytes += size;
                self.copy_xattrs(path, i.ino)?;
                self.push_attrs(i.ino, &md, false);
                if let Some((_, sa)) = self.attrs.last_mut() {
                    sa.size = Some(size);
                }
                i.ino
            }
            S_IFCHR | S_IFBLK | S_IFIFO | S_IFSOCK => {
                let rdev = if fmt == S_IFCHR || fmt == S_IFBLK { crate::util::encode_rdev(md.rdev()) } else { 0 };
                let args = CreateArgs { mode: fmt | (md.mode() & 0o7777), uid, gid, rdev };
                let i = self.fs.create(dino, name, &args, self.now).map_err(|e| engine_err(path, "cannot create node", e, copied))?;
                self.stats.specials += 1;
                self.copy_xattrs(path, i.ino)?;
                self.push_attrs(i.ino, &md, false);
                i.ino
            }
            _ => {
                return Err(ToolError::fail(format!("{}: unknown file type {:o}", path.display(), fmt)).into());
            }
        };
        if md.nlink() > 1 {
            self.links.insert((md.dev(), md.ino()), ino);
        }
        Ok(())
    }

    /// Copy a file's content, leaving all-zero 4 KiB blocks as holes. Returns the size read.
    fn copy_content(&mut self, path: &Path, ino: u64) -> Result<u64, PopulateError> {
        // O_NOATIME leaves the source's access times alone (allowed for the owner and root)
        let mut f = match fs::OpenOptions::new().read(true).custom_flags(libc::O_NOATIME).open(path) {
            Ok(f) => f,
            Err(_) => File::open(path).map_err(|e| io_err(path, "cannot open", e))?,
        };
        let bs = BLOCK_SIZE as usize;
        let mut off = 0u64;
        loop {
            let n = read_full(&mut f, &mut self.buf).map_err(|e| io_err(path, "read error", e))?;
            if n == 0 {
                break;
            }
            let data = self.buf.get(..n).unwrap_or(&[]);
            let mut i = 0usize;
            while i < n {
                let zero = |s: usize| data.get(s..(s + bs).min(n)).is_some_and(|b| b.iter().all(|&x| x == 0));
                if zero(i) {
                    i += bs;
                    continue;
                }
                let start = i;
                while i < n && !zero(i) {
                    i += bs;
                }
                let end = i.min(n);
                let chunk = data.get(start..end).unwrap_or(&[]);
                let at = off + start as u64;
                let r = self.fs.write(ino, at, chunk, self.now);
                match r {
                    Ok(_) => self.stats.stored_bytes += chunk.len() as u64,
                    Err(e) => return Err(engine_err(path, "write failed", e, self.stats.stored_bytes)),
                }
            }
            off += n as u64;
            if n < self.buf.len() {
                break;
            }
        }
        Ok(off)
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(buf.get_mut(n..).unwrap_or(&mut [])) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The message for an ENOSPC during the copy.
pub fn nospace_message(path: &Path, copied: u64, need: &TreeStats, capacity: u64, segment_size: u32) -> String {
    let est = need.estimated_flash_bytes();
    // capacity = (main segments - 12) * 29/32 of a segment: invert it for the device size
    use ferrofs_engine::space::{OFFER_DEN, OFFER_NUM};
    let seg = u64::from(segment_size.max(1));
    let segs_needed = (est.saturating_mul(OFFER_DEN) / OFFER_NUM).div_ceil(seg) + 12 + 4 + 2;
    format!(
        "filesystem full (ENOSPC) while copying {}: {} of {} of file content copied; the tree ({} inodes, {} of \
         content) needs about {} of filesystem space, this filesystem holds about {}; \
         use a device of at least about {} ({} segments of {})",
        path.display(),
        human(copied),
        human(need.stored_bytes),
        need.inodes(),
        human(need.bytes),
        human(est),
        human(capacity),
        human(segs_needed.saturating_mul(seg)),
        segs_needed,
        human(seg)
    )
}

/// Attribute of a symlink's mode (always `S_IFLNK | 0777`).
pub const SYMLINK_MODE: u32 = S_IFLNK | 0o777;
