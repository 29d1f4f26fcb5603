//! Scenario failures: what went wrong and, when a driver call was the cause, its `CUresult`.

use cudarc::driver::{DriverError, sys};

/// Why a scenario failed.
#[derive(Debug)]
pub struct Failure {
    /// Human-readable explanation, naming the call or check that failed.
    pub message: String,
    /// The `CUresult` of the failing driver call, if one failed.
    pub code: Option<u32>,
}

/// What every scenario step returns.
pub type Outcome<T = serde_json::Value> = Result<T, Failure>;

impl Failure {
    /// A failure not caused by a driver call (a wrong result, a bad option).
    pub fn new(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), code: None }
    }
}

/// The numeric value of a `CUresult`.
pub fn code(r: sys::CUresult) -> u32 {
    r as u32
}

/// Turns a driver result into an [`Outcome`], naming the call that was made.
pub trait During<T> {
    /// Adds `what` (the call or step) to the error, keeping its code.
    fn during(self, what: &str) -> Outcome<T>;
}

impl<T> During<T> for Result<T, DriverError> {
    fn during(self, what: &str) -> Outcome<T> {
        self.map_err(|e| Failure { message: format!("{what}: {:?} ({})", e.0, code(e.0)), code: Some(code(e.0)) })
    }
}

impl During<()> for sys::CUresult {
    fn during(self, what: &str) -> Outcome<()> {
        self.result().during(what)
    }
}

/// Fails with the message `why` builds unless `ok`.
pub fn ensure(ok: bool, why: impl FnOnce() -> String) -> Outcome<()> {
    if ok { Ok(()) } else { Err(Failure::new(why())) }
}

/// Checks `got[i] == want(i)` for every element, reporting the first difference.
pub fn verify<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: impl Fn(usize) -> T) -> Outcome<()> {
    match got.iter().enumerate().find(|(i, g)| **g != want(*i)) {
        None => Ok(()),
        Some((i, g)) => Err(Failure::new(format!("{what}: element {i} is {g:?}, expected {:?}", want(i)))),
    }
}
