//! Requests this broker sends its peers as a Kafka client, for a partition
//! or coordinator another broker leads (Kafka's inter-broker send threads):
//! - a transaction's COMMIT/ABORT marker for a partition led elsewhere
//!   (WriteTxnMarkers, as Kafka's coordinator sends it);
//! - a partition leader's check that a transactional batch's partition is
//!   in its open transaction, when the transaction's coordinator is on
//!   another broker (AddPartitionsToTxn v4+ with VerifyOnly, KIP-890).
//!
//! Each shard keeps one connection per peer ([`Cluster`]'s pool, opened on
//! use with Kafka's reconnect backoff), to the first listener the peer
//! registered. A request that gets no answer within
//! [`PEER_REQUEST_TIMEOUT`] fails as NETWORK_EXCEPTION (retriable) and its
//! connection is closed, so a paused peer costs a retry, not a hang.

use std::net::SocketAddr;
use std::time::Duration;

use brook_engine::protocol::errors::ErrorCode;
use brook_engine::txn::coordinator::AddPartitionsRequest;
use brook_engine::txn::{MarkerWrite, TransactionResult};
use brook_engine::types::{BrokerId, TopicPartition};
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, ProducerId, TransactionalId,
    WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::client::cluster::{Cluster, resolve, topic_name, within};
use crate::server::shard::Shard;

/// Kafka's `request.timeout.ms` for inter-broker requests.
pub const PEER_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// WriteTxnMarkers as Kafka 4 sends it.
const WRITE_TXN_MARKERS_VERSION: i16 = 1;
/// AddPartitionsToTxn's broker-to-broker versions start at v4 (KIP-890).
const ADD_PARTITIONS_TO_TXN_VERSION: i16 = 5;

/// A shard's connections to the other brokers.
pub struct Peers(Cluster);

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers").finish_non_exhaustive()
    }
}

impl Peers {
    pub fn new(local: SocketAddr, broker_id: i32, shard: u16) -> Peers {
        let peers = Cluster::new(local, &format!("brook-broker-{broker_id}-{shard}"));
        peers.set_request_timeout(PEER_REQUEST_TIMEOUT);
        Peers(peers)
    }
}

/// `broker`'s inter-broker endpoint: the first listener it registered.
pub fn broker_address(shard: &Shard, broker: BrokerId) -> Option<SocketAddr> {
    let view = shard.cluster_view()?;
    let endpoint = view
        .image
        .brokers
        .get(&broker)?
        .registration
        .listeners
        .first()?
        .clone();
    resolve(&format!("{}:{}", endpoint.host, endpoint.port)).ok()
}

/// The broker leading `topic_partition` when it is another one (the
/// cluster's image names it); `None` when this broker leads it or no
/// broker does.
pub fn leader_elsewhere(shard: &Shard, topic_partition: &TopicPartition) -> Option<BrokerId> {
    let leader = shard.with_registration(
        &topic_partition.topic,
        topic_partition.partition,
        |registration| registration.leader,
    )?;
    (leader.0 >= 0 && leader.0 != shard.context.broker_id).then_some(leader)
}

/// Sends `body` to `broker` and waits for its answer, within the peer
/// request timeout. Every failure to get an answer is NETWORK_EXCEPTION.
async fn request<Q: Encodable, R: Decodable>(
    shard: &Shard,
    broker: BrokerId,
    api_key: ApiKey,
    version: i16,
    body: &Q,
) -> Result<R, ErrorCode> {
    let address = broker_address(shard, broker).ok_or(ErrorCode::NETWORK_EXCEPTION)?;
    let connection = shard.peers.0.connection(address).await.map_err(|error| {
        tracing::debug!(broker = %broker, %error, "connecting to a peer failed");
        ErrorCode::NETWORK_EXCEPTION
    })?;
    let answered = within(
        "a peer's answer",
        PEER_REQUEST_TIMEOUT,
        connection.request(api_key, version, body),
    )
    .await;
    answered.map_err(|error| {
        tracing::warn!(broker = %broker, ?api_key, %error, "a request to a peer failed");
        // A late answer would pair with the next request: start over.
        let connection = connection.clone();
        glommio::spawn_local(async move { connection.close().await }).detach();
        ErrorCode::NETWORK_EXCEPTION
    })
}

/// Writes one partition's marker on its leader `broker` (WriteTxnMarkers
/// with one marker for one partition); the partition's error, or the
/// request's.
pub async fn write_marker(
    shard: &Shard,
    broker: BrokerId,
    markers: &MarkerWrite,
    topic_partition: &TopicPartition,
) -> Result<(), ErrorCode> {
    let marker = WritableTxnMarker::default()
        .with_producer_id(ProducerId(markers.producer_id.0))
        .with_producer_epoch(markers.producer_epoch.0)
        .with_transaction_result(markers.result == TransactionResult::Commit)
        .with_coordinator_epoch(markers.coordinator_epoch)
        .with_topics(vec![
            WritableTxnMarkerTopic::default()
                .with_name(topic_name(&topic_partition.topic))
                .with_partition_indexes(vec![topic_partition.partition.0]),
        ]);
    let body = WriteTxnMarkersRequest::default().with_markers(vec![marker]);
    let response: WriteTxnMarkersResponse = request(
        shard,
        broker,
        ApiKey::WriteTxnMarkers,
        WRITE_TXN_MARKERS_VERSION,
        &body,
    )
    .await?;
    let code = response
        .markers
        .iter()
        .flat_map(|marker| &marker.topics)
        .filter(|topic| topic.name.as_str() == topic_partition.topic)
        .flat_map(|topic| &topic.partitions)
        .find(|partition| partition.partition_index == topic_partition.partition.0)
        .map_or(ErrorCode::UNKNOWN_SERVER_ERROR, |partition| {
            ErrorCode(partition.error_code)
        });
    if code.is_error() { Err(code) } else { Ok(()) }
}

/// Asks the transaction's coordinator on `broker` whether `request`'s
/// partitions are in its open transaction (VerifyOnly); each partition's
/// code, or the request's error.
pub async fn verify_partitions(
    shard: &Shard,
    broker: BrokerId,
    request: &AddPartitionsRequest,
) -> Result<Vec<(TopicPartition, ErrorCode)>, ErrorCode> {
    let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
    for partition in &request.partitions {
        match topics
            .iter_mut()
            .find(|topic| topic.name.as_str() == partition.topic)
        {
            Some(topic) => topic.partitions.push(partition.partition.0),
            None => topics.push(
                AddPartitionsToTxnTopic::default()
                    .with_name(topic_name(&partition.topic))
                    .with_partitions(vec![partition.partition.0]),
            ),
        }
    }
    let transaction = AddPartitionsToTxnTransaction::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(
            request.transactional_id.clone(),
        )))
        .with_producer_id(ProducerId(request.producer_id.0))
        .with_producer_epoch(request.producer_epoch.0)
        .with_verify_only(true)
        .with_topics(topics);
    let body = AddPartitionsToTxnRequest::default().with_transactions(vec![transaction]);
    let response: AddPartitionsToTxnResponse = self::request(
        shard,
        broker,
        ApiKey::AddPartitionsToTxn,
        ADD_PARTITIONS_TO_TXN_VERSION,
        &body,
    )
    .await?;
    if response.error_code != 0 {
        return Err(ErrorCode(response.error_code));
    }
    Ok(response
        .results_by_transaction
        .iter()
        .filter(|result| result.transactional_id.as_str() == request.transactional_id)
        .flat_map(|result| &result.topic_results)
        .flat_map(|topic| {
            topic.results_by_partition.iter().map(|partition| {
                (
                    TopicPartition::new(topic.name.as_str(), partition.partition_index),
                    ErrorCode(partition.partition_error_code),
                )
            })
        })
        .collect())
}
