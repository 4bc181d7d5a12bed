//! The cluster runtime on shard 0 of a node started with
//! `controller.quorum.voters`: the controller voter (a
//! [`ControllerNode`] driven over real sockets, its state on disk through
//! [`disk::QuorumDisk`]) and the broker side (registration, heartbeats,
//! metadata catch-up) that publishes the cluster image to every shard.
//!
//! Tasks, all on shard 0 and never holding a `RefCell` borrow across an
//! await:
//! - the driver: one loop owning the [`ControllerNode`]; it takes ticks,
//!   peers' Raft messages and brokers' requests from a bounded inbox, then
//!   drains every ready: persist (blocking pool), then send;
//! - the controller listener: accepts peers, checks their hello
//!   (`cluster.id`), passes their frames to the driver and answers
//!   requests; garbage or oversized frames close the connection with a log
//!   line;
//! - one sender per other voter, reconnecting with backoff; a full queue
//!   drops Raft messages (Raft resends);
//! - the broker side, a client of whichever voter is the active controller.

mod broker;
pub mod disk;
mod transport;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use brook_engine::cluster::cluster_image::ClusterImage;
use brook_engine::cluster::node_config::ClusterSettings;
use brook_engine::cluster::peer_wire::{
    CATCHUP_ENTRIES_MAX, PeerFrame, PeerRequest, PeerResponse, encode_frame,
};
use brook_engine::cluster::quorum::{
    Applied, ControllerNode, QuorumConfig, QuorumError, Registered, SNAPSHOT_AFTER_BYTES_DEFAULT,
    node_of, raft_id, tick_interval_ms,
};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::types::BrokerId;
use futures::channel::{mpsc, oneshot};
use futures::{FutureExt, StreamExt};
use raft::eraftpb::Message;
use rand::{Rng, SeedableRng};

use crate::server::shard::Shard;

/// Inputs the driver queues before senders wait.
const INBOX_MAX: usize = 4_096;
/// Frames queued to one peer before Raft messages are dropped.
const PEER_QUEUE_MAX: usize = 1_024;

/// What every shard knows of the cluster: the image at the broker's
/// latest applied offset and the active controller.
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    pub image: Arc<ClusterImage>,
    pub controller: Option<BrokerId>,
}

enum Input {
    Raft(Box<Message>),
    Request(PeerRequest, oneshot::Sender<PeerResponse>),
}

/// The controller voter of this node.
pub struct Quorum {
    node: RefCell<ControllerNode>,
    disk: Arc<Mutex<disk::QuorumDisk>>,
    peers: BTreeMap<BrokerId, RefCell<mpsc::Sender<Vec<u8>>>>,
    inbox: RefCell<mpsc::Sender<Input>>,
    waiting: RefCell<Vec<(u64, u64, oneshot::Sender<PeerResponse>)>>,
    started: Instant,
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

    pub async fn request(&self, request: PeerRequest) -> Option<PeerResponse> {
        let (reply, answer) = oneshot::channel();
        if !self.submit(Input::Request(request, reply)).await {
            return None;
        }
        answer.await.ok()
    }
}

/// Starts the cluster tasks on shard 0.
pub async fn start(shard: Rc<Shard>, settings: ClusterSettings) {
    let quorum = if settings.roles.is_controller() {
        match start_voter(&shard, &settings) {
            Ok(quorum) => Some(quorum),
            Err(error) => {
                tracing::error!(%error, "the controller voter cannot start; this node runs as a broker only");
                None
            }
        }
    } else {
        None
    };
    if let Some(listener) = settings.listener(&settings.controller_listener).cloned() {
        glommio::spawn_local(transport::listen(
            shard.clone(),
            settings.clone(),
            listener,
            quorum.clone(),
        ))
        .detach();
    }
    if settings.roles.is_broker() {
        glommio::spawn_local(broker::run(shard.clone(), settings.clone(), quorum.clone())).detach();
    }
}

fn start_voter(shard: &Rc<Shard>, settings: &ClusterSettings) -> Result<Rc<Quorum>, String> {
    let voters: Vec<BrokerId> = settings.voters.iter().map(|voter| voter.id).collect();
    let raft_ids: Vec<u64> = voters.iter().copied().map(raft_id).collect();
    let (disk, store) = disk::QuorumDisk::open(&shard.context.data_dir, &raft_ids)
        .map_err(|error| error.to_string())?;
    let config = QuorumConfig {
        node: settings.node,
        voters,
        session_timeout_ms: settings.session_timeout_ms,
        snapshot_after_bytes: shard
            .context
            .config
            .given
            .get("metadata.log.max.record.bytes.between.snapshots")
            .and_then(|value| value.parse().ok())
            .unwrap_or(SNAPSHOT_AFTER_BYTES_DEFAULT),
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
            shard.clone(),
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
        failed: std::cell::Cell::new(false),
    });
    let seed = (settings.node.0 as u64) ^ (crate::server::shard::now_ms() as u64).rotate_left(17);
    glommio::spawn_local(drive(shard.clone(), quorum.clone(), inputs, seed)).detach();
    Ok(quorum)
}

/// The driver loop (see the module's doc).
async fn drive(shard: Rc<Shard>, quorum: Rc<Quorum>, mut inputs: mpsc::Receiver<Input>, seed: u64) {
    let mut jitter = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut next_tick = Instant::now() + Duration::from_millis(tick_interval_ms(jitter.r#gen()));
    while !shard.is_stopping() && !quorum.failed.get() {
        let wait = next_tick.saturating_duration_since(Instant::now());
        let input = futures::select_biased! {
            input = inputs.next() => match input {
                Some(input) => Some(input),
                None => return,
            },
            () = glommio::timer::sleep(wait).fuse() => None,
        };
        match input {
            Some(Input::Raft(message)) => {
                if let Err(error) = quorum.node.borrow_mut().step(*message) {
                    tracing::debug!(%error, "raft message refused");
                }
            }
            Some(Input::Request(request, reply)) => handle_request(&quorum, request, reply),
            None => {
                let now = quorum.now_ms();
                let fenced = quorum.node.borrow_mut().tick(now);
                for record in fenced {
                    tracing::info!(?record, "broker session expired");
                }
                next_tick =
                    Instant::now() + Duration::from_millis(tick_interval_ms(jitter.r#gen()));
            }
        }
        drain(&quorum).await;
    }
}

fn handle_request(quorum: &Quorum, request: PeerRequest, reply: oneshot::Sender<PeerResponse>) {
    let now = quorum.now_ms();
    let mut node = quorum.node.borrow_mut();
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
                quorum
                    .waiting
                    .borrow_mut()
                    .push((proposal.index, proposal.term, reply));
                return;
            }
        },
        PeerRequest::Heartbeat {
            broker,
            epoch,
            applied,
        } => match node.heartbeat(broker, epoch, applied, now) {
            Ok(outcome) => PeerResponse::Heartbeat {
                error: outcome.error,
                fenced: outcome.fenced,
            },
            Err(error) => not_controller(error),
        },
        PeerRequest::Fetch { offset } => {
            PeerResponse::Fetched(node.committed_since(offset, CATCHUP_ENTRIES_MAX))
        }
    };
    let _ = reply.send(response);
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
        answer_registrations(quorum, &output.applied);
    }
}

fn answer_registrations(quorum: &Quorum, applied: &[Applied]) {
    if applied.is_empty() {
        return;
    }
    let last = applied.last().map_or(0, |applied| applied.index);
    let mut waiting = quorum.waiting.borrow_mut();
    let mut still = Vec::new();
    for (index, term, reply) in waiting.drain(..) {
        if index > last {
            still.push((index, term, reply));
            continue;
        }
        let response = match applied.iter().find(|applied| applied.index == index) {
            Some(applied) if applied.term == term => PeerResponse::Registered {
                error: ErrorCode::NONE,
                epoch: index as i64,
            },
            // Another leader's entry took the index: ask again.
            _ => PeerResponse::NotController { leader: None },
        };
        let _ = reply.send(response);
    }
    *waiting = still;
}
