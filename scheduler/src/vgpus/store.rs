//! The persisted configuration: `vgpus.json` in the daemon's state directory, written atomically (a
//! temporary file, fsync, rename, fsync of the directory) after every change, so a daemon killed at any
//! moment restarts with either the old or the new configuration, never a mix.

use crate::vgpus::config::Config;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// File name of the configuration in the state directory.
pub const FILE: &str = "vgpus.json";
/// Format version of the file.
pub const FORMAT: u32 = 1;

/// The file's contents.
#[derive(Serialize, Deserialize)]
struct Stored {
    version: u32,
    #[serde(flatten)]
    config: Config,
}

/// Why the state file cannot be opened, read or written; each names the path and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The state directory is missing and cannot be created.
    #[error("state directory {}: cannot create: {source} (set TESSERA_STATE_DIR)", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file exists and cannot be read.
    #[error("state file {}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a configuration this daemon can parse.
    #[error(
        "state file {} is not a Tessera vGPU configuration ({source}); fix it, or move it away to start with no \
         vGPUs (the daemon never overwrites a file it cannot read)",
        path.display()
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What the parser found.
        source: serde_json::Error,
    },
    /// The file was written in another format version.
    #[error(
        "state file {} has format version {version}, this Tessera reads version {FORMAT}; run the Tessera that \
         wrote it, or move the file away to start with no vGPUs",
        path.display()
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// The version it says.
        version: u32,
    },
    /// The configuration cannot be encoded (never expected: it is plain data).
    #[error("cannot encode the configuration: {0}")]
    Encode(#[source] serde_json::Error),
    /// The new file cannot be written in place of the old.
    #[error("state file {0}")]
    Write(#[source] tessera_region::secure_fs::SecureFsError),
}

/// The state file of one daemon.
pub struct Store {
    path: PathBuf,
    /// Called by [`Store::save`] before it writes (tests: a save held in progress, as a slow `fsync`).
    #[cfg(test)]
    pub(crate) before_save: Option<Box<dyn Fn() + Send + Sync>>,
}

impl Store {
    /// The store in directory `dir` (created, mode 0700, if missing).
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| StoreError::CreateDir { dir: dir.to_path_buf(), source })?;
        Ok(Store {
            path: dir.join(FILE),
            #[cfg(test)]
            before_save: None,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved configuration (empty when there is no file yet).
    pub fn load(&self) -> Result<Config, StoreError> {
        let path = || self.path.clone();
        // Read as bytes: a file that is not UTF-8 is corrupt like any other, reported with the remedy.
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(source) => return Err(StoreError::Read { path: path(), source }),
        };
        let stored: Stored =
            serde_json::from_slice(&bytes).map_err(|source| StoreError::Corrupt { path: path(), source })?;
        if stored.version != FORMAT {
            return Err(StoreError::Version { path: path(), version: stored.version });
        }
        Ok(stored.config)
    }

    /// Replaces the saved configuration with `config`, atomically.
    pub fn save(&self, config: &Config) -> Result<(), StoreError> {
        let text = serde_json::to_string_pretty(&Stored { version: FORMAT, config: config.clone() })
            .map_err(StoreError::Encode)?;
        #[cfg(test)]
        if let Some(hook) = &self.before_save {
            hook();
        }
        tessera_region::secure_fs::replace_atomically(&self.path, 0o600, format!("{text}\n").as_bytes())
            .map_err(StoreError::Write)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vgpus::config::VgpuSpec;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tessera-store-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn saves_atomically_and_loads_back() {
        let d = dir("roundtrip");
        let store = Store::open(&d.join("nested")).unwrap();
        assert_eq!(store.load().unwrap(), Config::default());
        let config = Config { vgpus: vec![VgpuSpec::new("a", 0, 1 << 30, 30)] };
        store.save(&config).unwrap();
        assert_eq!(store.load().unwrap(), config);
        let names: Vec<_> = std::fs::read_dir(d.join("nested")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [FILE], "no temporary file is left behind");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_corrupt_or_foreign_file_is_an_error_naming_it() {
        let d = dir("corrupt");
        let store = Store::open(&d).unwrap();
        std::fs::write(store.path(), "{ not json").unwrap();
        let e = store.load().unwrap_err().to_string();
        assert!(e.contains(FILE) && e.contains("fix it, or move it away"), "{e}");
        std::fs::write(store.path(), r#"{"version": 9, "vgpus": []}"#).unwrap();
        assert!(store.load().unwrap_err().to_string().contains("format version 9"));
        for garbage in [&b"\xff\xfe random \x80 bytes"[..], b"", b"\0\0\0\0", b"[1, 2]"] {
            std::fs::write(store.path(), garbage).unwrap();
            let e = store.load().unwrap_err().to_string();
            assert!(e.contains(&store.path().display().to_string()) && e.contains("move it away"), "{e}");
            assert_eq!(std::fs::read(store.path()).unwrap(), garbage, "the file is left as it was");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
