//! Telling the daemon which process slot of a managed vGPU is this process's: one `join` request over its
//! socket, right after the slot is claimed (in `cuInit`), which the daemon checks against the connection's
//! credentials and records (see the scheduler's `joins` module). A slot the daemon recorded blocks
//! `tessera vgpu rm` while this process runs, whatever the daemon can read of it in `/proc`, and is freed
//! the moment this process ends.
//!
//! Nothing here can stop the process: a daemon that is down, busy or refuses is said once in the log
//! (`warn`) and the process runs on its quota as before (the daemon then judges the slot as it judges any
//! slot it did not record). The exchange is bounded: a connect that would wait (the daemon's backlog is
//! full) fails at once, and the request and its answer get [`TIMEOUT`] each.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;
use tessera_ffi::daemon_protocol::VERSION;

/// Longest the request, and then its answer, may take.
pub const TIMEOUT: Duration = Duration::from_secs(1);

/// The request line for process slot `slot` of vGPU `name` (a name checked by the configuration: letters,
/// digits and `._-` only, nothing JSON must escape).
fn request(name: &str, slot: usize) -> String {
    format!("{{\"version\":{VERSION},\"op\":\"join\",\"name\":\"{name}\",\"slot\":{slot}}}\n")
}

/// Connects to the unix socket at `path` without waiting for room in its backlog.
fn connect(path: &str) -> std::io::Result<UnixStream> {
    // SAFETY: plain socket creation; the descriptor is owned right below.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just returned by the kernel, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_bytes();
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a usable socket path"));
    }
    for (d, &b) in addr.sun_path.iter_mut().zip(bytes) {
        *d = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: `addr` is a valid sockaddr_un and `len` does not exceed its size.
    let rc = unsafe { libc::connect(fd.as_raw_fd(), (&raw const addr).cast(), len as libc::socklen_t) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    Ok(stream)
}

/// Why the daemon did not record a join; each names the socket.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The socket cannot be connected to.
    #[error("cannot reach the daemon at {socket}: {source}")]
    Unreachable {
        /// The daemon's socket.
        socket: String,
        /// Why.
        source: std::io::Error,
    },
    /// The request cannot be written.
    #[error("cannot write to {socket}: {source}")]
    Write {
        /// The daemon's socket.
        socket: String,
        /// Why.
        source: std::io::Error,
    },
    /// The daemon closed the connection without answering.
    #[error("no answer from the daemon at {0}: the connection closed")]
    Closed(String),
    /// The answer cannot be read (e.g. the timeout passed).
    #[error("no answer from the daemon at {socket}: {source}")]
    Read {
        /// The daemon's socket.
        socket: String,
        /// Why.
        source: std::io::Error,
    },
    /// The daemon answered with an error.
    #[error("the daemon at {socket} refused it: {answer}")]
    Refused {
        /// The daemon's socket.
        socket: String,
        /// Its answer, as sent.
        answer: String,
    },
}

/// Sends the `join` of process slot `slot` of vGPU `name` to the daemon at `socket`; `Err` says why it
/// was not recorded.
pub fn tell_daemon(socket: &str, name: &str, slot: usize) -> Result<(), JoinError> {
    let at = || socket.to_string();
    let mut stream = connect(socket).map_err(|source| JoinError::Unreachable { socket: at(), source })?;
    stream.write_all(request(name, slot).as_bytes()).map_err(|source| JoinError::Write { socket: at(), source })?;
    // One line of at most 64 KiB (the daemon's answers are far shorter).
    let mut answer = String::new();
    match BufReader::new(&stream).take(64 << 10).read_line(&mut answer) {
        Ok(0) => return Err(JoinError::Closed(at())),
        Ok(_) => {}
        Err(source) => return Err(JoinError::Read { socket: at(), source }),
    }
    if answer.contains("\"ok\":true") {
        return Ok(());
    }
    Err(JoinError::Refused { socket: at(), answer: answer.trim().to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn socket(tag: &str) -> String {
        let path = std::env::temp_dir().join(format!("tessera-join-{}-{tag}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn the_request_is_one_line_of_the_protocol() {
        assert_eq!(request("team-a", 7), "{\"version\":2,\"op\":\"join\",\"name\":\"team-a\",\"slot\":7}\n");
    }

    #[test]
    fn an_answer_ok_is_a_join_and_anything_else_says_why() {
        let path = socket("answers");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            for answer in
                ["{\"version\":2,\"ok\":true,\"vgpus\":[]}\n", "{\"version\":2,\"ok\":false,\"error\":\"no\"}\n"]
            {
                let (mut s, _) = listener.accept().unwrap();
                let mut line = String::new();
                BufReader::new(&s).read_line(&mut line).unwrap();
                assert!(line.contains("\"op\":\"join\""), "{line}");
                s.write_all(answer.as_bytes()).unwrap();
            }
            // A daemon that never answers.
            let (s, _) = listener.accept().unwrap();
            std::thread::sleep(TIMEOUT * 2);
            drop(s);
        });
        tell_daemon(&path, "a", 0).unwrap();
        let e = tell_daemon(&path, "a", 0).unwrap_err().to_string();
        assert!(e.contains("refused it") && e.contains("\"error\":\"no\""), "{e}");
        let started = std::time::Instant::now();
        let e = tell_daemon(&path, "a", 0).unwrap_err().to_string();
        assert!(e.contains("no answer"), "{e}");
        assert!(started.elapsed() < TIMEOUT * 2, "bounded by the timeout");
        server.join().unwrap();
        let e = tell_daemon(&socket("none"), "a", 0).unwrap_err().to_string();
        assert!(e.contains("cannot reach the daemon"), "{e}");
    }
}
