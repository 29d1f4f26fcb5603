//! Nobody waits for ever: the daemon answers whatever other processes of its user do with the region's
//! claims lock (`<region>.claims`, mode 0600: a stopped process holding it), a tenant joining a vGPU gives
//! up on that lock with an error naming its holder, the daemon stops on SIGTERM even when nobody reads its stderr any more, and a tenant
//! left waiting on a suspended vGPU runs again once the daemon that suspended it is gone (while that
//! daemon lives, stopped or not, the suspension holds). Each test has a daemon, region, socket and state
//! directory of its own on the `small` device. Time bounds are functional: what is tested answers in
//! milliseconds, what it guards against never answers.

use crate::common;

use common::Guarded;
use common::tessera::Machine;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tessera_region::file::LOCK_TIMEOUT;
use tessera_region::open::live_path;
use tessera_region::{AREA, VgpuLive};

/// How long a request may take here: it answers in milliseconds, or (before the fixes) never.
const ANSWER: Duration = Duration::from_secs(10);

/// Sends `signal` to `pid`.
fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill sends a signal to a child of this test, not reaped yet (its pid is not reused).
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, signal) }, 0, "kill {pid}");
}

/// Runs `tessera ARGS`, failing the test unless it ends within [`ANSWER`]; its output.
fn timed(m: &Machine, args: &[&str]) -> std::process::Output {
    let start = Instant::now();
    let out = m.tessera(args);
    assert!(start.elapsed() < ANSWER, "tessera {args:?} took {:?}", start.elapsed());
    out
}

/// Runs `tessera ARGS`, failing the test unless it succeeds within [`ANSWER`].
fn answered(m: &Machine, args: &[&str]) {
    let out = timed(m, args);
    assert!(out.status.success(), "tessera {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_stopped_process_holding_the_region_lock_holds_up_no_request() {
    let mut m = Machine::new("liveness-flock", "small");
    m.start();
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "1GiB", "--share", "30"]);
    // Any process of the daemon's user can lock the region's claims file, as a joining tenant of that user
    // does (shared), and keeps the lock while it is stopped (other users cannot open it: hostile_users.rs).
    let claims = format!("{}.claims", m.region().display());
    let hold = "import fcntl, sys, time\nf = open(sys.argv[1])\nfcntl.flock(f, fcntl.LOCK_SH)\nprint('held', \
                flush=True)\ntime.sleep(120)";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", hold]).arg(&claims).stdout(Stdio::piped());
    let mut holder = Guarded::spawn(&mut cmd).expect("run python3 (apt-get install python3)");
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap()).read_line(&mut line).expect("read the holder");
    assert_eq!(line.trim(), "held");
    signal(holder.id(), libc::SIGSTOP);

    // Reads and changes of settings do not need the lock.
    for args in [
        &["vgpu", "list"][..],
        &["vgpu", "show", "a"],
        &["vgpu", "set", "a", "--share", "20"],
        &["vgpu", "suspend", "a"],
        &["vgpu", "resume", "a"],
    ] {
        answered(&m, args);
    }
    // Naming or freeing a slot does: refused after a while, naming the process that holds it.
    let who = format!("pid {} (python3, stopped)", holder.id());
    for args in
        [&["vgpu", "create", "b", "--device", "0", "--memory", "1GiB", "--share", "10"][..], &["vgpu", "rm", "a"]]
    {
        let out = timed(&m, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "tessera {args:?} succeeded while another process held the lock");
        assert!(stderr.contains("has been locked for more than") && stderr.contains(&who), "{args:?}: {stderr}");
    }
    assert_eq!(m.list().as_array().map(Vec::len), Some(1), "nothing created or removed");
    drop(holder);
    answered(&m, &["vgpu", "create", "b", "--device", "0", "--memory", "1GiB", "--share", "10"]);
    answered(&m, &["vgpu", "rm", "a"]);
    let log = String::from_utf8_lossy(&m.stop_daemon().stderr).into_owned();
    assert!(log.contains("stopped by signal 15"), "{log}");
}

#[test]
fn a_tenant_finding_the_region_lock_held_fails_naming_the_holder_and_joins_once_it_is_free() {
    let mut m = Machine::new("liveness-join", "small");
    m.start();
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "1GiB", "--share", "30"]);
    // Held exclusive, as a stopped daemon or a tenant stopped while joining would hold it: a joining tenant
    // can take the lock neither to read nor to write.
    let hold = "import fcntl, sys, time\nf = open(sys.argv[1])\nfcntl.flock(f, fcntl.LOCK_EX)\nprint('held', \
                flush=True)\ntime.sleep(300)";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", hold]).arg(format!("{}.claims", m.region().display())).stdout(Stdio::piped());
    let mut holder = Guarded::spawn(&mut cmd).expect("run python3 (apt-get install python3)");
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap()).read_line(&mut line).expect("read the holder");
    assert_eq!(line.trim(), "held");
    signal(holder.id(), libc::SIGSTOP);

    // Every wait for the lock gives up after LOCK_TIMEOUT (`tessera run` and the shim's load-time read
    // of the vGPU's flags, which go on without them, then cuInit): the program is refused CUDA with an
    // error naming the holder. Functional bound: before, it waited for ever.
    let start = Instant::now();
    let out = m.tenant("a", &["mem-info"]).stdin(Stdio::null()).output().expect("run a tenant");
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the tenant ran while the region was locked: {stderr}");
    let who = format!("pid {} (python3, stopped)", holder.id());
    let limit = LOCK_TIMEOUT.as_millis();
    assert!(stderr.contains(&format!("has been locked for more than {limit} ms by {who}")), "{stderr}");
    assert!(stderr.contains("refusing to run CUDA"), "{stderr}");
    assert!(took >= LOCK_TIMEOUT && took < 9 * LOCK_TIMEOUT, "the tenant gave up after {took:?}");
    eprintln!("refused after {took:?}: {}", stderr.lines().find(|l| l.contains("refusing")).unwrap_or(&stderr));
    drop(holder);
    let out = m.tenant("a", &["mem-info"]).stdin(Stdio::null()).output().expect("run a tenant");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn sigterm_stops_a_daemon_whose_stderr_nobody_reads_any_more() {
    let m = Machine::new("liveness-sigterm", "small");
    let mut cmd = m.command(&["daemon"]);
    cmd.stderr(Stdio::piped());
    let mut daemon = Guarded::spawn(&mut cmd).expect("spawn tessera daemon");
    let start = Instant::now();
    while !m.tessera(&["vgpu", "list"]).status.success() {
        assert!(daemon.try_wait().expect("poll the daemon").is_none(), "the daemon exited at start");
        assert!(start.elapsed() < ANSWER, "the daemon did not answer");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Whoever read its stderr is gone (a test harness killed, a closed terminal): writing fails (EPIPE).
    let mut stderr = daemon.stderr.take().expect("piped stderr");
    let mut said = vec![0; 4096];
    let n = stderr.read(&mut said).expect("read the daemon's first line");
    assert!(String::from_utf8_lossy(&said[..n]).contains("tessera daemon: pid"));
    drop(stderr);
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "1GiB", "--share", "30"]);
    signal(daemon.id(), libc::SIGTERM);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = daemon.try_wait().expect("poll the daemon") {
            break status;
        }
        let threads = std::fs::read_dir(format!("/proc/{}/task", daemon.id())).map(|d| d.count()).unwrap_or(0);
        assert!(start.elapsed() < ANSWER, "SIGTERM did not stop the daemon ({threads} thread(s) left)");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(!m.socket().exists(), "the socket was removed");
}

/// Maps `len` bytes of `path` read-only for the rest of the test process.
fn map<T>(path: &Path, len: usize) -> &'static T {
    let file = std::fs::File::open(path).expect("open");
    // SAFETY: maps `len` bytes of a file we opened, shared and read-only; checked against MAP_FAILED below.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
    assert_ne!(p, libc::MAP_FAILED, "mmap {}", path.display());
    // SAFETY: the file holds a `T` at offset 0 (the region, or a live area), all atomics and integers; the
    // mapping is never unmapped.
    unsafe { &*(p as *const T) }
}

/// vGPU `name`'s live state, read as it is whether or not a daemon answers.
fn live(m: &Machine, name: &str) -> &'static VgpuLive {
    let index = common::region::slot_of(m, name);
    map(Path::new(&live_path(m.region().to_str().unwrap(), index)), AREA)
}

#[test]
fn a_suspension_holds_while_its_daemon_lives_and_lapses_once_it_is_gone() {
    let mut m = Machine::new("liveness-suspended", "small");
    m.start();
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "1GiB", "--share", "50"]);
    let tenant = m.saturate("a", "40", None);
    let started = Instant::now();
    let sched = &live(&m, "a").sched;
    let launches = || sched.launches.load(std::sync::atomic::Ordering::Acquire);
    while launches() < 100 {
        assert!(started.elapsed() < ANSWER, "the tenant did not get going");
        std::thread::sleep(Duration::from_millis(20));
    }
    m.ok(&["vgpu", "suspend", "a"]);
    std::thread::sleep(Duration::from_millis(300));
    let held = launches();

    // A stopped daemon is silent but alive: the suspension holds, longer than the grace.
    let daemon = m.daemon_pid();
    signal(daemon, libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(launches(), held, "a launch passed while the suspending daemon was stopped");
    signal(daemon, libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(launches(), held, "a launch passed once the daemon went on");

    // Gone, for the grace (10 s): its vGPU runs again rather than waiting for ever.
    m.kill_daemon();
    let killed = Instant::now();
    while launches() == held {
        assert!(killed.elapsed() < Duration::from_secs(30), "the tenant still waits 30 s after its daemon died");
        std::thread::sleep(Duration::from_millis(100));
    }
    let lapsed = killed.elapsed();
    eprintln!("the tenant ran again {:.1} s after its daemon died", lapsed.as_secs_f64());
    assert!(lapsed >= Duration::from_secs(9), "the suspension lapsed after only {lapsed:?}");
    let out = tenant.into_child().wait_with_output().expect("wait for the tenant");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("has been silent for") && stderr.contains("still exists (stopped?)"), "{stderr}");
    assert!(stderr.contains("has been gone for") && stderr.contains("until a daemon starts again"), "{stderr}");
}
