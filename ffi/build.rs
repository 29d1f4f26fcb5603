//! Turns the probed cuGetProcAddress table (data/proc-address-table.tsv) into a static Rust slice so that
//! the simulated driver and the shim answer from the same facts without reading any file at run time.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let src = "data/proc-address-table.tsv";
    println!("cargo:rerun-if-changed={src}");
    let text = std::fs::read_to_string(src).expect("read proc-address table");
    let mut rows: Vec<(String, u8, u32, String)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.starts_with("base_name") || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 4, "line {}: expected 4 tab-separated fields", n + 1);
        rows.push((
            f[0].to_string(),
            f[1].parse().expect("flags"),
            f[2].parse().expect("min_version"),
            f[3].to_string(),
        ));
    }
    // Sorted by (base, flags, version descending) so a lookup is a binary search plus a short scan.
    rows.sort_by(|a, b| (&a.0, a.1, std::cmp::Reverse(a.2)).cmp(&(&b.0, b.1, std::cmp::Reverse(b.2))));
    let mut exported: Vec<&str> = rows.iter().map(|r| r.3.as_str()).collect();
    exported.sort();
    exported.dedup();

    let mut out =
        String::from("/// Every row of the probed table, sorted by (base name, flags, newest version first).\n");
    out.push_str("pub static ROWS: &[ProcAddressRow] = &[\n");
    for (base, flags, ver, sym) in &rows {
        writeln!(out, "    ProcAddressRow {{ base: {base:?}, flags: {flags}, min_version: {ver}, symbol: {sym:?} }},")
            .unwrap();
    }
    out.push_str("];\n\n/// Every symbol name the real driver hands out through cuGetProcAddress, sorted.\n");
    out.push_str("pub static EXPORTED_SYMBOLS: &[&str] = &[\n");
    for s in exported {
        writeln!(out, "    {s:?},").unwrap();
    }
    out.push_str("];\n");
    let dst = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("proc_address_rows.rs");
    std::fs::write(dst, out).unwrap();
}
