//! simgpu's CUDA driver: a `libcuda.so.1` that runs CUDA programs on simulated devices.
//!
//! The API is implemented grouped by CUDA object (one module each), and declared once in
//! `src/implemented.rs`; from it `build.rs` exports every other symbol the real driver has as a
//! `CUDA_ERROR_NOT_SUPPORTED` stub and builds the name-to-address table that `cuGetProcAddress` answers
//! from.

#[macro_use]
mod guard;
mod array;
mod calls;
mod capture_mode;
mod checkpoint;
mod context;
mod control;
mod copy;
mod device;
mod driver;
mod event;
mod export_table;
mod gate;
mod graph;
mod handles;
mod init;
mod ipc;
mod launch;
mod link;
mod memory;
mod module;
mod occupancy;
mod pool;
mod stream;
mod suspend;
mod uncomputed;
mod visible;
mod vmm;

include!(concat!(env!("OUT_DIR"), "/exports.rs"));

/// Lets tools tell the simulated driver from NVIDIA's (which has no such symbol).
#[unsafe(no_mangle)]
pub static simgpu_marker: u8 = 1;
