//! The driver's process checkpoint API (`cuCheckpointProcess*`, driver r570+ / CUDA 12.8), called by pid
//! from the daemon, as NVIDIA's `cuda-checkpoint` tool calls it: lock (new CUDA calls of the process block,
//! its submitted work finishes), checkpoint (its device memory goes to host memory and the device's
//! resources are released), restore (back at the same addresses), unlock, and the process's state.
//!
//! [`Checkpointer`] is what the daemon's snapshots ([`crate::snapshot::sequences`]) need of it, so that their state
//! machine is tested with a fake; [`DriverCheckpoint`] is the driver library the daemon's devices come
//! from, loaded with `libloading` (the simulated driver on a machine without a GPU).

use libloading::Library;
use std::ffi::{c_int, c_uint};
use std::time::Duration;
use tessera_ffi::checkpoint::{
    CHECKPOINT, CUcheckpointLockArgs, CheckpointFn, GET_STATE, GetStateFn, LOCK, LockFn, RESTORE, RestoreFn, UNLOCK,
    UnlockFn,
};

/// `CUDA_ERROR_OUT_OF_MEMORY`: a restore found too little device memory.
pub const OUT_OF_MEMORY: u32 = 2;

/// `CUDA_ERROR_NOT_INITIALIZED`: the process has not initialized CUDA (nothing of it on the device).
pub const NOT_INITIALIZED: u32 = 3;

/// What the driver says of a process (`CUprocessState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessState {
    /// Making CUDA calls (`CU_PROCESS_STATE_RUNNING`, 0).
    Running,
    /// Locked: its CUDA calls block (`CU_PROCESS_STATE_LOCKED`, 1).
    Locked,
    /// Its device memory is in host memory (`CU_PROCESS_STATE_CHECKPOINTED`, 2).
    Checkpointed,
    /// A checkpoint or restore failed beyond repair (`CU_PROCESS_STATE_FAILED`, 3).
    Failed,
    /// A value this daemon does not know (a newer driver).
    Other(u32),
}

impl ProcessState {
    /// The state of the driver's `CUprocessState` value `v`.
    pub fn from_raw(v: u32) -> ProcessState {
        match v {
            0 => ProcessState::Running,
            1 => ProcessState::Locked,
            2 => ProcessState::Checkpointed,
            3 => ProcessState::Failed,
            v => ProcessState::Other(v),
        }
    }
}

/// A failed checkpoint call: which call, on which process, and the driver's `CUresult`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    /// The entry point (`cuCheckpointProcessLock`).
    pub call: &'static str,
    /// The process.
    pub pid: u32,
    /// The driver's code (0 when the call could not be made at all: see `message`).
    pub code: u32,
    /// Why, when the call could not be made (no such entry point in this driver).
    pub message: Option<String>,
}

impl CallError {
    /// The device lacked memory (a restore).
    pub fn out_of_memory(&self) -> bool {
        self.code == OUT_OF_MEMORY
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.message {
            Some(m) => write!(f, "{} on pid {}: {m}", self.call, self.pid),
            None => write!(f, "{} on pid {} failed with {}", self.call, self.pid, code_name(self.code)),
        }
    }
}

/// The name of a `CUresult`, with its number (`CUDA_ERROR_NOT_READY (600)`).
pub fn code_name(code: u32) -> String {
    match tessera_ffi::cuda::describe(code) {
        Some((name, _)) => format!("{name} ({code})"),
        None => format!("CUDA error {code}"),
    }
}

/// The checkpoint calls, by pid.
pub trait Checkpointer: Send + Sync {
    /// `cuCheckpointProcessLock`, waiting at most `timeout` for the process's work to finish.
    fn lock(&self, pid: u32, timeout: Duration) -> Result<(), CallError>;
    /// `cuCheckpointProcessCheckpoint` of a locked process.
    fn checkpoint(&self, pid: u32) -> Result<(), CallError>;
    /// `cuCheckpointProcessRestore` of a checkpointed process (it stays locked).
    fn restore(&self, pid: u32) -> Result<(), CallError>;
    /// `cuCheckpointProcessUnlock` of a locked process.
    fn unlock(&self, pid: u32) -> Result<(), CallError>;
    /// `cuCheckpointProcessGetState`.
    fn state(&self, pid: u32) -> Result<ProcessState, CallError>;
}

/// A shared checkpointer is one (the tests keep a handle on their fake driver).
impl<T: Checkpointer> Checkpointer for std::sync::Arc<T> {
    fn lock(&self, pid: u32, timeout: Duration) -> Result<(), CallError> {
        (**self).lock(pid, timeout)
    }
    fn checkpoint(&self, pid: u32) -> Result<(), CallError> {
        (**self).checkpoint(pid)
    }
    fn restore(&self, pid: u32) -> Result<(), CallError> {
        (**self).restore(pid)
    }
    fn unlock(&self, pid: u32) -> Result<(), CallError> {
        (**self).unlock(pid)
    }
    fn state(&self, pid: u32) -> Result<ProcessState, CallError> {
        (**self).state(pid)
    }
}

/// Why the driver's checkpoint calls cannot be had; each names the library.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The library cannot be loaded.
    #[error("cannot load the driver {library}: {source}")]
    Load {
        /// The library.
        library: String,
        /// The loader's reason.
        source: libloading::Error,
    },
    /// The library lacks an entry point (a driver older than the API).
    #[error("the driver {library} has no {name} ({source}): process checkpoints need driver r570 or newer (CUDA 12.8)")]
    Missing {
        /// The library.
        library: String,
        /// The entry point.
        name: &'static str,
        /// The loader's reason.
        source: libloading::Error,
    },
    /// `cuInit` failed.
    #[error("cuInit of the driver {library} failed with {}", code_name(*code))]
    Init {
        /// The library.
        library: String,
        /// Its `CUresult`.
        code: u32,
    },
}

/// The driver library's checkpoint entry points.
pub struct DriverCheckpoint {
    lock: LockFn,
    checkpoint: CheckpointFn,
    restore: RestoreFn,
    unlock: UnlockFn,
    state: GetStateFn,
    // The functions above point into it: kept loaded as long as they may be called.
    _lib: Library,
}

impl DriverCheckpoint {
    /// Loads `library` (the driver the daemon's devices come from), initializes it, and resolves the five
    /// checkpoint calls; an error names the library and, for a driver older than the API, the missing call.
    pub fn open(library: &str) -> Result<DriverCheckpoint, LoadError> {
        // SAFETY: loading the CUDA driver runs its initializers, which is what every CUDA program does (the
        // daemon has loaded this very library already to count the devices).
        let lib = unsafe { Library::new(library) }
            .map_err(|source| LoadError::Load { library: library.to_string(), source })?;
        let missing = |name: &'static str, source| LoadError::Missing { library: library.to_string(), name, source };
        // SAFETY: each type is the entry point's signature in cuda.h; the pointers are used while `lib` lives.
        unsafe {
            let init =
                lib.get::<unsafe extern "C" fn(c_uint) -> c_uint>(b"cuInit").map_err(|e| missing("cuInit", e))?;
            let code = init(0);
            if code != 0 {
                return Err(LoadError::Init { library: library.to_string(), code });
            }
            let lock = *lib.get::<LockFn>(LOCK.as_bytes()).map_err(|e| missing(LOCK, e))?;
            let checkpoint = *lib.get::<CheckpointFn>(CHECKPOINT.as_bytes()).map_err(|e| missing(CHECKPOINT, e))?;
            let restore = *lib.get::<RestoreFn>(RESTORE.as_bytes()).map_err(|e| missing(RESTORE, e))?;
            let unlock = *lib.get::<UnlockFn>(UNLOCK.as_bytes()).map_err(|e| missing(UNLOCK, e))?;
            let state = *lib.get::<GetStateFn>(GET_STATE.as_bytes()).map_err(|e| missing(GET_STATE, e))?;
            Ok(DriverCheckpoint { lock, checkpoint, restore, unlock, state, _lib: lib })
        }
    }
}

/// `Ok` for `CUDA_SUCCESS`, else the error of `call` on `pid`.
fn checked(call: &'static str, pid: u32, code: c_uint) -> Result<(), CallError> {
    if code == 0 { Ok(()) } else { Err(CallError { call, pid, code, message: None }) }
}

impl Checkpointer for DriverCheckpoint {
    fn lock(&self, pid: u32, timeout: Duration) -> Result<(), CallError> {
        // At least 1 ms: 0 would mean no timeout at all.
        let timeout_ms = timeout.as_millis().clamp(1, u32::MAX as u128) as c_uint;
        let mut args = CUcheckpointLockArgs { timeout_ms, ..CUcheckpointLockArgs::default() };
        // SAFETY: `args` is a valid CUcheckpointLockArgs for the call's duration.
        checked("cuCheckpointProcessLock", pid, unsafe { (self.lock)(pid as c_int, &mut args) })
    }

    fn checkpoint(&self, pid: u32) -> Result<(), CallError> {
        // SAFETY: the arguments are optional; NULL asks for the defaults.
        checked("cuCheckpointProcessCheckpoint", pid, unsafe { (self.checkpoint)(pid as c_int, std::ptr::null_mut()) })
    }

    fn restore(&self, pid: u32) -> Result<(), CallError> {
        // SAFETY: as above (no GPU remapping).
        checked("cuCheckpointProcessRestore", pid, unsafe { (self.restore)(pid as c_int, std::ptr::null_mut()) })
    }

    fn unlock(&self, pid: u32) -> Result<(), CallError> {
        // SAFETY: as above.
        checked("cuCheckpointProcessUnlock", pid, unsafe { (self.unlock)(pid as c_int, std::ptr::null_mut()) })
    }

    fn state(&self, pid: u32) -> Result<ProcessState, CallError> {
        let mut state: c_uint = 0;
        // SAFETY: `state` is a valid out-pointer for a CUprocessState (a C enum, 32 bits).
        checked("cuCheckpointProcessGetState", pid, unsafe { (self.state)(pid as c_int, &mut state) })?;
        Ok(ProcessState::from_raw(state))
    }
}

/// No checkpoint API: every call fails with why (the driver could not be loaded, or is too old).
pub struct Unavailable(pub String);

impl Unavailable {
    fn fail(&self, call: &'static str, pid: u32) -> CallError {
        CallError { call, pid, code: 0, message: Some(self.0.clone()) }
    }
}

impl Checkpointer for Unavailable {
    fn lock(&self, pid: u32, _: Duration) -> Result<(), CallError> {
        Err(self.fail("cuCheckpointProcessLock", pid))
    }
    fn checkpoint(&self, pid: u32) -> Result<(), CallError> {
        Err(self.fail("cuCheckpointProcessCheckpoint", pid))
    }
    fn restore(&self, pid: u32) -> Result<(), CallError> {
        Err(self.fail("cuCheckpointProcessRestore", pid))
    }
    fn unlock(&self, pid: u32) -> Result<(), CallError> {
        Err(self.fail("cuCheckpointProcessUnlock", pid))
    }
    fn state(&self, pid: u32) -> Result<ProcessState, CallError> {
        Err(self.fail("cuCheckpointProcessGetState", pid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_codes_read_as_the_driver_documents_them() {
        let states: Vec<ProcessState> = (0..5).map(ProcessState::from_raw).collect();
        use ProcessState::*;
        assert_eq!(states, [Running, Locked, Checkpointed, Failed, Other(4)]);
        assert_eq!(code_name(2), "CUDA_ERROR_OUT_OF_MEMORY (2)");
        assert_eq!(code_name(12345), "CUDA error 12345");
        let e = CallError { call: "cuCheckpointProcessLock", pid: 7, code: 909, message: None };
        assert_eq!(e.to_string(), "cuCheckpointProcessLock on pid 7 failed with CUDA_ERROR_TIMEOUT (909)");
        assert!(!e.out_of_memory());
    }

    #[test]
    fn a_library_without_the_api_is_an_error_naming_it() {
        let e = DriverCheckpoint::open("/nonexistent/libcuda.so.1").err().unwrap().to_string();
        assert!(e.contains("/nonexistent/libcuda.so.1"), "{e}");
        let e = DriverCheckpoint::open("libc.so.6").err().unwrap().to_string();
        assert!(e.contains("has no cuInit") && e.contains("r570"), "{e}");
        let u = Unavailable("no driver".into());
        assert_eq!(u.lock(3, Duration::ZERO).unwrap_err().to_string(), "cuCheckpointProcessLock on pid 3: no driver");
    }
}
