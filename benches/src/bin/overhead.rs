//! What the shim adds to a launch-bound program (issue 15), measured in one run of
//! `./target/release/overhead [rounds] [launches]` (default 9 rounds of 25 000 launches per operation:
//! 225 000 per configuration, about two and a half minutes):
//!
//! The client is `benches/c/overhead.c`, a C program on NVIDIA's `cuda.h` linked to the (simulated)
//! `libcuda.so.1`. It times, in batches of 100 between `cuStreamSynchronize` calls, `cuLaunchKernel`,
//! `cuLaunchKernelEx` and `cuGraphLaunch` of an empty kernel (a graph of one), and `cuMemAlloc` +
//! `cuMemFree` pairs of 256 B and 1 MiB; a batch's figure is its calls' time over their number (the
//! sync, which waits for the simulated engine, is left out), and the process reports the median batch. It
//! also reads the simulated driver's call counters (`simgpu_driver_calls`) around each operation: the calls
//! counted on its thread beyond those it made itself are the shim's, on the launching thread; those counted
//! on other threads meanwhile (the shim's measurement thread) are reported apart.
//!
//! Configurations, run round-robin (each round starting one configuration later), one process each per
//! round, on a private machine of three simulated H100s and a private daemon:
//!
//! - `native`: no shim;
//! - `shim`: under the shim with no variable (`tessera run` without options);
//! - `shim, memory limit`: `TESSERA_MEMORY_LIMIT=8GiB` (`tessera run --memory 8GiB`);
//! - `vGPU 100`: joined to a hard vGPU with share 100 (device 0): tokens are always there;
//! - `vGPU 50 + busy`: a vGPU with share 50 (device 1) beside a vGPU of 50 kept busy by a saturating load
//!   (500 µs kernels), started before the client and stopped after it, so it never disturbs the others;
//!   launches here may wait for tokens, so its figures are reported but the ≤ 50 ns target is not applied;
//! - `soft vGPU 100`: a vGPU with share 100 in soft memory mode (device 2).
//!
//! Per configuration: the median over rounds of each operation's median batch (and the lowest and highest
//! round: on this shared 2-CPU host a process's median batch varies by up to 2x from one process to the
//! next, natively too, which is why there are nine rounds), the same minus native's
//! (added ns), and the shim's driver calls per operation (all rounds' counts over all rounds' operations:
//! a count, not an estimate). Targets (issue 15): a managed launch with tokens available (vGPU 100, soft
//! vGPU 100) adds ≤ 50 ns; on the launching thread the shim makes at most one driver call per 16 launches
//! in every vGPU configuration; cuMemAlloc + cuMemFree adds ≤ 250 ns in a hard and a soft vGPU.
//!
//! To see where the time goes, `OVERHEAD_WRAP` runs every client under a command given by absolute path,
//! `%d` in it becoming the configuration's index: e.g.
//! `OVERHEAD_WRAP="/usr/bin/gdb -q -batch -x benches/src/bin/overhead-count.py --args"` counts the
//! instructions the shim executes per launch (see that file), `"/usr/bin/perf record -o /tmp/p.%d"` samples.
//! `OVERHEAD_ONLY` (comma-separated indexes of the configurations above, from 0) leaves the others out.
//! Such a run's figures are the wrapped program's, not the shim's cost.
//!
//! Figures go to `target/bench/overhead.json`; the host's CPU use and steal (`/proc/stat`) and the
//! lateness of a thread sleeping 1 ms at a time are printed: the client, the shim, the daemon and the
//! simulated engine are all threads of this host.

use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tessera_benches::{CpuTimes, HostTimer, Machine, cbuild, verdict};

/// The client's operations: key in its output, and the name printed.
const OPS: [(&str, &str); 5] = [
    ("launch", "cuLaunchKernel"),
    ("launch_ex", "cuLaunchKernelEx"),
    ("graph", "cuGraphLaunch"),
    ("alloc_256", "alloc+free 256 B"),
    ("alloc_1m", "alloc+free 1 MiB"),
];
/// How many of [`OPS`] are launches.
const LAUNCH_OPS: usize = 3;
/// Target: added ns per managed launch with tokens available.
const LAUNCH_TARGET_NS: f64 = 50.0;
/// Target: the shim's driver calls per launch on the launching thread.
const CALLS_TARGET: f64 = 1.0 / 16.0;
/// Target: added ns per cuMemAlloc + cuMemFree pair in a vGPU.
const ALLOC_TARGET_NS: f64 = 250.0;
/// Allocation pairs per operation and process.
const PAIRS: &str = "20000";
/// How long the busy vGPU's load runs before the client starts, so that it is saturating.
const BUSY_SETTLE: Duration = Duration::from_millis(300);

/// Where a configuration's client runs.
#[derive(Clone, Copy, PartialEq)]
enum Setting {
    Native,
    Shim,
    MemoryLimit,
    Vgpu(&'static str),
    /// In vGPU `half`, with vGPU `busy` saturating the same device.
    BesideBusy,
}

/// One configuration.
struct Config {
    name: &'static str,
    setting: Setting,
    device: u32,
    /// The ≤ 50 ns launch target applies (tokens always available).
    tokens: bool,
    /// In a vGPU: the call-count target applies.
    managed: bool,
    /// The allocation target applies.
    alloc_target: bool,
}

const CONFIGS: [Config; 6] = [
    Config { name: "native", setting: Setting::Native, device: 0, tokens: false, managed: false, alloc_target: false },
    Config { name: "shim", setting: Setting::Shim, device: 0, tokens: false, managed: false, alloc_target: false },
    Config {
        name: "shim, memory limit",
        setting: Setting::MemoryLimit,
        device: 0,
        tokens: false,
        managed: false,
        alloc_target: false,
    },
    Config {
        name: "vGPU 100",
        setting: Setting::Vgpu("full"),
        device: 0,
        tokens: true,
        managed: true,
        alloc_target: true,
    },
    Config {
        name: "vGPU 50 + busy",
        setting: Setting::BesideBusy,
        device: 1,
        tokens: false,
        managed: true,
        alloc_target: false,
    },
    Config {
        name: "soft vGPU 100",
        setting: Setting::Vgpu("soft"),
        device: 2,
        tokens: true,
        managed: true,
        alloc_target: true,
    },
];

/// One operation's figures from one process.
#[derive(Clone, Copy, Default)]
struct Sample {
    median_ns: f64,
    count: u64,
    /// Calls on the launching thread beyond the program's own.
    thread_extra: u64,
    /// Calls on other threads.
    other: u64,
}

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no number {key:?} in {v}"))
}

/// Runs one client process and returns its samples, in [`OPS`] order.
fn run_client(mut cmd: Command, what: &str) -> Vec<Sample> {
    let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{what}: cannot start the client: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["scenario"] == "overhead")
        .unwrap_or_else(|| {
            panic!(
                "{what}: the client printed no result ({}):\n{stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    if let Some(e) = result.get("error") {
        panic!("{what}: the client failed: {e}\n{}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(
        result["counted"] == true,
        "{what}: the driver has no call counter (simgpu_driver_calls): not the simulated driver?"
    );
    let ops = result["ops"].as_array().expect("ops");
    OPS.iter()
        .map(|(key, _)| {
            let op = ops.iter().find(|o| o["op"] == *key).unwrap_or_else(|| panic!("{what}: no {key} in {result}"));
            let (own, thread, process) = (num(op, "own_calls"), num(op, "thread_calls"), num(op, "process_calls"));
            Sample {
                median_ns: num(op, "median_ns"),
                count: num(op, "count") as u64,
                thread_extra: (thread - own).max(0.0) as u64,
                other: (process - thread).max(0.0) as u64,
            }
        })
        .collect()
}

/// The private machine: three devices, a daemon and the vGPUs.
struct Bench {
    m: Machine,
    client: PathBuf,
}

impl Bench {
    fn start() -> Bench {
        let client = cbuild::build("overhead.c");
        let mut m = Machine::new("overhead", "h100,h100,h100");
        m.start_daemon();
        for (name, device, share, mode) in [
            ("full", "0", "100", "hard"),
            ("half", "1", "50", "hard"),
            ("busy", "1", "50", "hard"),
            ("soft", "2", "100", "soft"),
        ] {
            m.tessera(&[
                "vgpu", "create", name, "--device", device, "--memory", "8GiB", "--share", share, "--mode", mode,
            ]);
        }
        Bench { m, client }
    }

    /// The client's command in configuration `c` (under `OVERHEAD_WRAP` if set; `index`: `c`'s in
    /// [`CONFIGS`]).
    fn command(&self, c: &Config, index: usize, args: &[&str]) -> Command {
        let client = self.client.to_string_lossy().into_owned();
        let wrap = wrapper(index);
        let (program, args): (PathBuf, Vec<&str>) = match wrap.split_first() {
            Some((first, rest)) => {
                let mut all: Vec<&str> = rest.iter().map(String::as_str).collect();
                all.push(&client);
                all.extend_from_slice(args);
                (PathBuf::from(first), all)
            }
            None => (self.client.clone(), args.to_vec()),
        };
        let (program, args) = (program.as_path(), args.as_slice());
        match c.setting {
            Setting::Native => self.m.command(&program.to_string_lossy(), args),
            Setting::Shim => self.m.shim_command(&[], program, args),
            Setting::MemoryLimit => self.m.shim_command(&["--memory", "8GiB"], program, args),
            Setting::Vgpu(v) => self.m.shim_command(&["--vgpu", v], program, args),
            Setting::BesideBusy => self.m.shim_command(&["--vgpu", "half"], program, args),
        }
    }

    /// The saturating load of vGPU `busy`. The daemon's audit may have suspended the vGPU after an
    /// earlier round (it judges device time taken against tokens granted over 10 s, and a load started
    /// and killed every round can end up past its tolerance): it is resumed, and that is printed, so the
    /// configuration always runs beside a busy vGPU.
    fn busy_load(&self) -> Child {
        let show: Value =
            serde_json::from_str(&self.m.tessera(&["vgpu", "show", "busy", "--json"])).expect("vgpu show --json");
        if show["suspended"] == true {
            println!("  note: vGPU busy was suspended (see the daemon's audit line above); resumed");
            self.m.tessera(&["vgpu", "resume", "busy"]);
        }
        let args = ["saturate", "--ns", "500us", "--seconds", "600", "--depth", "4", "--device", "1"];
        let mut cmd = self.m.probe_command("busy", &args);
        cmd.stdout(Stdio::null()).spawn().expect("spawn the busy vGPU's load")
    }

    /// One process of configuration `c`.
    fn sample(&self, c: &Config, index: usize, launches: &str) -> Vec<Sample> {
        let device = c.device.to_string();
        let args = ["--device", &device, "--launches", launches, "--pairs", PAIRS];
        let mut busy = (c.setting == Setting::BesideBusy).then(|| self.busy_load());
        if busy.is_some() {
            std::thread::sleep(BUSY_SETTLE);
        }
        let samples = run_client(self.command(c, index, &args), c.name);
        if let Some(load) = busy.as_mut() {
            let _ = load.kill();
            let _ = load.wait();
        }
        samples
    }
}

/// `OVERHEAD_WRAP`'s command for configuration `index` (empty when unset).
fn wrapper(index: usize) -> Vec<String> {
    let wrap = std::env::var("OVERHEAD_WRAP").unwrap_or_default();
    wrap.split_whitespace().map(|w| w.replace("%d", &index.to_string())).collect()
}

/// Whether `OVERHEAD_ONLY` (comma-separated configuration indexes) leaves configuration `index` in.
fn selected(index: usize) -> bool {
    match std::env::var("OVERHEAD_ONLY") {
        Ok(list) => list.split(',').any(|i| i.trim().parse() == Ok(index)),
        Err(_) => true,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A configuration's figures over the rounds, per operation.
struct Figures {
    /// Median over rounds of the median batch, ns per operation.
    ns: Vec<f64>,
    /// The shim's calls per operation on the launching thread (all rounds).
    thread: Vec<f64>,
    /// Calls on other threads per operation (all rounds).
    other: Vec<f64>,
    /// Lowest and highest round of each operation (ns), to judge the medians' noise by.
    range: Vec<(f64, f64)>,
}

impl Figures {
    /// Whether the configuration ran (`OVERHEAD_ONLY` may leave it out).
    fn measured(&self) -> bool {
        !self.ns[0].is_nan()
    }
}

fn figures(rounds: &[Vec<Sample>]) -> Figures {
    let per = |f: &dyn Fn(&Sample) -> u64, i: usize| {
        let count: u64 = rounds.iter().map(|r| r[i].count).sum();
        rounds.iter().map(|r| f(&r[i])).sum::<u64>() as f64 / count.max(1) as f64
    };
    Figures {
        ns: (0..OPS.len()).map(|i| median(rounds.iter().map(|r| r[i].median_ns).collect())).collect(),
        thread: (0..OPS.len()).map(|i| per(&|s| s.thread_extra, i)).collect(),
        other: (0..OPS.len()).map(|i| per(&|s| s.other, i)).collect(),
        range: (0..OPS.len())
            .map(|i| {
                rounds.iter().fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(r[i].median_ns), hi.max(r[i].median_ns)))
            })
            .collect(),
    }
}

fn print_table(all: &[Figures]) {
    let native = &all[0];
    print!("  {:<20}", "ns per call (median)");
    for (_, name) in OPS {
        print!(" {name:>18}");
    }
    println!();
    for (c, f) in CONFIGS.iter().zip(all).filter(|(_, f)| f.measured()) {
        print!("  {:<20}", c.name);
        for (i, ns) in f.ns.iter().enumerate() {
            if c.setting == Setting::Native {
                print!(" {:>18}", format!("{ns:.0}"));
            } else {
                print!(" {:>18}", format!("{ns:.0} ({:+.0})", ns - native.ns[i]));
            }
        }
        println!();
    }
    println!("  lowest - highest round (each round's figure is its process's median batch):");
    for (c, f) in CONFIGS.iter().zip(all).filter(|(_, f)| f.measured()) {
        print!("  {:<20}", c.name);
        for (lo, hi) in &f.range {
            print!(" {:>18}", format!("{lo:.0} - {hi:.0}"));
        }
        println!();
    }
    println!("  the shim's driver calls per call, on the launching thread / on other threads:");
    for (c, f) in CONFIGS.iter().zip(all).skip(1).filter(|(_, f)| f.measured()) {
        print!("  {:<20}", c.name);
        for i in 0..OPS.len() {
            print!(" {:>18}", format!("{:.3} / {:.3}", f.thread[i], f.other[i]));
        }
        println!();
    }
}

/// Prints a PASS/FAIL line per target and configuration it applies to.
fn check_targets(all: &[Figures]) {
    let native = &all[0];
    for (c, f) in CONFIGS.iter().zip(all).filter(|(_, f)| f.measured()) {
        if c.tokens {
            for (i, (_, name)) in OPS.iter().enumerate().take(LAUNCH_OPS) {
                let added = f.ns[i] - native.ns[i];
                println!(
                    "  target {name} in {} adds <= {LAUNCH_TARGET_NS:.0} ns: {added:+.0} ns  {}",
                    c.name,
                    verdict(added <= LAUNCH_TARGET_NS)
                );
            }
        }
        if c.managed {
            for (i, (_, name)) in OPS.iter().enumerate().take(LAUNCH_OPS) {
                println!(
                    "  target {name} in {}: <= 1 shim driver call per 16 launches on the launching thread: {:.3} per launch \
                     (target <= {CALLS_TARGET})  {}",
                    c.name,
                    f.thread[i],
                    verdict(f.thread[i] <= CALLS_TARGET)
                );
            }
        }
        if c.alloc_target {
            for (i, (_, name)) in OPS.iter().enumerate().skip(LAUNCH_OPS) {
                let added = f.ns[i] - native.ns[i];
                println!(
                    "  target {name} in {} adds <= {ALLOC_TARGET_NS:.0} ns: {added:+.0} ns  {}",
                    c.name,
                    verdict(added <= ALLOC_TARGET_NS)
                );
            }
        }
    }
}

fn write_json(all: &[Figures], rounds: usize, launches: &str) {
    let native = &all[0];
    let configs: Vec<Value> = CONFIGS
        .iter()
        .zip(all)
        .map(|(c, f)| {
            let ops: Vec<Value> = OPS
                .iter()
                .enumerate()
                .map(|(i, (key, _))| {
                    json!({ "op": key, "ns": f.ns[i], "added_ns": f.ns[i] - native.ns[i],
                            "lowest_round_ns": f.range[i].0, "highest_round_ns": f.range[i].1,
                            "shim_calls_thread": f.thread[i], "calls_other_threads": f.other[i] })
                })
                .collect();
            json!({ "config": c.name, "ops": ops })
        })
        .collect();
    let out = tessera_benches::build_dir().join("..").join("bench");
    std::fs::create_dir_all(&out).expect("target/bench");
    let v = json!({ "rounds": rounds, "launches_per_round": launches, "pairs_per_round": PAIRS, "configs": configs });
    std::fs::write(out.join("overhead.json"), format!("{v:#}\n")).expect("write overhead.json");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = match args.get(1).map(|s| s.parse()) {
        None => 9,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: overhead [rounds (9)] [launches per operation and round (25000)]");
            std::process::exit(2);
        }
    };
    let launches = args.get(2).cloned().unwrap_or_else(|| "25000".into());
    if launches.parse::<u32>().map_or(true, |n| n == 0) {
        eprintln!("overhead: launches {launches:?} is not a positive count");
        std::process::exit(2);
    }
    println!(
        "== launch and allocation overhead (issue 15): {rounds} rounds of {launches} launches per launch call and \
         {PAIRS} alloc+free pairs per size, configurations interleaved"
    );
    let bench = Bench::start();
    let before = CpuTimes::now();
    let timer = HostTimer::start();
    let mut samples: Vec<Vec<Vec<Sample>>> = CONFIGS.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for k in 0..CONFIGS.len() {
            let i = (round + k) % CONFIGS.len();
            if selected(i) {
                samples[i].push(bench.sample(&CONFIGS[i], i, &launches));
            }
        }
        println!("  round {} of {rounds} done", round + 1);
    }
    let late = timer.finish();
    let (busy, steal) = CpuTimes::now().since(&before);
    let all: Vec<Figures> = samples.iter().map(|s| figures(s)).collect();
    print_table(&all);
    check_targets(&all);
    write_json(&all, rounds, &launches);
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("  host during the run: CPU busy {busy:.1}%, steal {steal:.2}% of {cpus} CPUs' time (/proc/stat)");
    println!(
        "  host timer (1 ms sleeps): late by p50 {:.0} µs, p99 {:.0} µs, max {:.1} ms; {:.2}% of the run in stalls \
         over 2 ms",
        late.p50_us,
        late.p99_us,
        late.max_us / 1e3,
        late.stalled_percent
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn calls_per_operation_are_totals_over_every_round() {
        let s = |median_ns, count, thread_extra, other| Sample { median_ns, count, thread_extra, other };
        // Two rounds of five operations; the first operation: 100 + 300 launches, 400 + 0 shim calls.
        let rounds = vec![vec![s(10.0, 100, 400, 10); 5], vec![s(30.0, 300, 0, 30); 5]];
        let f = figures(&rounds);
        assert_eq!(f.thread[0], 1.0);
        assert_eq!(f.other[0], 0.1);
        assert_eq!(f.ns[0], 20.0);
        assert_eq!(f.range[0], (10.0, 30.0));
    }
}
