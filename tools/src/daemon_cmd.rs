//! `tessera daemon`: runs the host scheduler in the foreground (under systemd, a terminal, or a test).
//! Its files come from `TESSERA_REGION`, `TESSERA_SOCKET` and `TESSERA_STATE_DIR`; the devices vGPUs may
//! be placed on are the CUDA driver's (the simulated one's when the machine has no GPU).

use crate::driver::Driver;
use tessera_scheduler::daemon::{self, Options};

/// The number of devices the driver shows. The driver stays loaded for the daemon's life.
fn device_count() -> Result<u32, String> {
    let driver = Driver::load()?;
    driver.init()?;
    let n = driver.device_count()?;
    std::mem::forget(driver);
    u32::try_from(n).map_err(|_| format!("cuDeviceGetCount reported {n} devices"))
}

/// Runs the daemon; returns only when it cannot start (a signal ends it with status 0).
pub fn run() -> Result<(), String> {
    let options = Options::from_env(device_count()?)?;
    daemon::run(options)
}
