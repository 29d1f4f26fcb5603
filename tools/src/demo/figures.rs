//! What the demo shows, read without taking any lock: each vGPU's counters and memory from the region
//! (`Sched.launches`, `wait_ns`, `device_ns`, `VgpuSlot.used/peak/limit`), and on the simulated GPU the
//! engine time each vGPU's process obtained, from the simulated GPU's state file: the ground truth of the
//! share it got (on a real GPU, the device time the shim measured stands in for it).

use super::DemoError;
use super::entitlement::{Ledger, Sample, Totals};
use simgpu_host::SharedState;
use simgpu_host::meter::EngineMeter;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tessera_region::file::RegionFile;
use tessera_region::futex;
use tessera_scheduler::inspect;

/// One vGPU's figures at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VgpuFigures {
    /// Kernel launches so far.
    pub launches: u64,
    /// Time its launches spent waiting for tokens.
    pub wait_ns: u64,
    /// Device time the shim measured for its work.
    pub device_ns: u64,
    /// Bytes in use on the device.
    pub used: u64,
    /// Peak of `used`.
    pub peak: u64,
    /// Its memory quota on the device.
    pub limit: u64,
    /// Engine time its processes obtained (simulated GPU only).
    pub engine_ns: Option<u64>,
}

impl VgpuFigures {
    /// The time its work occupied the device: engine time when known, else measured device time.
    fn busy_ns(&self) -> u64 {
        self.engine_ns.unwrap_or(self.device_ns)
    }
}

/// Every vGPU's figures at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When they were read.
    pub at: Instant,
    /// In the order the vGPUs were given to [`Reader::new`].
    pub vgpus: Vec<VgpuFigures>,
    /// Time the device's engine has been busy (simulated GPU only).
    pub engine_busy_ns: Option<u64>,
    /// What the vGPUs had demand for and were entitled to so far (see [`super::entitlement`]).
    pub totals: Totals,
}

/// `part` in percent of `whole` nanoseconds (0 for an empty interval).
fn percent(part: u64, whole: f64) -> f64 {
    if whole > 0.0 { part as f64 / whole * 100.0 } else { 0.0 }
}

impl Snapshot {
    /// Seconds from `earlier` to this snapshot.
    pub fn seconds_since(&self, earlier: &Snapshot) -> f64 {
        self.at.saturating_duration_since(earlier.at).as_secs_f64()
    }

    /// The share of the time since `earlier` that each vGPU's work occupied the device, in percent.
    pub fn shares_since(&self, earlier: &Snapshot) -> Vec<f64> {
        let ns = self.seconds_since(earlier) * 1e9;
        self.vgpus
            .iter()
            .zip(&earlier.vgpus)
            .map(|(now, then)| percent(now.busy_ns().saturating_sub(then.busy_ns()), ns))
            .collect()
    }

    /// How busy the engine was since `earlier`, in percent (simulated GPU only).
    pub fn utilization_since(&self, earlier: &Snapshot) -> Option<f64> {
        let ns = self.seconds_since(earlier) * 1e9;
        Some(percent(self.engine_busy_ns?.saturating_sub(earlier.engine_busy_ns?), ns).min(100.0))
    }
}

/// The simulated GPU's state file and a meter of each vGPU's processes.
struct Engine {
    state: SharedState,
    meter: EngineMeter,
}

/// Reads [`Snapshot`]s of a fixed list of vGPUs on one device.
pub struct Reader {
    region: RegionFile,
    slots: Vec<usize>,
    device: usize,
    engine: Option<Engine>,
    ledger: Ledger,
}

impl Reader {
    /// A reader of vGPUs `names` (which the daemon has created) in the region at `region`, on `device`;
    /// on the simulated GPU also of the engine time of `pids[i]`, the processes of vGPU `names[i]`.
    pub fn new(
        region: &str,
        names: &[&str],
        device: u32,
        simulated: Option<(&simgpu_host::Config, Vec<Vec<u32>>)>,
    ) -> Result<Reader, DemoError> {
        let region = RegionFile::open(region)?;
        let slots = {
            let locked = region.lock()?;
            let find = |name: &&str| {
                tessera_scheduler::inspect::find(&locked, name).ok_or_else(|| DemoError::NotInRegion(name.to_string()))
            };
            names.iter().map(find).collect::<Result<Vec<_>, _>>()?
        };
        // Their live state is in their own files: seen where their processes and the daemon see it.
        for &slot in &slots {
            region.map_live(slot, None)?;
        }
        let device = device as usize;
        let engine = match simulated {
            Some((config, pids)) => Some(Engine {
                state: SharedState::open(config, false).map_err(DemoError::SimgpuState)?,
                meter: EngineMeter::new(device, pids),
            }),
            None => None,
        };
        Ok(Reader { region, slots, device, engine, ledger: Ledger::default() })
    }

    /// Every vGPU's figures now.
    pub fn read(&mut self) -> Snapshot {
        let d = self.device;
        let engine_ns = self.engine.as_mut().map(|e| e.meter.read(&e.state));
        let vgpus = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, &slot)| {
                let v = &self.region.region().vgpus[slot];
                let s = &v.live.sched;
                VgpuFigures {
                    launches: s.launches.load(Ordering::Acquire),
                    wait_ns: s.wait_ns.load(Ordering::Acquire),
                    device_ns: s.device_ns.load(Ordering::Acquire),
                    used: v.used(d),
                    peak: v.live.peak[d].load(Ordering::Acquire),
                    limit: v.config.limit[d].load(Ordering::Acquire),
                    engine_ns: engine_ns.as_ref().map(|e| e[i]),
                }
            })
            .collect();
        let engine_busy_ns = self.engine.as_ref().map(|e| e.state.device(d).busy_ns.load(Ordering::Acquire));
        Snapshot { at: Instant::now(), vgpus, engine_busy_ns, totals: self.ledger.totals() }
    }

    /// Samples every vGPU's demand as the daemon's device loop reads it (its settings, launches waiting, work
    /// queued, the last launch; the device's `high` hold) and adds it to the entitlement ledger.
    pub fn sample(&mut self) {
        let region = self.region.region();
        let now = futex::monotonic_ns();
        let vgpus = self
            .slots
            .iter()
            .map(|&slot| {
                let v = &region.vgpus[slot];
                // The demo's loads stay attached from before the first sample to after the last.
                inspect::demand(v, now)
            })
            .collect();
        let hold = region.devices[self.device].high_until_ns.load(Ordering::Acquire) > now;
        self.ledger.record(&Sample { at: Instant::now(), vgpus, hold });
    }
}
