//! The daemon's socket protocol version (`docs/protocol.md`), here because both sides of it use it: the
//! client crate (every program that manages vGPUs) and the shim, which sends its `join` request itself
//! without the client crate.
//!
//! Version 2: a create or a change refused because the device has no share or memory left for it is
//! `resource_exhausted` (version 1 said `invalid`, and clients told the two apart by the message).

/// The protocol version every request and reply carries.
pub const VERSION: u32 = 2;
