//! The allocation interface: the only way the engine obtains memory.
//!
//! The kernel has no `alloc` crate, so the engine never allocates directly. A [`Platform`]
//! names a growable vector type ([`FallibleVec`]) whose every growth can fail with
//! [`Error::NoMem`]. The kernel implements it with `KVec<T>` (`GFP_KERNEL`), userspace with
//! `std::vec::Vec` and `try_reserve`. Everything else (insert, remove, truncate, byte buffers)
//! is built here on top of the six primitive operations.

use crate::engine::error::Error;

/// A growable vector whose growth is fallible.
pub trait FallibleVec<T>: Sized {
    /// An empty vector (must not allocate).
    fn new() -> Self;
    /// Append `v`, or return `Error::NoMem` and leave the vector unchanged.
    fn try_push(&mut self, v: T) -> Result<(), Error>;
    /// Remove and return the last element.
    fn pop(&mut self) -> Option<T>;
    /// Number of elements.
    fn len(&self) -> usize;
    /// The elements as a slice.
    fn as_slice(&self) -> &[T];
    /// The elements as a mutable slice.
    fn as_mut_slice(&mut self) -> &mut [T];

    /// Whether the vector is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Insert `v` at `idx` (`idx <= len`), shifting later elements right.
    fn try_insert(&mut self, idx: usize, v: T) -> Result<(), Error> {
        if idx > self.len() {
            return Err(Error::Invalid);
        }
        self.try_push(v)?;
        if let Some(tail) = self.as_mut_slice().get_mut(idx..) {
            tail.rotate_right(1);
        }
        Ok(())
    }

    /// Remove and return the element at `idx`, shifting later elements left.
    fn remove_at(&mut self, idx: usize) -> Option<T> {
        if idx >= self.len() {
            return None;
        }
        if let Some(tail) = self.as_mut_slice().get_mut(idx..) {
            tail.rotate_left(1);
        }
        self.pop()
    }

    /// Shorten the vector to `len` elements.
    fn truncate(&mut self, len: usize) {
        while self.len() > len {
            let _ = self.pop();
        }
    }

    /// Remove every element.
    fn clear(&mut self) {
        self.truncate(0);
    }

    /// Append copies of every element of `s`.
    fn try_extend_from_slice(&mut self, s: &[T]) -> Result<(), Error>
    where
        T: Copy,
    {
        for v in s {
            self.try_push(*v)?;
        }
        Ok(())
    }

    /// Resize to `len` elements, filling new slots with `v`.
    fn try_resize(&mut self, len: usize, v: T) -> Result<(), Error>
    where
        T: Copy,
    {
        self.truncate(len);
        while self.len() < len {
            self.try_push(v)?;
        }
        Ok(())
    }
}

/// What the engine needs from its environment besides the flash: memory.
pub trait Platform {
    /// The vector type used for every allocation.
    type Vec<T>: FallibleVec<T>;
}
