//! CUDA graphs as recorded operation sequences: stream capture, instantiation and launch.

use crate::capture_mode;
use crate::driver::driver;
use crate::guard::{CuRes, ensure, entry, out};
use crate::stream::{DefaultStream, Op, StreamKind, resolve};
use parking_lot::Mutex;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUgraph, CUgraphExec, CUgraphNode, CUstream};

/// An in-progress capture of a stream.
pub struct Capture {
    /// Operations recorded so far.
    pub ops: Vec<Op>,
    /// Capture sequence id.
    pub id: u64,
    /// Its mode, thread and validity.
    begun: capture_mode::Begun,
    /// The graph it adds to (`cuStreamBeginCaptureToGraph`), instead of a new one.
    into: Option<u64>,
}

/// A graph: the operations of one captured sequence, in order.
pub struct Graph {
    ops: Mutex<Vec<Op>>,
}

/// An instantiated graph.
pub struct GraphExec {
    ops: Vec<Op>,
}

static CAPTURE_IDS: AtomicU64 = AtomicU64::new(1);

/// `CU_STREAM_CAPTURE_STATUS_NONE` / `ACTIVE`.
const STATUS_NONE: c_int = 0;
const STATUS_ACTIVE: c_int = 1;

fn begin(h: CUstream, mode: DefaultStream, capture_mode: c_int, into: Option<CUgraph>) -> CuRes {
    let s = resolve(h, mode)?;
    if s.kind == StreamKind::Legacy {
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    let into = match into {
        Some(g) => Some(driver()?.graphs.get(g as u64).map(|_| g as u64)?),
        None => None,
    };
    let mut c = s.capture.lock();
    if c.is_some() {
        return Err(CUDA_ERROR_ILLEGAL_STATE);
    }
    let id = CAPTURE_IDS.fetch_add(1, Ordering::Relaxed);
    let begun = capture_mode::begin(id, capture_mode)?;
    *c = Some(Capture { ops: Vec::new(), id, begun, into });
    Ok(())
}

stream_variants! {
    /// `cuStreamBeginCapture`: in global mode.
    fn cuStreamBeginCapture / cuStreamBeginCapture_ptsz(h: CUstream) => |m| begin(h, m, capture_mode::GLOBAL, None);
    /// `cuStreamBeginCapture_v2`.
    fn cuStreamBeginCapture_v2 / cuStreamBeginCapture_v2_ptsz(h: CUstream, mode: c_int) => |m| begin(h, m, mode, None);
    /// `cuStreamBeginCaptureToGraph`: the captured work is added to `graph` (the simulation keeps no
    /// dependency nodes, so `deps` and `data` are not read).
    fn cuStreamBeginCaptureToGraph / cuStreamBeginCaptureToGraph_ptsz(
        h: CUstream,
        graph: CUgraph,
        _deps: *const CUgraphNode,
        _data: *const std::ffi::c_void,
        _count: usize,
        mode: c_int,
    ) => |m| begin(h, m, mode, Some(graph));
}

fn end(h: CUstream, graph: *mut CUgraph, mode: DefaultStream) -> CuRes {
    ensure(!graph.is_null())?;
    let s = resolve(h, mode)?;
    let c = {
        let mut held = s.capture.lock();
        capture_mode::may_end(&held.as_ref().ok_or(CUDA_ERROR_ILLEGAL_STATE)?.begun)?;
        held.take().ok_or(CUDA_ERROR_ILLEGAL_STATE)?
    };
    if let Err(invalidated) = capture_mode::end(c.id, &c.begun) {
        out(graph, std::ptr::null_mut())?;
        return Err(invalidated);
    }
    let d = driver()?;
    let g = match c.into {
        Some(g) => {
            d.graphs.get(g)?.ops.lock().extend(c.ops);
            g
        }
        None => d.graphs.insert(Arc::new(Graph { ops: Mutex::new(c.ops) })),
    };
    out(graph, g as CUgraph)
}

stream_variants! {
    /// `cuStreamEndCapture`.
    fn cuStreamEndCapture / cuStreamEndCapture_ptsz(h: CUstream, graph: *mut CUgraph) => |m| end(h, graph, m);
}

fn capture_status(h: CUstream, mode: DefaultStream) -> CuRes<(c_int, u64)> {
    let s = resolve(h, mode)?;
    let c = s.capture.lock();
    Ok(c.as_ref().map_or((STATUS_NONE, 0), |c| (STATUS_ACTIVE, c.id)))
}

fn capture_info(h: CUstream, status: *mut c_int, id: *mut u64, mode: DefaultStream) -> CuRes {
    let (st, cid) = capture_status(h, mode)?;
    out(status, st)?;
    if !id.is_null() {
        out(id, cid)?;
    }
    Ok(())
}

stream_variants! {
    /// `cuStreamIsCapturing`.
    fn cuStreamIsCapturing / cuStreamIsCapturing_ptsz(h: CUstream, status: *mut c_int) => |m| out(status, capture_status(h, m)?.0);
    /// `cuStreamGetCaptureInfo_v2`: status and id; the simulation keeps no dependency nodes.
    fn cuStreamGetCaptureInfo_v2 / cuStreamGetCaptureInfo_v2_ptsz(
        h: CUstream,
        status: *mut c_int,
        id: *mut u64,
        graph: *mut CUgraph,
        deps: *mut *const CUgraphNode,
        num_deps: *mut usize,
    ) => |m| {
        capture_info(h, status, id, m)?;
        clear_capture_outputs(graph, deps, num_deps)
    };
}

fn clear_capture_outputs(graph: *mut CUgraph, deps: *mut *const CUgraphNode, num_deps: *mut usize) -> CuRes {
    if !graph.is_null() {
        out(graph, std::ptr::null_mut())?;
    }
    if !deps.is_null() {
        out(deps, std::ptr::null())?;
    }
    if !num_deps.is_null() {
        out(num_deps, 0)?;
    }
    Ok(())
}

/// `cuGraphCreate`: an empty graph.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphCreate(graph: *mut CUgraph, _flags: c_uint) -> CuResult {
    entry(|| {
        ensure(!graph.is_null())?;
        let g = driver()?.graphs.insert(Arc::new(Graph { ops: Mutex::new(Vec::new()) }));
        out(graph, g as CUgraph)
    })
}

/// `cuGraphDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphDestroy(graph: CUgraph) -> CuResult {
    entry(|| driver()?.graphs.remove(graph as u64).map(|_| ()))
}

/// `cuGraphGetNodes`: the number of nodes (one per captured operation). The simulation keeps operations,
/// not node objects, so asking for the nodes themselves is `CUDA_ERROR_NOT_SUPPORTED`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphGetNodes(graph: CUgraph, nodes: *mut CUgraphNode, count: *mut usize) -> CuResult {
    entry(|| {
        ensure(!count.is_null())?;
        let n = driver()?.graphs.get(graph as u64)?.ops.lock().len();
        if !nodes.is_null() && n > 0 {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        out(count, n)
    })
}

fn instantiate(exec: *mut CUgraphExec, graph: CUgraph) -> CuRes {
    ensure(!exec.is_null())?;
    let d = driver()?;
    let ops = d.graphs.get(graph as u64)?.ops.lock().clone();
    let e = d.graph_execs.insert(Arc::new(GraphExec { ops }));
    out(exec, e as CUgraphExec)
}

/// `cuGraphInstantiateWithFlags`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphInstantiateWithFlags(exec: *mut CUgraphExec, graph: CUgraph, _flags: c_ulonglong) -> CuResult {
    entry(|| instantiate(exec, graph))
}

/// `cuGraphInstantiate_v2` (the pre-12.0 signature with an error node and log buffer).
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphInstantiate_v2(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    error_node: *mut CUgraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CuResult {
    entry(|| {
        if !error_node.is_null() {
            out(error_node, std::ptr::null_mut())?;
        }
        if !log.is_null() && log_size > 0 {
            out(log, 0)?;
        }
        instantiate(exec, graph)
    })
}

/// `cuGraphExecDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphExecDestroy(exec: CUgraphExec) -> CuResult {
    entry(|| driver()?.graph_execs.remove(exec as u64).map(|_| ()))
}

/// `cuGraphUpload`: nothing to upload in the simulation.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphUpload(exec: CUgraphExec, _stream: CUstream) -> CuResult {
    entry(|| driver()?.graph_execs.get(exec as u64).map(|_| ()))
}

fn graph_launch(exec: CUgraphExec, h: CUstream, mode: DefaultStream) -> CuRes {
    let e = driver()?.graph_execs.get(exec as u64)?;
    let s = resolve(h, mode)?;
    for op in &e.ops {
        s.submit(op.clone())?;
    }
    Ok(())
}

stream_variants! {
    /// `cuGraphLaunch`: queues the recorded operations in order.
    fn cuGraphLaunch / cuGraphLaunch_ptsz(exec: CUgraphExec, h: CUstream) => |m| graph_launch(exec, h, m);
}

/// `cuGraphInstantiate` (CUDA 10.0 symbol; same arguments as `_v2`).
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphInstantiate(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    error_node: *mut CUgraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CuResult {
    cuGraphInstantiate_v2(exec, graph, error_node, log, log_size)
}
