//! `--offsets-decoder` and `--transaction-decoder`: the records of
//! `__consumer_offsets` and `__transaction_state` read with the engine's
//! decoders ([`GroupRecord::decode`], [`TransactionRecord::decode`]) and
//! printed as Kafka's tools print them, e.g.
//! `[group,topic,partition]::[OffsetMetadata[offset,metadata],CommitTime …,ExpirationTime …]`.

use brook_engine::group::records::{GroupMetadataValue, GroupRecord, OffsetCommitKey};
use brook_engine::txn::records::{TransactionLogValue, TransactionRecord};
use serde::Serialize;

/// Which decoder reads the records' keys and values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecordDecoder {
    /// Keys and values as text or hex.
    #[default]
    Raw,
    /// `__consumer_offsets` records.
    Offsets,
    /// `__transaction_state` records.
    Transactions,
}

/// A record read by a decoder, in both output formats.
#[derive(Debug)]
pub struct Decoded {
    pub text: String,
    pub json: DecodedJson,
}

/// A decoded record in JSON: `{"kind":"offset_commit",…}` and so on.
#[derive(Debug, Serialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum DecodedJson {
    OffsetCommit {
        #[serde(flatten)]
        key: OffsetKeyJson,
        offset: i64,
        leader_epoch: i32,
        metadata: String,
        commit_timestamp: i64,
        expire_timestamp: i64,
    },
    OffsetTombstone {
        #[serde(flatten)]
        key: OffsetKeyJson,
    },
    GroupMetadata {
        group: String,
        protocol_type: String,
        generation: i32,
        protocol: Option<String>,
        leader: Option<String>,
        current_state_timestamp: i64,
        members: Vec<MemberJson>,
    },
    GroupTombstone {
        group: String,
    },
    Transaction {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        state: &'static str,
        partitions: Vec<String>,
        timeout_ms: i32,
        start_timestamp: i64,
        last_update_timestamp: i64,
    },
    TransactionTombstone {
        transactional_id: String,
    },
    /// A key version neither Kafka nor Brook has defined.
    Unknown {
        key_version: i16,
    },
}

/// An offset commit's group, topic and partition.
#[derive(Debug, Serialize)]
pub struct OffsetKeyJson {
    group: String,
    topic: String,
    partition: i32,
}

/// A group member in a decoded `GroupMetadata`: its assignment and
/// subscription as their sizes.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberJson {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    subscription_bytes: usize,
    assignment_bytes: usize,
}

/// Reads a record with `decoder` (not [`RecordDecoder::Raw`]); the error is
/// the decoder's message, for a record the topic's schemas do not fit.
pub fn decode(
    decoder: RecordDecoder,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Result<Decoded, String> {
    let key = key.ok_or("the record has no key")?;
    match decoder {
        RecordDecoder::Raw => Err("no decoder".to_owned()),
        RecordDecoder::Offsets => GroupRecord::decode(key, value)
            .map(|record| group_record(&record))
            .map_err(|error| error.to_string()),
        RecordDecoder::Transactions => TransactionRecord::decode(key, value)
            .map(|record| transaction_record(&record))
            .map_err(|error| error.to_string()),
    }
}

/// A `__consumer_offsets` record.
fn group_record(record: &GroupRecord) -> Decoded {
    match record {
        GroupRecord::OffsetCommit { key, value } => {
            let metadata = if value.metadata.is_empty() {
                "NO_METADATA"
            } else {
                &value.metadata
            };
            let expiration = value.expire_timestamp_ms.unwrap_or(-1);
            let text = format!(
                "{}::[OffsetMetadata[{},{metadata}],CommitTime {},ExpirationTime {expiration}]",
                offset_key_text(key),
                value.offset.0,
                value.commit_timestamp_ms
            );
            let json = DecodedJson::OffsetCommit {
                key: offset_key_json(key),
                offset: value.offset.0,
                leader_epoch: value.leader_epoch.0,
                metadata: value.metadata.clone(),
                commit_timestamp: value.commit_timestamp_ms,
                expire_timestamp: expiration,
            };
            Decoded { text, json }
        }
        GroupRecord::OffsetTombstone(key) => Decoded {
            text: format!("{}::NULL", offset_key_text(key)),
            json: DecodedJson::OffsetTombstone {
                key: offset_key_json(key),
            },
        },
        GroupRecord::GroupMetadata { key, value } => Decoded {
            text: format!("[{}]::{}", key.group, group_metadata_text(value)),
            json: group_metadata_json(&key.group, value),
        },
        GroupRecord::GroupTombstone(key) => Decoded {
            text: format!("[{}]::NULL", key.group),
            json: DecodedJson::GroupTombstone {
                group: key.group.clone(),
            },
        },
        GroupRecord::Unknown { key_version, .. } => Decoded {
            text: format!("unknown record type {key_version}"),
            json: DecodedJson::Unknown {
                key_version: *key_version,
            },
        },
    }
}

fn offset_key_text(key: &OffsetCommitKey) -> String {
    format!("[{},{},{}]", key.group, key.topic, key.partition.0)
}

fn offset_key_json(key: &OffsetCommitKey) -> OffsetKeyJson {
    OffsetKeyJson {
        group: key.group.clone(),
        topic: key.topic.clone(),
        partition: key.partition.0,
    }
}

fn group_metadata_text(value: &GroupMetadataValue) -> String {
    let members: Vec<String> = value
        .members
        .iter()
        .map(|member| {
            format!(
                "{}(clientId={},clientHost={},sessionTimeoutMs={},rebalanceTimeoutMs={})",
                member.member_id,
                member.client_id,
                member.client_host,
                member.session_timeout_ms,
                member.rebalance_timeout_ms
            )
        })
        .collect();
    format!(
        "GroupMetadata[protocolType {},generation {},protocol {},leader {},currentStateTimestamp {},members [{}]]",
        value.protocol_type,
        value.generation,
        value.protocol.as_deref().unwrap_or("NULL"),
        value.leader.as_deref().unwrap_or("NULL"),
        value.current_state_timestamp_ms.unwrap_or(-1),
        members.join(",")
    )
}

fn group_metadata_json(group: &str, value: &GroupMetadataValue) -> DecodedJson {
    let members = value
        .members
        .iter()
        .map(|member| MemberJson {
            member_id: member.member_id.clone(),
            group_instance_id: member.group_instance_id.clone(),
            client_id: member.client_id.clone(),
            client_host: member.client_host.clone(),
            session_timeout_ms: member.session_timeout_ms,
            rebalance_timeout_ms: member.rebalance_timeout_ms,
            subscription_bytes: member.subscription.len(),
            assignment_bytes: member.assignment.len(),
        })
        .collect();
    DecodedJson::GroupMetadata {
        group: group.to_owned(),
        protocol_type: value.protocol_type.clone(),
        generation: value.generation,
        protocol: value.protocol.clone(),
        leader: value.leader.clone(),
        current_state_timestamp: value.current_state_timestamp_ms.unwrap_or(-1),
        members,
    }
}

/// A `__transaction_state` record.
fn transaction_record(record: &TransactionRecord) -> Decoded {
    match record {
        TransactionRecord::Value { key, value, .. } => Decoded {
            text: format!("[{}]::{}", key.transactional_id, transaction_text(value)),
            json: transaction_json(&key.transactional_id, value),
        },
        TransactionRecord::Tombstone(key) => Decoded {
            text: format!("[{}]::NULL", key.transactional_id),
            json: DecodedJson::TransactionTombstone {
                transactional_id: key.transactional_id.clone(),
            },
        },
        TransactionRecord::UnknownKey { key_version } => Decoded {
            text: format!("unknown key version {key_version}"),
            json: DecodedJson::Unknown {
                key_version: *key_version,
            },
        },
    }
}

/// `topic-partition` names of a transaction's partitions.
fn partition_names(value: &TransactionLogValue) -> Vec<String> {
    value
        .partitions
        .iter()
        .flatten()
        .flat_map(|topic| {
            topic
                .partition_ids
                .iter()
                .map(move |partition| format!("{}-{partition}", topic.topic))
        })
        .collect()
}

fn transaction_text(value: &TransactionLogValue) -> String {
    format!(
        "TransactionMetadata[producerId {},producerEpoch {},state {},partitions [{}],timeoutMs {},startTimestamp {},lastUpdateTimestamp {}]",
        value.producer_id.0,
        value.producer_epoch.0,
        value.state.name(),
        partition_names(value).join(","),
        value.timeout_ms,
        value.start_timestamp_ms,
        value.last_update_timestamp_ms
    )
}

fn transaction_json(transactional_id: &str, value: &TransactionLogValue) -> DecodedJson {
    DecodedJson::Transaction {
        transactional_id: transactional_id.to_owned(),
        producer_id: value.producer_id.0,
        producer_epoch: value.producer_epoch.0,
        state: value.state.name(),
        partitions: partition_names(value),
        timeout_ms: value.timeout_ms,
        start_timestamp: value.start_timestamp_ms,
        last_update_timestamp: value.last_update_timestamp_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brook_engine::group::records::{GroupMetadataKey, OffsetCommitValue};
    use brook_engine::replica::producer_state::ProducerEpoch;
    use brook_engine::txn::records::{TopicPartitions, TransactionLogKey};
    use brook_engine::txn::state::TransactionState;
    use brook_engine::types::{LeaderEpoch, Offset, PartitionId, ProducerId};

    fn commit_key() -> OffsetCommitKey {
        OffsetCommitKey {
            group: "g1".into(),
            topic: "orders".into(),
            partition: PartitionId(3),
        }
    }

    #[test]
    fn offset_commits_print_as_kafka_does() {
        let record = GroupRecord::OffsetCommit {
            key: commit_key(),
            value: OffsetCommitValue {
                offset: Offset(42),
                leader_epoch: LeaderEpoch(-1),
                metadata: String::new(),
                commit_timestamp_ms: 1_700_000_000_000,
                expire_timestamp_ms: None,
                topic_id: None,
            },
        };
        let (key, value) = record.encode();
        let decoded = decode(RecordDecoder::Offsets, Some(&key), value.as_deref()).unwrap();
        assert_eq!(
            decoded.text,
            "[g1,orders,3]::[OffsetMetadata[42,NO_METADATA],CommitTime 1700000000000,ExpirationTime -1]"
        );
        let json = serde_json::to_string(&decoded.json).unwrap();
        assert!(
            json.contains(r#""group":"g1","topic":"orders","partition":3,"offset":42"#),
            "{json}"
        );
    }

    #[test]
    fn tombstones_and_group_metadata_are_decoded() {
        let (key, _) = GroupRecord::OffsetTombstone(commit_key()).encode();
        let decoded = decode(RecordDecoder::Offsets, Some(&key), None).unwrap();
        assert_eq!(decoded.text, "[g1,orders,3]::NULL");
        let record = GroupRecord::GroupMetadata {
            key: GroupMetadataKey { group: "g1".into() },
            value: GroupMetadataValue {
                protocol_type: "consumer".into(),
                generation: 2,
                protocol: Some("range".into()),
                leader: None,
                current_state_timestamp_ms: None,
                members: Vec::new(),
            },
        };
        let (key, value) = record.encode();
        let decoded = decode(RecordDecoder::Offsets, Some(&key), value.as_deref()).unwrap();
        assert!(
            decoded.text.starts_with(
                "[g1]::GroupMetadata[protocolType consumer,generation 2,protocol range,leader NULL"
            ),
            "{}",
            decoded.text
        );
        let json = serde_json::to_string(&decoded.json).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"group_metadata","group":"g1","protocolType":"consumer","generation":2,"protocol":"range","leader":null,"currentStateTimestamp":-1,"members":[]}"#
        );
    }

    #[test]
    fn transaction_records_print_their_state_and_partitions() {
        let record = TransactionRecord::Value {
            key: TransactionLogKey {
                transactional_id: "tx-1".into(),
            },
            value: TransactionLogValue {
                producer_id: ProducerId(1000),
                previous_producer_id: ProducerId(-1),
                next_producer_id: ProducerId(-1),
                producer_epoch: ProducerEpoch(2),
                timeout_ms: 60_000,
                state: TransactionState::Ongoing,
                partitions: Some(vec![TopicPartitions {
                    topic: "orders".into(),
                    partition_ids: vec![0, 3],
                }]),
                last_update_timestamp_ms: 20,
                start_timestamp_ms: 10,
                client_transaction_version: 0,
                unknown_tagged_fields: Vec::new(),
            },
            version: 0,
        };
        let (key, value) = record.encode().unwrap();
        let decoded = decode(RecordDecoder::Transactions, Some(&key), value.as_deref()).unwrap();
        assert_eq!(
            decoded.text,
            "[tx-1]::TransactionMetadata[producerId 1000,producerEpoch 2,state Ongoing,partitions [orders-0,orders-3],timeoutMs 60000,startTimestamp 10,lastUpdateTimestamp 20]"
        );
        let json = serde_json::to_string(&decoded.json).unwrap();
        assert!(
            json.contains(r#""state":"Ongoing","partitions":["orders-0","orders-3"]"#),
            "{json}"
        );
        let (key, _) = TransactionRecord::Tombstone(TransactionLogKey {
            transactional_id: "tx-1".into(),
        })
        .encode()
        .unwrap();
        let decoded = decode(RecordDecoder::Transactions, Some(&key), None).unwrap();
        assert_eq!(decoded.text, "[tx-1]::NULL");
    }

    #[test]
    fn undecodable_records_are_errors() {
        assert!(decode(RecordDecoder::Offsets, None, None).is_err());
        assert!(decode(RecordDecoder::Offsets, Some(&[0]), None).is_err());
        assert!(decode(RecordDecoder::Transactions, Some(&[0, 0, 0]), None).is_err());
    }
}
