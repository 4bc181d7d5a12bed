//! Loopback TCP: what one connection moves between two glommio executors on
//! this machine, the most a single client connection to Brook could carry.
//!
//! The receiver binds 127.0.0.1 on an ephemeral port (never a fixed one, so
//! concurrent runs and tests cannot collide) and hands the address to the
//! sender, which connects and writes `bytes` in [`TCP_WRITE_BYTES`] writes
//! through glommio's `TcpStream`, as Brook's connections write, then closes.
//! Throughput is taken at the receiver, from the accepted connection to the
//! last byte read; the CPU time of each side says which one set the pace.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use brook_shards::runtime::{executor_builder, guarded};
use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::Placement;
use glommio::net::{TcpListener, TcpStream};

use crate::ceiling::executor_error;
use crate::log::error::{BenchError, io_error};
use crate::log::payload::{PAYLOAD_SEED, Xorshift64, half_random_value};
use crate::log::progress;
use crate::log::report::Throughput;
use crate::log::throughput::thread_cpu_time;

/// Bytes per write (and per read at the receiver).
pub const TCP_WRITE_BYTES: u64 = 1 << 20;
/// How long the receiver waits for the sender to connect, and then for each
/// read: far beyond any healthy loopback, short enough that a sender that
/// died does not hang the benchmark.
const WAIT_MAX: Duration = Duration::from_secs(30);
const LOOPBACK: &str = "127.0.0.1:0";

/// What the loopback stream measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TcpRun {
    /// Bytes received over the time from accept to the last byte.
    pub throughput: Throughput,
    /// CPU time of the sending executor's thread while it sent.
    pub sender_cpu_time: Duration,
    /// CPU time of the receiving executor's thread while it received.
    pub receiver_cpu_time: Duration,
}

/// Sends `bytes` (rounded up to whole writes) from an executor on
/// `sender_cpu` to one on `receiver_cpu` over loopback TCP.
pub fn measure(bytes: u64, sender_cpu: usize, receiver_cpu: usize) -> Result<TcpRun, BenchError> {
    let total = bytes.div_ceil(TCP_WRITE_BYTES) * TCP_WRITE_BYTES;
    progress(format_args!(
        "{total} bytes over loopback TCP, cpu {sender_cpu} to cpu {receiver_cpu}"
    ));
    let (address_out, address_in) = mpsc::sync_channel(1);
    let receiver = executor_builder(Placement::Fixed(receiver_cpu))
        .name("brook-ceiling-receiver")
        .spawn(move || guarded(receive(total, address_out)))
        .map_err(executor_error(receiver_cpu))?;
    // The receiver drops its end without sending only when it failed.
    let Ok(address) = address_in.recv() else {
        return Err(receiver
            .join()
            .map_err(executor_error(receiver_cpu))?
            .err()
            .unwrap_or(BenchError::Executor {
                cpu: receiver_cpu,
                reason: "the receiver stopped before listening".to_owned(),
            }));
    };
    let sender = executor_builder(Placement::Fixed(sender_cpu))
        .name("brook-ceiling-sender")
        .spawn(move || guarded(send(address, total)))
        .map_err(executor_error(sender_cpu));
    // Join the receiver even when the sender failed: it stops by itself
    // (the connection closes, or it gives up waiting after WAIT_MAX).
    let sent = sender.and_then(|sender| sender.join().map_err(executor_error(sender_cpu)));
    let received = receiver.join().map_err(executor_error(receiver_cpu))?;
    let sender_cpu_time = sent??;
    let (throughput, receiver_cpu_time) = received?;
    Ok(TcpRun {
        throughput,
        sender_cpu_time,
        receiver_cpu_time,
    })
}

/// Listens on an ephemeral loopback port, reports it on `address_out`,
/// accepts one connection and reads `total` bytes and then the end of the
/// stream from it.
async fn receive(
    total: u64,
    address_out: mpsc::SyncSender<SocketAddr>,
) -> Result<(Throughput, Duration), BenchError> {
    let listener =
        TcpListener::bind(LOOPBACK).map_err(io_error("listening on", Path::new(LOOPBACK)))?;
    let address = listener
        .local_addr()
        .map_err(io_error("listening on", Path::new(LOOPBACK)))?;
    let at = PathBuf::from(address.to_string());
    // The other end only disappears if `measure` itself has gone.
    let _ = address_out.send(address);
    let stream = glommio::timer::timeout(WAIT_MAX, listener.accept())
        .await
        .map_err(io_error("accepting on", &at))?;
    let started = Instant::now();
    let cpu_started = thread_cpu_time();
    stream
        .set_nodelay(true)
        .map_err(io_error("configuring", &at))?;
    stream
        .set_read_timeout(Some(WAIT_MAX))
        .map_err(io_error("configuring", &at))?;
    let mut stream = stream;
    let mut buffer = vec![0u8; TCP_WRITE_BYTES as usize];
    let mut received = 0u64;
    while received < total {
        let read = stream
            .read(&mut buffer)
            .await
            .map_err(io_error("receiving on", &at))?;
        if read == 0 {
            return Err(stream_error(
                &at,
                format!("closed after {received} of {total} bytes"),
            ));
        }
        received += read as u64;
    }
    let elapsed = started.elapsed();
    let cpu_time = thread_cpu_time().saturating_sub(cpu_started);
    let extra = stream
        .read(&mut buffer)
        .await
        .map_err(io_error("receiving on", &at))?;
    if received != total || extra != 0 {
        let problem = format!("received more than the {total} bytes sent");
        return Err(stream_error(&at, problem));
    }
    Ok((
        Throughput {
            bytes: received,
            elapsed,
        },
        cpu_time,
    ))
}

/// Connects to `address`, writes `total` bytes (a whole number of writes)
/// from one pre-filled buffer, and closes the connection.
async fn send(address: SocketAddr, total: u64) -> Result<Duration, BenchError> {
    let at = PathBuf::from(address.to_string());
    let mut buffer = vec![0u8; TCP_WRITE_BYTES as usize];
    let mut generator = Xorshift64::new(PAYLOAD_SEED);
    for chunk in buffer.chunks_mut(1024) {
        chunk.copy_from_slice(&half_random_value(&mut generator, chunk.len()));
    }
    let mut stream = TcpStream::connect(address)
        .await
        .map_err(io_error("connecting to", &at))?;
    stream
        .set_nodelay(true)
        .map_err(io_error("configuring", &at))?;
    let cpu_started = thread_cpu_time();
    for _ in 0..total / TCP_WRITE_BYTES {
        stream
            .write_all(&buffer)
            .await
            .map_err(io_error("sending to", &at))?;
    }
    stream.close().await.map_err(io_error("closing", &at))?;
    Ok(thread_cpu_time().saturating_sub(cpu_started))
}

fn stream_error(at: &Path, problem: String) -> BenchError {
    let error = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, problem);
    io_error("receiving on", at)(error)
}
