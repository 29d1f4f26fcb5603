//! The checks, in the order they run: each asserts only what any CUDA driver does (as
//! `cuda-tests/probe/tests/e2e/hardware.rs` does), runs every program with a time bound, and reports
//! its figures.

use crate::bounded::{Ran, run, start};
use crate::{Ctx, Outcome};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// A gibibyte.
const GIB: u64 = 1 << 30;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
const OUT_OF_MEMORY: u64 = 2;

/// The "key value" facts a C test program or application script printed (the first value of each key).
type Facts = BTreeMap<String, String>;

/// One check: its name, the most seconds its programs may take together, and what it does.
pub struct Check {
    /// The name its line and `--only` use.
    pub name: &'static str,
    /// Its time bound, in seconds.
    pub bound_s: u64,
    /// The check.
    pub run: fn(&Ctx) -> Outcome,
}

/// Every check, in order.
pub const ALL: &[Check] = &[
    Check { name: "devices", bound_s: 30, run: devices },
    Check { name: "kernels", bound_s: 30, run: kernels },
    Check { name: "spin", bound_s: 30, run: spin },
    Check { name: "quota", bound_s: 30, run: quota },
    Check { name: "quota-paths", bound_s: 60, run: quota_paths },
    Check { name: "nvml", bound_s: 30, run: nvml },
    Check { name: "direct", bound_s: 30, run: direct },
    Check { name: "tessera-run", bound_s: 30, run: tessera_run },
    Check { name: "overhead", bound_s: 120, run: overhead },
    Check { name: "shares", bound_s: 60, run: shares },
    Check { name: "mixed", bound_s: 60, run: mixed },
    Check { name: "priority", bound_s: 40, run: priority },
    Check { name: "checkpoint", bound_s: 60, run: checkpoint },
    Check { name: "torch", bound_s: 120, run: torch },
    Check { name: "cupy", bound_s: 60, run: cupy },
    Check { name: "numba", bound_s: 60, run: numba },
    Check { name: "left-as-found", bound_s: 20, run: left_as_found },
];

/// Runs `cmd` for at most `secs`, or says why it could not start.
fn bounded(mut cmd: Command, secs: u64) -> Result<Ran, Outcome> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    run(&mut cmd, Duration::from_secs(secs)).map_err(|e| Outcome::fail(format!("cannot start {program}: {e}")))
}

/// The JSON report on the first line of a probe's output, when it exited with status 0.
fn probe_report(cmd: Command, secs: u64, what: &str) -> Result<Value, Outcome> {
    let ran = bounded(cmd, secs)?;
    let first = ran.stdout.lines().next().unwrap_or("");
    match (ran.success(), serde_json::from_str::<Value>(first)) {
        (true, Ok(report)) => Ok(report),
        _ => Err(Outcome::fail(format!("{what}: {}; stdout: {}", ran.ending(), first))),
    }
}

/// The "key value" facts a C test program or application script printed, when it ended with `done ok`.
fn facts(cmd: Command, secs: u64, what: &str) -> Result<Facts, Outcome> {
    let ran = bounded(cmd, secs)?;
    let facts: Facts = ran
        .stdout
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(k, v)| (k.to_string(), v.to_string())))
        .fold(BTreeMap::new(), |mut m, (k, v)| {
            m.entry(k).or_insert(v);
            m
        });
    if ran.success() && facts.get("done").map(String::as_str) == Some("ok") {
        Ok(facts)
    } else {
        let error = facts.get("error").map(|e| format!("error {e}; ")).unwrap_or_default();
        Err(Outcome::fail(format!("{what}: {error}{}", ran.ending())))
    }
}

/// Runs `jobs` at once, each on a thread of its own: their results in order, or the first failure.
fn at_once<T: Send>(jobs: Vec<impl FnOnce() -> Result<T, Outcome> + Send>) -> Result<Vec<T>, Outcome> {
    std::thread::scope(|scope| {
        let running: Vec<_> = jobs.into_iter().map(|job| scope.spawn(job)).collect();
        running
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|_| Err(Outcome::fail("a check's thread panicked"))))
            .collect()
    })
}

/// `Err(fail)` naming `what` with `got` unless `ok`.
fn expect(ok: bool, what: &str, got: impl std::fmt::Display) -> Result<(), Outcome> {
    if ok { Ok(()) } else { Err(Outcome::fail(format!("{what}: got {got}"))) }
}

/// Turns a check written with `?` into its outcome.
fn outcome(result: Result<Outcome, Outcome>) -> Outcome {
    result.unwrap_or_else(|failed| failed)
}

/// `bin/cuda-probe ARGS` on the driver underneath, without the shim.
fn probe_cmd(ctx: &Ctx, args: &[&str]) -> Command {
    ctx.command(ctx.file("bin/cuda-probe"), args)
}

/// The driver's version and every device: name, capability, memory.
fn devices(ctx: &Ctx) -> Outcome {
    outcome((|| {
        let r = probe_report(probe_cmd(ctx, &["attributes"]), 30, "cuda-probe attributes")?;
        let count = r["device_count"].as_u64().unwrap_or(0);
        expect(count >= 1, "devices", count)?;
        let first = &r["devices"][0];
        if let Some(free) = first["mem_info_free"].as_u64() {
            let _ = ctx.free_at_start.set(free);
        }
        let detail = format!(
            "{count} device(s); device 0: {}, compute capability {}, {} bytes; driver API version {}",
            first["name"].as_str().unwrap_or("?"),
            first["compute_capability"],
            first["total_memory"],
            r["driver_version"]
        );
        Ok(Outcome::pass(detail, r))
    })())
}

/// The shipped kernels compute their results, launched from a captured graph.
fn kernels(ctx: &Ctx) -> Outcome {
    outcome((|| {
        let r = probe_report(probe_cmd(ctx, &["graph"]), 60, "cuda-probe graph")?;
        let n = r["elements"].as_u64().unwrap_or(0);
        expect(n > 0, "elements", n)?;
        let c = (n - 1) as f64 + ((n - 1) % 100) as f64;
        let f = |key: &str| r[key].as_f64().unwrap_or(f64::NAN);
        expect(f("c_last") == c, "vector_add_f32's last element", f("c_last"))?;
        expect(f("y_after_first") == 2.0 * c + 1.0, "saxpy_f32 after one replay", f("y_after_first"))?;
        expect(f("y_after_second") == 4.0 * c + 1.0, "saxpy_f32 after two replays", f("y_after_second"))?;
        Ok(Outcome::pass(format!("vector_add_f32 and saxpy_f32 computed {n} elements from a graph, twice"), r))
    })())
}

/// A 20 ms spin lasts at least 19 ms by events, five times.
fn spin(ctx: &Ctx) -> Outcome {
    outcome((|| {
        let r = probe_report(probe_cmd(ctx, &["spin", "--ns", "20ms", "--count", "5"]), 60, "cuda-probe spin")?;
        let measured: Vec<f64> = r["measured_ms"].as_array().into_iter().flatten().filter_map(Value::as_f64).collect();
        expect(measured.len() == 5, "spins measured", measured.len())?;
        expect(measured.iter().all(|ms| *ms >= 19.0), "20 ms spins, by events (ms)", format!("{measured:?}"))?;
        Ok(Outcome::pass(format!("20 ms spins took {measured:?} ms by events"), r))
    })())
}

/// Under the shim with a 1 GiB quota: the driver's and NVML's memory figures are the quota, 2 GiB is
/// refused, 256 MiB is granted.
fn quota(ctx: &Ctx) -> Outcome {
    outcome((|| {
        let shimmed = |args: &[&str]| ctx.shimmed(ctx.file("bin/cuda-probe"), args, "1GiB", "quota");
        let info = probe_report(shimmed(&["mem-info"]), 30, "cuda-probe mem-info under a 1 GiB quota")?;
        for key in ["total", "total_mem", "nvml.v1.total", "nvml.v2.total"] {
            let got = key.split('.').fold(&info, |v, k| &v[k]);
            expect(got.as_u64() == Some(GIB), &format!("{key} under a 1 GiB quota"), got)?;
        }
        let over = probe_report(shimmed(&["alloc", "--bytes", "2GiB", "--hold-ms", "0"]), 30, "2 GiB in 1 GiB")?;
        expect(over["cuda_error"].as_u64() == Some(OUT_OF_MEMORY), "cuMemAlloc of 2 GiB in 1 GiB", &over)?;
        let within = probe_report(shimmed(&["alloc", "--bytes", "256MiB", "--hold-ms", "0"]), 30, "256 MiB in 1 GiB")?;
        expect(within["allocated"] == json!(true), "cuMemAlloc of 256 MiB in 1 GiB", &within)?;
        Ok(Outcome::pass(
            "the driver and NVML show the 1 GiB quota as the device's memory; 2 GiB refused (out of memory), 256 MiB granted",
            json!({ "mem_info": info, "over": over, "within": within }),
        ))
    })())
}

/// The allocation paths the `quota-paths` check takes to the quota's edge (the probe's names).
const PATHS: [&str; 9] = ["alloc", "pitch", "managed", "async", "pool", "vmm", "array", "array3d", "mipmap"];

/// Under a 1 GiB quota, on every allocation path: a request that fills the quota exactly succeeds, the
/// smallest one over it and one a step over the room left fail with out of memory, and freeing gives
/// the bytes back. Managed memory never exceeds the quota, so never more than the card has free.
fn quota_paths(ctx: &Ctx) -> Outcome {
    outcome((|| {
        let mut figures = serde_json::Map::new();
        for path in PATHS {
            let cmd = ctx.shimmed(ctx.file("bin/cuda-probe"), &["quota-boundary", "--path", path], "1GiB", "paths");
            let r = probe_report(cmd, 13, &format!("cuda-probe quota-boundary --path {path}"))?;
            let n = |key: &str| r[key].as_u64();
            expect(n("total") == Some(GIB), &format!("{path}: the total under a 1 GiB quota"), &r)?;
            expect(n("exact") == Some(0), &format!("{path}: a request filling the quota exactly"), &r)?;
            expect(n("free_at_limit") == Some(0), &format!("{path}: free at the quota"), &r)?;
            for over in ["smallest_over", "one_step_over"] {
                expect(n(over) == Some(OUT_OF_MEMORY), &format!("{path}: {over}"), &r)?;
            }
            expect(n("again") == Some(0) && n("free_end") == n("free_before"), &format!("{path}: after a free"), &r)?;
            figures.insert(path.to_string(), r);
        }
        Ok(Outcome::pass(
            format!("the 1 GiB quota's edge held on every path: {}", PATHS.join(", ")),
            Value::Object(figures),
        ))
    })())
}

/// While a program under the shim holds 256 MiB of a 1 GiB quota, the memory NVML counts for its
/// process (what `nvidia-smi` shows) beside what Tessera counts (the quota less what the program sees
/// free): a figure each, and the process must be listed.
fn nvml(ctx: &Ctx) -> Outcome {
    outcome((|| {
        let log = ctx.scratch.join("nvml-holder.log");
        let args = ["alloc", "--bytes", "256MiB", "--hold-ms", "8000"];
        let holder = start(&mut ctx.shimmed(ctx.file("bin/cuda-probe"), &args, "1GiB", "nvml"), &log)
            .map_err(|e| Outcome::fail(format!("cannot start cuda-probe alloc: {e}")))?;
        let report = line_with(&log, "allocated", 10, "the holder's report")?;
        expect(report["allocated"] == json!(true), "256 MiB in a 1 GiB quota", &report)?;
        let tessera = GIB.saturating_sub(report["free_after"].as_u64().unwrap_or(GIB));
        let script = ctx.file("apps/nvml_processes.py");
        let ran = bounded(ctx.command("python3", &[&script.to_string_lossy()]), 20)?;
        expect(ran.success() && ran.stdout.contains("done ok"), "python3 apps/nvml_processes.py", ran.ending())?;
        let listed: BTreeMap<u32, u64> = ran
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("process "))
            .filter_map(|l| l.split_once(' '))
            .filter_map(|(pid, bytes)| Some((pid.parse().ok()?, bytes.parse().ok()?)))
            .collect();
        let pid = holder.id();
        let Some(&counted) = listed.get(&pid) else {
            return Err(Outcome::fail(format!("NVML does not list the holder (pid {pid}): {listed:?}")));
        };
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        Ok(Outcome::pass(
            format!(
                "holding 256 MiB: NVML counts {:.0} MiB for the process, Tessera {:.0} MiB of its 1 GiB quota",
                mib(counted),
                mib(tessera)
            ),
            json!({ "nvml_bytes": counted, "tessera_bytes": tessera, "allocated": 256u64 << 20, "processes": listed }),
        ))
    })())
}

/// Checks the facts of `progs/direct` under a 1 GiB quota.
fn direct_facts(f: &Facts) -> Result<(), Outcome> {
    let get = |k: &str| f.get(k).map(String::as_str).unwrap_or("(not printed)");
    expect(get("vector_add") == "ok", "vector_add_f32 from the embedded PTX", get("vector_add"))?;
    for hooked in ["cuMemAlloc_v2", "cuLaunchKernel"] {
        let key = format!("address.{hooked}");
        expect(get(&key) == format!("libtessera.so:{hooked}"), &key, get(&key))?;
    }
    expect(get("mem_total") == GIB.to_string(), "cuMemGetInfo's total", get("mem_total"))?;
    expect(
        get("over_quota_alloc") == OUT_OF_MEMORY.to_string(),
        "an allocation above the quota",
        get("over_quota_alloc"),
    )
}

/// A C program linked to `libcuda.so.1` computes under the shim, its calls land in the shim, and the
/// quota holds.
fn direct(ctx: &Ctx) -> Outcome {
    outcome((|| {
        let gib = GIB.to_string();
        let f = facts(ctx.shimmed(ctx.file("progs/direct"), &[&gib], "1GiB", "direct"), 60, "progs/direct")?;
        direct_facts(&f)?;
        Ok(Outcome::pass("computed under the shim; its calls resolved to libtessera.so; 1 GiB quota held", json!(f)))
    })())
}

/// `tessera run --memory 1GiB` runs the same program under the shim.
fn tessera_run(ctx: &Ctx) -> Outcome {
    outcome((|| {
        let direct = ctx.file("progs/direct");
        let (direct, gib) = (direct.to_string_lossy(), GIB.to_string());
        let mut cmd = ctx.command(ctx.file("bin/tessera"), &["run", "--memory", "1GiB", "--", &direct, &gib]);
        cmd.env("TESSERA_REGION", ctx.scratch.join("run.region"));
        let f = facts(cmd, 60, "tessera run --memory 1GiB -- progs/direct")?;
        direct_facts(&f)?;
        Ok(Outcome::pass("tessera run put the program under the shim with its 1 GiB quota", json!(f)))
    })())
}

/// A private daemon for one check (its socket, region and state in a folder of the scratch), killed
/// when dropped.
struct Daemon {
    folder: std::path::PathBuf,
    _process: crate::bounded::Background,
}

impl Daemon {
    /// Starts `tessera daemon` and waits (10 s at most) for its socket.
    fn start(ctx: &Ctx, tag: &str) -> Result<Daemon, Outcome> {
        let folder = ctx.scratch.join(tag);
        std::fs::create_dir_all(&folder)
            .map_err(|e| Outcome::fail(format!("cannot make {}: {e}", folder.display())))?;
        let log = folder.join("daemon.log");
        let mut cmd = ctx.command(ctx.file("bin/tessera"), &["daemon"]);
        Daemon::environment(&mut cmd, &folder);
        let process = start(&mut cmd, &log).map_err(|e| Outcome::fail(format!("cannot start tessera daemon: {e}")))?;
        let daemon = Daemon { folder, _process: process };
        let socket = daemon.folder.join("tessera.sock");
        wait_for(10, "the daemon's socket", || {
            socket
                .exists()
                .then_some(())
                .ok_or_else(|| format!("none; its log: {}", std::fs::read_to_string(&log).unwrap_or_default()))
        })?;
        Ok(daemon)
    }

    /// Points `cmd` at the daemon whose files are in `folder`.
    fn environment(cmd: &mut Command, folder: &std::path::Path) {
        cmd.env("TESSERA_SOCKET", folder.join("tessera.sock"))
            .env("TESSERA_REGION", folder.join("tessera.region"))
            .env("TESSERA_STATE_DIR", folder.join("state"));
    }

    /// `bin/tessera ARGS` talking to this daemon.
    fn tessera(&self, ctx: &Ctx, args: &[&str]) -> Command {
        let mut cmd = ctx.command(ctx.file("bin/tessera"), args);
        Daemon::environment(&mut cmd, &self.folder);
        cmd
    }

    /// `tessera vgpu create NAME --device 0 --memory 4GiB --share SHARE`.
    fn create(&self, ctx: &Ctx, name: &str, share: u32) -> Result<(), Outcome> {
        self.create_with(ctx, name, share, "normal")
    }

    /// [`Daemon::create`] with `--priority PRIORITY`.
    fn create_with(&self, ctx: &Ctx, name: &str, share: u32, priority: &str) -> Result<(), Outcome> {
        let share = share.to_string();
        let args =
            ["vgpu", "create", name, "--device", "0", "--memory", "4GiB", "--share", &share, "--priority", priority];
        let ran = bounded(self.tessera(ctx, &args), 10)?;
        expect(
            ran.success(),
            &format!("tessera vgpu create {name} --share {share} --priority {priority}"),
            ran.ending(),
        )
    }

    /// Makes `vgpus` (name, share) the daemon's only vGPUs among `names` (their shares on device 0 may
    /// sum to 100% at most, so a layout replaces the one before).
    fn layout(&self, ctx: &Ctx, names: &[&str], vgpus: &[(&str, u32)]) -> Result<(), Outcome> {
        for name in names {
            // Absent ones answer an error, which is what is wanted.
            bounded(self.tessera(ctx, &["vgpu", "rm", name]), 10)?;
        }
        vgpus.iter().try_for_each(|(name, share)| self.create(ctx, name, *share))
    }

    /// The device time the daemon has charged vGPU `name` (`tessera vgpu show NAME --json`'s
    /// `device_ns`).
    fn charged_ns(&self, ctx: &Ctx, name: &str) -> Result<f64, Outcome> {
        let show = bounded(self.tessera(ctx, &["vgpu", "show", name, "--json"]), 10)?;
        let ns = serde_json::from_str::<Value>(&show.stdout).ok().and_then(|v| v["device_ns"].as_f64());
        ns.ok_or_else(|| Outcome::fail(format!("tessera vgpu show {name} --json: {}", show.ending())))
    }

    /// `cuda-probe ARGS` left running in vGPU `name` (a load beside a measurement), its output to a
    /// log of the daemon's folder; killed when the returned guard drops.
    fn start_in(&self, ctx: &Ctx, name: &str, args: &[&str]) -> Result<crate::bounded::Background, Outcome> {
        let mut cmd = self.run_in(ctx, name, &ctx.file("bin/cuda-probe"), args);
        start(&mut cmd, &self.folder.join(format!("{name}.log")))
            .map_err(|e| Outcome::fail(format!("cannot start cuda-probe {} in vGPU {name}: {e}", args.join(" "))))
    }

    /// `tessera run --vgpu NAME -- PROGRAM ARGS`.
    fn run_in(&self, ctx: &Ctx, name: &str, program: &std::path::Path, args: &[&str]) -> Command {
        let program = program.to_string_lossy();
        let mut all = vec!["run", "--vgpu", name, "--", &program];
        all.extend_from_slice(args);
        self.tessera(ctx, &all)
    }
}

/// The configurations the overhead check interleaves.
#[derive(Clone, Copy)]
enum Config {
    /// No shim.
    Native,
    /// The shim with no setting.
    Shim,
    /// The shim with an 8 GiB quota.
    Quota,
    /// A vGPU of share 100: tokens always there.
    Vgpu,
    /// A vGPU of share 50 beside one of 50 kept busy with 500 µs kernels (launches may wait for
    /// tokens: reported, no target).
    VgpuBusy,
}

/// The configurations in the order of a round, with the names the report gives them.
const CONFIGS: [(Config, &str); 5] = [
    (Config::Native, "native"),
    (Config::Shim, "shim"),
    (Config::Quota, "shim, 8 GiB quota"),
    (Config::Vgpu, "vGPU 100"),
    (Config::VgpuBusy, "vGPU 50 + busy neighbour"),
];
/// The vGPUs the overhead check's configurations use.
const VGPUS: [&str; 3] = ["full", "half", "busy"];
/// Rounds of the overhead check (each runs every configuration once, each round starting one later).
const OVERHEAD_ROUNDS: usize = 3;

/// One run of `progs/overhead` in `config`; its report.
fn overhead_once(ctx: &Ctx, daemon: &Daemon, config: Config, what: &str) -> Result<Value, Outcome> {
    let program = ctx.file("progs/overhead");
    let args = ["--launches", "10000", "--pairs", "2000", "--events", "10000"];
    let cmd = match config {
        Config::Native => ctx.command(&program, &args),
        Config::Shim => ctx.under_shim(&program, &args, "overhead"),
        Config::Quota => ctx.shimmed(&program, &args, "8GiB", "overhead"),
        Config::Vgpu => {
            daemon.layout(ctx, &VGPUS, &[("full", 100)])?;
            daemon.run_in(ctx, "full", &program, &args)
        }
        Config::VgpuBusy => {
            daemon.layout(ctx, &VGPUS, &[("half", 50), ("busy", 50)])?;
            let load = ["saturate", "--ns", "500us", "--seconds", "60"];
            let _busy = daemon.start_in(ctx, "busy", &load)?;
            std::thread::sleep(Duration::from_millis(500));
            return probe_report(daemon.run_in(ctx, "half", &program, &args), 60, what);
        }
    };
    probe_report(cmd, 60, what)
}

/// What the shim adds per call: `progs/overhead` (a C client on `cuda.h`, launches in batches of 100
/// between `cuStreamSynchronize`) natively, under the shim, under a quota and in vGPUs, interleaved; per
/// configuration the median over rounds of each operation's median batch, and the same minus native's.
/// Natively, `event_record` and `event_query` are the bare costs of the shim's per-launch measurement.
fn overhead(ctx: &Ctx) -> Outcome {
    outcome((|| {
        let daemon = Daemon::start(ctx, "overhead")?;
        let mut per: BTreeMap<(usize, String), Vec<f64>> = BTreeMap::new();
        for round in 0..OVERHEAD_ROUNDS {
            for i in 0..CONFIGS.len() {
                let index = (round + i) % CONFIGS.len();
                let (config, name) = CONFIGS[index];
                let r = overhead_once(ctx, &daemon, config, &format!("progs/overhead ({name})"))?;
                for op in r["ops"].as_array().into_iter().flatten() {
                    let (Some(op), Some(ns)) = (op["op"].as_str(), op["median_ns"].as_f64()) else { continue };
                    per.entry((index, op.to_string())).or_default().push(ns);
                }
            }
        }
        let median = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let native = |op: &str| per.get(&(0, op.to_string())).map(|v| median(v)).unwrap_or(f64::NAN);
        let mut figures = serde_json::Map::new();
        let mut line = Vec::new();
        for (index, (_, name)) in CONFIGS.iter().enumerate() {
            let mut ops = serde_json::Map::new();
            for ((_, op), values) in per.iter().filter(|((c, _), _)| *c == index) {
                let (m, native) = (median(values), native(op));
                ops.insert(op.clone(), json!({ "median_ns": m, "added_ns": m - native, "rounds": values }));
                if index != 0 && op == "launch" {
                    line.push(format!("{name} {:+.0} ns", m - native));
                }
            }
            figures.insert(name.to_string(), Value::Object(ops));
        }
        expect(!line.is_empty(), "launch figures", "none")?;
        Ok(Outcome::pass(
            format!(
                "cuLaunchKernel added (median of {OVERHEAD_ROUNDS} rounds): {}; natively cuEventRecord {:.0} ns, \
                 cuEventQuery {:.0} ns",
                line.join(", "),
                native("event_record"),
                native("event_query")
            ),
            Value::Object(figures),
        ))
    })())
}

/// How long the tenants of the `shares` and `mixed` checks saturate the device, in seconds.
const SATURATE_S: u64 = 4;
/// How far a tenant's part of the device time may be from its share, in points.
const SHARE_TOLERANCE: f64 = 2.0;

/// What tenants saturating device 0 at once got, from their kernels' own `%globaltimer` stamps.
struct Split {
    /// Each one's part of the device time its kernels' stamps span, in percent.
    parts: Vec<f64>,
    /// The time some kernel was running over the time from the first kernel's start to the last one's
    /// end, in percent.
    busy: f64,
    /// The time kernels of two or more tenants were running at once (the GPU time-slicing between their
    /// contexts; none on the simulated engine, which runs one kernel at a time), in percent of the span.
    overlap: f64,
    /// What the daemon charged each vGPU over what its kernels' stamps span, less one (0.01: 1% more).
    charge_error: Vec<f64>,
    /// The tenants' reports.
    reports: Vec<Value>,
}

/// The `(start, end)` stamps `saturate --stamps-file` wrote to `path`.
fn read_stamps(path: &std::path::Path) -> Result<Vec<(u64, u64)>, Outcome> {
    let text = std::fs::read_to_string(path).map_err(|e| Outcome::fail(format!("{}: {e}", path.display())))?;
    text.lines()
        .map(|l| {
            let mut w = l.split(' ').map(str::parse::<u64>);
            match (w.next(), w.next()) {
                (Some(Ok(a)), Some(Ok(b))) if a <= b => Ok((a, b)),
                _ => Err(Outcome::fail(format!("{}: not a stamp line: {l:?}", path.display()))),
            }
        })
        .collect()
}

/// Over intervals `(start, end, tenant)`: the time at least one runs, and the time kernels of two or
/// more tenants run at once.
fn coverage(intervals: &[(u64, u64, usize)]) -> (u64, u64) {
    // Sweep the starts and ends in time order, counting kernels running per tenant.
    let mut events: Vec<(u64, bool, usize)> =
        intervals.iter().flat_map(|&(a, b, t)| [(a, true, t), (b, false, t)]).collect();
    events.sort_by_key(|&(at, starts, _)| (at, starts));
    let tenants = intervals.iter().map(|i| i.2 + 1).max().unwrap_or(0);
    let mut running = vec![0usize; tenants];
    let (mut busy, mut shared, mut last) = (0, 0, 0);
    for (at, starts, tenant) in events {
        let active = running.iter().filter(|&&n| n > 0).count();
        if active >= 1 {
            busy += at - last;
        }
        if active >= 2 {
            shared += at - last;
        }
        last = at;
        if starts {
            running[tenant] += 1;
        } else {
            running[tenant] -= 1;
        }
    }
    (busy, shared)
}

/// Runs one tenant per `(vGPU name, share, kernel length)` in a vGPU of its own of a private daemon,
/// all at once, each saturating device 0 with `spin_stamp` kernels of its length (each waits that long
/// on `%globaltimer` and writes when it began and ended) for [`SATURATE_S`]: a tenant's device time is
/// what its kernels' stamps span.
fn split(ctx: &Ctx, tag: &str, tenants: &[(&str, u32, &str)]) -> Result<Split, Outcome> {
    let daemon = Daemon::start(ctx, tag)?;
    for (name, share, _) in tenants {
        daemon.create(ctx, name, *share)?;
    }
    let probe = ctx.file("bin/cuda-probe");
    let seconds = SATURATE_S.to_string();
    let stamps_file = |name: &str| daemon.folder.join(format!("{name}.stamps"));
    let reports = at_once(
        tenants
            .iter()
            .map(|(name, _, ns)| {
                let file = stamps_file(name);
                let file = file.to_string_lossy();
                let args = ["saturate", "--ns", ns, "--seconds", &seconds, "--stamps-file", &file];
                let cmd = daemon.run_in(ctx, name, &probe, &args);
                move || probe_report(cmd, SATURATE_S + 20, &format!("vGPU {name}'s {ns} kernels"))
            })
            .collect(),
    )?;
    let mut intervals = Vec::new();
    let mut stamped = Vec::new();
    for (i, (name, _, _)) in tenants.iter().enumerate() {
        let stamps = read_stamps(&stamps_file(name))?;
        stamped.push(stamps.iter().map(|(a, b)| (b - a) as f64).sum::<f64>());
        intervals.extend(stamps.into_iter().map(|(a, b)| (a, b, i)));
    }
    let total: f64 = stamped.iter().sum();
    expect(total > 0.0, "device time in the kernels' stamps", total)?;
    let first = intervals.iter().map(|i| i.0).min().unwrap_or(0);
    let last = intervals.iter().map(|i| i.1).max().unwrap_or(0);
    let span = (last - first).max(1) as f64;
    let (busy, shared) = coverage(&intervals);
    let mut charge_error = Vec::new();
    for ((name, _, _), took) in tenants.iter().zip(&stamped) {
        charge_error.push(daemon.charged_ns(ctx, name)? / took.max(1.0) - 1.0);
    }
    Ok(Split {
        parts: stamped.iter().map(|ns| 100.0 * ns / total).collect(),
        busy: 100.0 * busy as f64 / span,
        overlap: 100.0 * shared as f64 / span,
        charge_error,
        reports,
    })
}

/// Checks that `split`'s parts are `shares` within [`SHARE_TOLERANCE`]; "a/b" as measured.
fn within_shares(split: &Split, shares: &[u32]) -> Result<String, Outcome> {
    let measured = split.parts.iter().map(|p| format!("{p:.1}")).collect::<Vec<_>>().join("/");
    let asked = shares.iter().map(u32::to_string).collect::<Vec<_>>().join("/");
    let ok = shares.iter().zip(&split.parts).all(|(share, part)| (part - f64::from(*share)).abs() <= SHARE_TOLERANCE);
    expect(ok, &format!("the split of device time (asked {asked}, within {SHARE_TOLERANCE} points)"), &measured)?;
    Ok(measured)
}

/// The splits the `shares` check asks for.
const SPLITS: [&[(&str, u32, &str)]; 2] =
    [&[("a", 30, "1ms"), ("b", 70, "1ms")], &[("a", 10, "1ms"), ("b", 20, "1ms"), ("c", 30, "1ms"), ("d", 40, "1ms")]];

/// vGPUs of 30% and 70%, then of 10%, 20%, 30% and 40%, each saturating device 0 with 1 ms spin
/// kernels: each one's part of the device time is its share within 2 points; and what the daemon
/// charged each against what its kernels took.
fn shares(ctx: &Ctx) -> Outcome {
    outcome((|| {
        let mut line = Vec::new();
        let mut figures = Vec::new();
        for (i, tenants) in SPLITS.iter().enumerate() {
            let asked: Vec<u32> = tenants.iter().map(|t| t.1).collect();
            let split = split(ctx, &format!("shares-{i}"), tenants)?;
            let measured = within_shares(&split, &asked)?;
            let errors: Vec<String> = split.charge_error.iter().map(|e| format!("{:+.1}%", 100.0 * e)).collect();
            line.push(format!(
                "{measured} (charged {}), busy {:.1}%, overlapping {:.1}%",
                errors.join(" "),
                split.busy,
                split.overlap
            ));
            figures.push(json!({
                "asked": asked, "parts_percent": split.parts, "busy_percent": split.busy, "overlap_percent": split.overlap,
                "charge_error": split.charge_error, "reports": split.reports,
            }));
        }
        Ok(Outcome::pass(format!("device time by share: {}", line.join("; ")), json!(figures)))
    })())
}

/// Kernels of different lengths, both ways: 50 µs kernels at 30% beside 5 ms kernels at 70%, then the
/// other way round; each split within 2 points of 30/70, and how busy the device was (a figure: the
/// target is the performance issue's).
fn mixed(ctx: &Ctx) -> Outcome {
    outcome((|| {
        let mut figures = Vec::new();
        let mut line = Vec::new();
        for (tag, short, long) in [("mixed-short-30", "50us", "5ms"), ("mixed-long-30", "5ms", "50us")] {
            let split = split(ctx, tag, &[("a", 30, short), ("b", 70, long)])?;
            let measured = within_shares(&split, &[30, 70])?;
            line.push(format!(
                "{short} at 30% beside {long} at 70%: {measured}, busy {:.1}%, overlapping {:.1}%",
                split.busy, split.overlap
            ));
            figures.push(json!({
                "a": { "share": 30, "kernel": short }, "b": { "share": 70, "kernel": long },
                "parts_percent": split.parts, "busy_percent": split.busy, "overlap_percent": split.overlap,
                "charge_error": split.charge_error,
                "reports": split.reports,
            }));
        }
        Ok(Outcome::pass(line.join("; "), json!(figures)))
    })())
}

/// A `high` vGPU's bursts (5 × 200 µs kernels after idle gaps of 20-30 ms) on an idle device, then
/// beside two `normal` vGPUs (40% and 30%) saturating it with 1 ms kernels: how long each burst waited
/// beyond its kernels' own time, from its first launch call to its synchronization's return (p50, p99).
fn priority(ctx: &Ctx) -> Outcome {
    outcome((|| {
        let daemon = Daemon::start(ctx, "priority")?;
        let probe = ctx.file("bin/cuda-probe");
        daemon.create_with(ctx, "hi", 30, "high")?;
        let arrivals = |seconds: &str, what: &str| {
            let args = [
                "arrivals",
                "--ns",
                "200us",
                "--burst",
                "5",
                "--gap",
                "20ms",
                "--count",
                "100000",
                "--seconds",
                seconds,
            ];
            probe_report(daemon.run_in(ctx, "hi", &probe, &args), 30, what)
        };
        let alone = arrivals("2", "the high vGPU's bursts on an idle device")?;
        daemon.create(ctx, "n40", 40)?;
        daemon.create(ctx, "n30", 30)?;
        let load = ["saturate", "--ns", "1ms", "--seconds", "8"];
        let _n40 = daemon.start_in(ctx, "n40", &load)?;
        let _n30 = daemon.start_in(ctx, "n30", &load)?;
        std::thread::sleep(Duration::from_millis(500));
        let loaded = arrivals("5", "the high vGPU's bursts beside two saturating vGPUs")?;
        let p = |r: &Value, q: &str| r["waited_us"][q].as_f64().unwrap_or(f64::NAN);
        expect(p(&loaded, "p99").is_finite(), "p99 of the loaded bursts", &loaded)?;
        Ok(Outcome::pass(
            format!(
                "a burst waited beyond its kernels p50 {:.0} / p99 {:.0} µs alone, p50 {:.0} / p99 {:.0} µs beside two \
                 saturating normal vGPUs",
                p(&alone, "p50"),
                p(&alone, "p99"),
                p(&loaded, "p50"),
                p(&loaded, "p99")
            ),
            json!({ "alone": alone, "loaded": loaded }),
        ))
    })())
}

/// The first JSON line of the file `log` that has `key`, waiting for it up to `secs` seconds.
fn line_with(log: &std::path::Path, key: &str, secs: u64, what: &str) -> Result<Value, Outcome> {
    wait_for(secs, what, || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let found = text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|v| v.get(key).is_some());
        found.ok_or_else(|| text.trim().to_string())
    })
}

/// Polls `ready` every 50 ms for up to `secs` seconds: its value once it has one, else a failure naming
/// `what` with the last state it gave.
fn wait_for<T>(secs: u64, what: &str, mut ready: impl FnMut() -> Result<T, String>) -> Result<T, Outcome> {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        match ready() {
            Ok(value) => return Ok(value),
            Err(state) if std::time::Instant::now() >= deadline => {
                return Err(Outcome::fail(format!("{what} within {secs} s: got {state}")));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// `tessera vgpu snapshot` then `resume` of a vGPU whose tenant holds 256 MiB of buffers with distinct
/// contents, through the driver's process checkpoint API: afterwards the tenant finds every byte at the
/// same addresses and runs `vector_add_f32` on them. Skipped, with the daemon's reason, where the
/// driver offers no checkpoint API.
fn checkpoint(ctx: &Ctx) -> Outcome {
    outcome((|| {
        let daemon = Daemon::start(ctx, "checkpoint")?;
        daemon.create(ctx, "ck", 40)?;
        let trigger = daemon.folder.join("go");
        let log = daemon.folder.join("tenant.log");
        let trigger_arg = trigger.to_string_lossy();
        let args = [
            "softmem",
            "--mib",
            "256",
            "--free-large",
            "0",
            "--free-small",
            "0",
            "--rounds",
            "1",
            "--wait-file",
            &trigger_arg,
        ];
        let _tenant = start(&mut daemon.run_in(ctx, "ck", &ctx.file("bin/cuda-probe"), &args), &log)
            .map_err(|e| Outcome::fail(format!("cannot start the tenant: {e}")))?;
        line_with(&log, "ready", 30, "the tenant's ready line")?;
        let snapshot = bounded(daemon.tessera(ctx, &["vgpu", "snapshot", "ck"]), 30)?;
        // The daemon's words when the driver lacks the API (scheduler/src/snapshot/checkpoint.rs).
        if !snapshot.success() && snapshot.stderr.contains("process checkpoints need driver") {
            return Ok(Outcome::skip(format!("the driver offers no process checkpoint: {}", snapshot.ending())));
        }
        expect(snapshot.success(), "tessera vgpu snapshot ck", snapshot.ending())?;
        let resume = bounded(daemon.tessera(ctx, &["vgpu", "resume", "ck"]), 30)?;
        expect(resume.success(), "tessera vgpu resume ck", resume.ending())?;
        std::fs::write(&trigger, b"go")
            .map_err(|e| Outcome::fail(format!("cannot write {}: {e}", trigger.display())))?;
        let round = line_with(&log, "round", 30, "the tenant's round after resume")?;
        for what in ["verified", "kernel"] {
            let bad = round[what]["mismatched_words"].as_u64();
            expect(bad == Some(0), &format!("{what}: mismatched words after resume"), &round)?;
        }
        Ok(Outcome::pass(
            format!(
                "snapshot and resume of a tenant holding 256 MiB: {} bytes found as written, vector_add_f32 right",
                round["verified"]["bytes"]
            ),
            json!({ "round": round, "snapshot": snapshot.stdout.trim(), "resume": resume.stdout.trim() }),
        ))
    })())
}

/// `python3 -c "import MODULE"` with the host's python3: `None` when it works, else why not.
fn missing_module(ctx: &Ctx, module: &str) -> Option<String> {
    let cmd = ctx.command("python3", &["-c", &format!("import {module}")]);
    match bounded(cmd, 60) {
        Err(_) => Some("no python3 on PATH".into()),
        Ok(ran) if ran.success() => None,
        Ok(ran) => Some(format!("python3 cannot import {module} ({})", ran.stderr.lines().last().unwrap_or("").trim())),
    }
}

/// `apps/SCRIPT WHAT` with the host's python3 under the shim with a 2 GiB quota; its facts.
fn app(ctx: &Ctx, script: &str, what: &str, secs: u64) -> Result<Facts, Outcome> {
    let path = ctx.file(&format!("apps/{script}"));
    let mut cmd = ctx.shimmed("python3", &[&path.to_string_lossy(), what], "2GiB", script);
    cmd.env("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0");
    facts(cmd, secs, &format!("python3 apps/{script} {what} under a 2 GiB quota"))
}

/// Runs `check` when the host's python3 can import `module`, else skips with the reason.
fn with_module(ctx: &Ctx, module: &str, check: impl FnOnce() -> Result<Outcome, Outcome>) -> Outcome {
    match missing_module(ctx, module) {
        Some(why) => Outcome::skip(why),
        None => outcome(check()),
    }
}

/// `Err(fail)` unless the app printed `key want`.
fn fact_is(facts: &Facts, key: &str, want: &str, what: &str) -> Result<(), Outcome> {
    expect(facts.get(key).map(String::as_str) == Some(want), what, format!("{facts:?}"))
}

/// PyTorch under the shim with a 2 GiB quota: `mem_get_info`'s total is the quota, the caching
/// allocator refuses past it (`torch.OutOfMemoryError`), a training loop runs 50 steps.
fn torch(ctx: &Ctx) -> Outcome {
    with_module(ctx, "torch", || {
        let device = app(ctx, "torch_app.py", "device", 60)?;
        fact_is(&device, "total", &(2 * GIB).to_string(), "mem_get_info's total")?;
        let memory = app(ctx, "torch_app.py", "memory", 60)?;
        fact_is(&memory, "past_total", "refused", "past the quota")?;
        let train = app(ctx, "torch_app.py", "train", 60)?;
        fact_is(&train, "steps", "50", "training steps")?;
        let (parts, loops) = torch_split(ctx)?;
        let measured = format!("{:.1}/{:.1}", parts[0], parts[1]);
        let ok = (parts[0] - 30.0).abs() <= SHARE_TOLERANCE;
        expect(ok, "two training loops in vGPUs of 30% and 70%: the daemon's charges (within 2 points)", &measured)?;
        Ok(Outcome::pass(
            format!(
                "mem_get_info shows the 2 GiB quota, past it torch.OutOfMemoryError, 50 training steps; two loops \
                 in vGPUs of 30% and 70% were charged {measured} of the device"
            ),
            json!({ "device": device, "memory": memory, "train": train, "split_charged_percent": parts, "loops": loops }),
        ))
    })
}

/// How long the two training loops of the `torch` check run, in seconds.
const TRAIN_S: &str = "8";

/// Two PyTorch training loops at once in vGPUs of 30% and 70% of a private daemon, for [`TRAIN_S`]:
/// each one's part of what the daemon charged (Tessera's own accounting, the only figure there is:
/// PyTorch's kernels write no stamps), and each loop's facts.
fn torch_split(ctx: &Ctx) -> Result<(Vec<f64>, Vec<Facts>), Outcome> {
    let daemon = Daemon::start(ctx, "torch")?;
    let vgpus = [("a", 30), ("b", 70)];
    for (name, share) in vgpus {
        daemon.create(ctx, name, share)?;
    }
    let script = ctx.file("apps/torch_app.py");
    let script = script.to_string_lossy();
    let python = std::path::Path::new("python3");
    let loops = at_once(
        vgpus
            .iter()
            .map(|(name, _)| {
                let cmd = daemon.run_in(ctx, name, python, &[&script, "train", TRAIN_S]);
                move || facts(cmd, 60, &format!("a training loop in vGPU {name}"))
            })
            .collect(),
    )?;
    let mut charged = Vec::new();
    for (name, _) in vgpus {
        charged.push(daemon.charged_ns(ctx, name)?);
    }
    let total: f64 = charged.iter().sum();
    expect(total > 0.0, "device time charged to the training loops", total)?;
    Ok((charged.iter().map(|c| 100.0 * c / total).collect(), loops))
}

/// CuPy under the shim with a 2 GiB quota: `memGetInfo`'s total is the quota, 1 GiB fits, 3 GiB raises
/// `OutOfMemoryError`; an `ElementwiseKernel` and a `RawKernel` compile and launch.
fn cupy(ctx: &Ctx) -> Outcome {
    with_module(ctx, "cupy", || {
        let memory = app(ctx, "cupy_app.py", "memory", 60)?;
        fact_is(&memory, "total", &(2 * GIB).to_string(), "memGetInfo's total")?;
        fact_is(&memory, "three_gib", "refused", "3 GiB")?;
        let kernels = app(ctx, "cupy_app.py", "kernels", 60)?;
        Ok(Outcome::pass(
            "memGetInfo shows the 2 GiB quota, 3 GiB refused; NVRTC kernels launched",
            json!({ "memory": memory, "kernels": kernels }),
        ))
    })
}

/// numba-cuda under the shim with a 2 GiB quota: the context's memory is the quota, 3 GiB is refused;
/// a `@cuda.jit` kernel loads, launches and synchronizes (and computes its sums, on a GPU).
fn numba(ctx: &Ctx) -> Outcome {
    with_module(ctx, "numba.cuda", || {
        let quota = app(ctx, "numba_app.py", "quota", 60)?;
        fact_is(&quota, "total", &(2 * GIB).to_string(), "get_memory_info's total")?;
        fact_is(&quota, "three_gib", &format!("refused {OUT_OF_MEMORY}"), "3 GiB")?;
        let kernel = app(ctx, "numba_app.py", "kernel", 60)?;
        // The simulated driver computes no numba kernel; a GPU does.
        if !ctx.simulated() {
            fact_is(&kernel, "right", "True", "the kernel's sums")?;
        }
        Ok(Outcome::pass(
            "the context shows the 2 GiB quota, 3 GiB refused; a @cuda.jit kernel ran",
            json!({ "quota": quota, "kernel": kernel }),
        ))
    })
}

/// How far device 0's free memory may be from its reading at the start (other users of the GPU).
const FOUND_TOLERANCE: u64 = 64 << 20;

/// The GPU as the run found it: device 0's free memory, seen from a fresh context as at the start,
/// within 64 MiB of what it was (every process the checks started has ended and freed its memory).
fn left_as_found(ctx: &Ctx) -> Outcome {
    let Some(&before) = ctx.free_at_start.get() else {
        return Outcome::skip("no reading from the start (the devices check did not run)");
    };
    outcome((|| {
        let r = probe_report(probe_cmd(ctx, &["attributes"]), 30, "cuda-probe attributes")?;
        let after = r["devices"][0]["mem_info_free"].as_u64().unwrap_or(0);
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let what = format!("device 0's free memory: {:.0} MiB at the start, {:.0} MiB now", mib(before), mib(after));
        expect(before.abs_diff(after) <= FOUND_TOLERANCE, "device 0's free memory within 64 MiB of the start", &what)?;
        Ok(Outcome::pass(what, json!({ "free_before": before, "free_after": after })))
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_counts_busy_time_and_time_two_tenants_share() {
        // Tenant 0 runs 0-10 and 20-30; tenant 1 runs 5-15 and 25-26 (inside tenant 0's second kernel).
        let intervals = [(0, 10, 0), (20, 30, 0), (5, 15, 1), (25, 26, 1)];
        assert_eq!(coverage(&intervals), (25, 6));
        // Back to back, never at once (the simulated engine).
        assert_eq!(coverage(&[(0, 10, 0), (10, 20, 1), (20, 30, 0)]), (30, 0));
        assert_eq!(coverage(&[]), (0, 0));
    }

    #[test]
    fn stamp_files_are_read_strictly() {
        let dir = std::env::temp_dir().join(format!("gpu-check-stamps-{}", std::process::id()));
        std::fs::write(&dir, "1 5\n7 9\n").unwrap();
        assert_eq!(read_stamps(&dir).ok(), Some(vec![(1, 5), (7, 9)]));
        std::fs::write(&dir, "1 5\n9 7\n").unwrap();
        assert!(read_stamps(&dir).is_err_and(|o| o.detail.contains("not a stamp line")));
        std::fs::remove_file(&dir).unwrap();
    }
}
