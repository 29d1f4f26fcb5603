//! JSON Schema validation for the tests, by the reference validator: Python's `jsonschema` package
//! (pinned, installed once into the target folder by `tools/pip-once.sh`, then used offline). Checks a
//! CDI spec against the CDI project's schema vendored beside this file (`schema.json`, which refers to
//! `defs.json`), and any document against any schema file ([`errors`]: `tessera info --json` against
//! `docs/schema/`). Shared by the tests of `tessera-deviceplugin` and of `cuda-tests` (`#[path]`-included);
//! the product does not use it.
//!
//! Why Python's rather than a Rust crate: the `jsonschema` crate and its dependencies took a fifth of the
//! suite's test build, for two tests.

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The validator's package, pinned.
const PACKAGE: &str = "jsonschema==4.25.1";

/// Reads `[schema, {uri: file}, [document...]]` on stdin; checks the schema against its draft's
/// meta-schema, then prints, for each document, its errors (`/path: message`), as JSON.
const SCRIPT: &str = r#"
import json, sys
import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7
schema, extras, docs = json.load(sys.stdin)
registry = Registry()
for uri, path in extras.items():
    with open(path) as f:
        registry = registry.with_resource(uri, Resource.from_contents(json.load(f), default_specification=DRAFT7))
cls = jsonschema.validators.validator_for(schema)
cls.check_schema(schema)
v = cls(schema, registry=registry)
def where(e):
    return "/" + "/".join(str(p) for p in e.absolute_path)
print(json.dumps([[where(e) + ": " + e.message for e in v.iter_errors(d)] for d in docs]))
"#;

/// The clone's root (this file is compiled by crates two folders down).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the validator's package is installed (once; checked once per test process).
fn package_folder() -> &'static Path {
    static FOLDER: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FOLDER.get_or_init(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo().join("target"));
        let folder = target.join("pydeps/jsonschema");
        let out = Command::new(repo().join("tools/pip-once.sh"))
            .args([PACKAGE.as_ref(), folder.as_os_str(), "jsonschema/__init__.py".as_ref()])
            .output()
            .expect("run tools/pip-once.sh");
        assert!(out.status.success(), "cannot install {PACKAGE}: {}", String::from_utf8_lossy(&out.stderr));
        folder
    })
}

/// The errors of each of `docs` against the schema in file `schema` (whose `$ref`s to the URIs of
/// `extras` read those files), one line each, `/path: message`; empty for a valid document. Panics
/// when the schema itself breaks its draft's meta-schema.
pub fn errors(schema: &Path, extras: &[(&str, &Path)], docs: &[&Value]) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(schema).unwrap_or_else(|e| panic!("{}: {e}", schema.display()));
    let schema_json: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", schema.display()));
    let extras: serde_json::Map<String, Value> =
        extras.iter().map(|(uri, path)| (uri.to_string(), Value::from(path.to_string_lossy()))).collect();
    let input = serde_json::to_vec(&serde_json::json!([schema_json, extras, docs])).expect("JSON");
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .env("PYTHONPATH", package_folder())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    child.stdin.take().expect("piped stdin").write_all(&input).expect("hand the documents to the validator");
    let out = child.wait_with_output().expect("wait for the validator");
    assert!(
        out.status.success(),
        "the validator failed on {} (a schema breaking its meta-schema?): {}",
        schema.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the validator's JSON")
}

/// `Ok` when `spec` is valid by the vendored CDI schema (draft 7) and every `env` entry is `NAME=value`
/// (which the schema leaves unchecked); else every error, one a line.
pub fn check(spec: &Value) -> Result<(), String> {
    let folder = repo().join("scheduler/deviceplugin/cdi-schema");
    let defs = folder.join("defs.json");
    let mut errors = errors(&folder.join("schema.json"), &[("defs.json", &defs)], &[spec]).remove(0);
    for (i, device) in spec["devices"].as_array().into_iter().flatten().enumerate() {
        for entry in device["containerEdits"]["env"].as_array().into_iter().flatten() {
            let ok = entry.as_str().is_some_and(|s| s.find('=').is_some_and(|at| at > 0));
            if !ok {
                errors.push(format!("/devices/{i}/containerEdits/env: {entry} is not NAME=value"));
            }
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors.join("\n")) }
}
