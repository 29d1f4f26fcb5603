//! Streams: in-order queues of device work, each drained by its own worker thread, with the legacy
//! default stream's implicit synchronization, per-thread default streams, and stream capture.

use crate::context::{Context, current};
use crate::driver::driver;
use crate::event::Event;
use crate::graph::Capture;
use crate::guard::{CuRes, entry, out};
use parking_lot::{Condvar, Mutex};
use simgpu::kernels::Call;
use std::collections::VecDeque;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUcontext, CUdevice, CUevent, CUhostFn, CUstream, CUstreamCallback};

/// `CU_STREAM_NON_BLOCKING`: the stream does not synchronize with the legacy default stream.
pub const NON_BLOCKING: u32 = 1;
/// `CU_STREAM_LEGACY` handle value.
const HANDLE_LEGACY: u64 = 1;
/// `CU_STREAM_PER_THREAD` handle value.
const HANDLE_PER_THREAD: u64 = 2;

/// Which stream a NULL handle means, decided by the entry point called (`_ptsz`/`_ptds` or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultStream {
    /// NULL is the legacy default stream.
    Legacy,
    /// NULL is the calling thread's per-thread default stream.
    PerThread,
}

/// What kind of stream this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// A context's legacy default stream.
    Legacy,
    /// A thread's per-thread default stream.
    PerThread,
    /// Created with `cuStreamCreate*`.
    Created,
}

/// One unit of queued device work.
#[derive(Clone)]
pub enum Op {
    /// A kernel on the device engine.
    Kernel { device: usize, call: Call },
    /// A copy between two validated ranges.
    Copy { dst: u64, src: u64, len: u64 },
    /// A memset of `count` elements of `elem` bytes.
    Set { dst: u64, value: u32, elem: u8, count: u64 },
    /// Marks an event complete at this point.
    Record(Arc<Event>, u64),
    /// Waits for an event's recording.
    Wait(Arc<Event>, u64),
    /// Waits until another stream has completed this many operations.
    After(Arc<Stream>, u64),
    /// Calls a host function.
    Host(unsafe extern "C" fn(*mut c_void), usize),
    /// Calls a stream callback with the stream's handle.
    Callback(unsafe extern "C" fn(CUstream, u32, *mut c_void), u64, usize),
    /// Frees a stream-ordered allocation.
    Free(u64),
}

struct Queue {
    /// Operations with the time they were queued.
    ops: VecDeque<(Op, u64)>,
    enqueued: u64,
    completed: u64,
    worker: bool,
    closing: bool,
}

/// A stream of one context.
pub struct Stream {
    /// Owning context.
    pub ctx: Weak<Context>,
    /// Device index.
    pub device: usize,
    /// Kind of stream.
    pub kind: StreamKind,
    /// `CU_STREAM_*` flags.
    pub flags: u32,
    /// Priority as given at creation.
    pub priority: i32,
    /// Handle for created streams (0 for default streams, which programs name by special values).
    pub handle: std::sync::OnceLock<u64>,
    queue: Mutex<Queue>,
    changed: Condvar,
    /// Simulated time at which the last completed operation finished.
    clock: AtomicU64,
    /// Set while the stream is being captured into a graph.
    pub capture: Mutex<Option<Capture>>,
}

impl Stream {
    /// A new stream in `ctx`; registered in the context's list for synchronization.
    pub fn new(ctx: &Arc<Context>, kind: StreamKind, flags: u32, priority: i32) -> Arc<Stream> {
        let s = Arc::new(Stream {
            ctx: Arc::downgrade(ctx),
            device: ctx.device,
            kind,
            flags,
            priority,
            handle: std::sync::OnceLock::new(),
            queue: Mutex::new(Queue { ops: VecDeque::new(), enqueued: 0, completed: 0, worker: false, closing: false }),
            changed: Condvar::new(),
            clock: AtomicU64::new(0),
            capture: Mutex::new(None),
        });
        if kind != StreamKind::Legacy {
            ctx.streams.lock().push(Arc::downgrade(&s));
        }
        s
    }

    /// True when the stream synchronizes with the legacy default stream.
    fn blocking(&self) -> bool {
        self.flags & NON_BLOCKING == 0
    }

    /// The handle programs use for this stream.
    pub fn public_handle(&self) -> u64 {
        match self.kind {
            StreamKind::Legacy => 0,
            StreamKind::PerThread => HANDLE_PER_THREAD,
            StreamKind::Created => self.handle.get().copied().unwrap_or(0),
        }
    }

    /// Operations submitted so far.
    pub fn enqueued(&self) -> u64 {
        self.queue.lock().enqueued
    }

    fn pending(&self) -> bool {
        let q = self.queue.lock();
        q.completed < q.enqueued
    }

    /// Queues `op` (or records it into the graph being captured), adding the waits the legacy default
    /// stream's semantics imply.
    pub fn submit(self: &Arc<Self>, op: Op) -> CuRes {
        if let Some(capture) = self.capture.lock().as_mut() {
            capture.ops.push(op);
            return Ok(());
        }
        let mut deps = Vec::new();
        if let Some(ctx) = self.ctx.upgrade() {
            if self.kind == StreamKind::Legacy {
                for s in ctx.all_streams().into_iter().skip(1).filter(|s| s.blocking() && s.pending()) {
                    let upto = s.enqueued();
                    deps.push(Op::After(s, upto));
                }
            } else if self.blocking() && ctx.legacy().pending() {
                let legacy = ctx.legacy().clone();
                let upto = legacy.enqueued();
                deps.push(Op::After(legacy, upto));
            }
        }
        let mut q = self.queue.lock();
        if q.closing {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        deps.push(op);
        q.enqueued += deps.len() as u64;
        let at = simgpu::state::now_ns();
        q.ops.extend(deps.into_iter().map(|op| (op, at)));
        if !q.worker {
            q.worker = true;
            let me = self.clone();
            std::thread::Builder::new()
                .name("simgpu-stream".into())
                .spawn(move || me.drain())
                .map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
        }
        self.changed.notify_all();
        Ok(())
    }

    /// Worker loop: runs queued operations in order until the stream is closed and empty.
    fn drain(self: Arc<Self>) {
        loop {
            let (op, at) = {
                let mut q = self.queue.lock();
                loop {
                    if let Some(entry) = q.ops.pop_front() {
                        break entry;
                    }
                    if q.closing {
                        q.worker = false;
                        return;
                    }
                    self.changed.wait(&mut q);
                }
            };
            let ready = self.clock.load(Ordering::Acquire).max(at);
            let done = self.execute(op, ready);
            self.clock.store(done, Ordering::Release);
            let mut q = self.queue.lock();
            q.completed += 1;
            self.changed.notify_all();
        }
    }

    /// Runs one operation that became ready at simulated time `ready`; returns the simulated time at which
    /// it completed (kernels take engine time, everything else is instantaneous in simulated time).
    fn execute(&self, op: Op, ready: u64) -> u64 {
        let Ok(d) = driver() else { return ready };
        match op {
            Op::Kernel { device, call } => {
                // SAFETY: the ranges were validated at launch, and frees synchronize with queued work.
                return unsafe { simgpu::engine::run(&d.state, d.physical(device), ready, &call) }.end_ns;
            }
            // SAFETY: both ranges were validated when the copy was queued; ptr::copy tolerates overlap.
            Op::Copy { dst, src, len } => unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len as usize) },
            Op::Set { dst, value, elem, count } => crate::copy::fill(dst, value, elem, count),
            Op::Record(event, generation) => event.complete(generation, ready),
            Op::Wait(event, generation) => return event.wait(generation).max(ready),
            Op::After(stream, upto) => {
                stream.wait_for(upto);
                return stream.clock.load(Ordering::Acquire).max(ready);
            }
            // SAFETY: the program registered this host function and data for exactly this call.
            Op::Host(f, data) => unsafe { f(data as *mut c_void) },
            // SAFETY: as above, for the legacy callback signature.
            Op::Callback(f, handle, data) => unsafe { f(handle as CUstream, CUDA_SUCCESS, data as *mut c_void) },
            Op::Free(ptr) => {
                let _ = d.memory.free(d, ptr);
            }
        }
        ready
    }

    /// Waits until `upto` operations have completed.
    pub fn wait_for(&self, upto: u64) {
        let mut q = self.queue.lock();
        while q.completed < upto {
            self.changed.wait(&mut q);
        }
    }

    /// Waits until everything submitted so far has completed.
    pub fn synchronize(&self) {
        let upto = self.enqueued();
        self.wait_for(upto);
    }

    /// True when nothing is pending.
    pub fn idle(&self) -> bool {
        !self.pending()
    }

    /// Lets the worker exit once the queue is empty; later submissions fail.
    pub fn close(&self) {
        let mut q = self.queue.lock();
        q.closing = true;
        self.changed.notify_all();
    }
}

/// Resolves a stream handle as the called entry point defines NULL.
pub fn resolve(handle: CUstream, default: DefaultStream) -> CuRes<Arc<Stream>> {
    match (handle as u64, default) {
        (0, DefaultStream::Legacy) | (HANDLE_LEGACY, _) => Ok(current()?.legacy().clone()),
        (0, DefaultStream::PerThread) | (HANDLE_PER_THREAD, _) => Ok(current()?.per_thread_stream()),
        (h, _) => driver()?.streams.get(h),
    }
}

fn create(ph: *mut CUstream, flags: c_uint, priority: c_int) -> CuRes {
    if ph.is_null() || flags & !NON_BLOCKING != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let ctx = current()?;
    let s = Stream::new(&ctx, StreamKind::Created, flags, priority.clamp(-5, 0));
    let h = driver()?.streams.insert(s.clone());
    let _ = s.handle.set(h);
    out(ph, h as CUstream)
}

/// `cuStreamCreate`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamCreate(ph: *mut CUstream, flags: c_uint) -> CuResult {
    entry(|| create(ph, flags, 0))
}

/// `cuStreamCreateWithPriority`: priorities are clamped to the range the context reports.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamCreateWithPriority(ph: *mut CUstream, flags: c_uint, priority: c_int) -> CuResult {
    entry(|| create(ph, flags, priority))
}

fn destroy(h: CUstream) -> CuRes {
    let d = driver()?;
    let s = d.streams.remove(h as u64)?;
    // Work already queued still runs, as on the real driver; the worker exits afterwards.
    s.close();
    Ok(())
}

/// `cuStreamDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy(h: CUstream) -> CuResult {
    entry(|| destroy(h))
}

/// `cuStreamDestroy_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy_v2(h: CUstream) -> CuResult {
    entry(|| destroy(h))
}

fn add_callback(h: CUstream, f: CUstreamCallback, data: *mut c_void, default: DefaultStream) -> CuRes {
    let f = f.ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let s = resolve(h, default)?;
    // SAFETY: CUresult is a 32-bit C enum; passing it as u32 is the same ABI as the declared signature.
    let f: unsafe extern "C" fn(CUstream, u32, *mut c_void) = unsafe { std::mem::transmute(f) };
    let handle = s.public_handle();
    s.submit(Op::Callback(f, handle, data as usize))
}

fn wait_event(h: CUstream, ev: CUevent, default: DefaultStream) -> CuRes {
    let s = resolve(h, default)?;
    let e = driver()?.events.get(ev as u64)?;
    let generation = e.recorded();
    s.submit(Op::Wait(e, generation))
}

stream_variants! {
    /// `cuStreamSynchronize`.
    fn cuStreamSynchronize / cuStreamSynchronize_ptsz(h: CUstream) => |m| {
        crate::capture_mode::unsafe_call()?;
        resolve(h, m)?.synchronize();
        crate::pool::on_synchronize(crate::driver::driver()?);
        Ok(())
    };
    /// `cuStreamQuery`: `CUDA_ERROR_NOT_READY` while work is pending.
    fn cuStreamQuery / cuStreamQuery_ptsz(h: CUstream) => |m| if resolve(h, m)?.idle() { Ok(()) } else { Err(CUDA_ERROR_NOT_READY) };
    /// `cuStreamWaitEvent`: later work waits for the event's latest recording.
    fn cuStreamWaitEvent / cuStreamWaitEvent_ptsz(h: CUstream, ev: CUevent, _flags: c_uint) => |m| wait_event(h, ev, m);
    /// `cuStreamGetFlags`.
    fn cuStreamGetFlags / cuStreamGetFlags_ptsz(h: CUstream, flags: *mut c_uint) => |m| out(flags, resolve(h, m)?.flags);
    /// `cuStreamGetPriority`.
    fn cuStreamGetPriority / cuStreamGetPriority_ptsz(h: CUstream, priority: *mut c_int) => |m| out(priority, resolve(h, m)?.priority);
    /// `cuStreamGetCtx`.
    fn cuStreamGetCtx / cuStreamGetCtx_ptsz(h: CUstream, pctx: *mut CUcontext) => |m| {
        let ctx = resolve(h, m)?.ctx.upgrade().ok_or(CUDA_ERROR_CONTEXT_IS_DESTROYED)?;
        out(pctx, ctx.handle() as CUcontext)
    };
    /// `cuStreamGetDevice`.
    fn cuStreamGetDevice / cuStreamGetDevice_ptsz(h: CUstream, dev: *mut CUdevice) => |m| out(dev, resolve(h, m)?.device as CUdevice);
    /// `cuStreamGetId`: unique for the life of the stream.
    fn cuStreamGetId / cuStreamGetId_ptsz(h: CUstream, id: *mut u64) => |m| out(id, Arc::as_ptr(&resolve(h, m)?) as u64);
    /// `cuLaunchHostFunc`.
    fn cuLaunchHostFunc / cuLaunchHostFunc_ptsz(h: CUstream, f: CUhostFn, data: *mut c_void) => |m| {
        let f = f.ok_or(CUDA_ERROR_INVALID_VALUE)?;
        resolve(h, m)?.submit(Op::Host(f, data as usize))
    };
    /// `cuStreamAddCallback`.
    fn cuStreamAddCallback / cuStreamAddCallback_ptsz(h: CUstream, f: CUstreamCallback, data: *mut c_void, _flags: c_uint) => |m| add_callback(h, f, data, m);
}
