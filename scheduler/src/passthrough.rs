//! The daemon's requests about GPUs for virtual machines (`devices`, `bind-vfio`, `unbind-vfio`,
//! `mdev-types`, `mdev-list`, `mdev-create`, `mdev-rm`, `reconcile`): carried out with the
//! `tessera-passthrough` library on the sysfs at `TESSERA_SYSFS_ROOT`, joined with what only the daemon
//! knows: which GPU each of its devices is (the driver's PCI bus id), its vGPUs and attached processes on
//! it, and whether MIG is on. A GPU Tessera's tenants use, or one in its IOMMU group, is never given to
//! `vfio-pci`. The requests that write sysfs run one at a time.

use crate::api::protocol::{Error, ErrorCode, Reply, Request};
use crate::observe::logger::say;
use crate::vgpus::manager::Manager;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};
use tessera_client::devices::{DeviceMode, Gpu};
use tessera_passthrough::discover::{self, NVIDIA, VFIO_DRIVER};
use tessera_passthrough::pci_ids::PciIds;
use tessera_passthrough::state::State;
use tessera_passthrough::sysfs::Sysfs;
use tessera_passthrough::{mdev, reconcile, vfio};

/// What the passthrough requests keep, in the daemon's [`State`](crate::state::State).
#[derive(Default)]
pub struct Passthrough {
    /// The daemon's state directory, where the passthrough records live (set at start).
    state_dir: OnceLock<PathBuf>,
    /// Held while a request reads or writes sysfs: a bind and an mdev creation never interleave.
    one_at_a_time: Mutex<()>,
}

/// Called at the daemon's start: remembers the state directory in `ops` and reconciles (an interrupted
/// bind is undone, orphan mdevs removed), saying what it did; a failure is said, never fatal.
pub fn start(ops: &Passthrough, state_dir: &Path) {
    let _ = ops.state_dir.set(state_dir.to_path_buf());
    match open(ops).and_then(|(sys, state)| reconcile::reconcile(&sys, &state)) {
        Ok(report) if report.is_empty() => {}
        Ok(report) => say!(
            "tessera daemon: reconcile: rolled back {:?}, removed orphan mdevs {:?}, dropped records of vanished \
             mdevs {:?}{}",
            report.rolled_back,
            report.orphans_removed,
            report.records_dropped,
            if report.problems.is_empty() {
                String::new()
            } else {
                format!("; problems: {}", report.problems.join("; "))
            }
        ),
        Err(e) => say!("tessera daemon: warning: reconcile of passthrough devices failed: {e}"),
    }
}

/// The sysfs tree and the state files.
fn open(ops: &Passthrough) -> Result<(Sysfs, State), Error> {
    let sys = Sysfs::from_env()?;
    let dir = ops
        .state_dir
        .get()
        .ok_or_else(|| Error::new(ErrorCode::Unavailable, "this daemon was started without a state directory"))?;
    Ok((sys, State::open(dir)?))
}

/// Carries out `request` when it is one of this module's (`None` for any other request).
pub fn carry_out(manager: &Manager, request: &Request) -> Option<Result<Reply, Error>> {
    let ok = || Reply::ok(Vec::new());
    // Each request runs on the sysfs tree and state files, one at a time.
    let run = |op: &dyn Fn(&Sysfs, &State) -> Result<Reply, Error>| {
        let ops = &manager.state().passthrough;
        Some(open(ops).and_then(|(sys, state)| {
            let _one = ops.one_at_a_time.lock().unwrap_or_else(PoisonError::into_inner);
            op(&sys, &state)
        }))
    };
    match request {
        Request::Devices => run(&|sys, state| Ok(Reply { gpus: Some(devices(manager, sys, state)?), ..ok() })),
        Request::BindVfio { address } => run(&|sys, state| {
            let (_, members) = vfio::group_of(sys, address)?;
            refuse_if_used(&used_devices(manager), sys, members.iter().map(|m| m.address.as_str()))?;
            Ok(Reply { bind: Some(vfio::bind(sys, state, address)?), ..ok() })
        }),
        Request::UnbindVfio { address } => {
            run(&|sys, state| Ok(Reply { bind: Some(vfio::unbind(sys, state, address)?), ..ok() }))
        }
        Request::MdevTypes => run(&|sys, _| Ok(Reply { mdev_types: Some(discover::all_mdev_types(sys)), ..ok() })),
        Request::MdevList => run(&|sys, state| Ok(Reply { mdevs: Some(mdev::list(sys, state)?), ..ok() })),
        Request::MdevCreate { parent, type_id, uuid } => run(&|sys, state| {
            Ok(Reply { mdevs: Some(vec![mdev::create(sys, state, parent, type_id, uuid.as_deref())?]), ..ok() })
        }),
        Request::MdevRm { uuid } => run(&|sys, state| {
            mdev::remove(sys, state, uuid)?;
            Ok(ok())
        }),
        Request::Reconcile => {
            run(&|sys, state| Ok(Reply { reconcile: Some(reconcile::reconcile(sys, state)?), ..ok() }))
        }
        _ => None,
    }
}

/// One of the daemon's devices and how Tessera uses it.
struct Used {
    /// Its ordinal.
    ordinal: u32,
    /// Its PCI address (sysfs's form), when the driver told it.
    address: Option<String>,
    /// Its vGPUs.
    vgpus: Vec<String>,
    /// Processes attached to them.
    processes: Vec<u32>,
    /// MIG is on.
    mig: bool,
}

/// Every device of the daemon with its vGPUs, processes and MIG mode.
fn used_devices(manager: &Manager) -> Vec<Used> {
    let readings = manager.state().sensors.all();
    let vgpus = manager.handle(Request::List).vgpus;
    let count = vgpus.iter().map(|v| v.spec.device as usize + 1).max().unwrap_or(0).max(readings.len());
    (0..count as u32)
        .map(|ordinal| {
            let reading = readings.get(ordinal as usize);
            let mine = vgpus.iter().filter(|v| v.spec.device == ordinal);
            Used {
                ordinal,
                address: reading
                    .and_then(|r| r.pci_bus_id.as_deref())
                    .and_then(|a| tessera_passthrough::names::pci_address(a).ok()),
                vgpus: mine.clone().map(|v| v.spec.name.clone()).collect(),
                processes: mine.flat_map(|v| v.processes.iter().copied()).collect(),
                mig: reading.and_then(|r| r.mig) == Some(true),
            }
        })
        .collect()
}

impl Used {
    /// Tessera's tenants use it.
    fn in_use(&self) -> bool {
        !self.vgpus.is_empty() || !self.processes.is_empty()
    }

    /// `vGPU(s) a, b; process(es) 4300` (or `device N` alone).
    fn describe(&self) -> String {
        let mut parts = vec![format!("Tessera device {}", self.ordinal)];
        if !self.vgpus.is_empty() {
            parts.push(format!("vGPU(s) {}", self.vgpus.join(", ")));
        }
        if !self.processes.is_empty() {
            let pids: Vec<String> = self.processes.iter().map(u32::to_string).collect();
            parts.push(format!("attached process(es) {}", pids.join(", ")));
        }
        parts.join("; ")
    }
}

/// Refuses a bind of a group with a member Tessera's tenants use. A used device whose PCI address the
/// driver did not tell could be any NVIDIA GPU: then every NVIDIA member is refused, never risked.
fn refuse_if_used<'a>(used: &[Used], sys: &Sysfs, members: impl Iterator<Item = &'a str>) -> Result<(), Error> {
    for member in members {
        if let Some(u) = used.iter().find(|u| u.in_use() && u.address.as_deref() == Some(member)) {
            return Err(Error::new(
                ErrorCode::InUse,
                format!(
                    "{member} is used by Tessera ({}): a GPU of the IOMMU group cannot go to vfio-pci while Tessera's \
                     tenants use it (their processes would die); remove those vGPUs first",
                    u.describe()
                ),
            ));
        }
        let nvidia = discover::function(sys, &PciIds::default(), member).is_some_and(|f| f.vendor == NVIDIA);
        if let Some(u) = used.iter().find(|u| u.in_use() && u.address.is_none()).filter(|_| nvidia) {
            return Err(Error::new(
                ErrorCode::InUse,
                format!(
                    "{member} may be used by Tessera: the driver did not tell which PCI device Tessera device {} is, \
                     and it is in use ({}); remove those vGPUs first",
                    u.ordinal,
                    u.describe()
                ),
            ));
        }
    }
    Ok(())
}

/// Every GPU, with the mode the daemon's knowledge gives it.
fn devices(manager: &Manager, sys: &Sysfs, state: &State) -> Result<Vec<Gpu>, Error> {
    let ids = PciIds::load().map_err(|e| Error::new(ErrorCode::Invalid, e.to_string()))?;
    let used = used_devices(manager);
    let mut gpus = discover::gpus(sys, &ids, &mdev::created(state)?);
    for gpu in &mut gpus {
        let Some(mine) = used.iter().find(|u| u.address.as_deref() == Some(gpu.function.address.as_str())) else {
            continue;
        };
        gpu.tessera_device = Some(mine.ordinal);
        if gpu.function.driver.as_deref() == Some(VFIO_DRIVER) {
            continue;
        }
        if mine.in_use() {
            gpu.mode = DeviceMode::TesseraShared;
            gpu.mode_detail = Some(mine.describe());
        } else if mine.mig {
            gpu.mode = DeviceMode::Mig;
        }
    }
    Ok(gpus)
}
