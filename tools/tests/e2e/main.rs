//! The CLI crate's end-to-end tests, one binary: the documentation's commands and links, the deployment
//! manifests, `tools/install.sh`, the rule that the installed product carries no simulator, targets
//! built without a test harness, and one set of dependency features for the build and the tests.

mod common;
mod deploy_manifests;
mod docs;
mod install;
mod no_simulator;
mod one_feature_set;
mod test_targets;
