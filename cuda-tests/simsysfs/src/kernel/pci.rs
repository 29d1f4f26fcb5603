//! PCI driver binding as `drivers/base/bus.c` and `drivers/pci/pci-driver.c`/`pci-sysfs.c` do it:
//! `bind`, `unbind`, `new_id`, `drivers_probe`, `driver_override`.

use std::fs;
use std::path::Path;

use super::{Errno, io_err};
use crate::layout;

/// `driver_override` longer than this is refused (`PAGE_SIZE - 1` on a 4 KiB-page kernel).
const OVERRIDE_LIMIT: usize = 4095;

/// The device a bus attribute's buffer names (compared as `sysfs_streq` does: one trailing newline
/// ignored), if it exists.
fn find_device(root: &Path, data: &[u8]) -> Option<String> {
    let name = std::str::from_utf8(data.strip_suffix(b"\n").unwrap_or(data)).ok()?;
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return None;
    }
    fs::symlink_metadata(root.join("bus/pci/devices").join(name)).ok()?;
    Some(name.to_string())
}

/// A device's `driver_override`, `None` when it shows `(null)`.
fn override_of(root: &Path, addr: &str) -> Option<String> {
    let v = layout::read_line(&root.join(layout::pci_dev(addr)).join("driver_override")).ok()?;
    (v != "(null)").then_some(v)
}

/// Reads a hex id attribute (`0x10de`).
fn hex_attr(root: &Path, addr: &str, name: &str) -> u32 {
    let v = layout::read_line(&root.join(layout::pci_dev(addr)).join(name)).unwrap_or_default();
    u32::from_str_radix(v.trim_start_matches("0x"), 16).unwrap_or(0)
}

/// The built-in id tables of the simulated drivers: `nvidia` and `nouveau` claim NVIDIA display-class
/// functions, `snd_hda_intel` audio functions; `vfio-pci` has none (it binds only through
/// `driver_override` or `new_id`).
fn static_match(driver: &str, vendor: u32, class: u32) -> bool {
    match driver {
        "nvidia" | "nouveau" => vendor == 0x10de && class >> 16 == 0x03,
        "snd_hda_intel" => class >> 8 == 0x0403,
        _ => false,
    }
}

/// The driver's dynamic ids (`vendor device` pairs added through `new_id`).
fn dynamic_ids(root: &Path, driver: &str) -> Vec<(u32, u32)> {
    let text = fs::read_to_string(root.join(layout::dynamic_ids_file(driver))).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (v, d) = l.split_once(' ')?;
            Some((u32::from_str_radix(v, 16).ok()?, u32::from_str_radix(d, 16).ok()?))
        })
        .collect()
}

/// Whether `driver` would probe the device, as `pci_match_device` decides: an override naming another
/// driver excludes it; else a dynamic id, the built-in table (or the device's default driver), or an
/// override naming it includes it.
fn matches(root: &Path, driver: &str, addr: &str) -> bool {
    let ovr = override_of(root, addr);
    if ovr.as_deref().is_some_and(|o| o != driver) {
        return false;
    }
    let (vendor, device) = (hex_attr(root, addr, "vendor"), hex_attr(root, addr, "device"));
    let default = fs::read_to_string(root.join(layout::default_driver_file(addr))).ok();
    ovr.is_some()
        || dynamic_ids(root, driver).contains(&(vendor, device))
        || static_match(driver, vendor, hex_attr(root, addr, "class"))
        || default.as_deref() == Some(driver)
}

/// `drivers/<driver>/bind`: ENODEV for no such device or one the driver does not match, EBUSY if bound.
pub fn bind(root: &Path, driver: &str, data: &[u8]) -> Result<(), Errno> {
    let addr = find_device(root, data).ok_or(libc::ENODEV)?;
    if !matches(root, driver, &addr) {
        return Err(libc::ENODEV);
    }
    if layout::bound_driver(root, &addr).is_some() {
        return Err(libc::EBUSY);
    }
    layout::bind_links(root, &addr, driver).map_err(io_err)
}

/// `drivers/<driver>/unbind`: ENODEV unless the device is bound to this driver.
pub fn unbind(root: &Path, driver: &str, data: &[u8]) -> Result<(), Errno> {
    let addr = find_device(root, data).ok_or(libc::ENODEV)?;
    if layout::bound_driver(root, &addr).as_deref() != Some(driver) {
        return Err(libc::ENODEV);
    }
    layout::unbind_links(root, &addr, driver).map_err(io_err)
}

/// `drivers_probe`: ENODEV for no such device; an unbound device is bound to its override, else its
/// default driver, else the first registered driver that matches it; a bound one is left alone.
pub fn drivers_probe(root: &Path, data: &[u8]) -> Result<(), Errno> {
    let addr = find_device(root, data).ok_or(libc::ENODEV)?;
    if layout::bound_driver(root, &addr).is_some() {
        return Ok(());
    }
    // Candidates in the order device_attach would try them here: the override alone when set, else the
    // device's default driver, then the registered drivers (skeleton order, then by name).
    let candidates: Vec<String> = match override_of(root, &addr) {
        Some(o) => vec![o],
        None => {
            let default = fs::read_to_string(root.join(layout::default_driver_file(&addr))).ok();
            default.into_iter().chain(registered_drivers(root)).collect()
        }
    };
    let chosen = candidates.into_iter().find(|d| root.join(layout::driver_dir(d)).is_dir() && matches(root, d, &addr));
    if let Some(driver) = chosen {
        layout::bind_links(root, &addr, &driver).map_err(io_err)?;
    }
    Ok(())
}

/// The drivers under `bus/pci/drivers`: the skeleton's in its order, then any others by name.
fn registered_drivers(root: &Path) -> Vec<String> {
    let mut others: Vec<String> = fs::read_dir(root.join("bus/pci/drivers"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|d| !layout::DRIVERS.contains(&d.as_str()))
        .collect();
    others.sort();
    layout::DRIVERS.iter().map(|d| d.to_string()).chain(others).collect()
}

/// `<dev>/driver_override`: stores the value up to its first newline (or NUL); an empty value clears it
/// back to `(null)`; EINVAL at a page or more.
pub fn driver_override(root: &Path, addr: &str, data: &[u8]) -> Result<(), Errno> {
    if data.len() >= OVERRIDE_LIMIT {
        return Err(libc::EINVAL);
    }
    let end = data.iter().position(|b| *b == b'\n' || *b == 0).unwrap_or(data.len());
    let value = String::from_utf8_lossy(&data[..end]);
    let shown = if value.is_empty() { "(null)".into() } else { value.into_owned() };
    let file = root.join(layout::pci_dev(addr)).join("driver_override");
    fs::write(file, format!("{shown}\n")).map_err(io_err)
}

/// `drivers/<driver>/new_id` `VVVV DDDD [SVVV SDDD CCCC MMMM DATA]` (hex): EINVAL with fewer than two
/// ids, EEXIST when the built-in table already matches; else adds the id and binds every unbound device
/// the driver now matches.
pub fn new_id(root: &Path, driver: &str, data: &[u8]) -> Result<(), Errno> {
    let text = std::str::from_utf8(data).map_err(|_| libc::EINVAL)?;
    // `%x` as sscanf reads it: an optional 0x prefix; reading stops at the first field that is no number.
    let hex =
        |f: &str| u32::from_str_radix(f.strip_prefix("0x").or_else(|| f.strip_prefix("0X")).unwrap_or(f), 16).ok();
    let fields: Vec<u32> = text.split_whitespace().map_while(hex).collect();
    let (&vendor, &device) = match fields.as_slice() {
        [v, d, ..] => (v, d),
        _ => return Err(libc::EINVAL),
    };
    let class = fields.get(4).copied().unwrap_or(0);
    if fields.len() != 7 && static_match(driver, vendor, class) {
        return Err(libc::EEXIST);
    }
    let file = root.join(layout::dynamic_ids_file(driver));
    fs::create_dir_all(file.parent().expect("state file has a parent")).map_err(io_err)?;
    let mut ids = fs::read_to_string(&file).unwrap_or_default();
    ids.push_str(&format!("{vendor:04x} {device:04x}\n"));
    fs::write(&file, ids).map_err(io_err)?;
    let devices = fs::read_dir(root.join("bus/pci/devices")).map_err(io_err)?;
    for entry in devices.filter_map(Result::ok) {
        let addr = entry.file_name().to_string_lossy().into_owned();
        if layout::bound_driver(root, &addr).is_none() && matches(root, driver, &addr) {
            layout::bind_links(root, &addr, driver).map_err(io_err)?;
        }
    }
    Ok(())
}
