//! Registering with kubelet (`Registration.Register` on `kubelet.sock`), and noticing when that must be
//! done again: kubelet, when it restarts, makes a new `kubelet.sock` (and removes the plugins' sockets).

use crate::config::Config;
use crate::v1beta1::registration_client::RegistrationClient;
use crate::v1beta1::{DevicePluginOptions, RegisterRequest};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The device-plugin API version this plugin speaks.
pub const VERSION: &str = "v1beta1";

/// The request that registers the plugin of `config`.
pub fn request(config: &Config) -> RegisterRequest {
    RegisterRequest {
        version: VERSION.into(),
        endpoint: config.socket_name.clone(),
        resource_name: config.resource.clone(),
        options: Some(DevicePluginOptions { pre_start_required: false, get_preferred_allocation_available: true }),
    }
}

/// Registers the plugin of `config` with the kubelet listening on its `kubelet.sock`.
pub async fn register(config: &Config) -> Result<(), String> {
    let socket = config.kubelet_socket();
    let channel = crate::unix::channel(&socket)
        .await
        .map_err(|e| format!("cannot reach kubelet on {}: {e}", socket.display()))?;
    RegistrationClient::new(channel)
        .register(request(config))
        .await
        .map_err(|e| format!("kubelet on {} refused the registration: {}", socket.display(), e.message()))?;
    Ok(())
}

/// What tells one socket file from another at the same path (device and inode), `None` when there is none.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}
