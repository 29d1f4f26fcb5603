//! `snapbench`: the tenant of the snapshot benchmark (`benches/src/bin/snapshot.rs`). It holds `--mib` MiB
//! of device memory in `--chunk-mib` MiB allocations, all written with one pattern, and a pageable host
//! buffer of one chunk (touched, then reused: the device's copy bandwidth, not page faults, is measured).
//! It reports `{"ready": true, "pid": ..., "bytes": ...}`, then serves stdin lines, one JSON line each:
//! `dtoh` / `htod` copy every chunk to / from the host buffer (synchronous `cuMemcpyDtoH` / `cuMemcpyHtoD`,
//! one call per chunk) and report the nanoseconds the calls took; `verify` reads every chunk back and
//! counts the words that differ from the pattern. Ends at EOF (or `quit`), freeing everything.

use super::open;
use crate::args::Args;
use crate::fail::{During, Outcome, ensure};
use crate::report;
use cudarc::driver::result;
use serde_json::json;
use std::io::BufRead;
use std::time::Instant;

/// Word `j` of the pattern.
fn word(j: usize) -> u32 {
    0x5EED_0000 ^ (j as u32).wrapping_mul(0x9E37_79B9)
}

/// Runs the scenario (see the module documentation). Options: `--mib` (default 4096), `--chunk-mib`
/// (default 1024), `--device`.
pub fn run(args: &Args) -> Outcome {
    let mib: u64 = args.number("mib", 4096)?;
    let chunk_mib: u64 = args.number("chunk-mib", 1024)?;
    ensure(chunk_mib > 0 && mib >= chunk_mib && mib.is_multiple_of(chunk_mib), || {
        format!("--mib ({mib}) must be a multiple of --chunk-mib ({chunk_mib})")
    })?;
    let ctx = open(args)?;
    ctx.bind_to_thread().during("cuCtxSetCurrent")?;
    let chunk = (chunk_mib << 20) as usize;
    let mut host: Vec<u32> = (0..chunk / 4).map(word).collect();
    let mut chunks = Vec::new();
    for _ in 0..mib / chunk_mib {
        // SAFETY: a plain allocation, freed before the scenario returns.
        let ptr = unsafe { result::malloc_sync(chunk) }.during("cuMemAlloc")?;
        // SAFETY: `ptr` addresses `chunk` bytes, as many as `host` holds.
        unsafe { result::memcpy_htod_sync(ptr, &host) }.during("cuMemcpyHtoD")?;
        chunks.push(ptr);
    }
    report::emit_now("snapbench", json!({"ready": true, "pid": std::process::id(), "bytes": mib << 20}));
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let start = Instant::now();
        let answer = match line.trim() {
            "dtoh" => {
                for &ptr in &chunks {
                    // SAFETY: as above, the other way.
                    unsafe { result::memcpy_dtoh_sync(&mut host, ptr) }.during("cuMemcpyDtoH")?;
                }
                json!({"dtoh_ns": start.elapsed().as_nanos() as u64})
            }
            "htod" => {
                for &ptr in &chunks {
                    // SAFETY: as above.
                    unsafe { result::memcpy_htod_sync(ptr, &host) }.during("cuMemcpyHtoD")?;
                }
                json!({"htod_ns": start.elapsed().as_nanos() as u64})
            }
            "verify" => {
                let mut bad = 0u64;
                for &ptr in &chunks {
                    // SAFETY: as above.
                    unsafe { result::memcpy_dtoh_sync(&mut host, ptr) }.during("cuMemcpyDtoH")?;
                    bad += host.iter().enumerate().filter(|&(j, &w)| w != word(j)).count() as u64;
                }
                json!({"verified": mib << 20, "mismatched_words": bad})
            }
            "quit" => break,
            other => json!({"error": format!("unknown command {other:?}: dtoh, htod, verify or quit")}),
        };
        report::emit_now("snapbench", answer);
    }
    for ptr in chunks {
        // SAFETY: allocated above, freed once; no work is queued on it.
        unsafe { result::free_sync(ptr) }.during("cuMemFree")?;
    }
    Ok(json!({"done": true}))
}
