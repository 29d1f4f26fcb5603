//! The Kubernetes device plugin of Tessera: registers an extended resource (`tessera.io/vgpu` by default)
//! with kubelet over the device-plugin API `v1beta1`, advertises each GPU as N replicas, and for a
//! container asking for k replicas of one GPU creates, through the daemon's API, a vGPU with k/N of that
//! GPU's time and memory and tells kubelet how the container joins it.
//!
//! - [`config`]: what the plugin is configured with;
//! - [`inventory`]: the node's GPUs (daemon `stats` + NVML) and replica IDs;
//! - [`allocate`]: one container's allocation: the GPU, replicas and vGPU;
//! - [`container_edits`]: what a container of a vGPU is given (env, mounts, device nodes), for kubelet's
//!   answer and for CDI alike;
//! - [`cdi`]: CDI specs of the vGPUs and GPUs; [`cdi_file`]: the spec file the plugin keeps (`--cdi-dir`);
//! - [`extra_resources`]: `<resource>-memory` and `<resource>-share`, for the scheduler's accounting;
//! - [`sizing`]: a vGPU's size as its pod asks for it (limits, annotations, Kubernetes quantities);
//! - [`kube_api`]: the Kubernetes API, when the plugin has credentials;
//! - [`pods`]: which pod container a vGPU is for, and what its pod's state means for it;
//! - [`gc`]: removing the vGPUs of ended containers;
//! - [`preferred`]: the preferred allocation (one GPU, least loaded first);
//! - [`service`]: the `DevicePlugin` gRPC service;
//! - [`registration`]: registering with kubelet;
//! - [`plugin`]: the whole at work, starting over when kubelet restarts;
//! - [`unix`]: gRPC over unix sockets;
//! - [`v1beta1`]: the generated API.

pub mod allocate;
pub mod cdi;
pub mod cdi_file;
pub mod config;
pub mod container_edits;
pub mod extra_resources;
pub mod gc;
pub mod inventory;
pub mod kube_api;
pub mod plugin;
pub mod pods;
pub mod preferred;
pub mod registration;
pub mod service;
pub mod sizing;
pub mod unix;

/// The vendored CDI schema's check, for the tests.
#[cfg(test)]
#[path = "../cdi-schema/validator.rs"]
mod cdi_validator;

/// The kubelet device-plugin API `v1beta1`, generated from the vendored `proto/api.proto`.
pub mod v1beta1 {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("v1beta1");
}
