//! The daemon's shared state: what its threads share besides the region and the manager. [`daemon::run`]
//! builds one [`State`] and hands an `Arc` of it to each thread that needs it; a test builds its own, so
//! tests never see each other's figures.
//!
//! [`daemon::run`]: crate::daemon::run

use crate::compute::device_loop::Roster;
use crate::observe::history::Rings;
use crate::observe::sensors::Latest;
use crate::passthrough::Passthrough;
use crate::tenants::audit::Credits;

/// What the daemon's threads share, built once per daemon (or per test).
///
/// Invariants:
/// - [`State::roster`] changes (and wakes every device loop) after each vGPU the manager configures or
///   frees, so that no loop sleeps through a new vGPU's first launch.
/// - [`State::credits`] counts the tokens the daemon added to each slot's bucket since this state was
///   built: only the device loops (`crate::compute::device_loop`) add to it, only the audit
///   (`crate::tenants::audit`) reads it, and only differences between two of its readings mean anything,
///   so a slot freed and reused carries no figure over.
/// - [`State::history`]: each device's ring is written by that device's loop alone, at most every
///   `history::SAMPLE_NS`; `stats` only reads.
/// - [`State::sensors`]: written by the `sensors` thread alone (a whole reading at a time); `stats` and
///   the passthrough requests only read.
/// - [`State::passthrough`]: its state directory is set once, at the daemon's start; the requests that
///   read or write sysfs hold its lock, so they run one at a time.
#[derive(Default)]
pub(crate) struct State {
    /// Bumped whenever a vGPU is configured or removed; every device loop listens to it.
    pub roster: Roster,
    /// Tokens the daemon added to each slot's bucket (ns), for the audit.
    pub credits: Credits,
    /// The device time each vGPU and device achieved over the last seconds, for `stats`.
    pub history: Rings,
    /// The driver's last reading of each device, for `stats`.
    pub sensors: Latest,
    /// The passthrough requests' state directory and their one-at-a-time lock.
    pub passthrough: Passthrough,
}
