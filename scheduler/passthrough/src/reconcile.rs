//! Putting the host back in order with Tessera's records (asked for, and at every daemon start): an
//! interrupted bind or unbind (its journal left behind) is undone, records of mdevs that vanished are
//! dropped, and mdevs Tessera created that nothing uses (orphans) are removed. Each problem is reported
//! and the rest still done.

use crate::state::State;
use crate::sysfs::{self, Sysfs};
use crate::{Error, vfio};
use tessera_client::devices::ReconcileReport;

/// Reconciles; an `Err` only when Tessera's own files cannot be read.
pub fn reconcile(sys: &Sysfs, state: &State) -> Result<ReconcileReport, Error> {
    let mut report = ReconcileReport::default();
    if let Some(journal) = state.journal()? {
        let problems = vfio::restore(sys, &journal.members);
        if problems.is_empty() {
            report.rolled_back = journal.members.iter().map(|m| m.address.clone()).collect();
            state.end()?;
        } else {
            report.problems.extend(problems.into_iter().map(|p| format!("undoing an interrupted {}: {p}", journal.op)));
        }
    }
    let records = state.records()?;
    let mut kept = Vec::new();
    for record in records {
        let dir = sys.path("bus/mdev/devices").join(&record.uuid);
        if std::fs::symlink_metadata(&dir).is_err() {
            report.records_dropped.push(record.uuid);
            continue;
        }
        if std::fs::symlink_metadata(dir.join("driver")).is_ok() {
            kept.push(record);
            continue;
        }
        match sysfs::write_attr(&dir.join("remove"), "1") {
            Ok(()) => report.orphans_removed.push(record.uuid),
            Err(e) => {
                report.problems.push(format!("removing orphan mdev {}: {e}", record.uuid));
                kept.push(record);
            }
        }
    }
    if !report.records_dropped.is_empty() || !report.orphans_removed.is_empty() {
        state.save_records(&kept)?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::tests::Tree;
    use crate::state::MdevRecord;

    #[test]
    fn vanished_records_are_dropped_mdevs_in_use_kept_and_unused_ones_removed() {
        let t = Tree::new("reconcile");
        t.add("0000:41:00.4", 0x10de, 0x1eb8, 0x030200, 41, Some("nvidia"));
        t.add_type("0000:41:00.4", "nvidia-63", 2);
        let (used, unused, gone) = ("u-used", "u-unused", "u-gone");
        t.add_mdev("0000:41:00.4", "nvidia-63", used);
        t.add_mdev("0000:41:00.4", "nvidia-63", unused);
        std::os::unix::fs::symlink(
            "../../bus/mdev/drivers/vfio_mdev",
            t.root.join("devices/pci0000:00/0000:41:00.4").join(used).join("driver"),
        )
        .unwrap();
        let state = State::open(&t.root.join("state")).unwrap();
        let record =
            |uuid: &str| MdevRecord { uuid: uuid.into(), parent: "0000:41:00.4".into(), type_id: "nvidia-63".into() };
        state.save_records(&[record(used), record(unused), record(gone)]).unwrap();
        let report = reconcile(&t.sys(), &state).unwrap();
        assert_eq!(report.records_dropped, [gone]);
        assert_eq!(report.orphans_removed, [unused]);
        assert!(report.rolled_back.is_empty() && report.problems.is_empty());
        let remove = t.root.join("devices/pci0000:00/0000:41:00.4").join(unused).join("remove");
        assert_eq!(std::fs::read_to_string(remove).unwrap(), "1", "`1` written to its remove");
        assert_eq!(state.records().unwrap(), [record(used)], "the mdev in use stays recorded");
    }
}
