//! A process killed mid-launch gives its part of its vGPU's window back within a few of the daemon's
//! ticks: each process keeps its part in its process slot, and the daemon reclaims the dead process of a
//! vGPU whose window blocks its launches at once, so the survivor of the vGPU is never held back by what
//! the dead one had queued. The test reads the vGPU's live file as the daemon does (the tests run as its
//! owner), and the survivor's kernels from the engine trace (`SIMGPU_ENGINE_TRACE`).

use crate::common;

use common::tessera::Machine;
use memmap2::Mmap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tessera_region::open::live_path;
use tessera_region::{AREA, ProcSlot, VgpuLive};

/// Maps `path` read-only, checking it holds at least `size` bytes.
fn map(path: &str, size: usize) -> Mmap {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("open {path}: {e}"));
    // SAFETY: the test only reads the mapping through the region's atomics.
    let map = unsafe { Mmap::map(&file) }.unwrap_or_else(|e| panic!("map {path}: {e}"));
    assert!(map.len() >= size, "{path} holds {} bytes, not {size}", map.len());
    map
}

/// The process slot of `pid`, if attached.
fn slot_of(live: &VgpuLive, pid: u32) -> Option<&ProcSlot> {
    live.procs.iter().find(|p| p.attached_pid() == Some(pid))
}

/// The longest time within `[from, to)` the engine ran no kernel of process `pid`.
fn longest_gap(trace: &[simgpu::trace::Entry], pid: u32, from: u64, to: u64) -> u64 {
    let mut spans: Vec<(u64, u64)> = trace.iter().filter(|e| e.pid == pid).map(|e| (e.start_ns, e.end_ns)).collect();
    spans.sort_unstable();
    let (mut gap, mut last) = (0, from);
    for (start, end) in spans.into_iter().filter(|&(s, e)| e > from && s < to) {
        gap = gap.max(start.saturating_sub(last));
        last = last.max(end);
    }
    gap.max(to.saturating_sub(last))
}

#[test]
fn a_process_killed_mid_launch_gives_its_part_of_the_window_back_at_once() {
    let mut m = Machine::new("window", "small");
    m.start();
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "1GiB", "--share", "50"]);
    m.ok(&["vgpu", "create", "b", "--device", "0", "--memory", "1GiB", "--share", "50"]);
    let trace = m.file("engine.trace");
    let mut busy = m.saturate("b", "60", Some(&trace));
    let mut survivor = m.saturate("a", "60", Some(&trace));

    let region_path = m.region().to_string_lossy().into_owned();
    let index = common::region::slot_of(&m, "a");
    let live_map = map(&live_path(&region_path, index), AREA);
    // SAFETY: the live file holds one VgpuLive area; it is atomics and integers, valid for any bits.
    let live = unsafe { &*(live_map.as_ptr() as *const VgpuLive) };
    let sched = &live.sched;
    let wait = |what: &str, f: &mut dyn FnMut() -> bool| {
        let start = Instant::now();
        while !f() {
            assert!(start.elapsed() < Duration::from_secs(10), "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let survivor_pid = survivor.id();
    wait("the survivor to attach", &mut || slot_of(live, survivor_pid).is_some());
    let mine = &slot_of(live, survivor_pid).expect("the survivor's slot").inflight_ns;

    let began = simgpu::state::now_ns();
    let mut released = Vec::new();
    for round in 0..10u64 {
        let mut victim = m.saturate("a", "60", Some(&trace));
        let pid = victim.id();
        wait("the victim to attach", &mut || slot_of(live, pid).is_some());
        let launched = sched.launches.load(Ordering::Acquire);
        wait("the victim to launch", &mut || sched.launches.load(Ordering::Acquire) > launched + 100);
        // Killed at a different point of its launches each round.
        std::thread::sleep(Duration::from_micros(round * 1_700));
        let part = slot_of(live, pid).map_or(0, |p| p.inflight_ns.load(Ordering::Acquire));
        victim.kill().expect("SIGKILL the victim");
        victim.wait().expect("reap it");
        let killed = Instant::now();
        // Given back when the window holds no more than the survivor's part (read one after the other: a
        // sample may catch the survivor between its two steps, so some sample will do). Its slot itself may
        // wait for the once-a-second reclaim when what it left blocks nothing.
        loop {
            let window = sched.inflight_ns.load(Ordering::SeqCst);
            let own = mine.load(Ordering::SeqCst);
            if window <= own {
                break;
            }
            let gone = slot_of(live, pid).is_none();
            assert!(
                killed.elapsed() < Duration::from_millis(500),
                "round {round}: 500 ms after the victim died (with {part} ns in the window) the window holds {window} \
                 ns, the survivor's part {own} ns (victim's slot free: {gone})"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        released.push((part, killed.elapsed()));
    }
    let ended = simgpu::state::now_ns();
    eprintln!("victims' parts of the window at their death and how soon they were given back: {released:?}");
    let _ = (survivor.kill(), busy.kill(), survivor.wait(), busy.wait());
    let trace = simgpu::trace::read(&trace).expect("read the engine trace");
    let gap = longest_gap(&trace, survivor_pid, began, ended);
    eprintln!("the survivor's longest time without a kernel on the engine: {:.1} ms", gap as f64 / 1e6);
    assert!(gap < 1_000_000_000, "the survivor stalled for {:.1} ms", gap as f64 / 1e6);
}
