//! The Kubernetes API, when the plugin has credentials: a kubeconfig file (`--kubeconfig`), else the pod's
//! service account when running in a cluster (`KUBERNETES_SERVICE_HOST` set), else none. The plugin only
//! lists the pods on its node (`GET /api/v1/pods?fieldSelector=spec.nodeName=NODE`), so its role needs
//! `get`, `list` and `watch` on `pods`.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::Path;
use std::time::Duration;

/// How long one request to the API may take (connect, then read): `Allocate` waits for it.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a pod's service account is mounted (token, ca.crt, namespace), as `kube` reads it.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The in-cluster configuration (`KUBERNETES_SERVICE_HOST`/`_PORT` and the service account's files).
/// Each part is looked at first, so that a missing or empty one is named: `kube` would read the token
/// only at the first request, and names neither the files nor the variables in its errors.
fn in_cluster() -> Result<kube::Config, String> {
    let refuse = |why: String| {
        format!("KUBERNETES_SERVICE_HOST is set but the in-cluster service account cannot be used: {why}")
    };
    match std::env::var("KUBERNETES_SERVICE_PORT") {
        Ok(port) if port.parse::<u16>().is_ok() => {}
        Ok(port) => return Err(refuse(format!("KUBERNETES_SERVICE_PORT={port:?} is not a port number"))),
        Err(e) => return Err(refuse(format!("KUBERNETES_SERVICE_PORT: {e}"))),
    }
    // The namespace may be empty (it is only the client's default); the token and CA may not.
    for (file, may_be_empty) in [("token", false), ("ca.crt", false), ("namespace", true)] {
        let path = Path::new(SERVICE_ACCOUNT_DIR).join(file);
        match std::fs::read(&path) {
            Ok(text) if !may_be_empty && text.iter().all(u8::is_ascii_whitespace) => {
                return Err(refuse(format!("{} is empty", path.display())));
            }
            Ok(_) => {}
            Err(e) => return Err(refuse(format!("{}: {e}", path.display()))),
        }
    }
    let config = kube::Config::incluster().map_err(|e| refuse(format!("{e} (in {SERVICE_ACCOUNT_DIR})")))?;
    // kube skips what is not a PEM certificate, so a CA file of none would fail every request instead.
    if config.root_cert.as_ref().is_none_or(Vec::is_empty) {
        return Err(refuse(format!("{SERVICE_ACCOUNT_DIR}/ca.crt holds no PEM certificate")));
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
    pub async fn connect(kubeconfig: Option<&Path>, node: &str) -> Result<Option<KubeApi>, String> {
        let (config, source) = match kubeconfig {
            Some(file) => {
                let bad = |e: &dyn std::fmt::Display| format!("--kubeconfig {}: {e}", file.display());
                let parsed = Kubeconfig::read_from(file).map_err(|e| bad(&e))?;
                let config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
                    .await
                    .map_err(|e| bad(&e))?;
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
        let client =
            kube::Client::try_from(config).map_err(|e| format!("cannot make a client of {source} ({url}): {e}"))?;
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
    pub async fn pods_on_node(&self) -> Result<Vec<Pod>, String> {
        let params = ListParams::default().fields(&format!("spec.nodeName={}", self.node));
        let listed = tokio::time::timeout(2 * REQUEST_TIMEOUT, self.pods.list(&params)).await;
        match listed {
            Ok(Ok(list)) => Ok(list.items),
            Ok(Err(e)) => Err(format!("cannot list the pods on node {} through {}: {e}", self.node, self.source)),
            Err(_) => Err(format!("listing the pods on node {} through {} timed out", self.node, self.source)),
        }
    }
}
