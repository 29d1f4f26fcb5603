//! The applications of issue 31 in their CUDA 13 builds (issue 32), from PyPI (`tools/app-venv.sh`):
//! numba-cuda with its `cu13` extra (NVIDIA's cuda-bindings 13, NVVM and nvJitLink 13) and
//! `cupy-cuda13x` (CUDA runtime 13 linked statically), on the simulated driver presenting itself as a
//! CUDA 13.0 driver, bare and under the shim: kernels compile, load and launch; a 2 GiB quota is the
//! memory each sees and refuses 3 GiB. Their CUDA 12 builds are `numba.rs`, `cupy.rs` and
//! `apps_in_vgpus.rs`.

use crate::common::{Sim, apps};

/// A bare machine whose driver says it is CUDA 13.0.
fn cuda13(tag: &str) -> Sim {
    Sim::new(tag).with("SIMGPU_DRIVER_VERSION", "13000")
}

/// [`cuda13`] under the shim with a 2 GiB quota.
fn cuda13_quota(tag: &str) -> Sim {
    Sim::shimmed(tag).with("SIMGPU_DRIVER_VERSION", "13000").with("TESSERA_MEMORY_LIMIT", "2GiB")
}

#[test]
fn numba_for_cuda_13_launches_its_kernels_and_keeps_to_its_quota() {
    // JIT compilers (NVVM, NVRTC) take a CPU for seconds: never beside a test that measures time.
    let _load = crate::common::load_turn();
    let facts = apps::run(&cuda13("numba13-kernel"), "numba13", "numba_app.py", "kernel");
    assert_eq!(facts.get("launched"), "ok");
    assert!(facts.stderr.contains("is not one the simulator computes"), "{}", facts.stderr);
    let quota = apps::run(&cuda13_quota("numba13-quota"), "numba13", "numba_app.py", "quota");
    assert_eq!(quota.get("total"), (2u64 << 30).to_string());
    assert_eq!(quota.get("three_gib"), "refused 2", "{}", quota.stdout);
}

#[test]
fn cupy_for_cuda_13_compiles_and_launches_its_kernels_and_keeps_to_its_quota() {
    // JIT compilers (NVVM, NVRTC) take a CPU for seconds: never beside a test that measures time.
    let _load = crate::common::load_turn();
    let facts = apps::run(&cuda13("cupy13-kernels"), "cupy13", "cupy_app.py", "kernels");
    assert_eq!(facts.get("kernels"), "ok");
    let memory = apps::run(&cuda13_quota("cupy13-quota"), "cupy13", "cupy_app.py", "memory");
    assert_eq!((memory.get("count"), memory.get("total")), ("1", (2u64 << 30).to_string().as_str()));
    assert_eq!(memory.get("three_gib"), "refused", "{}", memory.stdout);
}
