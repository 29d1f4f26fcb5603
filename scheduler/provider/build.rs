//! Turns `layout.tsv` (the ABI's struct sizes and field offsets) into the two checks that keep the C
//! headers and the Rust types equal to it: a C file of `_Static_assert`s per header, compiled here with
//! the system C compiler (the build fails when a header disagrees), and Rust `const` assertions that
//! `src/abi/mod.rs` includes (the crate fails to compile when a Rust type disagrees).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

/// One row of the table.
struct Row {
    header: String,
    ty: String,
    field: Option<String>,
    bytes: usize,
}

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for f in ["layout.tsv", "include/accelerator.h", "include/accelerator_legacy.h"] {
        println!("cargo:rerun-if-changed={f}");
    }
    let table = std::fs::read_to_string(dir.join("layout.tsv")).expect("read layout.tsv");
    let rows: Vec<Row> = table
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|(n, l)| parse(n + 1, l))
        .collect();

    let mut rust = String::new();
    for r in &rows {
        let ty = format!("abi_type!({}, {})", r.header, r.ty);
        let (expr, what) = match &r.field {
            None => (format!("::std::mem::size_of::<{ty}>()"), format!("size of {}", r.ty)),
            Some(f) => (format!("::std::mem::offset_of!({ty}, {})", rust_field(f)), format!("offset of {}.{f}", r.ty)),
        };
        writeln!(
            rust,
            "const _: () = assert!({expr} == {}, \"{} ABI: {what} is not {}\");",
            r.bytes, r.header, r.bytes
        )
        .unwrap();
    }
    std::fs::write(out.join("layout_check.rs"), rust).expect("write layout_check.rs");

    for (header, file) in [("current", "accelerator.h"), ("legacy", "accelerator_legacy.h")] {
        let mut c = format!("#include <stddef.h>\n#include \"{file}\"\n");
        for r in rows.iter().filter(|r| r.header == header) {
            let expr = match &r.field {
                None => format!("sizeof({})", r.ty),
                Some(f) => format!("offsetof({}, {f})", r.ty),
            };
            writeln!(c, "_Static_assert({expr} == {}, \"{file}: {expr} is not {}\");", r.bytes, r.bytes).unwrap();
        }
        let source = out.join(format!("layout_check_{header}.c"));
        std::fs::write(&source, c).expect("write the C layout check");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let result = Command::new(&cc)
            .args(["-std=c11", "-fsyntax-only", "-Wall", "-Werror"])
            .arg(format!("-I{}", dir.join("include").display()))
            .arg(&source)
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}` to check {file}: {e}"));
        assert!(
            result.status.success(),
            "{file} disagrees with layout.tsv:\n{}",
            String::from_utf8_lossy(&result.stderr)
        );
    }
}

/// Row `n` of the table: header, struct, field (`-` for the size), bytes.
fn parse(n: usize, line: &str) -> Row {
    let cols: Vec<&str> = line.split('\t').collect();
    assert!(cols.len() == 4, "layout.tsv line {n}: 4 tab-separated columns expected: {line:?}");
    assert!(matches!(cols[0], "current" | "legacy"), "layout.tsv line {n}: header is current or legacy");
    Row {
        header: cols[0].into(),
        ty: cols[1].into(),
        field: (cols[2] != "-").then(|| cols[2].to_string()),
        bytes: cols[3].parse().unwrap_or_else(|_| panic!("layout.tsv line {n}: bytes is a number: {line:?}")),
    }
}

/// The Rust name of C field `name`: snake_case (`deviceUUID` -> `device_uuid`, `activeSMs` ->
/// `active_sms`), `type` as a raw identifier.
fn rust_field(name: &str) -> String {
    if name == "type" {
        return "r#type".into();
    }
    let mut s = String::new();
    let mut previous_lower = false;
    for ch in name.chars() {
        if ch.is_ascii_uppercase() && previous_lower {
            s.push('_');
        }
        previous_lower = ch.is_ascii_lowercase() || ch.is_ascii_digit();
        s.push(ch.to_ascii_lowercase());
    }
    s
}
