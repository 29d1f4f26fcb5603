//! `tessera info`: which driver is in use and what devices it shows.

use crate::driver::{Driver, Origin};
use tessera_ffi::sys::CUdevice_attribute as A;
use tessera_ffi::units::format_size;

/// Prints the driver and its devices.
pub fn run() -> Result<(), String> {
    let d = Driver::load()?;
    d.init()?;
    let v = d.version()?;
    match &d.origin {
        Origin::Real => println!("driver: NVIDIA CUDA driver, CUDA {}.{}", v / 1000, v % 1000 / 10),
        Origin::Simulated(folder) => println!(
            "driver: simgpu (simulated, no GPU found), CUDA {}.{}, libraries in {}",
            v / 1000,
            v % 1000 / 10,
            folder.display()
        ),
    }
    for dev in 0..d.device_count()? {
        let attr = |a: A| d.attribute(dev, a as i32);
        println!(
            "GPU {dev}: {}, {}, {} SMs, compute capability {}.{}",
            d.name(dev)?,
            format_size(d.total_memory(dev)?),
            attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
    }
    Ok(())
}
