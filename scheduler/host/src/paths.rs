//! Where the daemon's files are, for the daemon and every program that talks to it: the region
//! (`TESSERA_REGION`), the socket (`TESSERA_SOCKET`) and the state directory (`TESSERA_STATE_DIR`), each
//! with a per-user default. The region and the socket are by default in the user's own directory
//! `/dev/shm/tessera-<uid>` (mode 0711, created and checked when a file is made there, see
//! [`tessera_region::open`]), which no other user can create files in.

use std::path::PathBuf;

/// A set variable's value, read as bytes; an empty one, or one that is not UTF-8, is an error naming it.
fn var(name: &str) -> Result<Option<String>, String> {
    match std::env::var_os(name).map(std::ffi::OsString::into_string) {
        None => Ok(None),
        Some(Ok(v)) if v.trim().is_empty() => Err(format!("{name} is empty; give a path or unset it")),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err(v)) => Err(format!("{name}={v:?} is not valid UTF-8; give a path in plain text or unset it")),
    }
}

/// The region file: `TESSERA_REGION`, else `/dev/shm/tessera-<uid>/tessera.region`.
pub fn region() -> Result<String, String> {
    Ok(var("TESSERA_REGION")?.unwrap_or_else(tessera_region::open::default_path))
}

/// The daemon's socket: `TESSERA_SOCKET`, else `/dev/shm/tessera-<uid>/tessera.sock`, beside the default
/// region.
pub fn socket() -> Result<PathBuf, String> {
    Ok(var("TESSERA_SOCKET")?
        .map(PathBuf::from)
        .unwrap_or_else(|| tessera_region::open::default_dir().join("tessera.sock")))
}

/// The state directory: `TESSERA_STATE_DIR`, else `$XDG_STATE_HOME/tessera`, else
/// `~/.local/state/tessera`.
pub fn state_dir() -> Result<PathBuf, String> {
    if let Some(dir) = var("TESSERA_STATE_DIR")? {
        return Ok(PathBuf::from(dir));
    }
    if let Some(xdg) = std::env::var_os("XDG_STATE_HOME").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(xdg).join("tessera"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/state/tessera")),
        None => Err("no state directory: set TESSERA_STATE_DIR (or HOME or XDG_STATE_HOME)".into()),
    }
}
