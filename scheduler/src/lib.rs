//! The host scheduler; the daemon lands with the scheduler issue.
