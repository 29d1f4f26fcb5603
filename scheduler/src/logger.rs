//! The daemon's log lines on stderr, written by a thread of their own so that writing never holds up the
//! thread that has something to say: a stderr nobody reads (a full pipe) would otherwise stop a thread that
//! holds the configuration's lock, and one whose reader is gone (a closed pipe) would make `eprintln!`
//! panic and kill the thread. Lines queue up to [`QUEUE`]; beyond, they are dropped and counted, and the
//! next line written says how many. Write errors are ignored.

use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

/// Lines that may wait to be written.
pub const QUEUE: usize = 1024;

/// Lines dropped because the queue was full.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Lines queued and not yet written (or given up on).
static PENDING: AtomicU64 = AtomicU64::new(0);

/// Says one line on stderr (a newline is added), without waiting for it to be written.
pub fn line(args: std::fmt::Arguments) {
    let line = format!("{args}\n");
    let Some(queue) = queue() else {
        // No thread to write it: written here, errors ignored.
        let _ = std::io::stderr().write_all(line.as_bytes());
        return;
    };
    PENDING.fetch_add(1, Ordering::AcqRel);
    let sent = queue.try_send(line);
    if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = sent {
        PENDING.fetch_sub(1, Ordering::AcqRel);
        DROPPED.fetch_add(1, Ordering::Relaxed);
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

/// The queue to the writing thread, started on first use; `None` if it cannot be started.
fn queue() -> Option<&'static SyncSender<String>> {
    static QUEUE_TX: OnceLock<Option<SyncSender<String>>> = OnceLock::new();
    QUEUE_TX
        .get_or_init(|| {
            let (tx, rx) = sync_channel(QUEUE);
            std::thread::Builder::new().name("log".into()).spawn(move || write_lines(rx)).ok().map(|_| tx)
        })
        .as_ref()
}

/// The writing thread: each line as it comes, preceded by the count of lines dropped before it.
fn write_lines(rx: Receiver<String>) {
    let mut stderr = std::io::stderr();
    for line in rx {
        let dropped = DROPPED.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let _ = writeln!(stderr, "tessera daemon: {dropped} log line(s) dropped: stderr was not being read");
        }
        let _ = stderr.write_all(line.as_bytes());
        PENDING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `say!("...", args)`: [`line`] with `format!` arguments.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::logger::line(format_args!($($arg)*))
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
