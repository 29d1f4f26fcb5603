//! Reference-counted initialization: what `nvmlInit` sets up and the last `nvmlShutdown` drops.

use crate::sampling::History;
use simgpu::mig::{ComputeInstance, GpuInstance};
use simgpu::mig_state::MigState;
use simgpu::{Config, DeviceConfig, SharedState};
use std::io::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tessera_ffi::nvml::{NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_UNINITIALIZED, NVML_ERROR_UNKNOWN, NvmlReturn};

/// Everything an initialized NVML reads from: the configuration, the machine-wide state and the
/// process-utilization history.
pub struct Runtime {
    /// The `SIMGPU_*` configuration read by the first `nvmlInit`.
    pub config: Config,
    /// The state file, mapped as an observer (this process is not registered in it).
    pub state: SharedState,
    /// Earlier process-utilization readings.
    pub history: History,
    /// The machine-wide MIG modes and instances.
    pub mig: MigState,
}

impl Runtime {
    /// The configured device `ordinal`; `NVML_ERROR_INVALID_ARGUMENT` when there is none.
    pub fn device(&self, ordinal: usize) -> Result<&DeviceConfig, NvmlReturn> {
        self.config.devices.get(ordinal).ok_or(NVML_ERROR_INVALID_ARGUMENT)
    }

    /// Compute instance `ci` of GPU instance `gi` of device `ordinal`, with its GPU instance, if both exist.
    pub fn compute_instance(&self, ordinal: usize, gi: u32, ci: u32) -> Option<(GpuInstance, ComputeInstance)> {
        let mig = self.mig.device(ordinal);
        let (g, cis) = mig.gpu_instance(gi)?;
        Some((*g, *cis.iter().find(|c| c.id == ci)?))
    }
}

/// Initialization count and the runtime it keeps alive.
struct Registry {
    refs: u32,
    runtime: Option<Arc<Runtime>>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { refs: 0, runtime: None });

fn registry() -> MutexGuard<'static, Registry> {
    // Nothing that can panic runs while the registry is half-updated, so a poisoned lock still guards
    // consistent data.
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Counts one more initialization; the first reads the configuration and maps the state file. On failure
/// the reason goes to stderr and `NVML_ERROR_UNKNOWN` is returned.
pub fn init() -> Result<(), NvmlReturn> {
    let mut reg = registry();
    if reg.refs == 0 {
        let runtime = open().map_err(|message| {
            // Best effort: a closed stderr must not turn the error into a panic.
            let _ = writeln!(std::io::stderr(), "{message}");
            NVML_ERROR_UNKNOWN
        })?;
        reg.runtime = Some(Arc::new(runtime));
    }
    reg.refs = reg.refs.saturating_add(1);
    Ok(())
}

fn open() -> Result<Runtime, String> {
    let config = Config::from_env().map_err(|e| e.to_string())?;
    let state = SharedState::open(&config, false).map_err(|e| e.to_string())?;
    let mig = MigState::open(&config).map_err(|e| e.to_string())?;
    Ok(Runtime { config, state, history: History::default(), mig })
}

/// Counts one initialization off; the last one unmaps the state file.
pub fn shutdown() -> Result<(), NvmlReturn> {
    let mut reg = registry();
    if reg.refs == 0 {
        return Err(NVML_ERROR_UNINITIALIZED);
    }
    reg.refs -= 1;
    if reg.refs == 0 {
        reg.runtime = None;
    }
    Ok(())
}

/// The runtime while NVML is initialized.
pub fn current() -> Result<Arc<Runtime>, NvmlReturn> {
    registry().runtime.clone().ok_or(NVML_ERROR_UNINITIALIZED)
}
