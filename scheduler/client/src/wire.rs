//! What a client and the daemon say over the socket (see `docs/protocol.md`): one JSON [`Request`] per
//! line, each carrying the protocol [`VERSION`], answered by one JSON [`Reply`] line carrying it too.

use crate::devices::{BindReport, Gpu, Mdev, MdevType, ReconcileReport};
use crate::error::ErrorCode;
use crate::spec::{Change, VgpuSpec};
use crate::stats::Stats;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The protocol version this crate speaks. A request of another version (or of none, from a client older
/// than versions) is refused with [`ErrorCode::UnsupportedVersion`]; only [`Request::Version`] is answered
/// whatever version it carries, so that any client can learn which one the daemon speaks.
pub const VERSION: u32 = tessera_ffi::daemon_protocol::VERSION;

/// Longest request line the daemon reads.
pub const MAX_LINE: usize = 64 * 1024;

/// Longest a `defrag` or `swap-out` request waits for the vGPU's processes.
pub const DEFRAG_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest a `snapshot` waits for each process to stop (its in-flight work to finish) before it gives up
/// and undoes what it did.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest a `snapshot` or `resume` request may take beyond that: copying every byte of a vGPU's memory to
/// host memory or back (a 80 GiB device at a few GB/s).
pub const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(120);

/// A request to the daemon. On the wire its kind is the `op` field, beside `version` and its own fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// Which protocol version and release the daemon is (answered whatever version the request carries).
    Version,
    /// Create a vGPU.
    Create {
        /// Its configuration.
        spec: VgpuSpec,
    },
    /// Every vGPU.
    List,
    /// One vGPU.
    Show {
        /// Its name.
        name: String,
    },
    /// Change a vGPU, live.
    Set {
        /// Its name.
        name: String,
        /// What changes.
        change: Change,
    },
    /// Stop a vGPU's launches at the next kernel boundary.
    Suspend {
        /// Its name.
        name: String,
    },
    /// Bring a snapshotted vGPU's memory back (or only that of processes `pids`) and let its launches
    /// continue; also lifts a plain suspension.
    Resume {
        /// Its name.
        name: String,
        /// Only these processes of the vGPU (snapshotted by a `snapshot` naming them); empty: the whole
        /// vGPU.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pids: Vec<u32>,
    },
    /// Remove a vGPU nobody is attached to.
    Rm {
        /// Its name.
        name: String,
    },
    /// Have every soft-mode process of a soft vGPU defragment its memory, and wait (at most
    /// [`DEFRAG_TIMEOUT`]) until they all have.
    Defrag {
        /// Its name.
        name: String,
    },
    /// Have every soft-mode process of a soft vGPU swap its device memory out to host memory (it comes
    /// back before their next launch or copy), and wait (at most [`DEFRAG_TIMEOUT`]) until they all have.
    SwapOut {
        /// Its name.
        name: String,
    },
    /// Suspend a vGPU (its launches stop at the next kernel boundary) and checkpoint every process of it
    /// through the driver (their device memory goes to host memory and is released to other tenants);
    /// with `pids`, checkpoint only those processes, without suspending the vGPU.
    Snapshot {
        /// Its name.
        name: String,
        /// Only these processes of the vGPU; empty: the whole vGPU.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pids: Vec<u32>,
    },
    /// The monitoring figures of every vGPU and device (or of one vGPU and its device): cheap enough to
    /// poll at 10 Hz.
    Stats {
        /// Only this vGPU (and its device).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Every GPU of the host for virtual machines: PCI function, IOMMU group, SR-IOV, mdev types and
    /// mdevs, and the mode it is in.
    Devices,
    /// Bind a GPU's whole IOMMU group to `vfio-pci` (refused while Tessera uses a GPU of the group).
    #[serde(rename = "bind-vfio")]
    BindVfio {
        /// The GPU's PCI address (`0000:10:00.0`).
        address: String,
    },
    /// Give a GPU's whole IOMMU group back from `vfio-pci` to the drivers the kernel picks.
    #[serde(rename = "unbind-vfio")]
    UnbindVfio {
        /// The GPU's PCI address.
        address: String,
    },
    /// Every mdev type the host's devices offer.
    #[serde(rename = "mdev-types")]
    MdevTypes,
    /// Every mdev.
    #[serde(rename = "mdev-list")]
    MdevList,
    /// Create an mdev (recorded as Tessera's).
    #[serde(rename = "mdev-create")]
    MdevCreate {
        /// Its parent device's PCI address.
        parent: String,
        /// Its type's directory name (`nvidia-63`).
        #[serde(rename = "type")]
        type_id: String,
        /// Its UUID; a random (version 4) one when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uuid: Option<String>,
    },
    /// Remove an mdev nothing uses.
    #[serde(rename = "mdev-rm")]
    MdevRm {
        /// Its UUID.
        uuid: String,
    },
    /// Drop records of vanished mdevs, remove unused mdevs Tessera created, roll back an interrupted bind.
    Reconcile,
    /// Sent by the shim of a process joining a managed vGPU: the process slot `slot` it claimed in vGPU
    /// `name` is its own. The daemon believes the connection's peer credentials, never the request: the
    /// slot must name the calling process, of the vGPU's user (see `docs/protocol.md`).
    Join {
        /// The vGPU's name.
        name: String,
        /// The index of the process slot the caller claimed.
        slot: u32,
    },
}

impl Request {
    /// How many kinds of request there are (see [`Request::ordinal`]).
    pub const KINDS: usize = 21;

    /// The request's kind as a number below [`Request::KINDS`]: a new kind does not compile until it is
    /// numbered here, and a test then checks [`Request::examples`] and `docs/protocol.md` cover it.
    pub fn ordinal(&self) -> usize {
        match self {
            Request::Version => 0,
            Request::Create { .. } => 1,
            Request::List => 2,
            Request::Show { .. } => 3,
            Request::Set { .. } => 4,
            Request::Suspend { .. } => 5,
            Request::Resume { .. } => 6,
            Request::Rm { .. } => 7,
            Request::Defrag { .. } => 8,
            Request::SwapOut { .. } => 9,
            Request::Stats { .. } => 10,
            Request::Snapshot { .. } => 11,
            Request::Devices => 12,
            Request::BindVfio { .. } => 13,
            Request::UnbindVfio { .. } => 14,
            Request::MdevTypes => 15,
            Request::MdevList => 16,
            Request::MdevCreate { .. } => 17,
            Request::MdevRm { .. } => 18,
            Request::Reconcile => 19,
            Request::Join { .. } => 20,
        }
    }

    /// One request of each kind, in [`Request::ordinal`] order (for the documentation's checks).
    pub fn examples() -> Vec<Request> {
        let name = || "a".to_string();
        vec![
            Request::Version,
            Request::Create { spec: VgpuSpec::new("a", 0, 1 << 30, 30) },
            Request::List,
            Request::Show { name: name() },
            Request::Set { name: name(), change: Change { share: Some(40), ..Change::default() } },
            Request::Suspend { name: name() },
            Request::Resume { name: name(), pids: Vec::new() },
            Request::Rm { name: name() },
            Request::Defrag { name: name() },
            Request::SwapOut { name: name() },
            Request::Stats { name: None },
            Request::Snapshot { name: name(), pids: Vec::new() },
            Request::Devices,
            Request::BindVfio { address: "0000:10:00.0".into() },
            Request::UnbindVfio { address: "0000:10:00.0".into() },
            Request::MdevTypes,
            Request::MdevList,
            Request::MdevCreate { parent: "0000:41:00.4".into(), type_id: "nvidia-63".into(), uuid: None },
            Request::MdevRm { uuid: "8a3e4b0c-5f2d-4c1e-9b7a-2d6f0e1c3a45".into() },
            Request::Reconcile,
            Request::Join { name: name(), slot: 3 },
        ]
    }

    /// The `op` of this request on the wire (`swapout`).
    pub fn op(&self) -> String {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(map)) => map.get("op").and_then(|v| v.as_str()).unwrap_or("").to_string(),
            _ => String::new(),
        }
    }

    /// How long the daemon may take to answer this request: long enough for the processes a request
    /// waits for, plus the time any request may take.
    pub fn answer_within(&self, base: Duration) -> Duration {
        match self {
            Request::Defrag { .. } | Request::SwapOut { .. } => base + DEFRAG_TIMEOUT,
            Request::Snapshot { .. } | Request::Resume { .. } => base + LOCK_TIMEOUT + SNAPSHOT_TIMEOUT,
            _ => base,
        }
    }

    /// The request as one line (without the newline): `{"version":2,"op":...}`.
    pub fn to_line(&self) -> Result<String, serde_json::Error> {
        #[derive(Serialize)]
        struct Line<'a> {
            version: u32,
            #[serde(flatten)]
            request: &'a Request,
        }
        serde_json::to_string(&Line { version: VERSION, request: self })
    }
}

/// One vGPU's configuration and what its slot shows now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VgpuStatus {
    /// Its configuration.
    #[serde(flatten)]
    pub spec: VgpuSpec,
    /// Bytes in use on its device.
    pub used: u64,
    /// Peak of `used`.
    pub peak: u64,
    /// Pids of the processes attached.
    pub processes: Vec<u32>,
    /// Tokens in its bucket (ns of device time; negative: debt).
    pub tokens_ns: i64,
    /// Device time queued and not finished yet (estimated).
    #[serde(default)]
    pub inflight_ns: i64,
    /// Kernel launches so far.
    pub launches: u64,
    /// Measured device time its work has taken.
    pub device_ns: u64,
    /// Time its launches spent waiting for tokens.
    pub wait_ns: u64,
    /// Attached processes that took soft memory mode when they joined (the others, started before the
    /// vGPU was set to soft, stay in hard mode).
    #[serde(default)]
    pub soft_processes: u32,
    /// Soft mode: device memory holding its processes' live pages.
    #[serde(default)]
    pub resident: u64,
    /// Soft mode: device memory its processes hold but no live page uses.
    #[serde(default)]
    pub pooled: u64,
    /// Soft mode: the part of `pooled` only defragmentation returns.
    #[serde(default)]
    pub fragmented: u64,
    /// Soft mode: `fragmented / (resident + pooled)` in percent (0 when nothing is held).
    #[serde(default)]
    pub fragmentation_pct: u32,
    /// Soft mode: its live pages in host memory.
    #[serde(default)]
    pub swapped: u64,
    /// Soft mode: time its processes spent copying pages out.
    #[serde(default)]
    pub swap_out_ns: u64,
    /// Soft mode: time its processes spent copying pages in.
    #[serde(default)]
    pub swap_in_ns: u64,
    /// Soft mode: swap-out time of other vGPUs charged to it, for memory it asked for.
    #[serde(default)]
    pub swap_charged_ns: u64,
    /// Soft mode: device memory its processes wait for now.
    #[serde(default)]
    pub wanted: u64,
    /// Why the daemon's audit suspended it (`took 50% of device 0 over 10 s, entitled to 20%`), while it is
    /// suspended for that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<String>,
    /// Some of its processes (all, after a whole-vGPU `snapshot`) are checkpointed: their device memory
    /// is in host memory until `resume`.
    #[serde(default)]
    pub snapshotted: bool,
    /// The checkpointed processes.
    #[serde(default)]
    pub snapshot_pids: Vec<u32>,
    /// Bytes of device memory the checkpointed processes had, held in host memory (still counted in
    /// `used`, their quota, which they take back at resume).
    #[serde(default)]
    pub snapshot_bytes: u64,
}

impl VgpuStatus {
    /// The status of a vGPU configured as `spec` with nothing to show yet.
    pub fn of(spec: VgpuSpec) -> VgpuStatus {
        VgpuStatus {
            spec,
            used: 0,
            peak: 0,
            processes: Vec::new(),
            tokens_ns: 0,
            inflight_ns: 0,
            launches: 0,
            device_ns: 0,
            wait_ns: 0,
            soft_processes: 0,
            resident: 0,
            pooled: 0,
            fragmented: 0,
            fragmentation_pct: 0,
            swapped: 0,
            swap_out_ns: 0,
            swap_in_ns: 0,
            swap_charged_ns: 0,
            wanted: 0,
            audit: None,
            snapshotted: false,
            snapshot_pids: Vec::new(),
            snapshot_bytes: 0,
        }
    }
}

impl Default for VgpuStatus {
    fn default() -> VgpuStatus {
        VgpuStatus::of(VgpuSpec::new("", 0, 0, 0))
    }
}

/// What `defrag` or `swap-out` did: the vGPU's device memory before and after (`vgpus` holds its status
/// after).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagerReport {
    /// The soft-mode processes that carried the request out (none: there was nothing to do).
    pub processes: Vec<u32>,
    /// Attached processes in hard mode (started before the vGPU was set to soft), not asked.
    pub hard_processes: Vec<u32>,
    /// Device memory the processes held before: resident + pooled.
    pub held_before: u64,
    /// Device memory they hold after.
    pub held_after: u64,
    /// Fragmentation before, in percent.
    pub fragmentation_pct_before: u32,
    /// Fragmentation after, in percent.
    pub fragmentation_pct_after: u32,
}

/// The daemon's answer to one request. A failure carries `code` and `error` and nothing else changed; a
/// success carries what its request returns (`vgpus`, `pager`, `stats` or `release`). `error` stays a
/// plain string so that a client older than versions can still show why its request was refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// The protocol version of the daemon (`None`: a daemon older than versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// The request succeeded.
    pub ok: bool,
    /// What kind of failure it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    /// Why it failed (nothing was changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The vGPUs the request concerns (every vGPU for `list`).
    #[serde(default)]
    pub vgpus: Vec<VgpuStatus>,
    /// What a `defrag` or `swap-out` request did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pager: Option<PagerReport>,
    /// The figures a `stats` request asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
    /// The daemon's release (`0.1.0`), answering `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// The GPUs a `devices` request asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<Gpu>>,
    /// The mdev types a `mdev-types` request asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mdev_types: Option<Vec<MdevType>>,
    /// The mdevs of `mdev-list`, or the one `mdev-create` made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mdevs: Option<Vec<Mdev>>,
    /// What `bind-vfio` or `unbind-vfio` did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind: Option<BindReport>,
    /// What `reconcile` did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile: Option<ReconcileReport>,
    /// The daemon's pid.
    pub pid: u32,
}

impl Reply {
    /// A success carrying `vgpus`, from this process.
    pub fn ok(vgpus: Vec<VgpuStatus>) -> Reply {
        Reply {
            version: Some(VERSION),
            ok: true,
            code: None,
            error: None,
            vgpus,
            pager: None,
            stats: None,
            release: None,
            gpus: None,
            mdev_types: None,
            mdevs: None,
            bind: None,
            reconcile: None,
            pid: std::process::id(),
        }
    }

    /// A failure of `error`, from this process.
    pub fn failure(error: &crate::Error) -> Reply {
        Reply { ok: false, code: Some(error.code), error: Some(error.message.clone()), ..Reply::ok(Vec::new()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_one_json_line_with_the_version() {
        let r = Request::Set { name: "a".into(), change: Change { share: Some(40), ..Change::default() } };
        let line = r.to_line().unwrap();
        assert_eq!(line, r#"{"version":2,"op":"set","name":"a","change":{"share":40}}"#);
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), r, "the version is read beside the request");
        assert_eq!(serde_json::from_str::<Request>(r#"{"version":2,"op":"list"}"#).unwrap(), Request::List);
        assert!(serde_json::from_str::<Request>(r#"{"op":"explode"}"#).is_err());
        assert_eq!(Request::SwapOut { name: "a".into() }.op(), "swapout");
        assert_eq!(Request::Stats { name: None }.to_line().unwrap(), r#"{"version":2,"op":"stats"}"#);
        assert_eq!(Request::Defrag { name: "a".into() }.answer_within(Duration::ZERO), DEFRAG_TIMEOUT);
        assert_eq!(Request::List.answer_within(Duration::from_secs(1)), Duration::from_secs(1));
    }

    #[test]
    fn every_kind_has_an_example_and_its_own_op() {
        let examples = Request::examples();
        let ordinals: Vec<usize> = examples.iter().map(Request::ordinal).collect();
        assert_eq!(ordinals, (0..Request::KINDS).collect::<Vec<_>>());
        let mut ops: Vec<String> = examples.iter().map(Request::op).collect();
        ops.sort();
        ops.dedup();
        assert_eq!(ops.len(), Request::KINDS, "{ops:?}");
    }

    #[test]
    fn replies_flatten_the_spec_and_an_older_daemons_still_read() {
        let status = VgpuStatus::of(VgpuSpec::new("a", 0, 1, 30));
        let text = serde_json::to_string(&Reply::ok(vec![status.clone()])).unwrap();
        assert!(text.contains(r#""name":"a""#) && text.contains(r#""share":30"#), "flattened: {text}");
        assert!(text.starts_with(r#"{"version":2,"ok":true,"#), "{text}");
        assert_eq!(serde_json::from_str::<Reply>(&text).unwrap().vgpus, [status]);
        assert!(!text.contains("pager") && !text.contains("stats"), "only their requests report them: {text}");
        let old = r#"{"ok":false,"error":"no vGPU named \"x\"","vgpus":[],"pid":7}"#;
        let reply: Reply = serde_json::from_str(old).unwrap();
        assert_eq!((reply.version, reply.code, reply.pid), (None, None, 7));
        let old = r#"{"name":"a","device":0,"memory":1,"share":5,"used":0,"peak":0,"processes":[],
            "tokens_ns":0,"launches":0,"device_ns":0,"wait_ns":0}"#;
        let st: VgpuStatus = serde_json::from_str(old).unwrap();
        assert_eq!((st.spec.mode, st.resident, st.fragmentation_pct), (crate::Mode::Hard, 0, 0));
    }
}
