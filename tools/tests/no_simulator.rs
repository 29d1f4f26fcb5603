//! The product binary does not carry the simulated GPU's engine: `tessera` depends on `simgpu-host` (the
//! simulated GPU's configuration, state file, meter and library folder, which `tessera simgpu`, `tessera
//! run` and the demo need), never on `simgpu` (execution engine, built-in kernels, PTX parser, trace) or
//! the simulated libraries, and the built binary has no symbol of the `simgpu` crate.

use std::process::Command;

/// The crates of the simulator proper: what only the simulated libraries and the tests may link.
const SIMULATOR: [&str; 6] = ["simgpu", "simcuda", "simnvml", "simcublas", "simsysfs", "simsysfs-preload"];

/// The names of the packages in the normal dependency tree of `package` (itself included), as `cargo
/// install --path` would build it.
fn normal_tree(package: &str) -> Vec<String> {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "--manifest-path", manifest, "-p", package, "-e", "normal"])
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
