//! Backends over real Linux devices: [`MtdDevice`] over `/dev/mtdN`, [`BlockDevice`] over a
//! block device or a regular file.
//!
//! Both check what they open and return [`crate::Error`] (never panic) for a missing path or
//! a device of the wrong kind. Operation errors are mapped to [`FlashError`] by
//! [`flash_error_from_io`].

use std::io;

use ferrofs_engine::flash::FlashError;

use crate::power::OpKind;

pub mod blockdev;
pub(crate) mod file;
pub(crate) mod ioctl;
pub mod mtd;

pub use blockdev::{BlockDevice, BlockDeviceOptions};
pub use mtd::{MtdDevice, MtdInfo};

/// Maps an I/O error of operation `op` to the engine's [`FlashError`]:
/// `EBADMSG` → `Uncorrectable`; `EIO` → `Uncorrectable` for a read (a medium error: the data
/// is lost), `WriteFailed` for a write, `EraseFailed` for an erase; `EINVAL` → `InvalidRequest`;
/// anything else → `Io`. (`EUCLEAN` on a read is not an error: the backends turn it into
/// `ReadStatus::Corrected` before getting here.)
pub fn flash_error_from_io(e: &io::Error, op: OpKind) -> FlashError {
    match e.raw_os_error() {
        Some(libc::EBADMSG) => FlashError::Uncorrectable,
        Some(libc::EINVAL) => FlashError::InvalidRequest,
        Some(libc::EIO) => match op {
            OpKind::Read => FlashError::Uncorrectable,
            OpKind::Write => FlashError::WriteFailed,
            OpKind::Erase => FlashError::EraseFailed,
            OpKind::MarkBad | OpKind::Flush => FlashError::Io,
        },
        _ => FlashError::Io,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_mapping() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(flash_error_from_io(&e(libc::EBADMSG), OpKind::Read), FlashError::Uncorrectable);
        assert_eq!(flash_error_from_io(&e(libc::EIO), OpKind::Read), FlashError::Uncorrectable);
        assert_eq!(flash_error_from_io(&e(libc::EIO), OpKind::Write), FlashError::WriteFailed);
        assert_eq!(flash_error_from_io(&e(libc::EIO), OpKind::Erase), FlashError::EraseFailed);
        assert_eq!(flash_error_from_io(&e(libc::EIO), OpKind::Flush), FlashError::Io);
        assert_eq!(flash_error_from_io(&e(libc::EINVAL), OpKind::Write), FlashError::InvalidRequest);
        assert_eq!(flash_error_from_io(&e(libc::ENOSPC), OpKind::Write), FlashError::Io);
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert_eq!(flash_error_from_io(&eof, OpKind::Read), FlashError::Io);
    }
}
