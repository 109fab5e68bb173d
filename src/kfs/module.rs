// SPDX-License-Identifier: GPL-2.0

//! The module's kernel objects: the filesystem type (`FsType`, static) and `FsModule`, which
//! registers it together with the inode cache and the debugfs root and tears all three down
//! on drop.

use core::sync::atomic::AtomicU64;

use kernel::bindings;
use kernel::error::to_result;
use kernel::ffi::c_int;
use kernel::prelude::*;
use kernel::types::Opaque;

use crate::kfs::{no_callbacks, DebugfsRoot, InodeCache, OpsTable};

/// `file_system_type::init_fs_context`.
pub(crate) type InitFsContext = unsafe extern "C" fn(*mut bindings::fs_context) -> c_int;
/// `file_system_type::kill_sb`.
pub(crate) type KillSb = unsafe extern "C" fn(*mut bindings::super_block);

/// A filesystem type. It must live in static memory: it embeds the lock class keys of every
/// superblock's locks (`s_umount`, `s_writers`...), and lockdep accepts only static keys.
#[repr(transparent)]
pub(crate) struct FsType(Opaque<bindings::file_system_type>);

// SAFETY: the contents sit in `Opaque` and Rust never forms a reference to them; the kernel
// reads the type (some fields locklessly: `init_fs_context`, `fs_flags`, `kill_sb`) and links
// it under its own locks; this crate writes `owner` once, in `FsModule::register`, before
// registering it.
unsafe impl Sync for FsType {}

impl FsType {
    /// A type that needs a device (`FS_REQUIRES_DEV`), with the two callbacks.
    pub(crate) const fn new(name: &'static CStr, init: InitFsContext, kill: KillSb) -> Self {
        FsType(Opaque::new(bindings::file_system_type {
            name: name.as_char_ptr(),
            init_fs_context: Some(init),
            kill_sb: Some(kill),
            fs_flags: bindings::FS_REQUIRES_DEV as c_int,
            ..no_callbacks()
        }))
    }
}

// SAFETY: all-zero is a valid `file_system_type` (null pointers and callbacks, empty lists,
// zeroed lock class keys).
unsafe impl OpsTable for bindings::file_system_type {}

/// The registered filesystem type, with the module-wide objects its superblocks use: the
/// inode cache and the debugfs root. Dropping it unregisters the type, then removes the debugfs
/// root, then destroys the inode cache.
///
/// # Invariants
///
/// `fs` is registered while the value lives; the value is dropped only when no superblock of
/// the type remains.
pub(crate) struct FsModule {
    fs: &'static FsType,
    _debugfs: DebugfsRoot,
    _inodes: InodeCache,
}

impl FsModule {
    /// Create the inode cache and the debugfs root (with `live` as its `live_superblocks`),
    /// then register `fs`.
    ///
    /// # Safety
    ///
    /// Called once, from module init, and the result dropped only at module exit: by then no
    /// superblock of `fs` remains, because every one holds a reference to `module`, the owner
    /// set here.
    pub(crate) unsafe fn register(fs: &'static FsType, module: &'static ThisModule, live: &'static AtomicU64) -> Result<Self> {
        // SAFETY: once, at module init; dropped at module exit with the rest (the contract).
        let inodes = unsafe { InodeCache::create()? };
        // SAFETY: as above.
        let debugfs = unsafe { DebugfsRoot::create(live) };
        // SAFETY: not registered yet, so nothing else reads the type.
        unsafe { (*fs.0.get()).owner = module.as_ptr() };
        // SAFETY: the type is static, its name a static string, its callbacks valid for the
        // module's lifetime; `drop` unregisters it. On failure the cache and the root are
        // dropped here.
        to_result(unsafe { bindings::register_filesystem(fs.0.get()) })?;
        Ok(FsModule { fs, _debugfs: debugfs, _inodes: inodes })
    }
}

impl Drop for FsModule {
    fn drop(&mut self) {
        // SAFETY: registered in `register` (type invariant); no superblock remains.
        let ret = unsafe { bindings::unregister_filesystem(self.fs.0.get()) };
        if ret != 0 {
            pr_err!("unregister_filesystem failed: {}\n", ret);
        }
        // the debugfs root, then the inode cache, are dropped after this
    }
}
