//! Running `simgpu-probe` on the simulated GPU: the environment that makes it load the simulated driver,
//! a private state file per test (tests run in parallel), and the probe's JSON result; the shared test kit
//! (C programs, the region, the daemon's machine, a simulated kubelet and Kubernetes API) in its modules.
#![allow(dead_code)] // not every helper is used by the tests of the moment

pub mod apps;
pub mod cprog;
pub mod fake_kube;
pub mod kubelet;
pub mod region;
pub mod tessera;

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Turns on the machine's cores. Each test has a simulated GPU of its own, but the cores are shared, and
/// the simulated engine hands each kernel to the next process through a wake-up: a test that measures
/// time (shares, charges, deadlines) is skewed by a neighbour measuring too, and more so by one that loads
/// every core (a kill storm spawning thousands of processes: with one beside it, two tenants the outage
/// test saturates kept the engine 36% busy). So a measuring test runs alone among the measuring and the
/// loading ones ([`timing_turn`]), while loading tests may share theirs ([`load_turn`]); every other
/// test (waiting on daemons, timers and sockets) runs beside either.
static TURN: RwLock<()> = RwLock::new(());

/// Takes the timing turn, held until the guard drops (a test that failed holding it leaves it usable).
pub fn timing_turn() -> RwLockWriteGuard<'static, ()> {
    TURN.write().unwrap_or_else(|e| e.into_inner())
}

/// Takes a turn of a test that loads every core, shared with other such tests, never with a measuring one.
pub fn load_turn() -> RwLockReadGuard<'static, ()> {
    TURN.read().unwrap_or_else(|e| e.into_inner())
}

/// `CUDA_ERROR_INVALID_VALUE`.
pub const INVALID_VALUE: u64 = 1;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const OUT_OF_MEMORY: u64 = 2;
/// `CUDA_ERROR_ILLEGAL_ADDRESS`.
pub const ILLEGAL_ADDRESS: u64 = 700;
/// `CUDA_ERROR_NOT_SUPPORTED`.
pub const NOT_SUPPORTED: u64 = 801;
/// One GiB.
pub const GIB: u64 = 1 << 30;
/// One MiB.
pub const MIB: u64 = 1 << 20;

/// A simulated machine private to one test: the environment plus its own state file (removed on drop).
pub struct Sim {
    env: Vec<(String, String)>,
    state: PathBuf,
}

/// What a finished probe run produced.
#[derive(Debug)]
pub struct Run {
    /// True when the probe exited with status 0.
    pub success: bool,
    /// The JSON object it printed (its last line), or `Null`.
    pub json: Value,
    /// Everything it wrote to stderr.
    pub stderr: String,
}

/// The folder cargo built the libraries into, or a failure telling how to build them (never a skip).
pub fn build_dir() -> PathBuf {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        simgpu::libdir::find_build_dir(&exe).map_err(|e| {
            format!("the simulated driver is not built: {e}\nrun `cargo build --release` first, then the tests")
        })
    });
    dir.clone().unwrap_or_else(|e| panic!("{e}"))
}

/// The simulated GPU's library folder: `libcuda.so.1` and `libnvidia-ml.so.1` (prepared once per test
/// binary).
pub fn library_folder() -> PathBuf {
    static FOLDER: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let folder = FOLDER.get_or_init(|| {
        simgpu::libdir::prepare(&build_dir()).map_err(|e| format!("cannot create the simgpu library folder: {e}"))
    });
    folder.clone().unwrap_or_else(|e| panic!("{e}"))
}

/// The preloadable shim, `libtessera.so`, built beside the simulated driver.
pub fn shim_path() -> PathBuf {
    let path = build_dir().join("libtessera.so");
    assert!(path.is_file(), "{} is missing: run `cargo build --release` first", path.display());
    path
}

/// Set in the test process to run every scenario under the shim with no `TESSERA_` setting (transparency).
/// Read only by `Sim::new`: `tools/test-all.sh`'s second pass runs the subjects (files) that call `Sim::new`
/// themselves, so a helper elsewhere that makes a bare `Sim` for its callers must keep that call in their
/// files. A machine whose programs run under the shim in both passes is made with [`Sim::shimmed`] (and a
/// daemon's machine is changed with `Machine::configure`), so that its file is not run twice for nothing.
pub const UNDER_SHIM: &str = "TESSERA_TEST_UNDER_SHIM";

/// Set to `real` in the test process (as `tools/real-gpu-check.sh` does) to run programs on the machine's
/// NVIDIA driver: the simulated GPU's library folder and `SIMGPU_` settings stay out of their environment,
/// so `libcuda.so.1` is the system's. Unset or `simulated`: the simulated driver.
pub const DRIVER: &str = "TESSERA_TEST_DRIVER";

/// True when [`DRIVER`] selects the real driver; any other value than `real` or `simulated` fails the test.
pub fn real_driver() -> bool {
    match std::env::var_os(DRIVER) {
        None => false,
        Some(v) if v == "simulated" => false,
        Some(v) if v == "real" => true,
        Some(v) => panic!("{DRIVER}={v:?} is neither `real` nor `simulated`"),
    }
}

impl Sim {
    /// A machine with the default devices and a state file unique to `tag` and this process.
    pub fn new(tag: &str) -> Sim {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let folder = library_folder();
        let state = std::env::temp_dir().join(format!(
            "simgpu-probe-test-{}-{tag}-{}.state",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&state);
        let old = std::env::var("LD_LIBRARY_PATH").ok();
        let mut env = if real_driver() { Vec::new() } else { simgpu::libdir::environment(&folder, old.as_deref()) };
        env.retain(|(k, _)| k != "SIMGPU_STATE");
        env.push(("SIMGPU_STATE".into(), state.to_string_lossy().into_owned()));
        let sim = Sim { env, state };
        if std::env::var_os(UNDER_SHIM).is_some() { sim.with_shim() } else { sim }
    }

    /// A machine whose programs run under the shim (`LD_PRELOAD=libtessera.so`) in every pass of the suite:
    /// the transparency pass changes nothing for it (see [`UNDER_SHIM`]).
    pub fn shimmed(tag: &str) -> Sim {
        Sim::new(tag).with_shim()
    }

    /// Runs programs under the shim (`LD_PRELOAD=libtessera.so`).
    pub fn with_shim(self) -> Sim {
        let shim = shim_path();
        self.with("LD_PRELOAD", &shim.to_string_lossy())
    }

    /// A machine whose programs run without the shim in every pass of the suite (a test that runs them
    /// under the shim too makes a [`Sim::shimmed`] beside it): [`Sim::new`] without the shim.
    pub fn bare(tag: &str) -> Sim {
        Sim::new(tag).without_shim()
    }

    /// Runs programs without the shim, even in the suite's under-the-shim pass (for comparisons).
    pub fn without_shim(mut self) -> Sim {
        self.env.retain(|(k, _)| k != "LD_PRELOAD");
        self
    }

    /// Sets (or overrides) one environment variable of the machine.
    pub fn with(mut self, key: &str, value: &str) -> Sim {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.into(), value.into()));
        self
    }

    /// The value of one of the machine's environment variables.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The machine's simulated-driver state (device memory in use, per device and per process), mapped
    /// as an observer: the test reads what the simulated driver counts.
    pub fn driver_state(&self) -> simgpu::SharedState {
        let config = simgpu::Config::from_lookup(|k| self.var(k).map(str::to_string)).expect("SIMGPU_* settings");
        simgpu::SharedState::open(&config, false).expect("open the simulated driver's state file")
    }

    /// The probe command with this machine's environment.
    pub fn command(&self, args: &[&str]) -> Command {
        self.command_for(env!("CARGO_BIN_EXE_simgpu-probe"), args)
    }

    /// Any program with this machine's environment; `SIMGPU_*`, `TESSERA_*` and `LD_PRELOAD` of the test's
    /// own environment are removed so a developer's shell settings cannot leak in.
    pub fn command_for(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args);
        for (k, _) in std::env::vars().filter(|(k, _)| {
            k.starts_with("SIMGPU_")
                || (k.starts_with("TESSERA_") && !k.starts_with("TESSERA_TEST_"))
                || k == "LD_PRELOAD"
        }) {
            cmd.env_remove(k);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Runs the probe to completion.
    pub fn run(&self, args: &[&str]) -> Run {
        let out = self.command(args).stdin(Stdio::null()).output().expect("spawn simgpu-probe");
        finished(out)
    }

    /// Runs the probe and returns its JSON, failing the test (with the probe's stderr) unless it succeeded.
    pub fn ok(&self, args: &[&str]) -> Value {
        let run = self.run(args);
        assert!(run.success, "simgpu-probe {args:?} failed: {}\nstderr:\n{}", run.json, run.stderr);
        run.json
    }

    /// Starts the probe with piped stdin and stdout (for scenarios that hold resources until stdin closes),
    /// [`Guarded`].
    pub fn spawn(&self, args: &[&str]) -> Guarded {
        let mut cmd = self.command(args);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        Guarded::spawn(&mut cmd).expect("spawn simgpu-probe")
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.state);
    }
}

/// The result of a finished probe process.
pub fn finished(out: std::process::Output) -> Run {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = stdout.lines().last().and_then(|l| serde_json::from_str(l).ok()).unwrap_or(Value::Null);
    Run { success: out.status.success(), json, stderr: String::from_utf8_lossy(&out.stderr).into_owned() }
}

/// Reads the first JSON line a spawned probe prints (its report before it starts holding).
pub fn first_line(child: &mut Child) -> Value {
    let stdout = child.stdout.as_mut().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read probe stdout");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("probe printed {line:?}, not JSON: {e}"))
}

/// Sends `go` to a spawned probe waiting for a stdin line (`quota-race`).
pub fn go(child: &mut Child) {
    child.stdin.as_mut().expect("piped stdin").write_all(b"go\n").expect("write go");
}

/// A child process that is killed (SIGKILL) and reaped when dropped, so that a test ends none of its ways
/// (a failed assertion included) with a process of its own left running: a tenant left waiting on a
/// suspended vGPU, say, would otherwise wait for ever. [`Guarded::spawn`] also has the kernel kill it
/// should the thread that started it die without dropping it (the test process killed, by a timeout).
pub struct Guarded(Option<Child>);

impl Guarded {
    /// Starts `cmd` guarded.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<Guarded> {
        // SAFETY: prctl is async-signal-safe and changes only the child's own death signal.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before the death signal was set.
                if libc::getppid() == 1 { Err(std::io::Error::other("the test died")) } else { Ok(()) }
            });
        }
        cmd.spawn().map(|c| Guarded(Some(c)))
    }

    /// Guards a child started otherwise (killed on drop only).
    pub fn adopt(child: Child) -> Guarded {
        Guarded(Some(child))
    }

    /// The child, no longer guarded: the caller waits for it.
    pub fn into_child(mut self) -> Child {
        self.0.take().expect("a guarded child")
    }
}

impl std::ops::Deref for Guarded {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0.as_ref().expect("a guarded child")
    }
}

impl std::ops::DerefMut for Guarded {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("a guarded child")
    }
}

impl From<Guarded> for Child {
    fn from(g: Guarded) -> Child {
        g.into_child()
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `sample` while every process in `children` is stopped (SIGSTOP, and each one's whole thread group
/// seen stopped), then lets them go on (SIGCONT): what `sample` reads of several processes is then one
/// instant's state. Reading processes that run on one after the other can see one process before it freed
/// some memory and another after it allocated that same memory, a total that never existed.
/// A child that ended meanwhile is left unreaped (`WNOWAIT`), for its owner to find.
pub fn while_stopped<T>(children: &[&Child], sample: impl FnOnce() -> T) -> T {
    for c in children {
        // SAFETY: a plain signal to a child of this test that its owner has not reaped (it holds the Child).
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGSTOP) };
    }
    for c in children {
        // SAFETY: `info` is a valid siginfo_t to write; WNOWAIT leaves the child's state to be waited for.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let flags = libc::WSTOPPED | libc::WEXITED | libc::WNOWAIT;
            while libc::waitid(libc::P_PID, c.id(), &mut info, flags) != 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {}
        }
    }
    let value = sample();
    for c in children {
        // SAFETY: as above.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGCONT) };
    }
    value
}

/// Closes a spawned probe's stdin (it frees what it holds and exits) and checks that it succeeded.
pub fn finish(child: impl Into<Child>) {
    let mut child = child.into();
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("wait for the probe");
    assert!(out.status.success(), "probe failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Field `path` (`a.b.c`) of `v` as a u64, failing the test when absent.
pub fn u64_at(v: &Value, path: &str) -> u64 {
    at(v, path).as_u64().unwrap_or_else(|| panic!("{path} is not an unsigned integer in {v}"))
}

/// Field `path` of `v` as an f64, failing the test when absent.
pub fn f64_at(v: &Value, path: &str) -> f64 {
    at(v, path).as_f64().unwrap_or_else(|| panic!("{path} is not a number in {v}"))
}

/// Field `path` (`a.b.0.c`: object keys and array indices) of `v`.
pub fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, key| match key.parse::<usize>() {
        Ok(i) if v.is_array() => &v[i],
        _ => &v[key],
    })
}

/// The uid and gid of user `name`, created (a system user without a home) when missing; a concurrent
/// creation by another test is tolerated. For tests run as root that need a second user.
pub fn user(name: &str) -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, name]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().ok().filter(|_| out.status.success())
    };
    if id("-u").is_none() {
        let _ = Command::new("useradd").args(["--system", "--no-create-home", name]).status();
    }
    let (uid, gid) = (id("-u"), id("-g"));
    (uid.unwrap_or_else(|| panic!("cannot create user {name}")), gid.unwrap_or_else(|| panic!("no group of {name}")))
}

/// Waits until `answers()` is true of daemon `daemon` (10 s at most), failing the test with what the
/// daemon said should it exit first.
pub fn wait_until_answering(daemon: &mut Guarded, mut answers: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !answers() {
        if let Some(status) = daemon.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(daemon.stderr.as_mut().unwrap(), &mut stderr).unwrap();
            panic!("the daemon exited with {status}: {stderr}");
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "the daemon did not answer within 10 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A small xorshift generator for storms' instants and victims (print the seed on failure to replay one).
pub struct Rng(pub u64);

impl Rng {
    /// The next number, below `below`.
    pub fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// What user `who` gets opening each of `paths` with `how` (`create` in a directory, `ro`, `list`): `ok`
/// or the errno's name.
pub fn try_as<P: AsRef<std::ffi::OsStr>>(who: (u32, u32), how: &str, paths: &[P]) -> Vec<String> {
    let script = r#"
import errno, os, sys
for path in sys.argv[2:]:
    try:
        if sys.argv[1] == "create":
            os.close(os.open(os.path.join(path, "planted"), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666))
        elif sys.argv[1] == "list":
            os.listdir(path)
        else:
            os.close(os.open(path, os.O_RDONLY))
        print("ok")
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)))
"#;
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script, how]).args(paths).uid(who.0).gid(who.1);
    let out = cmd.output().expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}
