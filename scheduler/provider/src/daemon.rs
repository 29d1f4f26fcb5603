//! The Tessera daemon, through its one API (`tessera-client`, docs/protocol.md): its socket is
//! `TESSERA_SOCKET` or the default beside the default region, as for every other client.

use crate::abi::current::ACCEL_ERROR_OPERATION_FAILED;
use crate::guard::Fail;
use std::time::Duration;
use tessera_client::Client;

/// How long one request may take: a hypervisor's call must not hang on a stuck daemon.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A client of the daemon, or `None` when its socket path cannot be worked out.
pub fn client() -> Option<Client> {
    let socket = tessera_host::paths::socket().ok()?;
    Some(Client::new(socket).with_timeout(TIMEOUT))
}

/// A client of the daemon, or `OPERATION_FAILED` explaining there is none.
pub fn required(what: &str) -> Result<Client, Fail> {
    let c = client().ok_or_else(|| Fail::new(ACCEL_ERROR_OPERATION_FAILED, "TESSERA_SOCKET is not a valid path"))?;
    c.version().map_err(|e| {
        Fail::new(
            ACCEL_ERROR_OPERATION_FAILED,
            format!("{what} needs the Tessera daemon: {} (start it with `tessera daemon`)", e.message),
        )
    })?;
    Ok(c)
}
