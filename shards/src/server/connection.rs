//! One client connection: requests are read and parsed here, each runs as
//! its own task (clients pipeline several), and responses go back in request
//! order. A frame that is too large, truncated, unparsable or for an unknown
//! API closes the connection with one log line.

use std::os::fd::AsRawFd;
use std::rc::Rc;

use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request, frame_size, parse_request};
use brook_engine::protocol::versions::api_versions_response;
use bytes::BytesMut;
use futures::StreamExt;
use futures::channel::{mpsc, oneshot};
use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::net::TcpStream;
use glommio::sync::Semaphore;
use kafka_protocol::messages::ApiKey;

use crate::server::handlers;
use crate::server::response::{Response, write_fetch};
use crate::server::shard::Shard;

/// Requests one connection may have in flight before reading pauses.
pub const IN_FLIGHT_REQUESTS_MAX: u64 = 64;

pub async fn serve_connection(shard: Rc<Shard>, stream: TcpStream) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "unknown".to_owned(), |peer| peer.to_string());
    let _ = stream.set_nodelay(true);
    let socket = stream.as_raw_fd();
    let (reader, writer) = stream.split();
    let (queue, pending) = mpsc::unbounded();
    let in_flight = Rc::new(Semaphore::new(IN_FLIGHT_REQUESTS_MAX));
    let writing = glommio::spawn_local(write_responses(
        writer,
        socket,
        pending,
        in_flight.clone(),
        peer.clone(),
    ));
    match read_requests(&shard, reader, queue, in_flight).await {
        Ok(()) => writing.await,
        Err(error) => {
            tracing::warn!(%peer, %error, "closing connection");
            let _ = writing.cancel().await;
        }
    }
}

type Pending = oneshot::Receiver<Response>;

async fn read_requests<R: AsyncRead + Unpin>(
    shard: &Rc<Shard>,
    mut reader: R,
    queue: mpsc::UnboundedSender<Pending>,
    in_flight: Rc<Semaphore>,
) -> Result<(), FrameError> {
    let max_bytes = shard.context.config.socket_request_max_bytes;
    loop {
        let mut prefix = [0u8; 4];
        match reader.read_exact(&mut prefix).await {
            Ok(()) => {}
            Err(_) => return Ok(()),
        }
        let size = frame_size(prefix, max_bytes)?;
        let mut frame = BytesMut::zeroed(size);
        if reader.read_exact(&mut frame).await.is_err() {
            return Err(FrameError::Truncated { size });
        }
        let response_slot = match parse_request(frame.freeze()) {
            Ok(request) => {
                tracing::trace!(api = ?request.api_key, version = request.api_version, client = ?request.client_id, "request");
                Slot::Handle(request)
            }
            Err(FrameError::UnsupportedVersion {
                api_key: ApiKey::ApiVersions,
                correlation_id,
                ..
            }) => Slot::Ready(unsupported_api_versions(correlation_id)),
            Err(error) => return Err(error),
        };
        if in_flight.acquire(1).await.is_err() || shard.is_stopping() {
            return Ok(());
        }
        let (sender, receiver) = oneshot::channel();
        if queue.unbounded_send(receiver).is_err() {
            return Ok(());
        }
        match response_slot {
            Slot::Ready(response) => {
                let _ = sender.send(response);
            }
            Slot::Handle(request) => {
                let handling = handlers::start(shard, request).await;
                glommio::spawn_local(async move {
                    let _ = sender.send(handling.await);
                })
                .detach();
            }
        }
    }
}

enum Slot {
    Handle(Request),
    Ready(Response),
}

/// ApiVersions in a version the broker does not know: the error and the
/// supported list, in version 0 (KIP-511), so the client can pick again.
fn unsupported_api_versions(correlation_id: i32) -> Response {
    let request = Request {
        api_key: ApiKey::ApiVersions,
        api_version: 0,
        correlation_id,
        client_id: None,
        body: bytes::Bytes::new(),
    };
    crate::server::response::encode(
        &request,
        &api_versions_response(ErrorCode::UNSUPPORTED_VERSION),
    )
    .unwrap_or_else(|error| Response::Close(error.to_string()))
}

async fn write_responses<W: AsyncWrite + Unpin>(
    mut writer: W,
    socket: std::os::fd::RawFd,
    mut pending: mpsc::UnboundedReceiver<Pending>,
    in_flight: Rc<Semaphore>,
    peer: String,
) {
    while let Some(receiver) = pending.next().await {
        let response = receiver
            .await
            .unwrap_or_else(|_| Response::Close("a request handler failed".into()));
        let written = match response {
            Response::Frame(bytes) => writer.write_all(&bytes).await,
            Response::Fetch(parts) => write_fetch(&mut writer, socket, parts).await,
            Response::Nothing => Ok(()),
            Response::Close(reason) => {
                tracing::warn!(%peer, %reason, "closing connection");
                in_flight.close();
                let _ = writer.close().await;
                return;
            }
        };
        if let Err(error) = written {
            tracing::debug!(%peer, %error, "writing a response failed");
            in_flight.close();
            return;
        }
        in_flight.signal(1);
    }
    let _ = writer.close().await;
}
