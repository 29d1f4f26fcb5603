//! The device memory a request will take, computed before the driver sees it: pitched allocations,
//! CUDA arrays and mipmapped arrays. Descriptors are read field by field as plain integers (a C enum
//! may hold values a Rust enum lacks).
//!
//! Arrays are charged their texels' bytes (`width × height × depth × element size × channels`, each
//! zero dimension counting as one). The driver may pad arrays further for its tiled layouts, and it
//! does not say by how much except for arrays created with deferred mapping, so the padding is not
//! charged. Sparse and deferred-mapping arrays have no memory of their own and are charged nothing.

use tessera_ffi::sys::{CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR};

/// Row alignment assumed for `cuMemAllocPitch` before the driver answers (512 bytes, as current GPUs
/// and simgpu pitch); the charge is corrected to `pitch × height` once the pitch is known.
pub const PITCH_ALIGN: u64 = 512;

/// `CUDA_ARRAY3D_LAYERED`: depth counts layers, which mip levels do not halve.
const LAYERED: u32 = 0x01;
/// `CUDA_ARRAY3D_CUBEMAP`: depth counts faces, which mip levels do not halve.
const CUBEMAP: u32 = 0x04;
/// `CUDA_ARRAY3D_SPARSE`: no backing memory until mapped.
const SPARSE: u32 = 0x40;
/// `CUDA_ARRAY3D_DEFERRED_MAPPING`: no backing memory until mapped.
const DEFERRED_MAPPING: u32 = 0x80;

/// The pitch of a row of `width` bytes: rounded up to [`PITCH_ALIGN`].
pub fn pitch_of(width: usize) -> Option<u64> {
    (width as u64).checked_next_multiple_of(PITCH_ALIGN)
}

/// Estimated bytes of `cuMemAllocPitch(width, height)`: [`pitch_of`] `width`, times `height`.
pub fn pitched(width: usize, height: usize) -> Option<u64> {
    pitch_of(width)?.checked_mul(height as u64)
}

/// Bytes per texel of a `CUarray_format`, as a fraction (block-compressed and NV12 formats take less
/// than a byte or a fractional number of bytes). Unknown formats count 16 bytes, the widest texel.
fn texel(format: u32) -> (u64, u64) {
    match format {
        0x01 | 0x08 | 0xc0 | 0xc6 => (1, 1),
        0x02 | 0x09 | 0x10 | 0xc1 | 0xc3 | 0xc7 | 0xc9 => (2, 1),
        0x03 | 0x0a | 0x20 | 0xc2 | 0xc4 | 0xc8 | 0xca => (4, 1),
        0xc5 | 0xcb => (8, 1),
        0xb0 => (3, 2),
        0x91 | 0x92 | 0x97 | 0x98 => (1, 2),
        0x93..=0x96 | 0x99..=0x9e => (1, 1),
        _ => (16, 1),
    }
}

/// A descriptor's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    width: u64,
    height: u64,
    depth: u64,
    format: u32,
    channels: u32,
    flags: u32,
}

impl Extent {
    /// Reads a `CUDA_ARRAY_DESCRIPTOR`; `None` for NULL.
    ///
    /// # Safety
    /// `desc` is NULL or points to a readable descriptor.
    pub unsafe fn of_2d(desc: *const CUDA_ARRAY_DESCRIPTOR) -> Option<Extent> {
        // Layout: Width, Height (size_t), Format (C enum, 32 bits), NumChannels.
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Raw(usize, usize, u32, u32);
        // SAFETY: per the contract; Raw has the descriptor's layout and any bits are valid for it.
        let r = unsafe { desc.cast::<Raw>().as_ref() }.copied()?;
        Some(Extent { width: r.0 as u64, height: r.1 as u64, depth: 0, format: r.2, channels: r.3, flags: 0 })
    }

    /// Reads a `CUDA_ARRAY3D_DESCRIPTOR`; `None` for NULL.
    ///
    /// # Safety
    /// `desc` is NULL or points to a readable descriptor.
    pub unsafe fn of_3d(desc: *const CUDA_ARRAY3D_DESCRIPTOR) -> Option<Extent> {
        // Layout: Width, Height, Depth (size_t), Format (C enum), NumChannels, Flags.
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Raw(usize, usize, usize, u32, u32, u32);
        // SAFETY: as in `of_2d`.
        let r = unsafe { desc.cast::<Raw>().as_ref() }.copied()?;
        Some(Extent {
            width: r.0 as u64,
            height: r.1 as u64,
            depth: r.2 as u64,
            format: r.3,
            channels: r.4,
            flags: r.5,
        })
    }

    /// Bytes of one array of this extent (`None` on overflow).
    pub fn array_bytes(&self) -> Option<u64> {
        if self.flags & (SPARSE | DEFERRED_MAPPING) != 0 {
            return Some(0);
        }
        let (num, den) = texel(self.format);
        let texels = [self.height.max(1), self.depth.max(1), self.channels.max(1) as u64]
            .iter()
            .try_fold(self.width.max(1), |acc, &v| acc.checked_mul(v))?;
        Some(texels.checked_mul(num)?.div_ceil(den))
    }

    /// Bytes of a mipmapped array with `levels` levels: each level halves every dimension (never below
    /// one; a zero dimension stays zero; layers and cube faces are not halved).
    pub fn mipmapped_bytes(&self, levels: u32) -> Option<u64> {
        let mut e = *self;
        let mut total: u64 = 0;
        for _ in 0..levels.max(1) {
            total = total.checked_add(e.array_bytes()?)?;
            let half = |v: u64| if v == 0 { 0 } else { (v / 2).max(1) };
            e.width = half(e.width);
            e.height = half(e.height);
            if e.flags & (LAYERED | CUBEMAP) == 0 {
                e.depth = half(e.depth);
            }
        }
        Some(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(width: u64, height: u64, depth: u64, format: u32, channels: u32, flags: u32) -> Extent {
        Extent { width, height, depth, format, channels, flags }
    }

    #[test]
    fn pitch_rounds_rows() {
        assert_eq!(pitched(1000, 8), Some(1024 * 8));
        assert_eq!(pitched(4096, 4096), Some(16 << 20));
        assert_eq!(pitched(usize::MAX, 2), None);
    }

    #[test]
    fn array_sizes() {
        assert_eq!(extent(4096, 4096, 0, 0x01, 1, 0).array_bytes(), Some(16 << 20));
        assert_eq!(extent(256, 256, 256, 0x20, 4, 0).array_bytes(), Some(256 << 20));
        assert_eq!(extent(100, 0, 0, 0x10, 2, 0).array_bytes(), Some(400), "1D: height and depth count as one");
        assert_eq!(extent(4, 4, 0, 0x91, 1, 0).array_bytes(), Some(8), "BC1: half a byte per texel");
        assert_eq!(extent(1 << 20, 1 << 20, 0, 0x20, 4, SPARSE).array_bytes(), Some(0));
        assert_eq!(extent(u64::MAX, 2, 0, 0x01, 1, 0).array_bytes(), None);
    }

    #[test]
    fn mip_levels_halve() {
        // 2048², 1024², 512², 256² bytes.
        let e = extent(2048, 2048, 0, 0x01, 1, 0);
        assert_eq!(e.mipmapped_bytes(4), Some((4 << 20) + (1 << 20) + (256 << 10) + (64 << 10)));
        // Layers are kept: 4 layers of 8², 4², 2², 1².
        let layered = extent(8, 8, 4, 0x01, 1, LAYERED);
        assert_eq!(layered.mipmapped_bytes(4), Some(4 * (64 + 16 + 4 + 1)));
        // Below one texel a dimension stays at one.
        assert_eq!(extent(2, 1, 0, 0x01, 1, 0).mipmapped_bytes(3), Some(2 + 1 + 1));
    }
}
