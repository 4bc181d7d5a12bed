//! The group-metadata record: a classic group's generation, protocol, leader
//! and members with their subscriptions and assignments, written after each
//! rebalance so a new coordinator can take the group over.
//!
//! Key (Kafka's `GroupMetadataKey`, classic layout): int16 version 2, then
//! `group` STRING.
//!
//! Value (Kafka's `GroupMetadataValue`, a leading int16 version, then):
//!
//! | field                 | type             | versions | notes             |
//! |-----------------------|------------------|----------|-------------------|
//! | protocolType          | string           | 0+       |                   |
//! | generation            | int32            | 0+       |                   |
//! | protocol              | nullable string  | 0+       |                   |
//! | leader                | nullable string  | 0+       |                   |
//! | currentStateTimestamp | int64            | 2+       | -1: none          |
//! | members               | [MemberMetadata] | 0+       |                   |
//!
//! MemberMetadata: `memberId` string; `groupInstanceId` nullable string (3+);
//! `clientId` string; `clientHost` string; `rebalanceTimeout` int32 (1+; a
//! version 0 member takes its session timeout, as Kafka's loader does);
//! `sessionTimeout` int32; `subscription` bytes; `assignment` bytes.
//!
//! Version 4 is flexible (compact lengths, a tagged-field section after each
//! member and after the value). Kafka, 4.x included, writes version 3.

use bytes::Bytes;

use super::RecordsError;
use crate::protocol::schema_wire::{Format, Reader, Writer};

/// Key version of a group-metadata record (Kafka 4 calls it the record type).
pub const GROUP_METADATA_KEY_VERSION: i16 = 2;
/// Value version written: the one Kafka 2.3 through 4.x writes
/// (`GroupCoordinatorRecordHelpers.GROUP_METADATA_VALUE_VERSION`).
pub const GROUP_METADATA_VALUE_VERSION: i16 = 3;
/// Newest value version this module reads.
pub const GROUP_METADATA_VALUE_VERSION_MAX: i16 = 4;

/// The fewest bytes a member can take (version 4: four empty compact strings,
/// two int32 timeouts, two empty compact byte fields, an empty tagged-field
/// section); a declared member count is checked against it before allocating.
const MEMBER_BYTES_MIN: usize = 4 + (4 + 4) + 2 + 1;

/// Identifies a group's metadata record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupMetadataKey {
    pub group: String,
}

/// A classic group's state as of its last rebalance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMetadataValue {
    /// `consumer` for consumer groups; empty for a group with no members.
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// When the group entered its current state; `None` is Kafka's -1 (and
    /// every record before version 2), so `Some(-1)` reads back as `None`.
    pub current_state_timestamp_ms: Option<i64>,
    pub members: Vec<MemberMetadata>,
}

/// One member of a classic group as stored in its metadata record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberMetadata {
    pub member_id: String,
    /// A static member's `group.instance.id` (version 3+).
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's subscription for the selected protocol, opaque here.
    pub subscription: Bytes,
    /// The leader's assignment for the member, opaque here.
    pub assignment: Bytes,
}

impl GroupMetadataKey {
    pub fn encode(&self) -> Result<Bytes, RecordsError> {
        let mut writer = Writer::new(Format::Classic);
        writer.int16(GROUP_METADATA_KEY_VERSION);
        writer.string("group", &self.group)?;
        Ok(writer.finish())
    }

    /// Reads a key of version 2 (the caller has checked the version).
    pub fn decode(bytes: &[u8]) -> Result<GroupMetadataKey, RecordsError> {
        let mut reader = Reader::new(bytes, Format::Classic);
        let version = reader.int16()?;
        debug_assert_eq!(version, GROUP_METADATA_KEY_VERSION);
        let key = GroupMetadataKey {
            group: reader.string("group")?,
        };
        reader.finish("group metadata key")?;
        Ok(key)
    }
}

impl GroupMetadataValue {
    pub fn encode(&self) -> Result<Bytes, RecordsError> {
        self.encode_version(GROUP_METADATA_VALUE_VERSION)
    }

    /// Writes the fields `version` has; the others are dropped.
    pub(super) fn encode_version(&self, version: i16) -> Result<Bytes, RecordsError> {
        assert!((0..=GROUP_METADATA_VALUE_VERSION_MAX).contains(&version));
        let mut writer = Writer::new(value_format(version));
        writer.int16(version);
        writer.string("protocol_type", &self.protocol_type)?;
        writer.int32(self.generation);
        writer.nullable_string("protocol", self.protocol.as_deref())?;
        writer.nullable_string("leader", self.leader.as_deref())?;
        if version >= 2 {
            writer.int64(self.current_state_timestamp_ms.unwrap_or(-1));
        }
        writer.array_length("members", self.members.len())?;
        for member in &self.members {
            member.encode(&mut writer, version)?;
        }
        writer.tagged_fields(&[]);
        Ok(writer.finish())
    }

    /// Reads any version Kafka has written (0–4).
    pub fn decode(bytes: &[u8]) -> Result<GroupMetadataValue, RecordsError> {
        let mut reader = Reader::new(bytes, Format::Classic);
        let version = reader.int16()?;
        if !(0..=GROUP_METADATA_VALUE_VERSION_MAX).contains(&version) {
            return Err(RecordsError::UnsupportedValueVersion {
                record: "group metadata value",
                version,
            });
        }
        reader.set_format(value_format(version));
        let protocol_type = reader.string("protocol_type")?;
        let generation = reader.int32()?;
        let protocol = reader.nullable_string("protocol")?;
        let leader = reader.nullable_string("leader")?;
        let current_state_timestamp_ms = match version {
            2.. => Some(reader.int64()?).filter(|&timestamp| timestamp != -1),
            _ => None,
        };
        let count = reader.array_length("members", MEMBER_BYTES_MIN)?;
        let mut members = Vec::with_capacity(count);
        for _ in 0..count {
            members.push(MemberMetadata::decode(&mut reader, version)?);
        }
        reader.tagged_fields(|_, _| Ok(()))?;
        reader.finish("group metadata value")?;
        Ok(GroupMetadataValue {
            protocol_type,
            generation,
            protocol,
            leader,
            current_state_timestamp_ms,
            members,
        })
    }
}

impl MemberMetadata {
    fn encode(&self, writer: &mut Writer, version: i16) -> Result<(), RecordsError> {
        writer.string("member_id", &self.member_id)?;
        if version >= 3 {
            writer.nullable_string("group_instance_id", self.group_instance_id.as_deref())?;
        }
        writer.string("client_id", &self.client_id)?;
        writer.string("client_host", &self.client_host)?;
        if version >= 1 {
            writer.int32(self.rebalance_timeout_ms);
        }
        writer.int32(self.session_timeout_ms);
        writer.bytes("subscription", &self.subscription)?;
        writer.bytes("assignment", &self.assignment)?;
        writer.tagged_fields(&[]);
        Ok(())
    }

    fn decode(reader: &mut Reader<'_>, version: i16) -> Result<MemberMetadata, RecordsError> {
        let member_id = reader.string("member_id")?;
        let group_instance_id = match version {
            3.. => reader.nullable_string("group_instance_id")?,
            _ => None,
        };
        let client_id = reader.string("client_id")?;
        let client_host = reader.string("client_host")?;
        let rebalance_timeout_ms = match version {
            1.. => Some(reader.int32()?),
            _ => None,
        };
        let session_timeout_ms = reader.int32()?;
        let member = MemberMetadata {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms: rebalance_timeout_ms.unwrap_or(session_timeout_ms),
            session_timeout_ms,
            subscription: reader.bytes("subscription")?,
            assignment: reader.bytes("assignment")?,
        };
        reader.tagged_fields(|_, _| Ok(()))?;
        Ok(member)
    }
}

fn value_format(version: i16) -> Format {
    match version {
        4.. => Format::Flexible,
        _ => Format::Classic,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::ops::Range;

    use proptest::prelude::*;

    use super::*;

    fn value() -> GroupMetadataValue {
        GroupMetadataValue {
            protocol_type: "consumer".into(),
            generation: 1,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            current_state_timestamp_ms: Some(1000),
            members: vec![MemberMetadata {
                member_id: "m1".into(),
                group_instance_id: None,
                client_id: "c".into(),
                client_host: "/h".into(),
                rebalance_timeout_ms: 300_000,
                session_timeout_ms: 45_000,
                subscription: Bytes::from_static(&[0, 1]),
                assignment: Bytes::from_static(&[2]),
            }],
        }
    }

    #[test]
    fn a_key_is_built_field_by_field() {
        let key = GroupMetadataKey {
            group: "group".into(),
        };
        let expected = [
            0x00, 0x02, // key version 2: group metadata
            0x00, 0x05, b'g', b'r', b'o', b'u', b'p', // group
        ];
        assert_eq!(key.encode().unwrap()[..], expected);
        assert_eq!(GroupMetadataKey::decode(&expected), Ok(key));
    }

    /// Version 3 as Kafka writes it, field by field from `GroupMetadataValue.json`.
    pub(in crate::group::records) const VALUE_VERSION_3: &[u8] = &[
        0x00, 0x03, // version 3
        0x00, 0x08, b'c', b'o', b'n', b's', b'u', b'm', b'e', b'r', // protocolType
        0x00, 0x00, 0x00, 0x01, // generation 1
        0x00, 0x05, b'r', b'a', b'n', b'g', b'e', // protocol
        0x00, 0x02, b'm', b'1', // leader
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xe8, // currentStateTimestamp 1000
        0x00, 0x00, 0x00, 0x01, // members: 1
        0x00, 0x02, b'm', b'1', //   memberId
        0xff, 0xff, //   groupInstanceId: null
        0x00, 0x01, b'c', //   clientId
        0x00, 0x02, b'/', b'h', //   clientHost
        0x00, 0x04, 0x93, 0xe0, //   rebalanceTimeout 300000
        0x00, 0x00, 0xaf, 0xc8, //   sessionTimeout 45000
        0x00, 0x00, 0x00, 0x02, 0x00, 0x01, //   subscription
        0x00, 0x00, 0x00, 0x01, 0x02, //   assignment
    ];

    #[test]
    fn version_3_is_written_field_by_field() {
        assert_eq!(value().encode().unwrap()[..], *VALUE_VERSION_3);
        assert_eq!(GroupMetadataValue::decode(VALUE_VERSION_3), Ok(value()));
    }

    #[test]
    fn version_4_uses_compact_lengths_and_tagged_sections() {
        let expected = [
            0x00, 0x04, // version 4 (flexible)
            0x09, b'c', b'o', b'n', b's', b'u', b'm', b'e', b'r', // protocolType
            0x00, 0x00, 0x00, 0x01, // generation 1
            0x06, b'r', b'a', b'n', b'g', b'e', // protocol
            0x03, b'm', b'1', // leader
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xe8, // currentStateTimestamp
            0x02, // members: 1 + 1
            0x03, b'm', b'1', //   memberId
            0x00, //   groupInstanceId: null
            0x02, b'c', //   clientId
            0x03, b'/', b'h', //   clientHost
            0x00, 0x04, 0x93, 0xe0, //   rebalanceTimeout
            0x00, 0x00, 0xaf, 0xc8, //   sessionTimeout
            0x03, 0x00, 0x01, //   subscription
            0x02, 0x02, //   assignment
            0x00, //   member's tagged fields: none
            0x00, // value's tagged fields: none
        ];
        assert_eq!(value().encode_version(4).unwrap()[..], expected);
        assert_eq!(GroupMetadataValue::decode(&expected), Ok(value()));
    }

    /// Versions 0–2 derived from version 3 by removing the fields they lack.
    #[test]
    fn reads_every_older_version() {
        const TIMESTAMP: Range<usize> = 27..35;
        const INSTANCE_ID: Range<usize> = 43..45;
        const REBALANCE_TIMEOUT: Range<usize> = 52..56;
        let without = |ranges: &[Range<usize>], version: u8| {
            let mut bytes = VALUE_VERSION_3.to_vec();
            for range in ranges.iter().rev() {
                bytes.drain(range.clone());
            }
            bytes[1] = version;
            bytes
        };
        let v2 = without(&[INSTANCE_ID], 2);
        let v1 = without(&[TIMESTAMP, INSTANCE_ID], 1);
        let v0 = without(&[TIMESTAMP, INSTANCE_ID, REBALANCE_TIMEOUT], 0);

        let mut expected = value();
        assert_eq!(GroupMetadataValue::decode(&v2), Ok(expected.clone()));
        expected.current_state_timestamp_ms = None;
        assert_eq!(GroupMetadataValue::decode(&v1), Ok(expected.clone()));
        expected.members[0].rebalance_timeout_ms = 45_000;
        assert_eq!(GroupMetadataValue::decode(&v0), Ok(expected));
    }

    #[test]
    fn an_empty_group_as_kafka_writes_it_after_the_last_member_leaves() {
        let empty = GroupMetadataValue {
            protocol_type: String::new(),
            generation: 0,
            protocol: None,
            leader: None,
            current_state_timestamp_ms: None,
            members: Vec::new(),
        };
        let bytes = empty.encode().unwrap();
        let expected = [0, 3, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]
            .into_iter()
            .chain([0xff; 8]) // currentStateTimestamp -1
            .chain([0, 0, 0, 0]) // no members
            .collect::<Vec<u8>>();
        assert_eq!(bytes[..], expected[..]);
        assert_eq!(GroupMetadataValue::decode(&bytes), Ok(empty));
    }

    #[test]
    fn a_member_count_past_the_end_is_refused_before_allocating() {
        let mut bytes = VALUE_VERSION_3[..35].to_vec();
        bytes.extend_from_slice(&[0x00, 0xff, 0xff, 0xff]); // 16,777,215 members
        bytes.extend_from_slice(&[0; 64]);
        assert!(matches!(
            GroupMetadataValue::decode(&bytes),
            Err(RecordsError::LengthPastEnd {
                field: "members",
                ..
            })
        ));
    }

    #[test]
    fn null_members_and_unknown_versions_are_errors() {
        let mut null_members = VALUE_VERSION_3[..35].to_vec();
        null_members.extend_from_slice(&[0xff; 4]);
        assert_eq!(
            GroupMetadataValue::decode(&null_members),
            Err(RecordsError::UnexpectedNull { field: "members" })
        );
        let mut future = VALUE_VERSION_3.to_vec();
        future[1] = 5;
        assert!(matches!(
            GroupMetadataValue::decode(&future),
            Err(RecordsError::UnsupportedValueVersion { version: 5, .. })
        ));
    }

    fn member_for(version: i16) -> impl Strategy<Value = MemberMetadata> {
        (
            (
                ".{0,12}",
                proptest::option::of(".{0,12}"),
                ".{0,12}",
                ".{0,12}",
            ),
            (any::<i32>(), any::<i32>()),
            (
                proptest::collection::vec(any::<u8>(), 0..24),
                proptest::collection::vec(any::<u8>(), 0..24),
            ),
        )
            .prop_map(move |(names, timeouts, payloads)| {
                let (member_id, instance, client_id, client_host) = names;
                let (rebalance, session) = timeouts;
                MemberMetadata {
                    member_id,
                    group_instance_id: instance.filter(|_| version >= 3),
                    client_id,
                    client_host,
                    rebalance_timeout_ms: if version >= 1 { rebalance } else { session },
                    session_timeout_ms: session,
                    subscription: Bytes::from(payloads.0),
                    assignment: Bytes::from(payloads.1),
                }
            })
    }

    /// Values that a given version carries whole.
    pub fn value_for(version: i16) -> impl Strategy<Value = GroupMetadataValue> {
        (
            (".{0,12}", any::<i32>()),
            (
                proptest::option::of(".{0,12}"),
                proptest::option::of(".{0,12}"),
            ),
            any::<i64>().prop_filter("-1 means none", |&timestamp| timestamp != -1),
            proptest::collection::vec(member_for(version), 0..4),
        )
            .prop_map(
                move |((protocol_type, generation), (protocol, leader), timestamp, members)| {
                    GroupMetadataValue {
                        protocol_type,
                        generation,
                        protocol,
                        leader,
                        current_state_timestamp_ms: (version >= 2).then_some(timestamp),
                        members,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn every_version_round_trips(
            (version, value) in (0..=GROUP_METADATA_VALUE_VERSION_MAX)
                .prop_flat_map(|version| (Just(version), value_for(version)))
        ) {
            let bytes = value.encode_version(version).unwrap();
            prop_assert_eq!(GroupMetadataValue::decode(&bytes), Ok(value));
        }

        #[test]
        fn keys_round_trip(group in ".{0,40}") {
            let key = GroupMetadataKey { group };
            prop_assert_eq!(GroupMetadataKey::decode(&key.encode().unwrap()), Ok(key));
        }
    }
}
