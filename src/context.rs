// SPDX-License-Identifier: GPL-2.0

//! Mounting: the mount options (`commit=`, `gc=`, `read_cache=`), the `fs_context` callbacks (`init_fs_context`,
//! `parse_param`, `get_tree`, `free`) and remount (`reconfigure`).

use kernel::bindings;
use kernel::c_str;
use kernel::error::from_result;
use kernel::ffi::c_int;
use kernel::prelude::*;
use crate::engine::error::Error as EError;
use crate::engine::readcache::READ_CACHE_MAX_BYTES;
use crate::bg::start_bg;
use crate::kfs::{kerr, FsContext, FsParameter};
use crate::super_::{fill_super_bdev, fill_super_mtd};

/// Mount options.
#[derive(Clone, Copy)]
pub(crate) struct MountOpts {
    /// Seconds between periodic commits (`commit=`, `Engine::commit`).
    pub(crate) commit: u32,
    /// Whether background GC runs (`gc=on|off`).
    pub(crate) gc: bool,
    /// KiB of the log's read cache (`read_cache=KIB`, 0: off); `None`: 1/256 of RAM, from
    /// 256 KiB to 4 MiB (`super_::read_cache_bytes`).
    pub(crate) read_cache_kib: Option<u32>,
}

impl Default for MountOpts {
    fn default() -> Self {
        MountOpts { commit: 5, gc: true, read_cache_kib: None }
    }
}

/// `file_system_type::init_fs_context`.
///
/// # Safety
///
/// Called by the VFS only, with a new context of our type.
pub(crate) unsafe extern "C" fn init_fs_context(fc: *mut bindings::fs_context) -> c_int {
    // SAFETY: the VFS passes a new context of our type, ours to set up, for the call.
    let fc = unsafe { FsContext::from_raw(fc) };
    from_result(|| {
        fc.init(KBox::new(MountOpts::default(), GFP_KERNEL)?);
        Ok(0)
    })
}

/// `fs_context_operations::free`.
///
/// # Safety
///
/// Called by the VFS only (named in shim.c's context operations), with one of our contexts.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_fc_free(fc: *mut bindings::fs_context) {
    // SAFETY: the VFS passes a context set up by `init_fs_context`, being freed.
    unsafe { FsContext::from_raw(fc) }.free();
}

/// `fs_context_operations::parse_param`: `commit=SECONDS`, `gc=on|off`, `read_cache=KIB`. Anything else is left
/// to the VFS (`source`, generic flags such as `ro`), which rejects unknown names by name.
///
/// # Safety
///
/// Called by the VFS only (named in shim.c's context operations).
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_parse_param(fc: *mut bindings::fs_context, param: *mut bindings::fs_parameter) -> c_int {
    // SAFETY: the VFS passes one of our contexts and a live parameter, for the call.
    let (fc, param) = unsafe { (FsContext::from_raw(fc), FsParameter::from_raw(param)) };
    from_result(|| {
        let mut opts = fc.opts().ok_or(EINVAL)?;
        let val = param.string();
        match param.key().as_bytes() {
            b"commit" => match val.and_then(parse_u32) {
                Some(s) if (1..=3600).contains(&s) => opts.commit = s,
                // worded as the VFS words it for its own parameters
                _ => return Err(fc.error(c_str!("Bad value for 'commit'"))),
            },
            b"gc" => match val {
                Some(b"on") => opts.gc = true,
                Some(b"off") => opts.gc = false,
                _ => return Err(fc.error(c_str!("Bad value for 'gc'"))),
            },
            b"read_cache" => match val.and_then(parse_u32) {
                Some(k) if k as usize <= READ_CACHE_MAX_BYTES >> 10 => opts.read_cache_kib = Some(k),
                _ => return Err(fc.error(c_str!("Bad value for 'read_cache' (KiB, at most 65536)"))),
            },
            _ => return Err(Error::from_errno(-(bindings::ENOPARAM as c_int))),
        }
        fc.set_opts(opts);
        Ok(0)
    })
}

pub(crate) fn parse_u32(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 9 {
        return None;
    }
    let mut v = 0u32;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u32::from(c - b'0');
    }
    Some(v)
}

/// Whether a mount source names an MTD device (`mtdN`, `mtd:NAME`) rather than a block
/// device path (`/dev/vda`, `/dev/loop0`, `/dev/mtdblock0`).
pub(crate) fn is_mtd_source(src: &[u8]) -> bool {
    match src {
        [b'm', b't', b'd', b':', ..] => true,
        [b'm', b't', b'd', d, ..] => d.is_ascii_digit(),
        _ => false,
    }
}

/// `fs_context_operations::get_tree`: the backend by the source. `mtdN` and `mtd:NAME` go to
/// `get_tree_mtd` (raw flash); anything else is a block device path for `get_tree_bdev` (which
/// reports a missing source or a path that is not a block device itself).
///
/// # Safety
///
/// Called by the VFS only (named in shim.c's context operations).
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_get_tree(fc: *mut bindings::fs_context) -> c_int {
    // SAFETY: the VFS passes one of our contexts, for the call.
    let fc = unsafe { FsContext::from_raw(fc) };
    match fc.source() {
        Some(src) if !is_mtd_source(src) => fc.get_tree_bdev(fill_super_bdev),
        _ => fc.get_tree_mtd(fill_super_mtd),
    }
}

/// `fs_context_operations::reconfigure` (remount).
///
/// rw -> ro: write everything out (`sync_filesystem`), stop the background thread, and switch
/// the engine to read-only (a checkpoint, then nothing more is written, unmount included).
/// ro -> rw: switch the engine back (after a read-only mount this finishes the mount: orphans,
/// new log heads, a checkpoint; a root file system is mounted read-only, then remounted
/// read-write) and restart the background thread. Refused when the log is damaged or the
/// volume has unknown read-only features.
///
/// # Safety
///
/// Called by the VFS only (named in shim.c's context operations), under `s_umount`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_reconfigure(fc: *mut bindings::fs_context) -> c_int {
    // SAFETY: the VFS passes a reconfiguration context of a mounted ferrofs, for the call.
    let fc = unsafe { FsContext::from_raw(fc) };
    from_result(|| {
        let sb = fc.root_sb().ok_or(EINVAL)?;
        let (new_ro, old_ro) = (fc.wants_rdonly(), sb.rdonly());
        let info = sb.info();
        if old_ro && !new_ro {
            let r = {
                let mut fs = info.lock();
                // A read-only MTD (no MTD_WRITEABLE) or block device stays read-only: refused
                // with EROFS and a message, before the engine tries to finish the mount on it.
                match fs.flash().check_writeable(false) {
                    Ok(()) => fs.set_read_only(false),
                    Err(e) => return Err(e),
                }
            };
            match r {
                Ok(()) => {}
                Err(EError::Corrupt) => {
                    return Err(fc.error(c_str!("the log is damaged (see the kernel log); the volume stays read-only")));
                }
                Err(EError::ReadOnly) => {
                    return Err(fc.error(c_str!("the volume has features this version can only read; it stays read-only")));
                }
                Err(e) => {
                    pr_err!("{}: cannot remount read-write: error {:?}\n", info.dev, e);
                    return Err(kerr(e));
                }
            }
            start_bg(sb);
            pr_info!("{}: remounted read-write\n", info.dev);
            return Ok(0);
        }
        sb.sync_filesystem()?;
        if !old_ro && new_ro {
            info.bg.stop();
            let r = info.lock().set_read_only(true);
            if let Err(e) = r {
                // stay read-write, as the VFS does when this fails
                pr_err!("{}: cannot remount read-only: checkpoint error {:?}\n", info.dev, e);
                let _ = info.lock().set_read_only(false);
                start_bg(sb);
                return Err(kerr(e));
            }
            info.publish_stats(&mut info.lock());
        }
        Ok(0)
    })
}
