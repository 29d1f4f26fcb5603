//! Textual sizes and durations, as every Tessera and simgpu environment variable and CLI flag accepts them.

/// Why a value is refused; each names the value and says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// Not a size.
    #[error("{0:?} is not a size; use bytes or a number with a unit, e.g. 8GiB, 512MiB, 1.5GB, 1073741824")]
    Size(String),
    /// Not a duration.
    #[error("{0:?} is not a duration; use e.g. 500ns, 20us, 1.5ms, 2s or plain nanoseconds")]
    Duration(String),
    /// A per-device part without `=`.
    #[error("{0:?} is not ORDINAL=VALUE (e.g. 0=8GiB,1=4GiB)")]
    NotPair(String),
    /// A per-device part whose ordinal is not one.
    #[error("{0:?} is not a device ordinal (e.g. 0=8GiB,1=4GiB)")]
    Ordinal(String),
    /// A device named twice.
    #[error("device {0} is given twice")]
    Twice(u32),
    /// A device ordinal the region has no slot for.
    #[error("device ordinals go up to {}", MAX_DEVICES - 1)]
    OrdinalTooHigh,
    /// A quota of nothing.
    #[error("{0:?}: a quota of 0 bytes allows nothing; give a size above zero")]
    ZeroQuota(String),
    /// A quota equal to the region's marker for no limit.
    #[error(
        "{text:?}: a quota of {bytes} bytes is the marker for no limit; give at most {MAX_QUOTA} bytes (or no quota)"
    )]
    NoLimitMarker {
        /// The value given.
        text: String,
        /// Its bytes.
        bytes: u64,
    },
    /// A memory limit refused, with the accepted forms.
    #[error("{0}; accepted: a size for every device (8GiB, 512MiB, 1.5GB, bytes) or per device (0=8GiB,1=4GiB)")]
    MemoryLimit(Box<UnitError>),
    /// Not a share.
    #[error("{0:?} is not a share; {SHARE_FORM}")]
    Share(String),
    /// Not a whole number in the range a setting takes.
    #[error("{text:?} is not {what} between {min} and {max}")]
    Count {
        /// The value given.
        text: String,
        /// What it should count, with its article (`an SM count`).
        what: &'static str,
        /// The least value.
        min: u64,
        /// The greatest value.
        max: u64,
    },
}

/// Parses a whole number from `min` to `max` (`what` names it in the error: `an SM count`).
pub fn parse_count(text: &str, what: &'static str, min: u64, max: u64) -> Result<u64, UnitError> {
    let t = text.trim();
    (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .then(|| t.parse::<u64>().ok())
        .flatten()
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| UnitError::Count { text: text.to_string(), what, min, max })
}

/// Parses a byte size: plain bytes (`1048576`), or a number with a unit: binary `KiB MiB GiB TiB`, decimal
/// `KB MB GB TB` (also `K M G T` as binary, the way `nvidia-smi` users write them). Fractions are allowed
/// with a unit (`1.5GB`). Returns a message describing the accepted forms on error.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
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

fn size_error(text: &str) -> UnitError {
    UnitError::Size(text.to_string())
}

/// Parses a duration into nanoseconds: `250ns`, `10us`, `1.5ms`, `2s`, or plain nanoseconds.
pub fn parse_duration_ns(text: &str) -> Result<u64, UnitError> {
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

fn duration_error(text: &str) -> UnitError {
    UnitError::Duration(text.to_string())
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

/// `bytes` in its largest binary unit up to TiB: the value and the unit's index (0 = bytes, 1 = KiB, …
/// 4 = TiB), for formatters that spell the unit their own way.
pub fn binary_scale(bytes: u64) -> (f64, usize) {
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < 4 {
        value /= 1024.0;
        unit += 1;
    }
    (value, unit)
}

/// Formats bytes in the largest binary unit that keeps one decimal, e.g. `1.5 GiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    match binary_scale(bytes) {
        (_, 0) => format!("{bytes} B"),
        (value, unit) => format!("{value:.1} {}", UNITS[unit]),
    }
}

/// `n` with thousands separators: `12,345`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
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
pub fn parse_per_device<T, E: From<UnitError>>(
    text: &str,
    parse: impl Fn(&str) -> Result<T, E>,
) -> Result<PerDevice<T>, E> {
    if !text.contains('=') {
        return parse(text).map(PerDevice::All);
    }
    let mut list: Vec<(u32, T)> = Vec::new();
    for part in text.split(',') {
        let (dev, value) = part.split_once('=').ok_or_else(|| UnitError::NotPair(part.to_string()))?;
        let dev = parse_ordinal(dev.trim()).ok_or_else(|| UnitError::Ordinal(dev.trim().to_string()))?;
        if list.iter().any(|(d, _)| *d == dev) {
            return Err(UnitError::Twice(dev).into());
        }
        list.push((dev, parse(value)?));
    }
    Ok(PerDevice::Each(list))
}

/// A device ordinal: plain decimal digits (no sign, which `str::parse` would take).
fn parse_ordinal(text: &str) -> Option<u32> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())).then(|| text.parse().ok()).flatten()
}

/// The largest memory quota accepted: one byte below the region's marker for "no limit"
/// (`tessera_region::UNLIMITED`, `u64::MAX`), which a quota must never become. This crate cannot name
/// the region's crate (that one builds on this one), so the region's layout checks at compile time that
/// the two agree.
pub const MAX_QUOTA: u64 = u64::MAX - 1;

/// The devices a per-device quota can name: ordinals below this, the region's device slots
/// (`tessera_region::MAX_DEVICES`, which the region's layout checks at compile time to be this).
pub const MAX_DEVICES: usize = 16;

/// Parses one memory quota (`--memory` of `tessera vgpu create/set`, and each value of
/// [`parse_memory_limit`]): a size from 1 byte to [`MAX_QUOTA`]. Zero allows nothing and the largest
/// value means "no limit" to the region, so both are refused, as are sizes that overflow.
pub fn parse_quota(text: &str) -> Result<u64, UnitError> {
    match parse_size(text)? {
        0 => Err(UnitError::ZeroQuota(text.trim().to_string())),
        n if n > MAX_QUOTA => Err(UnitError::NoLimitMarker { text: text.trim().to_string(), bytes: n }),
        n => Ok(n),
    }
}

/// Parses a memory quota (`TESSERA_MEMORY_LIMIT`, `tessera run --memory`): a quota ([`parse_quota`]) for
/// every device or per device; zero anywhere, the no-limit marker and device ordinals beyond the region's
/// are refused. Errors name the accepted forms.
pub fn parse_memory_limit(text: &str) -> Result<PerDevice<u64>, UnitError> {
    let limit = parse_per_device(text, parse_quota).map_err(|e| UnitError::MemoryLimit(Box::new(e)))?;
    let max = MAX_DEVICES as u32;
    match &limit {
        PerDevice::Each(list) if list.iter().any(|(d, _)| *d >= max) => Err(UnitError::OrdinalTooHigh),
        _ => Ok(limit),
    }
}

/// The accepted forms of a compute share ([`parse_share`]).
pub const SHARE_FORM: &str = "use a whole percentage of the device from 1 to 100, such as 30 or 30%";

/// Parses a compute share (`TESSERA_COMPUTE_SHARE`, `--share` of `tessera vgpu create/set`): `30` or
/// `30%`, a whole percentage from 1 to 100 without a sign. 0 would starve the vGPU, so it is refused.
pub fn parse_share(text: &str) -> Result<u32, UnitError> {
    let t = text.trim();
    let digits = t.strip_suffix('%').unwrap_or(t).trim();
    parse_ordinal(digits).filter(|p| (1..=100).contains(p)).ok_or_else(|| UnitError::Share(text.to_string()))
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
        for bad in ["lots", "0", "-1GiB", "0=8GiB,x=1", "99=1GiB", "0=0", "0B", "0=1GiB,1=0KiB", "+0=1GiB"] {
            assert!(parse_memory_limit(bad).is_err(), "{bad:?}");
        }
        assert!(parse_memory_limit("lots").unwrap_err().to_string().contains("0=8GiB,1=4GiB"));
        assert!(valid_vgpu_name("team-a_1.x"));
        for bad in ["", "a/b", ".hidden", "a b", &"x".repeat(64)] {
            assert!(!valid_vgpu_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn quotas_refuse_zero_signs_overflow_and_the_no_limit_marker() {
        assert_eq!(parse_quota("1"), Ok(1));
        assert_eq!(parse_quota(&MAX_QUOTA.to_string()), Ok(MAX_QUOTA));
        for bad in ["0", "0B", "0GiB", "+1GiB", "-1", "18446744073709551615", "18446744073709551616", "16777216TiB"] {
            assert!(parse_quota(bad).is_err(), "{bad:?}");
        }
        assert!(parse_quota("18446744073709551615").unwrap_err().to_string().contains("no limit"));
        for bad in ["18446744073709551615", "0=18446744073709551615"] {
            assert!(parse_memory_limit(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn shares_are_whole_percentages_from_1_to_100() {
        for (text, pct) in [("30", 30), ("30%", 30), (" 1 ", 1), ("100%", 100), ("7 %", 7)] {
            assert_eq!(parse_share(text), Ok(pct), "{text:?}");
        }
        for bad in ["0", "0%", "101", "+30", "-1", "30.5", "half", "", "%", "4294967326"] {
            assert!(parse_share(bad).unwrap_err().to_string().contains("1 to 100"), "{bad:?}");
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

#[cfg(test)]
mod property_tests {
    use super::*;
    use proptest::prelude::*;

    /// Text close to the accepted forms: digits, signs, dots, separators and units in any order.
    fn near_miss() -> impl Strategy<Value = String> {
        "[ +\\-0-9.=,%]{0,24}(B|b|K|KiB|kb|M|MiB|GB|g|GiB|T|TiB|tb|ns|us|ms|s|%|x)?"
    }

    proptest! {
        #[test]
        fn sizes_never_panic_and_read_back_exactly(text in any::<String>(), n in any::<u64>()) {
            let _ = parse_size(&text);
            let _ = parse_duration_ns(&text);
            prop_assert_eq!(parse_size(&n.to_string()), Ok(n));
        }

        #[test]
        fn an_accepted_quota_is_a_limit(text in prop_oneof![any::<String>(), near_miss()]) {
            if let Ok(n) = parse_quota(&text) {
                prop_assert!((1..=MAX_QUOTA).contains(&n), "{text:?} gave {n}");
                prop_assert!(!text.contains(['+', '-']), "{text:?} has a sign");
            }
            if let Ok(limit) = parse_memory_limit(&text) {
                let values = match limit {
                    PerDevice::All(n) => vec![(0, n)],
                    PerDevice::Each(list) => list,
                };
                prop_assert!(!values.is_empty());
                for (dev, n) in values {
                    prop_assert!((dev as usize) < MAX_DEVICES, "{text:?}");
                    prop_assert!((1..=MAX_QUOTA).contains(&n), "{text:?} gave {n}");
                }
                prop_assert!(!text.contains(['+', '-']), "{text:?} has a sign");
            }
        }

        #[test]
        fn an_accepted_share_is_from_1_to_100(text in prop_oneof![any::<String>(), near_miss()], n in any::<u32>()) {
            if let Ok(p) = parse_share(&text) {
                prop_assert!((1..=100).contains(&p), "{text:?} gave {p}");
                prop_assert!(!text.contains(['+', '-']), "{text:?} has a sign");
            }
            prop_assert_eq!(parse_share(&n.to_string()).is_ok(), (1..=100).contains(&n));
        }
    }
}
