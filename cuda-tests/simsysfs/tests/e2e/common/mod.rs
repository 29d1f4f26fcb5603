//! Shared helpers: a fresh root per test and a real child process writing through the preload library.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh, empty directory (mode 0755, so an unprivileged child can walk it) for one test.
pub fn fresh_root(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("simsysfs-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create test root");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod test root");
    dir
}

/// Runs `simsysfs-write PATH VALUE` with the preload library and `SIMSYSFS_ROOT=root` (when `root` is
/// given), as `uid` when given.
pub fn run_writer(root: Option<&Path>, path: &Path, value: &str, uid: Option<u32>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_simsysfs-write"));
    cmd.arg(path).arg(value).env("LD_PRELOAD", simsysfs::preload_library()).env_remove("SIMSYSFS_ROOT");
    if let Some(root) = root {
        cmd.env("SIMSYSFS_ROOT", root);
    }
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    cmd.output().expect("run simsysfs-write")
}

/// Writes `value` to `rel` under `root` in a child process; returns what it printed: `ok N` or
/// `errno E open|write`.
pub fn write(root: &Path, rel: &str, value: &str) -> String {
    let out = run_writer(Some(root), &root.join(rel), value, None);
    assert!(out.status.success(), "writer failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The expected answer for a kernel error at write time.
pub fn errno(e: i32) -> String {
    format!("errno {e} write")
}

/// Reads a file under the root.
pub fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// The target of a link under the root, or `None`.
pub fn link(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_link(root.join(rel)).ok().map(|t| t.to_string_lossy().into_owned())
}

/// Whether anything (a link included) exists at `rel`.
pub fn exists(root: &Path, rel: &str) -> bool {
    std::fs::symlink_metadata(root.join(rel)).is_ok()
}
