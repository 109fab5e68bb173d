// SPDX-License-Identifier: GPL-2.0

//! ferrofs: a log-structured flash filesystem.
//!
//! This crate root registers the filesystem type; the kernel layer's files are listed by job in
//! docs/kernel.md (`kfs/` holds the thin wrappers over the raw VFS objects). The engine under
//! `engine/` is safe, `core`-only Rust shared with the userspace tools; all `unsafe` lives in
//! this kernel layer.

use kernel::prelude::*;
use kernel::{bindings, c_str, types::Opaque};

// The engine's items are `pub` for the userspace crate that shares these files; here they are
// reached only from this crate, and not every item is used by the kernel layer yet.
#[allow(unreachable_pub, dead_code, unused_imports)]
mod engine;
mod kplatform;
mod backend;
mod blk;
mod mtd;
mod shim;
mod bg;
mod context;
mod data;
mod dir;
mod file;
mod inode;
mod kfs;
mod namei;
mod ops;
mod super_;
mod xattr;

module! {
    type: Ferrofs,
    name: "ferrofs",
    author: "ferrofs developers",
    description: "ferrofs: a log-structured flash filesystem for raw and managed flash",
    license: "GPL",
}

/// The filesystem type. It must live in static memory: it embeds the lock class keys of every
/// ferrofs superblock's locks (`s_umount`, `s_writers`...), and lockdep accepts only static keys.
#[repr(transparent)]
struct FsType(Opaque<bindings::file_system_type>);

// SAFETY: the kernel reads and links `file_system_type` only under its own `file_systems_lock`
// and `sb_lock`; this crate writes `owner` once in `init`, before registering it.
unsafe impl Sync for FsType {}

static FS_TYPE: FsType = FsType(Opaque::new(bindings::file_system_type {
    name: c_str!("ferrofs").as_char_ptr(),
    init_fs_context: Some(context::init_fs_context),
    kill_sb: Some(kill_sb),
    fs_flags: bindings::FS_REQUIRES_DEV as _,
    // SAFETY: all-zero is valid for the remaining fields (null pointers, empty lists, keys).
    ..unsafe { core::mem::zeroed() }
}));

/// Module state: the filesystem type is registered while this exists.
struct Ferrofs;

/// `file_system_type::kill_sb`: shut the superblock down (`put_super` unmounts the engine),
/// then release the device (MTD: `kill_mtd_super`; block device: `kill_block_super`), then free
/// what a failed `fill_super` left attached.
unsafe extern "C" fn kill_sb(sb: *mut bindings::super_block) {
    // SAFETY: the VFS passes a superblock of ours that was set up by `get_tree_mtd` (which
    // sets `s_mtd` before the superblock exists for anyone) or by `get_tree_bdev` (never sets
    // `s_mtd`); it stays allocated until `kill_sb` returns.
    unsafe {
        if shim::ferrofs_sb_mtd(sb).is_null() {
            shim::ferrofs_kill_block_super(sb);
        } else {
            shim::ferrofs_kill_mtd_super(sb);
        }
        super_::free_unmounted(sb);
    }
}

impl kernel::Module for Ferrofs {
    fn init(module: &'static ThisModule) -> Result<Self> {
        super_::module_init()?;
        // SAFETY: not registered yet, so nothing else reads `FS_TYPE`; module init runs once.
        unsafe { (*FS_TYPE.0.get()).owner = module.as_ptr() };
        // SAFETY: `FS_TYPE` is static, its name a static string, its callbacks valid for the
        // module's lifetime; `drop` unregisters it.
        kernel::error::to_result(unsafe { bindings::register_filesystem(FS_TYPE.0.get()) })
            .inspect_err(|_| super_::module_exit())?;
        pr_info!("registered\n");
        Ok(Ferrofs)
    }
}

impl Drop for Ferrofs {
    fn drop(&mut self) {
        // SAFETY: registered in `init`; no superblock can remain because the module's refcount
        // (held by every mounted superblock through `owner`) is zero when the module is removed.
        let ret = unsafe { bindings::unregister_filesystem(FS_TYPE.0.get()) };
        if ret != 0 {
            pr_err!("unregister_filesystem failed: {}\n", ret);
        }
        super_::module_exit();
        pr_info!("unregistered\n");
    }
}
