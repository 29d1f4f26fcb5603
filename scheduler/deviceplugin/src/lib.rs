//! The Kubernetes device plugin of Tessera.

/// The kubelet device-plugin API `v1beta1`, generated from the vendored `proto/api.proto`.
pub mod v1beta1 {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("v1beta1");
}
