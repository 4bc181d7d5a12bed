//! The offset-commit record: which offset a group committed for a partition.
//!
//! Key (Kafka's `OffsetCommitKey`, versions 0 and 1 identical, classic layout):
//!
//! | field     | type   |                                   |
//! |-----------|--------|-----------------------------------|
//! | version   | int16  | 1 (0 from Kafka 0.8.2, read only) |
//! | group     | STRING |                                   |
//! | topic     | STRING |                                   |
//! | partition | int32  |                                   |
//!
//! Value (Kafka's `OffsetCommitValue`, a leading int16 version, then):
//!
//! | field           | type   | versions | notes                          |
//! |-----------------|--------|----------|--------------------------------|
//! | offset          | int64  | 0+       |                                |
//! | leaderEpoch     | int32  | 3+       | -1: none                       |
//! | metadata        | string | 0+       | compact from 4                 |
//! | commitTimestamp | int64  | 0+       |                                |
//! | expireTimestamp | int64  | 1 only   | -1: none (KIP-211 dropped it)  |
//! | topicId         | uuid   | tag 0, 4+| omitted when zero (Kafka 4.1+) |
//!
//! Version 4 is the first flexible one (KIP-915): compact strings and a
//! tagged-field section at the end.

use bytes::Bytes;

use super::RecordsError;
use crate::cluster::image::TopicId;
use crate::protocol::schema_wire::{Format, Reader, Writer};
use crate::types::{LeaderEpoch, Offset, PartitionId};

/// Key version Kafka writes for offset commits.
pub const OFFSET_COMMIT_KEY_VERSION: i16 = 1;
/// Key version Kafka 0.8.2 wrote; same layout, read only. Brook, like Kafka,
/// writes tombstones with version 1, which does not compact such a record away.
pub const OFFSET_COMMIT_KEY_VERSION_LEGACY: i16 = 0;
/// Value version written for a commit without an expiry: the one Kafka 4.1+
/// writes (its `topicId` tag is why it moved off version 3). Brokers since
/// KIP-915 (Kafka 3.5) read it; 3.x and 4.0 themselves wrote version 3, and
/// tools older than Kafka 4.1 may not read it.
pub const OFFSET_COMMIT_VALUE_VERSION: i16 = 4;
/// Value version Brook writes when there is no topic id (Kafka 3.x's).
pub const OFFSET_COMMIT_VALUE_VERSION_WITHOUT_TOPIC_ID: i16 = 3;
/// Value version written for a commit with a per-commit expiry (KIP-211: only
/// old `OffsetCommit` requests ask for one): only version 1 can carry it,
/// so Kafka writes it in that case at the cost of the leader epoch.
pub const OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY: i16 = 1;
/// Newest value version this module reads.
pub const OFFSET_COMMIT_VALUE_VERSION_MAX: i16 = 4;

/// The tag of `topicId` in version 4's tagged fields.
const TOPIC_ID_TAG: u32 = 0;
const TOPIC_ID_BYTES: usize = 16;

/// Identifies one committed offset: compaction keeps the newest value per key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OffsetCommitKey {
    pub group: String,
    pub topic: String,
    pub partition: PartitionId,
}

/// A committed offset as the coordinator keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetCommitValue {
    pub offset: Offset,
    /// [`LeaderEpoch::NONE`] when the client sent none or the record predates
    /// version 3.
    pub leader_epoch: LeaderEpoch,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// A per-commit expiry; `Some` makes the record version 1. Kafka reads a
    /// stored -1 as none, so `Some(-1)` is written but read back as `None`.
    pub expire_timestamp_ms: Option<i64>,
    /// The topic's id when known (Kafka 4.1+); `None` is Kafka's zero id.
    /// Version 1 cannot carry it, so it is dropped with an expiry, as in Kafka.
    pub topic_id: Option<TopicId>,
}

impl OffsetCommitKey {
    pub fn encode(&self) -> Result<Bytes, RecordsError> {
        let mut writer = Writer::new(Format::Classic);
        writer.int16(OFFSET_COMMIT_KEY_VERSION);
        writer.string("group", &self.group)?;
        writer.string("topic", &self.topic)?;
        writer.int32(self.partition.0);
        Ok(writer.finish())
    }

    /// Reads a key of version 0 or 1 (the caller has checked the version).
    pub fn decode(bytes: &[u8]) -> Result<OffsetCommitKey, RecordsError> {
        let mut reader = Reader::new(bytes, Format::Classic);
        let version = reader.int16()?;
        debug_assert!(
            version == OFFSET_COMMIT_KEY_VERSION || version == OFFSET_COMMIT_KEY_VERSION_LEGACY
        );
        let key = OffsetCommitKey {
            group: reader.string("group")?,
            topic: reader.string("topic")?,
            partition: PartitionId(reader.int32()?),
        };
        reader.finish("offset commit key")?;
        Ok(key)
    }
}

impl OffsetCommitValue {
    /// The version Kafka would write for this value.
    pub fn written_version(&self) -> i16 {
        // Version 3 unless there is a topic id to carry: every tool that
        // reads Kafka 3.x's offsets topic reads it.
        match (self.expire_timestamp_ms, self.topic_id) {
            (Some(_), _) => OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY,
            (None, Some(_)) => OFFSET_COMMIT_VALUE_VERSION,
            (None, None) => OFFSET_COMMIT_VALUE_VERSION_WITHOUT_TOPIC_ID,
        }
    }

    pub fn encode(&self) -> Result<Bytes, RecordsError> {
        self.encode_version(self.written_version())
    }

    /// Writes the fields `version` has; the others are dropped.
    pub(super) fn encode_version(&self, version: i16) -> Result<Bytes, RecordsError> {
        assert!((0..=OFFSET_COMMIT_VALUE_VERSION_MAX).contains(&version));
        let mut writer = Writer::new(value_format(version));
        writer.int16(version);
        writer.int64(self.offset.0);
        if version >= 3 {
            writer.int32(self.leader_epoch.0);
        }
        writer.string("metadata", &self.metadata)?;
        writer.int64(self.commit_timestamp_ms);
        if version == 1 {
            writer.int64(self.expire_timestamp_ms.unwrap_or(-1));
        }
        match self.topic_id.filter(|id| !id.is_zero()) {
            Some(TopicId(id)) => writer.tagged_fields(&[(TOPIC_ID_TAG, &id)]),
            None => writer.tagged_fields(&[]),
        }
        Ok(writer.finish())
    }

    /// Reads any version Kafka has written (0–4).
    pub fn decode(bytes: &[u8]) -> Result<OffsetCommitValue, RecordsError> {
        let mut reader = Reader::new(bytes, Format::Classic);
        let version = reader.int16()?;
        if !(0..=OFFSET_COMMIT_VALUE_VERSION_MAX).contains(&version) {
            return Err(RecordsError::UnsupportedValueVersion {
                record: "offset commit value",
                version,
            });
        }
        reader.set_format(value_format(version));
        let offset = Offset(reader.int64()?);
        let leader_epoch = match version {
            3.. => LeaderEpoch(reader.int32()?),
            _ => LeaderEpoch::NONE,
        };
        let metadata = reader.string("metadata")?;
        let commit_timestamp_ms = reader.int64()?;
        let expire_timestamp_ms = match version {
            1 => Some(reader.int64()?).filter(|&timestamp| timestamp != -1),
            _ => None,
        };
        let mut topic_id = None;
        reader.tagged_fields(|tag, data| {
            if tag == TOPIC_ID_TAG {
                topic_id = Some(read_topic_id(data)?).filter(|id| !id.is_zero());
            }
            Ok(())
        })?;
        reader.finish("offset commit value")?;
        Ok(OffsetCommitValue {
            offset,
            leader_epoch,
            metadata,
            commit_timestamp_ms,
            expire_timestamp_ms,
            topic_id,
        })
    }
}

fn value_format(version: i16) -> Format {
    match version {
        4.. => Format::Flexible,
        _ => Format::Classic,
    }
}

fn read_topic_id(data: &[u8]) -> Result<TopicId, RecordsError> {
    let id: [u8; TOPIC_ID_BYTES] = data.try_into().map_err(|_| RecordsError::TaggedFieldSize {
        tag: TOPIC_ID_TAG,
        size: data.len(),
        expected: TOPIC_ID_BYTES,
    })?;
    Ok(TopicId(id))
}

#[cfg(test)]
pub(super) mod tests {
    use proptest::prelude::*;

    use super::*;

    fn value() -> OffsetCommitValue {
        OffsetCommitValue {
            offset: Offset(2_217_128),
            leader_epoch: LeaderEpoch::NONE,
            metadata: String::new(),
            commit_timestamp_ms: 1_758_335_260_726,
            expire_timestamp_ms: None,
            topic_id: None,
        }
    }

    /// A value record a Kafka 4.1.0 broker wrote, as quoted in franz-go issue
    /// #1105 (the report of tools failing on Kafka 4.1's version 4).
    #[test]
    fn reads_and_writes_the_bytes_kafka_4_1_wrote() {
        let kafka = [
            0x00, 0x04, // version 4 (flexible)
            0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0xd4, 0xa8, // offset 2217128
            0xff, 0xff, 0xff, 0xff, // leaderEpoch -1
            0x01, // metadata: compact string, length 0 + 1
            0x00, 0x00, 0x01, 0x99, 0x64, 0xf2, 0xd8, 0x36, // commitTimestamp
            0x00, // no tagged fields (topicId is zero)
        ];
        assert_eq!(OffsetCommitValue::decode(&kafka), Ok(value()));
        assert_eq!(value().encode_version(4).unwrap()[..], kafka);
    }

    #[test]
    fn a_topic_id_is_tagged_field_zero() {
        let mut with_id = value();
        with_id.topic_id = Some(TopicId([0xab; 16]));
        let bytes = with_id.encode().unwrap();
        let mut expected = vec![0x00, 0x04];
        expected.extend_from_slice(&2_217_128i64.to_be_bytes()); // offset
        expected.extend_from_slice(&(-1i32).to_be_bytes()); // leaderEpoch
        expected.push(0x01); // metadata ""
        expected.extend_from_slice(&1_758_335_260_726i64.to_be_bytes()); // commitTimestamp
        expected.extend_from_slice(&[0x01, 0x00, 0x10]); // 1 tagged field: tag 0, 16 bytes
        expected.extend_from_slice(&[0xab; 16]); // topicId
        assert_eq!(bytes[..], expected[..]);
        assert_eq!(OffsetCommitValue::decode(&bytes), Ok(with_id));
    }

    #[test]
    fn a_key_is_built_field_by_field() {
        let key = OffsetCommitKey {
            group: "group".into(),
            topic: "topic".into(),
            partition: PartitionId(3),
        };
        let bytes = key.encode().unwrap();
        let expected = [
            0x00, 0x01, // key version 1: offset commit
            0x00, 0x05, b'g', b'r', b'o', b'u', b'p', // group
            0x00, 0x05, b't', b'o', b'p', b'i', b'c', // topic
            0x00, 0x00, 0x00, 0x03, // partition
        ];
        assert_eq!(bytes[..], expected);
        assert_eq!(OffsetCommitKey::decode(&bytes), Ok(key.clone()));
        let mut legacy = expected;
        legacy[1] = 0x00;
        assert_eq!(OffsetCommitKey::decode(&legacy), Ok(key));
    }

    /// Each older version written by hand from Kafka's schema: offset 5,
    /// metadata "m", commit timestamp 7 (and for v1 expiry 9, for v3 epoch 2).
    #[test]
    fn reads_every_older_version() {
        let offset = [0, 0, 0, 0, 0, 0, 0, 5];
        let metadata = [0, 1, b'm'];
        let commit = [0, 0, 0, 0, 0, 0, 0, 7];
        let expire = [0, 0, 0, 0, 0, 0, 0, 9];
        let epoch = [0, 0, 0, 2];
        let versions = [
            (
                [&[0, 0][..], &offset, &metadata, &commit].concat(),
                None,
                -1,
            ),
            (
                [&[0, 1][..], &offset, &metadata, &commit, &expire].concat(),
                Some(9),
                -1,
            ),
            (
                [&[0, 2][..], &offset, &metadata, &commit].concat(),
                None,
                -1,
            ),
            (
                [&[0, 3][..], &offset, &epoch, &metadata, &commit].concat(),
                None,
                2,
            ),
        ];
        for (bytes, expire_timestamp_ms, epoch) in versions {
            let decoded = OffsetCommitValue::decode(&bytes).unwrap();
            assert_eq!(
                decoded,
                OffsetCommitValue {
                    offset: Offset(5),
                    leader_epoch: LeaderEpoch(epoch),
                    metadata: "m".into(),
                    commit_timestamp_ms: 7,
                    expire_timestamp_ms,
                    topic_id: None,
                }
            );
        }
    }

    #[test]
    fn version_1_without_an_expiry_reads_as_none_and_an_expiry_writes_version_1() {
        let bytes = [&[0, 1][..], &[0; 8], &[0, 0], &[0; 8], &[0xff; 8]].concat();
        assert_eq!(
            OffsetCommitValue::decode(&bytes)
                .unwrap()
                .expire_timestamp_ms,
            None
        );
        let mut expiring = value();
        expiring.expire_timestamp_ms = Some(10);
        expiring.leader_epoch = LeaderEpoch(4);
        assert_eq!(expiring.encode().unwrap()[..2], [0, 1]);
    }

    #[test]
    fn unknown_value_versions_are_errors() {
        for version in [-1i16, 5, i16::MAX] {
            let bytes = [&version.to_be_bytes()[..], &[0; 30]].concat();
            assert_eq!(
                OffsetCommitValue::decode(&bytes),
                Err(RecordsError::UnsupportedValueVersion {
                    record: "offset commit value",
                    version,
                })
            );
        }
    }

    #[test]
    fn a_topic_id_tag_of_the_wrong_size_is_an_error() {
        let bytes = [&[0, 4][..], &[0; 12], &[1], &[0; 8], &[1, 0, 2, 0xab, 0xab]].concat();
        assert!(matches!(
            OffsetCommitValue::decode(&bytes),
            Err(RecordsError::TaggedFieldSize { size: 2, .. })
        ));
    }

    /// Values that a given version carries whole.
    pub fn value_for(version: i16) -> impl Strategy<Value = OffsetCommitValue> {
        (
            any::<i64>(),
            any::<i32>(),
            ".{0,20}",
            any::<i64>(),
            any::<i64>().prop_filter("-1 means none", |&timestamp| timestamp != -1),
            proptest::option::of(
                any::<[u8; 16]>().prop_filter("zero means none", |id| *id != [0; 16]),
            ),
        )
            .prop_map(move |(offset, epoch, metadata, commit, expire, id)| {
                OffsetCommitValue {
                    offset: Offset(offset),
                    leader_epoch: if version >= 3 {
                        LeaderEpoch(epoch)
                    } else {
                        LeaderEpoch::NONE
                    },
                    metadata,
                    commit_timestamp_ms: commit,
                    expire_timestamp_ms: (version == 1).then_some(expire),
                    topic_id: id.filter(|_| version >= 4).map(TopicId),
                }
            })
    }

    pub fn key() -> impl Strategy<Value = OffsetCommitKey> {
        (".{0,20}", ".{0,20}", any::<i32>()).prop_map(|(group, topic, partition)| OffsetCommitKey {
            group,
            topic,
            partition: PartitionId(partition),
        })
    }

    proptest! {
        #[test]
        fn every_version_round_trips(
            (version, value) in (0..=OFFSET_COMMIT_VALUE_VERSION_MAX)
                .prop_flat_map(|version| (Just(version), value_for(version)))
        ) {
            let bytes = value.encode_version(version).unwrap();
            prop_assert_eq!(OffsetCommitValue::decode(&bytes), Ok(value));
        }

        #[test]
        fn keys_round_trip(key in key()) {
            let bytes = key.encode().unwrap();
            prop_assert_eq!(OffsetCommitKey::decode(&bytes), Ok(key));
        }
    }
}
