//! The clocks process-utilization samples are stamped with: wall-clock microseconds, as NVML's CPU
//! timestamps are, and process start times converted to that scale.

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch.
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// Microseconds since boot (`CLOCK_BOOTTIME`, the clock `/proc/PID/stat` start times count on).
fn since_boot_us() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into our timespec; CLOCK_BOOTTIME exists on every supported Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// Clock ticks per second `/proc/PID/stat` counts in.
fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as u64 } else { 100 }
}

/// A process start time as the state file records it (clock ticks after boot), in microseconds since the
/// Unix epoch; `None` when unknown (recorded as 0).
pub fn start_us(start_ticks: u64) -> Option<u64> {
    if start_ticks == 0 {
        return None;
    }
    let boot_us = now_us().saturating_sub(since_boot_us());
    Some(boot_us + start_ticks.saturating_mul(1_000_000) / ticks_per_second())
}
