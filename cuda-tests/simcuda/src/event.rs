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

#[derive(Default)]
struct Marks {
    recorded: u64,
    completed: u64,
    timestamp_ns: u64,
}

/// One event.
pub struct Event {
    flags: u32,
    marks: Mutex<Marks>,
    changed: Condvar,
    /// An interprocess event's generations, shared with the processes that opened it; `marks` then
    /// holds none.
    shared: Option<SharedMarks>,
}

impl Event {
    /// A new event; an interprocess one gets its shared page.
    pub fn new(flags: u32) -> CuRes<Event> {
        let shared = if flags & INTERPROCESS != 0 { Some(SharedMarks::create()?) } else { None };
        Ok(Event { flags, marks: Mutex::default(), changed: Condvar::new(), shared })
    }

    /// An event another process shared (`cuIpcOpenEventHandle`): it behaves as one created here with
    /// `CU_EVENT_DISABLE_TIMING`.
    pub fn opened(shared: SharedMarks) -> Event {
        Event { flags: DISABLE_TIMING, marks: Mutex::default(), changed: Condvar::new(), shared: Some(shared) }
    }

    /// The page an interprocess event keeps its generations in.
    pub fn shared(&self) -> Option<&SharedMarks> {
        self.shared.as_ref()
    }

    /// Starts a new recording; returns its generation.
    fn record(&self) -> u64 {
        if let Some(s) = &self.shared {
            return s.recorded().fetch_add(1, Ordering::AcqRel) + 1;
        }
        let mut m = self.marks.lock();
        m.recorded += 1;
        m.recorded
    }

    /// The latest recording's generation (0 if never recorded).
    pub fn recorded(&self) -> u64 {
        match &self.shared {
            Some(s) => s.recorded().load(Ordering::Acquire),
            None => self.marks.lock().recorded,
        }
    }

    /// Called by the stream when the recording `generation` is reached at simulated time `at_ns`.
    pub fn complete(&self, generation: u64, at_ns: u64) {
        if let Some(s) = &self.shared {
            // The time first: a process that sees the generation reads the time it completed at.
            s.completed_at().fetch_max(at_ns, Ordering::AcqRel);
            s.completed().fetch_max(generation, Ordering::AcqRel);
            return;
        }
        let mut m = self.marks.lock();
        if generation > m.completed {
            m.completed = generation;
            m.timestamp_ns = at_ns;
        }
        self.changed.notify_all();
    }

    /// Waits until recording `generation` has completed; returns the simulated time it completed at.
    pub fn wait(&self, generation: u64) -> u64 {
        if let Some(s) = &self.shared {
            // Another process may complete it: no condition variable reaches there, so look again.
            while s.completed().load(Ordering::Acquire) < generation {
                std::thread::sleep(SHARED_POLL);
            }
            return s.completed_at().load(Ordering::Acquire);
        }
        let mut m = self.marks.lock();
        while m.completed < generation {
            self.changed.wait(&mut m);
        }
        m.timestamp_ns
    }

    /// When the latest recording completed: `INVALID_HANDLE` if never recorded, `NOT_READY` if pending.
    fn timestamp(&self) -> CuRes<u64> {
        let m = self.marks.lock();
        match m.recorded {
            0 => Err(CUDA_ERROR_INVALID_HANDLE),
            r if m.completed < r => Err(CUDA_ERROR_NOT_READY),
            _ => Ok(m.timestamp_ns),
        }
    }

    fn done(&self) -> bool {
        if let Some(s) = &self.shared {
            return s.completed().load(Ordering::Acquire) >= s.recorded().load(Ordering::Acquire);
        }
        let m = self.marks.lock();
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
