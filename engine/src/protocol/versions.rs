//! The API versions Brook implements, and the ApiVersions response that
//! advertises exactly them.
//!
//! Minimum versions are Kafka 4.x's (KIP-896 removed older ones). One
//! exception, as Kafka 4.0 does (KAFKA-18659): Produce v0–v2 are advertised but
//! rejected, because librdkafka disables compression unless a broker lists
//! Produce v0.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::api_versions_response::{ApiVersion, ApiVersionsResponse};

use crate::protocol::errors::ErrorCode;

/// An API and the versions of it Brook serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Supported {
    pub api_key: ApiKey,
    /// Lowest version advertised.
    pub advertised_min: i16,
    /// Lowest version accepted.
    pub min: i16,
    pub max: i16,
}

const fn api(api_key: ApiKey, min: i16, max: i16) -> Supported {
    Supported {
        api_key,
        advertised_min: min,
        min,
        max,
    }
}

/// Every API Brook answers, with its version range: the versions Kafka 4.1
/// serves (its stable `validVersions`, which are what the `kafka-protocol`
/// crate generates), so that clients reading ApiVersions take Brook for 4.1.
pub const SUPPORTED: &[Supported] = &[
    Supported {
        api_key: ApiKey::Produce,
        advertised_min: 0,
        min: 3,
        max: 13,
    },
    api(ApiKey::Fetch, 4, 18),
    api(ApiKey::ListOffsets, 1, 10),
    api(ApiKey::Metadata, 0, 13),
    api(ApiKey::ApiVersions, 0, 4),
    api(ApiKey::CreateTopics, 2, 7),
    api(ApiKey::DeleteTopics, 1, 6),
    api(ApiKey::DeleteRecords, 0, 2),
    api(ApiKey::OffsetForLeaderEpoch, 2, 4),
    api(ApiKey::DescribeConfigs, 1, 4),
    api(ApiKey::AlterConfigs, 0, 2),
    api(ApiKey::AlterReplicaLogDirs, 1, 2),
    api(ApiKey::DescribeLogDirs, 1, 4),
    api(ApiKey::CreatePartitions, 0, 3),
    api(ApiKey::IncrementalAlterConfigs, 0, 1),
    api(ApiKey::DescribeCluster, 0, 2),
    api(ApiKey::ListConfigResources, 0, 1),
    api(ApiKey::DescribeTopicPartitions, 0, 0),
    api(ApiKey::DescribeQuorum, 0, 2),
    api(ApiKey::ElectLeaders, 0, 2),
    api(ApiKey::FindCoordinator, 0, 6),
    api(ApiKey::JoinGroup, 0, 9),
    api(ApiKey::SyncGroup, 0, 5),
    api(ApiKey::Heartbeat, 0, 4),
    api(ApiKey::LeaveGroup, 0, 5),
    api(ApiKey::OffsetCommit, 2, 9),
    api(ApiKey::OffsetFetch, 1, 9),
    api(ApiKey::ListGroups, 0, 5),
    api(ApiKey::DescribeGroups, 0, 6),
    api(ApiKey::DeleteGroups, 0, 2),
    api(ApiKey::OffsetDelete, 0, 0),
    api(ApiKey::InitProducerId, 0, 5),
    api(ApiKey::AddPartitionsToTxn, 0, 5),
    api(ApiKey::AddOffsetsToTxn, 0, 4),
    api(ApiKey::EndTxn, 0, 5),
    api(ApiKey::TxnOffsetCommit, 0, 5),
    api(ApiKey::WriteTxnMarkers, 1, 1),
    api(ApiKey::DescribeProducers, 0, 0),
    api(ApiKey::DescribeTransactions, 0, 0),
    api(ApiKey::ListTransactions, 0, 2),
];

/// The served range of `api_key`, if Brook implements it.
pub fn supported(api_key: ApiKey) -> Option<Supported> {
    SUPPORTED
        .iter()
        .copied()
        .find(|entry| entry.api_key == api_key)
}

/// Whether a request of this key and version is served.
pub fn is_supported(api_key: ApiKey, version: i16) -> bool {
    supported(api_key).is_some_and(|entry| (entry.min..=entry.max).contains(&version))
}

/// The ApiVersions response body listing every supported API. With an
/// error (an unsupported ApiVersions version), Kafka still lists them so
/// the client can retry with a version both sides know.
pub fn api_versions_response(error: ErrorCode) -> ApiVersionsResponse {
    let api_keys = SUPPORTED
        .iter()
        .map(|entry| {
            ApiVersion::default()
                .with_api_key(entry.api_key as i16)
                .with_min_version(entry.advertised_min)
                .with_max_version(entry.max)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error.0)
        .with_api_keys(api_keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_within_what_the_codecs_know() {
        for entry in SUPPORTED {
            let known = entry.api_key.valid_versions();
            assert!(
                entry.min >= known.min && entry.max <= known.max,
                "{:?}",
                entry.api_key
            );
            assert!(entry.advertised_min <= entry.min);
        }
    }

    #[test]
    fn produce_v0_to_v2_are_advertised_but_not_served() {
        assert!(!is_supported(ApiKey::Produce, 2));
        assert!(is_supported(ApiKey::Produce, 3));
        let response = api_versions_response(ErrorCode::NONE);
        let produce = response
            .api_keys
            .iter()
            .find(|key| key.api_key == ApiKey::Produce as i16)
            .unwrap();
        assert_eq!((produce.min_version, produce.max_version), (0, 13));
    }

    /// Every node runs a quorum (a node alone, its own), so every node
    /// lists DescribeQuorum.
    #[test]
    fn every_supported_api_is_advertised() {
        let listed = api_versions_response(ErrorCode::NONE).api_keys;
        assert_eq!(listed.len(), SUPPORTED.len());
        assert!(
            listed
                .iter()
                .any(|key| key.api_key == ApiKey::DescribeQuorum as i16)
        );
    }

    /// The newest version Kafka 4.1.0 serves of each API Brook implements:
    /// the crate generates each message from 4.1.0's schemas leaving out a
    /// latest version marked unstable, so its request struct's range is
    /// 4.1's. (`ApiKey::valid_versions` does not leave them out: it lists
    /// OffsetCommit/OffsetFetch v10 and InitProducerId v6, which 4.1 does not
    /// serve.)
    fn stable_max(api_key: ApiKey) -> i16 {
        use kafka_protocol::messages::*;
        use kafka_protocol::protocol::Message;
        match api_key {
            ApiKey::Produce => ProduceRequest::VERSIONS.max,
            ApiKey::Fetch => FetchRequest::VERSIONS.max,
            ApiKey::ListOffsets => ListOffsetsRequest::VERSIONS.max,
            ApiKey::Metadata => MetadataRequest::VERSIONS.max,
            ApiKey::ApiVersions => ApiVersionsRequest::VERSIONS.max,
            ApiKey::CreateTopics => CreateTopicsRequest::VERSIONS.max,
            ApiKey::DeleteTopics => DeleteTopicsRequest::VERSIONS.max,
            ApiKey::DeleteRecords => DeleteRecordsRequest::VERSIONS.max,
            ApiKey::OffsetForLeaderEpoch => OffsetForLeaderEpochRequest::VERSIONS.max,
            ApiKey::DescribeConfigs => DescribeConfigsRequest::VERSIONS.max,
            ApiKey::AlterConfigs => AlterConfigsRequest::VERSIONS.max,
            ApiKey::AlterReplicaLogDirs => AlterReplicaLogDirsRequest::VERSIONS.max,
            ApiKey::DescribeLogDirs => DescribeLogDirsRequest::VERSIONS.max,
            ApiKey::CreatePartitions => CreatePartitionsRequest::VERSIONS.max,
            ApiKey::IncrementalAlterConfigs => IncrementalAlterConfigsRequest::VERSIONS.max,
            ApiKey::DescribeCluster => DescribeClusterRequest::VERSIONS.max,
            ApiKey::ListConfigResources => ListConfigResourcesRequest::VERSIONS.max,
            ApiKey::DescribeTopicPartitions => DescribeTopicPartitionsRequest::VERSIONS.max,
            ApiKey::FindCoordinator => FindCoordinatorRequest::VERSIONS.max,
            ApiKey::JoinGroup => JoinGroupRequest::VERSIONS.max,
            ApiKey::SyncGroup => SyncGroupRequest::VERSIONS.max,
            ApiKey::Heartbeat => HeartbeatRequest::VERSIONS.max,
            ApiKey::LeaveGroup => LeaveGroupRequest::VERSIONS.max,
            ApiKey::OffsetCommit => OffsetCommitRequest::VERSIONS.max,
            ApiKey::OffsetFetch => OffsetFetchRequest::VERSIONS.max,
            ApiKey::ListGroups => ListGroupsRequest::VERSIONS.max,
            ApiKey::DescribeGroups => DescribeGroupsRequest::VERSIONS.max,
            ApiKey::DeleteGroups => DeleteGroupsRequest::VERSIONS.max,
            ApiKey::OffsetDelete => OffsetDeleteRequest::VERSIONS.max,
            ApiKey::InitProducerId => InitProducerIdRequest::VERSIONS.max,
            ApiKey::AddPartitionsToTxn => AddPartitionsToTxnRequest::VERSIONS.max,
            ApiKey::AddOffsetsToTxn => AddOffsetsToTxnRequest::VERSIONS.max,
            ApiKey::EndTxn => EndTxnRequest::VERSIONS.max,
            ApiKey::TxnOffsetCommit => TxnOffsetCommitRequest::VERSIONS.max,
            ApiKey::WriteTxnMarkers => WriteTxnMarkersRequest::VERSIONS.max,
            ApiKey::DescribeTransactions => DescribeTransactionsRequest::VERSIONS.max,
            ApiKey::ListTransactions => ListTransactionsRequest::VERSIONS.max,
            ApiKey::DescribeProducers => DescribeProducersRequest::VERSIONS.max,
            ApiKey::DescribeQuorum => DescribeQuorumRequest::VERSIONS.max,
            ApiKey::ElectLeaders => ElectLeadersRequest::VERSIONS.max,
            other => panic!("{other:?} has no stable range here"),
        }
    }

    #[test]
    fn every_api_tops_at_the_version_kafka_4_1_serves() {
        for entry in SUPPORTED {
            assert_eq!(entry.max, stable_max(entry.api_key), "{:?}", entry.api_key);
        }
        for (api_key, max) in [
            (ApiKey::Produce, 13),
            (ApiKey::Fetch, 18),
            (ApiKey::ListOffsets, 10),
            (ApiKey::Metadata, 13),
            (ApiKey::DescribeCluster, 2),
            (ApiKey::DescribeGroups, 6),
            (ApiKey::ListTransactions, 2),
            (ApiKey::AlterConfigs, 2),
            (ApiKey::DescribeTopicPartitions, 0),
        ] {
            assert_eq!(supported(api_key).unwrap().max, max, "{api_key:?}");
        }
    }
}
