//! Which records of a batch survive a cleaning pass, and the bytes of what
//! survives: Kafka's `MemoryRecords.filterTo` driven by the cleaner's filter
//! (`Cleaner.cleanInto`), for v2 batches.
//!
//! A record survives when its offset lies past what the offset map covers,
//! or when it holds its key's latest offset and is either a value or a
//! tombstone whose batch's delete horizon has not passed. A record without a
//! key is dropped (a compacted topic refuses them; older data may hold some).
//!
//! The delete horizon follows KIP-534: the first pass that keeps a tombstone
//! rewrites its batch with `deleteHorizonMs = now + delete.retention.ms` in
//! the `baseTimestamp` field and attribute bit 6 set (record timestamp deltas
//! are re-encoded against it); a later pass at or after that time drops the
//! tombstone. So a tombstone outlives the pass that first sees it by at least
//! `delete.retention.ms`, which gives consumers that long to read it.
//!
//! A batch that keeps every record and needs no new horizon is kept byte for
//! byte. Otherwise it is rebuilt with the same base offset and last offset
//! delta (so the producer's last sequence survives), producer fields, leader
//! epoch and compression, and only the surviving records (copied as stored).
//! A batch left with no record is dropped, unless it may be its producer's
//! last batch or it ends exactly at the round's upper bound: then its header
//! alone is kept (Kafka's `RETAIN_EMPTY`).
//!
//! Control batches (transaction markers) are kept as they are: Brook has no
//! transactions yet, so no marker can be proven obsolete.

use bytes::BytesMut;
use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
use kafka_protocol::records::Compression as Codec;
use zerocopy::{FromZeros, IntoBytes};

use crate::log::batch::{
    BATCH_HEADER_BYTES, BATCH_LENGTH_MIN, BatchHeader, BatchView, CRC_COVERED_START, Compression,
    LOG_OVERHEAD_BYTES, MAGIC_V2, TimestampType,
};
use crate::log::compaction::offset_map::{OffsetMap, ProducerLastBatches};
use crate::log::compaction::record_parts::{
    RecordParts, codec_of, encode_record, parse_records, records_section,
};
use crate::log::records::RecordsError;
use crate::types::{Offset, TimestampMs};

/// Attribute bits a batch's header keeps when rewritten: compression (0–2),
/// timestamp type (3), transactional (4), control (5).
const ATTRIBUTES_KEPT: i16 = 0x3f;
/// Attribute bit 6: `baseTimestamp` holds the delete horizon.
const DELETE_HORIZON_FLAG: i16 = 0x40;
/// Attribute bits of an emptied batch's header: timestamp type,
/// transactional and control (no compression: there are no records).
const EMPTY_ATTRIBUTES_KEPT: i16 = 0x38;

/// Everything a pass decides batches by.
#[derive(Clone, Copy, Debug)]
pub struct CleaningRound<'a> {
    pub offset_map: &'a OffsetMap,
    pub producers: &'a ProducerLastBatches,
    /// The round's first uncleanable offset: an emptied batch ending just
    /// before it is kept, so the cleaned range still shows where it ends.
    pub upper_bound_offset: Offset,
    pub now_ms: i64,
    /// `delete.retention.ms`.
    pub delete_retention_ms: i64,
}

/// What becomes of one batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchFate {
    /// Written again as it is.
    Keep,
    /// Replaced by these bytes: fewer records, a new delete horizon, or a
    /// header alone.
    Rewrite(Vec<u8>),
    /// Gone.
    Drop,
}

/// The delete horizon a batch carries, if any.
pub fn delete_horizon(batch: &BatchView<'_>) -> Option<TimestampMs> {
    batch
        .attributes()
        .has_delete_horizon()
        .then(|| batch.base_timestamp())
}

impl CleaningRound<'_> {
    /// Kafka's `Cleaner.shouldRetainRecord` for a v2 batch.
    pub fn retains(&self, batch: &BatchView<'_>, record: &RecordParts<'_>) -> bool {
        let offset = record.offset(batch.base_offset());
        let past_map = self
            .offset_map
            .latest_offset()
            .is_none_or(|latest| offset > latest);
        if past_map {
            return true;
        }
        let Some(key) = record.key else {
            return false;
        };
        let latest_for_key = self.offset_map.get(key).is_none_or(|found| offset >= found);
        let tombstone_kept = delete_horizon(batch).is_none_or(|horizon| self.now_ms < horizon.0);
        latest_for_key && (record.has_value || tombstone_kept)
    }

    /// Whether an emptied batch keeps its header (Kafka's `RETAIN_EMPTY`).
    fn keeps_empty(&self, batch: &BatchView<'_>) -> bool {
        self.producers.may_be_last_of_producer(batch)
            || batch.next_offset() == self.upper_bound_offset
    }
}

/// Decides `batch`'s fate in `round`.
pub fn clean_batch(
    batch: &BatchView<'_>,
    round: &CleaningRound<'_>,
) -> Result<BatchFate, RecordsError> {
    if batch.attributes().is_control() {
        return Ok(BatchFate::Keep);
    }
    let section = records_section(batch)?;
    let records = parse_records(&section, batch.records_count())?;
    let retained: Vec<&RecordParts<'_>> = records
        .iter()
        .filter(|record| round.retains(batch, record))
        .collect();
    if retained.is_empty() {
        return Ok(if round.keeps_empty(batch) {
            BatchFate::Rewrite(empty_header(batch))
        } else {
            BatchFate::Drop
        });
    }
    let holds_tombstone = retained.iter().any(|record| !record.has_value);
    let horizon = match delete_horizon(batch) {
        None if holds_tombstone => Some(TimestampMs(
            round.now_ms.saturating_add(round.delete_retention_ms),
        )),
        horizon => horizon,
    };
    if retained.len() == records.len() && horizon == delete_horizon(batch) {
        return Ok(BatchFate::Keep);
    }
    rebuild(batch, &retained, horizon).map(BatchFate::Rewrite)
}

/// The batch with only `retained` records, stamped with `horizon`.
fn rebuild(
    batch: &BatchView<'_>,
    retained: &[&RecordParts<'_>],
    horizon: Option<TimestampMs>,
) -> Result<Vec<u8>, RecordsError> {
    let old_base = batch.base_timestamp();
    let base_timestamp = horizon.unwrap_or(old_base);
    let mut records = Vec::new();
    let mut max_timestamp = TimestampMs::NONE;
    for record in retained {
        let timestamp = record.timestamp(old_base);
        max_timestamp = max_timestamp.max(timestamp);
        encode_record(
            record,
            timestamp.0.saturating_sub(base_timestamp.0),
            &mut records,
        );
    }
    if batch.attributes().timestamp_type() == TimestampType::LogAppendTime {
        max_timestamp = batch.max_timestamp();
    }
    let compression = batch.attributes().compression();
    let body = compress(compression, records)?;
    let mut attributes = batch.attributes().0 & ATTRIBUTES_KEPT;
    if horizon.is_some() {
        attributes |= DELETE_HORIZON_FLAG;
    }
    let fields = HeaderFields {
        attributes,
        base_timestamp,
        max_timestamp,
        records_count: retained.len() as i32,
    };
    Ok(assemble(batch, fields, &body))
}

/// Kafka's `DefaultRecordBatch.writeEmptyHeader`: the batch's offsets,
/// producer fields and largest timestamp, with no records.
fn empty_header(batch: &BatchView<'_>) -> Vec<u8> {
    let fields = HeaderFields {
        attributes: batch.attributes().0 & EMPTY_ATTRIBUTES_KEPT,
        base_timestamp: TimestampMs::NONE,
        max_timestamp: batch.max_timestamp(),
        records_count: 0,
    };
    assemble(batch, fields, &[])
}

/// The header fields a rewrite changes; the rest come from the original.
struct HeaderFields {
    attributes: i16,
    base_timestamp: TimestampMs,
    max_timestamp: TimestampMs,
    records_count: i32,
}

fn assemble(batch: &BatchView<'_>, fields: HeaderFields, body: &[u8]) -> Vec<u8> {
    let original = batch.header();
    let mut header = BatchHeader::new_zeroed();
    header.base_offset = original.base_offset;
    header
        .batch_length
        .set(BATCH_LENGTH_MIN + i32::try_from(body.len()).expect("a batch body fits an INT"));
    header.partition_leader_epoch = original.partition_leader_epoch;
    header.magic = MAGIC_V2;
    header.attributes.set(fields.attributes);
    header.last_offset_delta = original.last_offset_delta;
    header.base_timestamp.set(fields.base_timestamp.0);
    header.max_timestamp.set(fields.max_timestamp.0);
    header.producer_id = original.producer_id;
    header.producer_epoch = original.producer_epoch;
    header.base_sequence = original.base_sequence;
    header.records_count.set(fields.records_count);
    let mut bytes = Vec::with_capacity(BATCH_HEADER_BYTES + body.len());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(body);
    let crc = crc32c::crc32c(&bytes[CRC_COVERED_START..]);
    bytes[17..CRC_COVERED_START].copy_from_slice(&crc.to_be_bytes());
    debug_assert_eq!(
        bytes.len(),
        LOG_OVERHEAD_BYTES + header.batch_length.get() as usize
    );
    bytes
}

/// `records` compressed as the batch was.
fn compress(compression: Compression, records: Vec<u8>) -> Result<Vec<u8>, RecordsError> {
    let codec = codec_of(compression)
        .ok_or_else(|| RecordsError::Compression(format!("unknown compression {compression:?}")))?;
    let mut out = BytesMut::new();
    let write = |buffer: &mut BytesMut| {
        buffer.extend_from_slice(&records);
        Ok(())
    };
    let written = match codec {
        Codec::None => return Ok(records),
        Codec::Gzip => Gzip::compress(&mut out, write),
        Codec::Snappy => Snappy::compress(&mut out, write),
        Codec::Lz4 => Lz4::compress(&mut out, write),
        Codec::Zstd => Zstd::compress(&mut out, write),
    };
    written.map_err(|error| RecordsError::Compression(error.to_string()))?;
    Ok(out.to_vec())
}

#[cfg(test)]
mod tests;
