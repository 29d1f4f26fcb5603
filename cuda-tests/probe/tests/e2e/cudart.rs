//! NVIDIA's CUDA runtime, unmodified (issue 31): `libcudart.so.12` from the PyPI package
//! `nvidia-cuda-runtime-cu12` (the one `tools/cuda-headers.sh` installs) runs on the simulated driver,
//! which serves the private tables it asks for (`cuGetExportTable`, its integrity check among them):
//! devices and their properties, memory and copies, a kernel registered from a fatbin as nvcc's
//! generated code registers it and launched by its host stub, and the same launch captured into a graph
//! and replayed. The program (`cuda-tests/c/cudart.c`) runs with and without the shim.

use crate::common::Sim;
use crate::common::cprog::{CBuild, Facts, assemble, cuda_include_dir, workspace};
use simgpu::image::fatbin::{Compression, EntryKind, Part, container};

/// The folder holding `libcudart.so.12`, beside the headers' folder.
fn cudart_dir() -> std::path::PathBuf {
    cuda_include_dir().parent().expect("the runtime package's folder").join("lib")
}

#[test]
fn the_cuda_runtime_runs_unmodified_over_the_simulated_driver() {
    let lib = cudart_dir();
    let program = CBuild::program("cudart.c").link_file(&lib, "libcudart.so.12").build();
    // The test kernels as nvcc would embed them: an sm_90 cubin (LZ4, as nvcc compresses) and the PTX.
    let ptx_path = workspace().join("cuda-tests/kernels/kernels.ptx");
    let elf = assemble(&ptx_path, "sm_90").unwrap_or_else(|e| panic!("{e}"));
    let ptx = std::fs::read(&ptx_path).expect("read kernels.ptx");
    let fatbin = container(&[
        Part { kind: EntryKind::Elf, sm: 90, compression: Compression::Lz4, contents: &elf },
        Part { kind: EntryKind::Ptx, sm: 80, compression: Compression::None, contents: &ptx },
    ]);
    let file = crate::common::build_dir().join(format!("cudart-kernels-{}.fatbin", std::process::id()));
    std::fs::write(&file, fatbin).unwrap();
    for sim in [Sim::bare("cudart"), Sim::shimmed("cudart-shim")] {
        let facts = Facts::ok(sim.command_for(&program, &[file.to_str().unwrap()]));
        assert_eq!(facts.get("count"), "1");
        assert_eq!((facts.get("major"), facts.get("minor")), ("9", "0"));
        assert!(facts.get("name").contains("H100"), "{}", facts.stdout);
        assert_eq!(facts.get("memory"), (80u64 << 30).to_string());
        assert_eq!(facts.get("copy"), "ok");
        assert_eq!(facts.get("kernel"), "ok", "{}", facts.stdout);
        assert_eq!(facts.get("graph"), "ok");
    }
    let _ = std::fs::remove_file(&file);
}
