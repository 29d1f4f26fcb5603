//! Tessera's passthrough files in the daemon's state directory: `mdevs.json`, the mdevs it created (so
//! `reconcile` can tell its orphans from other software's mdevs), and `vfio-journal.json`, the bindings of
//! an IOMMU group before a bind or unbind, written before its first sysfs write and removed once it is
//! done or undone (one left behind means the writer died midway: `reconcile` undoes it). Files are
//! created `O_EXCL` without following links and replaced atomically (`tessera_region::secure_fs`, as the
//! vGPU configuration is); one that cannot be read is an error naming it.

use crate::{Error, ErrorCode};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};
use tessera_region::secure_fs;

/// The file of mdevs Tessera created.
pub const MDEVS: &str = "mdevs.json";
/// The journal of a bind or unbind in progress.
pub const JOURNAL: &str = "vfio-journal.json";
/// Format version of both files.
pub const FORMAT: u32 = 1;

/// An mdev Tessera created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdevRecord {
    /// Its UUID.
    pub uuid: String,
    /// Its parent's address.
    pub parent: String,
    /// Its type.
    pub type_id: String,
}

/// One function's binding before an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// Its address.
    pub address: String,
    /// The driver it was bound to.
    pub driver: Option<String>,
    /// Its `driver_override` (`None`: none).
    pub driver_override: Option<String>,
}

/// A bind or unbind in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// Format version.
    pub version: u32,
    /// `bind-vfio` or `unbind-vfio`.
    pub op: String,
    /// The IOMMU group being moved.
    pub group: u32,
    /// Every member's binding before it.
    pub members: Vec<Binding>,
}

#[derive(Serialize, Deserialize)]
struct MdevFile {
    version: u32,
    mdevs: Vec<MdevRecord>,
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct State {
    dir: PathBuf,
}

fn internal(message: String) -> Error {
    Error::new(ErrorCode::Internal, message)
}

impl State {
    /// The files in `dir` (created, private, if missing).
    pub fn open(dir: &Path) -> Result<State, Error> {
        secure_fs::ensure_private_dir(dir, 0o700).map_err(|e| internal(e.to_string()))?;
        Ok(State { dir: dir.to_path_buf() })
    }

    /// The path of file `name` in it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// File `name`'s bytes (`None` when it does not exist), never through a symbolic link.
    fn read(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        let path = self.path(name);
        let mut file = match secure_fs::open_nofollow(&path, false) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(internal(format!("state file {}: cannot read: {e}", path.display()))),
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| internal(format!("state file {}: cannot read: {e}", path.display())))?;
        Ok(Some(bytes))
    }

    /// File `name` parsed as `T` (`None` when it does not exist); an error naming the file and the remedy
    /// when it is not `what`, or when its format `version` is not this Tessera's.
    fn load<T: for<'a> Deserialize<'a>>(
        &self,
        name: &str,
        what: &str,
        version: fn(&T) -> u32,
    ) -> Result<Option<T>, Error> {
        let Some(bytes) = self.read(name)? else { return Ok(None) };
        let value: T = serde_json::from_slice(&bytes).map_err(|e| {
            internal(format!(
                "state file {} is not {what} ({e}); fix it, or move it away (Tessera never overwrites a file it \
                 cannot read)",
                self.path(name).display()
            ))
        })?;
        if version(&value) != FORMAT {
            return Err(internal(format!(
                "state file {} has format version {}, this Tessera reads {FORMAT}",
                self.path(name).display(),
                version(&value)
            )));
        }
        Ok(Some(value))
    }

    /// The mdevs Tessera created.
    pub fn records(&self) -> Result<Vec<MdevRecord>, Error> {
        let file = self.load(MDEVS, "Tessera's record of the mdevs it created", |f: &MdevFile| f.version)?;
        Ok(file.map_or_else(Vec::new, |f| f.mdevs))
    }

    /// Replaces the record of created mdevs, atomically.
    pub fn save_records(&self, mdevs: &[MdevRecord]) -> Result<(), Error> {
        let text = serde_json::to_string_pretty(&MdevFile { version: FORMAT, mdevs: mdevs.to_vec() })
            .map_err(|e| internal(format!("cannot encode the mdev records: {e}")))?;
        secure_fs::replace_atomically(&self.path(MDEVS), 0o600, format!("{text}\n").as_bytes())
            .map_err(|e| internal(format!("state file {e}")))
    }

    /// The journal of an operation that did not finish, if any.
    pub fn journal(&self) -> Result<Option<Journal>, Error> {
        self.load(JOURNAL, "a journal of a VFIO bind", |j: &Journal| j.version)
    }

    /// Writes `journal` complete (created `O_EXCL`, durable) before an operation's first write; refused
    /// while another one's is there.
    pub fn begin(&self, journal: &Journal) -> Result<(), Error> {
        let path = self.path(JOURNAL);
        let text = serde_json::to_string_pretty(journal).map_err(|e| internal(format!("cannot encode: {e}")))?;
        let fill = |mut f: &std::fs::File| {
            use std::io::Write;
            f.write_all(text.as_bytes()).and_then(|()| f.sync_all())
        };
        match secure_fs::create_complete(&path, 0o600, fill).map_err(|e| internal(e.to_string()))? {
            Some(_) => self.sync_dir(),
            None => Err(Error::new(
                ErrorCode::InUse,
                format!(
                    "{} exists: another bind or unbind is in progress or was interrupted; run `tessera devices \
                     reconcile` to undo an interrupted one",
                    path.display()
                ),
            )),
        }
    }

    /// Removes the journal once its operation is done or undone.
    pub fn end(&self) -> Result<(), Error> {
        let path = self.path(JOURNAL);
        match std::fs::remove_file(&path) {
            Ok(()) => self.sync_dir(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(internal(format!("state file {}: cannot remove: {e}", path.display()))),
        }
    }

    fn sync_dir(&self) -> Result<(), Error> {
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| internal(format!("state directory {}: cannot sync: {e}", self.dir.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tessera-pt-state-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn records_round_trip_and_a_corrupt_file_is_named() {
        let d = dir("records");
        let state = State::open(&d).unwrap();
        assert_eq!(state.records().unwrap(), []);
        let r = MdevRecord { uuid: "u".into(), parent: "0000:41:00.4".into(), type_id: "nvidia-63".into() };
        state.save_records(std::slice::from_ref(&r)).unwrap();
        assert_eq!(state.records().unwrap(), [r]);
        assert_eq!(state.sync_dir(), Ok(()));
        let names: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [MDEVS], "no temporary file is left");
        std::fs::write(state.path(MDEVS), "{ nope").unwrap();
        let e = state.records().unwrap_err();
        assert!(e.message.contains(&state.path(MDEVS).display().to_string()) && e.message.contains("move it away"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn one_journal_at_a_time_and_a_link_is_not_followed() {
        let d = dir("journal");
        let state = State::open(&d).unwrap();
        let j = Journal { version: FORMAT, op: "bind-vfio".into(), group: 7, members: vec![] };
        state.begin(&j).unwrap();
        assert_eq!(state.journal().unwrap(), Some(j.clone()));
        let e = state.begin(&j).unwrap_err();
        assert!(e.message.contains("reconcile"), "{e}");
        state.end().unwrap();
        assert_eq!(state.journal().unwrap(), None);
        std::os::unix::fs::symlink("/etc/passwd", state.path(JOURNAL)).unwrap();
        assert!(state.journal().is_err(), "a symbolic link is refused, not read");
        assert!(state.begin(&j).is_err(), "nor written through");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
