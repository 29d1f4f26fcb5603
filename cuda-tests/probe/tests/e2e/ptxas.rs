//! Every PTX module the project ships is assembled by NVIDIA's own assembler, `ptxas` (from the PyPI
//! package `nvidia-cuda-nvcc-cu12`, installed by `tools/ptxas.sh`; it needs no GPU), for sm_80 and sm_90
//! and for the module's own `.target`: the kernels are real PTX a real driver accepts, not bodies only
//! the simulator gives meaning to. The modules are every `*.ptx` file of the repository, and no source
//! file may hide PTX of its own (it would escape the check).

use crate::common;

use common::build_dir;
use common::cprog::workspace;
use std::path::{Path, PathBuf};

/// GPU architectures every module must assemble for (besides its own `.target`).
const ARCHITECTURES: [&str; 2] = ["sm_80", "sm_90"];

/// Modules that must exist (a move or rename must update the programs that load them, and this list).
const KNOWN_MODULES: [&str; 2] = ["tools/kernels/spin.ptx", "cuda-tests/kernels/kernels.ptx"];

/// Files that may contain a PTX `.entry` outside a `*.ptx` file, and why.
const NOT_MODULES: [(&str, &str); 2] = [
    ("cuda-tests/simgpu/src/ptx.rs", "the simulated driver's PTX parser: its unit tests feed it odd PTX on purpose"),
    ("cuda-tests/probe/tests/e2e/ptxas.rs", "this test: it feeds ptxas a broken module on purpose"),
];

/// Every file of the repository (outside `target`, `.git` and other hidden folders), relative paths.
fn repository_files() -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
        for entry in entries {
            let entry = entry.expect("read a folder entry");
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let kind = entry.file_type().expect("file type");
            if name.starts_with('.') || (dir == root && name == "target") || kind.is_symlink() {
                continue;
            }
            if kind.is_dir() {
                walk(root, &entry.path(), out);
            } else if kind.is_file() {
                out.push(entry.path().strip_prefix(root).expect("inside the root").to_path_buf());
            }
        }
    }
    let root = workspace().canonicalize().expect("the workspace folder");
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    files.sort();
    files
}

/// The PTX modules the project ships: every `*.ptx` file.
fn modules() -> Vec<PathBuf> {
    repository_files().into_iter().filter(|p| p.extension().is_some_and(|e| e == "ptx")).collect()
}

/// True when `text` declares a PTX kernel: `.entry NAME(` after white space, a quote or a `\n`/`\t`
/// escape (not Rust's `map.entry(k)` or `self.entry as`).
fn declares_entry(text: &str) -> bool {
    text.match_indices(".entry").any(|(i, m)| {
        let before = &text[..i];
        let starts = before.is_empty()
            || before.ends_with(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            || before.ends_with("\\n")
            || before.ends_with("\\t");
        let after = &text[i + m.len()..];
        let name = after.trim_start();
        let ident = name.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$');
        starts && name.len() < after.len() && ident.len() < name.len() && ident.trim_start().starts_with('(')
    })
}

/// The module's own `.target` architecture.
fn own_target(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or("").trim())
        .find_map(|l| l.strip_prefix(".target"))
        .and_then(|rest| rest.split([',', ' ', '\t']).find(|t| !t.is_empty()))
        .unwrap_or_else(|| panic!("no .target directive in:\n{text}"))
        .to_string()
}

/// Assembles `module` for `arch`; the error is ptxas's own message.
fn assemble(module: &Path, arch: &str) -> Result<(), String> {
    common::cprog::assemble(module, arch).map(drop)
}

#[test]
fn every_shipped_ptx_module_assembles_for_sm_80_and_sm_90() {
    let root = workspace();
    let modules = modules();
    for known in KNOWN_MODULES {
        assert!(modules.iter().any(|m| m == Path::new(known)), "{known} is missing; modules found: {modules:?}");
    }
    let mut failures = Vec::new();
    for module in &modules {
        let path = root.join(module);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        assert!(declares_entry(&text), "{} declares no .entry", module.display());
        let mut archs: Vec<String> = ARCHITECTURES.iter().map(|a| a.to_string()).collect();
        archs.push(own_target(&text));
        archs.dedup();
        for arch in archs {
            if let Err(e) = assemble(&path, &arch) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "PTX that NVIDIA's assembler rejects:\n{}", failures.join("\n"));
}

#[test]
fn ptxas_rejects_a_broken_module_with_its_message() {
    // The check above could fail: the same assembler refuses a kernel using an undeclared register.
    let good = std::fs::read_to_string(workspace().join("cuda-tests/kernels/kernels.ptx")).expect("read kernels.ptx");
    let broken = good.replacen("add.rn.f32          %f3, %f1, %f2;", "add.rn.f32 %f3, %f1, %f_undeclared;", 1);
    assert_ne!(broken, good, "the instruction to break is no longer in kernels.ptx");
    let path = build_dir().join(format!("ptxas-broken-{}.ptx", std::process::id()));
    std::fs::write(&path, broken).expect("write the broken module");
    let result = assemble(&path, "sm_80");
    let _ = std::fs::remove_file(&path);
    let message = result.expect_err("ptxas accepted a kernel using an undeclared register");
    assert!(message.contains("%f_undeclared"), "ptxas's message does not name the problem: {message}");
}

#[test]
fn no_source_file_carries_ptx_outside_the_checked_modules() {
    let root = workspace();
    let mut hidden = Vec::new();
    for file in repository_files() {
        if file.extension().is_some_and(|e| e == "ptx") || NOT_MODULES.iter().any(|(p, _)| file == Path::new(p)) {
            continue;
        }
        // Binary files are not PTX.
        let Ok(text) = std::fs::read_to_string(root.join(&file)) else { continue };
        if declares_entry(&text) {
            hidden.push(file.display().to_string());
        }
    }
    assert!(
        hidden.is_empty(),
        "PTX kernels outside a .ptx file escape the ptxas check; move them into a .ptx file that the program \
         embeds (include_str!, or .incbin from C): {hidden:?}"
    );
    for (path, why) in NOT_MODULES {
        assert!(root.join(path).is_file(), "{path} ({why}) no longer exists: update NOT_MODULES");
    }
}

#[test]
fn the_entry_detector_tells_ptx_from_rust() {
    assert!(declares_entry(".visible .entry spin(\n"));
    assert!(declares_entry(".entry\tfoo("));
    assert!(declares_entry("\".version 8.0\\n.visible .entry f(.param .u64 a)\\n{\\n ret;\\n}\\n\""));
    assert!(declares_entry("\"\\n.entry f (\""));
    assert!(!declares_entry("map.entry(key).or_default()"));
    assert!(!declares_entry("self.entry as *mut c_void"));
    assert!(!declares_entry("the PTX `.entry` name"));
    assert_eq!(own_target(".version 7.0\n// .target sm_99\n.target sm_50\n"), "sm_50");
}
