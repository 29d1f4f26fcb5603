//! The Kubernetes API, when the plugin has credentials: a kubeconfig file (`--kubeconfig`), else the pod's
//! service account when running in a cluster (`KUBERNETES_SERVICE_HOST` set), else none. The plugin only
//! lists the pods on its node (`GET /api/v1/pods?fieldSelector=spec.nodeName=NODE`), so its role needs
//! `get`, `list` and `watch` on `pods`.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::config::{InClusterError, KubeConfigOptions, Kubeconfig, KubeconfigError};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one request to the API may take (connect, then read): `Allocate` waits for it.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a pod's service account is mounted (token, ca.crt, namespace), as `kube` reads it.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What every in-cluster refusal starts with.
const IN_CLUSTER: &str = "KUBERNETES_SERVICE_HOST is set but the in-cluster service account cannot be used";

/// Why the Kubernetes API cannot be used: credentials that cannot be (each names the kubeconfig file, the
/// service account's file or the variable), or a request that failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeApiError {
    /// `KUBERNETES_SERVICE_PORT` is set but not a port number.
    #[error("{IN_CLUSTER}: KUBERNETES_SERVICE_PORT={0:?} is not a port number")]
    InClusterPort(String),
    /// `KUBERNETES_SERVICE_PORT` is unset (or not Unicode).
    #[error("{IN_CLUSTER}: KUBERNETES_SERVICE_PORT: {0}")]
    InClusterPortUnset(#[source] std::env::VarError),
    /// The service account's token or CA file is empty.
    #[error("{IN_CLUSTER}: {} is empty", .0.display())]
    InClusterEmptyFile(PathBuf),
    /// One of the service account's files cannot be read.
    #[error("{IN_CLUSTER}: {}: {source}", .file.display())]
    InClusterFile {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `kube` refuses the in-cluster configuration.
    #[error("{IN_CLUSTER}: {0} (in {SERVICE_ACCOUNT_DIR})")]
    InCluster(#[source] InClusterError),
    /// The service account's CA file holds no PEM certificate.
    #[error("{IN_CLUSTER}: {SERVICE_ACCOUNT_DIR}/ca.crt holds no PEM certificate")]
    InClusterNoCertificate,
    /// The kubeconfig file cannot be read or used.
    #[error("--kubeconfig {}: {source}", .file.display())]
    Kubeconfig {
        /// The file.
        file: PathBuf,
        /// Why.
        source: KubeconfigError,
    },
    /// No client can be made of the configuration.
    #[error("cannot make a client of {credentials} ({url}): {source}")]
    Client {
        /// Where the credentials came from.
        credentials: String,
        /// The API's address.
        url: String,
        /// Why (boxed: a `kube::Error` is large).
        source: Box<kube::Error>,
    },
    /// Listing the pods on the node failed.
    #[error("cannot list the pods on node {node} through {api}: {source}")]
    List {
        /// The node.
        node: String,
        /// Where the credentials came from and the API's address.
        api: String,
        /// Why (boxed: a `kube::Error` is large).
        source: Box<kube::Error>,
    },
    /// Listing the pods on the node took longer than allowed.
    #[error("listing the pods on node {node} through {api} timed out")]
    ListTimedOut {
        /// The node.
        node: String,
        /// Where the credentials came from and the API's address.
        api: String,
    },
}

/// The in-cluster configuration (`KUBERNETES_SERVICE_HOST`/`_PORT` and the service account's files).
/// Each part is looked at first, so that a missing or empty one is named: `kube` would read the token
/// only at the first request, and names neither the files nor the variables in its errors.
fn in_cluster() -> Result<kube::Config, KubeApiError> {
    match std::env::var("KUBERNETES_SERVICE_PORT") {
        Ok(port) if port.parse::<u16>().is_ok() => {}
        Ok(port) => return Err(KubeApiError::InClusterPort(port)),
        Err(e) => return Err(KubeApiError::InClusterPortUnset(e)),
    }
    // The namespace may be empty (it is only the client's default); the token and CA may not.
    for (file, may_be_empty) in [("token", false), ("ca.crt", false), ("namespace", true)] {
        let path = Path::new(SERVICE_ACCOUNT_DIR).join(file);
        match std::fs::read(&path) {
            Ok(text) if !may_be_empty && text.iter().all(u8::is_ascii_whitespace) => {
                return Err(KubeApiError::InClusterEmptyFile(path));
            }
            Ok(_) => {}
            Err(source) => return Err(KubeApiError::InClusterFile { file: path, source }),
        }
    }
    let config = kube::Config::incluster().map_err(KubeApiError::InCluster)?;
    // kube skips what is not a PEM certificate, so a CA file of none would fail every request instead.
    if config.root_cert.as_ref().is_none_or(Vec::is_empty) {
        return Err(KubeApiError::InClusterNoCertificate);
    }
    Ok(config)
}

/// The Kubernetes API, seen from one node.
#[derive(Clone)]
pub struct KubeApi {
    pods: Api<Pod>,
    node: String,
    /// Where the credentials came from, for messages.
    source: String,
}

impl KubeApi {
    /// The API given by `kubeconfig`, else by the in-cluster service account if `KUBERNETES_SERVICE_HOST`
    /// is set, else `None`. A kubeconfig or service account that cannot be used is an error naming it.
    /// Must be called within a tokio runtime (the client's connection pool runs on it).
    pub async fn connect(kubeconfig: Option<&Path>, node: &str) -> Result<Option<KubeApi>, KubeApiError> {
        let (config, source) = match kubeconfig {
            Some(file) => {
                let bad = |source| KubeApiError::Kubeconfig { file: file.to_path_buf(), source };
                let parsed = Kubeconfig::read_from(file).map_err(bad)?;
                let config =
                    kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default()).await.map_err(bad)?;
                (config, format!("kubeconfig {}", file.display()))
            }
            None if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
                (in_cluster()?, "the in-cluster service account".to_string())
            }
            None => return Ok(None),
        };
        let mut config = config;
        config.connect_timeout = Some(REQUEST_TIMEOUT);
        config.read_timeout = Some(REQUEST_TIMEOUT);
        let url = config.cluster_url.clone();
        let client = kube::Client::try_from(config).map_err(|e| KubeApiError::Client {
            credentials: source.clone(),
            url: url.to_string(),
            source: Box::new(e),
        })?;
        let source = format!("{source} ({url})");
        Ok(Some(KubeApi { pods: Api::all(client), node: node.to_string(), source }))
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Where the credentials came from and the API's address.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The pods on this node, in every namespace (bounded by [`REQUEST_TIMEOUT`] twice over).
    pub async fn pods_on_node(&self) -> Result<Vec<Pod>, KubeApiError> {
        let params = ListParams::default().fields(&format!("spec.nodeName={}", self.node));
        let listed = tokio::time::timeout(2 * REQUEST_TIMEOUT, self.pods.list(&params)).await;
        let (node, api) = (self.node.clone(), self.source.clone());
        match listed {
            Ok(Ok(list)) => Ok(list.items),
            Ok(Err(e)) => Err(KubeApiError::List { node, api, source: Box::new(e) }),
            Err(_) => Err(KubeApiError::ListTimedOut { node, api }),
        }
    }
}
