//! `libtessera.so`: the shim preloaded into unmodified CUDA programs.
//!
//! It intercepts the CUDA driver API and NVML on every path a program reaches them by: direct linking
//! (exported symbols), `dlopen` + `dlsym`/`dlvsym` (interposed in [`dl`]) and `cuGetProcAddress`
//! ([`proc_address`]). The intercepted functions are declared once, in [`table`]; their handlers are
//! grouped by what they govern ([`memory`], [`nvml`], [`init`]).
//!
//! Memory quotas: [`quota`] (the region and the accounting), [`alloc_table`] (what each allocation was
//! charged), [`contexts`] (what contexts cost), [`footprint`] (sizes computed before the driver is
//! asked), [`driver`] and [`nvml_real`] (queries the shim makes for itself), [`current`] (the calling
//! thread's current context, cached until an intercepted context call changes it).
//!
//! Compute shares: [`launch`] (every kernel launch gated on its vGPU's token bucket, its device time
//! measured with events and fed back, and the standalone share refilled without a daemon).
//!
//! Tensor-core policy: [`tensor`] (`NVIDIA_TF32_OVERRIDE=0` set when the shim loads, and `cublasSetMathMode`
//! forced to pedantic math, for a vGPU with tensor cores off).

mod alloc_table;
mod config;
mod contexts;
mod current;
mod dl;
mod driver;
use tessera_ffi::elf;
mod footprint;
mod guard;
mod hooks;
mod init;
mod launch;
mod log;
mod memory;
mod nvml;
mod nvml_real;
mod pending_free;
mod pool_cache;
mod proc_address;
mod quota;
mod real;
mod soft;
mod table;
#[cfg(test)]
mod table_check;
mod tensor;
