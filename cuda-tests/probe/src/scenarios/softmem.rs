//! `softmem`: a working set for soft memory mode, whose pages Tessera pools, compacts and swaps while
//! the program keeps its pointers. A mix of large (whole-page) and small (sub-allocated) buffers, each
//! with contents of its own (host copies, `fill_u32` launches, floats summed by `vector_add_f32`), has a
//! scattered part freed and the freed sizes allocated again; then the probe reports it is ready and,
//! for each of `--rounds` triggers (the file `--wait-file` appearing; no CUDA call is made while it
//! waits, so the process counts as idle; without `--wait-file` the rounds run back to back), checks
//! every byte of every live buffer and runs a kernel on live buffers. Any difference is reported and
//! makes the probe exit 1.
//!
//! Output, one JSON line each: `{"ready": true, ...}` after the setup, `{"round": r, ...}` after each
//! trigger, and `{"done": true, ...}` once everything is freed.

use super::open;
use super::quota::mem_info;
use crate::args::Args;
use crate::fail::{During, Failure, Outcome, code, ensure};
use crate::ptx::Kernels;
use crate::report;
use cudarc::driver::{CudaStream, result, sys};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// Sizes of the large buffers, in turn: one or two whole pages of 2 MiB, most of them not a whole number
/// of pages.
const LARGE: [u64; 4] = [2 * MIB, 3 * MIB + 1024, 4 * MIB - 256, 2 * MIB + 4096 + 4];
/// Sizes of the small buffers, in turn (every one a multiple of 4 bytes; slab classes 256 B to 64 KiB).
const SMALL: [u64; 10] = [256, 1000, 4096, 12_292, 65_536, 300, 2_052, 32_768, 8, 40_000];
/// Most bytes of small buffers, whatever `--mib` is (a few hundred buffers).
const SMALL_MAX: u64 = 4 * MIB;
/// Elements of each of the kernel's buffers `a`, `b` and `c`: 3 MiB, whole pages.
const KERNEL_ELEMENTS: usize = 768 * 1024;
/// Bytes of the buffer refilled by a kernel each round: just over one page.
const ROUND_BYTES: u64 = 2 * MIB + 4;
/// How often the trigger file is looked for.
const POLL: Duration = Duration::from_millis(10);

/// What a buffer holds, word by word.
#[derive(Clone, Copy, Debug)]
enum Content {
    /// `seed ^ j * golden`, copied from the host.
    Pattern(u32),
    /// One value everywhere, written by `fill_u32`.
    Fill(u32),
    /// The floats [`float`]`(k, j)`, copied from the host.
    Float(u32),
    /// `float(a, j) + float(b, j)`, computed by `vector_add_f32`.
    Sum(u32, u32),
}

/// Float `j` of the float buffer `k`.
fn float(k: u32, j: usize) -> f32 {
    (j % 4096) as f32 * 0.25 + k as f32
}

impl Content {
    fn word(self, j: usize) -> u32 {
        match self {
            Content::Pattern(seed) => seed ^ (j as u32).wrapping_mul(0x9E37_79B9),
            Content::Fill(v) => v,
            Content::Float(k) => float(k, j).to_bits(),
            Content::Sum(a, b) => (float(a, j) + float(b, j)).to_bits(),
        }
    }
}

/// What a buffer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Large,
    Small,
    /// `a`, `b` or `c` of the kernel run each round.
    Kernel,
    /// Refilled by a kernel each round.
    Round,
}

/// One live allocation.
#[derive(Debug)]
struct Buffer {
    ptr: sys::CUdeviceptr,
    bytes: u64,
    content: Content,
    role: Role,
}

impl Buffer {
    fn words(&self) -> usize {
        (self.bytes / 4) as usize
    }
}

/// Distinct seed of buffer number `n`.
fn seed(n: usize) -> u32 {
    (n as u32 + 1).wrapping_mul(0x2545_F491) ^ 0x0BAD_5EED
}

/// Device memory the simulated driver counts for this process on `device` (contexts and allocations),
/// read from the state file `SIMGPU_STATE` names; `None` on another driver.
fn device_bytes(device: usize) -> Option<u64> {
    std::env::var_os("SIMGPU_STATE")?;
    let config = simgpu::Config::from_env().ok()?;
    let state = simgpu::SharedState::open(&config, false).ok()?;
    let pid = std::process::id();
    let me = state.processes().find(|p| p.pid.load(Ordering::Acquire) == pid)?;
    me.memory.get(device).map(|m| m.load(Ordering::Acquire))
}

/// `cuMemAlloc`.
fn alloc(bytes: u64) -> Outcome<sys::CUdeviceptr> {
    // SAFETY: a plain allocation request; the memory is freed before the probe exits.
    unsafe { result::malloc_sync(bytes as usize) }.during(&format!("cuMemAlloc({bytes})"))
}

/// `cuMemFree`.
fn free(ptr: sys::CUdeviceptr) -> Outcome<()> {
    // SAFETY: `ptr` came from cuMemAlloc and is freed once; the work using it has been waited for.
    unsafe { result::free_sync(ptr) }.during("cuMemFree")
}

/// Queues the writes giving `b` its contents: a host copy, or a launch on `stream` (`Sum` buffers are
/// computed by [`add`]).
fn write(k: &Kernels, stream: &CudaStream, b: &Buffer) -> Outcome<()> {
    match b.content {
        Content::Pattern(_) | Content::Float(_) => {
            let host: Vec<u32> = (0..b.words()).map(|j| b.content.word(j)).collect();
            // SAFETY: `b.ptr` addresses `b.bytes` bytes, as many as `host` holds.
            unsafe { result::memcpy_htod_sync(b.ptr, &host) }.during("cuMemcpyHtoD")
        }
        // SAFETY: `b.ptr` addresses `b.words()` u32s, live until the stream is synchronized.
        Content::Fill(v) => unsafe { k.fill_u32(stream, b.ptr, v, b.words() as u64) },
        Content::Sum(..) => Ok(()),
    }
}

/// Zeroes `c` and computes `c = a + b` with `vector_add_f32`, waiting for it.
fn add(k: &Kernels, stream: &CudaStream, [a, b, c]: [&Buffer; 3]) -> Outcome<()> {
    // SAFETY: `c` holds KERNEL_ELEMENTS u32s; the memset is synchronous.
    unsafe { sys::cuMemsetD32_v2(c.ptr, 0, KERNEL_ELEMENTS) }.during("cuMemsetD32")?;
    // SAFETY: the three buffers hold KERNEL_ELEMENTS f32s each and stay live until the synchronization.
    unsafe { k.vector_add_f32(stream, [a.ptr, b.ptr, c.ptr], KERNEL_ELEMENTS as u64) }?;
    stream.synchronize().during("cuStreamSynchronize")
}

/// What a check of every byte found.
#[derive(Default)]
struct Check {
    buffers: usize,
    bytes: u64,
    mismatched_buffers: usize,
    mismatched_words: u64,
    first: Option<Value>,
}

impl Check {
    fn json(&self) -> Value {
        json!({
            "buffers": self.buffers,
            "bytes": self.bytes,
            "mismatched_buffers": self.mismatched_buffers,
            "mismatched_words": self.mismatched_words,
            "first_mismatch": self.first,
        })
    }

    fn ok(&self) -> bool {
        self.mismatched_words == 0
    }
}

/// Reads every buffer back (`cuMemcpyDtoH`) and compares every word with what it should hold.
fn check(buffers: &[Buffer]) -> Outcome<Check> {
    let mut c = Check::default();
    let mut host = vec![0u32; buffers.iter().map(Buffer::words).max().unwrap_or(0)];
    for (i, b) in buffers.iter().enumerate() {
        let got = &mut host[..b.words()];
        // SAFETY: `b.ptr` addresses `b.bytes` bytes, as many as `got` holds.
        unsafe { result::memcpy_dtoh_sync(got, b.ptr) }.during("cuMemcpyDtoH")?;
        let mut bad = 0u64;
        for (j, &g) in got.iter().enumerate() {
            let want = b.content.word(j);
            if g != want {
                if c.first.is_none() {
                    c.first = Some(json!({
                        "buffer": i, "role": format!("{:?}", b.role), "bytes": b.bytes, "ptr": b.ptr,
                        "offset": j * 4, "got": g, "expected": want,
                    }));
                }
                bad += 1;
            }
        }
        c.buffers += 1;
        c.bytes += b.bytes;
        if bad > 0 {
            c.mismatched_buffers += 1;
            c.mismatched_words += bad;
        }
    }
    Ok(c)
}

/// Fails, naming the first difference, unless `c` found none.
fn ensure_intact(what: &str, c: &Check) -> Outcome<()> {
    ensure(c.ok(), || {
        format!(
            "{what}: {} word(s) in {} of {} buffer(s) differ; first: {}",
            c.mismatched_words,
            c.mismatched_buffers,
            c.buffers,
            c.first.as_ref().unwrap_or(&Value::Null)
        )
    })
}

/// Whether `i` is one of every `n`th (`n` 0: none).
fn every(n: usize, i: usize) -> bool {
    n > 0 && i % n == n - 1
}

/// The sizes of the large and small buffers making up `total` bytes with the kernel's and the round
/// buffer.
fn plan(total: u64) -> (Vec<u64>, Vec<u64>) {
    let fixed = 3 * KERNEL_ELEMENTS as u64 * 4 + ROUND_BYTES;
    let small_budget = (total / 8).min(SMALL_MAX);
    let large_budget = total.saturating_sub(fixed + small_budget);
    let take = |sizes: &[u64], budget: u64| {
        let mut out = Vec::new();
        let mut sum = 0;
        for s in sizes.iter().cycle() {
            if sum >= budget {
                break;
            }
            out.push(*s);
            sum += s;
        }
        out
    };
    (take(&LARGE, large_budget), take(&SMALL, small_budget))
}

/// Waits until `path` exists (polling, no CUDA call), then removes it; fails after `timeout`.
fn wait_for(path: &Path, timeout: Duration) -> Outcome<()> {
    let start = Instant::now();
    while !path.exists() {
        ensure(start.elapsed() < timeout, || {
            format!("{} did not appear within {} s", path.display(), timeout.as_secs())
        })?;
        std::thread::sleep(POLL);
    }
    std::fs::remove_file(path).map_err(|e| Failure::new(format!("removing {}: {e}", path.display())))
}

/// Runs the scenario (see the module documentation). Options: `--mib` (default 64), `--free-large N` and
/// `--free-small N` (every Nth freed; defaults 2 and 3; 0: none), `--rounds` (default 0), `--wait-file`
/// (without it the rounds run back to back), `--wait-timeout` (default 120s, per round), `--device`.
pub fn run(args: &Args) -> Outcome {
    let mib: u64 = args.number("mib", 64)?;
    ensure(mib >= 16, || format!("--mib must be at least 16, not {mib}"))?;
    let free_large: usize = args.number("free-large", 2)?;
    let free_small: usize = args.number("free-small", 3)?;
    let rounds: u32 = args.number("rounds", 0)?;
    let wait_file = args.text("wait-file").map(PathBuf::from);
    let wait_timeout = Duration::from_nanos(args.duration_ns("wait-timeout", 120_000_000_000)?);
    let device = args.device()?;
    let ctx = open(args)?;
    let stream = ctx.default_stream();
    let k = Kernels::load(&ctx)?;
    ctx.bind_to_thread().during("cuCtxSetCurrent")?;
    let context_bytes = device_bytes(device);
    let (free_start, total) = mem_info()?;

    // The first allocation, alone: what it costs the device.
    let first_ptr = alloc(SMALL[0])?;
    let first_cost = device_bytes(device).zip(context_bytes).map(|(a, b)| a - b);
    let mut live =
        vec![Buffer { ptr: first_ptr, bytes: SMALL[0], content: Content::Pattern(seed(0)), role: Role::Small }];

    // Everything else, large and small interleaved, the kernel's buffers in the middle.
    let (large, small) = plan(mib * MIB);
    let per_large = small.len().saturating_sub(1).div_ceil(large.len().max(1));
    let mut smalls = small.iter().skip(1);
    let push = |live: &mut Vec<Buffer>, bytes: u64, role: Role, fill: bool| -> Outcome<()> {
        let n = live.len();
        let content = if fill { Content::Fill(seed(n) | 1) } else { Content::Pattern(seed(n)) };
        live.push(Buffer { ptr: alloc(bytes)?, bytes, content, role });
        Ok(())
    };
    push(&mut live, ROUND_BYTES, Role::Round, true)?;
    let mut kernel = [0usize; 3];
    for (i, &bytes) in large.iter().enumerate() {
        if i == large.len() / 2 {
            for (slot, content) in kernel.iter_mut().zip([Content::Float(1), Content::Float(2), Content::Sum(1, 2)]) {
                *slot = live.len();
                let bytes = KERNEL_ELEMENTS as u64 * 4;
                live.push(Buffer { ptr: alloc(bytes)?, bytes, content, role: Role::Kernel });
            }
        }
        // A kernel writes one large buffer in four and one small one in sixteen, the host the others.
        push(&mut live, bytes, Role::Large, i % 4 == 3)?;
        for (j, &s) in smalls.by_ref().take(per_large).enumerate() {
            push(&mut live, s, Role::Small, (i + j) % 16 == 15)?;
        }
    }
    for b in &live {
        write(&k, &stream, b)?;
    }
    stream.synchronize().during("cuStreamSynchronize")?;
    add(&k, &stream, [&live[kernel[0]], &live[kernel[1]], &live[kernel[2]]])?;
    let device_full = device_bytes(device);

    // A scattered part freed: every Nth large buffer and every Nth small one.
    let (mut li, mut si) = (0, 0);
    let mut freed = Vec::new();
    let mut kept = Vec::new();
    for b in live {
        let gone = match b.role {
            Role::Large => {
                li += 1;
                every(free_large, li - 1)
            }
            Role::Small => {
                si += 1;
                every(free_small, si - 1)
            }
            Role::Kernel | Role::Round => false,
        };
        if gone {
            free(b.ptr)?;
            freed.push(b);
        } else {
            kept.push(b);
        }
    }
    let mut live = kept;
    let kernel: Vec<usize> = live.iter().enumerate().filter(|(_, b)| b.role == Role::Kernel).map(|(i, _)| i).collect();
    let kernel = [kernel[0], kernel[1], kernel[2]];
    let round = live.iter().position(|b| b.role == Role::Round).expect("the round buffer is never freed");
    // Every byte of what is left, as written.
    let survivors = check(&live)?;
    ensure_intact("after freeing", &survivors)?;
    let device_after_free = device_bytes(device);
    let (free_after_free, _) = mem_info()?;

    // The freed sizes again: served from what the frees left (soft mode: no new device memory).
    let mut again = Vec::new();
    for (n, b) in freed.iter().enumerate() {
        let ptr = alloc(b.bytes)?;
        again.push(Buffer { ptr, bytes: b.bytes, content: Content::Pattern(seed(100_000 + n)), role: b.role });
    }
    let device_reallocated = device_bytes(device);
    let (free_reallocated, _) = mem_info()?;
    for b in &again {
        write(&k, &stream, b)?;
    }
    live.append(&mut again);
    // Every byte of the old and the new buffers: none overlaps another.
    let all = check(&live)?;
    ensure_intact("with the freed sizes allocated again", &all)?;
    let split = live.len() - freed.len();
    for b in live.drain(split..) {
        free(b.ptr)?;
    }
    let device_refreed = device_bytes(device);

    // cuIpcGetMemHandle on a live buffer (soft mode refuses it: the memory may move).
    let mut handle = sys::CUipcMemHandle { reserved: [0; 64] };
    // SAFETY: a valid output handle; the pointer is a live allocation.
    let ipc = unsafe { sys::cuIpcGetMemHandle(&mut handle, live[0].ptr) };

    let bytes = |v: &[Buffer]| v.iter().map(|b| b.bytes).sum::<u64>();
    let count = |role: Role| live.iter().filter(|b| b.role == role).count();
    report::emit_now(
        "softmem",
        json!({
            "ready": true,
            "pid": std::process::id(),
            "device": device,
            "total": total,
            "free_start": free_start,
            "live": {
                "buffers": live.len(), "bytes": bytes(&live),
                "large": count(Role::Large), "small": count(Role::Small), "kernel": count(Role::Kernel),
                "round": count(Role::Round),
            },
            "freed": { "buffers": freed.len(), "bytes": bytes(&freed) },
            "verified": survivors.json(),
            "with_reallocated": all.json(),
            "kernel_elements": KERNEL_ELEMENTS,
            "ipc_code": code(ipc),
            "device_bytes": {
                "context": context_bytes,
                "first_small_alloc": first_cost,
                "full": device_full,
                "after_free": device_after_free,
                "reallocated": device_reallocated,
                "refreed": device_refreed,
                "ready": device_bytes(device),
            },
            "free": { "after_free": free_after_free, "reallocated": free_reallocated },
        }),
    );

    let mut verified_total = survivors.bytes;
    for r in 1..=rounds {
        if let Some(path) = wait_file.as_deref() {
            wait_for(path, wait_timeout)?;
        }
        let t = Instant::now();
        // A kernel first writes the round buffer (bringing the memory back if it was swapped out)...
        let value = 0xF0F0_0000 | r;
        live[round].content = Content::Fill(value);
        write(&k, &stream, &live[round])?;
        stream.synchronize().during("cuStreamSynchronize")?;
        // ...then every byte is read back, and a kernel reads two live buffers and writes a third.
        let c = check(&live)?;
        add(&k, &stream, [&live[kernel[0]], &live[kernel[1]], &live[kernel[2]]])?;
        let sum = check(std::slice::from_ref(&live[kernel[2]]))?;
        verified_total += c.bytes;
        let line = json!({
            "round": r,
            "verified": c.json(),
            "kernel": sum.json(),
            "ms": t.elapsed().as_secs_f64() * 1e3,
            "device_bytes": device_bytes(device),
        });
        report::emit_now("softmem", line);
        ensure_intact(&format!("round {r}"), &c)?;
        ensure_intact(&format!("round {r}: vector_add_f32"), &sum)?;
    }

    for b in live.drain(..) {
        free(b.ptr)?;
    }
    Ok(json!({
        "done": true,
        "rounds": rounds,
        "verified_bytes": verified_total,
        "device_bytes_end": device_bytes(device),
    }))
}
