//! `SIMGPU_*` configuration: which devices exist and how the simulation behaves.

use crate::profile::{self, Profile};
use tessera_ffi::units::{UnitError, parse_count, parse_duration_ns, parse_per_device, parse_size};

/// Most devices one simulated machine may have (fixed by the state-file layout).
pub const MAX_DEVICES: usize = 16;

/// One configured device: a profile plus overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceConfig {
    /// Ordinal as CUDA numbers it.
    pub ordinal: u32,
    /// The model it simulates.
    pub profile: &'static Profile,
    /// Device memory in bytes (the profile's unless overridden).
    pub total_memory: u64,
    /// SM count (the profile's unless overridden).
    pub sm_count: u32,
    /// Device memory each context costs.
    pub context_memory: u64,
    /// Whether MIG mode is on when the machine starts (`SIMGPU_MIG`); `nvmlDeviceSetMigMode` changes it
    /// afterwards (see `simgpu::mig_state`).
    pub mig_enabled: bool,
}

impl DeviceConfig {
    /// A stable UUID derived from the ordinal and model, so every process sees the same one.
    pub fn uuid(&self) -> [u8; 16] {
        let mut u = [0u8; 16];
        u[..4].copy_from_slice(b"SIMG");
        u[4] = self.ordinal as u8;
        let key = self.profile.key.as_bytes();
        u[5..5 + key.len().min(11)].copy_from_slice(&key[..key.len().min(11)]);
        u
    }

    /// The UUID in NVIDIA's textual form, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub fn uuid_string(&self) -> String {
        let h: String = self.uuid().iter().map(|b| format!("{b:02x}")).collect();
        format!("GPU-{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
    }

    /// PCI bus number; one bus per device.
    pub fn pci_bus(&self) -> u32 {
        0x10 + self.ordinal
    }

    /// PCI bus id as `cuDeviceGetPCIBusId` and NVML print it.
    pub fn pci_bus_id(&self) -> String {
        format!("00000000:{:02X}:00.0", self.pci_bus())
    }
}

/// Everything the simulated driver and NVML read from the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Devices in ordinal order.
    pub devices: Vec<DeviceConfig>,
    /// Machine-wide shared state file.
    pub state_path: String,
    /// Engine time a kernel that is not a built-in costs (`SIMGPU_KERNEL_TIME`), unless
    /// [`Config::kernel_times`] names it.
    pub default_kernel_ns: u64,
    /// Engine time by kernel name (`SIMGPU_KERNEL_TIMES='*gemm*=2ms,*=50us'`): the first pattern that
    /// matches wins; `*` matches any run of characters.
    pub kernel_times: Vec<(String, u64)>,
    /// What a launch of a kernel the simulator cannot compute does (`SIMGPU_UNKNOWN_KERNELS`).
    pub unknown_kernels: UnknownKernels,
    /// Whether each process says once per such kernel, on stderr, that it is not computed
    /// (`SIMGPU_UNKNOWN_KERNELS_QUIET=1` silences it).
    pub say_unknown: bool,
    /// What `cuDriverGetVersion` reports.
    pub driver_version: u32,
}

/// What a launch of a kernel that is not one of simgpu's built-ins does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownKernels {
    /// Occupies the engine for its time and touches nothing (`noop`, the default).
    Noop,
    /// As `noop`, and overwrites the memory its pointer arguments reach with a NaN pattern (`poison`).
    Poison,
    /// Is refused with `CUDA_ERROR_NOT_SUPPORTED` (`refuse`).
    Refuse,
}

/// True when `name` matches `pattern`, where `*` matches any run of characters.
pub fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl Config {
    /// The engine time kernel `name` costs when the simulator does not compute it.
    pub fn kernel_ns(&self, name: &str) -> u64 {
        self.kernel_times.iter().find(|(p, _)| glob(p, name)).map_or(self.default_kernel_ns, |&(_, ns)| ns)
    }
}

/// A malformed `SIMGPU_*` variable.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    /// The variable's name.
    pub var: &'static str,
    /// What is wrong and which forms are accepted.
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "simgpu: {}: {}", self.var, self.message)
    }
}

/// Default device list when `SIMGPU_DEVICES` is unset.
pub const DEFAULT_DEVICES: &str = "h100";
/// Default engine time of an unknown kernel.
pub const DEFAULT_KERNEL_TIME: &str = "20us";
/// Default `cuDriverGetVersion` answer: the CUDA 13.0 driver the proc-address table was probed on.
pub const DEFAULT_DRIVER_VERSION: u32 = 13000;

/// The default state file: per user, in shared memory.
pub fn default_state_path() -> String {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
    format!("{dir}/simgpu-{uid}.state")
}

/// `SIMGPU_MIG`: the ordinals of the devices that start in MIG mode, comma-separated, or `all` (every
/// MIG-capable device) or `none`; each named device must exist and its model support MIG.
fn parse_mig(text: &str, profiles: &[&'static Profile]) -> Result<Vec<u32>, String> {
    let capable = |i: usize| profiles[i].mig_capable;
    match text.trim() {
        "none" => return Ok(Vec::new()),
        "all" => return Ok((0..profiles.len()).filter(|&i| capable(i)).map(|i| i as u32).collect()),
        "" => return Err("is empty; give device ordinals (e.g. 0,2), `all` or `none`".into()),
        _ => {}
    }
    text.split(',')
        .map(|part| {
            let i = part.trim().parse::<u32>().map_err(|_| {
                format!("{:?} is not a device ordinal; give ordinals (e.g. 0,2), `all` or `none`", part.trim())
            })?;
            let profile = profiles
                .get(i as usize)
                .ok_or_else(|| format!("names device {i}, but only {} are configured", profiles.len()))?;
            if !profile.mig_capable {
                return Err(format!("device {i} is a {} ({}), which has no MIG", profile.key, profile.name));
            }
            Ok(i)
        })
        .collect()
}

impl Config {
    /// The file whose existence makes device `ordinal` lost to NVML (fallen off the bus): while it
    /// exists, NVML answers `NVML_ERROR_GPU_IS_LOST` to every query of the device, as the real library
    /// does for a GPU that became inaccessible; removing it brings the device back. It sits beside the
    /// state file (`<SIMGPU_STATE>.lost-<ordinal>`), so each simulated machine has its own.
    pub fn lost_marker(&self, ordinal: u32) -> std::path::PathBuf {
        format!("{}.lost-{ordinal}", self.state_path).into()
    }

    /// Reads the configuration from the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the configuration through `get`, so tests need not touch the process environment.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let err = |var: &'static str| move |message: String| ConfigError { var, message };

        let list = get("SIMGPU_DEVICES").unwrap_or_else(|| DEFAULT_DEVICES.to_string());
        let mut profiles = Vec::new();
        for key in list.split(',') {
            let p = profile::find(key).ok_or_else(|| {
                let known: Vec<&str> = profile::PROFILES.iter().map(|p| p.key).collect();
                err("SIMGPU_DEVICES")(format!(
                    "unknown profile {:?}; expected a comma-separated list of {}",
                    key.trim(),
                    known.join(", ")
                ))
            })?;
            profiles.push(p);
        }
        if profiles.len() > MAX_DEVICES {
            return Err(err("SIMGPU_DEVICES")(format!("at most {MAX_DEVICES} devices are supported")));
        }
        let n = profiles.len() as u32;
        let per_device = |var: &'static str, parse: fn(&str) -> Result<u64, UnitError>| {
            get(var)
                .map(|text| {
                    let v = parse_per_device(&text, parse).map_err(|e| err(var)(e.to_string()))?;
                    match v.max_ordinal() {
                        Some(m) if m >= n => Err(err(var)(format!("names device {m}, but only {n} are configured"))),
                        _ => Ok(v),
                    }
                })
                .transpose()
        };
        let memory = per_device("SIMGPU_MEMORY", parse_size)?;
        let sms = per_device("SIMGPU_SM_COUNT", |t| parse_count(t, "an SM count", 1, 1024))?;
        let ctx_mem = per_device("SIMGPU_CONTEXT_MEMORY", parse_size)?;
        let mig = get("SIMGPU_MIG").map(|t| parse_mig(&t, &profiles).map_err(err("SIMGPU_MIG"))).transpose()?;

        let devices = profiles
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let i = i as u32;
                DeviceConfig {
                    ordinal: i,
                    profile: p,
                    total_memory: memory.as_ref().and_then(|m| m.get(i)).unwrap_or(p.total_memory),
                    sm_count: sms.as_ref().and_then(|m| m.get(i)).map(|v| v as u32).unwrap_or(p.sm_count),
                    context_memory: ctx_mem.as_ref().and_then(|m| m.get(i)).unwrap_or(p.context_memory),
                    mig_enabled: mig.as_ref().is_some_and(|m| m.contains(&i)),
                }
            })
            .collect::<Vec<_>>();
        if let Some(d) = devices.iter().find(|d| d.total_memory == 0 || d.context_memory >= d.total_memory) {
            let var = if d.total_memory == 0 { "SIMGPU_MEMORY" } else { "SIMGPU_CONTEXT_MEMORY" };
            return Err(err(var)(format!(
                "device {} would have {} bytes of memory and contexts costing {}; memory must exceed the context cost",
                d.ordinal, d.total_memory, d.context_memory
            )));
        }

        let default_kernel_ns =
            parse_duration_ns(&get("SIMGPU_KERNEL_TIME").unwrap_or_else(|| DEFAULT_KERNEL_TIME.into()))
                .map_err(|e| err("SIMGPU_KERNEL_TIME")(e.to_string()))?;
        let driver_version = match get("SIMGPU_DRIVER_VERSION") {
            None => DEFAULT_DRIVER_VERSION,
            Some(t) => t.trim().parse::<u32>().ok().filter(|v| (12080..100_000).contains(v)).ok_or_else(|| {
                err("SIMGPU_DRIVER_VERSION")(format!(
                    "{t:?} is not a CUDA version of 12080 or later written as 1000*major+10*minor (e.g. 12080, 13000)"
                ))
            })?,
        };
        let state_path = match get("SIMGPU_STATE") {
            Some(p) if p.trim().is_empty() => return Err(err("SIMGPU_STATE")("is empty; give a file path".into())),
            Some(p) => p,
            None => default_state_path(),
        };
        let mut kernel_times = Vec::new();
        for part in get("SIMGPU_KERNEL_TIMES").unwrap_or_default().split(',').filter(|p| !p.trim().is_empty()) {
            let (pattern, time) = part.split_once('=').ok_or_else(|| {
                err("SIMGPU_KERNEL_TIMES")(format!("{part:?} is not PATTERN=TIME (e.g. *gemm*=2ms,*=50us)"))
            })?;
            let ns = parse_duration_ns(time).map_err(|e| err("SIMGPU_KERNEL_TIMES")(e.to_string()))?;
            kernel_times.push((pattern.trim().to_string(), ns));
        }
        let unknown_kernels = match get("SIMGPU_UNKNOWN_KERNELS").as_deref().map(str::trim) {
            None | Some("noop") => UnknownKernels::Noop,
            Some("poison") => UnknownKernels::Poison,
            Some("refuse") => UnknownKernels::Refuse,
            Some(other) => {
                return Err(err("SIMGPU_UNKNOWN_KERNELS")(format!("{other:?} is not noop, poison or refuse")));
            }
        };
        let say_unknown = match get("SIMGPU_UNKNOWN_KERNELS_QUIET").as_deref().map(str::trim) {
            None | Some("" | "0") => true,
            Some("1") => false,
            Some(other) => return Err(err("SIMGPU_UNKNOWN_KERNELS_QUIET")(format!("{other:?} is not 0 or 1"))),
        };
        Ok(Config {
            devices,
            state_path,
            default_kernel_ns,
            kernel_times,
            unknown_kernels,
            say_unknown,
            driver_version,
        })
    }

    /// A fingerprint of the device list, stored in the state file so processes configured differently
    /// cannot share one file by mistake.
    pub fn fingerprint(&self) -> u64 {
        // FNV-1a over the figures that must agree between processes.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |v: u64| {
            for b in v.to_le_bytes() {
                h ^= b as u64;
                h = h.wrapping_mul(0x100_0000_01b3);
            }
        };
        for d in &self.devices {
            eat(d.total_memory);
            eat(d.sm_count as u64);
            eat(d.context_memory);
            for b in d.profile.key.bytes() {
                eat(b as u64);
            }
        }
        h
    }
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
    fn kernel_times_and_unknown_kernels() {
        let c = cfg(&[
            ("SIMGPU_KERNEL_TIMES", "*gemm*=2ms, ampere_*_nn=1ms ,*=50us"),
            ("SIMGPU_UNKNOWN_KERNELS", "poison"),
        ])
        .unwrap();
        assert_eq!(c.kernel_ns("sm90_xmma_gemm_f16"), 2_000_000);
        assert_eq!(c.kernel_ns("ampere_sgemm_nn"), 2_000_000, "the first match wins");
        assert_eq!(c.kernel_ns("ampere_h_nn"), 1_000_000);
        assert_eq!(c.kernel_ns("elementwise"), 50_000);
        assert_eq!(c.unknown_kernels, UnknownKernels::Poison);
        assert!(c.say_unknown);
        assert_eq!(cfg(&[]).unwrap().kernel_ns("anything"), 20_000);
        for (var, bad) in [
            ("SIMGPU_KERNEL_TIMES", "gemm"),
            ("SIMGPU_KERNEL_TIMES", "*=fast"),
            ("SIMGPU_UNKNOWN_KERNELS", "ignore"),
            ("SIMGPU_UNKNOWN_KERNELS_QUIET", "yes"),
        ] {
            assert_eq!(cfg(&[(var, bad)]).unwrap_err().var, var, "{var}={bad}");
        }
        assert!(
            glob("a*b*c", "aXbYc") && glob("*", "") && !glob("a*b", "ab_") && glob("ab", "ab") && !glob("ab", "abc")
        );
    }

    #[test]
    fn defaults() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.devices.len(), 1);
        assert_eq!(c.devices[0].profile.key, "h100");
        assert_eq!(c.devices[0].sm_count, 132);
        assert_eq!(c.default_kernel_ns, 20_000);
        assert_eq!(c.driver_version, 13000);
    }

    #[test]
    fn overrides() {
        let c = cfg(&[
            ("SIMGPU_DEVICES", "h100,a100-40gb,small"),
            ("SIMGPU_MEMORY", "1=8GiB"),
            ("SIMGPU_SM_COUNT", "0=64"),
        ])
        .unwrap();
        assert_eq!(c.devices.len(), 3);
        assert_eq!(c.devices[0].sm_count, 64);
        assert_eq!(c.devices[1].total_memory, 8 << 30);
        assert_eq!(c.devices[1].sm_count, 108);
        assert_eq!(c.devices[2].total_memory, 4 << 30);
        assert_ne!(c.devices[0].uuid(), c.devices[1].uuid());
        assert!(c.devices[0].uuid_string().starts_with("GPU-"));
        assert!(c.devices.iter().all(|d| !d.mig_enabled));
    }

    #[test]
    fn mig_modes() {
        let on = |mig: &str| -> Vec<bool> {
            let c = cfg(&[("SIMGPU_DEVICES", "h100,small,a100"), ("SIMGPU_MIG", mig)]).unwrap();
            c.devices.iter().map(|d| d.mig_enabled).collect()
        };
        assert_eq!(on("0,2"), [true, false, true]);
        assert_eq!(on(" 2 "), [false, false, true]);
        assert_eq!(on("all"), [true, false, true]);
        assert_eq!(on("none"), [false, false, false]);
        let e = cfg(&[("SIMGPU_DEVICES", "h100,small"), ("SIMGPU_MIG", "0,1")]).unwrap_err();
        assert!(e.message.contains("device 1 is a small"), "{e}");
        let e = cfg(&[("SIMGPU_DEVICES", "h100,small"), ("SIMGPU_MIG", "0,5")]).unwrap_err();
        assert!(e.message.contains("only 2 are configured"), "{e}");
    }

    #[test]
    fn malformed_values_name_the_variable() {
        for (var, value) in [
            ("SIMGPU_DEVICES", "h100,v100"),
            ("SIMGPU_MEMORY", "lots"),
            ("SIMGPU_MEMORY", "3=1GiB"),
            ("SIMGPU_SM_COUNT", "0"),
            ("SIMGPU_KERNEL_TIME", "quick"),
            ("SIMGPU_DRIVER_VERSION", "12.8"),
            ("SIMGPU_CONTEXT_MEMORY", "100GiB"),
            ("SIMGPU_STATE", ""),
            ("SIMGPU_MIG", "1"),
            ("SIMGPU_MIG", "zero"),
            ("SIMGPU_MIG", ""),
        ] {
            let e = cfg(&[(var, value)]).unwrap_err();
            assert_eq!(e.var, var, "{var}={value}");
            assert!(e.to_string().contains(var));
        }
    }
}
