//! The machine-wide state file every simulated-driver and NVML process maps: device memory in use,
//! per-process usage, the execution engine's queue and its busy time.
//!
//! The file is a fixed `#[repr(C)]` layout of atomics. It is created and checked under `flock`; after that
//! every access is a lock-free atomic operation, so a process killed at any instant leaves it consistent
//! (its usage is reclaimed by whoever next notices it is dead).

use crate::config::{Config, MAX_DEVICES};
use crate::process;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use tessera_region::flock::FileLock;
use tessera_region::pid_ns::{self, Foreign, ProcView};

const MAGIC: u64 = u64::from_le_bytes(*b"SIMGPUST");
const VERSION: u32 = 4;
/// Most processes that may use the simulated GPUs at once.
pub const MAX_PROCS: usize = 256;
/// Ring of engine queue positions remembered with their owner, for recovering from a dead owner.
pub const ENGINE_SLOTS: usize = 1024;
/// Utilization history: this many buckets of [`UTIL_BUCKET_NS`].
pub const UTIL_BUCKETS: usize = 10;
/// Width of one utilization bucket.
pub const UTIL_BUCKET_NS: u64 = 100_000_000;

/// Layout header; checked on every open.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: u32,
    layout_size: u32,
    device_count: u32,
    max_procs: u32,
    fingerprint: u64,
}

/// Busy time within one utilization bucket.
#[repr(C)]
pub struct UtilBucket {
    epoch: AtomicU64,
    busy_ns: AtomicU64,
}

/// Machine-wide state of one device.
#[repr(C)]
pub struct DeviceState {
    /// Device memory in bytes.
    pub total_memory: AtomicU64,
    /// Bytes in use by every process (allocations and context reservations).
    pub used_memory: AtomicU64,
    /// Next engine queue position to hand out.
    pub next_ticket: AtomicU32,
    /// Engine queue position now running; also the futex word waiters sleep on.
    pub now_serving: AtomicU32,
    /// Total engine time spent running kernels.
    pub busy_ns: AtomicU64,
    /// Kernels run.
    pub kernels: AtomicU64,
    /// Of those, kernels the simulator does not compute (timed no-ops, or poisoning their outputs): see
    /// `simgpu::kernels::Call::Uncomputed`.
    pub uncomputed: AtomicU64,
    /// The engine's clock: when (on the shared monotonic clock) the last kernel's simulated run ended.
    pub clock_ns: AtomicU64,
    util: [UtilBucket; UTIL_BUCKETS],
    /// `ticket << 32 | pid` for recent queue positions, to skip positions whose owner died.
    pub tickets: [AtomicU64; ENGINE_SLOTS],
}

/// One process's share of the machine state.
#[repr(C)]
pub struct ProcState {
    /// Owner pid, in its own pid namespace; 0 when free, `u32::MAX` while being set up or reclaimed.
    pub pid: AtomicU32,
    /// The inode of the owner's pid namespace (0: unknown). The real driver knows a process by its pid on
    /// the host; this one registers from inside its namespace, so a reader of another namespace translates
    /// ([`ProcState::pid_here`]).
    pub pid_ns: AtomicU32,
    /// Owner's start time, against pid reuse.
    pub start_time: AtomicU64,
    /// Device memory the process holds, per device.
    pub memory: [AtomicU64; MAX_DEVICES],
    /// Engine time the process's kernels used, per device.
    pub busy_ns: [AtomicU64; MAX_DEVICES],
    /// Contexts the process holds, per device.
    pub contexts: [AtomicU32; MAX_DEVICES],
    /// The process's checkpoint control words.
    pub checkpoint: CheckpointWords,
}

impl ProcState {
    /// The pid, as this process sees it (`view`), of the process owning the entry; `None` while the entry
    /// is free or claimed, or when its owner is of a pid namespace `view` does not see alive.
    pub fn pid_here(&self, view: &ProcView) -> Option<u32> {
        let pid = self.pid.load(Ordering::Acquire);
        if pid == 0 || pid == u32::MAX {
            return None;
        }
        view.here(self.pid_ns.load(Ordering::Acquire), pid, self.start_time.load(Ordering::Acquire))
    }

    /// Whether the entry belongs to the live process this process calls `pid`.
    pub fn belongs_to(&self, pid: u32, view: &ProcView) -> bool {
        let ns = self.pid_ns.load(Ordering::Acquire);
        if !pid_ns::is_own(ns) {
            return self.pid_here(view) == Some(pid);
        }
        self.pid.load(Ordering::Acquire) == pid && process::is_alive(pid, self.start_time.load(Ordering::Acquire))
    }

    /// True unless owner `pid` (its pid in its namespace) is certainly dead; the kernel knows every
    /// process, so an owner of a namespace this process cannot see is left alive.
    fn may_live(&self, pid: u32, view: &ProcView) -> bool {
        let (ns, start) = (self.pid_ns.load(Ordering::Acquire), self.start_time.load(Ordering::Acquire));
        if pid_ns::is_own(ns) { process::is_alive(pid, start) } else { view.alive(ns, pid, &|s| s == start) }
    }
}

/// Control words of the driver's process checkpoint API (`cuCheckpointProcess*`) for one process: a
/// requester in another process writes a request and sleeps on `done`; the process's control thread sleeps
/// on `request`, carries it out and answers. The driver side is simcuda's `checkpoint` module.
#[repr(C)]
pub struct CheckpointWords {
    /// `CU_PROCESS_STATE_*` of the process.
    pub state: AtomicU32,
    /// Thread id of the process's control thread (the "restore thread"); 0 until it runs.
    pub thread: AtomicU32,
    /// Pid of the requester talking to the process now; 0 when none. Serializes requesters.
    pub owner: AtomicU32,
    /// Latest request, `sequence << 8 | operation`; the futex word the control thread sleeps on.
    pub request: AtomicU32,
    /// Argument of the latest request (the lock's timeout in milliseconds).
    pub argument: AtomicU32,
    /// The request word of the last request carried out; the futex word requesters sleep on.
    pub done: AtomicU32,
    /// Result code (`CUresult`) of the last request carried out.
    pub result: AtomicU32,
    _pad: u32,
}

impl CheckpointWords {
    /// Back to a fresh process's values (RUNNING, no control thread, no request).
    fn reset(&self) {
        for w in [&self.state, &self.thread, &self.owner, &self.request, &self.argument, &self.done, &self.result] {
            w.store(0, Ordering::Relaxed);
        }
    }
}

#[repr(C)]
struct Layout {
    header: Header,
    devices: [DeviceState; MAX_DEVICES],
    procs: [ProcState; MAX_PROCS],
}

/// A process's mapping of the state file.
pub struct SharedState {
    map: memmap2::MmapMut,
    me: usize,
    devices: usize,
}

/// A state file that cannot be used, with the reason.
#[derive(Debug)]
pub struct StateError(pub String);

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Monotonic nanoseconds, comparable between processes of one machine.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into our timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl SharedState {
    /// Opens (creating if needed) the state file named by `config` and registers this process in it.
    /// With `register` false (NVML readers) the process only observes.
    pub fn open(config: &Config, register: bool) -> Result<SharedState, StateError> {
        let path = &config.state_path;
        let fail = |what: &str, e: std::io::Error| StateError(format!("simgpu: state file {path}: {what}: {e}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|e| fail("cannot open (set SIMGPU_STATE to a writable path)", e))?;
        let _lock = FileLock::new(&file).map_err(|e| fail("cannot lock", e))?;
        let size = std::mem::size_of::<Layout>() as u64;
        let len = file.metadata().map_err(|e| fail("cannot stat", e))?.len();
        let fresh = len == 0;
        if fresh {
            file.set_len(size).map_err(|e| fail("cannot size", e))?;
        } else if len != size {
            return Err(StateError(format!(
                "simgpu: state file {path} has {len} bytes, a version-{VERSION} state file has {size}: it belongs to \
                 another simgpu version or is corrupt; remove it (no simulated program may be running) or set SIMGPU_STATE"
            )));
        }
        // SAFETY: the file is ours (0600), sized to the layout, and only ever accessed through atomics.
        let map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| fail("cannot map", e))?;
        let mut state = SharedState { map, me: usize::MAX, devices: config.devices.len() };
        let header = &state.layout().header;
        if fresh {
            state.initialize(config);
        } else {
            let magic = header.magic.load(Ordering::Acquire);
            if magic != MAGIC || header.version != VERSION || header.layout_size != size as u32 {
                return Err(StateError(format!(
                    "simgpu: state file {path} is not a version-{VERSION} simgpu state file (magic {magic:#x}, version {}); \
                     remove it (no simulated program may be running) or set SIMGPU_STATE",
                    header.version
                )));
            }
            if header.fingerprint != config.fingerprint() || header.device_count as usize != config.devices.len() {
                state.reclaim_dead();
                if state.live_processes() > 0 {
                    return Err(StateError(format!(
                        "simgpu: state file {path} is in use by processes configured with a different device list \
                         (SIMGPU_DEVICES / SIMGPU_MEMORY / SIMGPU_SM_COUNT / SIMGPU_CONTEXT_MEMORY); use the same \
                         settings or another SIMGPU_STATE"
                    )));
                }
                state.initialize(config);
            }
        }
        if register {
            state.register()?;
        }
        Ok(state)
    }

    fn initialize(&mut self, config: &Config) {
        let size = std::mem::size_of::<Layout>();
        self.map[..size].fill(0);
        let l = self.layout_mut();
        l.header.version = VERSION;
        l.header.layout_size = size as u32;
        l.header.device_count = config.devices.len() as u32;
        l.header.max_procs = MAX_PROCS as u32;
        l.header.fingerprint = config.fingerprint();
        for d in &config.devices {
            l.devices[d.ordinal as usize].total_memory.store(d.total_memory, Ordering::Relaxed);
        }
        l.header.magic.store(MAGIC, Ordering::Release);
    }

    fn layout(&self) -> &Layout {
        // SAFETY: the mapping is exactly size_of::<Layout>() bytes, page-aligned, and Layout is plain atomics
        // and integers for which any bit pattern is valid.
        unsafe { &*(self.map.as_ptr() as *const Layout) }
    }

    fn layout_mut(&mut self) -> &mut Layout {
        // SAFETY: as in `layout`; `&mut self` makes this the only reference made through this mapping.
        unsafe { &mut *(self.map.as_mut_ptr() as *mut Layout) }
    }

    fn register(&mut self) -> Result<(), StateError> {
        self.reclaim_dead();
        let pid = process::own_pid();
        let start = process::start_time(pid).unwrap_or(0);
        for (i, p) in self.layout().procs.iter().enumerate() {
            // Set up under `u32::MAX`, which everybody skips: the pid is never read with another namespace.
            if p.pid.compare_exchange(0, u32::MAX, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                p.checkpoint.reset();
                p.start_time.store(start, Ordering::Release);
                p.pid_ns.store(pid_ns::own(), Ordering::Release);
                p.pid.store(pid, Ordering::Release);
                self.me = i;
                return Ok(());
            }
        }
        Err(StateError(format!("simgpu: more than {MAX_PROCS} processes are using the simulated GPUs")))
    }

    /// Number of devices in the file.
    pub fn device_count(&self) -> usize {
        self.devices
    }

    /// Machine-wide state of device `ordinal`.
    pub fn device(&self, ordinal: usize) -> &DeviceState {
        &self.layout().devices[ordinal]
    }

    /// This process's entry (only after registering).
    pub fn me(&self) -> Option<&ProcState> {
        self.layout().procs.get(self.me)
    }

    /// Every registered, live-looking process entry.
    pub fn processes(&self) -> impl Iterator<Item = &ProcState> {
        self.layout().procs.iter().filter(|p| {
            let pid = p.pid.load(Ordering::Acquire);
            pid != 0 && pid != u32::MAX
        })
    }

    /// The live registered entry of the process this process calls `pid` (registered with its current
    /// start time; of any pid namespace this process sees).
    pub fn process(&self, pid: u32) -> Option<&ProcState> {
        let view = ProcView::new();
        self.processes().find(|p| p.belongs_to(pid, &view))
    }

    fn live_processes(&self) -> usize {
        self.processes().count()
    }

    /// Takes `bytes` of device memory for this process; false when the device has not that much free.
    /// Usage of dead processes is reclaimed before giving up.
    pub fn reserve(&self, ordinal: usize, bytes: u64) -> bool {
        for attempt in 0..2 {
            let used = &self.device(ordinal).used_memory;
            let total = self.device(ordinal).total_memory.load(Ordering::Relaxed);
            let ok = used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| u.checked_add(bytes).filter(|&n| n <= total))
                .is_ok();
            if ok {
                if let Some(me) = self.me() {
                    me.memory[ordinal].fetch_add(bytes, Ordering::AcqRel);
                }
                return true;
            }
            if attempt == 0 && self.reclaim_dead() == 0 {
                return false;
            }
        }
        false
    }

    /// Returns `bytes` of device memory taken with [`SharedState::reserve`].
    pub fn release(&self, ordinal: usize, bytes: u64) {
        saturating_sub(&self.device(ordinal).used_memory, bytes);
        if let Some(me) = self.me() {
            saturating_sub(&me.memory[ordinal], bytes);
        }
    }

    /// Releases everything held by processes that died without cleaning up; returns how many were found.
    pub fn reclaim_dead(&self) -> usize {
        let mut found = 0;
        let view = ProcView::new();
        for p in &self.layout().procs {
            let pid = p.pid.load(Ordering::Acquire);
            if pid == 0 || pid == u32::MAX || p.may_live(pid, &view) {
                continue;
            }
            // Claim the entry so two reclaimers never subtract the same bytes twice.
            if p.pid.compare_exchange(pid, u32::MAX, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                continue;
            }
            self.clear_entry(p);
            found += 1;
        }
        found
    }

    /// Gives an entry's device memory back to its devices and frees the entry.
    fn clear_entry(&self, p: &ProcState) {
        for d in 0..self.devices {
            let bytes = p.memory[d].swap(0, Ordering::AcqRel);
            saturating_sub(&self.device(d).used_memory, bytes);
            p.busy_ns[d].store(0, Ordering::Relaxed);
            p.contexts[d].store(0, Ordering::Relaxed);
        }
        p.checkpoint.reset();
        p.start_time.store(0, Ordering::Relaxed);
        p.pid_ns.store(0, Ordering::Relaxed);
        p.pid.store(0, Ordering::Release);
    }

    /// Unregisters this process, returning whatever it still holds (the driver calls this at exit).
    pub fn unregister(&self) {
        if let Some(me) = self.me() {
            let pid = me.pid.load(Ordering::Acquire);
            if pid == process::own_pid()
                && me.pid.compare_exchange(pid, u32::MAX, Ordering::AcqRel, Ordering::Relaxed).is_ok()
            {
                self.clear_entry(me);
            }
        }
    }

    /// Adds `ns` of kernel time, run by this process, to device `ordinal`'s counters.
    pub fn record_busy(&self, ordinal: usize, ns: u64, end_ns: u64) {
        let d = self.device(ordinal);
        d.busy_ns.fetch_add(ns, Ordering::Relaxed);
        d.kernels.fetch_add(1, Ordering::Relaxed);
        let epoch = end_ns / UTIL_BUCKET_NS;
        let b = &d.util[(epoch % UTIL_BUCKETS as u64) as usize];
        let seen = b.epoch.load(Ordering::Acquire);
        if seen != epoch && b.epoch.compare_exchange(seen, epoch, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            b.busy_ns.store(ns, Ordering::Release);
        } else {
            b.busy_ns.fetch_add(ns, Ordering::AcqRel);
        }
        if let Some(me) = self.me() {
            me.busy_ns[ordinal].fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Fraction of the last second (0..=100) the engine of device `ordinal` spent running kernels.
    pub fn utilization_percent(&self, ordinal: usize) -> u32 {
        let now = now_ns();
        let epoch = now / UTIL_BUCKET_NS;
        let oldest = epoch + 1 - UTIL_BUCKETS as u64;
        let busy: u64 = self
            .device(ordinal)
            .util
            .iter()
            .filter(|b| (oldest..=epoch).contains(&b.epoch.load(Ordering::Acquire)))
            .map(|b| b.busy_ns.load(Ordering::Acquire))
            .sum();
        let window = now - oldest * UTIL_BUCKET_NS;
        ((busy.saturating_mul(100)) / window.max(1)).min(100) as u32
    }
}

/// Subtracts without wrapping below zero.
fn saturating_sub(a: &AtomicU64, v: u64) {
    let _ = a.fetch_update(Ordering::AcqRel, Ordering::Acquire, |x| Some(x.saturating_sub(v)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &std::path::Path, devices: &str) -> Config {
        let path = dir.join("state").to_string_lossy().into_owned();
        let devices = devices.to_string();
        Config::from_lookup(move |k| match k {
            "SIMGPU_STATE" => Some(path.clone()),
            "SIMGPU_DEVICES" => Some(devices.clone()),
            _ => None,
        })
        .unwrap()
    }

    fn tempdir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("simgpu-state-test-{}-{}", std::process::id(), now_ns()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn reserve_respects_total_and_release_restores() {
        let dir = tempdir();
        let c = config(&dir, "small");
        let s = SharedState::open(&c, true).unwrap();
        let total = 4u64 << 30;
        assert!(s.reserve(0, total));
        assert!(!s.reserve(0, 1));
        s.release(0, total);
        assert_eq!(s.device(0).used_memory.load(Ordering::Relaxed), 0);
        assert!(s.reserve(0, 1));
        assert_eq!(s.me().unwrap().memory[0].load(Ordering::Relaxed), 1);
    }

    #[test]
    fn foreign_and_truncated_files_are_rejected() {
        let dir = tempdir();
        let c = config(&dir, "small");
        std::fs::write(&c.state_path, b"not a state file").unwrap();
        let e = SharedState::open(&c, true).err().unwrap();
        assert!(e.0.contains("corrupt"), "{}", e.0);
        let size = std::mem::size_of::<Layout>();
        std::fs::write(&c.state_path, vec![0xAB; size]).unwrap();
        let e = SharedState::open(&c, true).err().unwrap();
        assert!(e.0.contains(&format!("not a version-{VERSION}")), "{}", e.0);
    }

    #[test]
    fn different_device_list_reinitializes_only_when_unused() {
        let dir = tempdir();
        let a = SharedState::open(&config(&dir, "small"), true).unwrap();
        let e = SharedState::open(&config(&dir, "h100"), true).err().unwrap();
        assert!(e.0.contains("different device list"), "{}", e.0);
        drop(a);
    }

    #[test]
    fn a_process_entry_starts_with_fresh_checkpoint_words() {
        let dir = tempdir();
        let c = config(&dir, "small");
        let s = SharedState::open(&c, true).unwrap();
        let pid = process::own_pid();
        let me = s.process(pid).expect("registered and alive");
        me.checkpoint.state.store(2, Ordering::Relaxed);
        me.checkpoint.thread.store(77, Ordering::Relaxed);
        me.checkpoint.request.store(0x301, Ordering::Relaxed);
        s.unregister();
        assert!(s.process(pid).is_none(), "an unregistered process has no entry");
        let again = SharedState::open(&c, true).unwrap();
        let me = again.me().unwrap();
        assert_eq!(me.checkpoint.state.load(Ordering::Relaxed), 0, "RUNNING");
        assert_eq!(me.checkpoint.thread.load(Ordering::Relaxed), 0);
        assert_eq!(me.checkpoint.request.load(Ordering::Relaxed), me.checkpoint.done.load(Ordering::Relaxed));
    }

    #[test]
    fn unregister_returns_memory() {
        let dir = tempdir();
        let c = config(&dir, "small");
        let s = SharedState::open(&c, true).unwrap();
        assert!(s.reserve(0, 1 << 20));
        s.unregister();
        assert_eq!(s.device(0).used_memory.load(Ordering::Relaxed), 0);
    }
}
