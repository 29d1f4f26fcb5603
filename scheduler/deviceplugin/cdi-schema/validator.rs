//! Checks a CDI spec against the CDI project's JSON schema vendored beside this file (`schema.json`,
//! which refers to `defs.json`), with the `jsonschema` crate. Shared by the tests of
//! `tessera-deviceplugin` and of `cuda-tests` (`#[path]`-included); the product does not use it.

use serde_json::Value;

/// The vendored schema and its definitions.
const SCHEMA: &str = include_str!("schema.json");
const DEFS: &str = include_str!("defs.json");

/// Hands `defs.json` to the validator for the schema's `defs.json#/...` references; nothing else is
/// fetched (no network).
struct VendoredDefs;

impl jsonschema::Retrieve for VendoredDefs {
    fn retrieve(&self, uri: &jsonschema::Uri<String>) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        if uri.as_str().ends_with("/defs.json") {
            Ok(serde_json::from_str(DEFS)?)
        } else {
            Err(format!("{uri} is not vendored").into())
        }
    }
}

/// The validator of the vendored schema (draft 7, as it declares).
pub fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(SCHEMA).expect("the vendored schema is JSON");
    jsonschema::options()
        .with_base_uri("https://cdi.schema.invalid/schema.json")
        .with_retriever(VendoredDefs)
        .build(&schema)
        .unwrap_or_else(|e| panic!("the vendored CDI schema does not compile: {e}"))
}

/// `Ok` when `spec` is valid by the schema and every `env` entry is `NAME=value` (which the schema
/// leaves unchecked); else every error, one a line.
pub fn check(spec: &Value) -> Result<(), String> {
    let v = validator();
    let mut errors: Vec<String> = v.iter_errors(spec).map(|e| format!("{}: {e}", e.instance_path())).collect();
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
