//! Compute shares: every kernel launch (`cuLaunchKernel`, `cuLaunchKernelEx`, `cuLaunchCooperativeKernel`,
//! `cuGraphLaunch` and their `_ptsz` variants) first passes its vGPU's [`gate`], and its device time is
//! measured with one CUDA event after it ([`events`]) and fed back ([`feedback`]) so that tokens are charged by the time the
//! work actually took: for a vGPU the daemon manages, by the daemon, from the absolute times ([`clock`])
//! of every kernel on its vGPU's timeline; otherwise by the process itself. While the daemon is away, its
//! vGPUs' processes refill and settle themselves at their last configured share ([`outage`]).
//!
//! The bucket is the vGPU's `Sched` record in the region (with `TESSERA_VGPU`), or the private quota
//! slot's (without it). Tokens are granted by the daemon when it manages the vGPU, or by the process
//! itself with `TESSERA_COMPUTE_SHARE` ([`standalone`]); a managed vGPU's share is the daemon's, and the
//! variable is then ignored with a warning. With neither `TESSERA_VGPU` nor `TESSERA_COMPUTE_SHARE` the
//! gate does nothing at all: no event, no thread.
//!
//! Launches recorded into a graph by stream capture run nothing and pass ungated ([`capture`]); the graph's launches
//! are gated. A managed vGPU's share is of its device (`Sched::device`): launches on other devices pass
//! ungated, as its quota leaves them unlimited; otherwise launches on every device draw from the one
//! bucket. `high` priority holds lower ones on the launch's own device.

mod admission;
mod batch;
pub mod capture;
mod clock;
pub(crate) mod events;
mod feedback;
mod gate;
mod outage;
mod standalone;
mod ticks;

use crate::guard::{Res, Status, status};
use crate::log;
use admission::Kind;
use feedback::Item;
use gate::Gate;

pub use admission::ring;
pub use capture::capturing;
use std::ffi::{c_uint, c_void};
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tessera_ffi::sys::{CUfunction, CUgraphExec, CUlaunchConfig, CUstream};
use tessera_region::{VgpuSlot, flags};

/// `CU_STREAM_PER_THREAD`: what a NULL stream means to a `_ptsz` entry point, made explicit for the
/// calls the shim makes on the stream (which go through the legacy-default-stream entry points).
const STREAM_PER_THREAD: usize = 2;

/// The stream an entry point was handed, with NULL made explicit where it means the thread's own stream
/// (`PER_THREAD`: a `_ptsz` entry point): the shim's own calls on it go through the legacy entry points,
/// to which NULL is the legacy default stream.
pub fn explicit_stream<const PER_THREAD: bool>(stream: CUstream) -> CUstream {
    if PER_THREAD && stream.is_null() { STREAM_PER_THREAD as CUstream } else { stream }
}

/// Longest a launch may take from its clock read before submitting to the return of its end event's
/// record for its span (from submission or the previous end on its stream to its end) to count as the
/// kernel's own: a thread held up longer
/// (preempted, say) may have let the kernel finish long before the end event was recorded, which an
/// idle stream then timestamps late, or submitted it long after the start was read.
const HELD_UP_NS: u64 = 50_000;

/// Longest the exit handler waits for queued measurements.
const EXIT_DRAIN: Duration = Duration::from_millis(100);

static GATE: OnceLock<Option<Gate>> = OnceLock::new();

/// The process's gate, set up on the first launch; `None` when launches are not gated.
fn active() -> Option<&'static Gate> {
    GATE.get_or_init(set_up).as_ref()
}

fn set_up() -> Option<Gate> {
    let config = crate::init::config().ok()?;
    let share = config.compute_share;
    if config.vgpu.is_none() && share.is_none() {
        return None;
    }
    let ((vgpu, region), me) = match crate::quota::active() {
        Ok(Some(q)) => (q.slot(), q.me()),
        Ok(None) => {
            let private = private_slot();
            ((private, None), &private.live.procs[0])
        }
        // The configuration or the region is unusable: cuInit has failed already.
        Err(_) => return None,
    };
    let managed = vgpu.flags() & flags::MANAGED != 0;
    match (share, managed) {
        (Some(pct), true) => log::warn(format_args!(
            "TESSERA_COMPUTE_SHARE={pct} is ignored: the daemon manages this vGPU and its share ({}%) applies",
            vgpu.config.share.load(Ordering::Relaxed)
        )),
        (Some(pct), false) => {
            vgpu.config.share.store(pct, Ordering::Relaxed);
            log::info(format_args!("compute share: {pct}% of the device, refilled by this process"));
        }
        (None, _) => log::info(format_args!("compute share: as the vGPU's record says")),
    }
    // SAFETY: registers a plain function with no arguments, which catches every panic.
    if unsafe { libc::atexit(at_exit) } != 0 {
        log::warn(format_args!("cannot register the exit handler: unfinished work stays in the window at exit"));
    }
    Some(Gate::new(vgpu, region, share, me))
}

/// At exit: lets the measurement thread settle what is queued (briefly), then gives back whatever of the
/// vGPU's window this process still holds.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(gate) = GATE.get().and_then(Option::as_ref) {
            feedback::drain(EXIT_DRAIN);
            gate.release_all();
        }
    });
}

/// A vGPU slot of this process's own, for a share without a vGPU or a memory quota.
fn private_slot() -> &'static VgpuSlot {
    // SAFETY: VgpuSlot is integers and atomics, for which all-zero is a valid value.
    Box::leak(unsafe { Box::<VgpuSlot>::new_zeroed().assume_init() })
}

/// Gates, launches and measures one launch of `kind` on `stream` (`PER_THREAD`: the entry point is a
/// `_ptsz` one, for which NULL is the calling thread's default stream).
fn gated<const PER_THREAD: bool>(stream: CUstream, kind: Kind, real: impl FnOnce() -> Status) -> Res {
    let Some(gate) = active() else { return crate::soft::around(real) };
    let stream = explicit_stream::<PER_THREAD>(stream);
    if capture::capturing(stream) != Some(false) {
        return status(real());
    }
    let batching = gate.batching();
    let real = if batching {
        match batch::fast(stream as usize, kind, real) {
            Ok(res) => return res,
            Err(real) => real,
        }
    } else {
        real
    };
    // Read before the pool is looked up: a context change after it makes the pool's generation stale.
    let generation = crate::current::generation();
    let pool = events::current();
    let Some(device) = pool.map(|p| p.site.device).or_else(|| crate::current::current_site().map(|s| s.device)) else {
        // No current context: the driver refuses the launch itself.
        return status(real());
    };
    if !gate.governs(device) {
        return crate::soft::around(real);
    }
    let batching = pool.filter(|_| batching);
    let real = match batching {
        Some(pool) => match batch::launch(gate, (pool, generation), device, stream as usize, kind, real) {
            Ok(res) => return res,
            Err(real) => real,
        },
        None => {
            batch::settle_open(gate);
            real
        }
    };
    measured_alone(gate, pool, device, stream, kind, batching.is_some(), real)
}

/// Gates, launches and measures one launch on its own (one end event after it). `batching`: the vGPU is
/// alone, so the thread's batch state learns of it.
fn measured_alone(
    gate: &'static Gate,
    pool: Option<&'static events::Pool>,
    device: usize,
    stream: CUstream,
    kind: Kind,
    batching: bool,
    real: impl FnOnce() -> Status,
) -> Res {
    let slot = pool.and_then(|p| Some((p, p.acquire()?)));
    let admission = gate.admit(device, kind, slot.is_some());
    // The soft-mode hold is taken after the tokens: a launch waiting for them leaves its memory free to
    // be swapped out. The kernel cannot start before `launched_ns` (a vDSO clock read), which is when it
    // started at the latest on an idle stream.
    let (mut launched_ns, mut tick) = (0, 0);
    let submitted = crate::soft::around(|| {
        launched_ns = admission::now_ns();
        if batching {
            tick = batch::tick();
        }
        real()
    });
    if let Err(code) = submitted {
        if let Some((p, i)) = slot {
            p.release(i);
        }
        gate.refund(&admission);
        return Err(code);
    }
    let measured = slot.is_some_and(|(pool, i)| {
        let queued = pool.record(i, stream) && {
            let held_up = admission::now_ns() - launched_ns > HELD_UP_NS;
            let item =
                Item { pool, event: i, stream: stream as usize, admission, kind, launched_ns, held_up, launches: 1 };
            feedback::push(gate, item).is_ok()
        };
        if !queued {
            pool.release(i);
        }
        queued
    });
    if !measured {
        gate.settle_unmeasured(&admission);
    }
    if let Some(pool) = pool.filter(|_| batching) {
        batch::measured(gate, pool, stream as usize, kind, gate.gap_estimate(kind), tick);
    }
    Ok(())
}

/// `cuLaunchKernel` and `_ptsz`.
#[allow(clippy::too_many_arguments)]
pub fn kernel<const PER_THREAD: bool>(
    _f: CUfunction,
    _gx: c_uint,
    _gy: c_uint,
    _gz: c_uint,
    _bx: c_uint,
    _by: c_uint,
    _bz: c_uint,
    _shared: c_uint,
    stream: CUstream,
    _params: *mut *mut c_void,
    _extra: *mut *mut c_void,
    real: impl FnOnce() -> Status,
) -> Res {
    gated::<PER_THREAD>(stream, Kind::Kernel, real)
}

/// `cuLaunchCooperativeKernel` and `_ptsz`.
#[allow(clippy::too_many_arguments)]
pub fn cooperative<const PER_THREAD: bool>(
    _f: CUfunction,
    _gx: c_uint,
    _gy: c_uint,
    _gz: c_uint,
    _bx: c_uint,
    _by: c_uint,
    _bz: c_uint,
    _shared: c_uint,
    stream: CUstream,
    _params: *mut *mut c_void,
    real: impl FnOnce() -> Status,
) -> Res {
    gated::<PER_THREAD>(stream, Kind::Kernel, real)
}

/// `cuLaunchKernelEx` and `_ptsz`: the stream is the configuration's.
pub fn kernel_ex<const PER_THREAD: bool>(
    config: *const CUlaunchConfig,
    _f: CUfunction,
    _params: *mut *mut c_void,
    _extra: *mut *mut c_void,
    real: impl FnOnce() -> Status,
) -> Res {
    // SAFETY: `config` is NULL or the program's launch configuration, readable for the call.
    match unsafe { config.as_ref() } {
        Some(c) => gated::<PER_THREAD>(c.hStream, Kind::Kernel, real),
        None => status(real()),
    }
}

/// `cuGraphLaunch` and `_ptsz`: the whole graph is measured as one.
pub fn graph<const PER_THREAD: bool>(_exec: CUgraphExec, stream: CUstream, real: impl FnOnce() -> Status) -> Res {
    gated::<PER_THREAD>(stream, Kind::Graph, real)
}
