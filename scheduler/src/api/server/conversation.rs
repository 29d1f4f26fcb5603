//! One connection's conversation: request lines read under deadlines that no trickle of bytes can
//! stretch, each answered with one reply line. Requests are carried out on the runtime's bounded pool of
//! blocking threads (they take locks and fsync), so a slow one never holds up another connection.

use super::policy::Policy;
use crate::api::caller::Caller;
use crate::api::protocol::{self, Error, ErrorCode, MAX_LINE, Reply, Request};
use crate::observe::logger::say;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::time::timeout;

/// The time limits of a connection. None restarts when a byte arrives: a client that trickles its
/// request a byte at a time is cut off as one that sends nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// From the connection's start, or its last reply, to the first byte of its next request.
    pub idle: Duration,
    /// From a request's first byte to its end of line.
    pub request: Duration,
    /// For a reply to be taken by the client.
    pub write: Duration,
}

/// The socket's deadlines (`docs/protocol.md`, "Framing").
pub const DEADLINES: Deadlines =
    Deadlines { idle: Duration::from_secs(10), request: Duration::from_secs(5), write: Duration::from_secs(10) };

/// What came from the client next.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    /// A request line (its newline included, absent only at the end of the stream).
    Line(Vec<u8>),
    /// A line longer than [`MAX_LINE`]: the client is not speaking the protocol.
    TooLong,
    /// The request's end of line did not come within [`Deadlines::request`] of its first byte.
    Late,
    /// Nothing within [`Deadlines::idle`].
    Idle,
    /// The client closed the connection.
    Closed,
}

/// Reads the next request line within `deadlines`.
pub async fn next_line<R: AsyncBufRead + Unpin>(reader: &mut R, deadlines: &Deadlines) -> std::io::Result<Incoming> {
    match timeout(deadlines.idle, reader.fill_buf()).await {
        Err(_) => return Ok(Incoming::Idle),
        Ok(Err(e)) => return Err(e),
        Ok(Ok([])) => return Ok(Incoming::Closed),
        Ok(Ok(_)) => {}
    }
    // The first byte is here: the whole line has `deadlines.request` from now, however it trickles in.
    let mut line = Vec::new();
    let mut bounded = (&mut *reader).take(MAX_LINE as u64 + 1);
    match timeout(deadlines.request, bounded.read_until(b'\n', &mut line)).await {
        Err(_) => Ok(Incoming::Late),
        Ok(Err(e)) => Err(e),
        Ok(Ok(n)) if n > MAX_LINE => Ok(Incoming::TooLong),
        Ok(Ok(_)) => Ok(Incoming::Line(line)),
    }
}

/// A request line as text, or the error naming the first byte that is not UTF-8.
pub fn decode(line: &[u8]) -> Result<&str, Error> {
    std::str::from_utf8(line).map_err(|e| {
        let at = e.valid_up_to();
        Error::new(
            ErrorCode::BadRequest,
            format!(
                "malformed request: not valid UTF-8 (byte 0x{:02x} at offset {at}); send a JSON object in UTF-8",
                line[at]
            ),
        )
    })
}

/// Carries out the requests a caller may make; called on a blocking thread.
pub type Handler = Arc<dyn Fn(Request, &Caller) -> Reply + Send + Sync>;

/// What one line gets: the reply's text (newline included), and whether the conversation goes on.
struct Answer {
    text: String,
    goes_on: bool,
}

impl Answer {
    /// A refusal of what `caller` sent, recorded in the audit log ([`crate::observe::audit_log::refused`]).
    fn refused(caller: &Caller, error: Error, goes_on: bool) -> Answer {
        crate::observe::audit_log::refused(Some(caller), &error);
        Answer { text: text_of(&Reply::failure(&error)), goes_on }
    }
}

/// A reply as a line.
pub fn text_of(reply: &Reply) -> String {
    let mut text = serde_json::to_string(reply).unwrap_or_else(|e| {
        // A reply is plain data and always serializes; should it not, the client still hears why.
        let error = Error::new(ErrorCode::Internal, format!("the daemon could not write its reply: {e}"));
        serde_json::to_string(&Reply::failure(&error)).unwrap_or_default()
    });
    text.push('\n');
    text
}

/// The refusal of a caller who may not make a request; the connection is closed after it.
fn denied(caller: &Caller) -> Answer {
    let message = "permission denied: only the daemon's owner may manage vGPUs";
    Answer::refused(caller, Error::new(ErrorCode::PermissionDenied, message), false)
}

/// Answers `line` from `caller`: parsed and judged here (cheap), carried out on a blocking thread.
async fn answer(line: &[u8], caller: Caller, policy: &Policy, handler: &Handler) -> Answer {
    let request = match decode(line).and_then(protocol::parse) {
        Ok(request) if policy.may(&caller, &request) => request,
        Err(e) if policy.told_why_malformed(&caller) => return Answer::refused(&caller, e, true),
        _ => return denied(&caller),
    };
    let handler = Arc::clone(handler);
    match tokio::task::spawn_blocking(move || text_of(&handler(request, &caller))).await {
        Ok(text) => Answer { text, goes_on: true },
        Err(e) => {
            // A request that panics loses its connection (the client sees it closed); the others go on.
            let why = match e.try_into_panic() {
                Ok(payload) => crate::daemon::panic_message(payload.as_ref()).to_string(),
                Err(e) => e.to_string(),
            };
            say!("tessera daemon: a request failed ({why}); its connection was closed, still serving");
            Answer { text: String::new(), goes_on: false }
        }
    }
}

/// Answers every request line `caller` sends on `stream`, until it closes, falls silent or breaks a rule.
pub async fn converse<S>(stream: S, caller: Caller, policy: Policy, handler: Handler, deadlines: Deadlines)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // A small buffer: a line longer than it is gathered by `read_until`, the common short one costs little.
    let mut stream = BufReader::with_capacity(4096, stream);
    loop {
        let answer = match next_line(&mut stream, &deadlines).await {
            Ok(Incoming::Line(line)) => answer(&line, caller, &policy, &handler).await,
            Ok(Incoming::TooLong) => {
                let e = Error::new(ErrorCode::BadRequest, format!("request longer than {MAX_LINE} bytes"));
                Answer::refused(&caller, e, false)
            }
            Ok(Incoming::Late) => {
                let why = format!(
                    "request line not complete {} s after its first byte; send each request as one line at once",
                    deadlines.request.as_secs()
                );
                Answer::refused(&caller, Error::new(ErrorCode::Timeout, why), false)
            }
            Ok(Incoming::Idle | Incoming::Closed) | Err(_) => return,
        };
        if answer.text.is_empty() {
            return;
        }
        let written = timeout(deadlines.write, stream.write_all(answer.text.as_bytes())).await;
        if !matches!(written, Ok(Ok(()))) || !answer.goes_on {
            let _ = timeout(deadlines.write, stream.shutdown()).await;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncWriteExt, DuplexStream};
    use tokio::time::Instant;

    const OWNER: u32 = 1000;
    const LIST: &[u8] = b"{\"version\":2,\"op\":\"list\"}\n";

    fn caller(uid: u32) -> Caller {
        Caller { pid: 42, uid, gid: uid }
    }

    /// A handler that answers every request with an empty success.
    fn ok_handler() -> Handler {
        Arc::new(|_, _| Reply::ok(Vec::new()))
    }

    /// A conversation with `uid` on one end of a pipe, the other end returned.
    fn start(uid: u32, handler: Handler) -> DuplexStream {
        let (client, server) = tokio::io::duplex(1 << 20);
        tokio::spawn(converse(server, caller(uid), Policy::new(OWNER), handler, DEADLINES));
        client
    }

    /// The next reply line, or `None` when the daemon closed the connection.
    async fn reply(client: &mut BufReader<DuplexStream>) -> Option<serde_json::Value> {
        let mut line = String::new();
        (client.read_line(&mut line).await.unwrap() > 0).then(|| serde_json::from_str(&line).unwrap())
    }

    /// Deadlines short enough for a test in real time (a paused clock would need tokio's `test-util`,
    /// which rebuilds every crate using tokio for the test profile), long enough for a loaded host.
    const SHORT: Deadlines =
        Deadlines { idle: Duration::from_secs(2), request: Duration::from_secs(1), write: Duration::from_secs(2) };

    /// A conversation under [`SHORT`] deadlines.
    fn start_short(uid: u32, handler: Handler) -> DuplexStream {
        let (client, server) = tokio::io::duplex(1 << 20);
        tokio::spawn(converse(server, caller(uid), Policy::new(OWNER), handler, SHORT));
        client
    }

    #[tokio::test]
    async fn a_trickled_request_is_cut_off_at_its_deadline_however_many_bytes_come() {
        let mut client = BufReader::new(start_short(OWNER, ok_handler()));
        let start = Instant::now();
        // A second byte just before the deadline: a deadline restarting with every byte would end at 1.8 s.
        client.write_all(b"{").await.unwrap();
        tokio::time::sleep(Duration::from_millis(800)).await;
        client.write_all(b"\"").await.unwrap();
        let r = reply(&mut client).await.expect("the deadline is answered");
        let took = start.elapsed();
        assert!(took >= SHORT.request && took < Duration::from_millis(1800), "from the first byte: {took:?}");
        assert_eq!(r["code"], "timeout", "{r}");
        assert!(r["error"].as_str().unwrap().contains("after its first byte"), "{r}");
        assert_eq!(reply(&mut client).await, None, "and the connection is closed");
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed_and_a_busy_one_is_served() {
        let mut client = BufReader::new(start_short(OWNER, ok_handler()));
        for _ in 0..3 {
            tokio::time::sleep(SHORT.idle / 2).await;
            client.write_all(LIST).await.unwrap();
            assert_eq!(reply(&mut client).await.unwrap()["ok"], true);
        }
        let start = Instant::now();
        assert_eq!(reply(&mut client).await, None);
        let took = start.elapsed();
        assert!(took >= SHORT.idle - Duration::from_millis(50), "closed once idle for the idle time: {took:?}");
    }

    #[tokio::test]
    async fn a_line_that_is_not_utf8_gets_an_error_naming_it_and_the_connection_goes_on() {
        let mut client = BufReader::new(start(OWNER, ok_handler()));
        client.write_all(b"{\"version\":2,\"op\":\"list\",\"x\":\"\xff\"}\n").await.unwrap();
        let r = reply(&mut client).await.expect("an answer, not a closed connection");
        assert_eq!(r["code"], "bad_request", "{r}");
        let error = r["error"].as_str().unwrap();
        assert!(error.contains("not valid UTF-8") && error.contains("0xff at offset 30"), "{error}");
        client.write_all(LIST).await.unwrap();
        assert_eq!(reply(&mut client).await.unwrap()["ok"], true, "the next request is served");
    }

    #[tokio::test]
    async fn an_overlong_line_gets_the_length_error_and_is_closed() {
        let mut client = BufReader::new(start(OWNER, ok_handler()));
        client.write_all(&vec![b' '; MAX_LINE + 10]).await.unwrap();
        let r = reply(&mut client).await.unwrap();
        assert_eq!(r["code"], "bad_request", "{r}");
        assert!(r["error"].as_str().unwrap().contains("longer than 65536 bytes"), "{r}");
        assert_eq!(reply(&mut client).await, None);
    }

    #[tokio::test]
    async fn another_user_is_denied_whatever_it_sends_and_closed() {
        for line in [LIST, b"not json\n", b"\xff\n"] {
            let called = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let seen = Arc::clone(&called);
            let handler: Handler = Arc::new(move |_, _| {
                seen.store(true, std::sync::atomic::Ordering::Relaxed);
                Reply::ok(Vec::new())
            });
            let mut client = BufReader::new(start(65534, handler));
            client.write_all(line).await.unwrap();
            let r = reply(&mut client).await.unwrap();
            assert_eq!(r["code"], "permission_denied", "{r}");
            assert_eq!(reply(&mut client).await, None);
            assert!(!called.load(std::sync::atomic::Ordering::Relaxed), "the request was not carried out");
        }
    }

    #[tokio::test]
    async fn the_owners_requests_reach_the_handler_with_its_credentials_and_a_panic_closes_only_its_connection() {
        let handler: Handler = Arc::new(|request, caller| {
            assert_eq!((caller.uid, caller.pid), (0, 42));
            match request {
                Request::List => Reply::ok(Vec::new()),
                _ => panic!("boom"),
            }
        });
        let mut client = BufReader::new(start(0, Arc::clone(&handler)));
        client.write_all(b"{\"version\":2,\"op\":\"version\"}\n").await.unwrap();
        assert_eq!(reply(&mut client).await, None, "the panicking request's connection is closed");
        let mut other = BufReader::new(start(0, handler));
        other.write_all(LIST).await.unwrap();
        assert_eq!(reply(&mut other).await.unwrap()["ok"], true, "the others go on");
    }

    #[test]
    fn decode_names_the_first_bad_byte() {
        assert_eq!(decode(b"{}\n").unwrap(), "{}\n");
        let e = decode(b"ab\xc3\x28").unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(e.message.contains("byte 0xc3 at offset 2"), "{e}");
    }
}
