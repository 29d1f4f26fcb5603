//! The product does not carry the simulator, and only the `tessera` command carries the daemon:
//!
//! - `tessera` depends on `simgpu-host` (the simulated GPU's configuration, state file, meter and library
//!   folder, which `tessera simgpu`, `tessera run` and the demo need), never on `simgpu` (execution
//!   engine, built-in kernels, PTX parser, trace) or the simulated libraries, and the built binary has no
//!   symbol of the `simgpu` crate;
//! - the libraries a cluster loads, TensorFusion's provider (`tessera-provider`) and the Kubernetes device
//!   plugin (`tessera-deviceplugin`), depend on neither the daemon (`tessera-scheduler`) nor any crate of
//!   the simulator: what they know of the machine is `tessera-host`'s;
//! - no crate of the workspace but `tessera` (and the benchmarks) depends on the daemon's crate.

use std::process::Command;

/// The crates of the simulator proper: what only the simulated libraries and the tests may link.
const SIMULATOR: [&str; 6] = ["simgpu", "simcuda", "simnvml", "simcublas", "simsysfs", "simsysfs-preload"];

/// The workspace's manifest.
const MANIFEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");

/// The names of the packages in the normal dependency tree of `package` (itself included), as `cargo
/// install --path` would build it.
fn normal_tree(package: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "--manifest-path", MANIFEST, "-p", package, "-e", "normal"])
        .args(["--prefix", "none", "-f", "{p}"])
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8_lossy(&out.stdout);
    tree.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_string).collect()
}

#[test]
fn tessera_depends_on_the_simulated_gpu_without_its_engine() {
    let tree = normal_tree("tessera-tools");
    assert!(tree.iter().any(|p| p == "simgpu-host"), "simgpu-host is not in the tree (did it move? update this test)");
    for sim in SIMULATOR {
        assert!(!tree.iter().any(|p| p == sim), "tessera depends on {sim}: {tree:?}");
    }
}

#[test]
fn the_provider_and_the_device_plugin_link_neither_the_daemon_nor_the_simulator() {
    for package in ["tessera-provider", "tessera-deviceplugin"] {
        let tree = normal_tree(package);
        assert!(
            tree.iter().any(|p| p == "tessera-host"),
            "{package} has no tessera-host (did it move? update this test)"
        );
        for other in SIMULATOR.iter().chain(&["simgpu-host", "tessera-scheduler"]) {
            assert!(!tree.iter().any(|p| p == other), "{package} depends on {other}: {tree:?}");
        }
    }
}

#[test]
fn only_the_tessera_command_and_the_benchmarks_depend_on_the_daemon_crate() {
    // What each member's manifest says (tests may use the daemon's crate: dev-dependencies are not counted).
    let metadata = crate::common::metadata();
    let packages = metadata["packages"].as_array().expect("packages");
    assert!(packages.len() > 10, "the workspace's members: {packages:?}");
    let mut dependents: Vec<&str> = packages
        .iter()
        .filter(|p| {
            let deps = p["dependencies"].as_array().into_iter().flatten();
            deps.filter(|d| d["kind"].as_str() != Some("dev")).any(|d| d["name"] == "tessera-scheduler")
        })
        .filter_map(|p| p["name"].as_str())
        .collect();
    dependents.sort_unstable();
    assert_eq!(dependents, ["tessera-benches", "tessera-tools"], "the crates depending on tessera-scheduler");
}

/// Whether `symbol` (as `nm` prints it) belongs to crate `krate`, in either symbol mangling: legacy
/// (`_ZN6simgpu6engine...`) or v0 (`_RNv...Cs<hash>_6simgpu6engine...`).
fn of_crate(symbol: &str, krate: &str) -> bool {
    let name = format!("{}{krate}", krate.len());
    symbol.contains(&format!("_ZN{name}")) || (symbol.contains(&format!("_{name}")) && symbol.contains("_RN"))
}

#[test]
fn the_tessera_binary_has_no_symbol_of_the_simulated_engine() {
    let binary = env!("CARGO_BIN_EXE_tessera");
    let out = Command::new("nm").arg(binary).output().expect("run nm (binutils)");
    assert!(out.status.success(), "nm {binary}: {}", String::from_utf8_lossy(&out.stderr));
    let symbols = String::from_utf8_lossy(&out.stdout);
    // What it does link of the simulated GPU is found the same way: the check below is not vacuous.
    assert!(symbols.lines().any(|l| of_crate(l, "simgpu_host")), "no simgpu_host symbol in {binary}: is it stripped?");
    let found: Vec<&str> = symbols.lines().filter(|l| of_crate(l, "simgpu")).take(3).collect();
    assert!(found.is_empty(), "{binary} links the simgpu crate: {found:?}");
}
