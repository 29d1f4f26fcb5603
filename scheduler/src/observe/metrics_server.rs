//! `tessera daemon --metrics ADDR`: an HTTP/1 endpoint (hyper, on a tokio runtime of its own) answering
//! `GET /metrics` with [`crate::observe::metrics`] of the snapshot the API's `stats` request returns. Other paths
//! get 404, other methods 405, a request with a body 413.
//!
//! The port is often reachable by a whole cluster network, so the endpoint has a budget of its own that
//! no client can push it past, and nothing done to it reaches the daemon's other work:
//! - **one thread** runs the event loop and at most [`Limits::scrapers`] threads compute figures, so
//!   a flood of scrapes costs the daemon neither threads nor the API's locks beyond that; figures less
//!   than [`FRESH`] old are served again instead of being recomputed;
//! - **at most [`Limits::connections`] connections** (so descriptors) are open at once; one more is
//!   answered `503 Service Unavailable` at once and closed, never left waiting;
//! - **request heads** must arrive whole within [`Limits::head_time`] (else the connection is closed)
//!   and fit [`Limits::head_bytes`] (else `431`), whatever is sent byte by byte; a body is never read
//!   (`413`); a connection lives at most [`Limits::connection_time`], whatever the client reads or
//!   writes;
//! - a malformed request (random bytes, a bad version) gets hyper's `400` and the connection is closed;
//!   one hyper cannot answer in HTTP/1 (an HTTP/2 preface) is closed at once;
//! - an error of the listener is logged (rate-limited) and the listener goes on, or is opened again on
//!   the same address: the endpoint never closes for good while the daemon runs.

use crate::api::accept::Failure;
use crate::observe::logger::say;
use crate::observe::metrics;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER, TRANSFER_ENCODING};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_client::Stats;
use tokio::sync::Semaphore;

/// What one scrape's figures are computed by (the error is the `stats` request's).
pub type Snapshot = dyn Fn() -> Result<Stats, tessera_client::Error> + Send + Sync;

/// What `--metrics ADDR` is expected to be, said after each error about it.
const EXPECTED: &str = "give HOST:PORT, e.g. 127.0.0.1:9400";

/// Why the endpoint cannot be set up; each names `--metrics` and the value given.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// No address.
    #[error("--metrics is empty; {EXPECTED}")]
    Empty,
    /// An address without `:PORT`.
    #[error("--metrics {0:?} has no port; {EXPECTED}")]
    NoPort(String),
    /// Something else than `HOST:PORT`.
    #[error("--metrics {0:?} is not a host and a port (0-65535); {EXPECTED}")]
    NotHostPort(String),
    /// The host name cannot be resolved.
    #[error("--metrics {value:?}: {source}; {EXPECTED}")]
    Resolve {
        /// The value given.
        value: String,
        /// The resolver's reason.
        source: std::io::Error,
    },
    /// The host name has no address.
    #[error("--metrics {0:?}: the host has no address; {EXPECTED}")]
    NoAddress(String),
    /// The address cannot be listened on (e.g. a port in use).
    #[error("--metrics {address}: cannot listen there: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The listener cannot be made non-blocking.
    #[error("--metrics {address}: cannot serve there: {source}")]
    Serve {
        /// The address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The endpoint's event loop cannot be started.
    #[error("--metrics {address}: cannot start its event loop: {source}")]
    EventLoop {
        /// The address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The endpoint's thread cannot be started.
    #[error(transparent)]
    Thread(#[from] crate::daemon::ThreadError),
}

/// How long figures are served again before they are computed anew (many scrapers at once cost one
/// `stats`).
pub const FRESH: Duration = Duration::from_millis(250);
/// How often the event loop looks at the daemon's stop flag.
const POLL: Duration = Duration::from_millis(200);
/// Least time between two log lines about the listener or refused connections.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// The answer to a connection over [`Limits::connections`]: written without reading the request.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n\
Connection: close\r\nContent-Length: 62\r\n\r\ntoo many connections to the metrics endpoint; try again later\n";

/// The endpoint's budget.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once.
    pub connections: usize,
    /// Threads computing figures at once.
    pub scrapers: usize,
    /// Bytes of a request's head (request line and headers).
    pub head_bytes: usize,
    /// Time for a request's head to arrive whole (the first request's, or the next one's on a kept-alive
    /// connection).
    pub head_time: Duration,
    /// Time a connection may stay open, whatever it does.
    pub connection_time: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections: 64,
            scrapers: 2,
            head_bytes: 16 << 10,
            head_time: Duration::from_secs(5),
            connection_time: Duration::from_secs(30),
        }
    }
}

/// The address `--metrics` gives (`HOST:PORT`, e.g. `127.0.0.1:9400` or `[::1]:9400` or
/// `localhost:9400`); the error names the value and says what is expected.
pub fn parse_address(value: &str) -> Result<SocketAddr, MetricsError> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(MetricsError::Empty);
    }
    if let Ok(addr) = trimmed.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let Some((host, port)) = trimmed.rsplit_once(':') else {
        return Err(MetricsError::NoPort(value.to_string()));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(MetricsError::NotHostPort(value.to_string()));
    }
    let mut found =
        trimmed.to_socket_addrs().map_err(|source| MetricsError::Resolve { value: value.to_string(), source })?;
    found.next().ok_or_else(|| MetricsError::NoAddress(value.to_string()))
}

/// The endpoint, listening.
pub struct MetricsServer {
    listener: TcpListener,
    address: SocketAddr,
    limits: Limits,
}

impl MetricsServer {
    /// Listens on `address`; the error names it (e.g. a port already in use).
    pub fn bind(address: SocketAddr) -> Result<MetricsServer, MetricsError> {
        let listener = listen(address)?;
        let address = listener.local_addr().unwrap_or(address);
        Ok(MetricsServer { listener, address, limits: Limits::default() })
    }

    /// The address it listens on (with the port the system chose, if `:0` was given).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Answers scrapes on one thread started by `spawn` (given a name and the body) until `stop` is
    /// set; `snapshot` gives the figures of one scrape.
    pub fn serve<S>(
        self,
        stop: &'static AtomicBool,
        snapshot: S,
        mut spawn: impl FnMut(&str, Box<dyn FnOnce() + Send>) -> Result<(), crate::daemon::ThreadError>,
    ) -> Result<(), MetricsError>
    where
        S: Fn() -> Result<Stats, tessera_client::Error> + Send + Sync + 'static,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .max_blocking_threads(self.limits.scrapers.max(1))
            .thread_name("metrics-scrape")
            .build()
            .map_err(|source| MetricsError::EventLoop { address: self.address, source })?;
        let figures = Arc::new(Figures::new(Box::new(snapshot)));
        Ok(spawn("metrics", Box::new(move || runtime.block_on(self.run(stop, figures))))?)
    }

    /// The accept loop: runs until `stop` is set.
    async fn run(self, stop: &'static AtomicBool, figures: Arc<Figures>) {
        let MetricsServer { listener, address, limits } = self;
        let open = Arc::new(Semaphore::new(limits.connections));
        let mut log = RateLimited::default();
        let mut listener = Some(listener);
        while !stop.load(Ordering::Acquire) {
            let Some(std_listener) = listener.take() else {
                match listen(address) {
                    Ok(l) => {
                        say!("tessera daemon: metrics endpoint listening again on {address}");
                        listener = Some(l);
                    }
                    Err(e) => {
                        log.say(format_args!("metrics endpoint: {e}; trying again"));
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
                continue;
            };
            let accepting = match tokio::net::TcpListener::from_std(std_listener) {
                Ok(l) => l,
                Err(e) => {
                    log.say(format_args!("metrics endpoint {address}: cannot watch the listener: {e}"));
                    continue;
                }
            };
            // Accepts until the listener fails for good (then it is opened anew) or the daemon stops.
            while !stop.load(Ordering::Acquire) {
                let Ok(accepted) = tokio::time::timeout(POLL, accepting.accept()).await else { continue };
                match accepted {
                    Ok((stream, _)) => match Arc::clone(&open).try_acquire_owned() {
                        Ok(permit) => {
                            let figures = Arc::clone(&figures);
                            tokio::spawn(async move {
                                converse(stream, limits, figures).await;
                                drop(permit);
                            });
                        }
                        Err(_) => {
                            log.refused(limits.connections);
                            refuse(stream);
                        }
                    },
                    Err(e) if Failure::of(&e) != Failure::Broken => {
                        log.say(format_args!(
                            "metrics endpoint {address}: cannot accept a connection ({e}); still serving"
                        ));
                        // Out of descriptors or memory: the pending connection stays queued; wait for some.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => {
                        log.say(format_args!(
                            "metrics endpoint {address}: its listener failed ({e}); opening it again"
                        ));
                        break;
                    }
                }
            }
            drop(accepting);
        }
    }
}

/// A listening socket on `address`, non-blocking (for the event loop).
fn listen(address: SocketAddr) -> Result<TcpListener, MetricsError> {
    let listener = TcpListener::bind(address).map_err(|source| MetricsError::Listen { address, source })?;
    listener.set_nonblocking(true).map_err(|source| MetricsError::Serve { address, source })?;
    Ok(listener)
}

/// Answers a connection over the budget with [`BUSY`] (as far as its send buffer takes it at once) and
/// closes it.
fn refuse(stream: tokio::net::TcpStream) {
    // Written on the socket itself (still non-blocking): tokio's `try_write` on a stream just accepted
    // answers `WouldBlock` until the event loop has seen it writable, which closed refused connections
    // without a word (64 of 1,000 scrapes unanswered in the flood test beside two kill storms).
    if let Ok(mut stream) = stream.into_std() {
        let _ = stream.write(BUSY);
    }
}

/// Serves one connection's requests, for at most [`Limits::connection_time`].
async fn converse(stream: tokio::net::TcpStream, limits: Limits, figures: Arc<Figures>) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |request| {
        let figures = Arc::clone(&figures);
        async move { Ok::<_, Infallible>(answer(&request, figures).await) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.head_time)
        .max_buf_size(limits.head_bytes.max(8192))
        .serve_connection(TokioIo::new(stream), service);
    // Past its time the connection is dropped, closing it, whatever state it is in.
    let _ = tokio::time::timeout(limits.connection_time, connection).await;
}

/// A response with `status`, a plain text `body` and the connection closed after it.
fn plain(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, "text/plain; charset=utf-8".parse().expect("a valid header"));
    response
}

/// Whether `request` says it carries a body (which the endpoint never reads).
fn has_body(request: &Request<Incoming>) -> bool {
    let headers = request.headers();
    let declared = headers.get(CONTENT_LENGTH).is_some_and(|v| v.to_str().map_or(true, |v| v.trim() != "0"));
    declared || headers.contains_key(TRANSFER_ENCODING)
}

/// Answers one request.
async fn answer(request: &Request<Incoming>, figures: Arc<Figures>) -> Response<Full<Bytes>> {
    if has_body(request) {
        let mut response = plain(StatusCode::PAYLOAD_TOO_LARGE, "requests to the metrics endpoint carry no body\n");
        response.headers_mut().insert(CONNECTION, "close".parse().expect("a valid header"));
        return response;
    }
    match (request.method(), request.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => {
            let accept = request.headers().get(hyper::header::ACCEPT).and_then(|v| v.to_str().ok());
            let openmetrics = metrics::wants_openmetrics(accept);
            let computed = tokio::task::spawn_blocking(move || figures.get()).await;
            match computed {
                Ok(Ok(stats)) => {
                    let kind = if openmetrics { metrics::OPENMETRICS } else { metrics::TEXT };
                    let mut response = Response::new(Full::new(Bytes::from(metrics::render(stats, openmetrics))));
                    response.headers_mut().insert(CONTENT_TYPE, kind.parse().expect("a valid header"));
                    response
                }
                Ok(Err(e)) => plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("cannot read the figures: {e}\n")),
                Err(e) => {
                    let mut response = plain(StatusCode::SERVICE_UNAVAILABLE, &format!("no figures: {e}\n"));
                    response.headers_mut().insert(RETRY_AFTER, "1".parse().expect("a valid header"));
                    response
                }
            }
        }
        (_, "/metrics") => plain(StatusCode::METHOD_NOT_ALLOWED, "only GET /metrics\n"),
        _ => plain(StatusCode::NOT_FOUND, "not found: the metrics are at /metrics\n"),
    }
}

/// The figures of the last scrape, served again while [`FRESH`].
struct Figures {
    snapshot: Box<Snapshot>,
    last: Mutex<Option<(Instant, Stats)>>,
}

impl Figures {
    fn new(snapshot: Box<Snapshot>) -> Figures {
        Figures { snapshot, last: Mutex::new(None) }
    }

    /// Fresh figures: the last ones if computed less than [`FRESH`] ago, else new ones. The lock is
    /// held while they are computed, so scrapers arriving meanwhile wait for them instead of computing
    /// their own.
    fn get(&self) -> Result<Stats, tessera_client::Error> {
        let mut last = self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, stats)) = last.as_ref().filter(|(at, _)| at.elapsed() < FRESH) {
            return Ok(stats.clone());
        }
        let stats = (self.snapshot)()?;
        *last = Some((Instant::now(), stats.clone()));
        Ok(stats)
    }
}

/// Log lines about the endpoint, at most one every [`LOG_EVERY`] (an attacker cannot fill the log).
#[derive(Default)]
struct RateLimited {
    last: Option<Instant>,
    silenced: u64,
    refused: u64,
}

impl RateLimited {
    /// Says `what`, unless a line was said less than [`LOG_EVERY`] ago (then it is counted).
    fn say(&mut self, what: std::fmt::Arguments) {
        if self.last.is_some_and(|t| t.elapsed() < LOG_EVERY) {
            self.silenced += 1;
            return;
        }
        let silenced = std::mem::take(&mut self.silenced);
        let refused = std::mem::take(&mut self.refused);
        let more = if silenced > 0 { format!(" ({silenced} more such line(s) left out)") } else { String::new() };
        let busy =
            if refused > 0 { format!("; {refused} connection(s) over the cap answered 503") } else { String::new() };
        say!("tessera daemon: {what}{more}{busy}");
        self.last = Some(Instant::now());
    }

    /// Counts a connection answered 503 over the cap of `cap`, saying so at most every [`LOG_EVERY`].
    fn refused(&mut self, cap: usize) {
        self.refused += 1;
        if self.last.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            self.say(format_args!("metrics endpoint: more than {cap} connections at once"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_host_and_port_and_bad_ones_are_named() {
        assert_eq!(parse_address("127.0.0.1:9400").unwrap(), "127.0.0.1:9400".parse().unwrap());
        assert_eq!(parse_address("[::1]:9400").unwrap(), "[::1]:9400".parse().unwrap());
        assert_eq!(parse_address("localhost:9400").unwrap().port(), 9400);
        for (bad, says) in [
            ("", "is empty"),
            ("9400", "no port"),
            ("127.0.0.1", "no port"),
            ("127.0.0.1:99999", "not a host and a port"),
            (":9400", "not a host and a port"),
            ("127.0.0.1:http", "not a host and a port"),
        ] {
            let e = parse_address(bad).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("HOST:PORT"), "{bad}: {e}");
            assert!(bad.is_empty() || e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn a_port_in_use_is_an_error_naming_it() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = taken.local_addr().unwrap();
        let e = MetricsServer::bind(address).map(drop).unwrap_err().to_string();
        assert!(e.contains(&address.to_string()) && e.contains("in use"), "{e}");
    }

    #[test]
    fn a_refused_client_reads_the_busy_answer_though_its_request_came_before_the_accept() {
        use std::io::Read;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.write_all(b"GET /metrics HTTP/1.0\r\nHost: t\r\n\r\n").unwrap();
        let (server, _) = listener.accept().unwrap();
        // The request is in the server's receive buffer before it answers, as with a late accept.
        std::thread::sleep(Duration::from_millis(50));
        server.set_nonblocking(true).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
        runtime.block_on(async { refuse(tokio::net::TcpStream::from_std(server).unwrap()) });
        drop(runtime);
        client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut reply = Vec::new();
        let read = client.read_to_end(&mut reply);
        assert_eq!(reply, BUSY, "{read:?}");
    }

    #[test]
    fn the_busy_answer_declares_its_body_length() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())), "{head:?} / {body:?}");
    }

    #[test]
    fn figures_are_computed_once_while_fresh() {
        let count = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = Arc::clone(&count);
        let figures = Figures::new(Box::new(move || {
            counted.fetch_add(1, Ordering::Relaxed);
            Ok(Stats::default())
        }));
        for _ in 0..10 {
            figures.get().unwrap();
        }
        assert_eq!(count.load(Ordering::Relaxed), 1);
        std::thread::sleep(FRESH + Duration::from_millis(10));
        figures.get().unwrap();
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }
}
