//! What one broker process holds alone for as long as it runs: its data
//! directory and its listen addresses.
//!
//! The data directory is locked as Kafka locks a log directory: an exclusive
//! `flock` on its `.lock` file, which the kernel releases when the process
//! ends however it ends. The listen addresses need their own guard because
//! the shards bind them with SO_REUSEPORT (each shard accepts its own
//! connections) and Linux lets any process of the same user join such a
//! port: a second `brook serve` on the same address would start and take
//! half the new connections. So before binding, a process claims each
//! address with an abstract Unix socket named after it (unique per network
//! namespace, gone with the process) and checks with a plain bind that
//! nothing else listens on the port (another program, or a broker on an
//! overlapping address).
//!
//! A broker killed with SIGKILL leaves its listening sockets behind for a
//! moment: they are held by in-flight io_uring operations, and the kernel
//! tears a ring down asynchronously, after the process is gone. The claims
//! above tell a restart that no live Brook holds the address; when the
//! plain bind still fails, the restart looks up who holds the port
//! (`/proc/net/tcp*` for the sockets on it, every process's open
//! descriptors for their owners). A socket that no live process holds is
//! such a leftover: the restart waits for it, bounded and logged, as a
//! supervisor's immediate restart needs. A live holder is refused at once.
//!
//! The shards' listeners ([`bind_listener`]) also set SO_REUSEADDR, as
//! Kafka's do: the connections a killed broker leaves closing on the port
//! then conflict with neither the check nor the listeners of its restart;
//! only a listening socket does.

use std::collections::BTreeSet;
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::server::ServerError;

/// Kafka's name for a log directory's lock file.
pub const LOCK_FILE: &str = ".lock";

/// The longest a start waits for a socket that a process no longer alive
/// left on one of its addresses (a killed broker's ring is usually torn
/// down within tens of milliseconds; a loaded machine takes longer).
const LEFT_SOCKET_WAIT_MAX: Duration = Duration::from_secs(15);
/// How often the bind is tried again meanwhile.
const LEFT_SOCKET_RETRY: Duration = Duration::from_millis(20);

/// Held for the process's life: dropping it releases all of it.
#[derive(Debug)]
pub struct Exclusive {
    _log_dirs: Vec<File>,
    _addresses: Vec<UnixListener>,
}

/// Locks every log directory of `log_dirs` (as Kafka locks each) and
/// claims every address of `listen` (resolved addresses, not port 0).
pub fn claim(log_dirs: &[&Path], listen: &[SocketAddr]) -> Result<Exclusive, ServerError> {
    let log_dirs = log_dirs
        .iter()
        .map(|dir| lock_data_dir(dir))
        .collect::<Result<Vec<_>, _>>()?;
    let addresses = listen
        .iter()
        .map(|address| claim_address(*address))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Exclusive {
        _log_dirs: log_dirs,
        _addresses: addresses,
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
                    match live_holder(listen) {
                        Some(holder) => {
                            format!("Address already in use (by another brook serve, {holder})")
                        }
                        None => "Address already in use (by another brook serve)".to_owned(),
                    },
                ),
                _ => {
                    std::io::Error::other(format!("claiming the address for this process: {error}"))
                }
            })
        })?;
    wait_until_bindable(listen, LEFT_SOCKET_WAIT_MAX).map_err(in_use)?;
    Ok(claim)
}

/// Binds `listen` once to see that nothing listens there, waiting up to
/// `wait_max` while what does is a socket no live process holds (see the
/// module).
fn wait_until_bindable(listen: SocketAddr, wait_max: Duration) -> std::io::Result<()> {
    let started = Instant::now();
    let mut waited = false;
    loop {
        let refused = match std::net::TcpListener::bind(listen) {
            Ok(probe) => {
                drop(probe);
                if waited {
                    tracing::info!(address = %listen, waited_ms = started.elapsed().as_millis() as u64, "the socket a stopped process left is gone");
                }
                return Ok(());
            }
            Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => error,
            Err(error) => return Err(error),
        };
        if let Some(holder) = live_holder(listen) {
            return Err(std::io::Error::new(
                refused.kind(),
                format!("{refused}: held by {holder}"),
            ));
        }
        if started.elapsed() >= wait_max {
            return Err(std::io::Error::new(
                refused.kind(),
                format!(
                    "{refused}: by a socket no live process holds, still there after {} ms",
                    started.elapsed().as_millis()
                ),
            ));
        }
        if !waited {
            tracing::warn!(address = %listen, wait_max_ms = wait_max.as_millis() as u64, "a socket left by a process that no longer runs (a killed broker's, torn down after it) holds the address; waiting for the kernel to close it");
            waited = true;
        }
        std::thread::sleep(LEFT_SOCKET_RETRY);
    }
}

/// A live process that holds a socket on `listen`'s port and address, as
/// "pid N (program)"; `None` when every such socket is one no process
/// holds (or `/proc` cannot tell, which is then waited for as such).
/// `error` (binding `listen`) with who holds the address, when it is in
/// use by a live process.
pub(crate) fn explained(listen: SocketAddr, error: std::io::Error) -> std::io::Error {
    if error.kind() != std::io::ErrorKind::AddrInUse {
        return error;
    }
    match live_holder(listen) {
        Some(holder) => std::io::Error::new(error.kind(), format!("{error}: held by {holder}")),
        None => error,
    }
}

fn live_holder(listen: SocketAddr) -> Option<String> {
    let mut inodes = BTreeSet::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        inodes.extend(
            sockets(&text)
                .filter(|(local, _)| overlaps(*local, listen))
                .map(|(_, inode)| inode),
        );
    }
    if inodes.is_empty() {
        return None;
    }
    let processes = std::fs::read_dir("/proc").ok()?;
    for process in processes.flatten() {
        let Some(pid) = process
            .file_name()
            .to_str()
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(descriptors) = std::fs::read_dir(process.path().join("fd")) else {
            continue;
        };
        let holds = descriptors.flatten().any(|descriptor| {
            std::fs::read_link(descriptor.path())
                .ok()
                .and_then(|target| socket_inode(target.to_str()?))
                .is_some_and(|inode| inodes.contains(&inode))
        });
        if holds {
            let program = std::fs::read_to_string(process.path().join("comm")).unwrap_or_default();
            return Some(format!("pid {pid} ({})", program.trim()));
        }
    }
    None
}

/// The sockets of a `/proc/net/tcp` or `/proc/net/tcp6` table with an
/// inode (a socket some file still refers to): local address and inode.
fn sockets(table: &str) -> impl Iterator<Item = (SocketAddr, u64)> + '_ {
    table.lines().skip(1).filter_map(|line| {
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …
        let fields: Vec<&str> = line.split_whitespace().collect();
        let local = proc_address(fields.get(1)?)?;
        let inode = fields.get(9)?.parse::<u64>().ok()?;
        (inode != 0).then_some((local, inode))
    })
}

/// `/proc/net/tcp*`'s `ADDRESS:PORT`: the address as the kernel stores it
/// (network order) printed as native 32-bit words, the port in hex.
fn proc_address(field: &str) -> Option<SocketAddr> {
    let (address, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |index: usize| -> Option<[u8; 4]> {
        let hex = address.get(index * 8..index * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match address.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for index in 0..4 {
                bytes[index * 4..index * 4 + 4].copy_from_slice(&word(index)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Whether a socket bound to `socket` keeps `listen` from being bound: the
/// same port, and the same address or either one every address.
fn overlaps(socket: SocketAddr, listen: SocketAddr) -> bool {
    let canonical = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    socket.port() == listen.port()
        && (socket.ip().is_unspecified()
            || listen.ip().is_unspecified()
            || canonical(socket.ip()) == canonical(listen.ip()))
}

/// The inode of a descriptor's link target `socket:[N]`.
fn socket_inode(target: &str) -> Option<u64> {
    target
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// A socket bound to `listen` (port 0: one the kernel chooses) but not
/// listening, with the options of [`bind_listener`]'s sockets so that they
/// can bind beside it: it holds the port for this process until dropped.
pub fn reserve_port(listen: SocketAddr) -> std::io::Result<socket2::Socket> {
    let socket = reusable_socket(listen)?;
    socket.bind(&listen.into())?;
    Ok(socket)
}

/// A listening socket on `listen` for one of this process's executors:
/// SO_REUSEPORT, so that every shard of this process binds the port and
/// the kernel spreads connections over them, and SO_REUSEADDR (see the
/// module).
pub fn bind_listener(listen: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = reusable_socket(listen)?;
    socket.bind(&listen.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// A TCP socket for `listen`'s family with SO_REUSEADDR and SO_REUSEPORT.
fn reusable_socket(listen: SocketAddr) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if listen.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    Ok(socket)
}

/// Connections the kernel queues for a shard before it accepts them.
const LISTEN_BACKLOG: i32 = 1024;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn free_address() -> SocketAddr {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    }

    #[test]
    fn a_data_dir_and_an_address_are_held_by_one_claim_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let port = free_address();
        let first = claim(&[dir.path()], &[port]).unwrap();
        let again = claim(&[dir.path()], &[port]).unwrap_err();
        assert!(again.to_string().contains("another process"), "{again}");
        let other_dir = tempfile::tempdir().unwrap();
        let same_address = claim(&[other_dir.path()], &[port]).unwrap_err();
        assert!(
            same_address.to_string().contains("Address already in use"),
            "{same_address}"
        );
        drop(first);
        drop(claim(&[dir.path()], &[port]).unwrap());
    }

    /// A port chosen for a listener on port 0 is this process's from the
    /// choice on: the claim's check and the shards' listeners bind beside
    /// the reservation, another socket (bound as a client's outgoing
    /// connection is, without SO_REUSEADDR) cannot take it before the
    /// shards listen, and clients reach them.
    #[test]
    fn a_reserved_port_is_held_for_the_shards_alone() {
        let reservation = reserve_port("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = reservation.local_addr().unwrap().as_socket().unwrap();
        assert_ne!(address.port(), 0);
        let dir = tempfile::tempdir().unwrap();
        let claimed = claim(&[dir.path()], &[address]).unwrap();
        let plain =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let taken = plain.bind(&address.into()).unwrap_err();
        assert_eq!(taken.kind(), std::io::ErrorKind::AddrInUse, "{taken}");
        let shards = [
            bind_listener(address).unwrap(),
            bind_listener(address).unwrap(),
        ];
        drop(reservation);
        let client = std::net::TcpStream::connect(address).unwrap();
        assert_eq!(client.peer_addr().unwrap(), address);
        drop((shards, claimed));
    }

    /// Every address is claimed: a second process that shares only the
    /// second one is refused too.
    #[test]
    fn each_of_several_addresses_is_claimed() {
        let (dir, other_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (clients, controllers) = (free_address(), free_address());
        let first = claim(&[dir.path()], &[clients, controllers]).unwrap();
        let refused = claim(&[other_dir.path()], &[free_address(), controllers]).unwrap_err();
        assert!(
            matches!(&refused, ServerError::Listen { address, .. } if *address == controllers),
            "{refused}"
        );
        drop(first);
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
        let restarted = claim(&[dir.path()], &[port]).unwrap();
        drop(bind_listener(port).unwrap());
        drop((restarted, client));
    }

    /// A live program's socket is refused at once, naming who holds it.
    #[test]
    fn a_port_another_program_listens_on_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let refused = claim(&[dir.path()], &[other.local_addr().unwrap()]).unwrap_err();
        assert!(matches!(refused, ServerError::Listen { .. }), "{refused}");
        let holder = format!("held by pid {}", std::process::id());
        assert!(refused.to_string().contains(&holder), "{refused}");
    }

    /// A listening socket that no process holds a descriptor of (here: in
    /// flight in a Unix socket's queue, as a killed broker's is held by its
    /// ring being torn down) is waited for, and the claim succeeds once the
    /// kernel closes it.
    #[test]
    fn a_listening_socket_no_process_holds_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let left = bind_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = left.local_addr().unwrap();
        let (sender, receiver) = std::os::unix::net::UnixStream::pair().unwrap();
        send_descriptor(&sender, left.into_raw_fd());
        let released = Arc::new(AtomicBool::new(false));
        let releasing = std::thread::spawn({
            let released = released.clone();
            move || {
                std::thread::sleep(Duration::from_millis(300));
                released.store(true, Ordering::SeqCst);
                // The queued descriptor goes with the pair: its socket closes.
                drop((sender, receiver));
            }
        });
        assert!(live_holder(address).is_none());
        let claimed = claim(&[dir.path()], &[address]);
        assert!(
            released.load(Ordering::SeqCst),
            "the claim did not wait for the socket: {claimed:?}"
        );
        drop(claimed.unwrap());
        releasing.join().unwrap();
    }

    /// Puts `fd` in flight on `stream` (SCM_RIGHTS) and closes it here.
    fn send_descriptor(stream: &std::os::unix::net::UnixStream, fd: i32) {
        let mut byte = [0u8; 1];
        let mut io = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<i32>() as u32) } as usize;
        let mut control = vec![0u8; space];
        // SAFETY: a message header over live buffers; the control buffer is
        // CMSG_SPACE for one descriptor, which CMSG_FIRSTHDR/CMSG_DATA fill.
        unsafe {
            let mut message: libc::msghdr = std::mem::zeroed();
            message.msg_iov = &mut io;
            message.msg_iovlen = 1;
            message.msg_control = control.as_mut_ptr().cast();
            message.msg_controllen = space;
            let header = libc::CMSG_FIRSTHDR(&message);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<i32>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<i32>(), fd);
            assert_eq!(libc::sendmsg(stream.as_raw_fd(), &message, 0), 1);
            libc::close(fd);
        }
    }

    #[test]
    fn proc_net_tables_are_read_as_the_kernel_prints_them() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
            0: 0100007F:4C5B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123456 1 0000000000000000 100 0 0 10 0\n   \
            1: 0100007F:4C5B 0100007F:B9F4 06 00000000:00000000 03:00000CA6 00000000     0        0 0 3 0000000000000000\n";
        let found: Vec<_> = sockets(tcp).collect();
        assert_eq!(found, vec![("127.0.0.1:19547".parse().unwrap(), 123456)]);
        let any_v6 = proc_address("00000000000000000000000000000000:2384").unwrap();
        assert_eq!(any_v6, "[::]:9092".parse().unwrap());
        let loopback_v6 = proc_address("00000000000000000000000001000000:2384").unwrap();
        assert_eq!(loopback_v6, "[::1]:9092".parse().unwrap());
        assert_eq!(socket_inode("socket:[123456]"), Some(123456));
        assert_eq!(socket_inode("/dev/null"), None);
    }

    #[test]
    fn a_socket_overlaps_the_same_port_on_its_address_or_every_address() {
        let at = |text: &str| text.parse::<SocketAddr>().unwrap();
        assert!(overlaps(at("127.0.0.1:9092"), at("127.0.0.1:9092")));
        assert!(overlaps(at("0.0.0.0:9092"), at("127.0.0.1:9092")));
        assert!(overlaps(at("127.0.0.1:9092"), at("0.0.0.0:9092")));
        assert!(overlaps(at("[::]:9092"), at("127.0.0.1:9092")));
        assert!(overlaps(
            at("[::ffff:127.0.0.1]:9092"),
            at("127.0.0.1:9092")
        ));
        assert!(!overlaps(at("127.0.0.2:9092"), at("127.0.0.1:9092")));
        assert!(!overlaps(at("127.0.0.1:9093"), at("127.0.0.1:9092")));
    }
}
