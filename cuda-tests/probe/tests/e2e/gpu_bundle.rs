//! The real-GPU check bundle (issue 32) without a GPU: `tools/gpu-check-bundle.sh` builds it within its
//! 48 MiB; copied into an empty folder and run with no Rust toolchain on `PATH`, it runs nothing on a
//! machine without NVIDIA's driver (a clear message, exit 2), and with `--simulated` runs every check end
//! to end on the simulated driver it carries, each line and `report.json` saying so.

use crate::common::build_dir;
use crate::common::cprog::workspace;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The bundle's limit.
const LIMIT: u64 = 48 << 20;

/// `tools/gpu-check-bundle.sh` with `args`.
fn bundle_script(args: &[&str]) -> Output {
    Command::new(workspace().join("tools/gpu-check-bundle.sh")).args(args).output().expect("run the bundle script")
}

/// The bytes of the files under `dir`.
fn size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("read the bundle")
        .map(|e| e.expect("an entry"))
        .map(|e| match e.file_type().expect("a file type") {
            t if t.is_dir() => size(&e.path()),
            t if t.is_file() => e.metadata().expect("metadata").len(),
            _ => 0,
        })
        .sum()
}

/// `run ARGS` in `dir` as a GPU host would run it: a bare environment whose `PATH` has the system's
/// programs (python3) and no Rust toolchain, and no NVIDIA driver (the version file named missing, as on
/// this machine).
fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(dir.join("run"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir)
        .env("TESSERA_TEST_NVIDIA_VERSION_FILE", dir.join("no-such-driver"))
        .output()
        .expect("run the bundle")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_bundle_fits_refuses_to_run_without_a_driver_and_runs_whole_on_the_simulated_one() {
    let made = build_dir().join(format!("gpu-bundle-{}", std::process::id()));
    let out = bundle_script(&["--no-build", made.to_str().unwrap()]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let bytes = size(&made);
    assert!(bytes <= LIMIT, "the bundle is {bytes} bytes, over 48 MiB");
    assert!(text(&out.stdout).contains(&format!("{bytes} bytes")), "{}", text(&out.stdout));

    // A copy in an empty folder, away from the build tree, with no cargo or rustc on PATH.
    let empty: PathBuf = std::env::temp_dir().join(format!("tessera-gpu-bundle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&empty);
    std::fs::create_dir_all(&empty).unwrap();
    let copy = empty.join("bundle");
    assert!(Command::new("cp").arg("-a").arg(&made).arg(&copy).status().unwrap().success());
    std::fs::remove_dir_all(&made).unwrap();
    let tools =
        Command::new("sh").args(["-c", "command -v cargo rustc"]).env_clear().env("PATH", "/usr/bin:/bin").output();
    assert!(tools.unwrap().stdout.is_empty(), "a Rust toolchain is on /usr/bin:/bin");

    let refused = run(&copy, &[]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(text(&refused.stderr).contains("no NVIDIA driver on this machine"), "{}", text(&refused.stderr));
    assert!(text(&refused.stderr).contains("nothing was run"), "{}", text(&refused.stderr));
    assert!(!copy.join("report.json").exists(), "a report without a run");

    let bad = run(&copy, &["--only", "kernels,warp"]);
    assert_eq!(bad.status.code(), Some(64), "{}", text(&bad.stderr));
    assert!(text(&bad.stderr).contains("no check named 'warp'"), "{}", text(&bad.stderr));

    // Its overhead and shares checks measure time.
    let simulated = {
        let _turn = crate::common::timing_turn();
        run(&copy, &["--simulated"])
    };
    let stdout = text(&simulated.stdout);
    assert!(simulated.status.success(), "{stdout}{}", text(&simulated.stderr));
    assert!(stdout.lines().all(|l| l.starts_with("[simulated, not a hardware result] ")), "{stdout}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(copy.join("report.json")).expect("report.json")).unwrap();
    assert_eq!((report["simulated"].as_bool(), report["hardware_result"].as_bool()), (Some(true), Some(false)));
    assert_eq!(report["failed"], 0, "{report}");
    let checks = report["checks"].as_array().expect("checks");
    let status =
        |name: &str| checks.iter().find(|c| c["name"] == name).map(|c| c["status"].as_str().unwrap_or("").to_string());
    let passes = [
        "devices",
        "kernels",
        "spin",
        "quota",
        "quota-paths",
        "nvml",
        "direct",
        "tessera-run",
        "overhead",
        "shares",
        "mixed",
        "priority",
        "checkpoint",
        "left-as-found",
    ];
    for name in passes {
        assert_eq!(status(name).as_deref(), Some("PASS"), "{name}: {stdout}");
    }
    // The applications run when the host's python3 has them, and say why not otherwise.
    for name in ["torch", "cupy", "numba"] {
        let check = checks.iter().find(|c| c["name"] == name).expect(name);
        let detail = check["detail"].as_str().unwrap_or("");
        assert!(
            check["status"] == "PASS" || (check["status"] == "SKIP" && detail.contains("python3 cannot import")),
            "{check}"
        );
    }
    for check in checks {
        let (seconds, bound) = (check["seconds"].as_f64().unwrap(), check["bound_s"].as_f64().unwrap());
        assert!(seconds <= bound, "{check}");
    }
    assert!(report["seconds"].as_f64().unwrap() <= 480.0, "the run's 8 minutes: {report}");
    let summary = report["summary"].as_str().unwrap_or("");
    assert!(summary.contains("on the simulated driver") && stdout.contains(summary), "{summary}\n{stdout}");
    assert_eq!(checks.len(), passes.len() + 3, "{report}");
    std::fs::remove_dir_all(&empty).unwrap();
}

#[test]
fn the_bundle_script_refuses_a_folder_that_is_not_a_bundle_and_bad_arguments() {
    let folder = build_dir().join(format!("not-a-bundle-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("keep"), "mine").unwrap();
    let out = bundle_script(&["--no-build", folder.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("exists and is not a bundle"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(folder.join("keep")).unwrap(), "mine", "the folder was touched");
    let none = bundle_script(&["--no-build"]);
    assert_eq!(none.status.code(), Some(2));
    assert!(text(&none.stderr).contains("give the folder to make"), "{}", text(&none.stderr));
    let fresh = build_dir().join(format!("never-made-{}", std::process::id()));
    let bad = bundle_script(&["--no-build", "--glibc", "2.31; rm -rf /", fresh.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("is not a glibc version like 2.31"), "{}", text(&bad.stderr));
    assert!(!fresh.exists(), "a bundle folder made for a refused argument");
    // A relative OUTDIR is where the script was run from, not in the clone it works in.
    let name = format!("relative-bundle-{}", std::process::id());
    let script = workspace().join("tools/gpu-check-bundle.sh");
    let made = Command::new(script).args(["--no-build", &name]).current_dir(build_dir()).output().unwrap();
    assert!(made.status.success(), "{}", text(&made.stderr));
    assert!(build_dir().join(&name).join("run").is_file() && !workspace().join(&name).exists());
    std::fs::remove_dir_all(build_dir().join(&name)).unwrap();
    std::fs::remove_dir_all(&folder).unwrap();
}
