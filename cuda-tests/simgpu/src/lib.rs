//! Core of the simulated GPU shared by the simulated driver (`libcuda.so.1`) and NVML
//! (`libnvidia-ml.so.1`): configuration and device profiles, the machine-wide state file, the
//! execution engine, PTX parsing and the built-in kernels, the folder that makes programs load them, and
//! the engine time each process obtained ([`meter`]), and an opt-in record of every kernel's engine times
//! ([`trace`]).

pub mod config;
pub mod engine;
pub mod futex;
pub mod kernels;
pub mod libdir;
pub mod meter;
pub mod process;
pub mod profile;
pub mod ptx;
pub mod state;
pub mod trace;

pub use config::{Config, ConfigError, DeviceConfig};
pub use state::SharedState;
