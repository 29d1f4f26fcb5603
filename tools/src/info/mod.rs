//! `tessera info`: which driver is in use and what devices it shows; with `--json`, one document for the
//! host (driver, devices with BEP-1000's metadata, resource slots) that `docs/schema/device-info.schema.json`
//! describes.
//!
//! - [`device`]: one device's entry; [`slots`]: the resource slots Tessera offers; NVML and the compute
//!   capability tables are `tessera_host`'s.

mod device;
mod slots;

use crate::driver::{Driver, DriverError, Origin};
use clap::Args;
use serde_json::{Value, json};
use tessera_ffi::sys::CUdevice_attribute as A;
use tessera_ffi::units::format_size;
use tessera_host::nvml;

/// Version of the document's layout (`schema_version`); bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Options of `tessera info`.
#[derive(Args)]
pub struct InfoArgs {
    /// Print one JSON document for the host (driver, devices with compute units, precision support, memory
    /// and partitioning, resource slots), as docs/schema/device-info.schema.json describes it.
    #[arg(long)]
    json: bool,
}

/// Why `tessera info` failed.
#[derive(Debug, thiserror::Error)]
pub enum InfoError {
    /// The driver does not load, or a call failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// A call about one device failed (for the document).
    #[error("device {device}: {source}")]
    Device {
        /// The device's ordinal.
        device: i32,
        /// What the driver said.
        #[source]
        source: DriverError,
    },
    /// The document could not be printed as JSON.
    #[error("cannot print the document: {0}")]
    Print(#[source] serde_json::Error),
}

/// Prints the driver and its devices, as text or as the JSON document.
pub fn run(args: InfoArgs) -> Result<(), InfoError> {
    let d = Driver::load()?;
    d.init()?;
    if args.json {
        let doc = document(&d)?;
        println!("{}", serde_json::to_string_pretty(&doc).map_err(InfoError::Print)?);
        return Ok(());
    }
    Ok(print(&d)?)
}

/// Prints the driver and its devices as text, through the initialized driver `d`.
fn print(d: &Driver) -> Result<(), DriverError> {
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

/// The host's document, read through the initialized driver `d` and the NVML that goes with it.
fn document(d: &Driver) -> Result<Value, InfoError> {
    let nvml = nvml::Nvml::open(&d.origin);
    let v = d.version()?;
    let (kind, library_dir) = match &d.origin {
        Origin::Real => ("real", None),
        Origin::Simulated(folder) => ("simulated", Some(folder.to_string_lossy().into_owned())),
    };
    let mut devices = Vec::new();
    let mut facts = Vec::new();
    for dev in 0..d.device_count()? {
        let (entry, f) =
            device::describe(d, nvml.as_ref(), dev).map_err(|source| InfoError::Device { device: dev, source })?;
        devices.push(entry);
        facts.push(f);
    }
    Ok(json!({
        "schema_version": SCHEMA_VERSION,
        "driver": {
            "kind": kind,
            "cuda_version": format!("{}.{}", v / 1000, v % 1000 / 10),
            "display_driver_version": nvml.as_ref().and_then(|n| n.driver_version()),
            "nvml_version": nvml.as_ref().and_then(|n| n.version()),
            "nvml_library": nvml.as_ref().map(|n| n.name().to_string()),
            "library_dir": library_dir,
        },
        "devices": devices,
        "resource_slots": slots::resource_slots(&facts),
    }))
}
