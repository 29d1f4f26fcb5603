//! `tools/real-gpu-check.sh` without an NVIDIA driver: it says so, runs nothing and exits 2, whether the
//! kernel module is missing, the system has no `libcuda.so.1`, or the only one is the simulated driver.
//! The script's own test switches replace the two things it looks at, so each case is the same on any
//! machine; the plain run is checked too (on a machine with a driver, its detection alone).

use crate::common;

use common::build_dir;
use common::cprog::workspace;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the script with `vars` set (every other switch of its own cleared) and `args`.
fn check(vars: &[(&str, &Path)], args: &[&str]) -> Output {
    let mut cmd = Command::new(workspace().join("tools/real-gpu-check.sh"));
    cmd.args(args);
    cmd.env_remove("TESSERA_TEST_NVIDIA_VERSION_FILE").env_remove("TESSERA_TEST_LIBCUDA");
    cmd.envs(vars.iter().map(|(k, v)| (k, v)));
    cmd.output().expect("run tools/real-gpu-check.sh")
}

/// Checks that the run found no driver for `reason` and ran nothing.
fn assert_no_driver(out: &Output, reason: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "exit status {}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    assert!(stderr.contains("no NVIDIA driver on this machine") && stderr.contains(reason), "{stderr}");
    assert!(stderr.contains("nothing was run"), "{stderr}");
    assert!(stdout.is_empty(), "nothing runs, so nothing is reported: {stdout}");
}

/// A fake `/proc/driver/nvidia/version`, removed on drop.
struct FakeVersion(PathBuf);

impl Drop for FakeVersion {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn fake_version() -> FakeVersion {
    let path = build_dir().join(format!("real-gpu-check-version-{}", std::process::id()));
    std::fs::write(&path, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  000.00 (a test's fake)\n")
        .expect("write the fake version file");
    FakeVersion(path)
}

#[test]
fn without_the_kernel_module_it_says_so_and_exits_2() {
    let missing = build_dir().join("no-such-dir/version");
    assert_no_driver(
        &check(&[("TESSERA_TEST_NVIDIA_VERSION_FILE", &missing)], &[]),
        &format!("{} does not exist", missing.display()),
    );
}

#[test]
fn the_simulated_libcuda_is_never_taken_for_the_real_one() {
    let version = fake_version();
    let simulated = common::library_folder().join("libcuda.so.1");
    let out = check(&[("TESSERA_TEST_NVIDIA_VERSION_FILE", &version.0), ("TESSERA_TEST_LIBCUDA", &simulated)], &[]);
    assert_no_driver(&out, "is Tessera's simulated driver, not NVIDIA's");
}

#[test]
fn a_missing_libcuda_is_no_driver() {
    let version = fake_version();
    let missing = build_dir().join("no-such-dir/libcuda.so.1");
    let out = check(&[("TESSERA_TEST_NVIDIA_VERSION_FILE", &version.0), ("TESSERA_TEST_LIBCUDA", &missing)], &[]);
    assert_no_driver(&out, &format!("{} (libcuda.so.1) does not exist", missing.display()));
}

#[test]
fn on_this_machine_it_reports_the_driver_it_finds_or_exits_2() {
    if !Path::new("/proc/driver/nvidia/version").exists() {
        assert_no_driver(&check(&[], &[]), "/proc/driver/nvidia/version does not exist");
        assert_no_driver(&check(&[], &["--detect"]), "/proc/driver/nvidia/version does not exist");
        return;
    }
    // A machine with the kernel module: detection alone (the full run is the script's job, not a test's).
    let out = check(&[], &["--detect"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    match out.status.code() {
        Some(0) => assert!(stdout.contains("NVIDIA driver: ") && stdout.contains("libcuda.so.1: "), "{stdout}"),
        _ => assert_no_driver(&out, "libcuda.so.1"),
    }
}

#[test]
fn an_unknown_argument_is_refused_by_name() {
    let out = check(&[], &["--bogus"]);
    assert_eq!(out.status.code(), Some(64), "{}", out.status);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown argument '--bogus'"));
}
