// SPDX-License-Identifier: GPL-2.0

//! Extended attributes: the `xattr_handler` callbacks (the handler table is in shim.c),
//! `listxattr`, and the LSM's `initxattrs` for new inodes.

use core::ptr;
use kernel::bindings;
use kernel::error::from_result;
use kernel::ffi::{c_char, c_int, c_void};
use kernel::prelude::*;
use crate::engine::format::Timespec;
use crate::shim;
use crate::inode::refresh;
use crate::kfs::{cstr, kerr, Dentry, Inode};
use crate::super_::SbInfo;

/// What `ferrofs_initxattrs` needs: the new inode in the engine.
pub(crate) struct SecCtx<'a> {
    pub(crate) info: &'a SbInfo,
    pub(crate) ino: u64,
    pub(crate) now: Timespec,
}

/// `initxattrs` callback of `security_inode_init_security`: store each LSM attribute as
/// `security.NAME`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_initxattrs(_inode: *mut bindings::inode, xattrs: *const bindings::xattr, fs_data: *mut c_void) -> c_int {
    // SAFETY: `fs_data` is the `SecCtx` that `make_node` passed, alive during the call.
    let ctx = unsafe { &*(fs_data as *const SecCtx<'_>) };
    let mut i = 0usize;
    loop {
        let mut value: *mut c_void = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: the LSM passes an array ended by an entry with a null name.
        let name = unsafe { shim::ferrofs_xattr_entry(xattrs, i, &mut value, &mut len) };
        if name.is_null() {
            return 0;
        }
        // SAFETY: a NUL-terminated suffix owned by the LSM for the call.
        let suffix = unsafe { cstr(name) };
        let val: &[u8] = if value.is_null() || len == 0 {
            &[]
        } else {
            // SAFETY: `value` holds `len` bytes for the call.
            unsafe { core::slice::from_raw_parts(value as *const u8, len) }
        };
        const PREFIX: &[u8] = b"security.";
        let mut full = [0u8; 256];
        let n = PREFIX.len() + suffix.len();
        let Some(dst) = full.get_mut(..n) else {
            return ERANGE.to_errno();
        };
        let (p, s) = dst.split_at_mut(PREFIX.len());
        p.copy_from_slice(PREFIX);
        s.copy_from_slice(suffix);
        let r = ctx.info.lock().setxattr(ctx.ino, dst, val, 0, ctx.now);
        if let Err(e) = r {
            return kerr(e).to_errno();
        }
        i += 1;
    }
}

/// The full xattr name: the handler's prefix followed by `name`.
///
/// # Safety
///
/// `h` is a ferrofs xattr handler and `name` a NUL-terminated string.
pub(crate) unsafe fn xattr_name(h: *const bindings::xattr_handler, name: *const c_char, out: &mut [u8; 256]) -> Result<usize> {
    // SAFETY: per the contract.
    let (prefix, name) = unsafe { (cstr(shim::ferrofs_xattr_handler_prefix(h)), cstr(name)) };
    let len = prefix.len() + name.len();
    if len > out.len() || name.is_empty() {
        return Err(ERANGE);
    }
    out[..prefix.len()].copy_from_slice(prefix);
    out[prefix.len()..len].copy_from_slice(name);
    Ok(len)
}

/// `xattr_handler::get` (named in shim.c's handler table).
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_xattr_get(
    h: *const bindings::xattr_handler,
    _dentry: *mut bindings::dentry,
    inode: *mut bindings::inode,
    name: *const c_char,
    buffer: *mut c_void,
    size: usize,
) -> c_int {
    from_result(|| {
        let mut full = [0u8; 256];
        // SAFETY: the VFS passes our handler and a NUL-terminated name.
        let len = unsafe { xattr_name(h, name, &mut full)? };
        // SAFETY: the VFS passes a live ferrofs inode.
        let inode = unsafe { Inode::from_raw(inode) };
        let name = &full[..len];
        let n = if size == 0 || buffer.is_null() {
            // the size probe (file_remove_privs, getxattr(2) with size 0): no buffer at all
            inode.info().lock().getxattr_len(inode.ino(), name).map_err(kerr)?
        } else {
            // SAFETY: `buffer` is a kernel buffer of `size` bytes (vfs_getxattr, or an
            // in-kernel caller), not user memory: the engine fills it directly (ERANGE if the
            // value is longer).
            let out = unsafe { core::slice::from_raw_parts_mut(buffer as *mut u8, size) };
            inode.info().lock().getxattr(inode.ino(), name, out).map_err(kerr)?
        };
        Ok(n as c_int)
    })
}

/// `xattr_handler::set` (named in shim.c's handler table); a null value removes.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_xattr_set(
    h: *const bindings::xattr_handler,
    _idmap: *mut bindings::mnt_idmap,
    _dentry: *mut bindings::dentry,
    inode: *mut bindings::inode,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: c_int,
) -> c_int {
    from_result(|| {
        let mut full = [0u8; 256];
        // SAFETY: the VFS passes our handler and a NUL-terminated name.
        let len = unsafe { xattr_name(h, name, &mut full)? };
        // SAFETY: the VFS passes a live ferrofs inode, locked.
        let inode = unsafe { Inode::from_raw(inode) };
        let (info, t, ino) = (inode.info(), inode.now(), inode.ino());
        let mut fs = info.lock();
        if value.is_null() {
            fs.removexattr(ino, &full[..len], t).map_err(kerr)?;
        } else {
            // SAFETY: a non-null `value` holds `size` bytes for the call (a kernel buffer from
            // vfs_setxattr).
            let v = unsafe { core::slice::from_raw_parts(value as *const u8, size) };
            fs.setxattr(ino, &full[..len], v, flags as u32, t).map_err(kerr)?;
        }
        refresh(&mut fs, inode)?;
        Ok(0)
    })
}

pub(crate) unsafe extern "C" fn listxattr(dentry: *mut bindings::dentry, list: *mut c_char, size: usize) -> isize {
    let res = (|| -> Result<isize> {
        // SAFETY: VFS listxattr contract: `dentry` is a live ferrofs dentry.
        let inode = unsafe { Dentry::from_raw(dentry) }.inode().ok_or(ENOENT)?;
        let (info, ino) = (inode.info(), inode.ino());
        let (all, n) = {
            let mut fs = info.lock();
            let need = fs.listxattr(ino, &mut []).map_err(kerr)?;
            let mut all = KVVec::<u8>::from_elem(0u8, need, GFP_KERNEL)?;
            let n = fs.listxattr(ino, all.as_mut_slice()).map_err(kerr)?;
            (all, n)
        };
        let all = all.as_slice().get(..n).ok_or(EIO)?;
        // trusted.* names only for CAP_SYS_ADMIN (the VFS checks get/set, not list), as ubifs
        let mut admin: Option<bool> = None;
        let mut visible = |name: &[u8]| -> bool {
            if !name.starts_with(b"trusted.") {
                return true;
            }
            // SAFETY: a capability test of the calling task.
            *admin.get_or_insert_with(|| unsafe { bindings::capable(bindings::CAP_SYS_ADMIN as c_int) })
        };
        let mut total = 0usize;
        let mut out: &mut [u8] = if size == 0 {
            &mut []
        } else {
            // SAFETY: `list` is a kernel buffer of `size` bytes from vfs_listxattr.
            unsafe { core::slice::from_raw_parts_mut(list as *mut u8, size) }
        };
        for name in all.split_inclusive(|&b| b == 0) {
            if name.len() <= 1 || !visible(name) {
                continue;
            }
            total += name.len();
            if size != 0 {
                let Some((dst, rest)) = core::mem::take(&mut out).split_at_mut_checked(name.len()) else {
                    return Err(ERANGE);
                };
                dst.copy_from_slice(name);
                out = rest;
            }
        }
        Ok(total as isize)
    })();
    match res {
        Ok(n) => n,
        Err(e) => e.to_errno() as isize,
    }
}
