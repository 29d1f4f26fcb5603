//! Injected faults: `.simsysfs/faults` under the root holds lines `<relative path> <errno-number|kill>`;
//! each line is used by the first write to that attribute and then removed, so a test can fail step N of
//! a multi-step kernel sequence.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::layout;

/// What an injected fault does to the write that meets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The write fails with this errno and changes nothing.
    Errno(i32),
    /// The writing process gets SIGKILL at that write, before the kernel acts (a crash midway).
    Kill,
}

/// Relative path of the fault queue.
pub fn queue_file(root: &Path) -> PathBuf {
    root.join(layout::STATE_DIR).join("faults")
}

/// Appends a fault for `rel_path` (checked to stay under the root). The path is stored as given and
/// resolved again at each write, so it may name an attribute that does not exist yet (the `remove` of an
/// mdev still to be created, reached through `bus/mdev/devices/<uuid>`).
pub fn append(root: &Path, rel_path: &str, fault: Fault) -> io::Result<()> {
    resolve(root, rel_path)?;
    let rel = rel_path.trim_start_matches('/');
    if rel.is_empty() || rel.contains(char::is_whitespace) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("fault path {rel:?} contains whitespace")));
    }
    let what = match fault {
        Fault::Errno(e) if e > 0 => e.to_string(),
        Fault::Errno(e) => {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("errno {e} is not positive")));
        }
        Fault::Kill => "kill".into(),
    };
    fs::create_dir_all(root.join(layout::STATE_DIR))?;
    let mut f = fs::OpenOptions::new().create(true).append(true).open(queue_file(root))?;
    writeln!(f, "{rel} {what}")
}

/// Takes the first queued fault whose path resolves to `rel` (the written file's path under the
/// resolved root), removing its line. A malformed line is an
/// error naming it (a test wrote the file by hand wrongly), never ignored.
pub fn take(root: &Path, rel: &str) -> io::Result<Option<Fault>> {
    let path = queue_file(root);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut found = None;
    let mut rest = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (p, what) = line.rsplit_once(' ').ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{}: bad line {line:?}", path.display()))
        })?;
        if found.is_none() && resolve(root, p).is_ok_and(|r| r == rel) {
            found = Some(parse(what).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidData, format!("{}: bad fault {what:?}", path.display()))
            })?);
        } else {
            rest.push_str(line);
            rest.push('\n');
        }
    }
    if found.is_some() {
        fs::write(&path, rest)?;
    }
    Ok(found)
}

/// Parses `kill` or a positive errno number.
fn parse(what: &str) -> Option<Fault> {
    if what == "kill" {
        return Some(Fault::Kill);
    }
    what.parse::<i32>().ok().filter(|e| *e > 0).map(Fault::Errno)
}

/// `rel_path` with links followed, relative to the resolved root (the part that exists is resolved; a
/// missing tail, e.g. an mdev not created yet, is kept as written).
fn resolve(root: &Path, rel_path: &str) -> io::Result<String> {
    let croot = fs::canonicalize(root)?;
    let rel_path = rel_path.trim_start_matches('/');
    let mut existing = root.join(rel_path);
    let mut tail: Vec<std::ffi::OsString> = Vec::new();
    let resolved = loop {
        if let Ok(p) = fs::canonicalize(&existing) {
            break p;
        }
        match (existing.file_name().map(|n| n.to_os_string()), existing.parent()) {
            (Some(n), Some(parent)) => {
                tail.push(n);
                existing = parent.to_path_buf();
            }
            _ => return Err(io::Error::new(io::ErrorKind::NotFound, format!("{rel_path}: nothing of it exists"))),
        }
    };
    let mut full = resolved;
    full.extend(tail.iter().rev());
    let rel = full.strip_prefix(&croot).map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{rel_path} leads outside the root {}", croot.display()))
    })?;
    Ok(rel.to_string_lossy().into_owned())
}
