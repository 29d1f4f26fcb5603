//! What the plugin is configured with, checked once at start: where kubelet's sockets are, the resource
//! it registers, how many replicas each GPU is cut into, and the daemon's files a container needs.

use crate::container_edits::HostFilesError;
use std::path::PathBuf;

/// kubelet's device-plugin directory.
pub const DEFAULT_DIR: &str = "/var/lib/kubelet/device-plugins";
/// The resource registered by default.
pub const DEFAULT_RESOURCE: &str = "tessera.io/vgpu";
/// Replicas per GPU by default.
pub const DEFAULT_REPLICAS: u32 = 10;
/// Most replicas per GPU: each gets at least 1% of the device's time.
pub const MAX_REPLICAS: u32 = 100;
/// The plugin's socket file name in [`Config::dir`].
pub const DEFAULT_SOCKET_NAME: &str = "tessera-vgpu.sock";
/// kubelet's registration socket file name.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// How long a vGPU of the plugin that had processes may stay without any before it is removed.
pub const DEFAULT_GC_GRACE: std::time::Duration = std::time::Duration::from_secs(30);
/// Where the shim is mounted in a container (and what its `/etc/ld.so.preload` names).
pub const SHIM_IN_CONTAINER: &str = "/usr/local/lib/tessera/libtessera.so";
/// Where the GPU device nodes are on the host by default.
pub const DEFAULT_DEV_DIR: &str = "/dev";

/// Why the plugin's configuration is refused: the first bad field, named as the command line names it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// kubelet's device-plugin directory is missing.
    #[error("--dir {}: no such directory (kubelet creates it)", .0.display())]
    NoDir(PathBuf),
    /// The shim is not installed.
    #[error("the shim {} does not exist; install tessera first", .0.display())]
    NoShim(PathBuf),
    /// The CDI directory cannot be created.
    #[error("--cdi-dir {}: cannot create it: {source}", .dir.display())]
    CdiDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Replicas outside 1 to [`MAX_REPLICAS`].
    #[error("--replicas {0}: give 1 to {MAX_REPLICAS} replicas per GPU")]
    Replicas(u32),
    /// The resource name is not one kubelet accepts.
    #[error(transparent)]
    Resource(#[from] ResourceError),
    /// A socket name that is not a plain file name, or is kubelet's.
    #[error("socket name {0:?}: give a plain file name other than {KUBELET_SOCKET}")]
    SocketName(String),
    /// An extra resource's name (derived from `--resource`) is not one kubelet accepts.
    #[error("{0} (the extra resource derived from --resource; shorten it or give --no-extra-resources)")]
    ExtraResource(#[source] ResourceError),
    /// An empty node name, or one with characters no node name has.
    #[error("--node-name {0:?}: give this node's name in Kubernetes")]
    NodeName(String),
    /// The daemon's files cannot be given to containers.
    #[error(transparent)]
    HostFiles(#[from] HostFilesError),
}

/// Why a resource name is not one kubelet accepts (see [`check_resource`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// No `/` between domain and name.
    #[error("--resource {0:?}: give it as domain/name; e.g. {DEFAULT_RESOURCE}")]
    NotDomainName(String),
    /// The domain is not a DNS name.
    #[error(
        "--resource {0:?}: the domain must be a DNS name (lower case letters, digits, '-' and '.'); e.g. \
         {DEFAULT_RESOURCE}"
    )]
    BadDomain(String),
    /// The name is not 1-63 letters, digits, `-`, `_` or `.`, starting and ending alphanumeric.
    #[error(
        "--resource {0:?}: the name must be 1-63 letters, digits, '-', '_' or '.', starting and ending \
         alphanumeric; e.g. {DEFAULT_RESOURCE}"
    )]
    BadName(String),
}

/// The plugin's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// kubelet's device-plugin directory (holding `kubelet.sock` and the plugin's socket).
    pub dir: PathBuf,
    /// The plugin's socket file name in `dir` (the `endpoint` it registers).
    pub socket_name: String,
    /// The extended resource name, `domain/name`.
    pub resource: String,
    /// Replicas each GPU is advertised as.
    pub replicas: u32,
    /// The daemon's socket (mounted into containers, and the plugin's own way to the daemon).
    pub daemon_socket: PathBuf,
    /// The daemon's region file (mounted into containers).
    pub region: PathBuf,
    /// The shim on the host (mounted read-only into containers).
    pub shim: PathBuf,
    /// Where the plugin keeps the `ld.so.preload` file it mounts into containers.
    pub state_dir: PathBuf,
    /// How long a vGPU of the plugin that had processes may stay without any before it is removed.
    pub gc_grace: std::time::Duration,
    /// The host directory holding the GPU device nodes (`nvidiactl`, `nvidia<N>`, ...): `/dev`, or another
    /// tree standing in for it.
    pub dev_dir: PathBuf,
    /// When set, `Allocate` keeps a CDI spec of the plugin's vGPUs in this directory ([`Config::cdi_file`])
    /// and names the container's CDI device in its answer.
    pub cdi_dir: Option<PathBuf>,
    /// Also register `<resource>-memory` and `<resource>-share` (see [`crate::extra_resources`]).
    pub extra_resources: bool,
    /// The kubeconfig giving the Kubernetes API's address and credentials (`--kubeconfig`); without it the
    /// in-cluster service account is used when `KUBERNETES_SERVICE_HOST` is set, else there is no API.
    pub kubeconfig: Option<PathBuf>,
    /// This node's name in Kubernetes (`--node-name`, else `NODE_NAME`, else the host name): the pods
    /// looked up are those with `spec.nodeName` this.
    pub node_name: String,
}

impl Config {
    /// The plugin's socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join(&self.socket_name)
    }

    /// kubelet's registration socket.
    pub fn kubelet_socket(&self) -> PathBuf {
        self.dir.join(KUBELET_SOCKET)
    }

    /// The `ld.so.preload` file mounted into containers.
    pub fn preload_file(&self) -> PathBuf {
        self.state_dir.join("ld.so.preload")
    }

    /// The daemon's files and the device nodes as a container is given them.
    pub fn host_files(&self) -> crate::container_edits::HostFiles {
        crate::container_edits::HostFiles {
            region: self.region.clone(),
            socket: self.daemon_socket.clone(),
            shim: self.shim.clone(),
            preload: self.preload_file(),
            dev_dir: self.dev_dir.clone(),
        }
    }

    /// The CDI spec file the plugin keeps, when `--cdi-dir` is given: `<socket name without .sock>.json`,
    /// so two plugins of a node (two sockets) keep two files.
    pub fn cdi_file(&self) -> Option<PathBuf> {
        let stem = self.socket_name.strip_suffix(".sock").unwrap_or(&self.socket_name);
        self.cdi_dir.as_ref().map(|dir| dir.join(format!("{stem}.json")))
    }

    /// The file recording which pod container each vGPU of the plugin is for.
    pub fn pods_file(&self) -> PathBuf {
        self.state_dir.join("pods.json")
    }

    /// Checks every field, naming the first bad one.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.check_values()?;
        if !self.dir.is_dir() {
            return Err(ConfigError::NoDir(self.dir.clone()));
        }
        if !self.shim.is_file() {
            return Err(ConfigError::NoShim(self.shim.clone()));
        }
        if let Some(dir) = &self.cdi_dir {
            std::fs::create_dir_all(dir).map_err(|source| ConfigError::CdiDir { dir: dir.clone(), source })?;
        }
        Ok(())
    }

    /// Checks the values alone, not the files they name (what `--check-config` does, e.g. for a manifest
    /// checked on another machine than the node): replicas, resource names, socket names.
    pub fn check_values(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(ConfigError::Replicas(self.replicas));
        }
        check_resource(&self.resource)?;
        let name = &self.socket_name;
        if name.is_empty() || name.contains('/') || name == KUBELET_SOCKET {
            return Err(ConfigError::SocketName(name.clone()));
        }
        for extra in crate::extra_resources::extras(self) {
            check_resource(&extra.resource).map_err(ConfigError::ExtraResource)?;
        }
        if self.node_name.is_empty() || self.node_name.contains(['/', ',', '=']) {
            return Err(ConfigError::NodeName(self.node_name.clone()));
        }
        self.host_files().check()?;
        Ok(())
    }
}

/// An extended resource name kubelet accepts: `domain/name`, the domain a DNS subdomain, the name a DNS
/// label-like word of letters, digits, `-`, `_`, `.`.
pub fn check_resource(resource: &str) -> Result<(), ResourceError> {
    let Some((domain, name)) = resource.split_once('/') else {
        return Err(ResourceError::NotDomainName(resource.to_string()));
    };
    let word = |s: &str, extra: &[u8]| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || extra.contains(&b))
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
    };
    if !domain.split('.').all(|label| word(label, b"-")) || domain.len() > 253 {
        return Err(ResourceError::BadDomain(resource.to_string()));
    }
    if !word(&name.to_ascii_lowercase(), b"-_.") {
        return Err(ResourceError::BadName(resource.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names() {
        for good in ["tessera.io/vgpu", "example.com/gpu-shared", "a/B_c.d"] {
            assert_eq!(check_resource(good), Ok(()), "{good}");
        }
        for bad in ["vgpu", "/vgpu", "tessera.io/", "Tessera.io/vgpu", "tessera..io/vgpu", "t.io/-x", "t.io/a/b"] {
            assert!(check_resource(bad).is_err(), "{bad}");
        }
    }
}
