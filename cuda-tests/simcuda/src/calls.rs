//! Simulator instrumentation, not part of the CUDA API: every driver entry point a process calls is
//! counted, on the calling thread and for the whole process, so a benchmark can tell how many driver calls
//! an interposer (the shim) made on a program's behalf: the calls counted on the program's thread minus
//! those the program itself made. Read with the exported `simgpu_driver_calls` (found with `dlsym`; the
//! real driver has no such symbol).
//!
//! Counting is a thread-local increment and one relaxed atomic add: no lock, so the count does not change
//! which thread waits for which.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

/// Calls made by every thread of the process.
static PROCESS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Calls made by this thread.
    static THREAD: Cell<u64> = const { Cell::new(0) };
}

/// Counts one driver call on the calling thread.
pub(crate) fn count() {
    // A thread being torn down has no counter any more; its calls still count for the process.
    let _ = THREAD.try_with(|c| c.set(c.get() + 1));
    PROCESS.fetch_add(1, Ordering::Relaxed);
}

/// `simgpu_driver_calls(uint64_t *thread, uint64_t *process)`: writes how many driver API calls the
/// calling thread and the whole process have made since the driver library was loaded (either pointer may
/// be NULL). Every exported `cu*` function counts, including unsupported stubs and calls made through
/// pointers from `cuGetProcAddress`; this function itself does not. Returns 0.
#[unsafe(no_mangle)]
pub extern "C" fn simgpu_driver_calls(thread: *mut u64, process: *mut u64) -> c_int {
    std::panic::catch_unwind(|| {
        if !thread.is_null() {
            let n = THREAD.try_with(Cell::get).unwrap_or(0);
            // SAFETY: non-NULL; the caller passes a writable uint64_t.
            unsafe { thread.write_unaligned(n) };
        }
        if !process.is_null() {
            // SAFETY: as above.
            unsafe { process.write_unaligned(PROCESS.load(Ordering::Relaxed)) };
        }
        0
    })
    .unwrap_or(-1)
}
