//! Engine errors. Each variant maps to exactly one errno value.

use crate::engine::flash::FlashError;

/// Errors returned by the engine. See [`Error::errno`] for the errno mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// No such file or directory (ENOENT).
    NotFound,
    /// File exists (EEXIST).
    Exists,
    /// Directory not empty (ENOTEMPTY).
    NotEmpty,
    /// Not a directory (ENOTDIR).
    NotDir,
    /// Is a directory (EISDIR).
    IsDir,
    /// File name too long (ENAMETOOLONG).
    NameTooLong,
    /// Invalid argument (EINVAL).
    Invalid,
    /// No space left on device (ENOSPC).
    NoSpace,
    /// Out of memory (ENOMEM).
    NoMem,
    /// I/O error (EIO).
    Io,
    /// Structure needs cleaning: on-flash data failed validation (EUCLEAN).
    Corrupt,
    /// Read-only filesystem (EROFS).
    ReadOnly,
    /// No data available: missing extended attribute (ENODATA).
    NoData,
    /// Result too large for the caller's buffer (ERANGE).
    Range,
    /// Too many links (EMLINK).
    TooManyLinks,
    /// File too large (EFBIG).
    FileTooBig,
    /// Operation not permitted (EPERM), e.g. hard link to a directory.
    NotPermitted,
    /// Cross-device or otherwise unsupported request (EXDEV is not used; EOPNOTSUPP).
    NotSupported,
    /// The medium is not a ferrofs filesystem, or an incompatible version (EINVAL at mount).
    BadFormat,
    /// Simulated power cut reported by a test flash; nothing is written after it (EIO).
    PowerCut,
    /// No such address (ENXIO): `seek_data`/`seek_hole` at or past the end of the file.
    NoSuchAddress,
}

impl Error {
    /// The positive errno value for this error (the kernel returns its negation).
    pub fn errno(self) -> i32 {
        match self {
            Error::NotFound => 2,
            Error::Exists => 17,
            Error::NotEmpty => 39,
            Error::NotDir => 20,
            Error::IsDir => 21,
            Error::NameTooLong => 36,
            Error::Invalid => 22,
            Error::NoSpace => 28,
            Error::NoMem => 12,
            Error::Io => 5,
            Error::Corrupt => 117,
            Error::ReadOnly => 30,
            Error::NoData => 61,
            Error::Range => 34,
            Error::TooManyLinks => 31,
            Error::FileTooBig => 27,
            Error::NotPermitted => 1,
            Error::NotSupported => 95,
            Error::BadFormat => 22,
            Error::PowerCut => 5,
            Error::NoSuchAddress => 6,
        }
    }
}

impl From<FlashError> for Error {
    fn from(e: FlashError) -> Self {
        match e {
            FlashError::Uncorrectable => Error::Corrupt,
            FlashError::PowerCut => Error::PowerCut,
            _ => Error::Io,
        }
    }
}

/// Engine result type.
pub type Result<T> = core::result::Result<T, Error>;
