//! The CDI spec file the plugin keeps with `--cdi-dir` ([`Config::cdi_file`]): one device per vGPU of the
//! plugin (`k8s-…`) that the daemon has now. `Allocate` brings it up to date after creating a vGPU and
//! before answering (the runtime reads it when kubelet creates the container); [`keep_synced`] does so
//! every few seconds as well, so vGPUs removed since (garbage collection, a plugin restart) leave it; with
//! none left the file goes.

use crate::cdi::{VgpuRef, spec, write_atomic};
use crate::config::Config;
use crate::gc::PREFIX;
use crate::inventory::Gpu;
use std::time::Duration;
use tessera_client::Client;
use tokio::sync::watch;

/// How often [`keep_synced`] looks again.
const SYNC_EVERY: Duration = Duration::from_secs(5);

/// One writer at a time: each lists the vGPUs and writes what it saw, so two at once could put back a
/// list older than the other's.
static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Makes the plugin's spec file list the plugin's vGPUs now in the daemon (on `gpus`); writes it only
/// when that changes it, and removes it when there is none. Without `--cdi-dir`, does nothing. Returns
/// what was left out, one line each.
pub fn sync(config: &Config, client: &Client, gpus: &[Gpu]) -> Result<Vec<String>, String> {
    let Some(file) = config.cdi_file() else { return Ok(Vec::new()) };
    let _one = WRITING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let vgpus: Vec<VgpuRef> = client
        .list()
        .map_err(|e| format!("cannot list the daemon's vGPUs for the CDI spec: {e}"))?
        .into_iter()
        .filter(|v| v.spec.name.starts_with(PREFIX))
        .map(|v| VgpuRef { name: v.spec.name, device: v.spec.device })
        .collect();
    let (spec, left_out) = spec(&config.host_files(), gpus, &vgpus, false);
    if spec.devices.is_empty() {
        // Runtimes refuse a spec without devices (logging an error each time they look): no file then.
        return match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("cannot remove {}: {e}", file.display())),
            _ => Ok(left_out),
        };
    }
    let text = spec.to_json();
    if std::fs::read_to_string(&file).ok().as_deref() != Some(text.as_str()) {
        write_atomic(&file, &text)?;
    }
    Ok(left_out)
}

/// Keeps the spec file current every [`SYNC_EVERY`], from the GPUs `gpus` holds, until dropped; says
/// each new failure (or what is left out) on stderr once.
pub async fn keep_synced(config: Config, client: Client, gpus: watch::Receiver<Vec<Gpu>>) {
    let mut said: Vec<String> = Vec::new();
    loop {
        let (c, cl, g) = (config.clone(), client.clone(), gpus.borrow().clone());
        let lines = match tokio::task::spawn_blocking(move || sync(&c, &cl, &g)).await {
            Ok(Ok(left_out)) => left_out,
            Ok(Err(e)) => vec![e],
            Err(_) => return,
        };
        if lines != said {
            lines.iter().for_each(|l| eprintln!("tessera device-plugin: CDI spec: {l}"));
            said = lines;
        }
        tokio::time::sleep(SYNC_EVERY).await;
    }
}
