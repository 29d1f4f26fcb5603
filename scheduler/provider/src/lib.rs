//! `libaccelerator_tessera.so`: TensorFusion's accelerator provider ABI backed by Tessera, for cluster
//! hypervisors that `dlopen` one library per vendor. Both ABIs are exported: the current `Accel*` one
//! (`include/accelerator.h`) and the earlier unprefixed one (`include/accelerator_legacy.h`), the latter a
//! thin adapter onto the same implementation. What each call does is documented in docs/hypervisors.md ("For
//! cluster hypervisors").
//!
//! - [`abi`]: the C types of both ABIs, checked against `layout.tsv` at build time;
//! - [`exports`] (current) and [`legacy`] (earlier): the `extern "C"` entry points, nothing else;
//! - [`guard`]: panics caught, failures turned into result codes and log lines; [`log`]: the callback;
//! - [`context`]: the driver, NVML and device list, opened once; [`text`]: C strings in and out;
//! - by concern: [`devices`], [`topology`], [`partitions`], [`limits`] (through [`daemon`]), [`snapshot`],
//!   [`processes`], [`metrics`], [`mounts`].

pub mod abi;
pub mod context;
pub mod daemon;
pub mod devices;
pub mod exports;
pub mod guard;
pub mod legacy;
pub mod limits;
pub mod log;
pub mod metrics;
pub mod mounts;
pub mod partitions;
pub mod processes;
pub mod snapshot;
pub mod text;
pub mod topology;
