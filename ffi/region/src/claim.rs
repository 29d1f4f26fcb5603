//! Claiming slots under the region file's lock: a vGPU slot found, claimed for a new name or freed
//! ([`Locked`]'s methods here), and a process slot claimed for this process by a tag that a scanner
//! takes over should the claimer die halfway ([`super::reclaim`]).

use super::file::Locked;
use super::layout::{MAX_DEVICES, MAX_VGPUS, NAME_LEN, PROCS_PER_VGPU, UNLIMITED, VgpuSlot, flags, owner, state};
use super::pid_ns::{Foreign, ProcView};
use super::reclaim;
use super::settings::{is_managed, reset_sched, reset_usage, set_limits};
use std::sync::atomic::Ordering;

/// Why a process could not claim a process slot of its vGPU.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// This process's start time or claiming tag could not be read from `/proc`.
    #[error("cannot read /proc/{pid}/stat (is /proc mounted?)")]
    ProcUnreadable {
        /// This process's pid.
        pid: u32,
    },
    /// Every process slot of the vGPU is taken by a live process.
    #[error("all {PROCS_PER_VGPU} process slots of vGPU {name:?} are in use")]
    NoProcessSlot {
        /// The vGPU's name.
        name: String,
    },
}

impl Locked<'_> {
    /// The configured vGPU slot named `name`.
    pub fn find(&self, name: &[u8; NAME_LEN]) -> Option<usize> {
        self.region().vgpus.iter().position(|v| v.state() == state::READY && v.config.name == *name)
    }

    /// Pids of the processes attached to vGPU `index` (dead ones count until [`Locked::reclaim_dead`]), as
    /// `view` sees them: one of a pid namespace it cannot see keeps the pid it has there.
    pub fn attached_pids(&self, index: usize, view: &ProcView) -> Vec<u32> {
        self.region().vgpus[index].attached().map(|(_, pid, p)| view.pid_of(p, pid)).collect()
    }

    /// Gives back what dead processes of every vGPU held (judging those of other pid namespaces by
    /// `foreign`); returns how many were found.
    pub fn reclaim_dead(&self, foreign: &dyn Foreign) -> usize {
        reclaim::reclaim_dead(self.region(), foreign)
    }

    /// A slot for a new vGPU `name`: a free one, else an unmanaged one no process is attached to. It is
    /// named, its usage and compute-share state start over, and it is marked ready with no limit; the
    /// caller configures it before releasing the lock. `None` when every slot is taken.
    pub fn claim_slot(&self, name: &[u8; NAME_LEN]) -> Option<usize> {
        self.claim_slot_with(name, |_| Ok::<(), std::convert::Infallible>(())).ok().flatten()
    }

    /// [`Locked::claim_slot`], calling `prepare` with the slot's index once it is out of sight of other
    /// processes and before it is named (the daemon gives it a configuration file of its own there, see
    /// [`super::conf`], so that the name is never written where other users may read it). `Err`: what
    /// `prepare` returned; the slot is left free.
    pub fn claim_slot_with<E>(
        &self,
        name: &[u8; NAME_LEN],
        prepare: impl FnOnce(usize) -> Result<(), E>,
    ) -> Result<Option<usize>, E> {
        // Other processes read names under the file lock: a guard of this process's threads is not enough.
        assert!(self.exclusive(), "a slot is named only under the region file's lock");
        let region = self.region();
        let free = region.vgpus.iter().position(|v| v.state() == state::FREE);
        let idle = || (0..MAX_VGPUS).find(|&i| !is_managed(&region.vgpus[i]) && !region.vgpus[i].has_processes());
        let Some(index) = free.or_else(idle) else { return Ok(None) };
        // Out of sight of other processes while it is renamed: nobody is attached and, not ready, no
        // process finds it by name.
        region.vgpus[index].config.state.store(state::FREE, Ordering::Release);
        prepare(index)?;
        let v = &self.region().vgpus[index];
        reset_sched(v);
        reset_usage(v);
        set_limits(v, &[UNLIMITED; MAX_DEVICES]);
        self.name_slot(index, name);
        self.region().vgpus[index].config.state.store(state::READY, Ordering::Release);
        Ok(Some(index))
    }

    /// Writes slot `index`'s name.
    fn name_slot(&self, index: usize, name: &[u8; NAME_LEN]) {
        let base = self.owner.map.0.as_ptr();
        // SAFETY: we hold the file lock and the thread lock; the slot is not ready and nobody is attached, and
        // names are read only under the lock, through references derived after this write.
        unsafe { std::ptr::addr_of_mut!((*base).vgpus[index].config.name).write(*name) };
    }

    /// Frees slot `index` (the caller checked nobody is attached): it is no longer found by name.
    pub fn free_slot(&self, index: usize) {
        assert!(self.exclusive(), "a slot is freed only under the region file's lock");
        let v = &self.region().vgpus[index];
        v.config.flags.store(0, Ordering::Release);
        v.config.state.store(state::FREE, Ordering::Release);
    }
}

/// Claims a process slot of `vgpu` for this process: owner CAS 0 → this process's claiming tag (with its
/// pid namespace), fill, publish the pid (killed halfway, it leaves its tag, which the next scanner finds dead and clears). The
/// slot records the vGPU's memory mode now ([`flags::SOFT`]), which the process keeps for its life, and
/// starts at the vGPU's current pager requests (a new process has nothing to swap out or defragment).
pub(super) fn claim_process(vgpu: &VgpuSlot, name: &str) -> Result<usize, ClaimError> {
    let pid = std::process::id();
    let unreadable = || ClaimError::ProcUnreadable { pid };
    let start = reclaim::start_time(pid).ok_or_else(unreadable)?;
    let tag = reclaim::own_claim().ok_or_else(unreadable)?;
    let pager = &vgpu.live.pager;
    for (i, p) in vgpu.live.procs.iter().enumerate() {
        if p.owner.compare_exchange(0, tag, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            // Before the slot can hold anything: whoever sums the vGPU's usage from now on reads it.
            vgpu.live.procs_hwm.fetch_max(i as u32 + 1, Ordering::SeqCst);
            p.start_time.store(start, Ordering::Relaxed);
            // A free slot holds nothing (whoever freed it zeroed it first); zeroed again all the same.
            for u in &p.used {
                u.store(0, Ordering::SeqCst);
            }
            p.pending.store(0, Ordering::SeqCst);
            p.wanted.store(0, Ordering::Relaxed);
            p.inflight_ns.store(0, Ordering::Relaxed);
            p.soft.reset(pager.evict_seq.load(Ordering::Acquire), pager.defrag_seq.load(Ordering::Acquire));
            p.flags.store(vgpu.flags() & flags::SOFT, Ordering::Release);
            p.set_owner(owner::ns(tag), pid);
            return Ok(i);
        }
    }
    Err(ClaimError::NoProcessSlot { name: name.to_string() })
}
