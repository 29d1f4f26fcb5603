//! Where the daemon's files are, for the daemon and every program that talks to it: the region
//! (`TESSERA_REGION`), the socket (`TESSERA_SOCKET`) and the state directory (`TESSERA_STATE_DIR`), each
//! with a per-user default. The region and the socket are by default in the user's own directory
//! `/dev/shm/tessera-<uid>` (mode 0711, created and checked when a file is made there, see
//! [`tessera_region::open`]), which no other user can create files in.

use std::ffi::OsString;
use std::path::PathBuf;

/// Why a path of the daemon's files cannot be told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The variable that gives the path is set but empty (or blank).
    #[error("{variable} is empty; give a path or unset it")]
    Empty {
        /// The variable, e.g. `TESSERA_SOCKET`.
        variable: &'static str,
    },
    /// The variable that gives the path is not valid UTF-8.
    #[error("{variable}={value:?} is not valid UTF-8; give a path in plain text or unset it")]
    NotUtf8 {
        /// The variable, e.g. `TESSERA_SOCKET`.
        variable: &'static str,
        /// Its value, as set.
        value: OsString,
    },
    /// No state directory: none of `TESSERA_STATE_DIR`, `XDG_STATE_HOME` and `HOME` is set.
    #[error("no state directory: set TESSERA_STATE_DIR (or HOME or XDG_STATE_HOME)")]
    NoStateDir,
}

/// A set variable's value, read as bytes; an empty one, or one that is not UTF-8, is an error naming it.
fn var(variable: &'static str) -> Result<Option<String>, PathError> {
    checked(variable, std::env::var_os(variable))
}

/// `value`, the value of `variable` if set, checked as [`var`] says.
fn checked(variable: &'static str, value: Option<OsString>) -> Result<Option<String>, PathError> {
    match value.map(OsString::into_string) {
        None => Ok(None),
        Some(Ok(v)) if v.trim().is_empty() => Err(PathError::Empty { variable }),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err(value)) => Err(PathError::NotUtf8 { variable, value }),
    }
}

/// The region file: `TESSERA_REGION`, else `/dev/shm/tessera-<uid>/tessera.region`.
pub fn region() -> Result<String, PathError> {
    Ok(var("TESSERA_REGION")?.unwrap_or_else(tessera_region::open::default_path))
}

/// The daemon's socket: `TESSERA_SOCKET`, else `/dev/shm/tessera-<uid>/tessera.sock`, beside the default
/// region.
pub fn socket() -> Result<PathBuf, PathError> {
    Ok(var("TESSERA_SOCKET")?
        .map(PathBuf::from)
        .unwrap_or_else(|| tessera_region::open::default_dir().join("tessera.sock")))
}

/// The state directory: `TESSERA_STATE_DIR`, else `$XDG_STATE_HOME/tessera`, else
/// `~/.local/state/tessera`.
pub fn state_dir() -> Result<PathBuf, PathError> {
    if let Some(dir) = var("TESSERA_STATE_DIR")? {
        return Ok(PathBuf::from(dir));
    }
    if let Some(xdg) = std::env::var_os("XDG_STATE_HOME").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(xdg).join("tessera"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/state/tessera")),
        None => Err(PathError::NoStateDir),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn callers_can_match_what_is_wrong_with_a_variable() {
        assert_eq!(checked("TESSERA_SOCKET", None), Ok(None));
        assert_eq!(checked("TESSERA_SOCKET", Some("/run/t.sock".into())), Ok(Some("/run/t.sock".into())));
        let e = checked("TESSERA_SOCKET", Some(" ".into())).unwrap_err();
        assert_eq!(e, PathError::Empty { variable: "TESSERA_SOCKET" });
        assert_eq!(e.to_string(), "TESSERA_SOCKET is empty; give a path or unset it");
        let bad = OsString::from_vec(b"/tmp/\xff".to_vec());
        let e = checked("TESSERA_REGION", Some(bad.clone())).unwrap_err();
        assert!(matches!(&e, PathError::NotUtf8 { variable: "TESSERA_REGION", value } if *value == bad), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("TESSERA_REGION={bad:?} is not valid UTF-8; give a path in plain text or unset it")
        );
        assert_eq!(
            PathError::NoStateDir.to_string(),
            "no state directory: set TESSERA_STATE_DIR (or HOME or XDG_STATE_HOME)"
        );
    }
}
