//! ferrofs-fstest: guest-side filesystem checks (POSIX semantics, integrity trees, ENOSPC).
//!
//! One static binary doing many operations per process: under QEMU TCG every process spawn is
//! expensive, so no check forks helpers (except the non-root permission checks, which must).

pub mod cli;
pub mod enospc;
pub mod integrity;
pub mod pattern;
pub mod posix;
pub mod report;
pub mod sys;
