//! Memory quotas under the shim: the boundary on every allocation path, the figures programs see,
//! contexts' cost, processes and threads sharing a quota, reclaim after SIGKILL, and refused settings.
//! Each test uses the 4 GiB `small` device (contexts cost 128 MiB) and a region file of its own.

use crate::common;

use common::{GIB, Guarded, INVALID_VALUE, MIB, OUT_OF_MEMORY, Sim, at, finish, first_line, go, u64_at};
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use tessera_region::{MAX_VGPUS, NAME_LEN, ProcSlot, Region, VgpuSlot};

/// What a context costs on the `small` profile.
const CONTEXT: u64 = 128 * MIB;

/// A region file private to one test, removed when dropped.
struct RegionFile(PathBuf);

impl RegionFile {
    fn new(tag: &str) -> RegionFile {
        let p = std::env::temp_dir().join(format!("tessera-quota-test-{}-{tag}.region", std::process::id()));
        let _ = std::fs::remove_file(&p);
        RegionFile(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("UTF-8 temp path")
    }

    /// Bytes vGPU `name` has in use on device 0, read from the file as other processes see it.
    fn used(&self, name: &str) -> u64 {
        let bytes = std::fs::read(&self.0).expect("read the region file");
        assert_eq!(bytes.len(), size_of::<Region>());
        (0..MAX_VGPUS)
            .map(|i| offset_of!(Region, vgpus) + i * size_of::<VgpuSlot>())
            .find(|&slot| {
                let n = &bytes[slot + offset_of!(VgpuSlot, config.name)..][..NAME_LEN];
                n.starts_with(name.as_bytes()) && n[name.len()] == 0
            })
            .map(|slot| {
                // The vGPU's usage is the sum of its process slots' (below the high-water mark).
                let word = |at: usize, n: usize| bytes[at..at + n].iter().rev().fold(0u64, |w, &b| (w << 8) | b as u64);
                let hwm = word(slot + offset_of!(VgpuSlot, live.procs_hwm), 4) as usize;
                let procs = slot + offset_of!(VgpuSlot, live.procs);
                (0..hwm).map(|p| word(procs + p * size_of::<ProcSlot>() + offset_of!(ProcSlot, used), 8)).sum()
            })
            .unwrap_or_else(|| panic!("no vGPU {name:?} in the region"))
    }
}

impl Drop for RegionFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The `small` machine under the shim with `TESSERA_MEMORY_LIMIT=limit` and the test's region file.
fn quota_sim(tag: &str, limit: &str, region: &RegionFile) -> Sim {
    Sim::shimmed(tag)
        .with("SIMGPU_DEVICES", "small")
        .with("TESSERA_MEMORY_LIMIT", limit)
        .with("TESSERA_REGION", region.path())
}

/// Checks the boundary of one allocation path with a 512 MiB quota.
fn boundary(path: &str) {
    let region = RegionFile::new(&format!("boundary-{path}"));
    let r = quota_sim(&format!("boundary-{path}"), "512MiB", &region).ok(&["quota-boundary", "--path", path]);
    let size = u64_at(&r, "size");
    assert_eq!(u64_at(&r, "total"), 512 * MIB, "{r}");
    assert_eq!(u64_at(&r, "free_before"), 512 * MIB - CONTEXT, "the context counts: {r}");
    assert_eq!(u64_at(&r, "free_with_filler"), size, "{r}");
    assert_eq!(u64_at(&r, "exact"), 0, "exactly the limit succeeds: {r}");
    assert_eq!(u64_at(&r, "free_at_limit"), 0, "{r}");
    assert_eq!(u64_at(&r, "smallest_over"), OUT_OF_MEMORY, "the smallest request over the limit fails: {r}");
    assert_eq!(u64_at(&r, "free_after_free"), size, "freeing gives the bytes back: {r}");
    assert_eq!(u64_at(&r, "one_step_over"), OUT_OF_MEMORY, "one step more than the room fails: {r}");
    assert_eq!(u64_at(&r, "again"), 0, "freeing makes room again: {r}");
    assert_eq!(u64_at(&r, "free_end"), u64_at(&r, "free_before"), "{r}");
    assert!(!region.0.exists(), "a process without TESSERA_VGPU has a private quota and needs no region file");
}

macro_rules! boundary_tests {
    ($($name:ident => $path:literal;)*) => {
        $(
            #[test]
            fn $name() {
                boundary($path);
            }
        )*
    };
}

boundary_tests! {
    boundary_cu_mem_alloc => "alloc";
    boundary_cu_mem_alloc_pitch => "pitch";
    boundary_cu_mem_alloc_managed => "managed";
    boundary_cu_mem_alloc_async => "async";
    boundary_cu_mem_alloc_from_pool_async => "pool";
    boundary_cu_mem_create => "vmm";
    boundary_cu_array_create => "array";
    boundary_cu_array_3d_create => "array3d";
    boundary_cu_mipmapped_array_create => "mipmap";
}

#[test]
fn refused_request_is_logged_once_with_quota_and_request() {
    let region = RegionFile::new("log");
    let run = quota_sim("log", "512MiB", &region).run(&["alloc", "--bytes", "1GiB", "--hold-ms", "0"]);
    assert!(run.success, "{}", run.stderr);
    assert_eq!(u64_at(&run.json, "cuda_error"), OUT_OF_MEMORY);
    let lines: Vec<&str> = run.stderr.lines().filter(|l| l.contains("refused")).collect();
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    for part in ["cuMemAlloc", "1073741824 bytes", "512.0 MiB", "quota"] {
        assert!(lines[0].contains(part), "{part:?} missing from {:?}", lines[0]);
    }
}

#[test]
fn programs_see_the_quota_as_their_memory() {
    let region = RegionFile::new("figures");
    let r = quota_sim("figures", "1GiB", &region).ok(&["mem-info", "--alloc", "64MiB"]);
    let used = CONTEXT + 64 * MIB;
    assert_eq!(u64_at(&r, "total"), GIB, "{r}");
    assert_eq!(u64_at(&r, "free"), GIB - used);
    assert_eq!(u64_at(&r, "total_mem"), GIB);
    for v in ["nvml.v1", "nvml.v2"] {
        assert_eq!(u64_at(&r, &format!("{v}.code")), 0, "{r}");
        assert_eq!(u64_at(&r, &format!("{v}.total")), GIB, "{r}");
        assert_eq!(u64_at(&r, &format!("{v}.used")), used, "{r}");
        assert_eq!(u64_at(&r, &format!("{v}.free")), GIB - used, "{r}");
    }
    assert_eq!(u64_at(&r, "nvml.v2.reserved"), 0);
    // NULL outputs are refused as the driver and NVML refuse them.
    for k in ["total_mem", "mem_get_info_free", "mem_get_info_total"] {
        assert_eq!(u64_at(&r, &format!("null_codes.{k}")), INVALID_VALUE, "{k}: {r}");
    }
    assert_eq!(u64_at(&r, "nvml.null_v1"), 2, "NVML_ERROR_INVALID_ARGUMENT");
    assert_eq!(u64_at(&r, "nvml.null_v2"), 2, "NVML_ERROR_INVALID_ARGUMENT");
}

#[test]
fn per_device_and_oversized_limits() {
    let region = RegionFile::new("per-device");
    let r = quota_sim("per-device", "0=768MiB", &region).ok(&["mem-info"]);
    assert_eq!(u64_at(&r, "total"), 768 * MIB, "{r}");
    assert_eq!(u64_at(&r, "nvml.v1.total"), 768 * MIB, "{r}");
    // A quota larger than the device shows the device: free never exceeds what the driver has.
    let r = quota_sim("oversized", "8GiB", &region).ok(&["mem-info"]);
    assert_eq!(u64_at(&r, "total"), 4 * GIB, "{r}");
    assert_eq!(u64_at(&r, "free"), 4 * GIB - CONTEXT, "{r}");
    // A device without a limit shows the device.
    let r = quota_sim("other-device", "1=1GiB", &region).ok(&["mem-info"]);
    assert_eq!(u64_at(&r, "total"), 4 * GIB, "{r}");
}

#[test]
fn without_settings_the_shim_changes_nothing_and_needs_no_region() {
    let region = RegionFile::new("transparent");
    let plain = Sim::new("plain").without_shim().with("SIMGPU_DEVICES", "small").ok(&["mem-info"]);
    let shimmed = Sim::shimmed("shimmed")
        .with("SIMGPU_DEVICES", "small")
        .with("TESSERA_REGION", region.path())
        .ok(&["mem-info", "--alloc", "0"]);
    assert_eq!(plain, shimmed);
    assert_eq!(u64_at(&shimmed, "total"), 4 * GIB);
    assert!(!region.0.exists(), "no quota, no region file");
}

#[test]
fn nvml_only_tools_see_the_quota_without_loading_the_driver() {
    const SCRIPT: &str = r#"
import ctypes
n = ctypes.CDLL("libnvidia-ml.so.1")
h = ctypes.c_void_p()
m = (ctypes.c_ulonglong * 3)()
codes = [n.nvmlInit_v2(), n.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)), n.nvmlDeviceGetMemoryInfo(h, m)]
cuda = any("libcuda" in line for line in open("/proc/self/maps"))
print(codes, list(m), cuda)
"#;
    let region = RegionFile::new("nvml-only");
    let out =
        quota_sim("nvml-only", "1GiB", &region).command_for("python3", &["-c", SCRIPT]).output().expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    // total, free, used: the quota, all of it free; the CUDA driver was never loaded to map the device.
    assert_eq!(stdout.trim(), format!("[0, 0, 0] [{GIB}, {GIB}, 0] False"));
}

#[test]
fn contexts_cost_memory_and_their_teardown_gives_it_back() {
    let region = RegionFile::new("contexts");
    let r = quota_sim("contexts", "512MiB", &region).ok(&["quota-contexts", "--bytes", "16MiB"]);
    assert_eq!(u64_at(&r, "created"), 0, "{r}");
    assert_eq!(u64_at(&r, "free_before") - u64_at(&r, "free_with_context"), CONTEXT, "{r}");
    assert_eq!(u64_at(&r, "free_with_context") - u64_at(&r, "free_with_allocations"), 17 * MIB, "{r}");
    assert_eq!(u64_at(&r, "free_after"), u64_at(&r, "free_before"), "cuCtxDestroy frees its allocations: {r}");
}

#[test]
fn contexts_over_the_quota_are_refused() {
    let region = RegionFile::new("context-over");
    // The second context's cost is known, so it is refused before the driver is asked.
    let r = quota_sim("context-over", "200MiB", &region).ok(&["quota-contexts"]);
    assert_eq!(u64_at(&r, "created"), OUT_OF_MEMORY, "{r}");
    // The first context is measured, found over the quota, and destroyed again.
    let run = quota_sim("context-first", "100MiB", &region).run(&["mem-info"]);
    assert!(!run.success);
    assert_eq!(u64_at(&run.json, "cuda_error"), OUT_OF_MEMORY, "{}", run.stderr);
    assert!(run.stderr.contains("context creation"), "{}", run.stderr);
}

/// Starts a `quota-race` process and waits for its `ready` line.
fn racer(sim: &Sim, chunk: &str) -> Guarded {
    let mut child = sim.spawn(&["quota-race", "--chunk", chunk]);
    let ready = first_line(&mut child);
    assert_eq!(at(&ready, "ready"), true, "{ready}");
    child
}

#[test]
fn processes_sharing_a_quota_never_overshoot_it() {
    let region = RegionFile::new("race");
    let sim = quota_sim("race", "1GiB", &region).with("TESSERA_VGPU", "race").with("TESSERA_LOG", "error");
    let mut racers: Vec<Guarded> = (0..2).map(|_| racer(&sim, "1MiB")).collect();
    for r in &mut racers {
        go(r);
    }
    let results: Vec<_> = racers.iter_mut().map(|r| first_line(r)).collect();
    let chunks: u64 = results.iter().map(|r| u64_at(r, "chunks")).sum();
    for r in &results {
        assert_eq!(u64_at(r, "refused_with"), OUT_OF_MEMORY, "{r}");
        assert_eq!(u64_at(r, "free_after"), 0, "{r}");
    }
    // Two contexts and every granted chunk fill the quota exactly: nothing over, nothing lost.
    assert_eq!(chunks * MIB + 2 * CONTEXT, GIB, "{results:?}");
    assert_eq!(region.used("race"), GIB);
    for r in racers {
        finish(r);
    }
    assert_eq!(region.used("race"), 0, "both exited cleanly: contexts and chunks given back");
}

#[test]
fn threads_allocating_and_freeing_concurrently_end_with_nothing_used() {
    let region = RegionFile::new("threads");
    // 6 MiB of room beside the context: four 1-2 MiB blocks per thread cannot all fit.
    let sim = quota_sim("threads", "134MiB", &region).with("TESSERA_VGPU", "threads").with("TESSERA_LOG", "error");
    let r = sim.ok(&["quota-threads", "--threads", "8", "--rounds", "200"]);
    assert_eq!(u64_at(&r, "free_before"), 6 * MIB, "{r}");
    assert_eq!(u64_at(&r, "free_after"), 6 * MIB, "{r}");
    assert!(u64_at(&r, "granted") > 0 && u64_at(&r, "refused") > 0, "{r}");
    assert_eq!(region.used("threads"), 0, "{r}");
}

#[test]
fn memory_of_a_killed_process_is_reclaimed_for_the_others() {
    let region = RegionFile::new("sigkill");
    let sim = quota_sim("sigkill", "1GiB", &region).with("TESSERA_VGPU", "shared").with("TESSERA_LOG", "error");
    let mut survivor = racer(&sim, "1MiB");
    let mut victim = sim.spawn(&["alloc", "--bytes", "512MiB"]);
    assert_eq!(at(&first_line(&mut victim), "allocated"), true);
    assert_eq!(region.used("shared"), 2 * CONTEXT + 512 * MIB);
    victim.kill().expect("SIGKILL");
    victim.wait().expect("reap");
    // Nothing ran in the victim: the survivor's allocations find it dead and take back its bytes.
    go(&mut survivor);
    let r = first_line(&mut survivor);
    assert_eq!(u64_at(&r, "chunks") * MIB, GIB - CONTEXT, "{r}");
    finish(survivor);
    assert_eq!(region.used("shared"), 0);
}

#[test]
fn a_killed_processs_bytes_return_within_a_second_of_the_next_allocation() {
    let region = RegionFile::new("sigkill-gate");
    let sim = quota_sim("sigkill-gate", "1GiB", &region).with("TESSERA_VGPU", "gate");
    let mut survivor = sim.spawn(&["quota-race", "--chunk", "1MiB", "--count", "1"]);
    assert_eq!(at(&first_line(&mut survivor), "ready"), true);
    let mut victim = sim.spawn(&["alloc", "--bytes", "256MiB"]);
    assert_eq!(at(&first_line(&mut victim), "allocated"), true);
    victim.kill().expect("SIGKILL");
    victim.wait().expect("reap");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(region.used("gate"), 2 * CONTEXT + 256 * MIB, "nobody allocated yet: nothing reclaimed");
    // An allocation that fits anyway still scans, at most once a second, and finds the victim dead.
    go(&mut survivor);
    let r = first_line(&mut survivor);
    assert_eq!(u64_at(&r, "chunks"), 1, "{r}");
    assert_eq!(region.used("gate"), CONTEXT + MIB);
    finish(survivor);
}

#[test]
fn vmm_memory_stays_charged_while_mapped_or_retained() {
    let region = RegionFile::new("vmm");
    let r = quota_sim("vmm", "512MiB", &region).ok(&["quota-vmm"]);
    let (before, size) = (u64_at(&r, "free_before"), u64_at(&r, "size"));
    assert_eq!(u64_at(&r, "free_released_but_mapped"), before - size, "a mapping keeps it: {r}");
    assert_eq!(u64_at(&r, "free_retained"), before - size, "a retained handle keeps it: {r}");
    assert_eq!(u64_at(&r, "free_after"), before, "the last reference gives it back: {r}");
}

#[test]
fn processes_without_a_name_have_quotas_of_their_own() {
    let region = RegionFile::new("private");
    let sim = quota_sim("private", "512MiB", &region);
    let mut first = sim.spawn(&["alloc", "--bytes", "384MiB"]);
    assert_eq!(at(&first_line(&mut first), "allocated"), true);
    let second = sim.ok(&["alloc", "--bytes", "384MiB", "--hold-ms", "0"]);
    assert_eq!(at(&second, "allocated"), true, "{second}");
    finish(first);
    assert!(!region.0.exists());
}

#[test]
fn a_conflicting_limit_is_refused_and_no_limit_adopts_the_vgpus() {
    let region = RegionFile::new("conflict");
    let sim = quota_sim("conflict", "1GiB", &region).with("TESSERA_VGPU", "team");
    let mut holder = sim.spawn(&["alloc", "--bytes", "1MiB"]);
    assert_eq!(at(&first_line(&mut holder), "allocated"), true);
    // Other simulated machines, the same region: the vGPU is what they share.
    let run = quota_sim("conflict-2", "2GiB", &region).with("TESSERA_VGPU", "team").run(&["mem-info"]);
    assert!(!run.success);
    assert_eq!(u64_at(&run.json, "cuda_error"), INVALID_VALUE);
    assert!(run.stderr.contains("conflicts") && run.stderr.contains(region.path()), "{}", run.stderr);
    let adopted = Sim::shimmed("conflict-adopt")
        .with("SIMGPU_DEVICES", "small")
        .with("TESSERA_REGION", region.path())
        .with("TESSERA_VGPU", "team")
        .ok(&["mem-info"]);
    assert_eq!(u64_at(&adopted, "total"), GIB, "{adopted}");
    finish(holder);
}

#[test]
fn malformed_settings_fail_cu_init_naming_the_variable() {
    let region = RegionFile::new("malformed");
    for (var, value) in [
        ("TESSERA_MEMORY_LIMIT", "lots"),
        ("TESSERA_MEMORY_LIMIT", "0"),
        ("TESSERA_MEMORY_LIMIT", "-1GiB"),
        ("TESSERA_MEMORY_LIMIT", "99=1GiB"),
        ("TESSERA_VGPU", "a/b"),
    ] {
        let run = quota_sim("malformed", "512MiB", &region).with(var, value).run(&["mem-info"]);
        assert!(!run.success, "{var}={value}");
        assert_eq!(u64_at(&run.json, "cuda_error"), INVALID_VALUE, "{var}={value}: {}", run.stderr);
        assert!(run.stderr.contains(var), "{var}={value}: {}", run.stderr);
    }
}

#[test]
fn unusable_region_files_fail_cu_init_naming_the_file() {
    let region = RegionFile::new("unusable");
    let cases: [(&str, Option<Vec<u8>>); 3] = [
        ("foreign", Some(b"not a tessera region".to_vec())),
        ("wrong magic", Some(vec![0xAB; size_of::<Region>()])),
        ("truncated", Some(vec![0; size_of::<Region>() / 2])),
    ];
    for (what, content) in cases {
        std::fs::write(&region.0, content.unwrap()).unwrap();
        let run = quota_sim("unusable", "512MiB", &region).with("TESSERA_VGPU", "v").run(&["mem-info"]);
        assert!(!run.success, "{what}");
        assert_eq!(u64_at(&run.json, "cuda_error"), INVALID_VALUE, "{what}: {}", run.stderr);
        assert!(run.stderr.contains(region.path()), "{what}: {}", run.stderr);
    }
    let run = quota_sim("unusable", "512MiB", &region)
        .with("TESSERA_VGPU", "v")
        .with("TESSERA_REGION", "/nonexistent-dir/tessera.region")
        .run(&["mem-info"]);
    assert_eq!(u64_at(&run.json, "cuda_error"), INVALID_VALUE, "{}", run.stderr);
    assert!(run.stderr.contains("/nonexistent-dir/tessera.region"), "{}", run.stderr);
}

/// Watches the simulated device's memory in use (every process of `sim` belongs to one vGPU) on a thread
/// of its own until the returned flag is set; the thread returns the most it saw.
fn watch_device(sim: &Sim) -> (std::sync::Arc<std::sync::atomic::AtomicBool>, std::thread::JoinHandle<u64>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let state = sim.driver_state();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let watcher = std::thread::spawn(move || {
        let mut most = 0;
        while !flag.load(Ordering::Acquire) {
            most = most.max(state.device(0).used_memory.load(Ordering::Acquire));
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        most
    });
    (stop, watcher)
}

/// Starts `n` processes at once that each create a context and hold it; returns those that got one (still
/// holding it) and the stderr of those refused (checked to have failed with `CUDA_ERROR_OUT_OF_MEMORY`).
fn start_at_once(sim: &Sim, n: usize) -> (Vec<Guarded>, Vec<String>) {
    let children: Vec<Guarded> =
        (0..n).map(|_| sim.spawn(&["quota-race", "--chunk", "1MiB", "--count", "0"])).collect();
    let (mut holding, mut refused) = (Vec::new(), Vec::new());
    for mut c in children {
        let line = first_line(&mut c);
        if at(&line, "ready") == true {
            holding.push(c);
            continue;
        }
        let out = c.into_child().wait_with_output().expect("a refused process");
        assert_eq!(u64_at(&line, "cuda_error"), OUT_OF_MEMORY, "{line}");
        assert!(!out.status.success());
        refused.push(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    (holding, refused)
}

#[test]
fn contexts_starting_at_once_on_a_nearly_full_quota_are_reserved_before_they_are_created() {
    // 500 MiB contexts on a quota of three and a half.
    let region = RegionFile::new("contexts-at-once");
    let sim = quota_sim("contexts-at-once", "1750MiB", &region)
        .with("SIMGPU_MEMORY", "16GiB")
        .with("SIMGPU_CONTEXT_MEMORY", "500MiB")
        .with("TESSERA_VGPU", "ctx")
        .with("TESSERA_LOG", "info");
    let (stop, watcher) = watch_device(&sim);
    // Nobody knows the cost yet: the first measures it (one at a time across the vGPU, holding the room
    // left), the others reserve what it found before creating theirs.
    let (holding, refused) = start_at_once(&sim, 8);
    assert_eq!((holding.len(), refused.len()), (3, 5));
    assert_eq!(region.used("ctx"), 1500 * MIB);
    // The quota now has 250 MiB left, less than one context: the next eight know the cost and are refused
    // before the driver is asked.
    let (late, refused_late) = start_at_once(&sim, 8);
    assert!(late.is_empty());
    stop.store(true, std::sync::atomic::Ordering::Release);
    let most = watcher.join().unwrap();
    assert!(most <= 1750 * MIB, "the driver had {most} bytes in use, over the 1750 MiB quota");
    for stderr in refused.iter().chain(&refused_late) {
        assert!(stderr.contains("context creation") && stderr.contains("refused"), "{stderr}");
        assert!(stderr.contains("1.7 GiB"), "the message names the quota: {stderr}");
        assert!(
            !stderr.contains("a context on device 0 costs"),
            "created and measured before it was refused: {stderr}"
        );
    }
    for c in holding {
        finish(c);
    }
    assert_eq!(region.used("ctx"), 0);
}
