//! The vGPU configuration the daemon owns: one [`VgpuSpec`] per vGPU, and the rules every change must keep
//! (valid names, existing devices, shares of 1-100 summing to at most 100 per device, hard quotas that fit
//! in their device's memory together). Changes are pure: each
//! returns the new configuration or an error naming the problem, and the caller commits it only once the
//! region and the state file took it.

use serde::{Deserialize, Serialize};
use tessera_client::ErrorCode;
use tessera_ffi::units::{MAX_QUOTA, VGPU_NAME_FORM, format_size, valid_vgpu_name};
use tessera_region::{MAX_DEVICES, MAX_VGPUS, flags, priority};

/// The machine's devices as the rules need them: each device's total memory in bytes, by ordinal (the
/// driver's `cuDeviceTotalMem`).
pub type Devices<'a> = &'a [u64];

/// Shortest window a vGPU may have.
pub const MIN_WINDOW_NS: u64 = 1_000;
/// Longest window a vGPU may have.
pub const MAX_WINDOW_NS: u64 = 1_000_000_000;
/// Smallest share a vGPU may have, in percent of its device (shares sum to at most 100 per device).
pub const MIN_SHARE: u32 = 1;
/// One CUDA context's footprint, the least memory quota a request may give a vGPU: every process of a
/// vGPU creates a context, which is charged to the quota (see the shim's `contexts`), so a smaller quota
/// lets no process start. Contexts cost from about a hundred MiB to several hundred on the GPUs we know
/// of (the shim measures each device's); this floor is below all of them. A saved configuration with a
/// smaller quota still loads (it was accepted before this rule).
pub const CONTEXT_FOOTPRINT: u64 = 64 << 20;

pub use tessera_client::spec::{Change, Mode, Priority, VgpuSpec};

/// Why a configuration, or a change to it, breaks a rule. Each maps to the protocol's [`ErrorCode`]
/// ([`ConfigError::code`]) so that a client can act on the kind of refusal without reading the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The name is not one a vGPU may have.
    #[error("{0:?} is not a vGPU name; {VGPU_NAME_FORM}")]
    BadName(String),
    /// No such device on this machine (the message names those there are).
    #[error("device {device} does not exist: {}", machine_has(*.devices))]
    NoDevice {
        /// The device asked for.
        device: u32,
        /// How many the machine has.
        devices: u32,
    },
    /// A share outside 1-100%.
    #[error("a share of {0}% is out of range; use {MIN_SHARE} to 100")]
    ShareOutOfRange(u32),
    /// A memory quota of 0 bytes.
    #[error("a memory quota of 0 bytes allows nothing")]
    NoMemory,
    /// A memory quota equal to the region's marker for no limit.
    #[error("a memory quota of {0} bytes is the marker for no limit")]
    UnlimitedMarker(u64),
    /// A hard quota larger than its device.
    #[error(
        "a hard quota of {} is more than device {device} has ({}); give at most that, or use --mode soft to \
         oversubscribe",
        bytes(*.memory),
        bytes(*.total)
    )]
    OverDevice {
        /// The quota asked for.
        memory: u64,
        /// Its device.
        device: u32,
        /// The device's memory.
        total: u64,
    },
    /// A window outside 1 µs - 1 s.
    #[error("a window of {0} ns is out of range; use 1us to 1s")]
    WindowOutOfRange(u64),
    /// The uid that stands for no user.
    #[error("uid 4294967295 stands for no user (-1); give an existing account")]
    NoUser,
    /// More vGPUs than the region holds.
    #[error("{0} vGPUs are more than the {MAX_VGPUS} a region holds")]
    TooMany(usize),
    /// One vGPU of a configuration breaks a rule of its own.
    #[error("vGPU {name:?}: {error}")]
    Vgpu {
        /// The vGPU.
        name: String,
        /// The rule it breaks.
        error: Box<ConfigError>,
    },
    /// Two vGPUs of one name in a configuration.
    #[error("vGPU {0:?} is configured twice")]
    Twice(String),
    /// The shares of a device's vGPUs would sum over 100%: the device has no share left for the request.
    #[error(
        "shares on device {device} would sum to {sum}% ({list}); they may sum to at most 100%: lower another vGPU's \
         share first"
    )]
    SharesOverDevice {
        /// The device.
        device: u32,
        /// What they would sum to.
        sum: u32,
        /// Each vGPU with its share, for the message.
        list: String,
    },
    /// The hard quotas of a device's vGPUs would sum over its memory: it has no memory left for the request.
    #[error(
        "hard quotas on device {device} would sum to {} ({list}), more than its {}; lower another hard vGPU's \
         quota first, or use --mode soft to oversubscribe",
        bytes(*.sum),
        bytes(*.total)
    )]
    QuotasOverDevice {
        /// The device.
        device: u32,
        /// What they would sum to.
        sum: u64,
        /// Each hard vGPU with its quota, for the message.
        list: String,
        /// The device's memory.
        total: u64,
    },
    /// A vGPU of that name exists.
    #[error("vGPU {0:?} already exists; change it with `tessera vgpu set`")]
    AlreadyExists(String),
    /// No vGPU of that name.
    #[error("no vGPU named {0:?} (`tessera vgpu list` shows them)")]
    NotFound(String),
    /// A change that changes nothing.
    #[error("nothing to change: give --share, --memory, --priority, --tensor-cores, --window or --mode")]
    NothingToChange,
    /// A quota too small for one CUDA context.
    #[error(
        "a memory quota of {} is below one CUDA context's footprint ({}): no process could start in the vGPU; give \
         at least {}",
        bytes(*.0),
        bytes(CONTEXT_FOOTPRINT),
        format_size(CONTEXT_FOOTPRINT)
    )]
    BelowContext(u64),
}

impl ConfigError {
    /// The protocol's code for this refusal: the device's shares or memory being taken is
    /// [`ErrorCode::ResourceExhausted`] (the request may succeed once another vGPU gives some back), a name
    /// taken or unknown is [`ErrorCode::AlreadyExists`] or [`ErrorCode::NotFound`], anything else a bad
    /// value ([`ErrorCode::Invalid`]).
    pub fn code(&self) -> ErrorCode {
        match self {
            ConfigError::SharesOverDevice { .. } | ConfigError::QuotasOverDevice { .. } => ErrorCode::ResourceExhausted,
            ConfigError::AlreadyExists(_) => ErrorCode::AlreadyExists,
            ConfigError::NotFound(_) => ErrorCode::NotFound,
            ConfigError::Vgpu { error, .. } => error.code(),
            _ => ErrorCode::Invalid,
        }
    }
}

impl From<ConfigError> for tessera_client::Error {
    fn from(e: ConfigError) -> tessera_client::Error {
        tessera_client::Error::new(e.code(), e.to_string())
    }
}

/// What a machine with `devices` devices has, for messages.
fn machine_has(devices: u32) -> String {
    match devices {
        0 => "this machine has no GPU".into(),
        1 => "this machine has 1 GPU, device 0".into(),
        n => format!("this machine has {n} GPUs, devices 0 to {}", n - 1),
    }
}

/// The region's [`tessera_region::priority`] value of `priority`.
pub fn priority_value(priority: Priority) -> u32 {
    match priority {
        Priority::Low => priority::LOW,
        Priority::Normal => priority::NORMAL,
        Priority::High => priority::HIGH,
    }
}

/// The region's [`flags`] for `spec` (always [`flags::MANAGED`]).
pub fn region_flags(spec: &VgpuSpec) -> u32 {
    let mut f = flags::MANAGED;
    if spec.cap {
        f |= flags::CAP;
    }
    if !spec.tensor_cores {
        f |= flags::TENSOR_CORES_OFF;
    }
    if spec.suspended {
        f |= flags::SUSPENDED;
    }
    if spec.mode == Mode::Soft {
        f |= flags::SOFT;
    }
    f
}

/// The rules that concern one vGPU alone.
trait Checked {
    fn check(&self, devices: Devices<'_>) -> Result<(), ConfigError>;
}

impl Checked for VgpuSpec {
    /// Checks everything that concerns this vGPU alone, on a machine with `devices`. Nothing here trusts
    /// the request (or the state file): every field is checked.
    fn check(&self, devices: Devices<'_>) -> Result<(), ConfigError> {
        if !valid_vgpu_name(&self.name) {
            return Err(ConfigError::BadName(self.name.clone()));
        }
        check_device(self.device, devices.len() as u32)?;
        if !(MIN_SHARE..=100).contains(&self.share) {
            return Err(ConfigError::ShareOutOfRange(self.share));
        }
        if self.memory == 0 {
            return Err(ConfigError::NoMemory);
        }
        if self.memory > MAX_QUOTA {
            return Err(ConfigError::UnlimitedMarker(self.memory));
        }
        let total = devices[self.device as usize];
        if self.mode == Mode::Hard && self.memory > total {
            return Err(ConfigError::OverDevice { memory: self.memory, device: self.device, total });
        }
        if !(MIN_WINDOW_NS..=MAX_WINDOW_NS).contains(&self.window_ns) {
            return Err(ConfigError::WindowOutOfRange(self.window_ns));
        }
        if self.user == Some(u32::MAX) {
            return Err(ConfigError::NoUser);
        }
        Ok(())
    }
}

/// Checks that device `device` exists on a machine with `devices` devices.
pub fn check_device(device: u32, devices: u32) -> Result<(), ConfigError> {
    let devices = devices.min(MAX_DEVICES as u32);
    if device < devices { Ok(()) } else { Err(ConfigError::NoDevice { device, devices }) }
}

/// Every vGPU the daemon manages, in creation order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The vGPUs.
    pub vgpus: Vec<VgpuSpec>,
}

impl Config {
    /// The vGPU named `name`, or an error saying there is none.
    pub fn get(&self, name: &str) -> Result<&VgpuSpec, ConfigError> {
        self.vgpus.iter().find(|v| v.name == name).ok_or_else(|| ConfigError::NotFound(name.to_string()))
    }

    /// Checks every rule on a machine with `devices` (a loaded state file must pass too).
    pub fn check(&self, devices: Devices<'_>) -> Result<(), ConfigError> {
        if self.vgpus.len() > MAX_VGPUS {
            return Err(ConfigError::TooMany(self.vgpus.len()));
        }
        for (i, v) in self.vgpus.iter().enumerate() {
            v.check(devices).map_err(|e| ConfigError::Vgpu { name: v.name.clone(), error: Box::new(e) })?;
            if self.vgpus[..i].iter().any(|o| o.name == v.name) {
                return Err(ConfigError::Twice(v.name.clone()));
            }
        }
        for device in 0..MAX_DEVICES as u32 {
            let on: Vec<&VgpuSpec> = self.vgpus.iter().filter(|v| v.device == device).collect();
            let sum: u32 = on.iter().map(|v| v.share).sum();
            if sum > 100 {
                let list: Vec<String> = on.iter().map(|v| format!("{} {}%", v.name, v.share)).collect();
                return Err(ConfigError::SharesOverDevice { device, sum, list: list.join(", ") });
            }
            let hard: Vec<&VgpuSpec> = on.into_iter().filter(|v| v.mode == Mode::Hard).collect();
            let sum = hard.iter().fold(0u64, |sum, v| sum.saturating_add(v.memory));
            let total = devices.get(device as usize).copied().unwrap_or(0);
            if sum > total {
                let list: Vec<String> = hard.iter().map(|v| format!("{} {}", v.name, format_size(v.memory))).collect();
                return Err(ConfigError::QuotasOverDevice { device, sum, list: list.join(", "), total });
            }
        }
        Ok(())
    }

    /// The configuration with `spec` added.
    pub fn create(&self, spec: VgpuSpec, devices: Devices<'_>) -> Result<Config, ConfigError> {
        if self.vgpus.iter().any(|v| v.name == spec.name) {
            return Err(ConfigError::AlreadyExists(spec.name));
        }
        spec.check(devices)?;
        check_footprint(spec.memory)?;
        let mut next = self.clone();
        next.vgpus.push(spec);
        next.check(devices)?;
        Ok(next)
    }

    /// The configuration with vGPU `name` changed; an empty change is an error.
    pub fn set(&self, name: &str, change: &Change, devices: Devices<'_>) -> Result<Config, ConfigError> {
        if change.is_empty() {
            return Err(ConfigError::NothingToChange);
        }
        if let Some(memory) = change.memory {
            check_footprint(memory)?;
        }
        self.replace(name, devices, |spec| change.apply(spec))
    }

    /// The configuration with vGPU `name` suspended or resumed.
    pub fn suspend(&self, name: &str, suspended: bool, devices: Devices<'_>) -> Result<Config, ConfigError> {
        self.replace(name, devices, |spec| VgpuSpec { suspended, ..spec.clone() })
    }

    /// The configuration without vGPU `name`.
    pub fn remove(&self, name: &str) -> Result<Config, ConfigError> {
        self.get(name)?;
        Ok(Config { vgpus: self.vgpus.iter().filter(|v| v.name != name).cloned().collect() })
    }

    fn replace(
        &self,
        name: &str,
        devices: Devices<'_>,
        f: impl FnOnce(&VgpuSpec) -> VgpuSpec,
    ) -> Result<Config, ConfigError> {
        let new = f(self.get(name)?);
        new.check(devices)?;
        let next =
            Config { vgpus: self.vgpus.iter().map(|v| if v.name == name { new.clone() } else { v.clone() }).collect() };
        next.check(devices)?;
        Ok(next)
    }
}

/// Checks that a quota of `memory` bytes, asked for by a request, holds one context.
fn check_footprint(memory: u64) -> Result<(), ConfigError> {
    if memory != 0 && memory < CONTEXT_FOOTPRINT {
        return Err(ConfigError::BelowContext(memory));
    }
    Ok(())
}

/// `bytes` for messages: `1.0 GiB (1073741824 bytes)`.
pub fn bytes(bytes: u64) -> String {
    format!("{} ({bytes} bytes)", format_size(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    /// Two 80 GiB devices, and one.
    const TWO: Devices<'static> = &[80 * GIB, 80 * GIB];
    const ONE: Devices<'static> = &[80 * GIB];

    fn spec(name: &str, device: u32, share: u32) -> VgpuSpec {
        VgpuSpec::new(name, device, 1 << 30, share)
    }

    #[test]
    fn shares_of_one_device_sum_to_at_most_100() {
        let c = Config::default().create(spec("a", 0, 30), TWO).unwrap();
        let c = c.create(spec("b", 0, 70), TWO).unwrap();
        let e = c.create(spec("c", 0, 1), TWO).unwrap_err();
        assert_eq!(e.code(), ErrorCode::ResourceExhausted, "the device has no share left: {e}");
        let e = e.to_string();
        assert!(e.contains("device 0 would sum to 101%") && e.contains("a 30%, b 70%, c 1%"), "{e}");
        let c = c.create(spec("c", 1, 100), TWO).unwrap();
        let e = c.set("a", &Change { share: Some(31), ..Change::default() }, TWO).unwrap_err().to_string();
        assert!(e.contains("101%"), "{e}");
        let c2 = c.set("b", &Change { share: Some(40), ..Change::default() }, TWO).unwrap();
        let c2 = c2.set("a", &Change { share: Some(60), ..Change::default() }, TWO).unwrap();
        assert_eq!(c2.get("a").unwrap().share, 60);
    }

    #[test]
    fn unknown_names_devices_and_bad_values_are_errors() {
        let c = Config::default().create(spec("a", 0, 30), TWO).unwrap();
        assert_eq!(c.create(spec("a", 1, 1), TWO).unwrap_err().code(), ErrorCode::AlreadyExists);
        assert_eq!(c.get("nope").unwrap_err().code(), ErrorCode::NotFound);
        assert_eq!(c.create(spec("big", 1, 101), TWO).unwrap_err().code(), ErrorCode::Invalid);
        assert!(c.create(spec("a", 1, 1), TWO).unwrap_err().to_string().contains("already exists"));
        assert!(c.get("nope").unwrap_err().to_string().contains("no vGPU named \"nope\""));
        assert!(c.set("nope", &Change { share: Some(1), ..Change::default() }, TWO).is_err());
        assert!(c.remove("nope").is_err());
        let e = c.create(spec("d", 2, 1), TWO).unwrap_err().to_string();
        assert_eq!(e, "device 2 does not exist: this machine has 2 GPUs, devices 0 to 1");
        assert!(c.create(spec("d", 1, 1), ONE).unwrap_err().to_string().contains("has 1 GPU, device 0"));
        assert!(c.create(spec("x/y", 0, 1), TWO).unwrap_err().to_string().contains("not a vGPU name"));
        assert!(c.create(spec("big", 1, 101), TWO).unwrap_err().to_string().contains("101%"));
        assert!(c.create(VgpuSpec { memory: 0, ..spec("z", 1, 1) }, TWO).is_err());
        assert!(
            c.create(VgpuSpec { window_ns: 10, ..spec("z", 1, 1) }, TWO).unwrap_err().to_string().contains("window")
        );
        assert!(c.set("a", &Change::default(), TWO).unwrap_err().to_string().contains("nothing to change"));
    }

    #[test]
    fn a_quota_below_one_context_is_refused_naming_the_footprint() {
        let c = Config::default().create(spec("a", 0, 30), TWO).unwrap();
        let e = c.create(VgpuSpec { memory: 1024, ..spec("tiny", 0, 1) }, TWO).unwrap_err().to_string();
        assert!(e.contains("1.0 KiB") && e.contains("one CUDA context's footprint (64.0 MiB"), "{e}");
        let e = c.set("a", &Change { memory: Some(1024), ..Change::default() }, TWO).unwrap_err().to_string();
        assert!(e.contains("one CUDA context's footprint (64.0 MiB"), "{e}");
        let c = c.set("a", &Change { memory: Some(CONTEXT_FOOTPRINT), ..Change::default() }, TWO).unwrap();
        assert_eq!(c.get("a").unwrap().memory, CONTEXT_FOOTPRINT, "exactly one context is allowed");
        // A saved configuration with a smaller quota still loads.
        let old = Config { vgpus: vec![VgpuSpec { memory: 4096, ..spec("old", 0, 1) }] };
        assert_eq!(old.check(TWO), Ok(()));
    }

    #[test]
    fn changes_apply_and_round_trip_through_json() {
        let c = Config::default().create(VgpuSpec { cap: true, ..spec("a", 0, 30) }, ONE).unwrap();
        let change = Change {
            memory: Some(2 << 30),
            priority: Some(Priority::High),
            tensor_cores: Some(false),
            ..Change::default()
        };
        let c = c.set("a", &change, ONE).unwrap().suspend("a", true, ONE).unwrap();
        let a = c.get("a").unwrap();
        assert_eq!(
            (a.memory, a.priority, a.tensor_cores, a.suspended, a.share),
            (2 << 30, Priority::High, false, true, 30)
        );
        let f = region_flags(a);
        assert_eq!(f, flags::MANAGED | flags::CAP | flags::TENSOR_CORES_OFF | flags::SUSPENDED);
        let soft = c.set("a", &Change { mode: Some(Mode::Soft), ..Change::default() }, ONE).unwrap();
        assert_eq!(soft.get("a").unwrap().mode, Mode::Soft);
        assert_eq!(region_flags(soft.get("a").unwrap()) & flags::SOFT, flags::SOFT);
        let text = serde_json::to_string(&soft).unwrap();
        assert!(text.contains(r#""mode":"soft""#), "{text}");
        assert_eq!(serde_json::from_str::<Config>(&text).unwrap(), soft);
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<Config>(&text).unwrap(), c);
        // Fields added later default when absent.
        let old: VgpuSpec = serde_json::from_str(r#"{"name":"o","device":0,"memory":1,"share":5}"#).unwrap();
        assert_eq!(old, VgpuSpec::new("o", 0, 1, 5));
        assert_eq!(old.mode, Mode::Hard, "a vGPU saved before modes existed is hard");
        assert!(
            serde_json::from_str::<VgpuSpec>(r#"{"name":"o","device":0,"memory":1,"share":5,"mode":"firm"}"#)
                .unwrap_err()
                .to_string()
                .contains("firm")
        );
        assert!(c.remove("a").unwrap().vgpus.is_empty());
    }

    #[test]
    fn hard_quotas_fit_in_their_device_and_soft_ones_may_oversubscribe() {
        let e =
            Config::default().create(VgpuSpec { memory: 1 << 40, ..spec("huge", 0, 10) }, TWO).unwrap_err().to_string();
        assert!(e.contains("more than device 0 has") && e.contains("80.0 GiB") && e.contains("--mode soft"), "{e}");
        let c = Config::default().create(VgpuSpec { memory: 80 * GIB, ..spec("all", 0, 10) }, TWO).unwrap();
        let e = c.create(VgpuSpec { memory: GIB, ..spec("more", 0, 10) }, TWO).unwrap_err();
        assert_eq!(e.code(), ErrorCode::ResourceExhausted, "the device has no memory left: {e}");
        let e = e.to_string();
        assert!(e.contains("hard quotas on device 0 would sum to 81.0 GiB") && e.contains("all 80.0 GiB"), "{e}");
        let c = c.create(VgpuSpec { memory: GIB, ..spec("other", 1, 10) }, TWO).unwrap();
        let e = c.set("other", &Change { memory: Some(81 * GIB), ..Change::default() }, TWO).unwrap_err().to_string();
        assert!(e.contains("more than device 1 has"), "{e}");
        let soft = |name: &str, memory| VgpuSpec { memory, mode: Mode::Soft, ..spec(name, 0, 10) };
        let c = c.create(soft("s1", 60 * GIB), TWO).unwrap().create(soft("s2", 1 << 40), TWO).unwrap();
        let e = c.set("s1", &Change { mode: Some(Mode::Hard), ..Change::default() }, TWO).unwrap_err().to_string();
        assert!(e.contains("would sum to 140.0 GiB"), "{e}");
        // A state file saved on a larger device is refused on this one, by the same rule.
        assert!(c.check(&[40 * GIB, 80 * GIB]).unwrap_err().to_string().contains("more than device 0 has"));
    }

    #[test]
    fn out_of_range_values_are_refused_whatever_sent_them() {
        let c = Config::default();
        for bad in [
            VgpuSpec { share: 0, ..spec("z", 0, 1) },
            VgpuSpec { memory: u64::MAX, mode: Mode::Soft, ..spec("z", 0, 1) },
            VgpuSpec { user: Some(u32::MAX), ..spec("z", 0, 1) },
        ] {
            assert!(c.create(bad.clone(), TWO).is_err(), "{bad:?}");
        }
        assert!(
            c.create(VgpuSpec { share: 0, ..spec("z", 0, 1) }, TWO).unwrap_err().to_string().contains("use 1 to 100")
        );
        let c = c.create(spec("a", 0, 10), TWO).unwrap();
        assert!(c.set("a", &Change { share: Some(0), ..Change::default() }, TWO).is_err());
    }
}
