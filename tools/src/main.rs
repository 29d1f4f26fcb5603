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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => return run::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Load(args) => load::run(args),
        Command::Daemon(args) => daemon_cmd::run(args),
        Command::Vgpu { command } => vgpu_cmd::run(command),
        Command::Devices(args) => devices_cmd::run_devices(args),
        Command::Mdev { command } => devices_cmd::run_mdev(command),
        Command::Top(args) => top::run(args),
        Command::Info(args) => info::run(args),
        Command::K8s { command } => k8s_cmd::run(command),
        Command::Cdi { command } => cdi_cmd::run(command),
        Command::Simgpu { command } => simgpu_cmd::run(command),
        Command::Completions(args) => completions::run::<Cli>(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tessera: {message}");
            ExitCode::FAILURE
        }
    }
}
