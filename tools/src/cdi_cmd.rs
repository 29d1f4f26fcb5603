//! `tessera cdi generate`: a CDI spec (kind `tessera.io/vgpu`) of the host's GPUs and the daemon's vGPUs,
//! read through the daemon's API (`tessera-client`), printed or written atomically to a file.

use clap::{Args, Subcommand};
use std::path::PathBuf;
use tessera_client::Client;
use tessera_deviceplugin::cdi::{VgpuRef, spec, write_atomic};
use tessera_deviceplugin::config::DEFAULT_DEV_DIR;
use tessera_deviceplugin::container_edits::{HostFiles, write_preload};
use tessera_deviceplugin::inventory::{NvmlFacts, refresh};
use tessera_host::lib_dir::LibDirError;
use tessera_host::paths::{self, PathError};

/// Why `tessera cdi generate` wrote no spec.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    /// A path of the daemon's files cannot be told (`TESSERA_SOCKET`, `TESSERA_REGION`,
    /// `TESSERA_STATE_DIR`).
    #[error(transparent)]
    Path(#[from] PathError),
    /// The shim's library folder is not found.
    #[error(transparent)]
    LibDir(#[from] LibDirError),
    /// The host's files the spec names are missing or unfit, or its preload file cannot be written.
    #[error(transparent)]
    Files(#[from] tessera_deviceplugin::container_edits::HostFilesError),
    /// The spec cannot be written.
    #[error(transparent)]
    Write(#[from] tessera_deviceplugin::cdi::WriteError),
    /// The daemon did not list the host's GPUs (what the inventory said).
    #[error("{0}; is `tessera daemon` running?")]
    Gpus(String),
    /// The daemon did not list its vGPUs.
    #[error("cannot list the daemon's vGPUs: {0}")]
    Vgpus(#[source] tessera_client::Error),
    /// The spec would have no device.
    #[error("the daemon reports no GPU and no vGPU; runtimes refuse a CDI spec without devices, so none is written")]
    NoDevices,
}

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
pub fn run(command: CdiCommand) -> Result<(), CdiError> {
    match command {
        CdiCommand::Generate(args) => generate(args),
    }
}

/// Reads the GPUs and vGPUs from the daemon and prints or writes their spec.
fn generate(args: GenerateArgs) -> Result<(), CdiError> {
    let socket = paths::socket()?;
    let files = HostFiles {
        region: paths::region()?.into(),
        socket: socket.clone(),
        shim: tessera_host::lib_dir::shim()?,
        // The file the device plugin mounts too (same contents), so both hand out one file.
        preload: paths::state_dir()?.join("device-plugin").join("ld.so.preload"),
        dev_dir: args.dev_dir,
    };
    files.check()?;
    let client = Client::new(socket);
    let (gpus, error) = refresh(&client, &NvmlFacts::open(), &[]);
    if let Some(e) = error {
        return Err(CdiError::Gpus(e));
    }
    let vgpus: Vec<VgpuRef> = client
        .list()
        .map_err(CdiError::Vgpus)?
        .into_iter()
        .map(|v| VgpuRef { name: v.spec.name, device: v.spec.device })
        .collect();
    // The spec names the preload file: it must exist when a runtime applies the spec.
    write_preload(&files)?;
    let (spec, left_out) = spec(&files, &gpus, &vgpus, true);
    for line in left_out {
        eprintln!("tessera cdi generate: left out: {line}");
    }
    if spec.devices.is_empty() {
        return Err(CdiError::NoDevices);
    }
    let text = spec.to_json();
    match args.output {
        None => {
            print!("{text}");
            Ok(())
        }
        Some(file) => {
            write_atomic(&file, &text)?;
            eprintln!("wrote {} ({} devices)", file.display(), spec.devices.len());
            Ok(())
        }
    }
}
