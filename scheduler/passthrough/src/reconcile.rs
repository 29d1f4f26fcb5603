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
