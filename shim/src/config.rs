//! `TESSERA_*` configuration of a process under the shim. Every value is checked; a malformed one is a
//! [`ConfigError`] naming the variable and the accepted forms, and the shim then fails closed.

use crate::log::{self, Level};
use std::ffi::{OsStr, OsString};
use tessera_ffi::units::{PerDevice, UnitError, VGPU_NAME_FORM, parse_memory_limit, parse_share, valid_vgpu_name};

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
    "TESSERA_SYSFS_ROOT",
    "TESSERA_PCI_IDS",
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
    /// The daemon's socket, which a process joining a managed vGPU tells which process slot is its own
    /// (`TESSERA_SOCKET`, else `tessera.sock` beside the region file, where the daemon puts it by default).
    pub socket: String,
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
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{var}: {message}")]
pub struct ConfigError {
    /// The variable.
    pub var: &'static str,
    /// What is wrong, with the accepted forms.
    pub message: String,
}

impl Config {
    /// Reads the process environment (as bytes: a value that is not UTF-8 is refused, never taken for
    /// unset).
    pub fn from_env() -> Result<Config, ConfigError> {
        for k in unknown_variables(std::env::vars_os().map(|(k, _)| k)) {
            log::warn(format_args!("ignoring unknown variable {k} (known: {})", KNOWN.join(", ")));
        }
        Self::from_lookup(|k| std::env::var_os(k))
    }

    /// Reads the configuration through `get`, which returns a variable's raw value. A value that is not
    /// valid UTF-8 is an error naming the variable: read as unset, it would switch its limit off.
    pub fn from_lookup(get: impl Fn(&str) -> Option<OsString>) -> Result<Config, ConfigError> {
        let err = |var: &'static str| move |message: String| ConfigError { var, message };
        let unit = |var: &'static str| move |e: UnitError| ConfigError { var, message: e.to_string() };
        let get =
            |var: &'static str| -> Result<Option<String>, ConfigError> { get(var).map(|v| utf8(var, &v)).transpose() };
        let log = match get("TESSERA_LOG")? {
            None => Level::Warn,
            Some(v) => Level::parse(&v)
                .ok_or_else(|| err("TESSERA_LOG")(format!("{v:?} is not a level; use one of {}", log::ACCEPTED)))?,
        };
        let memory_limit = get("TESSERA_MEMORY_LIMIT")?
            .map(|v| parse_memory_limit(&v).map_err(unit("TESSERA_MEMORY_LIMIT")))
            .transpose()?;
        let vgpu = match get("TESSERA_VGPU")? {
            Some(v) if !valid_vgpu_name(&v) => {
                return Err(err("TESSERA_VGPU")(format!("{v:?} is not a vGPU name; {VGPU_NAME_FORM}")));
            }
            v => v,
        };
        let region = match get("TESSERA_REGION")? {
            Some(r) if r.trim().is_empty() => return Err(err("TESSERA_REGION")("is empty; give a file path".into())),
            Some(r) => r,
            None => tessera_region::open::default_path(),
        };
        let socket = match get("TESSERA_SOCKET")? {
            Some(s) if s.trim().is_empty() => return Err(err("TESSERA_SOCKET")("is empty; give a socket path".into())),
            Some(s) => s,
            None => std::path::Path::new(&region).with_file_name("tessera.sock").to_string_lossy().into_owned(),
        };
        let compute_share = get("TESSERA_COMPUTE_SHARE")?
            .map(|v| parse_share(&v).map_err(unit("TESSERA_COMPUTE_SHARE")))
            .transpose()?;
        let mode = match get("TESSERA_MODE")?.map(|v| (v.trim().to_ascii_lowercase(), v)) {
            None => None,
            Some((m, _)) if m == "hard" => Some(Mode::Hard),
            Some((m, _)) if m == "soft" => Some(Mode::Soft),
            Some((_, v)) => return Err(err("TESSERA_MODE")(format!("{v:?} is not a memory mode; {MODE_FORM}"))),
        };
        let memory_wait_ns = match get("TESSERA_MEMORY_WAIT")? {
            None => DEFAULT_MEMORY_WAIT_NS,
            Some(v) => tessera_ffi::units::parse_duration_ns(&v).map_err(unit("TESSERA_MEMORY_WAIT"))?,
        };
        Ok(Config { memory_limit, vgpu, region, socket, log, mode, memory_wait_ns, compute_share })
    }
}

/// `value` as text, or an error naming `var`: a limit that is not valid UTF-8 must not read as unset.
fn utf8(var: &'static str, value: &OsStr) -> Result<String, ConfigError> {
    value.to_str().map(str::to_string).ok_or_else(|| ConfigError {
        var,
        message: format!("{value:?} is not valid UTF-8; give the value in plain text, or unset the variable"),
    })
}

/// The names among `names` that have the `TESSERA_` prefix but are not variables Tessera reads (probably
/// typos), for a warning; names that are not UTF-8 are shown with their bytes escaped.
pub fn unknown_variables(names: impl Iterator<Item = OsString>) -> Vec<String> {
    names
        .filter(|k| k.as_encoded_bytes().starts_with(b"TESSERA_"))
        .filter(|k| k.to_str().is_none_or(|k| !KNOWN.contains(&k) && !k.starts_with("TESSERA_TEST_")))
        .map(|k| k.to_str().map_or_else(|| format!("{k:?}"), str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, OsString> = vars.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    fn raw(var: &str, value: &[u8]) -> Result<Config, ConfigError> {
        use std::os::unix::ffi::OsStrExt;
        let value = OsStr::from_bytes(value).to_os_string();
        Config::from_lookup(|k| (k == var).then(|| value.clone()))
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
            ("TESSERA_COMPUTE_SHARE", "+30"),
            ("TESSERA_COMPUTE_SHARE", "-1"),
            ("TESSERA_MEMORY_LIMIT", "0=0"),
            ("TESSERA_MEMORY_LIMIT", "0B"),
            ("TESSERA_MEMORY_LIMIT", "18446744073709551615"),
            ("TESSERA_MEMORY_LIMIT", "0=18446744073709551615"),
            ("TESSERA_MEMORY_LIMIT", "+4GiB"),
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

    #[test]
    fn values_that_are_not_utf8_are_refused_naming_the_variable() {
        for var in [
            "TESSERA_MEMORY_LIMIT",
            "TESSERA_VGPU",
            "TESSERA_COMPUTE_SHARE",
            "TESSERA_MODE",
            "TESSERA_REGION",
            "TESSERA_LOG",
            "TESSERA_MEMORY_WAIT",
        ] {
            let e = raw(var, b"4GiB\xff").unwrap_err();
            assert_eq!(e.var, var);
            assert!(e.to_string().contains(var) && e.message.contains("not valid UTF-8"), "{e}");
        }
    }

    #[test]
    fn unknown_names_are_listed_even_when_not_utf8() {
        use std::os::unix::ffi::OsStrExt;
        let names = [
            OsString::from("TESSERA_MEMORY_LIMIT"),
            OsString::from("TESSERA_MEMORY_LIMTI"),
            OsString::from("TESSERA_TEST_DIR"),
            OsString::from("PATH"),
            OsStr::from_bytes(b"TESSERA_\xffX").to_os_string(),
        ];
        assert_eq!(unknown_variables(names.into_iter()), ["TESSERA_MEMORY_LIMTI", "\"TESSERA_\\xFFX\""]);
    }
}

#[cfg(test)]
mod property_tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::ffi::OsStrExt;

    /// The variables `from_lookup` reads, in the order of the values a case gives them.
    const READ: [&str; 7] = [
        "TESSERA_MEMORY_LIMIT",
        "TESSERA_VGPU",
        "TESSERA_REGION",
        "TESSERA_LOG",
        "TESSERA_COMPUTE_SHARE",
        "TESSERA_MODE",
        "TESSERA_MEMORY_WAIT",
    ];

    /// A value for one variable: unset, arbitrary bytes, or text near the accepted forms.
    fn value() -> impl Strategy<Value = Option<Vec<u8>>> {
        prop_oneof![
            Just(None),
            proptest::collection::vec(any::<u8>(), 0..24).prop_map(Some),
            "[ +\\-0-9.=,%]{0,16}(GiB|MiB|B|%|s|ms|soft|hard|warn)?".prop_map(|s| Some(s.into_bytes())),
        ]
    }

    proptest! {
        #[test]
        fn never_panics_refuses_non_utf8_and_never_turns_a_set_limit_off(
            values in proptest::collection::vec(value(), READ.len())
        ) {
            let get = |k: &str| {
                let i = READ.iter().position(|r| *r == k)?;
                values[i].as_deref().map(|v| OsStr::from_bytes(v).to_os_string())
            };
            let result = Config::from_lookup(get);
            let set = |var: &str| values[READ.iter().position(|r| *r == var).unwrap()].as_deref();
            let any_not_utf8 = values.iter().flatten().any(|v| std::str::from_utf8(v).is_err());
            match result {
                Err(e) => prop_assert!(READ.contains(&e.var), "{e}"),
                Ok(c) => {
                    prop_assert!(!any_not_utf8, "a value that is not UTF-8 was accepted: {c:?}");
                    match (set("TESSERA_MEMORY_LIMIT"), &c.memory_limit) {
                        (None, None) => {}
                        (Some(_), Some(PerDevice::All(n))) => prop_assert!((1..=tessera_ffi::units::MAX_QUOTA).contains(n)),
                        (Some(_), Some(PerDevice::Each(list))) => {
                            prop_assert!(!list.is_empty());
                            for (_, n) in list {
                                prop_assert!((1..=tessera_ffi::units::MAX_QUOTA).contains(n));
                            }
                        }
                        (given, got) => prop_assert!(false, "TESSERA_MEMORY_LIMIT {given:?} read as {got:?}"),
                    }
                    match (set("TESSERA_COMPUTE_SHARE"), c.compute_share) {
                        (None, None) => {}
                        (Some(_), Some(p)) => prop_assert!((1..=100).contains(&p)),
                        (given, got) => prop_assert!(false, "TESSERA_COMPUTE_SHARE {given:?} read as {got:?}"),
                    }
                    prop_assert_eq!(set("TESSERA_VGPU").is_some(), c.vgpu.is_some());
                    prop_assert_eq!(set("TESSERA_MODE").is_some(), c.mode.is_some());
                }
            }
        }
    }
}
