//! The process-wide driver instance created by `cuInit`, holding every object registry.

use crate::context::{Context, Primary};
use crate::event::Event;
use crate::graph::{Graph, GraphExec};
use crate::guard::CuRes;
use crate::handles::Registry;
use crate::link::Link;
use crate::memory::{AddressSpace, Array, Pool};
use crate::module::{Function, Module};
use crate::stream::Stream;
use crate::visible::{self, VisibleDevice};
use crate::vmm::{Physical, Released, Reservations};
use parking_lot::Mutex;
use simgpu::mig_state::MigState;
use simgpu::{Config, DeviceConfig, SharedState};
use std::sync::OnceLock;
use tessera_ffi::cuda::*;

/// Everything the simulated driver knows in this process.
pub struct Driver {
    /// Devices and behaviour, from `SIMGPU_*`.
    pub config: Config,
    /// The machine-wide state shared with every other simulated process.
    pub state: SharedState,
    /// The devices this process enumerates (`CUDA_VISIBLE_DEVICES`), by CUDA ordinal; every `usize` device
    /// in this crate is an index into it.
    pub visible: Vec<VisibleDevice>,
    /// The machine-wide MIG state, opened when `CUDA_VISIBLE_DEVICES` is set.
    pub mig: Option<MigState>,
    /// Per-device primary context bookkeeping.
    pub primary: Vec<Mutex<Primary>>,
    /// `CUcontext` handles.
    pub contexts: Registry<Context>,
    /// `CUstream` handles.
    pub streams: Registry<Stream>,
    /// `CUevent` handles.
    pub events: Registry<Event>,
    /// `CUmodule` and `CUlibrary` handles.
    pub modules: Registry<Module>,
    /// `CUfunction` and `CUkernel` handles.
    pub functions: Registry<Function>,
    /// `CUlinkState` handles (`crate::link`).
    pub links: Registry<Link>,
    /// `CUgraph` handles.
    pub graphs: Registry<Graph>,
    /// `CUgraphExec` handles.
    pub graph_execs: Registry<GraphExec>,
    /// `CUmemoryPool` handles (each device's default pool and created ones).
    pub pools: Registry<Pool>,
    /// `CUarray` and `CUmipmappedArray` handles.
    pub arrays: Registry<Array>,
    /// Linear allocations (device, managed, pool, host).
    pub memory: AddressSpace,
    /// VMM physical allocations (`CUmemGenericAllocationHandle`).
    pub physical: Registry<Physical>,
    /// VMM address reservations and what is mapped in them.
    pub reservations: Reservations,
    /// Released VMM physical memory kept for reuse.
    pub released: Released,
    /// Allocations exported for IPC, by base address: the memfd each now lives on (`crate::ipc`).
    pub ipc_exports: Mutex<std::collections::HashMap<u64, std::os::fd::OwnedFd>>,
    /// Context-local storage the runtime keeps through `cuGetExportTable` (`crate::export_table`).
    pub context_storage: Mutex<crate::export_table::Storage>,
    /// Names of the kernels this process said it does not compute (`crate::uncomputed`).
    pub said_uncomputed: Mutex<std::collections::HashSet<String>>,
}

static DRIVER: OnceLock<Result<Driver, CuResult>> = OnceLock::new();

/// The initialized driver, or `CUDA_ERROR_NOT_INITIALIZED` before a successful `cuInit`.
pub fn driver() -> CuRes<&'static Driver> {
    match DRIVER.get() {
        Some(Ok(d)) => Ok(d),
        Some(Err(e)) => Err(*e),
        None => Err(CUDA_ERROR_NOT_INITIALIZED),
    }
}

/// Initializes the driver once (and starts the checkpoint control thread); later calls return the first
/// outcome.
pub fn initialize() -> CuRes<&'static Driver> {
    static CONTROL: std::sync::Once = std::sync::Once::new();
    let d = create()?;
    CONTROL.call_once(|| crate::control::start(d));
    Ok(d)
}

fn create() -> CuRes<&'static Driver> {
    DRIVER
        .get_or_init(|| {
            let config = Config::from_env().map_err(|e| {
                eprintln!("{e}");
                CUDA_ERROR_INVALID_VALUE
            })?;
            let state = SharedState::open(&config, true).map_err(|e| {
                eprintln!("{e}");
                CUDA_ERROR_UNKNOWN
            })?;
            let (visible, mig) = visible_devices(&config)?;
            // SAFETY: registering a plain extern "C" function with no captured state.
            unsafe { libc::atexit(unregister_at_exit) };
            Ok(Driver {
                primary: visible.iter().map(|_| Mutex::new(Primary::default())).collect(),
                visible,
                mig,
                config,
                state,
                contexts: Registry::new(0xc7, CUDA_ERROR_INVALID_CONTEXT),
                streams: Registry::new(0x57, CUDA_ERROR_INVALID_HANDLE),
                events: Registry::new(0xe7, CUDA_ERROR_INVALID_HANDLE),
                modules: Registry::new(0x3d, CUDA_ERROR_INVALID_HANDLE),
                functions: Registry::new(0xf0, CUDA_ERROR_INVALID_HANDLE),
                links: Registry::new(0x1c, CUDA_ERROR_INVALID_HANDLE),
                graphs: Registry::new(0x6a, CUDA_ERROR_INVALID_HANDLE),
                graph_execs: Registry::new(0x6e, CUDA_ERROR_INVALID_HANDLE),
                pools: Registry::new(0x9c, CUDA_ERROR_INVALID_HANDLE),
                arrays: Registry::new(0xa4, CUDA_ERROR_INVALID_HANDLE),
                memory: AddressSpace::default(),
                physical: Registry::new(0x41, CUDA_ERROR_INVALID_VALUE),
                reservations: Reservations::default(),
                released: Released::default(),
                ipc_exports: Mutex::default(),
                context_storage: Mutex::default(),
                said_uncomputed: Mutex::default(),
            })
        })
        .as_ref()
        .map_err(|e| *e)
}

extern "C" fn unregister_at_exit() {
    // The real driver frees a process's device memory when it exits; so do we.
    if let Some(Ok(d)) = DRIVER.get() {
        d.state.unregister();
        if let Some(mig) = &d.mig {
            mig.release_process();
        }
    }
}

/// The visible devices, and the MIG state when `CUDA_VISIBLE_DEVICES` is set; `CUDA_ERROR_NO_DEVICE` when
/// it leaves none, as the real `cuInit` answers.
fn visible_devices(config: &Config) -> CuRes<(Vec<VisibleDevice>, Option<MigState>)> {
    let value = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let mig = match value {
        Some(_) => Some(MigState::open(config).map_err(|e| {
            eprintln!("{e}");
            CUDA_ERROR_UNKNOWN
        })?),
        None => None,
    };
    let visible = visible::resolve(value.as_deref(), config, mig.as_ref());
    if visible.is_empty() {
        return Err(CUDA_ERROR_NO_DEVICE);
    }
    Ok((visible, mig))
}

impl Driver {
    /// Checks a device ordinal and returns it as an index.
    pub fn device(&self, ordinal: i32) -> CuRes<usize> {
        usize::try_from(ordinal).ok().filter(|&d| d < self.visible.len()).ok_or(CUDA_ERROR_INVALID_DEVICE)
    }

    /// How CUDA describes device `device` (an index from [`Driver::device`]).
    pub fn device_config(&self, device: usize) -> &DeviceConfig {
        &self.visible[device].config
    }

    /// The physical device behind `device`: its index in the state file and the engine.
    pub fn physical(&self, device: usize) -> usize {
        self.visible[device].physical
    }

    /// Takes `bytes` of device `device`'s memory for this process, or fails with out-of-memory; on a MIG
    /// device from its GPU instance too.
    pub fn charge(&self, device: usize, bytes: u64) -> CuRes {
        let v = &self.visible[device];
        if let (Some(m), Some(state)) = (&v.mig, &self.mig) {
            state.charge(v.physical, m.serial, bytes).map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
        }
        if self.state.reserve(v.physical, bytes) {
            return Ok(());
        }
        if let (Some(_), Some(state)) = (&v.mig, &self.mig) {
            state.uncharge(bytes);
        }
        Err(CUDA_ERROR_OUT_OF_MEMORY)
    }

    /// Returns memory taken with [`Driver::charge`].
    pub fn uncharge(&self, device: usize, bytes: u64) {
        let v = &self.visible[device];
        self.state.release(v.physical, bytes);
        if let (Some(_), Some(state)) = (&v.mig, &self.mig) {
            state.uncharge(bytes);
        }
    }
}
