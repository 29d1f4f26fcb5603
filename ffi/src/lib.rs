//! Binary interfaces that two sides of Tessera must agree on: plain C ABI types and data, nothing of the
//! region protocol between Tessera's own processes (that is the `tessera-region` crate, `ffi/region/`,
//! which builds on this one).
//!
//! - [`cuda`]: CUDA driver result codes as plain integers, and [`sys`]: cudarc's bindings of `cuda.h`.
//! - [`checkpoint`]: the driver's process checkpoint API (CUDA 12.8+): argument structs, states, signatures.
//! - [`cublas`]: the cuBLAS math modes and status codes of the tensor-core policy.
//! - [`proc_address`]: the real driver's `cuGetProcAddress` answers, as data.
//! - [`elf`]: reading a loaded object's dynamic symbol table (the shim's way to libc's own `dlsym`).
//! - [`nvml`]: the NVML C types the simulated NVML and the shim exchange with programs.
//! - [`units`]: the textual forms of sizes and durations accepted in every environment variable.
//! - [`daemon_protocol`]: the version of the daemon's socket protocol (client crate and shim alike).

pub mod checkpoint;
pub mod cublas;
pub mod cuda;
pub mod daemon_protocol;
pub mod elf;
pub mod nvml;
pub mod proc_address;
pub mod units;

pub use cudarc::driver::sys;
