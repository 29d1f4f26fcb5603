//! A vGPU's configuration as it travels on the wire and in the daemon's state file: [`VgpuSpec`], and the
//! [`Change`] `set` makes to it. The rules a configuration must keep are the daemon's
//! (`tessera_scheduler::config`); these are plain data.

use serde::{Deserialize, Serialize};

/// The window a vGPU gets when none is given: most queued-but-unfinished device time, in nanoseconds
/// (the region's default too: both are `tessera-policy`'s).
pub use tessera_policy::DEFAULT_WINDOW_NS;

/// Scheduling priority of a vGPU on its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Gets the share others leave only after `normal` vGPUs had theirs.
    Low,
    /// The default.
    #[default]
    Normal,
    /// While it has work, lower priorities on its device get no tokens.
    High,
}

impl Priority {
    /// The name the CLI and the JSON use.
    pub fn name(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
        }
    }
}

/// How a vGPU's device memory is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every allocation is the driver's own memory, refused when the device has none left (the default).
    #[default]
    Hard,
    /// Memory is virtualized by the shim: pooled, defragmented and swapped to host memory, so quotas of
    /// soft vGPUs may add up to more than the device has. Processes read the mode when they join.
    Soft,
}

impl Mode {
    /// The name the CLI and the JSON use.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Hard => "hard",
            Mode::Soft => "soft",
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_window() -> u64 {
    DEFAULT_WINDOW_NS
}

/// One vGPU as configured: everything the daemon persists about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VgpuSpec {
    /// Its name, as processes give it in `TESSERA_VGPU`.
    pub name: String,
    /// Device ordinal its quota and share apply to.
    pub device: u32,
    /// Memory quota on that device, in bytes.
    pub memory: u64,
    /// Share of the device's time, in percent.
    pub share: u32,
    /// Never exceeds its share, and its idle share is not given to others.
    #[serde(default)]
    pub cap: bool,
    /// Priority on its device.
    #[serde(default)]
    pub priority: Priority,
    /// Tensor cores allowed (off: TF32 disabled, cuBLAS math modes pedantic).
    #[serde(default = "default_true")]
    pub tensor_cores: bool,
    /// Most queued-but-unfinished device time, in nanoseconds.
    #[serde(default = "default_window")]
    pub window_ns: u64,
    /// Suspended: its launches wait at the next kernel boundary.
    #[serde(default)]
    pub suspended: bool,
    /// The user (uid) whose processes may join it (`None`: the daemon's own user).
    #[serde(default)]
    pub user: Option<u32>,
    /// Memory mode (state files written before modes existed hold none: hard).
    #[serde(default)]
    pub mode: Mode,
}

impl VgpuSpec {
    /// A spec with the defaults for everything but name, device, memory and share.
    pub fn new(name: &str, device: u32, memory: u64, share: u32) -> VgpuSpec {
        VgpuSpec {
            name: name.to_string(),
            device,
            memory,
            share,
            cap: false,
            priority: Priority::Normal,
            tensor_cores: true,
            window_ns: DEFAULT_WINDOW_NS,
            suspended: false,
            user: None,
            mode: Mode::Hard,
        }
    }
}

/// What `set` changes; `None` keeps the current value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// New share, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<u32>,
    /// New memory quota, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// New priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// Tensor cores on or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_cores: Option<bool>,
    /// New window, in nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_ns: Option<u64>,
    /// New memory mode (processes that join afterwards take it; running ones keep theirs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
}

impl Change {
    /// True when it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Change::default()
    }

    /// `spec` with the change applied.
    pub fn apply(&self, spec: &VgpuSpec) -> VgpuSpec {
        VgpuSpec {
            share: self.share.unwrap_or(spec.share),
            memory: self.memory.unwrap_or(spec.memory),
            priority: self.priority.unwrap_or(spec.priority),
            tensor_cores: self.tensor_cores.unwrap_or(spec.tensor_cores),
            window_ns: self.window_ns.unwrap_or(spec.window_ns),
            mode: self.mode.unwrap_or(spec.mode),
            ..spec.clone()
        }
    }
}
