//! The simulated GPU as a program outside the simulated libraries sees it, without the execution engine:
//! its configuration and device profiles ([`config`], [`profile`]), the machine-wide state file the
//! simulated libraries share ([`state`], [`process`]), the engine time each process obtained ([`meter`]),
//! and the folder that makes programs load the simulated libraries ([`libdir`]).
//!
//! The `tessera` command (`tessera simgpu`, `tessera run` and the demo on the simulated GPU) and the
//! tests' helpers need these and nothing more: the engine, its kernels, PTX parser and trace are the
//! `simgpu` crate's, which re-exports this one for the simulated libraries. The product binary must not
//! carry the simulator (see `tools/tests/no_simulator.rs`).

pub mod config;
pub mod libdir;
pub mod meter;
pub mod process;
pub mod profile;
pub mod state;

pub use config::{Config, ConfigError, DeviceConfig};
pub use state::SharedState;
