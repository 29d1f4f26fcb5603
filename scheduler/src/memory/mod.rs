//! Device memory: [`swap_out`] finds memory for soft-mode vGPUs by asking idle ones to swap out (and
//! charges the requester); [`recount`] counts again the memory a tenant lowered in its file.

pub(crate) mod recount;
pub(crate) mod swap_out;
