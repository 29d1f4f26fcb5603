//! `tessera run`: runs a command under the shim, so a user never types a library path. It preloads the
//! installed `libtessera.so` (found as [`crate::lib_dir`] says) (ahead of anything already in `LD_PRELOAD`), passes the quota and vGPU as the
//! shim's variables, adds the simulated GPU's environment when the machine has no NVIDIA driver, sets
//! `NVIDIA_TF32_OVERRIDE=0` when the vGPU has tensor cores off (before any CUDA library of the command can
//! start), and `exec`s the command: its exit status is `tessera run`'s.

use crate::lib_dir::SHIM;
use clap::Args;
use std::convert::Infallible;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use tessera_ffi::cublas::TF32_OVERRIDE;
use tessera_ffi::units::{VGPU_NAME_FORM, parse_memory_limit, valid_vgpu_name};
use tessera_host::lib_dir::LibDirError;
use tessera_host::paths;
use tessera_region::file as region_file;
use tessera_region::flags::TENSOR_CORES_OFF;

/// Arguments of `tessera run`.
#[derive(Args)]
pub struct RunArgs {
    /// Memory quota the command sees as its GPU's size: one size for every device (8GiB, 512MiB, 1.5GB,
    /// bytes) or per device (0=8GiB,1=4GiB). Sets TESSERA_MEMORY_LIMIT.
    #[arg(long, value_name = "SIZE", value_parser = memory_value)]
    memory: Option<String>,
    /// vGPU whose quota and compute share the command joins. Sets TESSERA_VGPU.
    #[arg(long, value_name = "NAME", value_parser = vgpu_value)]
    vgpu: Option<String>,
    /// The command to run, with its arguments (after `--` when they start with `-`).
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// Why `tessera run` did not run the command: a value refused (a usage error, from clap), the shim or the
/// environment unfit, or the command itself not started. [`RunError::exit_code`] says the status.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `--memory` is not a quota.
    #[error(transparent)]
    Memory(tessera_ffi::units::UnitError),
    /// A vGPU name argument is not one a vGPU may have.
    #[error("{0:?} is not a vGPU name; {VGPU_NAME_FORM}")]
    NotAVgpuName(String),
    /// The shim's library folder is not found, or (on the simulated GPU) the simulated driver's.
    #[error(transparent)]
    LibDir(#[from] LibDirError),
    /// The shim's path is not UTF-8, which `LD_PRELOAD` needs.
    #[error("{} is not valid UTF-8", .0.display())]
    ShimNotUtf8(PathBuf),
    /// The shim's path has a space or a colon, where `LD_PRELOAD` splits.
    #[error("{0} cannot be preloaded: LD_PRELOAD splits paths at spaces and colons")]
    ShimNotPreloadable(String),
    /// The inherited `TESSERA_VGPU` is not UTF-8.
    #[error("TESSERA_VGPU={0:?} is not valid UTF-8; give a vGPU name or unset it")]
    VgpuVarNotUtf8(OsString),
    /// The command could not be executed.
    #[error("cannot run {}: {source}", .program.to_string_lossy())]
    Exec {
        /// The command, as given.
        program: OsString,
        /// Why `exec` failed.
        #[source]
        source: std::io::Error,
    },
}

impl RunError {
    /// The exit status: as a shell reports a command it cannot run, 127 when it does not exist, 126 when it
    /// cannot be executed; 1 for everything before.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Exec { source, .. } if source.kind() == std::io::ErrorKind::NotFound => 127,
            RunError::Exec { .. } => 126,
            _ => 1,
        }
    }
}

/// `--memory`, checked as the shim checks `TESSERA_MEMORY_LIMIT`.
fn memory_value(text: &str) -> Result<String, RunError> {
    parse_memory_limit(text).map(|_| text.trim().to_string()).map_err(RunError::Memory)
}

/// `--vgpu` (and every vGPU name argument), checked as the shim checks `TESSERA_VGPU`.
pub fn vgpu_value(text: &str) -> Result<String, RunError> {
    if valid_vgpu_name(text) { Ok(text.to_string()) } else { Err(RunError::NotAVgpuName(text.to_string())) }
}

/// The shim of this `tessera` (see [`crate::lib_dir`]), checked to be preloadable.
fn shim_library() -> Result<PathBuf, RunError> {
    let path = crate::lib_dir::shim()?;
    let text = path.to_str().ok_or_else(|| RunError::ShimNotUtf8(path.clone()))?;
    if text.contains([' ', ':']) {
        return Err(RunError::ShimNotPreloadable(text.to_string()));
    }
    Ok(path)
}

/// `LD_PRELOAD` with `shim` first, followed by the entries of `old` (without an earlier copy of the shim).
fn preload(shim: &Path, old: Option<&str>) -> String {
    let shim = shim.to_string_lossy();
    let rest = old
        .unwrap_or("")
        .split([' ', ':'])
        .filter(|e| !e.is_empty() && *e != shim && !e.ends_with(&format!("/{SHIM}")));
    std::iter::once(shim.as_ref()).chain(rest).collect::<Vec<_>>().join(":")
}

/// True when vGPU `name` has tensor cores off, as the region the command will join (`TESSERA_REGION`) says
/// now: the daemon keeps its vGPUs' settings there. A region that cannot be read, or a vGPU it lacks, says
/// nothing; the shim reports those at `cuInit`.
fn tensor_cores_off(name: &str) -> bool {
    let flags = paths::region().ok().and_then(|region| region_file::vgpu_flags(&region, name).ok().flatten());
    flags.is_some_and(|f| f & TENSOR_CORES_OFF != 0)
}

/// The variables to set for the command.
fn environment(args: &RunArgs, shim: &Path) -> Result<Vec<(String, String)>, RunError> {
    let mut env = vec![("LD_PRELOAD".to_string(), preload(shim, std::env::var("LD_PRELOAD").ok().as_deref()))];
    if let Some(memory) = &args.memory {
        env.push(("TESSERA_MEMORY_LIMIT".into(), memory.clone()));
    }
    if let Some(vgpu) = &args.vgpu {
        env.push(("TESSERA_VGPU".into(), vgpu.clone()));
    }
    let inherited = std::env::var_os("TESSERA_VGPU").map(|v| v.into_string().map_err(RunError::VgpuVarNotUtf8));
    let vgpu = match (&args.vgpu, inherited) {
        (Some(v), _) => Some(v.clone()),
        (None, inherited) => inherited.transpose()?,
    };
    if let Some(vgpu) = vgpu.filter(|v| tensor_cores_off(v)) {
        let (var, value) = TF32_OVERRIDE;
        if let Some(old) = std::env::var_os(var).filter(|old| old != value) {
            eprintln!("tessera run: {var}={old:?} replaced by {value}: vGPU {vgpu:?} has tensor cores off");
        }
        env.push((var.into(), value.into()));
    }
    if !crate::driver::real_driver_present() {
        let folder = crate::lib_dir::simgpu_folder()?;
        let old = std::env::var("LD_LIBRARY_PATH").ok();
        for (key, value) in simgpu_host::libdir::environment(&folder, old.as_deref()) {
            let already = std::env::var(&key).ok();
            match key.as_str() {
                // The folder first, unless it already is.
                "LD_LIBRARY_PATH" if already.as_deref().is_some_and(|p| p.split(':').next() == folder.to_str()) => {}
                "LD_LIBRARY_PATH" => env.push((key, value)),
                // SIMGPU_ settings the user made are kept, as `tessera simgpu env` keeps them.
                _ if already.is_some() => {}
                _ => env.push((key, value)),
            }
        }
    }
    Ok(env)
}

/// Runs `tessera run`: `exec`s the command, so it only returns when the command cannot be started (or the
/// shim or the environment is unfit).
pub fn run(args: RunArgs) -> Result<Infallible, RunError> {
    let env = environment(&args, &shim_library()?)?;
    let (program, rest) = args.command.split_first().expect("clap requires a command");
    let source = std::process::Command::new(program).args(rest).envs(env).exec();
    Err(RunError::Exec { program: program.clone(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_goes_first_once() {
        let shim = Path::new("/opt/tessera/lib/libtessera.so");
        assert_eq!(preload(shim, None), "/opt/tessera/lib/libtessera.so");
        assert_eq!(preload(shim, Some("")), "/opt/tessera/lib/libtessera.so");
        assert_eq!(
            preload(shim, Some("/a/liba.so /b/libb.so")),
            "/opt/tessera/lib/libtessera.so:/a/liba.so:/b/libb.so"
        );
        assert_eq!(
            preload(shim, Some("/a/liba.so:/old/libtessera.so:/opt/tessera/lib/libtessera.so")),
            "/opt/tessera/lib/libtessera.so:/a/liba.so"
        );
    }

    #[test]
    fn values_are_checked_like_the_shims_variables() {
        assert_eq!(memory_value("1GiB").ok(), Some("1GiB".into()));
        assert!(memory_value("0=1GiB,1=2GiB").is_ok());
        assert!(memory_value("lots").unwrap_err().to_string().contains("8GiB"));
        for bad in ["0", "0=0", "0B", "1=0KiB", "18446744073709551615", "0=18446744073709551615", "+1GiB"] {
            assert!(memory_value(bad).is_err(), "{bad:?}");
        }
        assert!(vgpu_value("team-a").is_ok());
        assert!(vgpu_value("a/b").unwrap_err().to_string().contains("not a vGPU name"));
    }

    #[test]
    fn a_command_that_cannot_run_exits_as_a_shell_says() {
        let exec = |kind: std::io::ErrorKind| RunError::Exec { program: "prog".into(), source: kind.into() };
        assert_eq!(exec(std::io::ErrorKind::NotFound).exit_code(), 127);
        assert_eq!(exec(std::io::ErrorKind::PermissionDenied).exit_code(), 126);
        assert_eq!(RunError::ShimNotPreloadable("/a b/libtessera.so".into()).exit_code(), 1);
        let e = std::process::Command::new("/nonexistent/prog").exec();
        let text = RunError::Exec { program: "/nonexistent/prog".into(), source: e }.to_string();
        assert!(text.starts_with("cannot run /nonexistent/prog: No such file or directory"), "{text}");
    }
}

#[cfg(test)]
mod property_tests {
    use super::*;
    use clap::Parser;
    use proptest::prelude::*;
    use tessera_ffi::units::{MAX_QUOTA, PerDevice};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![any::<String>(), "[ +\\-0-9.=,%]{0,20}(B|KiB|GiB|TiB|k|x)?", "[a-z0-9._/-]{0,70}"]
    }

    proptest! {
        #[test]
        fn arbitrary_arguments_never_panic_and_an_accepted_quota_is_a_limit(
            memory in text(), vgpu in text(), extra in proptest::collection::vec(any::<String>(), 0..4)
        ) {
            let args = ["tessera-run", "--memory", &memory, "--vgpu", &vgpu, "--", "prog"];
            if let Ok(cli) = Cli::try_parse_from(args) {
                let limit = parse_memory_limit(cli.run.memory.as_deref().unwrap()).unwrap();
                let values = match limit {
                    PerDevice::All(n) => vec![n],
                    PerDevice::Each(list) => list.into_iter().map(|(_, n)| n).collect(),
                };
                prop_assert!(values.iter().all(|n| (1..=MAX_QUOTA).contains(n)), "{memory:?}");
                prop_assert!(valid_vgpu_name(cli.run.vgpu.as_deref().unwrap()));
            }
            let _ = Cli::try_parse_from(std::iter::once("tessera-run".to_string()).chain(extra));
        }
    }
}
