//! Mounting, path resolution and directory walking through the engine's public API.

use ferrofs_engine::{Error, FileType, Inode, MountOptions, ROOT_INO};

use crate::dev::Dev;
use crate::util::{errno_name, ToolError};
use crate::Fs;

/// Index nodes cached by the tools (each about 2 KiB).
pub const TOOL_CACHE_NODES: usize = 4096;

/// Mount `dev`; on failure return a tool error (exit 8 for "not a ferrofs", 4 for damage) and
/// the device.
#[allow(clippy::result_large_err)] // the device comes back to the caller, as from `Engine::mount`
pub fn mount(dev: Dev, read_only: bool) -> Result<Fs, (ToolError, Dev)> {
    let opts = MountOptions { cache_nodes: TOOL_CACHE_NODES, read_only, ..MountOptions::default() };
    Fs::mount(dev, opts).map_err(|(e, d)| (mount_error(e), d))
}

/// The tool error for a failed mount.
pub fn mount_error(e: Error) -> ToolError {
    match e {
        Error::BadFormat => ToolError::op(
            "not a ferrofs filesystem: no valid superblock, an unsupported version or features, or a geometry \
             that differs from the device's",
        ),
        Error::Corrupt => ToolError::damaged(
            "the filesystem is damaged and cannot be mounted: no valid checkpoint, or the index or log it \
             points to is corrupt",
        ),
        Error::ReadOnly => ToolError::op("the filesystem uses read-only-compatible features this version does not know"),
        Error::NoMem => ToolError::op("out of memory while mounting"),
        e => ToolError::op(format!("mount failed: {}", errno_name(e))),
    }
}

/// Resolve an absolute or relative (to the root) path without following symlinks.
pub fn resolve(fs: &mut Fs, path: &[u8]) -> Result<Inode, ToolError> {
    let mut cur = fs.getattr(ROOT_INO).map_err(|e| ToolError::fail(format!("cannot read the root directory: {}", errno_name(e))))?;
    for comp in path.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".") {
        if !cur.is_dir() {
            return Err(ToolError::fail(format!(
                "{}: not a directory",
                crate::util::show_name(path)
            )));
        }
        cur = fs.lookup(cur.ino, comp).map_err(|e| {
            ToolError::fail(format!("{}: {}", crate::util::show_name(path), match e {
                Error::NotFound => "no such file or directory".to_string(),
                e => errno_name(e).to_string(),
            }))
        })?;
    }
    Ok(cur)
}

/// A directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Name.
    pub name: Vec<u8>,
    /// Inode number.
    pub ino: u64,
    /// Type from the entry.
    pub ftype: FileType,
}

/// List directory `dir` without `.` and `..`.
pub fn list_dir(fs: &mut Fs, dir: u64) -> Result<Vec<Entry>, Error> {
    let mut out = Vec::new();
    let mut cookie = 2u64;
    loop {
        let mut batch: Vec<(Entry, u64)> = Vec::new();
        fs.readdir(dir, cookie, &mut |name, ino, ft, next| {
            batch.push((Entry { name: name.to_vec(), ino, ftype: ft }, next));
            batch.len() < 256
        })?;
        let full = batch.len() >= 256;
        for (e, next) in batch {
            if e.name != b"." && e.name != b".." {
                out.push(e);
            }
            cookie = next;
        }
        if !full {
            return Ok(out);
        }
    }
}

/// Read a whole file.
pub fn read_all(fs: &mut Fs, ino: u64, size: u64) -> Result<Vec<u8>, Error> {
    let mut v = Vec::new();
    v.try_reserve(usize::try_from(size).map_err(|_| Error::NoMem)?).map_err(|_| Error::NoMem)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    loop {
        let n = fs.read(ino, off, &mut buf)?;
        if n == 0 {
            break;
        }
        v.extend_from_slice(buf.get(..n).unwrap_or(&[]));
        off = off.saturating_add(n as u64);
    }
    Ok(v)
}

/// Extended attributes as (name, value) pairs.
pub type XattrList = Vec<(Vec<u8>, Vec<u8>)>;

/// All xattrs of an inode as (name, value).
pub fn xattrs(fs: &mut Fs, ino: u64) -> Result<XattrList, Error> {
    let n = fs.listxattr(ino, &mut [])?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut names = vec![0u8; n];
    let n = fs.listxattr(ino, &mut names)?;
    let mut out = Vec::new();
    for name in names.get(..n).unwrap_or(&[]).split(|&b| b == 0).filter(|s| !s.is_empty()) {
        let sz = fs.getxattr(ino, name, &mut [])?;
        let mut val = vec![0u8; sz];
        let got = if sz == 0 { 0 } else { fs.getxattr(ino, name, &mut val)? };
        val.truncate(got);
        out.push((name.to_vec(), val));
    }
    Ok(out)
}
