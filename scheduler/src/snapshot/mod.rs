//! Snapshots of vGPUs: [`checkpoint`], the driver's process checkpoint calls; [`sequences`], taking and
//! giving back a snapshot with them, all or nothing. The `snapshot` and `resume` requests are the
//! manager's (`crate::vgpus::manager`).

pub(crate) mod checkpoint;
pub(crate) mod sequences;
