//! `alloc`: take device memory and hold it, so other processes can be tested against what is left.

use super::open;
use crate::args::Args;
use crate::fail::{During, Failure, Outcome, code, ensure};
use crate::report;
use cudarc::driver::result;
use serde_json::{Value, json};
use std::io::Read;

/// Allocates `--bytes` with `cuMemAlloc`. On success the result is printed at once, then the memory is
/// held until stdin closes (or for `--hold-ms`) and freed. A failed allocation is a result, not a
/// failure: it is reported with its error code and the probe exits 0.
pub fn run(args: &Args) -> Outcome {
    let bytes = args.size("bytes", 0)?;
    ensure(bytes > 0, || "--bytes is required (e.g. --bytes 3GiB)".into())?;
    let hold_ms: Option<u64> = args.text("hold-ms").map(|_| args.number("hold-ms", 0)).transpose()?;
    let ctx = open(args)?;
    let (free_before, total) = ctx.mem_get_info().during("cuMemGetInfo")?;
    // SAFETY: a plain allocation request; the memory is freed below and never dereferenced.
    let ptr = match unsafe { result::malloc_sync(bytes as usize) } {
        Ok(p) => p,
        Err(e) => {
            return Ok(json!({
                "allocated": false, "bytes": bytes, "cuda_error": code(e.0), "error_name": format!("{:?}", e.0),
                "free_before": free_before, "total": total,
            }));
        }
    };
    let (free_after, _) = ctx.mem_get_info().during("cuMemGetInfo")?;
    report::emit_now(
        "alloc",
        json!({
            "allocated": true, "bytes": bytes, "free_before": free_before, "free_after": free_after,
            "total": total, "pid": std::process::id(),
        }),
    );
    match hold_ms {
        Some(ms) => std::thread::sleep(std::time::Duration::from_millis(ms)),
        None => {
            std::io::stdin().read_to_end(&mut Vec::new()).map_err(|e| Failure::new(format!("reading stdin: {e}")))?;
        }
    }
    // SAFETY: `ptr` came from cuMemAlloc above and is freed once.
    unsafe { result::free_sync(ptr) }.during("cuMemFree")?;
    Ok(Value::Null)
}
