//! `tessera daemon --metrics ADDR`: an HTTP endpoint (the `tiny_http` crate) answering `GET /metrics`
//! with [`crate::metrics`] of the snapshot the API's `stats` request returns, taken when the scrape
//! comes. Other paths get 404, other methods 405. It runs on threads of its own (tiny_http's, which
//! accept and read requests, and [`WORKERS`] that answer them), so a slow scraper holds up at most the
//! other scrapes, never the refill loops or the API.

use crate::metrics;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tessera_client::Stats;
use tiny_http::{Header, Method, Response, Server};

/// Threads answering scrapes.
pub const WORKERS: usize = 2;
/// How long a worker waits for a request before looking at the stop flag again.
const POLL: Duration = Duration::from_millis(500);

/// The address `--metrics` gives (`HOST:PORT`, e.g. `127.0.0.1:9400` or `[::1]:9400` or
/// `localhost:9400`); the error names the value and says what is expected.
pub fn parse_address(value: &str) -> Result<SocketAddr, String> {
    let expected = "give HOST:PORT, e.g. 127.0.0.1:9400";
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(format!("--metrics is empty; {expected}"));
    }
    if let Ok(addr) = trimmed.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let Some((host, port)) = trimmed.rsplit_once(':') else {
        return Err(format!("--metrics {value:?} has no port; {expected}"));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("--metrics {value:?} is not a host and a port (0-65535); {expected}"));
    }
    let mut found = trimmed.to_socket_addrs().map_err(|e| format!("--metrics {value:?}: {e}; {expected}"))?;
    found.next().ok_or_else(|| format!("--metrics {value:?}: the host has no address; {expected}"))
}

/// The endpoint, listening.
pub struct MetricsServer {
    server: Arc<Server>,
    address: SocketAddr,
}

impl MetricsServer {
    /// Listens on `address`; the error names it (e.g. a port already in use).
    pub fn bind(address: SocketAddr) -> Result<MetricsServer, String> {
        let listener =
            TcpListener::bind(address).map_err(|e| format!("--metrics {address}: cannot listen there: {e}"))?;
        let address = listener.local_addr().unwrap_or(address);
        let server = Server::from_listener(listener, None)
            .map_err(|e| format!("--metrics {address}: cannot serve there: {e}"))?;
        Ok(MetricsServer { server: Arc::new(server), address })
    }

    /// The address it listens on (with the port the system chose, if `:0` was given).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Answers scrapes on [`WORKERS`] threads started by `spawn` (given a name and the body) until
    /// `stop` is set; `snapshot` gives the figures of one scrape.
    pub fn serve<S>(
        self,
        stop: &'static AtomicBool,
        snapshot: S,
        mut spawn: impl FnMut(&str, Box<dyn FnOnce() + Send>) -> Result<(), String>,
    ) -> Result<(), String>
    where
        S: Fn() -> Result<Stats, String> + Send + Sync + 'static,
    {
        let snapshot = Arc::new(snapshot);
        for k in 0..WORKERS {
            let (server, snapshot) = (Arc::clone(&self.server), Arc::clone(&snapshot));
            spawn(
                &format!("metrics-{k}"),
                Box::new(move || {
                    while !stop.load(Ordering::Acquire) {
                        match server.recv_timeout(POLL) {
                            Ok(Some(request)) => answer(request, &*snapshot),
                            Ok(None) => {}
                            // A failed connection is that client's problem; the next one is served.
                            Err(_) => std::thread::sleep(Duration::from_millis(10)),
                        }
                    }
                }),
            )?;
        }
        Ok(())
    }
}

/// A header, from parts known to be valid.
fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid header")
}

/// Answers one request.
fn answer(request: tiny_http::Request, snapshot: &dyn Fn() -> Result<Stats, String>) {
    let path = request.url().split('?').next().unwrap_or_default();
    let response = match (request.method(), path) {
        (Method::Get | Method::Head, "/metrics") => match snapshot() {
            Ok(stats) => {
                let accept = request.headers().iter().find(|h| h.field.equiv("Accept")).map(|h| h.value.as_str());
                let openmetrics = metrics::wants_openmetrics(accept);
                let kind = if openmetrics { metrics::OPENMETRICS } else { metrics::TEXT };
                Response::from_string(metrics::render(stats, openmetrics)).with_header(header("Content-Type", kind))
            }
            Err(e) => Response::from_string(format!("cannot read the figures: {e}\n")).with_status_code(500),
        },
        (_, "/metrics") => Response::from_string("only GET /metrics\n").with_status_code(405),
        _ => Response::from_string("not found: the metrics are at /metrics\n").with_status_code(404),
    };
    // A scraper that went away gets nothing; nothing to do about it.
    let _ = request.respond(response);
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
            let e = parse_address(bad).unwrap_err();
            assert!(e.contains(says) && e.contains("HOST:PORT"), "{bad}: {e}");
            assert!(bad.is_empty() || e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn a_port_in_use_is_an_error_naming_it() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = taken.local_addr().unwrap();
        let e = MetricsServer::bind(address).map(drop).unwrap_err();
        assert!(e.contains(&address.to_string()) && e.contains("in use"), "{e}");
    }
}
