//! The userspace [`Platform`]: `std::vec::Vec` with fallible growth through `try_reserve`.

use crate::engine::error::Error;
use crate::engine::platform::{FallibleVec, Platform};

/// Userspace platform: allocations through the global allocator, failures reported as NoMem.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdPlatform;

/// A `std` vector implementing [`FallibleVec`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StdVec<T>(pub std::vec::Vec<T>);

impl<T> FallibleVec<T> for StdVec<T> {
    fn new() -> Self {
        StdVec(std::vec::Vec::new())
    }
    fn try_push(&mut self, v: T) -> Result<(), Error> {
        self.0.try_reserve(1).map_err(|_| Error::NoMem)?;
        self.0.push(v);
        Ok(())
    }
    fn pop(&mut self) -> Option<T> {
        self.0.pop()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn as_slice(&self) -> &[T] {
        &self.0
    }
    fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.0
    }
    fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }
    fn try_extend_from_slice(&mut self, s: &[T]) -> Result<(), Error>
    where
        T: Copy,
    {
        self.0.try_reserve(s.len()).map_err(|_| Error::NoMem)?;
        self.0.extend_from_slice(s);
        Ok(())
    }
    fn try_resize(&mut self, len: usize, v: T) -> Result<(), Error>
    where
        T: Copy,
    {
        if len > self.0.len() {
            self.0.try_reserve(len - self.0.len()).map_err(|_| Error::NoMem)?;
        }
        self.0.resize(len, v);
        Ok(())
    }
}

impl Platform for StdPlatform {
    type Vec<T> = StdVec<T>;
}

/// The engine over any flash, with the userspace platform.
pub type StdEngine<F> = crate::engine::fs::Engine<StdPlatform, F>;
