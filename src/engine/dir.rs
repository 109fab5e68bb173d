//! Directories: hashed entries (lookup, readdir), creating nodes of every type, links,
//! unlink/rmdir (orphaning the last link), rename with its flags. The hashed-name search is
//! shared with xattrs.

use crate::engine::codec::{Reader, Writer};
use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{
    kind, name_hash, rtype, FileType, Inode, Key, Loc, Timespec, FEATURE_INCOMPAT_LEAN_DELETE, FLAG_CONT, HEAD_META, NAME_MAX, REC_HDR,
    S_IFDIR, S_IFLNK, S_IFMT, SYMLINK_MAX,
};
use crate::engine::fs::{Engine, ROOT_INO};
use crate::engine::inode::CreateArgs;
use crate::engine::platform::Platform;
use crate::engine::space::{RESERVE_DELETE, RESERVE_SEGS};

/// `rename` flag: fail with `Exists` if the target exists.
pub const RENAME_NOREPLACE: u32 = 1;

/// `rename` flag: atomically exchange source and target.
pub const RENAME_EXCHANGE: u32 = 2;

/// Directory entries whose locations [`Engine::readdir`] takes from the index at once.
const DIR_RUN: usize = 32;

/// Readdir callback: `(name, ino, type, next_cookie) -> continue?`.
pub type DirFiller<'a> = &'a mut dyn FnMut(&[u8], u64, FileType, u64) -> bool;

/// A decoded directory entry.
#[derive(Debug, Clone, Copy)]
pub(super) struct Dent {
    pub(super) key: u64,
    pub(super) ino: u64,
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Invalid);
    }
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong);
    }
    Ok(())
}

pub(super) fn dtype_of(mode: u32) -> u8 {
    FileType::from_mode(mode).map_or(0, FileType::dtype)
}

pub(super) fn ftype_of_dtype(d: u8) -> FileType {
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
        // the entries' locations come a run at a time from one walk of the index leaves;
        // entries written together share pages, which the log's read cache reads once
        let last = Key::new(dir, kind::DENT, u64::MAX);
        let mut from = Key::new(dir, kind::DENT, c);
        loop {
            let mut run = [(Key::default(), Loc::default()); DIR_RUN];
            let mut n = 0usize;
            self.idx_walk(&from, &mut |k, l| match run.get_mut(n) {
                Some(slot) if k <= last => {
                    *slot = (k, l);
                    n += 1;
                    n < DIR_RUN
                }
                _ => false,
            })?;
            for &(key, loc) in run.get(..n).unwrap_or(&[]) {
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
            if n < DIR_RUN {
                return Ok(());
            }
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
        let node = self.new_node(args, if is_dir { 2 } else { 1 }, target.map_or(0, |t| t.len() as u64), if is_dir { dir } else { 0 }, now);
        let ino = node.ino;
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

    /// A new inode (the next inode number) with `nlink` links, `size` and `parent`.
    fn new_node(&mut self, args: &CreateArgs, nlink: u32, size: u64, parent: u64, now: Timespec) -> Inode {
        let ino = self.next_ino;
        self.next_ino = self.next_ino.saturating_add(1);
        Inode {
            ino,
            mode: args.mode,
            uid: args.uid,
            gid: args.gid,
            nlink,
            size,
            atime: now,
            mtime: now,
            ctime: now,
            rdev: args.rdev,
            flags: 0,
            generation: (ino as u32).wrapping_mul(2_654_435_761),
            parent,
        }
    }

    /// Create an unnamed regular file for `O_TMPFILE` in directory `dir`: born with no link
    /// and on the orphan list (one atomic group), like an unlinked file still open. [`Engine::link`]
    /// gives it a name and takes it off the list; [`Engine::evict`] deletes it when the VFS
    /// drops it unnamed, and the next mount does after a crash.
    pub fn tmpfile(&mut self, dir: u64, args: &CreateArgs, now: Timespec) -> Result<Inode> {
        let r = self.tmpfile_op(dir, args, now);
        self.end_op(r)
    }

    fn tmpfile_op(&mut self, dir: u64, args: &CreateArgs, now: Timespec) -> Result<Inode> {
        if args.mode & S_IFMT != crate::engine::format::S_IFREG {
            return Err(Error::Invalid);
        }
        self.begin_mutation(RESERVE_SEGS)?;
        self.check_capacity(4096)?;
        let d = self.dir_inode(dir)?;
        if d.nlink == 0 {
            return Err(Error::NotFound);
        }
        let node = self.new_node(args, 0, 0, 0, now);
        self.write_inode(&node, FLAG_CONT)?;
        self.add_orphan(node.ino, 0)?;
        Ok(node)
    }

    /// Add a hard link `name` in `dir` to inode `ino`. An inode without links (an `O_TMPFILE`
    /// file, linked with `linkat`; the VFS allows only that one) must be on the orphan list,
    /// and leaves it in the same atomic group.
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
        let orphan = Key::new(0, kind::ORPHAN, ino);
        if i.nlink == 0 && self.idx_get(&orphan)?.is_none() {
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
        // the orphan entry's DELETE too, for an O_TMPFILE inode
        self.check_reserved((4 * REC_HDR + NAME_MAX + 10 + 2 * crate::engine::format::INODE_SIZE + 2 * Key::SIZE) as u64)?;
        if i.nlink == 0 {
            self.del_key(orphan, FLAG_CONT)?;
        }
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
        self.drop_link(&t, FLAG_CONT)?;
        d.size = d.size.saturating_sub(1);
        d.mtime = now;
        d.ctime = now;
        self.write_inode(&d, 0)
    }

    /// Rename `oname` in `odir` to `nname` in `ndir`, with `RENAME_NOREPLACE` /
    /// `RENAME_EXCHANGE` semantics. An overwritten target loses a link (and is orphaned if it
    /// has none left: the caller evicts it); the directories get `now` as mtime and ctime.
    /// The renamed inode (both, for an exchange) is written only when it is a directory that
    /// moved to another parent (its `..`, with `now` as ctime): otherwise nothing of it
    /// changed on the medium, and its ctime is the caller's to set and store with its other
    /// timestamps ([`Engine::setattr`]; the kernel marks the VFS inode dirty and
    /// `write_inode` stores it, as UBIFS does). A rename then appends its two entries and
    /// the directory inodes only: 283 bytes in place of 420 (`ferrofs-simbench --meta`).
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
            // Only a directory that moved changed on the medium (its parent); the ctimes the
            // caller keeps (see `rename`'s documentation).
            if s.is_dir() && ndir != odir {
                s.ctime = now;
                self.write_inode(&s, FLAG_CONT)?;
            }
            if t.is_dir() && ndir != odir {
                t.ctime = now;
                self.write_inode(&t, FLAG_CONT)?;
            }
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
        if s.is_dir() && ndir != odir {
            s.ctime = now;
            s.parent = ndir;
            self.write_inode(&s, FLAG_CONT)?;
        }
        if let Some(mut t) = victim {
            if t.is_dir() {
                t.nlink = 0;
                nd.nlink = nd.nlink.saturating_sub(1);
            } else {
                t.nlink = t.nlink.saturating_sub(1);
            }
            t.ctime = now;
            self.drop_link(&t, FLAG_CONT)?;
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

    pub(super) fn dir_inode(&mut self, ino: u64) -> Result<Inode> {
        let d = self.getattr(ino)?;
        if !d.is_dir() {
            return Err(Error::NotDir);
        }
        Ok(d)
    }

    /// Find `name` in `dir`: Ok(Ok(dent)) if present, Ok(Err(free key)) if absent.
    pub(super) fn find_dent(&mut self, dir: u64, name: &[u8]) -> Result<core::result::Result<Dent, u64>> {
        self.find_named(dir, kind::DENT, name).map(|r| {
            r.map(|(key, ino, _dtype)| Dent { key, ino })
        })
    }

    /// Generic hashed-name lookup for DENT and XATTR keys.
    pub(super) fn find_named(&mut self, ino: u64, k: u8, name: &[u8]) -> Result<core::result::Result<(u64, u64, u8), u64>> {
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

    pub(super) fn write_dent(&mut self, dir: u64, key: u64, child: u64, dtype: u8, name: &[u8], flags: u8) -> Result<()> {
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

    /// Store `t`, which just lost a link. With links left, its inode record. Without, only its
    /// orphan entry on a volume with lean deletions (`FEATURE_INCOMPAT_LEAN_DELETE`): an inode
    /// on the orphan list has no links whatever its record says (format.md 3.3), so its record
    /// is not rewritten with `nlink` 0 (one record less per unlink: 136 of 482 bytes). The new
    /// `nlink` and `ctime` go to the inode cache, under the record's location, and a getattr
    /// that misses it applies the rule ([`Engine::getattr_cached`]); the ctime of an unlinked
    /// inode is the VFS's to keep. Without the bit, the record with `nlink` 0, then the entry.
    fn drop_link(&mut self, t: &Inode, flags: u8) -> Result<()> {
        if t.nlink != 0 {
            return self.write_inode(t, flags);
        }
        if self.sb.incompat & FEATURE_INCOMPAT_LEAN_DELETE == 0 {
            self.write_inode(t, FLAG_CONT)?;
            return self.add_orphan(t.ino, flags);
        }
        self.add_orphan(t.ino, flags)?;
        if let Some(loc) = self.idx_get(&Key::new(t.ino, kind::INODE, 0))? {
            self.icache_put(loc, t);
        }
        Ok(())
    }

    fn add_orphan(&mut self, ino: u64, flags: u8) -> Result<()> {
        self.put_record(HEAD_META, rtype::ORPHAN, flags, Key::new(0, kind::ORPHAN, ino), &[])?;
        Ok(())
    }
}
