//! Device handles: pointers into a static table, one byte per possible device, so a handle can be validated
//! by its address alone and stays the same across `nvmlShutdown`/`nvmlInit`, as real NVML's do.

use simgpu::config::MAX_DEVICES;
use tessera_ffi::nvml::{NVML_ERROR_INVALID_ARGUMENT, NvmlDevice, NvmlReturn};

/// The table whose element addresses are the handles. Never read or written through a handle.
static SLOTS: [u8; MAX_DEVICES] = [0; MAX_DEVICES];

/// The handle of device `ordinal` (which must be below [`MAX_DEVICES`]).
pub fn handle(ordinal: usize) -> NvmlDevice {
    // Handles are opaque to callers; the cast only lends them the C pointer type.
    (&SLOTS[ordinal] as *const u8).cast_mut().cast()
}

/// The ordinal `handle` stands for; `NVML_ERROR_INVALID_ARGUMENT` when it is not one of ours.
/// Whether that device exists under the current configuration is the caller's check.
pub fn ordinal(handle: NvmlDevice) -> Result<usize, NvmlReturn> {
    let offset = (handle as usize).wrapping_sub(SLOTS.as_ptr() as usize);
    if offset < MAX_DEVICES { Ok(offset) } else { Err(NVML_ERROR_INVALID_ARGUMENT) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_foreign_pointers_are_rejected() {
        for i in 0..MAX_DEVICES {
            assert_eq!(ordinal(handle(i)), Ok(i));
        }
        assert!(ordinal(std::ptr::null_mut()).is_err());
        assert!(ordinal((handle(0) as usize - 1) as NvmlDevice).is_err());
        assert!(ordinal((handle(MAX_DEVICES - 1) as usize + 1) as NvmlDevice).is_err());
    }
}
