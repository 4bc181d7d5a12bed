//! What a leader checks and changes in a client's batches before they are
//! appended, past their shape (which the log checks): Kafka's
//! `LogValidator` for magic 2.
//!
//! - Every record of a compacted topic needs a key.
//! - A CreateTime topic refuses records whose timestamps lie further in the
//!   past than `message.timestamp.before.max.ms` or further in the future
//!   than `message.timestamp.after.max.ms`, and batches that claim
//!   LogAppendTime.
//! - A topic whose `compression.type` names a codec stores batches in it:
//!   a batch in another codec has its records section recompressed.
//!
//! A batch with invalid records is refused whole, naming each bad record by
//! its index in the batch (Produce v8+ `record_errors`), so a client fails
//! those records alone.
//!
//! The common case costs no decode: `producer` (the default) or a batch
//! already in the topic's codec is not recompressed, and the future bound
//! is checked against the header's max timestamp; records are read only for
//! a compacted topic, a finite past bound, or a batch that fails the header
//! check.

use crate::log::batch::{
    BATCH_HEADER_BYTES, BATCH_LENGTH_MIN, BatchHeader, BatchView, CRC_COVERED_START, Compression,
    TimestampType,
};
use crate::log::compaction::record_parts::{parse_records, records_section};
use crate::log::config::{CompressionConfig, LogConfig, MessageTimestampType};
use crate::log::records::{RecordsError, record_stamps};
use crate::protocol::errors::ErrorCode;

/// One invalid record: its index in its batch and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordError {
    pub batch_index: i32,
    pub message: String,
}

/// Why a client's records were refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    pub error: ErrorCode,
    pub message: String,
    pub record_errors: Vec<RecordError>,
}

/// The records to append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Validated {
    /// As the client sent them.
    AsProduced,
    /// Rewritten (recompressed) into these bytes.
    Rewritten(Vec<u8>),
}

/// Kafka's kinds of record error, in the order a record is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Key,
    Timestamp,
}

/// Checks `records` (one or more batches) for `partition` (named in
/// messages) with `config`, at `now_ms`. Batches that do not parse are left
/// for the log to refuse.
pub fn validate_client_records(
    records: &[u8],
    config: &LogConfig,
    partition: &dyn std::fmt::Display,
    now_ms: i64,
) -> Result<Validated, Rejected> {
    let mut rest = records;
    let mut rewritten: Option<Vec<u8>> = None;
    let mut done = 0;
    while !rest.is_empty() {
        let Ok(batch) = BatchView::parse_prefix(rest) else {
            return Ok(Validated::AsProduced);
        };
        if batch.size_bytes() as u64 > config.max_message_bytes || batch.attributes().is_control() {
            return Ok(Validated::AsProduced);
        }
        check_records(&batch, config, partition, now_ms)?;
        if let Some(target) = recompression(&batch, &config.compression) {
            let bytes =
                recompress(&batch, target, &config.compression).map_err(|error| corrupt(&error))?;
            let out = rewritten.get_or_insert_with(|| records[..done].to_vec());
            out.extend_from_slice(&bytes);
        } else if let Some(out) = rewritten.as_mut() {
            out.extend_from_slice(batch.as_bytes());
        }
        done += batch.size_bytes();
        rest = &rest[batch.size_bytes()..];
    }
    Ok(rewritten.map_or(Validated::AsProduced, Validated::Rewritten))
}

fn corrupt(error: &RecordsError) -> Rejected {
    Rejected {
        error: ErrorCode::CORRUPT_MESSAGE,
        message: error.to_string(),
        record_errors: Vec::new(),
    }
}

/// The key and timestamp checks of one batch.
fn check_records(
    batch: &BatchView<'_>,
    config: &LogConfig,
    partition: &dyn std::fmt::Display,
    now_ms: i64,
) -> Result<(), Rejected> {
    let compacted = config.cleanup_policy.compacts();
    let create_time = config.message_timestamp_type == MessageTimestampType::CreateTime;
    let (before, after) = (config.timestamps.before_ms(), config.timestamps.after_ms());
    let claims_append_time = batch.attributes().timestamp_type() == TimestampType::LogAppendTime;
    let future_bound = i128::from(now_ms) + i128::from(after);
    let timestamps_suspect = create_time
        && (claims_append_time
            || before < i64::MAX
            || i128::from(batch.max_timestamp().0) > future_bound);
    if !compacted && !timestamps_suspect {
        return Ok(());
    }
    let mut errors: Vec<(i32, Kind, String)> = Vec::new();
    if compacted {
        let section = records_section(batch).map_err(|error| corrupt(&error))?;
        let parsed = parse_records(&section, batch.records_count()).map_err(|e| corrupt(&e))?;
        let message = format!(
            "Compacted topic cannot accept message without key in topic partition {partition}."
        );
        for (index, _) in parsed
            .iter()
            .enumerate()
            .filter(|(_, record)| record.key.is_none())
        {
            errors.push((index as i32, Kind::Key, message.clone()));
        }
    }
    if timestamps_suspect {
        let stamps = record_stamps(batch).map_err(|error| corrupt(&error))?;
        for (index, stamp) in stamps.iter().enumerate() {
            let index = index as i32;
            if errors.iter().any(|(known, _, _)| *known == index) {
                continue;
            }
            let timestamp = stamp.timestamp.0;
            let message = if claims_append_time {
                format!(
                    "Invalid timestamp type in message with offset {}. Producer should not set \
                     timestamp type to LogAppendTime.",
                    stamp.offset.0
                )
            } else if timestamp != -1
                && (i128::from(now_ms) - i128::from(timestamp) > i128::from(before)
                    || i128::from(timestamp) > future_bound)
            {
                // Java's long arithmetic, as Kafka's message shows it.
                format!(
                    "Timestamp {timestamp} of message with offset {} is out of range. The \
                     timestamp should be within [{}, {}]",
                    stamp.offset.0,
                    now_ms.wrapping_sub(before),
                    now_ms.wrapping_add(after)
                )
            } else {
                continue;
            };
            errors.push((index, Kind::Timestamp, message));
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    errors.sort_by_key(|(index, _, _)| *index);
    Err(rejected(errors))
}

/// Kafka's `processRecordErrors`: INVALID_TIMESTAMP if any record's
/// timestamp is bad, else INVALID_RECORD, with its summary message.
fn rejected(errors: Vec<(i32, Kind, String)>) -> Rejected {
    let record_errors: Vec<RecordError> = errors
        .iter()
        .map(|(index, _, message)| RecordError {
            batch_index: *index,
            message: message.clone(),
        })
        .collect();
    if errors.iter().any(|(_, kind, _)| *kind == Kind::Timestamp) {
        return Rejected {
            error: ErrorCode::INVALID_TIMESTAMP,
            message: "One or more records have been rejected due to invalid timestamp".into(),
            record_errors,
        };
    }
    let shown: Vec<String> = record_errors
        .iter()
        .take(3)
        .map(|error| {
            format!(
                "RecordError(batchIndex={}, message='{}')",
                error.batch_index, error.message
            )
        })
        .collect();
    Rejected {
        error: ErrorCode::INVALID_RECORD,
        message: format!(
            "One or more records have been rejected due to {} record errors in total, and only \
             showing the first three errors at most: [{}]",
            record_errors.len(),
            shown.join(", ")
        ),
        record_errors,
    }
}

/// The codec to rewrite `batch` into, if the topic's differs from it.
fn recompression(batch: &BatchView<'_>, compression: &CompressionConfig) -> Option<Compression> {
    let target = compression.codec.codec()?;
    (batch.attributes().compression() != target).then_some(target)
}

/// `batch` with its records section in `target`: the records themselves are
/// unchanged (they do not depend on the codec), so the header keeps every
/// field but the codec bits, the length and the CRC.
fn recompress(
    batch: &BatchView<'_>,
    target: Compression,
    levels: &CompressionConfig,
) -> Result<Vec<u8>, RecordsError> {
    let section = records_section(batch)?;
    let body = compress(target, &section, levels)?;
    let length = i32::try_from(body.len())
        .ok()
        .and_then(|len| len.checked_add(BATCH_LENGTH_MIN))
        .ok_or_else(|| RecordsError::Compression("the batch grows past 2 GiB".into()))?;
    let mut bytes = Vec::with_capacity(BATCH_HEADER_BYTES + body.len());
    bytes.extend_from_slice(&batch.as_bytes()[..BATCH_HEADER_BYTES]);
    bytes.extend_from_slice(&body);
    bytes[8..12].copy_from_slice(&length.to_be_bytes());
    let attributes = (batch.attributes().0 & !0x07) | codec_bits(target);
    bytes[CRC_COVERED_START..CRC_COVERED_START + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[CRC_COVERED_START..]);
    bytes[17..CRC_COVERED_START].copy_from_slice(&crc.to_be_bytes());
    debug_assert!(BatchHeader::parse(&bytes).is_ok());
    Ok(bytes)
}

fn codec_bits(codec: Compression) -> i16 {
    match codec {
        Compression::None => 0,
        Compression::Gzip => 1,
        Compression::Snappy => 2,
        Compression::Lz4 => 3,
        Compression::Zstd => 4,
        Compression::Unknown(bits) => i16::from(bits & 0x07),
    }
}

/// `records` in `codec` at the topic's level for it. The framings are
/// Kafka's: gzip, Snappy's xerial (Java) framing, the LZ4 frame format with
/// independent blocks, a zstd frame.
fn compress(
    codec: Compression,
    records: &[u8],
    levels: &CompressionConfig,
) -> Result<Vec<u8>, RecordsError> {
    use kafka_protocol::compression::{Compressor, Snappy};
    use std::io::Write;
    let failed = |error: std::io::Error| RecordsError::Compression(error.to_string());
    match codec {
        Compression::None => Ok(records.to_vec()),
        Compression::Gzip => {
            let level = match levels.gzip_level {
                -1 => flate2::Compression::default(),
                level => flate2::Compression::new(level.clamp(1, 9) as u32),
            };
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), level);
            encoder.write_all(records).map_err(failed)?;
            encoder.finish().map_err(failed)
        }
        Compression::Snappy => {
            let mut out = bytes::BytesMut::new();
            Snappy::compress(&mut out, |buffer: &mut bytes::BytesMut| {
                buffer.extend_from_slice(records);
                Ok(())
            })
            .map_err(|error| RecordsError::Compression(error.to_string()))?;
            Ok(out.to_vec())
        }
        Compression::Lz4 => {
            let mut encoder = lz4::EncoderBuilder::new()
                .level(levels.lz4_level.clamp(1, 17) as u32)
                .block_mode(lz4::BlockMode::Independent)
                .build(Vec::new())
                .map_err(failed)?;
            encoder.write_all(records).map_err(failed)?;
            let (out, finished) = encoder.finish();
            finished.map_err(failed)?;
            Ok(out)
        }
        Compression::Zstd => zstd::stream::encode_all(records, levels.zstd_level).map_err(failed),
        Compression::Unknown(code) => Err(RecordsError::Compression(format!(
            "unknown compression {code}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::builder::{BatchOptions, NewRecord, encode_batch};
    use crate::types::{Offset, TimestampMs};
    use bytes::Bytes;

    const NOW: i64 = 1_700_000_000_000;

    fn record(key: Option<&str>, timestamp: i64) -> NewRecord {
        NewRecord {
            key: key.map(|key| Bytes::copy_from_slice(key.as_bytes())),
            value: Some(Bytes::from_static(b"value")),
            timestamp: TimestampMs(timestamp),
            headers: vec![
                ("h".into(), Some(Bytes::from_static(b"1"))),
                ("h".into(), None),
            ],
        }
    }

    fn batch(records: &[NewRecord], compression: Compression) -> Vec<u8> {
        let options = BatchOptions {
            compression,
            producer_id: 9,
            producer_epoch: 2,
            base_sequence: 40,
            ..BatchOptions::default()
        };
        encode_batch(records, &options)
    }

    fn config(settings: &[(&str, &str)]) -> LogConfig {
        LogConfig::default()
            .with_overrides(settings.iter().copied())
            .unwrap()
    }

    #[test]
    fn the_default_topic_takes_batches_as_produced() {
        for codec in [Compression::None, Compression::Zstd] {
            let bytes = batch(&[record(None, NOW), record(Some("k"), NOW - 1)], codec);
            assert_eq!(
                validate_client_records(&bytes, &LogConfig::default(), &"t-0", NOW),
                Ok(Validated::AsProduced)
            );
        }
    }

    #[test]
    fn keyless_records_of_a_compacted_topic_are_named_by_their_index() {
        let compacted = config(&[("cleanup.policy", "compact")]);
        for codec in [Compression::None, Compression::Lz4] {
            let records = [record(None, NOW), record(Some("k"), NOW), record(None, NOW)];
            let rejected =
                validate_client_records(&batch(&records, codec), &compacted, &"t-0", NOW)
                    .unwrap_err();
            assert_eq!(rejected.error, ErrorCode::INVALID_RECORD);
            let indexes: Vec<i32> = rejected
                .record_errors
                .iter()
                .map(|error| error.batch_index)
                .collect();
            assert_eq!(indexes, [0, 2]);
            assert_eq!(
                rejected.record_errors[0].message,
                "Compacted topic cannot accept message without key in topic partition t-0."
            );
            assert!(rejected.message.starts_with(
                "One or more records have been rejected due to 2 record errors in total"
            ));
        }
    }

    #[test]
    fn timestamps_out_of_bounds_are_refused_record_by_record() {
        let bounded = config(&[
            ("message.timestamp.before.max.ms", "1000"),
            ("message.timestamp.after.max.ms", "10"),
        ]);
        let records = [
            record(Some("a"), NOW),
            record(Some("b"), NOW - 5_000),
            record(Some("c"), NOW + 11),
        ];
        let rejected =
            validate_client_records(&batch(&records, Compression::Gzip), &bounded, &"t-0", NOW)
                .unwrap_err();
        assert_eq!(rejected.error, ErrorCode::INVALID_TIMESTAMP);
        let indexes: Vec<i32> = rejected
            .record_errors
            .iter()
            .map(|error| error.batch_index)
            .collect();
        assert_eq!(indexes, [1, 2]);
        assert!(
            rejected.record_errors[1]
                .message
                .contains("should be within")
        );
        // Kafka 4's default bound: an hour into the future.
        let future = [record(None, NOW + 3_600_001)];
        assert!(
            validate_client_records(
                &batch(&future, Compression::None),
                &LogConfig::default(),
                &"t-0",
                NOW
            )
            .is_err()
        );
        // LogAppendTime topics take any timestamp.
        let append_time = config(&[("message.timestamp.type", "LogAppendTime")]);
        assert!(
            validate_client_records(
                &batch(&future, Compression::None),
                &append_time,
                &"t-0",
                NOW
            )
            .is_ok()
        );
        // With both kinds of error, the timestamp's code wins; a keyless
        // record is named for its key.
        let compacted = config(&[
            ("cleanup.policy", "compact"),
            ("message.timestamp.after.max.ms", "0"),
        ]);
        let mixed = [record(None, NOW + 5), record(Some("k"), NOW + 5)];
        let rejected =
            validate_client_records(&batch(&mixed, Compression::None), &compacted, &"t-0", NOW)
                .unwrap_err();
        assert_eq!(rejected.error, ErrorCode::INVALID_TIMESTAMP);
        assert!(
            rejected.record_errors[0]
                .message
                .starts_with("Compacted topic")
        );
        assert!(rejected.record_errors[1].message.starts_with("Timestamp"));
    }

    #[test]
    fn a_topic_codec_recompresses_other_codecs_and_keeps_every_record_field() {
        let records = [record(Some("a"), NOW), record(None, NOW - 7)];
        for (topic, target) in [
            ("zstd", Compression::Zstd),
            ("gzip", Compression::Gzip),
            ("snappy", Compression::Snappy),
            ("lz4", Compression::Lz4),
            ("uncompressed", Compression::None),
        ] {
            for source in [Compression::None, Compression::Snappy, Compression::Zstd] {
                let original = batch(&records, source);
                let topic_config = config(&[("compression.type", topic)]);
                let out = validate_client_records(&original, &topic_config, &"t-0", NOW).unwrap();
                if source == target {
                    assert_eq!(out, Validated::AsProduced, "{topic} from {source:?}");
                    continue;
                }
                let Validated::Rewritten(bytes) = out else {
                    panic!("{topic} from {source:?} is not rewritten");
                };
                let (before, after) = (
                    BatchView::parse_exact(&original).unwrap(),
                    BatchView::parse_exact(&bytes).unwrap(),
                );
                assert_eq!(after.validate_for_append(Offset(0)), Ok(()));
                assert_eq!(after.attributes().compression(), target);
                assert_eq!(
                    records_section(&before).unwrap(),
                    records_section(&after).unwrap(),
                    "{topic} from {source:?}: the records are the same bytes"
                );
                assert_eq!(
                    (
                        after.producer_id(),
                        after.producer_epoch(),
                        after.base_sequence()
                    ),
                    (9, 2, 40)
                );
                assert_eq!(
                    (
                        after.records_count(),
                        after.max_timestamp(),
                        after.base_timestamp()
                    ),
                    (
                        before.records_count(),
                        before.max_timestamp(),
                        before.base_timestamp()
                    )
                );
            }
        }
        let levels = config(&[
            ("compression.type", "gzip"),
            ("compression.gzip.level", "9"),
        ]);
        assert!(matches!(
            validate_client_records(&batch(&records, Compression::None), &levels, &"t-0", NOW),
            Ok(Validated::Rewritten(_))
        ));
    }

    #[test]
    fn several_batches_are_each_checked_and_rewritten_in_order() {
        let mut two = batch(&[record(Some("a"), NOW)], Compression::Zstd);
        two.extend(batch(&[record(Some("b"), NOW)], Compression::None));
        let topic_config = config(&[("compression.type", "zstd")]);
        let Validated::Rewritten(bytes) =
            validate_client_records(&two, &topic_config, &"t-0", NOW).unwrap()
        else {
            panic!("the second batch is recompressed");
        };
        let first = BatchView::parse_prefix(&bytes).unwrap();
        assert_eq!(first.as_bytes(), &two[..first.size_bytes()]);
        let second = BatchView::parse_exact(&bytes[first.size_bytes()..]).unwrap();
        assert_eq!(second.attributes().compression(), Compression::Zstd);
        // A batch that does not parse is left to the log.
        assert_eq!(
            validate_client_records(&two[..10], &topic_config, &"t-0", NOW),
            Ok(Validated::AsProduced)
        );
    }
}
