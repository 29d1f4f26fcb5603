//! `tessera k8s device-plugin`: the Kubernetes device plugin (crate `tessera-deviceplugin`), one per node,
//! in the foreground until SIGTERM (or SIGINT, SIGHUP).

use crate::signals;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use tessera_client::Client;
use tessera_deviceplugin::config::DEFAULT_DEV_DIR;
use tessera_deviceplugin::config::{Config, DEFAULT_DIR, DEFAULT_REPLICAS, DEFAULT_RESOURCE, DEFAULT_SOCKET_NAME};
use tessera_deviceplugin::extra_resources::extras;
use tessera_deviceplugin::inventory::NvmlFacts;
use tessera_host::lib_dir::LibDirError;
use tessera_host::paths::{self, PathError};

/// Why `tessera k8s device-plugin` could not start, or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    /// `--gc-grace` is not a time.
    #[error("{0:?} is not a time; give e.g. 30s or 2m")]
    Grace(String),
    /// A path of the daemon's files cannot be told (`TESSERA_SOCKET`, `TESSERA_REGION`,
    /// `TESSERA_STATE_DIR`).
    #[error(transparent)]
    Path(#[from] PathError),
    /// The shim's library folder is not found.
    #[error(transparent)]
    LibDir(#[from] LibDirError),
    /// No `--node-name` (nor `NODE_NAME`), and the host name cannot be read.
    #[error("cannot read the host name ({0}); give --node-name")]
    HostName(#[source] std::io::Error),
    /// The stop signals' handler could not be installed.
    #[error(transparent)]
    Signals(#[from] signals::SignalError),
    /// The plugin's async runtime could not be started.
    #[error("cannot start the plugin's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The configuration is refused.
    #[error(transparent)]
    Config(#[from] tessera_deviceplugin::config::ConfigError),
    /// The plugin failed.
    #[error(transparent)]
    Plugin(#[from] tessera_deviceplugin::plugin::PluginError),
}

/// `tessera k8s ...`.
#[derive(Subcommand)]
pub enum K8sCommand {
    /// Register with kubelet and hand out vGPUs: each GPU is advertised as N replicas of RESOURCE, and a
    /// container asking for k of one GPU gets a vGPU with k/N of its time and memory.
    DevicePlugin(DevicePluginArgs),
}

/// Options of `tessera k8s device-plugin`.
#[derive(Args)]
pub struct DevicePluginArgs {
    /// kubelet's device-plugin directory (holding kubelet.sock; the plugin's socket goes there too).
    #[arg(long, default_value = DEFAULT_DIR, value_name = "DIR")]
    dir: PathBuf,
    /// Replicas each GPU is advertised as (1-100); one replica is 1/N of the GPU's time and memory.
    #[arg(long, default_value_t = DEFAULT_REPLICAS, value_name = "N")]
    replicas: u32,
    /// The extended resource registered, domain/name.
    #[arg(long, default_value = DEFAULT_RESOURCE, value_name = "NAME")]
    resource: String,
    /// Remove a vGPU of the plugin once it has had no process attached for this long after its container's
    /// processes had joined it (e.g. 30s, 2m).
    #[arg(long, default_value = "30s", value_name = "TIME", value_parser = parse_grace)]
    gc_grace: Duration,
    /// The plugin's socket file name in DIR.
    #[arg(long, default_value = DEFAULT_SOCKET_NAME, value_name = "FILE")]
    socket_name: String,
    /// Keep a CDI spec of the plugin's vGPUs in DIR (e.g. /var/run/cdi; file `<socket name>.json`, kind
    /// tessera.io/vgpu) and name each container's device (`tessera.io/vgpu=<vGPU>`) in the answer to
    /// kubelet, beside the envs, mounts and device nodes.
    #[arg(long, value_name = "DIR")]
    cdi_dir: Option<PathBuf>,
    /// The host directory holding the GPU device nodes; containers get those of them that exist.
    #[arg(long, default_value = DEFAULT_DEV_DIR, value_name = "DIR")]
    dev_dir: PathBuf,
    /// Do not register RESOURCE-memory (1 GiB units) and RESOURCE-share (1 % units) beside RESOURCE (each
    /// on its own socket, RESOURCE's socket name with -memory / -share), which the Kubernetes scheduler
    /// counts pods' memory and share requests against.
    #[arg(long)]
    no_extra_resources: bool,
    /// Check the options (values only, not that DIR or the daemon's files exist), print the resulting
    /// configuration and exit: e.g. to check a DaemonSet's arguments off the node.
    #[arg(long)]
    check_config: bool,
    /// A kubeconfig for the Kubernetes API (pods get/list/watch): vGPUs are then sized from their pods'
    /// limits and annotations and removed when their pods end. Without it the in-cluster service account
    /// is used when KUBERNETES_SERVICE_HOST is set, else no API.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// This node's name in Kubernetes (default: $NODE_NAME, else the host name).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    node_name: Option<String>,
}

/// Runs a `tessera k8s` command.
pub fn run(command: K8sCommand) -> Result<(), K8sError> {
    match command {
        K8sCommand::DevicePlugin(args) => device_plugin(args),
    }
}

/// Runs the device plugin until a signal.
fn device_plugin(args: DevicePluginArgs) -> Result<(), K8sError> {
    let daemon_socket = paths::socket()?;
    let config = Config {
        dir: args.dir,
        socket_name: args.socket_name,
        resource: args.resource,
        replicas: args.replicas,
        region: paths::region()?.into(),
        shim: tessera_host::lib_dir::shim()?,
        state_dir: paths::state_dir()?.join("device-plugin"),
        daemon_socket: daemon_socket.clone(),
        gc_grace: args.gc_grace,
        dev_dir: args.dev_dir,
        cdi_dir: args.cdi_dir,
        extra_resources: !args.no_extra_resources,
        kubeconfig: args.kubeconfig,
        node_name: match args.node_name {
            Some(name) => name,
            None => host_name()?,
        },
    };
    if args.check_config {
        config.check_values()?;
        print!("{}", describe(&config));
        return Ok(());
    }
    config.check()?;
    signals::install()?;
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().map_err(K8sError::Runtime)?;
    let stop = async {
        while !signals::stop_requested() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    runtime
        .block_on(tessera_deviceplugin::plugin::run(config, Client::new(daemon_socket), NvmlFacts::open(), stop))
        .map_err(K8sError::from)
}

/// The configuration as `--check-config` prints it: one `key: value` per line.
fn describe(config: &Config) -> String {
    let mut lines = vec![
        format!("dir: {}", config.dir.display()),
        format!("resource: {}", config.resource),
        format!("socket: {}", config.socket_name),
        format!("replicas: {}", config.replicas),
        format!("gc-grace: {}s", config.gc_grace.as_secs()),
    ];
    for extra in extras(config) {
        lines.push(format!("extra resource: {} on {}", extra.resource, extra.socket_name));
    }
    lines.extend([
        format!("daemon socket: {}", config.daemon_socket.display()),
        format!("region: {}", config.region.display()),
        format!("shim: {}", config.shim.display()),
        format!("state dir: {}", config.state_dir.display()),
        format!("dev dir: {}", config.dev_dir.display()),
        format!("cdi dir: {}", config.cdi_dir.as_ref().map_or("-".into(), |d| d.display().to_string())),
        format!("node name: {}", config.node_name),
        format!("kubeconfig: {}", config.kubeconfig.as_ref().map_or("-".into(), |d| d.display().to_string())),
    ]);
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// This machine's host name (the node's name in Kubernetes unless told otherwise).
fn host_name() -> Result<String, K8sError> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").map_err(K8sError::HostName)?;
    Ok(name.trim().to_string())
}

/// A grace period: a number with `s` or `m` (`30s`, `2m`), or plain seconds.
fn parse_grace(text: &str) -> Result<Duration, K8sError> {
    let (number, unit) = match text.strip_suffix('m') {
        Some(n) => (n, 60),
        None => (text.strip_suffix('s').unwrap_or(text), 1),
    };
    let n: u64 = number.trim().parse().map_err(|_| K8sError::Grace(text.to_string()))?;
    Ok(Duration::from_secs(n * unit))
}
