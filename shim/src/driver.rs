//! Driver calls the shim makes for itself, none of them intercepted: where the calling thread's memory
//! goes (current device and context), whether a primary context exists, device UUIDs, and running the
//! shim's own work in a given context.
//!
//! A `CUdevice` is its ordinal: the real driver hands out `cuDeviceGet(&d, i)` as `d == i`, and the quota
//! is per ordinal.

use crate::guard::{Res, status};
use crate::real::{
    cuCtxGetCurrent as CTX_GET_CURRENT, cuCtxGetDevice as CTX_GET_DEVICE, cuCtxPopCurrent_v2 as CTX_POP,
    cuCtxPushCurrent_v2 as CTX_PUSH, cuDeviceGetCount as DEVICE_COUNT, cuDeviceGetUuid as DEVICE_UUID,
    cuDeviceGetUuid_v2 as DEVICE_UUID_V2, cuDevicePrimaryCtxGetState as PRIMARY_STATE,
};
use std::ffi::{c_int, c_uint};
use tessera_ffi::sys::{CUcontext, CUdevice, CUuuid};
use tessera_region::MAX_DEVICES;

/// Runs `f` with context `ctx` pushed current on the calling thread, then pops it (the thread's own
/// current context is back); the push's error if `ctx` cannot be pushed, not-supported if the driver
/// lacks the calls.
pub fn in_context<T>(ctx: u64, f: impl FnOnce() -> T) -> Res<T> {
    let not_supported = tessera_ffi::cuda::CUDA_ERROR_NOT_SUPPORTED;
    let (push, pop) = (CTX_PUSH.get().ok_or(not_supported)?, CTX_POP.get().ok_or(not_supported)?);
    // SAFETY: cuCtxPushCurrent's C signature; `ctx` is the handle of a context of this process.
    status(unsafe { push(ctx as CUcontext) })?;
    let out = f();
    let mut popped: CUcontext = std::ptr::null_mut();
    // SAFETY: cuCtxPopCurrent's C signature; `popped` is a valid output; it pops what was pushed above.
    unsafe { pop(&mut popped) };
    // The thread's context changed twice behind the intercepted entry points: what it cached while `f`
    // ran (the pushed context) is not its own.
    crate::current::forget_here();
    Ok(out)
}

/// Where the calling thread's allocations go: its current context and that context's device.
#[derive(Clone, Copy, Debug)]
pub struct Site {
    /// Device ordinal, below [`MAX_DEVICES`].
    pub device: usize,
    /// The current context's handle.
    pub ctx: u64,
}

/// The quota slot of device `dev`, or `None` for an ordinal the region has no slot for.
pub fn device_index(dev: CUdevice) -> Option<usize> {
    usize::try_from(dev).ok().filter(|&d| d < MAX_DEVICES)
}

/// The calling thread's current context handle (`None` when none is current) and that context's quota
/// slot (`None` also for a device beyond the region's slots): one driver call without a context, two
/// with one.
pub fn context_and_device() -> (Option<u64>, Option<usize>) {
    let Some(ctx) = current_context() else { return (None, None) };
    let mut dev: CUdevice = 0;
    let Some(get_device) = CTX_GET_DEVICE.get() else { return (Some(ctx), None) };
    // SAFETY: cuCtxGetDevice's C signature; `dev` is a valid output.
    let ok = unsafe { get_device(&mut dev) } == 0;
    (Some(ctx), if ok { device_index(dev) } else { None })
}

/// The calling thread's current context handle; `None` when none is current. One driver call that
/// only reads thread-local state (the hot paths use [`crate::current::current_context`] instead).
pub fn current_context() -> Option<u64> {
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: cuCtxGetCurrent's C signature; `ctx` is a valid output.
    let ok = unsafe { CTX_GET_CURRENT.get()?(&mut ctx) } == 0;
    (ok && !ctx.is_null()).then_some(ctx as u64)
}

/// Whether device `dev`'s primary context exists; `None` when the driver cannot tell.
pub fn primary_active(dev: CUdevice) -> Option<bool> {
    let (mut flags, mut active): (c_uint, c_int) = (0, 0);
    // SAFETY: cuDevicePrimaryCtxGetState's C signature; both outputs are valid.
    (unsafe { PRIMARY_STATE.get()?(dev, &mut flags, &mut active) } == 0).then_some(active != 0)
}

/// Device `dev`'s UUID.
pub fn uuid(dev: CUdevice) -> Option<[u8; 16]> {
    let f = DEVICE_UUID_V2.get().or_else(|| DEVICE_UUID.get())?;
    let mut u = CUuuid { bytes: [0; 16] };
    // SAFETY: cuDeviceGetUuid's C signature; `u` is a valid output.
    (unsafe { f(&mut u, dev) } == 0).then(|| u.bytes.map(|b| b as u8))
}

/// A UUID in NVIDIA's textual form, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as NVML prints it.
pub fn uuid_string(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!("GPU-{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// Number of CUDA devices; `None` until the driver is initialized in this process.
pub fn device_count() -> Option<usize> {
    let mut n: c_int = 0;
    // SAFETY: cuDeviceGetCount's C signature; `n` is a valid output.
    (unsafe { DEVICE_COUNT.get()?(&mut n) } == 0).then(|| usize::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuid_text_matches_nvml() {
        let u = *b"SIMG\x00small\0\0\0\0\0\0";
        assert_eq!(super::uuid_string(&u), "GPU-53494d47-0073-6d61-6c6c-000000000000");
        assert_eq!(super::device_index(3), Some(3));
        assert_eq!(super::device_index(-1), None);
        assert_eq!(super::device_index(16), None);
    }
}
