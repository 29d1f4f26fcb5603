//! Launches of kernels the simulator cannot compute (anything but `simgpu::kernels`' built-ins), stated
//! honestly: they run as timed no-ops on the engine (their time from `SIMGPU_KERNEL_TIMES`, else
//! `SIMGPU_KERNEL_TIME`), each process says so once per kernel name on stderr (unless
//! `SIMGPU_UNKNOWN_KERNELS_QUIET=1`), the device's `uncomputed` counter counts them and the engine trace
//! names them. `SIMGPU_UNKNOWN_KERNELS=poison` also overwrites the memory their pointer arguments reach
//! with a NaN pattern, so that code reading their results fails loudly; `refuse` refuses the launch with
//! `CUDA_ERROR_NOT_SUPPORTED`.

use crate::driver::Driver;
use crate::guard::CuRes;
use crate::module::Function;
use simgpu::config::UnknownKernels;
use simgpu::kernels::Call;
use std::ffi::c_void;
use tessera_ffi::cuda::CUDA_ERROR_NOT_SUPPORTED;

/// The engine call for a launch of `f` (not a built-in) with `params` or `extra`.
pub fn call(d: &Driver, f: &Function, params: *mut *mut c_void, extra: *mut *mut c_void) -> CuRes<Call> {
    let mode = d.config.unknown_kernels;
    say_once(d, f, mode);
    let poison = match mode {
        UnknownKernels::Refuse => return Err(CUDA_ERROR_NOT_SUPPORTED),
        UnknownKernels::Noop => Vec::new(),
        UnknownKernels::Poison => reachable(d, f, params, extra),
    };
    Ok(Call::Uncomputed { name: f.short_name.clone(), ns: f.uncomputed_ns, poison })
}

/// Says on stderr, once per process and kernel name, what happens to `f`'s launches.
fn say_once(d: &Driver, f: &Function, mode: UnknownKernels) {
    if !d.config.say_unknown || !d.said_uncomputed.lock().insert(f.short_name.to_string()) {
        return;
    }
    let what = match mode {
        UnknownKernels::Noop => "runs as a timed no-op: its outputs are left as they were",
        UnknownKernels::Poison => "runs as a timed no-op that fills the memory its pointers reach with NaN",
        UnknownKernels::Refuse => "is refused (CUDA_ERROR_NOT_SUPPORTED)",
    };
    eprintln!(
        "simgpu: kernel {} is not one the simulator computes; it {what} (SIMGPU_UNKNOWN_KERNELS=noop|poison|refuse, \
         SIMGPU_UNKNOWN_KERNELS_QUIET=1 silences this)",
        f.short_name
    );
}

/// The device ranges `f`'s pointer arguments reach: each 8-byte parameter (by the image's parameter
/// layout) whose value lies in a known allocation, from there to the allocation's end. Nothing when the
/// layout is unknown or the parameters cannot be read.
fn reachable(d: &Driver, f: &Function, params: *mut *mut c_void, extra: *mut *mut c_void) -> Vec<(u64, u64)> {
    let Some(layout) = &f.params else { return Vec::new() };
    let buffer = if params.is_null() { crate::launch::packed(extra).ok() } else { None };
    let mut ranges = Vec::new();
    for (i, p) in layout.iter().enumerate().filter(|(_, p)| p.size == 8) {
        let value = match buffer {
            // SAFETY: `kernelParams` holds one pointer per parameter of the kernel, each to a value of the
            // parameter's size (the API contract), and the layout is the kernel's.
            None if !params.is_null() => unsafe {
                let p = *params.add(i);
                if p.is_null() {
                    continue;
                }
                (p as *const u64).read_unaligned()
            },
            // SAFETY: within the packed buffer of `len` bytes the program described (checked).
            Some((buf, len)) if (p.offset + 8) as usize <= len => unsafe {
                (buf.add(p.offset as usize) as *const u64).read_unaligned()
            },
            _ => continue,
        };
        if let Some(a) = d.memory.find(value) {
            ranges.push((value, a.base + a.size - value));
        }
    }
    ranges
}
