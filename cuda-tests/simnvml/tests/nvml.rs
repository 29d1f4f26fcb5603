//! End-to-end tests of `libsimnvml.so`, loaded at run time the way programs load `libnvidia-ml.so.1`.
//!
//! NVML reads its configuration from the environment, and the library keeps process-wide state, so each
//! scenario runs in a child copy of this test binary (selected by `SIMNVML_SCENARIO`) with its own
//! `SIMGPU_*` variables and state file. Build the library first: `cargo build --release -p simnvml`.

use libloading::Library;
use simgpu::{Config, SharedState};
use std::ffi::{CStr, c_char, c_int, c_uint};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::ptr::{null, null_mut};
use tessera_ffi::nvml::*;

const SCENARIO: &str = "SIMNVML_SCENARIO";
const MIB: u64 = 1 << 20;
/// What the memory-holding helper prints once it holds its memory.
const READY: &str = "simnvml-holder-ready";

/// Runs `body` when this process is the child started for scenario `name`; otherwise starts that child with
/// `env` (plus a fresh `SIMGPU_STATE`), asserts it passed and returns its output.
fn scenario(name: &str, env: &[(&str, &str)], body: impl FnOnce()) -> Option<Output> {
    if std::env::var(SCENARIO).as_deref() == Ok(name) {
        body();
        return None;
    }
    let dir = std::env::temp_dir().join(format!("simnvml-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = child_command(name, env, &dir).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        output.status.success(),
        "scenario {name} failed\n--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Some(output)
}

/// A command running test `name` of this binary as a scenario child.
fn child_command(name: &str, env: &[(&str, &str)], dir: &std::path::Path) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"]);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SIMGPU_")) {
        cmd.env_remove(k);
    }
    cmd.env(SCENARIO, name).env("SIMGPU_STATE", dir.join("state")).envs(env.iter().copied());
    cmd
}

/// `target/<profile>/libsimnvml.so`: test binaries live in `target/<profile>/deps`.
fn library_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().and_then(|deps| deps.parent()).unwrap().join("libsimnvml.so");
    assert!(path.is_file(), "{} is missing; run `cargo build --release -p simnvml` first", path.display());
    path
}

type Device = NvmlDevice;

/// The NVML entry points the tests call, resolved from the loaded library.
struct Nvml {
    _lib: Library,
    init: unsafe extern "C" fn() -> NvmlReturn,
    init_v1: unsafe extern "C" fn() -> NvmlReturn,
    init_with_flags: unsafe extern "C" fn(c_uint) -> NvmlReturn,
    shutdown: unsafe extern "C" fn() -> NvmlReturn,
    error_string: unsafe extern "C" fn(NvmlReturn) -> *const c_char,
    driver_version: unsafe extern "C" fn(*mut c_char, c_uint) -> NvmlReturn,
    nvml_version: unsafe extern "C" fn(*mut c_char, c_uint) -> NvmlReturn,
    cuda_version: unsafe extern "C" fn(*mut c_int) -> NvmlReturn,
    cuda_version_v2: unsafe extern "C" fn(*mut c_int) -> NvmlReturn,
    count: unsafe extern "C" fn(*mut c_uint) -> NvmlReturn,
    count_v1: unsafe extern "C" fn(*mut c_uint) -> NvmlReturn,
    by_index: unsafe extern "C" fn(c_uint, *mut Device) -> NvmlReturn,
    by_index_v1: unsafe extern "C" fn(c_uint, *mut Device) -> NvmlReturn,
    by_uuid: unsafe extern "C" fn(*const c_char, *mut Device) -> NvmlReturn,
    by_pci: unsafe extern "C" fn(*const c_char, *mut Device) -> NvmlReturn,
    by_pci_v1: unsafe extern "C" fn(*const c_char, *mut Device) -> NvmlReturn,
    name: unsafe extern "C" fn(Device, *mut c_char, c_uint) -> NvmlReturn,
    uuid: unsafe extern "C" fn(Device, *mut c_char, c_uint) -> NvmlReturn,
    index: unsafe extern "C" fn(Device, *mut c_uint) -> NvmlReturn,
    pci_v3: unsafe extern "C" fn(Device, *mut NvmlPciInfo) -> NvmlReturn,
    pci_v1: unsafe extern "C" fn(Device, *mut NvmlPciInfo) -> NvmlReturn,
    memory: unsafe extern "C" fn(Device, *mut NvmlMemory) -> NvmlReturn,
    memory_v2: unsafe extern "C" fn(Device, *mut NvmlMemoryV2) -> NvmlReturn,
    utilization: unsafe extern "C" fn(Device, *mut NvmlUtilization) -> NvmlReturn,
    procs_v1: unsafe extern "C" fn(Device, *mut c_uint, *mut NvmlProcessInfoV1) -> NvmlReturn,
    procs_v2: unsafe extern "C" fn(Device, *mut c_uint, *mut NvmlProcessInfoV2) -> NvmlReturn,
    procs_v3: unsafe extern "C" fn(Device, *mut c_uint, *mut NvmlProcessInfo) -> NvmlReturn,
    graphics_procs: unsafe extern "C" fn(Device, *mut c_uint, *mut NvmlProcessInfo) -> NvmlReturn,
    proc_util: unsafe extern "C" fn(Device, *mut NvmlProcessUtilizationSample, *mut c_uint, u64) -> NvmlReturn,
    temperature: unsafe extern "C" fn(Device, u32, *mut c_uint) -> NvmlReturn,
    power: unsafe extern "C" fn(Device, *mut c_uint) -> NvmlReturn,
    clock: unsafe extern "C" fn(Device, u32, *mut c_uint) -> NvmlReturn,
    max_clock: unsafe extern "C" fn(Device, u32, *mut c_uint) -> NvmlReturn,
    mig_mode: unsafe extern "C" fn(Device, *mut c_uint, *mut c_uint) -> NvmlReturn,
    compute_capability: unsafe extern "C" fn(Device, *mut c_int, *mut c_int) -> NvmlReturn,
    fan_speed: unsafe extern "C" fn(Device, *mut c_uint) -> NvmlReturn,
}

impl Nvml {
    fn load() -> Nvml {
        // SAFETY: loading our own library runs no initializers with preconditions.
        let lib = unsafe { Library::new(library_path()) }.unwrap();
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: each field's type is the C signature the symbol of that name has in nvml.h.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.expect($name)
            };
        }
        Nvml {
            init: sym!("nvmlInit_v2"),
            init_v1: sym!("nvmlInit"),
            init_with_flags: sym!("nvmlInitWithFlags"),
            shutdown: sym!("nvmlShutdown"),
            error_string: sym!("nvmlErrorString"),
            driver_version: sym!("nvmlSystemGetDriverVersion"),
            nvml_version: sym!("nvmlSystemGetNVMLVersion"),
            cuda_version: sym!("nvmlSystemGetCudaDriverVersion"),
            cuda_version_v2: sym!("nvmlSystemGetCudaDriverVersion_v2"),
            count: sym!("nvmlDeviceGetCount_v2"),
            count_v1: sym!("nvmlDeviceGetCount"),
            by_index: sym!("nvmlDeviceGetHandleByIndex_v2"),
            by_index_v1: sym!("nvmlDeviceGetHandleByIndex"),
            by_uuid: sym!("nvmlDeviceGetHandleByUUID"),
            by_pci: sym!("nvmlDeviceGetHandleByPciBusId_v2"),
            by_pci_v1: sym!("nvmlDeviceGetHandleByPciBusId"),
            name: sym!("nvmlDeviceGetName"),
            uuid: sym!("nvmlDeviceGetUUID"),
            index: sym!("nvmlDeviceGetIndex"),
            pci_v3: sym!("nvmlDeviceGetPciInfo_v3"),
            pci_v1: sym!("nvmlDeviceGetPciInfo"),
            memory: sym!("nvmlDeviceGetMemoryInfo"),
            memory_v2: sym!("nvmlDeviceGetMemoryInfo_v2"),
            utilization: sym!("nvmlDeviceGetUtilizationRates"),
            procs_v1: sym!("nvmlDeviceGetComputeRunningProcesses"),
            procs_v2: sym!("nvmlDeviceGetComputeRunningProcesses_v2"),
            procs_v3: sym!("nvmlDeviceGetComputeRunningProcesses_v3"),
            graphics_procs: sym!("nvmlDeviceGetGraphicsRunningProcesses_v3"),
            proc_util: sym!("nvmlDeviceGetProcessUtilization"),
            temperature: sym!("nvmlDeviceGetTemperature"),
            power: sym!("nvmlDeviceGetPowerUsage"),
            clock: sym!("nvmlDeviceGetClockInfo"),
            max_clock: sym!("nvmlDeviceGetMaxClockInfo"),
            mig_mode: sym!("nvmlDeviceGetMigMode"),
            compute_capability: sym!("nvmlDeviceGetCudaComputeCapability"),
            fan_speed: sym!("nvmlDeviceGetFanSpeed"),
            _lib: lib,
        }
    }

    /// Loads the library and initializes it, asserting success.
    fn ready() -> Nvml {
        let nvml = Nvml::load();
        // SAFETY: no arguments.
        assert_eq!(unsafe { (nvml.init)() }, NVML_SUCCESS);
        nvml
    }

    fn handle(&self, index: u32) -> Device {
        let mut h = null_mut();
        // SAFETY: `h` is a writable handle.
        assert_eq!(unsafe { (self.by_index)(index, &mut h) }, NVML_SUCCESS);
        h
    }

    /// Calls a string query with a large buffer and returns the text.
    fn text(&self, f: impl FnOnce(*mut c_char, c_uint) -> NvmlReturn) -> String {
        let mut buf = [0 as c_char; 128];
        assert_eq!(f(buf.as_mut_ptr(), buf.len() as c_uint), NVML_SUCCESS);
        // SAFETY: on success the buffer holds a NUL-terminated string.
        unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap().to_string()
    }

    fn memory(&self, dev: Device) -> NvmlMemory {
        let mut m = NvmlMemory::default();
        // SAFETY: `m` is a writable nvmlMemory_t.
        assert_eq!(unsafe { (self.memory)(dev, &mut m) }, NVML_SUCCESS);
        m
    }

    /// The compute processes on `dev`, through the v3 entry point with a roomy buffer.
    fn processes(&self, dev: Device) -> Vec<NvmlProcessInfo> {
        let mut buf = [NvmlProcessInfo::default(); 16];
        let mut n = buf.len() as c_uint;
        // SAFETY: `buf` holds `n` writable entries.
        assert_eq!(unsafe { (self.procs_v3)(dev, &mut n, buf.as_mut_ptr()) }, NVML_SUCCESS);
        buf[..n as usize].to_vec()
    }
}

fn cstring(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s).unwrap()
}

#[test]
fn initialization_is_reference_counted() {
    scenario("initialization_is_reference_counted", &[], || {
        let nvml = Nvml::load();
        let mut n = 0;
        // SAFETY: (whole block) every pointer passed is a live local of the type the entry point writes.
        unsafe {
            assert_eq!((nvml.count)(&mut n), NVML_ERROR_UNINITIALIZED);
            assert_eq!((nvml.shutdown)(), NVML_ERROR_UNINITIALIZED);
            assert_eq!(CStr::from_ptr((nvml.error_string)(NVML_SUCCESS)), c"Success");
            assert_eq!(CStr::from_ptr((nvml.error_string)(NVML_ERROR_UNINITIALIZED)), c"Uninitialized");
            assert_eq!(CStr::from_ptr((nvml.error_string)(12345)), c"Unknown Error");

            assert_eq!((nvml.init)(), NVML_SUCCESS);
            assert_eq!((nvml.init_v1)(), NVML_SUCCESS);
            assert_eq!((nvml.init_with_flags)(NVML_INIT_FLAG_NO_GPUS), NVML_SUCCESS);
            let h = nvml.handle(0);
            for _ in 0..2 {
                assert_eq!((nvml.shutdown)(), NVML_SUCCESS);
                assert_eq!((nvml.count)(&mut n), NVML_SUCCESS);
                assert_eq!(n, 1);
            }
            assert_eq!((nvml.shutdown)(), NVML_SUCCESS);
            assert_eq!((nvml.count)(&mut n), NVML_ERROR_UNINITIALIZED);
            let mut idx = 0;
            assert_eq!((nvml.index)(h, &mut idx), NVML_ERROR_UNINITIALIZED);
            assert_eq!((nvml.shutdown)(), NVML_ERROR_UNINITIALIZED);

            // Handles survive a shutdown and a new initialization, as real NVML's do.
            assert_eq!((nvml.init)(), NVML_SUCCESS);
            assert_eq!((nvml.index)(h, &mut idx), NVML_SUCCESS);
            assert_eq!((nvml.shutdown)(), NVML_SUCCESS);
        }
    });
}

#[test]
fn identity_lookups_and_versions() {
    let env = [("SIMGPU_DEVICES", "h100,small"), ("SIMGPU_DRIVER_VERSION", "12080")];
    scenario("identity_lookups_and_versions", &env, || {
        let config = Config::from_env().unwrap();
        let nvml = Nvml::ready();
        let mut n = 0;
        // SAFETY: (whole block) every pointer passed is a live local of the type the entry point writes, and
        // every string buffer is as long as the length passed with it.
        unsafe {
            assert_eq!((nvml.count)(&mut n), NVML_SUCCESS);
            assert_eq!(n, 2);
            assert_eq!((nvml.count_v1)(&mut n), NVML_SUCCESS);
            assert_eq!(n, 2);
            assert_eq!(nvml.text(|b, l| (nvml.driver_version)(b, l)), "570.124.06");
            assert_eq!(nvml.text(|b, l| (nvml.nvml_version)(b, l)), "12.570.124.06");
            let mut v = 0;
            assert_eq!((nvml.cuda_version)(&mut v), NVML_SUCCESS);
            assert_eq!(v, 12080);
            assert_eq!((nvml.cuda_version_v2)(&mut v), NVML_SUCCESS);
            assert_eq!(v, 12080);

            for (i, dev) in config.devices.iter().enumerate() {
                let h = nvml.handle(i as u32);
                let mut h1 = null_mut();
                assert_eq!((nvml.by_index_v1)(i as u32, &mut h1), NVML_SUCCESS);
                assert_eq!(h1, h);
                let mut idx = 99;
                assert_eq!((nvml.index)(h, &mut idx), NVML_SUCCESS);
                assert_eq!(idx, i as u32);
                assert_eq!(nvml.text(|b, l| (nvml.name)(h, b, l)), dev.profile.name);
                let uuid = nvml.text(|b, l| (nvml.uuid)(h, b, l));
                assert_eq!(uuid, dev.uuid_string());

                for text in [uuid.clone(), uuid.to_uppercase().replace("GPU-", "gpu-")] {
                    let mut found = null_mut();
                    assert_eq!((nvml.by_uuid)(cstring(&text).as_ptr(), &mut found), NVML_SUCCESS, "{text}");
                    assert_eq!(found, h);
                }

                let mut pci: NvmlPciInfo = std::mem::zeroed();
                assert_eq!((nvml.pci_v3)(h, &mut pci), NVML_SUCCESS);
                let bus_id = CStr::from_bytes_until_nul(&pci.bus_id).unwrap().to_str().unwrap();
                assert_eq!(bus_id, dev.pci_bus_id());
                assert_eq!(pci.bus, dev.pci_bus());
                assert_eq!(pci.pci_device_id & 0xffff, 0x10de);
                let legacy = CStr::from_bytes_until_nul(&pci.bus_id_legacy).unwrap().to_str().unwrap();
                assert_eq!(legacy, format!("0000:{:02X}:00.0", dev.pci_bus()));

                // The v1 layout is written only up to busId, which older structs lack.
                let mut old: NvmlPciInfo = std::mem::zeroed();
                old.bus_id = [0xAA; 32];
                assert_eq!((nvml.pci_v1)(h, &mut old), NVML_SUCCESS);
                assert_eq!(old.bus, pci.bus);
                assert_eq!(old.bus_id, [0xAA; 32]);

                let short = format!("{:02x}:00.0", dev.pci_bus());
                for text in [bus_id.to_string(), bus_id.to_lowercase(), legacy.to_string(), short] {
                    let mut found = null_mut();
                    assert_eq!((nvml.by_pci)(cstring(&text).as_ptr(), &mut found), NVML_SUCCESS, "{text}");
                    assert_eq!(found, h);
                    let mut found = null_mut();
                    assert_eq!((nvml.by_pci_v1)(cstring(&text).as_ptr(), &mut found), NVML_SUCCESS, "{text}");
                    assert_eq!(found, h);
                }

                let (mut major, mut minor) = (0, 0);
                assert_eq!((nvml.compute_capability)(h, &mut major, &mut minor), NVML_SUCCESS);
                assert_eq!((major as u32, minor as u32), dev.profile.compute_capability);

                let (mut current, mut pending) = (9, 9);
                let mig = (nvml.mig_mode)(h, &mut current, &mut pending);
                if dev.profile.mig_capable {
                    assert_eq!(mig, NVML_SUCCESS);
                    assert_eq!((current, pending), (NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_DISABLE));
                } else {
                    assert_eq!(mig, NVML_ERROR_NOT_SUPPORTED);
                }

                let mut mhz = 0;
                assert_eq!((nvml.max_clock)(h, NVML_CLOCK_SM, &mut mhz), NVML_SUCCESS);
                assert_eq!(mhz, dev.profile.clock_khz / 1000);
                assert_eq!((nvml.max_clock)(h, NVML_CLOCK_MEM, &mut mhz), NVML_SUCCESS);
                assert_eq!(mhz, dev.profile.memory_clock_khz / 1000);
                assert_eq!((nvml.clock)(h, NVML_CLOCK_MEM, &mut mhz), NVML_SUCCESS);
                assert_eq!(mhz, dev.profile.memory_clock_khz / 1000);
                let mut mw = 0;
                assert_eq!((nvml.power)(h, &mut mw), NVML_SUCCESS);
                assert!(mw > 0 && mw <= dev.profile.power_mw, "{mw}");
                let mut celsius = 0;
                assert_eq!((nvml.temperature)(h, NVML_TEMPERATURE_GPU, &mut celsius), NVML_SUCCESS);
                assert!((20..=90).contains(&celsius), "{celsius}");
                let mut rpm = 0;
                assert_eq!((nvml.fan_speed)(h, &mut rpm), NVML_ERROR_NOT_SUPPORTED);
            }

            // Misses and malformed lookups.
            let mut h = null_mut();
            assert_eq!((nvml.by_index)(2, &mut h), NVML_ERROR_INVALID_ARGUMENT);
            let missing = cstring("GPU-00000000-0000-0000-0000-000000000000");
            assert_eq!((nvml.by_uuid)(missing.as_ptr(), &mut h), NVML_ERROR_NOT_FOUND);
            assert_eq!((nvml.by_uuid)(cstring("not a uuid").as_ptr(), &mut h), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.by_pci)(cstring("00000000:7F:00.0").as_ptr(), &mut h), NVML_ERROR_NOT_FOUND);
            assert_eq!((nvml.by_pci)(cstring("pci please").as_ptr(), &mut h), NVML_ERROR_INVALID_ARGUMENT);

            // A buffer one byte short of the name and its NUL.
            let h0 = nvml.handle(0);
            let name_len = config.devices[0].profile.name.len();
            let mut buf = [0 as c_char; 128];
            assert_eq!((nvml.name)(h0, buf.as_mut_ptr(), name_len as c_uint), NVML_ERROR_INSUFFICIENT_SIZE);
            assert_eq!((nvml.name)(h0, buf.as_mut_ptr(), name_len as c_uint + 1), NVML_SUCCESS);
            assert_eq!((nvml.driver_version)(buf.as_mut_ptr(), 4), NVML_ERROR_INSUFFICIENT_SIZE);
        }
    });
}

/// Helper, not a test on its own: as a scenario child it registers in the state file, takes 100 MiB on
/// device 0, says "ready" on stdout and exits without unregistering once its stdin closes (as a crashed
/// program would).
#[test]
fn helper_holds_memory_until_stdin_closes() {
    if std::env::var(SCENARIO).as_deref() != Ok("helper_holds_memory_until_stdin_closes") {
        return;
    }
    let state = SharedState::open(&Config::from_env().unwrap(), true).unwrap();
    assert!(state.reserve(0, 100 * MIB));
    println!("{READY}");
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    std::process::exit(0);
}

/// The running memory-holding helper; its stdout stays open so it can never hit a closed pipe.
struct Holder {
    child: Child,
    _stdout: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

/// Starts the memory-holding helper with this process's environment and waits until it holds its memory.
fn start_holder() -> Holder {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["helper_holds_memory_until_stdin_closes", "--exact", "--nocapture", "--test-threads=1"])
        .env(SCENARIO, "helper_holds_memory_until_stdin_closes")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.unwrap().contains(READY)), "holder did not start");
    Holder { child, _stdout: lines }
}

#[test]
fn memory_and_running_processes_follow_the_state_file() {
    scenario("memory_and_running_processes_follow_the_state_file", &[("SIMGPU_DEVICES", "small")], || {
        let config = Config::from_env().unwrap();
        let state = SharedState::open(&config, true).unwrap();
        let nvml = Nvml::ready();
        let h = nvml.handle(0);
        let total = 4u64 << 30;
        let me = std::process::id();

        let m = nvml.memory(h);
        assert_eq!((m.total, m.used, m.free), (total, 0, total));
        assert!(nvml.processes(h).is_empty());

        assert!(state.reserve(0, 256 * MIB));
        let m = nvml.memory(h);
        assert_eq!((m.total, m.used, m.free), (total, 256 * MIB, total - 256 * MIB));
        let procs = nvml.processes(h);
        assert_eq!(procs.len(), 1);
        assert_eq!((procs[0].pid, procs[0].used_gpu_memory), (me, 256 * MIB));
        assert_eq!((procs[0].gpu_instance_id, procs[0].compute_instance_id), (INSTANCE_ID_NONE, INSTANCE_ID_NONE));

        let mut holder = start_holder();
        let holder_pid = holder.child.id();
        // SAFETY: (whole block) every pointer passed is a live local of the type the entry point writes; every
        // array is at least as long as the count passed with it.
        unsafe {
            let mut v2 = NvmlMemoryV2 { version: NVML_MEMORY_V2, ..Default::default() };
            assert_eq!((nvml.memory_v2)(h, &mut v2), NVML_SUCCESS);
            assert_eq!((v2.total, v2.used, v2.free, v2.reserved), (total, 356 * MIB, total - 356 * MIB, 0));
            let mut bad = NvmlMemoryV2 { version: NVML_MEMORY_V2 + 1, ..Default::default() };
            assert_eq!((nvml.memory_v2)(h, &mut bad), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
            let mut v1_tag = NvmlMemoryV2 { version: (1 << 24) | 24, ..Default::default() };
            assert_eq!((nvml.memory_v2)(h, &mut v1_tag), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

            // Size query: count 0, no array.
            let mut n = 0;
            assert_eq!((nvml.procs_v3)(h, &mut n, null_mut()), NVML_ERROR_INSUFFICIENT_SIZE);
            assert_eq!(n, 2);
            // Too small: told the size, nothing written.
            let mut one = [NvmlProcessInfoV1::default(); 1];
            let mut n = 1;
            assert_eq!((nvml.procs_v1)(h, &mut n, one.as_mut_ptr()), NVML_ERROR_INSUFFICIENT_SIZE);
            assert_eq!(n, 2);
            assert_eq!(one[0], NvmlProcessInfoV1::default());
            // Large enough, in each layout.
            let mut v1 = [NvmlProcessInfoV1::default(); 4];
            let mut n = 4;
            assert_eq!((nvml.procs_v1)(h, &mut n, v1.as_mut_ptr()), NVML_SUCCESS);
            assert_eq!(n, 2);
            let mut got: Vec<(u32, u64)> = v1[..2].iter().map(|p| (p.pid, p.used_gpu_memory)).collect();
            got.sort();
            let mut want = vec![(me, 256 * MIB), (holder_pid, 100 * MIB)];
            want.sort();
            assert_eq!(got, want);
            let mut v2 = [NvmlProcessInfoV2::default(); 2];
            let mut n = 2;
            assert_eq!((nvml.procs_v2)(h, &mut n, v2.as_mut_ptr()), NVML_SUCCESS);
            assert_eq!(n, 2);
            assert!(v2.iter().all(|p| p.gpu_instance_id == INSTANCE_ID_NONE));
            // Graphics processes do not exist in the simulation.
            let mut n = 4;
            assert_eq!((nvml.graphics_procs)(h, &mut n, v2.as_mut_ptr()), NVML_SUCCESS);
            assert_eq!(n, 0);
        }

        // The holder dies without releasing: its memory is reclaimed before the next report.
        drop(holder.child.stdin.take());
        assert!(holder.child.wait().unwrap().success());
        assert_eq!(nvml.memory(h).used, 256 * MIB);
        let procs = nvml.processes(h);
        assert_eq!(procs.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![me]);

        state.release(0, 256 * MIB);
        assert_eq!(nvml.memory(h).used, 0);
        assert!(nvml.processes(h).is_empty());
    });
}

#[test]
fn activity_reflects_recorded_busy_time() {
    scenario("activity_reflects_recorded_busy_time", &[("SIMGPU_DEVICES", "h100")], || {
        let config = Config::from_env().unwrap();
        let state = SharedState::open(&config, true).unwrap();
        let nvml = Nvml::ready();
        let h = nvml.handle(0);
        let me = std::process::id();
        // SAFETY: (whole block) every pointer passed is a live local of the type the entry point writes; every
        // array is at least as long as the count passed with it.
        unsafe {
            let mut u = NvmlUtilization::default();
            assert_eq!((nvml.utilization)(h, &mut u), NVML_SUCCESS);
            assert_eq!((u.gpu, u.memory), (0, 0));
            let mut n = 0;
            assert_eq!((nvml.proc_util)(h, null_mut(), &mut n, 0), NVML_ERROR_NOT_FOUND);
            let (mut idle_mw, mut idle_mhz) = (0, 0);
            assert_eq!((nvml.power)(h, &mut idle_mw), NVML_SUCCESS);
            assert_eq!((nvml.clock)(h, NVML_CLOCK_SM, &mut idle_mhz), NVML_SUCCESS);

            state.record_busy(0, 300_000_000, simgpu::state::now_ns());
            assert_eq!((nvml.utilization)(h, &mut u), NVML_SUCCESS);
            assert!((20..=40).contains(&u.gpu), "{u:?}");
            assert_eq!(u.memory, u.gpu / 2);
            let (mut mw, mut mhz) = (0, 0);
            assert_eq!((nvml.power)(h, &mut mw), NVML_SUCCESS);
            assert_eq!((nvml.clock)(h, NVML_CLOCK_SM, &mut mhz), NVML_SUCCESS);
            assert!(mw > idle_mw && mhz > idle_mhz, "{mw} {idle_mw} {mhz} {idle_mhz}");

            // Size query with a NULL buffer, then the samples.
            let mut n = 0;
            assert_eq!((nvml.proc_util)(h, null_mut(), &mut n, 0), NVML_ERROR_INSUFFICIENT_SIZE);
            assert_eq!(n, 1);
            let mut samples = [NvmlProcessUtilizationSample::default(); 4];
            let mut n = 4;
            assert_eq!((nvml.proc_util)(h, samples.as_mut_ptr(), &mut n, 0), NVML_SUCCESS);
            assert_eq!(n, 1);
            let s = samples[0];
            assert_eq!(s.pid, me);
            assert!(s.sm_util > 0 && s.sm_util <= 100, "{s:?}");

            // Nothing ran since that sample.
            let mut n = 4;
            assert_eq!((nvml.proc_util)(h, samples.as_mut_ptr(), &mut n, s.time_stamp), NVML_ERROR_NOT_FOUND);
            assert_eq!(n, 0);

            // 5 ms of kernels within a window of at least 20 ms.
            std::thread::sleep(std::time::Duration::from_millis(20));
            state.record_busy(0, 5_000_000, simgpu::state::now_ns());
            let mut n = 4;
            assert_eq!((nvml.proc_util)(h, samples.as_mut_ptr(), &mut n, s.time_stamp), NVML_SUCCESS);
            assert_eq!(n, 1);
            assert!(samples[0].time_stamp > s.time_stamp);
            assert!((1..=25).contains(&samples[0].sm_util), "{:?}", samples[0]);
        }
    });
}

#[test]
fn null_pointers_and_foreign_handles_are_invalid_arguments() {
    scenario("null_pointers_and_foreign_handles_are_invalid_arguments", &[("SIMGPU_DEVICES", "small")], || {
        let nvml = Nvml::ready();
        let h = nvml.handle(0);
        let mut local = 0u8;
        let foreign: Device = (&raw mut local).cast();
        let mut n = 0;
        // SAFETY: (whole block) pointers are NULL or live locals of the written type; the library must not
        // write through the foreign handle (it is never dereferenced).
        unsafe {
            assert_eq!((nvml.count)(null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.by_index)(0, null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.by_uuid)(null(), &mut null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.by_pci)(null(), &mut null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.driver_version)(null_mut(), 80), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.cuda_version)(null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.name)(h, null_mut(), 96), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.uuid)(h, null_mut(), 96), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.index)(h, null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.pci_v3)(h, null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.memory)(h, null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.memory_v2)(h, null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.utilization)(h, null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.procs_v3)(h, null_mut(), null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.proc_util)(h, null_mut(), null_mut(), 0), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.temperature)(h, NVML_TEMPERATURE_GPU, null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.power)(h, null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.clock)(h, NVML_CLOCK_SM, null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.compute_capability)(h, null_mut(), &mut 0), NVML_ERROR_INVALID_ARGUMENT);

            // Out-of-range selectors.
            assert_eq!((nvml.temperature)(h, 7, &mut 0), NVML_ERROR_INVALID_ARGUMENT);
            assert_eq!((nvml.clock)(h, 42, &mut 0), NVML_ERROR_INVALID_ARGUMENT);

            // Handles that are not ours, or name a device beyond the configured ones.
            let beyond = (h as usize + 1) as Device;
            for bad in [foreign, null_mut(), beyond] {
                assert_eq!((nvml.index)(bad, &mut n), NVML_ERROR_INVALID_ARGUMENT);
                assert_eq!((nvml.memory)(bad, &mut NvmlMemory::default()), NVML_ERROR_INVALID_ARGUMENT);
                assert_eq!((nvml.procs_v3)(bad, &mut n, null_mut()), NVML_ERROR_INVALID_ARGUMENT);
            }
        }
    });
}

#[test]
fn malformed_configuration_fails_init_with_a_message() {
    let env = [("SIMGPU_MEMORY", "lots")];
    let output = scenario("malformed_configuration_fails_init_with_a_message", &env, || {
        let nvml = Nvml::load();
        let mut n = 0;
        // SAFETY: no arguments, or a live local.
        unsafe {
            let code = (nvml.init)();
            assert_ne!(code, NVML_SUCCESS);
            assert_eq!(code, NVML_ERROR_UNKNOWN);
            assert_eq!((nvml.count)(&mut n), NVML_ERROR_UNINITIALIZED);
            assert_eq!((nvml.shutdown)(), NVML_ERROR_UNINITIALIZED);
        }
    });
    if let Some(output) = output {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("SIMGPU_MEMORY") && stderr.contains("lots"), "stderr: {stderr}");
    }
}
