//! Device memory: copies, VMM remapping, and the machine-wide limit shared by processes.

use crate::common;

use common::{GIB, MIB, OUT_OF_MEMORY, Sim, at, first_line, u64_at};

#[test]
fn allocation_and_copy_round_trips() {
    let r = Sim::new("roundtrip").ok(&["roundtrip"]);
    let n = u64_at(&r, "elements");
    let bytes = u64_at(&r, "buffer_bytes");
    assert_eq!(bytes, n * 4);
    // Two live buffers cost exactly their size on the simulated device.
    assert_eq!(u64_at(&r, "memory.free_before") - u64_at(&r, "memory.free_with_two_buffers"), 2 * bytes);
    assert_eq!(u64_at(&r, "memory.total"), 80 * GIB);
    // cuMemsetD8 everywhere, then cuMemsetD32 inside.
    assert_eq!(u64_at(&r, "memsets.first"), 0xABAB_ABAB);
    assert_eq!(u64_at(&r, "memsets.second"), 0xDEAD_BEEF);
    assert_eq!(u64_at(&r, "memsets.middle"), 0xDEAD_BEEF);
    assert_eq!(u64_at(&r, "memsets.last"), 0xABAB_ABAB);
    assert_eq!(u64_at(&r, "async.elements"), n);
    let pitch = u64_at(&r, "pitch.pitch");
    assert!(pitch >= u64_at(&r, "pitch.width") && pitch.is_multiple_of(256), "pitch {pitch}");
    assert_eq!(u64_at(&r, "managed.is_managed"), 1);
    // Address ranges and pointer attributes of an interior pointer name the whole allocation.
    let base = u64_at(&r, "ranges.base");
    assert_eq!(u64_at(&r, "ranges.queried"), base + 4096);
    assert_eq!(u64_at(&r, "ranges.range_base"), base);
    assert_eq!(u64_at(&r, "ranges.range_size"), bytes);
    assert_eq!(u64_at(&r, "ranges.range_start_attribute"), base);
    assert_eq!(u64_at(&r, "ranges.range_size_attribute"), bytes);
    assert_eq!(u64_at(&r, "ranges.memory_type"), 2, "CU_MEMORYTYPE_DEVICE");
    assert_eq!(u64_at(&r, "ranges.device_ordinal"), 0);
    assert_eq!(at(&r, "ranges.context"), at(&r, "ranges.current_context"));
    assert_eq!(u64_at(&r, "ranges.unknown_pointer_code"), 1, "plain host memory is CUDA_ERROR_INVALID_VALUE");
}

#[test]
fn vmm_remap_keeps_data() {
    let r = Sim::new("vmm").ok(&["vmm"]);
    let size = u64_at(&r, "size");
    assert_eq!(size, 2 * MIB);
    assert_ne!(u64_at(&r, "a"), u64_at(&r, "b"));
    assert_eq!(u64_at(&r, "elements_verified"), size / 4, "every word written through A is read through B");
    assert_eq!(u64_at(&r, "read_after_unmap_code"), 1, "A must be unusable once unmapped");
    assert_eq!(u64_at(&r, "range_base"), u64_at(&r, "b"));
    assert_eq!(u64_at(&r, "range_size"), size);
    assert_eq!(at(&r, "retained_same_handle"), true);
    // cuMemCreate charges the device; the final cuMemRelease gives it back.
    assert_eq!(u64_at(&r, "free_before") - u64_at(&r, "free_after_create"), size);
    assert_eq!(u64_at(&r, "free_after_release"), u64_at(&r, "free_before"));
    // Memory created after the release (the simulator hands the released pages out again) is charged
    // and given back the same way; the scenario checked data written through it.
    assert_eq!(u64_at(&r, "free_before") - u64_at(&r, "free_after_recreate"), size);
    assert_eq!(u64_at(&r, "free_after_second_release"), u64_at(&r, "free_before"));
}

/// A 4 GiB `small` device with one process holding 3 GiB (plus its 128 MiB context).
fn small_device_with_holder(tag: &str) -> (Sim, common::Guarded) {
    let sim = Sim::new(tag).with("SIMGPU_DEVICES", "small");
    let mut holder = sim.spawn(&["alloc", "--bytes", "3GiB"]);
    let report = first_line(&mut holder);
    assert_eq!(at(&report, "allocated"), true, "the first process must get 3 GiB: {report}");
    assert_eq!(u64_at(&report, "total"), 4 * GIB);
    assert_eq!(u64_at(&report, "free_after"), GIB - 128 * MIB);
    (sim, holder)
}

#[test]
fn second_process_cannot_allocate_past_device_memory() {
    let (sim, mut holder) = small_device_with_holder("oom");
    // 1 GiB would fit beside 3 GiB, but both processes' contexts cost memory too.
    let denied = sim.ok(&["alloc", "--bytes", "1GiB"]);
    assert_eq!(at(&denied, "allocated"), false, "{denied}");
    assert_eq!(u64_at(&denied, "cuda_error"), OUT_OF_MEMORY);
    assert_eq!(at(&denied, "error_name"), "CUDA_ERROR_OUT_OF_MEMORY");

    drop(holder.stdin.take()); // closing stdin makes the holder free its memory and exit
    let status = holder.wait().expect("wait for the holder");
    assert!(status.success(), "the holder failed: {status}");
    let granted = sim.ok(&["alloc", "--bytes", "1GiB"]);
    assert_eq!(at(&granted, "allocated"), true, "once the holder exited: {granted}");
}

#[test]
fn killed_process_memory_is_reclaimed() {
    let (sim, mut holder) = small_device_with_holder("sigkill");
    holder.kill().expect("SIGKILL the holder");
    holder.wait().expect("reap the holder");
    // Nothing ran the dead process's exit handlers: only reclaiming its share frees the 3 GiB.
    let after = sim.ok(&["alloc", "--bytes", "3GiB"]);
    assert_eq!(at(&after, "allocated"), true, "memory of a SIGKILLed process must be reclaimed: {after}");
}
