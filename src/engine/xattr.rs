//! Extended attributes: keyed like directory entries (name hash and collision index), value
//! in one record.

use crate::engine::error::{Error, Result};
use crate::engine::flash::Flash;
use crate::engine::format::{
    kind, rtype, Inode, Key, Timespec, FLAG_CONT, HEAD_META, REC_HDR, XATTR_NAME_MAX, XATTR_VALUE_MAX,
};
use crate::engine::fs::Engine;
use crate::engine::inode::SetAttr;
use crate::engine::platform::{FallibleVec, Platform};
use crate::engine::space::{RESERVE_DELETE, RESERVE_SEGS};

/// `setxattr` flag: fail if the attribute exists.
pub const XATTR_CREATE: u32 = 1;

/// `setxattr` flag: fail if the attribute does not exist.
pub const XATTR_REPLACE: u32 = 2;

/// One change of [`Engine::setattr_xattrs`]: set xattr `name` to `Some(value)`, or remove it
/// (`None`; removing an absent attribute is no error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XattrChange<'a> {
    /// The full name (`system.posix_acl_access`).
    pub name: &'a [u8],
    /// The new value, or `None` to remove.
    pub value: Option<&'a [u8]>,
}

impl<P: Platform, F: Flash> Engine<P, F> {
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
                let end = total.checked_add(nl).ok_or(Error::Range)?;
                let dst = buf.get_mut(total..end).ok_or(Error::Range)?;
                // byte copy: no length-mismatch panic path (lengths are equal by construction)
                for (d, s) in dst.iter_mut().zip(name) {
                    *d = *s;
                }
                *buf.get_mut(end).ok_or(Error::Range)? = 0;
            }
            total = total.saturating_add(nl).saturating_add(1);
            // no name hash reaches u64::MAX; a forged key there would repeat forever
            from = Key::new(ino, kind::XATTR, key.key.checked_add(1).ok_or(Error::Corrupt)?);
        }
        Ok(total)
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
        let (key, old) = match self.find_named(ino, kind::XATTR, name)? {
            Ok((k, _, _)) => {
                if flags & XATTR_CREATE != 0 {
                    return Err(Error::Exists);
                }
                (k, self.xattr_bytes(ino, k)?)
            }
            Err(k) => {
                if flags & XATTR_REPLACE != 0 {
                    return Err(Error::NoData);
                }
                (k, 0)
            }
        };
        // the capacity check of every growing operation (not only while a write-back budget is
        // reserved): a full filesystem refuses new values rather than give them the reserve
        // the GC and deletions need; a replacement is charged what it grows
        self.check_capacity(xattr_record(name, value).saturating_sub(old))?;
        self.put_xattr(ino, key, name, value)?;
        i.ctime = now;
        self.write_inode(&i, 0)
    }

    /// Live bytes of the XATTR record under collision key `key` of `ino` (0 if none).
    fn xattr_bytes(&mut self, ino: u64, key: u64) -> Result<u64> {
        Ok(self.idx_get(&Key::new(ino, kind::XATTR, key))?.map_or(0, |l| u64::from(l.bytes())))
    }

    /// Append the XATTR record of `name` = `value` under collision key `key` (part of a group:
    /// the caller's INODE record closes it).
    fn put_xattr(&mut self, ino: u64, key: u64, name: &[u8], value: &[u8]) -> Result<()> {
        let mut p = core::mem::replace(&mut self.buf2, P::Vec::new());
        p.clear();
        let res = p
            .try_push(name.len() as u8)
            .and_then(|_| p.try_extend_from_slice(name))
            .and_then(|_| p.try_extend_from_slice(value))
            .and_then(|_| self.put_record(HEAD_META, rtype::XATTR, FLAG_CONT, Key::new(ino, kind::XATTR, key), p.as_slice()));
        self.buf2 = p;
        res.map(|_| ())
    }

    /// Change xattrs of `ino` and its attributes (every field of `a` but the size, which must
    /// be `None`) in one atomic group: after a crash all of it is there or none. POSIX ACLs
    /// need this: an ACL and the mode bits it implies change together (setfacl, a chmod of a
    /// file with an ACL, the ACLs a new inode inherits from its directory's default ACL).
    pub fn setattr_xattrs(&mut self, ino: u64, changes: &[XattrChange<'_>], a: &SetAttr, now: Timespec) -> Result<Inode> {
        let r = self.setattr_xattrs_op(ino, changes, a, now);
        self.end_op(r)
    }

    fn setattr_xattrs_op(&mut self, ino: u64, changes: &[XattrChange<'_>], a: &SetAttr, now: Timespec) -> Result<Inode> {
        if a.size.is_some() {
            return Err(Error::Invalid);
        }
        // the inode record replaces the old one (no growth)
        let mut need = 0u64;
        let mut sets = false;
        for c in changes {
            if c.name.is_empty() || c.name.len() > XATTR_NAME_MAX {
                return Err(Error::Range);
            }
            if let Some(v) = c.value {
                if v.len() > self.xattr_value_max() {
                    return Err(Error::Range);
                }
                need = need.saturating_add(xattr_record(c.name, v));
                sets = true;
            }
        }
        // removals and attribute changes only: a deletion, as removexattr and setattr
        self.begin_mutation(if sets { RESERVE_SEGS } else { RESERVE_DELETE })?;
        let mut i = self.getattr(ino)?;
        if sets {
            // as setxattr: what the new values grow beyond the records they replace (a
            // removal in the same group is not counted as freeing anything)
            let mut freed = 0u64;
            for c in changes {
                if c.value.is_some() {
                    if let Ok((k, _, _)) = self.find_named(ino, kind::XATTR, c.name)? {
                        freed = freed.saturating_add(self.xattr_bytes(ino, k)?);
                    }
                }
            }
            self.check_capacity(need.saturating_sub(freed))?;
        }
        for c in changes {
            match (self.find_named(ino, kind::XATTR, c.name)?, c.value) {
                (Ok((k, _, _)), None) => self.del_key(Key::new(ino, kind::XATTR, k), FLAG_CONT)?,
                (Err(_), None) => {}
                (Ok((k, _, _)) | Err(k), Some(v)) => self.put_xattr(ino, k, c.name, v)?,
            }
        }
        a.apply(&mut i, now);
        self.write_inode(&i, 0)?;
        Ok(i)
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

    /// Largest xattr value this filesystem holds: `XATTR_VALUE_MAX` (64 KiB), or less when an
    /// XATTR record with a 255-byte name and that value would not fit in one segment (records
    /// never span segments; the log needs room for the segment header, padding and a write
    /// unit: 16 KiB segments with 512-byte units hold 15 472 bytes).
    pub fn xattr_value_max(&self) -> usize {
        let seg = self.sb.segment_size as usize;
        let overhead = 3 * REC_HDR + self.sb.write_unit as usize + 1 + XATTR_NAME_MAX;
        seg.saturating_sub(overhead).min(XATTR_VALUE_MAX)
    }
}

/// Live bytes of the XATTR record of `name` = `value` (header, name length, name, value).
fn xattr_record(name: &[u8], value: &[u8]) -> u64 {
    (REC_HDR + 1 + name.len() + value.len()) as u64
}
