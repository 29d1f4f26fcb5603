//! The CUDA applications the tests run unmodified (numba-cuda, CuPy): each in a virtual environment
//! `tools/app-venv.sh` makes once per machine (no network then fails the test), and
//! a script of `cuda-tests/apps/` run with it on a machine.

use super::Sim;
use super::cprog::{Facts, workspace};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// The python of `app`'s virtual environment (`numba`, `cupy`), made on first use.
pub fn python(app: &str) -> PathBuf {
    static MADE: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let made = made.get_or_insert_with(HashMap::new);
    if let Some(path) = made.get(app) {
        return path.clone();
    }
    let script = workspace().join("tools/app-venv.sh");
    let out = Command::new(&script).arg(app).output().expect("run tools/app-venv.sh");
    assert!(
        out.status.success(),
        "tools/app-venv.sh could not install {app} (it needs python3 with venv and pip, and the network, the \
         first time): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    made.insert(app.to_string(), path.clone());
    path
}

/// The path of `cuda-tests/apps/<script>`.
pub fn script(script: &str) -> String {
    workspace().join("cuda-tests/apps").join(script).to_str().expect("UTF-8 path").to_string()
}

/// Runs `cuda-tests/apps/<script> <what>` with `app`'s python on `sim`, failing the test unless it
/// printed `done ok`.
pub fn run(sim: &Sim, app: &str, file: &str, what: &str) -> Facts {
    let mut cmd = sim.command_for(python(app), &[&script(file), what]);
    cmd.env("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0");
    Facts::ok(cmd)
}

/// Runs `cuda-tests/apps/<file> <args>` with `app`'s python in two vGPUs of 30% and 70% of one device
/// at once (kernels the simulator does not compute taking what `kernel_times` gives them, as
/// `SIMGPU_KERNEL_TIMES`), and returns the first's part of the engine time the two used while both ran
/// (after a second each, to leave their start-up out), from the engine trace.
pub fn split_30_70(tag: &str, app: &str, file: &str, args: &[&str], kernel_times: &str) -> f64 {
    use super::Guarded;
    use super::tessera::Machine;
    let _turn = super::timing_turn();
    let mut m = Machine::new(tag, "small");
    m.start();
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "2GiB", "--share", "30"]);
    m.ok(&["vgpu", "create", "b", "--device", "0", "--memory", "2GiB", "--share", "70"]);
    let trace = m.file("engine.trace");
    let python = python(app);
    let script = script(file);
    let spawn = |vgpu: &str| {
        let mut cmd =
            m.tenant_running(vgpu, python.to_str().expect("UTF-8 path"), &[&[script.as_str()], args].concat());
        cmd.env("SIMGPU_ENGINE_TRACE", &trace).env("SIMGPU_KERNEL_TIMES", kernel_times);
        cmd.env("SIMGPU_UNKNOWN_KERNELS_QUIET", "1");
        Guarded::spawn(&mut cmd).expect("spawn a tenant")
    };
    let (a, b) = (spawn("a"), spawn("b"));
    let (pa, pb) = (a.id(), b.id());
    for tenant in [a, b] {
        let out = tenant.into_child().wait_with_output().expect("wait for a tenant");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let entries = simgpu::trace::read(&trace).expect("read the engine trace");
    let of = |pid: u32| entries.iter().filter(move |e| e.pid == pid && e.uncomputed.is_some());
    let first = |pid: u32| of(pid).map(|e| e.start_ns).min().expect("kernels of each program");
    let last = |pid: u32| of(pid).map(|e| e.end_ns).max().expect("kernels of each program");
    let (from, to) = (first(pa).max(first(pb)) + 1_000_000_000, last(pa).min(last(pb)));
    assert!(to > from + 2_000_000_000, "the two programs overlapped for less than 3 s");
    let ran = |pid: u32| -> u64 { of(pid).map(|e| e.end_ns.min(to).saturating_sub(e.start_ns.max(from))).sum() };
    let (ra, rb) = (ran(pa) as f64, ran(pb) as f64);
    let split = ra / (ra + rb);
    eprintln!(
        "{app} in 30% and 70% vGPUs: {:.1}/{:.1} of the engine time they used",
        100.0 * split,
        100.0 * (1.0 - split)
    );
    split
}
