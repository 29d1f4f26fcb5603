//! PCI identity of the simulated devices: ids, the two bus-id spellings, and parsing the bus ids callers
//! look devices up by.

use simgpu::DeviceConfig;

/// NVIDIA's PCI vendor id.
const NVIDIA_VENDOR: u32 = 0x10de;

/// `(profile key, PCI device id, PCI subsystem id)` of the models the profiles simulate.
const IDS: &[(&str, u32, u32)] = &[
    ("h100", 0x2330, 0x16c1_10de), // H100 SXM5 80GB
    ("a100", 0x20b0, 0x134f_10de), // A100-SXM4-40GB
];
/// Device and subsystem id of profiles without a real counterpart.
const SIMULATED_IDS: (u32, u32) = (0x2f00, 0x0000_10de);

/// PCI base class of a 3D controller (`baseClass` of `nvmlPciInfoExt_t`).
pub const CLASS_DISPLAY: u32 = 0x03;
/// PCI sub class of a 3D controller.
pub const SUBCLASS_3D: u32 = 0x02;

/// `pciDeviceId` (device id in the high half, vendor id in the low half) and `pciSubSystemId`.
pub fn ids(dev: &DeviceConfig) -> (u32, u32) {
    let (device, subsystem) =
        IDS.iter().find(|(key, _, _)| *key == dev.profile.key).map_or(SIMULATED_IDS, |&(_, d, s)| (d, s));
    ((device << 16) | NVIDIA_VENDOR, subsystem)
}

/// The legacy 16-byte form, `%04X:%02X:%02X.0`.
pub fn legacy_bus_id(dev: &DeviceConfig) -> String {
    format!("{:04X}:{:02X}:00.0", 0, dev.pci_bus())
}

/// Copies `text` into a NUL-padded C char array (truncating, always leaving a NUL).
pub fn c_array<const N: usize>(text: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let n = text.len().min(N - 1);
    out[..n].copy_from_slice(&text.as_bytes()[..n]);
    out
}

/// A PCI address: domain, bus, device, function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    /// PCI domain.
    pub domain: u32,
    /// Bus number.
    pub bus: u32,
    /// Device number.
    pub device: u32,
    /// Function number.
    pub function: u32,
}

impl Address {
    /// Where `dev` sits: domain 0, its own bus, device 0, function 0.
    pub fn of(dev: &DeviceConfig) -> Address {
        Address { domain: 0, bus: dev.pci_bus(), device: 0, function: 0 }
    }

    /// Parses the forms `nvmlDeviceGetHandleByPciBusId` accepts, all numbers hexadecimal:
    /// `domain:bus:device.function`, `domain:bus:device` and `bus:device.function`.
    pub fn parse(text: &str) -> Option<Address> {
        let hex = |t: &str, max: u32| u32::from_str_radix(t.trim(), 16).ok().filter(|&v| v <= max);
        let (location, function) = match text.trim().split_once('.') {
            Some((l, f)) => (l, Some(hex(f, 7)?)),
            None => (text.trim(), None),
        };
        let parts: Vec<&str> = location.split(':').collect();
        let (domain, bus, device) = match (parts.as_slice(), function) {
            ([d, b, v], _) => (hex(d, u32::MAX)?, *b, *v),
            ([b, v], Some(_)) => (0, *b, *v),
            _ => return None,
        };
        Some(Address { domain, bus: hex(bus, 0xff)?, device: hex(device, 0x1f)?, function: function.unwrap_or(0) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_id_forms() {
        let want = Address { domain: 0, bus: 0x10, device: 0, function: 0 };
        for text in ["00000000:10:00.0", "0000:10:00.0", "0:10:0", "10:00.0", " 00000000:10:00.0 "] {
            assert_eq!(Address::parse(text), Some(want), "{text}");
        }
        for text in ["", "10", "10:00", "0:100:0.0", "0:10:20.0", "0:10:0.8", "x:10:0.0", "0:0:10:0.0"] {
            assert_eq!(Address::parse(text), None, "{text}");
        }
    }

    #[test]
    fn c_array_truncates_and_terminates() {
        assert_eq!(&c_array::<4>("abcdef"), b"abc\0");
        assert_eq!(&c_array::<6>("ab"), b"ab\0\0\0\0");
    }
}
