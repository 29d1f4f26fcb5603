//! A vGPU alone on its device has its launches measured a batch at a time (one completion event for many
//! launches, see `shim/src/launch/batch.rs`): its launching thread makes far fewer driver calls of the
//! shim's own than it launches, and the daemon still charges it the device time its kernels took, alone
//! and once a second vGPU joins (which turns batching off for both).

mod common;

use common::cprog::overhead_client;
use common::tessera::{Machine, charged_as_ran, ran, report};
use common::u64_at;
use serde_json::Value;

#[test]
fn a_lone_vgpus_launches_cost_a_fraction_of_a_driver_call_each() {
    let mut m = Machine::new("batches-calls", "small");
    m.start();
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "1GiB", "--share", "100"]);
    let client = overhead_client();
    let client = client.to_str().expect("a UTF-8 path");
    // Let the daemon see the vGPU alone first (it marks it on its next tick with work).
    let args = ["run", "--vgpu", "a", "--", client, "--launches", "4000", "--pairs", "1", "--batch", "100"];
    let out = m.command(&args).output().expect("run the overhead client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}: {stdout}{}", out.status, String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("the client's JSON");
    for op in
        v["ops"].as_array().expect("ops").iter().filter(|op| !op["op"].as_str().unwrap_or("").starts_with("alloc"))
    {
        let (count, own, thread) = (u64_at(op, "count"), u64_at(op, "own_calls"), u64_at(op, "thread_calls"));
        let shims = thread.saturating_sub(own) as f64 / count as f64;
        eprintln!("{}: {shims:.3} shim calls per launch on the launching thread", op["op"]);
        // Measured one by one, every launch would add at least one (its end event); batches of up to 32 add
        // about 1/20. Functional bound: well below one per launch, with room for a loaded host on which a
        // preempted thread finds its stream run dry more often.
        assert!(shims < 0.25, "{}: {shims:.3} shim driver calls per launch: not batched ({op})", op["op"]);
    }
}

#[test]
fn a_lone_vgpu_measured_in_batches_and_then_beside_another_is_charged_what_it_ran() {
    let mut m = Machine::new("batches-exact", "small");
    m.start();
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "1GiB", "--share", "30"]);
    m.ok(&["vgpu", "create", "b", "--device", "0", "--memory", "1GiB", "--share", "70"]);
    // 20 µs kernels, 16 queued: batches of up to 50 launches while a is alone (1.2 s); then b joins with
    // 500 µs kernels for the last 0.6 s, which turns batches off.
    let a = m.tenant("a", &["saturate", "--ns", "20us", "--seconds", "1.8", "--depth", "16"]).spawn().expect("spawn a");
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let b = m.saturate("b", "0.6", None);
    let (a, b) = (report(a), report(b));
    std::thread::sleep(std::time::Duration::from_millis(100));
    charged_as_ran(&m, "a", ran(&a), 0.03);
    // As `daemon::each_vgpu_is_charged_the_device_time_its_kernels_took_not_their_stream_time`: within 10%.
    charged_as_ran(&m, "b", ran(&b), 0.10);
}

#[test]
fn a_batch_left_open_by_an_idle_process_does_not_keep_its_vgpu_busy() {
    let mut m = Machine::new("batches-stale", "small");
    m.start();
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "1GiB", "--share", "50"]);
    m.ok(&["vgpu", "create", "b", "--device", "0", "--memory", "1GiB", "--share", "50"]);
    // a alone: bursts of 40 short kernels (batched), each waited for, then 800 ms idle with its process
    // alive and its last batch open. b, started in a's first gap, must get the device a leaves idle: were a's
    // open batch still counted in its window, a would look busy all along and b be held to its 50%.
    let bursts = ["arrivals", "--ns", "20us", "--burst", "40", "--count", "2", "--gap", "800ms"];
    let a = m.tenant("a", &bursts).env("SIMGPU_ENGINE_TRACE", m.file("a.trace")).spawn().expect("spawn a");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let b = report(
        m.tenant("b", &["saturate", "--ns", "500us", "--seconds", "0.5", "--depth", "4"]).spawn().expect("spawn b"),
    );
    let _ = report(a);
    let got = u64_at(&b, "engine_ns") as f64 / u64_at(&b, "wall_ns") as f64;
    assert!(got > 0.75, "b got {:.1}% of the engine while a idled: a looked busy ({b})", got * 100.0);
}
