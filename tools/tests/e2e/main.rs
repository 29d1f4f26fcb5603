//! The CLI crate's end-to-end tests, one binary: the documentation's commands and links, the deployment
//! manifests, `tools/install.sh`, the rule that the installed product carries no simulator, and targets
//! built without a test harness.

mod common;
mod deploy_manifests;
mod docs;
mod install;
mod no_simulator;
mod test_targets;
