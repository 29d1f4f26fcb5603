//! A private simulated machine for benchmarks: the simulated GPU's environment, a Tessera daemon with its
//! own region, socket and state directory, load processes under the shim, and a sampler of the engine
//! time each process obtains (read from the simulated GPU's state file, the ground truth).

use simgpu::meter::EngineMeter;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    daemon: Option<Child>,
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
        env.extend(tessera_scheduler::paths::private_environment(&dir));
        Machine { dir, env, bin, daemon: None }
    }

    /// A command from the build folder with the machine's environment.
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        cmd.args(args).envs(self.env.iter().map(|(k, v)| (k, v)));
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("TESSERA_") || k.starts_with("SIMGPU_")) {
            if !self.env.iter().any(|(e, _)| *e == k) {
                cmd.env_remove(k);
            }
        }
        cmd
    }

    /// Starts `tessera daemon` and waits until it answers.
    pub fn start_daemon(&mut self) {
        let child = self.command("tessera", &["daemon"]).stdout(Stdio::null()).spawn().expect("spawn tessera daemon");
        self.daemon = Some(child);
        let socket = self.dir.join("tessera.sock");
        tessera_scheduler::client::wait_until_ready(&socket, Duration::from_secs(10), || Ok(()))
            .unwrap_or_else(|e| panic!("tessera daemon: {e}"));
    }

    /// Runs `tessera ARGS`, panicking with its stderr on failure.
    pub fn tessera(&self, args: &[&str]) {
        let out = self.command("tessera", args).output().expect("run tessera");
        assert!(out.status.success(), "tessera {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Starts a process of vGPU `vgpu` keeping the engine busy with `kernel` spins for `seconds`.
    pub fn load(&self, vgpu: &str, kernel: &str, seconds: f64) -> Child {
        let probe = self.bin.join("simgpu-probe").to_string_lossy().into_owned();
        let secs = format!("{seconds}");
        self.command(
            "tessera",
            &["run", "--vgpu", vgpu, "--", &probe, "saturate", "--ns", kernel, "--seconds", &secs, "--depth", "4"],
        )
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn load")
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
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
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
        let t = start.elapsed().as_secs_f64();
        at(t);
        let row = meter.read(state);
        series.t.push(t);
        series.busy.push(row);
        next += step;
    }
    series
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
