//! Tessera's region file seen from a test: a private path, and a live shared mapping through which a test
//! reads the vGPU records the shim keeps and writes them as the daemon would (suspend, priority, grants).

use super::tessera::Machine;
use memmap2::MmapMut;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tessera_region::conf::conf_path;
use tessera_region::open::live_path;
use tessera_region::reclaim::start_time;
use tessera_region::{AREA, LAYOUT_SIZE, MAGIC, MAX_VGPUS, Region, Sched, VgpuConfig, VgpuLive, VgpuSlot};
use tessera_region::{encode_name, state};

/// A region file private to one test (removed when dropped), mapped once a process has created it.
pub struct TestRegion {
    path: PathBuf,
    map: OnceLock<MmapMut>,
}

/// Polls `f` every 200 µs until it yields a value, failing the test with `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    poll_every(Duration::from_micros(200), what, timeout, f)
}

/// Polls `f` every `period` until it yields a value, failing the test with `what` after `timeout`.
pub fn poll_every<T>(period: Duration, what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(period);
    }
}

impl TestRegion {
    /// A fresh path for test `tag`.
    pub fn new(tag: &str) -> TestRegion {
        let path = std::env::temp_dir().join(format!("tessera-test-{}-{tag}.region", std::process::id()));
        let _ = std::fs::remove_file(&path);
        TestRegion { path, map: OnceLock::new() }
    }

    /// The path, for `TESSERA_REGION`.
    pub fn path(&self) -> &str {
        self.path.to_str().expect("UTF-8 temp path")
    }

    /// The region, once a process has created and initialized the file (waits up to 10 s).
    pub fn region(&self) -> &Region {
        let map = self.map.get_or_init(|| {
            wait_for("the region file", Duration::from_secs(10), || {
                let file = std::fs::OpenOptions::new().read(true).write(true).open(&self.path).ok()?;
                (file.metadata().ok()?.len() == LAYOUT_SIZE as u64).then_some(())?;
                // SAFETY: the file has the region's size; the test only uses it through the region's atomics.
                unsafe { MmapMut::map_mut(&file) }.ok()
            })
        });
        // SAFETY: the mapping is page-aligned, LAYOUT_SIZE bytes, and Region is atomics and integers, valid
        // for any bits; it lives as long as `self`.
        let region = unsafe { &*(map.as_ptr() as *const Region) };
        wait_for("the region header", Duration::from_secs(10), || {
            (region.header.magic.load(Ordering::Acquire) == MAGIC).then_some(())
        });
        region
    }

    /// vGPU `name`'s slot, once a process has joined it (waits up to 10 s).
    pub fn vgpu(&self, name: &str) -> &VgpuSlot {
        let encoded = encode_name(name).expect("a valid vGPU name");
        let region = self.region();
        wait_for(&format!("vGPU {name:?}"), Duration::from_secs(10), || {
            region.vgpus.iter().find(|v| v.state() == state::READY && v.config.name == encoded)
        })
    }
}

/// Announces a change of `s` as the protocol requires (the daemon's and the shim's one wake-up).
pub fn notify(s: &Sched) {
    s.wake_waiters();
}

/// A tenant cheating through its live file: a thread keeps `bucket` at the burst (2 ms of tokens for a
/// 1 ms window) every 100 µs, waking its launches, until [`BucketCheat::stop`] (or drop).
pub struct BucketCheat {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BucketCheat {
    /// Starts cheating on `bucket`.
    pub fn start(bucket: &'static Sched) -> BucketCheat {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                bucket.tokens.store(2_000_000, Ordering::SeqCst);
                notify(bucket);
                std::thread::sleep(Duration::from_micros(100));
            }
        });
        BucketCheat { stop, thread: Some(thread) }
    }

    /// Stops cheating and waits for the thread.
    pub fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the cheating thread");
        }
    }
}

impl Drop for BucketCheat {
    fn drop(&mut self) {
        self.end();
    }
}

impl Drop for TestRegion {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Maps `len` bytes of `path` shared (writable if asked), for the rest of the test: the region or a live
/// area, as a process could map it.
pub fn map_file<T>(path: &Path, len: usize, writable: bool) -> &'static T {
    let file = std::fs::OpenOptions::new().read(true).write(writable).open(path).expect("open");
    let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
    // SAFETY: maps `len` bytes of a file we opened, shared; checked against MAP_FAILED below.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, file.as_raw_fd(), 0) };
    assert_ne!(p, libc::MAP_FAILED, "mmap {}", path.display());
    // SAFETY: the file holds a `T` at offset 0 (the region, or a live area), all atomics and integers; the
    // mapping is never unmapped.
    unsafe { &*(p as *const T) }
}

/// The slot of vGPU `name` of machine `m`'s daemon, found by its configuration file (the region file
/// shows a managed vGPU's slot only as hidden).
pub fn slot_of(m: &Machine, name: &str) -> usize {
    let region = m.region().to_string_lossy().into_owned();
    let wanted = encode_name(name).expect("a valid vGPU name");
    let named = |i: usize| {
        let at = std::mem::offset_of!(VgpuConfig, name);
        std::fs::read(conf_path(&region, i)).is_ok_and(|bytes| bytes.get(at..at + wanted.len()) == Some(&wanted[..]))
    };
    (0..MAX_VGPUS).find(|&i| named(i)).unwrap_or_else(|| panic!("vGPU {name:?} has no configuration file"))
}

/// vGPU `name`'s live file on machine `m`: its path, and the file mapped writable as its tenant could.
pub fn live_file(m: &Machine, name: &str) -> (PathBuf, &'static VgpuLive) {
    let index = slot_of(m, name);
    let path = PathBuf::from(live_path(m.region().to_str().unwrap(), index));
    let area = map_file(&path, AREA, true);
    (path, area)
}

/// Plants process `pid` (with its true start time) in process slot `i` of `live`, holding `bytes` on
/// device 0, as a tenant writing its file could.
pub fn plant(live: &VgpuLive, i: usize, pid: u32, bytes: u64) {
    let p = &live.procs[i];
    p.start_time.store(start_time(pid).expect("a live process"), Ordering::SeqCst);
    p.used[0].store(bytes, Ordering::SeqCst);
    live.procs_hwm.fetch_max(i as u32 + 1, Ordering::SeqCst);
    p.set_owner(0, pid);
}
