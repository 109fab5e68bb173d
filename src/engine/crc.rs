//! CRC32C (Castagnoli, reflected polynomial 0x82F63B78), table driven, table built at compile time.

const fn make_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static TABLE: [u32; 256] = make_table();

/// Continue a CRC32C computation: `crc` is the value returned for the previous bytes
/// (start with 0).
pub fn crc32c_update(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    for &b in data {
        let idx = ((c ^ u32::from(b)) & 0xFF) as usize;
        c = TABLE.get(idx).copied().unwrap_or(0) ^ (c >> 8);
    }
    !c
}

/// CRC32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_update(0, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        let a = crc32c_update(crc32c(b"1234"), b"56789");
        assert_eq!(a, 0xE306_9283);
    }
}
