//! The process checkpoint API from both sides: `checkpoint-tenant` holds device memory of every kind with
//! known contents and checks it on request (the process being checkpointed); `checkpoint-ctl` is the
//! controller, a separate process that loads `libcuda.so.1` with libloading (as the daemon does) and
//! calls `cuCheckpointProcess*` on a pid, as NVIDIA's `cuda-checkpoint` tool does.

use super::{open, vmm};
use crate::args::Args;
use crate::fail::{During, Failure, Outcome, ensure};
use crate::ptx::Kernels;
use crate::report;
use cudarc::driver::{result, sys};
use serde_json::{Value, json};
use std::ffi::c_int;
use std::io::BufRead;
use tessera_ffi::checkpoint::*;
use tessera_ffi::cuda::CuResult;

/// The byte at offset `i` of buffer `k`: differs between buffers and along each one.
fn pattern(k: usize, i: usize) -> u8 {
    ((i as u64).wrapping_mul(0x9E37_79B9).wrapping_add((k as u64 + 1) * 0x5851_F42D) >> 13) as u8
}

fn fill(k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| pattern(k, i)).collect()
}

/// CLOCK_MONOTONIC now (the same clock in every process), for ordering events between processes.
fn now_ns() -> u64 {
    tessera_region::futex::monotonic_ns()
}

/// Device memory of every kind, each buffer with its own pattern: cuMemAlloc (`--mib` MiB, an odd size
/// and a small one), a stream-ordered allocation, and a VMM mapping; with `--managed 1` also managed memory
/// (which cannot be checkpointed), and a 512x512 byte array. Reports its buffers, then serves stdin lines: `spin NS` queues a spin
/// kernel; `call` makes one driver call and reports when it returned; `verify` reads every buffer back at
/// its address and compares it byte for byte, then runs a kernel into the first one. Exits at EOF.
pub fn tenant(args: &Args) -> Outcome {
    let ctx = open(args)?;
    let ordinal = args.device()? as i32;
    let mib: usize = args.number("mib", 8)?;
    let stream = ctx.new_stream().during("cuStreamCreate")?;
    let kernels = Kernels::load(&ctx)?;
    let (free_before, _) = ctx.mem_get_info().during("cuMemGetInfo")?;
    let mut buffers: Vec<(u64, usize, &str)> = Vec::new();
    for (size, kind) in [(mib << 20, "alloc"), ((3 << 20) + 123, "alloc"), (4096, "alloc")] {
        // SAFETY: a plain allocation; freed at exit.
        let p = unsafe { result::malloc_sync(size) }.during("cuMemAlloc")?;
        buffers.push((p, size, kind));
    }
    let mut pooled = 0;
    // SAFETY: valid output pointer and stream; the allocation is ready once the stream is synchronized.
    unsafe { sys::cuMemAllocAsync(&mut pooled, 1 << 20, stream.cu_stream()) }.during("cuMemAllocAsync")?;
    stream.synchronize().during("cuStreamSynchronize")?;
    buffers.push((pooled, 1 << 20, "pool"));
    let prop = vmm::properties(ordinal);
    let size = 2 << 20;
    let va = vmm::reserve(size)?;
    let mut handle = 0;
    // SAFETY: valid output and properties pointers; size is a multiple of the 2 MiB granularity.
    unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) }.during("cuMemCreate")?;
    vmm::map(va, size, handle, ordinal)?;
    buffers.push((va, size, "vmm"));
    if args.number("managed", 0u32)? == 1 {
        let mut m = 0;
        // SAFETY: valid output pointer; CU_MEM_ATTACH_GLOBAL.
        unsafe { sys::cuMemAllocManaged(&mut m, 1 << 20, 1) }.during("cuMemAllocManaged")?;
        buffers.push((m, 1 << 20, "managed"));
    }
    // An array: opaque device memory, charged like the rest.
    let desc = sys::CUDA_ARRAY_DESCRIPTOR {
        Width: 512,
        Height: 512,
        Format: sys::CUarray_format::CU_AD_FORMAT_UNSIGNED_INT8,
        NumChannels: 1,
    };
    let mut array = std::ptr::null_mut();
    // SAFETY: valid output and descriptor pointers; destroyed at exit.
    unsafe { sys::cuArrayCreate_v2(&mut array, &desc) }.during("cuArrayCreate")?;
    for (k, &(p, len, _)) in buffers.iter().enumerate() {
        // SAFETY: `p` addresses `len` device bytes allocated above.
        unsafe { result::memcpy_htod_sync(p, &fill(k, len)) }.during("cuMemcpyHtoD")?;
    }
    let (free_after, _) = ctx.mem_get_info().during("cuMemGetInfo")?;
    let list: Vec<Value> = buffers.iter().map(|(p, len, kind)| json!({"addr": p, "size": len, "kind": kind})).collect();
    report::emit_now(
        "checkpoint-tenant",
        json!({
            "pid": std::process::id(), "buffers": list, "array_bytes": 512 * 512,
            "free_before": free_before, "free_after": free_after,
        }),
    );
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| Failure::new(format!("reading stdin: {e}")))?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["spin", ns] => {
                let ns = ns.parse().map_err(|_| Failure::new(format!("spin {ns}: not a number")))?;
                let launched = now_ns();
                kernels.spin(&stream, ns)?;
                json!({"spinning": ns, "launched_ns": launched})
            }
            ["call"] => {
                let asked = now_ns();
                let (free, _) = ctx.mem_get_info().during("cuMemGetInfo")?;
                json!({"asked_ns": asked, "returned_ns": now_ns(), "free": free})
            }
            ["verify"] => verify(&buffers, &kernels, &stream)?,
            _ => return Err(Failure::new(format!("unknown command {line:?}"))),
        };
        report::emit_now("checkpoint-tenant", reply);
    }
    // SAFETY: the mapping and allocations made above, each released once; the stream is idle.
    unsafe {
        sys::cuMemUnmap(va, size).during("cuMemUnmap")?;
        sys::cuMemRelease(handle).during("cuMemRelease")?;
        sys::cuMemAddressFree(va, size).during("cuMemAddressFree")?;
        sys::cuMemFreeAsync(pooled, stream.cu_stream()).during("cuMemFreeAsync")?;
        sys::cuArrayDestroy(array).during("cuArrayDestroy")?;
    }
    stream.synchronize().during("cuStreamSynchronize")?;
    for &(p, _, kind) in &buffers {
        if kind == "alloc" || kind == "managed" {
            // SAFETY: allocated with cuMemAlloc/cuMemAllocManaged above, freed once.
            unsafe { result::free_sync(p) }.during("cuMemFree")?;
        }
    }
    Ok(Value::Null)
}

/// Reads every buffer back and compares it with its pattern, then fills the first with a kernel.
fn verify(buffers: &[(u64, usize, &str)], kernels: &Kernels, stream: &cudarc::driver::CudaStream) -> Outcome {
    let mut bytes = 0;
    for (k, &(p, len, kind)) in buffers.iter().enumerate() {
        let mut got = vec![0u8; len];
        // SAFETY: `p` addresses `len` device bytes allocated by `tenant`.
        unsafe { result::memcpy_dtoh_sync(&mut got, p) }.during("cuMemcpyDtoH")?;
        if let Some(i) = (0..len).find(|&i| got[i] != pattern(k, i)) {
            return Err(Failure::new(format!(
                "{kind} buffer {k} at {p:#x}: byte {i} is {}, expected {}",
                got[i],
                pattern(k, i)
            )));
        }
        bytes += len;
    }
    let (p, len, _) = buffers[0];
    let n = (len / 4) as u64;
    // SAFETY: the first buffer holds `len` bytes, n u32s; the copy below synchronizes.
    unsafe { kernels.fill_u32(stream, p, 0x5EED_F00D, n) }?;
    stream.synchronize().during("cuStreamSynchronize")?;
    let mut words = vec![0u32; n as usize];
    // SAFETY: as above.
    unsafe { result::memcpy_dtoh_sync(&mut words, p) }.during("cuMemcpyDtoH")?;
    ensure(words.iter().all(|&w| w == 0x5EED_F00D), || "the kernel after the restore did not fill the buffer".into())?;
    // Put the pattern back so a later `verify` checks it again.
    // SAFETY: as above.
    unsafe { result::memcpy_htod_sync(p, &fill(0, len)) }.during("cuMemcpyHtoD")?;
    Ok(json!({"verified_bytes": bytes, "kernel_ok": true}))
}

/// The six functions, resolved from `libcuda.so.1` by name.
struct Api {
    _lib: libloading::Library,
    lock: LockFn,
    checkpoint: CheckpointFn,
    restore: RestoreFn,
    unlock: UnlockFn,
    state: GetStateFn,
    tid: GetRestoreThreadIdFn,
}

impl Api {
    fn load() -> Outcome<Api> {
        // SAFETY: loading the driver library runs its initializers, which have no preconditions.
        let lib = unsafe { libloading::Library::new("libcuda.so.1") }
            .map_err(|e| Failure::new(format!("loading libcuda.so.1: {e}")))?;
        fn get<T: Copy>(lib: &libloading::Library, name: &str) -> Outcome<T> {
            // SAFETY: each name is looked up with the type of its documented C signature.
            unsafe { lib.get::<T>(name.as_bytes()) }.map(|s| *s).map_err(|e| Failure::new(format!("{name}: {e}")))
        }
        let init: unsafe extern "C" fn(u32) -> CuResult = get(&lib, "cuInit")?;
        // SAFETY: cuInit(0) has no preconditions.
        let r = unsafe { init(0) };
        ensure(r == 0, || format!("cuInit returned {r}"))?;
        Ok(Api {
            lock: get(&lib, LOCK)?,
            checkpoint: get(&lib, CHECKPOINT)?,
            restore: get(&lib, RESTORE)?,
            unlock: get(&lib, UNLOCK)?,
            state: get(&lib, GET_STATE)?,
            tid: get(&lib, GET_RESTORE_THREAD_ID)?,
            _lib: lib,
        })
    }

    /// Runs one action on `pid`; `(code, value)` where value is the state or thread id for those actions.
    fn act(&self, action: &str, pid: c_int, arg: u64) -> Outcome<(CuResult, Option<i64>)> {
        let mut value: u32 = u32::MAX;
        let mut tid: c_int = -1;
        // SAFETY: every pointer passed is NULL or a valid, initialised structure of the documented type.
        let code = unsafe {
            match action {
                "lock" => {
                    let mut a = CUcheckpointLockArgs { timeout_ms: arg as u32, ..Default::default() };
                    (self.lock)(pid, &mut a)
                }
                "lock-dirty" => {
                    let mut a = CUcheckpointLockArgs { reserved0: 1, ..Default::default() };
                    (self.lock)(pid, &mut a)
                }
                "checkpoint" => (self.checkpoint)(pid, std::ptr::null_mut()),
                "restore" => (self.restore)(pid, std::ptr::null_mut()),
                "restore-remap" => {
                    let pairs = [0u8; 32];
                    let mut a = CUcheckpointRestoreArgs {
                        gpu_pairs: pairs.as_ptr().cast(),
                        gpu_pairs_count: 1,
                        reserved: [0; 44],
                        reserved1: 0,
                    };
                    (self.restore)(pid, &mut a)
                }
                "unlock" => (self.unlock)(pid, std::ptr::null_mut()),
                "state" => (self.state)(pid, &mut value),
                "tid" => (self.tid)(pid, &mut tid),
                _ => return Err(Failure::new(format!("unknown action {action:?}"))),
            }
        };
        let v = match action {
            "state" if code == 0 => Some(value as i64),
            "tid" if code == 0 => Some(tid as i64),
            _ => None,
        };
        Ok((code, v))
    }
}

/// Reads `ACTION PID [ARG]` lines (actions: lock [timeout ms], lock-dirty, checkpoint, restore,
/// restore-remap, unlock, state, tid) and answers each with one JSON line: the `CUresult`, the state or
/// thread id, and when the call started and returned.
pub fn ctl(_args: &Args) -> Outcome {
    let api = Api::load()?;
    report::emit_now("checkpoint-ctl", json!({"ready": true, "pid": std::process::id()}));
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| Failure::new(format!("reading stdin: {e}")))?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let (action, pid, arg) = match words.as_slice() {
            [a, p] => (*a, *p, "0"),
            [a, p, x] => (*a, *p, *x),
            _ => return Err(Failure::new(format!("expected ACTION PID [ARG], got {line:?}"))),
        };
        let pid: c_int = pid.parse().map_err(|_| Failure::new(format!("pid {pid:?}")))?;
        let arg: u64 = arg.parse().map_err(|_| Failure::new(format!("argument {arg:?}")))?;
        let started = now_ns();
        let (code, value) = api.act(action, pid, arg)?;
        report::emit_now(
            "checkpoint-ctl",
            json!({"action": action, "pid": pid, "code": code, "value": value, "started_ns": started, "returned_ns": now_ns()}),
        );
    }
    Ok(Value::Null)
}
