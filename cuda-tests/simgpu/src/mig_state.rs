//! The machine-wide MIG state: each device's MIG mode and the GPU and compute instances that exist on it,
//! in a small file of its own beside the state file (`<SIMGPU_STATE>.mig`), so instances one process
//! creates (`nvidia-smi mig -cgi … -C`) are seen by every other, as on a real machine.
//!
//! The file is a fixed `#[repr(C)]` layout of atomics, created and checked under `flock` like the state
//! file. Every change takes the exclusive lock and every reading the shared one, so a reader never sees an
//! instance half made; a slot's profile word is written last, so a process killed while changing one leaves
//! it either whole or free. A file made for another device list or another `SIMGPU_MIG` starts afresh: its
//! instances described another machine.
//!
//! It also keeps the device memory CUDA processes hold inside GPU instances (version 2): a process sees at
//! most one MIG device, so one slot per process records its pid, instance and bytes; an instance's usage is
//! the sum of the live slots naming it, so two processes in one GPU instance share its memory, and a dead
//! process's slot is reclaimed by the next process that charges memory.

use crate::config::{Config, MAX_DEVICES};
use crate::mig::{self, CiProfile, ComputeInstance, GpuInstance, MAX_COMPUTE_INSTANCES, MAX_GPU_INSTANCES, MigError};
use crate::process;
use crate::profile::{MigProfile, Profile};
use crate::state::{MAX_PROCS, StateError};
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use tessera_region::flock::FileLock;

const MAGIC: u64 = u64::from_le_bytes(*b"SIMGPUMG");
const VERSION: u32 = 2;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: u32,
    layout_size: u32,
    device_count: u32,
    /// Devices `SIMGPU_MIG` turned on when the file was made, one bit each.
    configured: u32,
    fingerprint: u64,
    /// Last creation number handed out.
    serial: AtomicU64,
}

/// One compute instance id of a GPU instance.
#[repr(C)]
struct CiSlot {
    /// 0 when free, else the compute instance profile + 1.
    profile: AtomicU32,
    start: AtomicU32,
    serial: AtomicU64,
}

/// One GPU instance id of a device.
#[repr(C)]
struct GiSlot {
    /// 0 when free, else the GPU instance profile id + 1.
    profile: AtomicU32,
    start: AtomicU32,
    cis: [CiSlot; MAX_COMPUTE_INSTANCES],
}

#[repr(C)]
struct DeviceSlot {
    /// `NVML_DEVICE_MIG_ENABLE` (1) or `…_DISABLE` (0).
    mode: AtomicU32,
    _pad: u32,
    gis: [GiSlot; MAX_GPU_INSTANCES],
}

/// Device memory one process holds inside one GPU instance.
#[repr(C)]
struct MemorySlot {
    /// Owner pid; 0 when free.
    pid: AtomicU32,
    device: AtomicU32,
    /// Owner's start time, against pid reuse.
    start_time: AtomicU64,
    gi: AtomicU32,
    _pad: u32,
    /// Creation number of the compute instance it runs in: bytes charged to an instance that was destroyed
    /// since no longer count.
    serial: AtomicU64,
    bytes: AtomicU64,
}

#[repr(C)]
struct Layout {
    header: Header,
    devices: [DeviceSlot; MAX_DEVICES],
    memory: [MemorySlot; MAX_PROCS],
}

/// A device's MIG mode and instances at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceMig {
    /// MIG mode on.
    pub enabled: bool,
    /// GPU instances by id, each with its compute instances by id.
    pub gpu_instances: Vec<(GpuInstance, Vec<ComputeInstance>)>,
}

impl DeviceMig {
    /// The GPU instance `id`, with its compute instances.
    pub fn gpu_instance(&self, id: u32) -> Option<&(GpuInstance, Vec<ComputeInstance>)> {
        self.gpu_instances.iter().find(|(g, _)| g.id == id)
    }

    /// The compute instance with creation number `serial` and its GPU instance, if it still exists.
    pub fn by_serial(&self, serial: u64) -> Option<(&GpuInstance, &ComputeInstance)> {
        self.mig_devices().find(|(_, c)| c.serial == serial)
    }

    /// Every compute instance with its GPU instance, in MIG device order (by GPU instance id, then
    /// compute instance id).
    pub fn mig_devices(&self) -> impl Iterator<Item = (&GpuInstance, &ComputeInstance)> {
        self.gpu_instances.iter().flat_map(|(g, cis)| cis.iter().map(move |c| (g, c)))
    }
}

/// A process's mapping of the MIG state file.
pub struct MigState {
    file: File,
    map: memmap2::MmapMut,
    models: Vec<&'static Profile>,
    /// `flock` excludes other processes only (threads share the open file and so its lock): this excludes
    /// this process's other threads.
    threads: Mutex<()>,
}

/// The MIG state file that goes with `config`'s state file.
pub fn path(config: &Config) -> String {
    format!("{}.mig", config.state_path)
}

fn configured_mask(config: &Config) -> u32 {
    config.devices.iter().filter(|d| d.mig_enabled).fold(0, |m, d| m | 1 << d.ordinal)
}

impl MigState {
    /// Opens (creating if needed) the MIG state file of `config`.
    pub fn open(config: &Config) -> Result<MigState, StateError> {
        let path = path(config);
        let fail = |what: &str, e: std::io::Error| StateError(format!("simgpu: MIG state file {path}: {what}: {e}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| fail("cannot open (set SIMGPU_STATE to a writable path)", e))?;
        let size = std::mem::size_of::<Layout>() as u64;
        let map = {
            let _lock = FileLock::new(&file).map_err(|e| fail("cannot lock", e))?;
            let len = file.metadata().map_err(|e| fail("cannot stat", e))?.len();
            if len == 0 {
                file.set_len(size).map_err(|e| fail("cannot size", e))?;
            } else if len != size {
                return Err(StateError(format!(
                    "simgpu: MIG state file {path} has {len} bytes, a version-{VERSION} one has {size}: it belongs to \
                     another simgpu version or is corrupt; remove it (no simulated program may be running) or set SIMGPU_STATE"
                )));
            }
            // SAFETY: the file is ours (0600), sized to the layout, and only ever accessed through atomics
            // and fields written under the exclusive lock.
            let map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| fail("cannot map", e))?;
            let mut state = MigState {
                file: file.try_clone().map_err(|e| fail("cannot duplicate", e))?,
                map,
                models: vec![],
                threads: Mutex::new(()),
            };
            let h = &state.layout().header;
            let magic = h.magic.load(Ordering::Acquire);
            // An all-zero file was sized by a process that died before filling it in: it is made afresh.
            if magic != 0 && (magic != MAGIC || h.version != VERSION || h.layout_size != size as u32) {
                return Err(StateError(format!(
                    "simgpu: MIG state file {path} is not a version-{VERSION} simgpu MIG state file (magic {magic:#x}); \
                     remove it (no simulated program may be running) or set SIMGPU_STATE"
                )));
            }
            if magic != MAGIC
                || h.fingerprint != config.fingerprint()
                || h.device_count as usize != config.devices.len()
                || h.configured != configured_mask(config)
            {
                state.initialize(config);
            }
            state.map
        };
        Ok(MigState { file, map, models: config.devices.iter().map(|d| d.profile).collect(), threads: Mutex::new(()) })
    }

    fn initialize(&mut self, config: &Config) {
        let size = std::mem::size_of::<Layout>();
        self.map[..size].fill(0);
        // SAFETY: as in `layout`; `&mut self` makes this the only reference made through this mapping.
        let l = unsafe { &mut *(self.map.as_mut_ptr() as *mut Layout) };
        l.header.version = VERSION;
        l.header.layout_size = size as u32;
        l.header.device_count = config.devices.len() as u32;
        l.header.configured = configured_mask(config);
        l.header.fingerprint = config.fingerprint();
        for d in &config.devices {
            l.devices[d.ordinal as usize].mode.store(d.mig_enabled as u32, Ordering::Relaxed);
        }
        l.header.magic.store(MAGIC, Ordering::Release);
    }

    fn layout(&self) -> &Layout {
        // SAFETY: the mapping is exactly size_of::<Layout>() bytes, page-aligned, and Layout is atomics and
        // integers for which any bit pattern is valid.
        unsafe { &*(self.map.as_ptr() as *const Layout) }
    }

    /// Runs `f` holding the exclusive (`write`) or shared lock of the file.
    fn locked<T>(&self, write: bool, f: impl FnOnce(&Layout) -> T) -> T {
        let _threads = self.threads.lock();
        let lock = if write { FileLock::new(&self.file) } else { FileLock::shared(&self.file) };
        // An open descriptor of our own file cannot fail to lock but through a kernel fault; the NVML
        // entry points turn this panic into NVML_ERROR_UNKNOWN.
        let _lock = lock.expect("simgpu: cannot lock the MIG state file");
        f(self.layout())
    }

    fn gi_profile(&self, ordinal: usize, slot: &GiSlot) -> Option<(&'static MigProfile, u32)> {
        let id = slot.profile.load(Ordering::Acquire).checked_sub(1)?;
        let profile = self.models.get(ordinal)?.mig_profiles.iter().find(|m| m.id == id)?;
        Some((profile, slot.start.load(Ordering::Relaxed)))
    }

    fn read_device(&self, l: &Layout, ordinal: usize) -> DeviceMig {
        let d = &l.devices[ordinal];
        let mut gpu_instances = Vec::new();
        for (id, slot) in d.gis.iter().enumerate() {
            let Some((profile, start)) = self.gi_profile(ordinal, slot) else { continue };
            let gi = GpuInstance { id: id as u32, profile, start };
            let cis = slot
                .cis
                .iter()
                .enumerate()
                .filter_map(|(ci_id, c)| {
                    let nvml_profile = c.profile.load(Ordering::Acquire).checked_sub(1)?;
                    Some(ComputeInstance {
                        id: ci_id as u32,
                        profile: mig::ci_profile(profile, nvml_profile)?,
                        start: c.start.load(Ordering::Relaxed),
                        serial: c.serial.load(Ordering::Relaxed),
                    })
                })
                .collect();
            gpu_instances.push((gi, cis));
        }
        DeviceMig { enabled: d.mode.load(Ordering::Acquire) != 0, gpu_instances }
    }

    /// Device `ordinal`'s MIG mode and instances now.
    pub fn device(&self, ordinal: usize) -> DeviceMig {
        self.locked(false, |l| self.read_device(l, ordinal))
    }

    /// Turns MIG mode on or off (`nvmlDeviceSetMigMode`); `InUse` when turning it off while GPU instances
    /// exist.
    pub fn set_mode(&self, ordinal: usize, enable: bool) -> Result<(), MigError> {
        self.locked(true, |l| {
            if !enable && !self.read_device(l, ordinal).gpu_instances.is_empty() {
                return Err(MigError::InUse);
            }
            l.devices[ordinal].mode.store(enable as u32, Ordering::Release);
            Ok(())
        })
    }

    /// Creates a GPU instance of `profile` at `start`, or where `nvmlDeviceCreateGpuInstance` would put it.
    pub fn create_gpu_instance(
        &self,
        ordinal: usize,
        profile: &'static MigProfile,
        start: Option<u32>,
    ) -> Result<GpuInstance, MigError> {
        self.locked(true, |l| {
            let now = self.read_device(l, ordinal);
            if !now.enabled {
                return Err(MigError::NotEnabled);
            }
            let existing: Vec<GpuInstance> = now.gpu_instances.iter().map(|(g, _)| *g).collect();
            let start = match start {
                Some(s) => mig::check_placement(profile, s, &existing).map(|()| s)?,
                None => mig::choose_placement(profile, &existing)?,
            };
            let id = mig::gpu_instance_id(profile, start);
            let slot = &l.devices[ordinal].gis[id as usize];
            slot.start.store(start, Ordering::Relaxed);
            for c in &slot.cis {
                c.profile.store(0, Ordering::Relaxed);
            }
            slot.profile.store(profile.id + 1, Ordering::Release);
            Ok(GpuInstance { id, profile, start })
        })
    }

    /// Destroys GPU instance `id`: `InUse` while it has compute instances, `NotFound` when there is none.
    pub fn destroy_gpu_instance(&self, ordinal: usize, id: u32) -> Result<(), MigError> {
        self.locked(true, |l| {
            let now = self.read_device(l, ordinal);
            let (_, cis) = now.gpu_instance(id).ok_or(MigError::NotFound)?;
            if !cis.is_empty() {
                return Err(MigError::InUse);
            }
            l.devices[ordinal].gis[id as usize].profile.store(0, Ordering::Release);
            Ok(())
        })
    }

    /// Creates a compute instance of `ci` in GPU instance `gi`.
    pub fn create_compute_instance(&self, ordinal: usize, gi: u32, ci: CiProfile) -> Result<ComputeInstance, MigError> {
        self.locked(true, |l| {
            let now = self.read_device(l, ordinal);
            let (g, cis) = now.gpu_instance(gi).ok_or(MigError::NotFound)?;
            let start = mig::choose_ci_start(ci, g.profile, cis)?;
            let serial = l.header.serial.fetch_add(1, Ordering::AcqRel) + 1;
            // The id is the first compute slice it takes: unique among instances that can coexist.
            let c = &l.devices[ordinal].gis[gi as usize].cis[start as usize];
            c.start.store(start, Ordering::Relaxed);
            c.serial.store(serial, Ordering::Relaxed);
            c.profile.store(ci.nvml_profile + 1, Ordering::Release);
            Ok(ComputeInstance { id: start, profile: ci, start, serial })
        })
    }

    /// Destroys compute instance `ci` of GPU instance `gi`; `NotFound` when either is gone.
    pub fn destroy_compute_instance(&self, ordinal: usize, gi: u32, ci: u32) -> Result<(), MigError> {
        self.locked(true, |l| {
            let now = self.read_device(l, ordinal);
            let (_, cis) = now.gpu_instance(gi).ok_or(MigError::NotFound)?;
            if !cis.iter().any(|c| c.id == ci) {
                return Err(MigError::NotFound);
            }
            l.devices[ordinal].gis[gi as usize].cis[ci as usize].profile.store(0, Ordering::Release);
            Ok(())
        })
    }
}

/// This process's pid and start time, as memory slots record them.
fn me() -> (u32, u64) {
    let pid = process::own_pid();
    (pid, process::start_time(pid).unwrap_or(0))
}

impl MigState {
    /// Bytes held machine-wide in GPU instance `gi` of device `ordinal` (only slots of live processes whose
    /// compute instance still exists count).
    fn used_in(&self, l: &Layout, now: &DeviceMig, ordinal: usize, gi: u32) -> u64 {
        l.memory
            .iter()
            .filter(|m| m.pid.load(Ordering::Acquire) != 0)
            .filter(|m| m.device.load(Ordering::Relaxed) as usize == ordinal && m.gi.load(Ordering::Relaxed) == gi)
            .filter(|m| now.by_serial(m.serial.load(Ordering::Relaxed)).is_some_and(|(g, _)| g.id == gi))
            .map(|m| m.bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// Frees the slots of processes that died without releasing them.
    fn reclaim_dead(&self, l: &Layout) {
        for m in &l.memory {
            let pid = m.pid.load(Ordering::Acquire);
            if pid != 0 && !process::is_alive(pid, m.start_time.load(Ordering::Relaxed)) {
                m.bytes.store(0, Ordering::Relaxed);
                m.pid.store(0, Ordering::Release);
            }
        }
    }

    /// Bytes CUDA processes hold in GPU instance `gi` of device `ordinal`.
    pub fn instance_used(&self, ordinal: usize, gi: u32) -> u64 {
        self.locked(false, |l| self.used_in(l, &self.read_device(l, ordinal), ordinal, gi))
    }

    /// Charges `bytes` to this process inside the MIG device whose compute instance has creation number
    /// `serial` on device `ordinal`: `NotFound` when that instance is gone, `Insufficient` when its GPU
    /// instance's memory (shared by every process in it) has not that much free.
    pub fn charge(&self, ordinal: usize, serial: u64, bytes: u64) -> Result<(), MigError> {
        self.locked(true, |l| {
            let now = self.read_device(l, ordinal);
            let (gi, _) = now.by_serial(serial).ok_or(MigError::NotFound)?;
            let limit = gi.profile.memory_mib << 20;
            let mut used = self.used_in(l, &now, ordinal, gi.id);
            if used.saturating_add(bytes) > limit {
                self.reclaim_dead(l);
                used = self.used_in(l, &now, ordinal, gi.id);
                if used.saturating_add(bytes) > limit {
                    return Err(MigError::Insufficient);
                }
            }
            let (pid, start) = me();
            let mine =
                |m: &&MemorySlot| m.pid.load(Ordering::Acquire) == pid && m.start_time.load(Ordering::Relaxed) == start;
            let slot = match l.memory.iter().find(mine) {
                Some(m) => m,
                None => {
                    self.reclaim_dead(l);
                    let m =
                        l.memory.iter().find(|m| m.pid.load(Ordering::Acquire) == 0).ok_or(MigError::Insufficient)?;
                    m.bytes.store(0, Ordering::Relaxed);
                    m.start_time.store(start, Ordering::Relaxed);
                    m.pid.store(pid, Ordering::Release);
                    m
                }
            };
            slot.device.store(ordinal as u32, Ordering::Relaxed);
            slot.gi.store(gi.id, Ordering::Relaxed);
            slot.serial.store(serial, Ordering::Relaxed);
            slot.bytes.fetch_add(bytes, Ordering::Relaxed);
            Ok(())
        })
    }

    /// Returns `bytes` charged with [`MigState::charge`].
    pub fn uncharge(&self, bytes: u64) {
        let (pid, start) = me();
        self.locked(true, |l| {
            let mine = l
                .memory
                .iter()
                .find(|m| m.pid.load(Ordering::Acquire) == pid && m.start_time.load(Ordering::Relaxed) == start);
            if let Some(m) = mine {
                let left = m.bytes.load(Ordering::Relaxed).saturating_sub(bytes);
                m.bytes.store(left, Ordering::Relaxed);
            }
        })
    }

    /// Bytes this process holds in its MIG device (0 without one).
    pub fn held(&self) -> u64 {
        let (pid, start) = me();
        self.locked(false, |l| {
            l.memory
                .iter()
                .find(|m| m.pid.load(Ordering::Acquire) == pid && m.start_time.load(Ordering::Relaxed) == start)
                .map_or(0, |m| m.bytes.load(Ordering::Relaxed))
        })
    }

    /// Frees this process's slot, returning whatever it still holds (the driver calls this at exit).
    pub fn release_process(&self) {
        let (pid, start) = me();
        self.locked(true, |l| {
            for m in &l.memory {
                if m.pid.load(Ordering::Acquire) == pid && m.start_time.load(Ordering::Relaxed) == start {
                    m.bytes.store(0, Ordering::Relaxed);
                    m.pid.store(0, Ordering::Release);
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &std::path::Path, devices: &str, mig: &str) -> Config {
        let path = dir.join("state").to_string_lossy().into_owned();
        let (devices, mig) = (devices.to_string(), mig.to_string());
        Config::from_lookup(move |k| match k {
            "SIMGPU_STATE" => Some(path.clone()),
            "SIMGPU_DEVICES" => Some(devices.clone()),
            "SIMGPU_MIG" => Some(mig.clone()),
            _ => None,
        })
        .unwrap()
    }

    fn tempdir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("simgpu-mig-test-{}-{}", std::process::id(), crate::state::now_ns()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn instances_are_shared_and_follow_the_configuration() {
        let dir = tempdir();
        let c = config(&dir, "h100,a100", "1");
        let a = MigState::open(&c).unwrap();
        let b = MigState::open(&c).unwrap();
        assert!(!a.device(0).enabled && a.device(1).enabled);
        let p = c.devices[1].profile.mig_profiles.iter().find(|m| m.id == 9).unwrap();
        assert_eq!(a.create_gpu_instance(0, p, None), Err(MigError::NotEnabled));
        let gi = a.create_gpu_instance(1, p, None).unwrap();
        assert_eq!((gi.id, gi.start), (2, 4));
        let whole = mig::ci_profiles(p)[1];
        let ci = b.create_compute_instance(1, gi.id, whole).unwrap();
        assert_eq!(a.device(1).mig_devices().count(), 1);
        assert_eq!(b.destroy_gpu_instance(1, gi.id), Err(MigError::InUse));
        assert_eq!(b.set_mode(1, false), Err(MigError::InUse));
        a.destroy_compute_instance(1, gi.id, ci.id).unwrap();
        a.destroy_gpu_instance(1, gi.id).unwrap();
        assert_eq!(a.destroy_gpu_instance(1, gi.id), Err(MigError::NotFound));
        b.set_mode(0, true).unwrap();
        assert!(MigState::open(&c).unwrap().device(0).enabled, "a mode change persists");
        // Another SIMGPU_MIG starts the file afresh.
        let other = config(&dir, "h100,a100", "0");
        let fresh = MigState::open(&other).unwrap();
        assert!(fresh.device(0).enabled && !fresh.device(1).enabled);
    }

    #[test]
    fn concurrent_creators_never_share_a_slice() {
        let dir = tempdir();
        let c = config(&dir, "h100", "0");
        let one = c.devices[0].profile.mig_profiles.iter().find(|m| m.id == 19).unwrap();
        // Two mappings (as two processes have) and four threads on each.
        let states = [MigState::open(&c).unwrap(), MigState::open(&c).unwrap()];
        let made: Vec<Result<GpuInstance, MigError>> = std::thread::scope(|s| {
            let states = &states;
            let handles: Vec<_> =
                (0..8).map(|i| s.spawn(move || states[i % 2].create_gpu_instance(0, one, None))).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut ids: Vec<u32> = made.iter().filter_map(|r| r.ok()).map(|g| g.id).collect();
        ids.sort();
        assert_eq!(ids, [7, 8, 9, 10, 11, 12, 13]);
        assert_eq!(made.iter().filter(|r| **r == Err(MigError::Insufficient)).count(), 1);
        assert_eq!(states[0].device(0).gpu_instances.len(), 7);
    }

    #[test]
    fn instance_memory_is_charged_up_to_its_size() {
        let dir = tempdir();
        let c = config(&dir, "h100", "0");
        let s = MigState::open(&c).unwrap();
        let p = c.devices[0].profile.mig_profiles.iter().find(|m| m.id == 19).unwrap();
        let gi = s.create_gpu_instance(0, p, None).unwrap();
        let ci = s.create_compute_instance(0, gi.id, mig::ci_profiles(p)[0]).unwrap();
        let limit = p.memory_mib << 20;
        s.charge(0, ci.serial, limit - 1).unwrap();
        assert_eq!(s.charge(0, ci.serial, 2), Err(MigError::Insufficient));
        assert_eq!(MigState::open(&c).unwrap().instance_used(0, gi.id), limit - 1, "seen by every mapping");
        s.uncharge(limit - 1);
        s.charge(0, ci.serial, limit).unwrap();
        s.release_process();
        assert_eq!(s.instance_used(0, gi.id), 0);
        s.destroy_compute_instance(0, gi.id, ci.id).unwrap();
        assert_eq!(s.charge(0, ci.serial, 1), Err(MigError::NotFound));
    }

    #[test]
    fn foreign_files_are_rejected() {
        let dir = tempdir();
        let c = config(&dir, "h100", "0");
        std::fs::write(path(&c), b"not a MIG file").unwrap();
        let e = MigState::open(&c).err().unwrap();
        assert!(e.0.contains("corrupt"), "{}", e.0);
        std::fs::write(path(&c), vec![0xAB; std::mem::size_of::<Layout>()]).unwrap();
        let e = MigState::open(&c).err().unwrap();
        assert!(e.0.contains("not a version-2"), "{}", e.0);
    }
}
