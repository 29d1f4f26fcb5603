//! A private daemon for the demo, the benchmarks and the tests: [`private_environment`] gives it (and
//! the CLI and processes that should find it) a region, socket and state directory of its own,
//! [`isolate`] keeps a child from inheriting the user's Tessera variables, and [`LocalDaemon`] starts
//! `tessera daemon`, waits until it answers, creates vGPUs through the [`Client`], and kills it when
//! dropped.

use crate::client::Client;
use crate::error::{Error, ErrorCode};
use crate::spec::VgpuSpec;
use crate::wire::VgpuStatus;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

/// How long a daemon just started may take to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The variables that give a daemon, its CLI and its processes files of their own in `dir` (region,
/// socket, state directory): a private machine that never touches the user's daemon.
pub fn private_environment(dir: &Path) -> Vec<(String, String)> {
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
    vec![
        ("TESSERA_REGION".into(), path("tessera.region")),
        ("TESSERA_SOCKET".into(), path("tessera.sock")),
        ("TESSERA_STATE_DIR".into(), path("state")),
    ]
}

/// The socket [`private_environment`] gives.
pub fn private_socket(dir: &Path) -> std::path::PathBuf {
    dir.join("tessera.sock")
}

/// Sets `env` on `cmd` after removing every inherited `TESSERA_*` and `SIMGPU_*` variable but those named
/// in `keep`: a child of a private machine must not reach the user's daemon or simulated GPU. Names are
/// compared as bytes, so one that is not UTF-8 cannot slip through.
pub fn isolate(cmd: &mut Command, env: &[(String, String)], keep: &[&str]) {
    for (key, _) in std::env::vars_os() {
        let name = key.as_encoded_bytes();
        let kept = key.to_str().is_some_and(|k| keep.contains(&k));
        if (name.starts_with(b"TESSERA_") || name.starts_with(b"SIMGPU_")) && !kept {
            cmd.env_remove(&key);
        }
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
}

/// A `tessera daemon` this process started; killed with SIGKILL when dropped (use [`LocalDaemon::stop`]
/// for a clean stop).
#[derive(Debug)]
pub struct LocalDaemon {
    child: Option<Child>,
    client: Client,
}

impl LocalDaemon {
    /// Spawns `command` (a `tessera daemon` with its environment set, e.g. by [`isolate`]) and waits until
    /// it answers on `socket`, for at most `timeout`. `check` is asked between attempts and ends the wait
    /// with its error; a daemon that exits meanwhile is an error with its status and, when its stderr is
    /// piped, what it said.
    pub fn start(
        mut command: Command,
        socket: &Path,
        timeout: Duration,
        mut check: impl FnMut() -> Result<(), Error>,
    ) -> Result<LocalDaemon, Error> {
        let child = command
            .spawn()
            .map_err(|e| Error::new(ErrorCode::Unavailable, format!("cannot start the daemon ({command:?}): {e}")))?;
        let mut daemon = LocalDaemon { child: Some(child), client: Client::new(socket) };
        let client = daemon.client.clone();
        client.wait_until_ready(timeout, || {
            if let Some(status) = daemon.try_wait() {
                let mut said = String::new();
                if let Some(err) = daemon.child.as_mut().and_then(|c| c.stderr.as_mut()) {
                    let _ = err.read_to_string(&mut said);
                }
                return Err(Error::new(ErrorCode::Unavailable, format!("the daemon exited ({status}): {said}")));
            }
            check()
        })?;
        Ok(daemon)
    }

    /// The client of this daemon.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The daemon's pid (0 once stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Creates a vGPU.
    pub fn create(&self, spec: VgpuSpec) -> Result<VgpuStatus, Error> {
        self.client.create(spec)
    }

    /// How the daemon ended, if it has.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Kills the daemon with SIGKILL (it leaves its socket behind) and reaps it.
    pub fn kill(mut self) {
        self.reap();
    }

    /// Sends the daemon SIGTERM (it stops cleanly, removing its socket) and hands its process over, for
    /// the caller to wait for (and read what it said).
    pub fn terminate(mut self) -> Child {
        let child = self.child.take().expect("a daemon not stopped yet");
        // SAFETY: kill sends a signal to our own child, not reaped yet, so its pid is not reused.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        child
    }

    /// Stops the daemon with SIGTERM and waits at most `grace` for it, then kills it. Returns its status
    /// (`None`: it had to be killed).
    pub fn stop(self, grace: Duration) -> Option<ExitStatus> {
        let mut child = self.terminate();
        let deadline = std::time::Instant::now() + grace;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return None;
                }
            }
        }
    }

    fn reap(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for LocalDaemon {
    fn drop(&mut self) {
        self.reap();
    }
}
