//! The host scheduler: the `tessera daemon` that owns the shared region, persists the vGPU configuration,
//! refills every managed vGPU's token bucket by its compute share, and answers its API (whose clients use
//! the `tessera-client` crate). Its modules, in folders by responsibility (docs/glossary.md, "Daemon
//! modules"):
//!
//! - [`daemon`]: the daemon's life (where its files are is `tessera_host::paths`);
//! - [`vgpus`]: the vGPU configuration, its file, the region's slots, and carrying out requests;
//! - [`api`]: the socket API (JSON lines over a unix socket; the wire types and the client are the
//!   `tessera-client` crate's) and the `stats` answer;
//! - [`compute`]: sharing device time: the per-device loop that charges, asks for swap-outs and grants
//!   tokens, and the pure arithmetic it runs on;
//! - [`memory`]: device memory: swapping out idle soft vGPUs for waiting ones, recounting lowered counts;
//! - [`tenants`]: holding tenants to what they can write (process slots, joins, the audit);
//! - [`observe`]: history, the driver's sensors, Prometheus metrics, the log and the audit log;
//! - [`snapshot`]: the driver's process checkpoints and the snapshots of vGPUs made of them;
//! - [`passthrough`]: GPUs for virtual machines (discovery, VFIO, mdevs) with `tessera-passthrough`.

pub mod api;
pub mod compute;
pub mod daemon;
pub mod memory;
pub mod observe;
pub mod passthrough;
pub mod snapshot;
pub mod tenants;
pub mod vgpus;
