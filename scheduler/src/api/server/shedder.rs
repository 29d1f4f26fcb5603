//! Connections the daemon refuses (out of descriptors, or over a cap of [`super::admission`]): each is
//! answered one error line and closed, and the refusals are logged in a rate-limited line.

use crate::api::protocol::{Error, ErrorCode, Reply};
use crate::observe::logger::say;
use std::time::{Duration, Instant};
use tokio::net::{UnixListener, UnixStream};

/// How long the accept loop pauses when it could not even refuse a connection.
const BACKOFF: Duration = Duration::from_millis(10);
/// Least time between two log lines about refused connections.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Answers `stream` one error line without waiting (a fresh connection's buffer has room for it), then
/// closes it.
pub fn refuse(stream: UnixStream, code: ErrorCode, message: String) {
    // Written on the socket itself (still non-blocking): tokio's `try_write` on a stream just accepted
    // answers `WouldBlock` until the event loop has seen it writable, so the line was often never sent
    // (as at the metrics endpoint's refusals).
    if let Ok(mut stream) = stream.into_std() {
        let text = super::conversation::text_of(&Reply::failure(&Error::new(code, message)));
        let _ = std::io::Write::write(&mut stream, text.as_bytes());
    }
}

/// Refuses connections and logs them. It keeps a spare descriptor: out of descriptors, it closes the
/// spare, accepts the pending connection with it, answers it an error and closes it, then takes the
/// spare again; so the client gets an answer instead of waiting in the backlog, and the accept loop does
/// not spin on a connection it cannot take.
pub struct Shedder {
    spare: Option<std::fs::File>,
    refused: u64,
    logged: Option<Instant>,
}

impl Shedder {
    /// A shedder holding its spare descriptor.
    pub fn new() -> Shedder {
        Shedder { spare: Self::spare(), refused: 0, logged: None }
    }

    fn spare() -> Option<std::fs::File> {
        std::fs::File::open("/dev/null").ok()
    }

    /// Refuses the connection `listener` could not accept for lack of resources (`error`).
    pub async fn shed(&mut self, listener: &UnixListener, error: &std::io::Error) {
        let reason = format!("cannot accept a connection ({error}; raise the daemon's `ulimit -n`)");
        self.refused(&reason);
        let answered = self.spare.take().is_some()
            && match tokio::time::timeout(BACKOFF, listener.accept()).await {
                Ok(Ok((stream, _))) => {
                    let e = format!("the daemon is out of resources: {reason}; try again");
                    refuse(stream, ErrorCode::Unavailable, e);
                    true
                }
                _ => false,
            };
        self.spare = Self::spare();
        if !answered || self.spare.is_none() {
            tokio::time::sleep(BACKOFF).await;
        }
    }

    /// Counts a refused connection, logging at most every [`LOG_EVERY`] how many were refused and why.
    pub fn refused(&mut self, reason: &str) {
        self.refused += 1;
        if self.logged.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            say!("tessera daemon: refused {} connection(s): {reason}; still serving", self.refused);
            self.refused = 0;
            self.logged = Some(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_refused_client_reads_the_error_line_though_the_event_loop_never_saw_its_connection() {
        let (mut client, server) = std::os::unix::net::UnixStream::pair().unwrap();
        server.set_nonblocking(true).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
        runtime.block_on(async {
            refuse(UnixStream::from_std(server).unwrap(), ErrorCode::Unavailable, "out of resources".into())
        });
        drop(runtime);
        client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut reply = String::new();
        let read = client.read_to_string(&mut reply);
        assert!(reply.contains("out of resources") && reply.ends_with('\n'), "{read:?}: {reply:?}");
    }
}
