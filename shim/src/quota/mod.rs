//! Memory quotas: each process accounts its device memory in a vGPU slot, shared through the region
//! file by every process started with the same `TESSERA_VGPU`, or private to the process without one.
//!
//! - [`accounting`]: reservations announced, checked against the sum of every process's usage, then
//!   recorded in the process's own slot, so that `used` never sums past `limit`;
//! - [`measuring`]: first contexts of a vGPU measured one at a time, and the context cost it learns;
//! - [`reclaim`]: giving back what dead processes held (shared with the daemon, in `tessera_ffi`);
//! - [`region`]: the region file and its slots.
//!
//! With neither `TESSERA_MEMORY_LIMIT` nor `TESSERA_VGPU` there is no quota ([`active`] is `None`) and no
//! region file is touched: the shim stays transparent.

mod accounting;
mod join;
mod measuring;
mod region;

pub use measuring::FirstContext;

use crate::guard::{Res, Status};
use crate::log;
use region::{Attached, Limits};
use std::sync::OnceLock;
use tessera_ffi::cuda::{CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY};
use tessera_ffi::units::format_size;
use tessera_region::reclaim;
use tessera_region::{MAX_DEVICES, UNLIMITED};

/// The quota this process allocates against.
pub struct Quota {
    slots: Attached,
    /// How messages name it: `vGPU "team"` or `this process`.
    label: String,
}

/// Retries of a refused reservation that reclaiming, or waiting out others' reservations, may let through.
const RETRIES: usize = 4;

static QUOTA: OnceLock<Result<Option<Quota>, SetupError>> = OnceLock::new();

/// Why the process has no usable quota (said on stderr when it happened).
#[derive(Debug, thiserror::Error)]
enum SetupError {
    /// The configuration is malformed.
    #[error(transparent)]
    Config(&'static crate::config::ConfigError),
    /// The vGPU cannot be joined in the region.
    #[error(transparent)]
    Attach(#[from] tessera_region::attach::AttachError),
}

/// The process's quota, set up on first use (normally by `cuInit`): `Ok(None)` when none is configured;
/// `Err(CUDA_ERROR_INVALID_VALUE)` when the configuration or the region is unusable (already reported).
pub fn active() -> Result<Option<&'static Quota>, Status> {
    match QUOTA.get_or_init(set_up) {
        Ok(q) => Ok(q.as_ref()),
        Err(_) => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

fn set_up() -> Result<Option<Quota>, SetupError> {
    let config = crate::init::config().map_err(SetupError::Config)?;
    let limits: Option<Limits> =
        config.memory_limit.as_ref().map(|l| std::array::from_fn(|d| l.get(d as u32).unwrap_or(UNLIMITED)));
    // A standalone share is a limit of its own too: with neither, an unmanaged vGPU is not set up.
    let own_share = config.compute_share.is_some();
    let (slots, label) = match (&config.vgpu, limits) {
        (None, None) => return Ok(None),
        (None, Some(l)) => (region::private(&l), "this process".to_string()),
        (Some(name), l) => match region::attach_with_share(&config.region, name, l.as_ref(), own_share) {
            Ok(s) => (s, format!("vGPU {name:?}")),
            Err(e) => {
                // Printed whatever TESSERA_LOG says: the program is about to be refused the GPU.
                eprintln!("tessera: {e}; refusing to run CUDA without the configured quota");
                return Err(e.into());
            }
        },
    };
    if let (Some(name), Some(slot)) = (&config.vgpu, slots.me_index)
        && slots.region.is_some()
        && tessera_region::settings::is_managed(slots.vgpu)
        && let Err(e) = join::tell_daemon(&config.socket, name, slot)
    {
        log::warn(format_args!(
            "vGPU {name:?}: this process's slot is not recorded by the daemon ({e}); it runs on its quota, but \
             does not keep `tessera vgpu rm` from removing the vGPU unless the daemon can see it in /proc"
        ));
    }
    let limits: Limits = std::array::from_fn(|d| slots.vgpu.config.limit[d].load(std::sync::atomic::Ordering::Acquire));
    log::info(format_args!("memory quota: {label}, {}", region::describe(&limits)));
    Ok(Some(Quota { slots, label }))
}

impl Quota {
    /// The vGPU's slot and, for a vGPU of the shared region, the region (what [`crate::launch`] gates
    /// launches on).
    pub fn slot(&self) -> (&'static tessera_region::VgpuSlot, Option<&'static tessera_region::Region>) {
        (self.slots.vgpu, self.slots.region)
    }

    /// This process's slot (where soft mode publishes what it holds).
    pub fn me(&self) -> &'static tessera_region::ProcSlot {
        self.slots.me
    }

    /// The quota of device `dev` ([`UNLIMITED`] when none is set).
    pub fn limit(&self, dev: usize) -> u64 {
        self.slots.vgpu.config.limit.get(dev).map_or(UNLIMITED, |l| l.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Bytes in use on device `dev` by every process of the quota.
    pub fn used(&self, dev: usize) -> u64 {
        self.slots.vgpu.used(dev)
    }

    /// Reclaims dead processes' bytes now; returns how many processes were found dead.
    fn reclaim_now(&self) -> usize {
        if self.slots.region.is_some() {
            reclaim::reclaim_vgpu(self.slots.vgpu, self.slots.me_index, &tessera_region::pid_ns::Unseen)
        } else {
            0
        }
    }

    /// Reclaims if this vGPU was not scanned in the last second (one clock read otherwise).
    pub fn reclaim_if_due(&self) {
        if self.slots.region.is_some() && reclaim::due(self.slots.vgpu, reclaim::now_ns()) {
            self.reclaim_now();
        }
    }

    /// Takes `bytes` on device `dev` before `what` (e.g. `cuMemAlloc`) asks the driver for them. Over the
    /// quota, dead processes are reclaimed and the request retried; so is a request refused only for
    /// reservations other processes were making at that instant (a few times: they last a few
    /// instructions). If it still does not fit, one line naming the quota and the request is logged and
    /// `CUDA_ERROR_OUT_OF_MEMORY` returned.
    pub fn reserve(&self, dev: usize, bytes: u64, what: &str) -> Res {
        let Some(_) = self.slots.vgpu.config.limit.get(dev) else { return Ok(()) };
        self.reclaim_if_due();
        let (vgpu, me) = (self.slots.vgpu, self.slots.me);
        let mut refused = match accounting::reserve(vgpu, me, dev, bytes) {
            Ok(()) => return Ok(()),
            Err(r) => r,
        };
        let mut reclaimed = self.reclaim_now() > 0;
        for _ in 0..RETRIES {
            let others_reserving = refused.pending > 0 && refused.used.saturating_add(bytes) <= refused.limit;
            if !reclaimed && !others_reserving {
                break;
            }
            if !reclaimed {
                std::thread::yield_now();
            }
            reclaimed = false;
            match accounting::reserve(vgpu, me, dev, bytes) {
                Ok(()) => return Ok(()),
                Err(r) => refused = r,
            }
        }
        Err(self.refuse(dev, &format!("{what} of {} ({bytes} bytes)", format_size(bytes)), refused.limit))
    }

    /// Logs that `request` on device `dev` does not fit the quota of `limit` bytes; the error to return.
    fn refuse(&self, dev: usize, request: &str, limit: u64) -> Status {
        let used = self.used(dev);
        log::warn(format_args!(
            "{request} on device {dev} refused: over the memory quota of {}, {} ({limit} bytes) with {} ({used} \
             bytes) in use",
            self.label,
            format_size(limit),
            format_size(used),
        ));
        CUDA_ERROR_OUT_OF_MEMORY
    }

    /// Takes all the room left on device `dev`, up to `bytes`, before `what` asks the driver for something
    /// of unknown size (a context whose cost is being measured); returns what it took. Nothing left is
    /// refused as [`Quota::reserve`] refuses.
    pub fn reserve_up_to(&self, dev: usize, bytes: u64, what: &str) -> Res<u64> {
        if dev >= MAX_DEVICES {
            return Ok(0);
        }
        self.reclaim_if_due();
        let take = || accounting::reserve_up_to(self.slots.vgpu, self.slots.me, dev, bytes);
        let held = match take() {
            0 if self.reclaim_now() > 0 => take(),
            held => held,
        };
        if held == 0 {
            return Err(self.refuse(dev, &format!("{what} (of unknown size)"), self.limit(dev)));
        }
        Ok(held)
    }

    /// Waits until what a context costs on device `dev` is known to the quota, or this process may measure
    /// it (see [`measuring`]).
    pub fn first_context(&self, dev: usize) -> FirstContext {
        measuring::first_context(self.slots.vgpu, dev, self.slots.region.is_some())
    }

    /// Records what a context costs on device `dev`, as this process measured it, for the quota's other
    /// processes (the first measurement stands).
    pub fn publish_context_cost(&self, dev: usize, cost: u64) {
        measuring::publish(self.slots.vgpu, dev, cost);
    }

    /// Gives back `bytes` taken with [`Quota::reserve`] on device `dev`.
    pub fn release(&self, dev: usize, bytes: u64) {
        if dev < MAX_DEVICES {
            accounting::release(self.slots.me, dev, bytes);
        }
    }

    /// Moves a reservation of `reserved` bytes to the `actual` size the driver used: gives back the
    /// difference, or takes the extra (failing as [`Quota::reserve`] does, the reservation kept).
    pub fn adjust(&self, dev: usize, reserved: u64, actual: u64, what: &str) -> Res {
        if actual > reserved {
            self.reserve(dev, actual - reserved, what)
        } else {
            self.release(dev, reserved - actual);
            Ok(())
        }
    }

    /// `(free, total)` of device `dev` as the program should see them, given the driver's figures:
    /// `total = min(limit, real total)`, `free = min(total - used, real free)`; `None` without a limit.
    pub fn view(&self, dev: usize, real_free: u64, real_total: u64) -> Option<(u64, u64)> {
        let limit = self.limit(dev);
        if limit == UNLIMITED {
            return None;
        }
        let total = limit.min(real_total);
        Some((total.saturating_sub(self.used(dev)).min(real_free), total))
    }
}
