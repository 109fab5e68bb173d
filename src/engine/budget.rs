//! The write-back space budget: a lock-free reservation counter that lives outside the engine
//! (in the kernel's superblock info), so that `write_begin` can reserve the worst-case space of
//! the blocks it dirties without taking the engine lock.
//!
//! The engine publishes what may be handed out ([`crate::engine::fs::Engine::budget_avail`])
//! after its calls; reservations are sized with
//! [`crate::engine::fs::Engine::budget_cost`] and told back to the engine with
//! [`crate::engine::fs::Engine::set_reserved`], which makes every other space-consuming
//! operation leave the reserved space alone. `core` only, no locks.

use core::sync::atomic::{AtomicU64, Ordering};

/// Reserved bytes and the published available bytes.
#[derive(Debug)]
pub struct Budget {
    reserved: AtomicU64,
    avail: AtomicU64,
}

impl Default for Budget {
    fn default() -> Self {
        Self::new()
    }
}

impl Budget {
    /// Nothing reserved, nothing available (until the first [`Budget::publish`]).
    pub const fn new() -> Self {
        Budget { reserved: AtomicU64::new(0), avail: AtomicU64::new(0) }
    }

    /// Reserve `bytes` if `reserved + bytes <= avail`; returns whether it did. Lock-free (a
    /// compare-and-swap loop), never over-commits against the last published `avail`.
    pub fn try_reserve(&self, bytes: u64) -> bool {
        let avail = self.avail.load(Ordering::Acquire);
        let mut cur = self.reserved.load(Ordering::Relaxed);
        loop {
            let Some(new) = cur.checked_add(bytes) else { return false };
            if new > avail {
                return false;
            }
            match self.reserved.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(v) => cur = v,
            }
        }
    }

    /// Give back `bytes` of an earlier reservation (saturates at zero: releasing more than is
    /// reserved is a caller bug, never an underflow).
    pub fn release(&self, bytes: u64) {
        let mut cur = self.reserved.load(Ordering::Relaxed);
        loop {
            let new = cur.saturating_sub(bytes);
            match self.reserved.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return,
                Err(v) => cur = v,
            }
        }
    }

    /// Bytes reserved now.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }

    /// Bytes that may be reserved in total (the engine's `budget_avail()` as last published).
    pub fn avail(&self) -> u64 {
        self.avail.load(Ordering::Acquire)
    }

    /// Publish the engine's `budget_avail()` (call it under the engine lock, after engine calls).
    /// Reservations already held are kept even if they now exceed it; new ones then fail.
    pub fn publish(&self, avail: u64) {
        self.avail.store(avail, Ordering::Release);
    }
}
