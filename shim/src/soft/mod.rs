//! Soft memory mode: the process's device allocations live in per-device virtual address spaces backed
//! by pooled physical chunks that Tessera can compact and swap to host memory.

mod backend;
#[cfg(test)]
mod fake;
mod slab;
mod space;
#[cfg(test)]
mod space_tests;
