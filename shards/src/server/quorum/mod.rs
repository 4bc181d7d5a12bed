//! The cluster runtime of a node started with `controller.quorum.voters`:
//! the controller voter (a [`ControllerNode`] driven over real sockets, its
//! state on disk through [`disk::QuorumDisk`]) with the controller
//! listener, on an executor thread of their own ([`ControllerThread`]); and
//! the broker side (registration, heartbeats, metadata catch-up) on shard
//! 0, which publishes the cluster image to every shard.
//!
//! The voter has its own thread, unpinned, so that data-path work on a
//! shard cannot hold back its Raft ticks and peer IO: a voter sharing a
//! starved shard's thread stopped heartbeating and the other voters
//! elected another controller within seconds. Its broker side reaches it
//! over TCP, as it reaches any other voter.
//!
//! Tasks, never holding a `RefCell` borrow across an await. On the
//! controller thread:
//! - the driver: one loop owning the [`ControllerNode`]; it takes ticks,
//!   peers' Raft messages and brokers' requests from a bounded inbox, then
//!   drains every ready: persist (blocking pool), then send;
//! - the controller listener: accepts peers, checks their hello
//!   (`cluster.id`), passes their frames to the driver and answers
//!   requests; garbage or oversized frames close the connection with a log
//!   line;
//! - one sender per other voter, reconnecting with backoff; a full queue
//!   drops Raft messages (Raft resends).
//!
//! On shard 0: the broker side, a client of whichever voter is the active
//! controller.

mod broker;
pub use broker::{ShutDown, shut_down_in_turn};
pub use transport::listener_address;
pub mod disk;
pub mod local_topics;
pub mod migrate;
mod reconcile;
mod transport;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use brook_engine::cluster::alter_partition::{AlterPartitionRequest, AlterPartitionResponse};
use brook_engine::cluster::broker_config::BrokerConfig;
use brook_engine::cluster::broker_dynamic::alter_broker_configs;
use brook_engine::cluster::cluster_image::ClusterImage;
use brook_engine::cluster::controller::{
    HeartbeatRequest, Refusal, TopicDefaults, create_topics, delete_topics,
};
use brook_engine::cluster::elections::elect_leaders;
use brook_engine::cluster::image::TopicId;
use brook_engine::cluster::node_config::{ClusterSettings, Listener};
use brook_engine::cluster::peer_wire::{
    PeerFrame, PeerRequest, PeerResponse, TopicResult, encode_frame,
};
use brook_engine::cluster::producer_ids::{PRODUCER_ID_BLOCK_SIZE, allocate_producer_ids};
use brook_engine::cluster::quorum::{
    Applied, ControllerNode, QuorumConfig, QuorumError, Registered, SNAPSHOT_AFTER_BYTES_DEFAULT,
    epoch_check, node_of, raft_id, tick_interval_ms,
};
use brook_engine::cluster::records::MetadataRecord;
use brook_engine::cluster::topic_changes::{add_partitions, alter_topic_configs};
use brook_engine::cluster::visibility::{TopicVisibility, Visibility};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::types::BrokerId;
use futures::channel::{mpsc, oneshot};
use futures::{FutureExt, StreamExt};
use raft::eraftpb::Message;
use rand::{Rng, SeedableRng};

use crate::server::controller::random_id;
use crate::server::shard::Shard;
use crate::server::{ServerContext, ServerError};

/// Inputs the driver queues before senders wait.
const INBOX_MAX: usize = 4_096;
/// Frames queued to one peer before Raft messages are dropped.
const PEER_QUEUE_MAX: usize = 1_024;

/// What every shard knows of the cluster: the image at the broker's
/// latest applied offset, the active controller, and which topics clients
/// may be told of ([`TopicVisibility`]).
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    pub image: Arc<ClusterImage>,
    pub controller: Option<BrokerId>,
    pub visibility: TopicVisibility,
}

enum Input {
    Raft(Box<Message>),
    /// A request from node `from` (its hello) sent at controller `epoch`.
    Request {
        from: BrokerId,
        epoch: u64,
        request: PeerRequest,
        reply: oneshot::Sender<PeerResponse>,
    },
}

/// Admin requests a broker forwards to the active controller, with where
/// to answer (kept by shard 0, drained by the broker side's session).
pub type Forward = mpsc::Sender<(PeerRequest, oneshot::Sender<PeerResponse>)>;
/// Forwarded requests queued before a handler waits.
const FORWARDED_MAX: usize = 256;

/// What a proposal's commit answers: the answer made from the committed
/// entry's index. A proposal another leader's entry displaced is answered
/// NotController (ask again).
struct Pending {
    answer: Box<dyn FnOnce(u64) -> PeerResponse>,
    reply: oneshot::Sender<PeerResponse>,
}

impl Pending {
    fn new(
        reply: oneshot::Sender<PeerResponse>,
        answer: impl FnOnce(u64) -> PeerResponse + 'static,
    ) -> Pending {
        Pending {
            answer: Box::new(answer),
            reply,
        }
    }
}

/// The controller voter of this node.
pub struct Quorum {
    node: RefCell<ControllerNode>,
    disk: Arc<Mutex<disk::QuorumDisk>>,
    peers: BTreeMap<BrokerId, RefCell<mpsc::Sender<Vec<u8>>>>,
    inbox: RefCell<mpsc::Sender<Input>>,
    waiting: RefCell<Vec<(u64, u64, Pending)>>,
    started: Instant,
    topic_defaults: TopicDefaults,
    /// Set once a write of the metadata log failed: this voter is silent
    /// from then on (it could no longer keep a promise it made).
    failed: std::cell::Cell<bool>,
}

impl std::fmt::Debug for Quorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quorum").finish_non_exhaustive()
    }
}

impl Quorum {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Queues an input for the driver; false when the driver is gone.
    async fn submit(&self, input: Input) -> bool {
        let mut sender = self.inbox.borrow().clone();
        futures::SinkExt::send(&mut sender, input).await.is_ok()
    }

    pub async fn request(
        &self,
        from: BrokerId,
        epoch: u64,
        request: PeerRequest,
    ) -> Option<PeerResponse> {
        let (reply, answer) = oneshot::channel();
        let input = Input::Request {
            from,
            epoch,
            request,
            reply,
        };
        if !self.submit(input).await {
            return None;
        }
        answer.await.ok()
    }

    /// This voter's controller epoch (its Raft term), which its answers
    /// carry.
    pub fn epoch(&self) -> u64 {
        self.node.borrow().term()
    }
}

/// How long a forwarded request waits for the controller's answer, asked
/// again meanwhile while the controller moves. Kafka's brokers bound their
/// forwarding by `request.timeout.ms` (30 s); this is half of it so that,
/// with the wait for this broker to serve the change after it
/// ([`wait_for_offset`], up to 10 s), a client hears within its own
/// default `request.timeout.ms` of 30 s.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(15);
/// The pauses between asks while no controller answers: from the first to
/// the last.
const FORWARD_RETRY_MIN: Duration = Duration::from_millis(25);
const FORWARD_RETRY_MAX: Duration = Duration::from_millis(500);

/// Sends `request` to the active controller through this node's broker
/// side (call on shard 0), asking again while the controller moves (an
/// answer NotController, or no session with any): any broker can forward,
/// so a client is never told NOT_CONTROLLER (Kafka's forwarding manager
/// retries the same way). `None` when no controller answered within
/// `limit` ([`FORWARD_TIMEOUT`] for a client's request): the caller
/// answers REQUEST_TIMED_OUT.
pub async fn ask_controller(
    shard: &Shard,
    request: PeerRequest,
    limit: Duration,
) -> Option<PeerResponse> {
    let deadline = Instant::now() + limit;
    let mut pause = FORWARD_RETRY_MIN;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        match ask_once(shard, request.clone(), left).await {
            Some(PeerResponse::NotController { .. }) | None => {}
            Some(answer) => return Some(answer),
        }
        glommio::timer::sleep(pause.min(left)).await;
        pause = (pause * 2).min(FORWARD_RETRY_MAX);
    }
}

/// One ask through the broker side, waiting at most `limit`; `None` when
/// it was not answered (no session took it in time, or its session ended).
async fn ask_once(shard: &Shard, request: PeerRequest, limit: Duration) -> Option<PeerResponse> {
    let mut forward = shard.forward.borrow().clone()?;
    let (reply, answer) = oneshot::channel();
    futures::SinkExt::send(&mut forward, (request, reply))
        .await
        .ok()?;
    transport::with_timeout(
        async { answer.await.map_err(|_| transport::PeerError::TimedOut) },
        limit,
    )
    .await
    .ok()
}

/// How long a forwarded change waits for every live broker to serve it.
const SERVE_WAIT_MAX: Duration = Duration::from_secs(10);
/// How often that wait looks again.
const SERVE_POLL: Duration = Duration::from_millis(5);

/// Waits (a bounded while) until every live broker serves `offset`, as
/// far as this shard's view of the cluster knows, and clients may be told
/// of every topic of `shown` (`cluster::visibility`): a change is answered
/// once any broker a client asks next shows it (a topic created, deleted,
/// grown, re-led), as CreateTopics' topics are.
pub async fn wait_for_offset(shard: &Shard, offset: u64, shown: &[TopicId]) {
    let deadline = Instant::now() + SERVE_WAIT_MAX;
    while Instant::now() < deadline {
        let served = shard.cluster_view().is_some_and(|view| {
            view.image.offset >= offset
                && view.visibility.served_by_all() >= offset
                && shown
                    .iter()
                    .all(|id| view.visibility.of(*id) == Visibility::Visible)
        });
        if served {
            return;
        }
        glommio::timer::sleep(SERVE_POLL).await;
    }
}

/// Starts the broker side on shard 0 (a node with the broker role).
pub fn start(shard: Rc<Shard>, settings: ClusterSettings) {
    if settings.roles.is_broker() {
        let (forward, forwarded) = mpsc::channel(FORWARDED_MAX);
        *shard.forward.borrow_mut() = Some(forward);
        glommio::spawn_local(broker::run(shard, settings, forwarded)).detach();
    }
}

/// The executor thread that runs this node's controller voter and
/// controller listener (see the module's doc), until stopped.
#[derive(Debug)]
pub struct ControllerThread {
    /// Dropped to stop the thread.
    stop: Option<flume::Sender<()>>,
    thread: Option<glommio::ExecutorJoinHandle<()>>,
}

impl ControllerThread {
    /// Binds the controller listener (an error when it cannot be: the node
    /// would be out of its quorum) and starts the thread: the voter (a node
    /// with the controller role) and the listener. A voter whose disk
    /// state cannot be opened is logged and left out; the node then runs
    /// as a broker only.
    pub fn start(
        context: Arc<ServerContext>,
        settings: ClusterSettings,
    ) -> Result<ControllerThread, ServerError> {
        let bound = match settings.listener(&settings.controller_listener) {
            Some(listener) => Some((listener.clone(), transport::bind_std(listener)?)),
            None => None,
        };
        let (stop, stopped) = flume::bounded::<()>(1);
        let thread = crate::runtime::executor_builder(glommio::Placement::Unbound)
            .name("brook-quorum")
            .spawn(move || {
                crate::runtime::guarded(run_controller(context, settings, bound, stopped))
            })
            .map_err(|error| ServerError::Shard {
                shard: 0,
                reason: format!("starting the controller thread: {error}"),
            })?;
        Ok(ControllerThread {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// The controller thread's work: starts the voter (a node with the
/// controller role) and the listener, then waits to be stopped; the tasks
/// it started are detached and end with the thread.
async fn run_controller(
    context: Arc<ServerContext>,
    settings: ClusterSettings,
    bound: Option<(Listener, std::net::TcpListener)>,
    stopped: flume::Receiver<()>,
) {
    let quorum = match settings.roles.is_controller() {
        false => None,
        true => match start_voter(&context, &settings) {
            Ok(quorum) => Some(quorum),
            Err(error) => {
                tracing::error!(%error, "the controller voter cannot start; this node runs as a broker only");
                None
            }
        },
    };
    if let Some((listener, bound)) = bound {
        glommio::spawn_local(transport::listen(settings, listener, bound, quorum)).detach();
    }
    let _ = stopped.recv_async().await;
}

/// Dropping it stops the voter and the listener and waits for the thread.
impl Drop for ControllerThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn start_voter(context: &ServerContext, settings: &ClusterSettings) -> Result<Rc<Quorum>, String> {
    let voters: Vec<BrokerId> = settings.voters.iter().map(|voter| voter.id).collect();
    let raft_ids: Vec<u64> = voters.iter().copied().map(raft_id).collect();
    let (disk, store) =
        disk::QuorumDisk::open(&context.data_dir, &raft_ids).map_err(|error| error.to_string())?;
    let config = QuorumConfig {
        node: settings.node,
        voters,
        session_timeout_ms: settings.session_timeout_ms,
        snapshot_after_bytes: context
            .config
            .given
            .get("metadata.log.max.record.bytes.between.snapshots")
            .and_then(|value| value.parse().ok())
            .unwrap_or(SNAPSHOT_AFTER_BYTES_DEFAULT),
        leader_balance_interval_ms: settings.leader_balance_interval_ms,
    };
    let node = ControllerNode::new(config, store).map_err(|error| error.to_string())?;
    let (inbox, inputs) = mpsc::channel(INBOX_MAX);
    let hello = encode_frame(&PeerFrame::Hello {
        cluster_id: settings.cluster_id.clone(),
        node: settings.node,
    });
    let mut peers = BTreeMap::new();
    for voter in settings
        .voters
        .iter()
        .filter(|voter| voter.id != settings.node)
    {
        let (sender, frames) = mpsc::channel(PEER_QUEUE_MAX);
        peers.insert(voter.id, RefCell::new(sender));
        glommio::spawn_local(transport::send_to_peer(
            voter.clone(),
            settings.cluster_id.clone(),
            hello.clone(),
            frames,
        ))
        .detach();
    }
    let quorum = Rc::new(Quorum {
        node: RefCell::new(node),
        disk: Arc::new(Mutex::new(disk)),
        peers,
        inbox: RefCell::new(inbox),
        waiting: RefCell::new(Vec::new()),
        started: Instant::now(),
        topic_defaults: TopicDefaults {
            log: context.config.log_defaults.clone(),
            partitions: context.config.num_partitions as i32,
            replication_factor: context
                .config
                .given
                .get("default.replication.factor")
                .and_then(|value| value.parse().ok())
                .unwrap_or(1),
        },
        failed: std::cell::Cell::new(false),
    });
    let seed = (settings.node.0 as u64) ^ (crate::server::shard::now_ms() as u64).rotate_left(17);
    glommio::spawn_local(drive(quorum.clone(), inputs, seed)).detach();
    Ok(quorum)
}

/// The driver loop (see the module's doc).
async fn drive(quorum: Rc<Quorum>, mut inputs: mpsc::Receiver<Input>, seed: u64) {
    let mut jitter = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut next_tick = Instant::now() + Duration::from_millis(tick_interval_ms(jitter.r#gen()));
    while !quorum.failed.get() {
        let wait = next_tick.saturating_duration_since(Instant::now());
        // An overdue tick goes first: a flood of peers' messages must not
        // hold back elections and session expiry.
        let input = if wait.is_zero() {
            None
        } else {
            futures::select_biased! {
                input = inputs.next() => match input {
                    Some(input) => Some(input),
                    None => return,
                },
                () = glommio::timer::sleep(wait).fuse() => None,
            }
        };
        match input {
            Some(Input::Raft(message)) => {
                let from = node_of(message.from);
                let mut node = quorum.node.borrow_mut();
                match node.step(*message) {
                    Ok(()) => node.heard_from(from, wall_ms()),
                    Err(error) => tracing::debug!(%error, "raft message refused"),
                }
            }
            Some(Input::Request {
                from,
                epoch,
                request,
                reply,
            }) => handle_request(&quorum, from, epoch, request, reply),
            None => {
                let now = quorum.now_ms();
                let ticked = quorum.node.borrow_mut().tick(now);
                let fenced = ticked.fenced;
                if !ticked.balanced.is_empty() {
                    tracing::info!(
                        partitions = ticked.balanced.len(),
                        "moving leaderships back to preferred replicas"
                    );
                }
                if let Some(stall) = ticked.stall_ms {
                    tracing::warn!(
                        stall_ms = stall,
                        "the controller's loop stalled; broker sessions do not count the stall"
                    );
                }
                let moved = fenced
                    .iter()
                    .filter(|record| matches!(record, MetadataRecord::Partition { .. }))
                    .count();
                for record in &fenced {
                    if let MetadataRecord::FenceBroker { id, epoch } = record {
                        tracing::info!(broker = %id, epoch, partitions_changed = moved, "broker session expired");
                    }
                }
                next_tick =
                    Instant::now() + Duration::from_millis(tick_interval_ms(jitter.r#gen()));
            }
        }
        drain(&quorum).await;
    }
}

/// The wall clock, which DescribeQuorum reports in.
fn wall_ms() -> u64 {
    crate::server::shard::now_ms().max(0) as u64
}

fn handle_request(
    quorum: &Quorum,
    from: BrokerId,
    epoch: u64,
    request: PeerRequest,
    reply: oneshot::Sender<PeerResponse>,
) {
    let now = quorum.now_ms();
    let mut node = quorum.node.borrow_mut();
    if let Err(error) = epoch_check(epoch, node.term()) {
        tracing::debug!(%from, epoch, current = node.term(), code = error.0, "a request from another controller epoch refused");
        let _ = reply.send(PeerResponse::WrongEpoch {
            error,
            leader: node.leader(),
        });
        return;
    }
    let not_controller = |error: QuorumError| match error {
        QuorumError::NotController { leader } => PeerResponse::NotController { leader },
        error => {
            tracing::error!(%error, "controller request failed");
            PeerResponse::NotController { leader: None }
        }
    };
    let response = match request {
        PeerRequest::Register(registration) => match node.register(registration, now) {
            Err(error) => not_controller(error),
            Ok(Err(refusal)) => PeerResponse::Registered {
                error: refusal.error,
                epoch: -1,
            },
            Ok(Ok(Registered::Already { epoch })) => PeerResponse::Registered {
                error: ErrorCode::NONE,
                epoch,
            },
            Ok(Ok(Registered::Proposed(proposal))) => {
                let answer = |index| PeerResponse::Registered {
                    error: ErrorCode::NONE,
                    epoch: index as i64,
                };
                quorum.waiting.borrow_mut().push((
                    proposal.index,
                    proposal.term,
                    Pending::new(reply, answer),
                ));
                return;
            }
        },
        PeerRequest::Heartbeat {
            broker,
            epoch,
            applied,
            want_shut_down,
            offline,
        } => {
            let request = HeartbeatRequest {
                broker,
                epoch,
                applied_offset: applied,
                want_shut_down,
                offline,
            };
            match node.heartbeat(request, now) {
                Ok(outcome) => PeerResponse::Heartbeat {
                    error: outcome.error,
                    fenced: outcome.fenced,
                    should_shut_down: outcome.should_shut_down,
                },
                Err(error) => not_controller(error),
            }
        }
        PeerRequest::Fetch(fetch) => PeerResponse::Fetched(node.fetch(
            from,
            fetch,
            brook_engine::cluster::peer_wire::CATCHUP_ENTRIES_MAX,
            wall_ms(),
        )),
        PeerRequest::DescribeQuorum => match node.describe_quorum(wall_ms()) {
            Ok(described) => PeerResponse::Quorum(described),
            Err(error) => not_controller(error),
        },
        PeerRequest::CreateTopics {
            topics,
            validate_only,
        } => {
            // The forwarding broker's ids: a request it asks again finds
            // its own topics.
            let ids: Vec<TopicId> = topics
                .iter()
                .map(|topic| topic.id.unwrap_or_else(|| TopicId(random_id())))
                .collect();
            let proposed = node.latest_image().map(|image| {
                let (results, records) =
                    create_topics(image, &topics, &quorum.topic_defaults, &ids);
                let results = topics
                    .iter()
                    .zip(results)
                    .map(|(topic, result)| {
                        topic_result(
                            &topic.name,
                            result.map(|created| {
                                (created.id, created.partitions, created.replication_factor)
                            }),
                        )
                    })
                    .collect::<Vec<_>>();
                (results, if validate_only { Vec::new() } else { records })
            });
            return propose_topics(quorum, &mut node, proposed, reply);
        }
        PeerRequest::DeleteTopics { names } => {
            let proposed = node.latest_image().map(|image| {
                let (results, records) = delete_topics(image, &names);
                let results = names
                    .iter()
                    .zip(results)
                    .map(|(name, result)| topic_result(name, result.map(|id| (id, 0, 0))))
                    .collect::<Vec<_>>();
                (results, records)
            });
            return propose_topics(quorum, &mut node, proposed, reply);
        }
        PeerRequest::AllocateProducerIds {
            broker,
            broker_epoch,
        } => {
            let mut start = 0;
            let proposed = node.propose_with(|image| {
                allocate_producer_ids(image, broker, broker_epoch).map(|(first, records)| {
                    start = first;
                    records
                })
            });
            match proposed {
                Ok(Ok(proposal)) => {
                    let answer = move |_| PeerResponse::ProducerIds {
                        error: ErrorCode::NONE,
                        start,
                        length: PRODUCER_ID_BLOCK_SIZE,
                    };
                    quorum.waiting.borrow_mut().push((
                        proposal.index,
                        proposal.term,
                        Pending::new(reply, answer),
                    ));
                    return;
                }
                Ok(Err(refusal)) => PeerResponse::ProducerIds {
                    error: refusal.error,
                    start: -1,
                    length: 0,
                },
                Err(error) => not_controller(error),
            }
        }
        PeerRequest::CreatePartitions {
            topic,
            total,
            assignments,
            validate_only,
        } => {
            let proposed = node.latest_image().map(|image| {
                let rule = add_partitions(image, &topic, total, assignments.as_deref());
                one_topic_change(image, &topic, rule, validate_only, Some(total))
            });
            return propose_topics(quorum, &mut node, proposed, reply);
        }
        PeerRequest::AlterPartition(request) => {
            return propose_alter_partition(quorum, &mut node, &request, reply);
        }
        PeerRequest::ElectLeaders { election, topics } => {
            let proposed = node
                .latest_image()
                .map(|image| elect_leaders(image, election, topics.as_deref()));
            return propose_answered(quorum, &mut node, proposed, reply, |results, offset| {
                PeerResponse::Elected { results, offset }
            });
        }
        PeerRequest::AlterConfigs {
            topic,
            changes,
            replace,
            validate_only,
        } => {
            let proposed = node.latest_image().map(|image| {
                let log = &quorum.topic_defaults.log;
                let rule = alter_topic_configs(image, &topic, &changes, replace, log);
                one_topic_change(image, &topic, rule, validate_only, None)
            });
            return propose_topics(quorum, &mut node, proposed, reply);
        }
        PeerRequest::AlterBrokerConfigs {
            resource,
            changes,
            replace,
            validate_only,
        } => {
            // The broker that took the request checked the values against
            // its own settings; here the names and values are checked alone.
            let proposed = node.latest_image().map(|image| {
                let base = BrokerConfig::default();
                match alter_broker_configs(image, &base, &resource, &changes, replace) {
                    Ok(records) => (
                        vec![topic_result(&resource, Ok((TopicId::default(), 0, 0)))],
                        if validate_only { Vec::new() } else { records },
                    ),
                    Err(refusal) => (vec![topic_result(&resource, Err(refusal))], Vec::new()),
                }
            });
            return propose_topics(quorum, &mut node, proposed, reply);
        }
    };
    let _ = reply.send(response);
}

/// A rule's outcome for one existing topic: its result (with `partitions`
/// once changed, else the topic's count) and the records to propose.
fn one_topic_change(
    image: &ClusterImage,
    name: &str,
    rule: Result<Vec<MetadataRecord>, Refusal>,
    validate_only: bool,
    partitions: Option<i32>,
) -> (Vec<TopicResult>, Vec<MetadataRecord>) {
    let result = rule.map(|records| {
        let topic = image.topic_by_name(name).expect("the rule found the topic");
        let replication_factor = topic
            .partitions
            .first()
            .map_or(0, |first| first.replicas.len() as i16);
        let count = partitions.unwrap_or(topic.partitions.len() as i32);
        (records, (topic.id, count, replication_factor))
    });
    match result {
        Ok((records, topic)) => (
            vec![topic_result(name, Ok(topic))],
            if validate_only { Vec::new() } else { records },
        ),
        Err(refusal) => (vec![topic_result(name, Err(refusal))], Vec::new()),
    }
}

fn topic_result(name: &str, result: Result<(TopicId, i32, i16), Refusal>) -> TopicResult {
    match result {
        Ok((id, partitions, replication_factor)) => TopicResult {
            name: name.to_owned(),
            error: ErrorCode::NONE,
            message: None,
            id,
            partitions,
            replication_factor,
        },
        Err(refusal) => TopicResult {
            name: name.to_owned(),
            error: refusal.error,
            message: Some(refusal.message),
            id: TopicId::default(),
            partitions: 0,
            replication_factor: 0,
        },
    }
}

/// AlterPartition: answered at once when refused or when the ISR is
/// already the one asked for, else once its record commits.
fn propose_alter_partition(
    quorum: &Quorum,
    node: &mut ControllerNode,
    request: &AlterPartitionRequest,
    reply: oneshot::Sender<PeerResponse>,
) {
    let checked = node.check_alter_partition(request);
    let (registration, records) = match checked {
        Ok(Ok(changed)) => changed,
        Ok(Err(error)) => {
            let refused = AlterPartitionResponse::refused(error);
            let _ = reply.send(PeerResponse::AlterPartition(refused));
            return;
        }
        Err(error) => {
            let _ = reply.send(PeerResponse::NotController {
                leader: match error {
                    QuorumError::NotController { leader } => leader,
                    _ => None,
                },
            });
            return;
        }
    };
    let response = AlterPartitionResponse::of(&registration);
    if records.is_empty() {
        let _ = reply.send(PeerResponse::AlterPartition(response));
        return;
    }
    match node.propose(records) {
        Ok(proposal) => quorum.waiting.borrow_mut().push((
            proposal.index,
            proposal.term,
            Pending::new(reply, move |_| PeerResponse::AlterPartition(response)),
        )),
        Err(error) => {
            tracing::warn!(%error, "an ISR change was not proposed");
            let _ = reply.send(PeerResponse::NotController {
                leader: node.leader(),
            });
        }
    }
}

/// Proposes a topic change's records (if any) and answers on commit.
fn propose_topics(
    quorum: &Quorum,
    node: &mut ControllerNode,
    proposed: Result<(Vec<TopicResult>, Vec<MetadataRecord>), QuorumError>,
    reply: oneshot::Sender<PeerResponse>,
) {
    propose_answered(quorum, node, proposed, reply, |results, offset| {
        PeerResponse::Topics { results, offset }
    });
}

/// Proposes a rule's records (if any) and answers with its results and
/// the offset that holds them (0 when nothing was proposed).
fn propose_answered<R: 'static>(
    quorum: &Quorum,
    node: &mut ControllerNode,
    proposed: Result<(R, Vec<MetadataRecord>), QuorumError>,
    reply: oneshot::Sender<PeerResponse>,
    answer: fn(R, u64) -> PeerResponse,
) {
    let (results, records) = match proposed {
        Ok(proposed) => proposed,
        Err(QuorumError::NotController { leader }) => {
            let _ = reply.send(PeerResponse::NotController { leader });
            return;
        }
        Err(error) => {
            tracing::error!(%error, "a controller change failed");
            let _ = reply.send(PeerResponse::NotController { leader: None });
            return;
        }
    };
    if records.is_empty() {
        let _ = reply.send(answer(results, 0));
        return;
    }
    match node.propose(records) {
        Ok(proposal) => quorum.waiting.borrow_mut().push((
            proposal.index,
            proposal.term,
            Pending::new(reply, move |index| answer(results, index)),
        )),
        Err(error) => {
            tracing::warn!(%error, "a controller change was not proposed");
            let _ = reply.send(PeerResponse::NotController {
                leader: node.leader(),
            });
        }
    }
}

/// Takes every ready: persist, then send, then answer what committed.
async fn drain(quorum: &Rc<Quorum>) {
    loop {
        let output = match quorum.node.borrow_mut().ready() {
            Ok(Some(output)) => output,
            Ok(None) => return,
            Err(error) => {
                tracing::error!(%error, "the metadata log cannot be applied; this controller stops");
                quorum.failed.set(true);
                return;
            }
        };
        if let Some(role) = output.role {
            tracing::info!(?role, term = quorum.node.borrow().term(), "controller role");
        }
        if !output.persist.is_empty() {
            let disk = quorum.disk.clone();
            let persist = output.persist.clone();
            let written = glommio::executor()
                .spawn_blocking(move || {
                    disk.lock()
                        .map_err(|_| "poisoned".to_owned())?
                        .write(&persist)
                        .map_err(|error| error.to_string())
                })
                .await;
            if let Err(error) = written {
                // Nothing may be sent that the disk did not keep.
                tracing::error!(%error, "writing the metadata log failed; this controller stops");
                quorum.failed.set(true);
                return;
            }
        }
        for message in output.messages {
            let to = node_of(message.to);
            let Some(peer) = quorum.peers.get(&to) else {
                continue;
            };
            // A full queue (a peer down or slow) drops the message; Raft resends.
            let _ = peer
                .borrow_mut()
                .try_send(encode_frame(&PeerFrame::Raft(Box::new(message))));
        }
        answer_committed(quorum, &output.applied);
    }
}

fn answer_committed(quorum: &Quorum, applied: &[Applied]) {
    if applied.is_empty() {
        return;
    }
    let last = applied.last().map_or(0, |applied| applied.index);
    let mut waiting = quorum.waiting.borrow_mut();
    let mut still = Vec::new();
    for (index, term, pending) in waiting.drain(..) {
        if index > last {
            still.push((index, term, pending));
            continue;
        }
        let committed = applied
            .iter()
            .any(|applied| applied.index == index && applied.term == term);
        // Not committed: another leader's entry took the index; ask again.
        let response = match committed {
            true => (pending.answer)(index),
            false => PeerResponse::NotController { leader: None },
        };
        let _ = pending.reply.send(response);
    }
    *waiting = still;
}
