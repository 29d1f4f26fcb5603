//! Stream capture, known without asking the driver on every launch: the shim sees every call that
//! begins a capture (`cuStreamBeginCapture`, `_v2`, `cuStreamBeginCaptureToGraph`, and their `_ptsz`
//! variants) and every one that ends one (`cuStreamEndCapture`, `_ptsz`), and counts the captures in
//! progress in the process. While the count is zero (the common case) no stream can be capturing, and a
//! launch asks the driver nothing; otherwise it asks the driver about its stream (`cuStreamIsCapturing`),
//! because a stream that is not itself capturing can join another's capture through `cuStreamWaitEvent`,
//! which no per-stream record of the shim would see.
//!
//! The count errs only upwards: a begin is counted before the driver is called (a launch that another
//! thread orders after a successful begin always sees it), and given back when the driver refuses it; an
//! end is uncounted only when the driver says it ended a capture. A count left too high (a stream
//! destroyed mid-capture) costs one driver call per launch, never a launch gated inside a capture.

use crate::guard::{Res, Status, status};
use crate::real::{
    cuStreamIsCapturing as STREAM_IS_CAPTURING, cuThreadExchangeStreamCaptureMode as EXCHANGE_CAPTURE_MODE,
};
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_ffi::cuda::{CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CUDA_ERROR_STREAM_CAPTURE_UNMATCHED};
use tessera_ffi::sys::CUstream;

/// Captures begun in this process and not yet ended.
static IN_PROGRESS: AtomicUsize = AtomicUsize::new(0);

/// `CU_STREAM_CAPTURE_STATUS_NONE`.
const CAPTURE_NONE: c_int = 0;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
const MODE_RELAXED: c_int = 2;

/// Captures in progress in the process (as far as the shim has seen begin and end).
pub fn in_progress() -> usize {
    IN_PROGRESS.load(Ordering::Acquire)
}

/// Whether `stream` is being captured into a graph (nothing runs then, so nothing is gated or measured);
/// `None` when the driver cannot tell (the launch is passed through for the driver to judge). Asks the
/// driver only while some capture is in progress in the process.
pub fn capturing(stream: CUstream) -> Option<bool> {
    if in_progress() == 0 {
        return Some(false);
    }
    let Some(f) = STREAM_IS_CAPTURING.get() else { return Some(false) };
    let mut state: c_int = CAPTURE_NONE;
    // SAFETY: cuStreamIsCapturing's C signature; `state` is a valid output.
    (unsafe { f(stream, &mut state) } == 0).then_some(state != CAPTURE_NONE)
}

/// Swaps the calling thread's capture mode for `mode`, returning the previous one (`None` when the
/// driver has no capture modes).
fn exchange_mode(mode: c_int) -> Option<c_int> {
    let f = EXCHANGE_CAPTURE_MODE.get()?;
    let mut m = mode;
    // SAFETY: cuThreadExchangeStreamCaptureMode's C signature; `m` is a valid in/out value.
    (unsafe { f(&mut m) } == 0).then_some(m)
}

/// Puts the calling thread (one of the shim's own) in relaxed capture mode for good, so that its calls
/// never invalidate a program's global-mode capture (best effort: drivers without the call have no modes).
pub fn relax_thread() {
    let _ = exchange_mode(MODE_RELAXED);
}

/// Runs `f`, which makes the shim's own driver calls on a program's thread, in relaxed capture mode while
/// a capture is in progress, so that they never invalidate it; the thread's mode is restored after.
pub fn relaxed<T>(f: impl FnOnce() -> T) -> T {
    if in_progress() == 0 {
        return f();
    }
    let previous = exchange_mode(MODE_RELAXED);
    let out = f();
    if let Some(mode) = previous {
        let _ = exchange_mode(mode);
    }
    out
}

/// Counts a capture begun by `real` (given back if the driver refuses it).
fn begun(real: impl FnOnce() -> Status) -> Res {
    IN_PROGRESS.fetch_add(1, Ordering::AcqRel);
    let result = status(real());
    if result.is_err() {
        uncount();
    }
    result
}

fn uncount() {
    let _ = IN_PROGRESS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
}

/// `cuStreamBeginCapture` and `_ptsz`.
pub fn begin(_stream: CUstream, real: impl FnOnce() -> Status) -> Res {
    begun(real)
}

/// `cuStreamBeginCapture_v2` and `_ptsz` (every capture mode alike).
pub fn begin_v2(_stream: CUstream, _mode: c_int, real: impl FnOnce() -> Status) -> Res {
    begun(real)
}

/// `cuStreamBeginCaptureToGraph` and `_ptsz`.
pub fn begin_to_graph<G, N, D>(
    _stream: CUstream,
    _graph: G,
    _deps: N,
    _data: D,
    _count: usize,
    _mode: c_int,
    real: impl FnOnce() -> Status,
) -> Res {
    begun(real)
}

/// `cuStreamEndCapture` and `_ptsz`: a capture ends also when the driver reports it invalidated or
/// unmatched (the graph is then not made, but the stream is no longer capturing).
pub fn end<G>(_stream: CUstream, _graph: G, real: impl FnOnce() -> Status) -> Res {
    let result = status(real());
    if matches!(result, Ok(()) | Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED | CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)) {
        uncount();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_follows_begins_and_ends_and_never_drops_below_zero() {
        let before = in_progress();
        begin(std::ptr::null_mut(), || 0).unwrap();
        begin_v2(std::ptr::null_mut(), 2, || 0).unwrap();
        assert_eq!(in_progress(), before + 2);
        assert_eq!(begin(std::ptr::null_mut(), || 900), Err(900), "refused: not counted");
        assert_eq!(in_progress(), before + 2);
        assert_eq!(end(std::ptr::null_mut(), 0usize, || 401), Err(401), "not capturing: nothing ended");
        end(std::ptr::null_mut(), 0usize, || 0).unwrap();
        let _ = end(std::ptr::null_mut(), 0usize, || CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert_eq!(in_progress(), before);
    }
}
