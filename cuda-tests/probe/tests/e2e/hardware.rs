//! End-to-end checks that assert only what any CUDA driver does, so they run on the simulated driver (in
//! the suite) and on a real one: `tools/real-gpu-check.sh` runs this test binary with
//! `TESSERA_TEST_DRIVER=real`. The shipped kernels compute their results (launched from a captured
//! graph), a spin lasts at least its time, a quota is the memory a program sees and can take, a directly
//! linked C program's calls land in the shim, and `tessera run` runs a program under it. No figure of the
//! simulated device (its size, what a context costs, its kernel time) and no simulator-only scenario (a
//! launch out of bounds, the simulator's state file) appears here.

use crate::common;

use common::cprog::{Facts, direct_program};
use common::tessera::tessera;
use common::{GIB, MIB, OUT_OF_MEMORY, Sim, at, f64_at, real_driver, u64_at};
use std::path::PathBuf;

/// A region file path private to one test (a process without `TESSERA_VGPU` creates none; named so that
/// nothing is ever written to the user's default folder), removed on drop.
struct PrivateRegion(PathBuf);

impl PrivateRegion {
    fn new(tag: &str) -> PrivateRegion {
        let p = std::env::temp_dir().join(format!("tessera-hardware-test-{}-{tag}.region", std::process::id()));
        let _ = std::fs::remove_file(&p);
        PrivateRegion(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("UTF-8 temp path")
    }
}

impl Drop for PrivateRegion {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The machine under the shim with a 1 GiB quota on device 0 and no vGPU.
fn one_gib_quota(tag: &str, region: &PrivateRegion) -> Sim {
    Sim::shimmed(tag).with("TESSERA_MEMORY_LIMIT", "1GiB").with("TESSERA_REGION", region.path())
}

#[test]
fn the_shipped_kernels_compute_their_results_from_a_captured_graph() {
    let r = Sim::new("hw-graph").ok(&["graph"]);
    // The scenario checked fill_u32's output and that nothing ran during the capture; the values below
    // are vector_add_f32 then saxpy_f32 with a = 2, launched twice.
    assert_eq!(at(&r, "capture_status_during"), "CU_STREAM_CAPTURE_STATUS_ACTIVE");
    assert_eq!(at(&r, "capture_status_after"), "CU_STREAM_CAPTURE_STATUS_NONE");
    let n = u64_at(&r, "elements");
    let c = (n - 1) as f64 + ((n - 1) % 100) as f64;
    assert_eq!(f64_at(&r, "c_last"), c);
    assert_eq!(f64_at(&r, "y_after_first"), 2.0 * c + 1.0);
    assert_eq!(f64_at(&r, "y_after_second"), 4.0 * c + 1.0);
}

#[test]
fn a_spin_lasts_at_least_the_time_it_is_given() {
    let r = Sim::new("hw-spin").ok(&["spin", "--ns", "20ms", "--count", "5"]);
    let measured: Vec<f64> =
        r["measured_ms"].as_array().expect("measured_ms").iter().map(|v| v.as_f64().expect("a number")).collect();
    assert_eq!(measured.len(), 5, "{r}");
    // A lower bound only (functional: the kernel waits on the GPU's timer); how close a spin comes to its
    // time on the simulated engine is scheduling.rs's test.
    for (i, ms) in measured.iter().enumerate() {
        assert!(*ms >= 19.0, "spin {i} of 20 ms took {ms} ms by events: {measured:?}");
    }
}

#[test]
fn a_quota_is_the_memory_a_program_sees_and_can_take() {
    let region = PrivateRegion::new("figures");
    let sim = one_gib_quota("hw-quota", &region);
    let r = sim.ok(&["mem-info"]);
    assert_eq!(u64_at(&r, "total"), GIB, "{r}");
    assert_eq!(u64_at(&r, "total_mem"), GIB, "{r}");
    let free = u64_at(&r, "free");
    assert!(free > 0 && free < GIB, "free {free} of a 1 GiB quota, with a context: {r}");
    for v in ["nvml.v1", "nvml.v2"] {
        assert_eq!(u64_at(&r, &format!("{v}.code")), 0, "{r}");
        assert_eq!(u64_at(&r, &format!("{v}.total")), GIB, "{r}");
    }
    let over = sim.ok(&["alloc", "--bytes", "2GiB", "--hold-ms", "0"]);
    assert_eq!(at(&over, "allocated"), false, "{over}");
    assert_eq!(u64_at(&over, "cuda_error"), OUT_OF_MEMORY, "{over}");
    // Within the quota: the allocation's report is the first line (the probe then holds it briefly).
    let out = sim.command(&["alloc", "--bytes", "256MiB", "--hold-ms", "0"]).output().expect("run the probe");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let first: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap_or("")).expect("a JSON report");
    assert_eq!(at(&first, "allocated"), true, "{first}");
    assert!(u64_at(&first, "free_before") - u64_at(&first, "free_after") >= 256 * MIB, "{first}");
}

/// Checks a run of `cuda-tests/c/direct.c` under the shim with a 1 GiB quota.
fn assert_direct_under_shim(facts: &Facts) {
    assert_eq!(facts.get("vector_add"), "ok", "vector_add_f32 from cuda-tests/kernels/kernels.ptx");
    for hooked in ["cuMemAlloc_v2", "cuLaunchKernel"] {
        assert_eq!(facts.get(&format!("address.{hooked}")), format!("libtessera.so:{hooked}"));
    }
    for name in ["cuMemAllocAsync", "cuLaunchKernel"] {
        assert_eq!(facts.get(&format!("proc_address.{name}")), format!("libtessera.so:{name}"));
    }
    // The calls the shim does not hook go to the driver the test chose, never a fallback.
    let unhooked = facts.get("address.cuStreamSynchronize");
    assert!(unhooked.ends_with(":cuStreamSynchronize") && !unhooked.contains("tessera"), "{unhooked}");
    assert_eq!(unhooked.starts_with("libsimcuda.so:"), !real_driver(), "{unhooked}");
    assert_eq!(facts.num("mem_total") as u64, GIB);
    assert_eq!(facts.num("over_quota_alloc"), OUT_OF_MEMORY as i64, "an allocation above the quota");
}

#[test]
fn a_directly_linked_c_program_computes_under_the_shim_within_its_quota() {
    let exe = direct_program(false);
    let region = PrivateRegion::new("direct");
    let facts = Facts::ok(one_gib_quota("hw-direct", &region).command_for(&exe, &[&GIB.to_string()]));
    assert_direct_under_shim(&facts);
}

#[test]
fn tessera_run_runs_a_program_under_the_shim_with_its_quota() {
    let exe = direct_program(false);
    let region = PrivateRegion::new("run");
    let sim = Sim::new("hw-run").without_shim().with("TESSERA_REGION", region.path());
    let args = ["run", "--memory", "1GiB", "--", exe.to_str().expect("UTF-8 path"), &GIB.to_string()];
    let facts = Facts::ok(sim.command_for(tessera(), &args));
    assert_direct_under_shim(&facts);
}
