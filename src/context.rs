// SPDX-License-Identifier: GPL-2.0

//! Mounting: the mount options (`commit=`, `gc=`), the `fs_context` callbacks (`init_fs_context`,
//! `parse_param`, `get_tree`, `free`) and remount (`reconfigure`).

use core::ptr;
use kernel::bindings;
use kernel::c_str;
use kernel::error::{from_result, to_result};
use kernel::ffi::c_int;
use kernel::prelude::*;
use crate::engine::error::Error as EError;
use crate::shim;
use crate::bg::{start_bg, stop_bg};
use crate::kfs::{cstr, kerr, sbi, SB_RDONLY};
use crate::super_::{fill_super_bdev, fill_super_mtd};

/// Mount options.
#[derive(Clone, Copy)]
pub(crate) struct MountOpts {
    /// Seconds between periodic checkpoints (`commit=`).
    pub(crate) commit: u32,
    /// Whether background GC runs (`gc=on|off`).
    pub(crate) gc: bool,
}

impl Default for MountOpts {
    fn default() -> Self {
        MountOpts { commit: 5, gc: true }
    }
}

/// `file_system_type::init_fs_context`.
pub(crate) unsafe extern "C" fn init_fs_context(fc: *mut bindings::fs_context) -> c_int {
    from_result(|| {
        let opts = KBox::new(MountOpts::default(), GFP_KERNEL)?;
        // SAFETY: `fc` is valid and ours to set up; ownership of the box passes to the context
        // and comes back in `ferrofs_fc_free`.
        unsafe {
            shim::ferrofs_fc_set_fs_private(fc, KBox::into_raw(opts).cast());
            shim::ferrofs_fc_set_ops(fc);
        }
        Ok(0)
    })
}

/// The mount options being built in `fc`.
///
/// # Safety
///
/// `fc` must be a ferrofs fs_context set up by `init_fs_context` and not yet freed.
pub(crate) unsafe fn fc_opts<'a>(fc: *mut bindings::fs_context) -> &'a mut MountOpts {
    // SAFETY: per the contract, fs_private is the `MountOpts` box set in `init_fs_context`.
    unsafe { &mut *(shim::ferrofs_fc_fs_private(fc) as *mut MountOpts) }
}

/// `fs_context_operations::free`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_fc_free(fc: *mut bindings::fs_context) {
    // SAFETY: `fc` is ours; fs_private is null or the box from `init_fs_context`.
    unsafe {
        let p = shim::ferrofs_fc_fs_private(fc) as *mut MountOpts;
        if !p.is_null() {
            drop(KBox::from_raw(p));
            shim::ferrofs_fc_set_fs_private(fc, ptr::null_mut());
        }
    }
}

/// `fs_context_operations::parse_param`: `commit=SECONDS`, `gc=on|off`. Anything else is left
/// to the VFS (`source`, generic flags such as `ro`), which rejects unknown names by name.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_parse_param(fc: *mut bindings::fs_context, param: *mut bindings::fs_parameter) -> c_int {
    // SAFETY: the VFS passes a valid context and parameter.
    let (key_ptr, val_ptr) = unsafe { (shim::ferrofs_param_key(param), shim::ferrofs_param_string(param)) };
    // SAFETY: `key` is a NUL-terminated string owned by `param`.
    let key = unsafe { cstr(key_ptr) };
    // SAFETY: `val_ptr` is null or a NUL-terminated string owned by `param`.
    let val = if val_ptr.is_null() { None } else { Some(unsafe { cstr(val_ptr) }) };
    // SAFETY: `fc` was set up by `init_fs_context`.
    let opts = unsafe { fc_opts(fc) };
    let bad = || {
        // SAFETY: `fc` and `key_ptr` are valid.
        unsafe { shim::ferrofs_fc_invalid_value(fc, key_ptr) }
    };
    match key {
        b"commit" => match val.and_then(parse_u32) {
            Some(s) if (1..=3600).contains(&s) => opts.commit = s,
            _ => return bad(),
        },
        b"gc" => match val {
            Some(b"on") => opts.gc = true,
            Some(b"off") => opts.gc = false,
            _ => return bad(),
        },
        _ => return -(bindings::ENOPARAM as c_int),
    }
    0
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
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_get_tree(fc: *mut bindings::fs_context) -> c_int {
    // SAFETY: `fc` is valid; its source is null or a NUL-terminated string it owns.
    let src = unsafe { shim::ferrofs_fc_source(fc) };
    // SAFETY: non-null, so a NUL-terminated string owned by `fc` (see above).
    if !src.is_null() && !is_mtd_source(unsafe { cstr(src) }) {
        // SAFETY: `fc` is valid; `fill_super_bdev` matches the callback type.
        return unsafe { shim::ferrofs_get_tree_bdev(fc, fill_super_bdev) };
    }
    // SAFETY: `fc` is valid; `fill_super_mtd` matches the callback type.
    unsafe { shim::ferrofs_get_tree_mtd(fc, fill_super_mtd) }
}

/// `fs_context_operations::reconfigure` (remount).
///
/// rw -> ro: write everything out (`sync_filesystem`), stop the background thread, and switch
/// the engine to read-only (a checkpoint, then nothing more is written, unmount included).
/// ro -> rw: switch the engine back (after a read-only mount this finishes the mount: orphans,
/// new log heads, a checkpoint; a root file system is mounted read-only, then remounted
/// read-write) and restart the background thread. Refused when the log is damaged or the
/// volume has unknown read-only features.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_reconfigure(fc: *mut bindings::fs_context) -> c_int {
    from_result(|| {
        // SAFETY: `fc` is a reconfiguration context of a mounted ferrofs.
        let sb = unsafe { shim::ferrofs_fc_root_sb(fc) };
        // SAFETY: as above.
        let (new_flags, old_ro) = unsafe { (shim::ferrofs_fc_sb_flags(fc), shim::ferrofs_sb_rdonly(sb)) };
        let new_ro = new_flags & SB_RDONLY != 0;
        // SAFETY: `sb` is mounted.
        let info = unsafe { sbi(sb) };
        let fc_err = |msg: &'static CStr| {
            // SAFETY: `fc` is valid; the message is a static string.
            Error::from_errno(unsafe { shim::ferrofs_fc_error(fc, msg.as_char_ptr()) })
        };
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
                    return Err(fc_err(c_str!("the log is damaged (see the kernel log); the volume stays read-only")));
                }
                Err(EError::ReadOnly) => {
                    return Err(fc_err(c_str!("the volume has features this version can only read; it stays read-only")));
                }
                Err(e) => {
                    pr_err!("{}: cannot remount read-write: error {:?}\n", info.dev, e);
                    return Err(kerr(e));
                }
            }
            // SAFETY: `sb` is mounted and the caller holds s_umount.
            unsafe { start_bg(sb) };
            pr_info!("{}: remounted read-write\n", info.dev);
            return Ok(0);
        }
        // SAFETY: `sb` is mounted and the caller holds s_umount.
        to_result(unsafe { bindings::sync_filesystem(sb) })?;
        if !old_ro && new_ro {
            stop_bg(info);
            let r = info.lock().set_read_only(true);
            if let Err(e) = r {
                // stay read-write, as the VFS does when this fails
                pr_err!("{}: cannot remount read-only: checkpoint error {:?}\n", info.dev, e);
                let _ = info.lock().set_read_only(false);
                // SAFETY: as above.
                unsafe { start_bg(sb) };
                return Err(kerr(e));
            }
            info.publish_stats(&mut info.lock());
        }
        Ok(0)
    })
}
