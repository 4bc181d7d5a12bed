//! One shard of the broker: an executor pinned to a core that owns a
//! disjoint set of partitions (their logs), accepts connections on the shared
//! port, and runs jobs other shards send it over the mesh.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use brook_engine::cluster::broker_config::BrokerConfig;
use brook_engine::cluster::broker_dynamic::effective;
use brook_engine::cluster::image::{LocalImage, ShardId};
use brook_engine::cluster::records::PartitionRegistration;
use brook_engine::cluster::topic_config;
use brook_engine::log::config::LogConfig;
use brook_engine::protocol::fetch_session::FetchSessionCache;
use brook_engine::types::{LeaderEpoch, TopicPartition};
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use glommio::net::TcpListener;
use glommio::sync::Semaphore;

use crate::server::connection::serve_connection;
use crate::server::context::ServerContext;
use crate::server::groups::{GroupHost, run_timers};
use crate::server::handlers::fetch::PreparedReads;
use crate::server::mesh::{MeshReceiver, ShardGone, job_with_reply};
use crate::server::metrics::ShardMetrics;
use crate::server::peers::Peers;
use crate::server::producer_ids::ProducerIds;
use crate::server::quorum::{ClusterView, Forward, ShutDown};
use crate::server::replication::ReplicaHost;
use crate::server::transactions::{self, TxnHost};
use crate::storage::{
    CLEANER_MAP_BYTES_MIN, CleanerSchedule, MaintenanceSchedule, PartitionLog, StorageError, Store,
    StoreOptions,
};

/// Partition logs a shard opens (and recovers) at once.
const PARTITION_OPENS_IN_FLIGHT_MAX: usize = 8;

/// The leader epoch of every partition when its registration is new.
pub const FIRST_LEADER_EPOCH: LeaderEpoch = LeaderEpoch(0);

/// Per-shard state. Lives on its shard; shared with its tasks by `Rc`.
pub struct Shard {
    pub id: ShardId,
    pub context: Arc<ServerContext>,
    pub store: Rc<Store>,
    /// The group coordinators of this shard's `__consumer_offsets` partitions.
    pub groups: GroupHost,
    /// The transaction coordinators of this shard's `__transaction_state`
    /// partitions.
    pub transactions: TxnHost,
    /// The replication state of this shard's partitions (cluster mode).
    pub replication: ReplicaHost,
    /// Hands out producer ids; used on the controller shard only.
    pub producer_ids: ProducerIds,
    /// Connections to the other brokers (cluster mode).
    pub peers: Peers,
    local_image: RefCell<Arc<LocalImage>>,
    /// The settings this broker runs with: its static ones
    /// (`context.config`) under the image's dynamic broker configs.
    config: RefCell<Arc<BrokerConfig>>,
    /// The cluster as the metadata log says (cluster mode only).
    cluster_view: RefCell<Option<Arc<ClusterView>>>,
    /// Admin requests for the active controller (shard 0, cluster mode).
    pub forward: RefCell<Option<Forward>>,
    /// The fetch sessions (KIP-227) of this shard's connections.
    pub fetch_sessions: RefCell<FetchSessionCache>,
    /// Consumer reads of other shards' partitions prepared one fetch ahead
    /// for this shard's connections.
    pub prepared_reads: RefCell<PreparedReads>,
    /// This shard's children of the hot-path metrics.
    pub metrics: ShardMetrics,
    /// Serialises metadata changes (used on the controller shard).
    pub controller_lock: Semaphore,
    /// A controlled shutdown's progress (shard 0, cluster mode).
    pub shut_down: Cell<ShutDown>,
    stopping: Cell<bool>,
    stop_bell: Semaphore,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Shard({})", self.id.0)
    }
}

impl Shard {
    /// This broker's local image: every topic as applied here, and the
    /// shard of each partition held here (see [`LocalImage`]). The cluster's
    /// own image, with every registration, is [`Shard::cluster_view`]'s.
    pub fn local_image(&self) -> Arc<LocalImage> {
        self.local_image.borrow().clone()
    }

    pub fn set_local_image(&self, image: Arc<LocalImage>) {
        let old = self.local_image.replace(image.clone());
        if old.broker_configs != image.broker_configs {
            let config = effective(&self.context.config, &image.broker_configs);
            self.store
                .set_cleaner_schedule(cleaner_schedule(&config, self.context.shards));
            *self.config.borrow_mut() = Arc::new(config);
        }
    }

    /// The settings this broker runs with now: the static ones under the
    /// dynamic broker configs (KIP-226) in force.
    pub fn config(&self) -> Arc<BrokerConfig> {
        self.config.borrow().clone()
    }

    pub fn cluster_view(&self) -> Option<Arc<ClusterView>> {
        self.cluster_view.borrow().clone()
    }

    /// The new view, and what it changes for this shard's replicas.
    pub fn set_cluster_view(self: &Rc<Self>, view: Arc<ClusterView>) {
        *self.cluster_view.borrow_mut() = Some(view.clone());
        ReplicaHost::follow_view(self, &view);
    }

    /// `f` of `topic`'s `partition` as the cluster image registers it;
    /// `None` before the image has it. (A closure, not a copy: fetches ask
    /// this of every partition.)
    pub fn with_registration<T>(
        &self,
        topic: &str,
        partition: brook_engine::types::PartitionId,
        f: impl FnOnce(&PartitionRegistration) -> T,
    ) -> Option<T> {
        let view = self.cluster_view.borrow();
        let registered = view.as_ref()?.image.topic_by_name(topic)?;
        registered
            .partitions
            .get(usize::try_from(partition.0).ok()?)
            .map(f)
    }

    /// Whether this broker leads `partition` of `topic`, as the image says.
    pub fn leads(&self, topic: &str, partition: brook_engine::types::PartitionId) -> bool {
        self.with_registration(topic, partition, |registration| {
            registration.leader.0 == self.context.broker_id
        })
        .unwrap_or(false)
    }

    /// The leader epoch `topic`'s `partition` is served at: its
    /// registration's ([`FIRST_LEADER_EPOCH`] before the image has it).
    pub fn leader_epoch(
        &self,
        topic: &str,
        partition: brook_engine::types::PartitionId,
    ) -> LeaderEpoch {
        self.with_registration(topic, partition, |registration| registration.leader_epoch)
            .unwrap_or(FIRST_LEADER_EPOCH)
    }

    pub fn leader_epoch_of(&self, topic_partition: &TopicPartition) -> LeaderEpoch {
        self.leader_epoch(&topic_partition.topic, topic_partition.partition)
    }

    pub fn log(&self, topic_partition: &TopicPartition) -> Option<PartitionLog> {
        self.store.partition(topic_partition)
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.get()
    }

    /// Runs `job` on `target` (directly when that is this shard) and returns
    /// its result.
    pub async fn on_shard<F, Fut, R>(
        self: &Rc<Self>,
        target: ShardId,
        job: F,
    ) -> Result<R, ShardGone>
    where
        F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        if target == self.id {
            return Ok(job(self.clone()).await);
        }
        self.start_on_shard(target, job).await?.await
    }

    /// Starts `job` on `target` now and gives its result later. Jobs started
    /// one after another begin running in that order on their target (local
    /// tasks and mesh channels are both FIFO): what keeps a connection's
    /// appends to a partition in request order while earlier ones complete.
    pub async fn start_on_shard<F, Fut, R>(
        self: &Rc<Self>,
        target: ShardId,
        job: F,
    ) -> Result<LocalBoxFuture<'static, Result<R, ShardGone>>, ShardGone>
    where
        F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        if target == self.id {
            let task = glommio::spawn_local(job(self.clone()));
            return Ok(async move { Ok(task.await) }.boxed_local());
        }
        let sender = self
            .context
            .mesh
            .get(usize::from(target.0))
            .ok_or(ShardGone(target.0))?;
        let (boxed, reply) = job_with_reply(job);
        sender
            .send_async(boxed)
            .await
            .map_err(|_| ShardGone(target.0))?;
        self.metrics.shard_job_sent();
        Ok(async move { reply.await.map_err(|_| ShardGone(target.0)) }.boxed_local())
    }

    /// The log config of a topic: broker defaults, then its overrides.
    pub fn topic_log_config(&self, topic: &str) -> LogConfig {
        let image = self.local_image();
        let overrides = image
            .topic(topic)
            .map(|topic| topic.configs.clone())
            .unwrap_or_default();
        let defaults = &self.config().log_defaults;
        topic_config::resolve(defaults, &overrides).unwrap_or_else(|_| defaults.clone())
    }

    /// Opens (creating if new) partition logs owned by this shard.
    pub async fn open_partitions(
        &self,
        partitions: Vec<(TopicPartition, LogConfig)>,
    ) -> Result<(), StorageError> {
        use futures::StreamExt;
        // Several at once: recovery waits on reads, which then overlap.
        // Replication makes each a leader or follower at its
        // registration's epoch.
        let mut opens = futures::stream::iter(partitions)
            .map(|(topic_partition, config)| async move {
                self.store
                    .open_partition(&topic_partition, config, now_ms())
                    .await
                    .map(drop)
            })
            .buffer_unordered(PARTITION_OPENS_IN_FLIGHT_MAX);
        while let Some(opened) = opens.next().await {
            opened?;
        }
        Ok(())
    }

    /// Closes and deletes partition logs of deleted topics.
    pub async fn delete_partitions(&self, partitions: Vec<TopicPartition>) {
        for topic_partition in partitions {
            if topic_partition.topic == brook_engine::group::records::OFFSETS_TOPIC_NAME {
                self.groups.unload(topic_partition.partition.0);
            }
            self.metrics.forget_partition(&topic_partition);
            if let Some(log) = self.store.remove_partition(&topic_partition) {
                if let Err(error) = log.delete().await {
                    tracing::error!(partition = %topic_partition, %error, "deleting partition log failed");
                }
            }
        }
    }

    /// Asks this shard to stop accepting and close its logs.
    pub fn stop(&self) {
        self.stopping.set(true);
        self.stop_bell.signal(1);
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// What a shard reports once it serves.
pub type Ready = flume::Sender<Result<ShardId, String>>;

/// Runs shard `id` until it is stopped: opens its logs, binds the listener,
/// serves connections and mesh jobs, then closes its logs cleanly.
pub async fn run_shard(
    id: ShardId,
    context: Arc<ServerContext>,
    jobs: MeshReceiver,
    image: Arc<LocalImage>,
    ready: Ready,
) {
    let shard = match start(id, context, image).await {
        Ok(shard) => shard,
        Err(error) => {
            let _ = ready.send(Err(format!("shard {}: {error}", id.0)));
            return;
        }
    };
    let mut listeners = Vec::with_capacity(shard.context.listeners.len());
    for endpoint in &shard.context.listeners {
        match crate::server::exclusive::bind_listener(endpoint.listen) {
            // SAFETY: the descriptor of a bound, listening socket, given up
            // by the std listener it came in.
            Ok(listener) => {
                listeners.push(unsafe { TcpListener::from_raw_fd(listener.into_raw_fd()) })
            }
            Err(error) => {
                let _ = ready.send(Err(format!(
                    "shard {}: binding {} ({}): {error}",
                    id.0, endpoint.listen, endpoint.name
                )));
                return;
            }
        }
    }
    glommio::spawn_local(run_jobs(shard.clone(), jobs)).detach();
    glommio::spawn_local(run_timers(shard.clone())).detach();
    glommio::spawn_local(transactions::run_timers(shard.clone())).detach();
    glommio::spawn_local(crate::server::metrics::run_state_gauges(shard.clone())).detach();
    if id.0 == 0 {
        crate::server::quorum::start(shard.clone(), shard.context.cluster.clone());
    }
    // Dropped once sent: a shard that dies before it reports then shows as a
    // disconnect instead of leaving start-up waiting.
    let _ = ready.send(Ok(id));
    drop(ready);
    let accepting = listeners
        .iter()
        .enumerate()
        .map(|(index, listener)| accept_until_stopped(&shard, listener, index));
    futures::future::join_all(accepting).await;
    drop(listeners);
    if let Err(error) = shard.store.close().await {
        tracing::error!(shard = id.0, %error, "closing the store failed; the next start will recover");
    }
    tracing::info!(shard = id.0, "shard stopped");
}

/// This shard's share of `max.incremental.fetch.session.cache.slots`.
fn fetch_session_cache(context: &ServerContext, id: ShardId) -> FetchSessionCache {
    let shards = usize::from(context.shards.max(1));
    let slots = context.config.fetch_session_cache_slots.div_ceil(shards);
    FetchSessionCache::new(slots, id.0, context.shards.max(1))
}

async fn start(
    id: ShardId,
    context: Arc<ServerContext>,
    image: Arc<LocalImage>,
) -> Result<Rc<Shard>, StorageError> {
    let store = Rc::new(
        Store::open(StoreOptions {
            dirs: context.log_dirs.clone(),
            shard: id.0,
        })
        .await?,
    );
    let fetch_sessions = RefCell::new(fetch_session_cache(&context, id));
    let peers = Peers::new(context.listen, context.broker_id, id.0);
    let metrics = ShardMetrics::new(context.metrics.clone(), id.0);
    let config = Arc::new(effective(&context.config, &image.broker_configs));
    let shard = Rc::new(Shard {
        id,
        context,
        store,
        groups: GroupHost::default(),
        replication: ReplicaHost::default(),
        producer_ids: ProducerIds::default(),
        transactions: TxnHost::default(),
        peers,
        local_image: RefCell::new(image.clone()),
        config: RefCell::new(config),
        cluster_view: RefCell::new(None),
        forward: RefCell::new(None),
        fetch_sessions,
        prepared_reads: RefCell::default(),
        metrics,
        controller_lock: Semaphore::new(1),
        shut_down: Cell::new(ShutDown::Running),
        stopping: Cell::new(false),
        stop_bell: Semaphore::new(0),
    });
    let owned: Vec<(TopicPartition, LogConfig)> = image
        .partitions()
        .filter(|(_, owner)| *owner == id)
        .map(|(topic_partition, _)| {
            let config = shard.topic_log_config(&topic_partition.topic);
            (topic_partition, config)
        })
        .collect();
    shard.open_partitions(owned).await?;
    shard.store.checkpoint().await?;
    let config = shard.config();
    let cleaner = config
        .cleaner
        .enabled
        .then(|| cleaner_schedule(&config, shard.context.shards));
    shard.store.start_maintenance(MaintenanceSchedule {
        retention_check_interval: Duration::from_millis(config.retention_check_interval_ms.max(1)),
        checkpoint_interval: Duration::from_millis(config.checkpoint_interval_ms.max(1)),
        cleaner,
        ..MaintenanceSchedule::default()
    });
    Ok(shard)
}

/// A shard's cleaner schedule under `config`: the dedupe buffer is the
/// broker's, shared by its shards as Kafka shares it by its cleaner threads.
fn cleaner_schedule(config: &BrokerConfig, shards: u16) -> CleanerSchedule {
    let shards = u64::from(shards.max(1));
    CleanerSchedule {
        backoff: Duration::from_millis(config.cleaner.backoff_ms.max(1)),
        map_bytes: usize::try_from(config.cleaner.dedupe_buffer_bytes / shards)
            .unwrap_or(usize::MAX)
            .max(CLEANER_MAP_BYTES_MIN),
    }
}

async fn run_jobs(shard: Rc<Shard>, jobs: MeshReceiver) {
    while let Ok(job) = jobs.recv_async().await {
        glommio::spawn_local(job(shard.clone())).detach();
    }
}

/// Accepts connections on client listener `index` until the shard stops.
async fn accept_until_stopped(shard: &Rc<Shard>, listener: &TcpListener, index: usize) {
    loop {
        let accept = std::pin::pin!(listener.accept());
        let stop = std::pin::pin!(shard.stop_bell.acquire(1));
        match futures::future::select(accept, stop).await {
            futures::future::Either::Left((Ok(stream), _)) => {
                glommio::spawn_local(serve_connection(shard.clone(), stream, index)).detach();
            }
            futures::future::Either::Left((Err(error), _)) => {
                tracing::warn!(shard = shard.id.0, %error, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
            futures::future::Either::Right(_) => {
                // Passed on: every listener's loop waits on the one bell.
                shard.stop_bell.signal(1);
                return;
            }
        }
        if shard.is_stopping() {
            return;
        }
    }
}
