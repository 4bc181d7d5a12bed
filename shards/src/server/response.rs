//! Responses as a connection writes them: one encoded frame, or a Fetch
//! frame whose record sections are written straight from the log's memory or
//! files (sendfile, no user-space copy).

use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use brook_engine::protocol::frame::{FrameError, Request};
use bytes::{BufMut, Bytes, BytesMut};
use futures::io::{AsyncWrite, AsyncWriteExt};
use kafka_protocol::messages::ResponseHeader;
use kafka_protocol::protocol::Encodable;

use crate::server::error_counts::{ErrorCodes, ErrorCounts};
use crate::storage::{FileRange, LogBytes};

/// Record bytes of one fetched partition.
#[derive(Debug)]
pub enum Records {
    /// From this shard's memory (tail cache or an O_DIRECT read).
    Local(Vec<LogBytes>),
    /// Copied from another shard's memory.
    Owned(Bytes),
    /// A range of a segment's file, sent with sendfile; the descriptor is
    /// the segment's own, shared with the pool thread that sends it.
    File(FileRange),
}

/// One piece of a Fetch frame.
#[derive(Debug)]
pub enum FetchPart {
    Bytes(Vec<u8>),
    Records(Records),
}

#[derive(Debug)]
pub enum Response {
    /// An encoded frame, and the error codes in it.
    Frame(Bytes, ErrorCounts),
    Fetch(Vec<FetchPart>, ErrorCounts),
    /// Produce with acks=0: nothing goes back.
    Nothing,
    /// The request was malformed: log it and close the connection.
    Close(String),
}

/// Encodes `body` with its response header as a whole frame.
pub fn encode<T: Encodable + ErrorCodes>(
    request: &Request,
    body: &T,
) -> Result<Response, FrameError> {
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
    let mut errors = ErrorCounts::default();
    body.error_codes(&mut errors);
    Ok(Response::Frame(buffer.freeze(), errors))
}

/// Writes a Fetch frame: bytes as they are, records from memory, files with
/// sendfile on the blocking pool (a cold page-cache read must not stall the
/// shard). Consecutive pieces the pool can send (bytes and file ranges: the
/// partition headers between ranges) go to it in one job, so a fetch of
/// many partitions' ranges costs one hand-off, not one per partition.
pub async fn write_fetch<W: AsyncWrite + Unpin>(
    writer: &mut W,
    socket: RawFd,
    parts: Vec<FetchPart>,
) -> std::io::Result<()> {
    let mut run: Vec<PoolPart> = Vec::new();
    for part in parts {
        match part {
            FetchPart::Bytes(bytes) => run.push(PoolPart::Bytes(Bytes::from(bytes))),
            FetchPart::Records(Records::Owned(bytes)) => run.push(PoolPart::Bytes(bytes)),
            FetchPart::Records(Records::File(range)) => run.push(PoolPart::File(range)),
            FetchPart::Records(Records::Local(pieces)) => {
                write_run(writer, socket, std::mem::take(&mut run)).await?;
                for piece in pieces {
                    writer.write_all(&piece).await?;
                }
            }
        }
    }
    write_run(writer, socket, run).await
}

/// A piece of a Fetch frame that a pool thread can send: it owns its bytes
/// or shares its descriptor.
#[derive(Debug)]
enum PoolPart {
    Bytes(Bytes),
    File(FileRange),
}

impl PoolPart {
    fn len(&self) -> u64 {
        match self {
            PoolPart::Bytes(bytes) => bytes.len() as u64,
            PoolPart::File(range) => range.len,
        }
    }
}

/// Writes `run` in order: through `writer` when it holds only bytes, else
/// (after flushing `writer`) on the blocking pool.
async fn write_run<W: AsyncWrite + Unpin>(
    writer: &mut W,
    socket: RawFd,
    run: Vec<PoolPart>,
) -> std::io::Result<()> {
    if !run.iter().any(|part| matches!(part, PoolPart::File(_))) {
        for part in run {
            if let PoolPart::Bytes(bytes) = part {
                writer.write_all(&bytes).await?;
            }
        }
        return Ok(());
    }
    writer.flush().await?;
    send_on_pool(socket, run).await
}

/// How long one pool job waits for a full socket before it hands the pool
/// thread back (other connections' file reads queue behind it).
const SENDFILE_WAIT_SLICE_MS: i32 = 100;

/// How long a peer may take no bytes at all before the send fails.
const SENDFILE_STALL_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// Where a send of a run of parts has got to: the part, and the bytes of it
/// already sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cursor {
    part: usize,
    sent: u64,
}

/// Sends `parts` to the socket on glommio's blocking pool (bytes with
/// send(2), file ranges with sendfile(2)). The socket is duplicated for the
/// pool thread and the parts hold their files (shared), so nothing it uses can
/// be closed under it. A peer that stops reading holds a pool thread for at
/// most one slice at a time.
async fn send_on_pool(socket: RawFd, parts: Vec<PoolPart>) -> std::io::Result<()> {
    // SAFETY: dup of a descriptor this connection owns and keeps open while
    // it awaits this call; the duplicate is owned (and closed) by `socket`.
    let socket = std::sync::Arc::new(unsafe {
        let duplicate = libc::dup(socket);
        if duplicate < 0 {
            return Err(std::io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(duplicate)
    });
    let parts = std::sync::Arc::new(parts);
    let mut cursor = Cursor { part: 0, sent: 0 };
    let mut progressed = std::time::Instant::now();
    while cursor.part < parts.len() {
        let (socket, job_parts) = (socket.clone(), parts.clone());
        let reached = glommio::executor()
            .spawn_blocking(move || send_parts(&socket, &job_parts, cursor))
            .await?;
        if reached != cursor {
            cursor = reached;
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

/// Sends from `cursor` until every part is sent or the socket stays full
/// for a slice; returns where it got to.
fn send_parts(socket: &OwnedFd, parts: &[PoolPart], mut cursor: Cursor) -> std::io::Result<Cursor> {
    while let Some(part) = parts.get(cursor.part) {
        if cursor.sent >= part.len() {
            cursor = Cursor {
                part: cursor.part + 1,
                sent: 0,
            };
            continue;
        }
        let sent = match part {
            PoolPart::Bytes(bytes) => {
                let rest = &bytes[cursor.sent as usize..];
                // SAFETY: a valid descriptor and a live buffer of `rest.len()`
                // bytes; MSG_NOSIGNAL turns a closed peer into EPIPE.
                unsafe {
                    libc::send(
                        socket.as_raw_fd(),
                        rest.as_ptr().cast(),
                        rest.len(),
                        libc::MSG_NOSIGNAL,
                    )
                }
            }
            PoolPart::File(FileRange {
                file,
                position,
                len,
                ..
            }) => {
                let mut offset = (position + cursor.sent) as libc::off_t;
                let remaining = (len - cursor.sent).min(1 << 30) as usize;
                // SAFETY: valid descriptors, and `offset` is a valid
                // out-parameter.
                unsafe {
                    libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut offset, remaining)
                }
            }
        };
        if sent > 0 {
            cursor.sent += sent as u64;
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
    if cursor.part == parts.len() {
        // Whole: only now ask for what consumers read next. The advice
        // allocates pages and queues their reads in this thread (~0.2 ms a
        // 1 MiB range here), so asked before each range's sendfile it
        // delayed the response's last byte by that per partition: a cold
        // 2 GB kcat read spent ~0.3 s of its ~0.5 s gap to a cached one in
        // it. Asked after, it runs while the client reads the response.
        for part in parts {
            if let PoolPart::File(range) = part {
                ask_read_ahead(&range.file, &range.read_ahead);
            }
        }
    }
    Ok(cursor)
}

/// Asks the kernel to start reading `span` of a file (a range just sent and
/// what a consumer reading on asks next) into the page cache. sendfile
/// alone reads a cold file through the default readahead window, each read
/// waited for in turn; this queues it all at once, so the disk works while
/// the consumer parses. Advice, so a failure is ignored.
fn ask_read_ahead(file: &std::fs::File, span: &Range<u64>) {
    if span.is_empty() {
        return;
    }
    let len = (span.end - span.start).min(i64::MAX as u64);
    // SAFETY: a valid descriptor; fadvise reads no user memory.
    let _ = unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            span.start.min(i64::MAX as u64) as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_WILLNEED,
        )
    };
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

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use brook_engine::types::Offset;

    use super::{Cursor, PoolPart, ask_read_ahead, send_parts};
    use crate::storage::{FileRange, read_ahead_span};

    /// Pages of `file`'s first `len` bytes in the page cache (mincore).
    fn resident_pages(file: &std::fs::File, len: usize) -> usize {
        resident_pages_at(file, 0, len)
    }

    /// Pages of `file`'s `len` bytes from `offset` (page-aligned) in the
    /// page cache.
    fn resident_pages_at(file: &std::fs::File, offset: usize, len: usize) -> usize {
        let page = 4096;
        // SAFETY: a shared read-only mapping of `len` bytes of a file at
        // least `offset + len` long, unmapped before returning; `vector`
        // has a byte per page.
        unsafe {
            let mapped = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset as libc::off_t,
            );
            assert_ne!(mapped, libc::MAP_FAILED);
            let mut vector = vec![0u8; len.div_ceil(page)];
            assert_eq!(libc::mincore(mapped, len, vector.as_mut_ptr()), 0);
            libc::munmap(mapped, len);
            vector.iter().filter(|flags| *flags & 1 == 1).count()
        }
    }

    /// A file of `len` bytes out of the page cache.
    fn uncached_file(dir: &std::path::Path, len: usize) -> std::fs::File {
        let path = dir.join("segment");
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(&vec![7u8; len]).unwrap();
        file.sync_all().unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a valid descriptor; drops the file's clean cached pages.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert!(
            resident_pages(&file, len) < len / 4096 / 2,
            "the test needs the file out of the page cache"
        );
        file
    }

    /// Waits (up to 10 s) until `len` bytes of `file` from `offset` are all
    /// in the page cache.
    fn wait_resident(file: &std::fs::File, offset: usize, len: usize) {
        let pages = len / 4096;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while resident_pages_at(file, offset, len) < pages {
            assert!(
                std::time::Instant::now() < deadline,
                "{} of {pages} pages read ahead",
                resident_pages_at(file, offset, len)
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_range_about_to_be_sent_and_the_next_three_are_read_into_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let len = 4 << 20;
        let file = uncached_file(dir.path(), len);
        // A first range of a quarter of the file asks for the whole file.
        let span = read_ahead_span(0, len as u64 / 4, 0);
        assert_eq!(span, 0..len as u64);
        ask_read_ahead(&file, &span);
        wait_resident(&file, 0, len);
    }

    /// The advice is asked once the response's last byte is in the socket,
    /// not before its ranges are sent: asking (page allocation, queued
    /// reads) took ~0.2 ms a range on the response's path.
    #[test]
    fn read_ahead_is_asked_once_the_whole_response_is_sent() {
        let dir = tempfile::tempdir().unwrap();
        let (len, ahead) = (16 << 20, 12 << 20..16 << 20);
        let file = std::sync::Arc::new(uncached_file(dir.path(), len));
        let mut pair = [0; 2];
        // SAFETY: `pair` has room for the two descriptors, owned below.
        let made = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK,
                0,
                pair.as_mut_ptr(),
            )
        };
        assert_eq!(made, 0);
        // SAFETY: both descriptors were just made and are owned once each.
        let (sender, receiver) =
            unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
        let parts = [PoolPart::File(FileRange {
            file: file.clone(),
            position: 0,
            len: 1 << 20,
            read_ahead: ahead.start as u64..ahead.end as u64,
            next_offset: Offset(0),
        })];
        // Nobody reads: the socket fills and the send stops part-way.
        let start = Cursor { part: 0, sent: 0 };
        let stopped = send_parts(&sender, &parts, start).unwrap();
        assert_eq!(stopped.part, 0, "{stopped:?}");
        assert!(stopped.sent > 0 && stopped.sent < 1 << 20, "{stopped:?}");
        assert_eq!(
            resident_pages_at(&file, ahead.start, ahead.len()),
            0,
            "read ahead asked before the response was sent"
        );
        let reader = std::thread::spawn(move || {
            let mut received = 0;
            let mut buffer = vec![0u8; 1 << 16];
            while received < 1 << 20 {
                // SAFETY: a valid descriptor and a buffer of its length.
                let read = unsafe {
                    libc::read(
                        receiver.as_raw_fd(),
                        buffer.as_mut_ptr().cast(),
                        buffer.len(),
                    )
                };
                match read {
                    1.. => received += read as usize,
                    _ => std::thread::sleep(std::time::Duration::from_millis(1)),
                }
            }
        });
        let mut cursor = stopped;
        while cursor.part < parts.len() {
            cursor = send_parts(&sender, &parts, cursor).unwrap();
        }
        reader.join().unwrap();
        wait_resident(&file, ahead.start, ahead.len());
    }
}
