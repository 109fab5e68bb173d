//! The ferrofs engine: `core`-only, safe Rust shared by the kernel module and the userspace tools.
//!
//! It reaches the medium only through [`flash::Flash`] and memory only through
//! [`platform::Platform`]. No `unsafe`, no `alloc` crate, no floating point, no panicking path
//! on data read from flash.
//!
//! Entry points: [`fs::Engine::format`], [`fs::Engine::mount`], then the methods of
//! [`fs::Engine`], spread over the files by job (docs/design.md, "Modules"): POSIX operations
//! in `inode.rs`, `dir.rs`, `file.rs` and `xattr.rs`; mount and roll-forward in `recovery.rs`;
//! checkpoints in `checkpoint.rs` and `segtab.rs`; space accounting in `space.rs`; garbage
//! collection in `gc.rs` and `gcstep.rs`.

pub mod budget;
mod checkpoint;
pub mod codec;
pub mod crc;
mod dir;
pub mod error;
mod file;
pub mod flash;
pub mod format;
pub mod fs;
pub mod fsck;
mod gc;
pub mod gcstep;
pub mod index;
mod inode;
pub mod log;
pub mod platform;
pub mod readcache;
mod records;
mod recovery;
pub mod repair;
pub mod segtab;
pub mod space;
pub mod writeback;
mod xattr;

pub use budget::Budget;
pub use dir::{DirFiller, RENAME_EXCHANGE, RENAME_NOREPLACE};
pub use error::{Error, Result};
pub use flash::{Flash, FlashError, FlashKind, Geometry, PairInfo, Pairing, PairingScheme, ReadStatus};
pub use format::{FileType, Inode, Stats, Timespec};
pub use fs::{default_checkpoint_log_bytes, Engine, FormatOptions, MountOptions, ReplayLazy, StatFs, BLOCK_CHECKPOINT_LOG_BYTES, CHECKPOINT_LOG_BYTES, ROOT_INO};
pub use fsck::{FsckProblem, FsckReport};
pub use gcstep::{GcCursor, GcProgress};
pub use inode::{CreateArgs, SetAttr};
pub use platform::{FallibleVec, Platform};
pub use recovery::{CpFallback, LogDamage};
pub use repair::{Repair, RepairFn, RepairLevel, RepairOutcome, RepairReport};
pub use xattr::{XattrChange, XATTR_CREATE, XATTR_REPLACE};
