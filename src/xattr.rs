// SPDX-License-Identifier: GPL-2.0

//! Extended attributes: the `xattr_handler` callbacks (the handler table is in shim.c),
//! `listxattr`, and the LSM's `initxattrs` for new inodes.

use kernel::bindings;
use kernel::error::from_result;
use kernel::ffi::{c_char, c_int, c_void};
use kernel::prelude::*;
use crate::engine::format::Timespec;
use crate::inode::refresh;
use crate::kfs::{capable_sys_admin, kerr, Dentry, Inode, XattrHandler, Xattrs};
use crate::super_::SbInfo;

/// What `ferrofs_initxattrs` needs: the new inode in the engine.
pub(crate) struct SecCtx<'a> {
    pub(crate) info: &'a SbInfo,
    pub(crate) ino: u64,
    pub(crate) now: Timespec,
}

/// `initxattrs` callback of `security_inode_init_security` (`kfs::init_security`): store each
/// LSM attribute as `security.NAME`.
///
/// # Safety
///
/// Called by the LSM only, from `kfs::init_security`, with the `SecCtx` given there.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_initxattrs(_inode: *mut bindings::inode, xattrs: *const bindings::xattr, fs_data: *mut c_void) -> c_int {
    // SAFETY: `fs_data` is the `SecCtx` that `kfs::init_security` passed, alive during the
    // call; the LSM passes its array of attributes, ended by a null name.
    let (ctx, xattrs) = unsafe { (&*(fs_data as *const SecCtx<'_>), Xattrs::from_raw(xattrs)) };
    let mut i = 0usize;
    while let Some((suffix, val)) = xattrs.get(i) {
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
    0
}

/// The full xattr name: the handler's prefix followed by `name`.
fn xattr_name(h: &XattrHandler, name: &CStr, out: &mut [u8; 256]) -> Result<usize> {
    let (prefix, name) = (h.prefix(), name.as_bytes());
    let len = prefix.len() + name.len();
    if len > out.len() || name.is_empty() {
        return Err(ERANGE);
    }
    out[..prefix.len()].copy_from_slice(prefix);
    out[prefix.len()..len].copy_from_slice(name);
    Ok(len)
}

/// `xattr_handler::get` (named in shim.c's handler table).
///
/// # Safety
///
/// Called by the VFS only, through one of our handlers.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferrofs_xattr_get(
    h: *const bindings::xattr_handler,
    _dentry: *mut bindings::dentry,
    inode: *mut bindings::inode,
    name: *const c_char,
    buffer: *mut c_void,
    size: usize,
) -> c_int {
    // SAFETY: VFS xattr get contract: our handler, a live ferrofs inode, a NUL-terminated name,
    // and `buffer` null or a kernel buffer of `size` bytes (vfs_getxattr, or an in-kernel
    // caller; not user memory), all for the call.
    let (h, inode, name, out) = unsafe {
        let out = if size == 0 || buffer.is_null() { None } else { Some(core::slice::from_raw_parts_mut(buffer as *mut u8, size)) };
        (XattrHandler::from_raw(h), Inode::from_raw(inode), CStr::from_char_ptr(name), out)
    };
    from_result(|| {
        let mut full = [0u8; 256];
        let len = xattr_name(h, name, &mut full)?;
        let name = &full[..len];
        let n = match out {
            // the size probe (file_remove_privs, getxattr(2) with size 0): no buffer at all
            None => inode.info().lock().getxattr_len(inode.ino(), name).map_err(kerr)?,
            // the engine fills the kernel buffer directly (ERANGE if the value is longer)
            Some(out) => inode.info().lock().getxattr(inode.ino(), name, out).map_err(kerr)?,
        };
        Ok(n as c_int)
    })
}

/// `xattr_handler::set` (named in shim.c's handler table); a null value removes.
///
/// # Safety
///
/// Called by the VFS only, through one of our handlers.
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
    // SAFETY: VFS xattr set contract: our handler, a live ferrofs inode (locked), a
    // NUL-terminated name, and `value` null (remove) or `size` bytes (a kernel buffer from
    // vfs_setxattr), all for the call.
    let (h, inode, name, value) = unsafe {
        let value = if value.is_null() { None } else { Some(core::slice::from_raw_parts(value as *const u8, size)) };
        (XattrHandler::from_raw(h), Inode::from_raw(inode), CStr::from_char_ptr(name), value)
    };
    from_result(|| {
        let mut full = [0u8; 256];
        let len = xattr_name(h, name, &mut full)?;
        let (info, t, ino) = (inode.info(), inode.now(), inode.ino());
        let mut fs = info.lock();
        match value {
            None => fs.removexattr(ino, &full[..len], t).map_err(kerr)?,
            Some(v) => fs.setxattr(ino, &full[..len], v, flags as u32, t).map_err(kerr)?,
        }
        refresh(&mut fs, inode)?;
        Ok(0)
    })
}

/// `inode_operations::listxattr`.
///
/// # Safety
///
/// Called by the VFS only, with a live ferrofs dentry and a kernel buffer of `size` bytes.
pub(crate) unsafe extern "C" fn listxattr(dentry: *mut bindings::dentry, list: *mut c_char, size: usize) -> isize {
    // SAFETY: VFS listxattr contract: a live ferrofs dentry and, when `size` is not 0, `list` a
    // kernel buffer of `size` bytes (vfs_listxattr), for the call.
    let (dentry, out) = unsafe {
        let out: &mut [u8] = if size == 0 { &mut [] } else { core::slice::from_raw_parts_mut(list as *mut u8, size) };
        (Dentry::from_raw(dentry), out)
    };
    from_result(|| {
        let inode = dentry.inode().ok_or(ENOENT)?;
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
        let mut visible = |name: &[u8]| -> bool { !name.starts_with(b"trusted.") || *admin.get_or_insert_with(capable_sys_admin) };
        let mut total = 0usize;
        let mut out = out;
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
    })
}
