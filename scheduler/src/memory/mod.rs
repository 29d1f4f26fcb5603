//! Device memory: [`swap_out`] finds memory for soft-mode vGPUs by asking idle ones to swap out (and
//! charges the requester); [`recount`] counts again the memory a tenant lowered in its file.

pub mod recount;
pub mod swap_out;
