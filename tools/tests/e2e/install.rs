//! `tools/install.sh` from the built tree into a temporary prefix, then the installed `tessera` run from
//! another directory with an environment that points nowhere into the build tree: it must find its own
//! libraries (`PREFIX/lib/tessera`), run a CUDA program under its shim, and print the simulated GPU's
//! environment. Bad arguments to the script fail with a message and install nothing.
//!
//! Needs the release build of the workspace (`cargo build --release --workspace`, as `tools/test-all.sh`
//! does first): the script is run with `--no-build`, so the test never rebuilds the tree.

use crate::common::repo;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh temporary directory for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tessera-install-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `tools/install.sh ARGS`, run from the clone with the test's own environment.
fn install(args: &[&str]) -> Output {
    Command::new(repo().join("tools/install.sh")).args(args).output().expect("run tools/install.sh")
}

/// Stdout and stderr of `out`, for assertion messages.
fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The installed `tessera ARGS`, found on `PATH` (the prefix's `bin` first, then the system's), from
/// `cwd`, with nothing of the test's environment: no `TESSERA_`, `SIMGPU_`, `LD_` variable, no path into
/// the build tree. The simulated GPU's state goes to `cwd` so no other test's is touched.
fn installed(prefix: &Path, cwd: &Path, args: &[&str], extra: &[(&str, &str)]) -> Output {
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", prefix.join("bin").display());
    let out = Command::new("tessera")
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", &path)
        .env("HOME", cwd)
        .env("SIMGPU_STATE", cwd.join("simgpu.state"))
        .env("TESSERA_REGION", cwd.join("tessera.region"))
        .envs(extra.iter().copied())
        .output();
    // `Command` looks the program up in the child's PATH, so this is the installed tessera.
    out.unwrap_or_else(|e| panic!("cannot run the installed tessera ({path}): {e}"))
}

/// Asserts `out` succeeded and returns its stdout and stderr together.
fn succeeded(what: &str, out: &Output) -> String {
    assert!(out.status.success(), "{what} failed: {}", show(out));
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn an_installed_tessera_works_from_any_directory() {
    let scratch = Scratch::new("prefix");
    let prefix = scratch.0.join("prefix");
    let elsewhere = scratch.0.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let prefix_arg = prefix.to_str().unwrap();

    // Twice: a re-install over an install works and leaves the same files.
    for round in 1..=2 {
        let out = install(&["--no-build", "--prefix", prefix_arg]);
        assert!(out.status.success(), "install round {round}: {}", show(&out));
    }
    let lib = prefix.join("lib/tessera");
    for file in [
        "bin/tessera",
        "lib/tessera/libtessera.so",
        "lib/tessera/libsimcuda.so",
        "lib/tessera/libsimnvml.so",
        "lib/tessera/libsimcublas.so",
        "lib/tessera/libaccelerator_tessera.so",
        "include/tessera/accelerator.h",
        "include/tessera/accelerator_legacy.h",
        "share/bash-completion/completions/tessera",
        "share/zsh/site-functions/_tessera",
        "share/fish/vendor_completions.d/tessera.fish",
        "share/tessera/tessera.service",
    ] {
        let len = std::fs::metadata(prefix.join(file)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "{file} is missing or empty in the prefix");
    }
    // The completions are the scripts of each shell, for `tessera`.
    let read = |f: &str| std::fs::read_to_string(prefix.join(f)).unwrap();
    assert!(read("share/bash-completion/completions/tessera").contains("complete"));
    assert!(read("share/zsh/site-functions/_tessera").starts_with("#compdef tessera"));
    assert!(read("share/fish/vendor_completions.d/tessera.fish").contains("complete -c tessera"));
    let unit = read("share/tessera/tessera.service");
    assert!(unit.contains(&format!("ExecStart={}/bin/tessera daemon", prefix.display())), "{unit}");
    for var in ["TESSERA_REGION", "TESSERA_SOCKET", "TESSERA_STATE_DIR"] {
        assert!(unit.contains(var), "the unit does not document {var}");
    }
    let leftovers: Vec<_> = walk(&prefix).into_iter().filter(|p| p.to_string_lossy().contains(".install.")).collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

    // `tessera info`: the driver, from the prefix's library folder when simulated.
    let info = succeeded("tessera info", &installed(&prefix, &elsewhere, &["info"], &[]));
    let simulated = info.starts_with("driver: simgpu");
    if simulated {
        assert!(info.contains(&format!("libraries in {}", lib.join("simgpu").display())), "{info}");
    } else {
        assert!(info.starts_with("driver: NVIDIA"), "{info}");
    }

    // `tessera run`: a CUDA program (tessera's own, under the shim) sees the quota as its GPU's size...
    let quota = succeeded(
        "tessera run tessera info",
        &installed(&prefix, &elsewhere, &["run", "--memory", "1GiB", "--", "tessera", "info"], &[]),
    );
    assert!(quota.contains(", 1.0 GiB,"), "the program under the shim does not see its 1 GiB quota:\n{quota}");
    // ... and runs kernels: the demo's load, under the shim preloaded from the prefix.
    let load = installed(
        &prefix,
        &elsewhere,
        &["run", "--memory", "1GiB", "--", "tessera", "load", "--seconds", "0.3", "--memory", "64MiB"],
        &[("TESSERA_LOG", "info")],
    );
    let log = succeeded("tessera run tessera load", &load);
    assert!(log.contains("memory quota: this process, 1.0 GiB"), "the shim did not load:\n{log}");
    if simulated {
        assert!(log.contains(&format!("{}", lib.join("simgpu/libcuda.so.1").display())), "{log}");
    }
    let preload = succeeded(
        "tessera run sh",
        &installed(&prefix, &elsewhere, &["run", "--", "sh", "-c", "echo \"$LD_PRELOAD\""], &[]),
    );
    assert_eq!(preload.trim(), lib.join("libtessera.so").to_str().unwrap());

    // `tessera simgpu env`: the prefix's folder of simulated libraries.
    let env = succeeded("tessera simgpu env", &installed(&prefix, &elsewhere, &["simgpu", "env"], &[]));
    assert!(env.contains(&format!("export LD_LIBRARY_PATH=\"{}", lib.join("simgpu").display())), "{env}");

    // `tessera daemon --help` lists its options and the variables it reads.
    let help = succeeded("tessera daemon --help", &installed(&prefix, &elsewhere, &["daemon", "--help"], &[]));
    for name in [
        "--region",
        "--socket",
        "--state-dir",
        "TESSERA_REGION",
        "TESSERA_SOCKET",
        "TESSERA_STATE_DIR",
        "XDG_STATE_HOME",
        "TESSERA_REAL_LIBCUDA",
        "TESSERA_REAL_LIBNVML",
        "TESSERA_LIB_DIR",
        "SIMGPU_",
    ] {
        assert!(help.contains(name), "`tessera daemon --help` does not name {name}:\n{help}");
    }
    // Nothing advertises a command that does not exist: `top`, advertised, is there.
    let top = succeeded("tessera --help", &installed(&prefix, &elsewhere, &["--help"], &[]));
    let words: Vec<&str> = top.split(|c: char| !c.is_alphanumeric()).collect();
    assert!(words.contains(&"top"), "`tessera --help` does not list `top`:\n{top}");
    succeeded("tessera top --help", &installed(&prefix, &elsewhere, &["top", "--help"], &[]));

    // TESSERA_LIB_DIR still overrides, and a wrong one is an error naming it.
    let wrong = installed(&prefix, &elsewhere, &["info"], &[("TESSERA_LIB_DIR", "/nonexistent")]);
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("TESSERA_LIB_DIR=/nonexistent"), "{}", show(&wrong));
}

/// Every path below `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            all.extend(walk(&path));
        }
        all.push(path);
    }
    all
}

#[test]
fn bad_arguments_fail_with_a_message_and_install_nothing() {
    let scratch = Scratch::new("bad");
    let file = scratch.0.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let spaced = scratch.0.join("with space");
    let colon = scratch.0.join("with:colon");
    let cases: [(Vec<&str>, &str); 7] = [
        (vec!["--prefix"], "--prefix needs a directory"),
        (vec!["--from"], "--from needs the folder holding tessera"),
        (vec!["--prefix", ""], "--prefix is empty"),
        (vec!["--prefix="], "--prefix is empty"),
        (vec!["--bogus"], "unknown argument '--bogus'"),
        (vec!["--prefix", spaced.to_str().unwrap()], "contains a space or a colon"),
        (vec!["--prefix", colon.to_str().unwrap()], "contains a space or a colon"),
    ];
    for (args, message) in cases.iter().chain([(vec!["--prefix", file.to_str().unwrap()], "is not a directory")].iter())
    {
        let out = install(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", show(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: expected {message:?} in: {}", show(&out));
        assert!(out.stdout.is_empty(), "{args:?}: {}", show(&out));
    }
    assert!(!spaced.exists() && !colon.exists(), "a rejected prefix was created");
    let help = install(&["--help"]);
    assert!(help.status.success() && String::from_utf8_lossy(&help.stdout).contains("--prefix DIR"), "{}", show(&help));
}
