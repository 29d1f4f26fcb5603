//! `tessera`: the command-line front end of Tessera.

mod driver;
mod info;
mod run;
mod simgpu_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Tessera: share one GPU safely between unmodified CUDA programs.
#[derive(Parser)]
#[command(name = "tessera", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the CUDA driver in use (real, or simulated when there is no GPU) and its devices.
    Info,
    /// Run a command under the shim: `tessera run --memory 8GiB -- python train.py`.
    Run(run::RunArgs),
    /// The simulated GPU (simgpu) used when no real GPU is present.
    Simgpu {
        #[command(subcommand)]
        command: simgpu_cmd::SimgpuCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => return run::run(args),
        Command::Info => info::run(),
        Command::Simgpu { command } => simgpu_cmd::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tessera: {message}");
            ExitCode::FAILURE
        }
    }
}
