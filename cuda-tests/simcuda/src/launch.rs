//! Kernel launches: every entry point decodes its arguments into a [`Call`] and queues it on a stream.

use crate::driver::{Driver, driver};
use crate::guard::{CuRes, ensure, input};
use crate::memory::accessible;
use crate::module::Function;
use crate::stream::{DefaultStream, Op, resolve};
use simgpu::kernels::{Builtin, Call};
use std::ffi::{c_uint, c_void};
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUfunction, CUlaunchConfig, CUstream};

/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`, `CU_LAUNCH_PARAM_BUFFER_SIZE`.
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;

/// Grid and block shape of a launch.
pub struct Shape {
    /// Blocks per dimension.
    pub grid: [c_uint; 3],
    /// Threads per dimension.
    pub block: [c_uint; 3],
}

/// Copies a built-in's parameters out of `kernelParams` (one pointer per parameter) or, failing that,
/// out of the packed buffer in `extra`.
fn read_params(b: Builtin, params: *mut *mut c_void, extra: *mut *mut c_void) -> CuRes<Vec<Vec<u8>>> {
    let sizes = b.param_sizes();
    if !params.is_null() {
        return sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| {
                // SAFETY: the caller passes one pointer per kernel parameter, each to a value of its size.
                let p = unsafe { *params.add(i) };
                ensure(!p.is_null())?;
                // SAFETY: as above.
                Ok(unsafe { std::slice::from_raw_parts(p as *const u8, size) }.to_vec())
            })
            .collect();
    }
    let (buf, len) = packed(extra)?;
    let mut offset = 0usize;
    let mut out = Vec::with_capacity(sizes.len());
    for &size in sizes {
        offset = offset.next_multiple_of(size);
        ensure(offset + size <= len)?;
        // SAFETY: within the buffer of `len` bytes the program described.
        out.push(unsafe { std::slice::from_raw_parts(buf.add(offset), size) }.to_vec());
        offset += size;
    }
    Ok(out)
}

/// The packed parameter buffer `extra` names, and its size (`CU_LAUNCH_PARAM_BUFFER_POINTER` and
/// `_SIZE`); `CUDA_ERROR_INVALID_VALUE` when it names no buffer or something else.
pub fn packed(extra: *mut *mut c_void) -> CuRes<(*const u8, usize)> {
    ensure(!extra.is_null())?;
    let (mut buf, mut len) = (std::ptr::null::<u8>(), None);
    for i in (0..64).step_by(2) {
        // SAFETY: `extra` is a PARAM_END-terminated list of (key, value) pointer pairs.
        let (key, value) = unsafe { (*extra.add(i) as usize, *extra.add(i + 1)) };
        match key {
            PARAM_END => break,
            PARAM_BUFFER_POINTER => buf = value as *const u8,
            PARAM_BUFFER_SIZE => len = Some(input(value as *const usize)?),
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
    }
    let len = len.ok_or(CUDA_ERROR_INVALID_VALUE)?;
    ensure(!buf.is_null())?;
    Ok((buf, len))
}

fn decode(d: &Driver, f: &Function, params: *mut *mut c_void, extra: *mut *mut c_void) -> CuRes<Call> {
    match f.builtin {
        Some(b) => Ok(Call::decode(b, &read_params(b, params, extra)?)),
        None => crate::uncomputed::call(d, f, params, extra),
    }
}

/// Validates and queues a launch.
pub fn launch(
    f: CUfunction,
    shape: Shape,
    stream: CUstream,
    mode: DefaultStream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuRes {
    let d = driver()?;
    let func = d.functions.get(f as u64)?;
    ensure(shape.grid.iter().chain(&shape.block).all(|&v| v > 0))?;
    let threads = shape.block.iter().map(|&v| v as u64).product::<u64>();
    ensure(threads <= 1024)?;
    let s = resolve(stream, mode)?;
    let call = decode(d, &func, params, extra)?;
    if call.ranges().iter().any(|&(addr, len, _)| !accessible(d, addr, len)) {
        return Err(CUDA_ERROR_ILLEGAL_ADDRESS);
    }
    s.submit(Op::Kernel { device: s.device, call })
}

stream_variants! {
    /// `cuLaunchKernel`.
    fn cuLaunchKernel / cuLaunchKernel_ptsz(
        f: CUfunction,
        gx: c_uint,
        gy: c_uint,
        gz: c_uint,
        bx: c_uint,
        by: c_uint,
        bz: c_uint,
        _shared: c_uint,
        stream: CUstream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) => |m| launch(f, Shape { grid: [gx, gy, gz], block: [bx, by, bz] }, stream, m, params, extra);
    /// `cuLaunchCooperativeKernel`: cooperative launches run like any other on one engine.
    fn cuLaunchCooperativeKernel / cuLaunchCooperativeKernel_ptsz(
        f: CUfunction,
        gx: c_uint,
        gy: c_uint,
        gz: c_uint,
        bx: c_uint,
        by: c_uint,
        bz: c_uint,
        _shared: c_uint,
        stream: CUstream,
        params: *mut *mut c_void,
    ) => |m| launch(f, Shape { grid: [gx, gy, gz], block: [bx, by, bz] }, stream, m, params, std::ptr::null_mut());
    /// `cuLaunchKernelEx`: launch attributes (clusters, priorities) do not change the simulation.
    fn cuLaunchKernelEx / cuLaunchKernelEx_ptsz(
        config: *const CUlaunchConfig,
        f: CUfunction,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) => |m| {
        let c = input(config)?;
        let shape = Shape { grid: [c.gridDimX, c.gridDimY, c.gridDimZ], block: [c.blockDimX, c.blockDimY, c.blockDimZ] };
        launch(f, shape, c.hStream, m, params, extra)
    };
}
