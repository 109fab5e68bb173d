//! ferrofs-fstest: guest-side filesystem checks (POSIX semantics, integrity trees, ENOSPC).
//!
//! One static binary doing many operations per process: under QEMU TCG every process spawn is
//! expensive, so no check forks helpers (except the non-root permission checks, which must).

// libc field types differ between targets (e.g. st_nlink, f_type): keep the casts.
#![allow(clippy::unnecessary_cast)]

pub mod cli;
pub mod enospc;
pub mod faults;
pub mod fsx;
pub mod hostile;
pub mod ifmeta;
pub mod ifdata;
pub mod integrity;
pub mod labels;
pub mod lifecycle;
pub mod pattern;
pub mod posix;
pub mod powercut;
pub mod report;
pub mod stress;
pub mod sys;
