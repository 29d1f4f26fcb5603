//! The CLI crate's end-to-end tests, one binary: the deployment manifests, `tools/install.sh`, and the
//! rule that the installed product carries no simulator.

mod deploy_manifests;
mod install;
mod no_simulator;
mod test_targets;
