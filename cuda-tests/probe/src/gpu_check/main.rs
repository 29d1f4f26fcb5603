//! `gpu-check`: the real-GPU check that `tools/gpu-check-bundle.sh` bundles (issue 32), run as
//! `OUTDIR/run [--simulated] [--only NAME,...]` on a GPU host that has only the NVIDIA driver, glibc and
//! python3. Each check runs the bundle's prebuilt programs with a time bound, prints one line
//! (`PASS`, `FAIL` or `SKIP`, its seconds, what it found) and adds its figures to `report.json` beside
//! the bundle (or in `--out DIR`); the last line sums them up. Exit status: 0 no check failed, 1 some
//! check failed, 2 no NVIDIA driver here (nothing run), 64 a bad argument.
//!
//! Without a driver it runs nothing: `--simulated` runs the same checks on the simulated driver the
//! bundle carries, to show the bundle is whole; every line and the report then say so, and none of its
//! figures is a hardware result.

mod bounded;
mod checks;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// How to use it.
const USAGE: &str = "usage: run [--simulated] [--only NAME,...] [--out DIR]
  --simulated   run on the simulated driver the bundle carries (to check the bundle, not the GPU)
  --only        run these checks only (names as the lines print them)
  --out DIR     write report.json there (default: the bundle's folder)";

/// Where the check runs: a real driver, or the bundle's simulated one.
pub enum Driver {
    /// NVIDIA's driver.
    Hardware {
        /// The first line of `/proc/driver/nvidia/version`.
        version: String,
        /// The `libcuda.so.1` the loader finds.
        libcuda: PathBuf,
    },
    /// The simulated driver the bundle carries.
    Simulated {
        /// Its library folder (`lib/tessera/simgpu`).
        folder: PathBuf,
    },
}

/// The bundle's files, and the driver the checks run on.
pub struct Ctx {
    /// The bundle's folder (`bin/`, `lib/tessera/`, `progs/`, `apps/`).
    pub root: PathBuf,
    /// The driver underneath.
    pub driver: Driver,
    /// A private scratch folder (region files, the simulated state), removed at the end.
    pub scratch: PathBuf,
    /// Device 0's free memory when the run began (the `devices` check's reading), for the last check.
    pub free_at_start: std::cell::OnceCell<u64>,
}

impl Ctx {
    /// A file of the bundle.
    pub fn file(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    /// True on the bundle's simulated driver.
    pub fn simulated(&self) -> bool {
        matches!(self.driver, Driver::Simulated { .. })
    }

    /// `program` with `args` and a clean environment for the driver underneath: no `TESSERA_` or
    /// `SIMGPU_` setting and no `LD_PRELOAD` from the caller's shell, and on the simulated driver its
    /// library folder first on `LD_LIBRARY_PATH` with a private state file.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args);
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if k.starts_with("TESSERA_") || k.starts_with("SIMGPU_") || k == "LD_PRELOAD" {
                cmd.env_remove(&key);
            }
        }
        if let Driver::Simulated { folder } = &self.driver {
            let old = std::env::var("LD_LIBRARY_PATH").ok();
            cmd.envs(simgpu_host::libdir::environment(folder, old.as_deref()));
            cmd.env("SIMGPU_STATE", self.scratch.join("simgpu.state"));
            cmd.env("SIMGPU_UNKNOWN_KERNELS_QUIET", "1");
        }
        cmd
    }

    /// [`Ctx::command`] under the shim with no setting but a private region file named after `tag`.
    pub fn under_shim(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str], tag: &str) -> Command {
        let mut cmd = self.command(program, args);
        cmd.env("LD_PRELOAD", self.file("lib/tessera/libtessera.so"));
        cmd.env("TESSERA_REGION", self.scratch.join(format!("{tag}.region")));
        cmd
    }

    /// [`Ctx::under_shim`] with a memory quota of `quota` (e.g. `1GiB`).
    pub fn shimmed(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str], quota: &str, tag: &str) -> Command {
        let mut cmd = self.under_shim(program, args, tag);
        cmd.env("TESSERA_MEMORY_LIMIT", quota);
        cmd
    }
}

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// As expected.
    Pass,
    /// Not as expected, or it could not run.
    Fail,
    /// Not run here, with the reason.
    Skip,
}

/// A check's result: its status, one line on what it found, and its figures for the report.
pub struct Outcome {
    /// PASS, FAIL or SKIP.
    pub status: Status,
    /// What it found, or why it failed or was skipped.
    pub detail: String,
    /// Its measured figures.
    pub figures: Value,
}

impl Outcome {
    /// A pass with `figures`.
    pub fn pass(detail: impl Into<String>, figures: Value) -> Outcome {
        Outcome { status: Status::Pass, detail: detail.into(), figures }
    }

    /// A failure.
    pub fn fail(detail: impl Into<String>) -> Outcome {
        Outcome { status: Status::Fail, detail: detail.into(), figures: Value::Null }
    }

    /// A skip, with its reason.
    pub fn skip(reason: impl Into<String>) -> Outcome {
        Outcome { status: Status::Skip, detail: reason.into(), figures: Value::Null }
    }
}

/// The command line, parsed.
struct Args {
    simulated: bool,
    only: Option<Vec<String>>,
    out: Option<PathBuf>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args { simulated: false, only: None, out: None };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--simulated" => parsed.simulated = true,
            "--only" => {
                let names = args.next().ok_or("--only needs check names, e.g. --only kernels,quota")?;
                let names: Vec<String> = names.split(',').map(str::to_string).collect();
                if let Some(unknown) = names.iter().find(|n| !checks::ALL.iter().any(|c| c.name == n.as_str())) {
                    let known: Vec<&str> = checks::ALL.iter().map(|c| c.name).collect();
                    return Err(format!("--only: no check named '{unknown}' (checks: {})", known.join(", ")));
                }
                parsed.only = Some(names);
            }
            "--out" => parsed.out = Some(args.next().ok_or("--out needs a folder")?.into()),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(parsed)
}

/// NVIDIA's driver on this machine, or why there is none (see `tools/real-gpu-check.sh`, which tells
/// them apart the same way).
fn hardware_driver() -> Result<Driver, String> {
    let version_file = std::env::var_os("TESSERA_TEST_NVIDIA_VERSION_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/proc/driver/nvidia/version".into());
    let version = std::fs::read_to_string(&version_file).map_err(|e| {
        format!("{} cannot be read ({e}): the nvidia kernel module is not loaded", version_file.display())
    })?;
    let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"];
    let listed = ldconfig.iter().find_map(|l| Command::new(l).arg("-p").output().ok()).map(|o| o.stdout);
    let libcuda = String::from_utf8_lossy(&listed.unwrap_or_default())
        .lines()
        .find(|l| l.trim_start().starts_with("libcuda.so.1 "))
        .and_then(|l| l.rsplit(" => ").next())
        .map(PathBuf::from)
        .ok_or("the loader knows no libcuda.so.1 (ldconfig -p lists none)")?;
    let bytes = std::fs::read(&libcuda).map_err(|e| format!("{} cannot be read: {e}", libcuda.display()))?;
    if bytes.windows(13).any(|w| w == b"simgpu_marker") {
        return Err(format!("{} is Tessera's simulated driver, not NVIDIA's", libcuda.display()));
    }
    Ok(Driver::Hardware { version: version.lines().next().unwrap_or("").to_string(), libcuda })
}

/// The bundle's folder: the parent of the `bin/` this program is in.
fn bundle_root() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot tell where gpu-check is: {e}"))?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .filter(|root| root.join("lib/tessera/libtessera.so").is_file())
        .ok_or_else(|| format!("{} is not in a bundle's bin/ (no ../lib/tessera/libtessera.so)", exe.display()))
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) if message.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("gpu-check: {message}\n{USAGE}");
            return ExitCode::from(64);
        }
    };
    let root = match bundle_root() {
        Ok(root) => root,
        Err(e) => {
            eprintln!("gpu-check: {e}");
            return ExitCode::from(1);
        }
    };
    let driver = if args.simulated {
        Driver::Simulated { folder: root.join("lib/tessera/simgpu") }
    } else {
        match hardware_driver() {
            Ok(driver) => driver,
            Err(why) => {
                eprintln!("gpu-check: no NVIDIA driver on this machine: {why}");
                eprintln!("gpu-check: nothing was run (--simulated checks the bundle on the simulated driver)");
                return ExitCode::from(2);
            }
        }
    };
    let scratch = std::env::temp_dir().join(format!("tessera-gpu-check-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&scratch) {
        eprintln!("gpu-check: cannot make {}: {e}", scratch.display());
        return ExitCode::from(1);
    }
    let ctx = Ctx { root, driver, scratch, free_at_start: std::cell::OnceCell::new() };
    let report = run_checks(&ctx, args.only.as_deref());
    let _ = std::fs::remove_dir_all(&ctx.scratch);
    let out = args.out.unwrap_or_else(|| ctx.root.clone()).join("report.json");
    let text = serde_json::to_string_pretty(&report).expect("a JSON value");
    if let Err(e) = std::fs::write(&out, text + "\n") {
        eprintln!("gpu-check: cannot write {}: {e}", out.display());
        return ExitCode::from(1);
    }
    println!("{} (report: {})", report["summary"].as_str().unwrap_or(""), out.display());
    if report["failed"].as_u64() == Some(0) { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

/// The most the whole run may take: a check is started only while its bound fits in what is left.
const RUN_BUDGET: Duration = Duration::from_secs(480);

/// A skip when a check bounded by `bound_s` seconds may not fit in what is `left` of the run's budget.
fn beyond_budget(bound_s: u64, left: Duration) -> Option<Outcome> {
    (Duration::from_secs(bound_s) > left).then(|| {
        Outcome::skip(format!(
            "not started: its bound is {bound_s} s and the run's {} s budget has {} s left",
            RUN_BUDGET.as_secs(),
            left.as_secs()
        ))
    })
}

/// Runs the checks (all, or `only`), printing a line each; the report.
fn run_checks(ctx: &Ctx, only: Option<&[String]>) -> Value {
    let label = if ctx.simulated() { "[simulated, not a hardware result] " } else { "" };
    let started = Instant::now();
    let mut results = Vec::new();
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for check in checks::ALL.iter().filter(|c| only.is_none_or(|o| o.iter().any(|n| n == c.name))) {
        let began = Instant::now();
        let outcome = match beyond_budget(check.bound_s, RUN_BUDGET.saturating_sub(started.elapsed())) {
            Some(skip) => skip,
            None => {
                bounded::set_deadline(began + Duration::from_secs(check.bound_s));
                (check.run)(ctx)
            }
        };
        let seconds = began.elapsed().as_secs_f64();
        let word = match outcome.status {
            Status::Pass => {
                passed += 1;
                "PASS"
            }
            Status::Fail => {
                failed += 1;
                "FAIL"
            }
            Status::Skip => {
                skipped += 1;
                "SKIP"
            }
        };
        println!("{label}{word} {} ({seconds:.1} s, bound {} s): {}", check.name, check.bound_s, outcome.detail);
        results.push(json!({
            "name": check.name, "status": word, "seconds": seconds, "bound_s": check.bound_s,
            "detail": outcome.detail, "figures": outcome.figures,
        }));
    }
    let seconds = started.elapsed().as_secs_f64();
    let summary = format!(
        "{label}gpu-check: {passed} passed, {failed} failed, {skipped} skipped in {seconds:.0} s{}",
        if ctx.simulated() { " on the simulated driver" } else { "" }
    );
    let driver = match &ctx.driver {
        Driver::Hardware { version, libcuda } => json!({ "kind": "nvidia", "version": version, "libcuda": libcuda }),
        Driver::Simulated { folder } => json!({ "kind": "simulated", "folder": folder }),
    };
    json!({
        "simulated": ctx.simulated(),
        "hardware_result": !ctx.simulated(),
        "bundle": std::fs::read_to_string(ctx.file("COMMIT")).unwrap_or_default().trim(),
        "driver": driver,
        "host": host(),
        "checks": results,
        "passed": passed, "failed": failed, "skipped": skipped, "seconds": seconds,
        "summary": summary,
    })
}

/// The host's name, CPUs and load when the check ran.
fn host() -> Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default().trim().to_string();
    json!({
        "hostname": read("/proc/sys/kernel/hostname"),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadavg": read("/proc/loadavg"),
        "kernel": read("/proc/sys/kernel/osrelease"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, String> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn a_check_starts_only_while_its_bound_fits_in_the_budget() {
        assert!(beyond_budget(60, Duration::from_secs(60)).is_none());
        let skip = beyond_budget(60, Duration::from_secs(59)).expect("a skip");
        assert_eq!(skip.status, Status::Skip);
        assert!(skip.detail.contains("its bound is 60 s") && skip.detail.contains("has 59 s left"), "{}", skip.detail);
    }

    #[test]
    fn arguments_are_checked() {
        assert!(parse(&[]).is_ok_and(|a| !a.simulated && a.only.is_none()));
        assert!(parse(&["--simulated", "--only", "kernels,quota"]).is_ok_and(|a| a.simulated && a.only.is_some()));
        assert!(parse(&["--only", "kernels,nope"]).is_err_and(|e| e.contains("no check named 'nope'")));
        assert!(parse(&["--only"]).is_err_and(|e| e.contains("needs check names")));
        assert!(parse(&["--fast"]).is_err_and(|e| e.contains("unknown argument '--fast'")));
    }
}
