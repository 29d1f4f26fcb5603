//! Core of the simulated GPU shared by the simulated driver (`libcuda.so.1`) and NVML
//! (`libnvidia-ml.so.1`): the execution engine, PTX parsing and the built-in kernels, MIG instances
//! ([`mig`], [`mig_state`]), the topology NVML reports ([`topology`]), and an opt-in record of every
//! kernel's engine times ([`trace`]).
//!
//! What a program outside the simulated libraries needs too (configuration and device profiles, the
//! machine-wide state file, the engine time each process obtained, the folder that makes programs load
//! the simulated libraries) is the `simgpu-host` crate, re-exported here under the same names: the
//! `tessera` command depends on that crate alone, so the product binary does not carry the engine.

pub use simgpu_host::{config, libdir, meter, process, profile, state};

pub mod engine;
pub mod futex;
pub mod image;
pub mod kernels;
pub mod mig;
pub mod mig_state;
pub mod ptx;
pub mod topology;
pub mod trace;

pub use config::{Config, ConfigError, DeviceConfig};
pub use state::SharedState;
