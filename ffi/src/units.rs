//! Textual sizes and durations, as every Tessera and simgpu environment variable and CLI flag accepts them.

/// Parses a byte size: plain bytes (`1048576`), or a number with a unit: binary `KiB MiB GiB TiB`, decimal
/// `KB MB GB TB` (also `K M G T` as binary, the way `nvidia-smi` users write them). Fractions are allowed
/// with a unit (`1.5GB`). Returns a message describing the accepted forms on error.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(size_error(text)),
    };
    scale(num, multiplier).ok_or_else(|| size_error(text))
}

fn size_error(text: &str) -> String {
    format!("{text:?} is not a size; use bytes or a number with a unit, e.g. 8GiB, 512MiB, 1.5GB, 1073741824")
}

/// Parses a duration into nanoseconds: `250ns`, `10us`, `1.5ms`, `2s`, or plain nanoseconds.
pub fn parse_duration_ns(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let multiplier: u64 = match unit {
        "" | "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return Err(duration_error(text)),
    };
    scale(num, multiplier).ok_or_else(|| duration_error(text))
}

fn duration_error(text: &str) -> String {
    format!("{text:?} is not a duration; use e.g. 500ns, 20us, 1.5ms, 2s or plain nanoseconds")
}

/// `num * multiplier` for a decimal `num`, exact for integers, rounded to the nearest unit for fractions;
/// `None` on an empty or malformed number or on overflow.
fn scale(num: &str, multiplier: u64) -> Option<u64> {
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') || num.matches('.').count() > 1 {
        return None;
    }
    match num.split_once('.') {
        None => num.parse::<u64>().ok()?.checked_mul(multiplier),
        Some((int, frac)) => {
            if multiplier == 1 || frac.len() > 12 {
                return None;
            }
            let whole = int.parse::<u64>().ok()?.checked_mul(multiplier)?;
            let frac_val: u128 = frac.parse().ok()?;
            let denom = 10u128.pow(frac.len() as u32);
            let part = (frac_val * multiplier as u128 + denom / 2) / denom;
            whole.checked_add(u64::try_from(part).ok()?)
        }
    }
}

/// Formats bytes in the largest binary unit that keeps one decimal, e.g. `1.5 GiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

/// A setting given once for every device (`8GiB`) or per device ordinal (`0=8GiB,1=4GiB`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PerDevice<T> {
    /// One value for every device.
    All(T),
    /// Values for the listed device ordinals only.
    Each(Vec<(u32, T)>),
}

impl<T: Clone> PerDevice<T> {
    /// The value for device `ordinal`, if one was given.
    pub fn get(&self, ordinal: u32) -> Option<T> {
        match self {
            PerDevice::All(v) => Some(v.clone()),
            PerDevice::Each(list) => list.iter().find(|(d, _)| *d == ordinal).map(|(_, v)| v.clone()),
        }
    }

    /// The largest device ordinal named, if the setting names any.
    pub fn max_ordinal(&self) -> Option<u32> {
        match self {
            PerDevice::All(_) => None,
            PerDevice::Each(list) => list.iter().map(|(d, _)| *d).max(),
        }
    }
}

/// Parses `VALUE` or `ORDINAL=VALUE[,ORDINAL=VALUE...]` with `parse` for each value.
pub fn parse_per_device<T>(text: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<PerDevice<T>, String> {
    if !text.contains('=') {
        return parse(text).map(PerDevice::All);
    }
    let mut list: Vec<(u32, T)> = Vec::new();
    for part in text.split(',') {
        let (dev, value) =
            part.split_once('=').ok_or_else(|| format!("{part:?} is not ORDINAL=VALUE (e.g. 0=8GiB,1=4GiB)"))?;
        let dev: u32 =
            dev.trim().parse().map_err(|_| format!("{:?} is not a device ordinal (e.g. 0=8GiB,1=4GiB)", dev.trim()))?;
        if list.iter().any(|(d, _)| *d == dev) {
            return Err(format!("device {dev} is given twice"));
        }
        list.push((dev, parse(value)?));
    }
    Ok(PerDevice::Each(list))
}

/// Parses a memory quota (`TESSERA_MEMORY_LIMIT`, `tessera run --memory`): a size for every device or
/// per device; zero and device ordinals beyond the region's are refused. Errors name the accepted forms.
pub fn parse_memory_limit(text: &str) -> Result<PerDevice<u64>, String> {
    let limit = parse_per_device(text, parse_size).map_err(|e| {
        format!("{e}; accepted: a size for every device (8GiB, 512MiB, 1.5GB, bytes) or per device (0=8GiB,1=4GiB)")
    })?;
    let max = crate::region::MAX_DEVICES as u32;
    match &limit {
        PerDevice::All(0) => Err("a quota of 0 bytes allows nothing".into()),
        PerDevice::Each(list) if list.iter().any(|(d, _)| *d >= max) => {
            Err(format!("device ordinals go up to {}", max - 1))
        }
        _ => Ok(limit),
    }
}

/// True when `name` is usable as a vGPU name (`TESSERA_VGPU`, `tessera run --vgpu`): 1-63 letters, digits,
/// `-`, `_` or `.`, not starting with `.` (it is also a file-name component and a CLI argument).
pub fn valid_vgpu_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !name.starts_with('.')
}

/// What [`valid_vgpu_name`] accepts, for error messages.
pub const VGPU_NAME_FORM: &str = "use 1-63 letters, digits, '-', '_' or '.', not starting with '.'";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_limits_and_vgpu_names() {
        assert_eq!(parse_memory_limit("8GiB"), Ok(PerDevice::All(8 << 30)));
        assert_eq!(parse_memory_limit("0=1GiB,1=2GiB").unwrap().get(1), Some(2 << 30));
        for bad in ["lots", "0", "-1GiB", "0=8GiB,x=1", "99=1GiB"] {
            assert!(parse_memory_limit(bad).is_err(), "{bad:?}");
        }
        assert!(parse_memory_limit("lots").unwrap_err().contains("0=8GiB,1=4GiB"));
        assert!(valid_vgpu_name("team-a_1.x"));
        for bad in ["", "a/b", ".hidden", "a b", &"x".repeat(64)] {
            assert!(!valid_vgpu_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 2 G "), Ok(2 << 30));
        for bad in ["", "abc", "1.5", "-1", "8XB", "1..5G", ".5G", "99999999999TiB", "1.G"] {
            assert!(parse_size(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("10us"), Ok(10_000));
        assert_eq!(parse_duration_ns("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_duration_ns("250"), Ok(250));
        assert!(parse_duration_ns("fast").is_err());
        assert!(parse_duration_ns("1h").is_err());
    }

    #[test]
    fn formatting() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
    }
}

#[cfg(test)]
mod per_device_tests {
    use super::*;

    #[test]
    fn per_device_forms() {
        assert_eq!(parse_per_device("8GiB", parse_size), Ok(PerDevice::All(8 << 30)));
        let each = parse_per_device("0=8GiB, 1=4GiB", parse_size).unwrap();
        assert_eq!(each.get(0), Some(8 << 30));
        assert_eq!(each.get(1), Some(4 << 30));
        assert_eq!(each.get(2), None);
        assert_eq!(each.max_ordinal(), Some(1));
        assert!(parse_per_device("0=8GiB,0=4GiB", parse_size).is_err());
        assert!(parse_per_device("x=8GiB", parse_size).is_err());
        assert!(parse_per_device("0=8GiB,4GiB", parse_size).is_err());
        assert!(parse_per_device("0=lots", parse_size).is_err());
    }
}
