//! The region protocol: the shared-memory region through which processes of one vGPU share its quota
//! (and, with the scheduler, its compute share). A binary protocol between processes that may run
//! different Tessera versions, the shim in every CUDA program and the daemon alike: the header's magic,
//! version and layout size are checked on every open. The plain C ABI types both sides also exchange
//! with the driver and with programs are `tessera_ffi`'s; this crate is the protocol between Tessera's
//! own processes.
//!
//! Layout version 11: a header, the daemon's record and one scheduling record per device, then
//! [`MAX_VGPUS`] vGPU slots, each two [`AREA`]s: its [`VgpuConfig`] (name, quota, share, priority, flags)
//! and its [`VgpuLive`] state (usage, the compute-share token bucket, the [`Pager`] requests of soft
//! memory mode, its processes' slots with their [`SoftStats`], and the [`Timeline`] of its finished
//! kernels). All `#[repr(C)]` atomics, so that every access after opening is a lock-free atomic operation.
//!
//! Who may write and read what: for a vGPU the daemon manages, the live area is a separate file (owned by
//! the vGPU's user, mode 0600) that the daemon and that vGPU's processes map over the slot's live area, and
//! the configuration area another ([`conf`]: the daemon's, readable by the vGPU's user alone), mapped over
//! the slot's configuration area, while the region file shows the slot only as hidden. The region file
//! itself (mode 0600, readable through an ACL by exactly the users of its vGPUs) is written by the daemon
//! alone and mapped read-only by the processes. So a process can change neither its own quota or share nor
//! anything of another vGPU, and reads no other user's vGPU's name or settings. Without a daemon, one
//! user's processes share one writable region file (mode 0600), as peers.
//!
//! Protocol (the shim implements it; anything else that maps the region must follow it):
//! - the file is created complete (its header never changes); its slots are claimed or configured only
//!   under `flock(LOCK_EX)` of its lock file ([`open::lock_path`], mode 0600: only the owner's processes
//!   can take it). A process of another user takes no lock of the region: it finds its vGPU by a name read
//!   between two loads of the slot's state ([`file::find_settled`]) and checks it, and claims its process
//!   slot, under the shared lock of the vGPU's live file, which the daemon locks exclusively to remove it;
//! - what a process holds is recorded in its [`ProcSlot`] alone, the one source of truth: a vGPU's usage
//!   on a device is the sum of its process slots' `used` ([`VgpuSlot::used`]), so a process killed at any
//!   instruction leaves nothing charged that its slot does not show, and freeing its slot gives all of it
//!   back. A reservation first adds its bytes to its slot's `pending` (sequentially consistent), then sums
//!   `pending` and `used[dev]` of the slots below `procs_hwm` ([`VgpuSlot::charged`], each slot's `pending`
//!   read before its `used`); within the limit it adds the bytes to `used[dev]` and only then takes them
//!   out of `pending`, otherwise it takes them out and is refused. Of two racing reservations the later
//!   adder always sees the earlier, so the `used` of a vGPU's slots never sum past its limit, not even for
//!   an instant, and a process killed mid-reservation leaves only `pending` bytes, counted against new
//!   reservations until its slot is reclaimed and never as usage;
//! - a process slot is claimed by a CAS of its `owner` word from 0 to the claimer's tag
//!   ([`reclaim::claim_tag`]: bit 31, low bits of its start time, its pid) beside the inode of its pid
//!   namespace ([`owner`]), `procs_hwm` raised past it, filled, then published by storing the owner's pid
//!   (and namespace). Whoever finds the owner dead (`kill(pid, 0)` and `/proc/PID/stat` say it is gone, a
//!   zombie, or another process with its pid; an error reading `/proc` is not death; a pid of another
//!   namespace is judged only by a process that sees that namespace, [`pid_ns`]) CASes `owner` to its own
//!   tag, zeroes the slot and frees it. A tag whose claimer is found dead
//!   (killed while joining or reclaiming) is taken over the same way, so no slot stays claimed forever;
//! - contexts: `context_cost[dev]` is what a context costs on the device as the vGPU's first measurement
//!   found it ([`context_cost`] encodes it), reserved before every later context is created. While it is
//!   unknown, first contexts are created one at a time: the process whose tag is in `measuring` (CAS from 0)
//!   holds the remaining headroom (up to a cap) reserved while it creates and measures one, keeps exactly
//!   the cost reserved, publishes it and clears `measuring`; a measurer found dead is taken over by tag.
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
//! - soft memory mode ([`flags::SOFT`], managed vGPUs only): a process takes the mode once, when it claims
//!   its slot ([`attach::attach`] records the vGPU's mode of that moment in the slot's `flags`,
//!   which is what the daemon goes by), and keeps it for its life. A soft process
//!   serves its device allocations from pooled physical chunks it may defragment and swap to host memory,
//!   and publishes what it holds in its slot's [`SoftStats`] (written by it alone). It runs a pager thread
//!   sleeping on [`Pager::seq`]: the daemon bumps `evict_seq` (swap every page out) or `defrag_seq`
//!   (defragment), then `seq`, and wakes the futex; the process carries the request out, then stores the
//!   number it carried out in its `evicted_seq` or `defragged_seq` (after updating its other stats, with
//!   `Release`), numbers compared with [`seq_reached`] since they wrap. A new process's slot starts with
//!   those at the vGPU's current requests (it has nothing to swap out or defragment yet).
//! - memory broker: a soft process whose device allocation fails for lack of device memory records the
//!   device and the bytes in its slot's `wanted` ([`wanted`]), rings `sched.bell`, retries for a while and
//!   clears it once it got the memory or gave up; a vGPU's want is the sum of its slots'
//!   ([`VgpuSlot::wanted`]). The daemon then asks soft vGPUs of the device that are
//!   not running (suspended, idle, or waiting for tokens) to swap out, and charges the requester the
//!   swap-out time they spend for it (`sched.tokens` and [`Pager::swap_charged_ns`]).
//!
//! Modules: [`layout`] is the binary layout (re-exported here: `tessera_region::VgpuSlot` and so on); the
//! rest is handling of files and processes: [`open`] (where the files are and how they are created and
//! opened so that no other user can plant one), [`file`] (the opened, mapped file and its lock), [`conf`]
//! (managed vGPUs' configuration files), [`claim`] (claiming vGPU and process slots under it), [`attach`]
//! (a process joining a vGPU by name), [`settings`] (a slot's limits and resets), [`reclaim`] (giving back
//! what dead processes held) and [`pid_ns`] (judging processes of other pid namespaces). Beside them, the
//! mechanisms the region is built on: [`timeline`] (the per-vGPU ring of finished kernels the daemon
//! charges device time from), [`futex`] (waiting on the region's futex words), [`flock`] (locking its
//! files, bounded where others can open them) and [`secure_fs`] (creating and opening the files shared
//! between users so that no other user can plant one).

pub mod attach;
pub mod claim;
pub mod conf;
pub mod file;
pub mod flock;
pub mod futex;
pub mod layout;
pub mod open;
pub mod pid_ns;
pub mod reclaim;
pub mod secure_fs;
pub mod settings;
#[cfg(test)]
mod tests;
pub mod timeline;

pub use layout::*;
