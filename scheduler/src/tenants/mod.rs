//! Holding tenants to what they can write: [`checks`] runs, every second, [`integrity`] (validating
//! process slots), `crate::memory::recount` (their memory counts) and [`audit`] (device time taken
//! against device time granted, measured by the driver: [`nvml_usage`]); [`joins`]: the process slots the
//! daemon itself vouches for.

pub(crate) mod audit;
pub(crate) mod checks;
pub(crate) mod integrity;
pub(crate) mod joins;
pub(crate) mod nvml_usage;
