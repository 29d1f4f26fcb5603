//! `churn`: a tight `cuMemAlloc`/`cuMemFree` loop of random sizes, for kill storms (a test SIGKILLs
//! churning processes at random instants and checks that the quota neither leaks nor overshoots) and for a
//! process at its descriptor limit sharing a quota with live peers.

use super::open;
use crate::args::Args;
use crate::fail::{During, Outcome, code, ensure};
use crate::report;
use cudarc::driver::result;
use serde_json::json;

/// Options of `churn`.
pub const OPTIONS: &[&str] = &["device", "min", "max", "seconds", "exhaust-fds"];

/// `churn --min SIZE --max SIZE [--seconds S] [--exhaust-fds 1]`: reports `ready` once its context exists
/// (after opening descriptors until `EMFILE` with `--exhaust-fds 1`), then allocates and frees at once
/// blocks of random sizes between `--min` and `--max` (log-uniform) for `--seconds` (0: until killed), and
/// reports how many were granted and refused (`CUDA_ERROR_OUT_OF_MEMORY`), and the largest granted.
pub fn run(args: &Args) -> Outcome {
    let min = args.size("min", 1 << 20)?.max(1);
    let max = args.size("max", 256 << 20)?.max(min);
    let seconds: f64 = args.number("seconds", 0.0)?;
    let exhaust = args.number("exhaust-fds", 0u32)? != 0;
    let _ctx = open(args)?;
    let fds = if exhaust { exhaust_descriptors()? } else { 0 };
    report::emit_now("churn", json!({ "ready": true, "pid": std::process::id(), "fds_opened": fds }));
    let deadline = (seconds > 0.0).then(|| std::time::Instant::now() + std::time::Duration::from_secs_f64(seconds));
    let mut state = u64::from(std::process::id()).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let (mut granted, mut refused, mut largest) = (0u64, 0u64, 0u64);
    while deadline.is_none_or(|d| std::time::Instant::now() < d) {
        // xorshift64: sizes log-uniform between min and max, so small and large blocks are both common.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let fraction = (state >> 11) as f64 / (1u64 << 53) as f64;
        let bytes = ((min as f64) * ((max as f64) / (min as f64)).powf(fraction)) as u64;
        // SAFETY: a plain allocation, freed at once below and never dereferenced.
        match unsafe { result::malloc_sync(bytes.max(1) as usize) } {
            Ok(p) => {
                granted += 1;
                largest = largest.max(bytes);
                // SAFETY: allocated just above, freed once.
                unsafe { result::free_sync(p) }.during("cuMemFree")?;
            }
            Err(e) if code(e.0) == 2 => refused += 1,
            Err(e) => return Err(e).during("cuMemAlloc"),
        }
    }
    Ok(json!({ "granted": granted, "refused": refused, "largest_granted": largest }))
}

/// Opens `/dev/null` until the process has no descriptor left (`EMFILE`); returns how many it opened.
/// They stay open (leaked) for the rest of the process.
fn exhaust_descriptors() -> Outcome<u64> {
    let mut opened = 0u64;
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => {
                std::mem::forget(f);
                opened += 1;
            }
            Err(e) => {
                ensure(e.raw_os_error() == Some(libc::EMFILE), || format!("opening /dev/null: {e}"))?;
                return Ok(opened);
            }
        }
    }
}
