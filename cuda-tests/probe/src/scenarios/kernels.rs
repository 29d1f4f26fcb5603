//! `kernels`: the built-in kernels computing on real data, checked element-wise.

use super::{TIMED, dptr, open};
use crate::args::Args;
use crate::fail::{During, Outcome, verify};
use crate::ptx::Kernels;
use serde_json::json;

/// Value `fill_u32` writes.
const FILL: u32 = 0xC0FF_EE00;
/// The `a` of `saxpy_f32`.
const ALPHA: f32 = 2.5;

/// Runs fill, vector add and saxpy over `--elements` values (default 1,000,000), an unknown kernel, and a
/// launch whose ranges exceed its buffer.
pub fn run(args: &Args) -> Outcome {
    let ctx = open(args)?;
    let n: usize = args.number("elements", 1_000_000)?;
    let stream = ctx.new_stream().during("cuStreamCreate")?;
    let k = Kernels::load(&ctx)?;

    let filled = stream.alloc_zeros::<u32>(n).during("alloc")?;
    // SAFETY: `filled` holds n u32s and outlives the synchronizing copy below.
    unsafe { k.fill_u32(&stream, dptr(&filled, &stream), FILL, n as u64) }?;
    let fill = stream.clone_dtoh(&filled).during("dtoh copy")?;
    verify("fill_u32", &fill, |_| FILL)?;

    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| (2 * i) as f32).collect();
    let (da, db) = (stream.clone_htod(&a).during("htod copy")?, stream.clone_htod(&b).during("htod copy")?);
    let dc = stream.alloc_zeros::<f32>(n).during("alloc")?;
    let abc = [dptr(&da, &stream), dptr(&db, &stream), dptr(&dc, &stream)];
    // SAFETY: a, b and c each hold n f32s and outlive the synchronizing copy below.
    unsafe { k.vector_add_f32(&stream, abc, n as u64) }?;
    let c = stream.clone_dtoh(&dc).during("dtoh copy")?;
    verify("vector_add_f32", &c, |i| a[i] + b[i])?;

    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.25).collect();
    let y0: Vec<f32> = (0..n).map(|i| 1.0 + (i % 7) as f32).collect();
    let (dx, dy) = (stream.clone_htod(&x).during("htod copy")?, stream.clone_htod(&y0).during("htod copy")?);
    // SAFETY: x and y each hold n f32s and outlive the synchronizing copy below.
    unsafe { k.saxpy_f32(&stream, ALPHA, [dptr(&dx, &stream), dptr(&dy, &stream)], n as u64) }?;
    let y = stream.clone_dtoh(&dy).during("dtoh copy")?;
    verify("saxpy_f32", &y, |i| ALPHA * x[i] + y0[i])?;

    let (start, end) = (ctx.new_event(TIMED).during("cuEventCreate")?, ctx.new_event(TIMED).during("cuEventCreate")?);
    start.record(&stream).during("cuEventRecord")?;
    k.custom(&stream)?;
    end.record(&stream).during("cuEventRecord")?;
    let custom_ms = start.elapsed_ms(&end).during("cuEventElapsedTime")?;

    let small = stream.alloc_zeros::<f32>(16).during("alloc")?;
    let p = dptr(&small, &stream);
    // SAFETY: the driver checks a launch's ranges before queueing it; simgpu refuses ranges outside any
    // allocation with CUDA_ERROR_ILLEGAL_ADDRESS, so nothing runs (a real GPU would fault on the device,
    // not in this process).
    let oob = unsafe { k.vector_add_f32(&stream, [p, p, p], 1 << 20) };
    stream.synchronize().during("cuStreamSynchronize")?;

    let c_sum: f64 = c.iter().map(|&v| v as f64).sum();
    let y_sum: f64 = y.iter().map(|&v| v as f64).sum();
    Ok(json!({
        "elements": n,
        "fill_u32": { "value": FILL, "first": fill[0], "last": fill[n - 1] },
        "vector_add_f32": { "c0": c[0], "c1": c[1], "c12345": c.get(12345), "last": c[n - 1], "sum": c_sum },
        "saxpy_f32": { "a": ALPHA, "y0": y[0], "y1": y[1], "last": y[n - 1], "sum": y_sum },
        "custom_kernel_ms": custom_ms,
        // 0 if the driver accepted the launch.
        "out_of_bounds_launch_code": oob.err().and_then(|f| f.code).unwrap_or(0),
    }))
}
