//! A fake Kubernetes API server for the device plugin's tests (`k8s_api.rs`, `k8s_incluster.rs`) and
//! benchmark (`benches/src/bin/k8s.rs`): plain HTTP/1.1 on 127.0.0.1 serving `GET /api/v1/pods` (a
//! `fieldSelector` of `spec.nodeName=…` honoured) from a list of pods its user changes, to clients with
//! the right bearer token. Uses only `tiny_http`, `serde_json` and `libc`, so that the benchmark can include it
//! too (`#[path = …] mod fake_kube;`).
#![allow(dead_code)] // the benchmark takes a subset

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A fake Kubernetes API server; stopped when dropped.
pub struct FakeApi {
    pods: Arc<Mutex<Vec<Value>>>,
    requests: Arc<Mutex<Vec<String>>>,
    down: Arc<AtomicBool>,
    token: String,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeApi {
    /// Serves on a free port of 127.0.0.1 the clients sending `Authorization: Bearer TOKEN` (others get
    /// 401), recording each request's path and query.
    pub fn start(token: &str) -> FakeApi {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the fake API server");
        no_delay(&listener);
        let server = Arc::new(tiny_http::Server::from_listener(listener, None).expect("serve the fake API"));
        let (pods, requests) = (Arc::<Mutex<Vec<Value>>>::default(), Arc::<Mutex<Vec<String>>>::default());
        let (s, p, r) = (server.clone(), pods.clone(), requests.clone());
        let down = Arc::new(AtomicBool::new(false));
        let d = down.clone();
        let bearer = format!("Bearer {token}");
        let thread = std::thread::spawn(move || {
            for request in s.incoming_requests() {
                r.lock().unwrap().push(request.url().to_string());
                let authorized = request
                    .headers()
                    .iter()
                    .any(|h| h.field.equiv("Authorization") && h.value.as_str() == bearer.as_str());
                let (code, body) = if d.load(Ordering::Acquire) {
                    (503, status_body(503, "ServiceUnavailable"))
                } else if !authorized {
                    (401, status_body(401, "Unauthorized"))
                } else {
                    answer(request.method(), request.url(), &p.lock().unwrap())
                };
                let header = tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap();
                let response = tiny_http::Response::from_string(body.to_string()).with_status_code(code);
                let _ = request.respond(response.with_header(header));
            }
        });
        FakeApi { pods, requests, down, token: token.to_string(), server, thread: Some(thread) }
    }

    /// The server's address (`127.0.0.1:PORT`).
    pub fn addr(&self) -> std::net::SocketAddr {
        self.server.server_addr().to_ip().expect("an IP address")
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// A kubeconfig file in `dir` pointing at the server with its bearer token.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let file = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\ncontexts:\n- name: fake\n  \
             context:\n    cluster: fake\n    user: tester\ncurrent-context: fake\nusers:\n- name: tester\n  user:\n    \
             token: {}\n",
            self.url(),
            self.token
        );
        std::fs::write(&file, text).expect("write the kubeconfig");
        file
    }

    /// Adds a pod.
    pub fn add(&self, pod: Value) {
        self.pods.lock().unwrap().push(pod);
    }

    /// Changes pod `name` with `f`.
    pub fn change(&self, name: &str, f: impl FnOnce(&mut Value)) {
        let mut pods = self.pods.lock().unwrap();
        f(pods.iter_mut().find(|p| p["metadata"]["name"] == name).expect("a pod of that name"));
    }

    /// Deletes pod `name`.
    pub fn delete(&self, name: &str) {
        self.pods.lock().unwrap().retain(|p| p["metadata"]["name"] != name);
    }

    /// Makes the server answer every request with 503 (`down`), as an API server that is restarting, or
    /// answer again.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Release);
    }

    /// The requests so far (path and query).
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sets `TCP_NODELAY` on `listener`, which the connections it accepts inherit (Linux), as a real API
/// server does (Go's default): tiny_http writes a response's headers and body apart, and without it the
/// body waits for the client's delayed acknowledgement of the headers, 40 ms per request.
fn no_delay(listener: &std::net::TcpListener) {
    use std::os::fd::AsRawFd;
    let one: libc::c_int = 1;
    // SAFETY: the descriptor is the listener's, open for this call; the option value is a c_int of the
    // size given.
    let set = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0, "set TCP_NODELAY: {}", std::io::Error::last_os_error());
}

/// A Kubernetes `Status` body.
fn status_body(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": reason, "reason": reason, "code": code})
}

/// The fake server's answer to `method url`: the pod list (filtered by a `spec.nodeName` field selector),
/// else 404.
fn answer(method: &tiny_http::Method, url: &str, pods: &[Value]) -> (u16, Value) {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    if *method != tiny_http::Method::Get || path != "/api/v1/pods" {
        return (404, status_body(404, "NotFound"));
    }
    let selector = query.split('&').find_map(|kv| kv.strip_prefix("fieldSelector=")).map(percent_decode);
    let node = selector.as_deref().and_then(|s| s.strip_prefix("spec.nodeName="));
    let items: Vec<&Value> = pods.iter().filter(|p| node.is_none_or(|n| p["spec"]["nodeName"] == n)).collect();
    (200, json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}))
}

/// `%XX`-decoded `text`.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = text.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).expect("UTF-8")
}

/// A pod on `node`, `Pending`, created at second `created` of the day (below 86400), its container `main`
/// asking for `k` replicas of `tessera.io/vgpu` (none if 0) with `limits` beside, the pod annotated
/// `annotations`.
pub fn pod(
    name: &str,
    node: &str,
    created: u32,
    k: u32,
    limits: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> Value {
    let mut resources: serde_json::Map<String, Value> =
        limits.iter().map(|(key, v)| (key.to_string(), json!(v))).collect();
    if k > 0 {
        resources.insert("tessera.io/vgpu".into(), json!(k.to_string()));
    }
    let annotations: serde_json::Map<String, Value> =
        annotations.iter().map(|(key, v)| (key.to_string(), json!(v))).collect();
    let (h, m, s) = (created / 3600, created / 60 % 60, created % 60);
    json!({
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "creationTimestamp": format!("2026-11-28T{h:02}:{m:02}:{s:02}Z"),
            "annotations": annotations,
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x", "resources": {"limits": resources}}]},
        "status": {"phase": "Pending"},
    })
}
