// SPDX-License-Identifier: GPL-2.0

//! `Inode`: a borrowed ferrofs VFS inode, with accessors for what the callbacks read and write.

use kernel::bindings;
use kernel::types::Opaque;

use crate::engine::format::{Inode as EInode, Timespec};
use crate::engine::SetAttr;
use crate::kfs::SuperBlock;
use crate::shim;
use crate::super_::SbInfo;
use crate::inode::FerroInode;

/// A live ferrofs inode.
///
/// # Invariants
///
/// The inode is live (referenced, by the VFS for the callback or by the caller) for the
/// lifetime of the reference, and belongs to a ferrofs superblock between `fill_super` and
/// `put_super` (every inode is evicted before `put_super`).
///
/// Attribute fields are read and written with plain loads and stores, as the C filesystems do:
/// the VFS serialises writers (the inode lock, or `I_NEW`), and readers tolerate a torn view.
#[repr(transparent)]
pub(crate) struct Inode(Opaque<bindings::inode>);

impl Inode {
    /// # Safety
    ///
    /// `p` is a live ferrofs inode of a mounted superblock for `'a` (the type invariant).
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::inode) -> &'a Inode {
        // SAFETY: `Inode` is a transparent wrapper of `bindings::inode`; valid per the contract.
        unsafe { &*p.cast::<Inode>() }
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::inode {
        self.0.get()
    }

    /// The engine's 64-bit inode number (set before the inode is visible and never changed;
    /// `i_ino` holds it truncated to `unsigned long`).
    pub(crate) fn ino(&self) -> u64 {
        // SAFETY: a live ferrofs inode (type invariant) comes from `alloc_inode`.
        unsafe { crate::inode::ferro_ino(self.as_ptr()) }
    }

    /// `i_size_read`.
    pub(crate) fn size(&self) -> i64 {
        // SAFETY: the inode is live (type invariant).
        unsafe { shim::ferrofs_i_size_read(self.as_ptr()) }
    }

    /// `i_size_write` (the caller holds the inode lock, or the folio lock in `write_end`, as the
    /// VFS requires of every `i_size_write`).
    pub(crate) fn set_size(&self, size: i64) {
        // SAFETY: the inode is live (type invariant); writers are serialised by the VFS locks.
        unsafe { shim::ferrofs_i_size_write(self.as_ptr(), size) }
    }

    /// `i_mode`.
    pub(crate) fn mode(&self) -> u32 {
        // SAFETY: the inode is live (type invariant).
        u32::from(unsafe { (*self.as_ptr()).i_mode })
    }

    pub(crate) fn uid(&self) -> u32 {
        // SAFETY: the inode is live (type invariant).
        unsafe { shim::ferrofs_i_uid_read(self.as_ptr()) }
    }

    pub(crate) fn gid(&self) -> u32 {
        // SAFETY: the inode is live (type invariant).
        unsafe { shim::ferrofs_i_gid_read(self.as_ptr()) }
    }

    /// The link count is zero.
    pub(crate) fn is_unlinked(&self) -> bool {
        // SAFETY: the inode is live (type invariant).
        unsafe { (*self.as_ptr()).__bindgen_anon_1.i_nlink == 0 }
    }

    /// `clear_nlink`.
    pub(crate) fn clear_nlink(&self) {
        // SAFETY: the inode is live (type invariant); the VFS callers hold its lock.
        unsafe { bindings::clear_nlink(self.as_ptr()) }
    }

    /// Set `i_ctime`.
    pub(crate) fn set_ctime(&self, t: Timespec) {
        // SAFETY: the inode is live (type invariant); writers are serialised by the VFS locks.
        unsafe {
            (*self.as_ptr()).i_ctime_sec = t.sec;
            (*self.as_ptr()).i_ctime_nsec = t.nsec;
        }
    }

    /// Set `i_ctime` to now (`inode_set_ctime_current`) and `i_mtime` to the same time.
    pub(crate) fn touch_mtime_ctime(&self) {
        // SAFETY: the inode is live (type invariant); the caller (setattr) holds its lock.
        unsafe {
            let t = bindings::inode_set_ctime_current(self.as_ptr());
            (*self.as_ptr()).i_mtime_sec = t.tv_sec;
            (*self.as_ptr()).i_mtime_nsec = t.tv_nsec as u32;
        }
    }

    /// `i_mtime`.
    pub(crate) fn mtime(&self) -> Timespec {
        // SAFETY: the inode is live (type invariant); a plain read (torn views tolerated).
        unsafe { Timespec { sec: (*self.as_ptr()).i_mtime_sec, nsec: (*self.as_ptr()).i_mtime_nsec } }
    }

    /// `i_ctime`.
    pub(crate) fn ctime(&self) -> Timespec {
        // SAFETY: as `mtime`.
        unsafe { Timespec { sec: (*self.as_ptr()).i_ctime_sec, nsec: (*self.as_ptr()).i_ctime_nsec } }
    }

    /// `i_state` (a racy read, as `__generic_file_fsync` does).
    pub(crate) fn state(&self) -> u32 {
        // SAFETY: the inode is live (type invariant).
        unsafe { (*self.as_ptr()).i_state }
    }

    /// The ferrofs part of the inode.
    pub(crate) fn ferro(&self) -> &FerroInode {
        // SAFETY: every ferrofs inode is allocated by `alloc_inode` as the first field of a
        // `repr(C)` `FerroInode`, which lives as long as the inode.
        unsafe { &*self.as_ptr().cast::<FerroInode>() }
    }

    /// The page cache mapping (`i_mapping`).
    pub(crate) fn mapping(&self) -> *mut bindings::address_space {
        // SAFETY: the inode is live (type invariant).
        unsafe { (*self.as_ptr()).i_mapping }
    }

    /// `filemap_write_and_wait` of the inode's mapping, as an errno (0 on success).
    pub(crate) fn write_and_wait(&self) -> kernel::ffi::c_int {
        // SAFETY: the mapping of a live inode is valid.
        unsafe { shim::ferrofs_filemap_write_and_wait(self.mapping()) }
    }

    /// `mapping_set_error` on the inode's mapping.
    pub(crate) fn set_mapping_error(&self, err: kernel::ffi::c_int) {
        // SAFETY: the mapping of a live inode is valid.
        unsafe { shim::ferrofs_mapping_set_error(self.mapping(), err) }
    }

    /// The superblock.
    pub(crate) fn sb(&self) -> &SuperBlock {
        // SAFETY: a live ferrofs inode's `i_sb` is its mounted superblock (type invariant), which
        // outlives the inode.
        unsafe { SuperBlock::from_raw((*self.as_ptr()).i_sb) }
    }

    /// The per-superblock state.
    pub(crate) fn info(&self) -> &SbInfo {
        self.sb().info()
    }

    /// The current time, as the VFS would stamp this inode (`current_time`).
    pub(crate) fn now(&self) -> Timespec {
        // SAFETY: the inode is live (type invariant).
        let t = unsafe { bindings::current_time(self.as_ptr()) };
        Timespec { sec: t.tv_sec, nsec: t.tv_nsec as u32 }
    }

    /// The VFS inode's attributes as an engine `SetAttr` (everything but the size).
    pub(crate) fn attrs(&self) -> SetAttr {
        let p = self.as_ptr();
        // SAFETY: the inode is live (type invariant); plain reads of its attribute fields.
        unsafe {
            SetAttr {
                mode: Some(u32::from((*p).i_mode)),
                uid: Some(shim::ferrofs_i_uid_read(p)),
                gid: Some(shim::ferrofs_i_gid_read(p)),
                size: None,
                atime: Some(Timespec { sec: (*p).i_atime_sec, nsec: (*p).i_atime_nsec }),
                mtime: Some(Timespec { sec: (*p).i_mtime_sec, nsec: (*p).i_mtime_nsec }),
                ctime: Some(Timespec { sec: (*p).i_ctime_sec, nsec: (*p).i_ctime_nsec }),
                flags: None,
            }
        }
    }

    /// Put back attributes saved with `attrs` (mode, owner, times; `None` fields are left).
    /// The caller holds the inode's lock.
    pub(crate) fn restore_attrs(&self, a: &SetAttr) {
        let p = self.as_ptr();
        // SAFETY: the inode is live (type invariant); the caller holds its lock.
        unsafe {
            if let Some(m) = a.mode {
                (*p).i_mode = m as u16;
            }
            if let Some(u) = a.uid {
                shim::ferrofs_i_uid_write(p, u);
            }
            if let Some(g) = a.gid {
                shim::ferrofs_i_gid_write(p, g);
            }
            if let Some(t) = a.atime {
                (*p).i_atime_sec = t.sec;
                (*p).i_atime_nsec = t.nsec;
            }
            if let Some(t) = a.mtime {
                (*p).i_mtime_sec = t.sec;
                (*p).i_mtime_nsec = t.nsec;
            }
            if let Some(t) = a.ctime {
                (*p).i_ctime_sec = t.sec;
                (*p).i_ctime_nsec = t.nsec;
            }
        }
    }

    /// `set_nlink` and `i_ctime` from the engine: what a rename changes in its source and
    /// target inodes, which the VFS does not always lock (a directory renamed inside its
    /// parent), so nothing else of theirs is written.
    pub(crate) fn set_nlink_ctime(&self, nlink: u32, t: Timespec) {
        // SAFETY: the inode is live (type invariant). `vfs_rename` locks the target, except a
        // directory exchanged with another inside one parent, whose link count a rename does
        // not change (the same value is stored again).
        unsafe { bindings::set_nlink(self.as_ptr(), nlink) };
        self.set_ctime(t);
    }

    /// Copy attributes from the engine into the VFS inode. The size of a regular file is taken
    /// only when `with_size` (the page cache may hold data the engine has not been given yet).
    /// The caller holds the inode's lock, or the inode is new (`I_NEW`), as the VFS requires of
    /// attribute writers.
    pub(crate) fn set_attrs(&self, a: &EInode, with_size: bool) {
        let p = self.as_ptr();
        // SAFETY: the inode is live (type invariant); writers are serialised by the caller's
        // lock (see above).
        unsafe {
            (*p).i_mode = a.mode as u16;
            shim::ferrofs_i_uid_write(p, a.uid);
            shim::ferrofs_i_gid_write(p, a.gid);
            bindings::set_nlink(p, a.nlink);
            if with_size || a.mode & bindings::S_IFMT != bindings::S_IFREG {
                shim::ferrofs_i_size_write(p, a.size as i64);
            }
            (*p).i_atime_sec = a.atime.sec;
            (*p).i_atime_nsec = a.atime.nsec;
            (*p).i_mtime_sec = a.mtime.sec;
            (*p).i_mtime_nsec = a.mtime.nsec;
            (*p).i_ctime_sec = a.ctime.sec;
            (*p).i_ctime_nsec = a.ctime.nsec;
            (*p).i_generation = a.generation;
            (*p).i_blocks = a.size.div_ceil(4096) * 8;
        }
    }
}

impl Inode {
    /// The inode of an open ferrofs file.
    ///
    /// # Safety
    ///
    /// `file` is an open file of a mounted ferrofs; the result is used only while it stays open.
    pub(crate) unsafe fn from_file<'a>(file: *const bindings::file) -> &'a Inode {
        // SAFETY: an open file holds a reference to its inode (through its dentry).
        unsafe { Inode::from_raw(shim::ferrofs_file_inode(file)) }
    }
}
