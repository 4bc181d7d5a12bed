//! The record and batch rules of a cleaning pass: table rows from Kafka's
//! documented behaviour, then properties over random logs.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use proptest::prelude::*;

use super::*;
use crate::log::batch::set_base_offset;
use crate::log::builder::{BatchOptions, NewRecord, encode_batch};
use crate::log::compaction::offset_map::{MapStep, map_batch};

const NOW: i64 = 1_700_000_000_000;
const RETENTION: i64 = 86_400_000;
const MAP_BYTES: usize = 1 << 20;

/// `(key, value)` pairs; `None` is null.
type Entry = (Option<&'static str>, Option<&'static str>);

fn batch_at(base: i64, entries: &[Entry], options: &BatchOptions) -> Vec<u8> {
    let records: Vec<NewRecord> = entries
        .iter()
        .enumerate()
        .map(|(index, (key, value))| NewRecord {
            key: key.map(|key| Bytes::copy_from_slice(key.as_bytes())),
            value: value.map(|value| Bytes::copy_from_slice(value.as_bytes())),
            timestamp: TimestampMs(NOW - 1_000 + index as i64),
            headers: Vec::new(),
        })
        .collect();
    let mut bytes = encode_batch(&records, options);
    set_base_offset(&mut bytes, Offset(base)).unwrap();
    bytes
}

/// What a batch holds, decoded by kafka-protocol (an independent reader):
/// `(offset, key, value, timestamp)` per record.
type DecodedRecord = (i64, Option<String>, Option<String>, i64);
type Decoded = Vec<DecodedRecord>;

/// A random log: per batch, its codec and its `(key, value)` records.
type RandomBatch = (Compression, Vec<(u8, Option<u8>)>);
type RandomLog = Vec<RandomBatch>;

fn decode(bytes: &[u8]) -> Decoded {
    let batch = BatchView::parse_exact(bytes).unwrap();
    batch.verify_crc().unwrap();
    let mut buffer = Bytes::copy_from_slice(bytes);
    let set = RecordBatchDecoder::decode(&mut buffer).unwrap();
    let text = |bytes: &Option<Bytes>| {
        bytes
            .as_ref()
            .map(|bytes| String::from_utf8(bytes.to_vec()).unwrap())
    };
    set.records
        .iter()
        .map(|record| {
            (
                record.offset,
                text(&record.key),
                text(&record.value),
                record.timestamp,
            )
        })
        .collect()
}

/// Maps every key of `batches` from offset 0.
fn full_map(batches: &[Vec<u8>]) -> (OffsetMap, ProducerLastBatches) {
    let mut map = OffsetMap::new(MAP_BYTES);
    let mut producers = ProducerLastBatches::default();
    for bytes in batches {
        let batch = BatchView::parse_exact(bytes).unwrap();
        assert_eq!(
            map_batch(&mut map, &mut producers, &batch, Offset(0)).unwrap(),
            MapStep::Mapped
        );
    }
    (map, producers)
}

fn round<'a>(
    map: &'a OffsetMap,
    producers: &'a ProducerLastBatches,
    now_ms: i64,
) -> CleaningRound<'a> {
    CleaningRound {
        offset_map: map,
        producers,
        upper_bound_offset: Offset(1_000_000),
        now_ms,
        delete_retention_ms: RETENTION,
    }
}

fn fate(bytes: &[u8], round: &CleaningRound<'_>) -> BatchFate {
    clean_batch(&BatchView::parse_exact(bytes).unwrap(), round).unwrap()
}

fn offsets(decoded: &Decoded) -> Vec<i64> {
    decoded.iter().map(|record| record.0).collect()
}

/// One row: a log of batches (the last is judged), and what the judged
/// batch becomes: `None` dropped, `Some(None)` kept byte for byte,
/// `Some(Some(offsets))` rewritten with these records.
struct Row {
    name: &'static str,
    log: Vec<Vec<Entry>>,
    expected: Option<Option<Vec<i64>>>,
}

#[test]
fn records_survive_by_kafkas_rules() {
    let rows = [
        Row {
            name: "a record superseded later in its own batch goes",
            log: vec![vec![
                (Some("a"), Some("1")),
                (Some("b"), Some("1")),
                (Some("a"), Some("2")),
            ]],
            expected: Some(Some(vec![1, 2])),
        },
        Row {
            name: "a batch of latest values stays byte for byte",
            log: vec![vec![(Some("a"), Some("1")), (Some("b"), Some("1"))]],
            expected: Some(None),
        },
        Row {
            name: "a batch superseded by a later batch goes",
            log: vec![vec![(Some("z"), Some("1"))], vec![(Some("a"), Some("1"))]],
            expected: Some(None),
        },
        Row {
            name: "records without a key go",
            log: vec![vec![(None, Some("1")), (Some("a"), Some("1"))]],
            expected: Some(Some(vec![1])),
        },
        Row {
            name: "a fresh tombstone stays and gets a delete horizon",
            log: vec![vec![(Some("a"), Some("1")), (Some("a"), None)]],
            expected: Some(Some(vec![1])),
        },
    ];
    for row in rows {
        let mut batches = Vec::new();
        let mut next = 0;
        for entries in &row.log {
            batches.push(batch_at(next, entries, &BatchOptions::default()));
            next += entries.len() as i64;
        }
        let (map, producers) = full_map(&batches);
        let judged = batches.last().unwrap();
        let got = match fate(judged, &round(&map, &producers, NOW)) {
            BatchFate::Drop => None,
            BatchFate::Keep => Some(None),
            BatchFate::Rewrite(bytes) => Some(Some(offsets(&decode(&bytes)))),
        };
        assert_eq!(got, row.expected, "{}", row.name);
    }
    // The superseded first batch of the third row is dropped.
    let first = batch_at(0, &[(Some("a"), Some("0"))], &BatchOptions::default());
    let second = batch_at(1, &[(Some("a"), Some("1"))], &BatchOptions::default());
    let (map, producers) = full_map(&[first.clone(), second]);
    assert_eq!(fate(&first, &round(&map, &producers, NOW)), BatchFate::Drop);
}

/// KIP-534: a tombstone outlives the pass that first keeps it by
/// delete.retention.ms, then goes on the next pass.
#[test]
fn tombstones_go_one_retention_after_the_pass_that_stamped_them() {
    let log = batch_at(
        0,
        &[(Some("a"), Some("1")), (Some("a"), None)],
        &BatchOptions::default(),
    );
    let (map, producers) = full_map(std::slice::from_ref(&log));
    let BatchFate::Rewrite(stamped) = fate(&log, &round(&map, &producers, NOW)) else {
        panic!("the first pass stamps a horizon");
    };
    let batch = BatchView::parse_exact(&stamped).unwrap();
    assert_eq!(delete_horizon(&batch), Some(TimestampMs(NOW + RETENTION)));
    assert_eq!(batch.last_offset(), Offset(1), "the last offset is kept");
    assert_eq!(batch.records_count(), 1);
    let decoded = decode(&stamped);
    assert_eq!(
        decoded,
        [(1, Some("a".into()), None, NOW - 1_000 + 1)],
        "timestamps survive the new base"
    );
    let (map, producers) = full_map(std::slice::from_ref(&stamped));
    let before = round(&map, &producers, NOW + RETENTION - 1);
    assert_eq!(fate(&stamped, &before), BatchFate::Keep);
    let after = round(&map, &producers, NOW + RETENTION);
    assert_eq!(fate(&stamped, &after), BatchFate::Drop);
}

#[test]
fn emptied_batches_keep_their_header_when_something_needs_it() {
    let idempotent = BatchOptions {
        producer_id: 42,
        producer_epoch: 3,
        base_sequence: 17,
        ..BatchOptions::default()
    };
    let producer_batch = batch_at(
        0,
        &[(Some("a"), Some("1")), (Some("b"), Some("1"))],
        &idempotent,
    );
    let later = batch_at(
        2,
        &[(Some("a"), Some("2")), (Some("b"), Some("2"))],
        &BatchOptions::default(),
    );
    let (map, producers) = full_map(&[producer_batch.clone(), later.clone()]);
    let BatchFate::Rewrite(header) = fate(&producer_batch, &round(&map, &producers, NOW)) else {
        panic!("a producer's last batch keeps its header");
    };
    let batch = BatchView::parse_exact(&header).unwrap();
    batch.verify_crc().unwrap();
    assert_eq!(header.len(), BATCH_HEADER_BYTES);
    assert_eq!(
        (batch.base_offset(), batch.last_offset()),
        (Offset(0), Offset(1))
    );
    assert_eq!(
        (
            batch.producer_id(),
            batch.producer_epoch(),
            batch.base_sequence()
        ),
        (42, 3, 17)
    );
    assert_eq!(batch.records_count(), 0);
    assert_eq!(batch.base_timestamp(), TimestampMs::NONE);
    // The same batch is dropped once a later batch of its producer exists.
    let newer = batch_at(4, &[(Some("c"), Some("1"))], &idempotent);
    let (map, producers) = full_map(&[producer_batch.clone(), later.clone(), newer]);
    assert_eq!(
        fate(&producer_batch, &round(&map, &producers, NOW)),
        BatchFate::Drop
    );
    // An emptied batch ending at the round's upper bound keeps its header.
    let plain = batch_at(0, &[(Some("a"), Some("1"))], &BatchOptions::default());
    let (map, producers) = full_map(&[
        plain.clone(),
        batch_at(1, &[(Some("a"), Some("2"))], &BatchOptions::default()),
    ]);
    let mut at_bound = round(&map, &producers, NOW);
    at_bound.upper_bound_offset = Offset(1);
    assert!(
        matches!(fate(&plain, &at_bound), BatchFate::Rewrite(bytes) if bytes.len() == BATCH_HEADER_BYTES)
    );
}

#[test]
fn rewritten_batches_keep_their_codec_and_producer_fields() {
    for compression in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let options = BatchOptions {
            compression,
            producer_id: 9,
            producer_epoch: 1,
            base_sequence: 100,
            ..BatchOptions::default()
        };
        let entries = [
            (Some("a"), Some("1")),
            (Some("b"), Some("1")),
            (Some("a"), Some("2")),
        ];
        let log = batch_at(10, &entries, &options);
        let (map, producers) = full_map(std::slice::from_ref(&log));
        let BatchFate::Rewrite(bytes) = fate(&log, &round(&map, &producers, NOW)) else {
            panic!("{compression:?}: a record goes");
        };
        let batch = BatchView::parse_exact(&bytes).unwrap();
        assert_eq!(batch.attributes().compression(), compression);
        assert_eq!((batch.producer_id(), batch.base_sequence()), (9, 100));
        assert_eq!(batch.last_offset(), Offset(12));
        let decoded = decode(&bytes);
        assert_eq!(offsets(&decoded), [11, 12], "{compression:?}");
        assert_eq!(decoded[1].2.as_deref(), Some("2"));
    }
}

#[test]
fn control_batches_are_kept_as_they_are() {
    let mut bytes = batch_at(0, &[(Some("a"), Some("1"))], &BatchOptions::default());
    bytes[22] |= 0x20; // attributes, low byte: control
    let crc = crc32c::crc32c(&bytes[CRC_COVERED_START..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    let (map, producers) = full_map(&[
        batch_at(0, &[(Some("a"), Some("1"))], &BatchOptions::default()),
        batch_at(1, &[(Some("a"), Some("2"))], &BatchOptions::default()),
    ]);
    assert_eq!(fate(&bytes, &round(&map, &producers, NOW)), BatchFate::Keep);
}

/// A random log: batches of records over a few keys, some tombstones,
/// random codecs.
fn arbitrary_log() -> impl Strategy<Value = RandomLog> {
    let codec = prop_oneof![
        Just(Compression::None),
        Just(Compression::Gzip),
        Just(Compression::Lz4),
    ];
    let record = (0u8..8, prop::option::weighted(0.8, any::<u8>()));
    prop::collection::vec((codec, prop::collection::vec(record, 1..6)), 1..25)
}

/// The log's batches placed at consecutive offsets.
fn encode_log(log: &[RandomBatch]) -> Vec<Vec<u8>> {
    let mut next = 0;
    log.iter()
        .map(|(compression, records)| {
            let records: Vec<NewRecord> = records
                .iter()
                .map(|(key, value)| NewRecord {
                    key: Some(Bytes::from(format!("key-{key}"))),
                    value: value.map(|value| Bytes::from(format!("value-{value}"))),
                    timestamp: TimestampMs(NOW),
                    headers: Vec::new(),
                })
                .collect();
            let options = BatchOptions {
                compression: *compression,
                ..BatchOptions::default()
            };
            let mut bytes = encode_batch(&records, &options);
            set_base_offset(&mut bytes, Offset(next)).unwrap();
            next += records.len() as i64;
            bytes
        })
        .collect()
}

/// One pass as the runtime makes it: map from `first_dirty` until the map
/// fills, then judge every batch.
fn pass(
    batches: &[Vec<u8>],
    first_dirty: Offset,
    map_bytes: usize,
    now_ms: i64,
) -> (Vec<Vec<u8>>, Option<Offset>) {
    let mut map = OffsetMap::new(map_bytes);
    let mut producers = ProducerLastBatches::default();
    for bytes in batches {
        let batch = BatchView::parse_exact(bytes).unwrap();
        if map_batch(&mut map, &mut producers, &batch, first_dirty).unwrap() == MapStep::Full {
            break;
        }
    }
    let round = round(&map, &producers, now_ms);
    let out = batches
        .iter()
        .filter_map(|bytes| match fate(bytes, &round) {
            BatchFate::Keep => Some(bytes.clone()),
            BatchFate::Rewrite(bytes) => Some(bytes),
            BatchFate::Drop => None,
        })
        .collect();
    (out, map.latest_offset())
}

fn records_of(batches: &[Vec<u8>]) -> Decoded {
    batches.iter().flat_map(|bytes| decode(bytes)).collect()
}

proptest! {
    /// After a pass every key's latest record is still there (tombstones
    /// too, on the first pass), offsets only grow, every batch keeps its
    /// offsets, and records past the map's reach are untouched. A second
    /// pass after the horizon removes the latest tombstones and nothing else.
    #[test]
    fn compaction_keeps_the_latest_value_of_every_key(
        log in arbitrary_log(),
        map_entries in 1usize..12,
        dirty_batches in 0usize..4,
    ) {
        let batches = encode_log(&log);
        let before = records_of(&batches);
        let first_dirty = batches
            .get(dirty_batches.min(batches.len() - 1))
            .map(|bytes| BatchView::parse_exact(bytes).unwrap().base_offset())
            .unwrap();
        let map_bytes = map_entries * (crate::log::compaction::offset_map::OFFSET_MAP_ENTRY_OVERHEAD_BYTES + 6);
        let (cleaned, latest) = pass(&batches, first_dirty, map_bytes, NOW);
        let after = records_of(&cleaned);
        let latest = latest.map_or(-1, |offset| offset.0);
        let mut last_of_key: BTreeMap<Option<String>, &DecodedRecord> = BTreeMap::new();
        for record in &before {
            last_of_key.insert(record.1.clone(), record);
        }
        for record in last_of_key.values() {
            prop_assert!(after.contains(record), "lost {:?}", record);
        }
        prop_assert!(after.windows(2).all(|pair| pair[0].0 < pair[1].0));
        for record in before.iter().filter(|record| record.0 > latest) {
            prop_assert!(after.contains(record), "past the map: {:?}", record);
        }
        let kept: Vec<(Offset, Offset)> = cleaned
            .iter()
            .map(|bytes| {
                let batch = BatchView::parse_exact(bytes).unwrap();
                (batch.base_offset(), batch.last_offset())
            })
            .collect();
        for (base, last) in &kept {
            let original = batches.iter().any(|bytes| {
                let batch = BatchView::parse_exact(bytes).unwrap();
                (batch.base_offset(), batch.last_offset()) == (*base, *last)
            });
            prop_assert!(original, "batch {}..={} keeps its offsets", base, last);
        }
        // Second pass, everything dirty, after every horizon.
        let (second, _) = pass(&cleaned, Offset(0), 1 << 20, NOW + RETENTION);
        let after_second = records_of(&second);
        let mut latest_values: BTreeMap<Option<String>, &DecodedRecord> = BTreeMap::new();
        for record in &after {
            latest_values.insert(record.1.clone(), record);
        }
        for record in &after_second {
            prop_assert!(record.2.is_some(), "an expired tombstone stays: {:?}", record);
        }
        for record in latest_values.values().filter(|record| record.2.is_some()) {
            prop_assert!(after_second.contains(record));
        }
        prop_assert_eq!(after_second.len(), latest_values.values().filter(|record| record.2.is_some()).count());
    }
}
