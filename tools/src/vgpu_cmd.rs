//! `tessera vgpu ...`: creating, listing, changing, suspending, defragmenting and removing vGPUs through
//! the daemon's socket (`TESSERA_SOCKET`). Values are checked here first (a malformed one is a usage error, status 2);
//! the daemon checks the rest (shares of a device summing to at most 100, hard quotas fitting in their
//! device's memory together, existing devices and names, a quota not below what is in use) and a refused
//! request changes nothing (status 1).

use clap::{Args, Subcommand, ValueEnum};
use tessera_client::{Achieved, Change, Client, Mode, PagerReport, Priority, Request, Stats, VgpuSpec, VgpuStatus};
use tessera_ffi::units::{format_size, parse_duration_ns, parse_quota, parse_share};
use tessera_host::paths::{self, PathError};
use tessera_scheduler::config::{MAX_WINDOW_NS, MIN_WINDOW_NS};

/// Why a `tessera vgpu` subcommand failed: a value refused before the daemon sees it (a usage error, from
/// clap), or the request itself.
#[derive(Debug, thiserror::Error)]
pub enum VgpuCmdError {
    /// A memory quota, share or duration that does not parse.
    #[error(transparent)]
    Value(tessera_ffi::units::UnitError),
    /// A window that parses but is outside 1us-1s.
    #[error("a window of {0} is out of range; use 1us to 1s")]
    WindowOutOfRange(String),
    /// A user that names no account.
    #[error(transparent)]
    User(#[from] crate::account::AccountError),
    /// The daemon's socket cannot be told (`TESSERA_SOCKET`).
    #[error(transparent)]
    Socket(#[from] PathError),
    /// The daemon refused the request, or could not be reached.
    #[error(transparent)]
    Daemon(#[from] tessera_client::Error),
    /// The reply could not be printed as JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// Subcommands of `tessera vgpu`.
#[derive(Subcommand)]
pub enum VgpuCommand {
    /// Create a vGPU: a memory quota and a compute share on one device.
    Create(CreateArgs),
    /// List every vGPU with its usage.
    List {
        /// Print JSON (an array of objects) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one vGPU in detail.
    Show {
        /// The vGPU.
        #[arg(value_parser = crate::run::vgpu_value)]
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Change a vGPU; running processes see the change at once (but for the memory mode, which processes
    /// read when they join).
    Set(SetArgs),
    /// Stop a vGPU's kernel launches at the next kernel boundary.
    Suspend {
        /// The vGPU.
        #[arg(value_parser = crate::run::vgpu_value)]
        name: String,
    },
    /// Bring a snapshotted vGPU's memory back to the device (at the same addresses) and let its launches
    /// continue; on a vGPU merely suspended, let its launches continue.
    Resume {
        /// The vGPU.
        #[arg(value_parser = crate::run::vgpu_value)]
        name: String,
        /// Only this snapshotted process of the vGPU (repeat for more); the vGPU stays suspended if it was
        /// snapshotted as a whole.
        #[arg(long = "pid", value_name = "PID")]
        pids: Vec<u32>,
    },
    /// Suspend a vGPU (launches stop at the next kernel boundary, work in flight finishes) and checkpoint
    /// its processes: their device memory goes to host memory and is free for other tenants until
    /// `tessera vgpu resume`.
    Snapshot {
        /// The vGPU.
        #[arg(value_parser = crate::run::vgpu_value)]
        name: String,
        /// Only this process of the vGPU (repeat for more), without suspending the vGPU.
        #[arg(long = "pid", value_name = "PID")]
        pids: Vec<u32>,
    },
    /// Remove a vGPU (refused while processes are attached to it).
    Rm {
        /// The vGPU.
        #[arg(value_parser = crate::run::vgpu_value)]
        name: String,
    },
    /// Have the processes of a soft-mode vGPU defragment their device memory (waits up to 30 s for them),
    /// and show what they held before and after.
    Defrag {
        /// The vGPU.
        #[arg(value_parser = crate::run::vgpu_value)]
        name: String,
    },
    /// Have the processes of a soft-mode vGPU swap their device memory out to host memory now (waits up
    /// to 30 s for them); it comes back before each process's next launch or copy.
    SwapOut {
        /// The vGPU.
        #[arg(value_parser = crate::run::vgpu_value)]
        name: String,
    },
}

/// Memory mode as the command line spells it.
#[derive(Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// Allocations are the driver's own memory (the default).
    Hard,
    /// Memory virtualized by the shim: pooled, defragmented, swapped to host memory when the device is
    /// short; quotas may add up to more than the device has.
    Soft,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Hard => Mode::Hard,
            ModeArg::Soft => Mode::Soft,
        }
    }
}

/// Priority as the command line spells it.
#[derive(Clone, Copy, ValueEnum)]
pub enum PriorityArg {
    /// While it has work, lower priorities on its device wait.
    High,
    /// The default.
    Normal,
    /// Absorbs spare time only after normal vGPUs.
    Low,
}

impl From<PriorityArg> for Priority {
    fn from(p: PriorityArg) -> Priority {
        match p {
            PriorityArg::High => Priority::High,
            PriorityArg::Normal => Priority::Normal,
            PriorityArg::Low => Priority::Low,
        }
    }
}

/// `on` or `off`.
#[derive(Clone, Copy, ValueEnum)]
pub enum Switch {
    /// Allowed.
    On,
    /// Disallowed.
    Off,
}

/// Arguments of `tessera vgpu create`.
#[derive(Args)]
pub struct CreateArgs {
    /// Its name, as processes give it in TESSERA_VGPU or `tessera run --vgpu`.
    #[arg(value_parser = crate::run::vgpu_value)]
    name: String,
    /// Device ordinal.
    #[arg(long, value_name = "N")]
    device: u32,
    /// Memory quota on the device (8GiB, 512MiB, 1.5GB, bytes).
    #[arg(long, value_name = "SIZE", value_parser = memory_value)]
    memory: u64,
    /// Share of the device's time in percent (1-100; shares of a device sum to at most 100).
    #[arg(long, value_name = "PCT", value_parser = share_value)]
    share: u32,
    /// Never exceed the share, and keep others to theirs while this vGPU is idle.
    #[arg(long)]
    cap: bool,
    /// Priority on the device.
    #[arg(long, value_enum, default_value = "normal")]
    priority: PriorityArg,
    /// Tensor cores (off: TF32 disabled, cuBLAS math modes pedantic).
    #[arg(long, value_enum, default_value = "on", value_name = "on|off")]
    tensor_cores: Switch,
    /// Most queued-but-unfinished device time (20us, 1ms, 2ms; default 1ms).
    #[arg(long, value_name = "DURATION", value_parser = window_value)]
    window: Option<u64>,
    /// The user (name or uid) whose processes may join the vGPU (default: the daemon's user). Its state
    /// file is theirs alone; no other user's process can join it or change it.
    #[arg(long, value_name = "USER", value_parser = user_value)]
    user: Option<u32>,
    /// Memory mode: hard (the driver's memory) or soft (virtualized: pooled, defragmented and swapped to
    /// host memory, so soft vGPUs' quotas may add up to more than the device has). Processes read it when
    /// they join.
    #[arg(long, value_enum, default_value = "hard", value_name = "hard|soft")]
    mode: ModeArg,
}

/// Arguments of `tessera vgpu set`.
#[derive(Args)]
pub struct SetArgs {
    /// The vGPU.
    #[arg(value_parser = crate::run::vgpu_value)]
    name: String,
    /// New share in percent.
    #[arg(long, value_name = "PCT", value_parser = share_value)]
    share: Option<u32>,
    /// New memory quota (refused below what the vGPU uses now).
    #[arg(long, value_name = "SIZE", value_parser = memory_value)]
    memory: Option<u64>,
    /// New priority.
    #[arg(long, value_enum)]
    priority: Option<PriorityArg>,
    /// Tensor cores on or off.
    #[arg(long, value_enum, value_name = "on|off")]
    tensor_cores: Option<Switch>,
    /// New window.
    #[arg(long, value_name = "DURATION", value_parser = window_value)]
    window: Option<u64>,
    /// New memory mode. Processes read it when they join: it reaches processes started after the change,
    /// running ones keep the mode they started with.
    #[arg(long, value_enum, value_name = "hard|soft")]
    mode: Option<ModeArg>,
}

/// A memory quota, checked as each value of `TESSERA_MEMORY_LIMIT` is: above zero, below the no-limit marker.
fn memory_value(text: &str) -> Result<u64, VgpuCmdError> {
    parse_quota(text).map_err(VgpuCmdError::Value)
}

/// A share, checked as `TESSERA_COMPUTE_SHARE` is: `30` or `30%`, 1 to 100 (0 would starve the vGPU).
fn share_value(text: &str) -> Result<u32, VgpuCmdError> {
    parse_share(text).map_err(VgpuCmdError::Value)
}

/// A window: a duration from 1us to 1s.
fn window_value(text: &str) -> Result<u64, VgpuCmdError> {
    let ns = parse_duration_ns(text).map_err(VgpuCmdError::Value)?;
    if (MIN_WINDOW_NS..=MAX_WINDOW_NS).contains(&ns) {
        Ok(ns)
    } else {
        Err(VgpuCmdError::WindowOutOfRange(text.to_string()))
    }
}

/// A user: the name or uid of an existing account (see [`crate::account::resolve`]).
fn user_value(text: &str) -> Result<u32, VgpuCmdError> {
    Ok(crate::account::resolve(text)?)
}

/// `ns` in the largest unit that keeps it whole: `1ms`, `250us`, `1500ns`.
fn duration(ns: u64) -> String {
    match ns {
        n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

/// The request a subcommand makes.
fn request(command: &VgpuCommand) -> Request {
    match command {
        VgpuCommand::Create(a) => {
            let mut spec = VgpuSpec::new(&a.name, a.device, a.memory, a.share);
            spec.cap = a.cap;
            spec.priority = a.priority.into();
            spec.tensor_cores = matches!(a.tensor_cores, Switch::On);
            spec.window_ns = a.window.unwrap_or(spec.window_ns);
            spec.user = a.user;
            spec.mode = a.mode.into();
            Request::Create { spec }
        }
        VgpuCommand::List { .. } => Request::List,
        VgpuCommand::Show { name, .. } => Request::Show { name: name.clone() },
        VgpuCommand::Set(a) => Request::Set {
            name: a.name.clone(),
            change: Change {
                share: a.share,
                memory: a.memory,
                priority: a.priority.map(Priority::from),
                tensor_cores: a.tensor_cores.map(|s| matches!(s, Switch::On)),
                window_ns: a.window,
                mode: a.mode.map(Mode::from),
            },
        },
        VgpuCommand::Suspend { name } => Request::Suspend { name: name.clone() },
        VgpuCommand::Resume { name, pids } => Request::Resume { name: name.clone(), pids: pids.clone() },
        VgpuCommand::Snapshot { name, pids } => Request::Snapshot { name: name.clone(), pids: pids.clone() },
        VgpuCommand::Rm { name } => Request::Rm { name: name.clone() },
        VgpuCommand::Defrag { name } => Request::Defrag { name: name.clone() },
        VgpuCommand::SwapOut { name } => Request::SwapOut { name: name.clone() },
    }
}

/// One line describing a vGPU's settings.
fn summary(s: &VgpuSpec) -> String {
    format!(
        "device {}, {} of memory ({} mode), {}% share{}, {} priority, tensor cores {}, window {}{}",
        s.device,
        format_size(s.memory),
        s.mode.name(),
        s.share,
        if s.cap { " (capped)" } else { "" },
        s.priority.name(),
        if s.tensor_cores { "on" } else { "off" },
        duration(s.window_ns),
        if s.suspended { ", suspended" } else { "" },
    )
}

/// Whether a vGPU's soft-mode memory figures mean anything: it is in soft mode, or processes that joined
/// while it was still run in soft mode.
fn has_soft_memory(v: &VgpuStatus) -> bool {
    v.spec.mode == Mode::Soft || v.soft_processes > 0
}

/// The `list` table; `stats` (when the daemon gave them) add the share each vGPU achieved over the last
/// 10 s.
fn table(vgpus: &[VgpuStatus], stats: Option<&Stats>) -> String {
    let header = [
        "NAME", "DEVICE", "MEMORY", "USED", "MODE", "RESIDENT", "SWAPPED", "POOLED", "FRAG", "SHARE", "ACHIEVED",
        "PRIORITY", "TENSOR", "WINDOW", "STATE", "PROCS",
    ];
    let rows: Vec<Vec<String>> = vgpus
        .iter()
        .map(|v| {
            let s = &v.spec;
            let soft = |text: String| if has_soft_memory(v) { text } else { "-".to_string() };
            vec![
                s.name.clone(),
                s.device.to_string(),
                format_size(s.memory),
                format_size(v.used),
                s.mode.name().to_string(),
                soft(format_size(v.resident)),
                soft(format_size(v.swapped)),
                soft(format_size(v.pooled)),
                soft(format!("{}%", v.fragmentation_pct)),
                format!("{}%{}", s.share, if s.cap { " cap" } else { "" }),
                stats
                    .and_then(|st| st.vgpus.iter().find(|a| a.name == s.name))
                    .map_or("-".to_string(), |a| format!("{:.1}%", a.achieved.last_10s_pct)),
                s.priority.name().to_string(),
                (if s.tensor_cores { "on" } else { "off" }).to_string(),
                duration(s.window_ns),
                state(v),
                v.processes.len().to_string(),
            ]
        })
        .collect();
    crate::grid::render(&header, &rows, &[])
}

/// `running`, `suspended`, `suspended (audit: took 50% of device 0 over 10 s, entitled to 20%)`, or
/// `snapshotted (...)`.
fn state(v: &VgpuStatus) -> String {
    if v.snapshotted {
        return crate::vgpu_snapshot::state(v);
    }
    match (&v.audit, v.spec.suspended) {
        (_, false) => "running".to_string(),
        (None, true) => "suspended".to_string(),
        (Some(why), true) => format!("suspended (audit: {why})"),
    }
}

/// The `show` text.
fn details(v: &VgpuStatus) -> String {
    let s = &v.spec;
    let pids: Vec<String> = v.processes.iter().map(u32::to_string).collect();
    let ms = |ns: u64| format!("{:.1} ms", ns as f64 / 1e6);
    [
        format!("name:          {}", s.name),
        format!("device:        {}", s.device),
        format!(
            "memory:        {} quota, {} in use (peak {})",
            format_size(s.memory),
            format_size(v.used),
            format_size(v.peak)
        ),
        format!("mode:          {}{}", s.mode.name(), mode_note(v)),
        soft_memory(v),
        format!("share:         {}%{}", s.share, if s.cap { ", capped" } else { "" }),
        format!("priority:      {}", s.priority.name()),
        format!("tensor cores:  {}", if s.tensor_cores { "on" } else { "off" }),
        format!("window:        {}", duration(s.window_ns)),
        format!("user:          {}", s.user.map_or("the daemon's".to_string(), |uid| format!("uid {uid}"))),
        format!("state:         {}", state(v)),
        format!(
            "processes:     {}{}",
            pids.len(),
            if pids.is_empty() { String::new() } else { format!(" (pid {})", pids.join(", ")) }
        ),
        format!("tokens:        {:.3} ms", v.tokens_ns as f64 / 1e6),
        format!("launches:      {}, device time {}, waited {}", v.launches, ms(v.device_ns), ms(v.wait_ns)),
    ]
    .into_iter()
    .filter(|line| !line.is_empty())
    .collect::<Vec<_>>()
    .join("\n")
        + "\n"
}

/// The `show` line of the share achieved lately.
fn achieved_line(a: &Achieved) -> String {
    format!("achieved:      {:.1}% of the device over the last 1 s, {:.1}% over 10 s\n", a.last_1s_pct, a.last_10s_pct)
}

/// Attached processes that run in the other mode than the vGPU's (they joined before it changed), said
/// after the mode; empty when there are none.
fn mode_note(v: &VgpuStatus) -> String {
    let total = v.processes.len() as u32;
    let (other, mode) = match v.spec.mode {
        Mode::Soft => (total.saturating_sub(v.soft_processes), Mode::Hard),
        Mode::Hard => (v.soft_processes.min(total), Mode::Soft),
    };
    match other {
        0 => String::new(),
        n => format!(" ({n} running process(es) started before the change keep {} mode)", mode.name()),
    }
}

/// The `show` lines of soft-mode memory (none for a vGPU without any).
fn soft_memory(v: &VgpuStatus) -> String {
    if !has_soft_memory(v) {
        return String::new();
    }
    let ms = |ns: u64| format!("{:.1} ms", ns as f64 / 1e6);
    let mut lines = vec![
        format!(
            "device memory: {} resident, {} pooled, fragmentation {}% ({} only defragmenting returns)",
            format_size(v.resident),
            format_size(v.pooled),
            v.fragmentation_pct,
            format_size(v.fragmented)
        ),
        format!(
            "swap:          {} in host memory; {} spent swapping out, {} swapping in",
            format_size(v.swapped),
            ms(v.swap_out_ns),
            ms(v.swap_in_ns)
        ),
        format!("swap charged:  {} of other vGPUs' swapping out, for memory it needed", ms(v.swap_charged_ns)),
    ];
    if v.wanted > 0 {
        lines.push(format!("waiting for:   {} of device memory", format_size(v.wanted)));
    }
    lines.join("\n")
}

/// The reply to a request carried out by the vGPU's pagers: `done` is what each did ("defragmented"),
/// `nothing` what there was nothing to do ("defragment"), `figures` what else changed ("; ...").
fn paged(name: &str, r: &PagerReport, done: &str, nothing: &str, figures: &str) -> String {
    let hard = match r.hard_processes.len() {
        0 => String::new(),
        n => format!("; {n} process(es) started before the vGPU was set to soft run in hard mode and were not asked"),
    };
    if r.processes.is_empty() {
        return format!("vGPU {name}: no soft-mode process is attached, nothing to {nothing}{hard}\n");
    }
    format!(
        "vGPU {name}: {} process(es) {done}; device memory held {} before, {} after{figures}{hard}\n",
        r.processes.len(),
        format_size(r.held_before),
        format_size(r.held_after),
    )
}

/// The reply to `defrag`.
fn defragged(name: &str, r: &PagerReport) -> String {
    let fragmentation =
        format!("; fragmentation {}% before, {}% after", r.fragmentation_pct_before, r.fragmentation_pct_after);
    paged(name, r, "defragmented", "defragment", &fragmentation)
}

/// Runs one `tessera vgpu` subcommand.
pub fn run(command: VgpuCommand) -> Result<(), VgpuCmdError> {
    let client = Client::new(paths::socket()?);
    // What a resume brings back, said after it (a vGPU that does not exist fails the resume itself).
    let before = match &command {
        VgpuCommand::Resume { name, .. } => client.show(name).ok(),
        _ => None,
    };
    let response = client.request(&request(&command))?;
    let first = response.vgpus.first();
    let out = match (&command, first) {
        (VgpuCommand::List { json: true }, _) => serde_json::to_string_pretty(&response.vgpus)? + "\n",
        (VgpuCommand::List { json: false }, _) if response.vgpus.is_empty() => {
            "no vGPUs; create one with `tessera vgpu create`\n".into()
        }
        (VgpuCommand::List { json: false }, _) => table(&response.vgpus, client.stats(None).ok().as_ref()),
        (VgpuCommand::Show { json: true, .. }, Some(v)) => serde_json::to_string_pretty(v)? + "\n",
        (VgpuCommand::Show { name, .. }, Some(v)) => {
            // The achieved share is a second request: a daemon that cannot answer it still shows the rest.
            let achieved = client.stats(Some(name)).ok().and_then(|s| s.vgpus.first().map(|v| v.achieved));
            details(v) + &achieved.map_or(String::new(), |a| achieved_line(&a))
        }
        (VgpuCommand::Create(a), Some(v)) => format!("created vGPU {}: {}\n", a.name, summary(&v.spec)),
        (VgpuCommand::Set(a), Some(v)) if a.mode.is_some() => format!(
            "vGPU {}: {}\nthe memory mode applies to processes started from now on{}\n",
            a.name,
            summary(&v.spec),
            mode_note(v)
        ),
        (VgpuCommand::Set(a), Some(v)) => format!("vGPU {}: {}\n", a.name, summary(&v.spec)),
        (VgpuCommand::Defrag { name }, _) => match &response.pager {
            Some(r) => defragged(name, r),
            None => format!("vGPU {name}: the daemon did not say what it defragmented\n"),
        },
        (VgpuCommand::SwapOut { name }, v) => match (&response.pager, v) {
            (Some(r), v) if r.processes.is_empty() || v.is_some() => {
                let host = v.map_or(String::new(), |v| format!("; {} in host memory", format_size(v.swapped)));
                paged(name, r, "swapped out", "swap out", &host)
            }
            _ => format!("vGPU {name}: the daemon did not say what it swapped out\n"),
        },
        (VgpuCommand::Suspend { name }, _) => format!("vGPU {name} suspended\n"),
        (VgpuCommand::Resume { name, pids }, after) => {
            crate::vgpu_snapshot::resumed(name, pids, before.as_ref(), after)
        }
        (VgpuCommand::Snapshot { name, pids }, Some(v)) => crate::vgpu_snapshot::snapshotted(name, pids, v),
        (VgpuCommand::Rm { name }, _) => format!("vGPU {name} removed\n"),
        (_, None) => String::new(),
    };
    print!("{out}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: VgpuCommand,
    }

    fn parse(args: &[&str]) -> Result<Request, clap::Error> {
        let args = std::iter::once("vgpu").chain(args.iter().copied());
        Cli::try_parse_from(args).map(|c| request(&c.command))
    }

    #[test]
    fn the_mode_is_given_at_creation_or_later_and_defrag_names_a_vgpu() {
        let create = ["create", "a", "--device", "0", "--memory", "1GiB", "--share", "10"];
        let Ok(Request::Create { spec }) = parse(&create) else { panic!() };
        assert_eq!(spec.mode, Mode::Hard, "hard by default");
        let Ok(Request::Create { spec }) = parse(&[&create[..], &["--mode", "soft"]].concat()) else { panic!() };
        assert_eq!(spec.mode, Mode::Soft);
        let e = parse(&[&create[..], &["--mode", "firm"]].concat()).unwrap_err().to_string();
        assert!(e.contains("firm") && e.contains("hard") && e.contains("soft"), "{e}");
        let Ok(Request::Set { change, .. }) = parse(&["set", "a", "--mode", "hard"]) else { panic!() };
        assert_eq!(change, Change { mode: Some(Mode::Hard), ..Change::default() });
        assert_eq!(parse(&["defrag", "a"]).ok(), Some(Request::Defrag { name: "a".into() }));
        assert!(parse(&["defrag", "a/b"]).is_err());
    }

    fn soft_status() -> VgpuStatus {
        let spec = VgpuSpec { mode: Mode::Soft, ..VgpuSpec::new("s", 0, 1 << 30, 10) };
        VgpuStatus {
            spec,
            processes: vec![10, 11],
            soft_processes: 1,
            resident: 600 << 20,
            pooled: 400 << 20,
            fragmented: 300 << 20,
            fragmentation_pct: 30,
            swapped: 2 << 30,
            swap_charged_ns: 3_000_000,
            ..VgpuStatus::default()
        }
    }

    #[test]
    fn soft_memory_is_reported_and_hard_vgpus_show_none() {
        let hard = VgpuStatus { spec: VgpuSpec::new("h", 0, 1 << 30, 10), ..VgpuStatus::default() };
        let out = table(&[soft_status(), hard.clone()], None);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].contains("MODE") && lines[0].contains("RESIDENT") && lines[0].contains("FRAG"), "{out}");
        assert!(lines[1].contains("soft") && lines[1].contains("600.0 MiB") && lines[1].contains("30%"), "{out}");
        assert!(lines[2].contains("hard") && lines[2].contains(" -"), "{out}");
        let achieved = Achieved { last_1s_pct: 1.0, last_10s_pct: 12.34 };
        let h = tessera_client::VgpuStats { name: "h".into(), achieved, ..Default::default() };
        let stats = Stats { vgpus: vec![h], ..Stats::default() };
        assert!(table(std::slice::from_ref(&hard), Some(&stats)).contains(" 12.3% "), "the 10 s share");
        assert!(achieved_line(&achieved).contains("1.0% of the device over the last 1 s, 12.3% over 10 s"));
        let shown = details(&soft_status());
        assert!(shown.contains("mode:          soft (1 running process(es)"), "{shown}");
        assert!(shown.contains("2.0 GiB in host memory") && shown.contains("3.0 ms of other vGPUs'"), "{shown}");
        let shown = details(&hard);
        assert!(shown.contains("mode:          hard\n") && !shown.contains("swap"), "{shown}");
    }

    #[test]
    fn an_audit_suspension_says_why() {
        let why = "took 50% of device 0 over 10 s, entitled to 20%";
        let mut v = VgpuStatus { audit: Some(why.into()), ..VgpuStatus::default() };
        v.spec.suspended = true;
        let expected = format!("suspended (audit: {why})");
        assert!(table(std::slice::from_ref(&v), None).contains(&expected) && details(&v).contains(&expected));
        v.audit = None;
        assert!(details(&v).contains("state:         suspended\n"));
        v.spec.suspended = false;
        assert!(details(&v).contains("state:         running\n"));
    }

    #[test]
    fn defrag_says_what_it_did() {
        let nothing = PagerReport { hard_processes: vec![7], ..PagerReport::default() };
        let text = defragged("s", &nothing);
        assert!(text.contains("nothing to defragment") && text.contains("1 process(es) started before"), "{text}");
        let done = PagerReport {
            processes: vec![1, 2],
            held_before: 1 << 30,
            held_after: 512 << 20,
            fragmentation_pct_before: 40,
            fragmentation_pct_after: 2,
            ..PagerReport::default()
        };
        assert_eq!(
            defragged("s", &done),
            "vGPU s: 2 process(es) defragmented; device memory held 1.0 GiB before, 512.0 MiB after; \
             fragmentation 40% before, 2% after\n"
        );
    }

    #[test]
    fn values_are_checked_before_the_daemon_sees_them() {
        assert_eq!(share_value("30").ok(), Some(30));
        assert_eq!(share_value("30%").ok(), Some(30));
        for bad in ["0", "0%", "101", "-1", "+30", "30.5", "half", ""] {
            assert!(share_value(bad).unwrap_err().to_string().contains("not a share"), "{bad:?}");
        }
        assert_eq!(memory_value("1GiB").ok(), Some(1 << 30));
        for bad in ["0", "0B", "lots", "18446744073709551615", "18446744073709551616", "+1GiB"] {
            assert!(memory_value(bad).is_err(), "{bad:?}");
        }
        assert_eq!(window_value("2ms").ok(), Some(2_000_000));
        assert_eq!((user_value("root").ok(), user_value("0").ok()), (Some(0), Some(0)));
        assert!(user_value("no-such-user-here").unwrap_err().to_string().contains("no user"));
        assert!(user_value("4294967295").unwrap_err().to_string().contains("no user (-1)"));
        let e = user_value("4294967290").unwrap_err().to_string();
        assert!(e.contains("no user"), "a uid without an account: {e}");
        assert_eq!(
            window_value("2s").unwrap_err().to_string(),
            "a window of 2s is out of range; use 1us to 1s",
            "the wording the docs show"
        );
        for bad in ["4294967296", "-1", "+0", ""] {
            assert!(user_value(bad).is_err(), "{bad:?}");
        }
        assert!(window_value("0").is_err() && window_value("2s").is_err() && window_value("soon").is_err());
        assert_eq!(
            (duration(1_000_000), duration(250_000), duration(1_500)),
            ("1ms".into(), "250us".into(), "1500ns".into())
        );
    }
}

#[cfg(test)]
mod property_tests {
    use super::*;
    use clap::Parser;
    use proptest::prelude::*;
    use tessera_ffi::units::MAX_QUOTA;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: VgpuCommand,
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[ +\\-0-9.%]{0,22}(B|KiB|GiB|TiB|us|ms|s|%)?",
            "[a-z0-9]{0,10}",
            // Valid for some flags, so that whole commands get through and their values are checked.
            prop::sample::select(vec!["0", "1", "30", "100", "1GiB", "1ms", "root"]).prop_map(String::from),
        ]
    }

    /// Every value of a request that got past the parsers is within its range.
    fn in_range(request: &Request) -> bool {
        match request {
            Request::Create { spec } => {
                (1..=MAX_QUOTA).contains(&spec.memory)
                    && (1..=100).contains(&spec.share)
                    && (MIN_WINDOW_NS..=MAX_WINDOW_NS).contains(&spec.window_ns)
                    && spec.user != Some(u32::MAX)
            }
            Request::Set { change, .. } => {
                change.memory.is_none_or(|m| (1..=MAX_QUOTA).contains(&m))
                    && change.share.is_none_or(|s| (1..=100).contains(&s))
                    && change.window_ns.is_none_or(|w| (MIN_WINDOW_NS..=MAX_WINDOW_NS).contains(&w))
            }
            _ => true,
        }
    }

    proptest! {
        #[test]
        fn create_and_set_never_panic_and_refuse_what_is_out_of_range(
            memory in text(), share in text(), window in text(), user in text(), device in text()
        ) {
            let create = [
                "vgpu", "create", "a", "--device", &device, "--memory", &memory, "--share", &share, "--window",
                &window, "--user", &user,
            ];
            if let Ok(cli) = Cli::try_parse_from(create) {
                prop_assert!(in_range(&request(&cli.command)), "{create:?}");
            }
            let set = ["vgpu", "set", "a", "--memory", &memory, "--share", &share, "--window", &window];
            if let Ok(cli) = Cli::try_parse_from(set) {
                prop_assert!(in_range(&request(&cli.command)), "{set:?}");
            }
        }

        #[test]
        fn arbitrary_arguments_never_panic(args in proptest::collection::vec(text(), 0..8)) {
            if let Ok(cli) = Cli::try_parse_from(std::iter::once("vgpu".to_string()).chain(args)) {
                prop_assert!(in_range(&request(&cli.command)));
            }
        }
    }
}
