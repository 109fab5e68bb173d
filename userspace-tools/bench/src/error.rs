//! One error type for the tool: a message with context, never a panic.

use std::fmt;

/// An error with a human-readable chain of context ("writing /mnt/x: No space left on device").
#[derive(Debug)]
pub struct Error {
    msg: String,
    /// The OS error number, when the root cause was an `io::Error` with one.
    errno: Option<i32>,
}

impl Error {
    pub fn msg(msg: impl Into<String>) -> Self {
        Error { msg: msg.into(), errno: None }
    }

    /// The OS error number of the root cause, if any (ENOSPC handling looks at it).
    pub fn errno(&self) -> Option<i32> {
        self.errno
    }

    pub fn is_enospc(&self) -> bool {
        self.errno == Some(libc::ENOSPC)
    }

    fn wrap(self, ctx: impl fmt::Display) -> Self {
        Error { msg: format!("{ctx}: {}", self.msg), errno: self.errno }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error { msg: e.to_string(), errno: e.raw_os_error() }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::msg(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// `.ctx("opening x")` on any result whose error converts into [`Error`].
pub trait Context<T> {
    fn ctx(self, ctx: impl fmt::Display) -> Result<T>;
    fn with_ctx<D: fmt::Display>(self, f: impl FnOnce() -> D) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn ctx(self, ctx: impl fmt::Display) -> Result<T> {
        self.map_err(|e| e.into().wrap(ctx))
    }
    fn with_ctx<D: fmt::Display>(self, f: impl FnOnce() -> D) -> Result<T> {
        self.map_err(|e| e.into().wrap(f()))
    }
}

/// Early return with a formatted [`Error`].
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::error::Error::msg(format!($($arg)*))) };
}
