//! `libsimnvml.so`'s core count and MIG queries, loaded at run time as programs load NVML, on a machine of
//! one device of each profile. One test in its own binary: NVML reads `SIMGPU_*` once per process.

use libloading::Library;
use std::ffi::{CStr, c_char, c_uint};
use std::path::PathBuf;
use tessera_ffi::nvml::{
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED, NVML_SUCCESS,
    NvmlDevice, NvmlReturn, struct_version,
};

/// `nvmlGpuInstanceProfileInfo_t`.
#[repr(C)]
#[derive(Default)]
struct InfoV1 {
    id: u32,
    p2p: u32,
    slices: u32,
    instances: u32,
    sms: u32,
    engines: [u32; 5],
    memory_mb: u64,
}

/// `nvmlGpuInstanceProfileInfo_v2_t`.
#[repr(C)]
struct InfoV2 {
    version: u32,
    id: u32,
    p2p: u32,
    slices: u32,
    instances: u32,
    sms: u32,
    engines: [u32; 5],
    memory_mb: u64,
    name: [c_char; 96],
}

/// `nvmlGpuInstanceProfileInfo_v3_t`.
#[repr(C)]
struct InfoV3 {
    version: u32,
    id: u32,
    slices: u32,
    instances: u32,
    sms: u32,
    engines: [u32; 5],
    memory_mb: u64,
    name: [c_char; 96],
    capabilities: u32,
}

type Uint = unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> NvmlReturn;
type Profile<T> = unsafe extern "C" fn(NvmlDevice, c_uint, *mut T) -> NvmlReturn;

/// `target/<profile>/libsimnvml.so`: test binaries live in `target/<profile>/deps`.
fn library_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().and_then(|deps| deps.parent()).unwrap().join("libsimnvml.so");
    assert!(path.is_file(), "{} is missing; run `cargo build --release -p simnvml` first", path.display());
    path
}

fn name(raw: &[c_char; 96]) -> String {
    // SAFETY: NVML NUL-terminates the name within the array.
    unsafe { CStr::from_ptr(raw.as_ptr()) }.to_string_lossy().into_owned()
}

#[test]
fn core_counts_and_mig_profiles() {
    let state = std::env::temp_dir().join(format!("simnvml-metadata-{}.state", std::process::id()));
    // SAFETY: the only test of this binary, run before anything reads the environment.
    unsafe {
        std::env::set_var("SIMGPU_DEVICES", "h100,small,a100");
        std::env::set_var("SIMGPU_STATE", &state);
    }
    // SAFETY: the simulated NVML; its initializers only set up Rust statics.
    let lib = unsafe { Library::new(library_path()) }.unwrap();
    // SAFETY: each symbol is read with its signature in nvml.h.
    unsafe {
        let init = *lib.get::<unsafe extern "C" fn() -> NvmlReturn>(b"nvmlInit_v2").unwrap();
        let by_index = *lib
            .get::<unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn>(b"nvmlDeviceGetHandleByIndex_v2")
            .unwrap();
        let cores = *lib.get::<Uint>(b"nvmlDeviceGetNumGpuCores").unwrap();
        let max_mig = *lib.get::<Uint>(b"nvmlDeviceGetMaxMigDeviceCount").unwrap();
        let v1 = *lib.get::<Profile<InfoV1>>(b"nvmlDeviceGetGpuInstanceProfileInfo").unwrap();
        let vx = *lib.get::<Profile<InfoV2>>(b"nvmlDeviceGetGpuInstanceProfileInfoV").unwrap();
        assert_eq!(init(), NVML_SUCCESS);
        let handle = |i| {
            let mut h = std::ptr::null_mut();
            assert_eq!(by_index(i, &mut h), NVML_SUCCESS);
            h
        };
        let (h100, small, a100) = (handle(0), handle(1), handle(2));

        // CUDA cores: SMs × cores per SM (128 on Hopper and cc 8.6, 64 on cc 8.0).
        let mut n = 0;
        for (h, want) in [(h100, 132 * 128), (small, 20 * 128), (a100, 108 * 64)] {
            assert_eq!(cores(h, &mut n), NVML_SUCCESS);
            assert_eq!(n, want);
            // MIG is off everywhere, so no MIG device can exist.
            n = 9;
            assert_eq!(max_mig(h, &mut n), NVML_SUCCESS);
            assert_eq!(n, 0);
        }
        assert_eq!(cores(h100, std::ptr::null_mut()), NVML_ERROR_INVALID_ARGUMENT);

        // The unversioned query: NVML_GPU_INSTANCE_PROFILE_1_SLICE (0) and _7_SLICE (4).
        let mut info = InfoV1::default();
        assert_eq!(v1(h100, 0, &mut info), NVML_SUCCESS);
        assert_eq!((info.id, info.slices, info.instances, info.sms, info.memory_mb), (19, 1, 7, 16, 9984));
        assert_eq!(v1(a100, 4, &mut info), NVML_SUCCESS);
        assert_eq!((info.id, info.slices, info.instances, info.sms, info.memory_mb), (0, 7, 1, 98, 40320));
        assert_eq!(v1(small, 0, &mut info), NVML_ERROR_NOT_SUPPORTED, "no MIG on cc 8.6");
        assert_eq!(v1(h100, 5, &mut info), NVML_ERROR_NOT_SUPPORTED, "no 8-slice profile on the H100");
        assert_eq!(v1(h100, 0, std::ptr::null_mut()), NVML_ERROR_INVALID_ARGUMENT);

        // The versioned query, v2 and v3 layouts, with the profile's name.
        let mut two: InfoV2 = std::mem::zeroed();
        two.version = struct_version(size_of::<InfoV2>(), 2);
        assert_eq!(vx(a100, 0, &mut two), NVML_SUCCESS);
        assert_eq!((two.id, two.instances, two.sms, two.p2p), (19, 7, 14, 0));
        assert_eq!(name(&two.name), "MIG 1g.5gb");
        let mut three: InfoV3 = std::mem::zeroed();
        three.version = struct_version(size_of::<InfoV3>(), 3);
        assert_eq!(vx(h100, 9, (&mut three as *mut InfoV3).cast()), NVML_SUCCESS);
        assert_eq!((three.id, three.slices, three.instances, three.sms), (15, 1, 4, 26));
        assert_eq!(name(&three.name), "MIG 1g.20gb");
        assert_eq!(three.capabilities, 0);
        let mut wrong: InfoV2 = std::mem::zeroed();
        wrong.version = struct_version(size_of::<InfoV2>(), 1);
        assert_eq!(vx(h100, 0, &mut wrong), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    let _ = std::fs::remove_file(&state);
    let _ = std::fs::remove_file(state.with_extension("state.mig"));
}
