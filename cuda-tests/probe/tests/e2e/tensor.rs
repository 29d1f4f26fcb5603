//! The tensor-core policy: a vGPU with tensor cores off runs its processes with `NVIDIA_TF32_OVERRIDE=0`
//! (set by `tessera run`, or by the shim when it loads under plain `LD_PRELOAD`, over any value the user
//! set), and the tensor-op modes they give `cublasSetMathMode` reach cuBLAS as pedantic math, following
//! `tessera vgpu set --tensor-cores` live. Everything else passes through unchanged, and a program that
//! does not use cuBLAS never gets it loaded.
//!
//! Each run is `cuda-tests/c/cublas_modes.c` on the simulated cuBLAS, which appends every mode it
//! receives to `$SIMCUBLAS_LOG`; the vGPUs live on a daemon of the test's own (`common::tessera`).

use crate::common;

use common::cprog::{CBuild, Facts};
use common::tessera::Machine;
use common::{Guarded, Sim, shim_path};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The modes every run sets: default, tensor op, TF32 tensor op, tensor op with the
/// disallow-reduced-precision-reduction flag, pedantic.
const MODES: [&str; 5] = ["0", "1", "3", "17", "2"];
/// What cuBLAS receives for [`MODES`] with tensor cores off.
const FORCED: [&str; 5] = ["0", "2", "2", "18", "2"];

/// The compiled test program.
fn program() -> String {
    CBuild::program("cublas_modes.c").build().to_string_lossy().into_owned()
}

/// A machine with a daemon and two vGPUs on its `small` device: `tc-off` (tensor cores off) and `tc-on`.
fn machine(tag: &str) -> Machine {
    let mut m = Machine::new(tag, "small");
    m.start();
    let create = ["vgpu", "create", "tc-off", "--device", "0", "--memory", "1GiB", "--share", "30"];
    m.ok(&[&create[..], &["--tensor-cores", "off"]].concat());
    m.ok(&["vgpu", "create", "tc-on", "--device", "0", "--memory", "1GiB", "--share", "30"]);
    m
}

/// The modes the simulated cuBLAS recorded in its `SIMCUBLAS_LOG` file at `path`, in order.
fn recorded(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(String::from).collect()
}

/// The `mode` facts expected when cuBLAS received `received` for [`MODES`]: status 0, read back as
/// received.
fn modes_read_back(sent: &[&str], received: &[&str]) -> Vec<String> {
    sent.iter().zip(received).map(|(s, r)| format!("{s} 0 {r}")).collect()
}

/// Checks one finished run: the override it saw, what cuBLAS received for [`MODES`] (in its log and read
/// back), and that cuBLAS was not loaded before the program opened it (`cuInit` under the shim included).
fn check(facts: &Facts, log: &[String], tf32: &str, received: [&str; 5], set_math_mode: &str) {
    assert_eq!(facts.get("tf32_override"), tf32, "stderr:\n{}", facts.stderr);
    assert_eq!(facts.get("cu_init"), "0");
    assert_eq!(facts.get("cublas_loaded"), "0", "cuBLAS was loaded before the program used it");
    assert_eq!(facts.get("set_math_mode"), set_math_mode);
    assert_eq!(log, received, "modes cuBLAS received");
    assert_eq!(facts.all("mode"), modes_read_back(&MODES, &received));
}

#[test]
fn tessera_run_on_a_vgpu_with_tensor_cores_off_sets_tf32_off_and_forces_pedantic_math() {
    let m = machine("run");
    let exe = program();
    for (vgpu, user_tf32, tf32, received) in [
        ("tc-off", None, "0", FORCED),
        // The policy wins over the user's own value.
        ("tc-off", Some("1"), "0", FORCED),
        ("tc-on", None, "unset", MODES),
        ("tc-on", Some("1"), "1", MODES),
    ] {
        let path = m.file(&format!("run-{vgpu}-{}.log", user_tf32.unwrap_or("unset")));
        let mut cmd = m.tenant_running(vgpu, &exe, &MODES);
        cmd.env("SIMCUBLAS_LOG", &path);
        if let Some(v) = user_tf32 {
            cmd.env("NVIDIA_TF32_OVERRIDE", v);
        }
        let facts = Facts::from_output(&cmd.output().expect("run cublas_modes")).succeeded();
        check(&facts, &recorded(&path), tf32, received, "libtessera.so:cublasSetMathMode");
        let replaced = facts.stderr.contains("NVIDIA_TF32_OVERRIDE=\"1\" replaced by 0");
        assert_eq!(replaced, vgpu == "tc-off" && user_tf32.is_some(), "stderr:\n{}", facts.stderr);
    }
}

#[test]
fn plain_preload_with_tessera_vgpu_gets_the_policy_from_the_shims_constructor() {
    let m = machine("preload");
    let exe = program();
    let shim = shim_path();
    // TESSERA_REAL_LIBCUBLAS naming the simulated library by its own file is the same library.
    let real = common::build_dir().join(simgpu::libdir::CUBLAS_FILE);
    for (vgpu, user_tf32, tf32, received) in
        [("tc-off", None, "0", FORCED), ("tc-off", Some("1"), "0", FORCED), ("tc-on", None, "unset", MODES)]
    {
        let path = m.file(&format!("preload-{vgpu}-{}.log", user_tf32.unwrap_or("unset")));
        let mut cmd = m.sim.command_for(&exe, &MODES);
        cmd.env("LD_PRELOAD", &shim).env("TESSERA_VGPU", vgpu).env("SIMCUBLAS_LOG", &path);
        cmd.env("TESSERA_REAL_LIBCUBLAS", &real).env("TESSERA_LOG", "debug");
        if let Some(v) = user_tf32 {
            cmd.env("NVIDIA_TF32_OVERRIDE", v);
        }
        let facts = Facts::ok(cmd);
        check(&facts, &recorded(&path), tf32, received, "libtessera.so:cublasSetMathMode");
        assert!(!facts.stderr.contains("unknown variable"), "{}", facts.stderr);
        if vgpu == "tc-off" {
            assert!(facts.stderr.contains("cublasSetMathMode: mode 3 given as 2"), "{}", facts.stderr);
        }
        let replaced = facts.stderr.contains("NVIDIA_TF32_OVERRIDE=\"1\" replaced by 0");
        assert_eq!(replaced, user_tf32.is_some(), "stderr:\n{}", facts.stderr);
    }
}

#[test]
fn changing_tensor_cores_applies_to_the_later_calls_of_a_running_process() {
    let m = machine("live");
    let path = m.file("live.log");
    let args = ["1", "wait", "1", "3", "17", "0", "wait", "3", "1"];
    let mut child = Guarded::spawn(m.tenant_running("tc-on", &program(), &args).env("SIMCUBLAS_LOG", &path))
        .expect("spawn the cuBLAS program");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut printed = String::new();
    let mut next_wait = || loop {
        let mut line = String::new();
        assert_ne!(stdout.read_line(&mut line).expect("read the program's output"), 0, "it ended: {printed}");
        printed += &line;
        if line.starts_with("waiting ") {
            return;
        }
    };
    next_wait();
    m.ok(&["vgpu", "set", "tc-on", "--tensor-cores", "off"]);
    child.stdin.as_mut().expect("piped stdin").write_all(b"go\n").expect("write to the program");
    next_wait();
    m.ok(&["vgpu", "set", "tc-on", "--tensor-cores", "on"]);
    child.stdin.as_mut().expect("piped stdin").write_all(b"go\n").expect("write to the program");
    stdout.read_to_string(&mut printed).expect("read the program's output");
    let out = child.into_child().wait_with_output().expect("wait for the program");
    let facts = Facts::from_output(&Output { stdout: printed.into_bytes(), ..out }).succeeded();
    let received = ["1", "2", "2", "18", "0", "3", "1"];
    let sent: Vec<&str> = args.iter().copied().filter(|a| *a != "wait").collect();
    assert_eq!(recorded(&path), received);
    assert_eq!(facts.all("mode"), modes_read_back(&sent, &received));
    // Started with tensor cores on: TF32 was left alone.
    assert_eq!(facts.get("tf32_override"), "unset");
}

/// Runs the program on a plain simulated machine (`sim`), with a log of its own.
fn run_plain(sim: Sim, tag: &str) -> (Facts, Vec<String>) {
    let log = std::env::temp_dir().join(format!("tessera-cublas-test-{}-{tag}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let mut cmd: Command = sim.command_for(program(), &MODES);
    cmd.env("SIMCUBLAS_LOG", &log).stdin(Stdio::null());
    let facts = Facts::ok(cmd);
    let received = recorded(&log);
    let _ = std::fs::remove_file(&log);
    (facts, received)
}

#[test]
fn without_a_vgpu_modes_pass_unchanged_and_cublas_is_loaded_only_when_used() {
    let (plain, received) = run_plain(Sim::new("cublas-plain").without_shim(), "plain");
    check(&plain, &received, "unset", MODES, "libsimcublas.so:cublasSetMathMode");
    // Under the shim with no TESSERA_ setting, the hook passes everything through.
    let (shim, received) = run_plain(Sim::shimmed("cublas-shim"), "shim");
    check(&shim, &received, "unset", MODES, "libtessera.so:cublasSetMathMode");
    // A quota of the process's own (no vGPU) has tensor cores.
    let sim = Sim::shimmed("cublas-quota").with("TESSERA_MEMORY_LIMIT", "1GiB");
    let (quota, received) = run_plain(sim, "quota");
    check(&quota, &received, "unset", MODES, "libtessera.so:cublasSetMathMode");
}
