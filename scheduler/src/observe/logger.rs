//! The daemon's log lines on stderr (and the audit log's in its file), written by a thread of their own
//! so that writing never holds up the thread that has something to say: a stderr nobody reads (a full
//! pipe) would otherwise stop a thread that holds the configuration's lock, and one whose reader is gone
//! (a closed pipe) would make `eprintln!` panic and kill the thread. Lines queue up to [`QUEUE`]; beyond,
//! they are dropped and counted, and the next line written says how many. Write errors are ignored.
//!
//! Each destination has its queue and thread: a stderr nobody reads does not stop the audit file.
//!
//! Why this state is the process's, unlike the rest of the daemon's (`crate::state::State`): stderr is
//! the process's, and so is the `tracing` subscriber the audit log installs (once per process, see
//! `crate::observe::audit_log::init`), which writes through [`to_file`]; `say!` is called from every
//! thread and from code that has no daemon state at hand (start-up, before the state exists, and the
//! panic and signal paths). So the sinks ([`PENDING`], `FILE`, `STDERR`) are set once per process, and a
//! test that writes lines writes them to the test process's stderr, as any other output.

use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

/// Lines that may wait to be written, per destination.
pub const QUEUE: usize = 1024;

/// Lines queued and not yet written (or given up on), all destinations together.
static PENDING: AtomicU64 = AtomicU64::new(0);

/// One destination: the queue to its writing thread, and the lines dropped since the last one written.
struct Sink {
    tx: SyncSender<String>,
    dropped: &'static AtomicU64,
}

impl Sink {
    /// Starts the thread `name` writing lines to `out`; `None` if it cannot be started. `why` ends the
    /// line saying lines were dropped.
    fn start(name: &str, mut out: impl Write + Send + 'static, why: &'static str) -> Option<Sink> {
        let dropped: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let (tx, rx) = sync_channel(QUEUE);
        let mut write = move |rx: Receiver<String>| {
            for line in rx {
                let lost = dropped.swap(0, Ordering::Relaxed);
                if lost > 0 {
                    let _ = writeln!(out, "tessera daemon: {lost} log line(s) dropped: {why}");
                }
                let _ = out.write_all(line.as_bytes());
                PENDING.fetch_sub(1, Ordering::AcqRel);
            }
        };
        std::thread::Builder::new().name(name.into()).spawn(move || write(rx)).ok()?;
        Some(Sink { tx, dropped })
    }

    /// Queues `line` (ending in a newline), or counts it dropped when the queue is full.
    fn send(&self, line: String) {
        PENDING.fetch_add(1, Ordering::AcqRel);
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(line) {
            PENDING.fetch_sub(1, Ordering::AcqRel);
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Says one line on stderr (a newline is added), without waiting for it to be written.
pub fn line(args: std::fmt::Arguments) {
    to_stderr(format!("{args}\n"));
}

/// Queues `text` (whole lines, each ending in a newline) for stderr.
pub fn to_stderr(text: String) {
    match stderr_sink() {
        Some(sink) => sink.send(text),
        // No thread to write it: written here, errors ignored.
        None => {
            let _ = std::io::stderr().write_all(text.as_bytes());
        }
    }
}

/// The audit file's destination, once [`open_file`] set it.
static FILE: OnceLock<Sink> = OnceLock::new();

/// Why a file cannot become the destination of [`to_file`].
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Its writing thread cannot be started.
    #[error("cannot start the audit log's writing thread")]
    NoThread,
    /// The process has one already.
    #[error("the audit log file is set already")]
    AlreadySet,
}

/// Makes `file` the destination of [`to_file`] (once; later calls are an error).
pub fn open_file(file: std::fs::File) -> Result<(), SinkError> {
    let sink =
        Sink::start("audit-log", file, "the audit log file was not written fast enough").ok_or(SinkError::NoThread)?;
    FILE.set(sink).map_err(|_| SinkError::AlreadySet)
}

/// Queues `text` (whole lines) for the file [`open_file`] set; nothing when none is.
pub fn to_file(text: String) {
    if let Some(sink) = FILE.get() {
        sink.send(text);
    }
}

/// Waits until every line said so far is written, at most `timeout` (stderr may be a pipe nobody reads);
/// true when they all were.
pub fn flush(timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while PENDING.load(Ordering::Acquire) > 0 {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// The stderr destination, started on first use; `None` if its thread cannot be started.
fn stderr_sink() -> Option<&'static Sink> {
    static STDERR: OnceLock<Option<Sink>> = OnceLock::new();
    STDERR.get_or_init(|| Sink::start("log", std::io::stderr(), "stderr was not being read")).as_ref()
}

/// `say!("...", args)`: [`line`] with `format!` arguments.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::observe::logger::line(format_args!($($arg)*))
    };
}
pub(crate) use say;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_written_and_flushed() {
        say!("tessera daemon: logger test line {}", 1);
        assert!(flush(Duration::from_secs(10)), "the line was written");
    }
}
