//! The machine's GPUs as Tessera reads them, shared by the `tessera` command and the cluster provider
//! library (`libaccelerator_tessera.so`):
//!
//! - [`lib_dir`]: the folder holding Tessera's libraries (the shim and the simulated GPU's);
//! - [`dl`]: symbol lookup that bypasses a preloaded shim;
//! - [`driver`]: the CUDA driver in use (the machine's, else the simulated one) and the NVML that goes with it;
//! - [`nvml`]: NVML, loaded with `libloading`, and the queries Tessera makes of it (devices, MIG, topology,
//!   processes, metrics);
//! - [`precision`]: what a compute capability says (number formats, tensor cores, peak throughput).

pub mod dl;
pub mod driver;
pub mod lib_dir;
pub mod mig;
pub mod nvml;
pub mod nvml_more;
pub mod precision;
