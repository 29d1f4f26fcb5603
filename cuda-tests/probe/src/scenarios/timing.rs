//! `spin` and `saturate`: how much engine time kernels get, measured by events and by wall clock.

use super::{TIMED, dptr, open};
use crate::args::Args;
use crate::fail::{During, Failure, Outcome, ensure};
use crate::ptx::Kernels;
use cudarc::driver::CudaEvent;
use serde_json::json;
use simgpu::state::now_ns;
use std::sync::atomic::Ordering;

/// Length of the kernel queued ahead of each timed one: it keeps the stream busy while the start event
/// and the timed kernel are submitted, so a host-side hiccup shorter than this cannot stretch the timing.
const LEAD_NS: u64 = 10_000_000;

/// Times `--count` (default 10) `spin(--ns)` kernels (default 20 ms), each between two events, with a
/// [`LEAD_NS`] kernel queued ahead of each.
pub fn spin(args: &Args) -> Outcome {
    let ns = args.duration_ns("ns", 20_000_000)?;
    let count: usize = args.number("count", 10)?;
    let ctx = open(args)?;
    let stream = ctx.new_stream().during("cuStreamCreate")?;
    let k = Kernels::load(&ctx)?;
    let (start, end) = (ctx.new_event(TIMED).during("cuEventCreate")?, ctx.new_event(TIMED).during("cuEventCreate")?);
    let mut measured = Vec::with_capacity(count);
    let (wall_start, cpu_start) = (now_ns(), cpu_ns());
    for _ in 0..count {
        // A short kernel ahead keeps the stream busy while the measured sequence is queued, so the start
        // event, the kernel and the end event run back to back as on a GPU, rather than the start event
        // waiting for the kernel's submission.
        k.spin(&stream, LEAD_NS)?;
        start.record(&stream).during("cuEventRecord")?;
        k.spin(&stream, ns)?;
        end.record(&stream).during("cuEventRecord")?;
        measured.push(start.elapsed_ms(&end).during("cuEventElapsedTime")? as f64);
    }
    let (wall_ms, cpu_ms) = ((now_ns() - wall_start) as f64 / 1e6, (cpu_ns() - cpu_start) as f64 / 1e6);
    let want = ns as f64 / 1e6;
    let error = |m: &f64| (m - want).abs() / want * 100.0;
    Ok(json!({
        "requested_ms": want,
        "wall_ms": wall_ms,
        "cpu_ms": cpu_ms,
        "measured_ms": measured,
        "min_ms": measured.iter().copied().fold(f64::INFINITY, f64::min),
        "max_ms": measured.iter().copied().fold(0.0, f64::max),
        "mean_ms": measured.iter().sum::<f64>() / count.max(1) as f64,
        "max_error_percent": measured.iter().map(error).fold(0.0, f64::max),
    }))
}

/// The most kernels `saturate --stamps-file` keeps the stamps of (16 MiB of device memory).
const MAX_STAMPED: usize = 1 << 20;

/// Launches `spin(--ns)` kernels (default 2 ms) back to back for `--seconds` (default 3), keeping at most
/// `--depth` (default 3) queued, and reports how many ran, the monotonic-clock window they ran in, and the
/// longest time between two launches returning (with when it ended: how long a launch was held, e.g. by
/// a suspended vGPU, and when it went on). With `--stamps-file PATH` it launches `spin_stamp` instead and
/// writes each kernel's start and end on the GPU's clock to PATH, "start end" a line.
pub fn saturate(args: &Args) -> Outcome {
    let ns = args.duration_ns("ns", 2_000_000)?;
    let seconds: f64 = args.number("seconds", 3.0)?;
    let depth: usize = args.number("depth", 3)?;
    ensure(depth >= 1 && seconds > 0.0, || "--depth must be at least 1 and --seconds positive".into())?;
    let stamps_file = args.text("stamps-file").map(std::path::PathBuf::from);
    let ctx = open(args)?;
    let stream = ctx.new_stream().during("cuStreamCreate")?;
    let k = Kernels::load(&ctx)?;
    let done: Vec<CudaEvent> =
        (0..depth).map(|_| ctx.new_event(None).during("cuEventCreate")).collect::<Outcome<_>>()?;
    // With --stamps-file, every kernel is a spin_stamp writing its start and end to a slot of its own
    // (two u64 each) of one buffer; without it, nothing is allocated.
    let slots = match stamps_file {
        Some(_) => {
            let capacity = (seconds * 1e9 / ns as f64) as usize + depth + 16;
            ensure(capacity <= MAX_STAMPED, || format!("--stamps-file keeps at most {MAX_STAMPED} kernels' stamps"))?;
            Some(stream.alloc_zeros::<u64>(2 * capacity).during("alloc")?)
        }
        None => None,
    };
    let stamped = slots.as_ref().map(|s| (dptr(s, &stream), s.len() / 2));

    let start = now_ns();
    let stop = start + (seconds * 1e9) as u64;
    let mut launched = 0usize;
    let (mut last, mut gap, mut gap_end) = (start, 0, start);
    while now_ns() < stop && stamped.is_none_or(|(_, capacity)| launched < capacity) {
        let slot = &done[launched % depth];
        if launched >= depth {
            slot.synchronize().during("cuEventSynchronize")?;
        }
        match stamped {
            // SAFETY: slot `launched` (< capacity) of `slots` exists and outlives the stream's work.
            Some((base, _)) => unsafe { k.spin_stamp(&stream, ns, base + 16 * launched as u64)? },
            None => k.spin(&stream, ns)?,
        }
        let now = now_ns();
        if now - last > gap {
            (gap, gap_end) = (now - last, now);
        }
        last = now;
        slot.record(&stream).during("cuEventRecord")?;
        launched += 1;
    }
    stream.synchronize().during("cuStreamSynchronize")?;
    let end = now_ns();
    if let (Some(path), Some(slots)) = (&stamps_file, &slots) {
        let stamps = stream.clone_dtoh(slots).during("dtoh copy")?;
        let lines: String = stamps.chunks(2).take(launched).map(|p| format!("{} {}\n", p[0], p[1])).collect();
        std::fs::write(path, lines).map_err(|e| Failure::new(format!("writing {}: {e}", path.display())))?;
    }
    Ok(json!({
        "kernel_ns": ns,
        "kernels": launched,
        "engine_ns": launched as u64 * ns,
        "start_ns": start,
        "end_ns": end,
        "wall_ns": end - start,
        "longest_gap_ns": gap,
        "longest_gap_end_ns": gap_end,
        "driver_busy_ns": driver_busy_ns(args.device()?),
    }))
}

/// Engine time the simulated driver charged to this process, read from the state file `SIMGPU_STATE`
/// names; `None` when it is unset (a real driver) or unreadable.
fn driver_busy_ns(device: usize) -> Option<u64> {
    std::env::var_os("SIMGPU_STATE")?;
    let config = simgpu::Config::from_env().ok()?;
    let state = simgpu::SharedState::open(&config, false).ok()?;
    let pid = std::process::id();
    let me = state.processes().find(|p| p.pid.load(Ordering::Acquire) == pid)?;
    me.busy_ns.get(device).map(|b| b.load(Ordering::Acquire))
}

/// CPU time this process has used (all threads), in nanoseconds.
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into our timespec; the process CPU clock always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
