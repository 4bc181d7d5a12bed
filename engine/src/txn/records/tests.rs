//! The transaction log's records against bytes built by hand from Kafka's
//! schemas, plus round trips and hostile input.

use proptest::prelude::*;

use super::*;

fn key(id: &str) -> TransactionLogKey {
    TransactionLogKey {
        transactional_id: id.into(),
    }
}

fn ongoing_value() -> TransactionLogValue {
    TransactionLogValue {
        producer_id: ProducerId(1000),
        previous_producer_id: ProducerId(-1),
        next_producer_id: ProducerId(-1),
        producer_epoch: ProducerEpoch(5),
        timeout_ms: 60_000,
        state: TransactionState::Ongoing,
        partitions: Some(vec![TopicPartitions {
            topic: "t".into(),
            partition_ids: vec![0, 2],
        }]),
        last_update_timestamp_ms: 2_000,
        start_timestamp_ms: 1_000,
        client_transaction_version: 0,
        unknown_tagged_fields: Vec::new(),
    }
}

/// The fields every version shares, after the version prefix, in the given
/// layout (`flexible` decides the length prefixes).
fn common_fields(flexible: bool) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&1000i64.to_be_bytes()); // ProducerId
    bytes.extend_from_slice(&5i16.to_be_bytes()); // ProducerEpoch
    bytes.extend_from_slice(&60_000i32.to_be_bytes()); // TransactionTimeoutMs
    bytes.push(1); // TransactionStatus: Ongoing
    if flexible {
        bytes.push(2); // one PartitionsSchema (compact length + 1)
        bytes.extend_from_slice(&[2, b't']); // Topic (compact)
        bytes.push(3); // two PartitionIds
    } else {
        bytes.extend_from_slice(&1i32.to_be_bytes());
        bytes.extend_from_slice(&[0, 1, b't']);
        bytes.extend_from_slice(&2i32.to_be_bytes());
    }
    bytes.extend_from_slice(&0i32.to_be_bytes());
    bytes.extend_from_slice(&2i32.to_be_bytes());
    if flexible {
        bytes.push(0); // PartitionsSchema's tagged fields
    }
    bytes.extend_from_slice(&2_000i64.to_be_bytes()); // LastUpdateTimestamp
    bytes.extend_from_slice(&1_000i64.to_be_bytes()); // StartTimestamp
    bytes
}

#[test]
fn a_key_is_version_0_and_an_int16_string() {
    let bytes = key("tx").encode().unwrap();
    assert_eq!(bytes[..], [0, 0, 0, 2, b't', b'x']);
    assert_eq!(TransactionLogKey::decode(&bytes), Ok(Some(key("tx"))));
}

#[test]
fn value_version_0_matches_bytes_built_from_the_schema() {
    let mut expected = vec![0, 0];
    expected.extend(common_fields(false));
    let bytes = ongoing_value().encode(0).unwrap();
    assert_eq!(bytes[..], expected[..]);
    assert_eq!(
        TransactionLogValue::decode(&expected),
        Ok((ongoing_value(), 0))
    );
}

#[test]
fn value_version_1_writes_only_tagged_fields_off_their_defaults() {
    let mut expected = vec![0, 1];
    expected.extend(common_fields(true));
    expected.push(0); // no tagged fields: all at their defaults
    assert_eq!(ongoing_value().encode(1).unwrap()[..], expected[..]);

    let value = TransactionLogValue {
        previous_producer_id: ProducerId(999),
        client_transaction_version: 2,
        ..ongoing_value()
    };
    let mut expected = vec![0, 1];
    expected.extend(common_fields(true));
    expected.push(2); // two tagged fields
    expected.extend_from_slice(&[0, 8]); // tag 0 PreviousProducerId, 8 bytes
    expected.extend_from_slice(&999i64.to_be_bytes());
    expected.extend_from_slice(&[2, 2, 0, 2]); // tag 2 ClientTransactionVersion = 2
    assert_eq!(value.encode(1).unwrap()[..], expected[..]);
    assert_eq!(TransactionLogValue::decode(&expected), Ok((value, 1)));
}

#[test]
fn version_0_drops_what_it_cannot_carry() {
    let value = TransactionLogValue {
        previous_producer_id: ProducerId(7),
        next_producer_id: ProducerId(8),
        client_transaction_version: 2,
        ..ongoing_value()
    };
    let (read, version) = TransactionLogValue::decode(&value.encode(0).unwrap()).unwrap();
    assert_eq!((read, version), (ongoing_value(), 0));
}

#[test]
fn an_empty_transaction_writes_null_partitions() {
    let value = TransactionLogValue {
        state: TransactionState::Empty,
        partitions: None,
        start_timestamp_ms: -1,
        ..ongoing_value()
    };
    for version in [0, 1] {
        let bytes = value.encode(version).unwrap();
        // int16 version, int64 pid, int16 epoch, int32 timeout, int8 state.
        let at = 2 + 8 + 2 + 4 + 1;
        let null: &[u8] = if version == 0 { &[0xff; 4] } else { &[0] };
        assert_eq!(&bytes[at..at + null.len()], null);
        assert_eq!(
            TransactionLogValue::decode(&bytes),
            Ok((value.clone(), version))
        );
    }
}

#[test]
fn unknown_tags_are_kept_and_written_back_in_tag_order() {
    let mut bytes = vec![0, 1];
    bytes.extend(common_fields(true));
    // Tag 3 (Kafka 4.2's NextProducerEpoch = 4) before tag 1 (NextProducerId).
    bytes.extend_from_slice(&[2, 3, 2, 0, 4, 1, 8]);
    bytes.extend_from_slice(&77i64.to_be_bytes());
    let (value, _) = TransactionLogValue::decode(&bytes).unwrap();
    assert_eq!(value.next_producer_id, ProducerId(77));
    assert_eq!(
        value.unknown_tagged_fields,
        [(3, Bytes::from_static(&[0, 4]))]
    );
    let written = value.encode(1).unwrap();
    let tail = &written[written.len() - 15..];
    assert_eq!(tail[..4], [2, 1, 8, 0]);
    assert_eq!(tail[11..], [3, 2, 0, 4]);
}

#[test]
fn tombstones_and_unknown_keys() {
    let (key_bytes, value) = TransactionRecord::Tombstone(key("gone")).encode().unwrap();
    assert_eq!(value, None);
    assert_eq!(
        TransactionRecord::decode(&key_bytes, None),
        Ok(TransactionRecord::Tombstone(key("gone")))
    );
    assert_eq!(
        TransactionRecord::decode(&[0, 5, 0, 0], Some(&[1, 2])),
        Ok(TransactionRecord::UnknownKey { key_version: 5 })
    );
    assert!(
        TransactionRecord::UnknownKey { key_version: 5 }
            .encode()
            .is_err()
    );
}

#[test]
fn malformed_values_are_structured_errors() {
    let mut bad_state = vec![0, 0];
    bad_state.extend(common_fields(false));
    bad_state[2 + 8 + 2 + 4] = 9;
    assert_eq!(
        TransactionLogValue::decode(&bad_state),
        Err(RecordsError::UnknownTransactionState { id: 9 })
    );
    assert_eq!(
        TransactionLogValue::decode(&[0, 2, 0]),
        Err(RecordsError::UnsupportedValueVersion {
            record: "transaction log value",
            version: 2
        })
    );
    let mut wrong_tag_size = vec![0, 1];
    wrong_tag_size.extend(common_fields(true));
    wrong_tag_size.extend_from_slice(&[1, 0, 2, 0, 1]);
    assert_eq!(
        TransactionLogValue::decode(&wrong_tag_size),
        Err(RecordsError::TaggedFieldSize {
            tag: 0,
            size: 2,
            expected: 8
        })
    );
    let mut trailing = ongoing_value().encode(0).unwrap().to_vec();
    trailing.push(0);
    assert!(matches!(
        TransactionLogValue::decode(&trailing),
        Err(RecordsError::TrailingBytes { count: 1, .. })
    ));
    assert!(matches!(
        TransactionLogKey::decode(&[0]),
        Err(RecordsError::UnexpectedEnd { .. })
    ));
}

#[test]
fn partition_for_is_the_offsets_topic_rule() {
    assert_eq!(partition_for("hello", 50), 22);
    assert_eq!(partition_for("Hello World", 50), 26);
    assert_eq!(partition_for("polygenelubricants", 50), 0);
    assert_eq!(partition_for("anything", 1), 0);
}

fn state() -> impl Strategy<Value = TransactionState> {
    (0..=7i8).prop_map(|id| TransactionState::from_id(id).unwrap())
}

fn value() -> impl Strategy<Value = TransactionLogValue> {
    let partitions = proptest::option::of(proptest::collection::vec(
        (
            "[a-z._-]{0,12}",
            proptest::collection::vec(any::<i32>(), 0..4),
        )
            .prop_map(|(topic, partition_ids)| TopicPartitions {
                topic,
                partition_ids,
            }),
        0..4,
    ));
    (
        (any::<i64>(), any::<i64>(), any::<i64>(), any::<i16>()),
        (any::<i32>(), state(), partitions),
        (any::<i64>(), any::<i64>(), any::<i16>()),
    )
        .prop_map(|(ids, middle, tail)| TransactionLogValue {
            producer_id: ProducerId(ids.0),
            previous_producer_id: ProducerId(ids.1),
            next_producer_id: ProducerId(ids.2),
            producer_epoch: ProducerEpoch(ids.3),
            timeout_ms: middle.0,
            state: middle.1,
            partitions: middle.2,
            last_update_timestamp_ms: tail.0,
            start_timestamp_ms: tail.1,
            client_transaction_version: tail.2,
            unknown_tagged_fields: Vec::new(),
        })
}

proptest! {
    #[test]
    fn version_1_records_round_trip(id in ".{0,30}", value in value()) {
        let record = TransactionRecord::Value { key: key(&id), value, version: 1 };
        let (key_bytes, value_bytes) = record.encode().unwrap();
        prop_assert_eq!(TransactionRecord::decode(&key_bytes, value_bytes.as_deref()), Ok(record));
    }

    #[test]
    fn version_0_round_trips_its_own_fields(value in value()) {
        let value = TransactionLogValue {
            previous_producer_id: ProducerId(-1),
            next_producer_id: ProducerId(-1),
            client_transaction_version: 0,
            ..value
        };
        let bytes = value.encode(0).unwrap();
        prop_assert_eq!(TransactionLogValue::decode(&bytes), Ok((value, 0)));
    }

    #[test]
    fn every_truncation_is_an_error(value in value(), version in 0..=1i16) {
        let bytes = value.encode(version).unwrap();
        for length in 0..bytes.len() {
            prop_assert!(TransactionLogValue::decode(&bytes[..length]).is_err());
        }
    }

    /// Random bytes behind a plausible key and value version either fail
    /// or decode to a record that encodes back to the same record (an
    /// unknown key version is kept, as Kafka skips such records).
    #[test]
    fn random_bytes_fail_or_decode_to_a_record_that_round_trips(
        key_version in 0..=1i16,
        key_tail in proptest::collection::vec(any::<u8>(), 0..24),
        value_version in 0..=2i16,
        value_tail in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..80)),
    ) {
        let key = [&key_version.to_be_bytes()[..], &key_tail].concat();
        let value = value_tail.map(|tail| [&value_version.to_be_bytes()[..], &tail].concat());
        match TransactionRecord::decode(&key, value.as_deref()) {
            Ok(TransactionRecord::UnknownKey { key_version: read }) => {
                prop_assert_eq!(read, key_version);
                prop_assert_ne!(read, 0);
            }
            Ok(record) => {
                let (key, value) = record.encode().unwrap();
                prop_assert_eq!(TransactionRecord::decode(&key, value.as_deref()), Ok(record));
            }
            Err(_) => {}
        }
    }
}
