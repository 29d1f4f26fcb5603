//! `tessera run`: a command runs under the shim without the user naming a library: the shim is preloaded
//! ahead of existing preloads, the quota and vGPU become the shim's variables, the simulated GPU's
//! environment is applied on a machine without NVIDIA's driver, and the exit status is the command's.

use crate::common;

use common::cprog::{CBuild, Facts, assert_quota_view, direct_program};
use common::tessera::tessera;
use common::{GIB, Sim, build_dir, shim_path};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// True when both paths name one file (cargo hard-links its outputs into two folders).
fn same_file(a: &Path, b: &Path) -> bool {
    let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    id(a).is_some() && id(a) == id(b)
}

/// `tessera run ARGS` on a simulated machine whose environment lacks the simulated GPU's settings (only
/// its private state file is kept), so `tessera run` must add them itself.
fn tessera_run(sim: &Sim, args: &[&str]) -> Command {
    let mut cmd = sim.command_for(tessera(), &[&["run"], args].concat());
    for var in ["LD_LIBRARY_PATH", "SIMGPU_DEVICES", "SIMGPU_KERNEL_TIME"] {
        cmd.env_remove(var);
    }
    cmd
}

#[test]
fn tessera_run_runs_a_cuda_program_under_the_shim_on_the_simulated_gpu() {
    let exe = direct_program(false);
    let sim = Sim::new("run").without_shim();
    let facts = Facts::ok(tessera_run(&sim, &["--memory", "1GiB", "--", exe.to_str().unwrap(), &GIB.to_string()]));
    assert_eq!(facts.get("address.cuMemAlloc_v2"), "libtessera.so:cuMemAlloc_v2");
    assert_eq!(facts.get("address.cuLaunchKernel"), "libtessera.so:cuLaunchKernel");
    assert_eq!(facts.get("address.cuStreamSynchronize"), "libsimcuda.so:cuStreamSynchronize");
    assert_eq!(facts.get("vector_add"), "ok");
    let (total, device) = (facts.num("mem_total") as u64, facts.num("device_total") as u64);
    assert_quota_view(GIB, total, device, Some(facts.num("over_quota_alloc")));
}

#[test]
fn tessera_run_prepends_the_shim_and_sets_the_variables() {
    let interposer = CBuild::library("interposer.c").build();
    let sim = Sim::new("run-env").without_shim().with("LD_PRELOAD", interposer.to_str().unwrap());
    let script = r#"printf 'preload %s\nmemory %s\nvgpu %s\nlibrary_path %s\ndone ok\n' "$LD_PRELOAD" "$TESSERA_MEMORY_LIMIT" "$TESSERA_VGPU" "$LD_LIBRARY_PATH""#;
    let facts =
        Facts::ok(tessera_run(&sim, &["--memory", "0=1GiB,1=512MiB", "--vgpu", "team-a", "--", "sh", "-c", script]));
    let preload: Vec<&str> = facts.get("preload").split(':').collect();
    assert_eq!(preload.len(), 2, "{preload:?}");
    assert!(preload[0].ends_with("/libtessera.so") && same_file(Path::new(preload[0]), &shim_path()), "{preload:?}");
    assert_eq!(preload[1], interposer.to_str().unwrap());
    assert_eq!(facts.get("memory"), "0=1GiB,1=512MiB");
    assert_eq!(facts.get("vgpu"), "team-a");
    let library_path = Path::new(facts.get("library_path"));
    assert!(same_file(&library_path.join("libcuda.so.1"), &build_dir().join("libsimcuda.so")), "{library_path:?}");
}

#[test]
fn tessera_run_passes_the_exit_status_through_and_refuses_bad_values() {
    let sim = Sim::new("run-status").without_shim();
    let status = |args: &[&str]| {
        let out = tessera_run(&sim, args).output().expect("spawn tessera");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    assert_eq!(status(&["--", "sh", "-c", "exit 7"]).0, Some(7));
    assert_eq!(status(&["sh", "-c", "exit 0"]).0, Some(0));
    for (args, mentions) in [
        (&["--memory", "lots", "--", "true"][..], "--memory"),
        (&["--memory", "0", "--", "true"], "--memory"),
        (&["--memory", "99=1GiB", "--", "true"], "--memory"),
        (&["--vgpu", "a/b", "--", "true"], "--vgpu"),
        (&["--memory", "1GiB"], "COMMAND"),
    ] {
        let (code, stderr) = status(args);
        assert_eq!(code, Some(2), "tessera run {args:?}: {stderr}");
        assert!(stderr.contains(mentions), "tessera run {args:?} must mention {mentions}: {stderr}");
    }
    let (code, stderr) = status(&["--", "tessera-no-such-command"]);
    assert_eq!(code, Some(127), "{stderr}");
    assert!(stderr.contains("cannot run tessera-no-such-command"), "{stderr}");
}
