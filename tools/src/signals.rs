//! Stopping cleanly on SIGINT (Ctrl-C), SIGTERM and SIGHUP: a handler only records that a stop was asked
//! for, and the command's loop, which looks often, winds down and cleans up.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the handler. A static because a signal handler is a plain `extern "C" fn` with no argument of
/// ours: a static is all it can reach.
static STOP: AtomicBool = AtomicBool::new(false);

/// The handler: stores one flag, which is async-signal-safe.
extern "C" fn on_signal(_signal: libc::c_int) {
    STOP.store(true, Ordering::Release);
}

/// Why the handler could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    /// `sigaction` refused a signal.
    #[error("cannot handle signal {signal}: {source}")]
    Install {
        /// The signal, e.g. `libc::SIGTERM`.
        signal: libc::c_int,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

/// Installs the handler for SIGINT, SIGTERM and SIGHUP (programs this process `exec`s get the default
/// dispositions back).
pub fn install() -> Result<(), SignalError> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: sigaction is plain data, zeroed then filled; the handler only touches an atomic; the
        // pointer to the action is valid for the call.
        let status = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if status != 0 {
            return Err(SignalError::Install { signal, source: std::io::Error::last_os_error() });
        }
    }
    Ok(())
}

/// True once one of the signals arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Acquire)
}

/// Sleeps for `duration`, waking early (within 20 ms) when a stop is requested; true when it was.
pub fn sleep(duration: std::time::Duration) -> bool {
    let end = std::time::Instant::now() + duration;
    while !stop_requested() {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(std::time::Duration::from_millis(20)));
    }
    true
}
