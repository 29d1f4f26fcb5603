//! Soft memory mode (issue 5) benchmarks on the simulated driver, measured in one run of
//! `./target/release/softmem [alloc] [swap] [defrag]` (all three by default, about a minute): a private
//! daemon, four vGPUs, and `simgpu-probe softbench` processes (`cuda-tests/probe/src/scenarios/softbench.rs`)
//! doing the work. Every figure is a median over batches or repetitions of one run.
//!
//! 1. Allocation latency: batches of cuMemAlloc calls then the cuMemFree calls of the same blocks (1000
//!    a batch, 100 000 pairs each for 256 B, 4 KiB and 64 KiB; 50 a batch, 5 000 pairs for 4 MiB, which
//!    soft mode serves with whole 2 MiB pages), in five processes running the same scenario: without the
//!    shim (`native`), under the shim standalone with `TESSERA_MODE=hard` and `=soft` (`tessera run`, no
//!    vGPU), and in a hard and a soft vGPU of the daemon (quota accounting and, in soft mode, the byte
//!    counts published in the vGPU's live file). The figure is the median over the batches of a batch's
//!    time per pair (p90 beside it); ratios are soft over hard (same setting) and soft over native.
//! 2. Swap-out and swap-in throughput against the copy bandwidth: a process of a soft vGPU holds 1 GiB
//!    in 64 MiB buffers. In each of seven repetitions it writes a new pattern and times copying it to the
//!    device and back in 2 MiB copies (the size of the pager's copies) between those buffers and a pinned
//!    host buffer from cuMemHostAlloc (the kind of host memory the pager swaps into; both sides touched
//!    before), twice, checking each: synchronous cuMemcpyHtoD / cuMemcpyDtoH, and the async forms queued
//!    on a stream and waited for once (the pager queues its copies). Then it idles; the benchmark runs
//!    `tessera vgpu swap-out swap` and reads `swapped` and `swap_out_ns` from `tessera vgpu show swap
//!    --json`, lets the process copy 8 bytes (the first call after a swap-out brings everything back) and
//!    reads `swap_in_ns`; the process reads the whole gigabyte back and checks every word. Throughput is
//!    the bytes swapped over the time the shim counted (`swap_out_ns`, `swap_in_ns`), over the copy
//!    bandwidth the same process measured in the same repetition (out against DtoH, in against HtoD, the
//!    faster of the two ways of issuing them): the target is 80%. The baseline is measured on the
//!    process's own soft memory on purpose: it is the very memory (memfd-backed chunks mapped with
//!    cuMemMap) and the very kind of host memory the pager copies between, in the same process and the
//!    same minute, so the ratio isolates what swapping adds. A process's first swap-out also allocates
//!    its host buffer (1 GiB of pinned memory, populated when allocated), later ones reuse it.
//! 3. Defragmentation: a process of a soft vGPU allocates 1.5 GiB of ballast (2 MiB blocks, never
//!    touched), then in each of seven repetitions 512 × 2 MiB blocks (1 GiB, 64 chunks of 8 pages), fills
//!    them, frees every other one (every chunk half full: 512 MiB fragmented) and idles; the benchmark
//!    runs `tessera vgpu defrag defrag`, then the process reads every remaining block back and checks it.
//!    The ballast is there because the pager compacts on its own once more than 25% of the memory held is
//!    fragmented: with 1 GiB alone (50% fragmented) it compacts while the blocks are being freed, before
//!    any command. Timed: the command's wall time (a `tessera` process: start, request, the daemon's
//!    wait, which polls every 5 ms, reply), and the pager's own time, from the daemon posting the request
//!    in the vGPU's live file to the process marking it done there (the benchmark polls that file every
//!    100 µs). Held memory before and after is `resident + pooled` from `vgpu show --json`.
//!
//! The host's CPU use and steal (`/proc/stat`) and the lateness of a thread sleeping 1 ms at a time are
//! printed for each part and the whole run: the simulated device is this host's memory and threads.

use serde_json::Value;
use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tessera_benches::{CpuTimes, HostTimer, Lateness, Machine, nearest_rank, verdict};
use tessera_region::{PagerRequest, VgpuSlot, encode_name, seq_reached};
use tessera_region::{file::RegionFile, open::Access};

const GIB: f64 = (1u64 << 30) as f64;
const MIB: u64 = 1 << 20;
/// Repetitions of the swap and defragmentation cycles.
const REPS: usize = 7;
/// Target of part 2: swap throughput as a fraction of the copy bandwidth.
const SWAP_TARGET: f64 = 0.80;
/// How often the live file is polled for the pager's progress.
const POLL: Duration = Duration::from_micros(100);

/// Median and p90 (nearest rank) of `v`.
fn median_p90(mut v: Vec<f64>) -> (f64, f64) {
    assert!(!v.is_empty(), "no samples");
    v.sort_by(f64::total_cmp);
    (nearest_rank(&v, 0.5), nearest_rank(&v, 0.9))
}

fn median(v: Vec<f64>) -> f64 {
    median_p90(v).0
}

/// GiB/s of `bytes` in `ns`.
fn gibs(bytes: u64, ns: u64) -> f64 {
    bytes as f64 / GIB / (ns.max(1) as f64 / 1e9)
}

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// A running `simgpu-probe softbench` process, driven over its stdin and stdout.
struct Probe {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Probe {
    fn start(mut cmd: Command) -> Probe {
        let mut child =
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("spawn probe");
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Probe { child, stdin, lines }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The probe's next result line (it fails the run when the probe reports an error or exits).
    fn next(&mut self) -> Value {
        for line in self.lines.by_ref() {
            let line = line.expect("read probe output");
            let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
            if v["scenario"] != "softbench" {
                continue;
            }
            if let Some(e) = v.get("error") {
                panic!("simgpu-probe softbench failed: {e}");
            }
            return v;
        }
        let status = self.child.wait().expect("wait probe");
        panic!("simgpu-probe softbench exited ({status}) before reporting");
    }

    /// Lets the probe go on.
    fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(b"\n").and_then(|()| stdin.flush()).expect("write to probe");
    }

    /// The final result, and the exit.
    fn finish(mut self) -> Value {
        let v = self.next();
        self.stdin.take();
        let status = self.child.wait().expect("wait probe");
        assert!(status.success(), "simgpu-probe softbench exited with {status}");
        v
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The benchmark machine, with a daemon and the vGPUs.
struct Bench {
    m: Machine,
    region: RegionFile,
}

/// vGPUs: name, mode.
const VGPUS: [(&str, &str); 4] = [("alloc-hard", "hard"), ("alloc-soft", "soft"), ("swap", "soft"), ("defrag", "soft")];

impl Bench {
    fn start() -> Bench {
        let mut m = Machine::new("softmem", "h100");
        m.start_daemon();
        for (name, mode) in VGPUS {
            m.tessera(&["vgpu", "create", name, "--device", "0", "--memory", "8GiB", "--share", "25", "--mode", mode]);
        }
        let path = m.dir.join("tessera.region").to_string_lossy().into_owned();
        let region = RegionFile::open_as(&path, Access::Joiner).unwrap_or_else(|e| panic!("{e}"));
        Bench { m, region }
    }

    /// `softbench ARGS`.
    fn args<'a>(args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["softbench"];
        all.extend_from_slice(args);
        all
    }

    /// The probe without the shim.
    fn native(&self, args: &[&str]) -> Command {
        self.m.command("simgpu-probe", &Self::args(args))
    }

    /// The probe under the shim (`tessera run`), standalone, in memory mode `mode`.
    fn standalone(&self, mode: &str, args: &[&str]) -> Command {
        let mut cmd = self.m.standalone_probe_command(&Self::args(args));
        cmd.env("TESSERA_MODE", mode);
        cmd
    }

    /// The probe in vGPU `vgpu` (whose mode applies).
    fn in_vgpu(&self, vgpu: &str, args: &[&str]) -> Command {
        self.m.probe_command(vgpu, &Self::args(args))
    }

    /// `tessera vgpu show NAME --json`.
    fn show(&self, name: &str) -> Value {
        serde_json::from_str(&self.m.tessera(&["vgpu", "show", name, "--json"])).expect("vgpu show --json")
    }

    /// The slot of vGPU `name`, its live file mapped.
    fn slot(&self, name: &str) -> &VgpuSlot {
        let index = {
            let locked = self.region.lock().unwrap_or_else(|e| panic!("{e}"));
            locked.find(&encode_name(name).expect("name")).unwrap_or_else(|| panic!("no vGPU {name} in the region"))
        };
        self.region.map_live(index, None).unwrap_or_else(|e| panic!("{e}"));
        &self.region.region().vgpus[index]
    }

    /// Runs `tessera vgpu VERB NAME` while a thread watches the vGPU's live file for the request being
    /// posted and for process `pid` marking it done.
    fn request(&self, verb: &str, kind: PagerRequest, name: &str, pid: u32) -> Request {
        let v = self.slot(name);
        let counter = v.live.pager.counter(kind);
        let before = counter.load(Ordering::Acquire);
        let proc = v.live.procs.iter().find(|p| p.attached_pid() == Some(pid)).expect("the probe's process slot");
        let start = Instant::now();
        std::thread::scope(|s| {
            let watcher = s.spawn(|| {
                let mut posted = None;
                let deadline = start + Duration::from_secs(60);
                while Instant::now() < deadline {
                    let now = counter.load(Ordering::Acquire);
                    if now != before {
                        let at = *posted.get_or_insert_with(Instant::now);
                        if seq_reached(proc.soft.done(kind).load(Ordering::Acquire), now) {
                            return Some((at - start, Instant::now() - at));
                        }
                    }
                    std::thread::sleep(POLL);
                }
                None
            });
            let out = self.m.command("tessera", &["vgpu", verb, name]).output().expect("run tessera");
            let cli = start.elapsed();
            assert!(out.status.success(), "tessera vgpu {verb} {name}: {}", String::from_utf8_lossy(&out.stderr));
            let (posted, pager) = watcher.join().expect("watcher").expect("the pager carried the request out");
            Request { cli, posted, pager, reply: String::from_utf8_lossy(&out.stdout).trim().to_string() }
        })
    }
}

/// A `tessera vgpu defrag|swap-out` as timed.
struct Request {
    /// The command's wall time.
    cli: Duration,
    /// From the command's start to the request appearing in the live file.
    posted: Duration,
    /// From then to the process marking it done.
    pager: Duration,
    /// What the command printed.
    reply: String,
}

/// Runs `f` between readings of the host's CPU counters, with a [`HostTimer`] running; prints them.
fn with_host_load<T>(title: &str, f: impl FnOnce() -> T) -> (T, Load) {
    println!("== {title}");
    let before = CpuTimes::now();
    let timer = HostTimer::start();
    let t = Instant::now();
    let out = f();
    let seconds = t.elapsed().as_secs_f64();
    let late = timer.finish();
    let (busy, steal) = CpuTimes::now().since(&before);
    let load = Load { busy, steal, late, seconds };
    println!("  {}", load.line());
    (out, load)
}

/// The host during one part.
struct Load {
    busy: f64,
    steal: f64,
    late: Lateness,
    seconds: f64,
}

impl Load {
    fn line(&self) -> String {
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        format!(
            "host during this part ({:.1} s): CPU busy {:.1}%, steal {:.1}% of {cpus} CPUs' time (/proc/stat); 1 ms \
             timer late by p50 {:.0} µs, p99 {:.0} µs, max {:.1} ms",
            self.seconds,
            self.busy,
            self.steal,
            self.late.p50_us,
            self.late.p99_us,
            self.late.max_us / 1e3
        )
    }
}

/// Part 1's result: per setting, per size, (median, p90) ns per pair.
struct AllocResult {
    sizes: Vec<u64>,
    settings: Vec<(&'static str, Vec<(f64, f64)>)>,
}

fn size_name(b: u64) -> String {
    match b {
        b if b >= MIB && b % MIB == 0 => format!("{} MiB", b / MIB),
        b if b >= 1024 && b % 1024 == 0 => format!("{} KiB", b / 1024),
        b => format!("{b} B"),
    }
}

fn part_alloc(b: &Bench) -> AllocResult {
    let args = ["--part", "alloc"];
    let runs: [(&'static str, Command); 5] = [
        ("native", b.native(&args)),
        ("hard", b.standalone("hard", &args)),
        ("soft", b.standalone("soft", &args)),
        ("hard vGPU", b.in_vgpu("alloc-hard", &args)),
        ("soft vGPU", b.in_vgpu("alloc-soft", &args)),
    ];
    let mut sizes = Vec::new();
    let mut settings = Vec::new();
    for (what, cmd) in runs {
        let t = Instant::now();
        let v = Probe::start(cmd).finish();
        let rows = v["sizes"].as_array().expect("sizes");
        sizes = rows.iter().map(|r| num(r, "bytes")).collect();
        let figures: Vec<(f64, f64)> = rows
            .iter()
            .map(|r| {
                median_p90(r["per_pair_ns"].as_array().expect("per_pair_ns").iter().filter_map(Value::as_f64).collect())
            })
            .collect();
        let counts: Vec<String> =
            rows.iter().map(|r| format!("{} × {}", num(r, "pairs") / num(r, "batch"), num(r, "batch"))).collect();
        println!(
            "  {what:<10} ran in {:.1} s (batches × pairs per batch: {})",
            t.elapsed().as_secs_f64(),
            counts.join(", ")
        );
        settings.push((what, figures));
    }
    let r = AllocResult { sizes, settings };
    print_alloc(&r);
    r
}

fn print_alloc(r: &AllocResult) {
    println!("  cuMemAlloc + cuMemFree, per pair: median over batches (p90), µs");
    let mut head = format!("  {:<8}", "size");
    for (what, _) in &r.settings {
        head.push_str(&format!(" {what:>17}"));
    }
    head.push_str("   soft/hard  soft/native  soft/hard (vGPU)");
    println!("{head}");
    let get =
        |name: &str, i: usize| r.settings.iter().find(|(w, _)| *w == name).map(|(_, f)| f[i].0).unwrap_or(f64::NAN);
    for (i, &size) in r.sizes.iter().enumerate() {
        let mut row = format!("  {:<8}", size_name(size));
        for (_, f) in &r.settings {
            row.push_str(&format!(" {:>8.3} ({:>6.3})", f[i].0 / 1e3, f[i].1 / 1e3));
        }
        row.push_str(&format!(
            "   {:>9.2}  {:>11.2}  {:>16.2}",
            get("soft", i) / get("hard", i),
            get("soft", i) / get("native", i),
            get("soft vGPU", i) / get("hard vGPU", i)
        ));
        println!("{row}");
    }
}

/// One swap-out and swap-in cycle of part 2 (GiB/s, except where said).
struct SwapRep {
    out: f64,
    inn: f64,
    /// The copy bandwidth each way: synchronous copies, and copies queued on a stream.
    dtoh: [f64; 2],
    htod: [f64; 2],
    first_copy_ms: f64,
    req: Request,
}

impl SwapRep {
    /// The device's copy bandwidth device to host: the faster way of issuing the copies.
    fn dtoh_best(&self) -> f64 {
        self.dtoh[0].max(self.dtoh[1])
    }

    /// The same host to device.
    fn htod_best(&self) -> f64 {
        self.htod[0].max(self.htod[1])
    }
}

/// Part 2's result: medians over the repetitions.
struct SwapResult {
    bytes: u64,
    out_gibs: f64,
    in_gibs: f64,
    dtoh_gibs: f64,
    htod_gibs: f64,
    out_fraction: f64,
    in_fraction: f64,
    first_copy_ms: f64,
    cli_ms: f64,
    pager_ms: f64,
}

fn part_swap(b: &Bench) -> SwapResult {
    let mut p = Probe::start(b.in_vgpu("swap", &["--part", "swap", "--reps", &REPS.to_string()]));
    let mut reps = Vec::new();
    println!(
        "  GiB/s. Copy bandwidth: synchronous / queued copies; \"of\" columns: swap throughput over the faster of the \
         two, measured in the same repetition"
    );
    println!(
        "  rep  swap-out ms  GiB/s  DtoH sync / queued  of DtoH   swap-in ms  GiB/s  HtoD sync / queued  of HtoD   \
         first copy ms  `swap-out` command ms  pager ms"
    );
    for rep in 0..REPS {
        let ready = p.next();
        assert_eq!(num(&ready, "ready"), rep as u64);
        let bytes = num(&ready, "bytes");
        let s0 = b.show("swap");
        let req = b.request("swap-out", PagerRequest::Evict, "swap", p.pid());
        let s1 = b.show("swap");
        let swapped = num(&s1, "swapped");
        assert_eq!(swapped, bytes, "every page swapped out: {s1}");
        assert_eq!(num(&s1, "resident") + num(&s1, "pooled"), 0, "no device memory held after the swap-out: {s1}");
        let out_ns = num(&s1, "swap_out_ns") - num(&s0, "swap_out_ns");
        p.go();
        let back = p.next();
        assert_eq!(back["verified"], true);
        let s2 = b.show("swap");
        assert_eq!(num(&s2, "swapped"), 0, "everything back: {s2}");
        let in_ns = num(&s2, "swap_in_ns") - num(&s1, "swap_in_ns");
        let bw = |key: &str| gibs(bytes, num(&ready, key));
        let r = SwapRep {
            out: gibs(swapped, out_ns),
            inn: gibs(swapped, in_ns),
            dtoh: [bw("dtoh_ns"), bw("dtoh_queued_ns")],
            htod: [bw("htod_ns"), bw("htod_queued_ns")],
            first_copy_ms: num(&back, "first_copy_ns") as f64 / 1e6,
            req,
        };
        println!(
            "  {rep:>3}  {:>11.1}  {:>5.2}  {:>9.2} / {:>6.2}  {:>6.1}%   {:>10.1}  {:>5.2}  {:>9.2} / {:>6.2}  {:>6.1}%   \
             {:>13.1}  {:>21.1}  {:>8.1}",
            out_ns as f64 / 1e6,
            r.out,
            r.dtoh[0],
            r.dtoh[1],
            r.out / r.dtoh_best() * 100.0,
            in_ns as f64 / 1e6,
            r.inn,
            r.htod[0],
            r.htod[1],
            r.inn / r.htod_best() * 100.0,
            r.first_copy_ms,
            r.req.cli.as_secs_f64() * 1e3,
            r.req.pager.as_secs_f64() * 1e3
        );
        if rep == 0 {
            println!("       (`tessera vgpu swap-out swap` said: {})", r.req.reply);
        }
        reps.push(r);
        p.go();
    }
    let end = p.finish();
    let col = |f: &dyn Fn(&SwapRep) -> f64| median(reps.iter().map(f).collect());
    let r = SwapResult {
        bytes: num(&end, "bytes"),
        out_gibs: col(&|r| r.out),
        in_gibs: col(&|r| r.inn),
        dtoh_gibs: col(&SwapRep::dtoh_best),
        htod_gibs: col(&SwapRep::htod_best),
        out_fraction: col(&|r| r.out / r.dtoh_best()),
        in_fraction: col(&|r| r.inn / r.htod_best()),
        first_copy_ms: col(&|r| r.first_copy_ms),
        cli_ms: col(&|r| r.req.cli.as_secs_f64() * 1e3),
        pager_ms: col(&|r| r.req.pager.as_secs_f64() * 1e3),
    };
    println!(
        "  medians: swap-out {:.2} GiB/s = {:.1}% of DtoH {:.2} GiB/s; swap-in {:.2} GiB/s = {:.1}% of HtoD {:.2} GiB/s \
         (target >= {:.0}%: out {}, in {})",
        r.out_gibs,
        r.out_fraction * 100.0,
        r.dtoh_gibs,
        r.in_gibs,
        r.in_fraction * 100.0,
        r.htod_gibs,
        SWAP_TARGET * 100.0,
        verdict(r.out_fraction >= SWAP_TARGET),
        verdict(r.in_fraction >= SWAP_TARGET)
    );
    r
}

/// Part 3's result.
struct DefragResult {
    cli_ms: f64,
    pager_ms: f64,
    posted_ms: f64,
    held_before: u64,
    held_after: u64,
    frag_before: u64,
    frag_after: u64,
    pct_before: u64,
    pct_after: u64,
}

/// One defragmentation of part 3: memory figures before and after, and its timing.
struct DefragRep {
    held: [u64; 2],
    fragmented: [u64; 2],
    pct: [u64; 2],
    req: Request,
    /// The process's cuMemFree of one 2 MiB block, mean over the 256 it freed (µs).
    free_us: f64,
}

fn part_defrag(b: &Bench) -> DefragResult {
    let ballast = 3u64 << 29;
    let bytes = 1u64 << 30;
    let mut p = Probe::start(b.in_vgpu(
        "defrag",
        &[
            "--part",
            "defrag",
            "--bytes",
            &bytes.to_string(),
            "--ballast",
            &ballast.to_string(),
            "--reps",
            &REPS.to_string(),
        ],
    ));
    println!(
        "  1 GiB in 512 × 2 MiB blocks, every other one freed, beside {} MiB of ballast (full chunks)",
        ballast / MIB
    );
    println!(
        "  rep  held before -> after (MiB)  fragmented before -> after (MiB, %)   command ms  posted ms  pager ms"
    );
    let mut rows = Vec::new();
    for rep in 0..REPS {
        let ready = p.next();
        assert_eq!(num(&ready, "ready"), rep as u64);
        let s0 = b.show("defrag");
        let req = b.request("defrag", PagerRequest::Defrag, "defrag", p.pid());
        let s1 = b.show("defrag");
        let held = |s: &Value| num(s, "resident") + num(s, "pooled");
        let (h0, h1, f0, f1) = (held(&s0), held(&s1), num(&s0, "fragmented"), num(&s1, "fragmented"));
        let (pc0, pc1) = (num(&s0, "fragmentation_pct"), num(&s1, "fragmentation_pct"));
        println!(
            "  {rep:>3}  {:>6} -> {:<6}              {:>5} -> {:<5} ({pc0}% -> {pc1}%)          {:>10.1}  {:>9.1}  {:>8.1}",
            h0 / MIB,
            h1 / MIB,
            f0 / MIB,
            f1 / MIB,
            req.cli.as_secs_f64() * 1e3,
            req.posted.as_secs_f64() * 1e3,
            req.pager.as_secs_f64() * 1e3
        );
        if rep == 0 {
            println!("       (`tessera vgpu defrag defrag` said: {})", req.reply);
        }
        if f0 != bytes / 2 {
            println!(
                "       NOTE: {} MiB fragmented before the command, not {} MiB as laid out",
                f0 / MIB,
                bytes / 2 / MIB
            );
        }
        p.go();
        let done = p.next();
        assert_eq!(done["verified"], true);
        p.go();
        let free_us = num(&ready, "free_ns") as f64 / 1e3 / (num(&ready, "buffers") - num(&ready, "kept")) as f64;
        rows.push(DefragRep { held: [h0, h1], fragmented: [f0, f1], pct: [pc0, pc1], req, free_us });
    }
    p.finish();
    let col = |f: &dyn Fn(&DefragRep) -> f64| median(rows.iter().map(f).collect());
    let same = rows.iter().all(|r| r.held == rows[0].held && r.fragmented == rows[0].fragmented);
    if !same {
        println!("  NOTE: the memory figures differ between repetitions; the summary gives the first one's");
    }
    let r = DefragResult {
        cli_ms: col(&|r| r.req.cli.as_secs_f64() * 1e3),
        pager_ms: col(&|r| r.req.pager.as_secs_f64() * 1e3),
        posted_ms: col(&|r| r.req.posted.as_secs_f64() * 1e3),
        held_before: rows[0].held[0],
        held_after: rows[0].held[1],
        frag_before: rows[0].fragmented[0],
        frag_after: rows[0].fragmented[1],
        pct_before: rows[0].pct[0],
        pct_after: rows[0].pct[1],
    };
    println!(
        "  medians: command {:.1} ms, pager {:.1} ms (request posted {:.1} ms after the command started); every block \
         read back and checked after each defragmentation; the process's cuMemFree of a 2 MiB block took {:.0} µs",
        r.cli_ms,
        r.pager_ms,
        r.posted_ms,
        col(&|r| r.free_us)
    );
    r
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let parts: Vec<String> = std::env::args().skip(1).collect();
    if let Some(bad) = parts.iter().find(|p| !["alloc", "swap", "defrag"].contains(&p.as_str())) {
        eprintln!("unknown part {bad:?}; use alloc, swap and/or defrag (default: all three)");
        std::process::exit(2);
    }
    let run = |part: &str| parts.is_empty() || parts.iter().any(|p| p == part);
    let started = Instant::now();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "== softmem: soft memory mode (issue 5) on the simulated driver; host: {cpus} CPUs, load average {}",
        loadavg()
    );
    let whole = CpuTimes::now();
    let bench = Bench::start();
    let alloc = run("alloc")
        .then(|| with_host_load("1. cuMemAlloc + cuMemFree latency, soft against native", || part_alloc(&bench)));
    let swap = run("swap")
        .then(|| with_host_load("2. swap-out and swap-in of 1 GiB against the copy bandwidth", || part_swap(&bench)));
    let defrag = run("defrag")
        .then(|| with_host_load("3. defragmenting 1 GiB with every other 2 MiB block freed", || part_defrag(&bench)));
    let (busy, steal) = CpuTimes::now().since(&whole);
    drop(bench);

    println!(
        "== summary (medians; one run, {:.0} s; load average after {})",
        started.elapsed().as_secs_f64(),
        loadavg()
    );
    if let Some((alloc, _)) = &alloc {
        println!("  1. alloc+free per pair, µs (soft/hard ratio standalone; in vGPUs):");
        let get = |name: &str, i: usize| {
            alloc.settings.iter().find(|(w, _)| *w == name).map(|(_, f)| f[i].0 / 1e3).unwrap_or(f64::NAN)
        };
        for (i, &size) in alloc.sizes.iter().enumerate() {
            println!(
                "     {:<7} native {:.3}  hard {:.3}  soft {:.3}  (soft/hard {:.2}, soft/native {:.2});  vGPU: hard {:.3}  soft {:.3}  (soft/hard {:.2})",
                size_name(size),
                get("native", i),
                get("hard", i),
                get("soft", i),
                get("soft", i) / get("hard", i),
                get("soft", i) / get("native", i),
                get("hard vGPU", i),
                get("soft vGPU", i),
                get("soft vGPU", i) / get("hard vGPU", i)
            );
        }
    }
    if let Some((swap, _)) = &swap {
        println!(
            "  2. swap-out {:.2} GiB/s = {:.1}% of DtoH {:.2} GiB/s  {};  swap-in {:.2} GiB/s = {:.1}% of HtoD {:.2} GiB/s  {}  ({} MiB, data checked)",
            swap.out_gibs,
            swap.out_fraction * 100.0,
            swap.dtoh_gibs,
            verdict(swap.out_fraction >= SWAP_TARGET),
            swap.in_gibs,
            swap.in_fraction * 100.0,
            swap.htod_gibs,
            verdict(swap.in_fraction >= SWAP_TARGET),
            swap.bytes / MIB
        );
        println!(
            "     first copy after a swap-out (brings 1 GiB back) {:.1} ms; `vgpu swap-out` command {:.1} ms, pager {:.1} ms",
            swap.first_copy_ms, swap.cli_ms, swap.pager_ms
        );
    }
    if let Some((defrag, _)) = &defrag {
        println!(
            "  3. defrag: `tessera vgpu defrag` {:.1} ms, pager {:.1} ms; held {} -> {} MiB, fragmented {} -> {} MiB ({}% -> {}%); \
             data checked",
            defrag.cli_ms,
            defrag.pager_ms,
            defrag.held_before / MIB,
            defrag.held_after / MIB,
            defrag.frag_before / MIB,
            defrag.frag_after / MIB,
            defrag.pct_before,
            defrag.pct_after
        );
    }
    let steal_of = |l: Option<&Load>| l.map_or("-".to_string(), |l| format!("{:.1}%", l.steal));
    println!(
        "  host: steal {} / {} / {} in parts 1 / 2 / 3, {steal:.1}% over the run (CPU busy {busy:.1}%)",
        steal_of(alloc.as_ref().map(|(_, l)| l)),
        steal_of(swap.as_ref().map(|(_, l)| l)),
        steal_of(defrag.as_ref().map(|(_, l)| l))
    );
}
