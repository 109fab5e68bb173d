//! The POSIX object model: inodes, directories, files, symlinks, links, xattrs, rename.
//! Independent of the VFS; the kernel layer translates its calls into these.

use crate::engine::codec::{Reader, Writer};
use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{
    kind, name_hash, rtype, FileType, Inode, Key, Timespec, BLOCK_SIZE, FLAG_CONT, HEAD_HOT,
    HEAD_META, MAX_FILE_SIZE, NAME_MAX, S_IFDIR, S_IFLNK, S_IFMT, SYMLINK_MAX, XATTR_NAME_MAX,
    XATTR_VALUE_MAX, REC_HDR,
};
use crate::engine::fs::{Engine, RESERVE_DELETE, RESERVE_SEGS, ROOT_INO};
use crate::engine::platform::{FallibleVec, Platform};

/// `rename` flag: fail with `Exists` if the target exists.
pub const RENAME_NOREPLACE: u32 = 1;
/// `rename` flag: atomically exchange source and target.
pub const RENAME_EXCHANGE: u32 = 2;
/// `setxattr` flag: fail if the attribute exists.
pub const XATTR_CREATE: u32 = 1;
/// `setxattr` flag: fail if the attribute does not exist.
pub const XATTR_REPLACE: u32 = 2;

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

/// Readdir callback: `(name, ino, type, next_cookie) -> continue?`.
pub type DirFiller<'a> = &'a mut dyn FnMut(&[u8], u64, FileType, u64) -> bool;

/// A decoded directory entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dent {
    pub(crate) key: u64,
    pub(crate) ino: u64,
}

/// Data block size as u64.
const BS: u64 = BLOCK_SIZE as u64;

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Invalid);
    }
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong);
    }
    Ok(())
}

pub(crate) fn dtype_of(mode: u32) -> u8 {
    FileType::from_mode(mode).map_or(0, FileType::dtype)
}

pub(crate) fn ftype_of_dtype(d: u8) -> FileType {
    match d {
        1 => FileType::Fifo,
        2 => FileType::CharDev,
        4 => FileType::Dir,
        6 => FileType::BlockDev,
        10 => FileType::Symlink,
        12 => FileType::Socket,
        _ => FileType::Regular,
    }
}

impl<P: Platform, F: Flash> Engine<P, F> {
    pub(crate) fn begin_mutation(&mut self, min_free: u32) -> Result<()> {
        if self.log.failed {
            return Err(Error::ReadOnly);
        }
        self.maybe_commit()?;
        // never below what the next mount needs (deletions run down to this floor)
        let need = min_free.saturating_add(self.segtab_segments()).max(self.mount_floor());
        self.ensure_space(need)?;
        // from here on the operation's own records follow: see `end_op`
        self.log.op_mark = self.log.next_seq;
        Ok(())
    }

    fn check_capacity(&self, extra: u64) -> Result<()> {
        if self.live_bytes().saturating_add(extra).saturating_add(self.reserved_space()) > self.capacity_bytes() {
            return Err(Error::NoSpace);
        }
        Ok(())
    }

    /// Read inode `ino`.
    pub fn getattr(&mut self, ino: u64) -> Result<Inode> {
        // through the inode cache (writeback.rs): no flash read while the record is unchanged
        self.getattr_cached(ino)
    }

    pub(crate) fn dir_inode(&mut self, ino: u64) -> Result<Inode> {
        let d = self.getattr(ino)?;
        if !d.is_dir() {
            return Err(Error::NotDir);
        }
        Ok(d)
    }

    /// Find `name` in `dir`: Ok(Ok(dent)) if present, Ok(Err(free key)) if absent.
    pub(crate) fn find_dent(&mut self, dir: u64, name: &[u8]) -> Result<core::result::Result<Dent, u64>> {
        self.find_named(dir, kind::DENT, name).map(|r| {
            r.map(|(key, ino, _dtype)| Dent { key, ino })
        })
    }

    /// Generic hashed-name lookup for DENT and XATTR keys.
    fn find_named(&mut self, ino: u64, k: u8, name: &[u8]) -> Result<core::result::Result<(u64, u64, u8), u64>> {
        let base = name_hash(name) << 8;
        let mut used = [false; 256];
        let mut from = Key::new(ino, k, base);
        let end = Key::new(ino, k, base | 0xFF);
        loop {
            let (key, loc) = match self.idx_next(&from)? {
                Some(x) if x.0 <= end => x,
                _ => break,
            };
            if let Some(u) = used.get_mut((key.key & 0xFF) as usize) {
                *u = true;
            }
            self.read_at(&key, loc)?;
            let p = self.payload();
            let mut r = Reader::new(p);
            let (val, dt, nlen) = if k == kind::DENT {
                (r.u64()?, r.u8()?, r.u8()? as usize)
            } else {
                (0, 0, r.u8()? as usize)
            };
            if r.bytes(nlen)? == name {
                return Ok(Ok((key.key, val, dt)));
            }
            from = Key::new(ino, k, key.key.checked_add(1).ok_or(Error::Corrupt)?);
        }
        match used.iter().position(|u| !*u) {
            Some(i) => Ok(Err(base | i as u64)),
            None => Err(Error::NoSpace),
        }
    }

    pub(crate) fn write_dent(&mut self, dir: u64, key: u64, child: u64, dtype: u8, name: &[u8], flags: u8) -> Result<()> {
        let mut p = [0u8; 8 + 1 + 1 + NAME_MAX];
        let len = {
            let mut w = Writer::new(&mut p);
            w.u64(child)?;
            w.u8(dtype)?;
            w.u8(name.len() as u8)?;
            w.bytes(name)?;
            w.pos()
        };
        let payload = p.get(..len).ok_or(Error::Invalid)?;
        self.put_record(HEAD_META, rtype::DENT, flags, Key::new(dir, kind::DENT, key), payload)?;
        Ok(())
    }

    fn del_key(&mut self, key: Key, flags: u8) -> Result<()> {
        self.delete_range(key, key, flags)
    }

    fn add_orphan(&mut self, ino: u64, flags: u8) -> Result<()> {
        self.put_record(HEAD_META, rtype::ORPHAN, flags, Key::new(0, kind::ORPHAN, ino), &[])?;
        Ok(())
    }

    /// Look `name` up in directory `dir`.
    pub fn lookup(&mut self, dir: u64, name: &[u8]) -> Result<Inode> {
        self.dir_inode(dir)?;
        if name == b"." {
            return self.getattr(dir);
        }
        if name == b".." {
            let d = self.getattr(dir)?;
            return self.getattr(d.parent);
        }
        if name.len() > NAME_MAX {
            return Err(Error::NameTooLong);
        }
        match self.find_dent(dir, name)? {
            Ok(d) => self.getattr(d.ino),
            Err(_) => Err(Error::NotFound),
        }
    }

    /// Create a node of any type except symlink (regular, dir, char/block device, fifo, socket).
    pub fn create(&mut self, dir: u64, name: &[u8], args: &CreateArgs, now: Timespec) -> Result<Inode> {
        let ft = FileType::from_mode(args.mode).ok_or(Error::Invalid)?;
        if ft == FileType::Symlink {
            return Err(Error::Invalid);
        }
        self.create_node(dir, name, args, now, None)
    }

    /// Create a directory.
    pub fn mkdir(&mut self, dir: u64, name: &[u8], mode: u32, uid: u32, gid: u32, now: Timespec) -> Result<Inode> {
        let args = CreateArgs { mode: S_IFDIR | (mode & 0o7777), uid, gid, rdev: 0 };
        self.create_node(dir, name, &args, now, None)
    }

    /// Create a symbolic link to `target`.
    pub fn symlink(&mut self, dir: u64, name: &[u8], target: &[u8], uid: u32, gid: u32, now: Timespec) -> Result<Inode> {
        if target.is_empty() {
            return Err(Error::NotFound);
        }
        if target.len() > SYMLINK_MAX {
            return Err(Error::NameTooLong);
        }
        let args = CreateArgs { mode: S_IFLNK | 0o777, uid, gid, rdev: 0 };
        self.create_node(dir, name, &args, now, Some(target))
    }

    fn create_node(&mut self, dir: u64, name: &[u8], args: &CreateArgs, now: Timespec, target: Option<&[u8]>) -> Result<Inode> {
        let r = self.create_node_op(dir, name, args, now, target);
        self.end_op(r)
    }

    fn create_node_op(&mut self, dir: u64, name: &[u8], args: &CreateArgs, now: Timespec, target: Option<&[u8]>) -> Result<Inode> {
        check_name(name)?;
        self.begin_mutation(RESERVE_SEGS)?;
        self.check_capacity(4096)?;
        let mut d = self.dir_inode(dir)?;
        if d.nlink == 0 {
            return Err(Error::NotFound);
        }
        let key = match self.find_dent(dir, name)? {
            Ok(_) => return Err(Error::Exists),
            Err(k) => k,
        };
        let is_dir = args.mode & S_IFMT == S_IFDIR;
        if is_dir && d.nlink >= u32::MAX - 1 {
            return Err(Error::TooManyLinks);
        }
        let ino = self.next_ino;
        self.next_ino = self.next_ino.saturating_add(1);
        let node = Inode {
            ino,
            mode: args.mode,
            uid: args.uid,
            gid: args.gid,
            nlink: if is_dir { 2 } else { 1 },
            size: target.map_or(0, |t| t.len() as u64),
            atime: now,
            mtime: now,
            ctime: now,
            rdev: args.rdev,
            flags: 0,
            generation: (ino as u32).wrapping_mul(2_654_435_761),
            parent: if is_dir { dir } else { 0 },
        };
        if let Some(t) = target {
            self.put_record(HEAD_META, rtype::DATA, FLAG_CONT, Key::new(ino, kind::DATA, 0), t)?;
        }
        self.write_inode(&node, FLAG_CONT)?;
        self.write_dent(dir, key, ino, dtype_of(node.mode), name, FLAG_CONT)?;
        d.size = d.size.saturating_add(1);
        if is_dir {
            d.nlink = d.nlink.saturating_add(1);
        }
        d.mtime = now;
        d.ctime = now;
        self.write_inode(&d, 0)?;
        Ok(node)
    }

    /// Add a hard link `name` in `dir` to inode `ino`.
    pub fn link(&mut self, ino: u64, dir: u64, name: &[u8], now: Timespec) -> Result<Inode> {
        let r = self.link_op(ino, dir, name, now);
        self.end_op(r)
    }

    fn link_op(&mut self, ino: u64, dir: u64, name: &[u8], now: Timespec) -> Result<Inode> {
        check_name(name)?;
        self.begin_mutation(RESERVE_SEGS)?;
        let mut i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Error::NotPermitted);
        }
        if i.nlink == 0 {
            return Err(Error::NotFound);
        }
        if i.nlink >= u32::MAX - 1 {
            return Err(Error::TooManyLinks);
        }
        let mut d = self.dir_inode(dir)?;
        let key = match self.find_dent(dir, name)? {
            Ok(_) => return Err(Error::Exists),
            Err(k) => k,
        };
        self.check_reserved((3 * REC_HDR + NAME_MAX + 10 + 2 * crate::engine::format::INODE_SIZE) as u64)?;
        i.nlink += 1;
        i.ctime = now;
        self.write_dent(dir, key, ino, dtype_of(i.mode), name, FLAG_CONT)?;
        self.write_inode(&i, FLAG_CONT)?;
        d.size = d.size.saturating_add(1);
        d.mtime = now;
        d.ctime = now;
        self.write_inode(&d, 0)?;
        Ok(i)
    }

    /// Remove the non-directory entry `name` from `dir`. When the link count drops to zero the
    /// inode goes to the orphan list; [`Engine::evict`] reclaims it once the VFS drops it.
    pub fn unlink(&mut self, dir: u64, name: &[u8], now: Timespec) -> Result<()> {
        self.remove_entry(dir, name, now, false)
    }

    /// Remove the empty directory `name` from `dir`.
    pub fn rmdir(&mut self, dir: u64, name: &[u8], now: Timespec) -> Result<()> {
        self.remove_entry(dir, name, now, true)
    }

    fn remove_entry(&mut self, dir: u64, name: &[u8], now: Timespec, want_dir: bool) -> Result<()> {
        let r = self.remove_entry_op(dir, name, now, want_dir);
        self.end_op(r)
    }

    fn remove_entry_op(&mut self, dir: u64, name: &[u8], now: Timespec, want_dir: bool) -> Result<()> {
        if name == b"." {
            return Err(Error::Invalid);
        }
        if name == b".." {
            return Err(Error::NotEmpty);
        }
        check_name(name)?;
        self.begin_mutation(RESERVE_DELETE)?;
        let mut d = self.dir_inode(dir)?;
        let de = match self.find_dent(dir, name)? {
            Ok(x) => x,
            Err(_) => return Err(Error::NotFound),
        };
        let mut t = self.getattr(de.ino)?;
        if want_dir {
            if !t.is_dir() {
                return Err(Error::NotDir);
            }
            if t.size != 0 {
                return Err(Error::NotEmpty);
            }
        } else if t.is_dir() {
            return Err(Error::IsDir);
        }
        self.del_key(Key::new(dir, kind::DENT, de.key), FLAG_CONT)?;
        if want_dir {
            t.nlink = 0;
            d.nlink = d.nlink.saturating_sub(1);
        } else {
            t.nlink = t.nlink.saturating_sub(1);
        }
        t.ctime = now;
        self.write_inode(&t, FLAG_CONT)?;
        if t.nlink == 0 {
            self.add_orphan(t.ino, FLAG_CONT)?;
        }
        d.size = d.size.saturating_sub(1);
        d.mtime = now;
        d.ctime = now;
        self.write_inode(&d, 0)
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

    fn is_ancestor(&mut self, anc: u64, mut d: u64) -> Result<bool> {
        let mut guard = 0u32;
        loop {
            if d == anc {
                return Ok(true);
            }
            if d == ROOT_INO {
                return Ok(false);
            }
            d = self.getattr(d)?.parent;
            guard += 1;
            if guard > 100_000 {
                return Err(Error::Corrupt);
            }
        }
    }

    /// Rename `oname` in `odir` to `nname` in `ndir`, with `RENAME_NOREPLACE` /
    /// `RENAME_EXCHANGE` semantics. An overwritten target loses a link (and is orphaned if it
    /// has none left: the caller evicts it).
    #[allow(clippy::too_many_arguments)]
    pub fn rename(&mut self, odir: u64, oname: &[u8], ndir: u64, nname: &[u8], flags: u32, now: Timespec) -> Result<()> {
        let r = self.rename_op(odir, oname, ndir, nname, flags, now);
        self.end_op(r)
    }

    #[allow(clippy::too_many_arguments)]
    fn rename_op(&mut self, odir: u64, oname: &[u8], ndir: u64, nname: &[u8], flags: u32, now: Timespec) -> Result<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0 || flags == (RENAME_NOREPLACE | RENAME_EXCHANGE) {
            return Err(Error::Invalid);
        }
        check_name(oname)?;
        check_name(nname)?;
        self.begin_mutation(RESERVE_DELETE)?;
        let mut od = self.dir_inode(odir)?;
        let mut nd = if ndir == odir { od } else { self.dir_inode(ndir)? };
        let src = match self.find_dent(odir, oname)? {
            Ok(x) => x,
            Err(_) => return Err(Error::NotFound),
        };
        let dst = self.find_dent(ndir, nname)?;
        let mut s = self.getattr(src.ino)?;
        if let Ok(dd) = dst {
            if dd.ino == src.ino {
                // same inode (hard links or same name): nothing to do
                return Ok(());
            }
        }
        if flags & RENAME_NOREPLACE != 0 && dst.is_ok() {
            return Err(Error::Exists);
        }
        if s.is_dir() && ndir != odir && self.is_ancestor(src.ino, ndir)? {
            return Err(Error::Invalid);
        }
        if flags & RENAME_EXCHANGE != 0 {
            let dd = match dst {
                Ok(d) => d,
                Err(_) => return Err(Error::NotFound),
            };
            let mut t = self.getattr(dd.ino)?;
            if t.is_dir() && ndir != odir && self.is_ancestor(t.ino, odir)? {
                return Err(Error::Invalid);
            }
            self.write_dent(odir, src.key, t.ino, dtype_of(t.mode), oname, FLAG_CONT)?;
            self.write_dent(ndir, dd.key, s.ino, dtype_of(s.mode), nname, FLAG_CONT)?;
            if ndir != odir {
                if s.is_dir() {
                    s.parent = ndir;
                    od.nlink = od.nlink.saturating_sub(1);
                    nd.nlink = nd.nlink.saturating_add(1);
                }
                if t.is_dir() {
                    t.parent = odir;
                    nd.nlink = nd.nlink.saturating_sub(1);
                    od.nlink = od.nlink.saturating_add(1);
                }
            }
            s.ctime = now;
            t.ctime = now;
            self.write_inode(&s, FLAG_CONT)?;
            self.write_inode(&t, FLAG_CONT)?;
            od.mtime = now;
            od.ctime = now;
            if ndir != odir {
                nd.mtime = now;
                nd.ctime = now;
                self.write_inode(&nd, FLAG_CONT)?;
            }
            return self.write_inode(&od, 0);
        }
        let mut victim: Option<Inode> = None;
        let nkey = match dst {
            Ok(dd) => {
                let t = self.getattr(dd.ino)?;
                if s.is_dir() && !t.is_dir() {
                    return Err(Error::NotDir);
                }
                if !s.is_dir() && t.is_dir() {
                    return Err(Error::IsDir);
                }
                if t.is_dir() && t.size != 0 {
                    return Err(Error::NotEmpty);
                }
                victim = Some(t);
                dd.key
            }
            Err(k) => k,
        };
        // the new entry first: a failure between the two leaves the inode reachable
        self.write_dent(ndir, nkey, s.ino, dtype_of(s.mode), nname, FLAG_CONT)?;
        self.del_key(Key::new(odir, kind::DENT, src.key), FLAG_CONT)?;
        s.ctime = now;
        if s.is_dir() && ndir != odir {
            s.parent = ndir;
        }
        self.write_inode(&s, FLAG_CONT)?;
        if let Some(mut t) = victim {
            if t.is_dir() {
                t.nlink = 0;
                nd.nlink = nd.nlink.saturating_sub(1);
            } else {
                t.nlink = t.nlink.saturating_sub(1);
            }
            t.ctime = now;
            self.write_inode(&t, FLAG_CONT)?;
            if t.nlink == 0 {
                self.add_orphan(t.ino, FLAG_CONT)?;
            }
        } else {
            nd.size = nd.size.saturating_add(1);
        }
        if ndir == odir {
            nd.size = nd.size.saturating_sub(1);
            nd.mtime = now;
            nd.ctime = now;
            return self.write_inode(&nd, 0);
        }
        od.size = od.size.saturating_sub(1);
        if s.is_dir() {
            od.nlink = od.nlink.saturating_sub(1);
            nd.nlink = nd.nlink.saturating_add(1);
        }
        od.mtime = now;
        od.ctime = now;
        nd.mtime = now;
        nd.ctime = now;
        self.write_inode(&od, FLAG_CONT)?;
        self.write_inode(&nd, 0)
    }

    /// Read the target of symlink `ino` into `buf`; returns its length.
    pub fn readlink(&mut self, ino: u64, buf: &mut [u8]) -> Result<usize> {
        let i = self.getattr(ino)?;
        if i.mode & S_IFMT != S_IFLNK {
            return Err(Error::Invalid);
        }
        let n = (i.size as usize).min(buf.len());
        self.read_data(&i, 0, buf.get_mut(..n).ok_or(Error::Invalid)?)
    }

    /// Read up to `buf.len()` bytes of file `ino` at `off`; returns the count (0 at EOF).
    pub fn read(&mut self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
        let i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Error::IsDir);
        }
        self.read_data(&i, off, buf)
    }

    fn read_data(&mut self, i: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
        if off >= i.size {
            return Ok(0);
        }
        let n = ((i.size - off).min(buf.len() as u64)) as usize;
        let mut done = 0usize;
        while done < n {
            let pos = off.saturating_add(done as u64);
            let blk = pos / BS;
            let bo = (pos % BS) as usize;
            let take = (BS as usize - bo).min(n - done);
            let out = buf.get_mut(done..done.saturating_add(take)).ok_or(Error::Invalid)?;
            match self.read_key(&Key::new(i.ino, kind::DATA, blk))? {
                Some(plen) => {
                    let p = self.payload();
                    out.fill(0);
                    if let Some(src) = p.get(bo..plen.min(p.len())) {
                        let k = src.len().min(out.len());
                        if let (Some(d), Some(s)) = (out.get_mut(..k), src.get(..k)) {
                            d.copy_from_slice(s);
                        }
                    }
                }
                None => out.fill(0),
            }
            done += take;
        }
        Ok(n)
    }

    /// SEEK_DATA: the first offset >= `off` inside a data block of file `ino` (4 KiB blocks, the
    /// index's granularity: a block that has a data record is data, even if it holds zeros).
    /// `Ok(None)` when there is no data at or after `off` before EOF, and for `off` at or past
    /// EOF (the caller answers ENXIO).
    pub fn seek_data(&mut self, ino: u64, off: u64) -> Result<Option<u64>> {
        let i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Error::IsDir);
        }
        if off >= i.size {
            return Ok(None);
        }
        match self.idx_next(&Key::new(ino, kind::DATA, off / BS))? {
            Some((k, _)) if k.ino == ino && k.kind == kind::DATA => {
                let at = k.key.saturating_mul(BS).max(off);
                Ok(if at < i.size { Some(at) } else { None })
            }
            _ => Ok(None),
        }
    }

    /// SEEK_HOLE: the first offset >= `off` inside a hole of file `ino` (a 4 KiB block without
    /// a data record), or EOF, which always counts as a hole. `Err(NoSuchAddress)` (ENXIO) for
    /// `off` at or past EOF.
    pub fn seek_hole(&mut self, ino: u64, off: u64) -> Result<u64> {
        let i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Error::IsDir);
        }
        if off >= i.size {
            return Err(Error::NoSuchAddress);
        }
        let mut blk = off / BS;
        loop {
            let start = blk.saturating_mul(BS);
            if start >= i.size {
                return Ok(i.size);
            }
            match self.idx_next(&Key::new(ino, kind::DATA, blk))? {
                Some((k, _)) if k.ino == ino && k.kind == kind::DATA && k.key == blk => {
                    blk = blk.saturating_add(1);
                }
                _ => return Ok(start.max(off)),
            }
        }
    }

    /// Cut the file's data at byte `at`: drop blocks past it and zero the tail of the block
    /// containing it. Records go to the metadata head with `flags` on the last one.
    pub(crate) fn cut_data(&mut self, ino: u64, at: u64, flags: u8) -> Result<()> {
        let blk = at / BS;
        let r = (at % BS) as usize;
        let first_dead = if r == 0 { blk } else { blk.saturating_add(1) };
        if r != 0 {
            if let Some(plen) = self.read_key(&Key::new(ino, kind::DATA, blk))? {
                if plen > r {
                    let mut tmp = core::mem::replace(&mut self.buf2, P::Vec::new());
                    tmp.clear();
                    let res = tmp
                        .try_extend_from_slice(self.payload().get(..r).unwrap_or(&[]))
                        .and_then(|_| {
                            self.put_record(HEAD_META, rtype::DATA, FLAG_CONT, Key::new(ino, kind::DATA, blk), tmp.as_slice())
                        });
                    self.buf2 = tmp;
                    res?;
                }
            }
        }
        self.delete_range(Key::new(ino, kind::DATA, first_dead), Key::new(ino, kind::DATA, u64::MAX), flags)
    }

    /// Write `data` to file `ino` at `off`; returns the count written.
    pub fn write(&mut self, ino: u64, off: u64, data: &[u8], now: Timespec) -> Result<usize> {
        let r = self.write_op(ino, off, data, now);
        self.end_op(r)
    }

    fn write_op(&mut self, ino: u64, off: u64, data: &[u8], now: Timespec) -> Result<usize> {
        let end = off.checked_add(data.len() as u64).ok_or(Error::FileTooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(Error::FileTooBig);
        }
        self.begin_mutation(RESERVE_SEGS)?;
        let mut i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Error::IsDir);
        }
        if i.mode & S_IFMT == S_IFLNK {
            return Err(Error::Invalid);
        }
        // short write when the filesystem is nearly full
        let room = self
            .capacity_bytes()
            .saturating_sub(self.live_bytes())
            .saturating_sub(self.reserved_space())
            .saturating_sub(4096);
        if room == 0 && !data.is_empty() {
            return Err(Error::NoSpace);
        }
        let data = data.get(..data.len().min(usize::try_from(room).unwrap_or(usize::MAX))).ok_or(Error::Invalid)?;
        if off > i.size {
            // make sure nothing stale shows up in the gap
            self.cut_data(ino, i.size, 0)?;
        }
        let mut done = 0usize;
        let mut opened = self.log.opened;
        let need_free = RESERVE_SEGS.saturating_add(self.segtab_segments());
        let mut blockbuf = core::mem::replace(&mut self.buf2, P::Vec::new());
        let res = (|| -> Result<()> {
            while done < data.len() {
                let pos = off.saturating_add(done as u64);
                let blk = pos / BS;
                let bo = (pos % BS) as usize;
                let take = (BS as usize - bo).min(data.len() - done);
                let key = Key::new(ino, kind::DATA, blk);
                blockbuf.clear();
                if bo != 0 || take != BS as usize {
                    if self.read_key(&key)?.is_some() {
                        blockbuf.try_extend_from_slice(self.payload())?;
                    }
                    // bytes of the old block beyond the old EOF are stale
                    let valid = i.size.saturating_sub(blk.saturating_mul(BS)).min(BS) as usize;
                    if blockbuf.len() > valid {
                        blockbuf.truncate(valid);
                    }
                }
                if blockbuf.len() < bo.saturating_add(take) {
                    blockbuf.try_resize(bo.saturating_add(take), 0)?;
                }
                let src = data.get(done..done.saturating_add(take)).ok_or(Error::Invalid)?;
                let dst = blockbuf.as_mut_slice().get_mut(bo..).ok_or(Error::Invalid)?;
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = *s;
                }
                self.put_record(HEAD_HOT, rtype::DATA, 0, key, blockbuf.as_slice())?;
                done = done.saturating_add(take);
                self.log.stats.user_bytes = self.log.stats.user_bytes.saturating_add(take as u64);
                // a long write consumes segments: keep the reserve (GC) and the checkpoint bounds
                let short = self.log.opened != opened && self.log.free_count() < need_free;
                opened = self.log.opened;
                if short || self.should_checkpoint() {
                    // the inode covers what is written so far
                    let cur = off.saturating_add(done as u64);
                    if cur > i.size {
                        i.size = cur;
                    }
                    i.mtime = now;
                    i.ctime = now;
                    self.write_inode(&i, 0)?;
                    if self.should_checkpoint() {
                        self.checkpoint()?;
                    }
                    self.ensure_space(need_free)?;
                }
            }
            Ok(())
        })();
        self.buf2 = blockbuf;
        match res {
            Ok(()) => {}
            // out of space part-way: a short write
            Err(Error::NoSpace) if done > 0 => {}
            Err(e) => return Err(e),
        }
        let end = off.saturating_add(done as u64);
        if end > i.size {
            i.size = end;
        }
        i.mtime = now;
        i.ctime = now;
        self.write_inode(&i, 0)?;
        Ok(done)
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
        if let Some(m) = a.mode {
            i.mode = (i.mode & S_IFMT) | (m & 0o7777);
        }
        if let Some(u) = a.uid {
            i.uid = u;
        }
        if let Some(g) = a.gid {
            i.gid = g;
        }
        if let Some(t) = a.atime {
            i.atime = t;
        }
        if let Some(t) = a.mtime {
            i.mtime = t;
        }
        if let Some(f) = a.flags {
            i.flags = f;
        }
        i.ctime = a.ctime.unwrap_or(now);
        self.write_inode(&i, flags_last)?;
        Ok(i)
    }

    /// List directory `dir` from `cookie` (0 to start). `f(name, ino, type, next_cookie)`
    /// returns false to stop. Cookies are stable: they are the entries' index keys.
    pub fn readdir(&mut self, dir: u64, cookie: u64, f: DirFiller<'_>) -> Result<()> {
        let d = self.dir_inode(dir)?;
        let mut c = cookie;
        if c == 0 {
            if !f(b".", dir, FileType::Dir, 1) {
                return Ok(());
            }
            c = 1;
        }
        if c == 1 {
            if !f(b"..", d.parent, FileType::Dir, 2) {
                return Ok(());
            }
            c = 2;
        }
        let mut from = Key::new(dir, kind::DENT, c);
        loop {
            let (key, loc) = match self.idx_next(&from)? {
                Some((k, l)) if k.ino == dir && k.kind == kind::DENT => (k, l),
                _ => return Ok(()),
            };
            self.read_at(&key, loc)?;
            let p = self.payload();
            let mut r = Reader::new(p);
            let ino = r.u64()?;
            let dt = r.u8()?;
            let nl = r.u8()? as usize;
            let name = r.bytes(nl)?;
            // no name hash reaches u64::MAX; a forged key there would make the cookie stall
            let next = key.key.checked_add(1).ok_or(Error::Corrupt)?;
            if !f(name, ino, ftype_of_dtype(dt), next) {
                return Ok(());
            }
            from = Key::new(dir, kind::DENT, next);
        }
    }

    /// Get xattr `name` of `ino` into `buf`; with an empty `buf`, return the value size.
    pub fn getxattr(&mut self, ino: u64, name: &[u8], buf: &mut [u8]) -> Result<usize> {
        self.getattr(ino)?;
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return Err(Error::Range);
        }
        let key = match self.find_named(ino, kind::XATTR, name)? {
            Ok((k, _, _)) => k,
            Err(_) => return Err(Error::NoData),
        };
        self.read_key(&Key::new(ino, kind::XATTR, key))?.ok_or(Error::Corrupt)?;
        let p = self.payload();
        let nl = *p.first().ok_or(Error::Corrupt)? as usize;
        let v = p.get(1 + nl..).ok_or(Error::Corrupt)?;
        if buf.is_empty() {
            return Ok(v.len());
        }
        if buf.len() < v.len() {
            return Err(Error::Range);
        }
        buf.get_mut(..v.len()).ok_or(Error::Range)?.copy_from_slice(v);
        Ok(v.len())
    }

    /// Largest xattr value this filesystem holds: `XATTR_VALUE_MAX` (64 KiB), or less when an
    /// XATTR record with a 255-byte name and that value would not fit in one segment (records
    /// never span segments; the log needs room for the segment header, padding and a write
    /// unit: 16 KiB segments with 512-byte units hold 15 472 bytes).
    pub fn xattr_value_max(&self) -> usize {
        let seg = self.sb.segment_size as usize;
        let overhead = 3 * REC_HDR + self.sb.write_unit as usize + 1 + XATTR_NAME_MAX;
        seg.saturating_sub(overhead).min(XATTR_VALUE_MAX)
    }

    /// Set xattr `name` of `ino` (flags: `XATTR_CREATE`, `XATTR_REPLACE`).
    pub fn setxattr(&mut self, ino: u64, name: &[u8], value: &[u8], flags: u32, now: Timespec) -> Result<()> {
        let r = self.setxattr_op(ino, name, value, flags, now);
        self.end_op(r)
    }

    fn setxattr_op(&mut self, ino: u64, name: &[u8], value: &[u8], flags: u32, now: Timespec) -> Result<()> {
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return Err(Error::Range);
        }
        if value.len() > self.xattr_value_max() {
            return Err(Error::Range);
        }
        self.begin_mutation(RESERVE_SEGS)?;
        let mut i = self.getattr(ino)?;
        let key = match self.find_named(ino, kind::XATTR, name)? {
            Ok((k, _, _)) => {
                if flags & XATTR_CREATE != 0 {
                    return Err(Error::Exists);
                }
                k
            }
            Err(k) => {
                if flags & XATTR_REPLACE != 0 {
                    return Err(Error::NoData);
                }
                k
            }
        };
        self.check_reserved((2 * REC_HDR + 1 + name.len() + value.len() + crate::engine::format::INODE_SIZE) as u64)?;
        let mut p = core::mem::replace(&mut self.buf2, P::Vec::new());
        p.clear();
        let res = p
            .try_push(name.len() as u8)
            .and_then(|_| p.try_extend_from_slice(name))
            .and_then(|_| p.try_extend_from_slice(value))
            .and_then(|_| self.put_record(HEAD_META, rtype::XATTR, FLAG_CONT, Key::new(ino, kind::XATTR, key), p.as_slice()));
        self.buf2 = p;
        res?;
        i.ctime = now;
        self.write_inode(&i, 0)
    }

    /// List xattr names of `ino`, each followed by a NUL, into `buf`; with an empty `buf`,
    /// return the size needed.
    pub fn listxattr(&mut self, ino: u64, buf: &mut [u8]) -> Result<usize> {
        self.getattr(ino)?;
        let mut from = Key::new(ino, kind::XATTR, 0);
        let mut total = 0usize;
        loop {
            let (key, loc) = match self.idx_next(&from)? {
                Some((k, l)) if k.ino == ino && k.kind == kind::XATTR => (k, l),
                _ => break,
            };
            self.read_at(&key, loc)?;
            let p = self.payload();
            let nl = *p.first().ok_or(Error::Corrupt)? as usize;
            let name = p.get(1..1 + nl).ok_or(Error::Corrupt)?;
            if !buf.is_empty() {
                let dst = buf.get_mut(total..total.saturating_add(nl).saturating_add(1)).ok_or(Error::Range)?;
                if let Some((last, head)) = dst.split_last_mut() {
                    head.copy_from_slice(name);
                    *last = 0;
                }
            }
            total = total.saturating_add(nl).saturating_add(1);
            // no name hash reaches u64::MAX; a forged key there would repeat forever
            from = Key::new(ino, kind::XATTR, key.key.checked_add(1).ok_or(Error::Corrupt)?);
        }
        Ok(total)
    }

    /// Remove xattr `name` of `ino`.
    pub fn removexattr(&mut self, ino: u64, name: &[u8], now: Timespec) -> Result<()> {
        let r = self.removexattr_op(ino, name, now);
        self.end_op(r)
    }

    fn removexattr_op(&mut self, ino: u64, name: &[u8], now: Timespec) -> Result<()> {
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return Err(Error::Range);
        }
        self.begin_mutation(RESERVE_DELETE)?;
        let mut i = self.getattr(ino)?;
        let key = match self.find_named(ino, kind::XATTR, name)? {
            Ok((k, _, _)) => k,
            Err(_) => return Err(Error::NoData),
        };
        self.del_key(Key::new(ino, kind::XATTR, key), FLAG_CONT)?;
        i.ctime = now;
        self.write_inode(&i, 0)
    }

    /// Make the file's data and metadata durable: flush the log heads (no checkpoint unless a
    /// head lost its chain).
    pub fn fsync(&mut self, ino: u64) -> Result<()> {
        self.getattr(ino)?;
        if self.opts.read_only {
            return Ok(());
        }
        if self.log.failed {
            return Err(Error::ReadOnly);
        }
        if self.log.need_checkpoint || self.log.has_failed_seg() {
            return self.checkpoint();
        }
        self.log.flush_all()?;
        if self.log.has_failed_seg() {
            // a program failed while writing out: relocate and make everything durable
            return self.checkpoint();
        }
        Ok(())
    }
}
