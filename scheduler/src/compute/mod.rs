//! Sharing each device's time among its vGPUs: [`device_loop`], the per-device loop that ticks every
//! millisecond while a vGPU has demand, charges finished kernels ([`charger`], from the order of
//! completions worked out by `tessera_policy::ledger`), asks for swap-outs (`crate::memory::swap_out`),
//! marks vGPUs [`alone`] and grants tokens (`tessera_policy::refill`, kept fair over the long run by
//! `tessera_policy::fairness`). The algorithms are the policy crate's, pure; what is here reads and
//! writes the region.

pub(crate) mod alone;
pub(crate) mod charger;
pub(crate) mod device_loop;
