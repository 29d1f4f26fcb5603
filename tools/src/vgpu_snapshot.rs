//! What `tessera vgpu snapshot` and `tessera vgpu resume` print, and how `list` and `show` name a
//! snapshotted vGPU's state.

use tessera_client::VgpuStatus;
use tessera_ffi::units::format_size;

/// Pids as `1, 2, 3`.
fn pid_list(pids: &[u32]) -> String {
    pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// `snapshotted (2 processes, 3.0 GiB in host memory)`, `suspended` when the vGPU as a whole is.
pub fn state(v: &VgpuStatus) -> String {
    let what = if v.spec.suspended { "snapshotted" } else { "running, part snapshotted" };
    format!(
        "{what} ({} process(es){}, {} in host memory)",
        v.snapshot_pids.len(),
        if v.snapshot_pids.is_empty() { String::new() } else { format!(": pid {}", pid_list(&v.snapshot_pids)) },
        format_size(v.snapshot_bytes)
    )
}

/// The reply to `snapshot NAME [--pid PID ...]`, from the vGPU's status after it.
pub fn snapshotted(name: &str, pids: &[u32], v: &VgpuStatus) -> String {
    let which = if pids.is_empty() {
        format!("vGPU {name} snapshotted: suspended, {} process(es) checkpointed", v.snapshot_pids.len())
    } else {
        format!("vGPU {name}: pid {} checkpointed", pid_list(pids))
    };
    let resume: String = pids.iter().map(|p| format!(" --pid {p}")).collect();
    format!(
        "{which}; {} of device {} memory now in host memory\n`tessera vgpu resume {name}{resume}` brings it back\n",
        format_size(v.snapshot_bytes),
        v.spec.device
    )
}

/// The reply to `resume NAME [--pid PID ...]`, from the vGPU's status before (when it could be read)
/// and after.
pub fn resumed(name: &str, pids: &[u32], before: Option<&VgpuStatus>, after: Option<&VgpuStatus>) -> String {
    let restored = match (before, after) {
        (Some(b), Some(a)) => {
            let bytes = b.snapshot_bytes.saturating_sub(a.snapshot_bytes);
            match b.snapshot_pids.iter().filter(|p| !a.snapshot_pids.contains(p)).count() {
                0 => String::new(),
                n => format!(": {n} process(es) restored, {} back on device {}", format_size(bytes), b.spec.device),
            }
        }
        _ => String::new(),
    };
    if pids.is_empty() {
        format!("vGPU {name} resumed{restored}\n")
    } else {
        format!("vGPU {name}: pid {} resumed{restored}\n", pid_list(pids))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_client::VgpuSpec;

    fn snapshotted_status(pids: Vec<u32>, bytes: u64, suspended: bool) -> VgpuStatus {
        let spec = VgpuSpec { suspended, ..VgpuSpec::new("a", 0, 8 << 30, 10) };
        VgpuStatus { spec, snapshotted: true, snapshot_pids: pids, snapshot_bytes: bytes, ..VgpuStatus::default() }
    }

    #[test]
    fn snapshot_and_resume_say_what_moved() {
        let v = snapshotted_status(vec![10, 11], 3 << 30, true);
        assert_eq!(state(&v), "snapshotted (2 process(es): pid 10, 11, 3.0 GiB in host memory)");
        let out = snapshotted("a", &[], &v);
        assert!(out.starts_with("vGPU a snapshotted: suspended, 2 process(es) checkpointed; 3.0 GiB of device 0"));
        assert!(out.contains("`tessera vgpu resume a` brings it back"), "{out}");
        let part = snapshotted_status(vec![10], 1 << 30, false);
        assert_eq!(state(&part), "running, part snapshotted (1 process(es): pid 10, 1.0 GiB in host memory)");
        assert!(snapshotted("a", &[10, 12], &part).contains("`tessera vgpu resume a --pid 10 --pid 12`"));
        let after = VgpuStatus::default();
        assert_eq!(
            resumed("a", &[], Some(&v), Some(&after)),
            "vGPU a resumed: 2 process(es) restored, 3.0 GiB back on device 0\n"
        );
        assert_eq!(resumed("a", &[], None, None), "vGPU a resumed\n", "a vGPU merely suspended");
        let rest = snapshotted_status(vec![11], 2 << 30, true);
        let out = resumed("a", &[10], Some(&v), Some(&rest));
        assert_eq!(out, "vGPU a: pid 10 resumed: 1 process(es) restored, 1.0 GiB back on device 0\n");
    }
}
