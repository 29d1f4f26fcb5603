//! numba-cuda, unmodified (issue 31): `@cuda.jit` kernels are compiled by NVIDIA's NVVM, linked into a
//! cubin by nvJitLink and loaded with `cuLibraryLoadData`, launched and synchronized on the simulated
//! driver, which says it does not compute them (and, with `SIMGPU_UNKNOWN_KERNELS=poison`, fills their
//! output with NaN so that the program's check fails loudly). Its quota and share checks, under the shim
//! already, are in `apps_in_vgpus.rs`. numba-cuda comes from PyPI (`tools/app-venv.sh`).

use crate::common::cprog::Facts;
use crate::common::{Sim, apps};

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
