//! Device memory shared between processes (issue 31): an allocation's IPC handle, opened by another
//! process, maps the same memory (what one writes, the other reads), charged to the allocating process
//! only: the opener's free memory does not fall, with or without the shim. A process cannot open its own
//! handle (`CUDA_ERROR_INVALID_CONTEXT`), and a handle of zeros is `CUDA_ERROR_INVALID_HANDLE`.

use crate::common::Sim;
use crate::common::cprog::{CBuild, Facts};

#[test]
fn a_handle_shares_memory_with_another_process_charged_to_its_owner() {
    let program = CBuild::program("ipc.c").link_driver().build();
    for sim in [Sim::bare("ipc"), Sim::shimmed("ipc-shim").with("TESSERA_MEMORY_LIMIT", "2GiB")] {
        let facts = Facts::run(sim.command_for(&program, &[]));
        assert!(facts.success, "{}\n{}", facts.stdout, facts.stderr);
        assert_eq!(facts.all("done"), ["ok", "ok"], "both processes finished: {}", facts.stdout);
        assert_eq!(facts.get("own"), "201", "CUDA_ERROR_INVALID_CONTEXT");
        assert_eq!(facts.get("seen"), "5a", "the child reads what the parent wrote");
        assert_eq!(facts.get("charged"), "0", "the memory stays charged to its owner");
        assert_eq!(facts.get("garbage"), "400", "CUDA_ERROR_INVALID_HANDLE");
        assert_eq!(facts.get("child"), "0");
        assert_eq!(facts.get("back"), "a5", "the parent reads what the child wrote");
    }
}
