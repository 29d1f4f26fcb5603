//! The process checkpoint API (`cuCheckpointProcess*`, CUDA 12.8+), requester side: each call names a
//! process by pid, finds its entry in the machine-wide state file, writes a request into it, wakes the
//! process's control thread ([`crate::control`]) and sleeps until it answers. A target that dies meanwhile
//! ends the wait with an error. Facts followed: see `tessera_ffi::checkpoint`.

use crate::control::{OP_CHECKPOINT, OP_LOCK, OP_RESTORE, OP_UNLOCK};
use crate::driver::{Driver, driver};
use crate::guard::{CuRes, input, out, ungated};
use parking_lot::Mutex;
use simgpu::process;
use simgpu::state::ProcState;
use std::ffi::c_int;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tessera_ffi::checkpoint::*;
use tessera_ffi::cuda::*;
use tessera_region::futex;
use tessera_region::pid_ns::ProcView;

/// Why a pid has no usable entry: no such process (`CUDA_ERROR_OPERATING_SYSTEM`, as the real driver
/// answers) or a process without CUDA, or a zombie (`CUDA_ERROR_NOT_INITIALIZED`).
fn absent(pid: u32) -> CuResult {
    if std::path::Path::new(&format!("/proc/{pid}")).exists() {
        CUDA_ERROR_NOT_INITIALIZED
    } else {
        CUDA_ERROR_OPERATING_SYSTEM
    }
}

/// May this process control `pid`? As for ptrace: the same user, or root.
fn permitted(pid: u32) -> CuRes {
    let Ok(meta) = std::fs::metadata(format!("/proc/{pid}")) else { return Err(absent(pid)) };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if me == 0 || meta.uid() == me { Ok(()) } else { Err(CUDA_ERROR_NOT_PERMITTED) }
}

/// The target's entry, once its driver has initialised and its control thread runs.
fn target(d: &Driver, pid: c_int) -> CuRes<(&ProcState, u32)> {
    let pid = u32::try_from(pid).ok().filter(|&p| p > 0).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    permitted(pid)?;
    let entry = d.state.process(pid).ok_or_else(|| absent(pid))?;
    if entry.checkpoint.thread.load(Ordering::Acquire) == 0 {
        return Err(CUDA_ERROR_NOT_INITIALIZED);
    }
    Ok((entry, pid))
}

/// True while `entry` still belongs to the live process `pid` (its pid as the caller sees it).
fn alive(entry: &ProcState, pid: u32) -> bool {
    entry.belongs_to(pid, &ProcView::new())
}

/// Sends one request to `pid`'s control thread and waits for its result.
fn request(pid: c_int, op: u32, argument: u32) -> CuRes {
    /// Requests from this process go one at a time (the owner word below serializes processes).
    static LOCAL: Mutex<()> = Mutex::new(());
    let d = driver()?;
    let (entry, pid) = target(d, pid)?;
    let words = &entry.checkpoint;
    let _local = LOCAL.lock();
    let me = process::own_pid();
    // Take the target's owner word; a requester that died holding it loses it.
    loop {
        match words.owner.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(holder) if !process::is_running(holder) => {
                let _ = words.owner.compare_exchange(holder, me, Ordering::AcqRel, Ordering::Acquire);
            }
            Err(_) if !alive(entry, pid) => return Err(absent(pid)),
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    struct Owner<'a>(&'a std::sync::atomic::AtomicU32);
    impl Drop for Owner<'_> {
        fn drop(&mut self) {
            self.0.store(0, Ordering::Release);
        }
    }
    let _owner = Owner(&words.owner);
    words.argument.store(argument, Ordering::Release);
    let previous = words.request.load(Ordering::Acquire);
    let word = ((previous >> 8).wrapping_add(1) << 8) | op;
    words.request.store(word, Ordering::Release);
    futex::wake_all(&words.request);
    loop {
        let done = words.done.load(Ordering::Acquire);
        if done == word {
            return match words.result.load(Ordering::Acquire) {
                CUDA_SUCCESS => Ok(()),
                code => Err(code),
            };
        }
        if !alive(entry, pid) {
            return Err(absent(pid));
        }
        futex::wait(&words.done, done, Duration::from_millis(50));
    }
}

/// Reads optional reserved-only arguments: NULL, or a structure whose reserved words are all zero.
fn reserved_zero<T: Copy>(args: *const T, words: impl Fn(&T) -> bool) -> CuRes {
    if args.is_null() {
        return Ok(());
    }
    if words(&input(args)?) { Ok(()) } else { Err(CUDA_ERROR_INVALID_VALUE) }
}

/// `cuCheckpointProcessLock`: blocks further CUDA calls of `pid` and waits until its submitted work is
/// done; RUNNING → LOCKED. A `timeoutMs` that expires first returns `CUDA_ERROR_NOT_READY` and leaves the
/// process RUNNING.
#[unsafe(no_mangle)]
pub extern "C" fn cuCheckpointProcessLock(pid: c_int, args: *mut CUcheckpointLockArgs) -> CuResult {
    ungated(|| {
        reserved_zero(args, |a| a.reserved0 == 0 && a.reserved1 == [0; 7])?;
        let timeout = if args.is_null() { 0 } else { input(args)?.timeout_ms };
        request(pid, OP_LOCK, timeout)
    })
}

/// `cuCheckpointProcessCheckpoint`: copies the locked process's device memory into its host memory and
/// releases the device memory; LOCKED → CHECKPOINTED.
#[unsafe(no_mangle)]
pub extern "C" fn cuCheckpointProcessCheckpoint(pid: c_int, args: *mut CUcheckpointCheckpointArgs) -> CuResult {
    ungated(|| {
        reserved_zero(args, |a| a.reserved == [0; 8])?;
        request(pid, OP_CHECKPOINT, 0)
    })
}

/// `cuCheckpointProcessRestore`: takes the device memory back and restores its contents at the same
/// addresses; CHECKPOINTED → LOCKED. GPU remapping (`gpuPairs`) is not simulated:
/// `CUDA_ERROR_NOT_SUPPORTED`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCheckpointProcessRestore(pid: c_int, args: *mut CUcheckpointRestoreArgs) -> CuResult {
    ungated(|| {
        if !args.is_null() {
            let a = input(args)?;
            if !a.gpu_pairs.is_null() || a.gpu_pairs_count != 0 {
                return Err(CUDA_ERROR_NOT_SUPPORTED);
            }
            if a.reserved != [0; 44] || a.reserved1 != 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
        }
        request(pid, OP_RESTORE, 0)
    })
}

/// `cuCheckpointProcessUnlock`: lets the process make CUDA calls again; LOCKED → RUNNING.
#[unsafe(no_mangle)]
pub extern "C" fn cuCheckpointProcessUnlock(pid: c_int, args: *mut CUcheckpointUnlockArgs) -> CuResult {
    ungated(|| {
        reserved_zero(args, |a| a.reserved == [0; 8])?;
        request(pid, OP_UNLOCK, 0)
    })
}

/// `cuCheckpointProcessGetState`: the process's `CUprocessState`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCheckpointProcessGetState(pid: c_int, state: *mut u32) -> CuResult {
    ungated(|| {
        let (entry, _) = target(driver()?, pid)?;
        out(state, entry.checkpoint.state.load(Ordering::Acquire))
    })
}

/// `cuCheckpointProcessGetRestoreThreadId`: the thread id of the process's control thread.
#[unsafe(no_mangle)]
pub extern "C" fn cuCheckpointProcessGetRestoreThreadId(pid: c_int, tid: *mut c_int) -> CuResult {
    ungated(|| {
        let (entry, _) = target(driver()?, pid)?;
        out(tid, entry.checkpoint.thread.load(Ordering::Acquire) as c_int)
    })
}
