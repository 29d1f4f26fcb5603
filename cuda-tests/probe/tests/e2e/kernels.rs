//! PTX modules and the built-in kernels, launched directly and from a captured graph.

use crate::common;

use common::{ILLEGAL_ADDRESS, Sim, at, f64_at, u64_at};

#[test]
fn builtin_kernels_compute_correct_results() {
    let r = Sim::new("kernels").with("SIMGPU_KERNEL_TIME", "30ms").ok(&["kernels"]);
    let n = u64_at(&r, "elements");
    assert_eq!(n, 1_000_000);
    assert_eq!(u64_at(&r, "fill_u32.first"), u64_at(&r, "fill_u32.value"));
    assert_eq!(u64_at(&r, "fill_u32.last"), u64_at(&r, "fill_u32.value"));
    // c[i] = a[i] + b[i] with a[i] = i and b[i] = 2i: every value is an exact integer in f32.
    assert_eq!(f64_at(&r, "vector_add_f32.c0"), 0.0);
    assert_eq!(f64_at(&r, "vector_add_f32.c1"), 3.0);
    assert_eq!(f64_at(&r, "vector_add_f32.c12345"), 37035.0);
    assert_eq!(f64_at(&r, "vector_add_f32.last"), 3.0 * (n - 1) as f64);
    assert_eq!(f64_at(&r, "vector_add_f32.sum"), 3.0 * (n * (n - 1) / 2) as f64);
    // y[i] = 2.5 * x[i] + y[i] with x[i] = (i mod 1000) / 4 and y[i] = 1 + i mod 7.
    let expected: f64 = (0..n).map(|i| 2.5 * ((i % 1000) as f64 * 0.25) + 1.0 + (i % 7) as f64).sum();
    assert_eq!(f64_at(&r, "saxpy_f32.y0"), 1.0);
    assert_eq!(f64_at(&r, "saxpy_f32.y1"), 2.5 * 0.25 + 2.0);
    assert_eq!(f64_at(&r, "saxpy_f32.sum"), expected);
    // A kernel simgpu does not know costs SIMGPU_KERNEL_TIME of engine time. Events are stamped on the
    // wall clock, so a host stall can only lengthen the span: the bound above is loose, the one below exact.
    let custom = f64_at(&r, "custom_kernel_ms");
    assert!((30.0..1000.0).contains(&custom), "custom kernel took {custom} ms, SIMGPU_KERNEL_TIME is 30 ms");
    assert_eq!(u64_at(&r, "out_of_bounds_launch_code"), ILLEGAL_ADDRESS);
}

#[test]
fn graph_capture_and_launch() {
    let r = Sim::new("graph").ok(&["graph"]);
    assert_eq!(at(&r, "capture_status_during"), "CU_STREAM_CAPTURE_STATUS_ACTIVE");
    assert_eq!(at(&r, "capture_status_after"), "CU_STREAM_CAPTURE_STATUS_NONE");
    let n = u64_at(&r, "elements") as f64;
    // Last element: a = n-1, b = (n-1) mod 100; y starts at 1 and gains 2c per launch.
    let c = (n - 1.0) + ((n as u64 - 1) % 100) as f64;
    assert_eq!(f64_at(&r, "c_last"), c);
    assert_eq!(f64_at(&r, "y_after_first"), 2.0 * c + 1.0);
    assert_eq!(f64_at(&r, "y_after_second"), 4.0 * c + 1.0);
}
