//! Mediated devices as `drivers/vfio/mdev/mdev_sysfs.c` and `mdev_core.c` handle them: `create` on a
//! type, `remove` on a device.

use std::fs;
use std::path::Path;

use super::{Errno, io_err};
use crate::layout;

/// Length of a textual UUID.
const UUID_LEN: usize = 36;

/// A textual UUID's canonical (lowercase) form, if its first 36 bytes are one (`uuid_is_valid` looks at
/// no more).
pub fn parse_uuid(data: &[u8]) -> Option<String> {
    let s = data.get(..UUID_LEN)?;
    let ok = s.iter().enumerate().all(|(i, c)| match i {
        8 | 13 | 18 | 23 => *c == b'-',
        _ => c.is_ascii_hexdigit(),
    });
    ok.then(|| String::from_utf8_lossy(s).to_ascii_lowercase())
}

/// Reads a decimal count attribute.
fn read_count(path: &Path) -> Result<u32, Errno> {
    layout::read_line(path).map_err(io_err)?.parse().map_err(|_| libc::EIO)
}

/// `mdev_supported_types/<type>/create` UUID: EINVAL unless the buffer is a UUID (36 bytes, or 37 with
/// one more such as a newline), EEXIST if an mdev has that UUID, EUSERS when no instance is available;
/// else makes `<parent>/<uuid>/` with `mdev_type` and `remove`, links it from `bus/mdev/devices` and the
/// type's `devices/`, and lowers `available_instances`.
pub fn create(root: &Path, parent: &str, type_id: &str, data: &[u8]) -> Result<(), Errno> {
    if data.len() < UUID_LEN || data.len() > UUID_LEN + 1 {
        return Err(libc::EINVAL);
    }
    let uuid = parse_uuid(data).ok_or(libc::EINVAL)?;
    let bus_link = root.join("bus/mdev/devices").join(&uuid);
    if fs::symlink_metadata(&bus_link).is_ok() {
        return Err(libc::EEXIST);
    }
    let type_dir = root.join(layout::mdev_type(parent, type_id));
    let available = read_count(&type_dir.join("available_instances"))?;
    if available == 0 {
        return Err(libc::EUSERS);
    }
    let dev_rel = layout::mdev_dev(parent, &uuid);
    let dev = root.join(&dev_rel);
    fs::create_dir_all(&dev).map_err(io_err)?;
    layout::link(&dev.join("mdev_type"), &Path::new("../mdev_supported_types").join(type_id)).map_err(io_err)?;
    layout::attr(&dev.join("remove"), "", layout::WRITE_ONLY).map_err(io_err)?;
    layout::link(&type_dir.join("devices").join(&uuid), &layout::up(3).join(&uuid)).map_err(io_err)?;
    layout::link(&bus_link, &layout::up(3).join(&dev_rel)).map_err(io_err)?;
    write_count(&type_dir, available - 1)
}

/// Rewrites a type's `available_instances`, keeping its read-only mode.
fn write_count(type_dir: &Path, n: u32) -> Result<(), Errno> {
    layout::attr(&type_dir.join("available_instances"), &format!("{n}\n"), layout::READ_ONLY).map_err(io_err)
}

/// Parses a number as `kstrtoul(buf, 0, ..)` does: optional `+`, `0x` hex, leading `0` octal, else decimal,
/// one trailing newline allowed.
fn kstrtoul(data: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(data.strip_suffix(b"\n").unwrap_or(data)).ok()?;
    let s = s.strip_prefix('+').unwrap_or(s);
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// `<parent>/<uuid>/remove`: EINVAL unless the buffer is a number; `0` does nothing; any other number
/// removes the mdev (EBUSY while its `driver` link exists) and raises its type's `available_instances`.
pub fn remove(root: &Path, parent: &str, uuid: &str, data: &[u8]) -> Result<(), Errno> {
    let value = kstrtoul(data).ok_or(libc::EINVAL)?;
    if value == 0 {
        return Ok(());
    }
    let dev = root.join(layout::mdev_dev(parent, uuid));
    let type_link = fs::read_link(dev.join("mdev_type")).map_err(|_| libc::ENODEV)?;
    if fs::symlink_metadata(dev.join("driver")).is_ok() {
        return Err(libc::EBUSY);
    }
    let type_id = type_link.file_name().ok_or(libc::EIO)?.to_string_lossy().into_owned();
    let type_dir = root.join(layout::mdev_type(parent, &type_id));
    layout::unlink(&root.join("bus/mdev/devices").join(uuid)).map_err(io_err)?;
    layout::unlink(&type_dir.join("devices").join(uuid)).map_err(io_err)?;
    fs::remove_dir_all(&dev).map_err(io_err)?;
    let available = read_count(&type_dir.join("available_instances"))?;
    write_count(&type_dir, available + 1)
}
