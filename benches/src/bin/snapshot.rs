//! Snapshot and resume of a 4 GiB vGPU (issue 17) against the simulated device's copy bandwidth, measured
//! in one run of `./target/release/snapshot [rounds]` (7 by default, about a minute): a private daemon,
//! one hard vGPU on an `h100` profile device, and one `simgpu-probe snapbench` tenant holding 4 GiB of
//! device memory in four 1 GiB allocations.
//!
//! Each round times, in an order rotated from round to round (so that no configuration always runs
//! first, after the host's caches and page tables settled, or last): the tenant's own copy of its 4 GiB
//! to host memory (four synchronous 1 GiB `cuMemcpyDtoH` into a pageable buffer it reuses) and back
//! (`cuMemcpyHtoD`), as the device's copy bandwidth; and `snapshot` and `resume` of the vGPU through the
//! daemon's API (`tessera_client::Client`), as the wall time of the request: the suspension saved to the
//! state file, `cuCheckpointProcessLock` and `...Checkpoint` (the driver copies every byte to host memory
//! and releases the device memory), or `...Restore` and `...Unlock` and the suspension lifted. Figures are
//! medians over the rounds; snapshot is judged against DtoH and resume against HtoD, each as (bytes / time)
//! over (bytes / copy time): target ≥ 80%. The first snapshot of the process is printed on its own too:
//! its host copy is memory the process touches for the first time (later checkpoints reuse the host
//! memory the previous restore freed lazily, while the kernel has not taken it). The tenant checks every
//! word after the last round. The host's CPU use and steal are printed: the simulated device is this
//! host's memory and threads.

use serde_json::Value;
use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{ChildStdin, ChildStdout, Stdio};
use std::time::Instant;
use tessera_benches::{CpuTimes, Machine, nearest_rank, verdict};
use tessera_client::VgpuSpec;

const GIB: f64 = (1u64 << 30) as f64;
/// Target: snapshot and resume as a fraction of the copy bandwidth.
const TARGET: f64 = 0.80;

/// A child process killed when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The tenant: its stdin and stdout lines.
struct Tenant {
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Tenant {
    fn line(&mut self) -> Value {
        let line = self.lines.next().expect("the tenant ended").expect("read the tenant");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("tenant printed {line:?}: {e}"));
        assert!(v.get("error").is_none(), "tenant failed: {v}");
        v
    }

    fn ask(&mut self, command: &str) -> Value {
        writeln!(self.stdin, "{command}").expect("write to the tenant");
        self.line()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    nearest_rank(&v, 0.5)
}

fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(7, |r| r.parse().expect("rounds: a number"));
    let mut m = Machine::new("snapshot", "h100");
    m.start_daemon();
    m.create(VgpuSpec::new("snap", 0, 6 << 30, 50));
    // Killed if the benchmark fails half way (it holds 4 GiB).
    let child = m
        .probe_command("snap", &["snapbench", "--mib", "4096", "--chunk-mib", "1024"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the tenant");
    let mut child = KillOnDrop(child);
    let mut t =
        Tenant { stdin: child.0.stdin.take().unwrap(), lines: BufReader::new(child.0.stdout.take().unwrap()).lines() };
    let ready = t.line();
    let bytes = ready["bytes"].as_u64().expect("bytes") as f64;
    println!("tenant pid {} holds {:.1} GiB in vGPU snap; {rounds} rounds", ready["pid"], bytes / GIB);
    let client = m.client();
    let cpu = CpuTimes::now();
    let (mut dtoh, mut htod, mut snap, mut resume) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Copies and the snapshot cycle, rotated.
        for k in 0..2 {
            if (round + k) % 2 == 0 {
                dtoh.push(t.ask("dtoh")["dtoh_ns"].as_u64().unwrap() as f64);
                htod.push(t.ask("htod")["htod_ns"].as_u64().unwrap() as f64);
            } else {
                let start = Instant::now();
                let st = client.snapshot("snap", &[]).expect("snapshot");
                snap.push(start.elapsed().as_nanos() as f64);
                // The vGPU's usage counts the tenant's context too.
                assert!(st.snapshot_bytes as f64 >= bytes, "the whole 4 GiB snapshotted: {st:?}");
                let start = Instant::now();
                client.resume("snap", &[]).expect("resume");
                resume.push(start.elapsed().as_nanos() as f64);
            }
        }
        println!(
            "round {round}: DtoH {:.0} ms, HtoD {:.0} ms, snapshot {:.0} ms, resume {:.0} ms",
            dtoh[round] / 1e6,
            htod[round] / 1e6,
            snap[round] / 1e6,
            resume[round] / 1e6
        );
    }
    let (busy, steal) = CpuTimes::now().since(&cpu);
    let verified = t.ask("verify");
    assert_eq!(verified["mismatched_words"], 0, "the tenant's data after the rounds: {verified}");
    drop(t);
    let _ = child.0.wait();
    let rate = |ns: f64| bytes / GIB / (ns / 1e9);
    let (d, h, s, r) = (median(dtoh), median(htod), median(snap.clone()), median(resume));
    println!("medians over {rounds} rounds, {:.1} GiB each:", bytes / GIB);
    println!(
        "  cuMemcpyDtoH {:.0} ms = {:.2} GiB/s;  cuMemcpyHtoD {:.0} ms = {:.2} GiB/s",
        d / 1e6,
        rate(d),
        h / 1e6,
        rate(h)
    );
    let (sf, rf) = (d / s, h / r);
    println!(
        "  snapshot {:.0} ms = {:.2} GiB/s = {:.0}% of DtoH: {}",
        s / 1e6,
        rate(s),
        sf * 100.0,
        verdict(sf >= TARGET)
    );
    println!(
        "  resume   {:.0} ms = {:.2} GiB/s = {:.0}% of HtoD: {}",
        r / 1e6,
        rate(r),
        rf * 100.0,
        verdict(rf >= TARGET)
    );
    let first = snap[0];
    println!(
        "  first snapshot of the process (round 0, host memory touched for the first time): {:.0} ms = {:.0}% of DtoH",
        first / 1e6,
        d / first * 100.0
    );
    println!("  every word checked after the last round: {} bytes, 0 differ", verified["verified"]);
    println!("  host CPU busy {:.0}%, steal {:.1}%", busy, steal);
}
