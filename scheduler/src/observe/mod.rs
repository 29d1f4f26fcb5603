//! What the daemon records and reports: [`history`] (the device time each vGPU and device achieved over
//! the last seconds), [`sensors`] (the driver's figures of each device), [`metrics`] and
//! [`metrics_server`] (the same for Prometheus, `tessera daemon --metrics`), [`logger`] (log lines that
//! never hold up a thread) and [`audit_log`] (who changed what, and what was refused).

pub(crate) mod audit_log;
pub(crate) mod history;
pub(crate) mod logger;
pub(crate) mod metrics;
pub(crate) mod metrics_server;
pub(crate) mod sensors;
