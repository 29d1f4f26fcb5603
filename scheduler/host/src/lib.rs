//! What every Tessera program knows of the machine, shared by the daemon, the `tessera` command, the
//! cluster provider library (`libaccelerator_tessera.so`) and the Kubernetes device plugin, none of which
//! this crate depends on (nor on the simulator):
//!
//! - [`paths`]: where the daemon's region, socket and state directory are;
//! - [`lib_dir`]: the folder holding Tessera's libraries (the shim and the simulated GPU's), and
//!   [`simgpu_dir`]: the simulated GPU's folder of links inside it;
//! - [`driver`]: the CUDA driver in use (the machine's, else the simulated one) and the NVML that goes
//!   with it;
//! - [`nvml`]: the one NVML loader (by `libloading`, bypassing a preloaded shim with [`dl`]) and the
//!   queries Tessera makes of it (devices, MIG in [`mig`], topology, processes and metrics in
//!   [`nvml_more`]);
//! - [`precision`]: what a compute capability says (number formats, tensor cores, peak throughput).

pub mod dl;
pub mod driver;
pub mod lib_dir;
pub mod mig;
pub mod nvml;
pub mod nvml_more;
pub mod paths;
pub mod precision;
pub mod simgpu_dir;
