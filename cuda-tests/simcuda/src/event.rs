//! Events: completion markers in streams carrying engine timestamps. An interprocess event
//! (`CU_EVENT_INTERPROCESS`) keeps its generations in a page every process that opened it maps
//! ([`crate::ipc::SharedMarks`]): what one process records and completes, the others wait for.

use crate::driver::driver;
use crate::guard::{CuRes, entry, out};
use crate::ipc::SharedMarks;
use crate::stream::{DefaultStream, Op, resolve};
use parking_lot::{Condvar, Mutex};
use std::ffi::c_uint;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUevent, CUstream};

/// `CU_EVENT_DISABLE_TIMING`.
const DISABLE_TIMING: u32 = 2;
/// `CU_EVENT_INTERPROCESS`: the event may be shared with `cuIpcGetEventHandle`; needs `DISABLE_TIMING`.
pub const INTERPROCESS: u32 = 4;
/// How often a wait on an interprocess event looks at its page (another process completes it).
const SHARED_POLL: Duration = Duration::from_micros(50);

/// A local event's generations and the simulated time its latest completed recording completed at.
#[derive(Default, Clone, Copy)]
struct Marks {
    recorded: u64,
    completed: u64,
    timestamp_ns: u64,
}

/// Where an event keeps its generations.
enum Generations {
    /// In this process, with the condition variable its waiters sleep on.
    Local(Mutex<Marks>, Condvar),
    /// In a page shared with every process that opened the event (an interprocess event).
    Shared(SharedMarks),
}

/// One event.
pub struct Event {
    flags: u32,
    generations: Generations,
}

impl Event {
    /// A new event; an interprocess one gets its shared page.
    pub fn new(flags: u32) -> CuRes<Event> {
        let generations = if flags & INTERPROCESS != 0 {
            Generations::Shared(SharedMarks::create()?)
        } else {
            Generations::Local(Mutex::default(), Condvar::new())
        };
        Ok(Event { flags, generations })
    }

    /// An event another process shared (`cuIpcOpenEventHandle`): it behaves as one created here with
    /// `CU_EVENT_DISABLE_TIMING`.
    pub fn opened(shared: SharedMarks) -> Event {
        Event { flags: DISABLE_TIMING, generations: Generations::Shared(shared) }
    }

    /// The page an interprocess event keeps its generations in.
    pub fn shared(&self) -> Option<&SharedMarks> {
        match &self.generations {
            Generations::Shared(s) => Some(s),
            Generations::Local(..) => None,
        }
    }

    /// Starts a new recording; returns its generation.
    fn record(&self) -> u64 {
        match &self.generations {
            Generations::Shared(s) => s.recorded().fetch_add(1, Ordering::AcqRel) + 1,
            Generations::Local(marks, _) => {
                let mut m = marks.lock();
                m.recorded += 1;
                m.recorded
            }
        }
    }

    /// The latest recording's generation (0 if never recorded).
    pub fn recorded(&self) -> u64 {
        self.marks().recorded
    }

    /// Called by the stream when the recording `generation` is reached at simulated time `at_ns`.
    pub fn complete(&self, generation: u64, at_ns: u64) {
        match &self.generations {
            Generations::Shared(s) => {
                // The time first: a process that sees the generation reads the time it completed at.
                s.completed_at().fetch_max(at_ns, Ordering::AcqRel);
                s.completed().fetch_max(generation, Ordering::AcqRel);
            }
            Generations::Local(marks, changed) => {
                let mut m = marks.lock();
                if generation > m.completed {
                    m.completed = generation;
                    m.timestamp_ns = at_ns;
                }
                changed.notify_all();
            }
        }
    }

    /// Waits until recording `generation` has completed; returns the simulated time it completed at.
    pub fn wait(&self, generation: u64) -> u64 {
        match &self.generations {
            Generations::Shared(s) => {
                // Another process may complete it: no condition variable reaches there, so look again.
                while s.completed().load(Ordering::Acquire) < generation {
                    std::thread::sleep(SHARED_POLL);
                }
                s.completed_at().load(Ordering::Acquire)
            }
            Generations::Local(marks, changed) => {
                let mut m = marks.lock();
                while m.completed < generation {
                    changed.wait(&mut m);
                }
                m.timestamp_ns
            }
        }
    }

    /// A snapshot of the generations, wherever they are kept.
    fn marks(&self) -> Marks {
        match &self.generations {
            Generations::Shared(s) => Marks {
                recorded: s.recorded().load(Ordering::Acquire),
                completed: s.completed().load(Ordering::Acquire),
                timestamp_ns: s.completed_at().load(Ordering::Acquire),
            },
            Generations::Local(marks, _) => *marks.lock(),
        }
    }

    /// When the latest recording completed: `INVALID_HANDLE` if never recorded, `NOT_READY` if pending.
    fn timestamp(&self) -> CuRes<u64> {
        let m = self.marks();
        match m.recorded {
            0 => Err(CUDA_ERROR_INVALID_HANDLE),
            r if m.completed < r => Err(CUDA_ERROR_NOT_READY),
            _ => Ok(m.timestamp_ns),
        }
    }

    fn done(&self) -> bool {
        let m = self.marks();
        m.completed >= m.recorded
    }
}

/// `cuEventCreate`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventCreate(ph: *mut CUevent, flags: c_uint) -> CuResult {
    entry(|| {
        let d = driver()?;
        crate::context::current()?;
        // An interprocess event must not be timed (the driver API's documented rule).
        if ph.is_null() || flags & !0xf != 0 || (flags & INTERPROCESS != 0 && flags & DISABLE_TIMING == 0) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = d.events.insert(Arc::new(Event::new(flags)?));
        out(ph, h as CUevent)
    })
}

fn destroy(ev: CUevent) -> CuRes {
    driver()?.events.remove(ev as u64).map(|_| ())
}

/// `cuEventDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy(ev: CUevent) -> CuResult {
    entry(|| destroy(ev))
}

/// `cuEventDestroy_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy_v2(ev: CUevent) -> CuResult {
    entry(|| destroy(ev))
}

fn record(ev: CUevent, h: CUstream, default: DefaultStream) -> CuRes {
    let e = driver()?.events.get(ev as u64)?;
    let s = resolve(h, default)?;
    let generation = e.record();
    s.submit(Op::Record(e, generation))
}

stream_variants! {
    /// `cuEventRecord`.
    fn cuEventRecord / cuEventRecord_ptsz(ev: CUevent, h: CUstream) => |m| record(ev, h, m);
    /// `cuEventRecordWithFlags`.
    fn cuEventRecordWithFlags / cuEventRecordWithFlags_ptsz(ev: CUevent, h: CUstream, _flags: c_uint) => |m| record(ev, h, m);
}

/// `cuEventSynchronize`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventSynchronize(ev: CUevent) -> CuResult {
    entry(|| {
        crate::capture_mode::unsafe_call()?;
        let d = driver()?;
        let e = d.events.get(ev as u64)?;
        e.wait(e.recorded());
        crate::pool::on_synchronize(d);
        Ok(())
    })
}

/// `cuEventQuery`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventQuery(ev: CUevent) -> CuResult {
    entry(|| {
        crate::capture_mode::unsafe_call()?;
        if driver()?.events.get(ev as u64)?.done() { Ok(()) } else { Err(CUDA_ERROR_NOT_READY) }
    })
}

fn elapsed(ms: *mut f32, start: CUevent, end: CUevent) -> CuRes {
    let d = driver()?;
    let (a, b) = (d.events.get(start as u64)?, d.events.get(end as u64)?);
    if ms.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if a.flags & DISABLE_TIMING != 0 || b.flags & DISABLE_TIMING != 0 {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    let (start_ns, end_ns) = (a.timestamp()?, b.timestamp()?);
    out(ms, ((end_ns as f64 - start_ns as f64) / 1e6) as f32)
}

/// `cuEventElapsedTime`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) -> CuResult {
    entry(|| elapsed(ms, start, end))
}

/// `cuEventElapsedTime_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventElapsedTime_v2(ms: *mut f32, start: CUevent, end: CUevent) -> CuResult {
    entry(|| elapsed(ms, start, end))
}
