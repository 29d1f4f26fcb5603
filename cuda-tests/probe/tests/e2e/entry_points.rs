//! The driver's entry points: `cuGetProcAddress` against the real driver's table, unimplemented
//! exports, and configuration errors reported by `cuInit`.

use crate::common;

use common::{INVALID_VALUE, NOT_SUPPORTED, Sim, at, u64_at};
use serde_json::json;

#[test]
fn proc_address_answers_every_table_row_exactly() {
    let r = Sim::new("procaddress").ok(&["procaddress"]);
    assert_eq!(u64_at(&r, "rows"), 1690);
    assert_eq!(u64_at(&r, "v2_matched"), 1690);
    assert_eq!(u64_at(&r, "v1_matched"), 1690);
    assert_eq!(u64_at(&r, "ptsz_matched"), u64_at(&r, "ptsz_checked"));
    assert!(u64_at(&r, "ptsz_checked") > 1000, "{r}");
    let case = |name: &str| at(&r, &format!("cases.{name}")).clone();
    // Lookups that find nothing succeed with a NULL pointer and say why.
    assert_eq!(case("unknown_symbol"), json!({ "code": 0, "pfn_is_null": true, "status": 1 }));
    assert_eq!(case("unknown_symbol_v1"), json!({ "code": 0, "pfn_is_null": true, "status": null }));
    assert_eq!(case("ptsz_unknown_symbol"), json!({ "code": 0, "pfn_is_null": true, "status": 1 }));
    assert_eq!(case("version_not_sufficient"), json!({ "code": 0, "pfn_is_null": true, "status": 2 }));
    assert_eq!(case("no_status_pointer"), json!({ "code": 0, "pfn_is_null": false, "status": null }));
    // Versions beyond the driver's, version 0 and NULL arguments are CUDA_ERROR_INVALID_VALUE.
    assert_eq!(u64_at(&r, "cases.version_above_driver.code"), INVALID_VALUE);
    assert_eq!(u64_at(&r, "cases.version_zero.code"), INVALID_VALUE);
    assert_eq!(u64_at(&r, "cases.null_symbol_code"), INVALID_VALUE);
    assert_eq!(u64_at(&r, "cases.null_pfn_code"), INVALID_VALUE);
}

#[test]
fn unimplemented_entry_points_return_not_supported() {
    let r = Sim::new("stubs").ok(&["stubs"]);
    let stubs = r["stubs"].as_object().expect("stubs");
    assert!(stubs.len() >= 5);
    for (symbol, s) in stubs {
        assert_eq!(u64_at(s, "dlsym"), NOT_SUPPORTED, "{symbol} called through dlsym");
        assert_eq!(u64_at(s, "proc_address"), NOT_SUPPORTED, "{symbol} called through cuGetProcAddress");
    }
    // An id no table has: the real driver's answer (the runtime's own tables are served, see cudart.rs).
    assert_eq!(u64_at(&r, "cuGetExportTable"), INVALID_VALUE);
    assert_eq!(at(&r, "unknown_symbol_exported"), false);
    // Traced, every refusal says what refused it: a stub its name, any other entry point its source line.
    let traced = Sim::new("stubs-traced").with("SIMGPU_TRACE", "1").run(&["stubs"]);
    assert!(traced.stderr.contains("is not simulated (CUDA_ERROR_NOT_SUPPORTED)"), "{}", traced.stderr);
    assert!(
        traced.stderr.contains("cuGetExportTable(") && traced.stderr.contains("): unknown id"),
        "{}",
        traced.stderr
    );
    assert!(
        traced.stderr.contains("simgpu: the entry point at cuda-tests/simcuda/src/export_table.rs:")
            && traced.stderr.contains(" returned 1\n"),
        "{}",
        traced.stderr
    );
}

#[test]
fn malformed_configuration_fails_cuinit_naming_the_variable() {
    for (var, value) in [("SIMGPU_MEMORY", "lots"), ("SIMGPU_DEVICES", "v100"), ("SIMGPU_KERNEL_TIME", "quick")] {
        let run = Sim::new("malformed").with(var, value).run(&["attributes"]);
        assert!(!run.success, "{var}={value} must make the probe fail: {}", run.json);
        assert_eq!(u64_at(&run.json, "cuda_error"), INVALID_VALUE, "{var}={value}: {}", run.json);
        assert!(at(&run.json, "error").as_str().unwrap().contains("cuInit"), "{}", run.json);
        assert!(run.stderr.contains(var), "stderr must name {var}: {}", run.stderr);
    }
}
