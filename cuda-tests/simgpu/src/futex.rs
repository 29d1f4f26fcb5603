//! Futex wait and wake on a 32-bit word of a shared mapping (works across processes): Tessera's one
//! implementation, shared with the region's futex words.

pub use tessera_region::futex::{wait, wake_all};
