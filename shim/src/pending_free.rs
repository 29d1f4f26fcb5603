//! Stream-ordered frees (`cuMemFreeAsync`, `_ptsz`) kept charged until the stream has really executed
//! them: the driver holds the memory until then, so giving the quota back when the free is queued would
//! let a peer allocate memory the device does not have yet, and the vGPU's real usage overshoot its quota.
//!
//! Each queued free becomes a [`Pending`] record: its bytes stay in the quota, and an event
//! (`CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC`, so that waiting on it sleeps) is recorded on the
//! stream right after the free. The record is settled (the bytes given back) once the event has completed:
//! - at the next allocation or `cuMemGetInfo` of the process ([`settle`]: one atomic load while nothing
//!   is pending, so the allocation's common case takes no lock and makes no driver call);
//! - by a settler thread that polls the events every millisecond while any free is pending (so that a
//!   process that makes no more calls still gives its peers the room as soon as the device has it);
//! - before an allocation that would not fit the quota otherwise ([`wait_device`]: the process waits for
//!   its own pending frees on that device, as the stream-ordered allocator would reuse their memory).
//!
//! A free queued into a stream being captured becomes a free node of the graph: its memory goes back only
//! when a launch of the graph executes that node, which the shim does not follow. Such a free stays
//! charged until its context is destroyed (too much for a while, never too little). So does a free whose
//! event cannot be recorded and whose stream cannot be synchronized. A destroyed context's pending frees
//! are given back with it ([`context_ended`]), and a record whose event reports an error (its context was
//! destroyed by a path the shim does not see) is given back too: the memory went with the context.
//!
//! A free of a pool's memory, once executed, is not given back either: the pool keeps that memory until it
//! releases it, and [`crate::pool_cache`] keeps it charged meanwhile.

use crate::launch::capture;
use crate::log;
use crate::pool_cache;
use crate::quota;
use crate::real::{
    cuEventCreate as EVENT_CREATE, cuEventDestroy_v2 as EVENT_DESTROY, cuEventQuery as EVENT_QUERY,
    cuEventRecord as EVENT_RECORD, cuEventSynchronize as EVENT_SYNCHRONIZE, cuStreamSynchronize as STREAM_SYNC,
};
use std::ffi::c_uint;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;
use tessera_ffi::cuda::CUDA_ERROR_NOT_READY;
use tessera_ffi::sys::{CUevent, CUstream};

/// `CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING`.
const EVENT_FLAGS: c_uint = 1 | 2;
/// Settled events kept for reuse (per process): creating one per free would be a driver call more.
const IDLE_EVENTS: usize = 64;
/// How often the settler thread polls while frees are pending.
const POLL: Duration = Duration::from_millis(1);

/// One queued free whose bytes are still charged.
struct Pending {
    /// Device charged.
    device: usize,
    /// Bytes charged.
    bytes: u64,
    /// The context that made the allocation (its destruction frees the memory whatever the stream did).
    owner: u64,
    /// The context the event belongs to (current when the free was queued).
    ctx: u64,
    /// The stream the free was queued on (frees on one stream complete in order).
    stream: usize,
    /// The event recorded after the free; `None` for a free held until its context ends.
    event: Option<usize>,
    /// The memory pool the allocation came from (0: none).
    pool: usize,
}

struct State {
    pending: Vec<Pending>,
    /// Settled events, by context, for reuse.
    idle: Vec<(u64, usize)>,
}

static STATE: Mutex<State> = Mutex::new(State { pending: Vec::new(), idle: Vec::new() });
/// `STATE.pending.len()`, read without the lock by the allocation path.
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Wakes the settler thread when a free is queued.
static WAKE: Condvar = Condvar::new();
static SETTLER: AtomicBool = AtomicBool::new(false);
/// Set at exit: the settler thread makes no more driver calls (the driver is being torn down).
static STOPPING: AtomicBool = AtomicBool::new(false);
/// Longest the exit handler waits for a settling pass in progress.
const EXIT_WAIT: Duration = Duration::from_millis(100);

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// True while some stream-ordered free of the process is still charged (one atomic load).
#[inline]
pub fn any() -> bool {
    COUNT.load(Ordering::Acquire) != 0
}

/// Gives `p`'s bytes back to the quota, or, for a pool's memory, to what the pool keeps charged.
fn give_back(p: &Pending) {
    let Ok(Some(q)) = quota::active() else { return };
    if p.pool == 0 {
        q.release(p.device, p.bytes);
    } else {
        pool_cache::freed(q, p.pool, p.device, p.bytes);
    }
}

/// An event of context `ctx` for one free: a settled one reused, or a new one.
fn event_for(s: &mut State, ctx: u64) -> Option<usize> {
    if let Some(i) = s.idle.iter().position(|(c, _)| *c == ctx) {
        return Some(s.idle.swap_remove(i).1);
    }
    let mut e: CUevent = std::ptr::null_mut();
    // SAFETY: cuEventCreate's C signature; `e` is a valid output.
    (unsafe { EVENT_CREATE.get()?(&mut e, EVENT_FLAGS) } == 0).then_some(e as usize)
}

/// Keeps a settled event for reuse, or destroys it.
fn recycle(s: &mut State, ctx: u64, event: usize) {
    if s.idle.len() < IDLE_EVENTS {
        s.idle.push((ctx, event));
    } else if let Some(f) = EVENT_DESTROY.get() {
        // SAFETY: cuEventDestroy's C signature; the event is ours and nothing waits on it.
        unsafe { f(event as CUevent) };
    }
}

fn record(event: usize, stream: CUstream) -> bool {
    // SAFETY: cuEventRecord's C signature; the event is ours, the stream the program's valid handle.
    EVENT_RECORD.get().is_some_and(|f| unsafe { f(event as CUevent, stream) } == 0)
}

/// Queues the charge of an allocation that `cuMemFreeAsync` just freed on `stream` (an explicit handle:
/// `CU_STREAM_PER_THREAD` for the `_ptsz` variants' NULL): `bytes` on `device`, allocated in `owner` from
/// memory pool `pool` (0: none).
pub fn queue(device: usize, bytes: u64, owner: u64, stream: CUstream, pool: usize) {
    let ctx = crate::current::current_context().unwrap_or(owner);
    let event = capture::relaxed(|| -> Result<Option<usize>, ()> {
        if capture::capturing(stream) == Some(true) {
            // A graph free node: held until the context ends (see the module documentation).
            log::debug(format_args!("a free of {bytes} bytes captured into a graph stays charged"));
            return Ok(None);
        }
        let mut s = state();
        if let Some(e) = event_for(&mut s, ctx) {
            if record(e, stream) {
                return Ok(Some(e));
            }
            recycle(&mut s, ctx, e);
        }
        drop(s);
        // No event in the stream's order (another context's stream, say): wait for the stream instead.
        // SAFETY: cuStreamSynchronize's C signature; the stream is the program's valid handle.
        if STREAM_SYNC.get().is_some_and(|f| unsafe { f(stream) } == 0) { Err(()) } else { Ok(None) }
    });
    let p = Pending { device, bytes, owner, ctx, stream: stream as usize, event: event.unwrap_or(None), pool };
    if event.is_err() {
        // The stream is synchronized: the free has been executed.
        give_back(&p);
        return;
    }
    let mut s = state();
    s.pending.push(p);
    COUNT.store(s.pending.len(), Ordering::Release);
    drop(s);
    start_settler();
    WAKE.notify_one();
}

/// What querying a pending free's event says.
enum Done {
    Yes,
    NotYet,
    /// The event is gone with its context: so is the memory.
    Gone,
}

fn query(event: usize) -> Done {
    let Some(f) = EVENT_QUERY.get() else { return Done::NotYet };
    // SAFETY: cuEventQuery's C signature; the event is ours.
    match unsafe { f(event as CUevent) } {
        0 => Done::Yes,
        CUDA_ERROR_NOT_READY => Done::NotYet,
        _ => Done::Gone,
    }
}

/// Gives back every pending free whose stream has executed it. Skips the round when another thread is
/// settling (never waits for the lock: it is called on allocation paths).
pub fn settle() {
    if !any() {
        return;
    }
    let Ok(mut s) = STATE.try_lock() else { return };
    capture::relaxed(|| settle_locked(&mut s));
}

/// Gives back every pending free whose stream has executed it, waiting for the lock (for queries such as
/// `cuMemGetInfo`, whose answer must count every free executed before it was asked).
pub fn settle_now() {
    if !any() {
        return;
    }
    let mut s = state();
    capture::relaxed(|| settle_locked(&mut s));
}

fn settle_locked(s: &mut State) {
    // Frees on one stream complete in order: after one that has not, the stream's later ones are not asked.
    let mut busy: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < s.pending.len() {
        let p = &s.pending[i];
        let done = match p.event {
            Some(_) if busy.contains(&p.stream) => Done::NotYet,
            Some(e) => query(e),
            None => Done::NotYet,
        };
        match done {
            Done::NotYet => {
                if p.event.is_some() {
                    busy.push(p.stream);
                }
                i += 1;
            }
            Done::Yes => {
                let p = s.pending.remove(i);
                give_back(&p);
                if let Some(e) = p.event {
                    recycle(s, p.ctx, e);
                }
            }
            Done::Gone => {
                let p = s.pending.remove(i);
                give_back(&p);
            }
        }
    }
    COUNT.store(s.pending.len(), Ordering::Release);
}

/// True when some pending free of the process charges device `dev`.
pub fn on_device(dev: usize) -> bool {
    any() && state().pending.iter().any(|p| p.device == dev && p.event.is_some())
}

/// Waits until the stream has executed every pending free on device `dev`, and gives them back (before
/// an allocation refused otherwise: the memory those frees give back is what it can use).
pub fn wait_device(dev: usize) {
    let mut s = state();
    capture::relaxed(|| {
        for p in s.pending.iter().filter(|p| p.device == dev) {
            if let (Some(e), Some(f)) = (p.event, EVENT_SYNCHRONIZE.get()) {
                // SAFETY: cuEventSynchronize's C signature; the event is ours. An error shows in the query.
                unsafe { f(e as CUevent) };
            }
        }
        settle_locked(&mut s);
    });
}

/// Gives back the pending frees of context `ctx`, just destroyed (the driver freed its memory), and
/// forgets its events.
pub fn context_ended(ctx: u64) {
    let mut s = state();
    s.pending.retain(|p| {
        let gone = p.owner == ctx || p.ctx == ctx;
        if gone {
            give_back(p);
        }
        !gone
    });
    s.idle.retain(|(c, _)| *c != ctx);
    COUNT.store(s.pending.len(), Ordering::Release);
}

/// Starts the settler thread on the first pending free.
fn start_settler() {
    if SETTLER.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new().name("tessera-frees".into()).spawn(|| {
        // Its queries must never invalidate a program's global-mode capture.
        capture::relax_thread();
        loop {
            {
                let mut s = state();
                while s.pending.is_empty() && !STOPPING.load(Ordering::Acquire) {
                    s = WAKE.wait(s).unwrap_or_else(|p| p.into_inner());
                }
            }
            std::thread::sleep(POLL);
            if let Ok(mut s) = STATE.try_lock() {
                if STOPPING.load(Ordering::Acquire) {
                    return;
                }
                settle_locked(&mut s);
            }
        }
    });
    if spawned.is_err() {
        // Settled at the process's next allocation or memory query instead.
        SETTLER.store(false, Ordering::Release);
        return;
    }
    // SAFETY: registers a plain function with no arguments, which catches every panic.
    if unsafe { libc::atexit(at_exit) } != 0 {
        log::warn(format_args!("cannot register the exit handler of the stream-ordered frees' settler"));
    }
}

/// At exit: stops the settler thread before the driver is torn down under it (waiting briefly for a
/// settling pass in progress). What the process still holds goes back with its slot.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        STOPPING.store(true, Ordering::Release);
        WAKE.notify_all();
        let start = std::time::Instant::now();
        while STATE.try_lock().is_err() && start.elapsed() < EXIT_WAIT {
            std::thread::sleep(Duration::from_micros(200));
        }
    });
}
