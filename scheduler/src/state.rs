//! The daemon's shared state: what its threads share besides the region and the manager. [`daemon::run`]
//! builds one [`State`] and hands an `Arc` of it to each thread that needs it; a test builds its own, so
//! tests never see each other's figures.
//!
//! [`daemon::run`]: crate::daemon::run

use crate::observe::history::Rings;
use crate::observe::sensors::Latest;
use crate::tenants::audit::Credits;

/// What the daemon's threads share, built once per daemon (or per test).
///
/// Invariants:
/// - [`State::credits`] counts the tokens the daemon added to each slot's bucket since this state was
///   built: only the device loops (`crate::compute::device_loop`) add to it, only the audit
///   (`crate::tenants::audit`) reads it, and only differences between two of its readings mean anything,
///   so a slot freed and reused carries no figure over.
/// - [`State::history`]: each device's ring is written by that device's loop alone, at most every
///   `history::SAMPLE_NS`; `stats` only reads.
/// - [`State::sensors`]: written by the `sensors` thread alone (a whole reading at a time); `stats` and
///   the passthrough requests only read.
#[derive(Default)]
pub(crate) struct State {
    /// Tokens the daemon added to each slot's bucket (ns), for the audit.
    pub credits: Credits,
    /// The device time each vGPU and device achieved over the last seconds, for `stats`.
    pub history: Rings,
    /// The driver's last reading of each device, for `stats`.
    pub sensors: Latest,
}
