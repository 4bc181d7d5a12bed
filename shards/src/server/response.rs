//! Responses as a connection writes them: one encoded frame, or a Fetch
//! frame whose record sections are written straight from the log's memory or
//! files (sendfile, no user-space copy).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;

use brook_engine::protocol::frame::{FrameError, Request};
use bytes::{BufMut, Bytes, BytesMut};
use futures::io::{AsyncWrite, AsyncWriteExt};
use kafka_protocol::messages::ResponseHeader;
use kafka_protocol::protocol::Encodable;

use crate::storage::LogBytes;

/// Record bytes of one fetched partition.
#[derive(Debug)]
pub enum Records {
    /// From this shard's memory (tail cache or an O_DIRECT read).
    Local(Vec<LogBytes>),
    /// Copied from another shard's memory.
    Owned(Bytes),
    /// A range of a sealed segment, sent with sendfile.
    File {
        file: Rc<std::fs::File>,
        position: u64,
        len: u64,
    },
}

/// One piece of a Fetch frame.
#[derive(Debug)]
pub enum FetchPart {
    Bytes(Vec<u8>),
    Records(Records),
}

#[derive(Debug)]
pub enum Response {
    Frame(Bytes),
    Fetch(Vec<FetchPart>),
    /// Produce with acks=0: nothing goes back.
    Nothing,
    /// The request was malformed: log it and close the connection.
    Close(String),
}

/// Encodes `body` with its response header as a whole frame.
pub fn encode<T: Encodable>(request: &Request, body: &T) -> Result<Response, FrameError> {
    let malformed = |error: String| FrameError::Malformed {
        api_key: request.api_key,
        version: request.api_version,
        reason: format!("encoding the response: {error}"),
    };
    let mut buffer = BytesMut::with_capacity(256);
    buffer.put_i32(0);
    let header_version = request.api_key.response_header_version(request.api_version);
    ResponseHeader::default()
        .with_correlation_id(request.correlation_id)
        .encode(&mut buffer, header_version)
        .map_err(|error| malformed(error.to_string()))?;
    body.encode(&mut buffer, request.api_version)
        .map_err(|error| malformed(error.to_string()))?;
    let size = (buffer.len() - 4) as i32;
    buffer[..4].copy_from_slice(&size.to_be_bytes());
    Ok(Response::Frame(buffer.freeze()))
}

/// Writes a Fetch frame: bytes as they are, records from memory, files with
/// sendfile on the blocking pool (a cold page-cache read must not stall the
/// shard).
pub async fn write_fetch<W: AsyncWrite + Unpin>(
    writer: &mut W,
    socket: RawFd,
    parts: Vec<FetchPart>,
) -> std::io::Result<()> {
    for part in parts {
        match part {
            FetchPart::Bytes(bytes) => writer.write_all(&bytes).await?,
            FetchPart::Records(Records::Owned(bytes)) => writer.write_all(&bytes).await?,
            FetchPart::Records(Records::Local(pieces)) => {
                for piece in pieces {
                    writer.write_all(&piece).await?;
                }
            }
            FetchPart::Records(Records::File {
                file,
                position,
                len,
            }) => {
                writer.flush().await?;
                sendfile_all(socket, &file, position, len).await?;
            }
        }
    }
    Ok(())
}

/// How long one pool job waits for a full socket before it hands the pool
/// thread back (other connections' file reads queue behind it).
const SENDFILE_WAIT_SLICE_MS: i32 = 100;

/// How long a peer may take no bytes at all before the send fails.
const SENDFILE_STALL_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// Sends `len` bytes of `file` from `position` to the socket with
/// sendfile(2), on glommio's blocking pool. Both descriptors are duplicated
/// for the pool thread, so nothing it uses can be closed under it. A peer
/// that stops reading holds a pool thread for at most one slice at a time.
pub async fn sendfile_all(
    socket: RawFd,
    file: &std::fs::File,
    position: u64,
    len: u64,
) -> std::io::Result<()> {
    let file = std::sync::Arc::new(file.try_clone()?);
    // SAFETY: dup of a descriptor this connection owns and keeps open while
    // it awaits this call; the duplicate is owned (and closed) by `socket`.
    let socket = std::sync::Arc::new(unsafe {
        let duplicate = libc::dup(socket);
        if duplicate < 0 {
            return Err(std::io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(duplicate)
    });
    let end = position + len;
    let mut offset = position;
    let mut progressed = std::time::Instant::now();
    while offset < end {
        let (socket, file) = (socket.clone(), file.clone());
        let reached = glommio::executor()
            .spawn_blocking(move || send_range(&socket, &file, offset, end))
            .await?;
        if reached > offset {
            offset = reached;
            progressed = std::time::Instant::now();
        } else if progressed.elapsed() > SENDFILE_STALL_MAX {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the peer stopped reading",
            ));
        }
    }
    Ok(())
}

/// Sends from `position` towards `end` until done or the socket stays full
/// for a slice; returns the position reached.
fn send_range(
    socket: &OwnedFd,
    file: &std::fs::File,
    position: u64,
    end: u64,
) -> std::io::Result<u64> {
    let mut offset = position as libc::off_t;
    while (offset as u64) < end {
        let remaining = (end - offset as u64).min(1 << 30) as usize;
        // SAFETY: valid descriptors, and `offset` is a valid out-parameter.
        let sent =
            unsafe { libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut offset, remaining) };
        if sent > 0 {
            continue;
        }
        if sent == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the segment ended early",
            ));
        }
        let error = std::io::Error::last_os_error();
        match error.kind() {
            std::io::ErrorKind::Interrupted => {}
            std::io::ErrorKind::WouldBlock => {
                if !wait_writable(socket)? {
                    break;
                }
            }
            _ => return Err(error),
        }
    }
    Ok(offset as u64)
}

/// Waits (on the pool thread) up to one slice for the non-blocking socket to
/// take more; false if it is still full.
fn wait_writable(socket: &OwnedFd) -> std::io::Result<bool> {
    let mut poll = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut poll, 1, SENDFILE_WAIT_SLICE_MS) };
    match ready {
        1.. if poll.revents & (libc::POLLERR | libc::POLLHUP) != 0 => Err(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "the peer went away",
        )),
        1.. => Ok(true),
        0 => Ok(false),
        _ => Err(std::io::Error::last_os_error()),
    }
}
