//! The ferrofs engine: `core`-only, safe Rust shared by the kernel module and the userspace tools.
//!
//! It reaches the medium only through [`flash::Flash`]. No `unsafe`, no `alloc` crate,
//! no floating point, no panicking path on data read from flash.

pub mod flash;
