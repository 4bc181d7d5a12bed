//! The records the group coordinator writes to `__consumer_offsets`, byte for
//! byte as Apache Kafka writes them, so any tool that reads Kafka's offsets
//! topic (kafka-console-consumer's offsets formatter, Burrow, kminion, franz-go's
//! `kmsg`) reads Brook's, and Brook reads a topic Kafka wrote.
//!
//! # Layout
//!
//! `__consumer_offsets` is compacted: the newest value per key wins and a key
//! with a null value (a *tombstone*) deletes it. Both key and value start with
//! a big-endian int16 version. The key's version says what the record is:
//!
//! | key version | record                | key fields               | value          |
//! |-------------|-----------------------|--------------------------|----------------|
//! | 0, 1        | offset commit         | group, topic, partition  | [`OffsetCommitValue`] v0–v4 |
//! | 2           | group metadata        | group                    | [`GroupMetadataValue`] v0–v4 |
//! | 3+          | Kafka 4's other types | (consumer, share, streams groups) | not read here |
//!
//! Kafka 4 names the key version the *record type* and writes its new
//! consumer-group (KIP-848), share-group and streams-group records to the same
//! topic; those decode as [`GroupRecord::Unknown`] and are carried unread, as
//! a Kafka broker skips record types it does not know.
//!
//! # Versions
//!
//! Written: offset-commit key 1 with value 4 (Kafka 4.1+; value 1 when the
//! commit carries its own expiry, as Kafka does), group-metadata key 2 with
//! value 3 (Kafka 2.3 through 4.x). Read: every value version Kafka has
//! written, 0–4, including version 4's flexible encoding; see
//! [`offset_commit`] and [`group_metadata`] for the field tables.
//!
//! # Placement
//!
//! Group G's records live in partition `abs(javaStringHash(G)) %
//! offsets.topic.num.partitions` ([`offsets_partition_for`]), and that
//! partition's leader is G's coordinator. The hash is Java's `String.hashCode`
//! because clients and Kafka brokers already agree on it: a Brook cluster that
//! placed groups differently would disagree with Kafka's tools about where a
//! group's offsets are.
//!
//! Decoding never panics and checks every declared length against the bytes
//! left before allocating; encoding refuses (rather than truncates) strings
//! longer than Kafka's 32,767-byte limit.

pub mod group_metadata;
pub mod offset_commit;

use bytes::Bytes;

pub use self::group_metadata::{
    GROUP_METADATA_KEY_VERSION, GROUP_METADATA_VALUE_VERSION, GroupMetadataKey, GroupMetadataValue,
    MemberMetadata,
};
pub use self::offset_commit::{
    OFFSET_COMMIT_KEY_VERSION, OFFSET_COMMIT_KEY_VERSION_LEGACY, OFFSET_COMMIT_VALUE_VERSION,
    OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY, OffsetCommitKey, OffsetCommitValue,
};
pub use crate::protocol::schema_wire::STRING_BYTES_MAX;
use crate::protocol::schema_wire::{Format, Reader};

/// Why a record could not be read or written: the error of the wire module
/// shared with `__transaction_state`'s records.
pub use crate::protocol::schema_wire::SchemaError as RecordsError;

/// The internal topic's name.
pub const OFFSETS_TOPIC_NAME: &str = "__consumer_offsets";
/// Kafka's default `offsets.topic.num.partitions`.
pub const OFFSETS_TOPIC_PARTITIONS_DEFAULT: i32 = 50;
/// Kafka's default `offsets.retention.minutes` (7 days).
pub const OFFSETS_RETENTION_MINUTES_DEFAULT: i64 = 10_080;

/// Java's `String.hashCode`: `s[0]*31^(n-1) + … + s[n-1]` over UTF-16 code
/// units, in wrapping 32-bit arithmetic (a character outside the Basic
/// Multilingual Plane counts as its two surrogates).
pub fn java_string_hash(text: &str) -> i32 {
    text.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The `__consumer_offsets` partition that holds `group_id`'s records:
/// Kafka's `Utils.abs(groupId.hashCode()) % groupMetadataTopicPartitionCount`.
/// `Utils.abs` maps `i32::MIN` (whose absolute value does not fit) to 0.
///
/// Panics if `partition_count` is not positive; it comes from a validated
/// `offsets.topic.num.partitions`.
pub fn offsets_partition_for(group_id: &str, partition_count: i32) -> i32 {
    assert!(
        partition_count > 0,
        "offsets.topic.num.partitions must be positive"
    );
    let hash = java_string_hash(group_id);
    let absolute = if hash == i32::MIN { 0 } else { hash.abs() };
    let partition = absolute % partition_count;
    debug_assert!((0..partition_count).contains(&partition));
    partition
}

/// One record of `__consumer_offsets`, typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupRecord {
    OffsetCommit {
        key: OffsetCommitKey,
        value: OffsetCommitValue,
    },
    /// Deletes a committed offset (expired, or the group or topic deleted).
    OffsetTombstone(OffsetCommitKey),
    GroupMetadata {
        key: GroupMetadataKey,
        value: GroupMetadataValue,
    },
    /// Deletes a group's metadata (the group is dead).
    GroupTombstone(GroupMetadataKey),
    /// A record type this module does not read (key version 3 and up are
    /// Kafka 4's consumer/share/streams group records), kept as its bytes.
    Unknown {
        key_version: i16,
        /// The whole key, version included.
        key: Bytes,
        value: Option<Bytes>,
    },
}

impl GroupRecord {
    /// The record's key and value (`None` for a tombstone), in the versions
    /// Kafka writes.
    ///
    /// Panics if a string is longer than [`STRING_BYTES_MAX`]; a record built
    /// from client input whose lengths were not checked goes through
    /// [`GroupRecord::try_encode`].
    pub fn encode(&self) -> (Bytes, Option<Bytes>) {
        match self.try_encode() {
            Ok(encoded) => encoded,
            Err(error) => panic!("group record over Kafka's limits: {error}"),
        }
    }

    /// [`GroupRecord::encode`], refusing fields over Kafka's limits.
    pub fn try_encode(&self) -> Result<(Bytes, Option<Bytes>), RecordsError> {
        Ok(match self {
            GroupRecord::OffsetCommit { key, value } => (key.encode()?, Some(value.encode()?)),
            GroupRecord::OffsetTombstone(key) => (key.encode()?, None),
            GroupRecord::GroupMetadata { key, value } => (key.encode()?, Some(value.encode()?)),
            GroupRecord::GroupTombstone(key) => (key.encode()?, None),
            GroupRecord::Unknown { key, value, .. } => (key.clone(), value.clone()),
        })
    }

    /// Reads a record of `__consumer_offsets`; `value` is `None` for a
    /// tombstone. Unknown key versions are [`GroupRecord::Unknown`], not errors.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<GroupRecord, RecordsError> {
        let key_version = Reader::new(key, Format::Classic).int16()?;
        match key_version {
            OFFSET_COMMIT_KEY_VERSION_LEGACY | OFFSET_COMMIT_KEY_VERSION => {
                let key = OffsetCommitKey::decode(key)?;
                Ok(match value {
                    None => GroupRecord::OffsetTombstone(key),
                    Some(value) => GroupRecord::OffsetCommit {
                        key,
                        value: OffsetCommitValue::decode(value)?,
                    },
                })
            }
            GROUP_METADATA_KEY_VERSION => {
                let key = GroupMetadataKey::decode(key)?;
                Ok(match value {
                    None => GroupRecord::GroupTombstone(key),
                    Some(value) => GroupRecord::GroupMetadata {
                        key,
                        value: GroupMetadataValue::decode(value)?,
                    },
                })
            }
            _ => Ok(GroupRecord::Unknown {
                key_version,
                key: Bytes::copy_from_slice(key),
                value: value.map(Bytes::copy_from_slice),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::cluster::image::TopicId;
    use crate::types::{LeaderEpoch, Offset, PartitionId};

    #[test]
    fn java_string_hash_matches_java() {
        let cases = [
            ("", 0),
            ("a", 97),
            ("hello", 99_162_322),
            ("Hello World", -862_545_276),
            ("Aa", 2112),
            ("BB", 2112), // Java's best-known collision
            // U+1F600 is the surrogate pair D83D DE00: 0xD83D * 31 + 0xDE00.
            ("\u{1F600}", 1_772_899),
            // The famous string whose hashCode is Integer.MIN_VALUE.
            ("polygenelubricants", i32::MIN),
        ];
        for (text, hash) in cases {
            assert_eq!(java_string_hash(text), hash, "{text:?}");
        }
    }

    #[test]
    fn offsets_partition_follows_kafkas_utils_abs() {
        let cases = [
            ("", 50, 0),
            ("hello", 50, 22),
            ("Hello World", 50, 26),       // negative hash: abs first
            ("polygenelubricants", 50, 0), // i32::MIN: Utils.abs gives 0
            ("polygenelubricants", 7, 0),
            ("\u{1F600}", 50, 49),
            ("hello", 1, 0),
        ];
        for (group, count, partition) in cases {
            assert_eq!(
                offsets_partition_for(group, count),
                partition,
                "{group:?} % {count}"
            );
        }
        assert_eq!(OFFSETS_TOPIC_PARTITIONS_DEFAULT, 50);
    }

    fn offset_commit() -> GroupRecord {
        GroupRecord::OffsetCommit {
            key: OffsetCommitKey {
                group: "g".into(),
                topic: "t".into(),
                partition: PartitionId(0),
            },
            value: OffsetCommitValue {
                offset: Offset(42),
                leader_epoch: LeaderEpoch(7),
                metadata: "m".into(),
                commit_timestamp_ms: 1_000,
                expire_timestamp_ms: None,
                topic_id: None,
            },
        }
    }

    #[test]
    fn an_offset_commit_is_written_in_kafkas_current_versions() {
        let (key, value) = offset_commit().encode();
        let expected_key = [
            0x00, 0x01, // key version 1
            0x00, 0x01, b'g', // group
            0x00, 0x01, b't', // topic
            0x00, 0x00, 0x00, 0x00, // partition 0
        ];
        // Version 3 (Kafka 3.x's), which every offsets-topic reader knows;
        // version 4 only when a topic id must be carried.
        let expected_value = [
            0x00, 0x03, // value version 3
            0, 0, 0, 0, 0, 0, 0, 42, // offset
            0, 0, 0, 7, // leaderEpoch
            0x00, 0x01, b'm', // metadata (int16 length 1)
            0, 0, 0, 0, 0, 0, 0x03, 0xe8, // commitTimestamp 1000
        ];
        assert_eq!(key[..], expected_key);
        assert_eq!(value.as_deref(), Some(&expected_value[..]));
        assert_eq!(
            GroupRecord::decode(&key, value.as_deref()),
            Ok(offset_commit())
        );
    }

    #[test]
    fn group_metadata_is_written_as_version_3() {
        let record = GroupRecord::GroupMetadata {
            key: GroupMetadataKey {
                group: "group".into(),
            },
            value: GroupMetadataValue::decode(group_metadata::tests::VALUE_VERSION_3).unwrap(),
        };
        let (key, value) = record.encode();
        assert_eq!(key[..], [0, 2, 0, 5, b'g', b'r', b'o', b'u', b'p']);
        assert_eq!(
            value.as_deref(),
            Some(group_metadata::tests::VALUE_VERSION_3)
        );
        assert_eq!(GroupRecord::decode(&key, value.as_deref()), Ok(record));
    }

    #[test]
    fn tombstones_are_keys_without_values() {
        let offset_key = OffsetCommitKey {
            group: "g".into(),
            topic: "t".into(),
            partition: PartitionId(1),
        };
        let group_key = GroupMetadataKey { group: "g".into() };
        for record in [
            GroupRecord::OffsetTombstone(offset_key),
            GroupRecord::GroupTombstone(group_key),
        ] {
            let (key, value) = record.encode();
            assert_eq!(value, None);
            assert_eq!(GroupRecord::decode(&key, None), Ok(record));
        }
    }

    #[test]
    fn unknown_key_versions_are_carried_unread() {
        // Kafka 4's ConsumerGroupMetadata record: type 3, group "g", epoch 5.
        let key = [0x00, 0x03, 0x00, 0x01, b'g'];
        let value = [0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00];
        let record = GroupRecord::decode(&key, Some(&value)).unwrap();
        assert_eq!(
            record,
            GroupRecord::Unknown {
                key_version: 3,
                key: Bytes::copy_from_slice(&key),
                value: Some(Bytes::copy_from_slice(&value)),
            }
        );
        assert_eq!(
            record.encode(),
            (
                Bytes::copy_from_slice(&key),
                Some(Bytes::copy_from_slice(&value))
            )
        );
        for version in [-1i16, 4, 17, i16::MAX] {
            let key = version.to_be_bytes();
            assert!(matches!(
                GroupRecord::decode(&key, None),
                Ok(GroupRecord::Unknown { key_version, value: None, .. }) if key_version == version
            ));
        }
    }

    #[test]
    fn short_or_malformed_keys_and_values_are_errors() {
        assert!(matches!(
            GroupRecord::decode(&[], None),
            Err(RecordsError::UnexpectedEnd { .. })
        ));
        assert!(matches!(
            GroupRecord::decode(&[0], None),
            Err(RecordsError::UnexpectedEnd { .. })
        ));
        let (key, value) = offset_commit().encode();
        let value = value.unwrap();
        let mut trailing = value.to_vec();
        trailing.push(0);
        assert!(matches!(
            GroupRecord::decode(&key, Some(&trailing)),
            Err(RecordsError::TrailingBytes { count: 1, .. })
        ));
        assert!(GroupRecord::decode(&key, Some(&[])).is_err());
        assert!(GroupRecord::decode(&key[..key.len() - 1], Some(&value)).is_err());
    }

    #[test]
    fn an_expiring_commit_is_version_1_and_loses_what_version_1_lacks() {
        let GroupRecord::OffsetCommit { key, mut value } = offset_commit() else {
            unreachable!("offset_commit() builds an offset commit")
        };
        value.expire_timestamp_ms = Some(5_000);
        value.topic_id = Some(TopicId([1; 16]));
        let (key_bytes, value_bytes) = GroupRecord::OffsetCommit {
            key,
            value: value.clone(),
        }
        .encode();
        let value_bytes = value_bytes.unwrap();
        assert_eq!(value_bytes[..2], [0, 1]);
        let GroupRecord::OffsetCommit { value: read, .. } =
            GroupRecord::decode(&key_bytes, Some(&value_bytes)).unwrap()
        else {
            panic!("an offset commit key reads as an offset commit")
        };
        assert_eq!(read.expire_timestamp_ms, Some(5_000));
        assert_eq!(
            (read.leader_epoch, read.topic_id),
            (LeaderEpoch::NONE, None)
        );
    }

    #[test]
    fn strings_over_kafkas_limit_are_refused_not_truncated() {
        let GroupRecord::OffsetCommit { key, .. } = offset_commit() else {
            unreachable!("offset_commit() builds an offset commit")
        };
        let too_long = OffsetCommitKey {
            group: "g".repeat(STRING_BYTES_MAX + 1),
            ..key
        };
        assert!(matches!(
            GroupRecord::OffsetTombstone(too_long).try_encode(),
            Err(RecordsError::TooLong { field: "group", .. })
        ));
    }

    /// Records in the versions Kafka writes (so encode then decode is identity).
    fn record() -> impl Strategy<Value = GroupRecord> {
        let commit = (
            offset_commit::tests::key(),
            prop_oneof![
                offset_commit::tests::value_for(OFFSET_COMMIT_VALUE_VERSION),
                offset_commit::tests::value_for(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY),
            ],
        )
            .prop_map(|(key, value)| GroupRecord::OffsetCommit { key, value });
        let group = (
            ".{0,20}",
            group_metadata::tests::value_for(GROUP_METADATA_VALUE_VERSION),
        )
            .prop_map(|(group, value)| GroupRecord::GroupMetadata {
                key: GroupMetadataKey { group },
                value,
            });
        let offset_tombstone = offset_commit::tests::key().prop_map(GroupRecord::OffsetTombstone);
        let group_tombstone =
            ".{0,20}".prop_map(|group| GroupRecord::GroupTombstone(GroupMetadataKey { group }));
        prop_oneof![commit, group, offset_tombstone, group_tombstone]
    }

    /// Any value version of either record, as Kafka may have written it.
    fn any_version_value() -> impl Strategy<Value = (Bytes, Bytes)> {
        let commits = (0..=4i16).prop_flat_map(|version| {
            (
                offset_commit::tests::key(),
                offset_commit::tests::value_for(version),
            )
                .prop_map(move |(key, value)| {
                    (
                        key.encode().unwrap(),
                        value.encode_version(version).unwrap(),
                    )
                })
        });
        let groups = (0..=4i16).prop_flat_map(|version| {
            (".{0,20}", group_metadata::tests::value_for(version)).prop_map(
                move |(group, value)| {
                    let key = GroupMetadataKey { group }.encode().unwrap();
                    (key, value.encode_version(version).unwrap())
                },
            )
        });
        prop_oneof![commits, groups]
    }

    proptest! {
        #[test]
        fn records_round_trip(record in record()) {
            let (key, value) = record.encode();
            prop_assert_eq!(GroupRecord::decode(&key, value.as_deref()), Ok(record));
        }

        #[test]
        fn every_truncation_of_any_version_is_an_error((key, value) in any_version_value()) {
            prop_assert!(GroupRecord::decode(&key, Some(&value)).is_ok());
            for length in 0..value.len() {
                prop_assert!(GroupRecord::decode(&key, Some(&value[..length])).is_err());
            }
            for length in 0..key.len() {
                prop_assert!(GroupRecord::decode(&key[..length], Some(&value)).is_err());
            }
        }

        #[test]
        fn garbage_never_panics_and_what_decodes_re_encodes(
            key_version in 0..=2i16,
            key_tail in proptest::collection::vec(any::<u8>(), 0..40),
            value_version in 0..=5i16,
            value_tail in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let key = [&key_version.to_be_bytes()[..], &key_tail].concat();
            let value = [&value_version.to_be_bytes()[..], &value_tail].concat();
            if let Ok(record) = GroupRecord::decode(&key, Some(&value)) {
                let (key, value) = record.encode();
                prop_assert_eq!(GroupRecord::decode(&key, value.as_deref()), Ok(record));
            }
        }

        /// Tombstones too (no value): what decodes re-encodes.
        #[test]
        fn random_tombstones_fail_or_round_trip(
            key_version in 0..=2i16,
            key_tail in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let key = [&key_version.to_be_bytes()[..], &key_tail].concat();
            if let Ok(record) = GroupRecord::decode(&key, None) {
                let (key, value) = record.encode();
                prop_assert_eq!(value, None);
                prop_assert_eq!(GroupRecord::decode(&key, None), Ok(record));
            }
        }

        #[test]
        fn partitions_are_in_range(group in ".{0,40}", count in 1..=1000i32) {
            prop_assert!((0..count).contains(&offsets_partition_for(&group, count)));
        }
    }
}
