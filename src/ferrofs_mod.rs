// SPDX-License-Identifier: GPL-2.0

//! ferrofs: a log-structured flash filesystem.
//!
//! This crate root registers the filesystem type; the kernel layer's files are listed by job in
//! docs/kernel.md (`kfs/` holds the thin wrappers over the raw VFS objects). The engine under
//! `engine/` is safe, `core`-only Rust shared with the userspace tools; all `unsafe` lives in
//! this kernel layer.

use kernel::prelude::*;
use kernel::{bindings, c_str};

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
mod extents;
mod file;
mod inode;
mod kfs;
mod namei;
mod ops;
mod super_;
mod xattr;
mod acl;
mod fileattr;

module! {
    type: Ferrofs,
    name: "ferrofs",
    author: "ferrofs developers",
    description: "ferrofs: a log-structured flash filesystem for raw and managed flash",
    license: "GPL",
}

/// The filesystem type (static: see `kfs::FsType`).
static FS_TYPE: kfs::FsType = kfs::FsType::new(c_str!("ferrofs"), context::init_fs_context, kill_sb);

/// Module state: the filesystem type is registered, with its inode cache and debugfs root,
/// while this exists.
struct Ferrofs {
    fs: Option<kfs::FsModule>,
}

/// `file_system_type::kill_sb`: shut the superblock down (`put_super` unmounts the engine),
/// then release the device (MTD: `kill_mtd_super`; block device: `kill_block_super`), then free
/// what a failed `fill_super` left attached (nothing is written: the mount wrote its
/// checkpoint already).
///
/// # Safety
///
/// Called by the VFS only, with a superblock of our type.
unsafe extern "C" fn kill_sb(sb: *mut bindings::super_block) {
    // SAFETY: the VFS passes a superblock of ours, allocated until `kill_sb` returns.
    let sb = unsafe { kfs::DyingSuperBlock::from_raw(sb) };
    drop(sb.kill());
}

impl kernel::Module for Ferrofs {
    fn init(module: &'static ThisModule) -> Result<Self> {
        // SAFETY: module init, once; the result lives in the module state, dropped at module
        // exit, when no superblock remains (each holds a reference to this module).
        let fs = unsafe { kfs::FsModule::register(&FS_TYPE, module, &super_::LIVE_SUPERBLOCKS)? };
        pr_info!("registered\n");
        Ok(Ferrofs { fs: Some(fs) })
    }
}

impl Drop for Ferrofs {
    fn drop(&mut self) {
        drop(self.fs.take());
        pr_info!("unregistered\n");
    }
}
