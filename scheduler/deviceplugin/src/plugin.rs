//! The plugin at work: keeps the GPU list current from the daemon, serves the `DevicePlugin` service on
//! its socket, registers with kubelet, and starts over (new socket, new registration) when kubelet's
//! socket is replaced or its own is removed, as happens when kubelet restarts; until `stop` completes.

use crate::config::Config;
use crate::gc::Collector;
use crate::inventory::{Gpu, NvmlFacts, refresh};
use crate::registration::{Identity, identity, register};
use crate::service::Service;
use crate::v1beta1::device_plugin_server::DevicePluginServer;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tessera_client::Client;
use tokio::sync::watch;

/// How often the sockets are looked at (kubelet restarts are noticed within this).
const WATCH_EVERY: Duration = Duration::from_millis(200);
/// How often the daemon's devices are read again.
const REFRESH_EVERY: Duration = Duration::from_secs(5);
/// How long to wait before trying again to register after a failure.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Prints one line about the plugin's progress on stderr.
fn say(message: &str) {
    eprintln!("tessera device-plugin: {message}");
}

/// Keeps the GPU list current: reads the daemon's devices every [`REFRESH_EVERY`], sending only changes
/// (each change becomes a `ListAndWatch` update), and removes the vGPUs of ended containers (after
/// `grace`).
/// The first read is done before this returns, so that kubelet's first `ListAndWatch` gets the GPUs, not
/// an empty list.
async fn keep_current(
    client: Client,
    facts: NvmlFacts,
    grace: Duration,
) -> (watch::Receiver<Vec<Gpu>>, tokio::task::JoinHandle<()>) {
    let facts = Arc::new(facts);
    let collector = Arc::new(std::sync::Mutex::new(Collector::new(grace)));
    let (gpus, receiver) = watch::channel(Vec::new());
    let mut said: Option<String> = None;
    let mut read_once = async move || -> bool {
        let before = gpus.borrow().clone();
        let (c, f, g) = (client.clone(), facts.clone(), collector.clone());
        let read = move || {
            let collected = g.lock().map(|mut g| g.collect(&c)).unwrap_or_default();
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

/// Runs the plugin of `config`, reaching the daemon with `client`, until `stop` completes. Fails at once
/// on a bad configuration or a socket that cannot be made; kubelet being absent or refusing is reported
/// and retried.
pub async fn run(
    config: Config,
    client: Client,
    facts: NvmlFacts,
    stop: impl Future<Output = ()>,
) -> Result<(), String> {
    config.check()?;
    write_preload(&config)?;
    let (gpus, refresher) = keep_current(client.clone(), facts, config.gc_grace).await;
    // With `--cdi-dir`: the spec file follows the plugin's vGPUs (removed ones leave it).
    let cdi_sync = config
        .cdi_dir
        .is_some()
        .then(|| tokio::spawn(crate::cdi_file::keep_synced(config.clone(), client.clone(), gpus.clone())));
    tokio::pin!(stop);
    let result = loop {
        let serving = serve_once(&config, &client, gpus.clone());
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
    result
}

/// Serves on a fresh socket and registers, until kubelet's socket is replaced or the plugin's own
/// removed (then returns `Ok` to start over).
async fn serve_once(config: &Config, client: &Client, gpus: watch::Receiver<Vec<Gpu>>) -> Result<(), String> {
    let socket = config.socket();
    let incoming = crate::unix::listen(&socket).map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?;
    let own = identity(&socket);
    let service = Service::new(config.clone(), client.clone(), gpus);
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder().add_service(DevicePluginServer::new(service)).serve_with_incoming_shutdown(
            incoming,
            async {
                let _ = done_rx.await;
            },
        ),
    );
    say(&format!("serving {} on {}", config.resource, socket.display()));
    let kubelet = config.kubelet_socket();
    let mut registered: Option<Identity> = None;
    loop {
        if identity(&socket) != own {
            say(&format!("{} was removed (kubelet restarted?); starting over", socket.display()));
            break;
        }
        let now = identity(&kubelet);
        if now.is_some() && now != registered {
            match register(config).await {
                Ok(()) => {
                    say(&format!("registered {} with kubelet on {}", config.resource, kubelet.display()));
                    registered = now;
                }
                Err(e) => {
                    say(&e);
                    tokio::time::sleep(RETRY_AFTER).await;
                    continue;
                }
            }
        }
        if server.is_finished() {
            break;
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
    let _ = done_tx.send(());
    match server.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("serving on {}: {e}", socket.display())),
        Err(e) => Err(format!("the server on {} failed: {e}", socket.display())),
    }
}

/// Writes the `ld.so.preload` file containers get, in the plugin's state directory.
fn write_preload(config: &Config) -> Result<(), String> {
    crate::container_edits::write_preload(&config.host_files())
}
