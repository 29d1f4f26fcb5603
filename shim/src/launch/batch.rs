//! Launches measured a batch at a time, for a managed vGPU alone on its device (`flags::ALONE`, set by the
//! daemon): one completion event for up to [`MAX_BATCH`] launches of a stream instead of one each.
//!
//! Why it is exact: the daemon charges each measured span from the later of its start and the previous
//! completion on the device; it needs every kernel's end only while several vGPUs share the device. Alone,
//! no other vGPU's kernel runs between two of its own, so the span from the start of a batch's first
//! kernel to the end of its last is the batch's device time, provided the stream never ran dry in between.
//! So a launch stays in its thread's open batch on its stream only while the work the thread queued there
//! is estimated to be still running (on the cheap [`ticks`] clock, against the back-to-back estimate
//! [`Gate::gap_estimate`]): otherwise the stream may have gone idle after the batch's last launch, whose
//! end no event marks, and the batch is charged its estimate instead of its span.
//!
//! A batch takes the tokens and the window for `cap` launches at its first launch, as one launch would
//! (so the launches after it touch no shared word), `cap` keeping that within half the vGPU's window: long
//! kernels are not batched at all. A batch ends:
//! - at its `cap`-th launch, by an event recorded right after it: measured, published as one record of
//!   `cap` launches, whose mean the daemon's estimate of a launch follows;
//! - at a launch that finds the stream possibly idle, the vGPU no longer alone (or suspended), or the
//!   batch's window taken back (below): its launches are charged the daemon's estimate, unmeasured, and
//!   what they did not use goes back at once. That launch opens the next batch.
//!
//! Every [`PROBE_EVERY`] launches on a stream, one is measured on its own (a probe), so that the
//! back-to-back estimate follows what the kernels take now.
//!
//! A thread that stops launching would keep its batch's window counted (the daemon would see the vGPU
//! busy, and other threads might wait for the window): the window part of every open batch is in a
//! process-wide table, from which the measurement thread takes back what a thread left untouched for
//! [`STALE_NS`] ([`reap`]).
//!
//! Cost of a launch that joins a batch: a time-stamp read, two thread-local borrows, a load of the vGPU's
//! flags and of the thread's table entry, and a store to that entry; no lock, system call, allocation or
//! driver call. What is lost: a program whose kernels vary wildly within a batch that the stream never
//! leaves idle is still charged exactly (the span); one whose stream keeps running dry between launches is
//! charged the daemon's mean per launch, which misjudges kernels far from the mean.

use super::admission::{Admission, Kind, now_ns};
use super::events::Pool;
use super::feedback::{self, Item};
use super::gate::Gate;
use super::ticks;
use crate::guard::{Res, Status};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

/// Most launches one completion event measures.
pub const MAX_BATCH: u32 = 64;
/// Every this many launches on a stream, one is measured on its own (a probe): the estimate that tells
/// whether a stream is still busy follows such launches (see [`Gate::gap_estimate`]).
const PROBE_EVERY: u16 = 64;
/// A batch untouched this long has its window part taken back by [`reap`].
pub const STALE_NS: u64 = 2_000_000;
/// Longest from the submission of a batch's last launch to the return of its end event's record for the
/// span to count in full (see `HELD_UP_NS` in the module above).
const HELD_UP_NS: u64 = super::HELD_UP_NS;
/// Streams one thread keeps batches on.
const STREAMS: usize = 4;
/// Threads with batches at once (the launches of others are measured one by one).
const THREADS: usize = 256;

/// Entry states.
const FREE: u32 = 0;
const OWNED: u32 = 1;
/// Its thread has ended: freed by [`reap`] once its window is taken back.
const ORPHANED: u32 = 2;

/// What of a thread's open batches another thread may take back: the window they hold.
struct Entry {
    state: AtomicU32,
    /// Window (ns) the thread's open batches hold; 0 once taken back.
    window: AtomicI64,
    /// Tick (see [`ticks`]) of the thread's last launch in a batch.
    last_tick: AtomicU64,
}

static TABLE: [Entry; THREADS] =
    [const { Entry { state: AtomicU32::new(FREE), window: AtomicI64::new(0), last_tick: AtomicU64::new(0) } }; THREADS];

/// A thread's open batch on one stream.
#[derive(Clone, Copy, Debug)]
struct Open {
    /// Tokens and window taken for `cap` launches.
    reserved: Admission,
    cap: u32,
    /// Launches so far.
    n: u32,
    /// Estimate of one launch (ns): what each is charged when the batch is not measured.
    per: i64,
    /// What the stream is estimated to take per launch back to back, in ticks.
    per_ticks: u64,
    /// Monotonic ns just before its first launch was submitted (set then).
    first_ns: u64,
    /// Whether it began right after a recorded end on its stream (so that its span starts at its first
    /// kernel): only such a batch is measured.
    anchored: bool,
    /// The thread was held up around its first launch (see `HELD_UP_NS`): its span may start early.
    held_up: bool,
}

/// What a thread knows of one stream it launches on.
#[derive(Clone, Copy)]
struct Stream {
    pool: &'static Pool,
    stream: usize,
    kind: Kind,
    /// Tick at which the work this thread queued there is estimated to run out.
    busy_until: u64,
    /// Latest estimate of one launch there, in ticks: a launch joins a batch only while at least half of
    /// one is estimated to be still queued ahead of it.
    per_ticks: u64,
    /// The context generation ([`crate::current::generation`]) `pool` was found at: while it holds, the
    /// thread's current context is still `pool`'s.
    generation: u64,
    /// Launches since one was last measured on its own.
    since_probe: u16,
    /// Whether the thread's last work there is followed by a recorded event (nothing since was settled
    /// at its estimate).
    anchored: bool,
    batch: Option<Open>,
}

/// The calling thread's streams, and its entry of [`TABLE`].
struct Local {
    streams: [Option<Stream>; STREAMS],
    /// Next slot of `streams` to reuse.
    next: usize,
    /// The slot last launched on in a batch (looked at first).
    last: usize,
    entry: Option<usize>,
}

/// The calling thread's claim on its entry of [`TABLE`]: when the thread ends, the entry is marked orphaned
/// (the reaper takes back its batches' window, then frees it). Apart from [`LOCAL`], which has no destructor,
/// so that every launch's access to that stays a plain thread-local read.
struct Owner(usize);

impl Drop for Owner {
    fn drop(&mut self) {
        TABLE[self.0].state.store(ORPHANED, Ordering::Release);
    }
}

thread_local! {
    static OWNER: Cell<Option<Owner>> = const { Cell::new(None) };
    static LOCAL: RefCell<Local> =
        const { RefCell::new(Local { streams: [None; STREAMS], next: 0, last: 0, entry: None }) };
}

impl Stream {
    /// Whether the work the thread queued here is estimated to be still running at tick `t`, with at least
    /// half a launch's worth left.
    #[inline]
    fn busy_at(&self, t: u64) -> bool {
        t.saturating_add(self.per_ticks / 2) <= self.busy_until
    }

    /// Counts a launch submitted at tick `t` in the open batch (the thread's table entry `entry` notes when).
    #[inline]
    fn launched(&mut self, t: u64, entry: usize) {
        if let Some(b) = self.batch.as_mut() {
            b.n += 1;
            self.busy_until = self.busy_until.max(t).saturating_add(b.per_ticks);
            self.per_ticks = b.per_ticks;
        }
        TABLE[entry].last_tick.store(t, Ordering::Relaxed);
    }
}

fn same(s: &Stream, pool: &Pool, stream: usize, kind: Kind) -> bool {
    std::ptr::eq(s.pool, pool) && s.stream == stream && s.kind == kind
}

/// Launches through `submit` (under the soft-mode hold) as part of the calling thread's batch on `stream`
/// (of context pool `site.0`, found at context generation `site.1`, device `device`), opening one if there
/// is none; `Err(submit)` when the launch is to be measured on its own instead (then [`measured`] is to be
/// told). Only for a gate that is [batching](Gate::batching).
pub fn launch<F: FnOnce() -> Status>(
    gate: &'static Gate,
    site: (&'static Pool, u64),
    device: usize,
    stream: usize,
    kind: Kind,
    submit: F,
) -> Result<Res, F> {
    let t = ticks::source().now();
    let (pool, generation) = site;
    with_local(submit, |l, submit| in_batch(gate, l, Launch { pool, device, stream, kind, t, generation }, submit))
}

/// Runs `f` on the calling thread's state, borrowed once for the whole launch (the driver's launch never
/// calls back into the shim's); `f` takes `submit` only when it returns the launch's result. `Err(submit)`
/// when it did not launch, or the state cannot be borrowed. Inlined: on the fast path a call would cost
/// as much as the borrow.
#[inline(always)]
fn with_local<F: FnOnce() -> Status>(
    submit: F,
    f: impl FnOnce(&mut Local, &mut Option<F>) -> Option<Res>,
) -> Result<Res, F> {
    let mut submit = Some(submit);
    let launched = LOCAL.try_with(|cell| f(&mut *cell.try_borrow_mut().ok()?, &mut submit));
    match (launched, submit) {
        (Ok(Some(res)), _) => Ok(res),
        (_, Some(submit)) => Err(submit),
        // Unreachable: `f` takes `submit` only when it returns its result.
        (_, None) => Ok(Err(crate::guard::UNKNOWN)),
    }
}

/// One launch offered to a batch.
#[derive(Clone, Copy)]
struct Launch {
    pool: &'static Pool,
    device: usize,
    stream: usize,
    kind: Kind,
    /// Its tick.
    t: u64,
    /// The context generation its pool was found at.
    generation: u64,
}

/// [`launch`] with the thread's state borrowed: `None`, with `submit` untouched, when the launch is to be
/// measured on its own.
fn in_batch<F: FnOnce() -> Status>(
    gate: &'static Gate,
    l: &mut Local,
    at: Launch,
    submit: &mut Option<F>,
) -> Option<Res> {
    let Launch { pool, device, stream, kind, t, generation } = at;
    let (slot, entry) = joinable(gate, l, pool, stream, kind, t)?;
    l.last = slot;
    let s = l.streams[slot].as_mut()?;
    s.generation = generation;
    if s.batch.is_none() {
        s.batch = Some(open(gate, device, kind, s.anchored, entry)?);
    }
    let b = s.batch.as_mut()?;
    // The first and the closing launch's submissions are timed: a thread held up between its clock read and
    // the first submission may date the span's start early, and one held up until the end event is recorded
    // may have let the stream run dry.
    let first = b.n == 0;
    if first {
        b.first_ns = now_ns();
    }
    let before = if b.n + 1 >= b.cap { now_ns() } else { 0 };
    let res = crate::soft::around(submit.take()?);
    if first && now_ns() - b.first_ns > HELD_UP_NS {
        b.held_up = true;
    }
    if res.is_ok() {
        s.launched(t, entry);
    }
    let b = s.batch.as_ref()?;
    if b.n >= b.cap {
        // Measured if it began at a recorded end; otherwise its event only marks where the next begins.
        if let Some(b) = s.batch.take() {
            close(gate, pool, stream, kind, b, Some(entry), before);
        }
        s.anchored = true;
    } else if b.n == 0 {
        // Its only launch failed: nothing to keep.
        if let Some(b) = s.batch.take() {
            settle(gate, b, Some(entry));
        }
    }
    Some(res)
}

/// The common case, tried before anything else: a launch on the stream the thread last launched on in a
/// batch, nothing having changed contexts since (so the same context and device), its batch open with room
/// after this launch, the stream busy and no probe due. `Err(submit)`, with nothing done, otherwise.
#[inline]
pub fn fast<F: FnOnce() -> Status>(stream: usize, kind: Kind, submit: F) -> Result<Res, F> {
    let t = ticks::source().now();
    let generation = crate::current::generation();
    with_local(submit, |l, submit| {
        let entry = l.entry?;
        let last = l.last;
        let s = l.streams[last].as_mut()?;
        let room = s.batch.as_ref().is_some_and(|b| b.n + 1 < b.cap);
        let ready = room
            && s.stream == stream
            && s.kind == kind
            && s.generation == generation
            && s.busy_at(t)
            && s.since_probe < PROBE_EVERY
            && TABLE[entry].window.load(Ordering::Relaxed) > 0;
        if !ready {
            return None;
        }
        let res = crate::soft::around(submit.take()?);
        if res.is_ok() {
            s.launched(t, entry);
            s.since_probe += 1;
        }
        Some(res)
    })
}

/// The slot of the thread's state for the stream, and the thread's table entry, if the launch may go in a
/// batch there (the open one, or one to open); `None` when it is to be measured on its own (the thread has
/// not measured one on the stream yet, or it is time for a probe). Settles a batch that cannot go on.
fn joinable(
    gate: &'static Gate,
    l: &mut Local,
    pool: &'static Pool,
    stream: usize,
    kind: Kind,
    t: u64,
) -> Option<(usize, usize)> {
    let entry = match l.entry {
        Some(e) => e,
        None => {
            let e = claim()?;
            l.entry = Some(e);
            e
        }
    };
    let slot = l.streams.iter().position(|s| s.as_ref().is_some_and(|s| same(s, pool, stream, kind)))?;
    let s = l.streams[slot].as_mut()?;
    if let Some(b) = s.batch {
        // The stream may have run dry after the batch's last launch, whose end no event marks; or the
        // batch's window was taken back while the thread was away. This launch starts a new one.
        if !s.busy_at(t) || TABLE[entry].window.load(Ordering::Relaxed) <= 0 {
            s.batch = None;
            settle(gate, b, Some(entry));
            s.anchored = false;
        }
    }
    if s.since_probe >= PROBE_EVERY && s.batch.is_none() {
        // The probe's span must start at its own kernel: after a marker if what came before is unmarked.
        if !s.anchored {
            mark(gate, pool, stream, kind);
        }
        s.since_probe = 0;
        return None;
    }
    s.since_probe += 1;
    Some((slot, entry))
}

/// Opens a batch for a launch of `kind` on `device`: its tokens and window for `cap` launches, waiting for
/// them as a single launch would; `None` (the launch is then measured on its own) for kernels too long to
/// batch, before the tick clock is calibrated, or once the vGPU stops batching while it waits.
fn open(gate: &Gate, device: usize, kind: Kind, anchored: bool, entry: usize) -> Option<Open> {
    let per = gate.estimate(kind);
    // Half the window: the next batch can be admitted while this one runs, so the device never waits for
    // the measurement of one to start on the next.
    let cap = (gate.window() / 2 / per.max(1)).clamp(0, MAX_BATCH.into()) as u32;
    if cap < 2 {
        return None;
    }
    let per_ticks = ticks::source().ns_to_ticks(gate.gap_estimate(kind) as u64, now_ns())?;
    let reserved = gate.reserve(device, per, cap)?;
    TABLE[entry].window.fetch_add(reserved.window, Ordering::AcqRel);
    TABLE[entry].last_tick.store(ticks::source().now(), Ordering::Relaxed);
    Some(Open { reserved, cap, n: 0, per, per_ticks, first_ns: 0, anchored, held_up: false })
}

/// `ns` on the tick clock (0 while it is not calibrated: then no batch outlives its first launch).
fn per_ticks(ns: i64) -> u64 {
    ticks::source().ns_to_ticks(ns.max(0) as u64, now_ns()).unwrap_or(0)
}

/// Takes batch `b`'s window back from the table entry (what is left of it: the reaper may have taken it).
fn take_window(b: &Open, entry: Option<usize>) -> i64 {
    let Some(e) = entry else { return 0 };
    let w = b.reserved.window;
    let prev = TABLE[e].window.fetch_update(Ordering::AcqRel, Ordering::Acquire, |x| Some((x - w).max(0)));
    prev.map_or(0, |x| x.min(w).max(0))
}

/// Closes batch `b` at its last launch with an end event, for the measurement thread to publish if the
/// batch is anchored (otherwise it is settled at its estimate and the event is a marker); settled
/// unmeasured if no event can be had.
fn close(
    gate: &'static Gate,
    pool: &'static Pool,
    stream: usize,
    kind: Kind,
    b: Open,
    entry: Option<usize>,
    submitted: u64,
) {
    let Some(event) = pool.acquire() else { return settle(gate, b, entry) };
    if !pool.record(event, stream as tessera_ffi::sys::CUstream) {
        pool.release(event);
        return settle(gate, b, entry);
    }
    let window = take_window(&b, entry);
    let admission = gate.used(&b.reserved, b.per, b.n, window);
    if !b.anchored {
        gate.settle_unmeasured(&admission);
        return push_marker(gate, pool, stream, kind, event);
    }
    let held_up = b.held_up || now_ns() - submitted > HELD_UP_NS;
    let launches = b.n as u16;
    let item = Item { pool, event, stream, admission, kind, launched_ns: b.first_ns, held_up, launches };
    if let Err(item) = feedback::push(gate, item) {
        item.pool.release(item.event);
        gate.settle_unmeasured(&item.admission);
    }
}

/// Records a marker on `stream`: an event the measurement thread only notes as the end of the stream's
/// work so far, where the next measured launch's span begins.
fn mark(gate: &'static Gate, pool: &'static Pool, stream: usize, kind: Kind) {
    let Some(event) = pool.acquire() else { return };
    if !pool.record(event, stream as tessera_ffi::sys::CUstream) {
        return pool.release(event);
    }
    push_marker(gate, pool, stream, kind, event);
}

/// Hands recorded event `event` to the measurement thread as a marker.
fn push_marker(gate: &'static Gate, pool: &'static Pool, stream: usize, kind: Kind, event: usize) {
    let admission = Admission { device: pool.site.device, estimate: 0, charged: 0, window: 0 };
    let item = Item { pool, event, stream, admission, kind, launched_ns: now_ns(), held_up: false, launches: 0 };
    if let Err(item) = feedback::push(gate, item) {
        item.pool.release(item.event);
    }
}

/// Settles batch `b` without a measurement: its launches stay charged their estimate, and what they did
/// not use goes back.
fn settle(gate: &Gate, b: Open, entry: Option<usize>) {
    let window = take_window(&b, entry);
    gate.settle_unmeasured(&gate.used(&b.reserved, b.per, b.n, window));
}

/// Tells the thread's batch state that a launch of `kind` on `stream` (of `pool`) estimated at `per` ns was
/// measured on its own, submitted at tick `t`: launches that follow while it is estimated to run may
/// batch.
pub fn measured(gate: &Gate, pool: &'static Pool, stream: usize, kind: Kind, per: i64, t: u64) {
    let per_ticks = per_ticks(per);
    let until = t.saturating_add(per_ticks);
    LOCAL.with_borrow_mut(|l| {
        if let Some(s) = l.streams.iter_mut().flatten().find(|s| same(s, pool, stream, kind)) {
            s.busy_until = s.busy_until.max(t).saturating_add(per_ticks);
            s.per_ticks = per_ticks;
            s.anchored = true;
            return;
        }
        let i = l.next;
        l.next = (i + 1) % STREAMS;
        // The thread uses more streams than it keeps: the batch of the one it forgets is settled.
        if let Some(b) = l.streams[i].and_then(|s| s.batch) {
            settle(gate, b, l.entry);
        }
        l.streams[i] = Some(Stream {
            pool,
            stream,
            kind,
            busy_until: until,
            per_ticks,
            // Never a generation: the fast path waits for the next launch here to be looked up in full.
            generation: 0,
            since_probe: 0,
            anchored: true,
            batch: None,
        });
    });
}

/// Settles the calling thread's open batches (its vGPU stopped being alone): they are not measured.
pub fn settle_open(gate: &Gate) {
    let _ = LOCAL.try_with(|l| {
        let Ok(mut l) = l.try_borrow_mut() else { return };
        let entry = l.entry;
        for s in l.streams.iter_mut().flatten() {
            if let Some(b) = s.batch.take() {
                settle(gate, b, entry);
            }
        }
    });
}

/// The tick of a launch about to be measured on its own (for [`measured`]).
pub fn tick() -> u64 {
    ticks::source().now()
}

/// A free entry of [`TABLE`] for the calling thread; `None` when all are taken.
fn claim() -> Option<usize> {
    let e = TABLE
        .iter()
        .position(|e| e.state.compare_exchange(FREE, OWNED, Ordering::AcqRel, Ordering::Relaxed).is_ok())?;
    // A thread that can no longer register its claim (it is ending) gives the entry straight back.
    if OWNER.try_with(|o| o.set(Some(Owner(e)))).is_err() {
        TABLE[e].state.store(FREE, Ordering::Release);
        return None;
    }
    Some(e)
}

/// Whether some thread's batches hold window (the measurement thread then looks every [`STALE_NS`]).
pub fn any_open() -> bool {
    TABLE.iter().any(|e| e.window.load(Ordering::Relaxed) > 0 || e.state.load(Ordering::Relaxed) == ORPHANED)
}

/// Takes back the window of batches whose thread has not launched in one for [`STALE_NS`], and frees the
/// entries of threads that ended. Measurement thread only.
pub fn reap(gate: &Gate) {
    let source = ticks::source();
    let Some(stale) = source.ns_to_ticks(STALE_NS, now_ns()) else { return };
    let now = source.now();
    for e in &TABLE {
        let ended = e.state.load(Ordering::Acquire) == ORPHANED;
        if e.window.load(Ordering::Acquire) > 0
            && (ended || now.saturating_sub(e.last_tick.load(Ordering::Relaxed)) > stale)
        {
            let w = e.window.swap(0, Ordering::AcqRel);
            if w > 0 {
                gate.release_window(w);
            }
        }
        if ended && e.window.load(Ordering::Acquire) == 0 {
            let _ = e.state.compare_exchange(ORPHANED, FREE, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::admission::tests::zeroed;
    use tessera_region::VgpuSlot;

    #[test]
    fn the_reaper_takes_back_the_window_of_a_thread_that_left_its_batch() {
        let v: &'static VgpuSlot = zeroed();
        let s = &v.live.sched;
        let gate: &'static Gate = Box::leak(Box::new(Gate::new(v, None, None, &v.live.procs[0])));
        // A thread's batch holds 300 µs of the window (as a reservation would have counted it).
        s.inflight_ns.store(300_000, Ordering::Relaxed);
        v.live.procs[0].inflight_ns.store(300_000, Ordering::Relaxed);
        let e = claim().expect("a free entry");
        TABLE[e].window.store(300_000, Ordering::Relaxed);
        let source = ticks::source();
        std::thread::sleep(std::time::Duration::from_nanos(ticks::CALIBRATION_NS + STALE_NS));
        // Launched in it just now: left alone.
        TABLE[e].last_tick.store(source.now(), Ordering::Relaxed);
        reap(gate);
        assert_eq!(TABLE[e].window.load(Ordering::Relaxed), 300_000);
        assert!(any_open());
        // Untouched for longer than STALE_NS: taken back, out of the vGPU's window.
        std::thread::sleep(std::time::Duration::from_nanos(2 * STALE_NS));
        reap(gate);
        assert_eq!(TABLE[e].window.load(Ordering::Relaxed), 0);
        assert_eq!(s.inflight_ns.load(Ordering::Relaxed), 0);
        // A thread that ends with a batch open: its window is taken back at once, then its entry freed.
        s.inflight_ns.store(200_000, Ordering::Relaxed);
        v.live.procs[0].inflight_ns.store(200_000, Ordering::Relaxed);
        let ended = std::thread::spawn(|| {
            let e = claim().expect("a free entry");
            TABLE[e].window.store(200_000, Ordering::Relaxed);
            TABLE[e].last_tick.store(ticks::source().now(), Ordering::Relaxed);
            e
        })
        .join()
        .expect("the thread");
        assert_eq!(TABLE[ended].state.load(Ordering::Relaxed), ORPHANED);
        reap(gate);
        assert_eq!((TABLE[ended].window.load(Ordering::Relaxed), s.inflight_ns.load(Ordering::Relaxed)), (0, 0));
        assert_eq!(TABLE[ended].state.load(Ordering::Relaxed), FREE);
    }
}
