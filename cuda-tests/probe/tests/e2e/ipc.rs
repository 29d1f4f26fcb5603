//! Device memory shared between processes (issue 31): an allocation's IPC handle, opened by another
//! process, maps the same memory (what one writes, the other reads), charged to the allocating process
//! only: the opener's free memory does not fall, with or without the shim. A process cannot open its own
//! handle (`CUDA_ERROR_INVALID_CONTEXT`), and a handle of zeros is `CUDA_ERROR_INVALID_HANDLE`. An event
//! created with `CU_EVENT_INTERPROCESS` is shared the same way: the other process sees it pending while
//! the kernel it was recorded behind runs, waits for it, and cannot time it; an event without the flag
//! has no handle, and an interprocess event must not be timed (`CUDA_ERROR_INVALID_VALUE` both).

use crate::common::Sim;
use crate::common::cprog::{CBuild, Facts};

#[test]
fn a_handle_shares_memory_with_another_process_charged_to_its_owner() {
    let program = CBuild::program("ipc.c").link_driver().build();
    for sim in [Sim::bare("ipc"), Sim::shimmed("ipc-shim").with("TESSERA_MEMORY_LIMIT", "2GiB")] {
        // The kernel the parent records its event behind outlasts the child's start by far.
        let sim = sim.with("SIMGPU_KERNEL_TIMES", "custom_kernel=2s").with("SIMGPU_UNKNOWN_KERNELS_QUIET", "1");
        let facts = Facts::run(sim.command_for(&program, &[]));
        assert!(facts.success, "{}\n{}", facts.stdout, facts.stderr);
        assert_eq!(facts.all("done"), ["ok", "ok"], "both processes finished: {}", facts.stdout);
        assert_eq!(facts.get("own"), "201", "CUDA_ERROR_INVALID_CONTEXT");
        assert_eq!(facts.get("seen"), "5a", "the child reads what the parent wrote");
        assert_eq!(facts.get("charged"), "0", "the memory stays charged to its owner");
        assert_eq!(facts.get("garbage"), "400", "CUDA_ERROR_INVALID_HANDLE");
        assert_eq!(facts.get("child"), "0");
        assert_eq!(facts.get("back"), "a5", "the parent reads what the child wrote");
        assert_eq!(facts.get("plain_event"), "1", "CUDA_ERROR_INVALID_VALUE");
        assert_eq!(facts.get("timed_interprocess"), "1", "CUDA_ERROR_INVALID_VALUE");
        assert_eq!(facts.get("event_before"), "600", "CUDA_ERROR_NOT_READY while the parent's kernel runs");
        assert_eq!(facts.get("event_after"), "0");
        assert_eq!(facts.get("event_timing"), "400", "CUDA_ERROR_INVALID_HANDLE: an opened event is not timed");
    }
}
