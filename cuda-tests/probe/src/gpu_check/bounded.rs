//! Programs run with a time bound, in a process group of their own that is always killed afterwards: a
//! check never hangs the run, and nothing it started outlives it (a program's own children included).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a program printed and how it ended.
#[derive(Debug)]
pub struct Ran {
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
    /// Its exit status; `None` when it was killed at the bound.
    pub status: Option<ExitStatus>,
    /// How long it ran.
    pub elapsed: Duration,
}

impl Ran {
    /// True when it exited by itself with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// One line saying how it ended, with the end of what it wrote to stderr.
    pub fn ending(&self) -> String {
        let how = match self.status {
            Some(status) => status.to_string(),
            None => format!("killed after {:.0} s, its time bound", self.elapsed.as_secs_f64()),
        };
        let tail: Vec<&str> = self.stderr.lines().rev().take(3).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        if tail.is_empty() { how } else { format!("{how}; stderr: {}", tail.join(" | ")) }
    }
}

/// The instant the running check must end by: no program outlives it, whatever its own bound.
static DEADLINE: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);

/// Sets the instant every program started from now on is killed by at the latest.
pub fn set_deadline(deadline: Instant) {
    *DEADLINE.lock().unwrap_or_else(|e| e.into_inner()) = Some(deadline);
}

/// Runs `cmd` (stdin closed) for at most `bound` (less if the check's deadline comes first); an error
/// only when it cannot be started.
pub fn run(cmd: &mut Command, bound: Duration) -> std::io::Result<Ran> {
    let started = Instant::now();
    let deadline = *DEADLINE.lock().unwrap_or_else(|e| e.into_inner());
    let bound = deadline.map_or(bound, |d| bound.min(d.saturating_duration_since(started)));
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).spawn()?;
    let group = child.id() as i32;
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if started.elapsed() >= bound {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: kill(2) with a negative pid signals the process group this child leads (created by
    // process_group(0) above); the group outlives the child only as long as its members do.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let _ = child.wait();
    let elapsed = started.elapsed();
    let text =
        |h: std::thread::JoinHandle<Vec<u8>>| String::from_utf8_lossy(&h.join().unwrap_or_default()).into_owned();
    Ok(Ran { stdout: text(out), stderr: text(err), status, elapsed })
}

/// A program left running (a daemon), killed with its process group when dropped.
pub struct Background(Child);

/// Starts `cmd` in a process group of its own, its output to `log`.
pub fn start(cmd: &mut Command, log: &std::path::Path) -> std::io::Result<Background> {
    let out = std::fs::File::create(log)?;
    let err = out.try_clone()?;
    Ok(Background(cmd.stdin(Stdio::null()).stdout(out).stderr(err).process_group(0).spawn()?))
}

impl Background {
    /// Its process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // SAFETY: as in `run`: the negative pid names the process group this child leads.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_past_its_bound_is_killed_with_its_children() {
        let marker = std::env::temp_dir().join(format!("gpu-check-bounded-{}", std::process::id()));
        let script = format!("(sleep 1; touch {}) & sleep 30", marker.display());
        let ran = run(Command::new("sh").args(["-c", &script]), Duration::from_millis(300)).unwrap();
        assert!(ran.status.is_none() && !ran.success(), "{ran:?}");
        assert!(ran.ending().contains("killed after"), "{}", ran.ending());
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!marker.exists(), "the background child outlived the bound");
    }

    #[test]
    fn output_and_status_are_kept() {
        let ran =
            run(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]), Duration::from_secs(10)).unwrap();
        assert_eq!((ran.stdout.as_str(), ran.stderr.as_str()), ("out\n", "err\n"));
        assert_eq!(ran.status.and_then(|s| s.code()), Some(3));
        assert!(ran.ending().contains("err"), "{}", ran.ending());
    }
}
