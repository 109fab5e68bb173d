//! Little-endian encoding helpers that never panic: reads past the end return `Error::Corrupt`.

use crate::engine::error::{Error, Result};

/// A bounds-checked little-endian reader over a byte slice.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Start reading `buf` at offset 0.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Current offset.
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Take the next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(Error::Corrupt)?;
        let s = self.buf.get(self.pos..end).ok_or(Error::Corrupt)?;
        self.pos = end;
        Ok(s)
    }
    /// Read one byte.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?.first().copied().unwrap_or(0))
    }
    /// Read a little-endian u16.
    pub fn u16(&mut self) -> Result<u16> {
        let mut a = [0u8; 2];
        a.copy_from_slice(self.bytes(2)?);
        Ok(u16::from_le_bytes(a))
    }
    /// Read a little-endian u32.
    pub fn u32(&mut self) -> Result<u32> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.bytes(4)?);
        Ok(u32::from_le_bytes(a))
    }
    /// Read a little-endian u64.
    pub fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.bytes(8)?);
        Ok(u64::from_le_bytes(a))
    }
    /// Read an unsigned LEB128 varint of at most 10 bytes whose value fits in 64 bits.
    pub fn uvar(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0u32..70).step_by(7) {
            let b = self.u8()?;
            let part = u64::from(b & 0x7f);
            if shift == 63 && part > 1 {
                return Err(Error::Corrupt);
            }
            v |= part.wrapping_shl(shift);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::Corrupt)
    }
    /// Read a varint (see [`Reader::uvar`]) that must fit in 32 bits.
    pub fn uvar32(&mut self) -> Result<u32> {
        u32::try_from(self.uvar()?).map_err(|_| Error::Corrupt)
    }
    /// Read a little-endian i64.
    pub fn i64(&mut self) -> Result<i64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.bytes(8)?);
        Ok(i64::from_le_bytes(a))
    }
}

/// A bounds-checked little-endian writer into a fixed byte slice.
pub struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    /// Start writing `buf` at offset 0.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, pos: 0 }
    }
    /// Current offset.
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Append raw bytes.
    pub fn bytes(&mut self, s: &[u8]) -> Result<()> {
        let end = self.pos.checked_add(s.len()).ok_or(Error::Invalid)?;
        self.buf.get_mut(self.pos..end).ok_or(Error::Invalid)?.copy_from_slice(s);
        self.pos = end;
        Ok(())
    }
    /// Append one byte.
    pub fn u8(&mut self, v: u8) -> Result<()> {
        self.bytes(&[v])
    }
    /// Append a little-endian u16.
    pub fn u16(&mut self, v: u16) -> Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    /// Append a little-endian u32.
    pub fn u32(&mut self, v: u32) -> Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    /// Append a little-endian u64.
    pub fn u64(&mut self, v: u64) -> Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    /// Append a little-endian i64.
    pub fn i64(&mut self, v: i64) -> Result<()> {
        self.bytes(&v.to_le_bytes())
    }
    /// Append an unsigned LEB128 varint (1 to 10 bytes).
    pub fn uvar(&mut self, mut v: u64) -> Result<()> {
        while v >= 0x80 {
            self.u8((v & 0x7f) as u8 | 0x80)?;
            v >>= 7;
        }
        self.u8(v as u8)
    }
}

/// Write a little-endian u32 at `off` of `b`.
pub fn put_u32(b: &mut [u8], off: usize, v: u32) -> Result<()> {
    let end = off.checked_add(4).ok_or(Error::Invalid)?;
    b.get_mut(off..end).ok_or(Error::Invalid)?.copy_from_slice(&v.to_le_bytes());
    Ok(())
}
