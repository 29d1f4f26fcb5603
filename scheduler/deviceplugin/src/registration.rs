//! Registering with kubelet (`Registration.Register` on `kubelet.sock`), and noticing when that must be
//! done again: kubelet, when it restarts, makes a new `kubelet.sock` (and removes the plugins' sockets).

use crate::config::Config;
use crate::v1beta1::registration_client::RegistrationClient;
use crate::v1beta1::{DevicePluginOptions, RegisterRequest};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The device-plugin API version this plugin speaks.
pub const VERSION: &str = "v1beta1";

/// Why kubelet did not take a registration; each names kubelet's socket.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// kubelet's socket cannot be connected to.
    #[error("cannot reach kubelet on {}: {source}", .socket.display())]
    Unreachable {
        /// kubelet's socket.
        socket: PathBuf,
        /// Why.
        source: tonic::transport::Error,
    },
    /// kubelet answered with an error.
    #[error("kubelet on {} refused the registration: {}", .socket.display(), .status.message())]
    Refused {
        /// kubelet's socket.
        socket: PathBuf,
        /// kubelet's answer.
        #[source]
        status: tonic::Status,
    },
    /// kubelet did not answer within [`TIMEOUT`].
    #[error("kubelet on {} did not answer within {} s", .0.display(), TIMEOUT.as_secs())]
    TimedOut(PathBuf),
}

/// The request that registers the plugin of `config`.
pub fn request(config: &Config) -> RegisterRequest {
    RegisterRequest {
        version: VERSION.into(),
        endpoint: config.socket_name.clone(),
        resource_name: config.resource.clone(),
        options: Some(DevicePluginOptions { pre_start_required: false, get_preferred_allocation_available: true }),
    }
}

/// The request that registers one of the extra resources of `config`.
pub fn extra_request(extra: &crate::extra_resources::Extra) -> RegisterRequest {
    RegisterRequest {
        version: VERSION.into(),
        endpoint: extra.socket_name.clone(),
        resource_name: extra.resource.clone(),
        options: Some(crate::extra_resources::options()),
    }
}

/// Registers the plugin of `config` with the kubelet listening on its `kubelet.sock`, giving up after
/// [`TIMEOUT`] (a kubelet that accepts the connection but never answers must not stall the plugin).
pub async fn register(config: &Config) -> Result<(), RegistrationError> {
    send(config, request(config)).await
}

/// Sends registration `request` to the kubelet of `config` (see [`register`]).
pub async fn send(config: &Config, request: RegisterRequest) -> Result<(), RegistrationError> {
    let socket = config.kubelet_socket();
    let attempt = async {
        let channel = crate::unix::channel(&socket)
            .await
            .map_err(|source| RegistrationError::Unreachable { socket: socket.clone(), source })?;
        RegistrationClient::new(channel)
            .register(request)
            .await
            .map_err(|status| RegistrationError::Refused { socket: socket.clone(), status })
    };
    match tokio::time::timeout(TIMEOUT, attempt).await {
        Ok(result) => result.map(drop),
        Err(_) => Err(RegistrationError::TimedOut(socket)),
    }
}

/// How long kubelet may take to answer a registration.
pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What tells one socket file from another made later at the same path, `None` when there is none: its
/// device, inode and change time (a file system may give a new file the inode number of one just
/// removed, so the inode alone does not tell).
pub fn identity(path: &Path) -> Option<Identity> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// See [`identity`].
pub type Identity = (u64, u64, i64, i64);
