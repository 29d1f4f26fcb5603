//! The target side of the process checkpoint API: a control thread, started by `cuInit`, sleeps on the
//! process's request word in the machine-wide state file and carries out the requests other processes
//! (or this one) make with `cuCheckpointProcess*` (see [`crate::checkpoint`]). Its thread id is what
//! `cuCheckpointProcessGetRestoreThreadId` returns, as the real driver's restore thread.

use crate::driver::Driver;
use crate::{gate, suspend};
use simgpu::state::CheckpointWords;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tessera_ffi::checkpoint::*;
use tessera_ffi::cuda::*;
use tessera_region::futex;

/// Request operations (the low 8 bits of the request word).
pub(crate) const OP_LOCK: u32 = 1;
/// See [`OP_LOCK`].
pub(crate) const OP_CHECKPOINT: u32 = 2;
/// See [`OP_LOCK`].
pub(crate) const OP_RESTORE: u32 = 3;
/// See [`OP_LOCK`].
pub(crate) const OP_UNLOCK: u32 = 4;

/// Starts the process's control thread (once, from `cuInit`).
pub(crate) fn start(d: &'static Driver) {
    if d.state.me().is_none() {
        return;
    }
    // The thread is the driver's own: every signal stays blocked in it from its first instruction (the
    // program's handlers and `sigwait` threads expect signals to reach their threads, not ours), so it is
    // created while the caller blocks them all, and the caller's mask is put back.
    // SAFETY: sigset_t is plain data, filled by sigfillset; pthread_sigmask changes only this thread's
    // mask and writes the old one into our variable.
    let spawned = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        let spawned = std::thread::Builder::new().name("simgpu-restore".into()).spawn(move || serve(d));
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        spawned
    };
    if spawned.is_err() {
        eprintln!("simgpu: cannot start the checkpoint control thread; this process cannot be checkpointed");
    }
}

fn serve(d: &'static Driver) {
    let Some(me) = d.state.me() else { return };
    let words = &me.checkpoint;
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    let mut handled = words.done.load(Ordering::Acquire);
    words.thread.store(tid, Ordering::Release);
    loop {
        let request = words.request.load(Ordering::Acquire);
        if request == handled {
            futex::wait(&words.request, request, Duration::from_secs(60));
            continue;
        }
        let argument = words.argument.load(Ordering::Acquire);
        let result = execute(d, words, request & 0xff, argument);
        words.result.store(result, Ordering::Release);
        words.done.store(request, Ordering::Release);
        futex::wake_all(&words.done);
        handled = request;
    }
}

/// Carries out one request, moving the state machine; a request in the wrong state changes nothing.
fn execute(d: &Driver, words: &CheckpointWords, op: u32, argument: u32) -> CuResult {
    let state = words.state.load(Ordering::Acquire);
    let set = |s: u32| words.state.store(s, Ordering::Release);
    match (op, state) {
        (OP_LOCK, CU_PROCESS_STATE_RUNNING) => {
            let deadline = (argument > 0).then(|| Instant::now() + Duration::from_millis(argument as u64));
            if gate::close(d, deadline) {
                set(CU_PROCESS_STATE_LOCKED);
                CUDA_SUCCESS
            } else {
                CUDA_ERROR_NOT_READY
            }
        }
        (OP_CHECKPOINT, CU_PROCESS_STATE_LOCKED) => match suspend::checkpoint(d) {
            Ok(()) => {
                set(CU_PROCESS_STATE_CHECKPOINTED);
                CUDA_SUCCESS
            }
            Err(e) => e,
        },
        (OP_RESTORE, CU_PROCESS_STATE_CHECKPOINTED) => match suspend::restore(d) {
            Ok(()) => {
                set(CU_PROCESS_STATE_LOCKED);
                CUDA_SUCCESS
            }
            Err(CUDA_ERROR_OUT_OF_MEMORY) => CUDA_ERROR_OUT_OF_MEMORY,
            Err(e) => {
                set(CU_PROCESS_STATE_FAILED);
                e
            }
        },
        (OP_UNLOCK, CU_PROCESS_STATE_LOCKED) => {
            set(CU_PROCESS_STATE_RUNNING);
            gate::open();
            CUDA_SUCCESS
        }
        (OP_LOCK..=OP_UNLOCK, _) => CUDA_ERROR_ILLEGAL_STATE,
        _ => CUDA_ERROR_INVALID_VALUE,
    }
}
