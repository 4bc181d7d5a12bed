//! Records into batches, one open batch per partition (Kafka's
//! `RecordAccumulator`): a batch is sealed when the next record would take
//! it past `--batch-size` bytes, when it reaches that size, or when the
//! producer flushes (input paused longer than `--linger`, or ended). A
//! record bigger than the batch size gets a batch of its own.
//!
//! Sealing writes the batch's header, so it is where an idempotent
//! producer's sequence numbers are given: each partition's batches carry
//! consecutive base sequences from 0, wrapping at `i32::MAX` as Kafka's
//! `DefaultRecordBatch.incrementSequence` does. A sealed batch keeps its
//! bytes (and so its sequence) through every retry.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use brook_engine::log::batch::Compression;
use brook_shards::client::records::{BatchBuilder, BatchProducer, RecordHeader};
use bytes::Bytes;

use crate::cli::CliError;
use crate::produce::input::InputRecord;

/// A record's bytes in a batch beyond its key, value and headers, at most
/// (length, attributes, timestamp and offset deltas, key and value lengths,
/// header count, as varints).
const RECORD_OVERHEAD_BYTES_MAX: usize = 5 + 1 + 10 + 5 + 5 + 5 + 5;

/// An idempotent producer's identity (from InitProducerId).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerIdentity {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// A batch ready to send.
#[derive(Clone, Debug)]
pub struct Sealed {
    pub partition: i32,
    pub records: i32,
    pub bytes: Bytes,
}

#[derive(Debug)]
struct Open {
    builder: BatchBuilder,
    /// When its first record came (for `--linger`).
    opened: Option<Instant>,
}

/// Open batches per partition and the sealed ones not yet sent, oldest
/// first. Lives on the producing task.
#[derive(Debug)]
pub struct Accumulator {
    batch_bytes: usize,
    compression: Compression,
    producer: Option<ProducerIdentity>,
    open: BTreeMap<i32, Open>,
    ready: BTreeMap<i32, VecDeque<Sealed>>,
    next_sequence: BTreeMap<i32, i32>,
}

impl Accumulator {
    pub fn new(
        batch_bytes: usize,
        compression: Compression,
        producer: Option<ProducerIdentity>,
    ) -> Accumulator {
        assert!(batch_bytes > 0, "checked with the arguments");
        Accumulator {
            batch_bytes,
            compression,
            producer,
            open: BTreeMap::new(),
            ready: BTreeMap::new(),
            next_sequence: BTreeMap::new(),
        }
    }

    /// Whether `partition`'s open batch has room for a record of
    /// `record_bytes` (key, value and headers); an empty batch always has.
    pub fn fits(&self, partition: i32, record_bytes: usize) -> bool {
        self.open
            .get(&partition)
            .filter(|open| !open.builder.is_empty())
            .is_none_or(|open| {
                open.builder.size_bytes() + record_bytes + RECORD_OVERHEAD_BYTES_MAX
                    <= self.batch_bytes
            })
    }

    /// Adds `record` to `partition`'s open batch; true when the batch has
    /// reached the batch size (the caller seals it).
    pub fn push(
        &mut self,
        partition: i32,
        now: Instant,
        timestamp_ms: i64,
        record: &InputRecord,
        headers: &[RecordHeader<'_>],
    ) -> bool {
        let batch_bytes = self.batch_bytes;
        let open = self.open.entry(partition).or_insert_with(|| Open {
            builder: BatchBuilder::new(batch_bytes),
            opened: None,
        });
        open.opened.get_or_insert(now);
        open.builder.push_with_headers(
            timestamp_ms,
            record.key.as_deref(),
            &[&record.value],
            headers,
        );
        open.builder.size_bytes() >= self.batch_bytes
    }

    /// Seals `partition`'s open batch, if it has records.
    pub fn seal(&mut self, partition: i32) -> Result<(), CliError> {
        let Some(open) = self.open.get_mut(&partition) else {
            return Ok(());
        };
        if open.builder.is_empty() {
            return Ok(());
        }
        let records = open.builder.record_count() as i32;
        let producer = match self.producer {
            None => BatchProducer::NONE,
            Some(identity) => {
                let sequence = self.next_sequence.entry(partition).or_insert(0);
                let base_sequence = *sequence;
                *sequence = increment_sequence(base_sequence, records);
                BatchProducer {
                    producer_id: identity.producer_id,
                    producer_epoch: identity.producer_epoch,
                    base_sequence,
                }
            }
        };
        let bytes = open
            .builder
            .finish_as(self.compression, producer)
            .map_err(|error| CliError::Failed(format!("writing a batch: {error}")))?;
        open.opened = None;
        debug_assert!(open.builder.is_empty());
        self.ready.entry(partition).or_default().push_back(Sealed {
            partition,
            records,
            bytes,
        });
        Ok(())
    }

    /// Seals every open batch; the partitions whose batches were sealed.
    pub fn seal_all(&mut self) -> Result<Vec<i32>, CliError> {
        let partitions: Vec<i32> = self
            .open
            .iter()
            .filter(|(_, open)| !open.builder.is_empty())
            .map(|(partition, _)| *partition)
            .collect();
        for partition in &partitions {
            self.seal(*partition)?;
        }
        Ok(partitions)
    }

    /// When the oldest record in an open batch came.
    pub fn oldest_open(&self) -> Option<Instant> {
        self.open.values().filter_map(|open| open.opened).min()
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The oldest sealed batch of each partition (a Produce request holds
    /// at most one batch per partition).
    pub fn take_round(&mut self) -> Vec<Sealed> {
        let mut round = Vec::with_capacity(self.ready.len());
        self.ready.retain(|_, queue| {
            if let Some(batch) = queue.pop_front() {
                round.push(batch);
            }
            !queue.is_empty()
        });
        round
    }
}

/// Kafka's `DefaultRecordBatch.incrementSequence`: sequences wrap from
/// `i32::MAX` to 0.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    debug_assert!(sequence >= 0 && increment >= 0);
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

#[cfg(test)]
mod tests {
    use brook_engine::log::batch::BatchView;

    use super::*;

    fn record(value: &str) -> InputRecord {
        InputRecord {
            line: 1,
            key: None,
            value: value.as_bytes().to_vec(),
        }
    }

    #[test]
    fn sequences_wrap_as_kafkas_do() {
        assert_eq!(increment_sequence(0, 5), 5);
        assert_eq!(increment_sequence(i32::MAX - 5, 5), i32::MAX);
        assert_eq!(increment_sequence(i32::MAX - 4, 5), 0);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX, 3), 2);
    }

    #[test]
    fn each_partitions_batches_carry_consecutive_sequences() {
        let identity = ProducerIdentity {
            producer_id: 9,
            producer_epoch: 2,
        };
        let mut accumulator = Accumulator::new(1 << 10, Compression::None, Some(identity));
        let now = Instant::now();
        for (partition, count) in [(0, 3), (1, 2), (0, 4)] {
            for _ in 0..count {
                accumulator.push(partition, now, 1, &record("v"), &[]);
            }
            accumulator.seal(partition).unwrap();
        }
        let first = accumulator.take_round();
        let second = accumulator.take_round();
        assert!(accumulator.take_round().is_empty());
        let sequences: Vec<(i32, i32, i32)> = first
            .iter()
            .chain(&second)
            .map(|sealed| {
                let batch = BatchView::parse_exact(&sealed.bytes).unwrap();
                assert_eq!(batch.producer_id(), 9);
                assert_eq!(batch.producer_epoch(), 2);
                assert_eq!(batch.records_count(), sealed.records);
                (sealed.partition, batch.base_sequence(), sealed.records)
            })
            .collect();
        assert_eq!(sequences, [(0, 0, 3), (1, 0, 2), (0, 3, 4)]);
    }

    #[test]
    fn batches_fill_to_the_batch_size() {
        let mut accumulator = Accumulator::new(200, Compression::None, None);
        let now = Instant::now();
        let value = "x".repeat(40);
        assert!(
            accumulator.fits(0, 1 << 20),
            "an empty batch takes anything"
        );
        let mut pushed = 0;
        while accumulator.fits(0, value.len()) {
            assert!(!accumulator.push(0, now, 1, &record(&value), &[]));
            pushed += 1;
        }
        assert!(pushed >= 2);
        assert_eq!(accumulator.oldest_open(), Some(now));
        assert_eq!(accumulator.seal_all().unwrap(), [0]);
        assert_eq!(accumulator.oldest_open(), None);
        let round = accumulator.take_round();
        assert_eq!(round.len(), 1);
        assert!(round[0].bytes.len() <= 200);
        assert_eq!(round[0].records, pushed);
        let batch = BatchView::parse_exact(&round[0].bytes).unwrap();
        assert_eq!(batch.producer_id(), -1);
        assert_eq!(batch.base_sequence(), -1);
        // A record bigger than the batch size fills its batch alone.
        assert!(accumulator.push(1, now, 1, &record(&"y".repeat(300)), &[]));
    }
}
