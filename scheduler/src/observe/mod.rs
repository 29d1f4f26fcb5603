//! What the daemon records and reports: [`history`] (the device time each vGPU and device achieved over
//! the last seconds), [`sensors`] (the driver's figures of each device), [`metrics`] and
//! [`metrics_server`] (the same for Prometheus, `tessera daemon --metrics`), [`logger`] (log lines that
//! never hold up a thread) and [`audit_log`] (who changed what, and what was refused).

pub mod audit_log;
pub mod history;
pub mod logger;
pub mod metrics;
pub mod metrics_server;
pub mod sensors;
