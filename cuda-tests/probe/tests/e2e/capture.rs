//! Stream capture under the shim (`cuda-tests/c/capture.c`, a tenant of a daemon's vGPU that is suspended
//! when it starts): launches captured into a graph are never gated, through every capture entry point
//! (`cuStreamBeginCapture`, `_v2`, `_ptsz`, `_v2_ptsz`, `cuStreamBeginCaptureToGraph`, `_ptsz`), in the
//! global, thread-local and relaxed modes, and with every launch entry point; the graphs run once the
//! vGPU is resumed; the shim's own driver calls (its measurement thread waits for events) never break a
//! global-mode capture; and the simulated driver does enforce the modes, so the last point means
//! something.

use crate::common;

use common::Guarded;
use common::cprog::{CBuild, Facts};
use common::tessera::Machine;
use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::Duration;

/// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and `_INVALIDATED`.
const CAPTURE_UNSUPPORTED: i64 = 900;
const CAPTURE_INVALIDATED: i64 = 901;

/// How long the test holds the vGPU suspended once everything is captured.
const HELD: Duration = Duration::from_millis(300);

#[test]
fn captured_launches_are_never_gated_and_the_shims_calls_never_break_a_capture() {
    let program = CBuild::program("capture.c").link_driver().build();
    let mut m = Machine::new("capture", "small");
    m.start();
    m.ok(&["vgpu", "create", "cap", "--device", "0", "--memory", "1GiB", "--share", "50"]);
    m.ok(&["vgpu", "suspend", "cap"]);
    let mut child = Guarded::spawn(&mut m.tenant_running("cap", program.to_str().expect("UTF-8 path"), &[]))
        .expect("spawn the capture program");

    // Lines as they come, so the test can tell when the captures are done while the vGPU is suspended.
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    loop {
        // A gated capture would wait for ever: the program's own watchdog ends it at 60 s.
        let line = rx.recv_timeout(Duration::from_secs(90)).expect("the program's next line");
        let done = line.starts_with("captured ") || line.starts_with("error");
        lines.push(line);
        if done {
            break;
        }
    }
    assert_eq!(lines.last().map(String::as_str), Some("captured 10"), "{lines:#?}");
    // The direct launch after the captures is gated: nothing more comes while the vGPU stays suspended.
    std::thread::sleep(HELD);
    let early: Vec<String> = rx.try_iter().collect();
    assert!(early.iter().all(|l| !l.starts_with("held_ns")), "a launch passed a suspended vGPU: {early:?}");
    lines.extend(early);
    m.ok(&["vgpu", "resume", "cap"]);

    let out = child.into_child().wait_with_output().expect("wait for the program");
    reader.join().expect("the reader thread");
    lines.extend(rx.try_iter());
    let stdout = lines.join("\n") + "\n";
    let facts = Facts::from_output(&std::process::Output {
        status: out.status,
        stdout: stdout.into_bytes(),
        stderr: out.stderr,
    })
    .succeeded();

    let captured = facts.all("captured.case");
    assert_eq!(captured.len(), 10, "{captured:?}");
    for begin in [
        "cuStreamBeginCapture ",
        "cuStreamBeginCapture_v2 ",
        "cuStreamBeginCapture_ptsz ",
        "cuStreamBeginCapture_v2_ptsz ",
        "cuStreamBeginCaptureToGraph ",
        "cuStreamBeginCaptureToGraph_ptsz ",
    ] {
        assert!(captured.iter().any(|c| c.contains(begin)), "no capture begun by {begin}: {captured:?}");
    }
    assert!(
        facts.num("held_ns") >= HELD.as_nanos() as i64,
        "the direct launch waited only {} ns for the suspended vGPU",
        facts.num("held_ns")
    );
    let graphs = facts.all("graph.case");
    assert_eq!(graphs.len(), 9, "{graphs:?}");
    assert!(graphs.iter().all(|g| g.ends_with(" ok")), "a captured graph computed the wrong value: {graphs:?}");

    assert!(facts.num("measured_launches") > 0);
    assert_eq!(facts.get("global_beside_measured"), "ok", "code {}", facts.get("global_beside_measured.code"));
    assert_eq!(facts.num("relaxed_query"), 0, "a relaxed thread may query an event");
    assert_eq!(facts.num("thread_local_query"), 0, "a thread-local thread ignores other threads' captures");
    assert_eq!(facts.num("end_after_allowed"), 0);
    assert_eq!(facts.num("global_query"), CAPTURE_UNSUPPORTED, "the simulated driver enforces global mode");
    assert_eq!(facts.num("end_after_unsafe"), CAPTURE_INVALIDATED);
}
