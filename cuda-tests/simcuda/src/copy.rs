//! One-dimensional copies and memsets, synchronous and stream-ordered, in every entry-point variant.
//!
//! Synchronous calls queue on the default stream their entry point names (legacy, or per-thread for
//! `_ptds`) and wait, which gives them the real driver's ordering against earlier work.

use crate::driver::{Driver, driver};
use crate::guard::{CuRes, ensure, entry};
use crate::memory::{check, known};
use crate::stream::{DefaultStream, DefaultStream::Legacy, DefaultStream::PerThread, Op, resolve};
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
    if wait {
        s.synchronize();
    }
    Ok(())
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

/// `cuMemcpy`: direction inferred from the addresses (unified addressing).
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CuResult {
    entry(|| copy(Dir::Any, dst, src, n, NULL, Legacy, true))
}

/// `cuMemcpy_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpy_ptds(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CuResult {
    entry(|| copy(Dir::Any, dst, src, n, NULL, PerThread, true))
}

/// `cuMemcpyAsync`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) -> CuResult {
    entry(|| copy(Dir::Any, dst, src, n, s, Legacy, false))
}

/// `cuMemcpyAsync_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyAsync_ptsz(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) -> CuResult {
    entry(|| copy(Dir::Any, dst, src, n, s, PerThread, false))
}

/// `cuMemcpyHtoD_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize) -> CuResult {
    entry(|| copy(Dir::HtoD, dst, src as u64, n, NULL, Legacy, true))
}

/// `cuMemcpyHtoD_v2_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyHtoD_v2_ptds(dst: CUdeviceptr, src: *const c_void, n: usize) -> CuResult {
    entry(|| copy(Dir::HtoD, dst, src as u64, n, NULL, PerThread, true))
}

/// `cuMemcpyHtoDAsync_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, n: usize, s: CUstream) -> CuResult {
    entry(|| copy(Dir::HtoD, dst, src as u64, n, s, Legacy, false))
}

/// `cuMemcpyHtoDAsync_v2_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyHtoDAsync_v2_ptsz(dst: CUdeviceptr, src: *const c_void, n: usize, s: CUstream) -> CuResult {
    entry(|| copy(Dir::HtoD, dst, src as u64, n, s, PerThread, false))
}

/// `cuMemcpyDtoH_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CuResult {
    entry(|| copy(Dir::DtoH, dst as u64, src, n, NULL, Legacy, true))
}

/// `cuMemcpyDtoH_v2_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CuResult {
    entry(|| copy(Dir::DtoH, dst as u64, src, n, NULL, PerThread, true))
}

/// `cuMemcpyDtoHAsync_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream) -> CuResult {
    entry(|| copy(Dir::DtoH, dst as u64, src, n, s, Legacy, false))
}

/// `cuMemcpyDtoHAsync_v2_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream) -> CuResult {
    entry(|| copy(Dir::DtoH, dst as u64, src, n, s, PerThread, false))
}

/// `cuMemcpyDtoD_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CuResult {
    entry(|| copy(Dir::DtoD, dst, src, n, NULL, Legacy, true))
}

/// `cuMemcpyDtoD_v2_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoD_v2_ptds(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CuResult {
    entry(|| copy(Dir::DtoD, dst, src, n, NULL, PerThread, true))
}

/// `cuMemcpyDtoDAsync_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) -> CuResult {
    entry(|| copy(Dir::DtoD, dst, src, n, s, Legacy, false))
}

/// `cuMemcpyDtoDAsync_v2_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoDAsync_v2_ptsz(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) -> CuResult {
    entry(|| copy(Dir::DtoD, dst, src, n, s, PerThread, false))
}

/// `cuMemcpyPeer`: every simulated device shares the host's address space.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeer(
    dst: CUdeviceptr,
    _dc: CUcontext,
    src: CUdeviceptr,
    _sc: CUcontext,
    n: usize,
) -> CuResult {
    entry(|| copy(Dir::DtoD, dst, src, n, NULL, Legacy, true))
}

/// `cuMemcpyPeer_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeer_ptds(
    dst: CUdeviceptr,
    _dc: CUcontext,
    src: CUdeviceptr,
    _sc: CUcontext,
    n: usize,
) -> CuResult {
    entry(|| copy(Dir::DtoD, dst, src, n, NULL, PerThread, true))
}

/// `cuMemcpyPeerAsync`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeerAsync(
    dst: CUdeviceptr,
    _dc: CUcontext,
    src: CUdeviceptr,
    _sc: CUcontext,
    n: usize,
    s: CUstream,
) -> CuResult {
    entry(|| copy(Dir::DtoD, dst, src, n, s, Legacy, false))
}

/// `cuMemcpyPeerAsync_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeerAsync_ptsz(
    dst: CUdeviceptr,
    _dc: CUcontext,
    src: CUdeviceptr,
    _sc: CUcontext,
    n: usize,
    s: CUstream,
) -> CuResult {
    entry(|| copy(Dir::DtoD, dst, src, n, s, PerThread, false))
}

/// `cuMemsetD8_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, v: u8, n: usize) -> CuResult {
    entry(|| memset(dst, v as u32, 1, n, NULL, Legacy, true))
}

/// `cuMemsetD8_v2_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8_v2_ptds(dst: CUdeviceptr, v: u8, n: usize) -> CuResult {
    entry(|| memset(dst, v as u32, 1, n, NULL, PerThread, true))
}

/// `cuMemsetD16_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD16_v2(dst: CUdeviceptr, v: c_ushort, n: usize) -> CuResult {
    entry(|| memset(dst, v as u32, 2, n, NULL, Legacy, true))
}

/// `cuMemsetD16_v2_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD16_v2_ptds(dst: CUdeviceptr, v: c_ushort, n: usize) -> CuResult {
    entry(|| memset(dst, v as u32, 2, n, NULL, PerThread, true))
}

/// `cuMemsetD32_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD32_v2(dst: CUdeviceptr, v: c_uint, n: usize) -> CuResult {
    entry(|| memset(dst, v, 4, n, NULL, Legacy, true))
}

/// `cuMemsetD32_v2_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD32_v2_ptds(dst: CUdeviceptr, v: c_uint, n: usize) -> CuResult {
    entry(|| memset(dst, v, 4, n, NULL, PerThread, true))
}

/// `cuMemsetD8Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8Async(dst: CUdeviceptr, v: u8, n: usize, s: CUstream) -> CuResult {
    entry(|| memset(dst, v as u32, 1, n, s, Legacy, false))
}

/// `cuMemsetD8Async_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8Async_ptsz(dst: CUdeviceptr, v: u8, n: usize, s: CUstream) -> CuResult {
    entry(|| memset(dst, v as u32, 1, n, s, PerThread, false))
}

/// `cuMemsetD16Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD16Async(dst: CUdeviceptr, v: c_ushort, n: usize, s: CUstream) -> CuResult {
    entry(|| memset(dst, v as u32, 2, n, s, Legacy, false))
}

/// `cuMemsetD16Async_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD16Async_ptsz(dst: CUdeviceptr, v: c_ushort, n: usize, s: CUstream) -> CuResult {
    entry(|| memset(dst, v as u32, 2, n, s, PerThread, false))
}

/// `cuMemsetD32Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD32Async(dst: CUdeviceptr, v: c_uint, n: usize, s: CUstream) -> CuResult {
    entry(|| memset(dst, v, 4, n, s, Legacy, false))
}

/// `cuMemsetD32Async_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD32Async_ptsz(dst: CUdeviceptr, v: c_uint, n: usize, s: CUstream) -> CuResult {
    entry(|| memset(dst, v, 4, n, s, PerThread, false))
}
