//! One-dimensional copies and memsets, synchronous and stream-ordered, in every entry-point variant.
//!
//! Synchronous calls queue on the default stream their entry point names (legacy, or per-thread for
//! `_ptds`) and wait, which gives them the real driver's ordering against earlier work.

use crate::driver::{Driver, driver};
use crate::guard::{CuRes, ensure};
use crate::memory::{check, known};
use crate::stream::{DefaultStream, Op, resolve};
use std::ffi::{c_uint, c_ushort, c_void};
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUcontext, CUdeviceptr, CUstream};

/// Which side of a copy must be device memory the driver can check.
#[derive(Clone, Copy)]
enum Dir {
    HtoD,
    DtoH,
    DtoD,
    /// Unified addressing: each side is checked when the driver knows it.
    Any,
}

/// Writes `count` elements of `elem` bytes of `value` at `dst`.
pub fn fill(dst: u64, value: u32, elem: u8, count: u64) {
    let n = count as usize;
    // SAFETY: the range was validated when the memset was queued.
    unsafe {
        match elem {
            1 => std::ptr::write_bytes(dst as *mut u8, value as u8, n),
            2 => std::slice::from_raw_parts_mut(dst as *mut u16, n).fill(value as u16),
            _ => std::slice::from_raw_parts_mut(dst as *mut u32, n).fill(value),
        }
    }
}

fn validate(d: &Driver, dir: Dir, dst: u64, src: u64, len: u64) -> CuRes {
    let (check_dst, check_src) = match dir {
        Dir::HtoD => (true, false),
        Dir::DtoH => (false, true),
        Dir::DtoD => (true, true),
        Dir::Any => (known(d, dst), known(d, src)),
    };
    ensure((dst != 0 && src != 0) || len == 0)?;
    if check_dst {
        check(d, dst, len)?;
    }
    if check_src {
        check(d, src, len)?;
    }
    Ok(())
}

fn copy(dir: Dir, dst: u64, src: u64, len: usize, stream: CUstream, mode: DefaultStream, wait: bool) -> CuRes {
    let d = driver()?;
    let s = resolve(stream, mode)?;
    validate(d, dir, dst, src, len as u64)?;
    if len == 0 {
        return Ok(());
    }
    s.submit(Op::Copy { dst, src, len: len as u64 })?;
    // As on the real driver, an async copy from or to pageable host memory returns only once the host
    // buffer is no longer needed (programs such as cudarc free or read it right after the call).
    if wait || pageable_host(d, dir, dst, src) {
        s.synchronize();
    }
    Ok(())
}

/// True when the host side of a copy is ordinary (pageable) memory the driver did not allocate or register.
fn pageable_host(d: &Driver, dir: Dir, dst: u64, src: u64) -> bool {
    match dir {
        Dir::HtoD => !known(d, src),
        Dir::DtoH => !known(d, dst),
        Dir::DtoD => false,
        Dir::Any => !known(d, dst) || !known(d, src),
    }
}

fn memset(dst: u64, value: u32, elem: u8, count: usize, stream: CUstream, mode: DefaultStream, wait: bool) -> CuRes {
    let d = driver()?;
    let s = resolve(stream, mode)?;
    check(d, dst, (count as u64).checked_mul(elem as u64).ok_or(CUDA_ERROR_INVALID_VALUE)?)?;
    if elem > 1 {
        ensure(dst.is_multiple_of(elem as u64))?;
    }
    if count == 0 {
        return Ok(());
    }
    s.submit(Op::Set { dst, value, elem, count: count as u64 })?;
    if wait {
        s.synchronize();
    }
    Ok(())
}

const NULL: CUstream = std::ptr::null_mut();

stream_variants! {
    /// `cuMemcpy`: direction inferred from the addresses (unified addressing).
    fn cuMemcpy / cuMemcpy_ptds(dst: CUdeviceptr, src: CUdeviceptr, n: usize) => |m| copy(Dir::Any, dst, src, n, NULL, m, true);
    /// `cuMemcpyAsync`.
    fn cuMemcpyAsync / cuMemcpyAsync_ptsz(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) => |m| copy(Dir::Any, dst, src, n, s, m, false);
    /// `cuMemcpyHtoD_v2`.
    fn cuMemcpyHtoD_v2 / cuMemcpyHtoD_v2_ptds(dst: CUdeviceptr, src: *const c_void, n: usize) => |m| copy(Dir::HtoD, dst, src as u64, n, NULL, m, true);
    /// `cuMemcpyHtoDAsync_v2`.
    fn cuMemcpyHtoDAsync_v2 / cuMemcpyHtoDAsync_v2_ptsz(dst: CUdeviceptr, src: *const c_void, n: usize, s: CUstream) => |m| copy(Dir::HtoD, dst, src as u64, n, s, m, false);
    /// `cuMemcpyDtoH_v2`.
    fn cuMemcpyDtoH_v2 / cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: CUdeviceptr, n: usize) => |m| copy(Dir::DtoH, dst as u64, src, n, NULL, m, true);
    /// `cuMemcpyDtoHAsync_v2`.
    fn cuMemcpyDtoHAsync_v2 / cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream) => |m| copy(Dir::DtoH, dst as u64, src, n, s, m, false);
    /// `cuMemcpyDtoD_v2`.
    fn cuMemcpyDtoD_v2 / cuMemcpyDtoD_v2_ptds(dst: CUdeviceptr, src: CUdeviceptr, n: usize) => |m| copy(Dir::DtoD, dst, src, n, NULL, m, true);
    /// `cuMemcpyDtoDAsync_v2`.
    fn cuMemcpyDtoDAsync_v2 / cuMemcpyDtoDAsync_v2_ptsz(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) => |m| copy(Dir::DtoD, dst, src, n, s, m, false);
    /// `cuMemcpyPeer`: every simulated device shares the host's address space.
    fn cuMemcpyPeer / cuMemcpyPeer_ptds(dst: CUdeviceptr, _dc: CUcontext, src: CUdeviceptr, _sc: CUcontext, n: usize) => |m| copy(Dir::DtoD, dst, src, n, NULL, m, true);
    /// `cuMemcpyPeerAsync`.
    fn cuMemcpyPeerAsync / cuMemcpyPeerAsync_ptsz(dst: CUdeviceptr, _dc: CUcontext, src: CUdeviceptr, _sc: CUcontext, n: usize, s: CUstream) => |m| copy(Dir::DtoD, dst, src, n, s, m, false);
    /// `cuMemsetD8_v2`.
    fn cuMemsetD8_v2 / cuMemsetD8_v2_ptds(dst: CUdeviceptr, v: u8, n: usize) => |m| memset(dst, v as u32, 1, n, NULL, m, true);
    /// `cuMemsetD16_v2`.
    fn cuMemsetD16_v2 / cuMemsetD16_v2_ptds(dst: CUdeviceptr, v: c_ushort, n: usize) => |m| memset(dst, v as u32, 2, n, NULL, m, true);
    /// `cuMemsetD32_v2`.
    fn cuMemsetD32_v2 / cuMemsetD32_v2_ptds(dst: CUdeviceptr, v: c_uint, n: usize) => |m| memset(dst, v, 4, n, NULL, m, true);
    /// `cuMemsetD8Async`.
    fn cuMemsetD8Async / cuMemsetD8Async_ptsz(dst: CUdeviceptr, v: u8, n: usize, s: CUstream) => |m| memset(dst, v as u32, 1, n, s, m, false);
    /// `cuMemsetD16Async`.
    fn cuMemsetD16Async / cuMemsetD16Async_ptsz(dst: CUdeviceptr, v: c_ushort, n: usize, s: CUstream) => |m| memset(dst, v as u32, 2, n, s, m, false);
    /// `cuMemsetD32Async`.
    fn cuMemsetD32Async / cuMemsetD32Async_ptsz(dst: CUdeviceptr, v: c_uint, n: usize, s: CUstream) => |m| memset(dst, v, 4, n, s, m, false);
}
