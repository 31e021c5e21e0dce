//! gRPC over Unix sockets: a tonic channel to a socket path (the kubelet's, or in tests a
//! plugin's). The URI tonic wants is a placeholder; the connector ignores it.

use std::path::Path;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// How long connecting and each call may take.
const WITHIN: Duration = Duration::from_secs(5);

/// A channel to the gRPC server on the Unix socket at `path`, connected.
pub async fn channel(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_owned();
    Endpoint::from_static("http://localhost")
        .connect_timeout(WITHIN)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}
