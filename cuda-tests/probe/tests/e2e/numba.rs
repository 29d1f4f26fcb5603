//! numba-cuda, unmodified (issue 31): `@cuda.jit` kernels are compiled by NVIDIA's NVVM, linked into a
//! cubin by nvJitLink and loaded with `cuLibraryLoadData`, launched and synchronized on the simulated
//! driver, which says it does not compute them (and, with `SIMGPU_UNKNOWN_KERNELS=poison`, fills their
//! output with NaN so that the program's check fails loudly); under the shim a 2 GiB quota is the
//! device's size to numba and refuses a 3 GiB array. numba-cuda comes from PyPI (`tools/app-venv.sh`).

use crate::common::cprog::Facts;
use crate::common::{Sim, apps};

const OUT_OF_MEMORY: &str = "2";

fn app(sim: &Sim, what: &str) -> Facts {
    apps::run(sim, "numba", "numba_app.py", what)
}

#[test]
fn unmodified_jit_kernels_load_launch_and_say_they_are_not_computed() {
    let facts = app(&Sim::new("numba-kernel"), "kernel");
    assert_eq!(facts.get("launched"), "ok");
    assert_eq!(facts.get("right"), "False", "simgpu computes no numba kernel: {}", facts.stdout);
    assert!(facts.stderr.contains("is not one the simulator computes"), "{}", facts.stderr);
    let poisoned = app(&Sim::new("numba-poison").with("SIMGPU_UNKNOWN_KERNELS", "poison"), "kernel");
    assert_eq!(poisoned.get("nan"), "True", "the output is NaN: a program reading it fails loudly");
}

#[test]
fn a_quota_is_the_device_to_numba_and_refuses_what_exceeds_it() {
    let facts = app(&Sim::shimmed("numba-quota").with("TESSERA_MEMORY_LIMIT", "2GiB"), "quota");
    assert_eq!(facts.get("total"), (2u64 << 30).to_string());
    assert_eq!(facts.get("one_gib"), "ok");
    assert_eq!(facts.get("three_gib"), format!("refused {OUT_OF_MEMORY}"), "{}", facts.stdout);
}

#[test]
fn two_numba_programs_in_vgpus_of_30_and_70_percent_get_30_and_70_percent_of_the_engine() {
    use crate::common::tessera::Machine;
    use crate::common::{Guarded, timing_turn};
    let _turn = timing_turn();
    let mut m = Machine::new("numba-shares", "small");
    m.start();
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "1GiB", "--share", "30"]);
    m.ok(&["vgpu", "create", "b", "--device", "0", "--memory", "1GiB", "--share", "70"]);
    let trace = m.file("engine.trace");
    let python = apps::python("numba");
    let spawn = |vgpu: &str| {
        let mut cmd =
            m.tenant_running(vgpu, python.to_str().unwrap(), &[&apps::script("numba_app.py"), "saturate", "8"]);
        cmd.env("SIMGPU_ENGINE_TRACE", &trace).env("SIMGPU_KERNEL_TIMES", "*add*=500us");
        Guarded::spawn(&mut cmd).expect("spawn a numba tenant")
    };
    let (a, b) = (spawn("a"), spawn("b"));
    let (pa, pb) = (a.id(), b.id());
    for tenant in [a, b] {
        let out = tenant.into_child().wait_with_output().expect("wait for a numba tenant");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // The window in which both ran (after a second of each, to leave their start-up out).
    let entries = simgpu::trace::read(&trace).expect("read the engine trace");
    let of = |pid: u32| entries.iter().filter(move |e| e.pid == pid && e.uncomputed.is_some());
    let first = |pid: u32| of(pid).map(|e| e.start_ns).min().expect("kernels of each program");
    let last = |pid: u32| of(pid).map(|e| e.end_ns).max().expect("kernels of each program");
    let (from, to) = (first(pa).max(first(pb)) + 1_000_000_000, last(pa).min(last(pb)));
    assert!(to > from + 2_000_000_000, "the two programs overlapped for less than 3 s");
    let ran = |pid: u32| -> u64 { of(pid).map(|e| e.end_ns.min(to).saturating_sub(e.start_ns.max(from))).sum() };
    let (ra, rb) = (ran(pa) as f64, ran(pb) as f64);
    let split = ra / (ra + rb);
    eprintln!(
        "numba in 30% and 70% vGPUs: {:.1}/{:.1} of the engine time they used",
        100.0 * split,
        100.0 * (1.0 - split)
    );
    assert!((split - 0.30).abs() <= 0.01, "a got {:.3} of the engine time, not 0.30 within 0.01", split);
}
