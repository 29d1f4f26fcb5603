//! Lazy, thread-safe initialization of the shim's state, and `cuInit`, which fails closed when the
//! configuration is malformed.

use crate::config::Config;
use crate::guard::{Res, Status, status};
use crate::log;
use std::sync::OnceLock;
use tessera_ffi::cuda::CUDA_ERROR_INVALID_VALUE;

static CONFIG: OnceLock<Result<Config, String>> = OnceLock::new();

/// The configuration, read once; `Err` holds the message already printed.
pub fn config() -> Result<&'static Config, &'static str> {
    CONFIG
        .get_or_init(|| match Config::from_env() {
            Ok(c) => {
                log::set_level(c.log);
                Ok(c)
            }
            Err(e) => {
                // Printed whatever TESSERA_LOG says: the program is about to be refused the GPU.
                let message = format!("tessera: {e}; refusing to run CUDA without the configured limits");
                eprintln!("{message}");
                Err(message)
            }
        })
        .as_ref()
        .map_err(|e| e.as_str())
}

/// `cuInit`: checks the configuration and sets up the memory quota before the driver is initialized; a
/// malformed `TESSERA_` value or an unusable region makes it fail with `CUDA_ERROR_INVALID_VALUE`, so the
/// program never runs without its quota.
pub fn cu_init(_flags: u32, real: impl FnOnce() -> Status) -> Res {
    config().map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    crate::quota::active()?;
    status(real())
}
