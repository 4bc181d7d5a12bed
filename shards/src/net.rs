//! Socket reads shared by the broker and Brook's own client, and the
//! liveness bound of connections between brokers.

use std::os::fd::RawFd;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::io::{AsyncRead, AsyncReadExt};

/// The most bytes zero-filled before one wait for the socket: the rest of a
/// large frame is received into uninitialised memory.
const WAIT_WINDOW_BYTES: usize = 64 << 10;

/// Receives exactly `size` bytes from `socket` (the descriptor behind the
/// unbuffered `reader`). What the socket holds is received straight into
/// the frame's uninitialised memory, with no io_uring round trip; only when
/// it is empty does `reader` wait for more, into a zeroed window of at most
/// [`WAIT_WINDOW_BYTES`]. Zero-filling whole frames before reading them cost
/// 8.6% of the broker's CPU at full produce load, and a consumer receiving
/// 8 MiB Fetch responses spent an eighth of its core in `memset`.
pub async fn receive_exact<R: AsyncRead + Unpin>(
    reader: &mut R,
    socket: RawFd,
    size: usize,
) -> std::io::Result<Bytes> {
    let mut frame = BytesMut::with_capacity(size);
    while frame.len() < size {
        // Never past the frame: the socket's next bytes are the next frame's.
        let wanted = size - frame.len();
        let spare = frame.spare_capacity_mut();
        debug_assert!(spare.len() >= wanted);
        // SAFETY: `spare` is at least `wanted` bytes of writable memory owned
        // by `frame` (its capacity is at least `size`); recv writes at most
        // `wanted` bytes through the pointer and returns how many. The
        // caller reads this socket from one task only, so no other read is
        // in flight on it.
        let received = unsafe {
            libc::recv(
                socket,
                spare.as_mut_ptr().cast(),
                wanted,
                libc::MSG_DONTWAIT,
            )
        };
        if received > 0 {
            // SAFETY: recv initialised `received` (≤ `wanted`) bytes after
            // the old length.
            unsafe { frame.set_len(frame.len() + received as usize) };
            continue;
        }
        if received == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let error = std::io::Error::last_os_error();
        match error.kind() {
            std::io::ErrorKind::Interrupted => continue,
            std::io::ErrorKind::WouldBlock => {}
            _ => return Err(error),
        }
        let filled = frame.len();
        frame.resize(filled + (size - filled).min(WAIT_WINDOW_BYTES), 0);
        let waited = reader.read(&mut frame[filled..]).await?;
        if waited == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        frame.truncate(filled + waited);
    }
    Ok(frame.freeze())
}

/// How long a connection between brokers (quorum, broker-to-controller,
/// replica fetch) may go without its peer's kernel acknowledging anything
/// before it is given up and a new one made. After a network partition
/// heals, a connection waiting on TCP's retransmission backoff (seconds,
/// then minutes) kept nodes out of the quorum or a follower's fetch idle for
/// 10-37 s; a peer on a LAN acknowledges in well under a millisecond, and
/// TCP retransmits several times (from 200 ms) within this bound.
pub const PEER_LIVENESS_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a connection to another broker may take to set up (a SYN lost
/// in a partition is retransmitted only after 1, 3, 7 … s: a fresh attempt
/// after a heal is quicker than waiting for it).
pub const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Idle time before a keepalive probe, and between probes.
const KEEPALIVE_INTERVAL_SECONDS: i32 = 1;

/// Bounds how long `socket` stays open while its peer acknowledges nothing
/// to `limit` (at least a second): `TCP_USER_TIMEOUT` for data sent and not
/// acknowledged, and keepalive probes every second while the connection is
/// idle (a side waiting for an answer sends nothing, so only a probe finds
/// that its peer is gone). Reads and writes then fail, and the caller
/// reconnects.
pub fn bound_liveness(socket: RawFd, limit: Duration) -> std::io::Result<()> {
    let limit_ms = limit.as_millis().clamp(1_000, i32::MAX as u128) as i32;
    let probes = (limit_ms / 1_000 / KEEPALIVE_INTERVAL_SECONDS).max(1);
    let options = [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (
            libc::IPPROTO_TCP,
            libc::TCP_KEEPIDLE,
            KEEPALIVE_INTERVAL_SECONDS,
        ),
        (
            libc::IPPROTO_TCP,
            libc::TCP_KEEPINTVL,
            KEEPALIVE_INTERVAL_SECONDS,
        ),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, probes),
        (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, limit_ms),
    ];
    for (level, name, value) in options {
        set_option(socket, level, name, value)?;
    }
    Ok(())
}

/// Sets `socket`'s kernel buffers as `socket.send.buffer.bytes` and
/// `socket.receive.buffer.bytes` say (Kafka sets them on every connection it
/// accepts); `None` leaves the kernel's autotuning.
pub fn set_buffer_sizes(
    socket: RawFd,
    send: Option<u32>,
    receive: Option<u32>,
) -> std::io::Result<()> {
    let sizes = [(libc::SO_SNDBUF, send), (libc::SO_RCVBUF, receive)];
    for (name, bytes) in sizes {
        if let Some(bytes) = bytes {
            let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
            set_option(socket, libc::SOL_SOCKET, name, bytes)?;
        }
    }
    Ok(())
}

/// One integer socket option.
fn set_option(socket: RawFd, level: i32, name: i32, value: i32) -> std::io::Result<()> {
    // SAFETY: setsockopt with a valid pointer to an int of its size; an
    // invalid descriptor is an error, not undefined behaviour.
    let set = unsafe {
        libc::setsockopt(
            socket,
            level,
            name,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    match set {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use futures::io::AsyncWriteExt;
    use glommio::net::{TcpListener, TcpStream};

    use super::{WAIT_WINDOW_BYTES, receive_exact};
    use crate::runtime::block_on;

    /// The options are on the socket as set: a probe each second while
    /// idle, as many as the bound has seconds, and the bound itself.
    #[test]
    fn a_peer_connection_is_bounded_as_asked() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let socket = stream.as_raw_fd();
        super::bound_liveness(socket, Duration::from_millis(3_000)).unwrap();
        let get = |level, name| {
            let mut value = 0i32;
            let mut length = std::mem::size_of::<i32>() as libc::socklen_t;
            // SAFETY: getsockopt into an int of the length given.
            let got = unsafe {
                libc::getsockopt(
                    socket,
                    level,
                    name,
                    std::ptr::from_mut(&mut value).cast(),
                    &mut length,
                )
            };
            assert_eq!(got, 0);
            value
        };
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT), 3_000);
        assert_ne!(get(libc::SOL_SOCKET, libc::SO_KEEPALIVE), 0);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), 1);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL), 1);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPCNT), 3);
    }

    /// A frame several wait windows long, written in pieces with pauses
    /// (so the reader both drains the socket and waits on it), comes out
    /// whole, without a byte of the frame after it; a peer that closes
    /// mid-frame is an error, not a short frame.
    #[test]
    fn frames_arriving_in_pieces_come_out_whole_and_alone() {
        block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let address = listener.local_addr().unwrap();
            let first: Vec<u8> = (0..5 * WAIT_WINDOW_BYTES as u32)
                .map(|index| (index % 251) as u8)
                .collect();
            let second = vec![9u8; 10];
            let sent = (first.clone(), second.clone());
            let writer = glommio::spawn_local(async move {
                let mut stream = TcpStream::connect(address).await.unwrap();
                for piece in sent.0.chunks(70_000) {
                    stream.write_all(piece).await.unwrap();
                    glommio::timer::sleep(Duration::from_millis(5)).await;
                }
                stream.write_all(&sent.1).await.unwrap();
                stream.write_all(&[1, 2]).await.unwrap();
                stream.close().await.unwrap();
            });
            let mut stream = listener.accept().await.unwrap();
            let socket = stream.as_raw_fd();
            let got = receive_exact(&mut stream, socket, first.len())
                .await
                .unwrap();
            assert!(got == first, "the first frame");
            let got = receive_exact(&mut stream, socket, second.len())
                .await
                .unwrap();
            assert_eq!(got, second);
            writer.await;
            let error = receive_exact(&mut stream, socket, 3).await.unwrap_err();
            assert_eq!(error.kind(), std::io::ErrorKind::UnexpectedEof);
        });
    }
}
