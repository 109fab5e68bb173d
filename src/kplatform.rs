// SPDX-License-Identifier: GPL-2.0

//! The engine's allocation interface implemented with the kernel's allocator.
//!
//! Every vector is a `KVVec` (kmalloc, falling back to vmalloc for large buffers such as the
//! segment-sized write buffers). Allocations use `GFP_KERNEL`; every engine call runs inside a
//! `memalloc_nofs_save()` scope (see `super_::EngineGuard`), so reclaim never re-enters a
//! filesystem while the engine lock is held.

use crate::engine::error::Error;
use crate::engine::platform::{FallibleVec, Platform};
use kernel::prelude::*;

/// The kernel platform: memory from `KVVec`.
pub(crate) struct KPlatform;

/// A fallible vector backed by `KVVec`.
pub(crate) struct KernelVec<T>(KVVec<T>);

impl<T> FallibleVec<T> for KernelVec<T> {
    fn new() -> Self {
        KernelVec(KVVec::new())
    }

    fn try_push(&mut self, v: T) -> Result<(), Error> {
        self.0.push(v, GFP_KERNEL).map_err(|_| Error::NoMem)
    }

    fn pop(&mut self) -> Option<T> {
        let len = self.0.len();
        if len == 0 {
            return None;
        }
        let last = len - 1;
        // SAFETY: `last < len`, so the element at `last` is initialised; it is read out exactly
        // once, and the length is reduced right after so it is never read or dropped again.
        let v = unsafe { core::ptr::read(self.0.as_ptr().add(last)) };
        // SAFETY: `last < len <= capacity`, and the element beyond the new length was moved out.
        unsafe { self.0.set_len(last) };
        Some(v)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn truncate(&mut self, len: usize) {
        let old = self.0.len();
        if len >= old {
            return;
        }
        // SAFETY: `len < old`: the elements in `len..old` are initialised; the length is set
        // first, so a panicking drop cannot lead to a double drop (they would leak instead).
        unsafe { self.0.set_len(len) };
        // SAFETY: the `old - len` elements starting at `len` are still initialised (set_len does
        // not touch them), lie inside the allocation, and are no longer reachable through the
        // vector, so each is dropped exactly once here.
        unsafe {
            core::ptr::drop_in_place(core::ptr::slice_from_raw_parts_mut(self.0.as_mut_ptr().add(len), old - len))
        };
    }

    fn as_slice(&self) -> &[T] {
        self.0.as_slice()
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        self.0.as_mut_slice()
    }

    fn try_extend_from_slice(&mut self, s: &[T]) -> Result<(), Error>
    where
        T: Copy,
    {
        self.0.extend_from_slice(s, GFP_KERNEL).map_err(|_| Error::NoMem)
    }

    fn try_resize(&mut self, len: usize, v: T) -> Result<(), Error>
    where
        T: Copy,
    {
        if len <= self.0.len() {
            self.truncate(len);
            return Ok(());
        }
        let extra = len - self.0.len();
        self.0.extend_with(extra, v, GFP_KERNEL).map_err(|_| Error::NoMem)
    }
}

impl Platform for KPlatform {
    type Vec<T> = KernelVec<T>;
}
