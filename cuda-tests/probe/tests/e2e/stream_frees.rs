//! Stream-ordered frees and the quota (`cuda-tests/c/stream_frees.c` under the shim, on a vGPU shared
//! without a daemon): memory freed with `cuMemFreeAsync` stays charged until the stream has executed the
//! free, as the driver holds it until then. A peer's allocation that only the pending free's memory could
//! hold is refused, `cuMemGetInfo` counts the bytes as used, and both change once the stream is
//! synchronized. What a pool keeps of freed memory (up to its release threshold) stays charged until the
//! pool gives it back. A free captured into a graph stays charged until its context is destroyed. And in
//! a kill storm of processes allocating by every path (`cuMemAlloc`, `cuMemAllocAsync`, pools keeping
//! memory, VMM, managed) the memory the simulated driver really gave the vGPU's live processes never
//! exceeds the quota, in any sample.

use crate::common;

use common::Rng;

use common::cprog::{CBuild, Facts, workspace};
use common::region::TestRegion;
use common::{GIB, Guarded, MIB, OUT_OF_MEMORY, Sim};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The vGPU's quota.
const QUOTA: u64 = 4 * GIB;
/// What a context costs on the simulated device.
const CONTEXT: u64 = 256 * MIB;

fn program() -> PathBuf {
    let spin = workspace().join("tools/kernels/spin.ptx");
    CBuild::program("stream_frees.c").link_driver().define(&format!("TESSERA_SPIN_PTX=\"{}\"", spin.display())).build()
}

/// The `small` machine under the shim, with one vGPU (`quota`) shared through the test's region file.
fn machine(tag: &str, region: &TestRegion, quota: u64) -> Sim {
    Sim::shimmed(tag)
        .with("SIMGPU_DEVICES", "small")
        .with("SIMGPU_MEMORY", "16GiB")
        .with("SIMGPU_CONTEXT_MEMORY", &format!("{}MiB", CONTEXT / MIB))
        .with("TESSERA_REGION", region.path())
        .with("TESSERA_VGPU", "frees")
        .with("TESSERA_MEMORY_LIMIT", &format!("{}MiB", quota / MIB))
}

/// Reads a spawned program's lines up to the fact `last` (or its end), as facts.
fn lines_until(out: &mut BufReader<ChildStdout>, last: &str) -> Facts {
    let mut text = String::new();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).expect("read the program's output") == 0 {
            break;
        }
        text.push_str(&line);
        let key = line.split_whitespace().next();
        if key == Some(last) || key == Some("error") {
            break;
        }
    }
    Facts::from_output(&std::process::Output {
        status: std::process::ExitStatus::default(),
        stdout: text.into_bytes(),
        stderr: Vec::new(),
    })
}

/// Device memory the simulated driver has given the processes in `live` (all of them when `None`).
fn really_allocated(state: &simgpu::SharedState, live: Option<&HashSet<u32>>) -> u64 {
    state
        .processes()
        .filter(|p| live.is_none_or(|l| l.contains(&p.pid.load(Ordering::Acquire))))
        .map(|p| p.memory[0].load(Ordering::Acquire))
        .sum()
}

/// The repro: 3 GiB allocated with `cuMemAllocAsync`, a long kernel queued, then `cuMemFreeAsync`.
/// Until the stream executes the free the driver holds the 3 GiB: the owner's `cuMemGetInfo` counts them,
/// and a peer's 3 GiB `cuMemAlloc` is refused; once the owner synchronized, both see the memory back.
#[test]
fn a_pending_async_free_stays_charged_until_the_stream_executes_it() {
    let exe = program();
    let region = TestRegion::new("stream-frees-repro");
    let sim = machine("stream-frees-repro", &region, QUOTA);
    let exe = exe.to_str().expect("UTF-8 path");
    let size = (3 * GIB).to_string();
    // Long enough that the peer has started, been refused and exited while the kernel still runs, even on
    // a loaded machine (checked below: the owner's stream is still busy afterwards).
    let kernel_ns = Duration::from_secs(8).as_nanos().to_string();
    let mut cmd = sim.command_for(exe, &["owner", &size, &kernel_ns]);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut owner = Guarded::spawn(&mut cmd).expect("spawn the owner");
    let mut out = BufReader::new(owner.stdout.take().expect("piped stdout"));
    let pending = lines_until(&mut out, "ready");
    assert_eq!(pending.opt("ready"), Some("1"), "{}", pending.stdout);
    assert_eq!(pending.num("pending.total") as u64, QUOTA);
    let used = QUOTA - pending.num("pending.free") as u64;
    assert!(
        used >= 3 * GIB + CONTEXT,
        "cuMemGetInfo shows {} MiB used while a 3 GiB free is pending (it must count them)",
        used / MIB
    );

    let peer = Facts::ok(sim.command_for(exe, &["peer", &size]));
    let state = sim.driver_state();
    let real = really_allocated(&state, None);
    assert_eq!(
        peer.num("alloc") as u64,
        OUT_OF_MEMORY,
        "a peer's 3 GiB cuMemAlloc passed while the driver still held the pending free's 3 GiB ({} MiB in all)",
        real / MIB
    );

    owner.stdin.as_mut().expect("piped stdin").write_all(b"sync\n").expect("tell the owner to synchronize");
    let synced = lines_until(&mut out, "synced");
    assert_eq!(synced.opt("synced"), Some("1"), "{}", synced.stdout);
    assert_eq!(synced.num("busy"), 1, "the kernel ended before the peer was refused: the check proved nothing");
    assert_eq!(
        synced.num("synced.free") as u64,
        QUOTA - CONTEXT,
        "after synchronizing, only the owner's context is charged"
    );
    let peer = Facts::ok(sim.command_for(exe, &["peer", &size]));
    assert_eq!(peer.num("alloc"), 0, "the peer's allocation fits once the free has been executed");

    owner.stdin.as_mut().expect("piped stdin").write_all(b"exit\n").expect("tell the owner to exit");
    let end = lines_until(&mut out, "done");
    assert_eq!(end.opt("done"), Some("ok"), "{}", end.stdout);
    let status = owner.into_child().wait().expect("wait for the owner");
    assert!(status.success(), "the owner failed: {status}");
}

/// A process re-allocating, on the same stream, what it just freed there is not refused for the pending
/// free's bytes (the stream-ordered allocator would reuse them). The quota cannot hold both while the free
/// is pending, so the allocation waits for the free to execute (on the old code it passed at once, the
/// bytes having gone back when the free was queued).
#[test]
fn an_allocation_that_only_a_pending_free_makes_room_for_waits_for_it() {
    let exe = program();
    let region = TestRegion::new("stream-frees-reuse");
    let sim = machine("stream-frees-reuse", &region, QUOTA);
    let exe = exe.to_str().expect("UTF-8 path");
    let kernel = Duration::from_millis(500);
    let facts = Facts::ok(sim.command_for(exe, &["reuse", &(3 * GIB).to_string(), &kernel.as_nanos().to_string()]));
    assert_eq!(facts.num("again"), 0, "the second 3 GiB allocation was refused");
    assert!(
        facts.num("again_ns") as u128 >= kernel.as_nanos() / 2,
        "it did not wait for the pending free ({} ns)",
        facts.num("again_ns")
    );
}

/// A free captured into a graph is a graph free node: the driver frees the memory only when a launch of
/// the graph executes it, which the shim does not follow, so the bytes stay charged (never too few) until
/// their context is destroyed; then they go back with it.
#[test]
fn a_free_captured_into_a_graph_stays_charged_until_its_context_is_destroyed() {
    let exe = program();
    let region = TestRegion::new("stream-frees-captured");
    let sim = machine("stream-frees-captured", &region, QUOTA);
    let exe = exe.to_str().expect("UTF-8 path");
    let facts = Facts::ok(sim.command_for(exe, &["captured", &GIB.to_string()]));
    let used = |key: &str| QUOTA - facts.num(key) as u64;
    assert_eq!(used("captured.free"), CONTEXT + GIB, "the captured free has not run: its GiB is charged");
    assert_eq!(used("launched.free"), CONTEXT + GIB, "kept charged after the graph ran (the shim cannot tell)");
    assert_eq!(used("recreated.free"), CONTEXT, "the destroyed context's held free went back with it");
}

/// A pool keeps what is freed from it, up to its release threshold, after the stream executed the free
/// and was synchronized: the driver holds that memory, so it stays charged (`cuMemGetInfo` counts it and a
/// peer's allocation that only it could hold is refused) until the pool gives it back, here when the
/// program trims the pool.
#[test]
fn what_a_pool_keeps_of_freed_memory_stays_charged_until_it_gives_it_back() {
    let exe = program();
    let region = TestRegion::new("stream-frees-kept");
    let sim = machine("stream-frees-kept", &region, QUOTA);
    let exe = exe.to_str().expect("UTF-8 path");
    let mut cmd = sim.command_for(exe, &["kept", &(3 * GIB).to_string(), &(2 * GIB).to_string()]);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut owner = Guarded::spawn(&mut cmd).expect("spawn the owner");
    let mut out = BufReader::new(owner.stdout.take().expect("piped stdout"));
    let kept = lines_until(&mut out, "kept");
    assert_eq!(kept.opt("kept"), Some("1"), "{}", kept.stdout);
    assert_eq!(QUOTA - kept.num("kept.free") as u64, CONTEXT + 2 * GIB, "the 2 GiB the pool keeps are counted");

    let size = (3 * GIB).to_string();
    let peer = Facts::ok(sim.command_for(exe, &["peer", &size]));
    let real = really_allocated(&sim.driver_state(), None);
    assert_eq!(
        peer.num("alloc") as u64,
        OUT_OF_MEMORY,
        "a peer's 3 GiB cuMemAlloc passed while the owner's pool kept 2 GiB ({} MiB in all on the device)",
        real / MIB
    );

    // The refused peer's context is given back by the owner's next scan of dead processes (at most once a
    // second), which its next cuMemGetInfo makes.
    std::thread::sleep(Duration::from_millis(1200));
    owner.stdin.as_mut().expect("piped stdin").write_all(b"trim\n").expect("tell the owner to trim");
    let trimmed = lines_until(&mut out, "trimmed");
    assert_eq!(trimmed.opt("trimmed"), Some("1"), "{}", trimmed.stdout);
    assert_eq!(QUOTA - trimmed.num("trimmed.free") as u64, CONTEXT, "trimmed: only the context is charged");
    let peer = Facts::ok(sim.command_for(exe, &["peer", &size]));
    assert_eq!(peer.num("alloc"), 0, "the peer's allocation fits once the pool gave its memory back");

    owner.stdin.as_mut().expect("piped stdin").write_all(b"exit\n").expect("tell the owner to exit");
    let end = lines_until(&mut out, "done");
    assert_eq!(end.opt("done"), Some("ok"), "{}", end.stdout);
    assert!(owner.into_child().wait().expect("wait for the owner").success());
}

/// The same of pool memory freed with `cuMemFree` (which frees at once): the pool keeps it all the same.
#[test]
fn what_a_pool_keeps_of_memory_freed_with_cumemfree_stays_charged() {
    let exe = program();
    let region = TestRegion::new("stream-frees-kept-sync");
    let sim = machine("stream-frees-kept-sync", &region, QUOTA);
    let exe = exe.to_str().expect("UTF-8 path");
    let args = ["kept", &(3 * GIB).to_string(), &(2 * GIB).to_string(), "sync"];
    let mut cmd = sim.command_for(exe, &args);
    cmd.stdin(Stdio::null());
    let facts = Facts::ok(cmd);
    assert_eq!(QUOTA - facts.num("kept.free") as u64, CONTEXT + 2 * GIB, "the 2 GiB the pool keeps are counted");
    assert_eq!(QUOTA - facts.num("trimmed.free") as u64, CONTEXT, "trimmed: only the context is charged");
}

/// Processes churning at once in the storm.
const TENANTS: usize = 4;
/// The storm's quota: four contexts and four processes holding up to four 1-256 MiB blocks each do not fit.
const STORM_QUOTA: u64 = 2 * GIB;
/// How long the storm lasts.
const STORM: Duration = Duration::from_secs(12);

/// Four processes allocate by every path (stream-ordered frees behind 1-20 ms kernels) on a 2 GiB vGPU,
/// one SIGKILLed and replaced every 20-100 ms, for 12 s. A watcher samples what the simulated driver gave
/// the live processes (while no process is being killed, so that a sample never mixes a dying process's
/// memory with the room its death gave the others; and with every process stopped, so that it never
/// mixes one's memory before a free with another's after it took that room): no sample may exceed the quota.
#[test]
fn a_kill_storm_over_every_allocation_path_never_exceeds_the_quota_on_the_device() {
    let _turn = common::load_turn();
    let exe = program();
    let region = TestRegion::new("stream-frees-storm");
    let sim = machine("stream-frees-storm", &region, STORM_QUOTA);
    let exe = exe.to_str().expect("UTF-8 path");
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    let mut rng = Rng(seed);
    // What the churning processes print (an error, should one fail), for the failure message.
    let log_path = std::env::temp_dir().join(format!("stream-frees-churn-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path).expect("create the churn log");
    let spawn = |rng: &mut Rng| {
        let seed = (rng.next(u64::MAX) | 1).to_string();
        let mut cmd = sim.command_for(exe, &["churn", &seed]);
        let out = log.try_clone().expect("share the churn log");
        cmd.stdin(Stdio::null()).stdout(out).stderr(Stdio::null()).env("TESSERA_LOG", "error");
        Guarded::spawn(&mut cmd).expect("spawn a churning process")
    };
    let failed = |what: &str| -> ! {
        let printed = std::fs::read_to_string(&log_path).unwrap_or_default();
        let errors: Vec<&str> = printed.lines().filter(|l| l.starts_with("error")).collect();
        panic!("{what}; the churning processes' errors: {errors:#?}")
    };
    let state = sim.driver_state();
    let tenants = Mutex::new((0..TENANTS).map(|_| spawn(&mut rng)).collect::<Vec<_>>());
    let done = AtomicBool::new(false);
    let (worst, samples) = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let (mut worst, mut samples) = (0u64, 0u64);
            while !done.load(Ordering::Acquire) && worst <= STORM_QUOTA {
                {
                    let tenants = tenants.lock().unwrap();
                    let live: HashSet<u32> = tenants.iter().map(|t| t.id()).collect();
                    let children: Vec<&Child> = tenants.iter().map(|t| &**t).collect();
                    let real = common::while_stopped(&children, || really_allocated(&state, Some(&live)));
                    worst = worst.max(real);
                    samples += 1;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            (worst, samples)
        });
        let start = Instant::now();
        let mut kills = 0;
        while start.elapsed() < STORM && !watcher.is_finished() {
            std::thread::sleep(Duration::from_millis(20 + rng.next(81)));
            let i = rng.next(TENANTS as u64) as usize;
            let mut tenants = tenants.lock().unwrap();
            if let Some(status) = tenants[i].try_wait().expect("poll a churning process") {
                failed(&format!("a churning process ended by itself ({status})"));
            }
            tenants[i].kill().expect("SIGKILL");
            tenants[i].wait().expect("reap");
            tenants[i] = spawn(&mut rng);
            kills += 1;
        }
        done.store(true, Ordering::Release);
        eprintln!("storm: {kills} kills");
        watcher.join().unwrap()
    });
    eprintln!("storm: worst {} MiB of {} MiB over {samples} samples", worst / MIB, STORM_QUOTA / MIB);
    assert!(
        worst <= STORM_QUOTA,
        "the driver gave the vGPU's live processes {} MiB, over the {} MiB quota; seed {seed}",
        worst / MIB,
        STORM_QUOTA / MIB
    );
    assert!(samples > 1000, "the watcher took only {samples} samples");
    for t in tenants.lock().unwrap().iter_mut() {
        if let Some(status) = t.try_wait().expect("poll a churning process") {
            failed(&format!("a churning process ended by itself ({status})"));
        }
    }
    // Every path allocated during the storm (each line: what one process had made by then, per path).
    let printed = std::fs::read_to_string(&log_path).expect("read the churn log");
    let mut made = [0u64; 5];
    for line in printed.lines().filter_map(|l| l.strip_prefix("made ")) {
        for (m, n) in made.iter_mut().zip(line.split(' ')) {
            *m = (*m).max(n.parse().expect("a count"));
        }
    }
    eprintln!("storm: most allocations by one process (sync, async, pool, VMM, managed): {made:?}");
    assert!(made.iter().all(|&m| m > 0), "some allocation path never allocated: {made:?}");
    let _ = std::fs::remove_file(&log_path);
    // The storm did exercise the paths: every tenant still alive has its context and some memory charged.
    let used = region.vgpu("frees").used(0);
    assert!(used >= CONTEXT, "the vGPU shows {used} bytes in use with {TENANTS} tenants running");
}
