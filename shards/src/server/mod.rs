//! `brook serve`: one broker, one pinned glommio executor (shard) per core.
//!
//! Start-up: read `meta.properties` (cluster id) and the metadata image,
//! build the shard mesh, start the shards (each opens, and after a crash
//! recovers, the logs it owns, then binds the shared port with
//! SO_REUSEPORT), and report the address once every shard serves. SIGTERM or
//! SIGINT stops every shard, which closes its logs cleanly.

mod connection;
mod context;
mod controller;
mod coordinator_host;
mod error_counts;
pub(crate) mod exclusive;
mod groups;
mod handlers;
mod mesh;
mod meta_properties;
pub mod metrics;
mod peers;
mod producer_ids;
pub mod quorum;
mod replication;
mod response;
mod shard;
pub mod signals;
mod transactions;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use brook_engine::cluster::broker_config::BrokerConfig;
use brook_engine::cluster::image::ShardId;
use brook_engine::cluster::node_config::ClusterSettings;
use brook_engine::types::BrokerId;
use glommio::{Placement, PoolPlacement};
use thiserror::Error;

pub use context::{ClientEndpoint, ServerContext};

use crate::runtime::{executor_builder, guarded};

/// Blocking-pool threads per shard (they mostly wait on sockets and disks).
const SENDFILE_THREADS: usize = 4;

/// How to run the broker (the `brook serve` flags).
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The inter-broker client listener's name and address.
    pub listener_name: String,
    pub listen: SocketAddr,
    /// Host put in Metadata responses (default: the listen host; this
    /// machine's name when that is every address, as Kafka advertises).
    pub advertised_host: Option<String>,
    /// Port put in Metadata responses (default: the listen port).
    pub advertised_port: Option<u16>,
    /// Further client listeners (`listeners` naming several).
    pub others: Vec<OtherListener>,
    /// The log directories (`log.dirs`; at least one): partitions are
    /// spread over them, and the first also holds the broker's metadata.
    pub log_dirs: Vec<PathBuf>,
    /// Shards to run (default: every available core).
    pub cores: Option<usize>,
    pub config: BrokerConfig,
    /// Where to serve Prometheus metrics (port 0: a free one); `None`: off.
    pub metrics_listen: Option<SocketAddr>,
}

/// A further client listener to serve.
#[derive(Clone, Debug)]
pub struct OtherListener {
    pub name: String,
    pub listen: SocketAddr,
    pub advertised_host: Option<String>,
    pub advertised_port: Option<u16>,
}

/// What a started broker reports.
#[derive(Clone, Copy, Debug)]
pub struct Ready {
    pub listen: SocketAddr,
    pub shards: u16,
    /// The metrics listener's address, if it serves one.
    pub metrics: Option<SocketAddr>,
}

#[derive(Debug, Error)]
pub enum ServerError {
    #[error("{0}")]
    Storage(#[from] crate::storage::StorageError),
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "cannot serve metrics on {address} (--metrics-listen ADDRESS moves them, \
         --metrics-listen none turns them off): {source}"
    )]
    MetricsListen {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot lock {}: another process is using this directory ({source})", path.display())]
    DataDirInUse {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start shard {shard}: {reason}")]
    Shard { shard: u16, reason: String },
}

/// Runs the broker until SIGTERM/SIGINT. `on_ready` is called with the
/// bound address once every shard serves.
pub fn run(options: ServerOptions, on_ready: impl FnOnce(Ready)) -> Result<(), ServerError> {
    signals::block_termination_signals();
    raise_open_file_limit();
    let data_dir = options
        .log_dirs
        .first()
        .cloned()
        .unwrap_or_else(|| PathBuf::from(brook_engine::cluster::endpoints::DATA_DIR_DEFAULT));
    let log_dirs: Vec<PathBuf> = match options.log_dirs.is_empty() {
        true => vec![data_dir.clone()],
        false => options.log_dirs.clone(),
    };
    let created = CreatedDirs::create(&log_dirs)?;
    // Held until every shard listens: see `PortReservation`.
    let mut reservations = Vec::new();
    let listen = resolve_port(options.listen, &mut reservations)?;
    let others = options
        .others
        .iter()
        .map(|other| resolve_port(other.listen, &mut reservations))
        .collect::<Result<Vec<_>, _>>()?;
    let mut addresses = vec![listen];
    addresses.extend(&others);
    // A node without a configured quorum is the one voter of its own, on
    // a loopback port the kernel chooses.
    let controller = match &options.config.cluster {
        Some(settings) => controller_address(settings)?,
        None => Some(resolve_port(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            &mut reservations,
        )?),
    };
    addresses.extend(controller);
    // Held until the process exits; another process then starts.
    let dir_paths: Vec<&std::path::Path> = log_dirs.iter().map(PathBuf::as_path).collect();
    let _exclusive = exclusive::claim(&dir_paths, &addresses)?;
    let cluster_id = meta_properties::load_or_create_cluster_id(
        &data_dir,
        options.config.broker_id,
        options
            .config
            .cluster
            .as_ref()
            .map(|cluster| cluster.cluster_id.as_str()),
    )?;
    // Every log directory belongs to this broker of this cluster.
    for dir in &log_dirs[1..] {
        meta_properties::load_or_create_cluster_id(
            dir,
            options.config.broker_id,
            Some(&cluster_id),
        )?;
    }
    let cluster = match options.config.cluster.clone() {
        Some(settings) => settings,
        None => ClusterSettings::alone(
            &options.config.given,
            BrokerId(options.config.broker_id),
            controller.map_or(0, |address| address.port()),
            &cluster_id,
        )
        .map_err(|error| ServerError::Shard {
            shard: 0,
            reason: error.to_string(),
        })?,
    };
    quorum::migrate::one_node_directory(&data_dir, &cluster)?;
    let dirs = Arc::new(crate::storage::LogDirs::scan(&log_dirs)?);
    // Every directory is this broker's: a later failure leaves them.
    created.keep();
    let metrics_listener = match options.metrics_listen {
        Some(address) => {
            Some(
                metrics::bind(address).map_err(|source| ServerError::MetricsListen {
                    address,
                    source: exclusive::explained(address, source),
                })?,
            )
        }
        None => None,
    };
    let metrics_address = metrics_listener
        .as_ref()
        .and_then(|listener| listener.local_addr().ok());
    let broker_metrics = Arc::new(metrics::BrokerMetrics::new(options.config.broker_id));
    let cpus = allowed_cpus();
    let shards = options
        .cores
        .unwrap_or(cpus.len())
        .clamp(1, u16::MAX as usize) as u16;
    let mut image = quorum::local_topics::load_image(&data_dir)?;
    let moved = image.reassign_beyond(shards);
    if moved > 0 {
        tracing::warn!(
            partitions = moved,
            shards,
            "partitions of shards not running now move to running ones"
        );
    }
    let image = Arc::new(image);
    let (senders, receivers) = mesh::channels(shards);
    let first = OtherListener {
        name: options.listener_name.clone(),
        listen,
        advertised_host: options.advertised_host.clone(),
        advertised_port: options.advertised_port,
    };
    let listeners: Vec<ClientEndpoint> = std::iter::once(&first)
        .chain(&options.others)
        .zip(std::iter::once(listen).chain(others))
        .map(|(listener, listen)| ClientEndpoint {
            name: listener.name.clone(),
            listen,
            advertised_host: listener.advertised_host.clone().unwrap_or_else(|| {
                if listen.ip().is_unspecified() {
                    machine_name().unwrap_or_else(|| "localhost".to_owned())
                } else {
                    listen.ip().to_string()
                }
            }),
            advertised_port: listener.advertised_port.unwrap_or(listen.port()),
        })
        .collect();
    let (unfenced, first_unfenced) = flume::bounded(1);
    let context = Arc::new(ServerContext {
        broker_id: options.config.broker_id,
        cluster_id,
        listen,
        advertised_host: listeners[0].advertised_host.clone(),
        advertised_port: listeners[0].advertised_port,
        listeners,
        data_dir,
        log_dirs: dirs,
        config: options.config.clone(),
        cluster,
        shards,
        mesh: senders,
        metrics: broker_metrics.clone(),
        unfenced,
        was_unfenced: std::sync::atomic::AtomicBool::new(false),
    });
    for unknown in &context.config.unknown {
        tracing::warn!(setting = %unknown, "ignoring unknown config");
    }
    // Before the shards: its listener is bound here, so a port taken fails
    // the start, and shard 0's broker side finds its own voter listening.
    // A broker-only node without a controller listener has none.
    let controller = Some(context.cluster.clone())
        .filter(|settings| {
            settings.roles.is_controller()
                || settings.listener(&settings.controller_listener).is_some()
        })
        .map(|settings| quorum::ControllerThread::start(context.clone(), settings))
        .transpose()?;
    let (ready_sender, ready) = flume::unbounded();
    let mut executors = Vec::new();
    for (index, jobs) in receivers.into_iter().enumerate() {
        let (context, image, ready) = (context.clone(), image.clone(), ready_sender.clone());
        let shard = ShardId(index as u16);
        // File sends wait on the blocking pool for slow peers; several
        // threads keep one slow consumer from delaying the others.
        let builder = executor_builder(Placement::Fixed(cpus[index % cpus.len()]))
            .blocking_thread_pool_placement(PoolPlacement::Unbound(SENDFILE_THREADS))
            .name(&format!("brook-shard-{index}"));
        let spawned =
            builder.spawn(move || guarded(shard::run_shard(shard, context, jobs, image, ready)));
        executors.push(spawned.map_err(|error| ServerError::Shard {
            shard: index as u16,
            reason: error.to_string(),
        })?);
    }
    drop(ready_sender);
    let mut started = 0;
    let mut failure = None;
    while started < shards {
        match ready.recv() {
            Ok(Ok(_)) => started += 1,
            Ok(Err(reason)) => {
                failure.get_or_insert(reason);
                started += 1;
            }
            Err(_) => {
                failure.get_or_insert_with(|| "a shard stopped before it served".to_owned());
                break;
            }
        }
    }
    if let Some(reason) = failure {
        stop_all(&context);
        executors
            .into_iter()
            .for_each(|executor| drop(executor.join()));
        drop(controller);
        return Err(ServerError::Shard { shard: 0, reason });
    }
    // Every shard listens on the ports chosen for it now.
    drop(reservations);
    // A node that is its own quorum serves once it is unfenced, as Kafka's
    // broker opens its listeners only then: a client that connects as soon
    // as it is told the broker is up (a test, a script after a restart) is
    // not refused a topic for want of a live broker. A node of a larger
    // quorum reports ready at once: its quorum may need nodes not started.
    if context.cluster.is_alone() && first_unfenced.recv_timeout(UNFENCED_WAIT_MAX).is_err() {
        tracing::warn!(
            waited_ms = UNFENCED_WAIT_MAX.as_millis() as u64,
            "this broker is not unfenced yet; serving anyway"
        );
    }
    if let Some(listener) = metrics_listener {
        metrics::serve(listener, broker_metrics);
    }
    on_ready(Ready {
        listen,
        shards,
        metrics: metrics_address,
    });
    let stopper = context.clone();
    std::thread::spawn(move || {
        let signal = signals::wait_for_termination();
        tracing::info!(signal, "stopping");
        // A second signal (Ctrl-C again, a supervisor's second SIGTERM)
        // stops at once: a controlled shutdown that no quorum can grant
        // waits its whole bound otherwise.
        let impatient = stopper.clone();
        std::thread::spawn(move || {
            let signal = signals::wait_for_termination();
            tracing::warn!(
                signal,
                "stopping at once, without waiting for the controlled shutdown"
            );
            stop_all(&impatient);
        });
        shut_down_in_turn(&stopper);
        stop_all(&stopper);
    });
    for executor in executors {
        let _ = executor.join();
    }
    // The voter stops last: while the shards close their logs, after this
    // node's controlled shutdown, it still counts for the quorum.
    drop(controller);
    Ok(())
}

/// How long a node alone in its quorum waits to be unfenced before it
/// reports ready anyway (it is normally a few milliseconds).
const UNFENCED_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// This machine's host name (what Kafka advertises for a listener on every
/// address), if it has one.
fn machine_name() -> Option<String> {
    let mut name = [0u8; 256];
    // SAFETY: a buffer of the length given; the kernel writes at most that.
    let result = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) };
    if result != 0 {
        return None;
    }
    let length = name.iter().position(|byte| *byte == 0)?;
    std::str::from_utf8(&name[..length])
        .ok()
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
}

/// The log directories a start created: removed again if the start is
/// refused before they are known to be this broker's (locked, its
/// `meta.properties`, listed), so a refused start leaves nothing behind.
struct CreatedDirs(Vec<PathBuf>);

impl CreatedDirs {
    /// Creates the directories of `dirs` that do not exist yet.
    fn create(dirs: &[PathBuf]) -> Result<CreatedDirs, ServerError> {
        let mut created = CreatedDirs(Vec::new());
        for dir in dirs {
            // The outermost directory this creates, removed whole.
            let mut outermost = None;
            let mut ancestor = dir.as_path();
            while !ancestor.as_os_str().is_empty() && !ancestor.exists() {
                outermost = Some(ancestor.to_owned());
                ancestor = ancestor.parent().unwrap_or(std::path::Path::new(""));
            }
            std::fs::create_dir_all(dir)
                .map_err(|source| crate::storage::StorageError::io("creating", dir, source))?;
            created.0.extend(outermost);
        }
        Ok(created)
    }

    fn keep(mut self) {
        self.0.clear();
    }
}

impl Drop for CreatedDirs {
    fn drop(&mut self) {
        for made in self.0.iter().rev() {
            let _ = std::fs::remove_dir_all(made);
        }
    }
}

/// A port the kernel chose for a listener asked for on port 0, held from
/// the choice until every shard listens on it. Released at once, it could
/// be taken before the shards bind it: the kernel hands the same free
/// ports to any process's outgoing connections and `bind(0)` (a test's
/// broker failed to start so). The holder is bound but not listening, with
/// SO_REUSEADDR and SO_REUSEPORT as the shards' listeners: they join it,
/// [`exclusive::claim`]'s check binds beside it, and no connection reaches
/// it. Meanwhile the kernel chooses the port for no outgoing connection
/// nor `bind(0)`, and a socket bound without SO_REUSEADDR cannot take it.
struct PortReservation(#[allow(dead_code)] socket2::Socket);

/// `listen`, with the port the kernel chooses (held in `reservations`)
/// when it asks for port 0, so every shard binds the same port.
fn resolve_port(
    listen: SocketAddr,
    reservations: &mut Vec<PortReservation>,
) -> Result<SocketAddr, ServerError> {
    if listen.port() != 0 {
        return Ok(listen);
    }
    let failed = |source| ServerError::Listen {
        address: listen,
        source,
    };
    let holder = exclusive::reserve_port(listen).map_err(failed)?;
    let chosen = holder
        .local_addr()
        .and_then(|address| {
            address
                .as_socket()
                .ok_or_else(|| std::io::Error::other("not an IP socket"))
        })
        .map_err(failed)?;
    reservations.push(PortReservation(holder));
    Ok(chosen)
}

/// Where this node's controller listener binds (an empty host: every
/// address), if it has one.
fn controller_address(settings: &ClusterSettings) -> Result<Option<SocketAddr>, ServerError> {
    let Some(listener) = settings.listener(&settings.controller_listener) else {
        return Ok(None);
    };
    quorum::listener_address(listener).map(Some)
}

/// A cluster node's controlled shutdown (on shard 0), waited for here.
fn shut_down_in_turn(context: &ServerContext) {
    let (done, finished) = flume::bounded::<()>(1);
    let job: mesh::Job = Box::new(move |shard| {
        Box::pin(async move {
            quorum::shut_down_in_turn(shard).await;
            let _ = done.send(());
        })
    });
    if let Some(first) = context.mesh.first() {
        if first.send(job).is_ok() {
            // The shutdown bounds itself; this only guards a lost shard.
            let _ = finished.recv_timeout(std::time::Duration::from_secs(60));
        }
    }
}

fn stop_all(context: &ServerContext) {
    for sender in &context.mesh {
        let job: mesh::Job = Box::new(|shard| Box::pin(async move { shard.stop() }));
        let _ = sender.send(job);
    }
}

/// The CPUs this process may run on (its affinity mask, as `taskset` sets
/// it), in order; shards are pinned to them round-robin.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, and the call writes at
    // most its size.
    let allowed = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            None
        } else {
            Some(
                (0..libc::CPU_SETSIZE as usize)
                    .filter(|cpu| libc::CPU_ISSET(*cpu, &set))
                    .collect::<Vec<_>>(),
            )
        }
    };
    allowed.filter(|cpus| !cpus.is_empty()).unwrap_or_else(|| {
        let count = std::thread::available_parallelism().map_or(1, |count| count.get());
        (0..count).collect()
    })
}

/// Open files the broker asks for: every partition holds three (its active
/// segment's log, offset index and time index), so the usual default of a
/// few thousand would cap a broker at about a thousand partitions.
const OPEN_FILES_WANTED: u64 = 1 << 20;

/// Raises the open-file limit as far as the process may (the soft limit to
/// the hard one; the hard one too where the process is privileged), as
/// Seastar-based brokers do at start, and logs what it got.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit out-parameter.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    let wanted = OPEN_FILES_WANTED.max(limit.rlim_cur);
    let kernel_max = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(wanted);
    let attempts = [
        libc::rlimit {
            rlim_cur: wanted.min(kernel_max),
            rlim_max: limit.rlim_max.max(wanted.min(kernel_max)),
        },
        libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        },
    ];
    for attempt in attempts {
        if attempt.rlim_cur <= limit.rlim_cur {
            continue;
        }
        // SAFETY: a valid rlimit; failure leaves the limit as it was.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &attempt) } == 0 {
            tracing::info!(open_files = attempt.rlim_cur, "raised the open-file limit");
            return;
        }
    }
    tracing::info!(open_files = limit.rlim_cur, "open-file limit");
}
