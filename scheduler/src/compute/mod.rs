//! Sharing each device's time among its vGPUs: [`device_loop`], the per-device loop that ticks every
//! millisecond while a vGPU has demand, charges finished kernels ([`charger`], from the order of
//! completions worked out by [`ledger`], pure), asks for swap-outs (`crate::memory::swap_out`), marks
//! vGPUs [`alone`] and grants tokens ([`refill`], pure, kept fair over the long run by [`fairness`], pure).

pub(crate) mod alone;
pub(crate) mod charger;
pub(crate) mod device_loop;
pub(crate) mod fairness;
pub(crate) mod ledger;
pub(crate) mod refill;
