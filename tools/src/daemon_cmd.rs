//! `tessera daemon`: runs the host scheduler in the foreground (under systemd, a terminal, or a test).
//! Its files come from `TESSERA_REGION`, `TESSERA_SOCKET` and `TESSERA_STATE_DIR`; the devices vGPUs may
//! be placed on are the CUDA driver's (the simulated one's when the machine has no GPU).

use crate::driver::Driver;
use tessera_scheduler::daemon::{self, Options};

/// The total memory of each device the driver shows (`cuDeviceTotalMem`), by ordinal. The driver stays
/// loaded for the daemon's life.
fn device_memory() -> Result<Vec<u64>, String> {
    let driver = Driver::load()?;
    driver.init()?;
    let n = driver.device_count()?;
    let memory = (0..n).map(|d| driver.total_memory(d).map_err(|e| format!("device {d}: {e}"))).collect();
    std::mem::forget(driver);
    memory
}

/// Runs the daemon; returns only when it cannot start (a signal ends it with status 0).
pub fn run() -> Result<(), String> {
    let options = Options::from_env(device_memory()?)?;
    daemon::run(options)
}
