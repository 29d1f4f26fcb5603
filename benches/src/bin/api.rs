//! `api`: what one `stats` request costs, the read `tessera top`, an exporter or a device plugin polls.
//!
//! A private daemon on one simulated `h100` runs two vGPUs (30% and 70%) whose processes saturate the
//! device, so the daemon's refill loop ticks every millisecond as it does in use. Then:
//!
//! 1. Baseline: the daemon's CPU time (`utime + stime` of all its threads, `/proc/PID/stat`) over
//!    [`BASELINE`] with no request.
//! 2. Burst: [`REQUESTS`] `stats` requests back to back through `tessera-client` (one connection each,
//!    as the client makes them). Each is timed client side (connect, request, reply, parse); the daemon's
//!    CPU per request is its CPU time over the burst, less the baseline rate over the burst's duration,
//!    over the number of requests. Same for `list`, for comparison.
//! 3. Polling: `stats` at 10 Hz for [`POLL_FOR`]: every request must answer; the slowest is printed.
//!
//! Figures depend on the host: the simulated device's engine threads share its CPUs.

use std::time::{Duration, Instant};
use tessera_benches::{CpuTimes, Machine, cpu_ns, nearest_rank, verdict};
use tessera_client::{Client, Request, VgpuSpec};

/// Requests timed in each burst.
const REQUESTS: usize = 3000;
/// How long the daemon's idle CPU use is measured.
const BASELINE: Duration = Duration::from_secs(3);
/// How long `stats` is polled at 10 Hz.
const POLL_FOR: Duration = Duration::from_secs(5);

/// Sends `request` `n` times; returns each request's latency (µs, sorted) and the daemon's CPU time and
/// the wall time the burst took (ns).
fn burst(client: &Client, pid: u32, request: &Request, n: usize) -> (Vec<f64>, u64, u64) {
    let mut latencies = Vec::with_capacity(n);
    let (cpu0, t0) = (cpu_ns(pid), Instant::now());
    for _ in 0..n {
        let start = Instant::now();
        client.request(request).unwrap_or_else(|e| panic!("{request:?}: {e}"));
        latencies.push(start.elapsed().as_secs_f64() * 1e6);
    }
    let (cpu, wall) = (cpu_ns(pid) - cpu0, t0.elapsed().as_nanos() as u64);
    latencies.sort_by(f64::total_cmp);
    (latencies, cpu, wall)
}

fn main() {
    let host = CpuTimes::now();
    let mut m = Machine::new("api", "h100");
    m.start_daemon();
    let pid = m.daemon_pid();
    m.create(VgpuSpec::new("a", 0, 8 << 30, 30));
    m.create(VgpuSpec::new("b", 0, 8 << 30, 70));
    let seconds = (BASELINE + POLL_FOR).as_secs_f64() + 60.0;
    let mut loads = [m.load("a", "500us", seconds), m.load("b", "500us", seconds)];
    let client = m.client();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !client.stats(None).expect("stats").vgpus.iter().all(|v| v.launches > 0) {
        assert!(Instant::now() < deadline, "the loads launched nothing within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("== api: the daemon's `stats` request, two saturating vGPUs on a simulated h100");
    let cpu0 = cpu_ns(pid);
    std::thread::sleep(BASELINE);
    let idle_rate = (cpu_ns(pid) - cpu0) as f64 / BASELINE.as_nanos() as f64;
    println!("  daemon CPU with no request: {:.1}% of a CPU (refill loop at 1 ms)", idle_rate * 100.0);
    for request in [Request::Stats { name: None }, Request::List] {
        let (lat, cpu, wall) = burst(&client, pid, &request, REQUESTS);
        let per_request_us = (cpu as f64 - idle_rate * wall as f64).max(0.0) / REQUESTS as f64 / 1e3;
        println!(
            "  {:<6} x{REQUESTS}: client median {:.0} µs, p90 {:.0} µs, p99 {:.0} µs, max {:.0} µs; daemon CPU {:.0} µs \
             per request",
            request.op(),
            nearest_rank(&lat, 0.5),
            nearest_rank(&lat, 0.9),
            nearest_rank(&lat, 0.99),
            lat.last().copied().unwrap_or(0.0),
            per_request_us
        );
    }
    let (start, mut polls, mut slowest) = (Instant::now(), 0u32, Duration::ZERO);
    let mut failed = 0;
    while start.elapsed() < POLL_FOR {
        let due = start + Duration::from_millis(100) * polls;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let asked = Instant::now();
        if client.stats(None).is_err() {
            failed += 1;
        }
        slowest = slowest.max(asked.elapsed());
        polls += 1;
    }
    println!(
        "  stats at 10 Hz for {} s: {polls} polls, {failed} failed, slowest {:.0} µs: {}",
        POLL_FOR.as_secs(),
        slowest.as_secs_f64() * 1e6,
        verdict(failed == 0)
    );
    let (busy, steal) = CpuTimes::now().since(&host);
    println!("  host: {busy:.0}% CPU busy, {steal:.1}% steal over the run");
    for l in &mut loads {
        let _ = l.kill();
        let _ = l.wait();
    }
}
