//! ioctl request numbers and thin, typed wrappers. The only `unsafe` code of the crate.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

#[cfg(any(target_arch = "powerpc", target_arch = "powerpc64", target_arch = "mips", target_arch = "mips64", target_arch = "sparc", target_arch = "sparc64"))]
mod dir {
    pub const NONE: u32 = 1;
    pub const READ: u32 = 2;
    pub const WRITE: u32 = 4;
    pub const SIZE_BITS: u32 = 13;
}
#[cfg(not(any(target_arch = "powerpc", target_arch = "powerpc64", target_arch = "mips", target_arch = "mips64", target_arch = "sparc", target_arch = "sparc64")))]
mod dir {
    pub const NONE: u32 = 0;
    pub const READ: u32 = 2;
    pub const WRITE: u32 = 1;
    pub const SIZE_BITS: u32 = 14;
}

const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    (dir << (16 + dir::SIZE_BITS)) | ((size as u32) << 16) | ((ty as u32) << 8) | nr as u32
}

/// `struct mtd_info_user` from `<mtd/mtd-abi.h>`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MtdInfoUser {
    pub type_: u8,
    pub flags: u32,
    pub size: u32,
    pub erasesize: u32,
    pub writesize: u32,
    pub oobsize: u32,
    pub padding: u64,
}

/// `struct erase_info_user`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EraseInfoUser {
    pub start: u32,
    pub length: u32,
}

/// `struct mtd_ecc_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MtdEccStats {
    pub corrected: u32,
    pub failed: u32,
    pub badblocks: u32,
    pub bbtblocks: u32,
}

pub(crate) const MEMGETINFO: u32 = ioc(dir::READ, b'M', 1, std::mem::size_of::<MtdInfoUser>());
pub(crate) const MEMERASE: u32 = ioc(dir::WRITE, b'M', 2, std::mem::size_of::<EraseInfoUser>());
pub(crate) const MEMGETBADBLOCK: u32 = ioc(dir::WRITE, b'M', 11, std::mem::size_of::<i64>());
pub(crate) const MEMSETBADBLOCK: u32 = ioc(dir::WRITE, b'M', 12, std::mem::size_of::<i64>());
pub(crate) const ECCGETSTATS: u32 = ioc(dir::READ, b'M', 18, std::mem::size_of::<MtdEccStats>());
pub(crate) const BLKGETSIZE64: u32 = ioc(dir::READ, 0x12, 114, std::mem::size_of::<usize>());
pub(crate) const BLKDISCARD: u32 = ioc(dir::NONE, 0x12, 119, 0);
pub(crate) const BLKSSZGET: u32 = ioc(dir::NONE, 0x12, 104, 0);

/// Issues `req` with a pointer to `arg`, returning the ioctl's non-negative result.
///
/// # Safety
/// `req` must be an ioctl that reads and/or writes exactly a `T` at the pointer (or nothing).
unsafe fn ioctl_ptr<T>(file: &File, req: u32, arg: *mut T) -> io::Result<i32> {
    // SAFETY: the caller guarantees that `req` accesses at most a `T` through `arg`, which
    // points to a live, properly aligned `T`; the descriptor is owned by `file`.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), req as libc::Ioctl, arg) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub(crate) fn mem_get_info(file: &File) -> io::Result<MtdInfoUser> {
    let mut info = MtdInfoUser::default();
    // SAFETY: MEMGETINFO writes one `struct mtd_info_user`.
    unsafe { ioctl_ptr(file, MEMGETINFO, &mut info) }?;
    Ok(info)
}

pub(crate) fn mem_erase(file: &File, start: u32, length: u32) -> io::Result<()> {
    let mut arg = EraseInfoUser { start, length };
    // SAFETY: MEMERASE reads one `struct erase_info_user`.
    unsafe { ioctl_ptr(file, MEMERASE, &mut arg) }.map(|_| ())
}

pub(crate) fn mem_get_bad_block(file: &File, offset: i64) -> io::Result<bool> {
    let mut arg = offset;
    // SAFETY: MEMGETBADBLOCK reads one `loff_t`.
    unsafe { ioctl_ptr(file, MEMGETBADBLOCK, &mut arg) }.map(|r| r > 0)
}

pub(crate) fn mem_set_bad_block(file: &File, offset: i64) -> io::Result<()> {
    let mut arg = offset;
    // SAFETY: MEMSETBADBLOCK reads one `loff_t`.
    unsafe { ioctl_ptr(file, MEMSETBADBLOCK, &mut arg) }.map(|_| ())
}

pub(crate) fn ecc_get_stats(file: &File) -> io::Result<MtdEccStats> {
    let mut s = MtdEccStats::default();
    // SAFETY: ECCGETSTATS writes one `struct mtd_ecc_stats`.
    unsafe { ioctl_ptr(file, ECCGETSTATS, &mut s) }?;
    Ok(s)
}

pub(crate) fn blk_get_size64(file: &File) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one `u64`.
    unsafe { ioctl_ptr(file, BLKGETSIZE64, &mut size) }?;
    Ok(size)
}

pub(crate) fn blk_ssz_get(file: &File) -> io::Result<u32> {
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one `int`.
    unsafe { ioctl_ptr(file, BLKSSZGET, &mut size) }?;
    u32::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

pub(crate) fn blk_discard(file: &File, start: u64, len: u64) -> io::Result<()> {
    let mut range = [start, len];
    // SAFETY: BLKDISCARD reads two `u64` (start, length).
    unsafe { ioctl_ptr(file, BLKDISCARD, &mut range) }.map(|_| ())
}

/// Deallocates a range of a regular file (reads then return zeroes).
pub(crate) fn punch_hole(file: &File, start: u64, len: u64) -> io::Result<()> {
    let (Ok(off), Ok(l)) = (libc::off_t::try_from(start), libc::off_t::try_from(len)) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    // SAFETY: fallocate takes plain integers; the descriptor is owned by `file`.
    let r = unsafe {
        libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, off, l)
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn request_numbers_match_the_kernel_headers() {
        assert_eq!(std::mem::size_of::<MtdInfoUser>(), 32);
        assert_eq!(MEMGETINFO, 0x8020_4d01);
        assert_eq!(MEMERASE, 0x4008_4d02);
        assert_eq!(MEMGETBADBLOCK, 0x4008_4d0b);
        assert_eq!(MEMSETBADBLOCK, 0x4008_4d0c);
        assert_eq!(ECCGETSTATS, 0x8010_4d12);
        assert_eq!(BLKGETSIZE64, 0x8008_1272);
        assert_eq!(BLKDISCARD, 0x1277);
        assert_eq!(BLKSSZGET, 0x1268);
    }

    #[test]
    fn mtd_ioctls_on_a_regular_file_fail_cleanly() {
        let path = std::env::temp_dir().join(format!("ferrofs-ioctl-{}", std::process::id()));
        let f = File::create(&path).map_err(|e| e.to_string());
        if let Ok(f) = f {
            assert!(mem_get_info(&f).is_err());
            assert!(ecc_get_stats(&f).is_err());
            assert!(blk_get_size64(&f).is_err());
            let _ = std::fs::remove_file(&path);
        }
    }
}
