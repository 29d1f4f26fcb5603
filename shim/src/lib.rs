//! `libtessera.so`: the shim preloaded into unmodified CUDA programs.
//!
//! It intercepts the CUDA driver API and NVML on every path a program reaches them by: direct linking
//! (exported symbols), `dlopen` + `dlsym`/`dlvsym` (interposed in [`dl`]) and `cuGetProcAddress`
//! ([`proc_address`]). The intercepted functions are declared once, in [`table`]; their handlers are
//! grouped by what they govern ([`memory`], [`nvml`], [`init`]).

mod config;
mod dl;
mod elf;
mod guard;
mod hooks;
mod init;
mod log;
mod memory;
mod nvml;
mod proc_address;
mod real;
mod table;
