//! Core of the simulated GPU shared by the simulated driver (`libcuda.so.1`) and NVML
//! (`libnvidia-ml.so.1`): configuration and device profiles, the machine-wide state file, the
//! execution engine, PTX parsing and the built-in kernels, the folder that makes programs load them, and
//! the engine time each process obtained ([`meter`]), and an opt-in record of every kernel's engine times
//! ([`trace`]).
//!
//! The `engine` feature (on by default) holds what only the simulated libraries and the tests run: the
//! execution engine, the built-in kernels, the PTX parser and the trace. The `tessera` command builds
//! without it (`default-features = false`): it only reads the configuration and the state file and
//! prepares the library folder, and the product binary must not carry the simulator.

pub mod config;
#[cfg(feature = "engine")]
pub mod engine;
#[cfg(feature = "engine")]
pub mod futex;
#[cfg(feature = "engine")]
pub mod kernels;
pub mod libdir;
pub mod meter;
pub mod mig;
pub mod mig_state;
pub mod process;
pub mod profile;
#[cfg(feature = "engine")]
pub mod ptx;
pub mod state;
pub mod topology;
#[cfg(feature = "engine")]
pub mod trace;

pub use config::{Config, ConfigError, DeviceConfig};
pub use state::SharedState;
