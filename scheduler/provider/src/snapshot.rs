//! Snapshot and resume. Not available yet: the daemon's `snapshot` request (a whole vGPU or a list of
//! processes) is being added; until it is, both calls check their arguments and answer
//! `ACCEL_ERROR_NOT_SUPPORTED`, and devices report `supportsSnapshot` false.

use crate::abi::current::ACCEL_ERROR_NOT_SUPPORTED;
use crate::guard::{Fail, Outcome};

/// Whether devices can be snapshotted (reported in their capabilities).
pub const SUPPORTED: bool = false;

/// What to snapshot or resume: processes, or a whole device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// These processes.
    Processes(Vec<i32>),
    /// Every process on this device.
    Device(String),
}

/// Snapshots (`resume` false) or resumes `scope`.
pub fn run(scope: &Scope, resume: bool) -> Outcome {
    let what = if resume { "resume" } else { "snapshot" };
    Err(Fail::new(
        ACCEL_ERROR_NOT_SUPPORTED,
        format!("{what} of {scope:?} is not supported yet (it needs the daemon's snapshot request)"),
    ))
}
