//! The `tessera` command in tests: finding the executable, and a simulated machine with a Tessera daemon
//! of its own (private region, socket and state directory), its CLI, and tenant processes run under
//! `tessera run --vgpu`.

use super::{Guarded, Sim, build_dir, u64_at};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;
use tessera_client::Client;
use tessera_client::local::LocalDaemon;

/// The `tessera` executable cargo built beside the libraries (the build folder may be `deps/`, which
/// holds the libraries too).
pub fn tessera() -> PathBuf {
    let dir = build_dir();
    let candidates = [dir.join("tessera"), dir.parent().unwrap().join("tessera")];
    let found = candidates.iter().find(|p| p.is_file());
    found.unwrap_or_else(|| panic!("tessera is not in {candidates:?}: run `cargo build --release` first")).clone()
}

/// A simulated machine (one `small` device unless told otherwise) with its own daemon files, in a
/// temporary directory removed on drop; the daemon, if started, is killed then.
pub struct Machine {
    /// The machine's environment (without the shim: the daemon and the CLI never run under it).
    pub sim: Sim,
    /// Where the region, socket and state directory are.
    pub dir: PathBuf,
    daemon: Option<LocalDaemon>,
}

impl Machine {
    /// A machine for test `tag` with simulated devices `devices` (e.g. `small`, `small,small`).
    pub fn new(tag: &str, devices: &str) -> Machine {
        let dir = std::env::temp_dir().join(format!("tessera-daemon-test-{}-{tag}", std::process::id()));
        let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let sim = Sim::new(tag)
            .without_shim()
            .with("SIMGPU_DEVICES", devices)
            .with("TESSERA_REGION", &path("tessera.region"))
            .with("TESSERA_SOCKET", &path("tessera.sock"))
            .with("TESSERA_STATE_DIR", &path("state"));
        // Created only once nothing can fail before `Drop` takes care of it.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test directory");
        Machine { sim, dir, daemon: None }
    }

    /// Changes the machine's environment (before [`Machine::start`], for the daemon to see it too).
    pub fn configure(&mut self, change: impl FnOnce(Sim) -> Sim) {
        let sim = std::mem::replace(&mut self.sim, Sim::new("placeholder"));
        self.sim = change(sim);
    }

    /// A file of the machine's directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `tessera ARGS` with the machine's environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = self.sim.command_for(tessera(), args);
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Runs `tessera ARGS` to completion.
    pub fn tessera(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run tessera")
    }

    /// Runs `tessera ARGS`, failing the test unless it succeeds; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.tessera(args);
        assert!(out.status.success(), "tessera {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `tessera ARGS`, failing the test unless it exits with `code`; returns its stderr.
    pub fn fails(&self, code: i32, args: &[&str]) -> String {
        let out = self.tessera(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(code), "tessera {args:?} should exit {code}; stderr: {stderr}");
        stderr
    }

    /// `tessera vgpu show NAME --json`.
    pub fn show(&self, name: &str) -> Value {
        serde_json::from_str(&self.ok(&["vgpu", "show", name, "--json"])).expect("vgpu show --json prints JSON")
    }

    /// `tessera vgpu list --json`.
    pub fn list(&self) -> Value {
        serde_json::from_str(&self.ok(&["vgpu", "list", "--json"])).expect("vgpu list --json prints JSON")
    }

    /// Starts `saturate` (500 µs kernels, 4 deep) in vGPU `name` for `seconds`, its kernels traced to
    /// `trace` when given (`SIMGPU_ENGINE_TRACE`); killed if dropped before it is waited for.
    pub fn saturate(&self, name: &str, seconds: &str, trace: Option<&Path>) -> Guarded {
        self.saturate_with(name, "500us", seconds, trace)
    }

    /// [`Machine::saturate`] with kernels of `kernel` (a duration, `2ms`): longer kernels keep the engine
    /// busy through longer delays in scheduling the tenant's CPU (4 kernels queued last 4 × `kernel`).
    pub fn saturate_with(&self, name: &str, kernel: &str, seconds: &str, trace: Option<&Path>) -> Guarded {
        let mut cmd = self.tenant(name, &["saturate", "--ns", kernel, "--seconds", seconds, "--depth", "4"]);
        if let Some(trace) = trace {
            cmd.env("SIMGPU_ENGINE_TRACE", trace);
        }
        Guarded::spawn(&mut cmd).expect("spawn a tenant")
    }

    /// Starts a tenant (see [`Machine::tenant`]), killed if dropped before it is waited for.
    pub fn spawn_tenant(&self, vgpu: &str, args: &[&str]) -> Guarded {
        Guarded::spawn(&mut self.tenant(vgpu, args)).expect("spawn a tenant")
    }

    /// Starts the daemon and waits until it answers (10 s at most).
    pub fn start(&mut self) {
        self.start_with(&[]);
    }

    /// Starts `tessera daemon ARGS` and waits until it answers (10 s at most).
    pub fn start_with(&mut self, args: &[&str]) {
        assert!(self.daemon.is_none(), "the daemon is running already");
        let mut cmd = self.command(&[&["daemon"][..], args].concat());
        cmd.stderr(Stdio::piped());
        let daemon = LocalDaemon::start(cmd, &self.socket(), Duration::from_secs(10), || Ok(()))
            .unwrap_or_else(|e| panic!("tessera daemon: {e}"));
        self.daemon = Some(daemon);
    }

    /// The client of the machine's daemon.
    pub fn client(&self) -> Client {
        Client::new(self.socket())
    }

    /// The running daemon's pid.
    pub fn daemon_pid(&self) -> u32 {
        self.daemon.as_ref().expect("a running daemon").pid()
    }

    /// Kills the daemon with SIGKILL (it leaves its socket behind).
    pub fn kill_daemon(&mut self) {
        self.daemon.take().expect("a running daemon").kill();
    }

    /// Stops the daemon with SIGTERM and returns its stderr.
    pub fn stop_daemon(&mut self) -> Output {
        let d = self.daemon.take().expect("a running daemon");
        d.terminate().wait_with_output().expect("wait for the daemon")
    }

    /// A tenant: `tessera run --vgpu VGPU -- simgpu-probe ARGS`, with piped stdio (it sees the machine's
    /// `TESSERA_REGION`, as the daemon does).
    pub fn tenant(&self, vgpu: &str, args: &[&str]) -> Command {
        self.tenant_running(vgpu, env!("CARGO_BIN_EXE_simgpu-probe"), args)
    }

    /// A tenant running any program: `tessera run --vgpu VGPU -- PROGRAM ARGS`, with piped stdio.
    pub fn tenant_running(&self, vgpu: &str, program: &str, args: &[&str]) -> Command {
        let mut cmd = self.sim.command_for(tessera(), &[&["run", "--vgpu", vgpu, "--", program][..], args].concat());
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd
    }

    /// The region file's path.
    pub fn region(&self) -> PathBuf {
        self.file("tessera.region")
    }

    /// The socket's path.
    pub fn socket(&self) -> PathBuf {
        self.file("tessera.sock")
    }
}

/// A directory of one user's own (mode 0700) in a machine's directory, holding the files of a daemon run
/// as that user: its region, socket, state directory and the simulated GPU's state.
pub struct UserHome {
    dir: PathBuf,
}

impl UserHome {
    /// Creates `home` in `m`'s directory for user `owner`.
    pub fn new(m: &Machine, owner: (u32, u32)) -> UserHome {
        use std::os::unix::fs::PermissionsExt;
        let dir = m.file("home");
        std::fs::create_dir(&dir).expect("create the user's directory");
        std::os::unix::fs::chown(&dir, Some(owner.0), Some(owner.1)).expect("give it to the user");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("make it private");
        UserHome { dir }
    }

    /// The path of file `name` in it.
    pub fn at(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    /// Points `cmd` at the daemon files in it.
    pub fn apply<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.env("TESSERA_REGION", self.at("tessera.region"))
            .env("TESSERA_SOCKET", self.at("tessera.sock"))
            .env("TESSERA_STATE_DIR", self.at("state"))
            .env("SIMGPU_STATE", self.at("simgpu.state"))
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        drop(self.daemon.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Mode bits of `path`.
pub fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

/// A finished tenant's report, failing the test unless it succeeded.
pub fn report(child: impl Into<Child>) -> Value {
    let run = super::finished(child.into().wait_with_output().expect("wait for the tenant"));
    assert!(run.success, "tenant failed: {}\n{}", run.json, run.stderr);
    run.json
}

/// Device time the engine ran a tenant's kernels (the simulator's ground truth).
pub fn ran(r: &Value) -> u64 {
    r["driver_busy_ns"].as_u64().unwrap_or_else(|| u64_at(r, "engine_ns"))
}

/// Asserts that vGPU `name` was charged within `within` (+1 ms) of what its kernels ran.
pub fn charged_as_ran(m: &Machine, name: &str, ran: u64, within: f64) {
    let charged = u64_at(&m.show(name), "device_ns") as f64;
    let ran = ran as f64;
    eprintln!(
        "vGPU {name}: charged {:.2} ms, ran {:.2} ms ({:+.2}%)",
        charged / 1e6,
        ran / 1e6,
        (charged / ran - 1.0) * 100.0
    );
    assert!(
        (charged - ran).abs() <= within * ran + 1e6,
        "vGPU {name} was charged {:.2} ms for {:.2} ms its kernels ran",
        charged / 1e6,
        ran / 1e6
    );
}

/// The pids a `vgpu show --json` answer lists as the vGPU's processes.
pub fn pids(v: &Value) -> Vec<u64> {
    v["processes"].as_array().expect("processes").iter().map(|p| p.as_u64().unwrap()).collect()
}
