//! What one broker process holds alone for as long as it runs: its data
//! directory and its listen address.
//!
//! The data directory is locked as Kafka locks a log directory: an exclusive
//! `flock` on its `.lock` file, which the kernel releases when the process
//! ends however it ends. The listen address needs its own guard because the
//! shards bind it with SO_REUSEPORT (each shard accepts its own connections)
//! and Linux lets any process of the same user join such a port: a second
//! `brook serve` on the same address would start and take half the new
//! connections. So before binding, a process claims the address with an
//! abstract Unix socket named after it (unique per network namespace, gone
//! with the process) and checks with a plain bind that nothing else listens
//! on the port (another program, or a broker on an overlapping address).
//!
//! The shards' listeners ([`bind_listener`]) also set SO_REUSEADDR, as
//! Kafka's do: the connections a killed broker leaves closing on the port
//! then conflict with neither the check nor the listeners of its restart;
//! only a listening socket does.

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::UnixListener;
use std::path::Path;

use crate::server::ServerError;

/// Kafka's name for a log directory's lock file.
pub const LOCK_FILE: &str = ".lock";

/// Held for the process's life: dropping it releases both.
#[derive(Debug)]
pub struct Exclusive {
    _data_dir: File,
    _address: UnixListener,
}

/// Locks `data_dir` and claims `listen` (a resolved address, not port 0).
pub fn claim(data_dir: &Path, listen: SocketAddr) -> Result<Exclusive, ServerError> {
    let data_dir = lock_data_dir(data_dir)?;
    let address = claim_address(listen)?;
    Ok(Exclusive {
        _data_dir: data_dir,
        _address: address,
    })
}

fn lock_data_dir(data_dir: &Path) -> Result<File, ServerError> {
    let path = data_dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| crate::storage::StorageError::io("opening", &path, source))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(ServerError::DataDirInUse {
            path,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(file)
}

fn claim_address(listen: SocketAddr) -> Result<UnixListener, ServerError> {
    let in_use = |source| ServerError::Listen {
        address: listen,
        source,
    };
    let name = format!("brook-listen-{listen}");
    let claim = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .and_then(|name| UnixListener::bind_addr(&name))
        .map_err(|error| {
            in_use(match error.kind() {
                std::io::ErrorKind::AddrInUse => std::io::Error::new(
                    error.kind(),
                    "Address already in use (by another brook serve)",
                ),
                _ => {
                    std::io::Error::other(format!("claiming the address for this process: {error}"))
                }
            })
        })?;
    drop(std::net::TcpListener::bind(listen).map_err(in_use)?);
    Ok(claim)
}

/// A shard's listening socket on `listen`: SO_REUSEPORT, so that every
/// shard of this process binds the port and the kernel spreads connections
/// over them, and SO_REUSEADDR (see the module).
pub fn bind_listener(listen: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if listen.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&listen.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// Connections the kernel queues for a shard before it accepts them.
const LISTEN_BACKLOG: i32 = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_dir_and_an_address_are_held_by_one_claim_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let first = claim(dir.path(), port).unwrap();
        let again = claim(dir.path(), port).unwrap_err();
        assert!(again.to_string().contains("another process"), "{again}");
        let other_dir = tempfile::tempdir().unwrap();
        let same_address = claim(other_dir.path(), port).unwrap_err();
        assert!(
            same_address.to_string().contains("Address already in use"),
            "{same_address}"
        );
        drop(first);
        drop(claim(dir.path(), port).unwrap());
    }

    /// A restarted broker meets the connections its killed predecessor
    /// left on the port (closing, not listening): it claims the address
    /// and binds again.
    #[test]
    fn connections_left_on_the_port_do_not_stop_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let listener = bind_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(port).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        drop(listener);
        drop(accepted); // the broker's side closes; the client's stays open
        let restarted = claim(dir.path(), port).unwrap();
        drop(bind_listener(port).unwrap());
        drop((restarted, client));
    }

    #[test]
    fn a_port_another_program_listens_on_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let refused = claim(dir.path(), other.local_addr().unwrap()).unwrap_err();
        assert!(matches!(refused, ServerError::Listen { .. }), "{refused}");
    }
}
