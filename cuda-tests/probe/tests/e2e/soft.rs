//! Soft memory mode end to end: soft memory behaves as the driver's own for every copy, memset, pitch,
//! address query and kernel; pointers and data survive pooling, defragmentation and swapping, also when
//! the requests come while the process works; soft vGPUs whose quotas add up to twice the device both
//! finish, taking turns through swapping; a process killed while swapped out leaks nothing; a hard-mode
//! vGPU is never swapped; and an allocation waiting for memory gets it once it is freed.
//!
//! The working set is the probe's `softmem` scenario: large (whole-page) and small (sub-allocated)
//! buffers with distinct contents, a scattered part of them freed; after it says it is ready it waits
//! for a trigger file and then checks every byte and runs a kernel on its buffers. The simulated device
//! has 2 MiB pages, so soft mode takes device memory in chunks of 8 pages (16 MiB).

use crate::common;

use common::tessera::Machine;
use common::{Guarded, MIB, OUT_OF_MEMORY, Sim, at, u64_at};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Device memory soft mode takes at a time: 8 pages of 2 MiB.
const CHUNK: u64 = 16 * MIB;
/// What a context costs on the `small` profile.
const SMALL_CONTEXT: u64 = 128 * MIB;
/// Longest a probe may take to say what the test waits for (setups and rounds take well under a second
/// alone; this leaves room for a loaded machine).
const PATIENCE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------------
// Helpers

/// A running probe: its stdout lines and stderr are collected by threads of their own (so a full pipe
/// never blocks it), and it is killed if the test ends early ([`Guarded`]).
struct Probe {
    child: Guarded,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    what: String,
}

impl Probe {
    fn start(mut cmd: Command, what: &str) -> Probe {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = Guarded::spawn(&mut cmd).unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let (tx, lines) = channel();
        let out = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (mut err, sink) = (child.stderr.take().expect("piped stderr"), stderr.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Probe { child, lines, stderr, what: what.to_string() }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The next JSON line it prints (within [`PATIENCE`]); fails the test if it ends or stays silent.
    fn next(&mut self) -> Value {
        match self.lines.recv_timeout(PATIENCE) {
            Ok(line) => serde_json::from_str(&line).unwrap_or_else(|e| {
                panic!("{} printed {line:?}, not JSON ({e}); stderr:\n{}", self.what, self.stderr())
            }),
            Err(RecvTimeoutError::Timeout) => {
                panic!("{} said nothing for {PATIENCE:?}; stderr:\n{}", self.what, self.stderr())
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().ok();
                panic!("{} ended ({status:?}) before printing what was expected; stderr:\n{}", self.what, self.stderr())
            }
        }
    }

    /// The next line, which must carry `key` (e.g. `ready`, `round`); a failure report fails the test.
    fn expect(&mut self, key: &str) -> Value {
        let v = self.next();
        assert!(
            v.get(key).is_some(),
            "{} printed {v} instead of a {key:?} line; stderr:\n{}",
            self.what,
            self.stderr()
        );
        v
    }

    /// Waits for it to exit (within [`PATIENCE`]): its status, the lines it printed still unread, and its
    /// stderr.
    fn finish(mut self) -> (ExitStatus, Vec<Value>, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait for the probe") {
                break s;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "{} did not exit within {PATIENCE:?}; stderr:\n{}",
                self.what,
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        // The reader thread ends at EOF; collect everything it forwarded.
        let mut lines = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            lines.push(serde_json::from_str(&line).unwrap_or(Value::String(line)));
        }
        // Give the stderr thread a moment to drain the pipe.
        std::thread::sleep(Duration::from_millis(20));
        (status, lines, self.stderr())
    }
}

/// Makes a waiting `softmem` start its next round.
fn trigger(file: &Path) {
    std::fs::write(file, b"go").expect("create the trigger file");
}

/// A machine with one `small` device (4 GiB, 128 MiB contexts unless `env` changes them) and a running
/// daemon; `env` adds `SIMGPU_*` settings every process (daemon included) sees.
fn machine(tag: &str, env: &[(&str, &str)]) -> Machine {
    let mut m = Machine::new(tag, "small");
    if !env.is_empty() {
        m.configure(|sim| env.iter().fold(sim, |s, (k, v)| s.with(k, v)));
    }
    m.start();
    m
}

/// A `softmem` tenant of vGPU `vgpu` logging at info level (its swaps and compactions are then in its
/// stderr), with `extra` environment.
fn tenant(m: &Machine, vgpu: &str, args: &[&str], extra: &[(&str, &str)]) -> Probe {
    let mut cmd = m.tenant(vgpu, &[&["softmem"][..], args].concat());
    cmd.env("TESSERA_LOG", "info");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    Probe::start(cmd, &format!("softmem tenant of {vgpu}"))
}

/// Device memory the simulated driver counts for process `pid` on device 0 (0 once it has none).
fn process_memory(sim: &Sim, pid: u32) -> u64 {
    let state = sim.driver_state();
    let me = state.processes().find(|p| p.pid.load(Ordering::Acquire) == pid);
    me.map_or(0, |p| p.memory[0].load(Ordering::Acquire))
}

/// Device memory in use on device 0, every process together, as the simulated driver counts it.
fn device_used(sim: &Sim) -> u64 {
    sim.driver_state().device(0).used_memory.load(Ordering::Acquire)
}

/// Polls `f` every 10 ms (it asks the daemon) until it yields a value, failing with `what` after `timeout`.
fn eventually<T>(what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    common::region::poll_every(Duration::from_millis(10), what, timeout, f)
}

/// Waits until `vgpu show NAME` satisfies `holds` (`what`), 10 s at most: what a process publishes of its
/// swapping, and what the daemon charges for it, follow the memory they describe within a pager round.
fn settled(m: &Machine, what: &str, name: &str, holds: impl Fn(&Value) -> bool) {
    eventually(what, Duration::from_secs(10), || Some(m.show(name)).filter(|v| holds(v)));
}

/// Asserts that a `softmem` check (`verified`, `kernel`, ...) found every byte as written.
fn intact(check: &Value, what: &str) {
    assert_eq!(u64_at(check, "mismatched_words"), 0, "{what}: data differ: {check}");
    assert!(u64_at(check, "buffers") > 0 && u64_at(check, "bytes") > 0, "{what}: nothing was checked: {check}");
}

/// Every path (`a.b.0.c`) at which `a` and `b` differ, but those in `skip`.
fn differences(a: &Value, b: &Value, skip: &[&str]) -> Vec<String> {
    fn walk(a: &Value, b: &Value, path: &str, skip: &[&str], out: &mut Vec<String>) {
        if skip.contains(&path) {
            return;
        }
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    walk(x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null), &p, skip, out);
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (u, v)) in x.iter().zip(y).enumerate() {
                    walk(u, v, &format!("{path}.{i}"), skip, out);
                }
            }
            _ if a != b => out.push(format!("{path}: {a} vs {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(a, b, "", skip, &mut out);
    out
}

/// Runs the probe to completion on `sim`: success, every JSON line it printed, stderr.
fn run_all(sim: &Sim, args: &[&str]) -> (bool, Vec<Value>, String) {
    let out = sim.command(args).stdin(Stdio::null()).output().expect("spawn simgpu-probe");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{args:?} printed {l:?}, not JSON: {e}")))
        .collect();
    (out.status.success(), lines, String::from_utf8_lossy(&out.stderr).into_owned())
}

// ---------------------------------------------------------------------------------------------------
// Tests

#[test]
fn soft_memory_behaves_like_native_memory() {
    // What the shim logs when soft mode serves the process's allocations, and when it refuses to export
    // soft memory.
    const SOFT_MODE: &str = "memory mode: soft";
    const IPC_REFUSED: &str = "cuIpcGetMemHandle on 0x";
    // Fields compared for every scenario but these, which differ by nature, not by behavior:
    let skip: &[(&str, &[&str])] = &[
        (
            "roundtrip",
            &[
                // Addresses: soft memory lives in Tessera's own reservation, not where the driver's cuMemAlloc
                // puts it (their relations, checked below, must hold in both modes).
                "ranges.base",
                "ranges.queried",
                "ranges.range_base",
                "ranges.range_start_attribute",
                // A context handle: a pointer value, different in each process (checked equal to the current
                // context in each run below).
                "ranges.context",
                "ranges.current_context",
                // Free memory with two buffers allocated: soft mode takes device memory a 16 MiB chunk at a
                // time, the driver exactly what is asked (checked below to be whole chunks).
                "memory.free_with_two_buffers",
            ],
        ),
        (
            "kernels",
            &[
                // Event-timed duration of a kernel: a measurement, different in every run of either mode.
                "custom_kernel_ms",
            ],
        ),
        (
            "softmem",
            &[
                // The process id, different in every run.
                "pid",
                // Device memory the simulated driver counts for the process and cuMemGetInfo's free figures:
                // soft mode holds whole chunks (and pools freed pages), the driver exactly what is allocated.
                "device_bytes",
                "free",
                "device_bytes_end",
                // Soft mode refuses to export its memory (it may move); the driver exports cuMemAlloc memory.
                "ipc_code",
            ],
        ),
    ];
    let sim = |mode: &str| {
        let s = Sim::new(&format!("native-{mode}")).with("SIMGPU_DEVICES", "small").with("TESSERA_LOG", "info");
        match mode {
            "soft" => s.with_shim().with("TESSERA_MODE", "soft"),
            "hard" => s.with_shim(),
            _ => s.without_shim(),
        }
    };
    let (soft, hard, native) = (sim("soft"), sim("hard"), sim("native"));
    for (scenario, skip) in skip {
        let args: &[&str] = if *scenario == "softmem" { &["softmem", "--mib", "40"] } else { &[scenario] };
        let runs = [&soft, &hard, &native].map(|s| run_all(s, args));
        for ((ok, lines, stderr), mode) in runs.iter().zip(["soft", "hard", "native"]) {
            assert!(ok, "{scenario} failed in {mode} mode: {lines:?}\nstderr:\n{stderr}");
        }
        let (soft_out, soft_err) = (&runs[0].1, &runs[0].2);
        assert!(soft_err.contains(SOFT_MODE), "soft mode was not on: {soft_err}");
        assert!(!runs[1].2.contains(SOFT_MODE), "hard mode said soft: {}", runs[1].2);
        // A field left out of the comparison must be there (a renamed one cannot escape it silently).
        for field in *skip {
            for (lines, mode) in [(soft_out, "soft"), (&runs[1].1, "hard")] {
                assert!(lines.iter().any(|l| !at(l, field).is_null()), "{scenario} ({mode}) has no {field}: {lines:?}");
            }
        }
        for reference in [&runs[1].1, &runs[2].1] {
            assert_eq!(soft_out.len(), reference.len(), "{scenario}: line counts differ: {soft_out:?}\n{reference:?}");
            for (s, r) in soft_out.iter().zip(reference) {
                let diff = differences(s, r, skip);
                assert!(diff.is_empty(), "{scenario}: soft mode differs from hard/native:\n{}", diff.join("\n"));
            }
        }
        let last = soft_out.last().unwrap();
        match *scenario {
            "roundtrip" => {
                for (mode, r) in [("soft", last), ("hard", runs[1].1.last().unwrap())] {
                    let base = u64_at(r, "ranges.base");
                    assert_eq!(u64_at(r, "ranges.queried"), base + 4096, "{mode}: {r}");
                    assert_eq!(u64_at(r, "ranges.range_base"), base, "{mode}: {r}");
                    assert_eq!(u64_at(r, "ranges.range_start_attribute"), base, "{mode}: {r}");
                    assert_eq!(at(r, "ranges.context"), at(r, "ranges.current_context"), "{mode}: {r}");
                }
                let used = u64_at(last, "memory.free_before") - u64_at(last, "memory.free_with_two_buffers");
                let native_used =
                    u64_at(&runs[2].1[0], "memory.free_before") - u64_at(&runs[2].1[0], "memory.free_with_two_buffers");
                assert!(
                    used.is_multiple_of(CHUNK) && used >= native_used,
                    "soft mode took {used} bytes for {native_used}"
                );
            }
            "softmem" => {
                let (ready, hard_ready) = (&soft_out[0], &runs[1].1[0]);
                intact(&ready["verified"], "soft");
                // The soft pointers are not the driver's cuMemAlloc memory: the first 256-byte allocation
                // took a whole physical chunk (cuMemCreate), where the driver charges 256 bytes...
                assert_eq!(u64_at(ready, "device_bytes.first_small_alloc"), CHUNK, "{ready}");
                assert_eq!(u64_at(hard_ready, "device_bytes.first_small_alloc"), 256, "{hard_ready}");
                // ...and exporting them is refused, with the reason logged, where the driver exports its own.
                assert_eq!(u64_at(ready, "ipc_code"), common::NOT_SUPPORTED);
                assert_eq!(u64_at(hard_ready, "ipc_code"), 0, "the driver exports cuMemAlloc memory: {hard_ready}");
                assert!(soft_err.contains(IPC_REFUSED), "soft mode did not refuse cuIpcGetMemHandle: {soft_err}");
                assert!(!runs[1].2.contains(IPC_REFUSED), "hard mode refused cuIpcGetMemHandle: {}", runs[1].2);
            }
            _ => {}
        }
    }
}

#[test]
fn pointers_and_data_survive_pooling_defragmentation_and_swap() {
    let m = machine("soft-survive", &[]);
    m.ok(&["vgpu", "create", "soft", "--device", "0", "--memory", "1GiB", "--share", "100", "--mode", "soft"]);
    let go = m.file("go");
    // Every sixth large buffer freed: about a sixth of the pages held is left in half-used chunks, under
    // the 25% at which the pager compacts on its own, so the fragmentation stays for `defrag` to remove.
    let args = ["--mib", "160", "--free-large", "6", "--rounds", "3", "--wait-file", go.to_str().unwrap()];
    let mut p = tenant(&m, "soft", &args, &[]);
    let pid = p.pid();
    let ready = p.expect("ready");
    intact(&ready["verified"], "when ready");
    let live_bytes = u64_at(&ready, "live.bytes");
    assert_eq!(u64_at(&ready, "verified.bytes"), live_bytes, "{ready}");
    assert!(u64_at(&ready, "freed.buffers") > 0, "{ready}");

    // Pooling: the freed pages stay with the process, and allocating the freed sizes again takes no new
    // device memory (nor does freeing them again give any back).
    let dev = |k: &str| u64_at(&ready, &format!("device_bytes.{k}"));
    assert_eq!(dev("after_free"), dev("full"), "frees keep the pages pooled: {ready}");
    assert_eq!(dev("reallocated"), dev("after_free"), "the freed sizes came from the pool: {ready}");
    assert_eq!(dev("refreed"), dev("reallocated"), "{ready}");
    assert_eq!(dev("context"), SMALL_CONTEXT, "{ready}");

    // What the daemon reports matches what the simulated device counts for the process.
    let before = m.show("soft");
    assert_eq!(before["processes"], serde_json::json!([pid]), "{before}");
    assert_eq!(u64_at(&before, "soft_processes"), 1, "{before}");
    let (resident, pooled, fragmented) =
        (u64_at(&before, "resident"), u64_at(&before, "pooled"), u64_at(&before, "fragmented"));
    let held = resident + pooled;
    assert!(resident >= live_bytes, "live pages hold at least the live bytes: {before}");
    assert!(fragmented > 0 && fragmented <= pooled, "{before}");
    let pct = u64_at(&before, "fragmentation_pct");
    assert!((1..25).contains(&pct), "fragmentation {pct}% (under the pager's own threshold): {before}");
    assert_eq!(u64_at(&before, "swapped"), 0, "{before}");
    assert_eq!(process_memory(&m.sim, pid), SMALL_CONTEXT + held, "device memory held: {before}");

    // Defragmentation: the same live pages in fewer chunks; the rest goes back to the device.
    let out = m.ok(&["vgpu", "defrag", "soft"]);
    assert!(out.contains("1 process(es) defragmented"), "{out}");
    let compacted = m.show("soft");
    let held_after = u64_at(&compacted, "resident") + u64_at(&compacted, "pooled");
    assert_eq!(u64_at(&compacted, "resident"), resident, "the live pages stay: {compacted}");
    assert!(held_after < held, "defragmenting gave nothing back: {before}\n{compacted}");
    assert!(u64_at(&compacted, "fragmentation_pct") < pct, "{before}\n{compacted}");
    assert_eq!(process_memory(&m.sim, pid), SMALL_CONTEXT + held_after, "{compacted}");
    trigger(&go);
    let round = p.expect("round");
    intact(&round["verified"], "after defragmenting");
    intact(&round["kernel"], "vector_add_f32 after defragmenting");
    assert_eq!(u64_at(&round, "verified.bytes"), live_bytes, "{round}");

    // Swapping out: every live page goes to host memory and the process holds no device memory but its
    // context.
    let used_before = device_used(&m.sim);
    let held_now = process_memory(&m.sim, pid) - SMALL_CONTEXT;
    let out = m.ok(&["vgpu", "swap-out", "soft"]);
    assert!(out.contains("1 process(es) swapped out"), "{out}");
    let swapped = m.show("soft");
    assert_eq!(u64_at(&swapped, "swapped"), resident, "every live page is in host memory: {swapped}");
    assert_eq!((u64_at(&swapped, "resident"), u64_at(&swapped, "pooled")), (0, 0), "{swapped}");
    assert!(u64_at(&swapped, "swap_out_ns") > 0, "{swapped}");
    assert_eq!(process_memory(&m.sim, pid), SMALL_CONTEXT, "swapped out, only the context is left: {swapped}");
    assert_eq!(device_used(&m.sim), used_before - held_now, "the device got the memory back");

    // The next round's copies and kernels bring everything back, at the same addresses.
    trigger(&go);
    let round = p.expect("round");
    intact(&round["verified"], "after swapping out and in");
    intact(&round["kernel"], "vector_add_f32 after swapping in");
    let back = m.show("soft");
    assert_eq!((u64_at(&back, "swapped"), u64_at(&back, "resident")), (0, resident), "{back}");
    assert!(u64_at(&back, "swap_in_ns") > 0, "{back}");
    assert!(process_memory(&m.sim, pid) >= SMALL_CONTEXT + resident, "{back}");

    trigger(&go);
    let round = p.expect("round");
    intact(&round["verified"], "last round");
    let (status, lines, stderr) = p.finish();
    assert!(status.success(), "softmem failed: {lines:?}\n{stderr}");
    assert_eq!(lines.last().map(|l| l["done"].clone()), Some(Value::Bool(true)), "{lines:?}");
}

#[test]
fn two_soft_vgpus_whose_quotas_sum_to_twice_the_device_both_complete() {
    // A 320 MiB device with 32 MiB contexts; each vGPU may use all of it, and each process needs 192 MiB
    // of it (128 MiB of buffers, none freed, in whole pages and slabs) besides its context: both fit only
    // by taking turns.
    let m = machine("soft-twice", &[("SIMGPU_MEMORY", "320MiB"), ("SIMGPU_CONTEXT_MEMORY", "32MiB")]);
    for name in ["a", "b"] {
        m.ok(&["vgpu", "create", name, "--device", "0", "--memory", "320MiB", "--share", "50", "--mode", "soft"]);
    }
    let (go_a, go_b) = (m.file("go-a"), m.file("go-b"));
    let args = |go: &Path| {
        let go = go.to_str().unwrap();
        ["--mib", "128", "--free-large", "0", "--free-small", "0", "--rounds", "1", "--wait-file", go].map(String::from)
    };
    let (args_a, args_b) = (args(&go_a), args(&go_b));

    // a sets up and idles; b, setting up, needs a's memory: a is swapped out for it.
    let mut a = tenant(&m, "a", &args_a.each_ref().map(String::as_str), &[]);
    let ready_a = a.expect("ready");
    intact(&ready_a["verified"], "a when ready");
    let mut b = tenant(&m, "b", &args_b.each_ref().map(String::as_str), &[]);
    let ready_b = b.expect("ready");
    intact(&ready_b["verified"], "b when ready");
    // a's pager publishes its figures, and the daemon charges b, only after a gave the memory back, which b
    // may have used at once: the figures follow within a pager round.
    settled(&m, "a made room for b", "a", |sa| u64_at(sa, "swapped") > 0 && u64_at(sa, "resident") == 0);
    assert!(u64_at(&m.show("a"), "swap_out_ns") > 0);
    settled(&m, "a's swapping out is charged to b", "b", |sb| u64_at(sb, "swap_charged_ns") > 0);
    assert!(device_used(&m.sim) <= 320 * MIB);

    // a's next round needs its memory back, which b, idle now, gives up.
    trigger(&go_a);
    let round_a = a.expect("round");
    intact(&round_a["verified"], "a after swapping back in");
    intact(&round_a["kernel"], "a's vector_add_f32 after swapping back in");
    assert_eq!(u64_at(&round_a, "verified.bytes"), u64_at(&ready_a, "live.bytes"), "{round_a}");
    settled(&m, "b made room for a", "b", |sb| u64_at(sb, "swapped") > 0);
    settled(&m, "b's swapping out is charged to a", "a", |sa| u64_at(sa, "swap_charged_ns") > 0);
    let (status, lines, stderr) = a.finish();
    assert!(status.success(), "a failed: {lines:?}\n{stderr}");
    assert!(stderr.contains("soft mode: swapped"), "a's log names its swap-out: {stderr}");

    // b's round: its memory comes back (a is gone) and every byte is there.
    trigger(&go_b);
    let round_b = b.expect("round");
    intact(&round_b["verified"], "b after swapping back in");
    intact(&round_b["kernel"], "b's vector_add_f32 after swapping back in");
    assert_eq!(u64_at(&round_b, "verified.bytes"), u64_at(&ready_b, "live.bytes"), "{round_b}");
    let (status, lines, stderr) = b.finish();
    assert!(status.success(), "b failed: {lines:?}\n{stderr}");
    assert!(stderr.contains("soft mode: swapped"), "b's log names its swap-out: {stderr}");
}

#[test]
fn a_process_killed_while_swapped_out_leaks_nothing() {
    let m = machine("soft-killed", &[]);
    m.ok(&["vgpu", "create", "soft", "--device", "0", "--memory", "1GiB", "--share", "100", "--mode", "soft"]);
    let mem_info = || {
        let out = m.sim.command(&["mem-info"]).stdin(Stdio::null()).output().expect("run mem-info");
        let run = common::finished(out);
        assert!(run.success, "mem-info failed: {}", run.stderr);
        u64_at(&run.json, "free")
    };
    // Every file under a directory.
    let files = |dir: &Path| -> std::collections::BTreeSet<PathBuf> {
        let mut all = std::collections::BTreeSet::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    todo.push(e.path());
                }
                all.insert(e.path());
            }
        }
        all
    };
    // Before: the device's free memory, and the machine's files (region, live files, socket, state).
    let free_before = mem_info();
    let used_before = device_used(&m.sim);
    let machine_files = files(&m.dir);

    let go = m.file("go");
    let mut p = tenant(&m, "soft", &["--mib", "64", "--rounds", "1", "--wait-file", go.to_str().unwrap()], &[]);
    let pid = p.pid();
    let ready = p.expect("ready");
    intact(&ready["verified"], "when ready");
    assert!(process_memory(&m.sim, pid) > SMALL_CONTEXT);
    let out = m.ok(&["vgpu", "swap-out", "soft"]);
    assert!(out.contains("1 process(es) swapped out"), "{out}");
    let swapped = m.show("soft");
    assert!(u64_at(&swapped, "swapped") > 0 && u64_at(&swapped, "resident") == 0, "{swapped}");
    assert_eq!(process_memory(&m.sim, pid), SMALL_CONTEXT, "{swapped}");

    // SIGKILL while swapped out.
    // SAFETY: kill sends a signal to the child we started and have not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let (status, _, _) = p.finish();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));

    // The daemon lets go of it: no process, nothing resident, swapped, pooled, used or wanted.
    let after = eventually("the daemon to reclaim the killed process", Duration::from_secs(10), || {
        let v = m.show("soft");
        v["processes"].as_array().is_some_and(Vec::is_empty).then_some(v)
    });
    for field in ["soft_processes", "resident", "swapped", "pooled", "fragmented", "used", "wanted"] {
        assert_eq!(u64_at(&after, field), 0, "{field}: {after}");
    }
    // The simulated device has all its memory back (the next process to start reclaims what a dead one
    // held) ...
    assert_eq!(mem_info(), free_before, "device memory leaked");
    assert_eq!(device_used(&m.sim), used_before, "device memory leaked");
    assert_eq!(process_memory(&m.sim, pid), 0);
    // ... and no file was left behind.
    assert_eq!(files(&m.dir), machine_files, "files left in the machine's directory");
    let shm: Vec<PathBuf> =
        files(Path::new("/dev/shm")).into_iter().filter(|p| p.to_string_lossy().contains(&pid.to_string())).collect();
    assert!(shm.is_empty(), "files of the killed process left in /dev/shm: {shm:?}");
}

#[test]
fn a_hard_mode_vgpu_is_never_swapped() {
    // A 512 MiB device with 32 MiB contexts: the hard vGPU's process holds 320 MiB, leaving 128 MiB when
    // the soft one's process has its context, less than the 192 MiB it needs.
    let m = machine("soft-hard", &[("SIMGPU_MEMORY", "512MiB"), ("SIMGPU_CONTEXT_MEMORY", "32MiB")]);
    m.ok(&["vgpu", "create", "hard", "--device", "0", "--memory", "512MiB", "--share", "50"]);
    m.ok(&["vgpu", "create", "soft", "--device", "0", "--memory", "512MiB", "--share", "50", "--mode", "soft"]);
    let go = m.file("go");
    let hard_args = ["--mib", "320", "--free-large", "0", "--free-small", "0", "--rounds", "1", "--wait-file"];
    let mut hard = tenant(&m, "hard", &[&hard_args[..], &[go.to_str().unwrap()]].concat(), &[]);
    let hard_pid = hard.pid();
    let ready = hard.expect("ready");
    intact(&ready["verified"], "hard when ready");
    let held = process_memory(&m.sim, hard_pid);
    assert!(held >= 320 * MIB, "{ready}");
    assert_eq!(u64_at(&ready, "device_bytes.first_small_alloc"), 256, "hard mode: the driver's own memory");

    // The soft process waits for memory (2 s), asking the daemon, which has no soft vGPU to swap out: it
    // fails with out-of-memory; the hard process is left alone all along.
    let started = Instant::now();
    let mut soft = tenant(&m, "soft", &["--mib", "128"], &[("TESSERA_MEMORY_WAIT", "2s")]);
    let mut wanted = 0;
    let failure = loop {
        let h = m.show("hard");
        for field in ["soft_processes", "resident", "pooled", "swapped", "swap_out_ns", "swap_in_ns", "wanted"] {
            assert_eq!(u64_at(&h, field), 0, "{field}: the hard vGPU has no soft memory: {h}");
        }
        assert_eq!(h["processes"], serde_json::json!([hard_pid]), "{h}");
        assert_eq!(process_memory(&m.sim, hard_pid), held, "the hard process's memory was touched");
        wanted = wanted.max(u64_at(&m.show("soft"), "wanted"));
        if soft.child.try_wait().expect("poll the soft process").is_some() {
            break soft.finish();
        }
        assert!(started.elapsed() < PATIENCE, "the soft process did not give up: {}", soft.stderr());
        std::thread::sleep(Duration::from_millis(50));
    };
    let waited = started.elapsed();
    let (status, lines, stderr) = failure;
    assert!(!status.success(), "the soft process got memory it cannot have: {lines:?}\n{stderr}");
    let report = lines.last().unwrap_or(&Value::Null);
    assert_eq!(report["cuda_error"].as_u64(), Some(OUT_OF_MEMORY), "{report}\n{stderr}");
    assert!(waited >= Duration::from_secs(2), "it gave up after {waited:?}, without waiting for memory");
    assert!(wanted > 0, "the soft process never asked the daemon for memory");
    let gone = m.show("soft");
    assert_eq!((u64_at(&gone, "wanted"), u64_at(&gone, "soft_processes")), (0, 0), "{gone}");

    // Swapping a hard vGPU out is refused, and so is defragmenting it.
    let e = m.fails(1, &["vgpu", "swap-out", "hard"]);
    assert!(e.contains("vGPU hard is in hard mode: its memory is not virtualized, nothing to swap out"), "{e}");
    let e = m.fails(1, &["vgpu", "defrag", "hard"]);
    assert!(e.contains("hard mode"), "{e}");

    // Every byte of the hard process's memory is as it wrote it.
    trigger(&go);
    let round = hard.expect("round");
    intact(&round["verified"], "the hard process after the soft one gave up");
    intact(&round["kernel"], "the hard process's vector_add_f32");
    let (status, lines, stderr) = hard.finish();
    assert!(status.success(), "the hard process failed: {lines:?}\n{stderr}");
    assert!(!stderr.contains("soft mode"), "the hard process ran in soft mode: {stderr}");
}

#[test]
fn data_survive_swap_out_and_defrag_requests_while_the_process_works() {
    // The process runs its rounds back to back (copies, memsets and kernels all the time) while the test
    // keeps asking it to swap out and to defragment: the requests land between its calls, in the middle
    // of its rounds, and every byte must still be where the program left it.
    let m = machine("soft-busy", &[]);
    m.ok(&["vgpu", "create", "soft", "--device", "0", "--memory", "1GiB", "--share", "100", "--mode", "soft"]);
    // Enough rounds that several requests land while it works (4 back-to-back rounds once ended between
    // the first two requests).
    let mut p = tenant(&m, "soft", &["--mib", "24", "--rounds", "40"], &[]);
    let ready = p.expect("ready");
    intact(&ready["verified"], "when ready");
    let mut requests = 0;
    while p.child.try_wait().expect("poll the probe").is_none() {
        for op in ["swap-out", "defrag"] {
            // A request may find the process gone (it finished meanwhile): only a live one must answer.
            let out = m.tessera(&["vgpu", op, "soft"]);
            let alive = p.child.try_wait().ok().flatten().is_none();
            assert!(out.status.success() || !alive, "{op}: {}", String::from_utf8_lossy(&out.stderr));
            requests += 1;
        }
    }
    let (status, lines, stderr) = p.finish();
    assert!(status.success(), "softmem failed under swap-out and defrag requests: {lines:?}\n{stderr}");
    let rounds: Vec<&Value> = lines.iter().filter(|l| l.get("round").is_some()).collect();
    assert_eq!(rounds.len(), 40, "{lines:?}");
    for r in rounds {
        intact(&r["verified"], "a round under swap-out and defrag requests");
        intact(&r["kernel"], "vector_add_f32 under swap-out and defrag requests");
    }
    let swaps = stderr.matches("soft mode: swapped").count();
    assert!(swaps >= 2, "{swaps} swap-outs in {requests} requests: {stderr}");
}

/// A large soft allocation that waits for memory gets it once it is freed: each failed attempt must give
/// back all the address space it took (it once kept the pages after the one that failed, and two seconds
/// of retries every 2 ms used up the whole soft address space).
#[test]
fn a_waiting_soft_allocation_gets_the_memory_freed_meanwhile() {
    // A 1 GiB device with 32 MiB contexts, 768 MiB of it held by a hard vGPU's process for 5 s.
    let m = machine("soft-waiting", &[("SIMGPU_MEMORY", "1GiB"), ("SIMGPU_CONTEXT_MEMORY", "32MiB")]);
    m.ok(&["vgpu", "create", "hard", "--device", "0", "--memory", "1GiB", "--share", "50"]);
    m.ok(&["vgpu", "create", "soft", "--device", "0", "--memory", "1GiB", "--share", "50", "--mode", "soft"]);
    let mut holder = Probe::start(m.tenant("hard", &["alloc", "--bytes", "768MiB", "--hold-ms", "5000"]), "holder");
    let held = holder.next();
    assert_eq!(held["allocated"], true, "{held}");
    // 900 MiB: more than is free until the holder exits, less than the device has afterwards.
    let started = Instant::now();
    let mut cmd = m.tenant("soft", &["alloc", "--bytes", "900MiB", "--hold-ms", "0"]);
    cmd.env("TESSERA_MEMORY_WAIT", "15s").env("TESSERA_LOG", "info");
    let waiter = Probe::start(cmd, "waiting soft process");
    let (status, _, stderr) = holder.finish();
    assert!(status.success(), "the holder failed: {stderr}");
    let (status, lines, stderr) = waiter.finish();
    let report = lines.first().cloned().unwrap_or(Value::Null);
    assert!(status.success(), "{lines:?}\n{stderr}");
    assert!(u64_at(&report, "free_before") < 900 * MIB, "the memory was there from the start: {report}");
    assert_eq!(
        report["allocated"],
        true,
        "the memory was free after {:?}, yet the allocation failed after {:?}: {report}\n{stderr}",
        Duration::from_secs(5),
        started.elapsed()
    );
}

#[test]
fn a_soft_free_on_the_threads_default_stream_waits_for_that_streams_work() {
    // `cuMemFreeAsync_ptsz(p, NULL)` frees on the calling thread's stream; soft mode reuses the memory at
    // once, so it must first wait for the work queued there, not for the legacy default stream (idle).
    let sim = Sim::new("ptsz-free").with("SIMGPU_DEVICES", "small").with_shim().with("TESSERA_MODE", "soft");
    let r = sim.ok(&["ptsz-free", "--ns", "200ms"]);
    assert_eq!(r["kernel_done_at_free"], true, "the free returned with the kernel still running: {r}");
    // Natively the free is queued behind the kernel and returns at once: the check above can fail.
    let native = Sim::new("ptsz-free-native").with("SIMGPU_DEVICES", "small").without_shim().ok(&["ptsz-free"]);
    assert_eq!(native["kernel_done_at_free"], false, "{native}");
}
