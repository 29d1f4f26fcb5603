//! PCI addresses and mdev UUIDs as users type them, checked and put in the one form sysfs uses.

use crate::{Error, ErrorCode};

/// `address` as sysfs names it (`0000:10:00.0`: 4-digit lowercase domain): accepts `10:00.0`, `0000:10:00.0`
/// and NVML's and CUDA's `00000000:10:00.0`, any case. The error says what a PCI address looks like.
pub fn pci_address(address: &str) -> Result<String, Error> {
    let bad = || {
        Error::new(
            ErrorCode::Invalid,
            format!("\"{address}\" is not a PCI address (expected DOMAIN:BUS:DEVICE.FUNCTION, e.g. 0000:10:00.0)"),
        )
    };
    let text = address.trim();
    let (rest, function) = text.rsplit_once('.').ok_or_else(bad)?;
    let parts: Vec<&str> = rest.split(':').collect();
    let (domain, bus, device) = match parts.as_slice() {
        [bus, device] => ("0", *bus, *device),
        [domain, bus, device] => (*domain, *bus, *device),
        _ => return Err(bad()),
    };
    let hex = |s: &str, max_len: usize| {
        (!s.is_empty() && s.len() <= max_len && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(s, 16).ok())
            .flatten()
    };
    let (domain, bus, device, function) = (hex(domain, 8), hex(bus, 2), hex(device, 2), hex(function, 1));
    match (domain, bus, device, function) {
        (Some(d), Some(b), Some(dev), Some(f)) if d <= 0xffff && dev < 0x20 && f < 8 => {
            Ok(format!("{d:04x}:{b:02x}:{dev:02x}.{f:x}"))
        }
        _ => Err(bad()),
    }
}

/// `uuid` in the lowercase hyphenated form the kernel shows mdevs by (`8-4-4-4-12` hex digits).
pub fn mdev_uuid(uuid: &str) -> Result<String, Error> {
    let text = uuid.trim().to_ascii_lowercase();
    let groups: Vec<&str> = text.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lengths == [8, 4, 4, 4, 12] && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_hexdigit())) {
        Ok(text)
    } else {
        Err(Error::new(
            ErrorCode::Invalid,
            format!(
                "\"{uuid}\" is not a UUID (expected 8-4-4-4-12 hex digits, e.g. 8a3e4b0c-5f2d-4c1e-9b7a-2d6f0e1c3a45)"
            ),
        ))
    }
}

/// A random version 4 UUID (RFC 9562), from the kernel's random source.
pub fn random_uuid() -> Result<String, Error> {
    let mut b = [0u8; 16];
    // SAFETY: `b` is a valid buffer of `b.len()` bytes; getrandom writes at most that many.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        let e = std::io::Error::last_os_error();
        return Err(Error::new(ErrorCode::Internal, format!("cannot draw a random UUID: {e}")));
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_normalised_and_bad_ones_named() {
        for (given, want) in [
            ("0000:10:00.0", "0000:10:00.0"),
            ("00000000:10:00.0", "0000:10:00.0"),
            ("0000:3B:00.1", "0000:3b:00.1"),
            ("41:00.4", "0000:41:00.4"),
            (" 0001:af:1f.7 ", "0001:af:1f.7"),
        ] {
            assert_eq!(pci_address(given).unwrap(), want, "{given}");
        }
        for bad in
            ["", "10:00", "zz:00.0", "0000:10:00.8", "0000:10:20.0", "0000:100:00.0", "1:2:3:4.0", "0000:10:00.0x"]
        {
            let e = pci_address(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::Invalid);
            assert!(e.message.contains("is not a PCI address"), "{bad}: {e}");
        }
    }

    #[test]
    fn uuids_are_checked_and_random_ones_are_version_4() {
        assert_eq!(mdev_uuid("8A3E4B0C-5F2D-4C1E-9B7A-2D6F0E1C3A45").unwrap(), "8a3e4b0c-5f2d-4c1e-9b7a-2d6f0e1c3a45");
        for bad in ["", "8a3e4b0c5f2d4c1e9b7a2d6f0e1c3a45", "8a3e4b0c-5f2d-4c1e-9b7a-2d6f0e1c3a4g", "../../x"] {
            assert!(mdev_uuid(bad).unwrap_err().message.contains("is not a UUID"), "{bad}");
        }
        let (a, b) = (random_uuid().unwrap(), random_uuid().unwrap());
        assert_ne!(a, b);
        assert_eq!(mdev_uuid(&a).unwrap(), a);
        assert_eq!(&a[14..15], "4", "version 4: {a}");
        assert!("89ab".contains(&a[19..20]), "RFC variant: {a}");
    }
}
