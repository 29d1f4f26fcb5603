//! A simulated kubelet for the device-plugin tests (`k8s*.rs`): the `Registration` service of the real
//! `v1beta1` API on `<dir>/kubelet.sock`, recording what registers, and helpers to start the plugin and
//! dial it.

use crate::common::Guarded;
use crate::common::tessera::Machine;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_deviceplugin::unix;
use tessera_deviceplugin::v1beta1::device_plugin_client::DevicePluginClient;
use tessera_deviceplugin::v1beta1::registration_server::{Registration, RegistrationServer};
use tessera_deviceplugin::v1beta1::{AllocateRequest, ContainerAllocateRequest, Empty, RegisterRequest};
use tonic::transport::Channel;

/// The registrations a simulated kubelet received.
type Received = Arc<Mutex<Vec<RegisterRequest>>>;

/// The simulated kubelet's `Registration` service: records every request and accepts it.
struct Recorder(Received);

#[tonic::async_trait]
impl Registration for Recorder {
    async fn register(
        &self,
        request: tonic::Request<RegisterRequest>,
    ) -> Result<tonic::Response<Empty>, tonic::Status> {
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(Empty {}))
    }
}

/// A simulated kubelet: the `Registration` service on `<dir>/kubelet.sock`, served by a thread of its own
/// (the test's thread may block), stopped when dropped.
pub struct Kubelet {
    received: Received,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Kubelet {
    /// Listens on `<dir>/kubelet.sock` (a new socket file, replacing any) and serves until dropped.
    pub fn start(dir: &Path) -> Kubelet {
        let received = Received::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = RegistrationServer::new(Recorder(received.clone()));
        // The socket is bound before `start` returns (the test then knows it exists), by the runtime that
        // serves it (a listener belongs to the runtime it was made in).
        let (bound_tx, bound) = std::sync::mpsc::channel();
        let socket = dir.join("kubelet.sock");
        let thread = std::thread::spawn(move || {
            let runtime = runtime();
            let incoming = runtime.block_on(async { unix::listen(&socket) }).expect("listen on kubelet.sock");
            bound_tx.send(()).unwrap();
            runtime
                .block_on(tonic::transport::Server::builder().add_service(service).serve_with_incoming_shutdown(
                    incoming,
                    async {
                        let _ = stopped.await;
                    },
                ))
                .expect("the simulated kubelet serves");
        });
        bound.recv().expect("the simulated kubelet listens");
        Kubelet { received, stop: Some(stop), thread: Some(thread) }
    }

    /// The registrations so far.
    pub fn registrations(&self) -> Vec<RegisterRequest> {
        self.received.lock().unwrap().clone()
    }

    /// Waits (at most `within`) until a registration arrives; returns it and how long it took.
    pub fn wait_for_registration(&self, within: Duration) -> (RegisterRequest, Duration) {
        let start = Instant::now();
        loop {
            if let Some(r) = self.registrations().into_iter().next() {
                return (r, start.elapsed());
            }
            assert!(start.elapsed() < within, "no registration within {within:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (at most `within`) until `n` registrations have arrived; returns them, in order, and how long
    /// it took.
    pub fn wait_for_registrations(&self, n: usize, within: Duration) -> (Vec<RegisterRequest>, Duration) {
        let start = Instant::now();
        loop {
            let got = self.registrations();
            if got.len() >= n {
                return (got, start.elapsed());
            }
            assert!(start.elapsed() < within, "{} registration(s) of {n} within {within:?}: {got:?}", got.len());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A current-thread runtime with sockets and timers (what the plugin itself uses).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().expect("a tokio runtime")
}

/// The simulated kubelet's directory on machine `m` (created).
pub fn plugin_dir(m: &Machine) -> PathBuf {
    let dir = m.file("device-plugins");
    std::fs::create_dir_all(&dir).expect("create the device-plugin directory");
    dir
}

/// Starts `tessera k8s device-plugin --dir DIR ARGS` on machine `m`.
pub fn start_plugin(m: &Machine, dir: &Path, args: &[&str]) -> Guarded {
    let dir = dir.to_str().unwrap();
    let mut cmd = m.command(&[&["k8s", "device-plugin", "--dir", dir][..], args].concat());
    cmd.stdout(std::process::Stdio::null());
    Guarded::spawn(&mut cmd).expect("start the device plugin")
}

/// A `DevicePlugin` client of the plugin whose socket is `<dir>/<endpoint>`.
pub async fn dial(dir: &Path, endpoint: &str) -> DevicePluginClient<Channel> {
    DevicePluginClient::new(unix::channel(&dir.join(endpoint)).await.expect("dial the plugin"))
}

/// A `DevicePlugin` client of the plugin whose socket is `<dir>/<endpoint>`, waiting up to 60 s for it to
/// serve (it serves before it registers, so no kubelet is needed).
pub async fn dial_when_served(dir: &Path, endpoint: &str) -> DevicePluginClient<Channel> {
    let socket = dir.join(endpoint);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match unix::channel(&socket).await {
            Ok(c) => return DevicePluginClient::new(c),
            Err(e) => assert!(Instant::now() < deadline, "the plugin does not serve {}: {e}", socket.display()),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops `plugin` with SIGTERM, as kubelet's node shuts it down, and checks it exits cleanly.
pub fn stop_plugin(plugin: &mut Guarded) {
    // SAFETY: kill sends a signal to our own child, not reaped yet, so its pid is not reused.
    unsafe { libc::kill(plugin.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = plugin.try_wait().expect("wait for the plugin") {
            break status;
        }
        assert!(Instant::now() < deadline, "the plugin did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "the plugin exited with {status}");
}

/// The UUIDs of the daemon's devices, by ordinal.
pub fn uuids(m: &Machine) -> Vec<String> {
    let stats = m.client().stats(None).expect("stats");
    stats.devices.iter().map(|d| d.uuid.clone().expect("the simulated NVML gives UUIDs")).collect()
}

/// An `Allocate` request of one container for `ids`.
pub fn allocate_request(ids: &[String]) -> AllocateRequest {
    AllocateRequest { container_requests: vec![ContainerAllocateRequest { devices_ids: ids.to_vec() }] }
}
