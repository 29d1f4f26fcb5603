//! What the `tessera` command and the daemon say over the socket: one JSON [`Request`] per line, answered
//! by one JSON [`Response`] line.

use crate::config::{Change, VgpuSpec};
use serde::{Deserialize, Serialize};

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
    /// The daemon's pid.
    pub pid: u32,
}

impl Response {
    /// A success carrying `vgpus`.
    pub fn ok(vgpus: Vec<VgpuStatus>) -> Response {
        Response { ok: true, error: None, vgpus, pid: std::process::id() }
    }

    /// A failure.
    pub fn error(message: String) -> Response {
        Response { ok: false, error: Some(message), vgpus: Vec::new(), pid: std::process::id() }
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
    }
}
