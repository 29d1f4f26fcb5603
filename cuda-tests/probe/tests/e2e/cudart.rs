//! NVIDIA's CUDA runtime, unmodified (issue 31): `libcudart.so.12` from the PyPI package
//! `nvidia-cuda-runtime-cu12` (the one `tools/cuda-headers.sh` installs) and `libcudart.so.13` from
//! `nvidia-cuda-runtime` 13.x run on the simulated driver, which serves the private tables they ask for
//! (`cuGetExportTable`, its integrity check among them): devices and their properties, memory and copies,
//! a kernel registered from a fatbin as nvcc's generated code registers it and launched by its host stub,
//! and the same launch captured into a graph and replayed; and a program built with `-rdc`, whose
//! relocatable fatbins the driver links when its device-linked image does not run on the device. The
//! program (`cuda-tests/c/cudart.c`) runs with and without the shim. And a CUDA program as people build
//! one: `cuda-tests/cu/add_*.cu` compiled by NVIDIA's own nvcc 13.0, its runtime linked statically,
//! whole and with `-rdc`, for the device, for a newer one with PTX beside it, and for a newer one alone.

use crate::common::Sim;
use crate::common::cprog::{
    CBuild, Facts, assemble, assemble_with, cuda_include_dir, cuda13_include_dir, nvcc, workspace,
};
use simgpu::image::fatbin::{Compression, EntryKind, Part, container};
use std::path::{Path, PathBuf};

/// The test kernels as nvcc would embed them, in a file: an sm_90 cubin (LZ4, as nvcc compresses) and
/// the PTX.
fn kernels_fatbin(tag: &str) -> PathBuf {
    let ptx_path = workspace().join("cuda-tests/kernels/kernels.ptx");
    let elf = assemble(&ptx_path, "sm_90").unwrap_or_else(|e| panic!("{e}"));
    let ptx = std::fs::read(&ptx_path).expect("read kernels.ptx");
    let fatbin = container(&[
        Part { kind: EntryKind::Elf, sm: 90, compression: Compression::Lz4, contents: &elf },
        Part { kind: EntryKind::Ptx, sm: 80, compression: Compression::None, contents: &ptx },
    ]);
    scratch_file(&format!("kernels-{tag}"), &fatbin)
}

/// `cudart.c` linked to `library` (in `../lib` beside the runtime package's `include`), built with
/// `CUDART_MAJOR=major`.
fn program(include: &Path, library: &str, major: &str) -> PathBuf {
    let lib = include.parent().expect("the runtime package's folder").join("lib");
    CBuild::program("cudart.c")
        .named(&format!("cudart{major}"))
        .define(&format!("CUDART_MAJOR={major}"))
        .link_file(&lib, library)
        .build()
}

/// Writes `bytes` to a file of the build folder named after `tag` and this process; its path.
fn scratch_file(tag: &str, bytes: &[u8]) -> PathBuf {
    let file = crate::common::build_dir().join(format!("cudart-{tag}-{}.fatbin", std::process::id()));
    std::fs::write(&file, bytes).unwrap();
    file
}

/// Runs [`program`] on a bare simulated GPU and under the shim, and checks every fact; the version
/// `cudaRuntimeGetVersion` gave.
fn runs_unmodified(include: &Path, library: &str, major: &str) -> String {
    let program = program(include, library, major);
    let file = kernels_fatbin(major);
    let mut version = String::new();
    for sim in [Sim::bare(&format!("cudart{major}")), Sim::shimmed(&format!("cudart{major}-shim"))] {
        let facts = Facts::ok(sim.command_for(&program, &[file.to_str().unwrap()]));
        assert_eq!(facts.get("count"), "1");
        assert_eq!((facts.get("major"), facts.get("minor")), ("9", "0"));
        assert!(facts.get("name").contains("H100"), "{}", facts.stdout);
        assert_eq!(facts.get("memory"), (80u64 << 30).to_string());
        assert_eq!(facts.get("copy"), "ok");
        assert_eq!(facts.get("kernel"), "ok", "{}", facts.stdout);
        assert_eq!(facts.get("graph"), "ok");
        version = facts.get("runtime").to_string();
    }
    let _ = std::fs::remove_file(&file);
    version
}

#[test]
fn the_cuda_runtime_runs_unmodified_over_the_simulated_driver() {
    let version = runs_unmodified(&cuda_include_dir(), "libcudart.so.12", "12");
    assert!(version.starts_with("12"), "libcudart.so.12 said it is runtime {version}");
}

#[test]
fn the_cuda_13_runtime_runs_unmodified_over_the_simulated_driver() {
    let version = runs_unmodified(&cuda13_include_dir(), "libcudart.so.13", "13");
    assert!(version.starts_with("13"), "libcudart.so.13 said it is runtime {version}");
}

#[test]
fn a_program_built_with_rdc_gets_its_relocatable_fatbins_linked_when_its_linked_image_does_not_fit() {
    // As nvcc registers a program built with -rdc: a version 2 wrapper whose container is the
    // device-linked image, here for sm_100 only (nothing of it runs on the simulated H100, 9.0), and
    // whose list names the relocatable fatbin it was linked from (an sm_90 object and the PTX).
    let ptx_path = workspace().join("cuda-tests/kernels/kernels.ptx");
    let ptx = std::fs::read(&ptx_path).expect("read kernels.ptx");
    let sm100 = assemble(&ptx_path, "sm_100").unwrap_or_else(|e| panic!("{e}"));
    let object = assemble_with(&ptx_path, "sm_90", &["-c"]).unwrap_or_else(|e| panic!("{e}"));
    let linked = scratch_file(
        "rdc-linked",
        &container(&[Part { kind: EntryKind::Elf, sm: 100, compression: Compression::Lz4, contents: &sm100 }]),
    );
    let prelinked = scratch_file(
        "rdc-prelinked",
        &container(&[
            Part { kind: EntryKind::Elf, sm: 90, compression: Compression::Lz4, contents: &object },
            Part { kind: EntryKind::Ptx, sm: 80, compression: Compression::None, contents: &ptx },
        ]),
    );
    let program = program(&cuda_include_dir(), "libcudart.so.12", "12");
    let (linked, prelinked) = (linked.to_str().unwrap(), prelinked.to_str().unwrap());
    for sim in [Sim::bare("cudart-rdc"), Sim::shimmed("cudart-rdc-shim")] {
        let facts = Facts::ok(sim.command_for(&program, &[linked, prelinked]));
        assert_eq!((facts.get("kernel"), facts.get("graph")), ("ok", "ok"), "{}", facts.stdout);
        // The device-linked image alone (a version 1 wrapper) has nothing for the device.
        let alone = Facts::run(sim.command_for(&program, &[linked]));
        assert!(!alone.success && alone.opt("kernel").is_none(), "{}", alone.stdout);
        assert!(alone.stdout.contains("= 209 (cudaErrorNoKernelImageForDevice)"), "{}", alone.stdout);
    }
    let _ = std::fs::remove_file(linked);
    let _ = std::fs::remove_file(prelinked);
}

/// `cuda-tests/cu/add_*.cu` compiled and linked by nvcc with `options` (its runtime linked statically,
/// nvcc's default), named after `tag`; the program's path.
fn nvcc_build(tag: &str, options: &[&str]) -> PathBuf {
    let nvcc = nvcc();
    let lib = nvcc.parent().and_then(Path::parent).expect("nvcc's package folder").join("lib");
    let sources = workspace().join("cuda-tests/cu");
    let program = crate::common::build_dir().join(format!("nvcc-{tag}-{}", std::process::id()));
    let out = std::process::Command::new(&nvcc)
        .args(options)
        .arg("-L")
        .arg(&lib)
        .args(["add_main.cu", "add_kernel.cu", "-o"])
        .arg(&program)
        .current_dir(&sources)
        .output()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", nvcc.display()));
    assert!(
        out.status.success(),
        "nvcc {}: {}\n{}{}",
        options.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    program
}

#[test]
fn programs_nvcc_builds_run_where_the_driver_would_run_them() {
    // Four nvcc builds take both CPUs for seconds: never beside a test that measures time.
    let _load = crate::common::load_turn();
    // Whole, and with -rdc, for the simulated H100 itself; with -rdc for a newer GPU with PTX of
    // compute_80 beside it (the device-linked image holds an sm_100 cubin only, so the driver links the
    // relocatable PTX the wrapper lists); with -rdc for a newer GPU alone (nothing runs on 9.0: the
    // launch fails as on a real H100).
    let whole = nvcc_build("whole", &["-arch=sm_90", "-DWHOLE_PROGRAM"]);
    let rdc = |tag, gencode| nvcc_build(tag, &["-rdc=true", "-gencode", gencode, "add_sum.cu"]);
    let fits = rdc("rdc-sm90", "arch=compute_90,code=sm_90");
    let jit = rdc("rdc-sm100-ptx80", "arch=compute_80,code=[sm_100,compute_80]");
    let newer = rdc("rdc-sm100", "arch=compute_100,code=sm_100");
    for sim in [Sim::bare("nvcc"), Sim::shimmed("nvcc-shim")] {
        for program in [&whole, &fits, &jit] {
            let facts = Facts::ok(sim.command_for(program, &[]));
            assert!(facts.get("runtime").starts_with("130"), "{}", facts.stdout);
            assert_eq!(facts.get("kernel"), "ok", "{}", facts.stdout);
        }
        let refused = Facts::run(sim.command_for(&newer, &[]));
        assert!(!refused.success && refused.opt("kernel").is_none(), "{}", refused.stdout);
        assert!(
            refused.stdout.contains("cudaGetLastError() = 209 (cudaErrorNoKernelImageForDevice)"),
            "{}",
            refused.stdout
        );
    }
    for program in [whole, fits, jit, newer] {
        let _ = std::fs::remove_file(program);
    }
}
