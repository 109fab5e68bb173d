//! Flash simulators, image files and device backends for the ferrofs userspace tools.
//!
//! Everything here implements the engine's medium interface,
//! [`ferrofs_engine::flash::Flash`]:
//!
//! - [`NandSim`]: in-memory raw NAND with real rules (program erased pages only, in order, once;
//!   bad blocks; weak/grave pages; bit-flips; power cuts with torn operations).
//! - [`BlockSim`]: in-memory block device with allocation units, the sequential-write rules of the
//!   block backend, discard semantics, a cheap-FTL cost model and power cuts.
//! - [`image`]: save/load of a simulator to a self-describing image file, and [`ImageFlash`]
//!   over a plain raw image (a `nanddump` without OOB, or a block image).
//! - [`device`]: [`MtdDevice`] over `/dev/mtdN` and [`BlockDevice`] over a block device or file.
//! - [`Counters`]: operation counters and write-amplification helpers for benchmarks.
//!
//! All simulated randomness comes from a seeded SplitMix64, so every run is reproducible.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod block;
pub mod counters;
pub mod device;
pub mod error;
pub mod image;
pub mod nand;
pub mod power;
pub mod rng;

pub use block::{BlockConfig, BlockSim, DiscardMode};
pub use counters::Counters;
pub use device::{BlockDevice, BlockDeviceOptions, MtdDevice};
pub use error::{Error, Result};
pub use image::{AnySim, ImageFlash, ImageHeader};
pub use nand::{NandConfig, NandSim};
pub use power::{CutEffect, CutPlan, Op, OpKind, TornFill};
pub use rng::SimRng;

/// The engine's medium interface, re-exported for convenience.
pub use ferrofs_engine::flash::{Flash, FlashError, FlashKind, Geometry, ReadStatus};
