//! The occupancy calculator (`cuOccupancy*`), from the device's limits as its attributes report them:
//! threads and blocks per multiprocessor, shared memory per multiprocessor and per block. Simulated
//! kernels use no registers or static shared memory of note, so warps, blocks and the dynamic shared
//! memory asked for are the limits, as the real calculator computes them for such a kernel.

use crate::context::current;
use crate::device::attribute;
use crate::driver::driver;
use crate::guard::{CuRes, ensure, entry, out};
use std::ffi::{c_int, c_uint};
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUdevice_attribute as A, CUfunction, CUlaunchAttributeID, CUlaunchConfig};

/// The current device's limits: threads, blocks and shared memory per multiprocessor, shared memory a
/// block may have, and multiprocessors.
struct Limits {
    threads: u64,
    blocks: u64,
    shared: u64,
    per_block: u64,
    sms: u64,
}

fn limits(f: CUfunction) -> CuRes<Limits> {
    let d = driver()?;
    d.functions.get(f as u64)?;
    let c = d.device_config(current()?.device);
    let get = |a: A| attribute(c, a as c_int).map(|v| v as u64).ok_or(CUDA_ERROR_UNKNOWN);
    Ok(Limits {
        threads: get(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
        blocks: get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)?,
        shared: get(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
        per_block: get(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
        sms: get(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
    })
}

/// Blocks of `block_size` threads using `smem` bytes of dynamic shared memory that fit one multiprocessor
/// at once.
fn blocks_per_sm(l: &Limits, block_size: u64, smem: u64) -> u64 {
    if block_size == 0 || block_size > 1024 || smem > l.per_block {
        return 0;
    }
    let by_threads = l.threads / block_size.next_multiple_of(32);
    let by_shared = l.shared.checked_div(smem).unwrap_or(u64::MAX);
    by_threads.min(by_shared).min(l.blocks)
}

/// `cuOccupancyMaxActiveBlocksPerMultiprocessor`.
#[unsafe(no_mangle)]
pub extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
    blocks: *mut c_int,
    f: CUfunction,
    block_size: c_int,
    smem: usize,
) -> CuResult {
    cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, f, block_size, smem, 0)
}

/// `cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`: the flags (caching overrides) change nothing.
#[unsafe(no_mangle)]
pub extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    blocks: *mut c_int,
    f: CUfunction,
    block_size: c_int,
    smem: usize,
    _flags: c_uint,
) -> CuResult {
    entry(|| {
        ensure(block_size > 0)?;
        out(blocks, blocks_per_sm(&limits(f)?, block_size as u64, smem as u64) as c_int)
    })
}

/// `cuOccupancyAvailableDynamicSMemPerBlock`: dynamic shared memory each of `num_blocks` blocks of
/// `block_size` threads may have with all of them on one multiprocessor.
#[unsafe(no_mangle)]
pub extern "C" fn cuOccupancyAvailableDynamicSMemPerBlock(
    smem: *mut usize,
    f: CUfunction,
    num_blocks: c_int,
    block_size: c_int,
) -> CuResult {
    entry(|| {
        let l = limits(f)?;
        ensure(num_blocks > 0 && block_size > 0)?;
        let fit = blocks_per_sm(&l, block_size as u64, 0) >= num_blocks as u64;
        let each = if fit { (l.shared / num_blocks as u64).min(l.per_block) } else { 0 };
        out(smem, each as usize)
    })
}

/// A program's `size_t (*)(int blockSize)`: the dynamic shared memory a block size needs.
type SmemOfBlock = Option<unsafe extern "C" fn(c_int) -> usize>;

/// `cuOccupancyMaxPotentialBlockSize`.
#[unsafe(no_mangle)]
pub extern "C" fn cuOccupancyMaxPotentialBlockSize(
    min_grid: *mut c_int,
    block: *mut c_int,
    f: CUfunction,
    smem_of: SmemOfBlock,
    smem: usize,
    limit: c_int,
) -> CuResult {
    cuOccupancyMaxPotentialBlockSizeWithFlags(min_grid, block, f, smem_of, smem, limit, 0)
}

/// `cuOccupancyMaxPotentialBlockSizeWithFlags`: the block size (a multiple of 32, at most `limit` when
/// given) that keeps the most threads of a multiprocessor busy, the largest on a tie, and the grid that
/// fills every multiprocessor with it.
#[unsafe(no_mangle)]
pub extern "C" fn cuOccupancyMaxPotentialBlockSizeWithFlags(
    min_grid: *mut c_int,
    block: *mut c_int,
    f: CUfunction,
    smem_of: SmemOfBlock,
    smem: usize,
    limit: c_int,
    _flags: c_uint,
) -> CuResult {
    entry(|| {
        let l = limits(f)?;
        let max = if limit > 0 { (limit as u64).min(1024) } else { 1024 };
        let mut best = (0u64, 0u64, 0u64);
        for size in (32..=max).step_by(32) {
            // SAFETY: the program's callback, called with a block size as the API documents.
            let need = smem_of.map_or(smem as u64, |g| unsafe { g(size as c_int) } as u64);
            let blocks = blocks_per_sm(&l, size, need);
            if blocks * size >= best.0 * best.1 && blocks > 0 {
                best = (blocks, size, need);
            }
        }
        ensure(best.1 > 0)?;
        out(block, best.1 as c_int)?;
        out(min_grid, (best.0 * l.sms) as c_int)
    })
}

/// The cluster size (blocks) `config`'s cluster-dimension attribute gives, 1 without one.
fn cluster_size(config: &CUlaunchConfig) -> CuRes<u64> {
    let mut size = 1;
    if config.numAttrs > 0 {
        ensure(!config.attrs.is_null())?;
        // SAFETY: the program passes `numAttrs` attributes at `attrs`.
        let attrs = unsafe { std::slice::from_raw_parts(config.attrs, config.numAttrs as usize) };
        for a in attrs.iter().filter(|a| a.id == CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            // SAFETY: the cluster-dimension attribute's value is the `clusterDim` member.
            let dim = unsafe { a.value.clusterDim };
            size = u64::from(dim.x.max(1)) * u64::from(dim.y.max(1)) * u64::from(dim.z.max(1));
        }
    }
    Ok(size)
}

/// `cuOccupancyMaxActiveClusters`: clusters of `config`'s shape that run at once, every multiprocessor
/// holding as many of their blocks as fit.
#[unsafe(no_mangle)]
pub extern "C" fn cuOccupancyMaxActiveClusters(
    clusters: *mut c_int,
    f: CUfunction,
    config: *const CUlaunchConfig,
) -> CuResult {
    entry(|| {
        let l = limits(f)?;
        let c = crate::guard::input(config)?;
        let threads = u64::from(c.blockDimX) * u64::from(c.blockDimY) * u64::from(c.blockDimZ);
        let blocks = blocks_per_sm(&l, threads, u64::from(c.sharedMemBytes)) * l.sms;
        out(clusters, (blocks / cluster_size(&c)?) as c_int)
    })
}
