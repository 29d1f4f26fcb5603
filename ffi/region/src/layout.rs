//! The region's binary layout (version [`VERSION`]): `#[repr(C)]` atomics shared by processes that may run
//! different Tessera versions, and the lock-free operations on them. The protocol is described in
//! [`crate`].

pub use crate::timeline::Timeline;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

/// `TESSRGN1` in little-endian byte order.
pub const MAGIC: u64 = u64::from_le_bytes(*b"TESSRGN1");
/// Layout version; bump on any change to the structures below (or to what their bytes mean: since version
/// 11 a managed vGPU's configuration area is its own file, see [`CONF_MAGIC`]).
pub const VERSION: u32 = 11;
/// Devices per vGPU slot.
pub const MAX_DEVICES: usize = 16;
/// vGPU slots in a region.
pub const MAX_VGPUS: usize = 64;
/// Bytes of a vGPU name, NUL-padded.
pub const NAME_LEN: usize = 64;
/// A limit meaning "no quota on this device".
pub const UNLIMITED: u64 = u64::MAX;

// The quota parser of `tessera_ffi::units` keeps its own copies of these two (that crate cannot name this
// one): a quota stays below the no-limit marker and names only the region's devices.
const _: () = assert!(tessera_ffi::units::MAX_QUOTA == UNLIMITED - 1);
const _: () = assert!(tessera_ffi::units::MAX_DEVICES == MAX_DEVICES);

/// The bit of a slot's owner word ([`owner`]; and of [`VgpuLive::measuring`]) that marks it claimed
/// (being filled or cleared) by the process the other bits name (see [`super::reclaim::claim_tag`]). Linux
/// pids stay below `PID_MAX_LIMIT` (2^22), so no pid has it.
pub const CLAIMING: u32 = 1 << 31;

/// True when `word` (a slot's owner word, or [`VgpuLive::measuring`]) is a claiming tag.
pub fn is_tag(word: u32) -> bool {
    word & CLAIMING != 0
}

/// Slot states.
pub mod state {
    /// Unused.
    pub const FREE: u32 = 0;
    /// Named and configured.
    pub const READY: u32 = 2;
}

/// Region header.
#[repr(C)]
pub struct Header {
    /// [`MAGIC`], written last when the region is created.
    pub magic: AtomicU64,
    /// [`VERSION`].
    pub version: u32,
    /// `size_of::<Region>()` of the writer.
    pub layout_size: u32,
    /// [`MAX_DEVICES`] of the writer.
    pub max_devices: u32,
    /// [`MAX_VGPUS`] of the writer.
    pub max_vgpus: u32,
    /// [`PROCS_PER_VGPU`] of the writer.
    pub max_procs: u32,
    /// Reserved, zero.
    pub reserved: u32,
}

/// Priorities (`VgpuConfig::priority`).
pub use tessera_policy::priority;

/// Bits of `VgpuConfig::flags`.
pub mod flags {
    /// The vGPU never exceeds its share, and its idle share is not given to others.
    pub const CAP: u32 = 1;
    /// Tensor cores off: TF32 disabled and cuBLAS math modes forced to pedantic.
    pub const TENSOR_CORES_OFF: u32 = 2;
    /// Suspended: launches wait at the next kernel boundary.
    pub const SUSPENDED: u32 = 4;
    /// Configured by the daemon (tokens are granted by it, not by the processes, device time is charged by
    /// it from the vGPUs' timelines, and the live area is a file of its own).
    pub const MANAGED: u32 = 8;
    /// Soft memory mode: device memory is virtualized (pooled, defragmented, swapped to host memory by the
    /// processes, see [`super::Pager`]). Processes read it when they join; in a [`super::ProcSlot`]'s
    /// `flags`, the mode the process took.
    pub const SOFT: u32 = 16;
    /// Suspended by the daemon's audit (set with [`SUSPENDED`]): its processes took more device time than
    /// the daemon granted its vGPU; `tessera vgpu resume` lifts it. Written by the daemon alone.
    pub const AUDIT: u32 = 32;
    /// No other vGPU on the vGPU's device has had work lately (written by the daemon alone, every tick):
    /// its launches may be measured a batch at a time, since no other vGPU's kernel can run between them.
    /// A daemon that never sets it leaves every launch measured on its own.
    pub const ALONE: u32 = 64;
}

/// Default queued-but-unfinished device work a vGPU may have (1 ms), read for an unset window (0): the
/// rule the shim and the daemon share, defined in `tessera-policy`.
pub use tessera_policy::DEFAULT_WINDOW_NS;

/// Bytes of one area of a vGPU slot ([`VgpuConfig`] or [`VgpuLive`]), and the alignment (in the file) of
/// each: a multiple of every page size Linux uses (4, 16 and 64 KiB), so that an area can be mapped on
/// its own, from its own file, with its own permissions.
pub const AREA: usize = 64 * 1024;
/// Process slots per vGPU: as many as [`VgpuLive`] holds within its [`AREA`] (each slot carries
/// [`SoftStats`] since layout version 5, its window share since version 6 and its pending reservations
/// since version 7, its pid namespace since version 10).
pub const PROCS_PER_VGPU: usize = 100;

/// A vGPU's configuration: written by whoever configures the vGPU (the daemon for a managed one), only
/// read by its processes — a managed vGPU's processes map it read-only.
#[repr(C)]
pub struct VgpuConfig {
    /// [`state`] value.
    pub state: AtomicU32,
    /// Reserved, zero.
    pub reserved: u32,
    /// NUL-padded name.
    pub name: [u8; NAME_LEN],
    /// Quota in bytes per device ([`UNLIMITED`] for none).
    pub limit: [AtomicU64; MAX_DEVICES],
    /// Device ordinal the vGPU's share applies to.
    pub device: AtomicU32,
    /// Share of the device in percent (0-100).
    pub share: AtomicU32,
    /// [`priority`] value.
    pub priority: AtomicU32,
    /// [`flags`] bits.
    pub flags: AtomicU32,
    /// Most queued-but-unfinished device time allowed (0: [`DEFAULT_WINDOW_NS`]).
    pub window_ns: AtomicU64,
}

/// The compute-share state of one vGPU, written by its processes (and by the daemon, which grants).
#[repr(C)]
pub struct Sched {
    /// Futex word: incremented whenever tokens are granted or the state changes.
    pub epoch: AtomicU32,
    /// Launches waiting for tokens right now.
    pub waiters: AtomicU32,
    /// Futex word the daemon sleeps on (with the other vGPUs' of the device): a process increments it and
    /// wakes the daemon when a launch must wait, or when a `high` vGPU starts or stops having work.
    pub bell: AtomicU32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Nanoseconds of device time the vGPU may still queue (negative: in debt).
    pub tokens: AtomicI64,
    /// Estimated device time queued and not finished yet.
    pub inflight_ns: AtomicI64,
    /// Last launch (monotonic ns), for demand detection.
    pub last_launch_ns: AtomicU64,
    /// Kernel launches (graph launches count once).
    pub launches: AtomicU64,
    /// Device time the vGPU's work has taken (charged by the daemon for a managed vGPU, measured by the
    /// processes otherwise).
    pub device_ns: AtomicU64,
    /// Time launches have spent waiting for tokens.
    pub wait_ns: AtomicU64,
    /// When (monotonic ns) a process in standalone mode (`TESSERA_COMPUTE_SHARE`, no daemon) last added
    /// its share's worth of time to `tokens`; advanced by compare-and-swap, so concurrent refills never
    /// count the same interval twice.
    pub last_refill_ns: AtomicU64,
    /// Device time per launch (kernels, graphs) as the daemon last charged it (0: not known yet), which a
    /// managed vGPU's launches take as their estimate.
    pub charged_ns: [AtomicI64; 2],
}

impl Sched {
    /// Announces a change of the vGPU's scheduling state (tokens granted, a hold or suspension changed):
    /// increments `epoch` and wakes the launches sleeping on it, with no system call when none is.
    ///
    /// Both sides are sequentially consistent, which is what skipping the wake-up needs: a waiting
    /// launch reads `epoch`, checks the state, adds itself to `waiters` and sleeps only while `epoch` still
    /// has the value it read (the futex compares atomically). In the single order of these operations,
    /// either its `waiters` increment comes before this load of `waiters` (then it is woken), or this
    /// `epoch` increment comes before its increment and so before the futex's comparison (then it does
    /// not sleep). With `Release`/`Acquire` alone the load of `waiters` could be ordered before the
    /// increment of `epoch`, and a launch could sleep through a grant until its liveness timeout.
    pub fn wake_waiters(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            crate::futex::wake_all(&self.epoch);
        }
    }
}

/// Scheduling state of one device.
#[repr(C)]
pub struct DeviceSched {
    /// Until when (monotonic ns) a `high` vGPU counts as having work on the device (set by the daemon for
    /// managed vGPUs, by the `high` processes themselves otherwise).
    pub high_until_ns: AtomicU64,
    /// Latest kernel end (monotonic ns) the daemon has charged on the device.
    pub charged_end_ns: AtomicU64,
}

/// The daemon managing the region, if any.
#[repr(C)]
pub struct Daemon {
    /// Its pid (0: no daemon has attached).
    pub pid: AtomicU32,
    /// The inode of its pid namespace ([`super::pid_ns`]; 0: unknown): a process of another namespace
    /// cannot look its pid up.
    pub pid_ns: AtomicU32,
    /// Last time (monotonic ns) it refilled tokens.
    pub heartbeat_ns: AtomicU64,
}

/// `TESSVGP1` in little-endian byte order: the start of a vGPU's live file.
pub const LIVE_MAGIC: u64 = u64::from_le_bytes(*b"TESSVGP1");

/// What a vGPU's processes write: usage, the token bucket, process slots and the timeline of finished
/// kernels. For a managed vGPU it lives in a file of its own (the region file's path with `.vgpuNN`
/// appended, owned by the vGPU's user, mode 0600), mapped over this area by the daemon and the vGPU's
/// processes alone; for an unmanaged one, in the region file itself.
#[repr(C)]
pub struct VgpuLive {
    /// [`LIVE_MAGIC`] once the daemon has initialized a live file (0 inside the region file).
    pub magic: AtomicU64,
    /// [`VERSION`] of the live file's writer.
    pub version: u32,
    /// The slot index the live file belongs to.
    pub slot: u32,
    /// What a context costs on each device, as the first process of the vGPU to create one there measured
    /// it, encoded by [`context_cost`] (0: not measured yet): later contexts are reserved at that cost
    /// before they are created.
    pub context_cost: [AtomicU64; MAX_DEVICES],
    /// Peak of the vGPU's usage ([`VgpuSlot::used`]) per device.
    pub peak: [AtomicU64; MAX_DEVICES],
    /// When processes of this vGPU were last checked for having died (monotonic ns).
    pub last_reclaim_ns: AtomicU64,
    /// Every process slot ever claimed since the vGPU's usage last started over lies below this index, so
    /// that summing usage reads only those (it only grows while processes may be attached).
    pub procs_hwm: AtomicU32,
    /// Claiming tag ([`super::reclaim::claim_tag`]) of the process measuring a context's cost on a device
    /// whose cost is not known yet (0: none): such first contexts are created one at a time.
    pub measuring: AtomicU32,
    /// Compute share.
    pub sched: Sched,
    /// Requests to the processes of a soft vGPU, and the memory they wait for.
    pub pager: Pager,
    /// The vGPU's processes.
    pub procs: [ProcSlot; PROCS_PER_VGPU],
    /// Kernels of the vGPU that finished, for the daemon to charge.
    pub timeline: Timeline,
}

/// Requests to a soft vGPU's processes (each runs a pager thread waiting on `seq`), and what the memory
/// broker needs to know of them.
#[repr(C)]
pub struct Pager {
    /// Futex word: bumped and woken by the daemon with every request below.
    pub seq: AtomicU32,
    /// Bumped by the daemon: every process of the vGPU swaps all its pages out.
    pub evict_seq: AtomicU32,
    /// Bumped by the daemon (`tessera vgpu defrag`): every process defragments.
    pub defrag_seq: AtomicU32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Swap-out time of other vGPUs the daemon charged to this one (it asked for the memory).
    pub swap_charged_ns: AtomicU64,
}

/// A request of the [`Pager`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagerRequest {
    /// Swap every page out (`evict_seq`, carried out in `evicted_seq`).
    Evict,
    /// Defragment (`defrag_seq`, carried out in `defragged_seq`).
    Defrag,
}

impl Pager {
    /// The counter of `request`'s numbers.
    pub fn counter(&self, request: PagerRequest) -> &AtomicU32 {
        match request {
            PagerRequest::Evict => &self.evict_seq,
            PagerRequest::Defrag => &self.defrag_seq,
        }
    }

    /// Makes a new `request` of every process of the vGPU and wakes their pager threads; returns its
    /// number, which each process stores in its [`SoftStats`] once it has carried it out.
    pub fn request(&self, request: PagerRequest) -> u32 {
        let number = self.counter(request).fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        self.seq.fetch_add(1, Ordering::Release);
        crate::futex::wake_all(&self.seq);
        number
    }
}

/// True when `done` (a process's `evicted_seq` or `defragged_seq`) is request `target` or a later one.
/// Request numbers wrap, so "later" means less than 2³¹ requests ahead.
pub fn seq_reached(done: u32, target: u32) -> bool {
    done.wrapping_sub(target) as i32 >= 0
}

/// Soft-mode memory of one process, written by that process only (all bytes are physical device memory
/// unless said otherwise).
#[repr(C)]
pub struct SoftStats {
    /// Bytes of device memory holding the process's live pages.
    pub resident: AtomicU64,
    /// Bytes of device memory the process holds but no live page uses (free page slots).
    pub pooled: AtomicU64,
    /// The part of `pooled` stuck in chunks that also hold live pages (returned only by defragmentation).
    pub fragmented: AtomicU64,
    /// Bytes of live pages currently in host memory.
    pub swapped: AtomicU64,
    /// Total time spent copying pages out.
    pub swap_out_ns: AtomicU64,
    /// Total time spent copying pages in.
    pub swap_in_ns: AtomicU64,
    /// Total bytes ever copied out.
    pub swapped_out_bytes: AtomicU64,
    /// Last [`Pager::evict_seq`] the process has carried out.
    pub evicted_seq: AtomicU32,
    /// Last [`Pager::defrag_seq`] the process has carried out.
    pub defragged_seq: AtomicU32,
}

impl SoftStats {
    /// The number of the last `request` the process has carried out.
    pub fn done(&self, request: PagerRequest) -> &AtomicU32 {
        match request {
            PagerRequest::Evict => &self.evicted_seq,
            PagerRequest::Defrag => &self.defragged_seq,
        }
    }

    /// Zeroes every figure and sets the request numbers to `evicted` and `defragged`: a slot freed or
    /// claimed keeps nothing of the process that had it before.
    pub fn reset(&self, evicted: u32, defragged: u32) {
        for figure in [
            &self.resident,
            &self.pooled,
            &self.fragmented,
            &self.swapped,
            &self.swap_out_ns,
            &self.swap_in_ns,
            &self.swapped_out_bytes,
        ] {
            figure.store(0, Ordering::Relaxed);
        }
        self.evicted_seq.store(evicted, Ordering::Relaxed);
        self.defragged_seq.store(defragged, Ordering::Release);
    }
}

/// A vGPU's soft-mode memory: its attached processes' [`SoftStats`] summed ([`VgpuSlot::soft_totals`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoftTotals {
    /// Device memory holding live pages.
    pub resident: u64,
    /// Device memory held but unused.
    pub pooled: u64,
    /// The part of `pooled` only defragmentation returns.
    pub fragmented: u64,
    /// Live pages in host memory.
    pub swapped: u64,
    /// Time spent copying pages out.
    pub swap_out_ns: u64,
    /// Time spent copying pages in.
    pub swap_in_ns: u64,
}

impl SoftTotals {
    /// Device memory the processes hold: `resident + pooled`.
    pub fn held(&self) -> u64 {
        self.resident.saturating_add(self.pooled)
    }

    /// Fragmentation in percent, rounded: `fragmented / held`, 0 when nothing is held (at most 100, even
    /// from figures read while a process was updating them).
    pub fn fragmentation_pct(&self) -> u32 {
        match self.held() {
            0 => 0,
            held => ((self.fragmented.min(held) as u128 * 100 + held as u128 / 2) / held as u128) as u32,
        }
    }
}

/// One vGPU slot: its configuration and its live state, each in an [`AREA`] of its own.
#[repr(C)]
pub struct VgpuSlot {
    /// Name, quota and compute-share settings.
    pub config: VgpuConfig,
    config_pad: [u8; AREA - std::mem::size_of::<VgpuConfig>()],
    /// Usage and compute-share state.
    pub live: VgpuLive,
    live_pad: [u8; AREA - std::mem::size_of::<VgpuLive>()],
}

impl VgpuConfig {
    /// The window in force: `window_ns`, or [`DEFAULT_WINDOW_NS`] while it is unset.
    pub fn window(&self) -> i64 {
        match self.window_ns.load(Ordering::Relaxed) {
            0 => DEFAULT_WINDOW_NS as i64,
            w => w.min(i64::MAX as u64) as i64,
        }
    }
}

impl VgpuSlot {
    /// The slot's name, without its NUL padding.
    pub fn name_bytes(&self) -> &[u8] {
        let end = self.config.name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        &self.config.name[..end]
    }

    /// The slot's state ([`state`] value).
    pub fn state(&self) -> u32 {
        self.config.state.load(Ordering::Acquire)
    }

    /// The slot's [`flags`].
    pub fn flags(&self) -> u32 {
        self.config.flags.load(Ordering::Acquire)
    }

    /// The compute-share state.
    pub fn sched(&self) -> &Sched {
        &self.live.sched
    }

    /// The processes attached now, with their slot index and pid (dead ones count until reclaimed).
    pub fn attached(&self) -> impl Iterator<Item = (usize, u32, &ProcSlot)> + '_ {
        self.live.procs.iter().enumerate().filter_map(|(i, p)| p.attached_pid().map(|pid| (i, pid, p)))
    }

    /// Bytes in use on device `dev` by every process of the vGPU: the sum of its process slots' `used`
    /// (sequentially consistent loads, see the module documentation); 0 for a device out of range.
    pub fn used(&self, dev: usize) -> u64 {
        self.sum(dev, false)
    }

    /// What a new reservation on device `dev` must fit beside: [`VgpuSlot::used`] plus every slot's
    /// reservations in progress (`pending`, on whichever device: counting them everywhere errs on the side
    /// of refusing).
    pub fn charged(&self, dev: usize) -> u64 {
        self.sum(dev, true)
    }

    fn sum(&self, dev: usize, with_pending: bool) -> u64 {
        if dev >= MAX_DEVICES {
            return 0;
        }
        let hwm = (self.live.procs_hwm.load(Ordering::SeqCst) as usize).min(PROCS_PER_VGPU);
        self.live.procs[..hwm].iter().fold(0u64, |sum, p| {
            // `pending` first: a reservation moving from `pending` to `used` (added there first) is seen
            // at least once.
            let pending = if with_pending { p.pending.load(Ordering::SeqCst) } else { 0 };
            sum.saturating_add(pending).saturating_add(p.used[dev].load(Ordering::SeqCst))
        })
    }

    /// Device memory the vGPU's attached processes wait for on device `dev` (soft mode): the sum of their
    /// slots' `wanted` for that device.
    pub fn wanted(&self, dev: usize) -> u64 {
        self.attached()
            .filter_map(|(_, _, p)| wanted::unpack(p.wanted.load(Ordering::Acquire)))
            .filter(|&(d, _)| d == dev)
            .fold(0u64, |sum, (_, bytes)| sum.saturating_add(bytes))
    }

    /// Whether any process is attached now (see [`VgpuSlot::attached`]).
    pub fn has_processes(&self) -> bool {
        self.attached().next().is_some()
    }

    /// The soft-mode memory of the processes attached now, summed (hard-mode processes add nothing).
    pub fn soft_totals(&self) -> SoftTotals {
        let mut t = SoftTotals::default();
        for (_, _, p) in self.attached() {
            let s = &p.soft;
            t.resident = t.resident.saturating_add(s.resident.load(Ordering::Acquire));
            t.pooled = t.pooled.saturating_add(s.pooled.load(Ordering::Acquire));
            t.fragmented = t.fragmented.saturating_add(s.fragmented.load(Ordering::Acquire));
            t.swapped = t.swapped.saturating_add(s.swapped.load(Ordering::Acquire));
            t.swap_out_ns = t.swap_out_ns.saturating_add(s.swap_out_ns.load(Ordering::Acquire));
            t.swap_in_ns = t.swap_in_ns.saturating_add(s.swap_in_ns.load(Ordering::Acquire));
        }
        t
    }

    /// The attached soft-mode processes (slot index, pid) that have not carried out `request` number
    /// `target` yet.
    pub fn lagging(&self, request: PagerRequest, target: u32) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.attached()
            .filter(move |(_, _, p)| p.is_soft() && !seq_reached(p.soft.done(request).load(Ordering::Acquire), target))
            .map(|(i, pid, _)| (i, pid))
    }
}

/// The encoding of [`VgpuLive::context_cost`]: 0 while unknown, `u64::MAX` for a context measured as
/// costing nothing (NVML unavailable), the cost in bytes otherwise.
pub mod context_cost {
    /// The cost a stored word says: `None` while unknown.
    pub fn decode(word: u64) -> Option<u64> {
        match word {
            0 => None,
            u64::MAX => Some(0),
            c => Some(c),
        }
    }

    /// The word that stores `cost`.
    pub fn encode(cost: u64) -> u64 {
        if cost == 0 { u64::MAX } else { cost }
    }
}

/// `name` NUL-padded to [`NAME_LEN`] bytes; `None` when it is empty, holds a NUL or leaves no room for
/// the terminating NUL.
pub fn encode_name(name: &str) -> Option<[u8; NAME_LEN]> {
    let b = name.as_bytes();
    if b.is_empty() || b.len() >= NAME_LEN || b.contains(&0) {
        return None;
    }
    let mut out = [0u8; NAME_LEN];
    out[..b.len()].copy_from_slice(b);
    Some(out)
}

/// A process slot's owner word ([`ProcSlot::owner`]): the low 32 bits are the owner's pid (0: free) or a
/// claiming tag ([`super::reclaim::claim_tag`]) while the slot is filled or reclaimed; the high 32 bits the
/// inode of the pid namespace that pid is of ([`super::pid_ns`]; 0: unknown). One word, so that a pid is
/// never read with another process's namespace.
pub mod owner {
    /// The word of pid or tag `word` of namespace `ns`.
    pub fn pack(ns: u32, word: u32) -> u64 {
        (ns as u64) << 32 | word as u64
    }

    /// The pid or tag of an owner word (0: free).
    pub fn word(owner: u64) -> u32 {
        owner as u32
    }

    /// The pid namespace of an owner word.
    pub fn ns(owner: u64) -> u32 {
        (owner >> 32) as u32
    }
}

/// One process attached to a vGPU, with what it holds (so a dead process's bytes can be reclaimed).
#[repr(C)]
pub struct ProcSlot {
    /// Who holds the slot: its pid or claiming tag and pid namespace ([`owner`]); 0 when free.
    pub owner: AtomicU64,
    /// [`flags::SOFT`] when the process took soft memory mode as it joined (written when the slot is
    /// claimed, before the pid is published; the process keeps that mode for its life).
    pub flags: AtomicU32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Owner's start time (from `/proc/PID/stat`), against pid reuse.
    pub start_time: AtomicU64,
    /// Bytes the process holds per device: the source of truth of its vGPU's usage.
    pub used: [AtomicU64; MAX_DEVICES],
    /// Estimated device time of the process's launches queued and not finished yet (its part of the vGPU's
    /// `inflight_ns`), so that what a process killed mid-launch had in the window can be given back.
    pub inflight_ns: AtomicI64,
    /// Bytes of the process's reservations in progress, on any device (see the module documentation):
    /// counted against new reservations, never as usage.
    pub pending: AtomicU64,
    /// Soft mode: device memory the process waits for ([`wanted`] packs the device and the bytes; 0: none),
    /// set before it rings `sched.bell` and cleared when it got the memory or gave up. Its vGPU's want is
    /// the sum of its slots' ([`VgpuSlot::wanted`]), so a process killed while waiting leaves none behind.
    pub wanted: AtomicU64,
    /// Its soft-mode memory (zero in hard mode).
    pub soft: SoftStats,
}

impl ProcSlot {
    /// The owner's pid while a process is attached (not while the slot is free, claimed or reclaimed).
    pub fn attached_pid(&self) -> Option<u32> {
        match self.word() {
            0 => None,
            tag if is_tag(tag) => None,
            pid => Some(pid),
        }
    }

    /// The pid or claiming tag of the owner (0: free), in the owner's pid namespace ([`ProcSlot::ns`]).
    pub fn word(&self) -> u32 {
        owner::word(self.owner.load(Ordering::Acquire))
    }

    /// The pid namespace of the owner (0: unknown, or free).
    pub fn ns(&self) -> u32 {
        owner::ns(self.owner.load(Ordering::Acquire))
    }

    /// Stores pid or tag `word` of namespace `ns` as the owner (`Release`: what the owner wrote before
    /// is seen by whoever reads it).
    pub fn set_owner(&self, ns: u32, word: u32) {
        self.owner.store(owner::pack(ns, word), Ordering::Release);
    }

    /// Whether the process took soft memory mode when it joined.
    pub fn is_soft(&self) -> bool {
        self.flags.load(Ordering::Acquire) & flags::SOFT != 0
    }
}

/// A process's `wanted` word ([`ProcSlot::wanted`]): the device in the top 8 bits, the bytes in the rest.
pub mod wanted {
    const BYTE_BITS: u32 = 56;
    const BYTE_MASK: u64 = (1 << BYTE_BITS) - 1;

    /// The word for `bytes` (at least 1, at most 2^56 - 1) wanted on device `dev`.
    pub fn pack(dev: usize, bytes: u64) -> u64 {
        ((dev as u64 & 0xff) << BYTE_BITS) | bytes.clamp(1, BYTE_MASK)
    }

    /// The device and bytes of a word; `None` for 0 (nothing wanted).
    pub fn unpack(word: u64) -> Option<(usize, u64)> {
        (word != 0).then_some(((word >> BYTE_BITS) as usize, word & BYTE_MASK))
    }
}

/// The fixed records before the vGPU slots.
#[repr(C)]
pub struct Head {
    /// Header.
    pub header: Header,
    /// The managing daemon.
    pub daemon: Daemon,
    /// Per-device scheduling state.
    pub devices: [DeviceSched; MAX_DEVICES],
}

/// The whole region.
#[repr(C)]
pub struct Region {
    /// Header, daemon and devices (also reachable through `Deref`).
    pub head: Head,
    head_pad: [u8; AREA - std::mem::size_of::<Head>()],
    /// vGPU slots.
    pub vgpus: [VgpuSlot; MAX_VGPUS],
}

impl std::ops::Deref for Region {
    type Target = Head;
    fn deref(&self) -> &Head {
        &self.head
    }
}

/// Size of a version-7 region file.
pub const LAYOUT_SIZE: usize = std::mem::size_of::<Region>();

// Each area must hold its structure: a live area is mapped on its own, AREA bytes of its own file.
const _: () = assert!(std::mem::size_of::<VgpuLive>() <= AREA, "VgpuLive outgrew its AREA");
const _: () = assert!(std::mem::size_of::<VgpuConfig>() <= AREA, "VgpuConfig outgrew its AREA");
const _: () = assert!(std::mem::size_of::<Head>() <= AREA, "Head outgrew its AREA");

/// Offset in the region file of slot `index`'s [`VgpuConfig`] area.
pub const fn config_offset(index: usize) -> usize {
    AREA + index * 2 * AREA
}

/// `TESSCFG1` in little-endian byte order: the trailer of a managed vGPU's configuration file, which the
/// daemon maps over the slot's [`VgpuConfig`] area (see [`super::conf`]). The trailer lies in the area's
/// last [`CONF_TRAILER_LEN`] bytes, past the structure: the magic, then [`VERSION`] and the slot index
/// (`u32` each).
pub const CONF_MAGIC: u64 = u64::from_le_bytes(*b"TESSCFG1");
/// Bytes of a configuration file's trailer.
pub const CONF_TRAILER_LEN: usize = 16;
const _: () = assert!(std::mem::size_of::<VgpuConfig>() + CONF_TRAILER_LEN <= AREA, "no room for the trailer");

/// The name a managed slot has in the region file itself (its real one is in its configuration file):
/// bytes no vGPU name can be, so that no process finds it by name there.
pub const HIDDEN_NAME: [u8; NAME_LEN] = [0xff; NAME_LEN];

/// Offset in the region file of slot `index`'s [`VgpuLive`] area.
pub const fn live_offset(index: usize) -> usize {
    AREA + index * 2 * AREA + AREA
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_ones_are_refused() {
        let n = encode_name("team-a").unwrap();
        assert_eq!(&n[..7], b"team-a\0");
        assert!(encode_name("").is_none());
        assert!(encode_name(&"x".repeat(NAME_LEN)).is_none());
        assert!(encode_name("a\0b").is_none());
        assert!(encode_name(&"x".repeat(NAME_LEN - 1)).is_some());
    }

    /// A zeroed vGPU slot, leaked (all-zero is a valid value of every region structure).
    fn slot() -> &'static VgpuSlot {
        // SAFETY: VgpuSlot is integers and atomics, valid when zero.
        Box::leak(unsafe { Box::<VgpuSlot>::new_zeroed().assume_init() })
    }

    /// Attaches pid `pid` in process slot `i` of `v`, soft or not, holding `resident` and `pooled` bytes.
    fn proc(v: &VgpuSlot, i: usize, pid: u32, soft: bool, resident: u64, pooled: u64) -> &ProcSlot {
        let p = &v.live.procs[i];
        p.flags.store(if soft { flags::SOFT } else { 0 }, Ordering::Relaxed);
        p.soft.resident.store(resident, Ordering::Relaxed);
        p.soft.pooled.store(pooled, Ordering::Relaxed);
        p.set_owner(0, pid);
        p
    }

    #[test]
    fn soft_totals_sum_the_attached_processes_only() {
        let v = slot();
        let a = proc(v, 0, 10, true, 600, 300);
        a.soft.fragmented.store(100, Ordering::Relaxed);
        a.soft.swap_out_ns.store(5, Ordering::Relaxed);
        proc(v, 7, 11, true, 100, 0).soft.swapped.store(50, Ordering::Relaxed);
        proc(v, 8, u32::MAX, true, 1 << 40, 0);
        proc(v, 9, 0, true, 1 << 40, 0);
        let t = v.soft_totals();
        assert_eq!(
            t,
            SoftTotals { resident: 700, pooled: 300, fragmented: 100, swapped: 50, swap_out_ns: 5, swap_in_ns: 0 },
            "free and claimed slots count for nothing"
        );
        assert_eq!((t.held(), t.fragmentation_pct()), (1000, 10));
        assert_eq!(SoftTotals::default().fragmentation_pct(), 0, "nothing held");
        let odd = SoftTotals { resident: 1, pooled: 2, fragmented: 9, ..SoftTotals::default() };
        assert_eq!(odd.fragmentation_pct(), 100, "a torn read never exceeds 100%");
        assert_eq!(SoftTotals { pooled: 3, fragmented: 2, ..SoftTotals::default() }.fragmentation_pct(), 67);
    }

    #[test]
    fn requests_are_numbered_and_laggards_named() {
        let v = slot();
        let pager = &v.live.pager;
        let seq = pager.seq.load(Ordering::Relaxed);
        let n = pager.request(PagerRequest::Defrag);
        assert_eq!((n, pager.seq.load(Ordering::Relaxed)), (1, seq + 1));
        assert_eq!(pager.evict_seq.load(Ordering::Relaxed), 0, "only the request asked for");
        proc(v, 0, 10, true, 0, 0).soft.defragged_seq.store(1, Ordering::Release);
        proc(v, 1, 11, true, 0, 0);
        proc(v, 2, 12, false, 0, 0);
        assert_eq!(
            v.lagging(PagerRequest::Defrag, n).collect::<Vec<_>>(),
            [(1, 11)],
            "hard-mode processes are never waited for"
        );
        assert_eq!(v.lagging(PagerRequest::Evict, 0).next(), None, "request 0 was never made");
        pager.evict_seq.store(u32::MAX, Ordering::Relaxed);
        assert_eq!(pager.request(PagerRequest::Evict), 0, "numbers wrap");
        assert!(seq_reached(0, u32::MAX) && seq_reached(5, 5) && !seq_reached(u32::MAX, 0) && !seq_reached(4, 5));
    }

    #[test]
    fn a_vgpus_want_is_its_attached_processes_and_leaves_with_them() {
        let v = slot();
        proc(v, 0, 10, true, 0, 0).wanted.store(wanted::pack(1, 300), Ordering::Release);
        proc(v, 1, 11, true, 0, 0).wanted.store(wanted::pack(1, 200), Ordering::Release);
        proc(v, 2, 12, true, 0, 0).wanted.store(wanted::pack(0, 7), Ordering::Release);
        assert_eq!((v.wanted(0), v.wanted(1), v.wanted(2)), (7, 500, 0));
        // Killed while waiting: reclaiming its slot takes its want with it (a vGPU-wide counter kept it).
        let dead = &v.live.procs[1];
        dead.set_owner(0, CLAIMING | 11);
        assert_eq!(v.wanted(1), 300, "a slot being cleared wants nothing");
        crate::reclaim::clear(dead, v);
        assert_eq!((dead.wanted.load(Ordering::Relaxed), v.wanted(1)), (0, 300));
        assert_eq!(wanted::unpack(wanted::pack(15, u64::MAX)), Some((15, (1 << 56) - 1)));
        assert_eq!((wanted::unpack(0), wanted::unpack(wanted::pack(3, 0))), (None, Some((3, 1))));
    }

    #[test]
    fn layout_is_stable() {
        assert_eq!(std::mem::size_of::<Header>(), 32);
        assert_eq!(std::mem::size_of::<Sched>(), 4 * 4 + 9 * 8);
        assert_eq!(std::mem::size_of::<VgpuConfig>(), 8 + NAME_LEN + 8 * MAX_DEVICES + 24);
        assert_eq!(std::mem::size_of::<SoftStats>(), 7 * 8 + 2 * 4);
        assert_eq!(std::mem::size_of::<ProcSlot>(), 24 + 8 * MAX_DEVICES + 24 + 64);
        assert_eq!(std::mem::size_of::<Pager>(), 4 * 4 + 8);
        assert_eq!(
            std::mem::size_of::<VgpuLive>(),
            16 + 2 * 8 * MAX_DEVICES + 8 + 8 + 88 + 24 + PROCS_PER_VGPU * 240 + 32 + crate::timeline::RING * 40
        );
        assert!(std::mem::size_of::<VgpuLive>() <= AREA, "fits its area");
        assert_eq!(std::mem::offset_of!(VgpuLive, pager), std::mem::offset_of!(VgpuLive, sched) + 88);
        assert_eq!(std::mem::offset_of!(ProcSlot, soft), 24 + 8 * MAX_DEVICES + 24);
        assert_eq!(std::mem::size_of::<DeviceSched>(), 16);
        assert_eq!(std::mem::size_of::<crate::timeline::Entry>(), 40);
        assert_eq!(std::mem::size_of::<Timeline>(), 32 + crate::timeline::RING * 40);
        assert_eq!(std::mem::size_of::<VgpuSlot>(), 2 * AREA);
        assert_eq!(LAYOUT_SIZE, AREA + MAX_VGPUS * 2 * AREA);
        assert_eq!(std::mem::offset_of!(Region, vgpus) + std::mem::offset_of!(VgpuSlot, live), live_offset(0));
        assert_eq!(live_offset(3) % AREA, 0);
    }
}
