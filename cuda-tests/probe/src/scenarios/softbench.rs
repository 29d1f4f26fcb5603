//! `softbench`: the workloads of the soft-memory benchmarks (`benches/src/bin/softmem.rs`), one per
//! `--part`. The scenario only uses the driver API a program would (cuMemAlloc, cuMemFree, copies,
//! a stream, pinned host memory); whether its memory is soft depends on how it is started (`TESSERA_MODE`,
//! or the mode of the vGPU it joins), never on the scenario.
//!
//! - `alloc`: for each size of `--sizes`, times batches of `--batch` cuMemAlloc calls followed by the
//!   `--batch` cuMemFree calls of those blocks (so a batch keeps that many blocks live, as a program
//!   does), `--pairs` pairs in all; sizes above 1 MiB (half a page of the simulator's 2 MiB granularity,
//!   where soft mode stops sub-allocating and takes whole pages) use `--large-pairs` and `--large-batch`.
//!   One batch per size is run first as a warm-up and left out. Prints each batch's mean per pair.
//! - `swap`: allocates `--bytes` in buffers of `--buffer`, and one pinned host buffer of `--bytes`
//!   (cuMemHostAlloc, the kind of memory soft mode swaps into). Then `--reps` times: writes a pattern
//!   unique to the repetition and to every 8-byte word, copies it to the device and back in copies of
//!   `--piece` bytes, twice, checked each time: synchronous copies, then copies queued on a stream and
//!   waited for once (each way timed); prints `{"ready": rep}` and waits for a line on stdin (the
//!   benchmark swaps the process out meanwhile); then times one 8-byte copy (the first call after the
//!   swap-out, which brings the memory back), copies everything back (timed), checks the pattern, prints
//!   the results and waits for the next line.
//! - `defrag`: allocates `--ballast` bytes in `--buffer` blocks, never touched, then `--reps` times:
//!   allocates `--bytes` in `--buffer` blocks, fills each with its own pattern, frees every other block,
//!   prints `{"ready": rep}`, waits for a line on stdin (the benchmark defragments meanwhile), then reads
//!   every remaining block back and checks it, frees them, prints the result and waits for the next line.
//!   The ballast keeps the fragmented share of the memory held below the pager's own compaction threshold
//!   (25%), so that the fragmentation stays until the benchmark asks for it to be undone.

use super::open;
use crate::args::Args;
use crate::fail::{During, Failure, Outcome, ensure};
use crate::report;
use cudarc::driver::{result, sys};
use serde_json::json;
use std::io::BufRead;
use std::time::Instant;
use tessera_ffi::units::parse_size;

/// The simulator's allocation granularity: a soft space's page.
const PAGE: u64 = 2 << 20;
/// Largest size soft mode sub-allocates from slabs with 2 MiB pages (half a page).
const SMALL_MAX: u64 = PAGE / 2;
/// The options the scenario accepts.
pub const OPTIONS: &[&str] = &[
    "device",
    "part",
    "sizes",
    "pairs",
    "batch",
    "large-pairs",
    "large-batch",
    "bytes",
    "buffer",
    "piece",
    "reps",
    "ballast",
];
/// What the scenario prints as (its name).
const NAME: &str = "softbench";

/// Runs the part `--part` names.
pub fn run(args: &Args) -> Outcome {
    match args.text("part") {
        Some("alloc") => alloc(args),
        Some("swap") => swap(args),
        Some("defrag") => defrag(args),
        other => Err(Failure::new(format!("--part must be alloc, swap or defrag (got {other:?})"))),
    }
}

/// Nanoseconds since `t`.
fn ns(t: Instant) -> u64 {
    t.elapsed().as_nanos() as u64
}

/// Waits for one line on stdin (the benchmark's go-ahead); fails when stdin closes.
fn go_ahead() -> Outcome<()> {
    let mut line = String::new();
    let n = std::io::stdin().lock().read_line(&mut line).map_err(|e| Failure::new(format!("reading stdin: {e}")))?;
    ensure(n > 0, || "stdin closed before the benchmark said to go on".into())
}

fn malloc(bytes: u64) -> Outcome<sys::CUdeviceptr> {
    // SAFETY: a plain allocation request; every caller frees it once.
    unsafe { result::malloc_sync(bytes as usize) }.during(&format!("cuMemAlloc({bytes})"))
}

fn free(p: sys::CUdeviceptr) -> Outcome<()> {
    // SAFETY: `p` came from cuMemAlloc and is freed once.
    unsafe { result::free_sync(p) }.during("cuMemFree")
}

fn htod(dst: sys::CUdeviceptr, src: &[u64]) -> Outcome<()> {
    // SAFETY: `dst` is a device allocation of at least `src`'s length in bytes.
    unsafe { result::memcpy_htod_sync(dst, src) }.during("cuMemcpyHtoD")
}

fn dtoh(dst: &mut [u64], src: sys::CUdeviceptr) -> Outcome<()> {
    // SAFETY: `src` is a device allocation of at least `dst`'s length in bytes.
    unsafe { result::memcpy_dtoh_sync(dst, src) }.during("cuMemcpyDtoH")
}

/// `alloc`: per-pair latency of cuMemAlloc + cuMemFree, per batch.
fn alloc(args: &Args) -> Outcome {
    let sizes = args
        .text("sizes")
        .unwrap_or("256,4KiB,64KiB,4MiB")
        .split(',')
        .map(|s| parse_size(s).map_err(|e| Failure::new(format!("--sizes: {e}"))))
        .collect::<Outcome<Vec<u64>>>()?;
    ensure(sizes.iter().all(|&s| s > 0), || "--sizes: every size must be above 0".into())?;
    let pairs: usize = args.number("pairs", 100_000)?;
    let batch: usize = args.number("batch", 1000)?;
    let large_pairs: usize = args.number("large-pairs", 5_000)?;
    let large_batch: usize = args.number("large-batch", 50)?;
    ensure(batch > 0 && large_batch > 0, || "batches must hold at least one pair".into())?;
    let _ctx = open(args)?;
    let mut ptrs = Vec::with_capacity(batch.max(large_batch));
    let mut out = Vec::new();
    for &size in &sizes {
        let (n, k) = if size > SMALL_MAX { (large_pairs, large_batch) } else { (pairs, batch) };
        let batches = n.div_ceil(k);
        let mut per_pair_ns = Vec::with_capacity(batches);
        for b in 0..=batches {
            let t = Instant::now();
            for _ in 0..k {
                ptrs.push(malloc(size)?);
            }
            for p in ptrs.drain(..) {
                free(p)?;
            }
            if b > 0 {
                per_pair_ns.push(ns(t) as f64 / k as f64);
            }
        }
        out.push(json!({ "bytes": size, "pairs": batches * k, "batch": k, "per_pair_ns": per_pair_ns }));
    }
    Ok(json!({ "part": "alloc", "sizes": out }))
}

/// Pinned host memory from cuMemHostAlloc, as 8-byte words.
struct Pinned {
    ptr: *mut u64,
    words: usize,
}

impl Pinned {
    fn new(bytes: u64) -> Outcome<Pinned> {
        // SAFETY: a plain host allocation, freed in Drop.
        let p = unsafe { result::malloc_host(bytes as usize, 0) }.during(&format!("cuMemHostAlloc({bytes})"))?;
        Ok(Pinned { ptr: p.cast(), words: (bytes / 8) as usize })
    }

    fn words(&mut self) -> &mut [u64] {
        // SAFETY: the allocation holds `words` words, is 8-byte aligned (page aligned) and only this
        // value hands out references to it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.words) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in `new`, freed once.
        let _ = unsafe { result::free_host(self.ptr.cast()) };
    }
}

/// Word `i` of the pattern of repetition `seed` (every word differs, and differs between repetitions).
fn word(i: u64, seed: u64) -> u64 {
    i ^ seed.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn fill(words: &mut [u64], first: u64, seed: u64) {
    for (k, w) in words.iter_mut().enumerate() {
        *w = word(first + k as u64, seed);
    }
}

fn check(what: &str, words: &[u64], first: u64, seed: u64) -> Outcome<()> {
    match words.iter().enumerate().find(|&(k, &w)| w != word(first + k as u64, seed)) {
        None => Ok(()),
        Some((k, &w)) => Err(Failure::new(format!(
            "{what}: word {} is {w:#x}, expected {:#x}",
            first + k as u64,
            word(first + k as u64, seed)
        ))),
    }
}

/// The device side of each copy piece of the buffers, in order: piece `k` holds words
/// `k * piece / 8 ..` of the whole.
fn pieces(bufs: &[sys::CUdeviceptr], buffer: u64, piece: u64) -> Vec<sys::CUdeviceptr> {
    bufs.iter().flat_map(|&b| (0..buffer / piece).map(move |k| b + k * piece)).collect()
}

/// How a run of copies is issued: each synchronous, or all queued on a stream and waited for once.
#[derive(Clone, Copy)]
enum Issue {
    Sync,
    Queued(sys::CUstream),
}

impl Issue {
    fn finish(self) -> Outcome<()> {
        match self {
            Issue::Sync => Ok(()),
            // SAFETY: a stream this scenario created and has not destroyed.
            Issue::Queued(s) => unsafe { result::stream::synchronize(s) }.during("cuStreamSynchronize"),
        }
    }
}

/// Copies `host` (pinned) to the pieces, one copy per piece; the time taken.
fn htod_all(pieces: &[sys::CUdeviceptr], host: &[u64], piece: u64, issue: Issue) -> Outcome<u64> {
    let t = Instant::now();
    for (p, chunk) in pieces.iter().zip(host.chunks(piece as usize / 8)) {
        match issue {
            Issue::Sync => htod(*p, chunk)?,
            // SAFETY: `chunk` is pinned memory that outlives the copy (waited for below).
            Issue::Queued(s) => unsafe { result::memcpy_htod_async(*p, chunk, s) }.during("cuMemcpyHtoDAsync")?,
        }
    }
    issue.finish()?;
    Ok(ns(t))
}

/// Copies the pieces to `host` (pinned), one copy per piece; the time taken.
fn dtoh_all(pieces: &[sys::CUdeviceptr], host: &mut [u64], piece: u64, issue: Issue) -> Outcome<u64> {
    let t = Instant::now();
    for (p, chunk) in pieces.iter().zip(host.chunks_mut(piece as usize / 8)) {
        match issue {
            Issue::Sync => dtoh(chunk, *p)?,
            // SAFETY: `chunk` is pinned memory that outlives the copy (waited for below).
            Issue::Queued(s) => unsafe { result::memcpy_dtoh_async(chunk, *p, s) }.during("cuMemcpyDtoHAsync")?,
        }
    }
    issue.finish()?;
    Ok(ns(t))
}

/// `swap`: copy bandwidth of this process, then swap-out/swap-in cycles the benchmark drives.
fn swap(args: &Args) -> Outcome {
    let bytes = args.size("bytes", 1 << 30)?;
    let buffer = args.size("buffer", 64 << 20)?;
    let piece = args.size("piece", PAGE)?;
    let reps: u64 = args.number("reps", 5)?;
    ensure(piece > 0 && piece % 8 == 0 && buffer % piece == 0 && bytes % buffer == 0 && bytes > 0, || {
        "--bytes must be a multiple of --buffer, itself a multiple of --piece (a multiple of 8)".into()
    })?;
    let _ctx = open(args)?;
    let bufs = (0..bytes / buffer).map(|_| malloc(buffer)).collect::<Outcome<Vec<_>>>()?;
    let pieces = pieces(&bufs, buffer, piece);
    let mut host = Pinned::new(bytes)?;
    let queued =
        Issue::Queued(result::stream::create(result::stream::StreamKind::NonBlocking).during("cuStreamCreate")?);
    // Every page of both sides touched once before anything is timed.
    fill(host.words(), 0, u64::MAX);
    htod_all(&pieces, host.words(), piece, Issue::Sync)?;
    dtoh_all(&pieces, host.words(), piece, Issue::Sync)?;
    check("warm-up read-back", host.words(), 0, u64::MAX)?;
    for rep in 0..reps {
        // Each direction both ways, each checked: synchronous copies, and copies queued on a stream.
        fill(host.words(), 0, rep);
        let htod_ns = htod_all(&pieces, host.words(), piece, Issue::Sync)?;
        host.words().fill(0);
        let dtoh_ns = dtoh_all(&pieces, host.words(), piece, Issue::Sync)?;
        check("read-back before the swap-out", host.words(), 0, rep)?;
        fill(host.words(), 0, rep ^ 0x5a5a);
        let htod_queued_ns = htod_all(&pieces, host.words(), piece, queued)?;
        host.words().fill(0);
        let dtoh_queued_ns = dtoh_all(&pieces, host.words(), piece, queued)?;
        check("queued read-back", host.words(), 0, rep ^ 0x5a5a)?;
        fill(host.words(), 0, rep);
        htod_all(&pieces, host.words(), piece, queued)?;
        report::emit_now(
            NAME,
            json!({
                "ready": rep, "bytes": bytes, "htod_ns": htod_ns, "dtoh_ns": dtoh_ns,
                "htod_queued_ns": htod_queued_ns, "dtoh_queued_ns": dtoh_queued_ns,
            }),
        );
        go_ahead()?;
        host.words().fill(0);
        let t = Instant::now();
        dtoh(&mut host.words()[..1], pieces[0])?;
        let first_copy_ns = ns(t);
        let dtoh_after_ns = dtoh_all(&pieces, host.words(), piece, Issue::Sync)?;
        check("read-back after the swap-in", host.words(), 0, rep)?;
        report::emit_now(
            NAME,
            json!({
                "rep": rep, "verified": true, "first_copy_ns": first_copy_ns, "dtoh_after_ns": dtoh_after_ns,
            }),
        );
        go_ahead()?;
    }
    if let Issue::Queued(stream) = queued {
        // SAFETY: created above; every copy on it has been waited for.
        unsafe { result::stream::destroy(stream) }.during("cuStreamDestroy")?;
    }
    for p in bufs {
        free(p)?;
    }
    Ok(json!({ "part": "swap", "bytes": bytes, "buffer": buffer, "piece": piece }))
}

/// `defrag`: half of `--bytes` freed in a scattered pattern, for the benchmark to defragment.
fn defrag(args: &Args) -> Outcome {
    let bytes = args.size("bytes", 1 << 30)?;
    let buffer = args.size("buffer", PAGE)?;
    let ballast = args.size("ballast", 3 << 29)?;
    let reps: u64 = args.number("reps", 5)?;
    ensure(buffer % 8 == 0 && bytes % buffer == 0 && ballast % buffer == 0 && bytes >= 2 * buffer, || {
        "--bytes and --ballast must be multiples of --buffer (a multiple of 8), --bytes at least two".into()
    })?;
    let _ctx = open(args)?;
    let held = (0..ballast / buffer).map(|_| malloc(buffer)).collect::<Outcome<Vec<_>>>()?;
    let words = (buffer / 8) as usize;
    let mut host = vec![0u64; words];
    let n = bytes / buffer;
    for rep in 0..reps {
        let bufs = (0..n).map(|_| malloc(buffer)).collect::<Outcome<Vec<_>>>()?;
        let t = Instant::now();
        for (i, &b) in bufs.iter().enumerate() {
            fill(&mut host, i as u64 * words as u64, rep);
            htod(b, &host)?;
        }
        let fill_ns = ns(t);
        let t = Instant::now();
        for &b in bufs.iter().skip(1).step_by(2) {
            free(b)?;
        }
        let free_ns = ns(t);
        let kept: Vec<(usize, sys::CUdeviceptr)> = bufs.into_iter().enumerate().step_by(2).collect();
        report::emit_now(
            NAME,
            json!({ "ready": rep, "buffers": n, "kept": kept.len(), "fill_ns": fill_ns, "free_ns": free_ns }),
        );
        go_ahead()?;
        let t = Instant::now();
        for &(i, b) in &kept {
            host.fill(0);
            dtoh(&mut host, b)?;
            check(&format!("block {i} after defragmentation"), &host, i as u64 * words as u64, rep)?;
        }
        let verify_ns = ns(t);
        for (_, b) in kept {
            free(b)?;
        }
        report::emit_now(NAME, json!({ "rep": rep, "verified": true, "verify_ns": verify_ns }));
        go_ahead()?;
    }
    for b in held {
        free(b)?;
    }
    Ok(json!({ "part": "defrag", "done": true }))
}
