//! numba-cuda, unmodified (issue 31): `@cuda.jit` kernels are compiled by NVIDIA's NVVM, linked into a
//! cubin by nvJitLink and loaded with `cuLibraryLoadData`, launched and synchronized on the simulated
//! driver, which says it does not compute them (and, with `SIMGPU_UNKNOWN_KERNELS=poison`, fills their
//! output with NaN so that the program's check fails loudly); under the shim a 2 GiB quota is the
//! device's size to numba and refuses a 3 GiB array. numba-cuda comes from PyPI (`tools/numba.sh`, a
//! virtual environment in the target folder made the first time; no network then fails the test).

use crate::common::Sim;
use crate::common::cprog::{Facts, workspace};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

const OUT_OF_MEMORY: &str = "2";

/// The python of the virtual environment numba-cuda is installed in.
fn python() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let target = crate::common::build_dir().parent().expect("the target folder").to_path_buf();
        let out = Command::new(workspace().join("tools/numba.sh")).arg(&target).output().expect("run tools/numba.sh");
        assert!(
            out.status.success(),
            "tools/numba.sh could not install numba-cuda (it needs python3, pip and the network the first \
             time): {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// Runs `numba_app.py what` on `sim`.
fn app(sim: &Sim, what: &str) -> Facts {
    let script = workspace().join("cuda-tests/apps/numba_app.py");
    let mut cmd = sim.command_for(python(), &[script.to_str().unwrap(), what]);
    cmd.env("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0");
    Facts::ok(cmd)
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
