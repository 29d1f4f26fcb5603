//! Feeding measured device time back: each measured launch is pushed (lock-free, no allocation) into a
//! bounded queue that one background thread, started on first use, drains in launch order. For each it
//! waits for the end event and places it on the host clock. The launch started at the later of its
//! submission and the end of the launch before it on the same stream (its start is not recorded: that
//! would cost a second driver call per launch). Work the stream ran in between that the shim does not
//! measure (a copy, a library's own kernel) thus counts as the launch's, when no other vGPU's kernel
//! ended meanwhile.
//!
//! For a vGPU the daemon manages, the launch's absolute start and end (see [`clock`](super::clock)) go
//! to its vGPU's timeline, from which the daemon charges exactly the device time the kernel took: on a
//! time-sliced GPU, a kernel's events also span the time it waited behind other vGPUs' kernels, which
//! only the device-wide order of completions tells apart. The launch's tokens stay taken until then.
//!
//! Otherwise (standalone `TESSERA_COMPUTE_SHARE`, a managed vGPU whose daemon is away, or a launch that
//! could not be published) the process
//! corrects its bucket itself by what it measured: from its start to its end, less whatever part of
//! that an earlier launch of the same context already covered (work of the process's other streams ahead of it). Queueing behind other processes' work is
//! charged too — a standalone share's limitation: it is a ceiling that waiting on a busy device makes
//! stricter — bounded by their windows. That time is also what the estimate of the next launches learns
//! from (a published launch's estimate is what the daemon charges such launches).
//!
//! Either way, a launch whose thread was held up between submitting it and recording its end event (see
//! [`Item::held_up`]) is charged at most its estimate, once one has been learned: its span may hold host
//! time the kernel never used (see [`Gate::held_up_bound`]).
//!
//! The thread sleeps on a futex when the queue is empty; the first launch after that wakes it (one
//! system call, only when nothing of the process was in flight). While some thread has a batch open it
//! naps instead, a quarter of the window at most, and is not woken: batches close every few dozen
//! launches, and a wake-up costs the launching thread more than all the launches of a batch.

use super::admission::{Admission, Kind};
use super::batch;
use super::events::{self, Pool};
use super::gate::Gate;
use crossbeam::queue::ArrayQueue;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering, fence};
use std::sync::{Once, OnceLock};
use std::time::Duration;
use tessera_region::futex;

/// Measurements queued at most: every event of every pool can be in the queue at once.
const CAPACITY: usize = events::EVENTS * events::MAX_POOLS;

/// One measured launch.
pub struct Item {
    /// Its context's pool.
    pub pool: &'static Pool,
    /// Its end event in the pool.
    pub event: usize,
    /// The stream it was launched on (explicit: never NULL for the per-thread default stream).
    pub stream: usize,
    /// What the gate charged it.
    pub admission: Admission,
    /// What it was.
    pub kind: Kind,
    /// Host time (monotonic ns) just before it was submitted: when it may have started at the earliest.
    pub launched_ns: u64,
    /// The launching thread was held up around the launch (see `HELD_UP_NS`): its span may hold host
    /// time besides the kernel's, so it is charged at most its estimate.
    pub held_up: bool,
    /// Launches it measures: 1, or a [batch](super::batch)'s; 0 for a marker, whose end only tells where
    /// the next measured launch on its stream begins (its launches are settled already).
    pub launches: u16,
}

static QUEUE: OnceLock<ArrayQueue<Item>> = OnceLock::new();
static STARTED: Once = Once::new();
/// [`AWAKE`], [`ASLEEP`] or [`NAPPING`]: the futex word the thread sleeps on.
static IDLE: AtomicU32 = AtomicU32::new(AWAKE);
/// The thread is working.
const AWAKE: u32 = 0;
/// The thread sleeps until a push wakes it.
const ASLEEP: u32 = 1;
/// The thread sleeps briefly (some thread has a batch open) and looks at the queue again by itself: a push
/// does not wake it. Waking a sleeping thread costs a few microseconds of the launching thread's time (on
/// a virtual machine, where the wake-up crosses processors), more than the launches of a whole batch.
const NAPPING: u32 = 2;
/// True while the thread measures and settles an item it has taken from the queue.
static BUSY: AtomicBool = AtomicBool::new(false);

/// Queues a measurement for the thread, starting it on first use; gives the item back if it cannot
/// be queued (the launch is then settled as unmeasured).
pub fn push(gate: &'static Gate, item: Item) -> Result<(), Item> {
    let queue = QUEUE.get_or_init(|| ArrayQueue::new(CAPACITY));
    queue.push(item)?;
    STARTED.call_once(|| start(gate));
    // Pairs with the thread's store of IDLE before its last look at the queue: either it sees the item
    // or this sees it idle.
    fence(Ordering::SeqCst);
    if IDLE.load(Ordering::Relaxed) == ASLEEP
        && IDLE.compare_exchange(ASLEEP, AWAKE, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    {
        futex::wake_all(&IDLE);
    }
    Ok(())
}

/// Waits (at most `timeout`) for every queued measurement to be settled: at exit, so that the work the
/// program synchronized with before exiting is accounted.
pub fn drain(timeout: Duration) {
    let Some(queue) = QUEUE.get() else { return };
    let deadline = std::time::Instant::now() + timeout;
    while (!queue.is_empty() || BUSY.load(Ordering::SeqCst)) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(500));
    }
}

fn start(gate: &'static Gate) {
    let spawned = std::thread::Builder::new().name("tessera-measure".into()).spawn(move || run(gate));
    if let Err(e) = spawned {
        crate::log::error(format_args!("cannot start the launch measurement thread: {e}"));
    }
}

/// The event each pool's latest-ending launch used, kept so the next launch's overlap with it is known.
struct Latest(Vec<(&'static Pool, usize)>);

impl Latest {
    /// What `item` (measured at `own`) adds to the device time already charged for its context.
    fn charge(&mut self, item: &Item, own: i64) -> i64 {
        let (pool, event) = (item.pool, item.event);
        let Some(held) = self.0.iter_mut().find(|(p, _)| std::ptr::eq(*p, pool)) else {
            self.0.push((pool, event));
            return own;
        };
        match pool.between_ends(held.1, event) {
            Some(after) if after <= 0 => {
                // Ended within what an earlier launch was already charged for.
                pool.release(event);
                0
            }
            after => {
                pool.release(held.1);
                held.1 = event;
                after.map_or(own, |a| own.min(a))
            }
        }
    }

    /// Lets go of the events of retired pools.
    fn forget_retired(&mut self) {
        self.0.retain(|(p, event)| {
            let keep = !p.is_retired();
            if !keep {
                p.release(*event);
            }
            keep
        });
    }
}

/// Streams whose last measured end is remembered, per process.
const STREAMS: usize = 64;

/// When the last measured launch on each recently used stream ended (monotonic ns), by context pool and
/// stream: a launch on the stream cannot have started before. The oldest entry makes room for a new one.
struct StreamEnds(Vec<(&'static Pool, usize, u64)>);

impl StreamEnds {
    /// Remembers that `item` ended at `end`, returning when the launch before it on its stream ended.
    fn swap(&mut self, item: &Item, end: u64) -> Option<u64> {
        let found = self.0.iter().position(|(p, s, _)| std::ptr::eq(*p, item.pool) && *s == item.stream);
        let entry = match found {
            Some(i) => self.0.remove(i),
            None => {
                if self.0.len() >= STREAMS {
                    self.0.remove(0);
                }
                (item.pool, item.stream, 0)
            }
        };
        self.0.push((item.pool, item.stream, end.max(entry.2)));
        found.map(|_| entry.2)
    }
}

/// How long the thread naps while batches are open: a quarter of the vGPU's window, within
/// [`NAP_MIN`, `NAP_MAX`] (the reaper looks at batches every [`batch::STALE_NS`] at least).
fn nap_while_batching(gate: &Gate) -> Duration {
    Duration::from_nanos((gate.window().max(0) as u64 / 4).clamp(NAP_MIN.as_nanos() as u64, NAP_MAX.as_nanos() as u64))
}

/// Shortest nap while batches are open.
const NAP_MIN: Duration = Duration::from_micros(20);
/// Longest nap while batches are open.
const NAP_MAX: Duration = Duration::from_micros(250);

fn run(gate: &'static Gate) {
    super::capture::relax_thread();
    let Some(queue) = QUEUE.get() else { return };
    let (mut latest, mut ends) = (Latest(Vec::new()), StreamEnds(Vec::new()));
    let mut reaped = 0;
    loop {
        let now = super::admission::now_ns();
        if now.saturating_sub(reaped) >= batch::STALE_NS {
            batch::reap(gate);
            reaped = now;
        }
        // Busy from before the look at the queue, so that `drain` never sees an item neither queued nor
        // being settled.
        BUSY.store(true, Ordering::SeqCst);
        let Some(item) = queue.pop() else {
            BUSY.store(false, Ordering::SeqCst);
            // While batches are open, their closes come often: the thread naps a quarter of the window
            // at most (so a batch is settled well before the window could fill) instead of being woken.
            let open = batch::any_open();
            let (state, nap) =
                if open { (NAPPING, nap_while_batching(gate)) } else { (ASLEEP, Duration::from_secs(1)) };
            IDLE.store(state, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if queue.is_empty() {
                futex::wait(&IDLE, state, nap);
            }
            IDLE.store(AWAKE, Ordering::SeqCst);
            continue;
        };
        let Some(end) = item.pool.ended(item.event) else {
            item.pool.release(item.event);
            latest.forget_retired();
            gate.settle_unmeasured(&item.admission);
            continue;
        };
        // Its start: it was submitted at `launched_ns`, and its stream reached it once the launch before
        // it there had ended (on an idle stream, the host's time before the submission is not the
        // kernel's; the device may even run other work meanwhile).
        let previous = ends.swap(&item, end);
        if item.launches == 0 {
            // A marker: only where the stream's next measured launch begins.
            item.pool.release(item.event);
            continue;
        }
        let start = previous.map_or(item.launched_ns, |e| e.max(item.launched_ns)).min(end);
        // Queued behind the stream's previous launch: its span is its kernel's alone, without the latency
        // of starting an idle stream.
        let queued = previous.is_some_and(|e| e > item.launched_ns);
        let own = (end - start) as i64;
        let bound = item.held_up.then(|| gate.held_up_bound(&item.admission, item.kind)).flatten();
        // A held-up span with no learned estimate to bound it may overstate the kernel: it is charged in
        // full (the share is a ceiling) but not learned from.
        let learns = !item.held_up || bound.is_some();
        let charge = latest.charge(&item, own);
        let charge = bound.map_or(charge, |b| charge.min(b));
        latest.forget_retired();
        let (a, launches) = (&item.admission, item.launches);
        if launches == 1 && !item.held_up {
            gate.learn_single(item.kind, charge, queued);
        }
        let published = gate.publishes() && gate.publish(a, item.kind, launches, (start, end), bound);
        if !published {
            gate.settle(a, item.kind, charge, launches, learns);
        } else if learns {
            gate.learn(item.kind, charge / i64::from(launches.max(1)));
        }
    }
}
