//! DescribeQuorum (KIP-595/KIP-853): the controller quorum as the active
//! controller sees it, for `kafka-metadata-quorum describe --status
//! --replication`. Any broker forwards it to the active controller, as
//! Kafka's brokers do.

use std::rc::Rc;

use brook_engine::cluster::image::ShardId;
use brook_engine::cluster::node_config::ClusterSettings;
use brook_engine::cluster::peer_wire::{PeerRequest, PeerResponse};
use brook_engine::cluster::quorum::{QuorumDescription, ReplicaProgress};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse};

use super::{text, topic_name};
use crate::server::quorum::FORWARD_TIMEOUT;
use crate::server::response::{Response, encode};
use crate::server::shard::Shard;

/// The metadata log's topic-partition, the only one DescribeQuorum knows.
const METADATA_TOPIC: &str = "__cluster_metadata";

pub async fn describe_quorum(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: DescribeQuorumRequest = request.decode_body()?;
    let settings = shard.context.cluster.clone();
    // Kafka's `hasValidTopicPartition`: exactly the metadata partition.
    let valid = matches!(body.topics.as_slice(), [topic]
        if topic.topic_name.0.as_str() == METADATA_TOPIC
            && matches!(topic.partitions.as_slice(), [partition] if partition.partition_index == 0));
    if !valid {
        let topics = body
            .topics
            .iter()
            .map(|topic| {
                TopicData::default()
                    .with_topic_name(topic.topic_name.clone())
                    .with_partitions(
                        topic
                            .partitions
                            .iter()
                            .map(|partition| {
                                PartitionData::default()
                                    .with_partition_index(partition.partition_index)
                                    .with_error_code(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0)
                            })
                            .collect(),
                    )
            })
            .collect();
        return encode(
            request,
            &DescribeQuorumResponse::default().with_topics(topics),
        );
    }
    let answered = shard
        .on_shard(ShardId(0), move |first| async move {
            crate::server::quorum::ask_controller(
                &first,
                PeerRequest::DescribeQuorum,
                FORWARD_TIMEOUT,
            )
            .await
        })
        .await;
    let partition = match answered {
        Ok(Some(PeerResponse::Quorum(described))) => {
            described_partition(&described, request.api_version)
        }
        // Kafka's answer from a voter that is not the leader: retriable.
        _ => PartitionData::default()
            .with_error_code(ErrorCode::NOT_LEADER_OR_FOLLOWER.0)
            .with_leader_id(BrokerId(-1))
            .with_leader_epoch(-1)
            .with_high_watermark(-1),
    };
    let nodes = if request.api_version >= 2 {
        voter_nodes(&settings)
    } else {
        Vec::new()
    };
    let response = DescribeQuorumResponse::default()
        .with_topics(vec![
            TopicData::default()
                .with_topic_name(topic_name(METADATA_TOPIC))
                .with_partitions(vec![partition]),
        ])
        .with_nodes(nodes);
    encode(request, &response)
}

/// The partition's answer; timestamps only from v1 on (v0 has none).
fn described_partition(described: &QuorumDescription, version: i16) -> PartitionData {
    let at = |timestamp: Option<u64>| match timestamp {
        Some(at) if version >= 1 => at as i64,
        _ => -1,
    };
    let states = |replicas: &[ReplicaProgress]| {
        replicas
            .iter()
            .map(|replica| {
                ReplicaState::default()
                    .with_replica_id(BrokerId(replica.node.0))
                    .with_log_end_offset(replica.log_end_offset as i64)
                    .with_last_fetch_timestamp(at(replica.last_fetch_ms))
                    .with_last_caught_up_timestamp(at(replica.last_caught_up_ms))
            })
            .collect()
    };
    PartitionData::default()
        .with_partition_index(0)
        .with_leader_id(BrokerId(described.leader.0))
        .with_leader_epoch(i32::try_from(described.epoch).unwrap_or(i32::MAX))
        .with_high_watermark(described.high_watermark as i64)
        .with_current_voters(states(&described.voters))
        .with_observers(states(&described.observers))
}

/// Each voter's controller endpoint (DescribeQuorum v2's `Nodes`), from
/// `controller.quorum.voters`.
fn voter_nodes(settings: &ClusterSettings) -> Vec<Node> {
    settings
        .voters
        .iter()
        .map(|voter| {
            Node::default()
                .with_node_id(BrokerId(voter.id.0))
                .with_listeners(vec![
                    Listener::default()
                        .with_name(text(&settings.controller_listener))
                        .with_host(text(&voter.host))
                        .with_port(voter.port),
                ])
        })
        .collect()
}
