//! The ferrofs engine: `core`-only, safe Rust shared by the kernel module and the userspace tools.
//!
//! It reaches the medium only through [`flash::Flash`] and memory only through
//! [`platform::Platform`]. No `unsafe`, no `alloc` crate, no floating point, no panicking path
//! on data read from flash.
//!
//! Entry points: [`fs::Engine::format`], [`fs::Engine::mount`], then the methods of
//! [`fs::Engine`] (POSIX operations in `posix.rs`).

pub mod budget;
pub mod codec;
pub mod crc;
pub mod error;
pub mod flash;
pub mod format;
pub mod fs;
pub mod fsck;
pub mod gcstep;
pub mod index;
pub mod log;
pub mod platform;
pub mod posix;
pub mod repair;
pub mod writeback;

pub use budget::Budget;
pub use error::{Error, Result};
pub use flash::{Flash, FlashError, FlashKind, Geometry, ReadStatus};
pub use format::{FileType, Inode, Stats, Timespec};
pub use fs::{CpFallback, Engine, FormatOptions, LogDamage, MountOptions, StatFs, ROOT_INO};
pub use fsck::{FsckProblem, FsckReport};
pub use gcstep::{GcCursor, GcProgress};
pub use platform::{FallibleVec, Platform};
pub use repair::{Repair, RepairFn, RepairLevel, RepairOutcome, RepairReport};
pub use posix::{CreateArgs, SetAttr, RENAME_EXCHANGE, RENAME_NOREPLACE, XATTR_CREATE, XATTR_REPLACE};
