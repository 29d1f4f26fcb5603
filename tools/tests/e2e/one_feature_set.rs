//! `cargo build --workspace` and `cargo test --workspace` compile each dependency once: the tests'
//! dev-dependencies switch on no feature of a crate the build compiles that the build does not switch on
//! too (`tools/workspace-hack` asks for them). Otherwise the test build compiles that crate, and all
//! that sits above it (serde under hyper, tonic, kube...), a second time. Fails naming the crate and the
//! features to add to `tools/workspace-hack/Cargo.toml`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Each package `cargo tree` shows, with every feature set it is compiled with; dev-dependencies
/// included or not (cargo resolves features as `cargo test` or as `cargo build` does accordingly).
fn feature_sets(with_dev: bool) -> BTreeMap<String, BTreeSet<String>> {
    let edges = if with_dev { "normal,build,dev" } else { "normal,build" };
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--workspace", "--offline", "--prefix", "none", "-e", edges, "-f", "{p}|{f}"])
        .current_dir(crate::common::repo())
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut sets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).expect("UTF-8").lines().filter(|l| !l.is_empty()) {
        let (package, features) = line.split_once('|').unwrap_or_else(|| panic!("cargo tree printed {line:?}"));
        // A package already shown is printed again with " (*)" after its features.
        let features = features.trim_end_matches(" (*)").to_string();
        sets.entry(package.trim_end_matches(" (*)").to_string()).or_default().insert(features);
    }
    sets
}

#[test]
fn the_test_build_compiles_no_dependency_of_the_build_a_second_time() {
    let (build, test) = (feature_sets(false), feature_sets(true));
    assert!(build.keys().any(|p| p.starts_with("serde v")), "cargo tree showed no serde: {build:?}");
    let differ: Vec<String> = build
        .iter()
        .filter(|(package, features)| test.get(*package) != Some(*features))
        .map(|(package, features)| format!("{package}: {features:?} built, {:?} tested", test.get(package)))
        .collect();
    assert!(
        differ.is_empty(),
        "the tests switch on features the build does not; add them to tools/workspace-hack/Cargo.toml:\n{}",
        differ.join("\n")
    );
}
