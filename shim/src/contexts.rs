//! The device memory contexts cost, charged to the quota like any allocation, and the teardown of what
//! a destroyed context owned.
//!
//! What a context costs is what the driver reports for it: on the process's first context on a device,
//! NVML's usage of this process on that device is read before and after the driver creates it (falling
//! back to the device's total usage when NVML does not list the process, e.g. in a PID namespace). No
//! other allocation of the process can skew that measurement: allocating needs a context on the device,
//! and context operations are serialized here. Without NVML a context is charged nothing (logged).
//!
//! Every context is reserved in the quota before the driver is asked, and given back if creation fails:
//! - at the cost this process measured, for its later contexts on the device;
//! - at the cost the vGPU learned from another process ([`Quota::first_context`]), for its first one,
//!   which is still measured, the reservation then moved to what it really cost;
//! - while no process of the vGPU knows the cost, one at a time across the vGPU: the measuring process
//!   holds all the room left in the quota (up to [`MEASURE_HEADROOM`]) while it creates and measures its
//!   context, keeps exactly its cost reserved, then publishes the cost. Only a context that the whole room
//!   left cannot hold exists, for as long as it takes to destroy it again, beyond the quota.
//!
//! A destroyed context (`cuCtxDestroy`, or a primary context released for the last time or reset) frees
//! everything allocated in it, so its cost and its allocations go back to the quota.

use crate::alloc_table::{Kind, TABLE};
use crate::guard::{Res, Status, status};
use crate::nvml_real::Session;
use crate::quota::{self, FirstContext, Quota};
use crate::{driver, log};
use std::sync::{Mutex, MutexGuard};
use tessera_ffi::sys::{CUcontext, CUdevice};
use tessera_ffi::units::format_size;
use tessera_region::MAX_DEVICES;

/// Contexts this process holds, and what each device's contexts cost.
struct Registry {
    /// Measured cost of a context, per device.
    cost: [Option<u64>; MAX_DEVICES],
    /// Contexts made with `cuCtxCreate`: `(handle, device, cost)`.
    created: Vec<(u64, usize, u64)>,
    /// Each device's primary context while it exists: `(handle, cost)`.
    primary: [Option<(u64, u64)>; MAX_DEVICES],
}

static REGISTRY: Mutex<Registry> =
    Mutex::new(Registry { cost: [None; MAX_DEVICES], created: Vec::new(), primary: [None; MAX_DEVICES] });

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// What creating a context is charged.
const WHAT: &str = "context creation";

/// A measurement of one context's cost in progress.
struct Measure {
    session: Option<Session>,
    device: Option<tessera_ffi::nvml::NvmlDevice>,
    own_before: Option<u64>,
    device_before: Option<u64>,
}

impl Measure {
    fn start(dev: CUdevice) -> Measure {
        let session = Session::open();
        let device = session.as_ref().and_then(|s| s.device(dev));
        let (own_before, device_before) = match (&session, device) {
            (Some(s), Some(d)) => (s.own_usage(d), s.device_used(d)),
            _ => (None, None),
        };
        Measure { session, device, own_before, device_before }
    }

    fn finish(self, dev: usize) -> u64 {
        let (Some(s), Some(d)) = (&self.session, self.device) else {
            log::warn(format_args!("NVML is unavailable: contexts on device {dev} are not charged to the quota"));
            return 0;
        };
        let cost = match (s.own_usage(d), s.device_used(d), self.device_before) {
            (Some(after), _, _) => after.saturating_sub(self.own_before.unwrap_or(0)),
            (None, Some(after), Some(before)) => after.saturating_sub(before),
            _ => 0,
        };
        log::info(format_args!("a context on device {dev} costs {} ({cost} bytes)", format_size(cost)));
        cost
    }
}

/// Room held in the quota while a context of unknown cost is measured: more than a context costs on any
/// GPU we know of, and little enough not to starve the vGPU's other processes for that moment.
pub const MEASURE_HEADROOM: u64 = 2 << 30;

/// Creates a context on `d` through `real`, charging its cost: reserved before the driver is asked
/// (see the module documentation), measured on the process's first context on the device and the
/// reservation moved to the measured cost (calling `undo` if the quota cannot hold it). Returns the new
/// context's handle (read by `handle`) and its cost.
fn charge_new(
    q: &Quota,
    reg: &mut Registry,
    dev: CUdevice,
    d: usize,
    real: impl FnOnce() -> Status,
    handle: impl FnOnce() -> u64,
    undo: impl FnOnce(),
) -> Res<(u64, u64)> {
    if let Some(c) = reg.cost[d] {
        q.reserve(d, c, WHAT)?;
        if let Err(e) = status(real()) {
            q.release(d, c);
            return Err(e);
        }
        return Ok((handle(), c));
    }
    let (held, turn) = match q.first_context(d) {
        FirstContext::Known(c) => {
            q.reserve(d, c, WHAT)?;
            (c, None)
        }
        FirstContext::Measure(turn) => (q.reserve_up_to(d, MEASURE_HEADROOM, WHAT)?, Some(turn)),
    };
    let measure = Measure::start(dev);
    if let Err(e) = status(real()) {
        q.release(d, held);
        return Err(e);
    }
    let h = handle();
    let cost = measure.finish(d);
    reg.cost[d] = Some(cost);
    let adjusted = q.adjust(d, held, cost, WHAT);
    if adjusted.is_err() {
        undo();
        q.release(d, held);
    }
    // Published once the headroom is given back, so that the processes waiting for the cost find the room
    // this measurement did not need.
    if turn.is_some() {
        q.publish_context_cost(d, cost);
    }
    drop(turn);
    adjusted.map(|()| (h, cost))
}

/// Gives back what a destroyed context owned: its allocations and arrays, and its stream-ordered frees
/// still pending (the driver freed them all).
fn drain(q: &Quota, ctx: u64) {
    crate::pending_free::context_ended(ctx);
    TABLE.drain_owned(ctx, &[Kind::Linear, Kind::Array, Kind::Mipmap], |_, _, e| q.release(e.device as usize, e.bytes));
}

/// `cuCtxCreate` (every version): charges the context's cost.
pub fn create(pctx: *mut CUcontext, dev: CUdevice, real: impl FnOnce() -> Status) -> Res {
    let (Some(q), Some(d)) = (quota::active()?, driver::device_index(dev)) else { return status(real()) };
    let mut reg = registry();
    // Both closures run only after the driver succeeded.
    // SAFETY: the driver succeeded, so `pctx` holds the new context.
    let read = || unsafe { *pctx } as u64;
    let destroy = || {
        if let Some(f) = crate::real::cuCtxDestroy_v2.get() {
            // SAFETY: destroys the context the driver just created for us.
            unsafe { f(*pctx) };
        }
    };
    let (h, cost) = charge_new(q, &mut reg, dev, d, real, read, destroy)?;
    reg.created.push((h, d, cost));
    Ok(())
}

/// `cuCtxDestroy` (every version): gives back the context's cost and allocations.
pub fn destroy(ctx: CUcontext, real: impl FnOnce() -> Status) -> Res {
    let Some(q) = quota::active()? else { return status(real()) };
    let mut reg = registry();
    status(real())?;
    if let Some(i) = reg.created.iter().position(|c| c.0 == ctx as u64) {
        let (_, d, cost) = reg.created.swap_remove(i);
        q.release(d, cost);
    }
    drain(q, ctx as u64);
    Ok(())
}

/// `cuDevicePrimaryCtxRetain`: charges the primary context's cost when this retain creates it.
pub fn primary_retain(pctx: *mut CUcontext, dev: CUdevice, real: impl FnOnce() -> Status) -> Res {
    let (Some(q), Some(d)) = (quota::active()?, driver::device_index(dev)) else { return status(real()) };
    let mut reg = registry();
    let exists = driver::primary_active(dev).unwrap_or(reg.primary[d].is_some());
    if exists {
        return status(real());
    }
    // SAFETY: run only after the driver succeeded, so `pctx` holds the primary context.
    let read = || unsafe { *pctx } as u64;
    let release = || {
        if let Some(f) = crate::real::cuDevicePrimaryCtxRelease_v2.get() {
            // SAFETY: drops the one reference just taken, which destroys the context again.
            unsafe { f(dev) };
        }
    };
    let created = charge_new(q, &mut reg, dev, d, real, read, release)?;
    reg.primary[d] = Some(created);
    Ok(())
}

/// `cuDevicePrimaryCtxRelease` and `cuDevicePrimaryCtxReset` (every version): when the primary context
/// is gone afterwards, gives back its cost and allocations.
pub fn primary_release(dev: CUdevice, real: impl FnOnce() -> Status) -> Res {
    let (Some(q), Some(d)) = (quota::active()?, driver::device_index(dev)) else { return status(real()) };
    let mut reg = registry();
    status(real())?;
    if let Some((h, cost)) = reg.primary[d]
        && driver::primary_active(dev) == Some(false)
    {
        reg.primary[d] = None;
        q.release(d, cost);
        drain(q, h);
    }
    Ok(())
}
