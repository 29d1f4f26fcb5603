//! When a managed vGPU's processes stop waiting for a daemon that went silent: after [`AWAY_NS`] they
//! refill their bucket themselves at the vGPU's share, and after [`SUSPENSION_GRACE_NS`] (with the daemon
//! gone) a suspension it made lapses. The shim reads the daemon's heartbeat and applies these rules
//! (`shim/src/launch/outage.rs`); the daemon beats often enough that a live one is never taken for away.

/// How long the daemon's heartbeat may be silent before its vGPUs refill themselves. The daemon beats
/// after every tick of its device loops, at least every 100 ms; host stalls of tens of milliseconds have
/// been seen on a loaded 2-CPU machine. Shorter than the region's `DAEMON_SILENCE_NS` (2 s, after which
/// processes may create vGPUs the daemon does not know): taking over a refill too early grants at most a
/// burst twice, while every 100 ms of silence stops every managed tenant.
pub const AWAY_NS: u64 = 500_000_000;

/// How long a daemon must have been silent, and gone, before a suspension it made lapses: longer than a
/// daemon takes to be restarted (a suspension also holds across a restart).
pub const SUSPENSION_GRACE_NS: u64 = 10_000_000_000;

/// Whether a daemon that last beat at `beat` (monotonic ns) is away at `now`: silent for [`AWAY_NS`].
#[inline]
pub const fn away(beat: u64, now: u64) -> bool {
    now.saturating_sub(beat) >= AWAY_NS
}

/// Whether a daemon that last beat at `beat` has been silent for [`SUSPENSION_GRACE_NS`] at `now`, after
/// which its suspensions lapse if it is gone.
#[inline]
pub const fn grace_over(beat: u64, now: u64) -> bool {
    now.saturating_sub(beat) >= SUSPENSION_GRACE_NS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_is_measured_from_the_last_beat_and_a_later_beat_is_none() {
        let beat = 100_000_000_000;
        assert!(!away(beat, beat + AWAY_NS - 1) && away(beat, beat + AWAY_NS));
        assert!(!grace_over(beat, beat + SUSPENSION_GRACE_NS - 1) && grace_over(beat, beat + SUSPENSION_GRACE_NS));
        assert!(!away(beat, beat - 1) && !grace_over(beat, 0), "a beat after the clock reading is no silence");
    }
}
