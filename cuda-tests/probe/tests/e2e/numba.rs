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
    let split = apps::split_30_70("numba-shares", "numba", "numba_app.py", &["saturate", "8"], "*add*=1ms");
    assert!((split - 0.30).abs() <= 0.01, "a got {split:.3} of the engine time, not 0.30 within 0.01");
}
