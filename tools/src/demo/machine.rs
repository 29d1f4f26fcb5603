//! The demo's private machine: a temporary directory holding the region, socket and daemon state and, on
//! the simulated GPU, the simulated GPU's state file; an environment pointing every child there (so a
//! daemon or simulated GPU the user runs is never touched); and the child processes — the daemon and the
//! loads — each in a process group of its own (Ctrl-C reaches only the demo, which stops them in order)
//! and killed by the kernel should the demo die. Dropping the machine kills what still runs and removes
//! the directory, on every way out (but SIGKILL, after which only the directory remains).

use super::DemoError;
use crate::signals;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tessera_client::local::{self, LocalDaemon};
use tessera_client::{Error, ErrorCode, VgpuSpec, VgpuStatus};

/// How long a child may take to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// `TESSERA_` variables a child may inherit from the user: where the libraries are and logging.
const KEPT: [&str; 4] = ["TESSERA_LIB_DIR", "TESSERA_LOG", "TESSERA_REAL_LIBCUDA", "TESSERA_REAL_LIBNVML"];

/// A child process, the log holding its stdout and stderr, and what it is for messages.
struct Running {
    what: String,
    child: Child,
    log: PathBuf,
}

/// The private machine; see the module documentation.
pub struct Machine {
    /// The private directory.
    pub dir: PathBuf,
    /// The simulated GPU's configuration, `None` on a real GPU.
    pub simgpu: Option<simgpu_host::Config>,
    exe: PathBuf,
    env: Vec<(String, String)>,
    daemon: Option<(LocalDaemon, PathBuf)>,
    loads: Vec<Running>,
}

impl Machine {
    /// A machine on the real GPU when the machine has an NVIDIA driver, else on the simulated one.
    pub fn new() -> Result<Machine, DemoError> {
        let exe = std::env::current_exe().map_err(DemoError::Executable)?;
        let dir = std::env::temp_dir().join(format!("tessera-demo-{}", std::process::id()));
        let mut env = local::private_environment(&dir);
        let simgpu = if crate::driver::real_driver_present() {
            None
        } else {
            let folder = crate::lib_dir::simgpu_folder()?;
            let old = std::env::var("LD_LIBRARY_PATH").ok();
            let state = ("SIMGPU_STATE".to_string(), dir.join("simgpu.state").to_string_lossy().into_owned());
            env.extend(
                simgpu_host::libdir::environment(&folder, old.as_deref()).into_iter().filter(|(k, _)| *k != state.0),
            );
            env.push(state);
            let lookup = env.clone();
            let config =
                simgpu_host::Config::from_lookup(move |k| lookup.iter().find(|(e, _)| e == k).map(|(_, v)| v.clone()))
                    .map_err(DemoError::SimgpuConfig)?;
            Some(config)
        };
        // Created last, new and private (a stale one, from a run of a process with this pid, goes first):
        // from here on `Drop` removes it.
        let _ = std::fs::remove_dir_all(&dir);
        let create = |d: &Path| std::fs::DirBuilder::new().mode(0o700).create(d);
        create(&dir)
            .and_then(|_| create(&dir.join("logs")))
            .map_err(|source| DemoError::Create { path: dir.clone(), source })?;
        Ok(Machine { dir, simgpu, exe, env, daemon: None, loads: Vec::new() })
    }

    /// The value of one of the machine's variables.
    fn var(&self, key: &str) -> &str {
        self.env.iter().find(|(k, _)| k == key).map_or("", |(_, v)| v.as_str())
    }

    /// The daemon's socket.
    pub fn socket(&self) -> PathBuf {
        PathBuf::from(self.var("TESSERA_SOCKET"))
    }

    /// The region file.
    pub fn region(&self) -> String {
        self.var("TESSERA_REGION").to_string()
    }

    /// `tessera ARGS` with the machine's environment, logging to `logs/<log>.log`, in a process group of
    /// its own, and sent `death` by the kernel if the demo dies; not started yet.
    fn command(&self, log: &str, death: libc::c_int, args: &[&str]) -> Result<(Command, PathBuf), DemoError> {
        let log = self.dir.join("logs").join(format!("{log}.log"));
        let file = std::fs::File::create(&log).map_err(|source| DemoError::Create { path: log.clone(), source })?;
        let err = file.try_clone().map_err(|source| DemoError::Log { path: log.clone(), source })?;
        let mut cmd = Command::new(&self.exe);
        cmd.args(args).stdin(Stdio::null()).stdout(file).stderr(err).process_group(0);
        local::isolate(&mut cmd, &self.env, &KEPT);
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: runs in the child between fork and exec and only makes async-signal-safe calls (prctl,
        // getppid, _exit). The death signal survives the exec of `tessera run` into the load.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, death) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    libc::_exit(1); // the demo died before the death signal was set
                }
                Ok(())
            })
        };
        Ok((cmd, log))
    }

    /// Starts [`Machine::command`].
    fn spawn(&self, what: &str, log: &str, death: libc::c_int, args: &[&str]) -> Result<Running, DemoError> {
        let (mut cmd, log) = self.command(log, death, args)?;
        let child = cmd.spawn().map_err(|source| DemoError::Start { what: what.into(), source })?;
        Ok(Running { what: what.into(), child, log })
    }

    /// Starts `tessera daemon` and waits until it answers. Should the demo die, the daemon gets SIGTERM and
    /// stops cleanly.
    pub fn start_daemon(&mut self) -> Result<(), DemoError> {
        let (cmd, log) = self.command("daemon", libc::SIGTERM, &["daemon"])?;
        let socket = self.socket();
        let started = LocalDaemon::start(cmd, &socket, local::START_TIMEOUT, || {
            if signals::stop_requested() {
                return Err(Error::new(ErrorCode::Unavailable, "interrupted"));
            }
            self.check().map_err(|e| Error::new(ErrorCode::Unavailable, e.to_string()))
        });
        match started {
            Ok(daemon) => {
                self.daemon = Some((daemon, log));
                Ok(())
            }
            Err(e) if e.message.starts_with("the daemon exited") => Err(DemoError::DaemonExited { log: tail(&log) }),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates a vGPU through the daemon.
    pub fn create(&self, spec: VgpuSpec) -> Result<VgpuStatus, Error> {
        match &self.daemon {
            Some((daemon, _)) => daemon.create(spec),
            None => Err(Error::new(ErrorCode::Unavailable, "the demo's daemon is not running")),
        }
    }

    /// Starts `tessera load ARGS` in vGPU `vgpu` under the shim; returns its pid (`tessera run` `exec`s).
    /// Should the demo die, the load gets SIGKILL: a launch waiting for tokens would wait for the daemon
    /// forever (a restarted daemon resumes it), so it could not act on SIGTERM.
    pub fn start_load(&mut self, vgpu: &str, args: &[&str]) -> Result<u32, DemoError> {
        let exe = self.exe.to_string_lossy().into_owned();
        let mut all = vec!["run", "--vgpu", vgpu, "--", &exe, "load"];
        all.extend(args);
        let load = self.spawn(&format!("the load of vGPU {vgpu}"), vgpu, libc::SIGKILL, &all)?;
        let pid = load.child.id();
        self.loads.push(load);
        Ok(pid)
    }

    /// An error naming the first child that has exited (nothing should, before it is stopped), with the
    /// end of its log.
    pub fn check(&mut self) -> Result<(), DemoError> {
        if let Some((daemon, log)) = self.daemon.as_mut()
            && let Some(status) = daemon.try_wait()
        {
            return Err(DemoError::Exited { what: "the daemon".into(), status, log: tail(log) });
        }
        for r in self.loads.iter_mut() {
            if let Ok(Some(status)) = r.child.try_wait() {
                return Err(DemoError::Exited { what: r.what.clone(), status, log: tail(&r.log) });
            }
        }
        Ok(())
    }

    /// Stops the loads with SIGTERM (they finish their kernels and free their memory; the daemon still
    /// grants the tokens a waiting launch needs), then the daemon. With `report`, a child that fails to
    /// stop, or stops with an error, is reported on stderr (not after a failed run, whose error says more).
    pub fn stop(&mut self, report: bool) {
        let loads = std::mem::take(&mut self.loads);
        for r in &loads {
            terminate(&r.child);
        }
        for r in loads {
            finish(r, report);
        }
        if let Some((daemon, log)) = self.daemon.take() {
            let r = Running { what: "the daemon".into(), child: daemon.terminate(), log };
            finish(r, report);
        }
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        // A daemon still here is killed as its `LocalDaemon` drops.
        for mut r in self.loads.drain(..) {
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends SIGTERM to a child that has not been reaped.
fn terminate(child: &Child) {
    // SAFETY: kill sends a signal to our own child, not reaped yet, so its pid is not reused.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
}

/// Waits [`STOP_GRACE`] for a child sent SIGTERM to exit, then kills it; with `report`, says on stderr
/// when it had to, or when the child ended with an error (SIGTERM itself, which it may get before it
/// handles it, is no error).
fn finish(mut r: Running, report: bool) {
    let deadline = Instant::now() + STOP_GRACE;
    let status = loop {
        match r.child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => break None,
        }
    };
    match status {
        Some(s) if s.success() || s.signal() == Some(libc::SIGTERM) || !report => {}
        Some(s) => eprintln!("tessera demo: {} ended with {}:\n{}", r.what, describe(s), tail(&r.log)),
        None => {
            let _ = r.child.kill();
            let _ = r.child.wait();
            if report {
                eprintln!("tessera demo: {} did not stop within {} s; killed it", r.what, STOP_GRACE.as_secs());
            }
        }
    }
}

/// `status 1` or `signal 9`.
pub(super) fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("status {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => status.to_string(),
    }
}

/// The last lines of a log (at most 2 KiB), indented, or a note that it is empty.
fn tail(log: &std::path::Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(log) {
        let len = f.metadata().map_or(0, |m| m.len());
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(2048)));
        let mut bytes = Vec::new();
        let _ = f.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let lines: Vec<String> = text.lines().rev().take(12).map(|l| format!("    {l}")).collect();
    if lines.is_empty() {
        return "    (it printed nothing)".into();
    }
    lines.into_iter().rev().collect::<Vec<_>>().join("\n")
}
