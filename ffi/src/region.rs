//! The shared-memory region through which processes of one vGPU share its quota (and, with the
//! scheduler, its compute share). A binary protocol between processes that may run different Tessera
//! versions: the header's magic, version and layout size are checked on every open.
//!
//! Layout version 4: a header, the daemon's record and one scheduling record per device, then
//! [`MAX_VGPUS`] vGPU slots, each two [`AREA`]s: its [`VgpuConfig`] (name, quota, share, priority, flags)
//! and its [`VgpuLive`] state (usage, the compute-share token bucket, its processes' slots and the
//! [`Timeline`] of its finished kernels). All `#[repr(C)]` atomics, so that every access after opening is a
//! lock-free atomic operation.
//!
//! Who may write what: for a vGPU the daemon manages, the live area is a separate file (owned by the
//! vGPU's user, mode 0600) that the daemon and that vGPU's processes map over the slot's live area; the
//! region file itself (mode 0644) is written by the daemon alone and mapped read-only by the processes. So
//! a process can change neither its own quota or share nor anything of another vGPU. Without a daemon,
//! one user's processes share one writable region file (mode 0600), as peers.
//!
//! Protocol (the shim implements it; anything else that maps the region must follow it):
//! - the file is created, checked and its slots claimed or configured only under `flock(LOCK_EX)`;
//! - a vGPU's `used[d]` only grows by a compare-and-swap that keeps it at most `limit[d]`, so processes
//!   sharing a quota can never overshoot it; each process mirrors what it holds in its [`ProcSlot`];
//! - a process slot is claimed by a CAS of `pid` from 0 to `u32::MAX`, filled, then published by storing
//!   the owner's pid; whoever finds the owner dead (pid and start time no longer match a live process)
//!   CASes `pid` to `u32::MAX`, subtracts the slot's `used` from its vGPU and frees it.
//! - compute shares (see [`Sched`]): a launch takes `tokens` (nanoseconds of device time) with one atomic
//!   subtraction when `tokens > 0`, the `inflight_ns` window allows it, the vGPU is not suspended and no
//!   higher-priority vGPU is active on its device; otherwise it sleeps on the `epoch` futex word, counted in
//!   `waiters`, after ringing `bell`. Whoever grants tokens or changes the state (the daemon, or the process
//!   itself in standalone mode) adds to `tokens`, increments `epoch` and wakes the futex. Measured device
//!   time is fed back: for a managed vGPU, each finished kernel's absolute start and end go to its
//!   [`Timeline`] (with the estimate its launch took), and the daemon charges the device time the kernel
//!   took, from the order of completions of all the device's vGPUs, giving the estimate back in the same
//!   addition to `tokens`; in standalone mode the process corrects the estimate by the time it measured on
//!   its stream. Either way `device_ns` accumulates what was charged.
//! - the daemon (`tessera daemon`), when one runs, records its pid and `heartbeat_ns` in [`Daemon`] and marks
//!   the slots it configures [`flags::MANAGED`]: their limits and shares are its own (a joining process
//!   adopts them), their tokens and their `high` hold come from it alone, and their slots are never reused
//!   for another name.

pub use crate::timeline::Timeline;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

/// `TESSRGN1` in little-endian byte order.
pub const MAGIC: u64 = u64::from_le_bytes(*b"TESSRGN1");
/// Layout version; bump on any change to the structures below.
pub const VERSION: u32 = 4;
/// Devices per vGPU slot.
pub const MAX_DEVICES: usize = 16;
/// vGPU slots in a region.
pub const MAX_VGPUS: usize = 64;
/// Bytes of a vGPU name, NUL-padded.
pub const NAME_LEN: usize = 64;
/// A limit meaning "no quota on this device".
pub const UNLIMITED: u64 = u64::MAX;

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
pub mod priority {
    /// Runs only on what `normal` and `high` vGPUs leave.
    pub const LOW: u32 = 0;
    /// The default.
    pub const NORMAL: u32 = 1;
    /// While it has work, lower priorities on its device get no tokens.
    pub const HIGH: u32 = 2;
}

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
}

/// Default queued-but-unfinished device work a vGPU may have: 1 ms.
pub const DEFAULT_WINDOW_NS: u64 = 1_000_000;

/// Bytes of one area of a vGPU slot ([`VgpuConfig`] or [`VgpuLive`]), and the alignment (in the file) of
/// each: a multiple of every page size Linux uses (4, 16 and 64 KiB), so that an area can be mapped on
/// its own, from its own file, with its own permissions.
pub const AREA: usize = 64 * 1024;
/// Process slots per vGPU.
pub const PROCS_PER_VGPU: usize = 128;

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
    /// Reserved, zero.
    pub reserved: u32,
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
    /// Bytes in use per device by every process of the vGPU.
    pub used: [AtomicU64; MAX_DEVICES],
    /// Peak of `used` per device.
    pub peak: [AtomicU64; MAX_DEVICES],
    /// When processes of this vGPU were last checked for having died (monotonic ns).
    pub last_reclaim_ns: AtomicU64,
    /// Compute share.
    pub sched: Sched,
    /// The vGPU's processes.
    pub procs: [ProcSlot; PROCS_PER_VGPU],
    /// Kernels of the vGPU that finished, for the daemon to charge.
    pub timeline: Timeline,
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

/// One process attached to a vGPU, with what it holds (so a dead process's bytes can be reclaimed).
#[repr(C)]
pub struct ProcSlot {
    /// Owner pid; 0 when free, `u32::MAX` while being reclaimed.
    pub pid: AtomicU32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Owner's start time (from `/proc/PID/stat`), against pid reuse.
    pub start_time: AtomicU64,
    /// Bytes the process holds per device.
    pub used: [AtomicU64; MAX_DEVICES],
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

/// Size of a version-4 region file.
pub const LAYOUT_SIZE: usize = std::mem::size_of::<Region>();

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

    #[test]
    fn layout_is_stable() {
        assert_eq!(std::mem::size_of::<Header>(), 32);
        assert_eq!(std::mem::size_of::<Sched>(), 4 * 4 + 9 * 8);
        assert_eq!(std::mem::size_of::<VgpuConfig>(), 8 + NAME_LEN + 8 * MAX_DEVICES + 24);
        assert_eq!(std::mem::size_of::<ProcSlot>(), 16 + 8 * MAX_DEVICES);
        assert_eq!(std::mem::size_of::<DeviceSched>(), 16);
        assert_eq!(std::mem::size_of::<crate::timeline::Entry>(), 40);
        assert_eq!(std::mem::size_of::<Timeline>(), 32 + crate::timeline::RING * 40);
        assert_eq!(std::mem::size_of::<VgpuSlot>(), 2 * AREA);
        assert_eq!(LAYOUT_SIZE, AREA + MAX_VGPUS * 2 * AREA);
        assert_eq!(std::mem::offset_of!(Region, vgpus) + std::mem::offset_of!(VgpuSlot, live), live_offset(0));
        assert_eq!(live_offset(3) % AREA, 0);
    }
}
