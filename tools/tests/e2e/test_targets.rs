//! Targets built without a test harness (`test = false` in their `Cargo.toml`, to keep the suite's build
//! short) hold no unit test: a `#[test]` added there would never run, so this test fails naming it; and
//! they say `bench = false` too, or `cargo build --all-targets` builds a harness for them anyway.

use std::path::{Path, PathBuf};

/// The Rust files a target compiles: a binary's file (and its folder of modules, if any); a library's
/// folder, less `src/bin`.
fn sources(kind: &str, src: &Path) -> Vec<PathBuf> {
    let mut files = vec![src.to_path_buf()];
    let folder = if kind == "lib" { src.parent().map(Path::to_path_buf) } else { Some(src.with_extension("")) };
    let mut pending: Vec<PathBuf> = folder.into_iter().filter(|f| f.is_dir()).collect();
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() && !(kind == "lib" && path.ends_with("bin")) {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && path != src {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn targets_without_a_test_harness_hold_no_unit_test() {
    let meta = crate::common::metadata();
    let mut checked = 0;
    let mut found = Vec::new();
    for package in meta["packages"].as_array().expect("packages") {
        for target in package["targets"].as_array().expect("targets") {
            if target["test"].as_bool() != Some(false) {
                continue;
            }
            let kind = target["kind"][0].as_str().unwrap_or_default();
            let kind = if matches!(kind, "cdylib" | "rlib" | "staticlib") { "lib" } else { kind };
            for file in sources(kind, Path::new(target["src_path"].as_str().expect("src_path"))) {
                let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                if text.contains("#[test]") || text.contains("#[cfg(test)]") {
                    found.push(format!("{} (target {} of {})", file.display(), target["name"], package["name"]));
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "no target declares test = false: this check has nothing to check");
    // A target without tests has no benchmark harness either: `cargo build --all-targets` (the suite's
    // build) would compile one for nothing (simcuda's took 22 s of a 2-CPU build). `cargo metadata` does
    // not show the flag, so each manifest's target sections are read.
    let mut benched = Vec::new();
    for package in meta["packages"].as_array().expect("packages") {
        let manifest = package["manifest_path"].as_str().expect("manifest_path");
        let text = std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{manifest}: {e}"));
        for section in text.split("\n[").filter(|s| s.lines().any(|l| l.trim() == "test = false")) {
            if !section.lines().any(|l| l.trim() == "bench = false") {
                benched.push(format!("{manifest}: [{}", section.lines().next().unwrap_or_default()));
            }
        }
    }
    assert!(benched.is_empty(), "target sections with test = false but not bench = false: {benched:#?}");
    assert!(
        found.is_empty(),
        "unit tests in targets built without a test harness (they would never run; set `test = true` in their \
         Cargo.toml): {found:#?}"
    );
}
