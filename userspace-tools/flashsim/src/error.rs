//! The crate's error type for constructors, images and devices.
//!
//! `Flash` operations themselves report [`ferrofs_engine::flash::FlashError`]; this type is for
//! everything around them: building a simulator, loading and saving images, opening devices.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Errors from building simulators, reading and writing images, and opening devices.
#[derive(Debug)]
pub enum Error {
    /// The requested or recorded geometry is unusable (zero sizes, overflow, misaligned sizes...).
    InvalidGeometry(String),
    /// An argument is out of range or inconsistent.
    InvalidArgument(String),
    /// An I/O error, with the path and what was being done.
    Io {
        /// The file or device concerned.
        path: PathBuf,
        /// What was being attempted, e.g. "reading image header".
        action: &'static str,
        /// The underlying error.
        source: io::Error,
    },
    /// The file is not a ferrofs simulator image, or it is damaged.
    BadImage(String),
    /// The image was written by an unknown (newer) version of the format.
    UnsupportedImageVersion(u32),
    /// The path exists but is not the kind of device expected (e.g. a block device given to the
    /// MTD backend, a directory, a read-only MTD).
    WrongDeviceKind(String),
}

impl Error {
    pub(crate) fn io(path: &Path, action: &'static str, source: io::Error) -> Self {
        Error::Io { path: path.to_path_buf(), action, source }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidGeometry(s) => write!(f, "invalid geometry: {s}"),
            Error::InvalidArgument(s) => write!(f, "invalid argument: {s}"),
            Error::Io { path, action, source } => write!(f, "{}: {action}: {source}", path.display()),
            Error::BadImage(s) => write!(f, "not a valid ferrofs simulator image: {s}"),
            Error::UnsupportedImageVersion(v) => write!(f, "unsupported image format version {v}"),
            Error::WrongDeviceKind(s) => write!(f, "wrong kind of device: {s}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Result with the crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
