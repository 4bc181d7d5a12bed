//! The error codes a response carries, for `brook_request_errors_total`:
//! Kafka's `RequestMetrics` `ErrorsPerSec{request, error}`, which each
//! response's `errorCounts()` feeds. Every error code in the response
//! counts, the response's own and each topic's, partition's or member's,
//! as Kafka counts them; NONE is not counted.

use brook_engine::protocol::fetch::FetchResponseData;
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, AlterConfigsResponse,
    AlterReplicaLogDirsResponse, ApiVersionsResponse, CreatePartitionsResponse,
    CreateTopicsResponse, DeleteGroupsResponse, DeleteRecordsResponse, DeleteTopicsResponse,
    DescribeClusterResponse, DescribeConfigsResponse, DescribeGroupsResponse,
    DescribeLogDirsResponse, DescribeProducersResponse, DescribeQuorumResponse,
    DescribeTopicPartitionsResponse, DescribeTransactionsResponse, ElectLeadersResponse,
    EndTxnResponse, FindCoordinatorResponse, HeartbeatResponse, IncrementalAlterConfigsResponse,
    InitProducerIdResponse, JoinGroupResponse, LeaveGroupResponse, ListConfigResourcesResponse,
    ListGroupsResponse, ListOffsetsResponse, ListTransactionsResponse, MetadataResponse,
    OffsetCommitResponse, OffsetDeleteResponse, OffsetFetchResponse, OffsetForLeaderEpochResponse,
    ProduceResponse, SyncGroupResponse, TxnOffsetCommitResponse, WriteTxnMarkersResponse,
};

/// Each error code in a response and how often it occurs. No allocation
/// while a response carries no error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorCounts(Vec<(i16, u32)>);

impl ErrorCounts {
    pub fn add(&mut self, code: i16) {
        if code == 0 {
            return;
        }
        match self.0.iter_mut().find(|(counted, _)| *counted == code) {
            Some((_, count)) => *count += 1,
            None => self.0.push((code, 1)),
        }
    }

    /// Each error code with its count.
    pub fn iter(&self) -> impl Iterator<Item = (i16, u32)> + '_ {
        self.0.iter().copied()
    }
}

/// A response whose error codes [`ErrorCounts`] can count.
pub trait ErrorCodes {
    fn error_codes(&self, counts: &mut ErrorCounts);
}

/// `Response: path, …;` where a path is the field of an error code,
/// through the lists that hold it: `error_code` is the response's own,
/// `topics.partitions.error_code` each partition's of each topic.
macro_rules! error_codes {
    ($($response:ident: $($first:ident $(.$rest:ident)*),+;)*) => {
        $(impl ErrorCodes for $response {
            fn error_codes(&self, counts: &mut ErrorCounts) {
                $(count_at!(counts, self, $first $(.$rest)*);)+
            }
        })*
    };
}

macro_rules! count_at {
    ($counts:ident, $at:expr, $code:ident) => {
        $counts.add($at.$code)
    };
    ($counts:ident, $at:expr, $list:ident $(.$rest:ident)+) => {
        for item in &$at.$list {
            count_at!($counts, item, $($rest).+);
        }
    };
}

error_codes! {
    AddOffsetsToTxnResponse: error_code;
    AddPartitionsToTxnResponse: error_code, results_by_topic_v3_and_below.results_by_partition.partition_error_code, results_by_transaction.topic_results.results_by_partition.partition_error_code;
    AlterConfigsResponse: responses.error_code;
    AlterReplicaLogDirsResponse: results.partitions.error_code;
    ApiVersionsResponse: error_code;
    CreatePartitionsResponse: results.error_code;
    CreateTopicsResponse: topics.error_code;
    DeleteGroupsResponse: results.error_code;
    DeleteRecordsResponse: topics.partitions.error_code;
    DeleteTopicsResponse: responses.error_code;
    DescribeClusterResponse: error_code;
    DescribeConfigsResponse: results.error_code;
    DescribeGroupsResponse: groups.error_code;
    DescribeLogDirsResponse: error_code, results.error_code;
    DescribeProducersResponse: topics.partitions.error_code;
    DescribeQuorumResponse: error_code, topics.partitions.error_code;
    ElectLeadersResponse: error_code, replica_election_results.partition_result.error_code;
    DescribeTopicPartitionsResponse: topics.error_code, topics.partitions.error_code;
    DescribeTransactionsResponse: transaction_states.error_code;
    EndTxnResponse: error_code;
    FindCoordinatorResponse: error_code, coordinators.error_code;
    HeartbeatResponse: error_code;
    IncrementalAlterConfigsResponse: responses.error_code;
    InitProducerIdResponse: error_code;
    JoinGroupResponse: error_code;
    LeaveGroupResponse: error_code, members.error_code;
    ListConfigResourcesResponse: error_code;
    ListGroupsResponse: error_code;
    ListOffsetsResponse: topics.partitions.error_code;
    ListTransactionsResponse: error_code;
    MetadataResponse: error_code, topics.error_code, topics.partitions.error_code;
    OffsetCommitResponse: topics.partitions.error_code;
    OffsetDeleteResponse: error_code, topics.partitions.error_code;
    OffsetFetchResponse: error_code, groups.error_code, topics.partitions.error_code, groups.topics.partitions.error_code;
    OffsetForLeaderEpochResponse: topics.partitions.error_code;
    ProduceResponse: responses.partition_responses.error_code;
    SyncGroupResponse: error_code;
    TxnOffsetCommitResponse: topics.partitions.error_code;
    WriteTxnMarkersResponse: markers.topics.partitions.error_code;
    FetchResponseData: error_code, topics.partitions.error_code;
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };

    use super::*;

    #[test]
    fn every_nested_error_code_counts_and_none_does_not() {
        let partition =
            |error_code| PartitionProduceResponse::default().with_error_code(error_code);
        let response = ProduceResponse::default().with_responses(vec![
            TopicProduceResponse::default().with_partition_responses(vec![
                partition(6),
                partition(0),
                partition(19),
            ]),
            TopicProduceResponse::default().with_partition_responses(vec![partition(6)]),
        ]);
        let mut counts = ErrorCounts::default();
        response.error_codes(&mut counts);
        assert_eq!(counts.iter().collect::<Vec<_>>(), vec![(6, 2), (19, 1)]);

        let mut counts = ErrorCounts::default();
        HeartbeatResponse::default().error_codes(&mut counts);
        assert_eq!(counts, ErrorCounts::default());
    }
}
