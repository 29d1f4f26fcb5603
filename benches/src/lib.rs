//! A private simulated machine for benchmarks: the simulated GPU's environment, a Tessera daemon with its
//! own region, socket and state directory, load processes under the shim, and a sampler of the engine
//! time each process obtains (read from the simulated GPU's state file, the ground truth), and two gauges
//! of the host under it: its CPU use and steal ([`CpuTimes`]) and how late a periodic thread runs
//! ([`HostTimer`]).

pub mod cbuild;

use simgpu::meter::EngineMeter;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_client::local::{self, LocalDaemon};
use tessera_client::{Client, VgpuSpec};

/// The build folder holding `tessera`, `simgpu-probe` and the libraries.
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    simgpu::libdir::find_build_dir(&exe).unwrap_or_else(|e| panic!("{e}\nrun `cargo build --release` first"))
}

/// One benchmark machine: a temporary directory with every file the run needs.
pub struct Machine {
    /// Where the region, socket, daemon state and simgpu state live.
    pub dir: PathBuf,
    env: Vec<(String, String)>,
    bin: PathBuf,
    daemon: Option<LocalDaemon>,
}

impl Machine {
    /// A machine with one simulated device of `profile`.
    pub fn new(tag: &str, profile: &str) -> Machine {
        let bin = build_dir();
        let folder = simgpu::libdir::prepare(&bin).expect("simgpu library folder");
        let dir = std::env::temp_dir().join(format!("tessera-bench-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("bench dir");
        let mut env = simgpu::libdir::environment(&folder, std::env::var("LD_LIBRARY_PATH").ok().as_deref());
        env.retain(|(k, _)| !k.starts_with("SIMGPU_"));
        env.extend([
            ("SIMGPU_DEVICES".into(), profile.into()),
            ("SIMGPU_STATE".into(), dir.join("simgpu.state").to_string_lossy().into_owned()),
        ]);
        env.extend(local::private_environment(&dir));
        Machine { dir, env, bin, daemon: None }
    }

    /// A command from the build folder with the machine's environment.
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        cmd.args(args);
        local::isolate(&mut cmd, &self.env, &[]);
        cmd
    }

    /// Starts `tessera daemon` and waits until it answers.
    pub fn start_daemon(&mut self) {
        self.start_daemon_with(&[]);
    }

    /// Starts `tessera daemon ARGS` and waits until it answers.
    pub fn start_daemon_with(&mut self, args: &[&str]) {
        let mut cmd = self.command("tessera", &[&["daemon"][..], args].concat());
        cmd.stdout(Stdio::null());
        let socket = local::private_socket(&self.dir);
        let daemon = LocalDaemon::start(cmd, &socket, local::START_TIMEOUT, || Ok(()))
            .unwrap_or_else(|e| panic!("tessera daemon: {e}"));
        self.daemon = Some(daemon);
    }

    /// The client of the machine's daemon.
    pub fn client(&self) -> Client {
        Client::new(local::private_socket(&self.dir))
    }

    /// The daemon's pid (0 when it is not running).
    pub fn daemon_pid(&self) -> u32 {
        self.daemon.as_ref().map_or(0, LocalDaemon::pid)
    }

    /// Creates a vGPU through the daemon, panicking on a refusal.
    pub fn create(&self, spec: VgpuSpec) {
        let name = spec.name.clone();
        self.client().create(spec).unwrap_or_else(|e| panic!("create vGPU {name}: {e}"));
    }

    /// Runs `tessera ARGS`, panicking with its stderr on failure; returns its stdout.
    pub fn tessera(&self, args: &[&str]) -> String {
        let out = self.command("tessera", args).output().expect("run tessera");
        assert!(out.status.success(), "tessera {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts a process of vGPU `vgpu` keeping the engine busy with `kernel` spins for `seconds`.
    pub fn load(&self, vgpu: &str, kernel: &str, seconds: f64) -> Child {
        self.load_command(vgpu, kernel, seconds).spawn().expect("spawn load")
    }

    /// The command of [`Machine::load`], to add to before spawning it (e.g. an engine trace).
    pub fn load_command(&self, vgpu: &str, kernel: &str, seconds: f64) -> Command {
        let secs = format!("{seconds}");
        let mut cmd = self.probe_command(vgpu, &["saturate", "--ns", kernel, "--seconds", &secs, "--depth", "4"]);
        cmd.stdout(Stdio::null());
        cmd
    }

    /// `simgpu-probe ARGS` under the shim in vGPU `vgpu` (through `tessera run`, which `exec`s it: the
    /// child's pid is the probe's).
    pub fn probe_command(&self, vgpu: &str, args: &[&str]) -> Command {
        self.probe_run(&["--vgpu", vgpu], args)
    }

    /// `simgpu-probe ARGS` under the shim in no vGPU (`tessera run` without `--vgpu`).
    pub fn standalone_probe_command(&self, args: &[&str]) -> Command {
        self.probe_run(&[], args)
    }

    /// `tessera run OPTIONS -- PROGRAM ARGS`: any program (e.g. a C client of [`cbuild`]) under the shim.
    pub fn shim_command(&self, options: &[&str], program: &Path, args: &[&str]) -> Command {
        let program = program.to_string_lossy().into_owned();
        let all: Vec<&str> = [&["run"][..], options, &["--", &program], args].concat();
        self.command("tessera", &all)
    }

    /// `tessera run OPTIONS -- simgpu-probe ARGS`.
    fn probe_run(&self, options: &[&str], args: &[&str]) -> Command {
        let probe = self.bin.join("simgpu-probe").to_string_lossy().into_owned();
        let all: Vec<&str> = [&["run"][..], options, &["--", &probe], args].concat();
        self.command("tessera", &all)
    }

    /// The simulated GPU's state, for sampling engine time per process.
    pub fn state(&self) -> simgpu::SharedState {
        let env = self.env.clone();
        let config = simgpu::Config::from_lookup(move |k| env.iter().find(|(e, _)| e == k).map(|(_, v)| v.clone()))
            .expect("simgpu config");
        simgpu::SharedState::open(&config, false).expect("simgpu state")
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Cumulative engine time per group, sampled every `step` for `total`, with the time of each sample (s).
pub struct Series {
    /// Sample times in seconds since the start.
    pub t: Vec<f64>,
    /// Cumulative engine ns per group at each sample.
    pub busy: Vec<Vec<u64>>,
}

/// Samples the engine time of the processes on device 0 in each group (a group's time is the sum of its
/// pids', including what those that exited had obtained).
pub fn sample(
    state: &simgpu::SharedState,
    groups: &[Vec<u32>],
    step: Duration,
    total: Duration,
    mut at: impl FnMut(f64),
) -> Series {
    let start = Instant::now();
    let mut series = Series { t: Vec::new(), busy: Vec::new() };
    let mut next = start;
    let mut meter = EngineMeter::new(0, groups.to_vec());
    while next.duration_since(start) <= total {
        let now = Instant::now();
        if now < next {
            std::thread::sleep(next - now);
        }
        at(start.elapsed().as_secs_f64());
        // Timed after `at`, which may take a while (running a command): the sample's time must be that of
        // its reading.
        let t = start.elapsed().as_secs_f64();
        let row = meter.read(state);
        series.t.push(t);
        series.busy.push(row);
        next += step;
    }
    series
}

impl Series {
    /// Every `n`th sample (a coarser series over the same span).
    pub fn every(&self, n: usize) -> Series {
        let keep = |i: &usize| i.is_multiple_of(n.max(1));
        Series {
            t: (0..self.t.len()).filter(keep).map(|i| self.t[i]).collect(),
            busy: (0..self.busy.len()).filter(keep).map(|i| self.busy[i].clone()).collect(),
        }
    }

    /// Index of the first sample at or after `t` seconds (the last sample when none is).
    pub fn at(&self, t: f64) -> usize {
        self.t.iter().position(|&x| x >= t).unwrap_or(self.t.len().saturating_sub(1))
    }
}

/// Writes a series as CSV (`t,group0,group1,...` with per-step shares in percent of wall time).
pub fn write_csv(path: &Path, names: &[&str], s: &Series) {
    let mut out = format!("t,{}\n", names.join(","));
    for i in 1..s.t.len() {
        let dt = (s.t[i] - s.t[i - 1]) * 1e9;
        let shares: Vec<String> =
            (0..names.len()).map(|g| format!("{:.2}", (s.busy[i][g] - s.busy[i - 1][g]) as f64 / dt * 100.0)).collect();
        out.push_str(&format!("{:.3},{}\n", s.t[i], shares.join(",")));
    }
    std::fs::write(path, out).expect("write csv");
}

/// Share (percent of wall time) each group obtained between samples `a` and `b`.
pub fn shares_between(s: &Series, a: usize, b: usize) -> Vec<f64> {
    let dt = (s.t[b] - s.t[a]) * 1e9;
    (0..s.busy[a].len()).map(|g| (s.busy[b][g] - s.busy[a][g]) as f64 / dt * 100.0).collect()
}

/// The host's CPU time counters from `/proc/stat` (all CPUs, in clock ticks), to tell how loaded the
/// machine was during a run and how much time the hypervisor took from it (steal).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTimes {
    /// Every counter summed.
    pub total: u64,
    /// Idle and I/O wait.
    pub idle: u64,
    /// Time the hypervisor ran something else while this machine wanted the CPU.
    pub steal: u64,
}

impl CpuTimes {
    /// Reads the counters now (all zero when `/proc/stat` cannot be read).
    pub fn now() -> CpuTimes {
        let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else { return CpuTimes::default() };
        // user nice system idle iowait irq softirq steal guest guest_nice; guest time is already counted in
        // user and nice, so it is left out of the total.
        let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
        let get = |i: usize| v.get(i).copied().unwrap_or(0);
        CpuTimes { total: (0..8).map(get).sum(), idle: get(3) + get(4), steal: get(7) }
    }

    /// `(busy %, steal %)` of all CPU time since `earlier`: busy is neither idle nor stolen.
    pub fn since(&self, earlier: &CpuTimes) -> (f64, f64) {
        let total = self.total.saturating_sub(earlier.total).max(1) as f64;
        let idle = self.idle.saturating_sub(earlier.idle) as f64;
        let steal = self.steal.saturating_sub(earlier.steal) as f64;
        ((total - idle - steal).max(0.0) / total * 100.0, steal / total * 100.0)
    }
}

/// A thread that sleeps to absolute deadlines every [`HostTimer::PERIOD_NS`], as the daemon's refill loop
/// does, and records how late each wake-up was: how long the host (a busy machine, or a hypervisor
/// stealing the CPU) kept a thread that was due to run from running.
pub struct HostTimer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<u64>>>,
}

/// What a [`HostTimer`] saw.
#[derive(Debug, Clone, Copy)]
pub struct Lateness {
    /// Median wake-up lateness, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Largest, µs.
    pub max_us: f64,
    /// Share of the run (%) spent in wake-ups late by more than 2 ms (counting their whole lateness).
    pub stalled_percent: f64,
}

impl HostTimer {
    /// The period of the refill loop it imitates.
    pub const PERIOD_NS: u64 = 1_000_000;

    /// Starts the thread.
    pub fn start() -> HostTimer {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut late = Vec::new();
            let mut deadline = simgpu::state::now_ns();
            while !flag.load(Ordering::Relaxed) {
                deadline += Self::PERIOD_NS;
                simgpu::kernels::sleep_until(deadline);
                let now = simgpu::state::now_ns();
                late.push(now.saturating_sub(deadline));
                // After a stall, continue from now (as the daemon does) rather than catch up.
                deadline = deadline.max(now);
            }
            late
        });
        HostTimer { stop, thread: Some(thread) }
    }

    /// Stops the thread and summarizes its wake-ups.
    pub fn finish(mut self) -> Lateness {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut late = self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default();
        late.sort_unstable();
        let at = |p: f64| if late.is_empty() { 0 } else { nearest_rank(&late, p) };
        let total: u64 = late.iter().sum::<u64>() + late.len() as u64 * Self::PERIOD_NS;
        let stalled: u64 = late.iter().filter(|&&l| l > 2_000_000).sum();
        Lateness {
            p50_us: at(0.5) as f64 / 1e3,
            p99_us: at(0.99) as f64 / 1e3,
            max_us: late.last().copied().unwrap_or(0) as f64 / 1e3,
            stalled_percent: stalled as f64 / total.max(1) as f64 * 100.0,
        }
    }
}

/// The nearest-rank `p` quantile (0 < p <= 1) of `sorted`, which is sorted ascending and not empty.
pub fn nearest_rank<T: Copy>(sorted: &[T], p: f64) -> T {
    sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Process `pid`'s CPU time so far (all threads, including those that ended), in ns.
pub fn cpu_ns(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process's /proc/PID/stat");
    // Fields after the command name (which ends with the last ')'): utime and stime are the 12th and 13th.
    let rest = &text[text.rfind(')').expect("a stat line") + 2..];
    let fields: Vec<u64> = rest.split_whitespace().skip(11).take(2).map(|f| f.parse().unwrap_or(0)).collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    fields.iter().sum::<u64>() * 1_000_000_000 / hz
}

/// How a benchmark line reports a target: `PASS` or `FAIL`.
pub fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "FAIL" }
}
