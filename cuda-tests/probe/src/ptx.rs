//! The probe's PTX module and typed launchers for its kernels.
//!
//! simgpu runs kernels by entry name (`spin`, `fill_u32`, `vector_add_f32`, `saxpy_f32`; anything else
//! costs `SIMGPU_KERNEL_TIME`), so the bodies here are placeholders: only the entry names and parameter
//! lists matter. cudarc's `load_module` needs its `nvrtc` feature, so the module is loaded through
//! `cudarc::driver::result` and launched with `cuLaunchKernel`.

use crate::fail::{During, Outcome};
use cudarc::driver::{CudaContext, CudaStream, result, sys};
use std::ffi::{CString, c_void};
use std::sync::Arc;

/// The module: the four built-ins plus `custom_kernel`, which simgpu does not know.
pub const PTX: &str = r#"
.version 8.0
.target sm_80
.address_size 64

.visible .entry spin(.param .u64 ns)
{
    ret;
}

.visible .entry fill_u32(.param .u64 dst, .param .u32 value, .param .u64 n)
{
    ret;
}

.visible .entry vector_add_f32(.param .u64 a, .param .u64 b, .param .u64 c, .param .u64 n)
{
    ret;
}

.visible .entry saxpy_f32(.param .f32 a, .param .u64 x, .param .u64 y, .param .u64 n)
{
    ret;
}

.visible .entry custom_kernel(.param .u64 data)
{
    ret;
}
"#;

/// Threads per block of every launch.
const BLOCK: u64 = 256;

/// The loaded module and its functions; unloaded on drop.
pub struct Kernels {
    ctx: Arc<CudaContext>,
    module: sys::CUmodule,
    spin: sys::CUfunction,
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
    /// Loads [`PTX`] into `ctx` and looks up every entry.
    pub fn load(ctx: &Arc<CudaContext>) -> Outcome<Kernels> {
        ctx.bind_to_thread().during("cuCtxSetCurrent")?;
        let image = CString::new(PTX).expect("PTX has no NUL");
        // SAFETY: the image is a NUL-terminated PTX string that outlives the call.
        let module =
            unsafe { result::module::load_data(image.as_ptr() as *const c_void) }.during("cuModuleLoadData")?;
        let mut kernels = Kernels {
            ctx: ctx.clone(),
            module,
            spin: std::ptr::null_mut(),
            fill_u32: std::ptr::null_mut(),
            vector_add_f32: std::ptr::null_mut(),
            saxpy_f32: std::ptr::null_mut(),
            custom: std::ptr::null_mut(),
        };
        let get = |name: &str| {
            let c_name = CString::new(name).expect("entry names have no NUL");
            // SAFETY: `module` was just loaded and is unloaded only when `kernels` drops.
            unsafe { result::module::get_function(module, c_name) }.during(&format!("cuModuleGetFunction({name})"))
        };
        kernels.spin = get("spin")?;
        kernels.fill_u32 = get("fill_u32")?;
        kernels.vector_add_f32 = get("vector_add_f32")?;
        kernels.saxpy_f32 = get("saxpy_f32")?;
        kernels.custom = get("custom_kernel")?;
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

    /// `custom_kernel(data)`: a kernel simgpu does not know, costing `SIMGPU_KERNEL_TIME`.
    pub fn custom(&self, stream: &CudaStream) -> Outcome<()> {
        let mut data: u64 = 0;
        // SAFETY: the kernel's body does nothing; it takes one u64.
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
        // SAFETY: the module was loaded in `load` and its functions are not used after this.
        let _ = unsafe { result::module::unload(self.module) };
    }
}
