// SPDX-License-Identifier: GPL-2.0

//! The superblock in its three phases: `NewSuperBlock` (being filled by `fill_super`),
//! `SuperBlock` (mounted: `s_fs_info` holds the `SbInfo`), `DyingSuperBlock` (being shut down:
//! `put_super`, `kill_sb`), and the guards of its write sections and `s_umount`.

use core::marker::PhantomData;
use core::pin::Pin;
use core::ptr;

use kernel::alloc::KBox;
use kernel::bindings;
use kernel::error::to_result;
use kernel::ffi::{c_long, c_ulong};
use kernel::prelude::*;
use kernel::types::{ForeignOwnable, Opaque};

use crate::kfs::{BlockDev, InodeRef, MtdDev, Table};
use crate::shim;
use crate::super_::SbInfo;

/// `SB_RDONLY` (include/linux/fs.h, `BIT(0)`): bindgen cannot expand `BIT()`, so it is not in
/// `bindings`.
pub(crate) const SB_RDONLY: u32 = 1 << 0;

/// `SB_NOSEC` (include/linux/fs.h, `BIT(28)`, not in `bindings` for the same reason): the VFS
/// may mark inodes `S_NOSEC` once it found no setuid bit and no `security.capability`, so a
/// write stops probing that xattr through the engine every time.
const SB_NOSEC: c_ulong = 1 << 28;

/// `SB_POSIXACL` (include/linux/fs.h, `BIT(16)`): POSIX ACLs are on (`IS_POSIXACL`). The VFS
/// then leaves the umask to the filesystem, which applies it through `posix_acl_create` (src/acl.rs).
const SB_POSIXACL: c_ulong = 1 << 16;

/// A mounted ferrofs superblock.
///
/// # Invariants
///
/// `s_fs_info` points at the `SbInfo` that `NewSuperBlock::attach` stored, which stays there
/// until `DyingSuperBlock::take_info`, after the last use of this reference (the VFS evicts
/// every inode and ends every callback before `put_super`; the background thread is stopped
/// first), and the superblock outlives the reference.
#[repr(transparent)]
pub(crate) struct SuperBlock(Opaque<bindings::super_block>);

impl SuperBlock {
    /// # Safety
    ///
    /// `sb` must be a mounted ferrofs superblock (between `NewSuperBlock::attach` and
    /// `DyingSuperBlock::take_info`) for `'a`.
    pub(crate) unsafe fn from_raw<'a>(sb: *mut bindings::super_block) -> &'a SuperBlock {
        // SAFETY: `SuperBlock` is a transparent wrapper; valid per the contract.
        unsafe { &*sb.cast::<SuperBlock>() }
    }

    /// The superblock of a dentry.
    ///
    /// # Safety
    ///
    /// `d` must be a live dentry of a mounted ferrofs (`statfs`, `show_options`), for `'a`.
    pub(crate) unsafe fn from_dentry<'a>(d: *mut bindings::dentry) -> &'a SuperBlock {
        // SAFETY: per the contract; a dentry's `d_sb` is fixed and outlives it.
        unsafe { SuperBlock::from_raw((*d).d_sb) }
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::super_block {
        self.0.get()
    }

    /// The per-superblock state.
    pub(crate) fn info(&self) -> &SbInfo {
        // SAFETY: `s_fs_info` is the live pinned box of `SbInfo` that `attach` passed through
        // `into_foreign` and `take_info` takes back after the superblock's last use (type
        // invariant), so it outlives `&self`.
        unsafe { <Pin<KBox<SbInfo>> as ForeignOwnable>::borrow((*self.as_ptr()).s_fs_info) }.get_ref()
    }

    /// Whether the superblock is mounted read-only (`sb_rdonly`).
    pub(crate) fn rdonly(&self) -> bool {
        // SAFETY: the superblock is live (type invariant).
        unsafe { shim::ferrofs_sb_rdonly(self.as_ptr()) }
    }

    /// Enter an internal write section (`sb_start_intwrite`: waits while the filesystem is
    /// frozen), left when the guard is dropped.
    pub(crate) fn start_intwrite(&self) -> IntWrite<'_> {
        // SAFETY: the superblock is live (type invariant); the guard ends the section.
        unsafe { shim::ferrofs_sb_start_intwrite(self.as_ptr()) };
        IntWrite(self)
    }

    /// Enter a page-fault write section (`sb_start_pagefault`), left when the guard is dropped.
    pub(crate) fn start_pagefault(&self) -> PageFault<'_> {
        // SAFETY: the superblock is live (type invariant); the guard ends the section.
        unsafe { shim::ferrofs_sb_start_pagefault(self.as_ptr()) };
        PageFault(self)
    }

    /// Take `s_umount` for reading (released when the guard is dropped). Only from a task that
    /// does not hold it already: `write(2)` and page faults.
    pub(crate) fn umount_read(&self) -> UmountRead<'_> {
        // SAFETY: the superblock is live (type invariant); the guard releases the semaphore.
        unsafe { bindings::down_read(ptr::addr_of_mut!((*self.as_ptr()).s_umount)) };
        UmountRead(self)
    }

    /// Take `s_umount` for reading if no one holds it for writing, without waiting. For a task
    /// inside a page-fault write section: `freeze_super` holds `s_umount` exclusively while it
    /// waits for those sections to end, so waiting for it there would deadlock.
    pub(crate) fn umount_try_read(&self) -> Option<UmountRead<'_>> {
        // SAFETY: the superblock is live (type invariant); on success the guard releases the
        // semaphore.
        let got = unsafe { bindings::down_read_trylock(ptr::addr_of_mut!((*self.as_ptr()).s_umount)) };
        (got != 0).then_some(UmountRead(self))
    }

    /// `sync_filesystem`: write out all dirty data and metadata. The VFS requires (and lockdep
    /// checks) that the caller holds `s_umount`, as `reconfigure` does.
    pub(crate) fn sync_filesystem(&self) -> Result {
        // SAFETY: the superblock is live (type invariant).
        to_result(unsafe { bindings::sync_filesystem(self.as_ptr()) })
    }
}

/// An internal write section of a superblock (`sb_start_intwrite` .. `sb_end_intwrite`).
pub(crate) struct IntWrite<'a>(&'a SuperBlock);

impl Drop for IntWrite<'_> {
    fn drop(&mut self) {
        // SAFETY: ends the section `start_intwrite` entered.
        unsafe { shim::ferrofs_sb_end_intwrite(self.0.as_ptr()) };
    }
}

/// A page-fault write section of a superblock (`sb_start_pagefault` .. `sb_end_pagefault`).
pub(crate) struct PageFault<'a>(&'a SuperBlock);

impl Drop for PageFault<'_> {
    fn drop(&mut self) {
        // SAFETY: ends the section `start_pagefault` entered.
        unsafe { shim::ferrofs_sb_end_pagefault(self.0.as_ptr()) };
    }
}

/// `s_umount` held for reading.
pub(crate) struct UmountRead<'a>(&'a SuperBlock);

impl UmountRead<'_> {
    /// `writeback_inodes_sb`: start writeback of the superblock's dirty inodes and wait for it
    /// to be submitted (`s_umount` held, as it requires).
    pub(crate) fn writeback_inodes(&self) {
        // SAFETY: the superblock is live and we hold `s_umount` (type invariant of the guard).
        unsafe { bindings::writeback_inodes_sb(self.0.as_ptr(), bindings::wb_reason_WB_REASON_FS_FREE_SPACE) };
    }
}

impl Drop for UmountRead<'_> {
    fn drop(&mut self) {
        // SAFETY: releases the read lock `umount_read` took.
        unsafe { bindings::up_read(ptr::addr_of_mut!((*self.0.as_ptr()).s_umount)) };
    }
}

/// What `NewSuperBlock::attach` sets besides the state.
pub(crate) struct SbParams {
    pub(crate) magic: u64,
    pub(crate) ops: &'static Table<bindings::super_operations>,
    pub(crate) max_bytes: i64,
    pub(crate) block_bits: u8,
}

/// A superblock being set up by our `fill_super` (called by `get_tree_mtd`/`get_tree_bdev`,
/// which hold it locked: nobody else uses it yet).
///
/// # Invariants
///
/// The superblock is new, ours to set up, and live for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct NewSuperBlock(Opaque<bindings::super_block>);

impl NewSuperBlock {
    /// # Safety
    ///
    /// `sb` must be a superblock that `get_tree_mtd` or `get_tree_bdev` hands to our
    /// `fill_super`, for `'a` (the duration of the call).
    pub(crate) unsafe fn from_raw<'a>(sb: *mut bindings::super_block) -> &'a NewSuperBlock {
        // SAFETY: `NewSuperBlock` is a transparent wrapper; valid per the contract.
        unsafe { &*sb.cast::<NewSuperBlock>() }
    }

    fn as_ptr(&self) -> *mut bindings::super_block {
        self.0.get()
    }

    /// Whether the mount asked for read-only (`sb_rdonly`).
    pub(crate) fn rdonly(&self) -> bool {
        // SAFETY: the superblock is live (type invariant).
        unsafe { shim::ferrofs_sb_rdonly(self.as_ptr()) }
    }

    /// Serve the filesystem read-only (`SB_RDONLY`).
    pub(crate) fn set_rdonly(&self) {
        // SAFETY: the superblock is ours to set up (type invariant): no concurrent access.
        unsafe { shim::ferrofs_sb_set_rdonly(self.as_ptr()) };
    }

    /// The MTD device `get_tree_mtd` resolved (`s_mtd`), referenced until `kill_mtd_super`.
    pub(crate) fn mtd(&self) -> Option<MtdDev> {
        // SAFETY: the superblock is live (type invariant).
        let mtd = unsafe { shim::ferrofs_sb_mtd(self.as_ptr()) };
        // SAFETY: a non-null `s_mtd` was referenced by `get_tree_mtd` and stays so until
        // `kill_mtd_super`, which runs after the engine (owner of the result) is gone.
        (!mtd.is_null()).then(|| unsafe { MtdDev::from_raw(mtd) })
    }

    /// The block device `get_tree_bdev` opened (`s_bdev`), open until `kill_block_super`.
    pub(crate) fn bdev(&self) -> Option<BlockDev> {
        // SAFETY: the superblock is live (type invariant).
        let bdev = unsafe { shim::ferrofs_sb_bdev(self.as_ptr()) };
        // SAFETY: a non-null `s_bdev` was opened by `get_tree_bdev` and stays open until
        // `kill_block_super`, which runs after the engine (owner of the result) is gone.
        (!bdev.is_null()).then(|| unsafe { BlockDev::from_raw(bdev) })
    }

    /// The superblock's id (`s_id`: the block device's name, "vda", "loop0").
    pub(crate) fn id(&self) -> &[u8] {
        // SAFETY: `s_id` is a NUL-terminated array inside the live superblock (type invariant),
        // not changed while we set it up.
        unsafe { kernel::str::CStr::from_char_ptr(shim::ferrofs_sb_id(self.as_ptr())) }.as_bytes()
    }

    /// Attach the per-superblock state (`s_fs_info`, through `ForeignOwnable`) and the
    /// superblock's parameters and operations; from here it is a mounted `SuperBlock`. The state
    /// comes back through `DyingSuperBlock::take_info` (in `put_super`, or in `kill_sb` when
    /// `fill_super` fails after this).
    pub(crate) fn attach(&self, info: Pin<KBox<SbInfo>>, p: SbParams) -> &SuperBlock {
        let sb = self.as_ptr();
        // SAFETY: the superblock is ours to set up (type invariant); nothing reads
        // `s_fs_info` before `fill_super` returns. The table is static.
        unsafe {
            (*sb).s_fs_info = info.into_foreign() as *mut _;
            (*sb).s_magic = p.magic as c_ulong;
            (*sb).s_op = &p.ops.0;
            (*sb).s_maxbytes = p.max_bytes;
            (*sb).s_blocksize = 1 << p.block_bits;
            (*sb).s_blocksize_bits = p.block_bits;
            (*sb).s_time_gran = 1;
            (*sb).s_flags |= SB_NOSEC | SB_POSIXACL;
            shim::ferrofs_sb_set_xattr(sb);
        }
        // SAFETY: `s_fs_info` holds the state now, until `take_info` (after the last use of
        // the superblock, which outlives `&self`).
        unsafe { SuperBlock::from_raw(sb) }
    }

    /// `d_make_root`: the root dentry from the root inode (whose reference it takes, also on
    /// failure).
    pub(crate) fn set_root(&self, root: InodeRef) -> Result {
        // SAFETY: `root` is a referenced inode of this superblock, whose reference passes to
        // `d_make_root` (which drops it on failure).
        let d = unsafe { bindings::d_make_root(root.into_raw()) };
        if d.is_null() {
            return Err(ENOMEM);
        }
        // SAFETY: the superblock is ours to set up (type invariant).
        unsafe { (*self.as_ptr()).s_root = d };
        Ok(())
    }
}

/// A ferrofs superblock being shut down: in `put_super` (the VFS has evicted every inode and
/// holds `s_umount`) or in `kill_sb`.
///
/// # Invariants
///
/// `sb` is live for `'a`, and no VFS callback other than the caller's can run on it any more:
/// `s_fs_info` is null or the state from `attach`, used by nobody else but the background
/// thread (stopped by `take_info` first). The handle is not `Copy`: `kill` consumes it.
pub(crate) struct DyingSuperBlock<'a> {
    sb: *mut bindings::super_block,
    _sb: PhantomData<&'a bindings::super_block>,
}

impl DyingSuperBlock<'_> {
    /// # Safety
    ///
    /// `sb` must be a ferrofs superblock handed to `put_super` or `kill_sb`, live for `'a`;
    /// one handle per callback.
    pub(crate) unsafe fn from_raw<'a>(sb: *mut bindings::super_block) -> DyingSuperBlock<'a> {
        DyingSuperBlock { sb, _sb: PhantomData }
    }

    /// Whether the superblock is read-only (`sb_rdonly`).
    pub(crate) fn rdonly(&self) -> bool {
        // SAFETY: the superblock is live (type invariant).
        unsafe { shim::ferrofs_sb_rdonly(self.sb) }
    }

    /// Take the per-superblock state back (null `s_fs_info` after it), stopping its
    /// background thread first. `None` if there is none (`put_super` took it, or `fill_super`
    /// failed before `attach`).
    pub(crate) fn take_info(&self) -> Option<Pin<KBox<SbInfo>>> {
        let sb = self.sb;
        // SAFETY: the superblock is live and only we use `s_fs_info` (type invariant).
        let p = unsafe { (*sb).s_fs_info };
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null `s_fs_info` is the box `attach` stored (type invariant); the
        // borrow ends before `from_foreign` below.
        unsafe { <Pin<KBox<SbInfo>> as ForeignOwnable>::borrow(p) }.bg.stop();
        // SAFETY: as above; the thread, the only other user, is stopped, and no borrow of the
        // state remains: it passes back to us, and `s_fs_info` is nulled so it is taken once.
        unsafe {
            (*sb).s_fs_info = ptr::null_mut();
            Some(<Pin<KBox<SbInfo>> as ForeignOwnable>::from_foreign(p))
        }
    }

    /// Release the device (`kill_mtd_super` when `s_mtd` is set, else `kill_block_super`),
    /// after shutting the superblock down (`put_super` runs there for a mounted one), then take
    /// back what a failed `fill_super` left attached.
    pub(crate) fn kill(self) -> Option<Pin<KBox<SbInfo>>> {
        let sb = self.sb;
        // SAFETY: `kill_sb` contract (type invariant; `self` is consumed, so this runs once):
        // the superblock was set up by `get_tree_mtd` (which sets `s_mtd` before anyone sees
        // it) or by `get_tree_bdev` (which never sets it), and stays allocated until `kill_sb`
        // returns.
        unsafe {
            if shim::ferrofs_sb_mtd(sb).is_null() {
                shim::ferrofs_kill_block_super(sb);
            } else {
                shim::ferrofs_kill_mtd_super(sb);
            }
        }
        self.take_info()
    }
}

/// What `statfs` reports.
pub(crate) struct Statfs {
    pub(crate) fs_type: u64,
    pub(crate) bsize: u32,
    pub(crate) frsize: u32,
    pub(crate) blocks: u64,
    pub(crate) bfree: u64,
    pub(crate) bavail: u64,
    pub(crate) files: u64,
    pub(crate) ffree: u64,
    pub(crate) namelen: u32,
    pub(crate) fsid: u64,
}

/// The `kstatfs` a `statfs` call fills.
///
/// # Invariants
///
/// Live and ours to write for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct Kstatfs(Opaque<bindings::kstatfs>);

impl Kstatfs {
    /// # Safety
    ///
    /// `p` is the buffer the VFS passes to `statfs`, live for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::kstatfs) -> &'a Kstatfs {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<Kstatfs>() }
    }

    pub(crate) fn fill(&self, s: &Statfs) {
        // SAFETY: the buffer is ours to write (type invariant).
        unsafe {
            shim::ferrofs_kstatfs_fill(
                self.0.get(),
                s.fs_type as c_long,
                s.bsize,
                s.frsize,
                s.blocks,
                s.bfree,
                s.bavail,
                s.files,
                s.ffree,
                s.namelen,
                s.fsid,
            )
        }
    }
}

/// The `seq_file` of a `show_options` call.
///
/// # Invariants
///
/// Live for the lifetime of the reference.
#[repr(transparent)]
pub(crate) struct SeqFile(Opaque<bindings::seq_file>);

impl SeqFile {
    /// # Safety
    ///
    /// `p` is the `seq_file` the VFS passes to `show_options`, live for `'a`.
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::seq_file) -> &'a SeqFile {
        // SAFETY: a transparent wrapper; valid per the contract.
        unsafe { &*p.cast::<SeqFile>() }
    }

    /// `seq_puts`.
    pub(crate) fn puts(&self, s: &CStr) {
        // SAFETY: live (type invariant); `s` is NUL-terminated.
        unsafe { shim::ferrofs_seq_puts(self.0.get(), s.as_char_ptr()) }
    }
}
