//! The ferrofs engine as a userspace crate.
//!
//! The sources live in `src/engine/` at the top of the repository, where the kernel module
//! compiles the very same files as its `engine` module. This file is only the crate root, plus
//! the userspace [`std_platform`] (behind the default `std` feature; `--no-default-features`
//! builds the engine exactly as `no_std` as the kernel does).
#![no_std]
#![forbid(unsafe_code)]
#![warn(rust_2018_idioms, missing_docs)]

#[cfg(any(test, feature = "std"))]
extern crate std;

#[path = "../../../src/engine/mod.rs"]
mod engine;

pub use engine::*;

#[cfg(any(test, feature = "std"))]
pub mod std_platform;
