//! The probe's output: one JSON object per line on stdout.

use crate::fail::Failure;
use serde_json::{Value, json};
use std::io::Write;

/// Prints a scenario's result, tagged with the scenario name. `Value::Null` means the scenario already
/// printed its result itself (see [`emit_now`]).
pub fn emit(scenario: &str, value: Value) {
    if value.is_null() {
        return;
    }
    emit_now(scenario, value);
}

/// Prints `value` (an object) at once and flushes, for scenarios that report before they finish.
pub fn emit_now(scenario: &str, mut value: Value) {
    if let Some(map) = value.as_object_mut() {
        map.insert("scenario".into(), json!(scenario));
    }
    let mut out = std::io::stdout().lock();
    // A closed stdout (the reader went away) is not worth failing over.
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

/// Prints a failure as `{"scenario", "error", "cuda_error"}`.
pub fn emit_failure(scenario: &str, failure: &Failure) {
    emit_now(scenario, json!({ "error": failure.message, "cuda_error": failure.code }));
}
