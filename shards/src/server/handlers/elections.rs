//! ElectLeaders (KIP-460): `kafka-leader-election.sh` and
//! `Admin.electLeaders` move partitions' leaderships back to their
//! preferred replicas (PREFERRED) or give a leaderless partition any
//! replica that may lead (UNCLEAN). Any broker forwards it to the active
//! controller, as Kafka's brokers do, and answers once the elections are
//! in its own metadata; a one-node Brook answers as a one-broker cluster
//! would (every partition is led by its only replica).

use std::rc::Rc;

use brook_engine::cluster::elections::{ElectionType, TopicElections};
use brook_engine::cluster::image::ShardId;
use brook_engine::cluster::peer_wire::{PeerRequest, PeerResponse};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};

use super::{text, topic_name};
use crate::server::quorum::FORWARD_TIMEOUT;
use crate::server::response::{Response, encode};
use crate::server::shard::Shard;

pub async fn elect_leaders(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: ElectLeadersRequest = request.decode_body()?;
    let asked: Option<Vec<(String, Vec<i32>)>> = body.topic_partitions.as_ref().map(|topics| {
        topics
            .iter()
            .map(|topic| (topic.topic.to_string(), topic.partitions.clone()))
            .collect()
    });
    // v0 has no election type: it asks for the preferred replicas.
    let election = match body.election_type {
        0 => ElectionType::Preferred,
        1 => ElectionType::Unclean,
        other => {
            let message = format!("Unknown election type {other}");
            return answer(
                request,
                ErrorCode::INVALID_REQUEST,
                failed(asked.as_deref(), ErrorCode::INVALID_REQUEST, &message),
            );
        }
    };
    let forwarded = PeerRequest::ElectLeaders {
        election,
        topics: asked.clone(),
    };
    let answered = shard
        .on_shard(ShardId(0), move |first| async move {
            crate::server::quorum::ask_controller(&first, forwarded, FORWARD_TIMEOUT).await
        })
        .await;
    match answered {
        Ok(Some(PeerResponse::Elected { results, offset })) => {
            crate::server::quorum::wait_for_offset(shard, offset, &[]).await;
            answer(request, ErrorCode::NONE, results)
        }
        _ => {
            let error = ErrorCode::REQUEST_TIMED_OUT;
            let message = "no active controller answered in time";
            answer(request, error, failed(asked.as_deref(), error, message))
        }
    }
}

/// Every asked partition failed with `error` (none asked: none listed).
fn failed(
    asked: Option<&[(String, Vec<i32>)]>,
    error: ErrorCode,
    message: &str,
) -> Vec<TopicElections> {
    use brook_engine::cluster::elections::PartitionElection;
    asked
        .unwrap_or_default()
        .iter()
        .map(|(topic, partitions)| TopicElections {
            topic: topic.clone(),
            partitions: partitions
                .iter()
                .map(|&partition| PartitionElection {
                    partition,
                    error,
                    message: Some(message.to_owned()),
                })
                .collect(),
        })
        .collect()
}

/// The response; its top-level error exists from v1 on.
fn answer(
    request: &Request,
    error: ErrorCode,
    results: Vec<TopicElections>,
) -> Result<Response, FrameError> {
    let results = results
        .into_iter()
        .map(|topic| {
            ReplicaElectionResult::default()
                .with_topic(topic_name(&topic.topic))
                .with_partition_result(
                    topic
                        .partitions
                        .into_iter()
                        .map(|partition| {
                            PartitionResult::default()
                                .with_partition_id(partition.partition)
                                .with_error_code(partition.error.0)
                                .with_error_message(partition.message.as_deref().map(text))
                        })
                        .collect(),
                )
        })
        .collect();
    let error = if request.api_version >= 1 {
        error
    } else {
        ErrorCode::NONE
    };
    let response = ElectLeadersResponse::default()
        .with_error_code(error.0)
        .with_replica_election_results(results);
    encode(request, &response)
}
