// SPDX-License-Identifier: GPL-2.0

//! Directories: `iterate_shared` (readdir) and the directory llseek.

use kernel::bindings;
use kernel::error::from_result;
use kernel::ffi::c_int;
use kernel::prelude::*;
use crate::engine::format::{FileType, NAME_MAX};
use crate::kfs::{kerr, DirContext, File};

/// Directory llseek: cookies are opaque 63-bit values.
///
/// # Safety
///
/// Called by the VFS only, with an open ferrofs directory.
pub(crate) unsafe extern "C" fn dir_llseek(file: *mut bindings::file, offset: bindings::loff_t, whence: c_int) -> bindings::loff_t {
    // SAFETY: VFS llseek contract: an open ferrofs directory, for the call.
    unsafe { File::from_raw(file) }.generic_llseek_size(offset, whence, i64::MAX, i64::MAX)
}

/// Entries collected under the engine lock, emitted after it is dropped (emitting copies to
/// user memory, which may fault on a ferrofs mapping and need the lock).
pub(crate) const DIR_BATCH: usize = 8192;

/// `file_operations::iterate_shared` (readdir).
///
/// # Safety
///
/// Called by the VFS only, with an open ferrofs directory and its `getdents` context.
pub(crate) unsafe extern "C" fn iterate_shared(file: *mut bindings::file, ctx: *mut bindings::dir_context) -> c_int {
    // SAFETY: VFS iterate_shared contract: `file` is an open ferrofs directory and `ctx` the
    // call's context, both for the call.
    let (file, ctx) = unsafe { (File::from_raw(file), DirContext::from_raw(ctx)) };
    from_result(|| {
        let inode = file.inode();
        let (info, ino) = (inode.info(), inode.ino());
        // entries: ino (8 bytes LE), next cookie (8), d_type (1), name length (1), name
        let mut batch = KVVec::<u8>::from_elem(0u8, DIR_BATCH + NAME_MAX + 32, GFP_KERNEL)?;
        loop {
            let start = ctx.pos() as u64;
            let mut len = 0usize;
            let mut full = false;
            {
                let mut fs = info.lock();
                let buf = batch.as_mut_slice();
                let mut fill = |name: &[u8], ino: u64, ft: FileType, next: u64| -> bool {
                    let nl = name.len().min(NAME_MAX);
                    // past DIR_BATCH (the buffer has room for one more entry beyond it)
                    let Some(e) = buf.get_mut(len..len + 18 + nl).filter(|_| len < DIR_BATCH) else {
                        full = true;
                        return false;
                    };
                    let (head, ename) = e.split_at_mut(18);
                    head[..8].copy_from_slice(&ino.to_le_bytes());
                    head[8..16].copy_from_slice(&next.to_le_bytes());
                    head[16] = ft.dtype();
                    head[17] = nl as u8;
                    ename.copy_from_slice(name.get(..nl).unwrap_or(&[]));
                    len += 18 + nl;
                    true
                };
                fs.readdir(ino, start, &mut fill).map_err(kerr)?;
            }
            let mut p = batch.as_slice().get(..len).unwrap_or(&[]);
            while p.len() >= 18 {
                let eino = u64::from_le_bytes(p[0..8].try_into().unwrap_or([0; 8]));
                let next = u64::from_le_bytes(p[8..16].try_into().unwrap_or([0; 8]));
                let dt = p[16];
                let nl = p[17] as usize;
                let Some(name) = p.get(18..18 + nl) else { break };
                if !ctx.emit(name, eino, dt) {
                    return Ok(0);
                }
                ctx.set_pos(next as i64);
                p = &p[18 + nl..];
            }
            if !full {
                return Ok(0);
            }
        }
    })
}
