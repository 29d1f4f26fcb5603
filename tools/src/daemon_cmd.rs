//! `tessera daemon`: runs the host scheduler in the foreground (under systemd, a terminal, or a test).
//! Its files come from `--region`, `--socket` and `--state-dir`, each also read from its variable
//! (`TESSERA_REGION`, `TESSERA_SOCKET`, `TESSERA_STATE_DIR`, which the shim and `tessera vgpu` read too);
//! the devices vGPUs may be placed on are the CUDA driver's (the simulated one's when the machine has no GPU).

use crate::driver::Driver;
use clap::Args;
use clap::builder::OsStringValueParser;
use std::ffi::OsString;
use tessera_host::driver::{DriverError, machine_driver, machine_nvml};
use tessera_host::paths::{self, PathError};
use tessera_scheduler::daemon::{self, Options};

/// Why `tessera daemon` could not start (or stopped with an error).
#[derive(Debug, thiserror::Error)]
pub enum DaemonCmdError {
    /// An option (or its variable) is empty.
    #[error("{option} ({var}) is empty; give a value or leave it out")]
    Empty {
        /// The option, e.g. `--region`.
        option: &'static str,
        /// Its variable, e.g. `TESSERA_REGION`.
        var: &'static str,
    },
    /// An option (or its variable) is not UTF-8, as the shim and `tessera vgpu` require.
    #[error("{option} ({var}) {value:?} is not valid UTF-8; give it in plain text")]
    NotUtf8 {
        /// The option, e.g. `--region`.
        option: &'static str,
        /// Its variable, e.g. `TESSERA_REGION`.
        var: &'static str,
        /// The value given.
        value: OsString,
    },
    /// A default path cannot be told (no option, and its variable or `HOME` is unusable).
    #[error(transparent)]
    Path(#[from] PathError),
    /// `--metrics` is not an address.
    #[error(transparent)]
    Metrics(#[from] daemon::MetricsError),
    /// The audit log cannot be opened.
    #[error(transparent)]
    AuditLog(#[from] daemon::AuditLogError),
    /// The driver does not load or answer.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// A device's memory size cannot be read.
    #[error("device {device}: {source}")]
    Device {
        /// The device's ordinal.
        device: i32,
        /// What the driver said.
        #[source]
        source: DriverError,
    },
    /// The daemon could not start.
    #[error(transparent)]
    Daemon(#[from] daemon::DaemonError),
}

/// The variables the daemon reads besides its options', listed by `tessera daemon --help`.
const MORE_VARIABLES: &str = "\
Other variables it reads:
  XDG_STATE_HOME, HOME      the default state directory: $XDG_STATE_HOME/tessera, else ~/.local/state/tessera
  TESSERA_REAL_LIBCUDA      the real CUDA driver, whose devices vGPUs are placed on
                            [default: libcuda.so.1 on the loader's path]
  TESSERA_REAL_LIBNVML      the real NVML, for the audit of each process's device time
                            [default: libnvidia-ml.so.1 on the loader's path]
  TESSERA_LIB_DIR           where the simulated driver is, on a machine without an NVIDIA driver
                            [default: ../lib/tessera beside the tessera executable, or beside it in a build tree]
  SIMGPU_DEVICES, SIMGPU_MEMORY, SIMGPU_STATE, ...
                            the simulated GPU's settings, without an NVIDIA driver (see `tessera simgpu env`)

Processes join the daemon's vGPUs through the same region: give them the same TESSERA_REGION (and
`tessera vgpu` the same TESSERA_SOCKET). SIGTERM, SIGINT and SIGHUP stop it cleanly.";

/// Options of `tessera daemon`; each may be given by its variable instead.
#[derive(Args)]
#[command(after_help = MORE_VARIABLES)]
pub struct DaemonArgs {
    /// Shared-memory file holding the vGPUs' settings and usage, which processes under the shim join
    /// [default: /dev/shm/tessera-$UID/tessera.region]
    #[arg(long, value_name = "FILE", env = "TESSERA_REGION", value_parser = OsStringValueParser::new())]
    region: Option<OsString>,
    /// Socket `tessera vgpu` talks to the daemon on [default: tessera.sock beside the default region]
    #[arg(long, value_name = "PATH", env = "TESSERA_SOCKET", value_parser = OsStringValueParser::new())]
    socket: Option<OsString>,
    /// Folder where the daemon saves the vGPU configuration (vgpus.json)
    /// [default: $XDG_STATE_HOME/tessera, else ~/.local/state/tessera]
    #[arg(long, value_name = "DIR", env = "TESSERA_STATE_DIR", value_parser = OsStringValueParser::new())]
    state_dir: Option<OsString>,
    /// Serve Prometheus metrics at http://ADDR/metrics (HOST:PORT, e.g. 127.0.0.1:9400); off unless given
    #[arg(long, value_name = "ADDR", env = "TESSERA_METRICS", value_parser = OsStringValueParser::new())]
    metrics: Option<OsString>,
    /// Also append the audit log (every vGPU change and refused request, by uid and pid, and tenants
    /// joining and leaving; always on stderr) to FILE, created mode 0600; a symbolic link is refused
    #[arg(long, value_name = "FILE", env = "TESSERA_AUDIT_LOG", value_parser = OsStringValueParser::new())]
    audit_log: Option<OsString>,
}

/// The total memory of each device the driver shows (`cuDeviceTotalMem`), by ordinal, the NVML that
/// goes with that driver (the simulated one on the simulated GPU), and the driver library itself (for its
/// process checkpoint calls). The driver stays loaded for the daemon's life.
fn devices() -> Result<(Vec<u64>, String, String), DaemonCmdError> {
    let driver = Driver::load()?;
    driver.init()?;
    let n = driver.device_count()?;
    let memory: Result<Vec<u64>, DaemonCmdError> = (0..n)
        .map(|device| driver.total_memory(device).map_err(|source| DaemonCmdError::Device { device, source }))
        .collect();
    let nvml = driver.origin.nvml_library();
    let library = driver.origin.driver_library();
    std::mem::forget(driver);
    Ok((memory?, nvml, library))
}

/// A path (or address) given as an option or variable (taken as given by clap, so that the error is this
/// one): an empty one, or one that is not UTF-8 (as the shim and `tessera vgpu` require), is an error
/// naming both.
fn given(value: OsString, option: &'static str, var: &'static str) -> Result<String, DaemonCmdError> {
    match value.into_string() {
        Ok(v) if v.trim().is_empty() => Err(DaemonCmdError::Empty { option, var }),
        Ok(v) => Ok(v),
        Err(value) => Err(DaemonCmdError::NotUtf8 { option, var, value }),
    }
}

/// The daemon's files: each option (or its variable) when given, else the default the shim and
/// `tessera vgpu` use too.
fn options(args: DaemonArgs, devices: Vec<u64>) -> Result<Options, DaemonCmdError> {
    let region = match args.region {
        Some(r) => given(r, "--region", "TESSERA_REGION")?,
        None => paths::region()?,
    };
    let socket = match args.socket {
        Some(s) => given(s, "--socket", "TESSERA_SOCKET")?.into(),
        None => paths::socket()?,
    };
    let state_dir = match args.state_dir {
        Some(d) => given(d, "--state-dir", "TESSERA_STATE_DIR")?.into(),
        None => paths::state_dir()?,
    };
    let metrics = match args.metrics {
        Some(m) => Some(daemon::parse_metrics_address(&given(m, "--metrics", "TESSERA_METRICS")?)?),
        None => None,
    };
    let (nvml, driver) = (machine_nvml(), machine_driver());
    Ok(Options { region, socket, state_dir, devices, metrics, nvml, driver })
}

/// Runs the daemon; returns only when it cannot start (a signal ends it with status 0).
pub fn run(mut args: DaemonArgs) -> Result<(), DaemonCmdError> {
    let audit_log = args.audit_log.take().map(|f| given(f, "--audit-log", "TESSERA_AUDIT_LOG")).transpose()?;
    // The options are checked before the driver is loaded: a bad one is reported as such.
    let options = options(args, Vec::new())?;
    daemon::init_audit_log(audit_log.as_deref().map(std::path::Path::new))?;
    // Before the driver's cuInit, which may start threads that must not take the stop signals.
    daemon::block_stop_signals();
    let (devices, nvml, driver) = devices()?;
    Ok(daemon::run(Options { devices, nvml, driver, ..options })?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        daemon: DaemonArgs,
    }

    #[test]
    fn options_given_on_the_command_line_are_used() {
        let cli = Cli::try_parse_from(["d", "--region", "/r/x.region", "--socket", "/r/x.sock", "--state-dir", "/s"])
            .unwrap();
        let o = options(cli.daemon, vec![1 << 30]).unwrap();
        assert_eq!(o.region, "/r/x.region");
        assert_eq!(o.socket, std::path::PathBuf::from("/r/x.sock"));
        assert_eq!(o.state_dir, std::path::PathBuf::from("/s"));
        assert_eq!(o.devices, vec![1 << 30]);
        assert_eq!(o.metrics, None, "no metrics unless asked for");
        let cli = Cli::try_parse_from(["d", "--metrics", "127.0.0.1:9400"]).unwrap();
        assert_eq!(options(cli.daemon, Vec::new()).unwrap().metrics, Some("127.0.0.1:9400".parse().unwrap()));
        let cli = Cli::try_parse_from(["d", "--metrics", "127.0.0.1"]).unwrap();
        let e = options(cli.daemon, Vec::new()).unwrap_err().to_string();
        assert!(e.contains("--metrics \"127.0.0.1\" has no port"), "{e}");
    }

    #[test]
    fn an_empty_option_is_an_error_naming_it() {
        use std::os::unix::ffi::OsStrExt;
        let not_utf8 = std::ffi::OsStr::from_bytes(b"/tmp/\xff");
        for (option, var) in [
            ("--region", "TESSERA_REGION"),
            ("--socket", "TESSERA_SOCKET"),
            ("--state-dir", "TESSERA_STATE_DIR"),
            ("--metrics", "TESSERA_METRICS"),
        ] {
            for (value, problem) in [
                (std::ffi::OsStr::new(""), "is empty"),
                (std::ffi::OsStr::new(" "), "is empty"),
                (not_utf8, "not valid UTF-8"),
            ] {
                let cli =
                    Cli::try_parse_from([std::ffi::OsStr::new("d"), std::ffi::OsStr::new(option), value]).unwrap();
                let e = options(cli.daemon, Vec::new()).unwrap_err().to_string();
                assert!(e.contains(option) && e.contains(var) && e.contains(problem), "{e}");
            }
        }
    }
}
