//! The shim caches each thread's current context and device (`shim/src/current.rs`) until a context call
//! changes them: allocations must still be charged to the device of the context current when they are
//! made, whichever way it became current, and given back to that device wherever they are freed.

use crate::common;

use common::Sim;
use common::cprog::{CBuild, Facts};

const MIB: i64 = 1 << 20;

#[test]
fn allocations_follow_every_change_of_the_current_context() {
    let program = CBuild::program("context_switch.c").link_driver().build();
    let sim = Sim::shimmed("context-switch").with("SIMGPU_DEVICES", "small,small").with("TESSERA_MEMORY_LIMIT", "1GiB");
    let facts = Facts::ok(sim.command_for(&program, &[]));
    // Device 0: 2 + 8 + 16 MiB (after a pop, a set and another thread's own change); device 1: 1 + 4 MiB
    // (the created context, a push) and the other thread's 32 MiB.
    assert_eq!(facts.num("alloc.used.0"), 26 * MIB);
    assert_eq!(facts.num("alloc.used.1"), 37 * MIB);
    assert_eq!(facts.num("freed.used.0"), 0);
    assert_eq!(facts.num("freed.used.1"), 0);
    // CUDA_ERROR_INVALID_CONTEXT: nothing is current once both contexts are gone.
    assert_eq!(facts.num("no_context"), 201);
}
