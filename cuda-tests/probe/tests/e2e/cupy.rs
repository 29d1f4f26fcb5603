//! CuPy, unmodified (issue 31): `cupy-cuda12x` links NVIDIA's CUDA runtime statically, so every call goes
//! through the driver's private tables (`cuGetExportTable`); on the simulated driver it counts the
//! device, allocates, and compiles (NVRTC), loads and launches an `ElementwiseKernel` and a `RawKernel`
//! (said not computed); under the shim a 2 GiB quota is the memory CuPy sees, a 1 GiB array fits and a
//! 3 GiB one raises `OutOfMemoryError`. CuPy comes from PyPI (`tools/app-venv.sh`).

use crate::common::{Sim, apps};

#[test]
fn cupy_counts_allocates_compiles_and_launches() {
    let facts = apps::run(&Sim::new("cupy-kernels"), "cupy", "cupy_app.py", "kernels");
    assert_eq!(facts.get("kernels"), "ok");
    for kernel in ["tessera_add", "tessera_scale"] {
        assert!(facts.stderr.contains(&format!("kernel {kernel} is not one")), "{kernel}: {}", facts.stderr);
    }
}

#[test]
fn a_quota_is_the_memory_cupy_sees_and_refuses_what_exceeds_it() {
    let sim = Sim::shimmed("cupy-quota").with("TESSERA_MEMORY_LIMIT", "2GiB");
    let facts = apps::run(&sim, "cupy", "cupy_app.py", "memory");
    assert_eq!(facts.get("count"), "1");
    assert_eq!(facts.get("total"), (2u64 << 30).to_string());
    assert_eq!(facts.get("one_gib"), "ok");
    assert_eq!(facts.get("three_gib"), "refused", "{}", facts.stdout);
}
