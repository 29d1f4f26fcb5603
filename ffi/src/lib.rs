//! Binary interfaces that two sides of Tessera must agree on.
//!
//! - [`cuda`]: CUDA driver result codes as plain integers.
//! - [`checkpoint`]: the driver's process checkpoint API (CUDA 12.8+): argument structs, states, signatures.
//! - [`cublas`]: the cuBLAS math modes and status codes of the tensor-core policy.
//! - [`proc_address`]: the real driver's `cuGetProcAddress` answers, as data.
//! - [`region`]: the versioned shared-memory region processes of one vGPU share: its binary layout
//!   ([`region::layout`]) apart from the handling of its files and processes (opening, locking, claiming
//!   slots, joining a vGPU, reclaiming what dead processes held; shim and daemon alike).
//! - [`futex`]: waiting on the region's futex words; [`timeline`]: the per-device ring of completed kernels
//!   the daemon charges device time from; [`secure_fs`]: creating and opening the region's files so that
//!   no other user can plant one.
//! - [`nvml`]: the NVML C types the simulated NVML and the shim exchange with programs.
//! - [`units`]: the textual forms of sizes and durations accepted in every environment variable.
//! - [`daemon_protocol`]: the version of the daemon's socket protocol (client crate and shim alike).

pub mod checkpoint;
pub mod cublas;
pub mod cuda;
pub mod daemon_protocol;
pub mod elf;
pub mod flock;
pub mod futex;
pub mod nvml;
pub mod proc_address;
pub mod region;
pub mod secure_fs;
pub mod timeline;
pub mod units;

pub use cudarc::driver::sys;
