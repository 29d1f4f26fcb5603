//! The CUDA applications the tests run unmodified (numba-cuda, CuPy): each in a virtual environment
//! `tools/app-venv.sh` makes in the target folder the first time (no network then fails the test), and
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
    let target = super::build_dir().parent().expect("the target folder").to_path_buf();
    let script = workspace().join("tools/app-venv.sh");
    let out = Command::new(&script).arg(app).arg(&target).output().expect("run tools/app-venv.sh");
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
