//! Tessera's region file seen from a test: a private path, and a live shared mapping through which a test
//! reads the vGPU records the shim keeps and writes them as the daemon would (suspend, priority, grants).

use memmap2::MmapMut;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tessera_ffi::region::{LAYOUT_SIZE, MAGIC, Region, Sched, VgpuSlot, encode_name, state};

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

impl Drop for TestRegion {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
