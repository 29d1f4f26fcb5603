//! The boundary every intercepted entry point crosses: panics become error codes, results become codes.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// A CUDA or NVML status as the C ABI carries it (0 is success in both).
pub type Status = u32;

/// What handlers return: `Err` carries the status to hand back.
pub type Res<T = ()> = Result<T, Status>;

/// `CUDA_ERROR_UNKNOWN` and `NVML_ERROR_UNKNOWN` are both 999.
pub(crate) const UNKNOWN: Status = 999;

/// Runs a handler, turning its result (or a panic) into a status.
pub fn call(name: &str, f: impl FnOnce() -> Res) -> Status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(code)) => code,
        Err(_) => {
            crate::log::error(format_args!("internal error in {name}; returning error 999"));
            UNKNOWN
        }
    }
}

/// Turns a status from the real library into a `Res`.
pub fn status(code: Status) -> Res {
    if code == 0 { Ok(()) } else { Err(code) }
}
