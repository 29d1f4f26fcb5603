//! Binary interfaces that two sides of Tessera must agree on.
//!
//! - [`cuda`]: CUDA driver result codes as plain integers.
//! - [`cublas`]: the cuBLAS math modes and status codes of the tensor-core policy.
//! - [`proc_address`]: the real driver's `cuGetProcAddress` answers, as data.
//! - [`region`]: the versioned shared-memory region processes of one vGPU share.
//! - [`region_file`]: opening, checking and claiming slots of that region (shim and daemon alike);
//!   [`reclaim`]: giving back what dead processes held; [`futex`]: waiting on its futex words;
//!   [`timeline`]: the per-device ring of completed kernels the daemon charges device time from.
//! - [`region_open`]: where the region's files are by default and how they are opened;
//!   [`secure_fs`]: creating and opening those files so that no other user can plant one.
//! - [`nvml`]: the NVML C types the simulated NVML and the shim exchange with programs.
//! - [`units`]: the textual forms of sizes and durations accepted in every environment variable.

pub mod cublas;
pub mod cuda;
pub mod flock;
pub mod futex;
pub mod nvml;
pub mod proc_address;
pub mod reclaim;
pub mod region;
pub mod region_file;
pub mod region_open;
pub mod secure_fs;
pub mod timeline;
pub mod units;

pub use cudarc::driver::sys;
