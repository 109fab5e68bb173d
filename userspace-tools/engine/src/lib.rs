//! The ferrofs engine as a userspace crate.
//!
//! The sources live in `src/engine/` at the top of the repository, where the kernel module
//! compiles the very same files as its `engine` module. This file is only the crate root.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

#[path = "../../../src/engine/mod.rs"]
mod engine;

pub use engine::*;
