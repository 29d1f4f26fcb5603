//! The CDI spec file the plugin keeps with `--cdi-dir` ([`Config::cdi_file`]): one device per vGPU of the
//! plugin (`k8s-…`) that the daemon has now. `Allocate` brings it up to date after creating a vGPU and
//! before answering (the runtime reads it when kubelet creates the container); [`keep_synced`] does so
//! every few seconds as well, so vGPUs removed since (garbage collection, a plugin restart) leave it; with
//! none left the file goes. Both go through the plugin's one [`CdiFile`], which lets one write at a time.

use crate::cdi::{VgpuRef, WriteError, spec, write_atomic};
use crate::config::Config;
use crate::gc::PREFIX;
use crate::inventory::Gpu;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tessera_client::Client;
use tokio::sync::watch;

/// How often [`keep_synced`] looks again.
const SYNC_EVERY: Duration = Duration::from_secs(5);

/// Why the spec file cannot be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The daemon's vGPUs cannot be listed.
    #[error("cannot list the daemon's vGPUs for the CDI spec: {0}")]
    List(#[source] tessera_client::Error),
    /// The file, with no vGPU left to list, cannot be removed.
    #[error("cannot remove {}: {source}", .file.display())]
    Remove {
        /// The spec file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file cannot be written.
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// The plugin's spec file, as the plugin's `Allocate` and [`keep_synced`] share it: one per plugin, held in
/// an [`Arc`] by both.
#[derive(Debug)]
pub struct CdiFile {
    /// The plugin's configuration (the file is [`Config::cdi_file`]; none without `--cdi-dir`).
    config: Config,
    /// One writer at a time: each lists the vGPUs and writes what it saw, so two at once could put back a
    /// list older than the other's.
    writing: Mutex<()>,
}

impl CdiFile {
    /// The spec file of the plugin of `config`.
    pub fn new(config: Config) -> CdiFile {
        CdiFile { config, writing: Mutex::new(()) }
    }

    /// Makes the plugin's spec file list the plugin's vGPUs now in the daemon (on `gpus`); writes it only
    /// when that changes it, and removes it when there is none. Without `--cdi-dir`, does nothing. Returns
    /// what was left out, one line each.
    pub fn sync(&self, client: &Client, gpus: &[Gpu]) -> Result<Vec<String>, SyncError> {
        let config = &self.config;
        let Some(file) = config.cdi_file() else { return Ok(Vec::new()) };
        let _one = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let vgpus: Vec<VgpuRef> = client
            .list()
            .map_err(SyncError::List)?
            .into_iter()
            .filter(|v| v.spec.name.starts_with(PREFIX))
            .map(|v| VgpuRef { name: v.spec.name, device: v.spec.device })
            .collect();
        let (spec, left_out) = spec(&config.host_files(), gpus, &vgpus, false);
        if spec.devices.is_empty() {
            // Runtimes refuse a spec without devices (logging an error each time they look): no file then.
            return match std::fs::remove_file(&file) {
                Err(source) if source.kind() != std::io::ErrorKind::NotFound => Err(SyncError::Remove { file, source }),
                _ => Ok(left_out),
            };
        }
        let text = spec.to_json();
        if std::fs::read_to_string(&file).ok().as_deref() != Some(text.as_str()) {
            write_atomic(&file, &text)?;
        }
        Ok(left_out)
    }
}

/// Keeps the spec file `file` current every [`SYNC_EVERY`], from the GPUs `gpus` holds, until dropped;
/// says each new failure (or what is left out) on stderr once.
pub async fn keep_synced(file: Arc<CdiFile>, client: Client, gpus: watch::Receiver<Vec<Gpu>>) {
    let mut said: Vec<String> = Vec::new();
    loop {
        let (f, cl, g) = (file.clone(), client.clone(), gpus.borrow().clone());
        let lines = match tokio::task::spawn_blocking(move || f.sync(&cl, &g)).await {
            Ok(Ok(left_out)) => left_out,
            Ok(Err(e)) => vec![e.to_string()],
            Err(_) => return,
        };
        if lines != said {
            lines.iter().for_each(|l| eprintln!("tessera device-plugin: CDI spec: {l}"));
            said = lines;
        }
        tokio::time::sleep(SYNC_EVERY).await;
    }
}
