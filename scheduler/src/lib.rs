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
//! - [`state`]: what the daemon's threads share, built once by [`daemon::run`] and handed down (tests build
//!   their own); [`inspect`]: the daemon's reading and arithmetic, for the CLI's demo and the benches.

//!
//! Public are only [`daemon`] (`daemon::run` and its [`daemon::Options`]), [`config`] (the vGPU specs and
//! their limits, which the CLI checks before asking) and [`inspect`] (the daemon's own reading of demand and
//! split of a device, for the CLI's demo and the benches that judge it by its rule). The rest is the
//! daemon's inside, `pub(crate)`: items in it marked `pub` are visible to the crate, no further.

pub(crate) mod api;
pub(crate) mod compute;
pub mod daemon;
pub mod inspect;
pub(crate) mod memory;
pub(crate) mod observe;
pub(crate) mod passthrough;
pub(crate) mod snapshot;
pub(crate) mod state;
pub(crate) mod tenants;
pub(crate) mod vgpus;

pub use vgpus::config;
