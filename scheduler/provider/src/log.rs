//! The registered log callback: every line the library logs goes to it (level, message); without one,
//! lines are dropped (a library must not write to the hypervisor's stderr uninvited).

use crate::abi::current::LogCallback;
use parking_lot::RwLock;
use std::ffi::CString;

/// The callback, `None` when unregistered. Process-wide because the C ABI has no handle:
/// `RegisterLogCallback` names no context, so the library keeps the one callback for the whole process.
static CALLBACK: RwLock<LogCallback> = RwLock::new(None);

/// Registers `callback` (`None` unregisters).
pub fn register(callback: LogCallback) {
    *CALLBACK.write() = callback;
}

/// Sends one line at `level` (`DEBUG`, `INFO`, `WARN`, `ERROR`) to the callback.
pub fn line(level: &str, message: &str) {
    let Some(callback) = *CALLBACK.read() else { return };
    // Interior NULs cannot cross the C boundary; they become spaces.
    let text = |s: &str| CString::new(s.replace('\0', " ")).unwrap_or_default();
    let (level, message) = (text(level), text(&format!("tessera: {message}")));
    // SAFETY: the hypervisor registered a function of this signature; both strings live through the call.
    unsafe { callback(level.as_ptr(), message.as_ptr()) };
}
