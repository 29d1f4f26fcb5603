//! Lazy, thread-safe initialization of the shim's state, and `cuInit`, which fails closed when the
//! configuration is malformed.

use crate::config::{Config, ConfigError};
use crate::guard::{Res, Status, status};
use crate::log;
use std::sync::OnceLock;
use tessera_ffi::cuda::CUDA_ERROR_INVALID_VALUE;

/// The process's configuration, read from its environment once (the shim's per-process state).
static CONFIG: OnceLock<Result<Config, ConfigError>> = OnceLock::new();

/// The configuration, read once; `Err` is what is wrong with it, already printed.
pub fn config() -> Result<&'static Config, &'static ConfigError> {
    CONFIG
        .get_or_init(|| match Config::from_env() {
            Ok(c) => {
                log::set_level(c.log);
                Ok(c)
            }
            Err(e) => {
                // Printed whatever TESSERA_LOG says: the program is about to be refused the GPU.
                eprintln!("tessera: {e}; refusing to run CUDA without the configured limits");
                Err(e)
            }
        })
        .as_ref()
}

/// `cuInit`: checks the configuration and sets up the memory quota before the driver is initialized; a
/// malformed `TESSERA_` value or an unusable region makes it fail with `CUDA_ERROR_INVALID_VALUE`, so the
/// program never runs without its quota.
pub fn cu_init(_flags: u32, real: impl FnOnce() -> Status) -> Res {
    config().map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    crate::quota::active()?;
    status(real())
}
