//! What the `tessera` command and the daemon say over the socket: one JSON [`Request`] per line, answered
//! by one JSON [`Response`] line.

use crate::config::{Change, VgpuSpec};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Longest request line the daemon reads.
pub const MAX_LINE: usize = 64 * 1024;

/// A request to the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
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
    /// Let a suspended vGPU's launches continue.
    Resume {
        /// Its name.
        name: String,
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
}

/// Longest a `defrag` or `swap-out` request waits for the vGPU's processes.
pub const DEFRAG_TIMEOUT: Duration = Duration::from_secs(30);

impl Request {
    /// How long the daemon may take to answer this request: long enough for the processes a request
    /// waits for, plus the time any request may take.
    pub fn answer_within(&self, base: Duration) -> Duration {
        match self {
            Request::Defrag { .. } | Request::SwapOut { .. } => base + DEFRAG_TIMEOUT,
            _ => base,
        }
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
}

impl Default for VgpuStatus {
    fn default() -> VgpuStatus {
        VgpuStatus {
            spec: VgpuSpec::new("", 0, 0, 0),
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
        }
    }
}

/// The daemon's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The request succeeded.
    pub ok: bool,
    /// Why it failed (nothing was changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The vGPUs the request concerns (every vGPU for `list`).
    #[serde(default)]
    pub vgpus: Vec<VgpuStatus>,
    /// What a `defrag` or `swap-out` request did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pager: Option<PagerReport>,
    /// The daemon's pid.
    pub pid: u32,
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

impl Response {
    /// A success carrying `vgpus`.
    pub fn ok(vgpus: Vec<VgpuStatus>) -> Response {
        Response { ok: true, error: None, vgpus, pager: None, pid: std::process::id() }
    }

    /// A failure.
    pub fn error(message: String) -> Response {
        Response { ok: false, error: Some(message), vgpus: Vec::new(), pager: None, pid: std::process::id() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_one_json_line() {
        let r = Request::Set { name: "a".into(), change: Change { share: Some(40), ..Change::default() } };
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(line, r#"{"op":"set","name":"a","change":{"share":40}}"#);
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), r);
        assert_eq!(serde_json::from_str::<Request>(r#"{"op":"list"}"#).unwrap(), Request::List);
        assert!(serde_json::from_str::<Request>(r#"{"op":"explode"}"#).is_err());
        let status = VgpuStatus { spec: VgpuSpec::new("a", 0, 1, 30), ..VgpuStatus::default() };
        let text = serde_json::to_string(&Response::ok(vec![status.clone()])).unwrap();
        assert!(text.contains(r#""name":"a""#) && text.contains(r#""share":30"#), "flattened: {text}");
        assert_eq!(serde_json::from_str::<Response>(&text).unwrap().vgpus, [status]);
        assert!(!text.contains("pager"), "only defrag and swap-out answers report one: {text}");
        let line = serde_json::to_string(&Request::Defrag { name: "a".into() }).unwrap();
        assert_eq!(line, r#"{"op":"defrag","name":"a"}"#);
        assert_eq!(Request::Defrag { name: "a".into() }.answer_within(Duration::ZERO), DEFRAG_TIMEOUT);
        assert_eq!(Request::List.answer_within(Duration::from_secs(1)), Duration::from_secs(1));
    }

    #[test]
    fn an_older_daemons_status_still_reads() {
        let old = r#"{"name":"a","device":0,"memory":1,"share":5,"used":0,"peak":0,"processes":[],
            "tokens_ns":0,"launches":0,"device_ns":0,"wait_ns":0}"#;
        let st: VgpuStatus = serde_json::from_str(old).unwrap();
        assert_eq!((st.spec.mode, st.resident, st.fragmentation_pct), (crate::config::Mode::Hard, 0, 0));
    }
}
