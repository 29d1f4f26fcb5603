//! The plugin at work: keeps the GPU list current from the daemon, serves the `DevicePlugin` service on
//! its socket (and the extra resources' services on theirs), registers each with kubelet, and starts over
//! (new sockets, new registrations) when kubelet's socket is replaced or one of its own is removed, as
//! happens when kubelet restarts; until `stop` completes.

use crate::cdi_file::CdiFile;
use crate::config::{Config, ConfigError};
use crate::container_edits::HostFilesError;
use crate::extra_resources::{ExtraService, extras};
use crate::gc::{Collector, Fate};
use crate::inventory::{Gpu, NvmlFacts, refresh};
use crate::kube_api::{KubeApi, KubeApiError};
use crate::pods::{PodRef, Records, RecordsError, SharedRecords, fates};
use crate::registration::{Identity, extra_request, identity, request, send};
use crate::service::Service;
use crate::v1beta1::RegisterRequest;
use crate::v1beta1::device_plugin_server::{DevicePlugin, DevicePluginServer};
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_client::Client;
use tokio::sync::watch;

/// How often the sockets are looked at (kubelet restarts are noticed within this).
const WATCH_EVERY: Duration = Duration::from_millis(200);
/// How often the daemon's devices are read again.
const REFRESH_EVERY: Duration = Duration::from_secs(5);
/// How long to wait before trying again to register after a failure.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Why the plugin stopped, or could not start: a bad configuration, a file it cannot keep, credentials it
/// cannot use, or a socket it cannot serve on.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The configuration is refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The `ld.so.preload` file containers get cannot be written.
    #[error(transparent)]
    Preload(#[from] HostFilesError),
    /// The Kubernetes API's credentials cannot be used.
    #[error(transparent)]
    KubeApi(#[from] KubeApiError),
    /// The pod records cannot be read.
    #[error(transparent)]
    Records(#[from] RecordsError),
    /// A socket of the plugin cannot be listened on.
    #[error("cannot listen on {}: {source}", .socket.display())]
    Listen {
        /// The socket.
        socket: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A server of the plugin failed.
    #[error("serving on {}: {source}", .socket.display())]
    Serve {
        /// Its socket.
        socket: PathBuf,
        /// Why.
        source: tonic::transport::Error,
    },
    /// A server's task panicked or was cancelled.
    #[error("the server on {} failed: {source}", .socket.display())]
    ServerTask {
        /// Its socket.
        socket: PathBuf,
        /// Why.
        source: tokio::task::JoinError,
    },
}

/// Prints one line about the plugin's progress on stderr.
fn say(message: &str) {
    eprintln!("tessera device-plugin: {message}");
}

/// Keeps the GPU list current: reads the daemon's devices every [`REFRESH_EVERY`], sending only changes
/// (each change becomes a `ListAndWatch` update), and removes the vGPUs of ended containers (after
/// `grace`; or, for a vGPU whose pod is recorded, as soon as the API shows the pod gone or ended).
/// The first read is done before this returns, so that kubelet's first `ListAndWatch` gets the GPUs, not
/// an empty list.
async fn keep_current(
    client: Client,
    facts: NvmlFacts,
    grace: Duration,
    pods: Option<(KubeApi, SharedRecords)>,
) -> (watch::Receiver<Vec<Gpu>>, tokio::task::JoinHandle<()>) {
    let facts = Arc::new(facts);
    let collector = Arc::new(Mutex::new(Collector::new(grace)));
    let (gpus, receiver) = watch::channel(Vec::new());
    let mut said: Option<String> = None;
    let mut said_api: Option<String> = None;
    let mut read_once = async move || -> bool {
        let before = gpus.borrow().clone();
        let (c, f, g) = (client.clone(), facts.clone(), collector.clone());
        // The records are read before the pods are listed: a vGPU recorded after the list is not judged
        // by it (its pod may be missing from it).
        let mut view = None;
        if let Some((api, records)) = &pods {
            let snapshot = records.lock().map(|r| r.all().clone()).unwrap_or_default();
            let listed = api.pods_on_node().await;
            let error = listed.as_ref().err().map(ToString::to_string);
            if error != said_api {
                say(error.as_deref().unwrap_or("the Kubernetes API answers again"));
                said_api = error;
            }
            view = Some((snapshot, listed, records.clone()));
        }
        let read = move || {
            let collected = g.lock().map(|mut g| collect(&mut g, &c, view)).unwrap_or_default();
            (refresh(&c, &f, &before), collected)
        };
        let Ok(((now, error), collected)) = tokio::task::spawn_blocking(read).await else {
            return false;
        };
        collected.iter().for_each(|line| say(line));
        if error != said {
            match &error {
                Some(e) => say(e),
                None => say(&format!("the daemon reports {} GPU(s)", now.iter().filter(|g| g.healthy).count())),
            }
            said = error;
        }
        gpus.send_if_modified(|old| {
            let changed = *old != now;
            *old = now;
            changed
        });
        true
    };
    read_once().await;
    let task = tokio::spawn(async move {
        loop {
            tokio::time::sleep(REFRESH_EVERY).await;
            if !read_once().await {
                return;
            }
        }
    });
    (receiver, task)
}

/// What the collector judges recorded vGPUs by: the records (read before the pods were listed), the pods
/// on the node (or why they could not be listed), and the records themselves.
type PodView = (BTreeMap<String, PodRef>, Result<Vec<Pod>, KubeApiError>, SharedRecords);

/// One collection: without the API, by the grace alone; with it, recorded vGPUs by their pods (all kept
/// while the API does not answer), the others by the grace. Returns what it did, one line each.
fn collect(collector: &mut Collector, client: &Client, view: Option<PodView>) -> Vec<String> {
    let Some((snapshot, listed, records)) = view else {
        return collector.collect(client, &HashMap::new()).1;
    };
    let Ok(mut records) = records.lock() else { return vec!["the pod records are poisoned".into()] };
    let mut fates = match listed {
        Ok(pods) => fates(&snapshot, &pods),
        Err(_) => snapshot.keys().map(|name| (name.clone(), Fate::Keep)).collect(),
    };
    // A vGPU recorded anew since the snapshot (its replicas handed to another pod) is not judged by it.
    fates.retain(|name, _| records.get(name) == snapshot.get(name));
    let (removed, mut said) = collector.collect(client, &fates);
    if let Err(e) = records.forget(removed.iter().map(String::as_str)) {
        said.push(e.to_string());
    }
    said
}

/// Runs the plugin of `config`, reaching the daemon with `client`, until `stop` completes. Fails at once
/// on a bad configuration or a socket that cannot be made; kubelet being absent or refusing is reported
/// and retried.
pub async fn run(
    config: Config,
    client: Client,
    facts: NvmlFacts,
    stop: impl Future<Output = ()>,
) -> Result<(), PluginError> {
    config.check()?;
    write_preload(&config)?;
    let pods = match KubeApi::connect(config.kubeconfig.as_deref(), &config.node_name).await? {
        Some(api) => {
            let records = Records::load(&config.pods_file())?;
            say(&format!("sizing vGPUs from the pods on node {} through {}", api.node(), api.source()));
            Some((api, Arc::new(Mutex::new(records))))
        }
        None => None,
    };
    let (gpus, refresher) = keep_current(client.clone(), facts, config.gc_grace, pods.clone()).await;
    // With `--cdi-dir`: the spec file follows the plugin's vGPUs (removed ones leave it). `Allocate` writes
    // the same file through the same `CdiFile`, one writer at a time.
    let cdi_file = Arc::new(CdiFile::new(config.clone()));
    let cdi_sync = config
        .cdi_dir
        .is_some()
        .then(|| tokio::spawn(crate::cdi_file::keep_synced(cdi_file.clone(), client.clone(), gpus.clone())));
    tokio::pin!(stop);
    let result = loop {
        let serving = serve_once(&config, &client, gpus.clone(), pods.clone(), cdi_file.clone());
        tokio::select! {
            _ = &mut stop => break Ok(()),
            r = serving => if let Err(e) = r { break Err(e) },
        }
    };
    refresher.abort();
    if let Some(task) = cdi_sync {
        task.abort();
    }
    let _ = std::fs::remove_file(config.socket());
    for extra in extras(&config) {
        let _ = std::fs::remove_file(config.dir.join(extra.socket_name));
    }
    result
}

/// One socket the plugin serves a resource on, and its registration with kubelet.
struct Endpoint {
    /// The socket file.
    socket: PathBuf,
    /// The socket file as made (a different one at the same path means it was removed).
    own: Option<Identity>,
    /// What registers it.
    request: RegisterRequest,
    /// The `kubelet.sock` it was last registered with.
    registered: Option<Identity>,
    /// Stops the server.
    done: Option<tokio::sync::oneshot::Sender<()>>,
    /// The server.
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

/// Serves `service` on a fresh socket `socket`; `request` registers it.
fn serve(socket: PathBuf, service: impl DevicePlugin, request: RegisterRequest) -> Result<Endpoint, PluginError> {
    let incoming = match crate::unix::listen(&socket) {
        Ok(incoming) => incoming,
        Err(source) => return Err(PluginError::Listen { socket, source }),
    };
    let own = identity(&socket);
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder().add_service(DevicePluginServer::new(service)).serve_with_incoming_shutdown(
            incoming,
            async {
                let _ = done_rx.await;
            },
        ),
    );
    say(&format!("serving {} on {}", request.resource_name, socket.display()));
    Ok(Endpoint { socket, own, request, registered: None, done: Some(done_tx), server })
}

/// Stops the servers of `endpoints`; the first failure of one of them, if any.
async fn finish(mut endpoints: Vec<Endpoint>) -> Result<(), PluginError> {
    for endpoint in &mut endpoints {
        if let Some(done) = endpoint.done.take() {
            let _ = done.send(());
        }
    }
    let mut result = Ok(());
    for endpoint in endpoints {
        let socket = endpoint.socket;
        let outcome = match endpoint.server.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(source)) => Err(PluginError::Serve { socket, source }),
            Err(source) => Err(PluginError::ServerTask { socket, source }),
        };
        result = result.and(outcome);
    }
    result
}

/// Serves the main resource and the extra ones (each on a fresh socket of its own) and registers them,
/// until kubelet's socket is replaced or one of the plugin's own removed (then returns `Ok` to start over,
/// all of them).
async fn serve_once(
    config: &Config,
    client: &Client,
    gpus: watch::Receiver<Vec<Gpu>>,
    pods: Option<(KubeApi, SharedRecords)>,
    cdi_file: Arc<CdiFile>,
) -> Result<(), PluginError> {
    let mut main = Service::new(config.clone(), client.clone(), gpus.clone(), cdi_file);
    if let Some((api, records)) = pods {
        main = main.with_pods(api, records);
    }
    let mut endpoints = vec![serve(config.socket(), main, request(config))?];
    for extra in extras(config) {
        let service = ExtraService::new(extra.kind, gpus.clone());
        match serve(config.dir.join(&extra.socket_name), service, extra_request(&extra)) {
            Ok(endpoint) => endpoints.push(endpoint),
            Err(e) => {
                let _ = finish(endpoints).await;
                return Err(e);
            }
        }
    }
    let kubelet = config.kubelet_socket();
    'watching: loop {
        if let Some(gone) = endpoints.iter().find(|e| identity(&e.socket) != e.own) {
            say(&format!("{} was removed (kubelet restarted?); starting over", gone.socket.display()));
            break;
        }
        let now = identity(&kubelet);
        if now.is_some() {
            for endpoint in endpoints.iter_mut().filter(|e| e.registered != now) {
                let resource = endpoint.request.resource_name.clone();
                match send(config, endpoint.request.clone()).await {
                    Ok(()) => {
                        say(&format!("registered {resource} with kubelet on {}", kubelet.display()));
                        endpoint.registered = now;
                    }
                    Err(e) => {
                        say(&e.to_string());
                        tokio::time::sleep(RETRY_AFTER).await;
                        continue 'watching;
                    }
                }
            }
        }
        if endpoints.iter().any(|e| e.server.is_finished()) {
            break;
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
    finish(endpoints).await
}

/// Writes the `ld.so.preload` file containers get, in the plugin's state directory.
fn write_preload(config: &Config) -> Result<(), HostFilesError> {
    crate::container_edits::write_preload(&config.host_files())
}
