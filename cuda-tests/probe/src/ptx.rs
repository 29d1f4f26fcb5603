//! The probe's PTX modules and typed launchers for their kernels.
//!
//! The kernels are real PTX that computes its results on a GPU: `spin` is the product's
//! (`tools/kernels/spin.ptx`, the one `tessera load` and the demo launch), the others are the test
//! programs' (`cuda-tests/kernels/kernels.ptx`, which `cuda-tests/c/direct.c` embeds too). simgpu runs
//! `spin`, `fill_u32`, `vector_add_f32` and `saxpy_f32` by entry name; anything else costs
//! `SIMGPU_KERNEL_TIME`. cudarc's `load_module` needs its `nvrtc` feature, so the modules are loaded
//! through `cudarc::driver::result` and launched with `cuLaunchKernel`.

use crate::fail::{During, Outcome};
use cudarc::driver::{CudaContext, CudaStream, result, sys};
use std::ffi::{CString, c_void};
use std::sync::Arc;

/// The module holding `spin(ns)`.
pub const SPIN_PTX: &str = include_str!("../../../tools/kernels/spin.ptx");

/// The module holding `fill_u32`, `vector_add_f32`, `saxpy_f32` and `custom_kernel` (which simgpu does not
/// know).
pub const PTX: &str = include_str!("../../kernels/kernels.ptx");

/// Threads per block of every launch.
const BLOCK: u64 = 256;

/// The loaded modules and their functions; unloaded on drop.
pub struct Kernels {
    ctx: Arc<CudaContext>,
    spin_module: sys::CUmodule,
    module: sys::CUmodule,
    spin: sys::CUfunction,
    spin_stamp: sys::CUfunction,
    fill_u32: sys::CUfunction,
    vector_add_f32: sys::CUfunction,
    saxpy_f32: sys::CUfunction,
    custom: sys::CUfunction,
}

/// A kernel parameter as `cuLaunchKernel` takes it: a pointer to the value.
fn arg<T>(value: &mut T) -> *mut c_void {
    value as *mut T as *mut c_void
}

impl Kernels {
    /// Loads [`SPIN_PTX`] and [`PTX`] into `ctx` and looks up every entry.
    pub fn load(ctx: &Arc<CudaContext>) -> Outcome<Kernels> {
        ctx.bind_to_thread().during("cuCtxSetCurrent")?;
        let load = |ptx: &str| {
            let image = CString::new(ptx).expect("PTX has no NUL");
            // SAFETY: the image is a NUL-terminated PTX string that outlives the call.
            unsafe { result::module::load_data(image.as_ptr() as *const c_void) }.during("cuModuleLoadData")
        };
        let spin_module = load(SPIN_PTX)?;
        // From here on, `Drop` unloads whatever was loaded.
        let mut kernels = Kernels {
            ctx: ctx.clone(),
            spin_module,
            module: std::ptr::null_mut(),
            spin: std::ptr::null_mut(),
            spin_stamp: std::ptr::null_mut(),
            fill_u32: std::ptr::null_mut(),
            vector_add_f32: std::ptr::null_mut(),
            saxpy_f32: std::ptr::null_mut(),
            custom: std::ptr::null_mut(),
        };
        kernels.module = load(PTX)?;
        let get = |module: sys::CUmodule, name: &str| {
            let c_name = CString::new(name).expect("entry names have no NUL");
            // SAFETY: `module` was just loaded and is unloaded only when `kernels` drops.
            unsafe { result::module::get_function(module, c_name) }.during(&format!("cuModuleGetFunction({name})"))
        };
        kernels.spin = get(kernels.spin_module, "spin")?;
        kernels.spin_stamp = get(kernels.spin_module, "spin_stamp")?;
        let module = kernels.module;
        kernels.fill_u32 = get(module, "fill_u32")?;
        kernels.vector_add_f32 = get(module, "vector_add_f32")?;
        kernels.saxpy_f32 = get(module, "saxpy_f32")?;
        kernels.custom = get(module, "custom_kernel")?;
        Ok(kernels)
    }

    /// Queues `f` on `stream` with one thread per element.
    ///
    /// # Safety
    /// `params` must match `f`'s parameter list, and every device range the kernel touches must be valid
    /// until the launch completes.
    unsafe fn launch(
        &self,
        stream: &CudaStream,
        f: sys::CUfunction,
        elements: u64,
        params: &mut [*mut c_void],
    ) -> Outcome<()> {
        self.ctx.bind_to_thread().during("cuCtxSetCurrent")?;
        let blocks = elements.div_ceil(BLOCK).clamp(1, u32::MAX as u64) as u32;
        let threads = elements.clamp(1, BLOCK) as u32;
        // SAFETY: the caller guarantees the parameters and ranges; the stream belongs to `self.ctx`.
        unsafe { result::launch_kernel(f, (blocks, 1, 1), (threads, 1, 1), 0, stream.cu_stream(), params) }
            .during("cuLaunchKernel")
    }

    /// The `spin` function, for launches through entry points cudarc does not wrap (its one parameter is
    /// the u64 of nanoseconds).
    pub fn spin_function(&self) -> sys::CUfunction {
        self.spin
    }

    /// `spin(ns)`: occupies the device's engine for `ns` nanoseconds.
    pub fn spin(&self, stream: &CudaStream, ns: u64) -> Outcome<()> {
        let mut ns = ns;
        // SAFETY: `spin` takes one u64 and touches no memory.
        unsafe { self.launch(stream, self.spin, 1, &mut [arg(&mut ns)]) }
    }

    /// `spin_stamp(ns, out)`: a spin of `ns` that writes when it began and ended (`%globaltimer`) to
    /// `out[0]` and `out[1]`.
    ///
    /// # Safety
    /// `out` must address two writable `u64`s until the launch completes.
    pub unsafe fn spin_stamp(&self, stream: &CudaStream, ns: u64, out: sys::CUdeviceptr) -> Outcome<()> {
        let (mut ns, mut out) = (ns, out);
        // SAFETY: parameters match the entry; the caller guarantees the range.
        unsafe { self.launch(stream, self.spin_stamp, 1, &mut [arg(&mut ns), arg(&mut out)]) }
    }

    /// `custom_kernel(data)`: a kernel simgpu does not know, costing `SIMGPU_KERNEL_TIME`.
    pub fn custom(&self, stream: &CudaStream) -> Outcome<()> {
        let mut data: u64 = 0;
        // SAFETY: the kernel takes one u64 and, given null, touches no memory.
        unsafe { self.launch(stream, self.custom, 1, &mut [arg(&mut data)]) }
    }

    /// `fill_u32(dst, value, n)`: `dst[i] = value`.
    ///
    /// # Safety
    /// `dst` must address `n` writable `u32`s until the launch completes.
    pub unsafe fn fill_u32(&self, stream: &CudaStream, dst: sys::CUdeviceptr, value: u32, n: u64) -> Outcome<()> {
        let (mut dst, mut value, mut n) = (dst, value, n);
        // SAFETY: parameters match the entry; the caller guarantees the range.
        unsafe { self.launch(stream, self.fill_u32, n, &mut [arg(&mut dst), arg(&mut value), arg(&mut n)]) }
    }

    /// `vector_add_f32(a, b, c, n)`: `c[i] = a[i] + b[i]`.
    ///
    /// # Safety
    /// `a`, `b` and `c` must each address `n` `f32`s (`c` writable) until the launch completes.
    pub unsafe fn vector_add_f32(&self, stream: &CudaStream, [a, b, c]: [sys::CUdeviceptr; 3], n: u64) -> Outcome<()> {
        let (mut a, mut b, mut c, mut n) = (a, b, c, n);
        let mut params = [arg(&mut a), arg(&mut b), arg(&mut c), arg(&mut n)];
        // SAFETY: parameters match the entry; the caller guarantees the ranges.
        unsafe { self.launch(stream, self.vector_add_f32, n, &mut params) }
    }

    /// `saxpy_f32(a, x, y, n)`: `y[i] = a * x[i] + y[i]`.
    ///
    /// # Safety
    /// `x` and `y` must each address `n` `f32`s (`y` writable) until the launch completes.
    pub unsafe fn saxpy_f32(&self, stream: &CudaStream, a: f32, [x, y]: [sys::CUdeviceptr; 2], n: u64) -> Outcome<()> {
        let (mut a, mut x, mut y, mut n) = (a, x, y, n);
        let mut params = [arg(&mut a), arg(&mut x), arg(&mut y), arg(&mut n)];
        // SAFETY: parameters match the entry; the caller guarantees the ranges.
        unsafe { self.launch(stream, self.saxpy_f32, n, &mut params) }
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        for module in [self.spin_module, self.module] {
            if !module.is_null() {
                // SAFETY: a module loaded in `load`, unloaded once; its functions are not used after this.
                let _ = unsafe { result::module::unload(module) };
            }
        }
    }
}
