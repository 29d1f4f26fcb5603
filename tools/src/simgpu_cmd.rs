//! `tessera simgpu ...`: make programs on this machine use the simulated GPU.

use clap::Subcommand;
use tessera_host::lib_dir::LibDirError;

/// Subcommands of `tessera simgpu`.
#[derive(Subcommand)]
pub enum SimgpuCommand {
    /// Print shell `export` lines that make any program use the simulated GPU:
    /// `eval "$(tessera simgpu env)"`.
    Env,
    /// Print the folder holding `libcuda.so.1` and `libnvidia-ml.so.1`.
    Libdir,
}

/// Runs one `tessera simgpu` subcommand; its only error is the simulated GPU's folder not being found.
pub fn run(command: SimgpuCommand) -> Result<(), LibDirError> {
    let folder = crate::lib_dir::simgpu_folder()?;
    match command {
        SimgpuCommand::Env => print!("{}", simgpu_host::libdir::export_lines(&folder)),
        SimgpuCommand::Libdir => println!("{}", folder.display()),
    }
    Ok(())
}
