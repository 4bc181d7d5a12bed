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

/// Every API Brook answers, with its version range.
pub const SUPPORTED: &[Supported] = &[
    Supported {
        api_key: ApiKey::Produce,
        advertised_min: 0,
        min: 3,
        max: 11,
    },
    api(ApiKey::Fetch, 4, 16),
    api(ApiKey::ListOffsets, 1, 9),
    api(ApiKey::Metadata, 0, 12),
    api(ApiKey::ApiVersions, 0, 4),
    api(ApiKey::CreateTopics, 2, 7),
    api(ApiKey::DeleteTopics, 1, 6),
    api(ApiKey::DeleteRecords, 0, 2),
    api(ApiKey::OffsetForLeaderEpoch, 2, 4),
    api(ApiKey::DescribeConfigs, 1, 4),
    api(ApiKey::DescribeLogDirs, 1, 4),
    api(ApiKey::CreatePartitions, 0, 3),
    api(ApiKey::IncrementalAlterConfigs, 0, 1),
    api(ApiKey::DescribeCluster, 0, 1),
    api(ApiKey::FindCoordinator, 0, 6),
    api(ApiKey::JoinGroup, 0, 9),
    api(ApiKey::SyncGroup, 0, 5),
    api(ApiKey::Heartbeat, 0, 4),
    api(ApiKey::LeaveGroup, 0, 5),
    api(ApiKey::OffsetCommit, 2, 9),
    api(ApiKey::OffsetFetch, 1, 9),
    api(ApiKey::ListGroups, 0, 5),
    api(ApiKey::DescribeGroups, 0, 5),
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
    api(ApiKey::ListTransactions, 0, 1),
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
/// error (an unsupported ApiVersions version), Kafka still lists them so the
/// client can retry with a version both sides know.
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
        assert_eq!((produce.min_version, produce.max_version), (0, 11));
    }

    #[test]
    fn the_issue_version_floors_are_met() {
        for (api_key, max) in [
            (ApiKey::ApiVersions, 4),
            (ApiKey::Metadata, 12),
            (ApiKey::Produce, 11),
            (ApiKey::Fetch, 16),
            (ApiKey::ListOffsets, 9),
            (ApiKey::CreateTopics, 7),
            (ApiKey::DeleteTopics, 6),
            (ApiKey::CreatePartitions, 3),
            (ApiKey::DescribeConfigs, 4),
            (ApiKey::IncrementalAlterConfigs, 1),
            (ApiKey::DeleteRecords, 2),
            (ApiKey::DescribeCluster, 1),
            (ApiKey::OffsetForLeaderEpoch, 4),
            (ApiKey::DescribeLogDirs, 4),
        ] {
            assert_eq!(supported(api_key).unwrap().max, max, "{api_key:?}");
        }
    }
}
