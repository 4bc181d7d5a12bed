//! `--offsets-decoder` and `--transaction-decoder`: the records of
//! `__consumer_offsets` and `__transaction_state` read with the engine's
//! decoders ([`GroupRecord::decode`], [`TransactionRecord::decode`]) and
//! printed as Kafka's tools print them, e.g.
//! `[group,topic,partition]::[OffsetMetadata[offset,metadata],CommitTime …,ExpirationTime …]`.

use brook_engine::group::records::{GroupMetadataValue, GroupRecord, OffsetCommitKey};
use brook_engine::txn::records::{TransactionLogValue, TransactionRecord};

use crate::log_dump::json::{JsonObject, array, quote};

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
    pub json: JsonObject,
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
            let json = offset_key_json(key, "offset_commit")
                .integer("offset", value.offset.0)
                .integer("leaderEpoch", value.leader_epoch.0)
                .string("metadata", &value.metadata)
                .integer("commitTimestamp", value.commit_timestamp_ms)
                .integer("expireTimestamp", expiration);
            Decoded { text, json }
        }
        GroupRecord::OffsetTombstone(key) => Decoded {
            text: format!("{}::NULL", offset_key_text(key)),
            json: offset_key_json(key, "offset_tombstone"),
        },
        GroupRecord::GroupMetadata { key, value } => Decoded {
            text: format!("[{}]::{}", key.group, group_metadata_text(value)),
            json: group_metadata_json(&key.group, value),
        },
        GroupRecord::GroupTombstone(key) => Decoded {
            text: format!("[{}]::NULL", key.group),
            json: JsonObject::new()
                .string("kind", "group_tombstone")
                .string("group", &key.group),
        },
        GroupRecord::Unknown { key_version, .. } => Decoded {
            text: format!("unknown record type {key_version}"),
            json: JsonObject::new()
                .string("kind", "unknown")
                .integer("keyVersion", *key_version),
        },
    }
}

fn offset_key_text(key: &OffsetCommitKey) -> String {
    format!("[{},{},{}]", key.group, key.topic, key.partition.0)
}

fn offset_key_json(key: &OffsetCommitKey, kind: &str) -> JsonObject {
    JsonObject::new()
        .string("kind", kind)
        .string("group", &key.group)
        .string("topic", &key.topic)
        .integer("partition", key.partition.0)
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

fn group_metadata_json(group: &str, value: &GroupMetadataValue) -> JsonObject {
    let members = value.members.iter().map(|member| {
        JsonObject::new()
            .string("memberId", &member.member_id)
            .optional_string("groupInstanceId", member.group_instance_id.as_deref())
            .string("clientId", &member.client_id)
            .string("clientHost", &member.client_host)
            .integer("sessionTimeoutMs", member.session_timeout_ms)
            .integer("rebalanceTimeoutMs", member.rebalance_timeout_ms)
            .unsigned("subscriptionBytes", member.subscription.len() as u64)
            .unsigned("assignmentBytes", member.assignment.len() as u64)
            .render()
    });
    JsonObject::new()
        .string("kind", "group_metadata")
        .string("group", group)
        .string("protocolType", &value.protocol_type)
        .integer("generation", value.generation)
        .optional_string("protocol", value.protocol.as_deref())
        .optional_string("leader", value.leader.as_deref())
        .integer(
            "currentStateTimestamp",
            value.current_state_timestamp_ms.unwrap_or(-1),
        )
        .raw("members", &array(members))
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
            json: JsonObject::new()
                .string("kind", "transaction_tombstone")
                .string("transactionalId", &key.transactional_id),
        },
        TransactionRecord::UnknownKey { key_version } => Decoded {
            text: format!("unknown key version {key_version}"),
            json: JsonObject::new()
                .string("kind", "unknown")
                .integer("keyVersion", *key_version),
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

fn transaction_json(transactional_id: &str, value: &TransactionLogValue) -> JsonObject {
    let partitions = partition_names(value).into_iter().map(|name| quote(&name));
    JsonObject::new()
        .string("kind", "transaction")
        .string("transactionalId", transactional_id)
        .integer("producerId", value.producer_id.0)
        .integer("producerEpoch", value.producer_epoch.0)
        .string("state", value.state.name())
        .raw("partitions", &array(partitions))
        .integer("timeoutMs", value.timeout_ms)
        .integer("startTimestamp", value.start_timestamp_ms)
        .integer("lastUpdateTimestamp", value.last_update_timestamp_ms)
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
        let json = decoded.json.render();
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
        let json = decoded.json.render();
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
