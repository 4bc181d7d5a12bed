//! One handler per API. Each decodes its request body, does its work
//! (locally or on the owning shards), and encodes its response; per-partition
//! failures are Kafka error codes in the response, and a request that cannot
//! be decoded closes the connection.

mod admin;
mod cluster;
mod configs;
mod elections;
pub(crate) mod fetch;
mod group_offsets;
mod groups;
mod offsets;
pub(crate) mod produce;
mod producers;
mod quorum;
mod transactions;
mod txn_offsets;

use std::rc::Rc;

use futures::FutureExt;
use futures::future::LocalBoxFuture;

use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use brook_engine::protocol::versions::api_versions_response;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::server::response::{Response, encode};
use crate::server::shard::Shard;

/// Starts handling `request`: what must happen in request order (a
/// Produce's appends) happens before this returns; the rest of the work is
/// the returned future, which the connection runs alongside later requests.
pub async fn start(shard: &Rc<Shard>, request: Request) -> LocalBoxFuture<'static, Response> {
    if request.api_key == ApiKey::Produce {
        return produce::start(shard, request).await;
    }
    let shard = shard.clone();
    async move { handle(&shard, request).await }.boxed_local()
}

async fn handle(shard: &Rc<Shard>, request: Request) -> Response {
    let handled = match request.api_key {
        ApiKey::ApiVersions => api_versions(&request),
        ApiKey::Metadata => cluster::metadata(shard, &request).await,
        ApiKey::DescribeCluster => cluster::describe_cluster(shard, &request).await,
        ApiKey::Fetch => fetch::handle(shard, &request).await,
        ApiKey::ListOffsets => offsets::list_offsets(shard, &request).await,
        ApiKey::OffsetForLeaderEpoch => offsets::offset_for_leader_epoch(shard, &request).await,
        ApiKey::DeleteRecords => offsets::delete_records(shard, &request).await,
        ApiKey::CreateTopics => admin::create_topics(shard, &request).await,
        ApiKey::DeleteTopics => admin::delete_topics(shard, &request).await,
        ApiKey::CreatePartitions => admin::create_partitions(shard, &request).await,
        ApiKey::DescribeConfigs => configs::describe_configs(shard, &request),
        ApiKey::IncrementalAlterConfigs => {
            configs::incremental_alter_configs(shard, &request).await
        }
        ApiKey::AlterConfigs => configs::alter_configs(shard, &request).await,
        ApiKey::ListConfigResources => configs::list_config_resources(shard, &request),
        ApiKey::DescribeLogDirs => cluster::describe_log_dirs(shard, &request).await,
        ApiKey::AlterReplicaLogDirs => cluster::alter_replica_log_dirs(shard, &request),
        ApiKey::DescribeTopicPartitions => {
            cluster::describe_topic_partitions(shard, &request).await
        }
        ApiKey::DescribeQuorum => quorum::describe_quorum(shard, &request).await,
        ApiKey::ElectLeaders => elections::elect_leaders(shard, &request).await,
        ApiKey::FindCoordinator => groups::find_coordinator(shard, &request).await,
        ApiKey::JoinGroup => groups::join_group(shard, &request).await,
        ApiKey::SyncGroup => groups::sync_group(shard, &request).await,
        ApiKey::Heartbeat => groups::heartbeat(shard, &request).await,
        ApiKey::LeaveGroup => groups::leave_group(shard, &request).await,
        ApiKey::OffsetCommit => group_offsets::offset_commit(shard, &request).await,
        ApiKey::OffsetFetch => group_offsets::offset_fetch(shard, &request).await,
        ApiKey::ListGroups => group_offsets::list_groups(shard, &request).await,
        ApiKey::DescribeGroups => group_offsets::describe_groups(shard, &request).await,
        ApiKey::DeleteGroups => group_offsets::delete_groups(shard, &request).await,
        ApiKey::OffsetDelete => group_offsets::offset_delete(shard, &request).await,
        ApiKey::InitProducerId => producers::init_producer_id(shard, &request).await,
        ApiKey::DescribeProducers => producers::describe_producers(shard, &request).await,
        ApiKey::AddPartitionsToTxn => transactions::add_partitions_to_txn(shard, &request).await,
        ApiKey::AddOffsetsToTxn => transactions::add_offsets_to_txn(shard, &request).await,
        ApiKey::EndTxn => transactions::end_txn(shard, &request).await,
        ApiKey::DescribeTransactions => transactions::describe_transactions(shard, &request).await,
        ApiKey::ListTransactions => transactions::list_transactions(shard, &request).await,
        ApiKey::TxnOffsetCommit => txn_offsets::txn_offset_commit(shard, &request).await,
        ApiKey::WriteTxnMarkers => transactions::write_txn_markers(shard, &request).await,
        other => Err(FrameError::Malformed {
            api_key: other,
            version: request.api_version,
            reason: "not served".into(),
        }),
    };
    handled.unwrap_or_else(|error| Response::Close(error.to_string()))
}

fn api_versions(request: &Request) -> Result<Response, FrameError> {
    request.decode_body::<ApiVersionsRequest>()?;
    encode(request, &api_versions_response(ErrorCode::NONE))
}

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

pub(crate) fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}
