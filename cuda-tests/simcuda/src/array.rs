//! CUDA arrays and mipmapped arrays: opaque device memory that is charged but never addressed directly.

use crate::context::current;
use crate::driver::driver;
use crate::guard::{CuRes, ensure, entry, input, out};
use std::ffi::c_uint;
use std::sync::Arc;
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR, CUarray, CUmipmappedArray};

/// One array's device footprint.
pub struct Array {
    /// Device index.
    pub device: usize,
    /// Bytes charged.
    pub bytes: u64,
    /// True for mipmapped arrays (destroyed with the matching call).
    pub mipmapped: bool,
}

/// Element size of a `CUarray_format` value, read as an integer.
fn format_size(format: u32) -> Option<u64> {
    Some(match format {
        0x01 | 0x08 => 1,
        0x02 | 0x09 | 0x10 => 2,
        0x03 | 0x0a | 0x20 => 4,
        _ => return None,
    })
}

/// Geometry read out of either descriptor, keeping the format as a raw integer.
struct Extent {
    width: u64,
    height: u64,
    depth: u64,
    format: u32,
    channels: u32,
}

impl Extent {
    fn bytes(&self) -> CuRes<u64> {
        let elem = format_size(self.format).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        ensure(matches!(self.channels, 1 | 2 | 4) && self.width > 0)?;
        [self.height.max(1), self.depth.max(1), elem, self.channels as u64]
            .iter()
            .try_fold(self.width, |acc, &v| acc.checked_mul(v))
            .ok_or(CUDA_ERROR_INVALID_VALUE)
    }
}

fn extent_2d(desc: *const CUDA_ARRAY_DESCRIPTOR) -> CuRes<Extent> {
    // Layout: Width, Height (size_t), Format (C enum, 32 bits), NumChannels.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Raw(usize, usize, u32, u32);
    let r = input(desc as *const Raw)?;
    Ok(Extent { width: r.0 as u64, height: r.1 as u64, depth: 1, format: r.2, channels: r.3 })
}

fn extent_3d(desc: *const CUDA_ARRAY3D_DESCRIPTOR) -> CuRes<Extent> {
    // Layout: Width, Height, Depth (size_t), Format (C enum), NumChannels, Flags.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Raw(usize, usize, usize, u32, u32, u32);
    let r = input(desc as *const Raw)?;
    Ok(Extent { width: r.0 as u64, height: r.1 as u64, depth: r.2 as u64, format: r.3, channels: r.4 })
}

fn create(bytes: u64, mipmapped: bool) -> CuRes<u64> {
    let d = driver()?;
    let device = current()?.device;
    d.charge(device, bytes)?;
    Ok(d.arrays.insert(Arc::new(Array { device, bytes, mipmapped })))
}

fn destroy(handle: u64, mipmapped: bool) -> CuRes {
    let d = driver()?;
    ensure(d.arrays.get(handle)?.mipmapped == mipmapped).map_err(|_| CUDA_ERROR_INVALID_HANDLE)?;
    let a = d.arrays.remove(handle)?;
    d.uncharge(a.device, a.bytes);
    Ok(())
}

/// `cuArrayCreate_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuArrayCreate_v2(handle: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR) -> CuResult {
    entry(|| {
        ensure(!handle.is_null())?;
        let h = create(extent_2d(desc)?.bytes()?, false)?;
        out(handle, h as CUarray)
    })
}

/// `cuArray3DCreate_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuArray3DCreate_v2(handle: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR) -> CuResult {
    entry(|| {
        ensure(!handle.is_null())?;
        let h = create(extent_3d(desc)?.bytes()?, false)?;
        out(handle, h as CUarray)
    })
}

/// `cuArrayDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuArrayDestroy(handle: CUarray) -> CuResult {
    entry(|| destroy(handle as u64, false))
}

/// `cuMipmappedArrayCreate`: every level halves each dimension (never below 1).
#[unsafe(no_mangle)]
pub extern "C" fn cuMipmappedArrayCreate(
    handle: *mut CUmipmappedArray,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR,
    levels: c_uint,
) -> CuResult {
    entry(|| {
        ensure(!handle.is_null() && levels > 0)?;
        let mut e = extent_3d(desc)?;
        let mut total: u64 = 0;
        for _ in 0..levels {
            total = total.checked_add(e.bytes()?).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            e.width = (e.width / 2).max(1);
            e.height = if e.height == 0 { 0 } else { (e.height / 2).max(1) };
            e.depth = if e.depth == 0 { 0 } else { (e.depth / 2).max(1) };
        }
        let h = create(total, true)?;
        out(handle, h as CUmipmappedArray)
    })
}

/// `cuMipmappedArrayDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMipmappedArrayDestroy(handle: CUmipmappedArray) -> CuResult {
    entry(|| destroy(handle as u64, true))
}
