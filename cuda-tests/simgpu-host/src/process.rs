//! Identity and liveness of processes sharing the state file.

/// This process's id.
pub fn own_pid() -> u32 {
    std::process::id()
}

/// State letter and start time (fields 3 and 22 of `/proc/PID/stat`); `None` when there is no such process.
fn stat(pid: u32) -> Option<(String, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; the fields after it follow the last ')'.
    let mut fields = text[text.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.to_string();
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The kernel's start time of `pid`, which tells a live process from a later one that reused its pid.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|(_, start)| start)
}

/// True when `pid` still runs and is the process that registered with `start`. A zombie (killed, not yet
/// reaped) counts as dead: it will never release anything itself.
pub fn is_alive(pid: u32, start: u64) -> bool {
    matches!(stat(pid), Some((state, s)) if s == start && state != "Z" && state != "X")
}

/// True when `pid` exists and is not a zombie (used where no start time was recorded).
pub fn is_running(pid: u32) -> bool {
    matches!(stat(pid), Some((state, _)) if state != "Z" && state != "X")
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_process_is_alive() {
        let pid = super::own_pid();
        let start = super::start_time(pid).unwrap();
        assert!(super::is_alive(pid, start));
        assert!(!super::is_alive(pid, start + 1));
        assert!(!super::is_alive(u32::MAX - 1, start));
    }
}
