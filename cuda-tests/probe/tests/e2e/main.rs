//! The end-to-end tests: real processes (the probe, C programs on NVIDIA's `cuda.h`, the `tessera` CLI and
//! daemon, the device plugin, Prometheus...) on the simulated GPU. One test binary, one module per subject,
//! so the suite links once; the tests that measure time take `common::timing_turn()` and never run beside
//! each other.

mod common;
#[path = "../../../../scheduler/deviceplugin/cdi-schema/validator.rs"]
mod validator;

mod api;
mod apps_cuda13;
mod apps_in_vgpus;
mod audit_log;
mod batches;
mod capture;
mod checkpoint;
mod cudart;
mod cupy;
mod current_context;
mod daemon;
mod demo;
mod devices;
mod driver_calls;
mod entry_points;
mod gpu_bundle;
mod hardware;
mod hostile_metrics;
mod hostile_slots;
mod hostile_socket;
mod hostile_users;
mod hostile_writes;
mod images;
mod info;
mod ipc;
mod k8s;
mod k8s_api;
mod k8s_cdi;
mod k8s_extra;
mod k8s_incluster;
mod kernels;
mod killstorm;
mod limits;
mod liveness;
mod memory;
mod metrics;
mod new_user;
mod numba;
mod outage;
mod passthrough;
mod paths;
mod pid_namespaces;
mod provider;
mod ptxas;
mod quota;
mod real_gpu_check;
mod run;
mod scheduling;
mod security;
mod shares;
mod snapshot;
mod soft;
mod stream_frees;
mod tamper;
mod tensor;
mod top;
mod torch;
mod uncomputed;
mod visible;
mod window;
