//! `tessera simgpu ...`: make programs on this machine use the simulated GPU.

use clap::Subcommand;

/// Subcommands of `tessera simgpu`.
#[derive(Subcommand)]
pub enum SimgpuCommand {
    /// Print shell `export` lines that make any program use the simulated GPU:
    /// `eval "$(tessera simgpu env)"`.
    Env,
    /// Print the folder holding `libcuda.so.1` and `libnvidia-ml.so.1`.
    Libdir,
}

/// The folder of simulated libraries beside this executable, created if needed.
pub fn library_folder() -> Result<std::path::PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate the tessera executable: {e}"))?;
    let build = simgpu::libdir::find_build_dir(&exe).map_err(|e| e.to_string())?;
    simgpu::libdir::prepare(&build).map_err(|e| format!("cannot create {}/simgpu: {e}", build.display()))
}

/// Runs one `tessera simgpu` subcommand.
pub fn run(command: SimgpuCommand) -> Result<(), String> {
    let folder = library_folder()?;
    match command {
        SimgpuCommand::Env => print!("{}", simgpu::libdir::export_lines(&folder)),
        SimgpuCommand::Libdir => println!("{}", folder.display()),
    }
    Ok(())
}
