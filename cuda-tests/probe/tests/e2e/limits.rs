//! Every limit fails closed: a `TESSERA_` value that is not UTF-8 fails `cuInit` naming the variable
//! (it used to read as unset: no limit), a vGPU no daemon manages is not set up by a process without a
//! limit of its own, out-of-range values are refused by the variables and the CLI alike, hard quotas must
//! fit in the device, and a corrupt `vgpus.json` stops the daemon with a message naming it and the remedy.

use crate::common;

use common::region::TestRegion;
use common::tessera::Machine;
use common::{INVALID_VALUE, Sim, finished, u64_at};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

#[test]
fn a_limit_that_is_not_utf8_fails_cu_init_naming_the_variable() {
    let region = TestRegion::new("utf8");
    let sim = Sim::shimmed("utf8").with("TESSERA_REGION", region.path());
    for (var, value) in [
        ("TESSERA_MEMORY_LIMIT", &b"4GiB\xff"[..]),
        ("TESSERA_VGPU", b"team\xff"),
        ("TESSERA_COMPUTE_SHARE", b"30\xff"),
        ("TESSERA_MODE", b"hard\xff"),
    ] {
        let mut cmd = sim.command(&["mem-info"]);
        cmd.env(var, OsStr::from_bytes(value));
        let run = finished(cmd.output().expect("run simgpu-probe"));
        assert!(!run.success, "{var}: the program ran: {}", run.json);
        assert_eq!(u64_at(&run.json, "cuda_error"), INVALID_VALUE, "{var}: {}", run.stderr);
        assert!(run.stderr.contains(var) && run.stderr.contains("not valid UTF-8"), "{var}: {}", run.stderr);
    }
}

#[test]
fn a_vgpu_no_daemon_manages_is_refused_to_a_process_without_a_limit() {
    let region = TestRegion::new("typo");
    let sim = Sim::shimmed("typo").with("TESSERA_REGION", region.path()).with("TESSERA_VGPU", "typo");
    let run = sim.run(&["mem-info"]);
    assert!(!run.success, "ran without limits: {}", run.json);
    assert_eq!(u64_at(&run.json, "cuda_error"), INVALID_VALUE, "{}", run.stderr);
    for needed in
        ["\"typo\"", "tessera daemon", "tessera vgpu create typo", "TESSERA_MEMORY_LIMIT", "TESSERA_COMPUTE_SHARE"]
    {
        assert!(run.stderr.contains(needed), "{needed:?} missing from: {}", run.stderr);
    }
    // Either limit lets a process set the vGPU up, as before.
    sim.with("TESSERA_COMPUTE_SHARE", "50").ok(&["mem-info"]);
    let limited = Sim::shimmed("typo-quota")
        .with("TESSERA_REGION", region.path())
        .with("TESSERA_VGPU", "quota")
        .with("TESSERA_MEMORY_LIMIT", "1GiB")
        .ok(&["mem-info"]);
    assert_eq!(u64_at(&limited, "total"), 1 << 30, "{limited}");
}

#[test]
fn out_of_range_values_are_refused_by_the_variables_and_the_cli_alike() {
    let region = TestRegion::new("range");
    for (var, value) in [
        ("TESSERA_MEMORY_LIMIT", "0=0"),
        ("TESSERA_MEMORY_LIMIT", "0B"),
        ("TESSERA_MEMORY_LIMIT", "18446744073709551615"),
        ("TESSERA_COMPUTE_SHARE", "+30"),
        ("TESSERA_COMPUTE_SHARE", "0"),
    ] {
        let run = Sim::shimmed("range").with("TESSERA_REGION", region.path()).with(var, value).run(&["mem-info"]);
        assert!(!run.success, "{var}={value} ran: {}", run.json);
        assert_eq!(u64_at(&run.json, "cuda_error"), INVALID_VALUE, "{var}={value}: {}", run.stderr);
        assert!(run.stderr.contains(var), "{var}={value}: {}", run.stderr);
    }
    let mut m = Machine::new("range", "small");
    m.start();
    let create = |memory: &'static str, share: &'static str, extra: &[&'static str]| {
        let mut args = vec!["vgpu", "create", "v", "--device", "0", "--memory", memory, "--share", share];
        args.extend_from_slice(extra);
        args
    };
    for (memory, share, extra, says) in [
        ("1GiB", "0", &[][..], "1 to 100"),
        ("1GiB", "+30", &[], "1 to 100"),
        ("18446744073709551615", "10", &[], "no limit"),
        ("0B", "10", &[], "0 bytes"),
        ("1GiB", "10", &["--user", "4294967295"], "no user"),
        ("1GiB", "10", &["--user", "4294967290"], "no user"),
    ] {
        let e = m.fails(2, &create(memory, share, extra));
        assert!(e.contains(says), "{memory} {share} {extra:?}: {e}");
    }
    assert!(m.fails(2, &["run", "--memory", "0=0", "--", "true"]).contains("0 bytes"));
    // The 4 GiB device: a hard quota above it, or hard quotas summing above it, are refused by the daemon.
    let e = m.fails(1, &create("1TiB", "10", &[]));
    assert!(e.contains("more than device 0 has"), "{e}");
    m.ok(&create("3GiB", "10", &[]));
    let e = m.fails(1, &["vgpu", "create", "w", "--device", "0", "--memory", "2GiB", "--share", "10"]);
    assert!(e.contains("hard quotas on device 0 would sum to"), "{e}");
    let e = m.fails(1, &["vgpu", "set", "v", "--memory", "5GiB"]);
    assert!(e.contains("more than device 0 has"), "{e}");
    m.ok(&["vgpu", "create", "w", "--device", "0", "--memory", "1TiB", "--share", "10", "--mode", "soft"]);
}

#[test]
fn a_corrupt_state_file_stops_the_daemon_naming_it_and_the_remedy() {
    let m = Machine::new("corrupt-state", "small");
    let state = m.file("state").join("vgpus.json");
    std::fs::create_dir_all(state.parent().unwrap()).unwrap();
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&state, &garbage).unwrap();
    let out = m.tessera(&["daemon"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(&state.display().to_string()) && stderr.contains("move it away"), "{stderr}");
    assert_eq!(std::fs::read(&state).unwrap(), garbage, "the file is left as it was");
}
