//! gRPC over unix sockets, both ways: a [`listen`]er whose connections a tonic server takes, and a
//! [`channel`] a tonic client dials a socket file with (kubelet's for the plugin, the plugin's for a test
//! playing kubelet).

use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// Listens on socket file `path`, replacing a socket left there by an earlier run.
pub fn listen(path: &Path) -> std::io::Result<UnixListenerStream> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(_) => {}
    }
    Ok(UnixListenerStream::new(UnixListener::bind(path)?))
}

/// A gRPC channel to the server on socket file `path` (connected now, so a missing server is an error
/// here rather than at the first call).
pub async fn channel(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path: PathBuf = path.to_path_buf();
    // The URI is required by the API but unused: every connection goes to `path`.
    Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
}
