//! The controller's rules, as pure functions of the cluster image: each
//! validates a request and returns the records to propose, or the Kafka
//! error to answer. Only the active controller runs them, against the image
//! at its latest applied offset; the records take effect once committed.
//!
//! Broker sessions are the one piece of state here that is not in the log
//! (as in KRaft's BrokerHeartbeatManager): the active controller keeps when
//! it last heard from each broker, and a newly elected controller starts
//! every session afresh, so a change of controller never fences a broker
//! that is heartbeating.

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::cluster_image::{ClusterImage, TopicRegistration};
use crate::cluster::elections::{
    OfflineReplicas, broker_leaves, elect_offline_partitions, fence_brokers, replicas_offline,
};
use crate::cluster::image::{PARTITIONS_MAX, TopicId, validate_topic_name};
use crate::cluster::manual_assignment::manual_partitions;
use crate::cluster::placement::{Candidate, PlacementError, Spread, assign_replicas};
use crate::cluster::records::{BrokerRegistration, MetadataRecord, PartitionRegistration};
use crate::cluster::topic_config::check_overrides;
use crate::log::config::LogConfig;
use crate::protocol::errors::ErrorCode;
use crate::types::{BrokerId, LeaderEpoch, PartitionId, TopicPartition};

/// Kafka's `broker.session.timeout.ms` default.
pub const BROKER_SESSION_TIMEOUT_MS_DEFAULT: u64 = 9_000;
/// Kafka's `broker.heartbeat.interval.ms` default.
pub const BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT: u64 = 2_000;

/// A refusal, as the response carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub error: ErrorCode,
    pub message: String,
}

impl Refusal {
    pub fn new(error: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal {
            error,
            message: message.into(),
        }
    }
}

/// The longest the active controller may go without looking at its
/// sessions (it looks every tick, 100 ms) before the gap counts as a stall
/// of its own: [`BrokerSessions::looked`].
pub const CONTROLLER_STALL_MS: u64 = 1_000;

/// When the active controller last heard from each broker epoch.
#[derive(Clone, Debug, Default)]
pub struct BrokerSessions {
    last_heard_ms: BTreeMap<BrokerId, (i64, u64)>,
    session_timeout_ms: u64,
    /// When the controller last looked ([`BrokerSessions::looked`]).
    last_look_ms: Option<u64>,
    /// What brokers' heartbeats named of their failed log directories.
    pub offline: OfflineReplicas,
}

impl BrokerSessions {
    pub fn new(session_timeout_ms: u64) -> BrokerSessions {
        BrokerSessions {
            last_heard_ms: BTreeMap::new(),
            session_timeout_ms,
            last_look_ms: None,
            offline: OfflineReplicas::default(),
        }
    }

    /// The controller looks at its sessions at `now_ms`, as it does every
    /// tick before fencing. If it could not look for more than
    /// [`CONTROLLER_STALL_MS`], its own loop was stalled (a metadata-log
    /// fsync behind a disk full of data writes, a paused process): the
    /// heartbeats brokers sent meanwhile are still queued behind the
    /// stall, so the gap counts against no session. Otherwise a controller
    /// that resumes fences every broker at once, as it did under the
    /// replication bench. Returns the gap credited, if any.
    pub fn looked(&mut self, now_ms: u64) -> Option<u64> {
        let last = self.last_look_ms.replace(now_ms)?;
        let gap = now_ms.saturating_sub(last);
        if gap <= CONTROLLER_STALL_MS {
            return None;
        }
        for (_, heard_ms) in self.last_heard_ms.values_mut() {
            *heard_ms = heard_ms.saturating_add(gap).min(now_ms);
        }
        Some(gap)
    }

    /// This node just became the active controller: every registered broker
    /// gets a whole session from now.
    pub fn restart_all(&mut self, image: &ClusterImage, now_ms: u64) {
        self.last_look_ms = Some(now_ms);
        self.last_heard_ms = image
            .brokers
            .values()
            .map(|broker| (broker.registration.id, (broker.epoch, now_ms)))
            .collect();
    }

    /// A word from `broker` at `epoch` (a heartbeat, or its registration).
    pub fn heard(&mut self, broker: BrokerId, epoch: i64, now_ms: u64) {
        self.last_heard_ms.insert(broker, (epoch, now_ms));
    }

    /// Whether `broker`'s session (at `epoch`) is alive at `now_ms`.
    pub fn alive(&self, broker: BrokerId, epoch: i64, now_ms: u64) -> bool {
        self.last_heard_ms
            .get(&broker)
            .is_some_and(|(heard_epoch, heard_ms)| {
                *heard_epoch == epoch && now_ms.saturating_sub(*heard_ms) <= self.session_timeout_ms
            })
    }

    /// Fence records for every unfenced broker whose session has expired,
    /// each after the elections that move its leaderships and ISR places
    /// ([`fence_brokers`]): one batch, so no committed image has a fenced
    /// leader.
    pub fn expired(&self, image: &ClusterImage, now_ms: u64) -> Vec<MetadataRecord> {
        let expired: Vec<(BrokerId, i64)> = image
            .live_brokers()
            .filter(|broker| !self.alive(broker.registration.id, broker.epoch, now_ms))
            .map(|broker| (broker.registration.id, broker.epoch))
            .collect();
        if expired.is_empty() {
            return Vec::new();
        }
        fence_brokers(image, &expired)
    }
}

/// BrokerRegistration: Kafka refuses a second live incarnation of one
/// `node.id` (DUPLICATE_BROKER_REGISTRATION); the same incarnation asking
/// again (a retry) gets no new record.
///
/// Except for `controller`, the active controller's own node: its broker
/// runs in the controller's process, so a new incarnation of it means that
/// process started again and the old one is gone, whatever session the
/// controller granted it when it took over. (A node started alone, killed
/// and restarted, was otherwise refused for a whole session timeout, 9 s,
/// and served nothing meanwhile.)
pub fn register_broker(
    image: &ClusterImage,
    sessions: &BrokerSessions,
    registration: BrokerRegistration,
    controller: BrokerId,
    now_ms: u64,
) -> Result<Vec<MetadataRecord>, Refusal> {
    if registration.id.0 < 0 {
        return Err(Refusal::new(
            ErrorCode::INVALID_REQUEST,
            "node.id must be at least 0",
        ));
    }
    match image.brokers.get(&registration.id) {
        Some(known) if known.registration.incarnation == registration.incarnation => Ok(Vec::new()),
        Some(known)
            if registration.id != controller
                && sessions.alive(registration.id, known.epoch, now_ms)
                && !known.fenced =>
        {
            Err(Refusal::new(
                ErrorCode::DUPLICATE_BROKER_REGISTRATION,
                format!(
                    "Another broker is registered with that broker id {} and its session has not expired.",
                    registration.id
                ),
            ))
        }
        // The old incarnation's session expired (or it was this process's)
        // but it is not fenced yet: the new one starts fenced, so the old
        // one's leaderships move in the same batch, as its fencing would
        // have moved them.
        Some(known) if !known.fenced => {
            let id = registration.id;
            let mut records = broker_leaves(image, id, &BTreeSet::from([id]));
            records.push(MetadataRecord::RegisterBroker(registration));
            Ok(records)
        }
        _ => Ok(vec![MetadataRecord::RegisterBroker(registration)]),
    }
}

/// A BrokerHeartbeat, as far as the controller reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatRequest {
    pub broker: BrokerId,
    pub epoch: i64,
    /// The metadata offset the broker has applied.
    pub applied_offset: u64,
    /// Kafka's `WantShutDown`: the broker is stopping and asks that its
    /// leaderships move first (controlled shutdown).
    pub want_shut_down: bool,
    /// The partitions of the broker's failed log directories (Kafka sends
    /// the directories' ids, `OfflineLogDirs`, and its controller knows
    /// which partitions each holds; Brook's brokers name the partitions).
    pub offline: Vec<TopicPartition>,
}

/// What a heartbeat gets back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatOutcome {
    pub error: ErrorCode,
    /// Whether the broker is fenced in the image the controller holds.
    pub fenced: bool,
    /// Kafka's `ShouldShutDown`: a broker that asked to shut down leads
    /// nothing any more and may stop.
    pub should_shut_down: bool,
    pub records: Vec<MetadataRecord>,
}

impl HeartbeatOutcome {
    fn refused(error: ErrorCode) -> HeartbeatOutcome {
        HeartbeatOutcome {
            error,
            fenced: true,
            should_shut_down: false,
            records: Vec::new(),
        }
    }
}

/// BrokerHeartbeat: the session is renewed; a fenced broker that has
/// caught up to its own registration is unfenced, and leads the offline
/// partitions it can ([`elect_offline_partitions`]); its replicas in
/// failed log directories leave their ISRs and leaderships
/// ([`replicas_offline`]); a broker that wants to shut down goes through
/// [`controlled_shutdown`].
pub fn heartbeat(
    image: &ClusterImage,
    sessions: &mut BrokerSessions,
    request: HeartbeatRequest,
    caught_up_at: u64,
    now_ms: u64,
) -> HeartbeatOutcome {
    let (broker, epoch) = (request.broker, request.epoch);
    let Some(known) = image.brokers.get(&broker) else {
        return HeartbeatOutcome::refused(ErrorCode::BROKER_ID_NOT_REGISTERED);
    };
    if known.epoch != epoch {
        return HeartbeatOutcome::refused(ErrorCode::STALE_BROKER_EPOCH);
    }
    sessions.heard(broker, epoch, now_ms);
    sessions.offline.report(broker, &request.offline);
    // Once in controlled shutdown a broker stays in it (as in Kafka's
    // BrokerHeartbeatManager) until it is fenced or registers again.
    if request.want_shut_down || (known.in_controlled_shutdown && !known.fenced) {
        return controlled_shutdown(image, broker, epoch);
    }
    // Unfenced once it serves its own registration (Kafka's rule) and as
    // far as brokers were told every live broker serves: otherwise it
    // could lack a topic the others already show
    // ([`crate::cluster::visibility`]).
    let caught_up = request.applied_offset >= (epoch as u64).max(caught_up_at);
    let mut records = if known.fenced && caught_up {
        let mut records = vec![MetadataRecord::UnfenceBroker { id: broker, epoch }];
        records.extend(elect_offline_partitions(image, broker, &request.offline));
        records
    } else {
        Vec::new()
    };
    // Disjoint from the elections above, which leave these partitions be.
    records.extend(replicas_offline(image, broker, &request.offline));
    HeartbeatOutcome {
        error: ErrorCode::NONE,
        fenced: known.fenced,
        should_shut_down: false,
        records,
    }
}

/// A heartbeat with `want_shut_down` (Kafka's BrokerHeartbeatManager
/// states): a fenced broker may stop at once; one that still leads enters
/// controlled shutdown, which takes it out of every ISR and moves its
/// leaderships; one that leads nothing is fenced and told to stop.
///
/// Kafka also waits until every live broker has applied the offset of the
/// leadership changes before it answers `should_shut_down`; here the
/// controller driver waits until they are committed
/// ([`crate::cluster::quorum::ControllerNode::heartbeat`]).
pub fn controlled_shutdown(image: &ClusterImage, broker: BrokerId, epoch: i64) -> HeartbeatOutcome {
    let Some(known) = image.brokers.get(&broker) else {
        return HeartbeatOutcome::refused(ErrorCode::BROKER_ID_NOT_REGISTERED);
    };
    if known.fenced {
        return HeartbeatOutcome {
            error: ErrorCode::NONE,
            fenced: true,
            should_shut_down: true,
            records: Vec::new(),
        };
    }
    if !image.leads_any(broker) {
        return HeartbeatOutcome {
            error: ErrorCode::NONE,
            fenced: false,
            should_shut_down: true,
            records: fence_brokers(image, &[(broker, epoch)]),
        };
    }
    let mut records = Vec::new();
    if !known.in_controlled_shutdown {
        records.push(MetadataRecord::ControlledShutdown { id: broker, epoch });
    }
    records.extend(broker_leaves(image, broker, &BTreeSet::from([broker])));
    HeartbeatOutcome {
        error: ErrorCode::NONE,
        fenced: false,
        should_shut_down: false,
        records,
    }
}

/// One topic of a CreateTopics request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicRequest {
    pub name: String,
    /// -1: `num.partitions`.
    pub partitions: i32,
    /// -1: `default.replication.factor`.
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    /// Manual replica assignments, (partition, replicas); empty: the
    /// controller places the partitions.
    pub assignments: Vec<(i32, Vec<BrokerId>)>,
    /// The id the asker chose for the new topic, so that the request asked
    /// again finds its own topic ([`create_topics`]); `None`: the
    /// controller draws one.
    pub id: Option<TopicId>,
}

/// The broker defaults a CreateTopics falls back to, and the log
/// settings topic overrides are checked against.
#[derive(Clone, Debug, Default)]
pub struct TopicDefaults {
    pub partitions: i32,
    pub replication_factor: i16,
    pub log: LogConfig,
}

/// CreateTopics for one topic: its records (the topic, each partition's
/// registration with every replica in the ISR and the first as leader, its
/// configs), placed over the live brokers. `id` is the new topic's id,
/// drawn by the caller; it seeds the placement's spread.
pub fn create_topic(
    image: &ClusterImage,
    request: &TopicRequest,
    defaults: &TopicDefaults,
    id: TopicId,
) -> Result<Vec<MetadataRecord>, Refusal> {
    check_new_topic_name(&request.name, image.topic_by_name(&request.name).is_some())?;
    if id.is_zero() || image.topics.contains_key(&id) {
        // Ids are random 128-bit values: the caller draws another.
        return Err(Refusal::new(
            ErrorCode::UNKNOWN_SERVER_ERROR,
            "the new topic id is in use",
        ));
    }
    let partitions = if request.assignments.is_empty() {
        placed_partitions(image, request, defaults, id)?
    } else {
        // Kafka's checks, in its order.
        if request.replication_factor != -1 {
            return Err(Refusal::new(
                ErrorCode::INVALID_REQUEST,
                "A manual partition assignment was specified, but replication factor was not set to -1.",
            ));
        }
        if request.partitions != -1 {
            return Err(Refusal::new(
                ErrorCode::INVALID_REQUEST,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            ));
        }
        manual_partitions(image, id, &request.assignments, None)?
    };
    check_overrides(&defaults.log, &request.configs)
        .map_err(|message| Refusal::new(ErrorCode::INVALID_CONFIG, message))?;
    let mut records = vec![MetadataRecord::Topic {
        name: request.name.clone(),
        id,
    }];
    records.extend(partitions);
    records.extend(
        request
            .configs
            .iter()
            .map(|(key, value)| MetadataRecord::TopicConfig {
                topic: request.name.clone(),
                key: key.clone(),
                value: Some(value.clone()),
            }),
    );
    Ok(records)
}

/// A new topic's name: valid and not taken (`exists`): the rule a one-node
/// broker applies too.
pub fn check_new_topic_name(name: &str, exists: bool) -> Result<(), Refusal> {
    validate_topic_name(name)
        .map_err(|error| Refusal::new(ErrorCode::INVALID_TOPIC_EXCEPTION, error.to_string()))?;
    if exists {
        return Err(Refusal::new(
            ErrorCode::TOPIC_ALREADY_EXISTS,
            format!("Topic '{name}' already exists."),
        ));
    }
    Ok(())
}

/// A new topic's partition count: positive, and within Brook's limit.
pub fn check_partition_count(partitions: i32) -> Result<(), Refusal> {
    if partitions < 1 {
        return Err(Refusal::new(
            ErrorCode::INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
        ));
    }
    if partitions as usize > PARTITIONS_MAX {
        return Err(Refusal::new(
            ErrorCode::INVALID_PARTITIONS,
            format!("{partitions} partitions is over Brook's limit of {PARTITIONS_MAX}"),
        ));
    }
    Ok(())
}

/// The controller's placement of a new topic's partitions.
fn placed_partitions(
    image: &ClusterImage,
    request: &TopicRequest,
    defaults: &TopicDefaults,
    id: TopicId,
) -> Result<Vec<MetadataRecord>, Refusal> {
    let partitions = if request.partitions == -1 {
        defaults.partitions
    } else {
        request.partitions
    };
    check_partition_count(partitions)?;
    let replication_factor = match request.replication_factor {
        -1 => defaults.replication_factor,
        factor => factor,
    };
    if replication_factor < 1 {
        return Err(Refusal::new(
            ErrorCode::INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        ));
    }
    new_partitions(
        image,
        id,
        0,
        partitions as usize,
        replication_factor as usize,
    )
}

/// Registrations for partitions `first ..< first + count` of topic `id`,
/// placed over the live brokers, every replica in the ISR and the first
/// the leader. The topic id seeds the spread, so a topic's partitions
/// continue one walk.
pub(crate) fn new_partitions(
    image: &ClusterImage,
    id: TopicId,
    first: usize,
    count: usize,
    replication_factor: usize,
) -> Result<Vec<MetadataRecord>, Refusal> {
    // Kafka's usable brokers: a broker shutting down takes no new replicas.
    let candidates: Vec<Candidate> = image
        .live_brokers()
        .filter(|broker| !broker.in_controlled_shutdown)
        .map(|broker| Candidate {
            id: broker.registration.id,
            rack: broker.registration.rack.clone(),
        })
        .collect();
    let seed = u64::from_be_bytes(id.0[..8].try_into().expect("16-byte id"));
    let assignment = assign_replicas(
        &candidates,
        count,
        replication_factor,
        first,
        Spread::from_seed(seed),
    )
    .map_err(placement_refusal)?;
    Ok(assignment
        .into_iter()
        .enumerate()
        .map(|(index, replicas)| MetadataRecord::Partition {
            topic: id,
            partition: PartitionId((first + index) as i32),
            registration: PartitionRegistration {
                isr: replicas.clone(),
                leader: replicas[0],
                replicas,
                leader_epoch: LeaderEpoch(0),
                partition_epoch: 0,
            },
        })
        .collect())
}

fn placement_refusal(error: PlacementError) -> Refusal {
    let code = match error {
        PlacementError::PartitionsNotPositive => ErrorCode::INVALID_PARTITIONS,
        _ => ErrorCode::INVALID_REPLICATION_FACTOR,
    };
    Refusal::new(code, error.to_string())
}

/// What a created topic got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Created {
    pub id: TopicId,
    pub partitions: i32,
    pub replication_factor: i16,
}

/// CreateTopics for a whole request, in one batch of records: each topic
/// is checked against the image with the request's earlier topics in it
/// (a name given twice is refused the second time). `ids[i]` is topic
/// `i`'s new id; a topic already registered under its name with that very
/// id is this request asked again (a broker forwards it again when the
/// controller that committed it died before answering): it succeeds again,
/// with no records, where another request's topic of that name is refused.
pub fn create_topics(
    image: &ClusterImage,
    requests: &[TopicRequest],
    defaults: &TopicDefaults,
    ids: &[TopicId],
) -> (Vec<Result<Created, Refusal>>, Vec<MetadataRecord>) {
    assert_eq!(requests.len(), ids.len());
    let mut scratch = image.clone();
    let mut records = Vec::new();
    let results = requests
        .iter()
        .zip(ids)
        .map(|(request, id)| {
            if let Some(registered) = scratch
                .topic_by_name(&request.name)
                .filter(|registered| registered.id == *id)
            {
                // This very request again (its id is the asker's), its
                // first answer lost with a controller that committed it.
                return Ok(created(registered));
            }
            let topic = create_topic(&scratch, request, defaults, *id)?;
            scratch.apply(scratch.offset + 1, &topic).map_err(|error| {
                Refusal::new(ErrorCode::UNKNOWN_SERVER_ERROR, error.to_string())
            })?;
            let registered = scratch.topics.get(id).expect("just applied");
            records.extend(topic);
            Ok(created(registered))
        })
        .collect();
    (results, records)
}

fn created(registered: &TopicRegistration) -> Created {
    Created {
        id: registered.id,
        partitions: registered.partitions.len() as i32,
        replication_factor: registered
            .partitions
            .first()
            .map_or(0, |first| first.replicas.len() as i16),
    }
}

/// DeleteTopics for a whole request, in one batch.
pub fn delete_topics(
    image: &ClusterImage,
    names: &[String],
) -> (Vec<Result<TopicId, Refusal>>, Vec<MetadataRecord>) {
    let mut records = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let results = names
        .iter()
        .map(|name| {
            let removal = delete_topic(image, name)?;
            let id = image.topic_by_name(name).expect("delete_topic found it").id;
            if seen.insert(id) {
                records.extend(removal);
            }
            Ok(id)
        })
        .collect();
    (results, records)
}

/// DeleteTopics for one topic.
pub fn delete_topic(image: &ClusterImage, name: &str) -> Result<Vec<MetadataRecord>, Refusal> {
    let topic = image.topic_by_name(name).ok_or_else(|| {
        Refusal::new(
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            "This server does not host this topic-partition.",
        )
    })?;
    Ok(vec![MetadataRecord::RemoveTopic { id: topic.id }])
}

#[cfg(test)]
pub(crate) mod tests;
