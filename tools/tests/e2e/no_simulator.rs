//! The product binary does not carry the simulated GPU's engine: `tessera` depends on `simgpu` without
//! its `engine` feature (execution engine, built-in kernels, PTX parser, trace), and the built binary has
//! no symbol from those modules. `tessera simgpu` and the demo only need simgpu's configuration, state
//! file, meter and library folder.

use std::process::Command;

/// The simgpu modules that only the simulated libraries and the tests may link.
const ENGINE_MODULES: [&str; 5] = ["engine", "kernels", "ptx", "trace", "futex"];

#[test]
fn tessera_depends_on_simgpu_without_its_engine() {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    // Features resolved for tessera-tools alone, as `cargo install --path tools` builds it.
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "--manifest-path", manifest, "-p", "tessera-tools", "-e", "normal"])
        .args(["--prefix", "none", "-f", "{p} [{f}]"])
        .output()
        .expect("run cargo tree");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let simgpu: Vec<&str> = tree.lines().filter(|l| l.starts_with("simgpu ")).collect();
    assert!(!simgpu.is_empty(), "simgpu is not in the tree (did the crate move? update this test):\n{tree}");
    for line in simgpu {
        assert!(!line.contains("engine"), "tessera gets simgpu's engine: {line}");
    }
}

/// The mangled path of a module of simgpu, as both symbol manglings (legacy and v0) write it.
fn mangled(module: &str) -> String {
    format!("6simgpu{}{module}", module.len())
}

#[test]
fn the_tessera_binary_has_no_symbol_of_the_simulated_engine() {
    let binary = env!("CARGO_BIN_EXE_tessera");
    let out = Command::new("nm").arg(binary).output().expect("run nm (binutils)");
    assert!(out.status.success(), "nm {binary}: {}", String::from_utf8_lossy(&out.stderr));
    let symbols = String::from_utf8_lossy(&out.stdout);
    // What it does link from simgpu is found the same way: the check below is not vacuous.
    assert!(symbols.contains(&mangled("libdir")), "no simgpu::libdir symbol in {binary}: is it stripped?");
    for module in ENGINE_MODULES {
        let found: Vec<&str> = symbols.lines().filter(|l| l.contains(&mangled(module))).take(3).collect();
        assert!(found.is_empty(), "{binary} links simgpu::{module}: {found:?}");
    }
}
