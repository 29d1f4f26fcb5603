//! GPUs for virtual machines: what the host's sysfs says of its GPUs and what Tessera may change there.
//!
//! - [`sysfs`]: where sysfs is (`TESSERA_SYSFS_ROOT`), reading attributes and links, and the one function
//!   that writes an attribute; [`names`]: PCI addresses and mdev UUIDs, checked and normalised;
//! - [`pci_ids`]: vendor, device and class names from the system's `pci.ids`;
//! - [`discover`]: every GPU with its IOMMU group, SR-IOV relatives, mdev types and mdevs;
//! - [`vfio`]: moving a whole IOMMU group to `vfio-pci` and back, checked first, undone on failure;
//! - [`mdev`]: creating and removing mdevs; [`state`]: Tessera's records of them and the journal of a
//!   bind in progress; [`reconcile`]: putting things right after a crash or a vanished mdev.
//!
//! Errors are [`tessera_client::Error`] values, whose codes the daemon's API carries unchanged.

pub mod discover;
pub mod mdev;
pub mod names;
pub mod pci_ids;
pub mod reconcile;
pub mod state;
pub mod sysfs;
pub mod vfio;

pub use tessera_client::{Error, ErrorCode};
