//! Logging to stderr (never stdout: tools parse `nvidia-smi`-like output), filtered by `TESSERA_LOG`.

use std::fmt::Arguments;
use std::sync::atomic::{AtomicU8, Ordering};

/// Severity, most severe first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Something failed.
    Error = 1,
    /// Something the user should know (the default threshold).
    Warn = 2,
    /// Notable events.
    Info = 3,
    /// Per-call detail.
    Debug = 4,
    /// Everything.
    Trace = 5,
}

/// The threshold; 0 until first read from `TESSERA_LOG` (read directly, so that programs that never call
/// `cuInit`, such as NVML-only tools, and the shim's own start-up messages honour it too).
static THRESHOLD: AtomicU8 = AtomicU8::new(0);

/// Accepted `TESSERA_LOG` values.
pub const ACCEPTED: &str = "error, warn, info, debug, trace";

impl Level {
    /// Parses a `TESSERA_LOG` value.
    pub fn parse(text: &str) -> Option<Level> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "error" => Level::Error,
            "warn" | "warning" => Level::Warn,
            "info" => Level::Info,
            "debug" => Level::Debug,
            "trace" => Level::Trace,
            _ => return None,
        })
    }
}

/// Sets the threshold.
pub fn set_level(level: Level) {
    THRESHOLD.store(level as u8, Ordering::Relaxed);
}

/// The threshold in force, read from `TESSERA_LOG` on first use (a malformed value counts as the default
/// here; the configuration check reports it).
#[inline]
fn threshold() -> u8 {
    match THRESHOLD.load(Ordering::Relaxed) {
        0 => first_threshold(),
        t => t,
    }
}

#[cold]
fn first_threshold() -> u8 {
    let level = std::env::var_os("TESSERA_LOG").and_then(|v| v.to_str().and_then(Level::parse)).unwrap_or(Level::Warn);
    // A concurrent `set_level` wins: it stores the same value, from the same variable.
    let _ = THRESHOLD.compare_exchange(0, level as u8, Ordering::Relaxed, Ordering::Relaxed);
    THRESHOLD.load(Ordering::Relaxed)
}

/// True when messages at `level` are printed.
#[inline]
pub fn enabled(level: Level) -> bool {
    level as u8 <= threshold()
}

/// Prints one line at `level`.
pub fn log(level: Level, args: Arguments<'_>) {
    if enabled(level) {
        let tag = format!("{level:?}").to_ascii_lowercase();
        eprintln!("tessera[{}] {tag}: {args}", std::process::id());
    }
}

/// [`log`] at error level.
pub fn error(args: Arguments<'_>) {
    log(Level::Error, args)
}

/// [`log`] at warn level.
pub fn warn(args: Arguments<'_>) {
    log(Level::Warn, args)
}

/// [`log`] at info level.
pub fn info(args: Arguments<'_>) {
    log(Level::Info, args)
}

/// [`log`] at debug level.
pub fn debug(args: Arguments<'_>) {
    log(Level::Debug, args)
}

/// [`log`] at trace level.
#[inline]
pub fn trace(args: Arguments<'_>) {
    // Checked here, inlined: every intercepted call traces, and the level is almost never trace.
    if enabled(Level::Trace) {
        log(Level::Trace, args)
    }
}
