//! The scenarios, each in its own module, and the helpers they share.

mod alloc;
mod arrivals;
mod attributes;
mod checkpoint;
mod churn;
mod graph;
mod kernels;
mod perthread;
mod procaddress;
mod quota;
mod roundtrip;
mod snapbench;
mod softbench;
mod softmem;
mod stubs;
mod timing;
mod vmm;

use crate::args::Args;
use crate::fail::{During, Failure, Outcome};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, sys};
use std::sync::Arc;

/// A scenario: name, options it accepts, what it does, and its entry point.
struct Scenario {
    name: &'static str,
    options: &'static [&'static str],
    summary: &'static str,
    run: fn(&Args) -> Outcome,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "attributes",
        options: &[],
        summary: "driver version and every device's name, memory, attributes, UUID and PCI ids",
        run: attributes::run,
    },
    Scenario {
        name: "roundtrip",
        options: &["device", "elements"],
        summary: "htod/dtoh/dtod, memsets, async copies, pitch and managed memory, address ranges, pointer attributes",
        run: roundtrip::run,
    },
    Scenario {
        name: "kernels",
        options: &["device", "elements"],
        summary: "PTX module with the built-ins; fill_u32, vector_add_f32 and saxpy_f32 checked element-wise",
        run: kernels::run,
    },
    Scenario {
        name: "spin",
        options: &["device", "ns", "count"],
        summary: "times --count spin(--ns) kernels with events",
        run: timing::spin,
    },
    Scenario {
        name: "saturate",
        options: &["device", "ns", "seconds", "depth", "stamps-file"],
        summary: "keeps the engine busy with spin(--ns) kernels for --seconds, at most --depth queued; with --stamps-file, spin_stamp kernels whose start and end (%globaltimer) go to that file, a line each",
        run: timing::saturate,
    },
    Scenario {
        name: "arrivals",
        options: &["device", "ns", "burst", "count", "gap", "seconds"],
        summary: "bursts of --burst spin(--ns) kernels after idle gaps of --gap; engine start of each burst's first kernel after its launch call (from SIMGPU_ENGINE_TRACE; without it, the host's wait beyond the kernels' time)",
        run: arrivals::arrivals,
    },
    Scenario {
        name: "vmm",
        options: &["device"],
        summary: "reserve two ranges, map one physical handle at A, write, remap at B, read back",
        run: vmm::run,
    },
    Scenario {
        name: "alloc",
        options: &["device", "bytes", "hold-ms"],
        summary: "cuMemAlloc --bytes, report, hold until stdin closes (or --hold-ms), free",
        run: alloc::run,
    },
    Scenario {
        name: "graph",
        options: &["device", "elements"],
        summary: "capture kernel launches on a stream into a graph, instantiate, launch twice, verify",
        run: graph::run,
    },
    Scenario {
        name: "procaddress",
        options: &[],
        summary: "cuGetProcAddress (v1, v2, v2_ptsz) against dlsym for every row of the probed table",
        run: procaddress::run,
    },
    Scenario {
        name: "stubs",
        options: &[],
        summary: "entry points the simulation does not implement answer CUDA_ERROR_NOT_SUPPORTED",
        run: stubs::run,
    },
    Scenario {
        name: "quota-boundary",
        options: &["device", "path"],
        summary: "fill the quota so one request of --path (alloc|pitch|managed|async|pool|vmm|array|array3d|mipmap) fits exactly; check its boundary",
        run: quota::boundary,
    },
    Scenario {
        name: "quota-race",
        options: &["device", "chunk", "count"],
        summary: "report ready, wait for a stdin line, allocate --chunk blocks until refused (or --count), report, hold until stdin closes",
        run: quota::race,
    },
    Scenario {
        name: "quota-threads",
        options: &["device", "threads", "rounds"],
        summary: "--threads threads allocate and free 1-2 MiB blocks --rounds times; granted, refused, free before and after",
        run: quota::threads,
    },
    Scenario {
        name: "quota-contexts",
        options: &["device", "bytes"],
        summary: "cuCtxCreate a second context, allocate --bytes and an array in it, destroy it; free memory at each step",
        run: quota::contexts,
    },
    Scenario {
        name: "mem-info",
        options: &["device", "alloc"],
        summary: "cuMemGetInfo, cuDeviceTotalMem and NVML memory info (v1, v2) with --alloc bytes held; NULL-output codes",
        run: quota::mem_info_scenario,
    },
    Scenario {
        name: "softbench",
        options: softbench::OPTIONS,
        summary: "soft-memory benchmark workloads (--part alloc|swap|defrag), driven by benches/src/bin/softmem.rs",
        run: softbench::run,
    },
    Scenario {
        name: "quota-vmm",
        options: &["device"],
        summary: "cuMemCreate, map, release the handle, retain it back, unmap, release: free memory at each step",
        run: quota::vmm_lifetime,
    },
    Scenario {
        name: "ptsz-free",
        options: &["device", "ns"],
        summary: "on the thread's default stream (the _ptsz entry points, NULL stream): cuMemAllocAsync, spin(--ns), cuMemFreeAsync; whether the kernel had finished when the free returned",
        run: perthread::free_after_kernel,
    },
    Scenario {
        name: "churn",
        options: churn::OPTIONS,
        summary: "cuMemAlloc and at once cuMemFree of random --min..--max sizes for --seconds (0: until killed), after --exhaust-fds 1 left no descriptor; granted and refused",
        run: churn::run,
    },
    Scenario {
        name: "softmem",
        options: &["device", "mib", "free-large", "free-small", "rounds", "wait-file", "wait-timeout"],
        summary: "large and small buffers (--mib in all) with distinct contents, every --free-large/--free-small-th freed and allocated again; ready, then per --rounds trigger (--wait-file appears) every byte checked and vector_add_f32 run",
        run: softmem::run,
    },
    Scenario {
        name: "snapbench",
        options: &["device", "mib", "chunk-mib"],
        summary: "--mib MiB of device memory in --chunk-mib allocations; serves stdin lines dtoh | htod | verify, timing the copies",
        run: snapbench::run,
    },
    Scenario {
        name: "checkpoint-tenant",
        options: &["device", "mib", "managed"],
        summary: "device memory of every kind with known bytes (--mib, --managed 1); serves stdin lines spin NS | call | verify",
        run: checkpoint::tenant,
    },
    Scenario {
        name: "checkpoint-ctl",
        options: &[],
        summary: "controller: stdin lines ACTION PID [ARG] call cuCheckpointProcess* (loaded with libloading); one JSON line each",
        run: checkpoint::ctl,
    },
];

/// Help text listing every scenario.
pub fn usage() -> String {
    let mut s = String::from("usage: simgpu-probe SCENARIO [--option value ...]\n\nscenarios:\n");
    for sc in SCENARIOS {
        let opts: Vec<String> = sc.options.iter().map(|o| format!("--{o}")).collect();
        s.push_str(&format!("  {:<12} {} [{}]\n", sc.name, sc.summary, opts.join(" ")));
    }
    s
}

/// Runs the scenario `name` with options `rest`.
pub fn run(name: &str, rest: &[String]) -> Outcome {
    let sc = SCENARIOS
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| Failure::new(format!("unknown scenario {name:?}\n{}", usage())))?;
    let args = Args::parse(rest, sc.options)?;
    (sc.run)(&args)
}

/// The primary context of the device `--device` names (initializing the driver).
fn open(args: &Args) -> Outcome<Arc<CudaContext>> {
    context(args.device()?)
}

/// The primary context of device `ordinal` (initializing the driver).
fn context(ordinal: usize) -> Outcome<Arc<CudaContext>> {
    CudaContext::new(ordinal).during(&format!("CudaContext::new({ordinal})"))
}

/// A timing-enabled event pair's flags.
const TIMED: Option<sys::CUevent_flags> = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);

/// The raw device address of `slice`, for calls cudarc does not wrap. Work using it must be queued on
/// `stream` (cudarc orders its own use of the slice there).
fn dptr<T>(slice: &CudaSlice<T>, stream: &Arc<CudaStream>) -> sys::CUdeviceptr {
    let (ptr, _sync) = slice.device_ptr(stream);
    ptr
}
