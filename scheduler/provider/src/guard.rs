//! Every entry point runs through [`entry`]: a panic becomes `ACCEL_ERROR_INTERNAL`, a [`Fail`] its code,
//! and both a log line naming the call.

use crate::abi::current::{ACCEL_ERROR_INTERNAL, ACCEL_ERROR_INVALID_PARAM, ACCEL_SUCCESS, AccelResult};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A call that did not succeed: its result code and what happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Fail {
    /// The `AccelResult` to return.
    pub code: AccelResult,
    /// For the log.
    pub message: String,
}

impl Fail {
    /// A failure with `code`.
    pub fn new(code: AccelResult, message: impl Into<String>) -> Fail {
        Fail { code, message: message.into() }
    }

    /// `ACCEL_ERROR_INVALID_PARAM`.
    pub fn invalid(message: impl Into<String>) -> Fail {
        Fail::new(ACCEL_ERROR_INVALID_PARAM, message)
    }
}

/// What an entry point's body returns.
pub type Outcome = Result<(), Fail>;

/// Runs entry point `name`'s body: its result code, with failures and panics logged.
pub fn entry(name: &str, body: impl FnOnce() -> Outcome) -> AccelResult {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ACCEL_SUCCESS,
        Ok(Err(fail)) => {
            let level = if fail.code == ACCEL_ERROR_INVALID_PARAM { "WARN" } else { "ERROR" };
            crate::log::line(level, &format!("{name}: {}", fail.message));
            fail.code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            crate::log::line("ERROR", &format!("{name}: internal error: {what}"));
            ACCEL_ERROR_INTERNAL
        }
    }
}

/// `Err(INVALID_PARAM)` naming `what` when `p` is NULL.
pub fn non_null<T>(p: *const T, what: &str) -> Outcome {
    if p.is_null() { Err(Fail::invalid(format!("{what} is NULL"))) } else { Ok(()) }
}
