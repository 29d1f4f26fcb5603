//! The daemon's audit log (`tessera daemon --audit-log FILE`): every change (create, set, rm) and every
//! refused request has a line naming the caller's uid and pid (the kernel's credentials of the
//! connection), what was asked and what came of it; tenants joining and leaving a vGPU have theirs. The
//! file is created mode 0600; the same lines go to stderr.

use crate::common;

use common::tessera::Machine;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};
use tessera_client::{Change, VgpuSpec};

/// The audit log's lines once one contains `what` (10 s at most).
fn lines_once(log: &std::path::Path, what: &str) -> Vec<String> {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(what) {
            return text.lines().map(str::to_string).collect();
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no {what:?} in the audit log within 10 s:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_audit_log_names_who_changed_what_and_what_was_refused() {
    let mut m = Machine::new("audit-log", "small");
    let log = m.file("audit.log");
    m.start_with(&["--audit-log", log.to_str().unwrap()]);
    let client = m.client();
    client.create(VgpuSpec::new("a", 0, 256 << 20, 10)).unwrap();
    client.set("a", Change { share: Some(20), ..Change::default() }).unwrap();
    let refused = client.create(VgpuSpec::new("tiny", 0, 1024, 10)).unwrap_err();
    assert!(refused.message.contains("footprint"), "{refused}");
    // A tenant joins (seen by the watch's next round, every second: it runs for two) and leaves.
    let mut tenant = m.saturate("a", "2", None);
    let lines = lines_once(&log, "tenant joined");
    assert!(tenant.wait().unwrap().success(), "the tenant failed");
    lines_once(&log, "tenant left");
    client.remove("a").unwrap();
    let lines = [lines, lines_once(&log, "vGPU removed")].concat();
    let who = format!("uid=0 pid={}", std::process::id());
    let find = |what: &str| {
        lines.iter().find(|l| l.contains(what)).unwrap_or_else(|| panic!("no {what:?} line in {lines:#?}")).clone()
    };
    for what in ["vGPU created", "vGPU changed", "request refused", "vGPU removed"] {
        let line = find(what);
        assert!(line.contains(&who) && line.contains("vgpu="), "{line}");
    }
    let created = find("vGPU created");
    assert!(created.contains("result=\"ok\"") || created.contains("result=ok"), "{created}");
    assert!(created.contains("\"memory\":268435456"), "what was asked: {created}");
    let refusal = find("request refused");
    assert!(refusal.contains("tiny") && refusal.contains("invalid") && refusal.contains("footprint"), "{refusal}");
    let joined = find("tenant joined");
    assert!(joined.contains("vgpu=\"a\"") || joined.contains("vgpu=a"), "{joined}");
    assert!(joined.contains("pid=") && joined.contains("uid=0"), "{joined}");
    // Reads that succeed are not recorded.
    assert!(!lines.iter().any(|l| l.contains("\"op\":\"list\"")), "{lines:#?}");
    let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the audit log is its owner's alone");
    let stderr = String::from_utf8_lossy(&m.stop_daemon().stderr).into_owned();
    assert!(stderr.contains("vGPU created") && stderr.contains("request refused"), "{stderr}");
}
