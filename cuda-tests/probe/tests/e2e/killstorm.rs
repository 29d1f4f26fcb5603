//! Kill storms: six processes churn `cuMemAlloc`/`cuMemFree` of 1-256 MiB on one 4 GiB vGPU whose
//! contexts cost 500 MiB each, and one of them, chosen at random, is SIGKILLed every 1-8 ms and replaced at
//! once — on a vGPU the daemon manages and on one shared without a daemon. Throughout, the vGPU's usage
//! and the device memory the simulated driver really gave its live processes stay within the quota; at the
//! end, once every process is gone and a reclaim ran, nothing is charged and no process slot is left
//! claimed. Also: a process that cannot open `/proc` (at its descriptor limit) never takes its live peers
//! for dead.

use crate::common;

use common::Rng;

use common::tessera::Machine;
use common::{GIB, Guarded, MIB, Sim, at, finish, first_line, u64_at};
use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tessera_region::reclaim;
use tessera_region::{VgpuSlot, encode_name};
use tessera_region::{file::RegionFile, open::Access};

/// The vGPU's quota.
const QUOTA: u64 = 4 * GIB;
/// What a context costs on the simulated device.
const CONTEXT: &str = "500MiB";
/// Processes churning at once.
const TENANTS: usize = 6;
/// SIGKILLs per storm, besides the final six (two storms: 3,012 in all).
const KILLS: usize = 1_500;

/// The vGPU's records as its processes share them: the region file mapped (and for a vGPU the daemon
/// manages, its live file over the slot, as a joining process maps it).
struct View {
    file: RegionFile,
    index: usize,
}

impl View {
    /// Maps the region at `path` once it exists, and finds vGPU `name` in it.
    fn open(path: &str, name: &str, managed: bool) -> View {
        let encoded = encode_name(name).expect("a vGPU name");
        let file = common::region::wait_for("the region file", Duration::from_secs(20), || {
            std::path::Path::new(path).exists().then(|| RegionFile::open_as(path, Access::Joiner).ok()).flatten()
        });
        let index = common::region::wait_for(&format!("vGPU {name:?}"), Duration::from_secs(20), || {
            file.lock().expect("lock the region").find(&encoded)
        });
        if managed {
            file.map_live(index, None).expect("map the vGPU's live file");
        }
        View { file, index }
    }

    fn vgpu(&self) -> &VgpuSlot {
        &self.file.region().vgpus[self.index]
    }

    /// Process slots that hold something or are claimed, described for a failure message (empty when the
    /// vGPU is clean: every slot free, or a dead process's holding nothing).
    fn leftovers(&self) -> Vec<String> {
        let v = self.vgpu();
        v.live
            .procs
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let pid = p.word();
                let (used, pending) = (p.used[0].load(Ordering::Acquire), p.pending.load(Ordering::Acquire));
                (reclaim::is_tag(pid) || used != 0 || pending != 0)
                    .then(|| format!("slot {i}: pid word {pid:#x}, used {used}, pending {pending}"))
            })
            .collect()
    }
}

/// What the storm saw at its worst.
#[derive(Debug, Default)]
struct Worst {
    used: u64,
    real: u64,
    samples: u64,
}

/// Device memory the simulated driver has given the processes in `live` on device 0.
fn really_allocated(state: &simgpu::SharedState, live: &HashSet<u32>) -> u64 {
    state
        .processes()
        .filter(|p| live.contains(&p.pid.load(Ordering::Acquire)))
        .map(|p| p.memory[0].load(Ordering::Acquire))
        .sum()
}

/// Churning processes, SIGKILLed and reaped when dropped (also when a check fails: [`Guarded`]).
struct Tenants(Vec<Guarded>);

impl Tenants {
    /// Stops every process (SIGSTOP) before any is killed, so that none of them can take a dead peer's
    /// slot back while the others die one by one (the shim scans for dead peers when it allocates): the
    /// slots of all those that had joined are left as they were. Then kills and reaps them.
    fn kill_all_at_once(self) {
        for t in &self.0 {
            // SAFETY: plain signal to a child this test spawned and has not reaped yet.
            unsafe { libc::kill(t.id() as libc::pid_t, libc::SIGSTOP) };
        }
        drop(self);
    }
}

/// Runs a storm: `TENANTS` processes from `spawn`, one SIGKILLed every 1-8 ms and replaced, `KILLS`
/// times; returns the processes still churning. A watcher samples the vGPU's usage and what the driver gave its live
/// processes all along, each sample while no process is being killed (a sample never mixes a process's
/// memory, as the driver still shows it, with the room its death gave the others) and with every process
/// stopped ([`common::while_stopped`]: one instant's state), and fails the test if
/// either passed the quota.
fn storm(sim: &Sim, view: &View, spawn: impl Fn(&[&str]) -> Guarded) -> Tenants {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    let mut rng = Rng(seed);
    let config = simgpu::Config::from_lookup(|k| sim.var(k).map(str::to_string)).expect("SIMGPU_* settings");
    let state = simgpu::SharedState::open(&config, false).expect("the simulated driver's state");
    let tenants = Mutex::new(Tenants((0..TENANTS).map(|i| spawn(CHURN[i % 2])).collect()));
    let done = AtomicBool::new(false);
    let worst = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let mut worst = Worst::default();
            while !done.load(Ordering::Acquire) {
                {
                    let tenants = tenants.lock().unwrap();
                    let live: HashSet<u32> = tenants.0.iter().map(|t| t.id()).collect();
                    let children: Vec<&Child> = tenants.0.iter().map(|t| &**t).collect();
                    let (used, real) =
                        common::while_stopped(&children, || (view.vgpu().used(0), really_allocated(&state, &live)));
                    worst =
                        Worst { used: worst.used.max(used), real: worst.real.max(real), samples: worst.samples + 1 };
                }
                if worst.used > QUOTA || worst.real > QUOTA {
                    break;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            worst
        });
        for _ in 0..KILLS {
            let i = rng.next(TENANTS as u64) as usize;
            {
                // The victim leaves the live set as it dies: the driver may still show its memory for a while,
                // after its room went to others.
                let mut tenants = tenants.lock().unwrap();
                tenants.0[i].kill().expect("SIGKILL");
                tenants.0[i].wait().expect("reap");
                tenants.0[i] = spawn(CHURN[rng.next(2) as usize]);
            }
            std::thread::sleep(Duration::from_micros(1000 + rng.next(7001)));
            if watcher.is_finished() {
                break;
            }
        }
        done.store(true, Ordering::Release);
        watcher.join().unwrap()
    });
    let tenants = tenants.into_inner().unwrap();
    assert!(worst.used <= QUOTA, "the vGPU's usage passed its quota ({QUOTA}): {worst:?}; seed {seed}");
    assert!(
        worst.real <= QUOTA,
        "the driver gave the vGPU's processes more than the quota ({QUOTA}): {worst:?}; seed {seed}"
    );
    eprintln!("storm: {worst:?}");
    tenants
}

/// The storm's churning process: quiet, with nothing to read or write.
fn quiet(mut cmd: Command) -> Guarded {
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).env("TESSERA_LOG", "error");
    Guarded::spawn(&mut cmd).expect("spawn a churning process")
}

/// What churning processes run: half of them 256 MiB blocks (which keep the quota contended: six
/// contexts and six such blocks do not fit), half random sizes from 1 MiB to 256 MiB.
const CHURN: [&[&str]; 2] =
    [&["churn", "--min", "256MiB", "--max", "256MiB"], &["churn", "--min", "1MiB", "--max", "256MiB"]];

#[test]
fn a_kill_storm_on_a_managed_vgpu_leaks_nothing_and_never_overshoots() {
    let _turn = common::load_turn();
    let mut m = Machine::new("killstorm", "small");
    m.configure(|sim| sim.with("SIMGPU_MEMORY", "16GiB").with("SIMGPU_CONTEXT_MEMORY", CONTEXT));
    m.start();
    m.ok(&["vgpu", "create", "storm", "--device", "0", "--memory", "4GiB", "--share", "50"]);
    let region = m.region().to_string_lossy().into_owned();
    let view = View::open(&region, "storm", true);
    let tenants = storm(&m.sim, &view, |args| quiet(m.tenant("storm", args)));
    // The daemon is killed before the last tenants: the restarted one must find their slots and reclaim them.
    m.kill_daemon();
    tenants.kill_all_at_once();
    assert!(view.vgpu().attached().count() > 0, "dead tenants' slots are left for the restarted daemon");
    m.start();
    common::region::wait_for("the restarted daemon to reclaim every dead tenant", Duration::from_secs(20), || {
        view.leftovers().is_empty().then_some(())
    });
    assert_eq!(view.vgpu().used(0), 0);
    assert_eq!(m.show("storm")["used"].as_u64(), Some(0));
    // Nothing left charged: the quota can be lowered to what a new process needs.
    m.ok(&["vgpu", "set", "storm", "--memory", "1GiB"]);
}

#[test]
fn a_kill_storm_on_a_vgpu_without_daemon_leaks_nothing_and_never_overshoots() {
    let _turn = common::load_turn();
    let region = common::region::TestRegion::new("killstorm");
    let sim = Sim::shimmed("killstorm")
        .with("SIMGPU_DEVICES", "small")
        .with("SIMGPU_MEMORY", "16GiB")
        .with("SIMGPU_CONTEXT_MEMORY", CONTEXT)
        .with("TESSERA_REGION", region.path())
        .with("TESSERA_VGPU", "storm")
        .with("TESSERA_MEMORY_LIMIT", "4GiB");
    // A process attached throughout (holding its context): the vGPU is never idle, so its usage is never
    // started over on joining, and whatever the storm leaked would stay.
    let mut anchor = sim.spawn(&["quota-race", "--chunk", "1MiB", "--count", "0"]);
    assert_eq!(at(&first_line(&mut anchor), "ready"), true);
    let view = View::open(region.path(), "storm", false);
    let context = view.vgpu().used(0);
    assert_eq!(context, 500 * MIB);
    drop(storm(&sim, &view, |args| quiet(sim.command(args))));
    // A last process joining reclaims every dead one (and exits cleanly, giving back its own context).
    let last = sim.run(&["mem-info"]);
    assert!(last.success, "{}", last.stderr);
    assert_eq!(u64_at(&last.json, "total"), QUOTA, "{}", last.json);
    assert_eq!(view.vgpu().used(0), context, "only the anchor's context is left");
    finish(anchor);
    assert_eq!(view.leftovers(), Vec::<String>::new(), "nothing charged, no slot left claimed");
    assert_eq!(view.vgpu().used(0), 0);
}

#[test]
fn a_process_at_its_descriptor_limit_never_takes_live_peers_for_dead() {
    let region = common::region::TestRegion::new("emfile");
    let sim = Sim::shimmed("emfile")
        .with("SIMGPU_DEVICES", "small")
        .with("TESSERA_REGION", region.path())
        .with("TESSERA_VGPU", "fds")
        .with("TESSERA_MEMORY_LIMIT", "1GiB")
        .with("TESSERA_LOG", "error");
    // Two live peers hold 128 MiB contexts and 256 MiB each: 256 MiB of the quota is left.
    let peers: Vec<Guarded> = (0..2)
        .map(|_| {
            let mut p = sim.spawn(&["alloc", "--bytes", "256MiB"]);
            assert_eq!(at(&first_line(&mut p), "allocated"), true);
            p
        })
        .collect();
    let view = View::open(region.path(), "fds", false);
    let held = view.vgpu().used(0);
    assert_eq!(held, 2 * (128 + 256) * MIB);
    // A process without a descriptor to spare asks for blocks only the peers' memory could make room for:
    // every refusal makes it look for dead processes, and /proc cannot be read.
    let mut churner =
        sim.command(&["churn", "--min", "257MiB", "--max", "512MiB", "--seconds", "2", "--exhaust-fds", "1"]);
    let mut churner = Guarded::spawn(churner.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()))
        .expect("spawn the churning process");
    let ready = first_line(&mut churner);
    assert!(u64_at(&ready, "fds_opened") > 0, "{ready}");
    let state = sim.driver_state();
    let live: HashSet<u32> = peers.iter().map(|p| p.id()).chain([churner.id()]).collect();
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let real = really_allocated(&state, &live);
        assert!(real <= GIB, "the driver gave the vGPU's processes {real} bytes, over its 1 GiB quota");
        std::thread::sleep(Duration::from_millis(1));
    }
    let out = churner.into_child().wait_with_output().expect("the churning process");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report = common::finished(out).json;
    assert_eq!(u64_at(&report, "granted"), 0, "only the peers' memory could have held a block: {report}");
    assert!(u64_at(&report, "refused") > 0, "{report}");
    assert_eq!(view.vgpu().used(0), held, "the live peers keep what they hold");
    for p in peers {
        finish(p);
    }
}
