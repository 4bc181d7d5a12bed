//! The broker side of a cluster node: find the active controller, register
//! (a new incarnation at every start), heartbeat every
//! `broker.heartbeat.interval.ms`, follow the committed metadata log, and
//! publish the image and the controller to every shard.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use brook_engine::cluster::cluster_image::ClusterImage;
use brook_engine::cluster::node_config::ClusterSettings;
use brook_engine::cluster::peer_wire::{
    CATCHUP_ENTRIES_MAX, PeerFrame, PeerRequest, PeerResponse, encode_frame,
};
use brook_engine::cluster::quorum::{
    Catchup, Fetched, MetadataFetch, QuorumError, answer_is_current, apply_catchup,
};
use brook_engine::cluster::records::{BrokerRegistration, Endpoint};
use brook_engine::cluster::visibility::TopicVisibility;
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::types::BrokerId;
use glommio::net::TcpStream;

use super::ClusterView;
use super::reconcile::reconcile;
use super::transport::{
    PEER_TIMEOUT, PeerError, connect, expect_hello, read_frame, with_timeout, write_bytes,
};
use crate::server::shard::Shard;
use futures::channel::{mpsc, oneshot};
use futures::{FutureExt, StreamExt};

/// How often the broker asks for new metadata: a small request each time,
/// and what bounds how long a change takes to reach every broker (measured
/// with `brook bench run controller-failover`: 200 ms gave a 207 ms p50).
const FETCH_INTERVAL: Duration = Duration::from_millis(50);
/// The interval while this broker has topics it may not show yet: the
/// next fetches tell it (and the controller) sooner that every live broker
/// serves them, which a CreateTopics and a held Metadata request wait for.
const PENDING_FETCH_INTERVAL: Duration = Duration::from_millis(10);
/// Metadata fetches in a row before the broker heartbeats again: a long
/// log (512 entries a fetch) is caught up over several sessions' rounds.
const CATCHUP_ROUNDS_MAX: usize = 64;
/// A wait before trying another voter.
const RETRY_DELAY: Duration = Duration::from_millis(200);
/// Heartbeats while a controlled shutdown waits for the controller to move
/// this broker's leaderships.
const SHUTDOWN_HEARTBEAT: Duration = Duration::from_millis(100);
/// The bounds of how long a heartbeat or metadata fetch waits for its
/// answer, and a connection to a voter for its set-up, before the broker
/// tries another voter (see [`request_timeout`]).
const REQUEST_TIMEOUT_MIN: Duration = Duration::from_secs(1);
/// Kafka's `controller.quorum.request.timeout.ms` default.
const REQUEST_TIMEOUT_MAX: Duration = Duration::from_secs(2);
/// The longest a controlled shutdown waits before the broker stops anyway
/// (its leaderships then move when its session expires).
const CONTROLLED_SHUTDOWN_MAX: Duration = Duration::from_secs(30);

/// SIGTERM in a cluster (Kafka's controlled shutdown): asks the controller,
/// through this node's heartbeats, to move every leadership this broker
/// holds, and returns once it says the broker leads nothing (or after
/// [`CONTROLLED_SHUTDOWN_MAX`]). Runs on shard 0; the caller then stops the
/// shards.
pub async fn shut_down_in_turn(shard: Rc<Shard>) {
    shard.shut_down.set(ShutDown::Wanted);
    let started = Instant::now();
    while shard.shut_down.get() != ShutDown::Allowed {
        if started.elapsed() > CONTROLLED_SHUTDOWN_MAX {
            tracing::warn!("the controller moved no leaderships in time; stopping anyway");
            return;
        }
        glommio::timer::sleep(SHUTDOWN_HEARTBEAT / 2).await;
    }
    tracing::info!(
        after_ms = started.elapsed().as_millis() as u64,
        "controlled shutdown: the controller moved every leadership it could"
    );
}

/// Where a controlled shutdown of this node is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShutDown {
    #[default]
    Running,
    /// SIGTERM came: heartbeats ask to shut down.
    Wanted,
    /// The controller answered that the broker leads nothing.
    Allowed,
}

/// How long a request other than a registration may wait for its answer:
/// the heartbeat interval within [1 s, 2 s]. A controller cut off without
/// a word (no reset, no close) then costs a broker a second or two, well
/// inside its session, before it looks for the new controller; a
/// registration waits for its commit and may take an election's time.
fn request_timeout(settings: &ClusterSettings) -> Duration {
    Duration::from_millis(settings.heartbeat_interval_ms)
        .clamp(REQUEST_TIMEOUT_MIN, REQUEST_TIMEOUT_MAX)
}

struct Session {
    stream: TcpStream,
    correlation: u32,
    request_timeout: Duration,
    /// The highest controller epoch this broker has seen (kept across
    /// sessions): requests carry it, older answers are ignored.
    epoch: Rc<Cell<u64>>,
}

impl Session {
    /// One request and its answer. An answer from an older controller
    /// epoch than one seen ends the session; a voter that says the request
    /// is from an older epoch is asked again at its epoch; one that is
    /// behind the request's epoch is answered as not the controller.
    async fn ask(&mut self, request: PeerRequest) -> Result<PeerResponse, PeerError> {
        for _ in 0..2 {
            let (epoch, response) = self.exchange(request.clone()).await?;
            if !answer_is_current(self.epoch.get(), epoch) {
                return Err(PeerError::StaleEpoch {
                    answered: epoch,
                    known: self.epoch.get(),
                });
            }
            self.epoch.set(epoch);
            match response {
                PeerResponse::WrongEpoch { error, .. }
                    if error == ErrorCode::FENCED_LEADER_EPOCH =>
                {
                    continue;
                }
                PeerResponse::WrongEpoch { leader, .. } => {
                    return Ok(PeerResponse::NotController { leader });
                }
                response => return Ok(response),
            }
        }
        Ok(PeerResponse::NotController { leader: None })
    }

    async fn exchange(&mut self, request: PeerRequest) -> Result<(u64, PeerResponse), PeerError> {
        let timeout = match request {
            PeerRequest::Register(_) => PEER_TIMEOUT * 2,
            _ => self.request_timeout,
        };
        self.correlation = self.correlation.wrapping_add(1);
        let correlation = self.correlation;
        write_bytes(
            &mut self.stream,
            &encode_frame(&PeerFrame::Request {
                correlation,
                epoch: self.epoch.get(),
                request,
            }),
        )
        .await?;
        match with_timeout(read_frame(&mut self.stream), timeout).await? {
            PeerFrame::Response {
                correlation: answered,
                epoch,
                response,
            } if answered == correlation => Ok((epoch, response)),
            _ => Err(PeerError::NoHello),
        }
    }
}

/// Admin requests from this broker's handlers, for the active controller.
type Forwarded = mpsc::Receiver<(PeerRequest, oneshot::Sender<PeerResponse>)>;

struct BrokerState {
    forwarded: Forwarded,
    settings: ClusterSettings,
    registration: BrokerRegistration,
    epoch: Option<i64>,
    image: ClusterImage,
    controller: Option<BrokerId>,
    controller_epoch: Rc<Cell<u64>>,
    /// Which topics clients may be told of (see its module).
    visibility: TopicVisibility,
    /// Whether the image has reached the committed log's end once since
    /// this broker started: nothing is published before (a view of an empty
    /// image told clients of a one-broker cluster with no topics).
    caught_up: bool,
    /// What the shards were last given: the image's offset (how far this
    /// broker serves the log), the controller, and `served_by_all`.
    published: (u64, Option<BrokerId>, u64),
}

pub async fn run(shard: Rc<Shard>, settings: ClusterSettings, forwarded: Forwarded) {
    let registration = registration(&shard, &settings);
    let mut state = BrokerState {
        forwarded,
        settings,
        registration,
        epoch: None,
        image: ClusterImage::default(),
        controller: None,
        controller_epoch: Rc::new(Cell::new(0)),
        visibility: TopicVisibility::default(),
        caught_up: false,
        published: (0, None, 0),
    };
    let mut next_voter = 0usize;
    // The voter whose session failed last: not asked again first.
    let mut failed: Option<BrokerId> = None;
    while !shard.is_stopping() {
        let target = match state.controller {
            Some(controller) => controller,
            None => {
                let voters = state.settings.voters.len();
                next_voter = (next_voter + 1) % voters;
                if voters > 1 && failed == Some(state.settings.voters[next_voter].id) {
                    next_voter = (next_voter + 1) % voters;
                }
                state.settings.voters[next_voter].id
            }
        };
        let Some(voter) = state.settings.voter(target).cloned() else {
            state.controller = None;
            continue;
        };
        match session(&shard, &mut state, &voter.host, voter.port, target).await {
            Ok(()) => failed = None,
            Err(error) => {
                failed = Some(target);
                tracing::debug!(voter = %target, %error, "controller session ended");
                if state.controller == Some(target) {
                    state.controller = None;
                    publish(&shard, &mut state).await;
                }
            }
        }
        glommio::timer::sleep(RETRY_DELAY).await;
    }
}

fn registration(shard: &Shard, settings: &ClusterSettings) -> BrokerRegistration {
    let mut incarnation = [0u8; 16];
    incarnation[..8].copy_from_slice(&(crate::server::shard::now_ms() as u64).to_be_bytes());
    incarnation[8..12].copy_from_slice(&std::process::id().to_be_bytes());
    incarnation[12..].copy_from_slice(&settings.node.0.to_be_bytes());
    BrokerRegistration {
        id: settings.node,
        incarnation,
        // Every client listener, the inter-broker one first (other brokers
        // dial the first).
        listeners: shard
            .context
            .listeners
            .iter()
            .map(|listener| Endpoint {
                name: listener.name.clone(),
                host: listener.advertised_host.clone(),
                port: listener.advertised_port,
            })
            .collect(),
        rack: settings.rack.clone(),
    }
}

/// One connection to one voter, until it fails or the voter says it is
/// not the controller.
async fn session(
    shard: &Rc<Shard>,
    state: &mut BrokerState,
    host: &str,
    port: u16,
    target: BrokerId,
) -> Result<(), PeerError> {
    let request_timeout = request_timeout(&state.settings);
    let mut stream = with_timeout(connect(host, port), request_timeout).await?;
    let hello = encode_frame(&PeerFrame::Hello {
        cluster_id: state.settings.cluster_id.clone(),
        node: state.settings.node,
    });
    write_bytes(&mut stream, &hello).await?;
    if let Err(error) = expect_hello(&mut stream, &state.settings.cluster_id).await {
        if matches!(error, PeerError::OtherCluster { .. }) {
            tracing::error!(voter = %target, %error, "a voter belongs to another cluster");
        }
        return Err(error);
    }
    let mut session = Session {
        stream,
        correlation: 0,
        request_timeout,
        epoch: state.controller_epoch.clone(),
    };
    let heartbeat_every = Duration::from_millis(state.settings.heartbeat_interval_ms);
    let mut next_heartbeat = Instant::now();
    // Directory failures the controller has been told of: a new one is
    // reported at once (Kafka's broker heartbeats at once too), so the
    // leaderships of its partitions move within a metadata round.
    let mut failures_told = 0;
    while !shard.is_stopping() {
        if shard.shut_down.get() == ShutDown::Wanted {
            next_heartbeat = next_heartbeat.min(Instant::now() + SHUTDOWN_HEARTBEAT);
        }
        let failures = shard.context.log_dirs.failures();
        if failures != failures_told && state.epoch.is_some() {
            next_heartbeat = Instant::now();
        }
        if Instant::now() >= next_heartbeat {
            let request = match state.epoch {
                None => PeerRequest::Register(state.registration.clone()),
                Some(epoch) => {
                    failures_told = failures;
                    PeerRequest::Heartbeat {
                        broker: state.settings.node,
                        epoch,
                        // What the shards serve: the controller unfences a
                        // broker only once it serves far enough.
                        applied: state.published.0,
                        want_shut_down: shard.shut_down.get() != ShutDown::Running,
                        offline: shard.context.log_dirs.offline_partitions(),
                    }
                }
            };
            match session.ask(request).await? {
                PeerResponse::NotController { leader } => {
                    state.controller = leader.filter(|leader| *leader != target);
                    publish(shard, state).await;
                    return Ok(());
                }
                PeerResponse::Registered { error, epoch } if error == ErrorCode::NONE => {
                    tracing::info!(epoch, controller = %target, "registered with the controller");
                    state.epoch = Some(epoch);
                    state.controller = Some(target);
                }
                PeerResponse::Registered { error, .. } => {
                    let reason = if error == ErrorCode::DUPLICATE_BROKER_REGISTRATION {
                        "DUPLICATE_BROKER_REGISTRATION: another broker with this node.id is alive"
                    } else {
                        "refused"
                    };
                    tracing::warn!(code = error.0, reason, "registration refused; retrying");
                    next_heartbeat = Instant::now() + heartbeat_every / 2;
                }
                PeerResponse::Heartbeat {
                    error,
                    should_shut_down,
                    ..
                } if error == ErrorCode::NONE => {
                    state.controller = Some(target);
                    next_heartbeat = Instant::now() + heartbeat_every;
                    if should_shut_down && shard.shut_down.get() == ShutDown::Wanted {
                        shard.shut_down.set(ShutDown::Allowed);
                    }
                }
                PeerResponse::Heartbeat { error, .. } => {
                    tracing::warn!(?error, "heartbeat refused; registering again");
                    state.epoch = None;
                }
                _ => return Err(PeerError::NoHello),
            }
        }
        let before = state.image.offset;
        if !catch_up(shard, &mut session, state).await? {
            // More to fetch after the heartbeat.
            continue;
        }
        if state.image.offset != before {
            // The shards serve the new topics before anyone hears of them.
            reconcile(shard, &state.image).await;
        }
        publish(shard, state).await;
        let interval = match state.visibility.any_pending_at_all() {
            true => PENDING_FETCH_INTERVAL,
            false => FETCH_INTERVAL,
        };
        let forwarded = futures::select_biased! {
            forwarded = state.forwarded.next() => forwarded,
            () = glommio::timer::sleep(interval).fuse() => None,
        };
        if let Some((request, reply)) = forwarded {
            if reply.is_canceled() {
                // Its handler gave up (and asks again, or answered
                // REQUEST_TIMED_OUT): not sent, so it cannot apply late.
                continue;
            }
            let response = session.ask(request).await?;
            let moved = match &response {
                PeerResponse::NotController { leader } => Some(*leader),
                _ => None,
            };
            let _ = reply.send(response);
            if let Some(leader) = moved {
                state.controller = leader.filter(|leader| *leader != target);
                publish(shard, state).await;
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Fetches the committed metadata until the controller has no more to
/// send: a snapshot or a full chunk of entries means more follows, and an
/// image on the way there is the past (leaders of old epochs, topics not
/// created yet), which the broker must not act on. Whether it got there
/// (false: more after [`CATCHUP_ROUNDS_MAX`] fetches).
async fn catch_up(
    shard: &Rc<Shard>,
    session: &mut Session,
    state: &mut BrokerState,
) -> Result<bool, PeerError> {
    for _ in 0..CATCHUP_ROUNDS_MAX {
        let fetch = MetadataFetch {
            offset: state.image.offset,
            served: state.published.0,
            served_by_all: state.visibility.served_by_all(),
        };
        let PeerResponse::Fetched(Fetched {
            catchup,
            served_by_all,
        }) = session.ask(PeerRequest::Fetch(fetch)).await?
        else {
            return Ok(true);
        };
        state.visibility.learn(served_by_all);
        let more = match &catchup {
            Catchup::Snapshot(_) => true,
            Catchup::Entries(entries) => entries.len() >= CATCHUP_ENTRIES_MAX,
        };
        match apply_catchup(&mut state.image, &catchup) {
            Ok(elections) => shard.metrics.leader_elections(elections),
            // An answer that does not continue the image (it changed
            // nothing): ask again later.
            Err(QuorumError::NotNext { .. }) => return Ok(true),
            Err(error) => {
                tracing::error!(%error, "the metadata log does not apply on this broker");
                return Ok(true);
            }
        }
        if !more {
            // An empty answer from a controller elected a moment ago means
            // "nothing yet", not the end of a log that has at least this
            // broker's registration in it.
            state.caught_up |= state.image.offset > 0;
            return Ok(true);
        }
    }
    Ok(false)
}

/// Gives every shard the new view when the image or the controller moved.
async fn publish(shard: &Rc<Shard>, state: &mut BrokerState) {
    if !state.caught_up {
        return;
    }
    state.visibility.follow(&state.image);
    let current = (
        state.image.offset,
        state.controller,
        state.visibility.served_by_all(),
    );
    if current == state.published {
        return;
    }
    state.published = current;
    let view = Arc::new(ClusterView {
        image: Arc::new(state.image.clone()),
        controller: state.controller,
        visibility: state.visibility.clone(),
    });
    for target in shard.context.shard_ids() {
        let view = view.clone();
        let _ = shard
            .on_shard(
                target,
                move |shard| async move { shard.set_cluster_view(view) },
            )
            .await;
    }
    // This incarnation's registration, not one an earlier run left.
    let registered = view
        .image
        .brokers
        .get(&state.settings.node)
        .is_some_and(|broker| !broker.fenced && Some(broker.epoch) == state.epoch);
    if registered {
        let context = &shard.context;
        context
            .was_unfenced
            .store(true, std::sync::atomic::Ordering::Release);
        let _ = context.unfenced.try_send(());
    }
}
