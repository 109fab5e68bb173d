//! Inode-level operations shared by every object type: attributes (`getattr`, `setattr`
//! with truncation), eviction and destruction of unlinked inodes, `fsync`.

use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{kind, Inode, Key, Timespec, FLAG_CONT, MAX_FILE_SIZE, REC_HDR, S_IFMT};
use crate::engine::fs::{Engine, ROOT_INO};
use crate::engine::platform::Platform;
use crate::engine::space::RESERVE_DELETE;

/// Attributes to change in [`Engine::setattr`]; `None` leaves a field alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits (the file type bits are ignored).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (regular files only): truncate or extend with a hole.
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<Timespec>,
    /// New modification time.
    pub mtime: Option<Timespec>,
    /// New status change time (default: `now`).
    pub ctime: Option<Timespec>,
    /// New inode flags.
    pub flags: Option<u32>,
}

impl SetAttr {
    /// Apply every field but the size to `i`; ctime becomes `ctime`, else `now`.
    pub(crate) fn apply(&self, i: &mut Inode, now: Timespec) {
        if let Some(m) = self.mode {
            i.mode = (i.mode & S_IFMT) | (m & 0o7777);
        }
        if let Some(u) = self.uid {
            i.uid = u;
        }
        if let Some(g) = self.gid {
            i.gid = g;
        }
        if let Some(t) = self.atime {
            i.atime = t;
        }
        if let Some(t) = self.mtime {
            i.mtime = t;
        }
        if let Some(f) = self.flags {
            i.flags = f;
        }
        i.ctime = self.ctime.unwrap_or(now);
    }
}

/// Who creates a node, and how.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CreateArgs {
    /// Type and permission bits (S_IFREG, S_IFDIR, S_IFCHR, S_IFBLK, S_IFIFO, S_IFSOCK; S_IFLNK
    /// only through [`Engine::symlink`]).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number (device nodes).
    pub rdev: u32,
}

impl<P: Platform, F: Flash> Engine<P, F> {
    /// Read inode `ino`.
    pub fn getattr(&mut self, ino: u64) -> Result<Inode> {
        // through the inode cache (writeback.rs): no flash read while the record is unchanged
        self.getattr_cached(ino)
    }

    /// Change attributes (including the size: truncate / extend).
    pub fn setattr(&mut self, ino: u64, a: &SetAttr, now: Timespec) -> Result<Inode> {
        let r = self.setattr_op(ino, a, now);
        self.end_op(r)
    }

    fn setattr_op(&mut self, ino: u64, a: &SetAttr, now: Timespec) -> Result<Inode> {
        self.begin_mutation(RESERVE_DELETE)?;
        let mut i = self.getattr(ino)?;
        let mut flags_last = 0u8;
        if let Some(sz) = a.size {
            if i.is_dir() {
                return Err(Error::IsDir);
            }
            if i.mode & S_IFMT != crate::engine::format::S_IFREG {
                return Err(Error::Invalid);
            }
            if sz > MAX_FILE_SIZE {
                return Err(Error::FileTooBig);
            }
            if sz > i.size {
                // growing takes no data space, but an inode record: not out of reserved space
                self.check_reserved((REC_HDR + crate::engine::format::INODE_SIZE) as u64)?;
            }
            if sz != i.size {
                self.cut_data(ino, sz.min(i.size), FLAG_CONT)?;
                i.size = sz;
                i.mtime = now;
            }
            flags_last = 0;
        }
        a.apply(&mut i, now);
        self.write_inode(&i, flags_last)?;
        Ok(i)
    }

    /// The VFS dropped its last reference to `ino`: if it has no links left, delete it.
    pub fn evict(&mut self, ino: u64) -> Result<()> {
        let r = self.evict_op(ino);
        self.end_op(r)
    }

    fn evict_op(&mut self, ino: u64) -> Result<()> {
        let i = match self.getattr(ino) {
            Ok(i) => i,
            Err(Error::NotFound) => return Ok(()),
            Err(e) => return Err(e),
        };
        if i.nlink != 0 || ino == ROOT_INO {
            return Ok(());
        }
        self.begin_mutation(RESERVE_DELETE)?;
        self.destroy_inode(ino)
    }

    /// Make the file's data and metadata durable: flush the log heads (no checkpoint unless a
    /// head lost its chain).
    pub fn fsync(&mut self, ino: u64) -> Result<()> {
        self.getattr(ino)?;
        self.flush_log().map(|_| ())
    }

    /// Delete every record of inode `ino` and its orphan entry (one atomic group).
    pub(crate) fn destroy_inode(&mut self, ino: u64) -> Result<()> {
        self.icache_forget(ino);
        self.delete_range(Key::new(ino, 0, 0), Key::new(ino, u8::MAX, u64::MAX), FLAG_CONT)?;
        let ok = Key::new(0, kind::ORPHAN, ino);
        self.delete_range(ok, ok, 0)
    }
}
