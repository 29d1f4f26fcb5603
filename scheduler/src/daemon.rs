//! The daemon's life: it takes ownership of the region (one daemon per region, by a lock file beside it,
//! created as safely as the region, see [`tessera_region::open`]),
//! opens the region and its saved configuration, re-attaches to the vGPUs already there, then runs one
//! refill loop per device, a once-a-second reclaim of dead processes' memory, the once-a-second watch
//! over what tenants can write (slots and the audit, see [`crate::tenants::checks`]), and the socket server.
//! SIGTERM, SIGINT and SIGHUP stop it cleanly (after the change being carried out, waiting at most
//! [`QUIESCE_TIMEOUT`] for it): its socket is removed and the region says no daemon is attached; running
//! processes keep their last limits either way.
//!
//! No half-dead daemon: every thread it starts runs under [`supervise`], and one that panics or ends
//! while the daemon is not stopping stops the daemon the same way, with status [`DIED`] and a line naming
//! the thread (a daemon without its signal thread would ignore SIGTERM; without its refill loops, its
//! vGPUs would wait for tokens that never come). Log lines never panic or block (see [`crate::observe::logger`]).

use crate::api::server::Server;
use crate::compute::device_loop;
use crate::observe::logger::{self, say};
use crate::observe::metrics_server::MetricsServer;
use crate::observe::sensors::Sensors;
use crate::tenants::checks;
use crate::tenants::nvml_usage::ProcessUsage;
use crate::vgpus::manager::Manager;
use crate::vgpus::store::Store;
use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tessera_client::Request;
use tessera_host::driver::{machine_driver, machine_nvml};
use tessera_host::paths;
use tessera_region::MAX_DEVICES;
use tessera_region::futex::monotonic_ns;
use tessera_region::open::checked_dir;
use tessera_region::pid_ns::{self, ProcView};
use tessera_region::reclaim::reclaim_dead;
use tessera_region::secure_fs::{self, DirKind};
use tessera_region::{file::RegionFile, open::Access};

pub use crate::observe::audit_log::AuditLogError;
pub use crate::observe::metrics_server::MetricsError;

/// Reads the address `tessera daemon --metrics ADDR` serves Prometheus on (`HOST:PORT`), before the daemon
/// starts, so that a mistyped address is refused at once.
pub use crate::observe::metrics_server::parse_address as parse_metrics_address;

/// Sends the audit log (`tessera daemon --audit-log FILE`, or the log on stderr without a file) where it
/// goes, once per process before [`run`]: the log's sink is the process's (see `crate::observe::logger`).
pub use crate::observe::audit_log::init as init_audit_log;

/// Where the daemon keeps its files, and the machine's device count.
#[derive(Debug, Clone)]
pub struct Options {
    /// The region file.
    pub region: String,
    /// The socket.
    pub socket: PathBuf,
    /// The state directory (`vgpus.json`).
    pub state_dir: PathBuf,
    /// Total memory of each device of the machine, by ordinal (vGPUs may only be placed on these, and hard
    /// quotas must fit in them).
    pub devices: Vec<u64>,
    /// Where to serve `GET /metrics` (Prometheus), if anywhere (see [`crate::observe::metrics_server`]).
    pub metrics: Option<SocketAddr>,
    /// The NVML library that goes with the driver whose devices these are (for the audit and the
    /// devices' name, utilization, power and temperature).
    pub nvml: String,
    /// The CUDA driver library the devices come from, whose process checkpoint calls `snapshot` and
    /// `resume` use (the simulated one on the simulated GPU).
    pub driver: String,
}

impl Options {
    /// The paths from `TESSERA_REGION`, `TESSERA_SOCKET` and `TESSERA_STATE_DIR` (or their defaults).
    pub fn from_env(devices: Vec<u64>) -> Result<Options, paths::PathError> {
        Ok(Options {
            region: paths::region()?,
            socket: paths::socket()?,
            state_dir: paths::state_dir()?,
            devices,
            metrics: None,
            nvml: machine_nvml(),
            driver: machine_driver(),
        })
    }
}

/// Why the daemon cannot start or serve; each names what it could not have and what to do.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The daemon's lock beside the region cannot be taken.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The socket cannot be taken or served.
    #[error(transparent)]
    Socket(#[from] crate::api::server::SocketError),
    /// The metrics endpoint cannot be set up.
    #[error(transparent)]
    Metrics(#[from] crate::observe::metrics_server::MetricsError),
    /// The region file cannot be opened.
    #[error(transparent)]
    Region(#[from] tessera_region::file::RegionError),
    /// The state directory cannot be used.
    #[error(transparent)]
    Store(#[from] crate::vgpus::store::StoreError),
    /// The saved configuration cannot be put in force.
    #[error(transparent)]
    Start(#[from] crate::vgpus::manager::StartError),
    /// One of the daemon's threads cannot be started.
    #[error(transparent)]
    Thread(#[from] ThreadError),
}

/// Why the daemon's lock (`<region>.lock`) cannot be taken; each names the lock file.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The directory cannot be checked or is unfit.
    #[error("daemon lock {path}: {source}")]
    Dir {
        /// The lock file.
        path: String,
        /// Why.
        source: secure_fs::SecureFsError,
    },
    /// The directory is another user's.
    #[error(
        "daemon lock {path}: its directory belongs to {}, who could replace the daemon's files in it; keep the \
         region in a directory of your own or root's (the default is)",
        secure_fs::describe_user(*owner)
    )]
    ForeignDir {
        /// The lock file.
        path: String,
        /// The directory's owner.
        owner: u32,
    },
    /// The lock file cannot be opened, created or looked at.
    #[error("daemon lock {path}: {source}")]
    Io {
        /// The lock file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The lock file is a symbolic link.
    #[error("daemon lock {0} is a symbolic link, which Tessera never follows; remove it")]
    SymbolicLink(String),
    /// The lock file is unfit (another user's, or writable by others) and cannot be replaced.
    #[error(
        "daemon lock {path} {problem}: another user may have created it to keep the daemon from starting, so it \
         is not used; remove it (as root), or keep the region in a directory of the daemon's own (the default)"
    )]
    Unfit {
        /// The lock file.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Another daemon holds it.
    #[error("daemon already running (pid {pid}) for region file {region}")]
    Running {
        /// The region.
        region: String,
        /// The holder, as the kernel says.
        pid: u32,
    },
    /// Another process holds it, the kernel does not say which.
    #[error("daemon already running for region file {region}: another process holds {path}")]
    Held {
        /// The region.
        region: String,
        /// The lock file.
        path: String,
    },
}

/// A thread of the daemon could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot start a thread: {0}")]
pub struct ThreadError(#[source] pub std::io::Error);

/// An exclusive `flock` on `<region>.lock`, for as long as the daemon lives. The file is created `O_EXCL`
/// beside the region, in its checked directory, and an existing one is used only if it is the daemon's
/// user's (in the daemon's private directory, another's is replaced): holding another user's file could
/// keep the daemon from starting. Its content is never read: who holds the lock is the kernel's record
/// ([`secure_fs::flock_holder`]), not a pid someone wrote.
struct OwnerLock {
    _file: File,
}

impl OwnerLock {
    fn take(region: &str) -> Result<OwnerLock, LockError> {
        let path = format!("{region}.lock");
        let p = Path::new(&path);
        let fail = |source: std::io::Error| LockError::Io { path: path.clone(), source };
        let dir = checked_dir(p).map_err(|source| LockError::Dir { path: path.clone(), source })?;
        if let DirKind::Foreign(owner) = dir {
            return Err(LockError::ForeignDir { path, owner });
        }
        let replaceable = dir == DirKind::Private;
        let mut tries = 0;
        let file = loop {
            tries += 1;
            let file = match secure_fs::open_nofollow(p, false) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => match secure_fs::create_exclusive(p, 0o600) {
                    Ok(file) => break file,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 3 => continue,
                    Err(e) => return Err(fail(e)),
                },
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(LockError::SymbolicLink(path)),
                Err(e) => return Err(fail(e)),
            };
            match secure_fs::file_problem(&file.metadata().map_err(fail)?, secure_fs::euid(), None) {
                None => break file,
                Some(_) if replaceable && tries < 3 => std::fs::remove_file(p).map_err(fail)?,
                Some(problem) => return Err(LockError::Unfit { path, problem: problem.to_string() }),
            }
        };
        // SAFETY: flock on a descriptor we own; LOCK_NB makes it fail instead of waiting.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let region = region.to_string();
            return Err(match secure_fs::flock_holder(&file) {
                Some(pid) => LockError::Running { region, pid },
                None => LockError::Held { region, path },
            });
        }
        Ok(OwnerLock { _file: file })
    }
}

/// The signals that stop the daemon, blocked in every thread so that one thread can wait for them.
fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset and sigaddset initialize and fill it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// How long a stop waits for the change being carried out before stopping anyway.
pub(crate) const QUIESCE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a stop waits for the last log lines to be written (stderr may be a pipe nobody reads).
const LOG_FLUSH_TIMEOUT: Duration = Duration::from_secs(1);
/// Exit status of a daemon that stopped because one of its threads died.
pub(crate) const DIED: i32 = 70;

/// What stopping the daemon takes: its socket is removed, the region says no daemon is attached, the
/// last lines are written, and the process exits.
#[derive(Clone)]
struct Stopper {
    stop: &'static AtomicBool,
    socket: PathBuf,
    file: &'static RegionFile,
}

impl Stopper {
    /// Stops the daemon with exit status `code`, saying `why` last.
    fn exit(&self, code: i32, why: std::fmt::Arguments) -> ! {
        self.stop.store(true, Ordering::Release);
        let _ = std::fs::remove_file(&self.socket);
        let pid = &self.file.region().daemon.pid;
        let _ = pid.compare_exchange(std::process::id(), 0, Ordering::AcqRel, Ordering::Relaxed);
        logger::line(why);
        logger::flush(LOG_FLUSH_TIMEOUT);
        std::process::exit(code)
    }
}

/// Blocks the signals that stop the daemon in the calling thread, and so in every thread started from it
/// later: called before the driver is loaded, whose `cuInit` may start threads of its own (the simulated
/// driver's checkpoint control thread), which would otherwise take SIGTERM and kill the daemon uncleanly.
pub fn block_stop_signals() {
    let signals = stop_signals();
    // SAFETY: blocks the signals in this thread (threads started later inherit the mask); the set is valid.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) };
}

/// Runs the daemon; returns only when it cannot start or serve (signals end the process).
pub fn run(options: Options) -> Result<(), DaemonError> {
    let signals = stop_signals();
    block_stop_signals();
    let _owner = OwnerLock::take(&options.region)?;
    crate::api::server::claim_path(&options.socket)?;
    // Before anything is set up: an address in use stops the start with an error naming it.
    let metrics = options.metrics.map(MetricsServer::bind).transpose()?;
    let file = RegionFile::open_as(&options.region, Access::Daemon)?;
    let file: &'static RegionFile = Box::leak(Box::new(file));
    let store = Store::open(&options.state_dir)?;
    // What the daemon's threads share (see `crate::state`): built here, handed down to each.
    let state: Arc<crate::state::State> = Arc::default();
    let state_path = store.path().display().to_string();
    let checkpoint: Box<dyn crate::snapshot::checkpoint::Checkpointer> =
        match crate::snapshot::checkpoint::DriverCheckpoint::open(&options.driver) {
            Ok(driver) => Box::new(driver),
            Err(e) => {
                say!("tessera daemon: warning: no snapshots of vGPUs: {e}");
                Box::new(crate::snapshot::checkpoint::Unavailable(e.to_string()))
            }
        };
    let manager = Arc::new(
        Manager::start(file, store, options.devices.clone(), Arc::clone(&state))?.with_checkpointer(checkpoint),
    );
    let server = Server::bind(&options.socket)?;
    crate::passthrough::start(&state.passthrough, &options.state_dir);
    let region = file.region();
    region.daemon.heartbeat_ns.store(monotonic_ns(), Ordering::Release);
    // Its namespace first: a process that reads the pid reads it with its namespace.
    region.daemon.pid_ns.store(pid_ns::own(), Ordering::Release);
    region.daemon.pid.store(std::process::id(), Ordering::Release);

    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let stopper = Stopper { stop, socket: server.path().to_path_buf(), file };
    let died = {
        let stopper = stopper.clone();
        move |name: &str, how: &str| {
            stopper.exit(
                DIED,
                format_args!(
                    "tessera daemon: its {name} thread {how}; stopping rather than running without it (start the \
                     daemon again; running processes keep their limits meanwhile)"
                ),
            )
        }
    };
    let devices = options.devices.len().min(MAX_DEVICES) as u32;
    for device in 0..devices {
        let name = format!("refill-{device}");
        let state = Arc::clone(&state);
        supervise(&name, stop, died.clone(), move || device_loop::run(file.region(), device, state, stop))?;
    }
    supervise("reclaim", stop, died.clone(), move || {
        while !stop.load(Ordering::Acquire) {
            reclaim_dead(file.region(), &ProcView::new());
            std::thread::sleep(Duration::from_secs(1));
        }
    })?;
    let usage = ProcessUsage::open(&options.nvml, devices)
        .map_err(|e| say!("tessera daemon: warning: no audit of the vGPUs' device time: {e}"))
        .ok();
    match Sensors::open(&options.nvml, devices, Arc::clone(&state)) {
        Ok(sensors) => supervise("sensors", stop, died.clone(), move || sensors.run(stop))?,
        Err(e) => say!("tessera daemon: warning: no device name, utilization, power or temperature: {e}"),
    }
    let metrics_at = metrics.as_ref().map(|m| format!(", metrics on http://{}/metrics", m.address()));
    if let Some(metrics) = metrics {
        // The figures of `stats`, through the request the API answers (the same snapshot, no second path).
        let scraped = Arc::clone(&manager);
        let snapshot = move || {
            let reply = scraped.handle(Request::Stats { name: None });
            reply.stats.ok_or_else(|| {
                let code = reply.code.unwrap_or(tessera_client::ErrorCode::Internal);
                tessera_client::Error::new(code, reply.error.unwrap_or_else(|| "no figures in the reply".into()))
            })
        };
        let died = died.clone();
        metrics.serve(stop, snapshot, |name, body| supervise(name, stop, died.clone(), body))?;
    }
    let watched = Arc::clone(&manager);
    supervise("watch", stop, died.clone(), move || checks::run(&watched, file.region(), usage, devices, &state, stop))?;
    let on_signal = Arc::clone(&manager);
    supervise("signals", stop, died, move || {
        let mut signal = 0;
        // SAFETY: waits for one of the blocked signals; both arguments are valid for the call.
        unsafe { libc::sigwait(&signals, &mut signal) };
        // No change is half carried out past this point, unless one is stuck.
        let quiet = on_signal.quiesce(QUIESCE_TIMEOUT);
        let stuck = if quiet.is_none() { " (a change still in progress after 5 s was abandoned)" } else { "" };
        stopper.exit(
            0,
            format_args!("tessera daemon: stopped by signal {signal}{stuck}; running processes keep their limits"),
        )
    })?;

    say!(
        "tessera daemon: pid {}, {} vGPU(s) on {} device(s); region {}, socket {}, state {state_path}{}",
        std::process::id(),
        manager.specs().len(),
        options.devices.len(),
        options.region,
        server.path().display(),
        metrics_at.unwrap_or_default(),
    );
    Ok(server.serve(manager)?)
}

/// Starts thread `name` running `f`; should `f` panic, or return before `stop` is set, `died` is called
/// (on that thread) with the thread's name and what happened to it.
pub(crate) fn supervise(
    name: &str,
    stop: &'static AtomicBool,
    died: impl FnOnce(&str, &str) + Send + 'static,
    f: impl FnOnce() + Send + 'static,
) -> Result<(), ThreadError> {
    let owned = name.to_string();
    let body = move || {
        let how = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(()) if stop.load(Ordering::Acquire) => return,
            Ok(()) => "ended".to_string(),
            Err(payload) => format!("panicked ({})", panic_message(payload.as_ref())),
        };
        died(&owned, &how);
    };
    std::thread::Builder::new().name(name.into()).spawn(body).map(drop).map_err(ThreadError)
}

/// The message a panic carried, if it is text.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => s,
        (_, Some(s)) => s,
        _ => "no message",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    fn flag() -> &'static AtomicBool {
        Box::leak(Box::new(AtomicBool::new(false)))
    }

    #[test]
    fn a_thread_that_panics_or_ends_early_is_reported_and_one_ending_at_a_stop_is_not() {
        let (tx, rx) = channel();
        let report = |tx: std::sync::mpsc::Sender<String>| {
            move |name: &str, how: &str| {
                let _ = tx.send(format!("{name}: {how}"));
            }
        };
        let stop = flag();
        supervise("boom", stop, report(tx.clone()), || panic!("index out of bounds")).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), "boom: panicked (index out of bounds)");
        supervise("quitter", stop, report(tx.clone()), || {}).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), "quitter: ended");
        let (stopped, (done_tx, done_rx)) = (flag(), channel());
        supervise("loop", stopped, report(tx), move || {
            while !stopped.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = done_tx.send(());
        })
        .unwrap();
        stopped.store(true, Ordering::Release);
        done_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "a thread ending at a stop is not reported");
    }
}
