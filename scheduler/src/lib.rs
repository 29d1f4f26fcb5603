//! The host scheduler: the `tessera daemon` that owns the shared region, persists the vGPU configuration,
//! refills every managed vGPU's token bucket by its compute share, and answers its API (whose clients use
//! the `tessera-client` crate).
//!
//! - [`config`]: vGPU specs and the rules every change keeps; [`store`]: their file, written atomically;
//! - [`slots`]: writing specs into the region and reading usage back; [`manager`]: carrying out requests;
//! - [`refill`]: the token algorithm (pure); [`fairness`]: keeping the split over the long run (pure);
//!   [`ledger`]: device time from the order of completions
//!   (pure); [`charger`]: applying it to the vGPUs from their timelines; [`broker`]: finding device
//!   memory for soft-mode vGPUs by asking idle ones to swap out; [`pacer`]: the per-device loop that
//!   charges, brokers and refills;
//! - [`protocol`], [`server`]: the daemon's API, JSON lines over a unix socket (the wire types and the
//!   client are the `tessera-client` crate's); [`history`]: the device time each vGPU and device
//!   achieved over the last seconds, which [`monitor`] reports with the rest of `stats`, and
//!   [`sensors`]: the driver's figures of each device (name, UUID, utilization, power, temperature);
//!   [`metrics`], [`metrics_server`]: the same figures for Prometheus (`tessera daemon --metrics`); [`accept`]:
//!   what an accept error means to both listeners;
//! - [`integrity`]: validating the process slots tenants can write; [`recount`]: their memory counts; [`audit`]: holding each vGPU to the
//!   device time the daemon granted it, measured by the driver ([`nvml_usage`]); [`watch`]: both, every
//!   second;
//! - [`checkpoint`]: the driver's process checkpoint calls; [`snapshots`]: snapshots of vGPUs taken and
//!   given back with them (`snapshot`, `resume`);
//! - [`passthrough_ops`]: GPUs for virtual machines (discovery, VFIO, mdevs) with `tessera-passthrough`;
//! - [`daemon`]: the daemon's life (where its files are is `tessera_host::paths`); [`logger`]: its log
//!   lines, which never hold up a thread; [`audit_log`]: who changed what, and what was refused.

pub mod accept;
pub mod alone;
pub mod audit;
pub mod audit_log;
pub mod broker;
pub mod caller;
pub mod charger;
pub mod checkpoint;
pub mod config;
pub mod daemon;
pub mod fairness;
pub mod history;
pub mod integrity;
pub mod joins;
pub mod ledger;
pub mod logger;
pub mod manager;
pub mod metrics;
pub mod metrics_server;
pub mod monitor;
pub mod nvml_usage;
pub mod pacer;
pub mod passthrough_ops;
pub mod protocol;
pub mod recount;
pub mod refill;
pub mod sensors;
pub mod server;
pub mod slots;
pub mod snapshots;
pub mod store;
pub mod watch;
