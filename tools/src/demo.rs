//! `tessera demo`: Tessera at work in under a minute. On a private machine (see [`machine`]) — the
//! simulated GPU when no NVIDIA driver is present, the real one otherwise — it starts a daemon, creates
//! three vGPUs with different shares, quotas and priorities, runs `tessera load` in each under the shim,
//! shows a live table of what each gets, and ends with a summary per vGPU: what it was entitled to given
//! its demand (see [`entitlement`]) against what it achieved, met or missed; memory quota against peak
//! use, launches, and time spent waiting for tokens.

mod entitlement;
mod figures;
mod machine;
mod table;

use crate::grid::{self, Align};
use crate::signals;
use clap::Args;
use figures::{Reader, Snapshot};
use machine::Machine;
use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};
use tessera_client::{Priority, VgpuSpec};
use tessera_ffi::units::format_size;
use tessera_host::driver::DriverError;
use tessera_host::lib_dir::LibDirError;
use tessera_region::file::RegionError;

/// Why the demo failed or stopped short: setting up its private machine (see [`machine`]), a child of it
/// exiting early, reading the vGPUs' figures (see [`figures`]), or a signal.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The stop signals' handler could not be installed.
    #[error(transparent)]
    Signals(#[from] signals::SignalError),
    /// The real driver does not load or answer (for the GPU's name).
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The simulated GPU's library folder is not found.
    #[error(transparent)]
    LibDir(#[from] LibDirError),
    /// A `SIMGPU_*` variable is malformed (its type implements no `std::error::Error`, so it is no source).
    #[error("{0}")]
    SimgpuConfig(simgpu_host::ConfigError),
    /// The simulated GPU's state file cannot be used (its type implements no `std::error::Error`).
    #[error("{0}")]
    SimgpuState(simgpu_host::state::StateError),
    /// The path of the running `tessera` is unknown, so no child can run it.
    #[error("cannot locate the tessera executable: {0}")]
    Executable(#[source] std::io::Error),
    /// The private directory, or a child's log in it, cannot be created.
    #[error("cannot create {}: {source}", .path.display())]
    Create {
        /// The directory or log.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// A child's log cannot be given to it as both stdout and stderr.
    #[error("{}: {source}", .path.display())]
    Log {
        /// The log.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// A child cannot be started.
    #[error("cannot start {what}: {source}")]
    Start {
        /// The child, for the message (`the load of vGPU training`).
        what: String,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The daemon exited before it answered.
    #[error("the daemon exited early:\n{log}")]
    DaemonExited {
        /// The end of its log.
        log: String,
    },
    /// A child (the daemon, a load) exited while the demo ran.
    #[error("{what} exited ({}) early:\n{log}", machine::describe(*.status))]
    Exited {
        /// The child, for the message (`the daemon`, `the load of vGPU training`).
        what: String,
        /// How it exited.
        status: ExitStatus,
        /// The end of its log.
        log: String,
    },
    /// The daemon did not start answering, or refused a request of the demo's.
    #[error(transparent)]
    Daemon(#[from] tessera_client::Error),
    /// The daemon refused one of the demo's vGPUs.
    #[error("cannot create vGPU {name}: {source}")]
    CreateVgpu {
        /// The vGPU.
        name: &'static str,
        /// The daemon's refusal.
        #[source]
        source: tessera_client::Error,
    },
    /// The region cannot be read.
    #[error(transparent)]
    Region(#[from] RegionError),
    /// A vGPU the daemon created is not in the region.
    #[error("vGPU {0} is not in the region")]
    NotInRegion(String),
    /// Some loads launched no kernel within [`LOAD_START`].
    #[error("the loads of {} launched nothing within {} s", .idle.join(", "), LOAD_START.as_secs())]
    NoLaunches {
        /// Their vGPUs.
        idle: Vec<&'static str>,
    },
    /// A signal came while the loads were starting.
    #[error("interrupted")]
    InterruptedStarting,
    /// A signal cut the run short (the summary is printed first).
    #[error("interrupted; everything it started is stopped")]
    Interrupted,
}

/// Arguments of `tessera demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// How long the loads run, in seconds (setup and teardown take a few more).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3600))]
    seconds: u64,
}

/// One vGPU of the demo and the load it runs.
pub struct Tenant {
    /// Its name.
    pub name: &'static str,
    /// Compute share in percent.
    pub share: u32,
    /// Memory quota in bytes.
    pub quota: u64,
    /// `high` priority (else `normal`).
    pub high: bool,
    /// Capped at its share.
    pub cap: bool,
    /// Arguments of its `tessera load`.
    pub load: &'static [&'static str],
    /// What its load does, for the introduction.
    pub work: &'static str,
}

const GIB: u64 = 1 << 30;

/// The demo's vGPUs, all on device 0.
const TENANTS: [Tenant; 3] = [
    Tenant {
        name: "inference",
        share: 50,
        quota: 8 * GIB,
        high: true,
        cap: false,
        load: &["--memory", "6GiB", "--burst", "200ms", "--pause", "300ms"],
        work: "bursts of requests: 200 ms of work, then 300 ms idle",
    },
    Tenant {
        name: "training",
        share: 30,
        quota: 16 * GIB,
        high: false,
        cap: false,
        load: &["--memory", "10GiB", "--spike", "4GiB"],
        work: "always busy; holds 4 GiB more every other second",
    },
    Tenant {
        name: "notebook",
        share: 20,
        quota: 4 * GIB,
        high: false,
        cap: true,
        load: &["--memory", "2560MiB"],
        work: "always busy",
    },
];
/// Device the vGPUs are on.
const DEVICE: u32 = 0;
/// Device time of each kernel of the loads.
const KERNEL: &str = "1ms";
/// How long the loads may take to start launching.
const LOAD_START: Duration = Duration::from_secs(15);
/// Refresh interval of the live table.
const TICK: Duration = Duration::from_millis(250);
/// Ticks in the "last second" of the live table.
const TICKS_PER_SECOND: u32 = 4;

/// Runs the demo.
pub fn run(args: DemoArgs) -> Result<(), DemoError> {
    signals::install()?;
    let mut machine = Machine::new()?;
    show(&format!("{}\n", introduction(&machine, args.seconds)?));
    let result = demonstrate(&mut machine, args.seconds);
    machine.stop(result.is_ok());
    result
}

/// What is about to happen.
fn introduction(machine: &Machine, seconds: u64) -> Result<String, DemoError> {
    let gpu = match &machine.simgpu {
        Some(config) => format!("a simulated {} (simgpu: no NVIDIA driver found)", config.devices[0].profile.name),
        None => {
            let name = crate::driver::Driver::load().and_then(|driver| {
                driver.init()?;
                driver.name(DEVICE as i32)
            });
            format!("GPU {DEVICE}, {}", name?)
        }
    };
    let mut out = format!("Tessera demo: three vGPUs share {gpu} for {seconds} s.\n");
    let rows: Vec<Vec<String>> = TENANTS
        .iter()
        .map(|t| vec![t.name.into(), table::configured(t), format_size(t.quota), t.work.into()])
        .collect();
    let align = [Align::Left, Align::Left, Align::Right, Align::Left];
    out += &grid::render(&["VGPU", "SHARE", "QUOTA", "LOAD"], &rows, &align);
    out += &format!(
        "Each load is `tessera run --vgpu NAME -- tessera load`, launching {KERNEL} spin kernels;\n\
         a private daemon in {} schedules them.\n",
        machine.dir.display()
    );
    Ok(out)
}

/// Starts the daemon, creates the vGPUs, runs the loads for `seconds` with a live view, and prints the
/// summary (also when interrupted, then returning an error).
fn demonstrate(machine: &mut Machine, seconds: u64) -> Result<(), DemoError> {
    machine.start_daemon()?;
    for t in &TENANTS {
        create(machine, t)?;
    }
    let backstop = (seconds + 30).to_string();
    let mut pids = Vec::new();
    for t in &TENANTS {
        let mut args = vec!["--seconds", &backstop, "--kernel", KERNEL];
        args.extend(t.load);
        pids.push(vec![machine.start_load(t.name, &args)?]);
    }
    let names: Vec<&str> = TENANTS.iter().map(|t| t.name).collect();
    let mut reader = Reader::new(&machine.region(), &names, DEVICE, machine.simgpu.as_ref().map(|c| (c, pids)))?;
    let start = wait_for_launches(machine, &mut reader)?;
    let (end, interrupted) = watch(machine, &mut reader, &start, seconds)?;
    show(&format!("\n{}", table::summary(&TENANTS, &start, &end)));
    if interrupted { Err(DemoError::Interrupted) } else { Ok(()) }
}

/// Creates vGPU `t` through the daemon.
fn create(machine: &Machine, t: &Tenant) -> Result<(), DemoError> {
    let mut spec = VgpuSpec::new(t.name, DEVICE, t.quota, t.share);
    spec.cap = t.cap;
    spec.priority = if t.high { Priority::High } else { Priority::Normal };
    machine.create(spec).map(drop).map_err(|source| DemoError::CreateVgpu { name: t.name, source })
}

/// Waits until every vGPU has launched a kernel; the snapshot then starts the run.
fn wait_for_launches(machine: &mut Machine, reader: &mut Reader) -> Result<Snapshot, DemoError> {
    let deadline = Instant::now() + LOAD_START;
    loop {
        reader.sample();
        let now = reader.read();
        if now.vgpus.iter().all(|v| v.launches > 0) {
            return Ok(now);
        }
        machine.check()?;
        if Instant::now() >= deadline {
            let idle = TENANTS.iter().zip(&now.vgpus).filter(|(_, v)| v.launches == 0).map(|(t, _)| t.name).collect();
            return Err(DemoError::NoLaunches { idle });
        }
        if signals::sleep(Duration::from_millis(20)) {
            return Err(DemoError::InterruptedStarting);
        }
    }
}

/// Shows the live view for `seconds` from `start`: a table redrawn every [`TICK`] in a terminal, else
/// the same table printed once a second; meanwhile samples the vGPUs' demand for their entitlements. Returns the last snapshot and whether a signal cut the run short.
fn watch(
    machine: &mut Machine,
    reader: &mut Reader,
    start: &Snapshot,
    seconds: u64,
) -> Result<(Snapshot, bool), DemoError> {
    let mut view = LiveView::new();
    let ticks = seconds as u32 * TICKS_PER_SECOND;
    let mut recent: VecDeque<Snapshot> = VecDeque::from([start.clone()]);
    for tick in 1..=ticks {
        if sample_until(reader, start.at + TICK * tick) {
            return Ok((reader.read(), true));
        }
        machine.check()?;
        let now = reader.read();
        let second_ago = recent.front().expect("never empty");
        if view.terminal {
            view.redraw(&table::live(&TENANTS, start, second_ago, &now, seconds));
        } else if tick.is_multiple_of(TICKS_PER_SECOND) {
            // Not a terminal: the same table once a second, one after the other.
            show(&format!("{}\n", table::live(&TENANTS, start, second_ago, &now, seconds)));
        }
        recent.push_back(now);
        if recent.len() > TICKS_PER_SECOND as usize {
            recent.pop_front();
        }
    }
    Ok((recent.pop_back().expect("never empty"), false))
}

/// Samples the vGPUs' demand every [`entitlement::SAMPLE`] until `due`; true when a signal cut it short.
fn sample_until(reader: &mut Reader, due: Instant) -> bool {
    loop {
        reader.sample();
        let left = due.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        if signals::sleep(left.min(entitlement::SAMPLE)) {
            return true;
        }
    }
}

/// The live table in a terminal: redrawn in place (the cursor moved up over the previous drawing, which
/// is cleared), with the cursor hidden meanwhile.
struct LiveView {
    terminal: bool,
    lines: usize,
}

impl LiveView {
    fn new() -> LiveView {
        LiveView { terminal: std::io::stdout().is_terminal(), lines: 0 }
    }

    fn redraw(&mut self, text: &str) {
        let up = match self.lines {
            0 => "\x1b[?25l".to_string(),
            n => format!("\x1b[{n}A\x1b[J"),
        };
        show(&format!("{up}{text}"));
        self.lines = text.lines().count();
    }
}

impl Drop for LiveView {
    fn drop(&mut self) {
        if self.lines > 0 {
            show("\x1b[?25h");
        }
    }
}

/// Writes `text` to stdout at once. A closed stdout (`tessera demo | head`) is no reason to stop: the
/// demo runs to its end and cleans up.
fn show(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}
