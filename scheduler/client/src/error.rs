//! Errors as values: every failure, the daemon's or the client's own, is an [`Error`] carrying an
//! [`ErrorCode`] a program can match on and a message a person can act on.

use serde::{Deserialize, Serialize};

/// What kind of failure an [`Error`] is. The daemon sends the code in its reply (`"code"`); the last three
/// ([`ErrorCode::Unavailable`] when no daemon answers, [`ErrorCode::Timeout`], [`ErrorCode::BadReply`]) are
/// also what the client reports about the connection itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request line was not a request: not JSON, an unknown `op`, a missing or ill-typed field, or too long.
    BadRequest,
    /// The request carried another protocol version (or none): nothing was done.
    UnsupportedVersion,
    /// The connection's user may not manage this daemon's vGPUs (or a socket of another user was refused).
    PermissionDenied,
    /// No vGPU of that name.
    NotFound,
    /// A vGPU of that name exists already.
    AlreadyExists,
    /// The request breaks a rule (a bad name, a share out of range, a quota over its device).
    Invalid,
    /// The vGPU is in use: processes are attached, or use more memory than the new quota.
    InUse,
    /// The daemon cannot serve it now: it is out of resources, or no daemon listens on the socket.
    Unavailable,
    /// The processes a request waits for did not finish in time, or the daemon did not answer in time.
    Timeout,
    /// The device has no share or memory left for the request (a create or change whose shares would sum
    /// over 100% or whose hard quotas would exceed the device; a `resume` whose memory others took); nothing
    /// was changed, and the request may be tried again once another vGPU gives some back.
    ResourceExhausted,
    /// The daemon failed on its side (its state file or region could not be written); nothing was changed.
    Internal,
    /// The daemon answered something this client cannot read (never sent by a daemon).
    BadReply,
    /// A code this client does not know, sent by a newer daemon.
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// Every code, in the order `docs/protocol.md` lists them.
    pub const ALL: [ErrorCode; 13] = [
        ErrorCode::BadRequest,
        ErrorCode::UnsupportedVersion,
        ErrorCode::PermissionDenied,
        ErrorCode::NotFound,
        ErrorCode::AlreadyExists,
        ErrorCode::Invalid,
        ErrorCode::InUse,
        ErrorCode::Unavailable,
        ErrorCode::Timeout,
        ErrorCode::ResourceExhausted,
        ErrorCode::Internal,
        ErrorCode::BadReply,
        ErrorCode::Unknown,
    ];

    /// The code as it appears on the wire (`not_found`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::UnsupportedVersion => "unsupported_version",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::NotFound => "not_found",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::Invalid => "invalid",
            ErrorCode::InUse => "in_use",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::ResourceExhausted => "resource_exhausted",
            ErrorCode::Internal => "internal",
            ErrorCode::BadReply => "bad_reply",
            ErrorCode::Unknown => "unknown",
        }
    }
}

/// A failure: its [`ErrorCode`] and a message saying what happened and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// What kind of failure.
    pub code: ErrorCode,
    /// What happened, for a person.
    pub message: String,
}

impl Error {
    /// An error of `code` saying `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error { code, message: message.into() }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<Error> for String {
    fn from(e: Error) -> String {
        e.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_snake_case_on_the_wire_and_unknown_ones_still_read() {
        for code in ErrorCode::ALL {
            assert_eq!(serde_json::to_string(&code).unwrap(), format!("\"{}\"", code.as_str()));
        }
        assert_eq!(serde_json::from_str::<ErrorCode>("\"quota_exploded\"").unwrap(), ErrorCode::Unknown);
    }
}
