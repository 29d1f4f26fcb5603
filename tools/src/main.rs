//! `tessera`: the command-line front end of Tessera.

mod account;
mod cdi_cmd;
mod completions;
mod daemon_cmd;
mod demo;
mod devices_cmd;
mod grid;
mod info;
mod k8s_cmd;
mod load;
mod run;
mod signals;
mod simgpu_cmd;
mod top;
mod vgpu_cmd;
mod vgpu_snapshot;

use tessera_host::{driver, lib_dir};

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Tessera: share one NVIDIA GPU between unmodified CUDA programs.
///
/// Tessera gives each program a memory quota and a share of the GPU's compute time, enforced in userspace
/// by a preloaded library (libtessera.so, the shim) and managed by a daemon through vGPUs. Without an
/// NVIDIA driver it runs on simgpu, a simulated GPU. Start with `tessera demo`; docs: README.md, docs/.
#[derive(Parser)]
#[command(name = "tessera", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Each variant's first doc line is its one-line entry in `tessera --help`; the paragraph after the blank
// line shows only in `tessera COMMAND --help`.
#[derive(Subcommand)]
enum Command {
    /// Tessera at work in under a minute: three vGPUs, a load in each, a live table and a summary.
    ///
    /// A private daemon, three vGPUs with different shares, quotas and priorities, a load in each, a live
    /// table and a summary per vGPU.
    Demo(demo::DemoArgs),
    /// Run the host scheduler daemon in the foreground.
    ///
    /// It owns the shared region, keeps the vGPU configuration across restarts and refills every vGPU's
    /// compute share.
    Daemon(daemon_cmd::DaemonArgs),
    /// Manage vGPUs through the daemon: create, list, show, set, suspend, resume, snapshot, rm, ...
    ///
    /// For example `tessera vgpu create team-a --device 0 --memory 8GiB --share 30`.
    Vgpu {
        #[command(subcommand)]
        command: vgpu_cmd::VgpuCommand,
    },
    /// The host's GPUs for virtual machines, and moving them to and from vfio-pci.
    ///
    /// PCI ids and names, driver, NUMA node, IOMMU group, SR-IOV, mdev types and the mode each is in;
    /// `bind-vfio`/`unbind-vfio ADDR` move a GPU's IOMMU group, `reconcile` cleans up after a crash.
    Devices(devices_cmd::DevicesArgs),
    /// Mediated devices (mdev vGPUs for virtual machines): types, list, create, rm.
    ///
    /// `types`, `list`, `create --parent ADDR --type TYPE`, `rm UUID`.
    Mdev {
        #[command(subcommand)]
        command: devices_cmd::MdevCommand,
    },
    /// A live view of every device and vGPU: shares, launches, waiting, memory, processes.
    ///
    /// Shares configured and achieved, launches, waiting, memory, processes (`--once`: one frame as text,
    /// `--json`: one snapshot).
    Top(top::TopArgs),
    /// Show the CUDA driver in use (real, or simulated when there is no GPU) and its devices.
    ///
    /// `--json` prints one document for the host (docs/schema/device-info.schema.json).
    Info(info::InfoArgs),
    /// Run a command under the shim, with a memory quota or in a vGPU.
    ///
    /// For example `tessera run --memory 8GiB -- python train.py`.
    Run(run::RunArgs),
    /// Kubernetes: the device plugin that hands out vGPUs to containers.
    ///
    /// `tessera k8s device-plugin` registers with kubelet and hands out vGPUs to containers.
    K8s {
        #[command(subcommand)]
        command: k8s_cmd::K8sCommand,
    },
    /// CDI (Container Device Interface): write a spec of the host's GPUs and vGPUs.
    ///
    /// `tessera cdi generate --output /etc/cdi/tessera.json` writes a spec of the host's GPUs and vGPUs for
    /// container runtimes (`--device tessera.io/vgpu=NAME`).
    Cdi {
        #[command(subcommand)]
        command: cdi_cmd::CdiCommand,
    },
    /// The simulated GPU (simgpu) used when no real GPU is present: its environment and library folder.
    Simgpu {
        #[command(subcommand)]
        command: simgpu_cmd::SimgpuCommand,
    },
    /// Print a shell completion script (bash, zsh, fish, ...).
    ///
    /// `tessera completions bash > ~/.local/share/bash-completion/completions/tessera` (`tools/install.sh`
    /// installs them for bash, zsh and fish).
    Completions(completions::CompletionsArgs),
    /// The demo's workload: spin kernels under the shim (`tessera run --vgpu NAME -- tessera load`).
    #[command(hide = true)]
    Load(load::LoadArgs),
}

/// Why a `tessera` command failed: the command's own error, printed as it words it; the exit status and
/// the message's prefix are decided here, for every command ([`CliError::exit_code`], [`CliError::prefix`]).
#[derive(Debug, thiserror::Error)]
enum CliError {
    /// `tessera demo`.
    #[error(transparent)]
    Demo(#[from] demo::DemoError),
    /// `tessera load`.
    #[error(transparent)]
    Load(#[from] load::LoadError),
    /// `tessera daemon`.
    #[error(transparent)]
    Daemon(#[from] daemon_cmd::DaemonCmdError),
    /// `tessera vgpu ...`.
    #[error(transparent)]
    Vgpu(#[from] vgpu_cmd::VgpuCmdError),
    /// `tessera devices ...` and `tessera mdev ...`.
    #[error(transparent)]
    Devices(#[from] devices_cmd::DevicesError),
    /// `tessera top`.
    #[error(transparent)]
    Top(#[from] top::TopError),
    /// `tessera info`.
    #[error(transparent)]
    Info(#[from] info::InfoError),
    /// `tessera run`.
    #[error(transparent)]
    Run(#[from] run::RunError),
    /// `tessera k8s ...`.
    #[error(transparent)]
    K8s(#[from] k8s_cmd::K8sError),
    /// `tessera cdi ...`.
    #[error(transparent)]
    Cdi(#[from] cdi_cmd::CdiError),
    /// `tessera simgpu ...`: the simulated GPU's folder is not found.
    #[error(transparent)]
    Simgpu(#[from] lib_dir::LibDirError),
}

impl CliError {
    /// The exit status: `tessera run`'s own (127 or 126 when the command cannot be run, as a shell says),
    /// else 1. (clap exits with 2 on a usage error, before any command runs.)
    fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Run(e) => ExitCode::from(e.exit_code()),
            _ => ExitCode::FAILURE,
        }
    }

    /// What the message on stderr starts with: `tessera run` for `tessera run` (whose own output may be
    /// the command's, so it says which program speaks), else `tessera`.
    fn prefix(&self) -> &'static str {
        match self {
            CliError::Run(_) => "tessera run",
            _ => "tessera",
        }
    }
}

/// Runs the command given.
fn dispatch(command: Command) -> Result<(), CliError> {
    match command {
        Command::Run(args) => match run::run(args)? {},
        Command::Demo(args) => demo::run(args)?,
        Command::Load(args) => load::run(args)?,
        Command::Daemon(args) => daemon_cmd::run(args)?,
        Command::Vgpu { command } => vgpu_cmd::run(command)?,
        Command::Devices(args) => devices_cmd::run_devices(args)?,
        Command::Mdev { command } => devices_cmd::run_mdev(command)?,
        Command::Top(args) => top::run(args)?,
        Command::Info(args) => info::run(args)?,
        Command::K8s { command } => k8s_cmd::run(command)?,
        Command::Cdi { command } => cdi_cmd::run(command)?,
        Command::Simgpu { command } => simgpu_cmd::run(command)?,
        Command::Completions(args) => completions::run::<Cli>(args),
    }
    Ok(())
}

fn main() -> ExitCode {
    match dispatch(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: {e}", e.prefix());
            e.exit_code()
        }
    }
}
