//! CuPy, unmodified (issue 31): `cupy-cuda12x` links NVIDIA's CUDA runtime statically, so every call goes
//! through the driver's private tables (`cuGetExportTable`); on the simulated driver it counts the
//! device, allocates, and compiles (NVRTC), loads and launches an `ElementwiseKernel` and a `RawKernel`
//! (said not computed). Its quota check, under the shim already, is in `apps_in_vgpus.rs`. CuPy comes
//! from PyPI (`tools/app-venv.sh`).

use crate::common::{Sim, apps};

#[test]
fn cupy_counts_allocates_compiles_and_launches() {
    let facts = apps::run(&Sim::new("cupy-kernels"), "cupy", "cupy_app.py", "kernels");
    assert_eq!(facts.get("kernels"), "ok");
    for kernel in ["tessera_add", "tessera_scale"] {
        assert!(facts.stderr.contains(&format!("kernel {kernel} is not one")), "{kernel}: {}", facts.stderr);
    }
}
