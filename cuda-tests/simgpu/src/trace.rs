//! An opt-in record of every kernel the engine runs, for benchmarks that need each kernel's engine
//! times rather than what its process measured (how long after its launch a kernel started, how the
//! engine was shared within a millisecond).
//!
//! With `SIMGPU_ENGINE_TRACE=path` a process appends one line per kernel it runs to `path`:
//! `pid device ready_ns start_ns end_ns [name]`, on the shared monotonic clock of [`now_ns`](crate::state::now_ns):
//! when the kernel was ready on its stream (queued there, and the stream's earlier work finished), and
//! the simulated start and end of its run on the engine ([`Span`]); the kernel's name ends the line
//! when the simulator did not compute it (a timed no-op: see `crate::kernels::Call::Uncomputed`). Each line is one `write` to a file
//! opened with `O_APPEND`, after the kernel has handed the engine on, so tracing never delays the next
//! kernel. Unset, it costs one load of an initialized `OnceLock` per kernel.

use crate::engine::Span;
use crate::process;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;

/// The variable naming the trace file.
pub const VAR: &str = "SIMGPU_ENGINE_TRACE";

/// One traced kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The process that ran it.
    pub pid: u32,
    /// Device ordinal.
    pub device: u32,
    /// When it was ready on its stream.
    pub ready_ns: u64,
    /// When it started on the engine.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
    /// Its name, when the simulator did not compute it.
    pub uncomputed: Option<String>,
}

/// An open trace file.
pub struct Tracer(File);

impl Tracer {
    /// Opens `path` for appending, creating it.
    pub fn open(path: &Path) -> std::io::Result<Tracer> {
        OpenOptions::new().append(true).create(true).open(path).map(Tracer)
    }

    /// Appends `entry` as one line.
    pub fn record(&self, entry: &Entry) {
        let Entry { pid, device, ready_ns, start_ns, end_ns, uncomputed } = entry;
        let name = uncomputed.as_deref().map(|n| format!(" {n}")).unwrap_or_default();
        let line = format!("{pid} {device} {ready_ns} {start_ns} {end_ns}{name}\n");
        // One write of a short line to an O_APPEND file: lines of processes sharing the file do not
        // interleave. A failed write loses one line of a diagnostic record; the kernel itself has run.
        let _ = (&self.0).write_all(line.as_bytes());
    }
}

static TRACER: OnceLock<Option<Tracer>> = OnceLock::new();

/// This process's tracer, opened on first use when [`VAR`] names a file.
fn tracer() -> Option<&'static Tracer> {
    TRACER
        .get_or_init(|| {
            let path = std::env::var_os(VAR).filter(|p| !p.is_empty())?;
            Tracer::open(Path::new(&path))
                .map_err(|e| eprintln!("simgpu: {VAR}={}: cannot open: {e}; kernels are not traced", path.display()))
                .ok()
        })
        .as_ref()
}

/// Records a kernel of this process on device `device`, ready at `ready_ns`, that ran over `span` (named
/// when it was `uncomputed`), when tracing is on.
pub fn record(device: usize, ready_ns: u64, span: Span, uncomputed: Option<&str>) {
    if let Some(t) = tracer() {
        let pid = process::own_pid();
        let (start_ns, end_ns) = (span.start_ns, span.end_ns);
        let uncomputed = uncomputed.map(str::to_string);
        t.record(&Entry { pid, device: device as u32, ready_ns, start_ns, end_ns, uncomputed });
    }
}

/// Reads a trace file. Lines that do not parse are skipped: the last one of a process killed while
/// writing it may be cut short.
pub fn read(path: &Path) -> std::io::Result<Vec<Entry>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text.lines().filter_map(parse).collect())
}

fn parse(line: &str) -> Option<Entry> {
    let mut f = line.split(' ');
    let mut next = || f.next()?.parse::<u64>().ok();
    let (pid, device, ready_ns, start_ns, end_ns) =
        (next()?.try_into().ok()?, next()?.try_into().ok()?, next()?, next()?, next()?);
    let uncomputed = f.next().map(str::to_string);
    let entry = Entry { pid, device, ready_ns, start_ns, end_ns, uncomputed };
    (entry.start_ns <= entry.end_ns).then_some(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_a_cut_line_is_skipped() {
        let dir = std::env::temp_dir().join(format!("simgpu-trace-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace");
        let _ = std::fs::remove_file(&path);
        let t = Tracer::open(&path).unwrap();
        let a = Entry { pid: 7, device: 0, ready_ns: 10, start_ns: 20, end_ns: 220, uncomputed: None };
        let b = Entry { pid: 8, device: 1, ready_ns: 15, start_ns: 220, end_ns: 420, uncomputed: Some("gemm".into()) };
        t.record(&a);
        t.record(&b);
        (&t.0).write_all(b"9 0 30 40").unwrap();
        assert_eq!(read(&path).unwrap(), [a, b]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
