//! Shared code of the ferrofs userspace tools: `mkfs.ferrofs`, `fsck.ferrofs` and `ferrofs-dump`.
//!
//! - [`util`]: errors with exit codes, size parsing, time, formatting;
//! - [`dev`]: opening a target (simulator image, raw image, MTD, block device) as one [`dev::Dev`];
//! - [`devhints`]: what sysfs says about a block device's flash, and the geometry mkfs takes from it;
//! - [`probe`]: the timing probe of a block device's FTL (`mkfs.ferrofs --probe`);
//! - [`layout`]: read-only parsing of on-flash structures (superblocks, checkpoint slots, segment
//!   tables, log records, index nodes) with the engine's public `format` functions;
//! - [`populate`]: copying a directory tree into a filesystem (`mkfs -r`);
//! - [`walk`]: mounting, path resolution and the tree walk used by fsck and dump;
//! - [`progress`]: progress bars on a terminal (mkfs -r, fsck), nothing otherwise.
//!
//! Nothing here panics on input: every error is returned as a [`util::ToolError`] that names
//! the exit code the tool should use.
#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(rust_2018_idioms, missing_docs)]

pub mod dev;
pub mod devhints;
pub mod hostile;
pub mod layout;
pub mod populate;
pub mod probe;
pub mod progress;
pub mod util;
pub mod walk;

use ferrofs_engine::std_platform::StdPlatform;

/// The engine over any of the tools' devices.
pub type Fs = ferrofs_engine::Engine<StdPlatform, dev::Dev>;
