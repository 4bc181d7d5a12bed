//! Socket reads shared by the broker and Brook's own client.

use std::os::fd::RawFd;

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

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use futures::io::AsyncWriteExt;
    use glommio::net::{TcpListener, TcpStream};

    use super::{WAIT_WINDOW_BYTES, receive_exact};
    use crate::runtime::block_on;

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
