//! The benchmarks' C clients (`benches/c/*.c`): CUDA programs compiled with gcc against NVIDIA's `cuda.h`
//! (installed on demand by `tools/cuda-headers.sh`, as the tests' C programs are) and linked to the
//! simulated GPU's `libcuda.so.1`, as any CUDA C program is linked to the driver.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root folder.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Output of a command that must succeed; panics naming it, with what it printed, otherwise.
fn run(what: &str, cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Compiles `benches/c/<source>` into `<build dir>/bench-c/<stem>` and returns the program's path. The
/// spin kernel's PTX (`tools/kernels/spin.ptx`) is embedded through `TESSERA_KERNELS_DIR`.
pub fn build(source: &str) -> PathBuf {
    let bin = crate::build_dir();
    let target = bin.parent().expect("the build folder is inside the target folder").to_path_buf();
    let include = run(
        "tools/cuda-headers.sh (needs python3 with pip)",
        Command::new(workspace().join("tools/cuda-headers.sh")).arg(&target),
    );
    let folder = simgpu::libdir::prepare(&bin).expect("simgpu library folder");
    let dir = bin.join("bench-c");
    std::fs::create_dir_all(&dir).expect("create the C client folder");
    let out = dir.join(source.trim_end_matches(".c"));
    // Written under a temporary name and renamed: a half-written program is never run.
    let tmp = dir.join(format!(".{source}.{}", std::process::id()));
    run(
        &format!("gcc benches/c/{source}"),
        Command::new("gcc")
            .args(["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-pthread"])
            .arg(format!("-I{}", include.trim()))
            .arg(format!("-DTESSERA_KERNELS_DIR=\"{}\"", workspace().join("tools/kernels").display()))
            .arg("-o")
            .arg(&tmp)
            .arg(workspace().join("benches/c").join(source))
            .arg(format!("-L{}", folder.display()))
            .args(["-l:libcuda.so.1", "-ldl"]),
    );
    std::fs::rename(&tmp, &out).expect("move the compiled client in place");
    out
}
