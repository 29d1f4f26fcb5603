//! `TESSERA_*` configuration of a process under the shim. Every value is checked; a malformed one is a
//! [`ConfigError`] naming the variable and the accepted forms, and the shim then fails closed.

use crate::log::{self, Level};
use tessera_ffi::units::{PerDevice, VGPU_NAME_FORM, parse_memory_limit, valid_vgpu_name};

/// Every variable the shim reads, and the `tessera` command's own (others with the prefix get a warning:
/// probably a typo).
pub const KNOWN: &[&str] = &[
    "TESSERA_MEMORY_LIMIT",
    "TESSERA_VGPU",
    "TESSERA_REGION",
    "TESSERA_LOG",
    "TESSERA_REAL_LIBCUDA",
    "TESSERA_REAL_LIBNVML",
    "TESSERA_REAL_LIBCUBLAS",
    "TESSERA_LIB_DIR",
    "TESSERA_SOCKET",
    "TESSERA_STATE_DIR",
    "TESSERA_COMPUTE_SHARE",
    "TESSERA_MODE",
    "TESSERA_MEMORY_WAIT",
];

/// Default of `TESSERA_MEMORY_WAIT`.
pub const DEFAULT_MEMORY_WAIT_NS: u64 = 30_000_000_000;

/// Memory mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Native allocations, exact accounting.
    Hard,
    /// Virtualized allocations: pooled, movable, swappable.
    Soft,
}

/// The accepted forms of `TESSERA_MODE`.
pub const MODE_FORM: &str = "use hard or soft";

/// The shim's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Memory quota in bytes, for every device or per device; `None` means no quota.
    pub memory_limit: Option<PerDevice<u64>>,
    /// vGPU whose quota the process shares; `None` for a quota of its own.
    pub vgpu: Option<String>,
    /// Shared-memory region file holding the vGPUs' quotas and usage.
    pub region: String,
    /// Log threshold.
    pub log: Level,
    /// Memory mode asked for with `TESSERA_MODE` (`None`: not set; a managed vGPU's own mode wins).
    pub mode: Option<Mode>,
    /// Soft mode: longest a call waits for device memory other vGPUs are asked to free
    /// (`TESSERA_MEMORY_WAIT`, default 30 s), before it fails with out-of-memory.
    pub memory_wait_ns: u64,
    /// Standalone compute share in percent (1-100), refilled by the process itself when no daemon
    /// manages its vGPU; `None` for none.
    pub compute_share: Option<u32>,
}

/// A malformed variable.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    /// The variable.
    pub var: &'static str,
    /// What is wrong, with the accepted forms.
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.var, self.message)
    }
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("TESSERA_") && !KNOWN.contains(&k.as_ref()) && !k.starts_with("TESSERA_TEST_") {
                log::warn(format_args!("ignoring unknown variable {k} (known: {})", KNOWN.join(", ")));
            }
        }
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the configuration through `get`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let err = |var: &'static str| move |message: String| ConfigError { var, message };
        let log = match get("TESSERA_LOG") {
            None => Level::Warn,
            Some(v) => Level::parse(&v)
                .ok_or_else(|| err("TESSERA_LOG")(format!("{v:?} is not a level; use one of {}", log::ACCEPTED)))?,
        };
        let memory_limit = get("TESSERA_MEMORY_LIMIT")
            .map(|v| parse_memory_limit(&v).map_err(err("TESSERA_MEMORY_LIMIT")))
            .transpose()?;
        let vgpu = match get("TESSERA_VGPU") {
            Some(v) if !valid_vgpu_name(&v) => {
                return Err(err("TESSERA_VGPU")(format!("{v:?} is not a vGPU name; {VGPU_NAME_FORM}")));
            }
            v => v,
        };
        let region = match get("TESSERA_REGION") {
            Some(r) if r.trim().is_empty() => return Err(err("TESSERA_REGION")("is empty; give a file path".into())),
            Some(r) => r,
            None => tessera_ffi::region_file::default_path(),
        };
        let compute_share = get("TESSERA_COMPUTE_SHARE")
            .map(|v| {
                parse_share(&v)
                    .ok_or_else(|| err("TESSERA_COMPUTE_SHARE")(format!("{v:?} is not a share; {SHARE_FORM}")))
            })
            .transpose()?;
        let mode = match get("TESSERA_MODE").map(|v| (v.trim().to_ascii_lowercase(), v)) {
            None => None,
            Some((m, _)) if m == "hard" => Some(Mode::Hard),
            Some((m, _)) if m == "soft" => Some(Mode::Soft),
            Some((_, v)) => return Err(err("TESSERA_MODE")(format!("{v:?} is not a memory mode; {MODE_FORM}"))),
        };
        let memory_wait_ns = match get("TESSERA_MEMORY_WAIT") {
            None => DEFAULT_MEMORY_WAIT_NS,
            Some(v) => tessera_ffi::units::parse_duration_ns(&v).map_err(err("TESSERA_MEMORY_WAIT"))?,
        };
        Ok(Config { memory_limit, vgpu, region, log, mode, memory_wait_ns, compute_share })
    }
}

/// The accepted forms of `TESSERA_COMPUTE_SHARE`.
pub const SHARE_FORM: &str = "use a whole percentage of the device from 1 to 100, such as 30 or 30%";

/// A compute share: `30` or `30%`, 1 to 100.
fn parse_share(text: &str) -> Option<u32> {
    let t = text.trim();
    let digits = t.strip_suffix('%').unwrap_or(t).trim();
    digits.parse::<u32>().ok().filter(|p| (1..=100).contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn accepted_forms() {
        assert_eq!(cfg(&[]).unwrap().memory_limit, None);
        assert_eq!(cfg(&[("TESSERA_MEMORY_LIMIT", "8GiB")]).unwrap().memory_limit, Some(PerDevice::All(8 << 30)));
        assert_eq!(
            cfg(&[("TESSERA_MEMORY_LIMIT", "1.5GB")]).unwrap().memory_limit,
            Some(PerDevice::All(1_500_000_000))
        );
        let each = cfg(&[("TESSERA_MEMORY_LIMIT", "0=8GiB,1=4GiB")]).unwrap().memory_limit.unwrap();
        assert_eq!((each.get(0), each.get(1), each.get(2)), (Some(8 << 30), Some(4 << 30), None));
        assert_eq!(cfg(&[("TESSERA_VGPU", "team-a_1")]).unwrap().vgpu.as_deref(), Some("team-a_1"));
        assert_eq!(cfg(&[("TESSERA_LOG", "debug")]).unwrap().log, Level::Debug);
        assert_eq!(cfg(&[]).unwrap().compute_share, None);
        assert_eq!(cfg(&[]).unwrap().mode, None);
        assert_eq!(cfg(&[]).unwrap().memory_wait_ns, DEFAULT_MEMORY_WAIT_NS);
        assert_eq!(cfg(&[("TESSERA_MEMORY_WAIT", "2s")]).unwrap().memory_wait_ns, 2_000_000_000);
        assert_eq!(cfg(&[("TESSERA_MODE", "soft")]).unwrap().mode, Some(Mode::Soft));
        assert_eq!(cfg(&[("TESSERA_MODE", " Hard ")]).unwrap().mode, Some(Mode::Hard));
        for (text, pct) in [("30", 30), ("30%", 30), (" 1 ", 1), ("100%", 100)] {
            assert_eq!(cfg(&[("TESSERA_COMPUTE_SHARE", text)]).unwrap().compute_share, Some(pct), "{text:?}");
        }
    }

    #[test]
    fn malformed_values_name_the_variable() {
        for (var, value) in [
            ("TESSERA_MEMORY_LIMIT", "lots"),
            ("TESSERA_MEMORY_LIMIT", "0"),
            ("TESSERA_MEMORY_LIMIT", "-1GiB"),
            ("TESSERA_MEMORY_LIMIT", "0=8GiB,x=1"),
            ("TESSERA_MEMORY_LIMIT", "99=1GiB"),
            ("TESSERA_VGPU", "a/b"),
            ("TESSERA_VGPU", ""),
            ("TESSERA_LOG", "loud"),
            ("TESSERA_REGION", " "),
            ("TESSERA_COMPUTE_SHARE", "0"),
            ("TESSERA_COMPUTE_SHARE", "101"),
            ("TESSERA_COMPUTE_SHARE", "30.5"),
            ("TESSERA_COMPUTE_SHARE", "half"),
            ("TESSERA_COMPUTE_SHARE", ""),
            ("TESSERA_MODE", "virtual"),
            ("TESSERA_MODE", ""),
            ("TESSERA_MEMORY_WAIT", "soon"),
        ] {
            let e = cfg(&[(var, value)]).unwrap_err();
            assert_eq!(e.var, var, "{var}={value:?}");
        }
    }
}
