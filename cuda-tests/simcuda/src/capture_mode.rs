//! Stream capture interaction modes, as the CUDA documentation of `cuThreadExchangeStreamCaptureMode`
//! describes them: each thread has a mode (global by default), each capture the mode it was begun in.
//! A "potentially unsafe" call (here: `cuMemAlloc_v2`, `cuEventQuery`, `cuEventSynchronize`,
//! `cuStreamSynchronize`, `cuCtxSynchronize`) is refused with `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, and
//! the captures that prohibit it invalidated (their `cuStreamEndCapture` then fails with
//! `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`), when the calling thread is
//! - in global mode, and has a capture of its own not begun relaxed, or another thread has one begun in
//!   global mode;
//! - in thread-local mode, and has a capture of its own not begun relaxed.
//!
//! A thread in relaxed mode may make any of them. A capture not begun relaxed must be ended by the
//! thread that began it (`CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD` otherwise).

use crate::guard::{CuRes, entry, out};
use parking_lot::Mutex;
use std::cell::Cell;
use std::ffi::c_int;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::ThreadId;
use tessera_ffi::cuda::*;

/// `CU_STREAM_CAPTURE_MODE_GLOBAL` (thread-local mode, 1, lies between it and relaxed).
pub const GLOBAL: c_int = 0;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
pub const RELAXED: c_int = 2;

thread_local! {
    static MODE: Cell<c_int> = const { Cell::new(GLOBAL) };
}

/// One capture in progress, as the mode rules see it.
struct Active {
    id: u64,
    mode: c_int,
    thread: ThreadId,
    invalid: Arc<AtomicBool>,
}

static ACTIVE: Mutex<Vec<Active>> = Mutex::new(Vec::new());

/// How a capture began: its mode, thread, and whether an unsafe call has invalidated it.
pub struct Begun {
    /// The capture's mode.
    pub mode: c_int,
    /// The thread that began it.
    pub thread: ThreadId,
    /// Set when a prohibited call invalidated it.
    pub invalid: Arc<AtomicBool>,
}

/// Checks `mode` and registers capture `id` begun in it by the calling thread.
pub fn begin(id: u64, mode: c_int) -> CuRes<Begun> {
    if !(GLOBAL..=RELAXED).contains(&mode) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (thread, invalid) = (std::thread::current().id(), Arc::new(AtomicBool::new(false)));
    ACTIVE.lock().push(Active { id, mode, thread, invalid: invalid.clone() });
    Ok(Begun { mode, thread, invalid })
}

/// Whether the calling thread may end a capture begun as `b`.
pub fn may_end(b: &Begun) -> CuRes {
    if b.mode != RELAXED && b.thread != std::thread::current().id() {
        return Err(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    }
    Ok(())
}

/// Forgets capture `id` (ended); `Err(INVALIDATED)` if an unsafe call invalidated it meanwhile.
pub fn end(id: u64, b: &Begun) -> CuRes {
    ACTIVE.lock().retain(|a| a.id != id);
    if b.invalid.load(Ordering::Acquire) { Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) } else { Ok(()) }
}

/// The check a potentially unsafe call makes first (see the module documentation).
pub fn unsafe_call() -> CuRes {
    let mode = MODE.with(Cell::get);
    if mode == RELAXED {
        return Ok(());
    }
    let me = std::thread::current().id();
    let active = ACTIVE.lock();
    let mut refused = false;
    for a in active.iter() {
        let own = a.thread == me && a.mode != RELAXED;
        let others = mode == GLOBAL && a.thread != me && a.mode == GLOBAL;
        if own || others {
            a.invalid.store(true, Ordering::Release);
            refused = true;
        }
    }
    if refused { Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) } else { Ok(()) }
}

/// `cuThreadExchangeStreamCaptureMode`: sets the calling thread's mode, handing back the previous one.
#[unsafe(no_mangle)]
pub extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut c_int) -> CuResult {
    entry(|| {
        if mode.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-null, and the caller's valid in/out value by the API's contract.
        let new = unsafe { mode.read() };
        if !(GLOBAL..=RELAXED).contains(&new) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        out(mode, MODE.with(|m| m.replace(new)))
    })
}
