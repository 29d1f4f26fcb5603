//! The `tessera` command's side of the socket: one request, one response, with errors that say what to do
//! (no daemon, a dead daemon's socket, a socket of another user).

use crate::protocol::{Request, Response};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the daemon may take to answer (a request that waits for processes gets longer, see
/// [`Request::answer_within`]).
const TIMEOUT: Duration = Duration::from_secs(30);

/// Sends `request` to the daemon at `socket` and returns its response (which may report a failure).
pub fn send(socket: &Path, request: &Request) -> Result<Response, String> {
    let shown = socket.display();
    let meta = std::fs::metadata(socket).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            format!(
                "no Tessera daemon: {shown} does not exist; start one with `tessera daemon` (or set TESSERA_SOCKET)"
            )
        }
        _ => format!("socket {shown}: {e}"),
    })?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me && me != 0 {
        return Err(format!("socket {shown} belongs to uid {}, not to you (uid {me}); refusing to use it", meta.uid()));
    }
    let stream = UnixStream::connect(socket).map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            format!("no daemon listens on {shown} (it has stopped); start one with `tessera daemon`")
        }
        std::io::ErrorKind::PermissionDenied => {
            format!("permission denied on {shown}: only the daemon's owner may manage vGPUs")
        }
        _ => format!("cannot connect to {shown}: {e}"),
    })?;
    let io = |e: std::io::Error| format!("talking to the daemon on {shown}: {e}");
    stream.set_read_timeout(Some(request.answer_within(TIMEOUT))).map_err(io)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
    let mut line = serde_json::to_string(request).map_err(|e| format!("cannot encode the request: {e}"))?;
    line.push('\n');
    (&stream).write_all(line.as_bytes()).map_err(io)?;
    let mut answer = String::new();
    BufReader::new(&stream).read_line(&mut answer).map_err(io)?;
    if answer.is_empty() {
        return Err(format!("the daemon on {shown} closed the connection without answering"));
    }
    serde_json::from_str(&answer).map_err(|e| format!("the daemon on {shown} answered something unreadable ({e})"))
}

/// Waits until a daemon answers on `socket` (a daemon just started), for at most `timeout`. `starting` is
/// asked between attempts and ends the wait with its error (the daemon died, the user gave up).
pub fn wait_until_ready(
    socket: &Path,
    timeout: Duration,
    mut starting: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match send(socket, &Request::List) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        starting()?;
        if Instant::now() >= deadline {
            return Err(format!("the daemon did not answer within {} s: {last}", timeout.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
