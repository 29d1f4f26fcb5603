//! How big a container's vGPU is when its pod says so: the container's resource limits
//! `<resource>-memory` (units of 1 GiB) and `<resource>-share` (percent of the GPU's time) come first,
//! then the pod's annotations `<resource>-memory` (a Kubernetes quantity of bytes, e.g. `4Gi`) and
//! `<resource>-share` (an integer percent); what neither gives stays k/N of the GPU
//! ([`crate::allocate::spec_for`]). With the default resource the names are `tessera.io/vgpu-memory` and
//! `tessera.io/vgpu-share`.

use std::collections::BTreeMap;

/// Why a Kubernetes quantity (or a percent) is not a value the plugin takes. The messages complete a sentence
/// naming the value (`... "4GB" has an unknown suffix "GB"`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not a decimal number with an optional suffix.
    #[error("is not a quantity")]
    NotAQuantity,
    /// A suffix that is none of Kubernetes' (binary, decimal or an exponent in range).
    #[error("has an unknown suffix {0:?}")]
    UnknownSuffix(String),
    /// More than a `u64` holds.
    #[error("is too large")]
    TooLarge,
    /// A fraction (of a byte, of a count, of a percent).
    #[error("is not a whole number")]
    NotWhole,
    /// A share outside 1 to 100.
    #[error("is not a percent from 1 to 100")]
    NotAPercent,
}

/// Why a container's sizing cannot be taken: a bad value (naming where it was and what it was), or a
/// size no vGPU can have on the GPU.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizingError {
    /// The container's memory limit (in GiB) is not a count of GiB.
    #[error("container limit {name}={value:?} {source} (give GiB, e.g. 4)")]
    LimitMemory {
        /// The resource's name, `<resource>-memory`.
        name: String,
        /// The limit as given.
        value: String,
        /// What is wrong with it.
        source: QuantityError,
    },
    /// The pod's memory annotation is not a quantity of bytes.
    #[error("pod annotation {name}={value:?} {source} (give bytes, e.g. 4Gi)")]
    AnnotationMemory {
        /// The annotation's name, `<resource>-memory`.
        name: String,
        /// The annotation as given.
        value: String,
        /// What is wrong with it.
        source: QuantityError,
    },
    /// The container's share limit is not a percent.
    #[error("container limit {name}={value:?} {source} (give a percent 1-100)")]
    LimitShare {
        /// The resource's name, `<resource>-share`.
        name: String,
        /// The limit as given.
        value: String,
        /// What is wrong with it.
        source: QuantityError,
    },
    /// The pod's share annotation is not a percent.
    #[error("pod annotation {name}={value:?} {source} (give a percent 1-100)")]
    AnnotationShare {
        /// The annotation's name, `<resource>-share`.
        name: String,
        /// The annotation as given.
        value: String,
        /// What is wrong with it.
        source: QuantityError,
    },
    /// A memory size of 0 bytes.
    #[error("{name} of 0 bytes: a vGPU needs some memory")]
    NoMemory {
        /// `<resource>-memory`.
        name: String,
    },
    /// More memory than the GPU has.
    #[error("{name} asks for {memory} bytes, more than the GPU's {total} bytes")]
    OverGpu {
        /// `<resource>-memory`.
        name: String,
        /// The bytes asked for.
        memory: u64,
        /// The GPU's memory, in bytes.
        total: u64,
    },
}

/// One GiB, the unit of the `<resource>-memory` extended resource.
pub const GIB: u64 = 1 << 30;

/// A vGPU's size as a pod asks for it; `None` leaves that part k/N of the GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sizing {
    /// GPU memory in bytes.
    pub memory: Option<u64>,
    /// Percent of the GPU's compute time, 1 to 100.
    pub share: Option<u32>,
}

/// The names of the memory and share resources (and annotations) of main resource `resource`.
pub fn names(resource: &str) -> (String, String) {
    (format!("{resource}-memory"), format!("{resource}-share"))
}

impl Sizing {
    /// The sizing a container asks for: its `limits` (quantities by resource name) over the pod's
    /// `annotations`. A bad value is an error naming where it was and what it was.
    pub fn of(
        resource: &str,
        limits: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<Sizing, SizingError> {
        let (memory_name, share_name) = names(resource);
        let memory = match (limits.get(&memory_name), annotations.get(&memory_name)) {
            (Some(v), _) => {
                Some(count(v).and_then(|gib| gib.checked_mul(GIB).ok_or(QuantityError::TooLarge)).map_err(
                    |source| SizingError::LimitMemory { name: memory_name.clone(), value: v.clone(), source },
                )?)
            }
            (None, Some(v)) => Some(bytes(v).map_err(|source| SizingError::AnnotationMemory {
                name: memory_name.clone(),
                value: v.clone(),
                source,
            })?),
            (None, None) => None,
        };
        let share = match (limits.get(&share_name), annotations.get(&share_name)) {
            (Some(v), _) => Some(count(v).and_then(percent).map_err(|source| SizingError::LimitShare {
                name: share_name.clone(),
                value: v.clone(),
                source,
            })?),
            (None, Some(v)) => {
                Some(v.trim().parse::<u64>().map_err(|_| QuantityError::NotWhole).and_then(percent).map_err(
                    |source| SizingError::AnnotationShare { name: share_name.clone(), value: v.clone(), source },
                )?)
            }
            (None, None) => None,
        };
        if memory == Some(0) {
            return Err(SizingError::NoMemory { name: memory_name });
        }
        Ok(Sizing { memory, share })
    }

    /// Checks the sizing fits a GPU of `memory_total` bytes.
    pub fn check(&self, resource: &str, memory_total: u64) -> Result<(), SizingError> {
        let (memory_name, _) = names(resource);
        match self.memory {
            Some(m) if m > memory_total => {
                Err(SizingError::OverGpu { name: memory_name, memory: m, total: memory_total })
            }
            _ => Ok(()),
        }
    }
}

/// A share of 1 to 100 percent.
fn percent(n: u64) -> Result<u32, QuantityError> {
    match n {
        1..=100 => Ok(n as u32),
        _ => Err(QuantityError::NotAPercent),
    }
}

/// A quantity that is a whole count (an extended resource's amount, e.g. `4`).
pub fn count(text: &str) -> Result<u64, QuantityError> {
    quantity(text)
}

/// A Kubernetes quantity of bytes: a decimal number (`1.5`, `8589934592`) with an optional binary
/// (`Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei`) or decimal (`k`, `M`, `G`, `T`, `P`, `E`, `m`) suffix, or an
/// exponent (`5e9`); it must come to a whole number of bytes.
pub fn bytes(text: &str) -> Result<u64, QuantityError> {
    quantity(text)
}

/// The value of a Kubernetes quantity that must be a whole, non-negative number.
fn quantity(text: &str) -> Result<u64, QuantityError> {
    let text = text.trim();
    let number_end = text.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let number = number.strip_prefix('+').unwrap_or(number);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_ok = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits_ok(whole) || !digits_ok(fraction) {
        return Err(QuantityError::NotAQuantity);
    }
    // value = mantissa * 2^binary * 10^decimal / 10^fraction digits, exactly, in u128.
    let (binary, decimal): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        _ => match suffix.strip_prefix(['e', 'E']).map(str::parse::<i32>) {
            Some(Ok(exp)) if (-30..=30).contains(&exp) => (0, exp),
            _ => return Err(QuantityError::UnknownSuffix(suffix.to_string())),
        },
    };
    let too_large = || QuantityError::TooLarge;
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(too_large());
    }
    let mantissa: u128 = if digits.is_empty() { 0 } else { digits.parse().map_err(|_| too_large())? };
    let scale = decimal - fraction.len() as i32;
    let mut value = mantissa.checked_mul(1u128 << binary).ok_or_else(too_large)?;
    if scale >= 0 {
        value = value.checked_mul(10u128.checked_pow(scale as u32).ok_or_else(too_large)?).ok_or_else(too_large)?;
    } else {
        let divisor = 10u128.checked_pow(scale.unsigned_abs()).ok_or_else(too_large)?;
        if value % divisor != 0 {
            return Err(QuantityError::NotWhole);
        }
        value /= divisor;
    }
    u64::try_from(value).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn quantities_of_bytes() {
        for (text, value) in [
            ("0", 0),
            ("8589934592", 8 << 30),
            ("4Gi", 4 << 30),
            ("512Mi", 512 << 20),
            ("1.5Gi", 3 << 29),
            ("1Ki", 1024),
            ("2k", 2000),
            ("1G", 1_000_000_000),
            ("5e9", 5_000_000_000),
            ("5E3", 5000),
            ("1000m", 1),
            ("+3", 3),
            (".5Ki", 512),
            ("7Ei", 7 << 60),
        ] {
            assert_eq!(bytes(text), Ok(value), "{text}");
        }
        for (text, says) in [
            ("", "not a quantity"),
            ("Gi", "not a quantity"),
            ("-1Gi", "not a quantity"),
            ("4GB", "unknown suffix"),
            ("4 Gi", "unknown suffix"),
            ("1.2.3", "not a quantity"),
            ("1.1", "not a whole number"),
            ("1m", "not a whole number"),
            ("16Ei", "too large"),
            ("1e40", "unknown suffix"),
            ("99999999999999999999999999999999999", "too large"),
        ] {
            let e = bytes(text).expect_err(text).to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    proptest! {
        #[test]
        fn binary_suffixes_scale_by_powers_of_1024(n in 0u64..(1 << 20), i in 0usize..5) {
            let suffixes = ["", "Ki", "Mi", "Gi", "Ti"];
            prop_assert_eq!(bytes(&format!("{n}{}", suffixes[i])), Ok(n << (10 * i)));
        }

        #[test]
        fn decimal_forms_agree(n in 0u64..1_000_000_000) {
            prop_assert_eq!(bytes(&format!("{n}000")), Ok(n * 1000));
            prop_assert_eq!(bytes(&format!("{n}k")), Ok(n * 1000));
            prop_assert_eq!(bytes(&format!("{n}e3")), Ok(n * 1000));
            prop_assert_eq!(bytes(&format!("{n}.000")), Ok(n));
        }

        #[test]
        fn any_text_is_a_value_or_an_error_never_a_panic(text in "\\PC{0,40}") {
            let _ = bytes(&text);
        }
    }

    #[test]
    fn limits_come_before_annotations_and_bad_values_are_named() {
        let r = "tessera.io/vgpu";
        let none = map(&[]);
        assert_eq!(Sizing::of(r, &none, &none), Ok(Sizing::default()));
        let notes = map(&[("tessera.io/vgpu-memory", "4Gi"), ("tessera.io/vgpu-share", "30")]);
        assert_eq!(Sizing::of(r, &none, &notes), Ok(Sizing { memory: Some(4 << 30), share: Some(30) }));
        let limits = map(&[("tessera.io/vgpu-memory", "2")]);
        assert_eq!(Sizing::of(r, &limits, &notes), Ok(Sizing { memory: Some(2 << 30), share: Some(30) }));
        let limits = map(&[("tessera.io/vgpu-share", "55")]);
        assert_eq!(Sizing::of(r, &limits, &none), Ok(Sizing { memory: None, share: Some(55) }));
        let other = map(&[("example.com/gpu-memory", "1Gi")]);
        assert_eq!(Sizing::of("example.com/gpu", &none, &other).unwrap().memory, Some(1 << 30));

        for (limits, notes, says) in [
            (&[][..], &[("tessera.io/vgpu-memory", "lots")][..], "pod annotation tessera.io/vgpu-memory=\"lots\""),
            (&[], &[("tessera.io/vgpu-share", "101")], "tessera.io/vgpu-share=\"101\" is not a percent"),
            (&[], &[("tessera.io/vgpu-share", "0")], "not a percent"),
            (&[], &[("tessera.io/vgpu-share", "50%")], "not a whole number"),
            (&[], &[("tessera.io/vgpu-memory", "0")], "0 bytes"),
            (&[("tessera.io/vgpu-memory", "1.5")], &[], "container limit tessera.io/vgpu-memory=\"1.5\""),
            (&[("tessera.io/vgpu-share", "200")], &[], "container limit tessera.io/vgpu-share=\"200\""),
        ] {
            let e = Sizing::of(r, &map(limits), &map(notes)).expect_err(says).to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn memory_must_fit_the_gpu() {
        let s = Sizing { memory: Some(5 << 30), share: None };
        assert_eq!(s.check("tessera.io/vgpu", 5 << 30), Ok(()));
        let e = s.check("tessera.io/vgpu", 4 << 30).unwrap_err().to_string();
        assert!(e.contains("tessera.io/vgpu-memory") && e.contains("more than the GPU"), "{e}");
    }
}
