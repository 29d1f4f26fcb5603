//! Carrying out requests: each change is checked against the configuration's rules, made in the region,
//! then saved; if saving fails the region is put back. A failed request changes nothing.
//!
//! What may take long never holds up requests that only read: changes are made one at a time under the
//! configuration's lock, held while the change is saved (an `fsync`, which a loaded disk has made last
//! many seconds), but `list`, `show` and `stats` read the configuration as last put in force (in the
//! region, before it is saved) without waiting for it. The region file's lock, which any process that can read the file can take (a
//! joining tenant takes it for milliseconds; a stopped one keeps it), is taken only to name or free a slot
//! (`create`, `rm`), and for at most [`REGION_LOCK_TIMEOUT`]: other processes' `flock` never stops the
//! daemon. `/proc` is read (to free false process slots) with no lock held at all. `defrag` changes no
//! configuration: it asks a soft vGPU's processes to defragment and waits for them without holding any
//! lock.

use crate::api::caller::Caller;
use crate::api::protocol::{DEFRAG_TIMEOUT, Error, ErrorCode, PagerReport, Reply, Request, VgpuStatus};
use crate::observe::logger::say;
use crate::snapshot::checkpoint::{Checkpointer, Unavailable};
use crate::snapshot::sequences::{self, Snapshots};
use crate::state::State;
use crate::tenants::audit::Overuse;
use crate::tenants::integrity::{self, FileId, Judged, Verifier, Vouched};
use crate::tenants::joins::{Joins, SlotKey};
use crate::vgpus::config::ConfigError;
use crate::vgpus::config::{Config, Mode, VgpuSpec};
use crate::vgpus::slots::{self, SlotError};
use crate::vgpus::store::{Store, StoreError};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};
use tessera_region::owner;
use tessera_region::pid_ns::ProcView;
use tessera_region::reclaim::{owner_alive, reclaim_dead};
use tessera_region::{PagerRequest, VgpuSlot, flags};
use tessera_region::{file::Locked, file::RegionFile, open::live_path};

/// How often a `defrag` request looks whether the processes are done: they defragment in milliseconds to
/// seconds, and each look is a few atomic loads.
const DEFRAG_POLL: Duration = Duration::from_millis(5);

/// The file of joined processes ([`crate::tenants::joins`]), beside the state file.
const JOINS_FILE: &str = "joins";

/// How long `create` and `rm` wait for the region file's lock before failing with the name of the process
/// holding it. Joining tenants hold it for milliseconds (hundreds on a loaded host); well under the
/// client's 30 s.
pub const REGION_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the daemon waits at start for the region file's lock.
const START_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// The daemon's configuration, region and state file.
pub struct Manager {
    region: &'static RegionFile,
    store: Store,
    /// Each device's total memory, by ordinal: what the rules check vGPUs against.
    devices: Vec<u64>,
    /// The configuration, locked by whoever changes it until the change is saved (or undone).
    config: Mutex<Config>,
    /// The configuration as last put in force, for reading without waiting for a change being saved: the
    /// lock is held only to clone or replace the pointer.
    published: Mutex<Arc<Config>>,
    /// Why the audit suspended a vGPU (by name), until it is resumed or removed.
    audit: Mutex<HashMap<String, String>>,
    /// The driver's process checkpoint calls (see [`snapshot`]).
    checkpoint: Box<dyn Checkpointer>,
    /// The processes the tenant checks saw attached to each vGPU (by name) on its last round, so that the audit
    /// log says who joined and left.
    tenants: Mutex<HashMap<String, BTreeSet<u32>>>,
    /// Held for the whole of a `snapshot` or `resume`, which take seconds: one at a time.
    snapshot_op: Mutex<()>,
    /// The snapshotted vGPUs; locked only to read or replace entries (reads never wait for a snapshot).
    snapshots: Mutex<Snapshots>,
    /// Verdicts on the processes process slots name, kept from round to round (see [`integrity`]).
    verifier: Verifier,
    /// The process slots whose process joined through the socket (see [`crate::tenants::joins`]).
    joins: Joins,
    /// What the daemon's threads share (see [`State`]): `stats` reads its history and sensors.
    state: Arc<State>,
}

/// Why the daemon cannot start with its saved configuration.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The state file cannot be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The saved configuration breaks a rule on this machine.
    #[error(
        "state file {}: {source}; edit the file to fix it (or move it away to start with no vGPUs), then start \
         the daemon again",
        path.display()
    )]
    Config {
        /// The state file.
        path: PathBuf,
        /// The rule broken.
        source: ConfigError,
    },
    /// The region file cannot be locked.
    #[error(transparent)]
    Region(#[from] tessera_region::file::RegionError),
    /// A vGPU cannot be placed in the region.
    #[error(transparent)]
    Slot(#[from] SlotError),
}

impl Manager {
    /// Loads the saved configuration (checked against a machine whose devices have `devices` bytes of
    /// memory each) and makes the region match it: vGPUs already in the region keep their usage and running
    /// processes. A configuration breaking a rule stops the daemon with a message naming the file, which is
    /// left as it is.
    /// `state` is the daemon's shared state.
    pub fn start(
        region: &'static RegionFile,
        store: Store,
        devices: Vec<u64>,
        state: Arc<State>,
    ) -> Result<Manager, StartError> {
        let config = store.load()?;
        config.check(&devices).map_err(|source| StartError::Config { path: store.path().to_path_buf(), source })?;
        reclaim_dead(region.region(), &ProcView::new());
        {
            let locked = region.lock_within(START_LOCK_TIMEOUT)?;
            slots::release_unknown(&locked, &config.vgpus);
            for spec in &config.vgpus {
                slots::place(&locked, spec, true, &state.roster)?;
            }
        }
        let published = Mutex::new(Arc::new(config.clone()));
        let joins = Joins::load(&store.path().with_file_name(JOINS_FILE));
        Ok(Manager {
            region,
            store,
            devices,
            config: Mutex::new(config),
            published,
            audit: Mutex::default(),
            tenants: Mutex::default(),
            checkpoint: Box::new(Unavailable("the daemon was started without a driver".into())),
            snapshot_op: Mutex::default(),
            snapshots: Mutex::default(),
            verifier: Verifier::default(),
            joins,
            state,
        })
    }

    /// The configuration's lock, if it can be had within `timeout`: no change is being carried out while
    /// the guard lives (used at shutdown, which does not wait for ever for a change stuck in progress).
    pub fn quiesce(&self, timeout: Duration) -> Option<MutexGuard<'_, Config>> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.config.try_lock() {
                Ok(guard) => return Some(guard),
                Err(TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(TryLockError::WouldBlock) => return None,
            }
        }
    }

    /// The configuration, locked for a change.
    fn config(&self) -> MutexGuard<'_, Config> {
        self.config.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The configuration as last put in force (no change being saved is waited for).
    fn current(&self) -> Arc<Config> {
        Arc::clone(&self.published.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Makes `config` what reads see; returns what they saw.
    fn publish(&self, config: Arc<Config>) -> Arc<Config> {
        std::mem::replace(&mut *self.published.lock().unwrap_or_else(|poisoned| poisoned.into_inner()), config)
    }

    /// Carries out one request made by `caller` (see [`crate::api::caller`]): what the API's connections use.
    /// Every change and every refusal is recorded in the audit log ([`crate::observe::audit_log`]), once answered.
    pub fn handle_from(&self, request: Request, caller: &Caller) -> Reply {
        let asked = request.clone();
        let reply = match &request {
            Request::Join { name, slot } => self.join(name, *slot, caller).unwrap_or_else(|e| Reply::failure(&e)),
            _ => self.handle(request),
        };
        crate::observe::audit_log::request(caller, &asked, &reply);
        reply
    }

    /// Carries out one request.
    pub fn handle(&self, request: Request) -> Reply {
        let lifted = match &request {
            Request::Resume { name, pids } if pids.is_empty() => Some(name.clone()),
            Request::Rm { name } => Some(name.clone()),
            _ => None,
        };
        let mut response = self.carry_out(request).unwrap_or_else(|e| Reply::failure(&e));
        let mut audits = self.audits();
        if let Some(name) = lifted.filter(|_| response.ok) {
            audits.remove(&name);
        }
        let snapshots = self.snapshots();
        for st in response.vgpus.iter_mut() {
            sequences::annotate_status(st, &snapshots);
        }
        if let Some(stats) = response.stats.as_mut() {
            sequences::annotate_stats(stats, &snapshots);
        }
        drop(snapshots);
        let region = self.region.region();
        for st in response.vgpus.iter_mut().filter(|st| st.spec.suspended) {
            st.audit = audits.get(&st.spec.name).cloned().or_else(|| {
                // Marked in the region by a daemon since restarted, which took the figures with it.
                let marked = region
                    .vgpus
                    .iter()
                    .any(|v| v.name_bytes() == st.spec.name.as_bytes() && v.flags() & flags::AUDIT != 0);
                marked.then(|| "by a daemon since restarted".to_string())
            });
        }
        response
    }

    /// Records process slot `slot` of vGPU `name` as `caller`'s, if the slot names the caller (by pid and
    /// pid namespace, as the kernel gave them) and the caller runs as the vGPU's user or root: see
    /// [`crate::tenants::joins`]. Reads no `/proc` file of the caller but its `stat` (and, for a caller in another
    /// pid namespace, the list of processes), and takes no lock but the table's.
    fn join(&self, name: &str, slot: u32, caller: &Caller) -> Result<Reply, Error> {
        let config = self.current();
        let spec = config.get(name)?;
        let user = slots::owner(spec);
        if caller.uid != user && caller.uid != 0 {
            return Err(Error::new(
                ErrorCode::PermissionDenied,
                format!("vGPU {name:?} is uid {user}'s; a process of uid {} cannot join it", caller.uid),
            ));
        }
        let index = slots::find(&self.region.guard(), name)
            .ok_or_else(|| format!("vGPU {name:?} has no slot in region file {}", self.region.path()))
            .code(ErrorCode::Internal)?;
        let procs = &self.region.region().vgpus[index].live.procs;
        let p = procs.get(slot as usize).ok_or_else(|| {
            Error::new(
                ErrorCode::Invalid,
                format!("vGPU {name:?} has process slots 0 to {}, not {slot}", procs.len() - 1),
            )
        })?;
        let word = p.owner.load(Ordering::Acquire);
        let start = p.start_time.load(Ordering::Acquire);
        let named = p.attached_pid().and_then(|pid| ProcView::new().here(owner::ns(word), pid, start));
        if named != Some(caller.pid) {
            return Err(Error::new(
                ErrorCode::PermissionDenied,
                format!(
                    "process slot {slot} of vGPU {name:?} does not name the caller (pid {}); a process joins with the \
                     slot it claimed",
                    caller.pid
                ),
            ));
        }
        self.joins.admit((index, slot as usize), word, caller.pid, start).code(ErrorCode::Unavailable)?;
        Ok(Reply::ok(Vec::new()))
    }

    /// The audit's reasons, locked.
    fn audits(&self) -> MutexGuard<'_, HashMap<String, String>> {
        self.audit.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Suspends the vGPU in slot `index` of device `device` for `overuse` (see [`crate::tenants::audit`]), saying so
    /// on stderr; it stays suspended, with the reason shown by `list` and `show`, until resumed.
    pub fn audit_suspend(&self, index: usize, device: u32, overuse: &Overuse) {
        let mut config = self.config();
        let name = String::from_utf8_lossy(self.region.region().vgpus[index].name_bytes()).into_owned();
        let Ok(next) = config.suspend(&name, true, &self.devices) else { return };
        let reason = overuse.describe(device);
        // The reason first: reads see the suspension as soon as it is in force, before it is saved.
        let before = self.audits().insert(name.clone(), reason.clone());
        match self.reconfigure(&mut config, next, &name, false) {
            Ok(_) => {
                self.region.region().vgpus[index].config.flags.fetch_or(flags::AUDIT, Ordering::AcqRel);
                say!(
                    "tessera daemon: audit: vGPU {name:?} {reason}; suspended (`tessera vgpu resume {name}` lifts it)"
                );
            }
            Err(e) => {
                match before {
                    Some(earlier) => self.audits().insert(name.clone(), earlier),
                    None => self.audits().remove(&name),
                };
                say!("tessera daemon: audit: vGPU {name:?} {reason}, but it could not be suspended: {e}");
            }
        }
    }

    /// Frees every process slot of every vGPU that names no process of the vGPU (see [`integrity`]). The
    /// processes are judged with no lock held; a slot is freed only if, by then, the vGPU is still
    /// configured as it was and the slot still names the process judged.
    /// One watch round reads at most [`integrity::ROUND_BUDGET`] bytes of processes' maps, whatever
    /// tenants map: verdicts are kept from round to round, so a process is read once. Returns the process
    /// slots whose process could not be verified (vGPU slot, process slot, owner word), which
    /// [`crate::memory::recount::Recount::uncount_phantoms`] checks against the driver's figures.
    pub fn free_strays(&self) -> Vec<(usize, usize, u64)> {
        self.reap_joined();
        let mut budget = integrity::ROUND_BUDGET;
        let doubted = self.free_strays_judged_by(|v, owner, live, view, vouched| {
            self.verifier.judge_slots(v, owner, live, view, vouched, &mut budget)
        });
        self.verifier.end_pass();
        doubted
    }

    /// [`Manager::free_strays`], judging each vGPU's process slots with `judge` (a vGPU's slot, its user,
    /// its live file, and one view of `/proc` for the whole pass).
    fn free_strays_judged_by(
        &self,
        mut judge: impl FnMut(&VgpuSlot, u32, Option<FileId>, &ProcView, Vouched) -> Vec<Judged>,
    ) -> Vec<(usize, usize, u64)> {
        let config = self.current();
        let view = ProcView::new();
        let mut doubted = Vec::new();
        for spec in &config.vgpus {
            let Some((index, judged)) = self.judge_slots(spec, &mut judge, &view) else { continue };
            doubted.extend(integrity::unverified(&judged).into_iter().map(|(i, word, _)| (index, i, word)));
            let strays = integrity::strays(&judged);
            if strays.is_empty() {
                continue;
            }
            let locked = self.region.guard();
            let unchanged = self.current().get(&spec.name).ok() == Some(spec);
            if unchanged && slots::find(&locked, &spec.name) == Some(index) {
                report_freed(spec, integrity::free(&locked.region().vgpus[index], &strays));
            }
        }
        self.note_tenants(&config, &view);
        doubted
    }

    /// Records in the audit log the processes attached to a vGPU of `config` now that were not on the
    /// last call, and those no longer attached.
    fn note_tenants(&self, config: &Config, view: &ProcView) {
        let now: HashMap<String, BTreeSet<u32>> = {
            let locked = self.region.guard();
            let attached = |index: usize| -> BTreeSet<u32> {
                locked.region().vgpus[index].attached().map(|(_, pid, p)| view.pid_of(p, pid)).collect()
            };
            let found = config.vgpus.iter().filter_map(|s| Some((s.name.clone(), slots::find(&locked, &s.name)?)));
            found.map(|(name, index)| (name, attached(index))).collect()
        };
        let mut seen = self.tenants.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let none = BTreeSet::new();
        for (name, pids) in &now {
            for &pid in pids.difference(seen.get(name).unwrap_or(&none)) {
                crate::observe::audit_log::tenant_joined(
                    name,
                    pid,
                    integrity::uids(pid).ok().and_then(|ids| ids.first().copied()),
                );
            }
        }
        for (name, pids) in seen.iter() {
            for &pid in pids.difference(now.get(name).unwrap_or(&none)) {
                crate::observe::audit_log::tenant_left(name, pid);
            }
        }
        *seen = now;
    }

    /// vGPU `spec`'s slot and its process slots judged, with no lock held; `None` when it has no slot.
    /// The slots of processes that joined through the socket are verified without reading anything.
    fn judge_slots(
        &self,
        spec: &VgpuSpec,
        judge: &mut impl FnMut(&VgpuSlot, u32, Option<FileId>, &ProcView, Vouched) -> Vec<Judged>,
        view: &ProcView,
    ) -> Option<(usize, Vec<Judged>)> {
        let index = slots::find(&self.region.guard(), &spec.name)?;
        let live = FileId::of(&live_path(self.region.path(), index));
        let vouched = |slot: usize, word: u64| self.joins.vouches((index, slot), word);
        Some((index, judge(&self.region.region().vgpus[index], slots::owner(spec), live, view, &vouched)))
    }

    /// Frees the process slots of joined processes that have ended (their pidfds say so), as dead
    /// processes' slots are freed, and forgets the records of slots since taken by others.
    fn reap_joined(&self) {
        let region = self.region.region();
        let word_now = |(v, i): SlotKey| Some(region.vgpus.get(v)?.live.procs.get(i)?.owner.load(Ordering::Acquire));
        let ended = self.joins.reap(word_now);
        if ended.is_empty() {
            return;
        }
        let config = self.current();
        let _locked = self.region.guard();
        for ((index, slot), word) in ended {
            let v = &region.vgpus[index];
            let Some(spec) = config.vgpus.iter().find(|s| v.name_bytes() == s.name.as_bytes()) else { continue };
            report_freed(spec, integrity::free(v, &[(slot, word, integrity::Finding::Gone)]));
        }
    }

    /// Each configured vGPU's slot and user.
    pub fn owners(&self) -> Vec<(usize, u32)> {
        let config = self.current();
        let locked = self.region.guard();
        config.vgpus.iter().filter_map(|s| Some((slots::find(&locked, &s.name)?, slots::owner(s)))).collect()
    }

    fn carry_out(&self, request: Request) -> Result<Reply, Error> {
        let devices = self.devices.as_slice();
        // Requests that only read: the configuration as last put in force, the region as it is now.
        match &request {
            Request::Version => {
                return Ok(Reply { release: Some(env!("CARGO_PKG_VERSION").into()), ..Reply::ok(Vec::new()) });
            }
            Request::Stats { name } => {
                // Without reclaiming dead processes: polled at 10 Hz, it stays a read.
                let config = self.current();
                let only = name.as_ref().map(|n| config.get(n).cloned().map_err(Error::from)).transpose()?;
                let stats = crate::api::stats::stats(
                    self.region.region(),
                    &self.state,
                    &config.vgpus,
                    &self.devices,
                    only.as_ref(),
                );
                return Ok(Reply { stats: Some(stats), ..Reply::ok(Vec::new()) });
            }
            Request::List => {
                let config = self.current();
                reclaim_dead(self.region.region(), &ProcView::new());
                let locked = self.region.guard();
                return Ok(Reply::ok(config.vgpus.iter().map(|s| slots::status(&locked, s)).collect()));
            }
            Request::Show { name } => {
                let config = self.current();
                let spec = config.get(name)?;
                reclaim_dead(self.region.region(), &ProcView::new());
                return Ok(Reply::ok(vec![slots::status(&self.region.guard(), spec)]));
            }
            // They wait for processes, with no lock held.
            Request::Defrag { name } => {
                return self.ask_pagers(name, PagerRequest::Defrag, DEFRAG_TIMEOUT, DEFRAG_POLL);
            }
            Request::SwapOut { name } => {
                return self.ask_pagers(name, PagerRequest::Evict, DEFRAG_TIMEOUT, DEFRAG_POLL);
            }
            // They wait for the driver's checkpoint calls, taking the configuration's lock only to suspend.
            Request::Snapshot { name, pids } => return self.snapshot(name, pids),
            Request::Resume { name, pids } => return self.resume(name, pids),
            Request::Join { .. } => {
                return Err(Error::new(
                    ErrorCode::Invalid,
                    "a join is made over the socket by the joining process itself (see Manager::handle_from)",
                ));
            }
            _ => {}
        }
        if let Some(reply) = crate::passthrough::carry_out(self, &request) {
            return reply;
        }
        let mut config = self.config();
        let vgpus = match request {
            Request::Create { spec } => {
                may_give_to(&spec)?;
                let next = config.create(spec.clone(), devices)?;
                let name = spec.name.clone();
                self.commit(
                    &mut config,
                    next,
                    &name,
                    Lock::File,
                    |l| slots::place(l, &spec, false, &self.state.roster).map(drop).code(ErrorCode::Unavailable),
                    |l| slots::remove(l, &spec.name, &[], &self.state.roster),
                )?
            }
            Request::Set { name, change } => {
                config.get(&name)?;
                let next = config.set(&name, &change, devices)?;
                self.reconfigure(&mut config, next, &name, change.memory.is_some())?
            }
            Request::Suspend { name } => {
                let next = config.suspend(&name, true, devices)?;
                self.reconfigure(&mut config, next, &name, false)?
            }
            Request::Rm { name } => {
                let old = config.get(&name)?.clone();
                let next = config.remove(&name)?;
                // Judged before the region file is locked (reading `/proc`, within a budget: the request
                // answers promptly whatever tenants map); false slots freed under it if still so. Only
                // verified processes block it: a slot whose process cannot be verified is ignored.
                let mut budget = integrity::REQUEST_BUDGET;
                let judged = self.judge_slots(
                    &old,
                    &mut |v, owner, live, view, vouched| {
                        self.verifier.judge_slots(v, owner, live, view, vouched, &mut budget)
                    },
                    &ProcView::new(),
                );
                let mut ignored = Vec::new();
                self.commit(
                    &mut config,
                    next,
                    &name,
                    Lock::File,
                    |l| {
                        if let Some((index, judged)) = judged.filter(|(i, _)| slots::find(l, &name) == Some(*i)) {
                            report_freed(&old, integrity::free(&l.region().vgpus[index], &integrity::strays(&judged)));
                            ignored = integrity::unverified(&judged);
                        }
                        let skip: Vec<(usize, u64)> = ignored.iter().map(|&(i, word, _)| (i, word)).collect();
                        slots::remove(l, &name, &skip, &self.state.roster).code(ErrorCode::InUse)
                    },
                    |l| slots::place(l, &old, true, &self.state.roster).map(drop),
                )?;
                for (_, word, why) in ignored {
                    say!(
                        "tessera daemon: vGPU {name:?} removed beside a process slot naming pid {} that could not be \
                         verified ({why}); ignored",
                        owner::word(word)
                    );
                }
                Vec::new()
            }
            Request::Version
            | Request::Stats { .. }
            | Request::List
            | Request::Show { .. }
            | Request::Defrag { .. }
            | Request::SwapOut { .. }
            | Request::Snapshot { .. }
            | Request::Resume { .. }
            | Request::Devices
            | Request::BindVfio { .. }
            | Request::UnbindVfio { .. }
            | Request::MdevTypes
            | Request::MdevList
            | Request::MdevCreate { .. }
            | Request::MdevRm { .. }
            | Request::Reconcile
            | Request::Join { .. } => unreachable!("answered above"),
        };
        Ok(Reply::ok(vgpus))
    }

    /// Has every soft-mode process of soft vGPU `name` carry out `kind` (defragment, or swap out), waiting
    /// (polling every `poll`, neither the configuration nor the region locked meanwhile) until each has or
    /// died, at most `timeout`. Reports the memory the processes held before and after. Nothing attached
    /// is nothing to do, not an error; a hard vGPU, an unknown one or a timeout is.
    fn ask_pagers(&self, name: &str, kind: PagerRequest, timeout: Duration, poll: Duration) -> Result<Reply, Error> {
        let (doing, nothing_to) = match kind {
            PagerRequest::Defrag => ("defragmenting", "defragment"),
            PagerRequest::Evict => ("swapping out", "swap out"),
        };
        let (index, asked, target, mut report) = {
            let config = self.current();
            let spec = config.get(name)?;
            if spec.mode == Mode::Hard {
                return Err(Error::new(
                    ErrorCode::Invalid,
                    format!("vGPU {name} is in hard mode: its memory is not virtualized, nothing to {nothing_to}"),
                ));
            }
            reclaim_dead(self.region.region(), &ProcView::new());
            let locked = self.region.guard();
            let index = slots::find(&locked, name)
                .ok_or_else(|| format!("vGPU {name:?} has no slot in region file {}", locked.path()))
                .code(ErrorCode::Internal)?;
            let v = &locked.region().vgpus[index];
            let mut asked = Vec::new();
            let mut report = PagerReport::default();
            for (i, pid, p) in v.attached() {
                if p.is_soft() {
                    asked.push((i, p.owner.load(Ordering::Acquire), p.start_time.load(Ordering::Acquire)));
                    report.processes.push(pid);
                } else {
                    report.hard_processes.push(pid);
                }
            }
            let before = v.soft_totals();
            (report.held_before, report.fragmentation_pct_before) = (before.held(), before.fragmentation_pct());
            let target = if asked.is_empty() { None } else { Some(v.live.pager.request(kind)) };
            (index, asked, target, report)
        };
        if let Some(target) = target {
            let v = &self.region.region().vgpus[index];
            let deadline = Instant::now() + timeout;
            loop {
                // A process that died, or whose slot went to another, is not waited for.
                let view = ProcView::new();
                let asked_alive = |i, pid| {
                    asked
                        .iter()
                        .any(|&(a, word, start)| (a, owner::word(word)) == (i, pid) && owner_alive(word, start, &view))
                };
                let lagging: Vec<u32> =
                    v.lagging(kind, target).filter(|&(i, pid)| asked_alive(i, pid)).map(|(_, pid)| pid).collect();
                if lagging.is_empty() {
                    break;
                }
                if Instant::now() >= deadline {
                    let list: Vec<String> = lagging.iter().map(u32::to_string).collect();
                    let e = format!(
                        "vGPU {name}: {} process(es) did not finish {doing} within {} s (pid {}); the request \
                         stands and they may still carry it out",
                        lagging.len(),
                        timeout.as_secs(),
                        list.join(", ")
                    );
                    return Err(Error::new(ErrorCode::Timeout, e));
                }
                std::thread::sleep(poll);
            }
        }
        let config = self.current();
        let locked = self.region.guard();
        let after = locked.region().vgpus[index].soft_totals();
        (report.held_after, report.fragmentation_pct_after) = (after.held(), after.fragmentation_pct());
        let vgpus = config.get(name).map(|s| vec![slots::status(&locked, s)]).unwrap_or_default();
        Ok(Reply { pager: Some(report), ..Reply::ok(vgpus) })
    }

    /// Writes vGPU `name`'s new spec from `next` into its slot (checking the quota against its usage when
    /// `memory` changed), keeping the old one to put back. Only atomic settings change: the region file's
    /// lock is not needed.
    fn reconfigure(
        &self,
        config: &mut Config,
        next: Config,
        name: &str,
        memory: bool,
    ) -> Result<Vec<VgpuStatus>, Error> {
        let old = config.get(name)?.clone();
        let new = next.get(name)?.clone();
        let slot = |l: &Locked| {
            slots::find(l, name)
                .ok_or_else(|| SlotError::Missing { name: name.to_string(), region: l.path().to_string() })
        };
        self.commit(
            config,
            next,
            name,
            Lock::Threads,
            |l| {
                let index = slot(l).code(ErrorCode::Internal)?;
                if memory {
                    slots::set_memory(l, index, &new, &self.state.roster).code(ErrorCode::InUse)
                } else {
                    slots::configure(&l.region().vgpus[index], &new, &self.state.roster);
                    Ok(())
                }
            },
            |l| slot(l).map(|index| slots::configure(&l.region().vgpus[index], &old, &self.state.roster)),
        )
    }

    /// The region, locked as `lock` says (the file's lock for at most [`REGION_LOCK_TIMEOUT`]).
    fn lock(&self, lock: Lock) -> Result<Locked<'_>, Error> {
        match lock {
            Lock::Threads => Ok(self.region.guard()),
            Lock::File => self.region.lock_within(REGION_LOCK_TIMEOUT).code(ErrorCode::Unavailable),
        }
    }

    /// Makes a change in the region (`apply`, under `lock`), saves `next`, and adopts it; if saving fails,
    /// `undo` puts the region back. Reads see the change as soon as it is in force in the region, not only
    /// once it is saved: saving (an `fsync`) has been seen to take seconds on a disk loaded by other
    /// work, and only the configuration stays locked meanwhile. Returns the status of vGPU `name`
    /// afterwards (nothing once it is removed).
    fn commit(
        &self,
        config: &mut Config,
        next: Config,
        name: &str,
        lock: Lock,
        apply: impl FnOnce(&Locked) -> Result<(), Error>,
        undo: impl FnOnce(&Locked) -> Result<(), SlotError>,
    ) -> Result<Vec<VgpuStatus>, Error> {
        apply(&self.lock(lock)?)?;
        let before = self.publish(Arc::new(next.clone()));
        if let Err(e) = self.store.save(&next) {
            self.publish(before);
            match self.lock(lock) {
                Ok(locked) => {
                    if let Err(u) = undo(&locked) {
                        say!("tessera daemon: could not undo a change after failing to save it: {u}");
                    }
                }
                Err(u) => say!("tessera daemon: could not undo a change after failing to save it: {}", u.message),
            }
            return Err(Error::new(ErrorCode::Internal, e.to_string()));
        }
        *config = next;
        Ok(config.get(name).map(|s| vec![slots::status(&self.region.guard(), s)]).unwrap_or_default())
    }

    /// The vGPUs as configured now.
    pub fn specs(&self) -> Vec<VgpuSpec> {
        self.current().vgpus.clone()
    }

    /// The daemon's shared state.
    pub fn state(&self) -> &State {
        &self.state
    }
}

mod snapshot;

/// How a change locks the region: against this process's other threads only (atomic settings), or against
/// other processes too (naming or freeing a slot).
#[derive(Clone, Copy)]
enum Lock {
    Threads,
    File,
}

/// Checks that the daemon can give vGPU `spec` to its user: the vGPU's live file is created for that
/// user, which only root may do for another user than itself.
fn may_give_to(spec: &VgpuSpec) -> Result<(), Error> {
    // SAFETY: geteuid cannot fail and has no preconditions.
    let me = unsafe { libc::geteuid() };
    match spec.user {
        Some(uid) if uid != me && me != 0 => Err(Error::new(
            ErrorCode::PermissionDenied,
            format!(
                "cannot give vGPU {:?} to uid {uid}: the daemon runs as uid {me}, and the daemon must run as root to \
                 give a vGPU to another user (its files are made that user's); run the daemon as root, or leave \
                 out --user to give it to uid {me}",
                spec.name
            ),
        )),
        _ => Ok(()),
    }
}

/// Says on stderr which process slots of vGPU `spec` were freed, and why.
fn report_freed(spec: &VgpuSpec, freed: Vec<(u32, integrity::Finding)>) {
    for (pid, why) in freed {
        say!("tessera daemon: vGPU {:?}: process slot of pid {pid} freed ({why})", spec.name);
    }
}

/// Gives a failure described by its message (a string, or an error that prints one) its [`ErrorCode`].
trait Code<T> {
    fn code(self, code: ErrorCode) -> Result<T, Error>;
}

impl<T, E: std::fmt::Display> Code<T> for Result<T, E> {
    fn code(self, code: ErrorCode) -> Result<T, Error> {
        self.map_err(|e| Error::new(code, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vgpus::config::{Change, Mode, Priority};
    use std::sync::atomic::Ordering;
    use tessera_region::{UNLIMITED, flags};

    struct Fixture {
        dir: std::path::PathBuf,
        region: &'static RegionFile,
    }

    impl Fixture {
        fn new(tag: &str) -> Fixture {
            let dir = std::env::temp_dir().join(format!("tessera-manager-test-{}-{tag}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let region = Box::leak(Box::new(RegionFile::open(dir.join("region").to_str().unwrap()).unwrap()));
            Fixture { dir, region }
        }

        fn manager(&self) -> Manager {
            self.manager_on(vec![80 << 30; 2]).unwrap()
        }

        /// A manager on devices of `memory` bytes each.
        fn manager_on(&self, memory: Vec<u64>) -> Result<Manager, StartError> {
            Manager::start(self.region, Store::open(&self.dir.join("state")).unwrap(), memory, Arc::default())
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn ok(m: &Manager, r: Request) -> Vec<VgpuStatus> {
        let resp = m.handle(r.clone());
        assert!(resp.ok, "{r:?}: {:?}", resp.error);
        resp.vgpus
    }

    fn err(m: &Manager, r: Request) -> String {
        let resp = m.handle(r.clone());
        assert!(!resp.ok, "{r:?} should fail");
        resp.error.unwrap()
    }

    fn create(name: &str, share: u32) -> Request {
        Request::Create { spec: VgpuSpec::new(name, 0, 1 << 30, share) }
    }

    #[test]
    fn changes_reach_the_region_and_survive_a_restart() {
        let f = Fixture::new("restart");
        let m = f.manager();
        let st = ok(&m, create("a", 30));
        assert_eq!((st[0].spec.share, st[0].used), (30, 0));
        ok(&m, create("b", 70));
        let change = Change { share: Some(20), priority: Some(Priority::High), ..Change::default() };
        ok(&m, Request::Set { name: "b".into(), change });
        ok(&m, Request::Suspend { name: "a".into() });
        let region = f.region.region();
        let slot = |name: &str| {
            let locked = f.region.lock().unwrap();
            slots::find(&locked, name).unwrap()
        };
        let (a, b) = (&region.vgpus[slot("a")], &region.vgpus[slot("b")]);
        assert_eq!(
            (a.config.limit[0].load(Ordering::Relaxed), a.config.limit[1].load(Ordering::Relaxed)),
            (1 << 30, UNLIMITED)
        );
        assert_eq!(a.config.flags.load(Ordering::Relaxed), flags::MANAGED | flags::SUSPENDED);
        assert_eq!((b.config.share.load(Ordering::Relaxed), b.config.priority.load(Ordering::Relaxed)), (20, 2));
        a.live.procs[0].used[0].store(4096, Ordering::Relaxed);
        a.live.procs_hwm.store(1, Ordering::Relaxed);
        drop(m);
        let m = f.manager();
        let list = ok(&m, Request::List);
        assert_eq!(list.len(), 2);
        assert!(list[0].spec.suspended && list[0].used == 4096, "usage kept: {list:?}");
        assert_eq!((list[1].spec.share, list[1].spec.priority), (20, Priority::High));
        ok(&m, Request::Resume { name: "a".into(), pids: vec![] });
        assert_eq!(a.config.flags.load(Ordering::Relaxed), flags::MANAGED);
    }

    #[test]
    fn hard_quotas_above_the_device_are_refused_and_a_saved_one_stops_the_daemon_keeping_the_file() {
        let f = Fixture::new("device-memory");
        let m = f.manager();
        let huge =
            |name: &str, mode| Request::Create { spec: VgpuSpec { mode, ..VgpuSpec::new(name, 0, 1 << 40, 10) } };
        assert!(err(&m, huge("t", Mode::Hard)).contains("more than device 0 has"));
        assert!(m.specs().is_empty(), "nothing created");
        ok(&m, create("a", 10));
        let e =
            err(&m, Request::Set { name: "a".into(), change: Change { memory: Some(1 << 40), ..Change::default() } });
        assert!(e.contains("more than device 0 has"), "{e}");
        ok(&m, huge("s", Mode::Soft));
        drop(m);
        // The same file on a smaller device: refused by name, with the remedy, and left as it was.
        let path = f.dir.join("state").join(crate::vgpus::store::FILE);
        let saved = std::fs::read(&path).unwrap();
        let e = f.manager_on(vec![512 << 20]).err().unwrap().to_string();
        assert!(e.contains(&path.display().to_string()) && e.contains("edit the file"), "{e}");
        assert!(e.contains("more than device 0 has") && e.contains("vGPU \"a\""), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), saved, "a refused file is left as it was");
        assert_eq!(f.manager().specs().len(), 2, "and loads again on the devices it fits");
    }

    #[test]
    fn an_audit_suspension_is_shown_with_its_reason_until_resumed() {
        let f = Fixture::new("audit");
        let m = f.manager();
        ok(&m, create("a", 20));
        let index = slots::find(&f.region.lock().unwrap(), "a").unwrap();
        let flags_now = || f.region.region().vgpus[index].flags();
        let overuse = Overuse { took_pct: 50.0, entitled_pct: 20.0, seconds: 10.0 };
        m.audit_suspend(index, 0, &overuse);
        let why = "took 50% of device 0 over 10 s, entitled to 20%";
        let st = &ok(&m, Request::List)[0];
        assert!(st.spec.suspended && st.audit.as_deref() == Some(why), "{st:?}");
        assert_eq!(flags_now(), flags::MANAGED | flags::SUSPENDED | flags::AUDIT);
        // A change of settings keeps it; a failed resume too; a resume lifts it.
        let change = crate::vgpus::config::Change { share: Some(10), ..Default::default() };
        ok(&m, Request::Set { name: "a".into(), change });
        assert_eq!(flags_now(), flags::MANAGED | flags::SUSPENDED | flags::AUDIT);
        assert_eq!(ok(&m, Request::Show { name: "a".into() })[0].audit.as_deref(), Some(why));
        err(&m, Request::Resume { name: "zz".into(), pids: vec![] });
        let st = &ok(&m, Request::Resume { name: "a".into(), pids: vec![] })[0];
        assert!(!st.spec.suspended && st.audit.is_none(), "{st:?}");
        assert_eq!(flags_now(), flags::MANAGED);
        // A vGPU suspended by hand says no more than that.
        ok(&m, Request::Suspend { name: "a".into() });
        assert_eq!(ok(&m, Request::List)[0].audit, None);
        // A restarted daemon finds the mark, not the figures.
        m.audit_suspend(index, 0, &overuse);
        drop(m);
        let m = f.manager();
        assert_eq!(ok(&m, Request::List)[0].audit.as_deref(), Some("by a daemon since restarted"));
        assert_eq!(flags_now(), flags::MANAGED | flags::SUSPENDED | flags::AUDIT);
    }

    #[test]
    fn refused_requests_change_nothing() {
        let f = Fixture::new("refused");
        let m = f.manager();
        ok(&m, create("a", 60));
        let before = ok(&m, Request::List);
        assert!(err(&m, create("b", 41)).contains("101%"));
        assert!(err(&m, Request::Show { name: "zz".into() }).contains("no vGPU named \"zz\""));
        let bad_device = Request::Create { spec: VgpuSpec::new("c", 5, 1 << 30, 1) };
        assert!(err(&m, bad_device).contains("device 5 does not exist"));
        // A quota below what the vGPU uses now.
        let locked = f.region.lock().unwrap();
        let index = slots::find(&locked, "a").unwrap();
        drop(locked);
        let v = &f.region.region().vgpus[index];
        v.live.procs[0].used[0].store(512 << 20, Ordering::Relaxed);
        v.live.procs_hwm.store(1, Ordering::Relaxed);
        let lower = Change { memory: Some(256 << 20), ..Change::default() };
        let e = err(&m, Request::Set { name: "a".into(), change: lower });
        assert!(e.contains("uses 512.0 MiB") && e.contains("cannot be lowered to 256.0 MiB"), "{e}");
        v.live.procs[0].used[0].store(0, Ordering::Relaxed);
        assert_eq!(ok(&m, Request::List), before);
        drop(m);
        assert_eq!(f.manager().specs(), before.iter().map(|s| s.spec.clone()).collect::<Vec<_>>(), "nor on disk");
    }

    #[test]
    fn the_memory_mode_reaches_the_region_and_survives_a_restart() {
        let f = Fixture::new("mode");
        let m = f.manager();
        let soft = VgpuSpec { mode: Mode::Soft, ..VgpuSpec::new("s", 0, 1 << 30, 10) };
        let st = ok(&m, Request::Create { spec: soft });
        assert_eq!(st[0].spec.mode, Mode::Soft);
        ok(&m, create("h", 10));
        let flags_of = |name: &str| {
            let locked = f.region.lock().unwrap();
            let i = slots::find(&locked, name).unwrap();
            locked.region().vgpus[i].flags()
        };
        assert_eq!((flags_of("s"), flags_of("h")), (flags::MANAGED | flags::SOFT, flags::MANAGED));
        // Quotas of soft vGPUs may add up to more than the device has.
        let big = VgpuSpec { mode: Mode::Soft, ..VgpuSpec::new("big", 0, 1 << 50, 10) };
        ok(&m, Request::Create { spec: big });
        let to = |mode| Request::Set { name: "s".into(), change: Change { mode: Some(mode), ..Change::default() } };
        ok(&m, to(Mode::Hard));
        assert_eq!(flags_of("s"), flags::MANAGED);
        ok(&m, to(Mode::Soft));
        ok(&m, Request::Set { name: "h".into(), change: Change { share: Some(20), ..Change::default() } });
        drop(m);
        let m = f.manager();
        let list = ok(&m, Request::List);
        let modes: Vec<Mode> = list.iter().map(|v| v.spec.mode).collect();
        assert_eq!(modes, [Mode::Soft, Mode::Hard, Mode::Soft]);
        assert_eq!(flags_of("s"), flags::MANAGED | flags::SOFT, "written to the region again at start");
        drop(m);
        // A state file written before modes existed loads every vGPU as hard.
        std::fs::write(
            f.dir.join("state").join(crate::vgpus::store::FILE),
            r#"{"version":1,"vgpus":[{"name":"old","device":0,"memory":4096,"share":5}]}"#,
        )
        .unwrap();
        let m = f.manager();
        assert_eq!(ok(&m, Request::List)[0].spec.mode, Mode::Hard);
    }

    #[test]
    fn soft_usage_is_reported_and_defrag_waits_for_the_processes() {
        let f = Fixture::new("defrag");
        let m = f.manager();
        ok(&m, create("h", 10));
        ok(&m, Request::Create { spec: VgpuSpec { mode: Mode::Soft, ..VgpuSpec::new("s", 0, 1 << 30, 10) } });
        let defrag = |name: &str| Request::Defrag { name: name.into() };
        assert!(err(&m, defrag("zz")).contains("no vGPU named \"zz\""));
        assert_eq!(
            err(&m, defrag("h")),
            "vGPU h is in hard mode: its memory is not virtualized, nothing to defragment"
        );
        // Nobody attached: nothing to do.
        let resp = m.handle(defrag("s"));
        assert!(resp.ok && resp.pager.as_ref().is_some_and(|r| r.processes.is_empty()), "{resp:?}");
        let me = tessera_region::attach::attach(f.region.path(), "s", None).unwrap();
        assert!(me.me.is_soft());
        let stats = &me.me.soft;
        stats.resident.store(600, Ordering::Release);
        stats.pooled.store(400, Ordering::Release);
        stats.fragmented.store(300, Ordering::Release);
        let st = &ok(&m, Request::Show { name: "s".into() })[0];
        assert_eq!(
            (st.soft_processes, st.resident, st.pooled, st.fragmented, st.fragmentation_pct),
            (1, 600, 400, 300, 30)
        );
        // A pager thread: defragments when asked, giving back what was stuck.
        let pager = &me.vgpu.live.pager;
        let seen = pager.seq.load(Ordering::Acquire);
        let worker = std::thread::spawn(move || {
            while pager.seq.load(Ordering::Acquire) == seen {
                tessera_region::futex::wait(&pager.seq, seen, Duration::from_secs(5));
            }
            std::thread::sleep(Duration::from_millis(30));
            stats.pooled.store(100, Ordering::Release);
            stats.fragmented.store(0, Ordering::Release);
            stats.defragged_seq.store(pager.defrag_seq.load(Ordering::Acquire), Ordering::Release);
        });
        let resp = m.handle(defrag("s"));
        worker.join().unwrap();
        let report = resp.pager.unwrap();
        assert_eq!(report.processes, [std::process::id()]);
        assert_eq!(
            (report.held_before, report.fragmentation_pct_before, report.held_after, report.fragmentation_pct_after),
            (1000, 30, 700, 0)
        );
        assert_eq!(resp.vgpus[0].pooled, 100);
        // Nobody answers: a timeout naming the process.
        let e =
            m.ask_pagers("s", PagerRequest::Defrag, Duration::from_millis(50), Duration::from_millis(5)).unwrap_err();
        assert_eq!(e.code, ErrorCode::Timeout);
        let e = e.message;
        assert!(e.contains(&format!("pid {}", std::process::id())) && e.contains("did not finish"), "{e}");
        // A process that joined in hard mode is not asked.
        me.me.flags.store(0, Ordering::Release);
        let report = m.handle(defrag("s")).pager.unwrap();
        assert_eq!((report.processes, report.hard_processes), (vec![], vec![std::process::id()]));
    }

    /// Runs `f` on a thread of its own; its result, or `None` if it is not done within 10 s (a functional
    /// bound: what is tested never waits, a blocked call never returns).
    fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(10)).ok()
    }

    fn shared(m: Manager) -> &'static Manager {
        Box::leak(Box::new(m))
    }

    #[test]
    fn reads_do_not_wait_for_a_change_being_saved() {
        let f = Fixture::new("reads");
        let m = shared(f.manager());
        ok(m, create("a", 10));
        // A change in progress (saving can take seconds on a loaded disk) holds the configuration.
        let change = m.config();
        for r in [Request::List, Request::Show { name: "a".into() }, Request::Stats { name: None }, Request::Version] {
            let resp = within_10s(move || m.handle(r)).expect("a read waited for a change in progress");
            assert!(resp.ok, "{resp:?}");
        }
        assert_eq!(within_10s(move || m.specs().len()), Some(1));
        drop(change);
        // What reads see is what was committed last: a new vGPU once its creation is saved.
        ok(m, create("b", 10));
        assert_eq!(ok(m, Request::List).len(), 2);
    }

    #[test]
    fn reads_are_answered_during_a_save_and_the_change_only_once_saved() {
        let f = Fixture::new("slow-save");
        let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let gate = Mutex::new((entered_tx, released));
        let mut store = Store::open(&f.dir.join("state")).unwrap();
        // Every save waits until released, as an `fsync` on a loaded disk does for seconds.
        store.before_save = Some(Box::new(move || {
            let gate = gate.lock().unwrap();
            let _ = gate.0.send(());
            let _ = gate.1.recv();
        }));
        let m = shared(Manager::start(f.region, store, vec![80 << 30; 2], Arc::default()).unwrap());
        let (done_tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done_tx.send(m.handle(create("a", 10)));
        });
        entered.recv().unwrap();
        for r in [Request::List, Request::Show { name: "a".into() }, Request::Stats { name: None }] {
            let resp = within_10s(move || m.handle(r)).expect("a read waited for a save in progress");
            assert!(resp.ok, "{resp:?}");
        }
        let path = f.dir.join("state").join(crate::vgpus::store::FILE);
        assert!(done.recv_timeout(Duration::from_millis(200)).is_err(), "the change was answered before it was saved");
        assert!(!path.exists(), "nothing saved yet");
        release.send(()).unwrap();
        let resp = done.recv_timeout(Duration::from_secs(10)).expect("the change was answered once saved");
        assert!(resp.ok, "{resp:?}");
        assert!(std::fs::read_to_string(&path).unwrap().contains("\"a\""), "saved when answered");
    }

    #[test]
    fn another_process_holding_the_region_lock_holds_up_no_read_and_fails_create_with_a_clear_error() {
        let f = Fixture::new("flock");
        let m = shared(f.manager());
        ok(m, create("a", 10));
        // The region file itself locked, as anyone who may read it could: it holds nothing up.
        let region = std::fs::File::open(f.region.path()).unwrap();
        let on_region = tessera_region::flock::FileLock::new(&region).unwrap();
        ok(m, create("c", 10));
        ok(m, Request::Rm { name: "c".into() });
        drop(on_region);
        // The owner's lock file, locked as a joining tenant of the owner locks it, and kept locked as a
        // stopped one would (no other user can open it).
        let lock = tessera_region::open::lock_path(f.region.path());
        let other = std::fs::File::open(&lock).unwrap();
        let held = tessera_region::flock::FileLock::shared(&other).unwrap();
        let change = Change { share: Some(20), ..Change::default() };
        for r in [
            Request::List,
            Request::Show { name: "a".into() },
            Request::Set { name: "a".into(), change },
            Request::Suspend { name: "a".into() },
            Request::Resume { name: "a".into(), pids: vec![] },
        ] {
            let resp = within_10s(move || m.handle(r.clone())).expect("a request waited for another's file lock");
            assert!(resp.ok, "{resp:?}");
        }
        // Naming a slot needs the lock: refused after a while, naming who holds it.
        let resp = within_10s(move || m.handle(create("b", 10))).expect("create waited for ever");
        let e = resp.error.unwrap();
        assert!(e.contains(&format!("{lock} has been locked for more than 5000 ms by pid")), "{e}");
        assert_eq!(ok(m, Request::List).len(), 1, "nothing created");
        drop(held);
        ok(m, create("b", 10));
    }

    #[test]
    fn false_process_slots_are_judged_with_no_lock_held() {
        let f = Fixture::new("judge");
        let m = shared(f.manager());
        ok(m, create("a", 10));
        ok(m, create("b", 10));
        let index = slots::find(&f.region.lock().unwrap(), "a").unwrap();
        let v = &f.region.region().vgpus[index];
        // A process slot naming a process that is gone, holding memory.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        v.live.procs[2].used[0].store(4096, Ordering::SeqCst);
        v.live.procs_hwm.store(3, Ordering::SeqCst);
        v.live.procs[2].set_owner(0, gone);
        // The tenant checks' judging blocks (a slow `/proc`) until the requests below are answered.
        let (judging_tx, judging) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let watch = std::thread::spawn(move || {
            m.free_strays_judged_by(|v, owner, live, view, vouched| {
                let _ = judging_tx.send(());
                let _ = released.recv();
                Verifier::default().judge_slots(v, owner, live, view, vouched, &mut integrity::ROUND_BUDGET.clone())
            });
        });
        judging.recv().unwrap();
        for r in
            [Request::List, Request::Suspend { name: "b".into() }, Request::Rm { name: "b".into() }, create("c", 5)]
        {
            let resp = within_10s(move || m.handle(r)).expect("a request waited for the tenant checks' /proc reads");
            assert!(resp.ok, "{resp:?}");
        }
        drop(release);
        watch.join().unwrap();
        assert_eq!(v.live.procs[2].word(), 0, "the false slot was freed all the same");
        assert_eq!(v.used(0), 0, "with its bytes");
    }

    #[test]
    fn rm_refuses_while_processes_are_attached() {
        let f = Fixture::new("rm");
        let m = f.manager();
        ok(&m, create("a", 10));
        let attached = tessera_region::attach::attach(f.region.path(), "a", None).unwrap();
        assert_eq!(
            attached.vgpu.config.limit[0].load(Ordering::Relaxed),
            1 << 30,
            "a process adopts the daemon's quota"
        );
        let e = err(&m, Request::Rm { name: "a".into() });
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        assert_eq!(ok(&m, Request::List).len(), 1);
        // Detach (as a process that exits would be reclaimed), then it goes.
        attached.me.set_owner(0, 0);
        assert!(ok(&m, Request::Rm { name: "a".into() }).is_empty());
        assert!(ok(&m, Request::List).is_empty());
        assert!(err(&m, Request::Rm { name: "a".into() }).contains("no vGPU named"));
    }
}
