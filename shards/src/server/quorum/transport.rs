//! The controller listener and the connections to other voters: frames in
//! and out, the hello that checks `cluster.id`, bounded everything.

use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::time::Duration;

use brook_engine::cluster::node_config::{ClusterSettings, Listener, Voter};
use brook_engine::cluster::peer_wire::{
    PeerFrame, PeerResponse, PeerWireError, decode_frame, encode_frame, frame_length,
};
use brook_engine::types::BrokerId;
use futures::channel::mpsc;
use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, FutureExt, StreamExt};
use glommio::net::{TcpListener, TcpStream};
use thiserror::Error;

use super::{Input, Quorum};
use crate::net::{PEER_CONNECT_TIMEOUT, PEER_LIVENESS_TIMEOUT, bound_liveness};
use crate::server::ServerError;
use crate::server::exclusive::bind_listener;

/// How long a peer may take to say hello, or a registration to be answered.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(5);
/// Reconnection backoff to a voter: from the first to the last.
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(50);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Responses a peer connection queues before its reader waits.
const RESPONSES_QUEUED_MAX: usize = 64;

#[derive(Debug, Error)]
pub enum PeerError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Wire(#[from] PeerWireError),
    #[error("peer is in cluster {theirs:?}, this node in {ours:?}")]
    OtherCluster { theirs: String, ours: String },
    #[error("peer did not start with a hello")]
    NoHello,
    #[error("timed out")]
    TimedOut,
    #[error("an answer from controller epoch {answered}, older than {known}, ignored")]
    StaleEpoch { answered: u64, known: u64 },
}

pub async fn read_frame(stream: &mut (impl AsyncRead + Unpin)) -> Result<PeerFrame, PeerError> {
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix).await?;
    let length = frame_length(prefix)?;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await?;
    Ok(decode_frame(&body)?)
}

pub async fn write_bytes(
    stream: &mut (impl AsyncWrite + Unpin),
    bytes: &[u8],
) -> Result<(), PeerError> {
    stream.write_all(bytes).await?;
    stream.flush().await?;
    Ok(())
}

pub async fn with_timeout<T>(
    future: impl std::future::Future<Output = Result<T, PeerError>>,
    limit: Duration,
) -> Result<T, PeerError> {
    futures::select_biased! {
        result = future.fuse() => result,
        () = glommio::timer::sleep(limit).fuse() => Err(PeerError::TimedOut),
    }
}

/// Reads the peer's hello; a different cluster id is refused.
pub async fn expect_hello(
    stream: &mut (impl AsyncRead + Unpin),
    cluster_id: &str,
) -> Result<BrokerId, PeerError> {
    match with_timeout(read_frame(stream), PEER_TIMEOUT).await? {
        PeerFrame::Hello {
            cluster_id: theirs,
            node,
        } if theirs == cluster_id => Ok(node),
        PeerFrame::Hello {
            cluster_id: theirs, ..
        } => Err(PeerError::OtherCluster {
            theirs,
            ours: cluster_id.to_owned(),
        }),
        _ => Err(PeerError::NoHello),
    }
}

/// A connection to a voter, set up within [`PEER_CONNECT_TIMEOUT`] and
/// given up once the voter acknowledges nothing for
/// [`PEER_LIVENESS_TIMEOUT`] (see [`bound_liveness`]).
pub async fn connect(host: &str, port: u16) -> Result<TcpStream, PeerError> {
    let address = format!("{host}:{port}");
    let stream = with_timeout(
        async {
            Ok(TcpStream::connect(address.as_str())
                .await
                .map_err(std::io::Error::from)?)
        },
        PEER_CONNECT_TIMEOUT,
    )
    .await?;
    bound_liveness(stream.as_raw_fd(), PEER_LIVENESS_TIMEOUT)?;
    Ok(stream)
}

/// Sends Raft frames to one voter, reconnecting with backoff; what is
/// queued while the voter is unreachable is dropped (Raft resends).
pub async fn send_to_peer(
    voter: Voter,
    cluster_id: String,
    hello: Vec<u8>,
    mut frames: mpsc::Receiver<Vec<u8>>,
) {
    let mut backoff = RECONNECT_BACKOFF_MIN;
    loop {
        let session = async {
            let mut stream = connect(&voter.host, voter.port).await?;
            write_bytes(&mut stream, &hello).await?;
            expect_hello(&mut stream, &cluster_id).await?;
            tracing::info!(voter = %voter.id, "connected to voter");
            while let Some(frame) = frames.next().await {
                write_bytes(&mut stream, &frame).await?;
            }
            Ok::<(), PeerError>(())
        };
        if let Err(error) = session.await {
            tracing::debug!(voter = %voter.id, %error, "voter connection lost");
            if matches!(error, PeerError::OtherCluster { .. }) {
                tracing::error!(voter = %voter.id, %error, "a voter belongs to another cluster");
            }
        }
        while frames.try_recv().is_ok() {}
        glommio::timer::sleep(backoff).await;
        backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
    }
}

/// Where `listener` binds: its host (empty: every address) and port.
pub fn listener_address(listener: &Listener) -> Result<SocketAddr, ServerError> {
    let host = if listener.host.is_empty() {
        "0.0.0.0"
    } else {
        listener.host.as_str()
    };
    let unresolved = |source| ServerError::Listen {
        address: SocketAddr::from(([0, 0, 0, 0], listener.port)),
        source,
    };
    (host, listener.port)
        .to_socket_addrs()
        .map_err(unresolved)?
        .next()
        .ok_or_else(|| {
            unresolved(std::io::Error::other(format!(
                "{host} resolves to no address"
            )))
        })
}

/// Binds the controller listener as the client listener is bound (see
/// [`bind_listener`]): a restart after a crash takes the port again.
pub fn bind_std(listener: &Listener) -> Result<std::net::TcpListener, ServerError> {
    let address = listener_address(listener)?;
    bind_listener(address).map_err(|source| ServerError::Listen { address, source })
}

/// The controller listener: peers and brokers connect here.
pub async fn listen(
    settings: ClusterSettings,
    listener: Listener,
    bound: std::net::TcpListener,
    quorum: Option<Rc<Quorum>>,
) {
    // SAFETY: the descriptor of a bound, listening socket, given up by the
    // std listener it came in.
    let bound = unsafe { TcpListener::from_raw_fd(bound.into_raw_fd()) };
    tracing::info!(listener = %listener.name, port = listener.port, "controller listener up");
    loop {
        match bound.accept().await {
            Ok(stream) => {
                let peer = stream
                    .peer_addr()
                    .map(|address| address.to_string())
                    .unwrap_or_default();
                let (cluster_id, node, quorum) =
                    (settings.cluster_id.clone(), settings.node, quorum.clone());
                glommio::spawn_local(async move {
                    if let Err(error) = serve_peer(stream, &cluster_id, node, quorum).await {
                        let eof = matches!(&error, PeerError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof);
                        if eof {
                            tracing::debug!(%peer, "controller-listener connection closed");
                        } else {
                            tracing::warn!(%peer, %error, "controller-listener connection closed");
                        }
                    }
                })
                .detach();
            }
            Err(error) => {
                tracing::warn!(%error, "controller listener accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn serve_peer(
    stream: TcpStream,
    cluster_id: &str,
    node: BrokerId,
    quorum: Option<Rc<Quorum>>,
) -> Result<(), PeerError> {
    // A peer gone without a word (a partition) frees this task and its
    // connection, as the peer's side frees its own.
    bound_liveness(stream.as_raw_fd(), PEER_LIVENESS_TIMEOUT)?;
    let (mut reader, mut writer) = stream.split();
    let from = expect_hello(&mut reader, cluster_id).await?;
    let hello = encode_frame(&PeerFrame::Hello {
        cluster_id: cluster_id.to_owned(),
        node,
    });
    write_bytes(&mut writer, &hello).await?;
    let (responses, mut outgoing) = mpsc::channel::<Vec<u8>>(RESPONSES_QUEUED_MAX);
    let writing = glommio::spawn_local(async move {
        while let Some(frame) = outgoing.next().await {
            if write_bytes(&mut writer, &frame).await.is_err() {
                return;
            }
        }
    });
    let result = loop {
        let frame = match read_frame(&mut reader).await {
            Ok(frame) => frame,
            Err(error) => break Err(error),
        };
        match frame {
            PeerFrame::Raft(message) => {
                if let Some(quorum) = &quorum {
                    quorum.submit(Input::Raft(message)).await;
                }
            }
            PeerFrame::Request {
                correlation,
                epoch,
                request,
            } => {
                let (response, epoch) = match &quorum {
                    Some(quorum) => (
                        quorum
                            .request(from, epoch, request)
                            .await
                            .unwrap_or(PeerResponse::NotController { leader: None }),
                        quorum.epoch(),
                    ),
                    None => (PeerResponse::NotController { leader: None }, 0),
                };
                let frame = encode_frame(&PeerFrame::Response {
                    correlation,
                    epoch,
                    response,
                });
                if futures::SinkExt::send(&mut responses.clone(), frame)
                    .await
                    .is_err()
                {
                    break Ok(());
                }
            }
            PeerFrame::Hello { .. } | PeerFrame::Response { .. } => break Err(PeerError::NoHello),
        }
    };
    drop(responses);
    writing.await;
    result
}
