//! Where the engine's idle time comes from, for `h` with `SHARES_IDLE=1` (an experiment's instrument, off
//! in the published runs: its sampling thread and the engine trace cost CPU on a 2-CPU host).
//!
//! While the clients run, a thread samples each vGPU's bucket in the region (tokens, queued work against
//! its window, launches waiting at the gate) every ~130 µs (a 50 µs sleep, woken late); the clients
//! record every kernel in simgpu's engine trace. Afterwards every stretch of the measured span in which the engine ran nothing is
//! attributed, by the samples taken inside it (the nearest one for a gap shorter than the sampling
//! period), to what held the launches of each vGPU:
//!
//! - `tokens`: a launch waits at the gate and its vGPU's bucket is empty (the daemon has not granted yet);
//! - `window`: a launch waits and its vGPU's queued work fills its window (the measurement of finished
//!   work has not come back yet);
//! - `woken`: a launch waits but neither holds it any more (granted; the launching thread has not run);
//! - `none waiting`: nothing waits at the gate: the programs are between launches (a sync, the host).
//!
//! Each class is printed with its idle time and its gaps by length, and which vGPU's kernel ended the gap.

use simgpu::trace::{self, Entry};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_region::file::RegionFile;
use tessera_region::futex::monotonic_ns;

/// Whether the experiment is on.
pub fn enabled() -> bool {
    std::env::var_os("SHARES_IDLE").is_some_and(|v| !v.is_empty() && v != "0")
}

/// One reading of one vGPU.
#[derive(Clone, Copy, Default)]
struct Bucket {
    tokens: i64,
    inflight: i64,
    waiters: u32,
}

/// A running sampler of the region's vGPUs.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<(u64, Vec<Bucket>)>>,
    windows: Vec<i64>,
}

/// Starts sampling vGPUs `names` of the region at `region`.
pub fn start(region: &Path, names: &[&str]) -> Sampler {
    let file = RegionFile::open(&region.to_string_lossy()).expect("open the region");
    let slots: Vec<usize> = {
        let locked = file.lock().expect("lock the region");
        names.iter().map(|n| tessera_scheduler::inspect::find(&locked, n).expect("vGPU in the region")).collect()
    };
    for &s in &slots {
        file.map_live(s, None).expect("map the vGPU's live area");
    }
    let windows = slots.iter().map(|&s| file.region().vgpus[s].config.window()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut out = Vec::with_capacity(1 << 18);
        while !flag.load(Ordering::Relaxed) {
            let row = slots
                .iter()
                .map(|&s| {
                    let x = &file.region().vgpus[s].live.sched;
                    Bucket {
                        tokens: x.tokens.load(Ordering::Relaxed),
                        inflight: x.inflight_ns.load(Ordering::Relaxed),
                        waiters: x.waiters.load(Ordering::Relaxed),
                    }
                })
                .collect();
            out.push((monotonic_ns(), row));
            std::thread::sleep(Duration::from_micros(50));
        }
        out
    });
    Sampler { stop, thread, windows }
}

/// What holds one vGPU's launches in a sample, in print order.
const STATES: [&str; 4] = ["tokens", "window", "woken", "none waiting"];
/// Upper bounds of the gap-length columns, in ns.
const LENGTHS: [(u64, &str); 4] = [(20_000, "<20µs"), (100_000, "<100µs"), (1_000_000, "<1ms"), (u64::MAX, "≥1ms")];

/// Idle time of one class: ns and gaps per length column, and ns by whose kernel ended the gap.
#[derive(Default)]
struct Tally {
    by_length: [(u64, u64); LENGTHS.len()],
    ended_by: Vec<u64>,
}

impl Sampler {
    /// Stops sampling and prints the attribution of the engine's idle time between `from_ns` and `to_ns`
    /// (monotonic), from the engine traces `traces` of the vGPUs' clients (one per vGPU, same order).
    pub fn report(self, traces: &[&Path], names: &[&str], from_ns: u64, to_ns: u64) {
        let Sampler { stop, thread, windows } = self;
        stop.store(true, Ordering::Relaxed);
        let samples = thread.join().expect("sampler");
        let mut kernels: Vec<(Entry, usize)> = Vec::new();
        for (g, path) in traces.iter().enumerate() {
            kernels.extend(trace::read(path).expect("read engine trace").into_iter().map(|e| (e, g)));
        }
        kernels.sort_by_key(|(e, _)| e.start_ns);
        let mut classes: BTreeMap<Vec<usize>, Tally> = BTreeMap::new();
        let mut busy_until = from_ns;
        let mut total = 0u64;
        for (e, g) in &kernels {
            if e.start_ns > busy_until && busy_until < to_ns {
                let (a, b) = (busy_until, e.start_ns.min(to_ns));
                let tally = classes.entry(classify(&windows, &samples, a, b)).or_default();
                let col = LENGTHS.iter().position(|&(max, _)| b - a < max).unwrap_or(0);
                tally.by_length[col].0 += b - a;
                tally.by_length[col].1 += 1;
                tally.ended_by.resize(names.len(), 0);
                tally.ended_by[*g] += b - a;
                total += b - a;
            }
            busy_until = busy_until.max(e.end_ns);
        }
        let span = (to_ns - from_ns) as f64;
        let pct = |ns: u64| ns as f64 / span * 100.0;
        println!(
            "  idle (SHARES_IDLE): {:.2}% of {:.1} s; by what held each vGPU's launches ({}; {} samples):",
            pct(total),
            span / 1e9,
            names.join(" / "),
            samples.len()
        );
        for (class, t) in &classes {
            let states: Vec<&str> = class.iter().map(|&c| STATES[c]).collect();
            let cols: Vec<String> = LENGTHS
                .iter()
                .zip(&t.by_length)
                .filter(|(_, (_, n))| *n > 0)
                .map(|((_, label), (ns, n))| format!("{label}: {n} gaps {:.2}%", pct(*ns)))
                .collect();
            let ended: Vec<String> =
                names.iter().zip(&t.ended_by).map(|(n, x)| format!("{n} {:.2}%", pct(*x))).collect();
            let sum: u64 = t.by_length.iter().map(|x| x.0).sum();
            println!(
                "    {:>28}: {:.2}% ({}; ended by {})",
                states.join(" / "),
                pct(sum),
                cols.join(", "),
                ended.join(", ")
            );
        }
    }
}

/// The class of an idle stretch from `a` to `b`, each vGPU's state ([`STATES`]): the most frequent
/// among the samples inside it, or the sample nearest its middle.
fn classify(windows: &[i64], samples: &[(u64, Vec<Bucket>)], a: u64, b: u64) -> Vec<usize> {
    let first = samples.partition_point(|(t, _)| *t < a);
    let last = samples.partition_point(|(t, _)| *t < b);
    let inside = &samples[first..last];
    if !inside.is_empty() {
        return (0..windows.len())
            .map(|g| {
                let mut votes = [0usize; STATES.len()];
                for (_, row) in inside {
                    votes[state(windows[g], &row[g])] += 1;
                }
                (0..STATES.len()).max_by_key(|&c| votes[c]).unwrap_or(3)
            })
            .collect();
    }
    let mid = a / 2 + b / 2;
    let i = samples.partition_point(|(t, _)| *t < mid);
    let near = [i.checked_sub(1), (i < samples.len()).then_some(i)]
        .into_iter()
        .flatten()
        .min_by_key(|&k| samples[k].0.abs_diff(mid));
    match near {
        Some(k) => (0..windows.len()).map(|g| state(windows[g], &samples[k].1[g])).collect(),
        None => vec![3; windows.len()],
    }
}

/// What holds a vGPU's launches in one sample (an index of [`STATES`]).
fn state(window: i64, b: &Bucket) -> usize {
    match () {
        _ if b.waiters == 0 => 3,
        _ if b.tokens <= 0 => 0,
        _ if b.inflight >= window => 1,
        _ => 2,
    }
}
