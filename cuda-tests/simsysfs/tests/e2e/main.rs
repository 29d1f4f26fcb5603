//! The simulated sysfs's end-to-end tests, one binary: the layouts it builds and the simulated kernel's
//! reactions to writes.

mod common;
mod kernel;
mod layout;
