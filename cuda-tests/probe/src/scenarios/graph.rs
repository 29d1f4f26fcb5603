//! `graph`: kernel launches captured from a stream into a graph, which is instantiated and replayed.

use super::{dptr, open};
use crate::args::Args;
use crate::fail::{During, Failure, Outcome, verify};
use crate::ptx::Kernels;
use cudarc::driver::sys;
use serde_json::json;

/// Captures fill, vector add and saxpy on `--elements` values (default 65536), checks nothing ran during
/// capture, then launches the graph twice, checking the results after each launch.
pub fn run(args: &Args) -> Outcome {
    let ctx = open(args)?;
    let n: usize = args.number("elements", 1 << 16)?;
    let stream = ctx.new_stream().during("cuStreamCreate")?;
    let k = Kernels::load(&ctx)?;

    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| (i % 100) as f32).collect();
    let (da, db) = (stream.clone_htod(&a).during("htod copy")?, stream.clone_htod(&b).during("htod copy")?);
    let dc = stream.alloc_zeros::<f32>(n).during("alloc")?;
    let dy = stream.clone_htod(&vec![1.0f32; n]).during("htod copy")?;
    let flags = stream.alloc_zeros::<u32>(n).during("alloc")?;
    let [pa, pb, pc, py] = [&da, &db, &dc, &dy].map(|s| dptr(s, &stream));
    let pf = dptr(&flags, &stream);
    stream.synchronize().during("cuStreamSynchronize")?;

    stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED).during("cuStreamBeginCapture")?;
    let status_during = stream.capture_status().during("cuStreamIsCapturing")?;
    // SAFETY: every buffer holds n elements and outlives each launch of the graph (all synchronized below).
    unsafe {
        k.fill_u32(&stream, pf, 7, n as u64)?;
        k.vector_add_f32(&stream, [pa, pb, pc], n as u64)?;
        k.saxpy_f32(&stream, 2.0, [pc, py], n as u64)?;
    }
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .during("cuStreamEndCapture / cuGraphInstantiate")?
        .ok_or_else(|| Failure::new("capture produced no graph"))?;
    let status_after = stream.capture_status().during("cuStreamIsCapturing")?;

    verify("flags before the graph ran", &stream.clone_dtoh(&flags).during("dtoh copy")?, |_| 0)?;
    verify("c before the graph ran", &stream.clone_dtoh(&dc).during("dtoh copy")?, |_| 0.0)?;

    graph.launch().during("cuGraphLaunch")?;
    stream.synchronize().during("cuStreamSynchronize")?;
    verify("fill_u32 in the graph", &stream.clone_dtoh(&flags).during("dtoh copy")?, |_| 7)?;
    let c = stream.clone_dtoh(&dc).during("dtoh copy")?;
    verify("vector_add_f32 in the graph", &c, |i| a[i] + b[i])?;
    let y1 = stream.clone_dtoh(&dy).during("dtoh copy")?;
    verify("saxpy_f32 in the graph", &y1, |i| 2.0 * c[i] + 1.0)?;

    graph.launch().during("cuGraphLaunch")?;
    stream.synchronize().during("cuStreamSynchronize")?;
    let y2 = stream.clone_dtoh(&dy).during("dtoh copy")?;
    verify("saxpy_f32 after the second launch", &y2, |i| 2.0 * c[i] + y1[i])?;

    Ok(json!({
        "elements": n,
        "capture_status_during": format!("{status_during:?}"),
        "capture_status_after": format!("{status_after:?}"),
        "launches": 2,
        "c_last": c[n - 1],
        "y_after_first": y1[n - 1],
        "y_after_second": y2[n - 1],
    }))
}
