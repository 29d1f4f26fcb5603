//! The CUDA driver's process checkpoint API (driver R570+, `cuda.h` of CUDA 12.8 and later): the argument
//! structs, the process states and the C signatures, so the daemon can load the six functions from
//! `libcuda.so.1` and the simulated driver can implement them with the same layouts.
//!
//! Facts the simulated driver follows (from `cuda.h`'s documentation and from what NVIDIA's driver was seen
//! to return on drivers 580 and 595):
//! - every function takes the target's pid and is meant to be called from another process (NVIDIA's
//!   `cuda-checkpoint --action lock|checkpoint|restore|unlock --pid P` does exactly that); the caller calls
//!   `cuInit` first, like for any driver function;
//! - states: RUNNING `--lock-->` LOCKED `--checkpoint-->` CHECKPOINTED `--restore-->` LOCKED `--unlock-->`
//!   RUNNING; a call in the wrong state returns `CUDA_ERROR_ILLEGAL_STATE` and changes nothing;
//! - a pid with no process returns `CUDA_ERROR_OPERATING_SYSTEM`; a process that never initialised CUDA (or
//!   a zombie) returns `CUDA_ERROR_NOT_INITIALIZED`;
//! - a lock whose `timeoutMs` expires returns `CUDA_ERROR_NOT_READY` (the code `cuda.h` lists for the
//!   lock) and leaves the process RUNNING; `timeoutMs == 0` waits without limit;
//! - a restore that finds too little free device memory returns `CUDA_ERROR_OUT_OF_MEMORY`;
//! - checkpointing a process that holds managed (unified) memory returns `CUDA_ERROR_NOT_SUPPORTED`;
//! - a caller that may not control the target (another user, and not root: the ptrace rule) gets
//!   `CUDA_ERROR_NOT_PERMITTED` (the simulated driver's choice; not observed on real hardware);
//! - a restore leaves the process LOCKED, not RUNNING: unlock it afterwards.

use std::ffi::{c_int, c_void};

use crate::cuda::CuResult;

/// `CU_PROCESS_STATE_RUNNING`: the default state.
pub const CU_PROCESS_STATE_RUNNING: u32 = 0;
/// `CU_PROCESS_STATE_LOCKED`: further CUDA calls of the process block.
pub const CU_PROCESS_STATE_LOCKED: u32 = 1;
/// `CU_PROCESS_STATE_CHECKPOINTED`: device memory is in host memory, the device resources are released.
pub const CU_PROCESS_STATE_CHECKPOINTED: u32 = 2;
/// `CU_PROCESS_STATE_FAILED`: an uncorrectable error happened during checkpoint or restore.
pub const CU_PROCESS_STATE_FAILED: u32 = 3;

/// `CUcheckpointLockArgs`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUcheckpointLockArgs {
    /// `timeoutMs`: milliseconds to try locking for; 0 means no timeout.
    pub timeout_ms: u32,
    /// Must be zero.
    pub reserved0: u32,
    /// Must be zero.
    pub reserved1: [u64; 7],
}

/// `CUcheckpointCheckpointArgs`: reserved, must be zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUcheckpointCheckpointArgs {
    /// Must be zero.
    pub reserved: [u64; 8],
}

/// `CUcheckpointRestoreArgs` as CUDA 13.0 lays it out (CUDA 12.8's has only `reserved[8]`, the same 64
/// bytes): an optional list of (old GPU UUID, new GPU UUID) pairs to remap devices on restore.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUcheckpointRestoreArgs {
    /// `gpuPairs` (`CUcheckpointGpuPair *`): NULL for no remapping.
    pub gpu_pairs: *const c_void,
    /// `gpuPairsCount`: number of pairs.
    pub gpu_pairs_count: u32,
    /// Must be zero (`char reserved[52 - sizeof(CUcheckpointGpuPair *)]`).
    pub reserved: [u8; 44],
    /// Must be zero.
    pub reserved1: u64,
}

/// `CUcheckpointUnlockArgs`: reserved, must be zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUcheckpointUnlockArgs {
    /// Must be zero.
    pub reserved: [u64; 8],
}

const _: () = {
    assert!(size_of::<CUcheckpointLockArgs>() == 64);
    assert!(size_of::<CUcheckpointCheckpointArgs>() == 64);
    assert!(size_of::<CUcheckpointRestoreArgs>() == 64);
    assert!(std::mem::offset_of!(CUcheckpointRestoreArgs, gpu_pairs_count) == 8);
    assert!(std::mem::offset_of!(CUcheckpointRestoreArgs, reserved1) == 56);
    assert!(size_of::<CUcheckpointUnlockArgs>() == 64);
};

/// `cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)`.
pub type LockFn = unsafe extern "C" fn(c_int, *mut CUcheckpointLockArgs) -> CuResult;
/// `cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)`.
pub type CheckpointFn = unsafe extern "C" fn(c_int, *mut CUcheckpointCheckpointArgs) -> CuResult;
/// `cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)`.
pub type RestoreFn = unsafe extern "C" fn(c_int, *mut CUcheckpointRestoreArgs) -> CuResult;
/// `cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)`.
pub type UnlockFn = unsafe extern "C" fn(c_int, *mut CUcheckpointUnlockArgs) -> CuResult;
/// `cuCheckpointProcessGetState(int pid, CUprocessState *state)` (the state is a 32-bit C enum).
pub type GetStateFn = unsafe extern "C" fn(c_int, *mut u32) -> CuResult;
/// `cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)`.
pub type GetRestoreThreadIdFn = unsafe extern "C" fn(c_int, *mut c_int) -> CuResult;

/// Exported names of the six functions (none has a versioned `_v2` name).
pub const LOCK: &str = "cuCheckpointProcessLock";
/// See [`LOCK`].
pub const CHECKPOINT: &str = "cuCheckpointProcessCheckpoint";
/// See [`LOCK`].
pub const RESTORE: &str = "cuCheckpointProcessRestore";
/// See [`LOCK`].
pub const UNLOCK: &str = "cuCheckpointProcessUnlock";
/// See [`LOCK`].
pub const GET_STATE: &str = "cuCheckpointProcessGetState";
/// See [`LOCK`].
pub const GET_RESTORE_THREAD_ID: &str = "cuCheckpointProcessGetRestoreThreadId";
