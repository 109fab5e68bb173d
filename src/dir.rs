// SPDX-License-Identifier: GPL-2.0

//! Directories: `iterate_shared` (readdir) and the directory llseek.

use kernel::bindings;
use kernel::error::from_result;
use kernel::ffi::c_int;
use kernel::prelude::*;
use crate::engine::format::{FileType, NAME_MAX};
use crate::shim;
use crate::kfs::{kerr, Inode};

/// Directory llseek: cookies are opaque 63-bit values.
pub(crate) unsafe extern "C" fn dir_llseek(file: *mut bindings::file, offset: bindings::loff_t, whence: c_int) -> bindings::loff_t {
    // SAFETY: VFS llseek contract.
    unsafe { bindings::generic_file_llseek_size(file, offset, whence, i64::MAX, i64::MAX) }
}

/// Entries collected under the engine lock, emitted after it is dropped (emitting copies to
/// user memory, which may fault on a ferrofs mapping and need the lock).
pub(crate) const DIR_BATCH: usize = 8192;

pub(crate) unsafe extern "C" fn iterate_shared(file: *mut bindings::file, ctx: *mut bindings::dir_context) -> c_int {
    from_result(|| {
        // SAFETY: VFS iterate_shared contract: `file` is an open ferrofs directory.
        let inode = unsafe { Inode::from_file(file) };
        let (info, ino) = (inode.info(), inode.ino());
        let mut batch = KVVec::<u8>::with_capacity(DIR_BATCH + NAME_MAX + 32, GFP_KERNEL)?;
        loop {
            // SAFETY: `u8` needs no drop; emptying the vector keeps its capacity.
            unsafe { batch.set_len(0) };
            // SAFETY: `ctx` is valid for the call.
            let start = unsafe { (*ctx).pos } as u64;
            let mut full = false;
            let mut oom = false;
            {
                let mut fs = info.lock();
                let mut fill = |name: &[u8], ino: u64, ft: FileType, next: u64| -> bool {
                    if batch.len() >= DIR_BATCH {
                        full = true;
                        return false;
                    }
                    let ok = batch.extend_from_slice(&ino.to_le_bytes(), GFP_KERNEL).is_ok()
                        && batch.extend_from_slice(&next.to_le_bytes(), GFP_KERNEL).is_ok()
                        && batch.push(ft.dtype(), GFP_KERNEL).is_ok()
                        && batch.push(name.len().min(255) as u8, GFP_KERNEL).is_ok()
                        && batch.extend_from_slice(name, GFP_KERNEL).is_ok();
                    if !ok {
                        oom = true;
                    }
                    ok
                };
                fs.readdir(ino, start, &mut fill).map_err(kerr)?;
            }
            if oom {
                return Err(ENOMEM);
            }
            let mut p = batch.as_slice();
            while p.len() >= 18 {
                let eino = u64::from_le_bytes(p[0..8].try_into().unwrap_or([0; 8]));
                let next = u64::from_le_bytes(p[8..16].try_into().unwrap_or([0; 8]));
                let dt = p[16];
                let nl = p[17] as usize;
                let Some(name) = p.get(18..18 + nl) else { break };
                // SAFETY: `ctx` is valid; `name` is `nl` readable bytes.
                if !unsafe { shim::ferrofs_dir_emit(ctx, name.as_ptr().cast(), nl as c_int, eino, u32::from(dt)) } {
                    return Ok(0);
                }
                // SAFETY: as above.
                unsafe { (*ctx).pos = next as i64 };
                p = &p[18 + nl..];
            }
            if !full {
                return Ok(0);
            }
        }
    })
}
