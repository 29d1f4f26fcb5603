//! Sharing each device's time among its vGPUs: [`device_loop`], the per-device loop that ticks every
//! millisecond while a vGPU has demand, charges finished kernels ([`charger`], from the order of
//! completions worked out by [`ledger`], pure), asks for swap-outs (`crate::memory::swap_out`), marks
//! vGPUs [`alone`] and grants tokens ([`refill`], pure, kept fair over the long run by [`fairness`], pure).

pub mod alone;
pub mod charger;
pub mod device_loop;
pub mod fairness;
pub mod ledger;
pub mod refill;
