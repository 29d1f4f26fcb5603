//! `CUDA_VISIBLE_DEVICES` on the simulated driver, as the real driver reads it: index lists and their order,
//! `GPU-` UUID prefixes, the first invalid entry ending the list, an empty list leaving no device
//! (`cuInit` fails with `CUDA_ERROR_NO_DEVICE`), and a `MIG-` UUID of an instance made through the simulated
//! NVML: one device with the instance's memory, SMs and UUID, whose memory limit is shared machine-wide by
//! the processes in it.
//!
//! The MIG instances are made by a child copy of this test binary that loads `libsimnvml.so` (NVML reads
//! `SIMGPU_*` once per process, so it runs with the test machine's settings; the machine runs as root, as
//! `nvidia-smi mig -cgi` needs).

use crate::common;

use common::{GIB, MIB, Sim, at, first_line, u64_at};
use libloading::Library;
use serde_json::Value;
use simgpu::mig;
use simgpu::{Config, profile};
use std::ffi::{CStr, c_char, c_uint};
use std::ptr::null_mut;
use tessera_ffi::nvml::*;

/// `CUDA_ERROR_NO_DEVICE`.
const NO_DEVICE: u64 = 100;
/// Set in the child that changes MIG instances: `create` or `destroy`.
const ROLE: &str = "VISIBLE_TEST_NVML_ROLE";
/// The H100's `1g.10gb` GPU instance profile and its whole-instance compute instance profile.
const P1G: c_uint = 19;
const CI_1: c_uint = 0;

fn config_of(sim: &Sim) -> Config {
    Config::from_lookup(|k| sim.var(k).map(str::to_string)).expect("SIMGPU_* settings")
}

/// Runs `attributes` with `CUDA_VISIBLE_DEVICES=value` (unset for `None`).
fn attributes(sim: &Sim, value: Option<&str>) -> common::Run {
    let mut cmd = sim.command(&["attributes"]);
    match value {
        Some(v) => cmd.env("CUDA_VISIBLE_DEVICES", v),
        None => cmd.env_remove("CUDA_VISIBLE_DEVICES"),
    };
    common::finished(cmd.output().expect("spawn simgpu-probe"))
}

/// The UUIDs of the devices `value` makes visible, in CUDA ordinal order.
fn visible(sim: &Sim, value: Option<&str>) -> Vec<String> {
    let run = attributes(sim, value);
    assert!(run.success, "CUDA_VISIBLE_DEVICES={value:?}: {}\n{}", run.json, run.stderr);
    let devices = at(&run.json, "devices").as_array().expect("devices").clone();
    assert_eq!(u64_at(&run.json, "device_count"), devices.len() as u64);
    devices.iter().map(|d| at(d, "uuid").as_str().unwrap().to_string()).collect()
}

/// Checks that `value` leaves no device: `cuInit` fails with `CUDA_ERROR_NO_DEVICE`.
fn assert_no_device(sim: &Sim, value: &str) {
    let run = attributes(sim, Some(value));
    assert!(!run.success, "CUDA_VISIBLE_DEVICES={value:?} left devices: {}", run.json);
    assert_eq!(u64_at(&run.json, "cuda_error"), NO_DEVICE, "{value:?}: {}", run.json);
}

#[test]
fn index_lists_uuids_and_truncation() {
    let sim = Sim::new("visible-index").with("SIMGPU_DEVICES", "h100,small,a100");
    let c = config_of(&sim);
    let uuid = |i: usize| c.devices[i].uuid_string();
    assert_eq!(visible(&sim, None), [uuid(0), uuid(1), uuid(2)], "unset: every device");
    assert_eq!(visible(&sim, Some("2,0")), [uuid(2), uuid(0)], "in the list's order");
    assert_eq!(visible(&sim, Some(" 1 ")), [uuid(1)]);
    assert_eq!(visible(&sim, Some("0,2,-1,1")), [uuid(0), uuid(2)], "the first invalid entry ends the list");
    assert_eq!(visible(&sim, Some("1,7,0")), [uuid(1)], "an index past the last device is invalid");
    assert_eq!(visible(&sim, Some("2,2")), [uuid(2)], "a repeated device ends the list");
    // Full UUIDs and unique prefixes (with `GPU-`), any case.
    assert_eq!(visible(&sim, Some(&format!("{},{}", uuid(2), uuid(1)))), [uuid(2), uuid(1)]);
    let prefix = &uuid(2)[..15];
    assert_eq!(visible(&sim, Some(&format!("{},0", prefix.to_uppercase()))), [uuid(2), uuid(0)]);
    // Every device's UUID starts alike: a short prefix names no single device.
    assert_eq!(visible(&sim, Some(&format!("1,{}", &uuid(0)[..8]))), [uuid(1)]);
    // The reported figures are the listed device's, not ordinal 0's.
    let run = attributes(&sim, Some("2"));
    assert_eq!(at(&run.json, "devices.0.name"), c.devices[2].profile.name);
    assert_eq!(u64_at(&run.json, "devices.0.total_memory"), c.devices[2].total_memory);
    assert_eq!(u64_at(&run.json, "devices.0.ordinal_by_pci_bus_id"), 0, "the PCI bus id maps to the CUDA ordinal");
    for empty in ["", "-1", "3", "x", "GPU-ffff", "MIG-ffff"] {
        assert_no_device(&sim, empty);
    }
    let _ = std::fs::remove_file(format!("{}.mig", c.state_path));
}

/// The loaded simulated NVML (child role only).
struct Nvml(Library);

impl Nvml {
    fn load() -> Nvml {
        let path = common::build_dir().join("libsimnvml.so");
        // SAFETY: the simulated NVML; its initializers only set up Rust statics.
        let nvml = Nvml(unsafe { Library::new(&path) }.unwrap_or_else(|e| panic!("{}: {e}", path.display())));
        let init: unsafe extern "C" fn() -> NvmlReturn = nvml.f("nvmlInit_v2");
        // SAFETY: nvmlInit_v2 takes nothing.
        assert_eq!(unsafe { init() }, NVML_SUCCESS);
        nvml
    }

    /// Symbol `name`, typed by the caller as its nvml.h signature.
    fn f<T: Copy>(&self, name: &str) -> T {
        // SAFETY: every caller names the type of the symbol's nvml.h prototype.
        *unsafe { self.0.get::<T>(name.as_bytes()) }.unwrap_or_else(|e| panic!("{name}: {e}"))
    }
}

/// The child: on device 0, `create` makes a `1g.10gb` GPU instance with one compute instance and prints
/// its MIG device's UUID; `used` prints the memory NVML reports used on that MIG device; `destroy` removes
/// every instance.
fn nvml_child(role: &str) {
    let n = Nvml::load();
    let by_index: unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn = n.f("nvmlDeviceGetHandleByIndex_v2");
    let create: unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlGpuInstance) -> NvmlReturn =
        n.f("nvmlDeviceCreateGpuInstance");
    let ci_create: unsafe extern "C" fn(NvmlGpuInstance, c_uint, *mut NvmlComputeInstance) -> NvmlReturn =
        n.f("nvmlGpuInstanceCreateComputeInstance");
    let gi_list: unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlGpuInstance, *mut c_uint) -> NvmlReturn =
        n.f("nvmlDeviceGetGpuInstances");
    let ci_list: unsafe extern "C" fn(NvmlGpuInstance, c_uint, *mut NvmlComputeInstance, *mut c_uint) -> NvmlReturn =
        n.f("nvmlGpuInstanceGetComputeInstances");
    let gi_destroy: unsafe extern "C" fn(NvmlGpuInstance) -> NvmlReturn = n.f("nvmlGpuInstanceDestroy");
    let ci_destroy: unsafe extern "C" fn(NvmlComputeInstance) -> NvmlReturn = n.f("nvmlComputeInstanceDestroy");
    let mig_device: unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlDevice) -> NvmlReturn =
        n.f("nvmlDeviceGetMigDeviceHandleByIndex");
    let uuid: unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> NvmlReturn = n.f("nvmlDeviceGetUUID");
    let memory: unsafe extern "C" fn(NvmlDevice, *mut NvmlMemory) -> NvmlReturn = n.f("nvmlDeviceGetMemoryInfo");
    // SAFETY: NVML handles from NVML and valid out-pointers of the types nvml.h gives.
    unsafe {
        let mut dev = null_mut();
        assert_eq!(by_index(0, &mut dev), NVML_SUCCESS);
        if role == "create" {
            let (mut gi, mut ci, mut m) = (null_mut(), null_mut(), null_mut());
            assert_eq!(create(dev, P1G, &mut gi), NVML_SUCCESS);
            assert_eq!(ci_create(gi, CI_1, &mut ci), NVML_SUCCESS);
            assert_eq!(mig_device(dev, 0, &mut m), NVML_SUCCESS);
            let mut buf = [0 as c_char; 96];
            assert_eq!(uuid(m, buf.as_mut_ptr(), 96), NVML_SUCCESS);
            println!("UUID={}", CStr::from_ptr(buf.as_ptr()).to_string_lossy());
        } else if role == "used" {
            let (mut m, mut info) = (null_mut(), NvmlMemory { total: 0, free: 0, used: 0 });
            assert_eq!(mig_device(dev, 0, &mut m), NVML_SUCCESS);
            assert_eq!(memory(m, &mut info), NVML_SUCCESS);
            println!("USED={}", info.used);
        } else {
            let (mut gis, mut count) = ([null_mut(); 8], 0);
            assert_eq!(gi_list(dev, P1G, gis.as_mut_ptr(), &mut count), NVML_SUCCESS);
            for &gi in &gis[..count as usize] {
                let (mut cis, mut n_ci) = ([null_mut(); 8], 0);
                assert_eq!(ci_list(gi, CI_1, cis.as_mut_ptr(), &mut n_ci), NVML_SUCCESS);
                for &ci in &cis[..n_ci as usize] {
                    assert_eq!(ci_destroy(ci), NVML_SUCCESS);
                }
                assert_eq!(gi_destroy(gi), NVML_SUCCESS);
            }
        }
    }
}

/// Runs the NVML child `role` on `sim`'s machine; returns what it printed.
fn run_nvml(sim: &Sim, role: &str) -> String {
    let mut cmd = sim.command_for(std::env::current_exe().unwrap(), &["visible::mig_device", "--exact", "--nocapture"]);
    let out = cmd.env(ROLE, role).output().expect("run the NVML child");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "NVML child {role} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// Runs `alloc --bytes N --hold-ms 0` on `value`'s devices: whether the allocation was granted.
fn allocates(sim: &Sim, value: &str, bytes: u64) -> (bool, Value) {
    let mut cmd = sim.command(&["alloc", "--bytes", &bytes.to_string(), "--hold-ms", "0"]);
    let run = common::finished(cmd.env("CUDA_VISIBLE_DEVICES", value).output().expect("spawn simgpu-probe"));
    assert!(run.success, "alloc {bytes} on {value}: {}\n{}", run.json, run.stderr);
    (at(&run.json, "allocated") == true, run.json)
}

#[test]
fn mig_device() {
    if let Ok(role) = std::env::var(ROLE) {
        return nvml_child(&role);
    }
    let sim = Sim::new("visible-mig").with("SIMGPU_DEVICES", "h100,small").with("SIMGPU_MIG", "0");
    let c = config_of(&sim);
    let h100 = profile::find("h100").unwrap();
    let one = h100.mig_profiles.iter().find(|m| m.id == P1G).unwrap();
    let limit = one.memory_mib * MIB;
    let ctx = c.devices[0].context_memory;

    // A GPU in MIG mode cannot run CUDA work itself: listing it is an invalid entry.
    assert_no_device(&sim, "0");
    assert_eq!(visible(&sim, Some("1,0")), [c.devices[1].uuid_string()]);

    let out = run_nvml(&sim, "create");
    let mig_uuid = out.lines().find_map(|l| l.strip_prefix("UUID=")).expect("the child prints the UUID").to_string();
    assert!(mig_uuid.starts_with("MIG-"), "{mig_uuid}");

    // One device: the parent's model, the instance's memory and SMs, the MIG UUID (the probe prints every
    // UUID behind `GPU-`).
    let run = attributes(&sim, Some(&mig_uuid));
    assert!(run.success, "{}\n{}", run.json, run.stderr);
    assert_eq!(u64_at(&run.json, "device_count"), 1);
    let dev = at(&run.json, "devices.0");
    assert_eq!(at(dev, "name"), h100.name);
    assert_eq!(at(dev, "compute_capability"), &serde_json::json!([9, 0]));
    assert_eq!(u64_at(dev, "total_memory"), limit);
    assert_eq!(u64_at(dev, "mem_info_total"), limit);
    assert_eq!(u64_at(dev, "mem_info_free"), limit - ctx);
    let whole = mig::ci_profiles(one).into_iter().find(|p| p.slices == one.slices).unwrap();
    assert_eq!(u64_at(dev, "sm_count"), mig::ci_sm_count(h100, one, whole) as u64);
    assert_eq!(u64_at(dev, "sm_count"), one.sm_count as u64);
    assert_eq!(at(dev, "uuid").as_str().unwrap()[4..], mig_uuid[4..]);

    // Beside other entries, in order; a unique prefix works; a second MIG entry ends the list.
    let both = visible(&sim, Some(&format!("1,{}", &mig_uuid[..16])));
    assert_eq!(both.len(), 2);
    assert_eq!(both[0], c.devices[1].uuid_string());
    assert_eq!(visible(&sim, Some(&format!("{mig_uuid},{mig_uuid},1"))).len(), 1);

    // Allocations are bounded by the instance's memory, not the GPU's 80 GiB.
    assert!(!allocates(&sim, &mig_uuid, limit - ctx + 1).0, "more than the instance has");
    assert!(allocates(&sim, &mig_uuid, limit - ctx).0, "exactly what the instance has free");

    // A second process in the same instance shares that limit.
    let mut cmd = sim.command(&["alloc", "--bytes", &(4 * GIB).to_string()]);
    cmd.env("CUDA_VISIBLE_DEVICES", &mig_uuid).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    let mut holder = common::Guarded::spawn(&mut cmd).expect("spawn the holder");
    assert_eq!(first_line(&mut holder)["allocated"], true);
    let left = limit - ctx - 4 * GIB - ctx;
    let (granted, report) = allocates(&sim, &mig_uuid, left + 1);
    assert!(!granted, "the holder's 4 GiB count against the instance: {report}");
    assert_eq!(u64_at(&report, "free_before"), left, "{report}");
    assert!(allocates(&sim, &mig_uuid, left).0);
    // NVML's MIG device reports what the holder holds in it (its context and allocation).
    let used = run_nvml(&sim, "used");
    assert_eq!(used.lines().find_map(|l| l.strip_prefix("USED=")), Some((4 * GIB + ctx).to_string().as_str()));
    // The parent device counts the holder's memory too.
    assert!(sim.driver_state().device(0).used_memory.load(std::sync::atomic::Ordering::Acquire) >= 4 * GIB + ctx);
    // A killed holder's share is reclaimed.
    holder.kill().expect("SIGKILL the holder");
    holder.wait().expect("reap the holder");
    assert!(allocates(&sim, &mig_uuid, limit - ctx).0, "the dead holder's memory is back");

    // A removed instance's UUID names no device.
    run_nvml(&sim, "destroy");
    assert_no_device(&sim, &mig_uuid);
    assert_eq!(visible(&sim, Some(&format!("1,{mig_uuid}"))), [c.devices[1].uuid_string()]);
    let _ = std::fs::remove_file(format!("{}.mig", c.state_path));
}
