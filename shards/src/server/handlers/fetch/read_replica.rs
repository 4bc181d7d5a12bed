//! Fetch from the closest replica (KIP-392), the handler's side: which
//! replica answers a fetch ([`access`], Kafka's rules in
//! [`brook_engine::replica::read_replica`]: a follower serves consumers of
//! Fetch v11+), and a leader's answer sending a consumer to a replica of
//! its rack ([`not_read_here`]).

use std::borrow::Cow;
use std::rc::Rc;

use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::fetch_session::PartitionFetch;
use brook_engine::protocol::frame::Request;
use brook_engine::replica::read_replica::{Fetcher, ReplicaSelector, fetch_access};
use brook_engine::replica::replication::{Role, role_of};
use brook_engine::types::{BrokerId, PartitionId, TopicPartition};
use kafka_protocol::messages::FetchRequest;

use super::{Fetched, Isolation, Read};
use crate::server::replication::ReplicaHost;
use crate::server::response::Records;
use crate::server::shard::Shard;

/// Where a consumer is, for a leader with `replica.selector.class` to
/// choose the replica it reads from: its fetch's `rack_id` (v11+, not
/// empty) and the client listener its request came in on.
#[derive(Clone, Debug)]
pub(super) struct ClientPlace<'a> {
    pub(super) rack: Cow<'a, str>,
    pub(super) listener: usize,
}

impl ClientPlace<'_> {
    pub(super) fn borrowed(&self) -> ClientPlace<'_> {
        ClientPlace {
            rack: Cow::Borrowed(&self.rack),
            listener: self.listener,
        }
    }

    pub(super) fn into_owned(self) -> ClientPlace<'static> {
        ClientPlace {
            rack: Cow::Owned(self.rack.into_owned()),
            listener: self.listener,
        }
    }
}

/// A consumer's fetch of a partition answered with the replica to read it
/// from instead (`preferred_read_replica`), no records, and this leader's
/// offsets, as Kafka answers.
#[derive(Clone, Copy, Debug)]
pub(super) struct Elsewhere {
    pub(super) replica: BrokerId,
    pub(super) high_watermark: i64,
    pub(super) last_stable_offset: i64,
    pub(super) log_start_offset: i64,
}

/// A consumer's place when this broker has a replica selector and the
/// fetch names a rack (Kafka's `RackAwareReplicaSelector` ignores an empty
/// one).
pub(super) fn client_place<'a>(
    shard: &Shard,
    request: &Request,
    body: &'a FetchRequest,
    replica: Option<BrokerId>,
) -> Option<ClientPlace<'a>> {
    let selector = shard.context.config.replica_selector;
    let asks = replica.is_none() && request.api_version >= 11 && !body.rack_id.is_empty();
    (asks && selector != ReplicaSelector::LeaderOnly).then(|| ClientPlace {
        rack: Cow::Borrowed(body.rack_id.as_str()),
        listener: request.listener,
    })
}

/// Whether this broker answers `fetcher`'s fetch of `topic`'s `partition`:
/// what it is for the partition (no registration yet: no replica) and the
/// epoch it serves, under Kafka's rules ([`fetch_access`]).
pub(super) fn access(
    shard: &Shard,
    topic: &str,
    partition: i32,
    fetcher: Fetcher,
    fetch: &PartitionFetch,
) -> Result<(), ErrorCode> {
    let this = BrokerId(shard.context.broker_id);
    let (role, epoch) = shard
        .with_registration(topic, PartitionId(partition), |registration| {
            (role_of(registration, this), registration.leader_epoch)
        })
        .unwrap_or((
            Role::Outsider,
            shard.leader_epoch(topic, PartitionId(partition)),
        ));
    fetch_access(role, fetcher, fetch.current_leader_epoch, epoch)
}

/// A consumer's read answered without reading, on the owning shard: a
/// replica whose replication has not set its high watermark yet (an
/// outsider's log, or one the image only just made a replica) does not
/// serve consumers as a follower; a leader with a replica selector may
/// send the consumer to a replica of its rack.
pub(super) fn not_read_here(shard: &Rc<Shard>, read: &Read<'_>) -> Option<Fetched<Records>> {
    if matches!(read.isolation, Isolation::Replica(_)) {
        return None;
    }
    let leads = shard.leads(&read.topic, read.partition);
    if leads && read.client.is_none() {
        return None;
    }
    let topic_partition = TopicPartition {
        topic: read.topic.to_string(),
        partition: read.partition,
    };
    if !leads {
        let replicated = shard.replication.is_replicated(&topic_partition);
        return (!replicated).then_some(Fetched::Error(ErrorCode::NOT_LEADER_OR_FOLLOWER));
    }
    let client = read.client.as_ref()?;
    let replica = ReplicaHost::preferred_read_replica(
        shard,
        &topic_partition,
        read.offset,
        &client.rack,
        client.listener,
    )?;
    let log = shard.store.partition_at(&read.topic, read.partition)?;
    let high_watermark = log.high_watermark();
    Some(Fetched::Elsewhere(Elsewhere {
        replica,
        high_watermark: high_watermark.0,
        last_stable_offset: log.last_stable_offset(high_watermark).0,
        log_start_offset: log.log_start_offset().0,
    }))
}
