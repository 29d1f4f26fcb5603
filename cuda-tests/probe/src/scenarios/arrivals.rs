//! `arrivals`: a client that comes and goes, as a latency-sensitive service does. It launches bursts of
//! `spin` kernels separated by idle gaps and reports how long after each burst's first launch call that
//! kernel started on the engine: the start comes from the simulated engine's own record of the kernel
//! (`SIMGPU_ENGINE_TRACE`, see `simgpu::trace`), not from anything the process or a shim measured.
//! Without that record (a real driver), it reports what the host sees instead: how long each burst took
//! from its first launch call to its synchronization's return beyond its kernels' own time (`waited_us`:
//! launch, queueing behind other work, completion notice).

use super::open;
use crate::args::Args;
use crate::fail::{During, Failure, Outcome, ensure};
use crate::ptx::Kernels;
use serde_json::json;
use simgpu::state::now_ns;
use simgpu::trace;
use std::time::Duration;

/// Host-side times of one burst's first launch.
struct Launch {
    /// Just before the launch call.
    call_ns: u64,
    /// Just after it returned.
    returned_ns: u64,
    /// Just after the burst's synchronization returned.
    done_ns: u64,
}

/// Launches `--burst` (default 5) `spin(--ns)` kernels (default 200 µs) back to back, waits for them,
/// then idles for `--gap` (default 20 ms) plus a pseudo-random extra of up to half of it, `--count`
/// times (default 200) or until `--seconds` have passed. One burst before the measured ones warms the
/// process up (module, context, whatever a shim sets up on a first launch) and is reported apart.
pub fn arrivals(args: &Args) -> Outcome {
    let ns = args.duration_ns("ns", 200_000)?;
    let burst: usize = args.number("burst", 5)?;
    let count: usize = args.number("count", 200)?;
    let gap = args.duration_ns("gap", 20_000_000)?;
    let seconds: f64 = args.number("seconds", f64::INFINITY)?;
    let device = args.device()?;
    ensure(ns > 0 && burst >= 1 && count >= 1 && seconds > 0.0, || {
        "--ns, --burst, --count and --seconds must be positive".into()
    })?;
    let path = std::env::var_os(trace::VAR).filter(|p| !p.is_empty());
    let ctx = open(args)?;
    let stream = ctx.new_stream().during("cuStreamCreate")?;
    let k = Kernels::load(&ctx)?;
    let run_burst = || -> Outcome<Launch> {
        let call_ns = now_ns();
        k.spin(&stream, ns)?;
        let returned_ns = now_ns();
        for _ in 1..burst {
            k.spin(&stream, ns)?;
        }
        stream.synchronize().during("cuStreamSynchronize")?;
        Ok(Launch { call_ns, returned_ns, done_ns: now_ns() })
    };

    let warmup = run_burst()?;
    let stop = now_ns().saturating_add((seconds.min(1e6) * 1e9) as u64);
    // A fixed-seed xorshift: arrivals must not fall in step with other clients' kernels (a fixed gap
    // after our burst ended would always land at the same point of their kernel), yet runs repeat.
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut launches = Vec::with_capacity(count.min(100_000));
    while launches.len() < count && now_ns() < stop {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_nanos(gap + seed % (gap / 2).max(1)));
        launches.push(run_burst()?);
    }

    let micros = |v: Vec<u64>| summary(v.into_iter().map(|x| x as f64 / 1e3).collect());
    let Some(path) = path else {
        let own = ns.saturating_mul(burst as u64);
        let waited = |l: &Launch| l.done_ns.saturating_sub(l.call_ns).saturating_sub(own);
        return Ok(json!({
            "kernel_ns": ns,
            "burst": burst,
            "gap_ns": gap,
            "arrivals": launches.len(),
            "clock": "host",
            "warmup": { "waited_us": waited(&warmup) as f64 / 1e3 },
            "waited_us": micros(launches.iter().map(waited).collect()),
        }));
    };
    // The stream has finished everything, so every kernel's line was written before its completion.
    let pid = std::process::id();
    let mine: Vec<trace::Entry> = trace::read(std::path::Path::new(&path))
        .map_err(|e| Failure::new(format!("{}={}: {e}", trace::VAR, path.display())))?
        .into_iter()
        .filter(|e| e.pid == pid && e.device as usize == device)
        .collect();
    let bursts = launches.len() + 1;
    ensure(mine.len() == bursts * burst, || {
        format!("the engine trace holds {} kernels of this process, {} were launched", mine.len(), bursts * burst)
    })?;
    ensure(mine.iter().all(|e| e.end_ns - e.start_ns == ns), || "a traced kernel did not run --ns".into())?;
    let first = |i: usize| &mine[i * burst];
    let last = |i: usize| &mine[i * burst + burst - 1];
    let latency = |l: &Launch, i: usize| first(i).start_ns.saturating_sub(l.call_ns);

    let measured: Vec<(&Launch, usize)> = launches.iter().zip(1..).collect();
    Ok(json!({
        "kernel_ns": ns,
        "burst": burst,
        "gap_ns": gap,
        "arrivals": launches.len(),
        "warmup": {
            "latency_us": latency(&warmup, 0) as f64 / 1e3,
            "ready_us": first(0).ready_ns.saturating_sub(warmup.call_ns) as f64 / 1e3,
        },
        "latency_us": micros(measured.iter().map(|&(l, i)| latency(l, i)).collect()),
        "ready_us": micros(measured.iter().map(|&(l, i)| first(i).ready_ns.saturating_sub(l.call_ns)).collect()),
        "queued_us": micros(measured.iter().map(|&(_, i)| first(i).start_ns.saturating_sub(first(i).ready_ns)).collect()),
        "call_ns": measured.iter().map(|&(l, _)| l.call_ns).collect::<Vec<_>>(),
        "returned_ns": measured.iter().map(|&(l, _)| l.returned_ns).collect::<Vec<_>>(),
        "ready_ns": measured.iter().map(|&(_, i)| first(i).ready_ns).collect::<Vec<_>>(),
        "start_ns": measured.iter().map(|&(_, i)| first(i).start_ns).collect::<Vec<_>>(),
        "end_ns": measured.iter().map(|&(_, i)| last(i).end_ns).collect::<Vec<_>>(),
    }))
}

/// p50, p99 and max (nearest rank) of `v`.
fn summary(mut v: Vec<f64>) -> serde_json::Value {
    v.sort_by(f64::total_cmp);
    let rank = |p: f64| v.get(((p * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1)) - 1).copied();
    json!({ "p50": rank(0.50), "p99": rank(0.99), "max": v.last().copied(), "n": v.len() })
}
