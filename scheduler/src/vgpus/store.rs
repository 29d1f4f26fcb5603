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

/// The state file of one daemon.
pub struct Store {
    path: PathBuf,
    /// Called by [`Store::save`] before it writes (tests: a save held in progress, as a slow `fsync`).
    #[cfg(test)]
    pub(crate) before_save: Option<Box<dyn Fn() + Send + Sync>>,
}

impl Store {
    /// The store in directory `dir` (created, mode 0700, if missing).
    pub fn open(dir: &Path) -> Result<Store, String> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("state directory {}: cannot create: {e} (set TESSERA_STATE_DIR)", dir.display()))?;
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
    pub fn load(&self) -> Result<Config, String> {
        // Read as bytes: a file that is not UTF-8 is corrupt like any other, reported with the remedy.
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(format!("state file {}: cannot read: {e}", self.path.display())),
        };
        let stored: Stored = serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "state file {} is not a Tessera vGPU configuration ({e}); fix it, or move it away to start with no \
                 vGPUs (the daemon never overwrites a file it cannot read)",
                self.path.display()
            )
        })?;
        if stored.version != FORMAT {
            return Err(format!(
                "state file {} has format version {}, this Tessera reads version {FORMAT}; run the Tessera that \
                 wrote it, or move the file away to start with no vGPUs",
                self.path.display(),
                stored.version
            ));
        }
        Ok(stored.config)
    }

    /// Replaces the saved configuration with `config`, atomically.
    pub fn save(&self, config: &Config) -> Result<(), String> {
        let text = serde_json::to_string_pretty(&Stored { version: FORMAT, config: config.clone() })
            .map_err(|e| format!("cannot encode the configuration: {e}"))?;
        #[cfg(test)]
        if let Some(hook) = &self.before_save {
            hook();
        }
        let fail = |e: tessera_region::secure_fs::SecureFsError| format!("state file {e}");
        tessera_region::secure_fs::replace_atomically(&self.path, 0o600, format!("{text}\n").as_bytes())
            .map_err(fail)?;
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
        let e = store.load().unwrap_err();
        assert!(e.contains(FILE) && e.contains("fix it, or move it away"), "{e}");
        std::fs::write(store.path(), r#"{"version": 9, "vgpus": []}"#).unwrap();
        assert!(store.load().unwrap_err().contains("format version 9"));
        for garbage in [&b"\xff\xfe random \x80 bytes"[..], b"", b"\0\0\0\0", b"[1, 2]"] {
            std::fs::write(store.path(), garbage).unwrap();
            let e = store.load().unwrap_err();
            assert!(e.contains(&store.path().display().to_string()) && e.contains("move it away"), "{e}");
            assert_eq!(std::fs::read(store.path()).unwrap(), garbage, "the file is left as it was");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
