//! `tessera info --json`: the document of every simulated profile, and of a mixed machine, is valid against
//! `docs/schema/device-info.schema.json` (draft 2020-12, checked by Python's `jsonschema`, the reference
//! validator), carries the figures the driver and NVML report for it, and says `null` for what they cannot
//! tell; the schema rejects broken documents; bad use is a clear error.

use crate::common;

use common::tessera::tessera;
use common::{GIB, Sim, at, u64_at};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The schema file of the repository.
fn schema() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/schema/device-info.schema.json")
}

/// The errors each of `docs` has against the schema, one per line (empty when valid); the schema itself
/// is checked against the draft 2020-12 meta-schema first.
fn errors(docs: &[&Value]) -> Vec<String> {
    crate::validator::errors(&schema(), &[], docs).into_iter().map(|e| e.join("\n")).collect()
}

/// `tessera info ARGS` on a simulated machine with `devices`: its exit status, stdout and stderr.
fn info(devices: &str, args: &[&str]) -> (bool, String, String) {
    assert!(!common::real_driver(), "these tests check the simulated profiles; run them on the simulated driver");
    let sim = Sim::new("info").without_shim().with("SIMGPU_DEVICES", devices);
    let mut all = vec!["info"];
    all.extend_from_slice(args);
    let out = sim.command_for(tessera(), &all).output().expect("run tessera info");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// The document of a machine with `devices`, checked against the schema.
fn document(devices: &str) -> Value {
    let (ok, stdout, stderr) = info(devices, &["--json"]);
    assert!(ok, "tessera info --json failed on {devices}: {stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    let bad = errors(&[&doc]).remove(0);
    assert!(bad.is_empty(), "the document of {devices} breaks the schema:\n{bad}\n{doc:#}");
    doc
}

/// Support of `format` in device `dev`'s precision list.
fn precision<'a>(dev: &'a Value, format: &str) -> &'a str {
    let list = at(dev, "precision_support").as_array().expect("precision_support");
    let entry = list.iter().find(|p| p["format"] == format).unwrap_or_else(|| panic!("no {format} in {dev}"));
    entry["support"].as_str().unwrap()
}

/// Count of compute unit `name` of device `dev`, if listed.
fn units(dev: &Value, name: &str) -> Option<u64> {
    at(dev, "compute_units").as_array().unwrap().iter().find(|u| u["name"] == name).and_then(|u| u["count"].as_u64())
}

/// The partitioning entry of `technology`, if the device has it.
fn partitioning<'a>(dev: &'a Value, technology: &str) -> Option<&'a Value> {
    at(dev, "partitioning_support").as_array().unwrap().iter().find(|p| p["technology"] == technology)
}

/// The resource slot named `name`, if offered.
fn slot<'a>(doc: &'a Value, name: &str) -> Option<&'a Value> {
    at(doc, "resource_slots").as_array().unwrap().iter().find(|s| s["slot_name"] == name)
}

/// Checks everything every simulated device shares: the driver reports no memory type, L1 size or memory
/// channels (null), the simulated GPU sits on no PCI device of this machine (NUMA null), Tessera's
/// fractional vGPUs are offered with the region's limit.
fn common_checks(dev: &Value) {
    for field in ["memory_type", "l1_cache_per_core", "memory_channels"] {
        assert_eq!(at(dev, &format!("memory_spec.{field}")), &Value::Null, "{field} must be null: {dev}");
    }
    assert_eq!(at(dev, "numa_node"), &Value::Null);
    let fgpu = partitioning(dev, "fGPU").expect("fGPU partitioning");
    assert_eq!(fgpu["max_partitions"], 64);
    assert_eq!(fgpu["share_granularity_percent"], 1);
    assert_eq!(u64_at(dev, "memory_spec.total_memory"), u64_at(dev, "memory_size"));
}

#[test]
fn h100_document() {
    let doc = document("h100");
    assert_eq!(at(&doc, "driver.kind"), "simulated");
    assert_eq!(at(&doc, "driver.cuda_version"), "13.0");
    assert_eq!(at(&doc, "driver.display_driver_version"), "580.65.06");
    let dev = at(&doc, "devices.0");
    common_checks(dev);
    assert_eq!(at(dev, "name"), "NVIDIA H100 80GB HBM3");
    assert_eq!(at(dev, "hw_location"), "0000:10:00.0");
    assert_eq!(u64_at(dev, "memory_size"), 80 * GIB);
    assert_eq!(u64_at(dev, "processing_units"), 132);
    assert_eq!(units(dev, "SM"), Some(132));
    assert_eq!(units(dev, "Tensor Core"), Some(528));
    assert_eq!(units(dev, "CUDA Core"), Some(16896));
    assert_eq!(at(dev, "architecture"), "Hopper");
    assert_eq!(precision(dev, "FP8"), "native");
    assert_eq!(precision(dev, "TF32"), "native");
    assert_eq!(precision(dev, "INT4"), "emulated");
    assert_eq!(precision(dev, "FP4"), "emulated");
    // 2619 MHz × 5120 bits × 2 / 8 bytes per second, in GiB/s.
    assert_eq!(at(dev, "memory_spec.bandwidth"), &json!(3122.09));
    assert_eq!(u64_at(dev, "memory_spec.l2_cache"), 50 << 20);
    assert_eq!(u64_at(dev, "memory_spec.shared_mem_per_core"), 233_472);
    let mig = partitioning(dev, "MIG").expect("the H100 has MIG");
    assert_eq!(mig["max_partitions"], 7);
    assert_eq!(mig["enabled"], false);
    let names: Vec<&str> = mig["profiles"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"1g.10gb") && names.contains(&"7g.80gb"), "{names:?}");
    assert_eq!(slot(&doc, "cuda.device").unwrap()["capacity"], 1);
    let small = slot(&doc, "cuda.mig-1g.10gb").expect("the 1g.10gb slot");
    assert_eq!((&small["capacity"], &small["ready"]), (&json!(7), &json!(false)));
    assert_eq!(slot(&doc, "cuda.shares").unwrap()["capacity"], 1);
    assert_eq!(u64_at(slot(&doc, "cuda.mem").unwrap(), "capacity"), 80 * GIB);
}

#[test]
fn a100_document() {
    let doc = document("a100");
    let dev = at(&doc, "devices.0");
    common_checks(dev);
    assert_eq!(at(dev, "compute_capability"), "8.0");
    assert_eq!(units(dev, "SM"), Some(108));
    assert_eq!(units(dev, "Tensor Core"), Some(432));
    // The documented table: FP8 is a storage format on Ampere, computed in FP16/FP32.
    assert_eq!(precision(dev, "FP8"), "emulated");
    assert_eq!(precision(dev, "BF16"), "native");
    assert_eq!(precision(dev, "INT4"), "native");
    assert_eq!(at(dev, "memory_spec.bandwidth"), &json!(1448.39));
    let mig = partitioning(dev, "MIG").expect("the A100 has MIG");
    assert_eq!(mig["max_partitions"], 7);
    assert!(slot(&doc, "cuda.mig-1g.5gb").is_some() && slot(&doc, "cuda.mig-7g.40gb").is_some(), "{doc:#}");
}

#[test]
fn small_document_has_no_mig() {
    let doc = document("small");
    let dev = at(&doc, "devices.0");
    common_checks(dev);
    assert_eq!(at(dev, "compute_capability"), "8.6");
    assert_eq!(units(dev, "SM"), Some(20));
    assert_eq!(precision(dev, "FP8"), "emulated");
    assert!(partitioning(dev, "MIG").is_none(), "cc 8.6 has no MIG: {dev}");
    let slots: Vec<&str> =
        at(&doc, "resource_slots").as_array().unwrap().iter().map(|s| s["slot_name"].as_str().unwrap()).collect();
    assert_eq!(slots, ["cuda.device", "cuda.shares", "cuda.mem"]);
}

#[test]
fn mixed_machine_document() {
    let doc = document("h100,small,a100");
    let devices = at(&doc, "devices").as_array().unwrap();
    assert_eq!(devices.len(), 3);
    for (i, dev) in devices.iter().enumerate() {
        common_checks(dev);
        assert_eq!(dev["device_id"], i.to_string());
        assert_eq!(dev["hw_location"], format!("0000:{:02X}:00.0", 0x10 + i));
    }
    assert_eq!(at(&doc, "devices.1.architecture"), "Ampere");
    assert!(partitioning(&devices[1], "MIG").is_none());
    assert_eq!(slot(&doc, "cuda.device").unwrap()["devices"], json!(["0", "1", "2"]));
    assert_eq!(slot(&doc, "cuda.shares").unwrap()["capacity"], 3);
    assert_eq!(u64_at(slot(&doc, "cuda.mem").unwrap(), "capacity"), (80 + 4 + 40) * GIB);
    // Each MIG slot names the devices that have its profile: 1g.10gb exists on both the H100 and the A100.
    assert_eq!(slot(&doc, "cuda.mig-1g.10gb").unwrap()["devices"], json!(["0", "2"]));
    assert_eq!(slot(&doc, "cuda.mig-1g.10gb").unwrap()["capacity"], 7 + 4);
    assert_eq!(slot(&doc, "cuda.mig-1g.5gb").unwrap()["devices"], json!(["2"]));
}

/// A change that makes a valid document invalid.
type Breakage = Box<dyn Fn(&mut Value)>;

/// The schema is strict: each of these breakages of a valid document is rejected, so the validation above
/// could fail.
#[test]
fn the_schema_rejects_broken_documents() {
    let good = document("h100");
    let broken: Vec<(&str, Breakage)> = vec![
        ("a required field removed", Box::new(|d| drop(d["devices"][0].as_object_mut().unwrap().remove("numa_node")))),
        ("an unknown field", Box::new(|d| d["devices"][0]["colour"] = json!("green"))),
        ("a wrong type", Box::new(|d| d["devices"][0]["memory_size"] = json!("80GiB"))),
        (
            "a support level outside the enum",
            Box::new(|d| d["devices"][0]["precision_support"][5]["support"] = json!("maybe")),
        ),
        ("a format out of order", Box::new(|d| d["devices"][0]["precision_support"][0]["format"] = json!("FP32"))),
        (
            "an extra field in a precision entry",
            Box::new(|d| d["devices"][0]["precision_support"][0]["note"] = json!(1)),
        ),
        (
            "a tenth precision entry",
            Box::new(|d| {
                let extra = json!({"format": "FP4", "support": "none"});
                d["devices"][0]["precision_support"].as_array_mut().unwrap().push(extra)
            }),
        ),
        ("an SM count of zero", Box::new(|d| d["devices"][0]["compute_units"][0]["count"] = json!(0))),
        ("an unknown driver kind", Box::new(|d| d["driver"]["kind"] = json!("virtual"))),
        ("a negative bandwidth", Box::new(|d| d["devices"][0]["memory_spec"]["bandwidth"] = json!(-1.0))),
        (
            "an unknown partitioning technology",
            Box::new(|d| d["devices"][0]["partitioning_support"][0]["technology"] = json!("MPS")),
        ),
        ("a slot with a bad name", Box::new(|d| d["resource_slots"][0]["slot_name"] = json!("gpu"))),
        ("no slots at all", Box::new(|d| d["resource_slots"] = json!([]))),
    ];
    let docs: Vec<Value> = broken
        .iter()
        .map(|(_, breakage)| {
            let mut doc = good.clone();
            breakage(&mut doc);
            doc
        })
        .collect();
    let found = errors(&docs.iter().collect::<Vec<_>>());
    for ((what, _), errors) in broken.iter().zip(found) {
        assert!(!errors.is_empty(), "the schema accepted a document with {what}");
    }
}

#[test]
fn plain_info_still_prints_text() {
    let (ok, stdout, stderr) = info("h100,small", &[]);
    assert!(ok, "{stderr}");
    assert!(stdout.starts_with("driver: simgpu (simulated"), "{stdout}");
    assert!(stdout.contains("GPU 0: NVIDIA H100 80GB HBM3") && stdout.contains("GPU 1: Simulated GPU 4GB"), "{stdout}");
}

#[test]
fn bad_use_is_a_clear_error() {
    // A simulated machine configured wrongly: the variable is named, nothing is printed on stdout.
    let (ok, stdout, stderr) = info("v100", &["--json"]);
    assert!(!ok && stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("SIMGPU_DEVICES") && stderr.contains("v100"), "{stderr}");
    // No driver at all: a library folder without the simulated libraries, and no real driver.
    let empty = std::env::temp_dir().join(format!("tessera-info-no-driver-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let sim = Sim::new("info-no-driver").without_shim().with("TESSERA_LIB_DIR", &empty.to_string_lossy());
    let out = sim.command_for(tessera(), &["info", "--json"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && out.stdout.is_empty(), "{stderr}");
    assert!(stderr.contains("TESSERA_LIB_DIR") && stderr.contains("libsimcuda.so"), "{stderr}");
    std::fs::remove_dir_all(empty).unwrap();
    // A misspelt option is refused by the parser.
    let (ok, _, stderr) = info("h100", &["--jsn"]);
    assert!(!ok && stderr.contains("--jsn"), "{stderr}");
}
