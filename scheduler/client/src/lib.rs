//! The Tessera daemon's API, the only way to talk to `tessera daemon`: the wire types both sides use
//! ([`wire`], [`spec`], [`stats`]), a typed [`Client`] whose failures are [`Error`] values with an
//! [`ErrorCode`], and [`local`], which starts a private daemon (its own region, socket and state
//! directory) for the demo, the benchmarks and the tests. The protocol is described in
//! `docs/protocol.md`.

pub mod client;
pub mod devices;
pub mod error;
pub mod local;
pub mod spec;
pub mod stats;
pub mod wire;

pub use client::Client;
pub use devices::{BindReport, DeviceMode, Gpu, Mdev, MdevType, PciFunction, ReconcileReport};
pub use error::{Error, ErrorCode};
pub use spec::{Change, DEFAULT_WINDOW_NS, Mode, Priority, VgpuSpec};
pub use stats::{Achieved, DeviceStats, MemoryStats, ProcessStats, Stats, VgpuStats};
pub use wire::{
    DEFRAG_TIMEOUT, LOCK_TIMEOUT, MAX_LINE, PagerReport, Reply, Request, SNAPSHOT_TIMEOUT, VERSION, VgpuStatus,
};
