//! Flash simulators, image files and device backends for the ferrofs userspace tools.
//!
//! Everything here implements the engine's medium interface,
//! [`ferrofs_engine::flash::Flash`]:
//!
//! - [`NandSim`]: in-memory raw NAND with real rules (program erased pages only, in order, once;
//!   bad blocks; weak/grave pages; bit-flips; power cuts with torn operations).
//! - [`BlockSim`]: in-memory block device with allocation units, the sequential-write rules of the
//!   block backend, discard semantics, a cheap-FTL cost model and power cuts, optionally with a
//!   volatile write cache ([`WriteCache`]: a cut keeps a reordered subset of the writes since the
//!   last flush, torn at sector granularity).
//! - [`image`]: save/load of a simulator to a self-describing image file, and [`ImageFlash`]
//!   over a plain raw image (a `nanddump` without OOB, or a block image).
//! - [`device`]: [`MtdDevice`] over `/dev/mtdN` and [`BlockDevice`] over a block device or file.
//! - [`WriteBehind`]: a write-behind queue ([`Flash::write_behind`]) over any of them, made at
//!   seeded random points, as the kernel's MTD backend makes it with a thread.
//! - [`Counters`]: operation counters and write-amplification helpers for benchmarks.
//!
//! All simulated randomness comes from a seeded SplitMix64, so every run is reproducible.
//!
//! # Example: enumerate the crash points of a workload
//!
//! ```
//! use ferrofs_flashsim::{CutEffect, CutPlan, Flash, FlashError, NandConfig, NandSim, TornFill};
//!
//! fn workload(f: &mut dyn Flash) -> Result<(), FlashError> {
//!     f.erase(1)?;
//!     f.write(1, 0, &[0xA5; 4096])?;
//!     f.flush()
//! }
//!
//! // A dry run tells how many operations can be cut.
//! let mut sim = NandSim::new(NandConfig::new(8))?;
//! workload(&mut sim).map_err(|e| format!("{e:?}"))?;
//! let n = sim.ops_since_power_on();
//! assert_eq!(n, 2); // the erase and the write (flushes are not counted by default)
//!
//! for i in 1..=n {
//!     let mut sim = NandSim::new(NandConfig { seed: i, ..NandConfig::new(8) })?;
//!     sim.cut_after_with(i, CutPlan { effect: CutEffect::Torn, fill: TornFill::Random, ..CutPlan::default() });
//!     assert_eq!(workload(&mut sim), Err(FlashError::PowerCut));
//!     sim.reboot();
//!     // ... mount with the engine here and check its recovery ...
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Example: an image for mkfs, fsck and dump
//!
//! ```no_run
//! use std::path::Path;
//! use ferrofs_flashsim::{AnySim, Flash, NandConfig, NandSim};
//!
//! let mut sim = NandSim::new(NandConfig { bad_blocks: vec![3], ..NandConfig::new(64) })?;
//! // ... mkfs writes through `sim` ...
//! sim.save(Path::new("ferrofs.img"))?;
//! // Later, any tool:
//! let mut dev = AnySim::load(Path::new("ferrofs.img"))?;
//! let geometry = dev.geometry();
//! # Ok::<(), ferrofs_flashsim::Error>(())
//! ```
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod behind;
pub mod block;
pub mod cache;
pub mod counters;
pub mod device;
pub mod error;
pub mod image;
pub mod nand;
pub mod power;
pub mod rng;

pub use behind::{BehindConfig, BehindStats, WriteBehind};
pub use block::{BlockConfig, BlockSim, DiscardMode};
pub use cache::{CacheLoss, WriteCache};
pub use counters::Counters;
pub use device::{BlockDevice, BlockDeviceOptions, MtdDevice};
pub use error::{Error, Result};
pub use image::{AnySim, ImageFlash, ImageHeader, SimFile};
pub use nand::{NandConfig, NandSim};
pub use power::{CutEffect, CutPlan, Op, OpKind, TornFill};
pub use rng::SimRng;

/// The engine's medium interface, re-exported for convenience.
pub use ferrofs_engine::flash::{Flash, FlashError, FlashKind, Geometry, PairInfo, Pairing, PairingScheme, ReadStatus};
