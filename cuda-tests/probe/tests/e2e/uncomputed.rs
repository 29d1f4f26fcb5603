//! Kernels the simulator cannot compute, stated honestly (issue 31): `custom_kernel` (real PTX, not a
//! built-in) runs as a timed no-op that says so once per process on stderr, counts in the device's
//! `uncomputed` counter and is named in the engine trace; `SIMGPU_KERNEL_TIMES` sets its time by name;
//! `SIMGPU_UNKNOWN_KERNELS=poison` fills the memory its pointer argument reaches with NaN bytes and
//! `refuse` refuses its launches with `CUDA_ERROR_NOT_SUPPORTED`.

use crate::common::Sim;
use crate::common::cprog::{CBuild, Facts};
use std::sync::atomic::Ordering;

const NOT_SUPPORTED: &str = "801";
const SAID: &str = "kernel custom_kernel is not one the simulator computes";

/// Runs the program on a machine with `vars` set; its facts and the device's `uncomputed` count after.
fn run(tag: &str, vars: &[(&str, &str)]) -> (Facts, u64, Vec<simgpu::trace::Entry>) {
    let program = CBuild::program("uncomputed.c").link_driver().build();
    let trace = crate::common::build_dir().join(format!("uncomputed-{tag}-{}.trace", std::process::id()));
    let _ = std::fs::remove_file(&trace);
    let mut sim = Sim::new(&format!("uncomputed-{tag}")).with("SIMGPU_ENGINE_TRACE", trace.to_str().unwrap());
    for (k, v) in vars {
        sim = sim.with(k, v);
    }
    let facts = Facts::ok(sim.command_for(&program, &[]));
    let count = sim.driver_state().device(0).uncomputed.load(Ordering::Acquire);
    let entries = simgpu::trace::read(&trace).unwrap_or_default();
    let _ = std::fs::remove_file(&trace);
    (facts, count, entries)
}

#[test]
fn an_unknown_kernel_is_a_timed_no_op_said_once_counted_and_traced() {
    let (facts, count, trace) = run("noop", &[("SIMGPU_KERNEL_TIMES", "*gemm*=1ms,custom_*=30ms,*=50us")]);
    assert_eq!(facts.all("launch"), ["0", "0", "0"]);
    assert_eq!((facts.get("first"), facts.get("last")), ("12345678", "12345678"), "the buffer is untouched");
    assert_eq!(facts.stderr.matches(SAID).count(), 1, "said once per process: {}", facts.stderr);
    assert_eq!(count, 3, "three launches counted uncomputed");
    let custom: Vec<_> = trace.iter().filter(|e| e.uncomputed.as_deref() == Some("custom_kernel")).collect();
    assert_eq!(custom.len(), 3, "{trace:?}");
    assert!(custom.iter().all(|e| e.end_ns - e.start_ns == 30_000_000), "SIMGPU_KERNEL_TIMES: {custom:?}");

    let (quiet, _, _) = run("quiet", &[("SIMGPU_UNKNOWN_KERNELS_QUIET", "1")]);
    assert!(!quiet.stderr.contains(SAID), "{}", quiet.stderr);
}

#[test]
fn poison_fills_what_the_kernel_reaches_and_refuse_refuses_it() {
    let (poisoned, count, _) = run("poison", &[("SIMGPU_UNKNOWN_KERNELS", "poison")]);
    assert_eq!(poisoned.all("launch"), ["0", "0", "0"]);
    assert_eq!((poisoned.get("first"), poisoned.get("last")), ("ffffffff", "ffffffff"), "NaN bytes throughout");
    assert_eq!(count, 3);
    let (refused, count, _) = run("refuse", &[("SIMGPU_UNKNOWN_KERNELS", "refuse")]);
    assert_eq!(refused.all("launch"), [NOT_SUPPORTED; 3]);
    assert_eq!(refused.get("first"), "12345678");
    assert_eq!(count, 0, "nothing ran");
    assert!(refused.stderr.contains("is refused"), "{}", refused.stderr);
}
