//! The daemon's life: it takes ownership of the region (one daemon per region, by a lock file beside it,
//! created as safely as the region, see [`tessera_ffi::region::open`]),
//! opens the region and its saved configuration, re-attaches to the vGPUs already there, then runs one
//! refill loop per device, a once-a-second reclaim of dead processes' memory, the once-a-second watch
//! over what tenants can write (slots and the audit, see [`crate::watch`]), and the socket server.
//! SIGTERM, SIGINT and SIGHUP stop it cleanly (after the request being carried out): its socket is removed
//! and the region says no daemon is attached; running processes keep their last limits either way.

use crate::manager::Manager;
use crate::nvml_usage::ProcessUsage;
use crate::server::Server;
use crate::store::Store;
use crate::{pacer, paths, watch};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tessera_ffi::futex::monotonic_ns;
use tessera_ffi::region::MAX_DEVICES;
use tessera_ffi::region::open::checked_dir;
use tessera_ffi::region::reclaim::reclaim_dead;
use tessera_ffi::region::{file::RegionFile, open::Access};
use tessera_ffi::secure_fs::{self, DirKind};

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
}

impl Options {
    /// The paths from `TESSERA_REGION`, `TESSERA_SOCKET` and `TESSERA_STATE_DIR` (or their defaults).
    pub fn from_env(devices: Vec<u64>) -> Result<Options, String> {
        Ok(Options { region: paths::region()?, socket: paths::socket()?, state_dir: paths::state_dir()?, devices })
    }
}

/// An exclusive `flock` on `<region>.lock`, for as long as the daemon lives. The file is created `O_EXCL`
/// beside the region, in its checked directory, and an existing one is used only if it is the daemon's
/// user's (in the daemon's private directory, another's is replaced): holding another user's file could
/// keep the daemon from starting. Its content is never read: who holds the lock is the kernel's record
/// ([`secure_fs::flock_holder`]), not a pid someone wrote.
struct OwnerLock {
    _file: File,
}

impl OwnerLock {
    fn take(region: &str) -> Result<OwnerLock, String> {
        let path = format!("{region}.lock");
        let p = Path::new(&path);
        let fail = |e: std::io::Error| format!("daemon lock {path}: {e}");
        let dir = checked_dir(p).map_err(|e| format!("daemon lock {path}: {e}"))?;
        if let DirKind::Foreign(owner) = dir {
            return Err(format!(
                "daemon lock {path}: its directory belongs to {}, who could replace the daemon's files in it; keep \
                 the region in a directory of your own or root's (the default is)",
                secure_fs::describe_user(owner)
            ));
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
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                    return Err(format!(
                        "daemon lock {path} is a symbolic link, which Tessera never follows; remove it"
                    ));
                }
                Err(e) => return Err(fail(e)),
            };
            match secure_fs::file_problem(&file.metadata().map_err(fail)?, secure_fs::euid(), None) {
                None => break file,
                Some(_) if replaceable && tries < 3 => std::fs::remove_file(p).map_err(fail)?,
                Some(problem) => {
                    return Err(format!(
                        "daemon lock {path} {problem}: another user may have created it to keep the daemon from \
                         starting, so it is not used; remove it (as root), or keep the region in a directory of the \
                         daemon's own (the default)"
                    ));
                }
            }
        };
        // SAFETY: flock on a descriptor we own; LOCK_NB makes it fail instead of waiting.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(match secure_fs::flock_holder(&file) {
                Some(pid) => format!("daemon already running (pid {pid}) for region file {region}"),
                None => format!("daemon already running for region file {region}: another process holds {path}"),
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

/// Runs the daemon; returns only when it cannot start or serve (signals end the process).
pub fn run(options: Options) -> Result<(), String> {
    let signals = stop_signals();
    // SAFETY: blocks the signals in this thread (threads started later inherit the mask); the set is valid.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) };
    let _owner = OwnerLock::take(&options.region)?;
    crate::server::claim_path(&options.socket)?;
    let file: &'static RegionFile = Box::leak(Box::new(RegionFile::open_as(&options.region, Access::Daemon)?));
    let store = Store::open(&options.state_dir)?;
    let state_path = store.path().display().to_string();
    let manager = Arc::new(Manager::start(file, store, options.devices.clone())?);
    let server = Server::bind(&options.socket)?;
    let region = file.region();
    region.daemon.heartbeat_ns.store(monotonic_ns(), Ordering::Release);
    region.daemon.pid.store(std::process::id(), Ordering::Release);

    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let devices = options.devices.len().min(MAX_DEVICES) as u32;
    for device in 0..devices {
        spawn(&format!("refill-{device}"), move || pacer::run(file.region(), device, stop))?;
    }
    spawn("reclaim", move || {
        while !stop.load(Ordering::Acquire) {
            reclaim_dead(file.region());
            std::thread::sleep(Duration::from_secs(1));
        }
    })?;
    let usage = ProcessUsage::open(devices)
        .map_err(|e| eprintln!("tessera daemon: warning: no audit of the vGPUs' device time: {e}"))
        .ok();
    let watched = Arc::clone(&manager);
    spawn("watch", move || watch::run(&watched, file.region(), usage, devices, stop))?;
    let on_signal = Arc::clone(&manager);
    let socket = server.path().to_path_buf();
    spawn("signals", move || {
        let mut signal = 0;
        // SAFETY: waits for one of the blocked signals; both arguments are valid for the call.
        unsafe { libc::sigwait(&signals, &mut signal) };
        // No request is half carried out past this point.
        let _quiet = on_signal.config();
        stop.store(true, Ordering::Release);
        let _ = std::fs::remove_file(&socket);
        let _ = file.region().daemon.pid.compare_exchange(std::process::id(), 0, Ordering::AcqRel, Ordering::Relaxed);
        eprintln!("tessera daemon: stopped by signal {signal}; running processes keep their limits");
        std::process::exit(0);
    })?;

    eprintln!(
        "tessera daemon: pid {}, {} vGPU(s) on {} device(s); region {}, socket {}, state {state_path}",
        std::process::id(),
        manager.specs().len(),
        options.devices.len(),
        options.region,
        server.path().display(),
    );
    server.serve(manager)
}

/// Starts a named thread.
fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new().name(name.into()).spawn(f).map(drop).map_err(|e| format!("cannot start a thread: {e}"))
}
