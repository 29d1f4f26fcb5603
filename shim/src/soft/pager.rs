//! The pager thread of a soft-mode process: it carries out the daemon's requests to its vGPU (swap
//! everything out; defragment), compacts on its own when too much of the device memory it holds is
//! stuck in half-empty chunks, gives empty slab pages back, and keeps the process's byte counts in its
//! region slot current.

use super::Soft;
use std::sync::atomic::Ordering;
use tessera_region::PagerRequest;
use tessera_region::futex;

/// How often the pager looks around without being asked.
const PERIOD_NS: u64 = 100_000_000;
/// Compaction starts on its own when this share (percent) of the device memory held is fragmented...
pub const AUTO_DEFRAG_PERCENT: u64 = 25;
/// ...and at least this many chunks' worth would come back.
const AUTO_DEFRAG_CHUNKS: u64 = 2;

/// Starts the pager of `soft`. (Joining the vGPU set the process's request numbers to the vGPU's: requests
/// made before it joined are not for it.)
pub fn start(soft: &'static Soft) {
    let spawned = std::thread::Builder::new().name("tessera-pager".into()).spawn(move || run(soft));
    if let Err(e) = spawned {
        crate::log::error(format_args!(
            "soft mode: cannot start the pager thread ({e}): no swapping or defragmentation"
        ));
    }
}

fn run(soft: &'static Soft) {
    loop {
        let _ = std::panic::catch_unwind(|| round(soft));
        let deadline = futex::monotonic_ns() + PERIOD_NS;
        match soft.vgpu {
            Some(v) => {
                let seq = v.live.pager.seq.load(Ordering::SeqCst);
                if !requested(soft) {
                    futex::wait_until(&v.live.pager.seq, seq, deadline);
                }
            }
            None => futex::sleep_until(deadline),
        }
    }
}

/// The number of the daemon's latest `kind` request, if this process has not carried it out yet.
fn pending(soft: &Soft, kind: PagerRequest) -> Option<u32> {
    let (Some(p), Some(v)) = (soft.slot, soft.vgpu) else { return None };
    let target = v.live.pager.counter(kind).load(Ordering::Acquire);
    (p.soft.done(kind).load(Ordering::Acquire) != target).then_some(target)
}

/// Whether a request of the daemon is still to be carried out.
fn requested(soft: &Soft) -> bool {
    pending(soft, PagerRequest::Evict).is_some() || pending(soft, PagerRequest::Defrag).is_some()
}

/// One look: requests first, then housekeeping.
fn round(soft: &Soft) {
    for kind in [PagerRequest::Evict, PagerRequest::Defrag] {
        if let (Some(target), Some(p)) = (pending(soft, kind), soft.slot) {
            match kind {
                PagerRequest::Evict => {
                    soft.evict();
                }
                PagerRequest::Defrag => {
                    soft.compact();
                }
            }
            // After the figures: the daemon reads them once it sees the number.
            p.soft.done(kind).store(target, Ordering::Release);
        }
    }
    let mut retired = 0;
    for (_, space) in soft.spaces() {
        retired += space.retire_empty_slabs();
    }
    let t = soft.totals();
    let chunk = soft.spaces().map(|(_, s)| s.chunk_bytes()).max().unwrap_or(u64::MAX);
    let held = t.resident + t.pooled;
    // Compaction stops the program's launches for a moment: only when it would give chunks back.
    let gain: u64 = soft.spaces().map(|(_, s)| s.compactable()).sum();
    if t.fragmented * 100 > held * AUTO_DEFRAG_PERCENT && gain >= AUTO_DEFRAG_CHUNKS * chunk {
        crate::log::info(format_args!("soft mode: {} of {held} bytes held are fragmented; compacting", t.fragmented));
        soft.compact();
    } else if retired > 0 || soft.slot.is_some() {
        soft.publish();
    }
}
