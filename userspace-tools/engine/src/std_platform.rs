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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provided_vector_operations() {
        let mut v: StdVec<u32> = FallibleVec::new();
        assert!(v.is_empty());
        v.try_extend_from_slice(&[1, 2, 4]).unwrap();
        v.try_insert(2, 3).unwrap();
        v.try_insert(0, 0).unwrap();
        assert_eq!(v.as_slice(), &[0, 1, 2, 3, 4]);
        assert_eq!(v.try_insert(9, 9), Err(Error::Invalid));
        assert_eq!(v.remove_at(1), Some(1));
        assert_eq!(v.remove_at(10), None);
        assert_eq!(v.as_slice(), &[0, 2, 3, 4]);
        v.try_resize(6, 7).unwrap();
        assert_eq!(v.as_slice(), &[0, 2, 3, 4, 7, 7]);
        v.truncate(2);
        assert_eq!(v.as_slice(), &[0, 2]);
        v.clear();
        assert!(v.is_empty());
    }

    #[test]
    fn codec_never_reads_past_the_end() {
        use crate::engine::codec::{Reader, Writer};
        let b = [1u8, 2, 3];
        let mut r = Reader::new(&b);
        assert_eq!(r.u16().unwrap(), 0x0201);
        assert_eq!(r.u16(), Err(Error::Corrupt));
        let mut out = [0u8; 3];
        let mut w = Writer::new(&mut out);
        w.u16(7).unwrap();
        assert_eq!(w.u16(8), Err(Error::Invalid));
    }

    #[test]
    fn errno_mapping_is_one_to_one_where_it_matters() {
        use crate::engine::error::Error as E;
        let all = [
            E::NotFound, E::Exists, E::NotEmpty, E::NotDir, E::IsDir, E::NameTooLong, E::Invalid,
            E::NoSpace, E::NoMem, E::Io, E::Corrupt, E::ReadOnly, E::NoData, E::Range,
            E::TooManyLinks, E::FileTooBig, E::NotPermitted, E::NotSupported,
        ];
        let mut seen = std::vec::Vec::new();
        for e in all {
            assert!(!seen.contains(&e.errno()), "{e:?}");
            seen.push(e.errno());
        }
    }
}
