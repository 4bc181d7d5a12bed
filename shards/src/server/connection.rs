//! One client connection: requests are read and parsed here, each runs as
//! its own task (clients pipeline several), and responses go back in request
//! order. A frame that is too large, truncated, unparsable or for an unknown
//! API closes the connection with one log line.

use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::Instant;

use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request, frame_size, parse_request};
use brook_engine::protocol::versions::api_versions_response;
use futures::StreamExt;
use futures::channel::{mpsc, oneshot};
use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::net::TcpStream;
use glommio::sync::Semaphore;
use kafka_protocol::messages::ApiKey;

use crate::net::receive_exact;
use crate::server::error_counts::ErrorCounts;
use crate::server::handlers;
use crate::server::response::{Response, write_fetch};
use crate::server::shard::Shard;

/// Requests one connection may have in flight before reading pauses.
pub const IN_FLIGHT_REQUESTS_MAX: u64 = 64;

/// Serves one client connection, accepted on client listener `listener`.
pub async fn serve_connection(shard: Rc<Shard>, stream: TcpStream, listener: usize) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "unknown".to_owned(), |peer| peer.to_string());
    let _ = stream.set_nodelay(true);
    let socket = stream.as_raw_fd();
    let config = &shard.context.config;
    let (send, receive) = (
        config.socket_send_buffer_bytes,
        config.socket_receive_buffer_bytes,
    );
    if let Err(error) = crate::net::set_buffer_sizes(socket, send, receive) {
        tracing::warn!(%peer, %error, "setting the socket's buffer sizes");
    }
    let (reader, writer) = stream.split();
    let (queue, pending) = mpsc::unbounded();
    let in_flight = Rc::new(InFlight {
        requests: Semaphore::new(IN_FLIGHT_REQUESTS_MAX),
        bytes: Semaphore::new(shard.context.config.socket_request_max_bytes as u64),
    });
    let writing = glommio::spawn_local(write_responses(
        shard.clone(),
        writer,
        socket,
        pending,
        in_flight.clone(),
        peer.clone(),
    ));
    let client_host = stream_host(&peer);
    shard.metrics.connection_opened();
    let origin = (client_host, listener);
    match read_requests(&shard, origin, socket, reader, queue, in_flight).await {
        Ok(()) => writing.await,
        Err(error) => {
            tracing::warn!(%peer, %error, "closing connection");
            let _ = writing.cancel().await;
        }
    }
    shard.metrics.connection_closed();
}

/// `/ip` from `ip:port`, as Kafka shows a client's host.
fn stream_host(peer: &str) -> String {
    let host = peer.rsplit_once(':').map_or(peer, |(host, _)| host);
    format!("/{}", host.trim_start_matches('[').trim_end_matches(']'))
}

/// A request in flight: its frame size, where its response will be, and
/// its API and when it was read (for the request metrics; `None`: not
/// handled, so not counted).
type Pending = (u64, oneshot::Receiver<Response>, Option<(ApiKey, Instant)>);

/// What a connection may have in flight before it stops reading: a number of
/// requests, and request bytes (one largest request's worth, so a client
/// cannot hold many frames of `socket.request.max.bytes` in memory at once).
struct InFlight {
    requests: Semaphore,
    bytes: Semaphore,
}

impl InFlight {
    fn close(&self) {
        self.requests.close();
        self.bytes.close();
    }
}

async fn read_requests<R: AsyncRead + Unpin>(
    shard: &Rc<Shard>,
    (client_host, listener): (String, usize),
    socket: std::os::fd::RawFd,
    mut reader: R,
    queue: mpsc::UnboundedSender<Pending>,
    in_flight: Rc<InFlight>,
) -> Result<(), FrameError> {
    let max_bytes = shard.context.config.socket_request_max_bytes;
    loop {
        let mut prefix = [0u8; 4];
        match reader.read_exact(&mut prefix).await {
            Ok(()) => {}
            Err(_) => return Ok(()),
        }
        let size = frame_size(prefix, max_bytes)?;
        // Room for the frame before it is read: the bytes come back when
        // its response has been written.
        let stopped = in_flight.requests.acquire(1).await.is_err()
            || in_flight.bytes.acquire(size as u64).await.is_err();
        if stopped || shard.is_stopping() {
            return Ok(());
        }
        let frame = read_frame(&mut reader, socket, size).await?;
        let response_slot = match parse_request(frame) {
            Ok(mut request) => {
                request.client_host.clone_from(&client_host);
                request.listener = listener;
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
        let (sender, receiver) = oneshot::channel();
        let counted = match &response_slot {
            Slot::Handle(request) => Some((request.api_key, Instant::now())),
            Slot::Ready(_) => None,
        };
        if queue
            .unbounded_send((size as u64, receiver, counted))
            .is_err()
        {
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

/// Reads a request frame of `size` bytes (see [`receive_exact`]).
async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    socket: std::os::fd::RawFd,
    size: usize,
) -> Result<bytes::Bytes, FrameError> {
    receive_exact(reader, socket, size)
        .await
        .map_err(|_| FrameError::Truncated { size })
}

enum Slot {
    Handle(Request),
    Ready(Response),
}

/// ApiVersions in a version the broker does not know: the error and the
/// supported list, in version 0 (KIP-511), so the client can pick again.
fn unsupported_api_versions(correlation_id: i32) -> Response {
    let request = Request {
        client_host: String::new(),
        listener: 0,
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
    shard: Rc<Shard>,
    mut writer: W,
    socket: std::os::fd::RawFd,
    mut pending: mpsc::UnboundedReceiver<Pending>,
    in_flight: Rc<InFlight>,
    peer: String,
) {
    while let Some((size, receiver, counted)) = pending.next().await {
        let response = receiver
            .await
            .unwrap_or_else(|_| Response::Close("a request handler failed".into()));
        let (written, errors) = match response {
            Response::Frame(bytes, errors) => (writer.write_all(&bytes).await, errors),
            Response::Fetch(parts, errors) => {
                (write_fetch(&mut writer, socket, parts).await, errors)
            }
            Response::Nothing => (Ok(()), ErrorCounts::default()),
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
        if let Some((api, read_at)) = counted {
            shard.metrics.request_done(api, read_at.elapsed(), &errors);
        }
        in_flight.requests.signal(1);
        in_flight.bytes.signal(size);
    }
    let _ = writer.close().await;
}
