//! A managed vGPU while its daemon is away (killed, stopped, or stalled): its processes go on at the
//! vGPU's last configured share instead of stopping, and give control back as soon as the daemon beats
//! again.
//!
//! - Noticed cheaply: only a launch that finds its bucket empty compares the daemon's heartbeat (the
//!   region's [`Daemon`] record, which the daemon's refill loops advance at least every 100 ms) with the
//!   clock reading the launch has already taken. Silent for
//!   [`AWAY_NS`](tessera_policy::outage::AWAY_NS), the daemon is away.
//! - Refilled like a standalone share: `share% × time` since the later of the last local refill and the
//!   daemon's last beat (the daemon granted up to its last tick, which is when it beat: no interval is
//!   granted twice), claimed by a compare-and-swap on `last_refill_ns` so that the vGPU's processes never
//!   count the same time twice, and never past the burst (`max(2 × window, 2 ms)`, as the daemon's).
//! - Settled by the processes: nobody charges the timeline, so a launch measured while the daemon is away
//!   is not published but settled by its process, charged what it measured but at most its estimate
//!   (what the daemon last charged such launches: its span also holds time spent queued behind other
//!   vGPUs' kernels, which only the daemon's device-wide order tells apart). Each launch is either
//!   published or settled by its process, never both: nothing is charged twice, and the returning
//!   daemon finds on the timelines only what was published before it went away or after it came back.
//! - Handed back: a restarted daemon beats first thing, so the next empty bucket waits for its grants
//!   again; it re-attaches to the vGPUs and their buckets as they are (at most a burst).
//!
//! What the daemon alone does stops meanwhile: spare time is given to nobody (each vGPU keeps to its own
//! share, as if capped), `high` vGPUs no longer hold lower ones (the device's hold lives in the region,
//! which a managed vGPU's processes map read-only) but still never wait for tokens, so with shares summing
//! to at most 100 they keep at least their own; settings stay as they were.
//!
//! A suspension stays while the daemon that made it is alive, however long it is silent (stopped or
//! stalled, it will carry on and still means it), and lapses once that daemon has been silent for
//! [`SUSPENSION_GRACE_NS`](tessera_policy::outage::SUSPENSION_GRACE_NS) and is gone: its process no longer
//! exists, or it stopped (its pid cleared).
//! Nobody is left to resume the vGPU, and its processes would otherwise wait for ever; they run at its
//! share like any vGPU whose daemon is away. The suspension is still in the region: a daemon that starts
//! again beats, and their next launches wait again. Each change is said once on stderr.

use super::standalone;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use tessera_region::attach::daemon_gone;
use tessera_region::{Daemon, Sched};

/// What this process last said about its vGPU's suspension (see [`suspension_holds`]).
static SUSPENSION_SAID: AtomicU8 = AtomicU8::new(HELD);
const HELD: u8 = 0;
const HELD_SILENT: u8 = 1;
const LAPSED: u8 = 2;
/// The heartbeat of the daemon last found gone (plus one, 0: none): while it has not beaten since, it is
/// still gone, and no system call is made to find out again.
static GONE_AT_BEAT: AtomicU64 = AtomicU64::new(0);

/// Whether the suspension of a vGPU managed by `daemon` holds at `now` (monotonic ns): always while the
/// daemon beats or was silent less than
/// [`SUSPENSION_GRACE_NS`](tessera_policy::outage::SUSPENSION_GRACE_NS), and after that as long as its
/// process exists (see the module documentation). Says on stderr, once per change, when a daemon silent that
/// long keeps it, when it lapses, and when a returning daemon's holds again.
pub fn suspension_holds(daemon: &Daemon, now: u64) -> bool {
    let beat = daemon.heartbeat_ns.load(Ordering::Acquire);
    let silent = now.saturating_sub(beat);
    // No daemon ever beat in this region: whoever suspended the vGPU, it was not one that has gone since.
    if beat == 0 {
        return true;
    }
    let (holds, said) = if !tessera_policy::outage::grace_over(beat, now) {
        (true, HELD)
    } else if GONE_AT_BEAT.load(Ordering::Relaxed) == beat.wrapping_add(1) {
        (false, LAPSED)
    } else {
        let gone = daemon_gone(daemon);
        if gone {
            GONE_AT_BEAT.store(beat.wrapping_add(1), Ordering::Relaxed);
        }
        (!gone, if gone { LAPSED } else { HELD_SILENT })
    };
    let before = SUSPENSION_SAID.swap(said, Ordering::Relaxed);
    if before != said {
        let seconds = silent / 1_000_000_000;
        let pid = daemon.pid.load(Ordering::Relaxed);
        match said {
            LAPSED => crate::log::warn(format_args!(
                "the vGPU is suspended, but its daemon has been gone for {seconds} s (no process, or stopped): \
                 nobody is left to resume it, so it runs at its configured share until a daemon starts again \
                 (which suspends it again)"
            )),
            HELD_SILENT => crate::log::warn(format_args!(
                "the vGPU is suspended and its daemon (pid {pid}) has been silent for {seconds} s but still \
                 exists (stopped?): launches wait until it resumes the vGPU (`tessera vgpu resume`)"
            )),
            _ if before == LAPSED => {
                crate::log::warn(format_args!("a daemon is back: the vGPU's suspension holds again"));
            }
            _ => {}
        }
    }
    holds
}

/// When the daemon last beat, if it has been silent for [`AWAY_NS`](tessera_policy::outage::AWAY_NS) at
/// `now` (monotonic ns).
pub fn away(daemon: &Daemon, now: u64) -> Option<u64> {
    let beat = daemon.heartbeat_ns.load(Ordering::Acquire);
    tessera_policy::outage::away(beat, now).then_some(beat)
}

/// Refills `s` at `pct` percent for the time since the later of its last refill and `beat`, the daemon's
/// last heartbeat (up to which the daemon granted), never past `burst`.
pub fn refill(s: &Sched, pct: u32, now: u64, burst: i64, beat: u64) {
    standalone::refill_since(s, pct, now, burst, beat);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::admission::tests::zeroed;
    use tessera_policy::outage::{AWAY_NS, SUSPENSION_GRACE_NS};

    const S: u64 = 1_000_000_000;

    #[test]
    fn the_daemon_is_away_after_half_a_second_of_silence() {
        let d: &Daemon = zeroed();
        d.heartbeat_ns.store(100 * S, Ordering::Relaxed);
        assert_eq!(away(d, 100 * S + AWAY_NS - 1), None);
        assert_eq!(away(d, 100 * S + AWAY_NS), Some(100 * S));
        assert_eq!(away(d, 99 * S), None, "a beat after the clock reading is no silence");
    }

    #[test]
    fn a_suspension_holds_while_its_daemon_lives_and_lapses_once_it_is_gone() {
        let d: &Daemon = zeroed();
        let beat = 100 * S;
        d.heartbeat_ns.store(beat, Ordering::Relaxed);
        d.pid.store(std::process::id(), Ordering::Relaxed);
        assert!(suspension_holds(d, beat + SUSPENSION_GRACE_NS - 1), "silent, but not for long");
        assert!(suspension_holds(d, beat + 60 * S), "silent for a minute, but its process exists");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        d.pid.store(gone, Ordering::Relaxed);
        assert!(suspension_holds(d, beat + SUSPENSION_GRACE_NS - 1), "gone, but within the grace");
        assert!(!suspension_holds(d, beat + SUSPENSION_GRACE_NS), "gone for the grace: lapsed");
        d.pid.store(0, Ordering::Relaxed);
        assert!(!suspension_holds(d, beat + 20 * S), "a daemon that stopped (pid cleared) is gone too");
        let never: &Daemon = zeroed();
        assert!(suspension_holds(never, beat + 60 * S), "no daemon ever beat: not a daemon's suspension");
        // A daemon that starts again beats: the suspension holds again.
        d.heartbeat_ns.store(beat + 30 * S, Ordering::Relaxed);
        d.pid.store(std::process::id(), Ordering::Relaxed);
        assert!(suspension_holds(d, beat + 30 * S + 1));
    }

    #[test]
    fn refills_count_only_time_after_the_daemons_last_beat_and_stop_at_the_burst() {
        let s: &Sched = zeroed();
        s.last_refill_ns.store(10 * S, Ordering::Relaxed);
        // The daemon granted until 20 s; 30% of the 2 ms since then.
        refill(s, 30, 20 * S + 2_000_000, i64::MAX, 20 * S);
        assert_eq!(s.tokens.load(Ordering::Relaxed), 600_000);
        // Later refills count from the last one, once.
        refill(s, 30, 20 * S + 3_000_000, i64::MAX, 20 * S);
        refill(s, 30, 20 * S + 3_000_000, i64::MAX, 20 * S);
        assert_eq!(s.tokens.load(Ordering::Relaxed), 900_000);
        refill(s, 30, 30 * S, 2_000_000, 20 * S);
        assert_eq!(s.tokens.load(Ordering::Relaxed), 2_000_000, "no piling up past the burst");
    }
}
