//! A simulated kubelet for the device-plugin tests: the `Registration` service of the real `v1beta1`
//! gRPC API (types generated from the vendored `api.proto`) on `<dir>/kubelet.sock`, recording each
//! registration, and a `DevicePlugin` client dialling a plugin's socket. Included with `#[path]` by the
//! tests that need it (it pulls in tonic and tokio).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_deviceplugin::unix;
use tessera_deviceplugin::v1beta1::device_plugin_client::DevicePluginClient;
use tessera_deviceplugin::v1beta1::registration_server::{Registration, RegistrationServer};
use tessera_deviceplugin::v1beta1::{AllocateRequest, ContainerAllocateRequest, Empty, RegisterRequest};
use tonic::transport::Channel;

/// The registrations a simulated kubelet received.
type Received = Arc<Mutex<Vec<RegisterRequest>>>;

/// The `Registration` service: records every request and accepts it.
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

/// A simulated kubelet serving `Registration` on a thread of its own until dropped.
pub struct Kubelet {
    received: Received,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Kubelet {
    /// Listens on `<dir>/kubelet.sock` (bound before this returns) and serves until dropped.
    pub fn start(dir: &Path) -> Kubelet {
        let received = Received::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = RegistrationServer::new(Recorder(received.clone()));
        let (bound_tx, bound) = std::sync::mpsc::channel();
        let socket = dir.join("kubelet.sock");
        let thread = std::thread::spawn(move || {
            let runtime = runtime();
            // A listener belongs to the runtime it was made in: bound and served by this one.
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

    /// Waits (at most `within`) for the first registration and returns it.
    pub fn wait_for_registration(&self, within: Duration) -> RegisterRequest {
        let start = Instant::now();
        loop {
            if let Some(r) = self.received.lock().unwrap().first() {
                return r.clone();
            }
            assert!(start.elapsed() < within, "no registration within {within:?}");
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

/// A `DevicePlugin` client of the plugin whose socket is `<dir>/<endpoint>`.
pub async fn dial(dir: &Path, endpoint: &str) -> DevicePluginClient<Channel> {
    DevicePluginClient::new(unix::channel(&dir.join(endpoint)).await.expect("dial the plugin"))
}

/// An `Allocate` request of one container for `ids`.
pub fn allocate_request(ids: &[String]) -> AllocateRequest {
    AllocateRequest { container_requests: vec![ContainerAllocateRequest { devices_ids: ids.to_vec() }] }
}
