//! What a cleaning pass learns before it rewrites anything: each key's latest
//! offset in the dirty part of the log (Kafka's `OffsetMap`, built as
//! `Cleaner.buildOffsetMapForSegment` does), and each producer's last batch.
//!
//! Kafka's map keeps 16-byte MD5 digests of the keys, so two keys can collide
//! (rarely) and lose the older key's latest value. This one keeps the keys
//! themselves, so it is exact, and charges each entry its key's length plus
//! [`OFFSET_MAP_ENTRY_OVERHEAD_BYTES`] against the budget.

use std::collections::HashMap;

use crate::log::batch::BatchView;
use crate::log::compaction::record_parts::{parse_records, records_section};
use crate::log::records::RecordsError;
use crate::types::Offset;

/// What one entry costs besides its key: the boxed key's pointer and length
/// (16), the offset (8), the table's control byte and its spare capacity
/// (a table at 7/8 load that doubles when full averages ~1.7 slots per
/// entry), and the allocator's rounding of the key's own allocation.
pub const OFFSET_MAP_ENTRY_OVERHEAD_BYTES: usize = 80;
/// Producers whose last batch a pass tracks; a producer beyond this has every
/// emptied batch kept (as if each were its last), so nothing is lost.
pub const PRODUCERS_TRACKED_MAX: usize = 100_000;

/// The map has no room for another key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapFull;

/// Key → latest offset, within a memory budget.
#[derive(Debug)]
pub struct OffsetMap {
    offsets: HashMap<Box<[u8]>, Offset>,
    bytes_used: usize,
    bytes_max: usize,
    latest_offset: Option<Offset>,
}

impl OffsetMap {
    pub fn new(bytes_max: usize) -> OffsetMap {
        OffsetMap {
            offsets: HashMap::new(),
            bytes_used: 0,
            bytes_max,
            latest_offset: None,
        }
    }

    /// Records `offset` for `key` (keeping the larger if it is known). A new
    /// key that would take the map past its budget is refused.
    pub fn put(&mut self, key: &[u8], offset: Offset) -> Result<(), MapFull> {
        if let Some(known) = self.offsets.get_mut(key) {
            *known = (*known).max(offset);
            return Ok(());
        }
        let cost = key.len() + OFFSET_MAP_ENTRY_OVERHEAD_BYTES;
        if self.bytes_used + cost > self.bytes_max {
            return Err(MapFull);
        }
        self.bytes_used += cost;
        self.offsets.insert(key.into(), offset);
        Ok(())
    }

    pub fn get(&self, key: &[u8]) -> Option<Offset> {
        self.offsets.get(key).copied()
    }

    /// The last offset whose batch was mapped whole: records after it are
    /// beyond what the map knows, and survive the pass.
    pub fn latest_offset(&self) -> Option<Offset> {
        self.latest_offset
    }

    pub fn update_latest_offset(&mut self, offset: Offset) {
        self.latest_offset = Some(
            self.latest_offset
                .map_or(offset, |latest| latest.max(offset)),
        );
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Budget used, as Kafka reports the map's utilisation.
    pub fn bytes_used(&self) -> usize {
        self.bytes_used
    }
}

/// Each producer's last data batch (Kafka asks its producer state for the
/// same: a producer's last batch keeps its sequence number, so it is kept,
/// emptied if need be, for idempotence).
#[derive(Debug, Default)]
pub struct ProducerLastBatches {
    last_offsets: HashMap<i64, Offset>,
}

impl ProducerLastBatches {
    /// Accounts for a batch seen in log order.
    pub fn observe(&mut self, batch: &BatchView<'_>) {
        let producer = batch.producer_id();
        if producer < 0 || batch.attributes().is_control() {
            return;
        }
        let tracked = self.last_offsets.len() < PRODUCERS_TRACKED_MAX;
        if tracked || self.last_offsets.contains_key(&producer) {
            self.last_offsets.insert(producer, batch.last_offset());
        }
    }

    /// Whether `batch` may be its producer's last: it is, or no later batch
    /// of its producer was seen (an untracked producer counts as unseen).
    pub fn may_be_last_of_producer(&self, batch: &BatchView<'_>) -> bool {
        let producer = batch.producer_id();
        producer >= 0
            && self
                .last_offsets
                .get(&producer)
                .is_none_or(|last| *last == batch.last_offset())
    }
}

/// How mapping a batch ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapStep {
    Mapped,
    /// The map filled inside this batch: the pass ends before it.
    Full,
}

/// Maps the keys of `batch` at or after `start_offset` (the first dirty
/// offset) and notes its producer. Control batches carry no keys. A batch
/// mapped whole moves the map's latest offset to its last offset.
pub fn map_batch(
    map: &mut OffsetMap,
    producers: &mut ProducerLastBatches,
    batch: &BatchView<'_>,
    start_offset: Offset,
) -> Result<MapStep, RecordsError> {
    producers.observe(batch);
    if batch.last_offset() < start_offset {
        return Ok(MapStep::Mapped);
    }
    if !batch.attributes().is_control() {
        let section = records_section(batch)?;
        let records = parse_records(&section, batch.records_count())?;
        for record in &records {
            let offset = record.offset(batch.base_offset());
            let Some(key) = record.key.filter(|_| offset >= start_offset) else {
                continue;
            };
            if map.put(key, offset).is_err() {
                return Ok(MapStep::Full);
            }
        }
    }
    map.update_latest_offset(batch.last_offset());
    Ok(MapStep::Mapped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::set_base_offset;
    use crate::log::builder::{BatchOptions, NewRecord, encode_batch};
    use crate::types::TimestampMs;
    use bytes::Bytes;

    fn batch_at(base: i64, keys: &[&str], producer_id: i64) -> Vec<u8> {
        let records: Vec<NewRecord> = keys
            .iter()
            .map(|key| NewRecord {
                key: Some(Bytes::copy_from_slice(key.as_bytes())),
                value: Some(Bytes::from_static(b"v")),
                timestamp: TimestampMs(1),
                headers: Vec::new(),
            })
            .collect();
        let options = if producer_id < 0 {
            BatchOptions::default()
        } else {
            BatchOptions {
                producer_id,
                producer_epoch: 0,
                base_sequence: 0,
                ..BatchOptions::default()
            }
        };
        let mut bytes = encode_batch(&records, &options);
        set_base_offset(&mut bytes, Offset(base)).unwrap();
        bytes
    }

    #[test]
    fn the_map_keeps_each_keys_latest_offset_within_its_budget() {
        let mut map = OffsetMap::new(2 * (OFFSET_MAP_ENTRY_OVERHEAD_BYTES + 1));
        assert_eq!(map.put(b"a", Offset(1)), Ok(()));
        assert_eq!(map.put(b"b", Offset(2)), Ok(()));
        assert_eq!(map.put(b"c", Offset(3)), Err(MapFull));
        assert_eq!(
            map.put(b"a", Offset(4)),
            Ok(()),
            "a known key takes no room"
        );
        assert_eq!(map.put(b"a", Offset(0)), Ok(()));
        assert_eq!(map.get(b"a"), Some(Offset(4)));
        assert_eq!(map.get(b"c"), None);
        assert_eq!(map.len(), 2);
    }

    /// Kafka's buildOffsetMapForSegment: keys below the start offset are not
    /// mapped, and a full map stops inside a batch without moving the
    /// latest offset past the last batch mapped whole.
    #[test]
    fn mapping_starts_at_the_dirty_offset_and_stops_when_full() {
        let first = batch_at(0, &["a", "b"], -1);
        let second = batch_at(2, &["a", "c", "d"], -1);
        let third = batch_at(5, &["e", "f"], -1);
        let mut map = OffsetMap::new(4 * (OFFSET_MAP_ENTRY_OVERHEAD_BYTES + 1));
        let mut producers = ProducerLastBatches::default();
        let mut step = |bytes: &[u8], map: &mut OffsetMap| {
            let batch = BatchView::parse_exact(bytes).unwrap();
            map_batch(map, &mut producers, &batch, Offset(1)).unwrap()
        };
        assert_eq!(step(&first, &mut map), MapStep::Mapped);
        assert_eq!(map.get(b"a"), None, "offset 0 is below the dirty part");
        assert_eq!(map.get(b"b"), Some(Offset(1)));
        assert_eq!(step(&second, &mut map), MapStep::Mapped);
        assert_eq!(map.latest_offset(), Some(Offset(4)));
        assert_eq!(step(&third, &mut map), MapStep::Full);
        assert_eq!(map.latest_offset(), Some(Offset(4)));
        assert_eq!(map.get(b"a"), Some(Offset(2)));
    }

    #[test]
    fn a_producers_last_batch_is_the_last_one_seen() {
        let mut producers = ProducerLastBatches::default();
        let older = batch_at(0, &["a"], 7);
        let newer = batch_at(1, &["b"], 7);
        let other = batch_at(2, &["c"], 8);
        let anonymous = batch_at(3, &["d"], -1);
        for bytes in [&older, &newer] {
            producers.observe(&BatchView::parse_exact(bytes).unwrap());
        }
        let view = |bytes| BatchView::parse_exact(bytes).unwrap();
        assert!(!producers.may_be_last_of_producer(&view(&older)));
        assert!(producers.may_be_last_of_producer(&view(&newer)));
        assert!(
            producers.may_be_last_of_producer(&view(&other)),
            "never seen: kept to be safe"
        );
        assert!(!producers.may_be_last_of_producer(&view(&anonymous)));
    }
}
