//! The vGPU configuration: [`config`], the specs and the rules every change keeps; [`store`], their file,
//! written atomically; [`slots`], writing specs into the region and reading usage back; [`manager`],
//! carrying out requests.

pub mod config;
pub(crate) mod manager;
pub(crate) mod slots;
pub(crate) mod store;
