// SPDX-License-Identifier: GPL-2.0

//! The calling task and kernel threads: `NofsScope` (a `memalloc_nofs_save` scope), the
//! caller's filesystem ids and capabilities, and the superblock's background thread
//! (`ThreadSlot`, `KthreadCtx`).

use core::marker::PhantomData;
use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};

use kernel::bindings;
use kernel::c_str;
use kernel::ffi::{c_int, c_long, c_uint, c_void};
use kernel::prelude::*;

use crate::kfs::SuperBlock;
use crate::shim;

/// A `memalloc_nofs_save` scope of the calling task: allocations made while it lives do not
/// recurse into filesystem reclaim (which could need a lock the task holds). Ends on drop.
///
/// # Invariants
///
/// `flags` is what the matching `memalloc_nofs_save` returned on this task. The value is not
/// `Send`, so it is dropped on the task that made it.
pub(crate) struct NofsScope {
    flags: c_uint,
    _task_local: PhantomData<*mut ()>,
}

impl NofsScope {
    pub(crate) fn new() -> Self {
        // SAFETY: no preconditions; the saved flags are restored by `drop` on this task.
        let flags = unsafe { shim::ferrofs_memalloc_nofs_save() };
        NofsScope { flags, _task_local: PhantomData }
    }
}

impl Drop for NofsScope {
    fn drop(&mut self) {
        // SAFETY: restores the flags saved by `new` on this task (type invariant).
        unsafe { shim::ferrofs_memalloc_nofs_restore(self.flags) };
    }
}

/// The calling task's filesystem uid and gid, as seen from the initial user namespace.
pub(crate) fn current_fsids() -> (u32, u32) {
    // SAFETY: reads the calling task's credentials; no preconditions.
    unsafe { (shim::ferrofs_current_fsuid(), shim::ferrofs_current_fsgid()) }
}

/// The machine's RAM in bytes (`totalram_pages`).
pub(crate) fn totalram_bytes() -> u64 {
    // SAFETY: reads a global counter; no preconditions.
    unsafe { shim::ferrofs_totalram_bytes() }
}

/// Whether the calling task has `CAP_SYS_ADMIN` (`capable`, which may record its use).
pub(crate) fn capable_sys_admin() -> bool {
    // SAFETY: a capability test of the calling task; no preconditions.
    unsafe { bindings::capable(bindings::CAP_SYS_ADMIN as c_int) }
}

/// The body of a superblock's background thread.
pub(crate) trait SbThread {
    /// Runs on the thread until it returns; `t` gives the thread's own operations (sleep,
    /// stop test), which only the thread itself may call.
    fn run(sb: &SuperBlock, t: &KthreadCtx);
}

/// Operations that only a kernel thread started by `ThreadSlot::start` may call on itself.
///
/// # Invariants
///
/// Exists only on the stack of such a thread (made by its trampoline, not `Send`).
pub(crate) struct KthreadCtx {
    _task_local: PhantomData<*mut ()>,
}

impl KthreadCtx {
    /// Whether the thread was asked to stop (`kthread_should_stop`).
    pub(crate) fn should_stop(&self) -> bool {
        // SAFETY: called on a kthread (type invariant).
        unsafe { bindings::kthread_should_stop() }
    }

    /// Sleep (freezable, interruptible) for up to `ms` milliseconds. Returns false when the
    /// thread is asked to stop, before or after the sleep. The sleep state is set before the
    /// stop test, so a `kthread_stop` after the test still ends the sleep at once; after it the
    /// thread enters the freezer if a system suspend is freezing tasks.
    pub(crate) fn sleep(&self, ms: u32) -> bool {
        let timeout = kernel::time::msecs_to_jiffies(ms) as c_long;
        // SAFETY: called on the kthread itself (type invariant), which the calls below
        // require; `schedule_timeout` returns with the task running.
        unsafe {
            shim::ferrofs_set_current_state(bindings::TASK_INTERRUPTIBLE | bindings::TASK_FREEZABLE);
            if bindings::kthread_should_stop() {
                shim::ferrofs_set_current_state(bindings::TASK_RUNNING);
                return false;
            }
            bindings::schedule_timeout(timeout);
            !bindings::kthread_freezable_should_stop(ptr::null_mut())
        }
    }
}

/// The background thread of a mounted superblock (`SbInfo::bg`), or none.
///
/// # Invariants
///
/// `task` is null or a kthread created by `start` that runs `SbThread::run` with the
/// superblock whose `SbInfo` holds this slot, and that only returns once asked to stop. It is
/// stopped (`stop`, `drop`) before that `SbInfo` is taken back from `s_fs_info`
/// (`DyingSuperBlock::take_info` stops it first), so the thread never outlives its borrow of
/// the superblock.
pub(crate) struct ThreadSlot {
    task: AtomicPtr<bindings::task_struct>,
}

impl ThreadSlot {
    pub(crate) const fn new() -> Self {
        ThreadSlot { task: AtomicPtr::new(ptr::null_mut()) }
    }

    /// Start `T::run` on a kernel thread named `ferrofs/NAME` for `sb`, whose `SbInfo::bg` is
    /// the slot. Nothing happens if a thread runs already. The callers (`fill_super`, and
    /// remount under `s_umount`) never race with each other or with `stop`.
    pub(crate) fn start<T: SbThread>(sb: &SuperBlock, name: &CStr) -> Result {
        let slot = &sb.info().bg;
        if !slot.task.load(Ordering::Acquire).is_null() {
            return Ok(());
        }
        // SAFETY: the trampoline runs `T::run` until `kthread_stop`; the data is the live
        // superblock, which outlives the thread (type invariant: the slot is in its `SbInfo`);
        // the format is a plain "%s" and `name` is NUL-terminated.
        let task = unsafe {
            bindings::kthread_create_on_node(
                Some(thread_trampoline::<T>),
                sb.as_ptr().cast(),
                -1,
                c_str!("ferrofs/%s").as_char_ptr(),
                name.as_char_ptr(),
            )
        };
        let task = kernel::error::from_err_ptr(task)?;
        slot.task.store(task, Ordering::Release);
        // SAFETY: `task` is a freshly created kthread that has not run yet.
        unsafe { bindings::wake_up_process(task) };
        Ok(())
    }

    /// Stop the thread, if one runs (it wakes at once and returns), and wait for it.
    pub(crate) fn stop(&self) {
        let task = self.task.swap(ptr::null_mut(), Ordering::AcqRel);
        if !task.is_null() {
            // SAFETY: `task` is our kthread (type invariant), which only returns once asked to
            // stop; the swap above gives it to exactly one caller.
            unsafe { bindings::kthread_stop(task) };
        }
    }
}

impl Drop for ThreadSlot {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread function of `ThreadSlot::start`.
///
/// # Safety
///
/// `data` is a mounted ferrofs superblock that outlives the thread (see `ThreadSlot`).
unsafe extern "C" fn thread_trampoline<T: SbThread>(data: *mut c_void) -> c_int {
    // SAFETY: per the contract.
    let sb = unsafe { SuperBlock::from_raw(data.cast()) };
    // SAFETY: called on the kthread itself: it takes part in system suspend (the freezer).
    unsafe { shim::ferrofs_set_freezable() };
    T::run(sb, &KthreadCtx { _task_local: PhantomData });
    0
}

/// The body of a worker thread ([`WorkerThread`]): runs on the thread with the data the
/// thread was started with.
pub(crate) trait Worker: Send + Sync {
    /// Runs until it returns, which it may do only once `t.sleep` returned false (the thread
    /// was asked to stop): `kthread_stop` needs the thread alive until then.
    fn run(&self, t: &KthreadCtx);
}

/// A kernel thread running `T::run` on data it shares with its owner; stopped (and waited
/// for) when dropped.
///
/// # Invariants
///
/// `task` is a kthread created by `start` that runs `T::run(&*data)`, and only returns once
/// asked to stop; it is stopped by `drop` before `data` is released, so its borrow of `data`
/// never outlives it.
pub(crate) struct WorkerThread<T: Worker> {
    task: *mut bindings::task_struct,
    data: kernel::sync::Arc<T>,
}

// SAFETY: the task pointer is only used by `drop` (`kthread_stop` may be called from any
// thread), and the shared data is `Send + Sync`.
unsafe impl<T: Worker> Send for WorkerThread<T> {}
// SAFETY: `&WorkerThread` gives only `&T`, which is `Sync`.
unsafe impl<T: Worker> Sync for WorkerThread<T> {}

impl<T: Worker> WorkerThread<T> {
    /// Start `T::run(&data)` on a kernel thread named `ferrofs/NAME` (not freezable: it only
    /// makes requests its owner already queued, and its owner waits for them).
    pub(crate) fn start(data: kernel::sync::Arc<T>, name: &CStr) -> Result<Self> {
        let p: *const T = &*data;
        // SAFETY: the trampoline runs `T::run` on `*p` until `kthread_stop`; `data` (kept in
        // the result, whose `drop` stops the thread first) keeps `*p` alive that long; the
        // format is a plain "%s" and `name` is NUL-terminated.
        let task = unsafe {
            bindings::kthread_create_on_node(Some(worker_trampoline::<T>), p.cast_mut().cast(), -1, c_str!("ferrofs/%s").as_char_ptr(), name.as_char_ptr())
        };
        let task = kernel::error::from_err_ptr(task)?;
        // SAFETY: `task` is a freshly created kthread that has not run yet.
        unsafe { bindings::wake_up_process(task) };
        Ok(WorkerThread { task, data })
    }

    /// The data shared with the thread.
    pub(crate) fn data(&self) -> &T {
        &self.data
    }
}

impl<T: Worker> Drop for WorkerThread<T> {
    fn drop(&mut self) {
        // SAFETY: `task` is our kthread (type invariant), which only returns once asked to stop;
        // `data` is released only after this returns (fields drop after `drop`).
        unsafe { bindings::kthread_stop(self.task) };
    }
}

/// The thread function of `WorkerThread::start`.
///
/// # Safety
///
/// `data` points to a `T` that outlives the thread (see `WorkerThread`).
unsafe extern "C" fn worker_trampoline<T: Worker>(data: *mut c_void) -> c_int {
    // SAFETY: per the contract.
    let d = unsafe { &*data.cast::<T>().cast_const() };
    d.run(&KthreadCtx { _task_local: PhantomData });
    0
}
