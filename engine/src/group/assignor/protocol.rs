//! The consumer protocol's bytes: what a member puts in JoinGroup's protocol
//! metadata (`ConsumerProtocolSubscription`), what the leader puts in SyncGroup's
//! assignments (`ConsumerProtocolAssignment`), and the assignors' own user data
//! inside them (`StickyAssignorUserData` v0/v1, the cooperative-sticky
//! generation).
//!
//! Wire format, as Kafka's `ConsumerProtocol` writes it: an `int16` version,
//! then the message's fields at that version (schemas in Kafka's
//! `ConsumerProtocolSubscription.json` / `ConsumerProtocolAssignment.json`,
//! versions 0–3; the structs come from the `kafka-protocol` crate). A version
//! above 3 is read as 3 (Kafka's rule: later versions only append fields), a
//! negative one is an error. Trailing bytes are ignored, as Kafka ignores them.
//!
//! Subscription fields by version: 0 topics and user data; 1 adds owned
//! partitions; 2 adds the generation (`-1` for none); 3 adds the rack (null or
//! empty for none).
//!
//! `StickyAssignorUserData` (no version prefix; Kafka tells the versions apart by
//! trying v1 and falling back to v0):
//!
//! ```text
//! v0: previous_assignment: [topic: string, partitions: [int32]]
//! v1: previous_assignment: [topic: string, partitions: [int32]], generation: int32
//! ```
//!
//! with `string` an `int16` length and UTF-8 bytes, and `[x]` an `int32` count
//! then the elements, all big-endian. The cooperative-sticky assignor's user
//! data is one `int32`, the member's generation.
//!
//! Decoding never panics: every malformed input is a [`ProtocolError`].

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
    consumer_protocol_assignment, consumer_protocol_subscription,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::TopicPartition;
use super::java::compare_strings;

/// The lowest consumer protocol version (subscription and assignment alike).
pub const CONSUMER_PROTOCOL_VERSION_MIN: i16 = 0;
/// The highest consumer protocol version we read and write; higher versions are
/// read and written as this one.
pub const CONSUMER_PROTOCOL_VERSION_MAX: i16 = 3;

/// Bytes of the version prefix before each consumer protocol message.
const VERSION_PREFIX_BYTES: usize = 2;

/// Why consumer protocol bytes or assignor user data could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("consumer protocol bytes end after {length} bytes, before the 2-byte version")]
    MissingVersion { length: usize },
    #[error("consumer protocol version {version} is below the lowest, 0")]
    UnsupportedVersion { version: i16 },
    #[error("malformed {message} at version {version}: {reason}")]
    Malformed {
        message: &'static str,
        version: i16,
        reason: String,
    },
    #[error("cannot write {message} at version {version}: {reason}")]
    Unencodable {
        message: &'static str,
        version: i16,
        reason: String,
    },
    #[error("{schema} ends at byte {offset}: {need} more bytes needed, {have} left")]
    UnexpectedEnd {
        schema: &'static str,
        offset: usize,
        need: usize,
        have: usize,
    },
    #[error("{schema} has a negative {field} length {length} at byte {offset}")]
    NegativeLength {
        schema: &'static str,
        field: &'static str,
        offset: usize,
        length: i32,
    },
    #[error("{schema} declares {length} {field} at byte {offset} with {have} bytes left")]
    LengthBeyondEnd {
        schema: &'static str,
        field: &'static str,
        offset: usize,
        length: usize,
        have: usize,
    },
}

/// What a consumer sends as JoinGroup protocol metadata: the domain form of
/// `ConsumerProtocolSubscription`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscriptionMetadata {
    pub topics: Vec<String>,
    pub user_data: Option<Bytes>,
    /// Version 1 and later.
    pub owned_partitions: Vec<TopicPartition>,
    /// Version 2 and later; a negative generation on the wire reads as `None`.
    pub generation: Option<i32>,
    /// Version 3 and later; an empty rack on the wire reads as `None`.
    pub rack: Option<String>,
}

/// What the leader sends each member in SyncGroup: the domain form of
/// `ConsumerProtocolAssignment`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AssignmentMetadata {
    pub partitions: Vec<TopicPartition>,
    pub user_data: Option<Bytes>,
}

/// The sticky assignor's user data: the member's previous assignment and, from
/// v1, the generation it was made in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StickyUserData {
    pub partitions: Vec<TopicPartition>,
    pub generation: Option<i32>,
}

/// Kafka clamps a version above the highest it knows and refuses a negative one.
fn checked_version(version: i16) -> Result<i16, ProtocolError> {
    if version < CONSUMER_PROTOCOL_VERSION_MIN {
        return Err(ProtocolError::UnsupportedVersion { version });
    }
    Ok(version.min(CONSUMER_PROTOCOL_VERSION_MAX))
}

fn str_bytes(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

/// Groups partitions by topic in the order topics first appear, partitions in
/// their given order, as Kafka's `serializeAssignment` does.
fn group_by_topic(partitions: &[TopicPartition]) -> Vec<(&str, Vec<i32>)> {
    let mut groups: Vec<(&str, Vec<i32>)> = Vec::new();
    for partition in partitions {
        match groups
            .iter_mut()
            .find(|(topic, _)| *topic == partition.topic)
        {
            Some((_, numbers)) => numbers.push(partition.partition),
            None => groups.push((&partition.topic, vec![partition.partition])),
        }
    }
    groups
}

/// Writes `version` and then `message` at the version that was clamped.
fn version_prefixed<M: Encodable>(
    message: &M,
    version: i16,
    name: &'static str,
) -> Result<Bytes, ProtocolError> {
    let unencodable = |reason: String| ProtocolError::Unencodable {
        message: name,
        version,
        reason,
    };
    let size = message
        .compute_size(version)
        .map_err(|error| unencodable(error.to_string()))?;
    let mut buffer = BytesMut::with_capacity(VERSION_PREFIX_BYTES + size);
    buffer.put_i16(version);
    message
        .encode(&mut buffer, version)
        .map_err(|error| unencodable(error.to_string()))?;
    Ok(buffer.freeze())
}

/// Reads the version prefix and returns it clamped, with the bytes after it.
fn read_version(bytes: &[u8]) -> Result<(i16, Bytes), ProtocolError> {
    let Some((prefix, body)) = bytes.split_first_chunk::<VERSION_PREFIX_BYTES>() else {
        return Err(ProtocolError::MissingVersion {
            length: bytes.len(),
        });
    };
    let version = checked_version(i16::from_be_bytes(*prefix))?;
    Ok((version, Bytes::copy_from_slice(body)))
}

/// Encodes a subscription as Kafka's `ConsumerProtocol.serializeSubscription`:
/// topics sorted, owned partitions sorted and grouped by topic. Fields the
/// version lacks are left out.
pub fn encode_subscription(
    metadata: &SubscriptionMetadata,
    version: i16,
) -> Result<Bytes, ProtocolError> {
    let version = checked_version(version)?;
    let mut topics: Vec<&String> = metadata.topics.iter().collect();
    topics.sort_by(|left, right| compare_strings(left, right));
    let mut owned = metadata.owned_partitions.clone();
    owned.sort();
    let mut message = ConsumerProtocolSubscription::default();
    message.topics = topics.into_iter().map(|topic| str_bytes(topic)).collect();
    message.user_data = metadata.user_data.clone();
    message.owned_partitions = group_by_topic(&owned)
        .into_iter()
        .map(|(topic, partitions)| {
            consumer_protocol_subscription::TopicPartition::default()
                .with_topic(TopicName(str_bytes(topic)))
                .with_partitions(partitions)
        })
        .collect();
    message.generation_id = metadata.generation.unwrap_or(-1);
    message.rack_id = metadata.rack.as_deref().map(str_bytes);
    version_prefixed(&message, version, "ConsumerProtocolSubscription")
}

/// Decodes JoinGroup protocol metadata as Kafka's
/// `ConsumerProtocol.deserializeSubscription` does.
pub fn decode_subscription(bytes: &[u8]) -> Result<SubscriptionMetadata, ProtocolError> {
    let (version, mut body) = read_version(bytes)?;
    let message = ConsumerProtocolSubscription::decode(&mut body, version).map_err(|error| {
        ProtocolError::Malformed {
            message: "ConsumerProtocolSubscription",
            version,
            reason: error.to_string(),
        }
    })?;
    let owned_partitions = message
        .owned_partitions
        .iter()
        .flat_map(|topic| {
            topic
                .partitions
                .iter()
                .map(|&partition| TopicPartition::new(topic.topic.0.as_str(), partition))
        })
        .collect();
    Ok(SubscriptionMetadata {
        topics: message
            .topics
            .iter()
            .map(|topic| topic.as_str().to_owned())
            .collect(),
        user_data: message.user_data,
        owned_partitions,
        generation: (message.generation_id >= 0).then_some(message.generation_id),
        rack: message
            .rack_id
            .filter(|rack| !rack.is_empty())
            .map(|rack| rack.as_str().to_owned()),
    })
}

/// Encodes an assignment as Kafka's `ConsumerProtocol.serializeAssignment`:
/// partitions grouped by topic in the order the topics first appear.
pub fn encode_assignment(
    metadata: &AssignmentMetadata,
    version: i16,
) -> Result<Bytes, ProtocolError> {
    let version = checked_version(version)?;
    let mut message = ConsumerProtocolAssignment::default();
    message.assigned_partitions = group_by_topic(&metadata.partitions)
        .into_iter()
        .map(|(topic, partitions)| {
            consumer_protocol_assignment::TopicPartition::default()
                .with_topic(TopicName(str_bytes(topic)))
                .with_partitions(partitions)
        })
        .collect();
    message.user_data = metadata.user_data.clone();
    version_prefixed(&message, version, "ConsumerProtocolAssignment")
}

/// Decodes SyncGroup assignment bytes as Kafka's
/// `ConsumerProtocol.deserializeAssignment` does.
pub fn decode_assignment(bytes: &[u8]) -> Result<AssignmentMetadata, ProtocolError> {
    let (version, mut body) = read_version(bytes)?;
    let message = ConsumerProtocolAssignment::decode(&mut body, version).map_err(|error| {
        ProtocolError::Malformed {
            message: "ConsumerProtocolAssignment",
            version,
            reason: error.to_string(),
        }
    })?;
    let partitions = message
        .assigned_partitions
        .iter()
        .flat_map(|topic| {
            topic
                .partitions
                .iter()
                .map(|&partition| TopicPartition::new(topic.topic.0.as_str(), partition))
        })
        .collect();
    Ok(AssignmentMetadata {
        partitions,
        user_data: message.user_data,
    })
}

/// Encodes the sticky assignor's user data: v1 when there is a generation (as
/// Kafka always writes), v0 when there is none (what a reader would fall back
/// to). Topics are grouped in the order they first appear; Kafka groups through
/// a `HashMap`, so its topic order differs between versions and no reader
/// depends on it.
pub fn encode_sticky_user_data(data: &StickyUserData) -> Result<Bytes, ProtocolError> {
    const SCHEMA: &str = "StickyAssignorUserData";
    let too_long = |field: &'static str, length: usize| ProtocolError::Unencodable {
        message: SCHEMA,
        version: i16::from(data.generation.is_some()),
        reason: format!("{field} of {length} is longer than its length prefix allows"),
    };
    let groups = group_by_topic(&data.partitions);
    let mut buffer = BytesMut::new();
    let topic_count = i32::try_from(groups.len()).map_err(|_| too_long("topics", groups.len()))?;
    buffer.put_i32(topic_count);
    for (topic, partitions) in groups {
        let topic_bytes =
            i16::try_from(topic.len()).map_err(|_| too_long("topic name", topic.len()))?;
        buffer.put_i16(topic_bytes);
        buffer.put_slice(topic.as_bytes());
        let partition_count = i32::try_from(partitions.len())
            .map_err(|_| too_long("partitions", partitions.len()))?;
        buffer.put_i32(partition_count);
        for partition in partitions {
            buffer.put_i32(partition);
        }
    }
    if let Some(generation) = data.generation {
        buffer.put_i32(generation);
    }
    Ok(buffer.freeze())
}

/// Decodes the sticky assignor's user data as Kafka's `StickyAssignor` does:
/// v1 if it parses, otherwise v0 (no generation).
pub fn decode_sticky_user_data(bytes: &[u8]) -> Result<StickyUserData, ProtocolError> {
    let mut reader = Reader::new(bytes, "StickyAssignorUserData v1");
    let version_1 = read_previous_assignment(&mut reader).and_then(|partitions| {
        let generation = reader.read_i32()?;
        Ok(StickyUserData {
            partitions,
            generation: Some(generation),
        })
    });
    version_1.or_else(|_| {
        let mut reader = Reader::new(bytes, "StickyAssignorUserData v0");
        let partitions = read_previous_assignment(&mut reader)?;
        Ok(StickyUserData {
            partitions,
            generation: None,
        })
    })
}

fn read_previous_assignment(reader: &mut Reader<'_>) -> Result<Vec<TopicPartition>, ProtocolError> {
    let topic_count = reader.read_array_length("previous_assignment")?;
    let mut partitions = Vec::new();
    for _ in 0..topic_count {
        let topic = reader.read_string("topic")?;
        let partition_count = reader.read_array_length("partitions")?;
        for _ in 0..partition_count {
            partitions.push(TopicPartition::new(topic.clone(), reader.read_i32()?));
        }
    }
    Ok(partitions)
}

/// Encodes the cooperative-sticky assignor's user data: its generation.
pub fn encode_cooperative_user_data(generation: i32) -> Bytes {
    Bytes::copy_from_slice(&generation.to_be_bytes())
}

/// Decodes the cooperative-sticky assignor's user data (its generation).
pub fn decode_cooperative_user_data(bytes: &[u8]) -> Result<i32, ProtocolError> {
    Reader::new(bytes, "CooperativeStickyAssignorUserData").read_i32()
}

/// A bounds-checked big-endian reader for the assignors' user data schemas,
/// which are Kafka "struct" schemas without a version prefix.
struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
    schema: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], schema: &'static str) -> Self {
        Reader {
            bytes,
            offset: 0,
            schema,
        }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.offset
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], ProtocolError> {
        let have = self.remaining();
        let chunk =
            self.bytes[self.offset..]
                .first_chunk::<N>()
                .ok_or(ProtocolError::UnexpectedEnd {
                    schema: self.schema,
                    offset: self.offset,
                    need: N,
                    have,
                })?;
        self.offset += N;
        Ok(*chunk)
    }

    fn read_i32(&mut self) -> Result<i32, ProtocolError> {
        Ok(i32::from_be_bytes(self.take::<4>()?))
    }

    /// A non-nullable array's count: negative, or more elements than bytes
    /// left, is malformed (Kafka's `ArrayOf.read` refuses both).
    fn read_array_length(&mut self, field: &'static str) -> Result<usize, ProtocolError> {
        let offset = self.offset;
        let length = self.read_i32()?;
        let Ok(count) = usize::try_from(length) else {
            return Err(ProtocolError::NegativeLength {
                schema: self.schema,
                field,
                offset,
                length,
            });
        };
        if count > self.remaining() {
            return Err(ProtocolError::LengthBeyondEnd {
                schema: self.schema,
                field,
                offset,
                length: count,
                have: self.remaining(),
            });
        }
        Ok(count)
    }

    /// A non-nullable string. Like Java's `new String(bytes, UTF_8)`, invalid
    /// UTF-8 becomes U+FFFD rather than an error.
    fn read_string(&mut self, field: &'static str) -> Result<String, ProtocolError> {
        let offset = self.offset;
        let length = i16::from_be_bytes(self.take::<2>()?);
        let Ok(count) = usize::try_from(length) else {
            return Err(ProtocolError::NegativeLength {
                schema: self.schema,
                field,
                offset,
                length: i32::from(length),
            });
        };
        if count > self.remaining() {
            return Err(ProtocolError::UnexpectedEnd {
                schema: self.schema,
                offset: self.offset,
                need: count,
                have: self.remaining(),
            });
        }
        let text = String::from_utf8_lossy(&self.bytes[self.offset..self.offset + count]);
        self.offset += count;
        Ok(text.into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn partitions(list: &[(&str, i32)]) -> Vec<TopicPartition> {
        list.iter()
            .map(|&(topic, partition)| TopicPartition::new(topic, partition))
            .collect()
    }

    fn full_subscription() -> SubscriptionMetadata {
        SubscriptionMetadata {
            topics: vec!["t1".into(), "t0".into()],
            user_data: Some(Bytes::from_static(b"\x00\x01")),
            owned_partitions: partitions(&[("t1", 2), ("t0", 1), ("t1", 0)]),
            generation: Some(7),
            rack: Some("rack-a".into()),
        }
    }

    #[test]
    fn subscription_versions_carry_their_fields() {
        let sorted_owned = partitions(&[("t0", 1), ("t1", 0), ("t1", 2)]);
        // (version written, owned kept, generation kept, rack kept)
        let rows = [
            (0, false, false, false),
            (1, true, false, false),
            (2, true, true, false),
            (3, true, true, true),
            (9, true, true, true),
        ];
        for (version, owned, generation, rack) in rows {
            let bytes = encode_subscription(&full_subscription(), version).unwrap();
            let written = version.min(CONSUMER_PROTOCOL_VERSION_MAX);
            assert_eq!(bytes[..2], written.to_be_bytes(), "version {version}");
            let decoded = decode_subscription(&bytes).unwrap();
            assert_eq!(decoded.topics, vec!["t0", "t1"], "sorted on the wire");
            assert_eq!(decoded.user_data, full_subscription().user_data);
            let expected_owned = if owned { sorted_owned.clone() } else { vec![] };
            assert_eq!(
                decoded.owned_partitions, expected_owned,
                "version {version}"
            );
            assert_eq!(decoded.generation, generation.then_some(7));
            assert_eq!(decoded.rack.is_some(), rack, "version {version}");
        }
    }

    #[test]
    fn subscription_v0_bytes_match_kafka() {
        let metadata = SubscriptionMetadata {
            topics: vec!["t".into()],
            ..SubscriptionMetadata::default()
        };
        let bytes = encode_subscription(&metadata, 0).unwrap();
        // version 0, one topic "t", null user data.
        let expected: &[u8] = &[0, 0, 0, 0, 0, 1, 0, 1, b't', 0xff, 0xff, 0xff, 0xff];
        assert_eq!(&bytes[..], expected);
    }

    #[test]
    fn a_newer_version_is_read_as_the_newest_and_trailing_bytes_are_ignored() {
        let mut bytes = encode_subscription(&full_subscription(), 3)
            .unwrap()
            .to_vec();
        bytes[1] = 5;
        bytes.extend_from_slice(b"future fields");
        let decoded = decode_subscription(&bytes).unwrap();
        assert_eq!(decoded.rack.as_deref(), Some("rack-a"));
    }

    #[test]
    fn empty_rack_and_negative_generation_read_as_none() {
        let mut metadata = full_subscription();
        metadata.rack = Some(String::new());
        metadata.generation = Some(-3);
        let decoded = decode_subscription(&encode_subscription(&metadata, 3).unwrap()).unwrap();
        assert_eq!(decoded.rack, None);
        assert_eq!(decoded.generation, None);
    }

    #[test]
    fn assignment_round_trips_every_version_grouped_by_first_appearance() {
        let metadata = AssignmentMetadata {
            partitions: partitions(&[("b", 1), ("a", 0), ("b", 0)]),
            user_data: Some(Bytes::from_static(b"x")),
        };
        for version in 0..=CONSUMER_PROTOCOL_VERSION_MAX {
            let bytes = encode_assignment(&metadata, version).unwrap();
            let decoded = decode_assignment(&bytes).unwrap();
            assert_eq!(
                decoded.partitions,
                partitions(&[("b", 1), ("b", 0), ("a", 0)]),
                "version {version}"
            );
            assert_eq!(decoded.user_data, metadata.user_data);
        }
    }

    #[test]
    fn bad_versions_and_short_input_are_errors() {
        let rows: [(&[u8], ProtocolError); 4] = [
            (&[], ProtocolError::MissingVersion { length: 0 }),
            (&[0], ProtocolError::MissingVersion { length: 1 }),
            (
                &[0xff, 0xff, 0, 0, 0, 0],
                ProtocolError::UnsupportedVersion { version: -1 },
            ),
            (
                &[0x80, 0x00],
                ProtocolError::UnsupportedVersion { version: -32768 },
            ),
        ];
        for (bytes, expected) in rows {
            assert_eq!(decode_subscription(bytes), Err(expected.clone()));
            assert_eq!(decode_assignment(bytes), Err(expected));
        }
        assert!(matches!(
            decode_subscription(&[0, 1, 0, 0, 0, 1]),
            Err(ProtocolError::Malformed { version: 1, .. })
        ));
        assert!(matches!(
            encode_assignment(&AssignmentMetadata::default(), -1),
            Err(ProtocolError::UnsupportedVersion { version: -1 })
        ));
    }

    #[test]
    fn sticky_user_data_v1_bytes_and_v0_fallback() {
        let data = StickyUserData {
            partitions: partitions(&[("t", 0), ("t", 2)]),
            generation: Some(4),
        };
        let bytes = encode_sticky_user_data(&data).unwrap();
        let expected: &[u8] = &[
            0, 0, 0, 1, // one topic
            0, 1, b't', // "t"
            0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, // partitions [0, 2]
            0, 0, 0, 4, // generation 4
        ];
        assert_eq!(&bytes[..], expected);
        assert_eq!(decode_sticky_user_data(&bytes), Ok(data.clone()));
        let version_0 = &bytes[..bytes.len() - 4];
        let decoded = decode_sticky_user_data(version_0).unwrap();
        assert_eq!(decoded.partitions, data.partitions);
        assert_eq!(decoded.generation, None);
    }

    #[test]
    fn sticky_user_data_errors_are_structured() {
        let rows: [(&[u8], ProtocolError); 3] = [
            (
                &[0, 0],
                ProtocolError::UnexpectedEnd {
                    schema: "StickyAssignorUserData v0",
                    offset: 0,
                    need: 4,
                    have: 2,
                },
            ),
            (
                &[0xff, 0xff, 0xff, 0xff],
                ProtocolError::NegativeLength {
                    schema: "StickyAssignorUserData v0",
                    field: "previous_assignment",
                    offset: 0,
                    length: -1,
                },
            ),
            (
                &[0, 0, 0, 9, 0],
                ProtocolError::LengthBeyondEnd {
                    schema: "StickyAssignorUserData v0",
                    field: "previous_assignment",
                    offset: 0,
                    length: 9,
                    have: 1,
                },
            ),
        ];
        for (bytes, expected) in rows {
            assert_eq!(decode_sticky_user_data(bytes), Err(expected));
        }
    }

    #[test]
    fn cooperative_user_data_is_one_generation() {
        assert_eq!(
            decode_cooperative_user_data(&encode_cooperative_user_data(12)),
            Ok(12)
        );
        assert!(decode_cooperative_user_data(&[0, 0, 1]).is_err());
    }

    fn topic_partition_strategy() -> impl Strategy<Value = TopicPartition> {
        ("[a-c]{1,3}", 0..8i32).prop_map(|(topic, partition)| TopicPartition::new(topic, partition))
    }

    proptest! {
        /// Bytes behind a version Kafka writes either fail or decode to
        /// metadata that encodes (at the newest version) back to the same,
        /// up to the order the encoders group and sort in.
        #[test]
        fn garbage_fails_or_decodes_to_what_round_trips(
            version in 0..=3i16,
            tail in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let bytes = [&version.to_be_bytes()[..], &tail].concat();
            let sorted = |mut partitions: Vec<TopicPartition>| {
                partitions.sort();
                partitions
            };
            if let Ok(subscription) = decode_subscription(&bytes) {
                let again = decode_subscription(&encode_subscription(&subscription, 3).unwrap());
                let mut expected = subscription;
                expected.topics.sort();
                expected.owned_partitions = sorted(expected.owned_partitions);
                let mut again = again.unwrap();
                again.owned_partitions = sorted(again.owned_partitions);
                prop_assert_eq!(again, expected);
            }
            if let Ok(assignment) = decode_assignment(&bytes) {
                let again = decode_assignment(&encode_assignment(&assignment, 3).unwrap()).unwrap();
                prop_assert_eq!(sorted(again.partitions), sorted(assignment.partitions));
                prop_assert_eq!(again.user_data, assignment.user_data);
            }
            if let Ok(sticky) = decode_sticky_user_data(&tail) {
                let again = decode_sticky_user_data(&encode_sticky_user_data(&sticky).unwrap()).unwrap();
                prop_assert_eq!(sorted(again.partitions), sorted(sticky.partitions));
                prop_assert_eq!(again.generation, sticky.generation);
            }
            if let Ok(generation) = decode_cooperative_user_data(&tail) {
                let again = encode_cooperative_user_data(generation);
                prop_assert_eq!(again.as_ref(), &tail[..4]);
            }
        }

        #[test]
        fn subscription_round_trips_at_version_3(
            topics in proptest::collection::btree_set("[a-z]{1,5}", 0..5),
            owned in proptest::collection::btree_set(topic_partition_strategy(), 0..6),
            generation in proptest::option::of(0..1000i32),
            rack in proptest::option::of("[a-z]{1,4}"),
            user_data in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
        ) {
            let metadata = SubscriptionMetadata {
                topics: topics.into_iter().collect(),
                user_data: user_data.map(Bytes::from),
                owned_partitions: owned.into_iter().collect(),
                generation,
                rack,
            };
            let bytes = encode_subscription(&metadata, 3).unwrap();
            prop_assert_eq!(decode_subscription(&bytes).unwrap(), metadata);
        }

        #[test]
        fn sticky_user_data_round_trips(
            owned in proptest::collection::vec(topic_partition_strategy(), 0..8),
            generation in proptest::option::of(any::<i32>()),
        ) {
            let mut partitions = owned;
            // Grouping by topic reorders; compare against the grouped order.
            let grouped: Vec<TopicPartition> = group_by_topic(&partitions)
                .into_iter()
                .flat_map(|(topic, numbers)| {
                    numbers.into_iter().map(move |number| TopicPartition::new(topic, number))
                })
                .collect();
            partitions = grouped;
            let data = StickyUserData { partitions, generation };
            let bytes = encode_sticky_user_data(&data).unwrap();
            prop_assert_eq!(decode_sticky_user_data(&bytes).unwrap(), data);
        }
    }
}
