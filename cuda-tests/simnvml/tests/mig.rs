//! MIG instances through `libsimnvml.so`'s real entry points, loaded as programs load NVML: MIG mode, GPU and
//! compute instance create/destroy with NVIDIA's placement rules, every error the wrong cases get, MIG device
//! handles, UUIDs and memory, and instances seen by a second process.
//!
//! NVML reads `SIMGPU_*` once per process, so the scenario runs in a child copy of this binary with its own
//! machine (`SIMGPU_DEVICES=h100,small,a100`, `SIMGPU_MIG=0`) and state file, and starts a second child on
//! the same files. Build the library first: `cargo build --release -p simnvml`.

use libloading::Library;
use std::ffi::{CStr, CString, c_char, c_uint};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr::null_mut;
use tessera_ffi::nvml::*;

const ROLE: &str = "SIMNVML_MIG_ROLE";

/// `target/<profile>/libsimnvml.so`: test binaries live in `target/<profile>/deps`.
fn library_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().and_then(|deps| deps.parent()).unwrap().join("libsimnvml.so");
    assert!(path.is_file(), "{} is missing; run `cargo build --release -p simnvml` first", path.display());
    path
}

/// This test binary run as `role`, on the machine of `state`.
fn child(role: &str, state: &Path) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["mig_instances", "--exact", "--nocapture", "--test-threads=1"]);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SIMGPU_")) {
        cmd.env_remove(k);
    }
    cmd.env(ROLE, role).env("SIMGPU_STATE", state).env("SIMGPU_DEVICES", "h100,small,a100").env("SIMGPU_MIG", "0");
    cmd
}

/// The loaded library.
struct Nvml(Library);

impl Nvml {
    fn load() -> Nvml {
        // SAFETY: the simulated NVML; its initializers only set up Rust statics.
        let nvml = Nvml(unsafe { Library::new(library_path()) }.unwrap());
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

    fn device(&self, i: c_uint) -> NvmlDevice {
        let by_index: unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn =
            self.f("nvmlDeviceGetHandleByIndex_v2");
        let mut h = null_mut();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { by_index(i, &mut h) }, NVML_SUCCESS);
        h
    }

    fn text(&self, name: &str, dev: NvmlDevice) -> Result<String, NvmlReturn> {
        let f: unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> NvmlReturn = self.f(name);
        let mut buf = [0 as c_char; 96];
        // SAFETY: a 96-byte buffer.
        match unsafe { f(dev, buf.as_mut_ptr(), 96) } {
            // SAFETY: NVML NUL-terminated it.
            NVML_SUCCESS => Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()),
            e => Err(e),
        }
    }

    fn uint(&self, name: &str, dev: NvmlDevice) -> Result<c_uint, NvmlReturn> {
        let f: unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> NvmlReturn = self.f(name);
        let mut v = c_uint::MAX;
        // SAFETY: a valid out-pointer.
        match unsafe { f(dev, &mut v) } {
            NVML_SUCCESS => Ok(v),
            e => Err(e),
        }
    }

    /// `nvmlDeviceGetMigDeviceHandleByIndex`.
    fn mig_device(&self, dev: NvmlDevice, index: c_uint) -> Result<NvmlDevice, NvmlReturn> {
        let f: unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlDevice) -> NvmlReturn =
            self.f("nvmlDeviceGetMigDeviceHandleByIndex");
        let mut h = null_mut();
        // SAFETY: a valid out-pointer.
        match unsafe { f(dev, index, &mut h) } {
            NVML_SUCCESS => Ok(h),
            e => Err(e),
        }
    }

    fn gpu_instance_info(&self, gi: NvmlGpuInstance) -> Result<NvmlGpuInstanceInfo, NvmlReturn> {
        let f: unsafe extern "C" fn(NvmlGpuInstance, *mut NvmlGpuInstanceInfo) -> NvmlReturn =
            self.f("nvmlGpuInstanceGetInfo");
        // SAFETY: a plain C struct for which zeroes are valid.
        let mut info: NvmlGpuInstanceInfo = unsafe { std::mem::zeroed() };
        // SAFETY: a valid out-pointer.
        match unsafe { f(gi, &mut info) } {
            NVML_SUCCESS => Ok(info),
            e => Err(e),
        }
    }
}

type CreateGi = unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlGpuInstance) -> NvmlReturn;
type CreateGiAt =
    unsafe extern "C" fn(NvmlDevice, c_uint, *const NvmlGpuInstancePlacement, *mut NvmlGpuInstance) -> NvmlReturn;
type Capacity = unsafe extern "C" fn(NvmlDevice, c_uint, *mut c_uint) -> NvmlReturn;
type Placements = unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlGpuInstancePlacement, *mut c_uint) -> NvmlReturn;
type GiList = unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlGpuInstance, *mut c_uint) -> NvmlReturn;
type GiById = unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlGpuInstance) -> NvmlReturn;
type GiDestroy = unsafe extern "C" fn(NvmlGpuInstance) -> NvmlReturn;
type CiProfileInfo =
    unsafe extern "C" fn(NvmlGpuInstance, c_uint, c_uint, *mut NvmlComputeInstanceProfileInfo) -> NvmlReturn;
type CiProfileInfoV =
    unsafe extern "C" fn(NvmlGpuInstance, c_uint, c_uint, *mut NvmlComputeInstanceProfileInfoV2) -> NvmlReturn;
type CiCapacity = unsafe extern "C" fn(NvmlGpuInstance, c_uint, *mut c_uint) -> NvmlReturn;
type CiCreate = unsafe extern "C" fn(NvmlGpuInstance, c_uint, *mut NvmlComputeInstance) -> NvmlReturn;
type CiList = unsafe extern "C" fn(NvmlGpuInstance, c_uint, *mut NvmlComputeInstance, *mut c_uint) -> NvmlReturn;
type CiInfo = unsafe extern "C" fn(NvmlComputeInstance, *mut NvmlComputeInstanceInfo) -> NvmlReturn;
type CiDestroy = unsafe extern "C" fn(NvmlComputeInstance) -> NvmlReturn;
type MigMode = unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut c_uint) -> NvmlReturn;
type SetMigMode = unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlReturn) -> NvmlReturn;

/// `1g.10gb`, `3g.40gb` and `7g.80gb` of the H100; the 1-slice and 3-slice compute instance profiles.
const P1G: c_uint = 19;
const P3G: c_uint = 9;
const P7G: c_uint = 0;
const CI_1: c_uint = 0;
const CI_3: c_uint = 2;

/// The second process: makes a 1-slice compute instance in GPU instance 1 and prints the UUID of the MIG
/// device it makes, and the UUIDs of every MIG device it sees.
fn second_process() {
    let n = Nvml::load();
    let h100 = n.device(0);
    let by_id: GiById = n.f("nvmlDeviceGetGpuInstanceById");
    let ci_create: CiCreate = n.f("nvmlGpuInstanceCreateComputeInstance");
    let mut gi = null_mut();
    let mut ci = null_mut();
    // SAFETY: NVML handles and valid out-pointers throughout.
    unsafe {
        assert_eq!(by_id(h100, 1, &mut gi), NVML_SUCCESS, "the first process's GPU instance 1 is visible");
        assert_eq!(ci_create(gi, CI_1, &mut ci), NVML_SUCCESS);
    }
    for i in 0.. {
        let Ok(m) = n.mig_device(h100, i) else { break };
        println!("mig-device {}", n.text("nvmlDeviceGetUUID", m).unwrap());
    }
}

#[test]
fn mig_instances() {
    match std::env::var(ROLE).as_deref() {
        Ok("first") => return first_process(),
        Ok("second") => return second_process(),
        _ => {}
    }
    let dir = std::env::temp_dir().join(format!("simnvml-mig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = child("first", &dir.join("state")).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `f` with the effective uid of `nobody`, as an unprivileged caller.
fn as_nobody<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: seteuid has no memory preconditions; the real and saved uids stay root, so it can be undone.
    assert_eq!(unsafe { libc::seteuid(65534) }, 0);
    let v = f();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::seteuid(0) }, 0);
    v
}

fn first_process() {
    let n = Nvml::load();
    let (h100, small, a100) = (n.device(0), n.device(1), n.device(2));
    let mode: MigMode = n.f("nvmlDeviceGetMigMode");
    let set_mode: SetMigMode = n.f("nvmlDeviceSetMigMode");
    let create: CreateGi = n.f("nvmlDeviceCreateGpuInstance");
    let create_at: CreateGiAt = n.f("nvmlDeviceCreateGpuInstanceWithPlacement");
    let capacity: Capacity = n.f("nvmlDeviceGetGpuInstanceRemainingCapacity");
    let placements: Placements = n.f("nvmlDeviceGetGpuInstancePossiblePlacements_v2");
    let list: GiList = n.f("nvmlDeviceGetGpuInstances");
    let by_id: GiById = n.f("nvmlDeviceGetGpuInstanceById");
    let destroy: GiDestroy = n.f("nvmlGpuInstanceDestroy");
    let ci_info_p: CiProfileInfo = n.f("nvmlGpuInstanceGetComputeInstanceProfileInfo");
    let ci_info_v: CiProfileInfoV = n.f("nvmlGpuInstanceGetComputeInstanceProfileInfoV");
    let ci_capacity: CiCapacity = n.f("nvmlGpuInstanceGetComputeInstanceRemainingCapacity");
    let ci_create: CiCreate = n.f("nvmlGpuInstanceCreateComputeInstance");
    let ci_list: CiList = n.f("nvmlGpuInstanceGetComputeInstances");
    let ci_info: CiInfo = n.f("nvmlComputeInstanceGetInfo_v2");
    let ci_destroy: CiDestroy = n.f("nvmlComputeInstanceDestroy");
    let by_uuid: unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> NvmlReturn = n.f("nvmlDeviceGetHandleByUUID");
    let parent: unsafe extern "C" fn(NvmlDevice, *mut NvmlDevice) -> NvmlReturn =
        n.f("nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    let memory: unsafe extern "C" fn(NvmlDevice, *mut NvmlMemory) -> NvmlReturn = n.f("nvmlDeviceGetMemoryInfo");
    let (mut cur, mut pending, mut status, mut count) = (9, 9, 9, 0);
    let (mut gi, mut ci) = (null_mut(), null_mut());

    // SAFETY: every call passes NVML handles (or deliberately wrong ones) and valid out-pointers of the types
    // nvml.h gives, or NULL where the case under test is NULL.
    unsafe {
        // MIG mode: SIMGPU_MIG=0 turned the H100 on, the A100 starts off, the small device has no MIG.
        assert_eq!(mode(h100, &mut cur, &mut pending), NVML_SUCCESS);
        assert_eq!((cur, pending), (NVML_DEVICE_MIG_ENABLE, NVML_DEVICE_MIG_ENABLE));
        assert_eq!(mode(a100, &mut cur, &mut pending), NVML_SUCCESS);
        assert_eq!((cur, pending), (NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_DISABLE));
        assert_eq!(mode(small, &mut cur, &mut pending), NVML_ERROR_NOT_SUPPORTED);
        assert_eq!(n.uint("nvmlDeviceGetMaxMigDeviceCount", h100), Ok(7));
        assert_eq!(n.uint("nvmlDeviceGetMaxMigDeviceCount", a100), Ok(0));

        // With MIG off nothing can be partitioned.
        assert_eq!(capacity(a100, P1G, &mut count), NVML_ERROR_NOT_SUPPORTED);
        assert_eq!(create(a100, P1G, &mut gi), NVML_ERROR_NOT_SUPPORTED);
        assert_eq!(placements(a100, P1G, null_mut(), &mut count), NVML_ERROR_NOT_SUPPORTED);
        assert_eq!(create(small, P1G, &mut gi), NVML_ERROR_NOT_SUPPORTED);
        assert_eq!(n.mig_device(a100, 0), Err(NVML_ERROR_NOT_SUPPORTED));

        // nvmlDeviceSetMigMode: root only; bad mode or NULL status are invalid; no MIG on the small device.
        assert_eq!(as_nobody(|| set_mode(a100, NVML_DEVICE_MIG_ENABLE, &mut status)), NVML_ERROR_NO_PERMISSION);
        assert_eq!(set_mode(a100, 2, &mut status), NVML_ERROR_INVALID_ARGUMENT);
        assert_eq!(set_mode(a100, NVML_DEVICE_MIG_ENABLE, null_mut()), NVML_ERROR_INVALID_ARGUMENT);
        assert_eq!(set_mode(small, NVML_DEVICE_MIG_ENABLE, &mut status), NVML_ERROR_NOT_SUPPORTED);
        assert_eq!(set_mode(a100, NVML_DEVICE_MIG_ENABLE, &mut status), NVML_SUCCESS);
        assert_eq!(status, NVML_SUCCESS);
        assert_eq!(mode(a100, &mut cur, &mut pending), NVML_SUCCESS);
        assert_eq!(cur, NVML_DEVICE_MIG_ENABLE);
        assert_eq!(n.uint("nvmlDeviceGetMaxMigDeviceCount", a100), Ok(7));
        assert_eq!(set_mode(a100, NVML_DEVICE_MIG_DISABLE, &mut status), NVML_SUCCESS);
        assert_eq!(status, NVML_SUCCESS);

        // Placements as `nvidia-smi mig -lgipp` lists them; NULL asks for the count.
        let mut list_of = [NvmlGpuInstancePlacement::default(); 8];
        assert_eq!(placements(h100, P1G, list_of.as_mut_ptr(), &mut count), NVML_SUCCESS);
        assert_eq!(count, 7);
        assert!(list_of[..7].iter().enumerate().all(|(i, p)| p.start == i as u32 && p.size == 1));
        assert_eq!(placements(h100, P3G, list_of.as_mut_ptr(), &mut count), NVML_SUCCESS);
        assert_eq!(
            (count, list_of[0], list_of[1]),
            (2, NvmlGpuInstancePlacement { start: 0, size: 4 }, NvmlGpuInstancePlacement { start: 4, size: 4 })
        );
        assert_eq!(placements(h100, P7G, null_mut(), &mut count), NVML_SUCCESS);
        assert_eq!(count, 1);
        assert_eq!(placements(h100, 99, null_mut(), &mut count), NVML_ERROR_NOT_SUPPORTED);
        assert_eq!(placements(h100, P1G, null_mut(), null_mut()), NVML_ERROR_INVALID_ARGUMENT);
        assert_eq!(capacity(h100, P1G, &mut count), NVML_SUCCESS);
        assert_eq!(count, 7);
        assert_eq!(capacity(h100, 99, &mut count), NVML_ERROR_NOT_SUPPORTED);

        // GPU instances: a 3g.40gb goes to the upper half (id 2), a second one to the lower (id 1); then
        // no 1g.10gb or 7g.80gb fits.
        assert_eq!(as_nobody(|| create(h100, P3G, &mut gi)), NVML_ERROR_NO_PERMISSION);
        assert_eq!(create(h100, 99, &mut gi), NVML_ERROR_INVALID_ARGUMENT);
        assert_eq!(create(h100, P3G, null_mut()), NVML_ERROR_INVALID_ARGUMENT);
        let mut upper = null_mut();
        assert_eq!(create(h100, P3G, &mut upper), NVML_SUCCESS);
        let info = n.gpu_instance_info(upper).unwrap();
        assert_eq!((info.device, info.id, info.profile_id), (h100, 2, P3G));
        assert_eq!(info.placement, NvmlGpuInstancePlacement { start: 4, size: 4 });
        assert_eq!(capacity(h100, P1G, &mut count), NVML_SUCCESS);
        assert_eq!(count, 4);
        let at = |start, size| NvmlGpuInstancePlacement { start, size };
        assert_eq!(create_at(h100, P3G, &at(4, 4), &mut gi), NVML_ERROR_INSUFFICIENT_RESOURCES);
        assert_eq!(create_at(h100, P3G, &at(1, 4), &mut gi), NVML_ERROR_INVALID_ARGUMENT, "not a 3g start");
        assert_eq!(create_at(h100, P3G, &at(0, 2), &mut gi), NVML_ERROR_INVALID_ARGUMENT, "not a 3g size");
        assert_eq!(create_at(h100, P3G, std::ptr::null(), &mut gi), NVML_ERROR_INVALID_ARGUMENT);
        let mut lower = null_mut();
        assert_eq!(create_at(h100, P3G, &at(0, 4), &mut lower), NVML_SUCCESS);
        assert_eq!(n.gpu_instance_info(lower).unwrap().id, 1);
        for p in [P1G, P7G, P3G] {
            assert_eq!(capacity(h100, p, &mut count), NVML_SUCCESS);
            assert_eq!(count, 0);
            assert_eq!(create(h100, p, &mut gi), NVML_ERROR_INSUFFICIENT_RESOURCES, "profile {p}");
        }
        let mut handles = [null_mut(); 7];
        assert_eq!(list(h100, P3G, handles.as_mut_ptr(), &mut count), NVML_SUCCESS);
        assert_eq!((count, handles[0], handles[1]), (2, lower, upper));
        assert_eq!(list(h100, P1G, handles.as_mut_ptr(), &mut count), NVML_SUCCESS);
        assert_eq!(count, 0);
        assert_eq!(by_id(h100, 2, &mut gi), NVML_SUCCESS);
        assert_eq!(gi, upper);
        assert_eq!(by_id(h100, 7, &mut gi), NVML_ERROR_NOT_FOUND);
        assert_eq!(by_id(h100, 99, &mut gi), NVML_ERROR_INVALID_ARGUMENT);

        // Compute instance profiles of a 3g.40gb: the whole instance and one slice.
        let mut p = NvmlComputeInstanceProfileInfo::default();
        assert_eq!(ci_info_p(upper, CI_3, 0, &mut p), NVML_SUCCESS);
        assert_eq!((p.id, p.slice_count, p.instance_count, p.multiprocessor_count), (CI_3, 3, 1, 60));
        assert_eq!(ci_info_p(upper, CI_1, 0, &mut p), NVML_SUCCESS);
        assert_eq!((p.id, p.slice_count, p.instance_count, p.multiprocessor_count), (CI_1, 1, 3, 16));
        assert_eq!(ci_info_p(upper, 4, 0, &mut p), NVML_ERROR_NOT_SUPPORTED, "no 7-slice compute instance in a 3g");
        assert_eq!(ci_info_p(upper, 8, 0, &mut p), NVML_ERROR_INVALID_ARGUMENT);
        assert_eq!(ci_info_p(upper, CI_3, 1, &mut p), NVML_ERROR_INVALID_ARGUMENT, "only the shared engine profile");
        assert_eq!(ci_info_p(h100.cast(), CI_3, 0, &mut p), NVML_ERROR_INVALID_ARGUMENT, "a device is no GPU instance");
        let mut v: NvmlComputeInstanceProfileInfoV2 = std::mem::zeroed();
        v.version = COMPUTE_INSTANCE_PROFILE_INFO_V2;
        assert_eq!(ci_info_v(upper, CI_1, 0, &mut v), NVML_SUCCESS);
        assert_eq!(CStr::from_ptr(v.name.as_ptr()).to_str().unwrap(), "MIG 1c.3g.40gb");
        v.version = struct_version(size_of::<NvmlComputeInstanceProfileInfoV2>(), 1);
        assert_eq!(ci_info_v(upper, CI_1, 0, &mut v), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

        // The common case: one compute instance taking the whole GPU instance.
        assert_eq!(ci_capacity(upper, CI_3, &mut count), NVML_SUCCESS);
        assert_eq!(count, 1);
        assert_eq!(as_nobody(|| ci_create(upper, CI_3, &mut ci)), NVML_ERROR_NO_PERMISSION);
        let mut whole = null_mut();
        assert_eq!(ci_create(upper, CI_3, &mut whole), NVML_SUCCESS);
        assert_eq!(ci_capacity(upper, CI_3, &mut count), NVML_SUCCESS);
        assert_eq!(count, 0);
        assert_eq!(ci_capacity(upper, CI_1, &mut count), NVML_SUCCESS);
        assert_eq!(count, 0);
        assert_eq!(ci_create(upper, CI_3, &mut ci), NVML_ERROR_INSUFFICIENT_RESOURCES);
        assert_eq!(ci_create(upper, CI_1, &mut ci), NVML_ERROR_INSUFFICIENT_RESOURCES);
        assert_eq!(ci_create(upper, 4, &mut ci), NVML_ERROR_NOT_SUPPORTED);
        let mut cis = [null_mut(); 3];
        assert_eq!(ci_list(upper, CI_3, cis.as_mut_ptr(), &mut count), NVML_SUCCESS);
        assert_eq!((count, cis[0]), (1, whole));
        let mut cinfo: NvmlComputeInstanceInfo = std::mem::zeroed();
        assert_eq!(ci_info(whole, &mut cinfo), NVML_SUCCESS);
        assert_eq!((cinfo.device, cinfo.gpu_instance, cinfo.id, cinfo.profile_id), (h100, upper, 0, CI_3));
        assert_eq!(cinfo.placement, NvmlComputeInstancePlacement { start: 0, size: 3 });
        assert_eq!(destroy(upper), NVML_ERROR_IN_USE, "it still has a compute instance");
        assert_eq!(set_mode(h100, NVML_DEVICE_MIG_DISABLE, &mut status), NVML_SUCCESS);
        assert_eq!(status, NVML_ERROR_IN_USE, "MIG cannot go off under instances");

        // The MIG device of that compute instance.
        let mig = n.mig_device(h100, 0).unwrap();
        assert_eq!(n.mig_device(h100, 1), Err(NVML_ERROR_NOT_FOUND));
        assert_eq!(n.mig_device(h100, 7), Err(NVML_ERROR_INVALID_ARGUMENT));
        assert_eq!(n.uint("nvmlDeviceIsMigDeviceHandle", mig), Ok(1));
        assert_eq!(n.uint("nvmlDeviceIsMigDeviceHandle", h100), Ok(0));
        assert_eq!(n.uint("nvmlDeviceGetGpuInstanceId", mig), Ok(2));
        assert_eq!(n.uint("nvmlDeviceGetComputeInstanceId", mig), Ok(0));
        assert_eq!(n.uint("nvmlDeviceGetGpuInstanceId", h100), Err(NVML_ERROR_NOT_SUPPORTED));
        let mut up = null_mut();
        assert_eq!(parent(mig, &mut up), NVML_SUCCESS);
        assert_eq!(up, h100);
        assert_eq!(parent(h100, &mut up), NVML_ERROR_INVALID_ARGUMENT);
        let uuid = n.text("nvmlDeviceGetUUID", mig).unwrap();
        assert!(uuid.starts_with("MIG-") && uuid.len() == 40, "{uuid}");
        assert_ne!(uuid, n.text("nvmlDeviceGetUUID", h100).unwrap());
        assert_eq!(n.text("nvmlDeviceGetName", mig).unwrap(), "NVIDIA H100 80GB HBM3 MIG 3g.40gb");
        let mut found = null_mut();
        let c = CString::new(uuid.clone()).unwrap();
        assert_eq!(by_uuid(c.as_ptr(), &mut found), NVML_SUCCESS);
        assert_eq!(found, mig);
        let mut m = NvmlMemory { total: 0, free: 0, used: 0 };
        assert_eq!(memory(mig, &mut m), NVML_SUCCESS);
        assert_eq!((m.total, m.free), (40448 << 20, 40448 << 20));
        let procs: unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut NvmlProcessInfo) -> NvmlReturn =
            n.f("nvmlDeviceGetComputeRunningProcesses_v3");
        count = 0;
        assert_eq!(procs(mig, &mut count, null_mut()), NVML_SUCCESS, "no process runs inside it");
        assert_eq!(count, 0);

        // A second process sees both GPU instances and the MIG device, and adds one of its own.
        let state = std::env::var("SIMGPU_STATE").unwrap();
        let out = child("second", Path::new(&state)).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "--- stdout\n{text}\n--- stderr\n{}", String::from_utf8_lossy(&out.stderr));
        let seen: Vec<&str> = text.lines().filter_map(|l| Some(&l[l.find("mig-device ")? + 11..])).collect();
        assert_eq!(seen.len(), 2, "{text}");
        assert_eq!(seen[1], uuid, "GPU instance 2's MIG device comes after GPU instance 1's");
        let theirs = n.mig_device(h100, 0).unwrap();
        assert_eq!(n.text("nvmlDeviceGetUUID", theirs).unwrap(), seen[0]);
        assert_eq!(n.uint("nvmlDeviceGetGpuInstanceId", theirs), Ok(1));
        assert_eq!(n.text("nvmlDeviceGetName", theirs).unwrap(), "NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb");
        assert_eq!(ci_capacity(lower, CI_1, &mut count), NVML_SUCCESS);
        assert_eq!(count, 2);

        // Destroying: the compute instance first, then its GPU instance; stale handles are invalid, and a
        // recreated instance is a new MIG device with a new UUID.
        assert_eq!(as_nobody(|| ci_destroy(whole)), NVML_ERROR_NO_PERMISSION);
        assert_eq!(ci_destroy(whole), NVML_SUCCESS);
        assert_eq!(ci_info(whole, &mut cinfo), NVML_ERROR_INVALID_ARGUMENT);
        assert_eq!(ci_destroy(whole), NVML_ERROR_INVALID_ARGUMENT);
        assert_eq!(n.uint("nvmlDeviceIsMigDeviceHandle", mig), Err(NVML_ERROR_INVALID_ARGUMENT));
        assert_eq!(by_uuid(c.as_ptr(), &mut found), NVML_ERROR_NOT_FOUND);
        assert_eq!(as_nobody(|| destroy(upper)), NVML_ERROR_NO_PERMISSION);
        assert_eq!(destroy(upper), NVML_SUCCESS);
        assert_eq!(destroy(upper), NVML_ERROR_INVALID_ARGUMENT);
        assert_eq!(n.gpu_instance_info(upper).unwrap_err(), NVML_ERROR_INVALID_ARGUMENT);
        assert_eq!(create(h100, P3G, &mut gi), NVML_SUCCESS);
        assert_eq!(ci_create(gi, CI_3, &mut ci), NVML_SUCCESS);
        let again = n.mig_device(h100, 1).unwrap();
        assert_ne!(n.text("nvmlDeviceGetUUID", again).unwrap(), uuid);

        // Tear everything down; then MIG can go off.
        assert_eq!(ci_destroy(ci), NVML_SUCCESS);
        assert_eq!(destroy(gi), NVML_SUCCESS);
        assert_eq!(ci_list(lower, CI_1, cis.as_mut_ptr(), &mut count), NVML_SUCCESS);
        assert_eq!(count, 1);
        assert_eq!(ci_destroy(cis[0]), NVML_SUCCESS);
        assert_eq!(destroy(lower), NVML_SUCCESS);
        assert_eq!(n.mig_device(h100, 0), Err(NVML_ERROR_NOT_FOUND));
        assert_eq!(set_mode(h100, NVML_DEVICE_MIG_DISABLE, &mut status), NVML_SUCCESS);
        assert_eq!(status, NVML_SUCCESS);
        assert_eq!(n.uint("nvmlDeviceGetMaxMigDeviceCount", h100), Ok(0));
    }
}
