//! `tessera cdi generate`: a CDI spec (kind `tessera.io/vgpu`) of the host's GPUs and the daemon's vGPUs,
//! read through the daemon's API (`tessera-client`), printed or written atomically to a file.

use clap::{Args, Subcommand};
use std::path::PathBuf;
use tessera_client::Client;
use tessera_deviceplugin::cdi::{VgpuRef, spec, write_atomic};
use tessera_deviceplugin::config::DEFAULT_DEV_DIR;
use tessera_deviceplugin::container_edits::{HostFiles, write_preload};
use tessera_deviceplugin::inventory::{NvmlFacts, refresh};
use tessera_host::paths;

/// `tessera cdi ...`.
#[derive(Subcommand)]
pub enum CdiCommand {
    /// Print (or write to FILE) a CDI spec with one device per vGPU (`tessera.io/vgpu=NAME`) and per GPU
    /// (`tessera.io/vgpu=gpuN` and `tessera.io/vgpu=<GPU UUID>`): `tessera cdi generate --output
    /// /etc/cdi/tessera.json`.
    Generate(GenerateArgs),
}

/// Options of `tessera cdi generate`.
#[derive(Args)]
pub struct GenerateArgs {
    /// Write the spec to FILE (atomically: a temporary file renamed over it) instead of printing it.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// The host directory holding the GPU device nodes; only nodes that exist there are listed.
    #[arg(long, default_value = DEFAULT_DEV_DIR, value_name = "DIR")]
    dev_dir: PathBuf,
}

/// Runs a `tessera cdi` command.
pub fn run(command: CdiCommand) -> Result<(), String> {
    match command {
        CdiCommand::Generate(args) => generate(args),
    }
}

/// Reads the GPUs and vGPUs from the daemon and prints or writes their spec.
fn generate(args: GenerateArgs) -> Result<(), String> {
    let socket = paths::socket().map_err(|e| e.to_string())?;
    let files = HostFiles {
        region: paths::region().map_err(|e| e.to_string())?.into(),
        socket: socket.clone(),
        shim: tessera_host::lib_dir::shim().map_err(|e| e.to_string())?,
        // The file the device plugin mounts too (same contents), so both hand out one file.
        preload: paths::state_dir().map_err(|e| e.to_string())?.join("device-plugin").join("ld.so.preload"),
        dev_dir: args.dev_dir,
    };
    files.check().map_err(|e| e.to_string())?;
    let client = Client::new(socket);
    let (gpus, error) = refresh(&client, &NvmlFacts::open(), &[]);
    if let Some(e) = error {
        return Err(format!("{e}; is `tessera daemon` running?"));
    }
    let vgpus: Vec<VgpuRef> = client
        .list()
        .map_err(|e| format!("cannot list the daemon's vGPUs: {e}"))?
        .into_iter()
        .map(|v| VgpuRef { name: v.spec.name, device: v.spec.device })
        .collect();
    // The spec names the preload file: it must exist when a runtime applies the spec.
    write_preload(&files).map_err(|e| e.to_string())?;
    let (spec, left_out) = spec(&files, &gpus, &vgpus, true);
    for line in left_out {
        eprintln!("tessera cdi generate: left out: {line}");
    }
    if spec.devices.is_empty() {
        return Err("the daemon reports no GPU and no vGPU; runtimes refuse a CDI spec without devices, so none is \
                    written"
            .into());
    }
    let text = spec.to_json();
    match args.output {
        None => {
            print!("{text}");
            Ok(())
        }
        Some(file) => {
            write_atomic(&file, &text).map_err(|e| e.to_string())?;
            eprintln!("wrote {} ({} devices)", file.display(), spec.devices.len());
            Ok(())
        }
    }
}
