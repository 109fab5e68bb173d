// SPDX-License-Identifier: GPL-2.0

//! debugfs: the module's root directory (`/sys/kernel/debug/ferrofs`) and a directory of
//! read-only `u64` counters per mounted superblock (`StatsDir`), each removed on drop.

use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use kernel::bindings;
use kernel::c_str;
use kernel::prelude::*;

use crate::shim;

/// The root directory, or null when the module holds none. Set by `DebugfsRoot::create`.
static ROOT: AtomicPtr<bindings::dentry> = AtomicPtr::new(ptr::null_mut());

/// The module's debugfs root directory, removed (with everything left in it) on drop.
///
/// # Invariants
///
/// There is one such value, made at module init and dropped at module exit, when no
/// `StatsDir` (each lives in a mounted superblock's state) can remain.
pub(crate) struct DebugfsRoot(());

impl DebugfsRoot {
    /// Create `/sys/kernel/debug/ferrofs` with a `live_superblocks` counter. Without debugfs the
    /// calls return error pointers, which the other debugfs calls accept and ignore.
    ///
    /// # Safety
    ///
    /// At most one value exists at a time, and it is dropped only when no `StatsDir` remains
    /// (at module exit: every mounted superblock holds a reference to the module).
    pub(crate) unsafe fn create(live: &'static AtomicU64) -> Self {
        // SAFETY: a static name; a null parent is the debugfs root.
        let root = unsafe { shim::ferrofs_debugfs_dir(c_str!("ferrofs").as_char_ptr(), ptr::null_mut()) };
        // SAFETY: the counter is static, so it outlives the file.
        unsafe { shim::ferrofs_debugfs_u64(c_str!("live_superblocks").as_char_ptr(), root, live.as_ptr()) };
        ROOT.store(root, Ordering::Release);
        DebugfsRoot(())
    }
}

impl Drop for DebugfsRoot {
    fn drop(&mut self) {
        // SAFETY: the directory made by `create` (or an error pointer, which debugfs ignores);
        // no `StatsDir` inside it remains (type invariant).
        unsafe { shim::ferrofs_debugfs_remove(ROOT.swap(ptr::null_mut(), Ordering::AcqRel)) };
    }
}

/// A directory under the root holding one read-only `u64` file per counter, which it owns.
/// Dropping it removes the directory (debugfs waits for readers) before the counters are freed.
///
/// # Invariants
///
/// `dir` is the directory `new` made (or an error pointer), whose files point into `vals`;
/// `vals` is not freed before `dir` is removed.
pub(crate) struct StatsDir<const N: usize> {
    dir: *mut bindings::dentry,
    vals: KBox<[AtomicU64; N]>,
}

// SAFETY: the directory may be removed from any thread, and the counters are atomics.
unsafe impl<const N: usize> Send for StatsDir<N> {}
// SAFETY: as above; shared access only reads the pointer or updates atomics.
unsafe impl<const N: usize> Sync for StatsDir<N> {}

impl<const N: usize> StatsDir<N> {
    /// `/sys/kernel/debug/ferrofs/NAME/` with the files `names`, all reading 0 until set.
    pub(crate) fn new(name: &CStr, names: &[&'static CStr; N]) -> Result<Self> {
        let vals = KBox::new([const { AtomicU64::new(0) }; N], GFP_KERNEL)?;
        // SAFETY: `name` is NUL-terminated; the parent is the root, an error pointer or null
        // (the debugfs root), all accepted. The root outlives this directory (`DebugfsRoot`).
        let dir = unsafe { shim::ferrofs_debugfs_dir(name.as_char_ptr(), ROOT.load(Ordering::Acquire)) };
        for (n, v) in names.iter().zip(vals.iter()) {
            // SAFETY: the counter lives in `vals`, freed only after the directory is removed
            // (type invariant).
            unsafe { shim::ferrofs_debugfs_u64(n.as_char_ptr(), dir, v.as_ptr()) };
        }
        Ok(StatsDir { dir, vals })
    }

    /// The counters, in the order of the names given to `new`.
    pub(crate) fn vals(&self) -> &[AtomicU64; N] {
        &self.vals
    }
}

impl<const N: usize> Drop for StatsDir<N> {
    fn drop(&mut self) {
        // SAFETY: the directory made by `new` (type invariant); `vals` is freed after this.
        unsafe { shim::ferrofs_debugfs_remove(self.dir) };
    }
}
