//! One partition's side of transactions, black-box: real batch bytes go
//! through the producer state as the broker's append path will drive it
//! (verification, data, WriteTxnMarkers), the LSO follows, the `.txnindex`
//! files are written, a restart reloads a snapshot taken with a transaction
//! open and replays the rest, and a `read_committed` fetch finds its aborted
//! transactions.

use brook_engine::log::batch::{BatchView, set_base_offset};
use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::log::control::{EndTxnMarker, MarkerKind, encode_end_txn_marker_batch};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::replica::producer_state::snapshot::ProducerSnapshot;
use brook_engine::replica::producer_state::{
    ProducerEpoch, ProducerOfBatch, ProducerStateConfig, ProducerStateManager, Rebuild, Sequence,
    TransactionVersion, TxnMarker, Verdict, VerificationGuard,
};
use brook_engine::replica::txn_index::{
    AbortedTxn, TransactionIndex, collect_aborted_transactions, fetch_upper_bound_offset,
};
use brook_engine::types::{Offset, ProducerId, TimestampMs};

const P1: ProducerId = ProducerId(1_001);
const P2: ProducerId = ProducerId(1_002);
const P3: ProducerId = ProducerId(1_003);

/// A partition's log as segments of stored batches, with their indexes.
struct Partition {
    segments: Vec<(TransactionIndex, Vec<Vec<u8>>)>,
    log_end: Offset,
    producers: ProducerStateManager,
}

impl Partition {
    fn new() -> Partition {
        Partition {
            segments: vec![(TransactionIndex::new(Offset(0)), Vec::new())],
            log_end: Offset(0),
            producers: ProducerStateManager::new(ProducerStateConfig::default()),
        }
    }

    fn roll(&mut self) {
        self.segments
            .push((TransactionIndex::new(self.log_end), Vec::new()));
    }

    fn store(&mut self, mut bytes: Vec<u8>) -> Offset {
        let base_offset = self.log_end;
        set_base_offset(&mut bytes, base_offset).unwrap();
        let batch = BatchView::parse_exact(&bytes).unwrap();
        batch.validate_for_append(base_offset).unwrap();
        self.log_end = batch.next_offset();
        self.segments.last_mut().unwrap().1.push(bytes);
        base_offset
    }

    /// A client's Produce of one batch, verified as KIP-890 asks.
    fn produce(&mut self, bytes: Vec<u8>, guard: VerificationGuard) -> Result<Offset, ErrorCode> {
        let batch = BatchView::parse_exact(&bytes).unwrap();
        let ProducerOfBatch::Data(producer_batch) = ProducerOfBatch::read(batch.header()) else {
            panic!("not a producer's data batch");
        };
        let verdict = self
            .producers
            .check_batch_verified(&producer_batch, guard)
            .map_err(|error| error.error_code())?;
        match verdict {
            Verdict::Append(pending) => {
                let offset = self.log_end;
                self.producers.record_appended(pending, offset);
                Ok(self.store(bytes))
            }
            Verdict::Duplicate { first_offset, .. } => Ok(first_offset),
        }
    }

    /// The coordinator's WriteTxnMarkers for this partition.
    fn write_marker(
        &mut self,
        producer_id: ProducerId,
        epoch: i16,
        kind: MarkerKind,
    ) -> Result<Offset, ErrorCode> {
        let marker = EndTxnMarker {
            kind,
            coordinator_epoch: 4,
        };
        let bytes = encode_end_txn_marker_batch(producer_id.0, epoch, TimestampMs(9_000), marker);
        let batch = BatchView::parse_exact(&bytes).unwrap();
        let read = TxnMarker::read(&batch).unwrap().unwrap();
        let pending = self
            .producers
            .check_marker(&read, TransactionVersion::LEGACY)
            .map_err(|error| error.error_code())?;
        let offset = self.log_end;
        let completed = self.producers.record_marker(pending, offset);
        let aborted = completed.and_then(|completed| self.producers.complete_txn(completed));
        if let Some(aborted) = aborted {
            let index = &mut self.segments.last_mut().unwrap().0;
            index.append(aborted).unwrap();
        }
        Ok(self.store(bytes))
    }

    fn data(
        producer_id: ProducerId,
        sequence: i32,
        records: usize,
        transactional: bool,
    ) -> Vec<u8> {
        let records: Vec<NewRecord> = (0..records)
            .map(|i| NewRecord::value(format!("record {i}"), TimestampMs(5_000)))
            .collect();
        let options = BatchOptions {
            producer_id: producer_id.0,
            producer_epoch: 0,
            base_sequence: sequence,
            transactional,
            ..BatchOptions::default()
        };
        encode_batch(&records, &options)
    }

    fn verify(&mut self, producer_id: ProducerId, sequence: i32) -> VerificationGuard {
        self.producers
            .start_verification(
                producer_id,
                Sequence(sequence),
                ProducerEpoch(0),
                TimestampMs(5_000),
            )
            .unwrap()
    }

    /// A `read_committed` fetch from `fetch_offset` of the whole segment:
    /// the aborted transactions the response carries.
    fn aborted_for_fetch(&self, fetch_offset: Offset, upper_bound: Offset) -> Vec<AbortedTxn> {
        let start = self
            .segments
            .iter()
            .rposition(|(index, _)| index.base_offset() <= fetch_offset)
            .unwrap();
        let indexes = self.segments[start..].iter().map(|(index, _)| index);
        collect_aborted_transactions(indexes, fetch_offset, upper_bound)
    }
}

#[test]
fn a_partition_through_transactions_restart_and_fetch() {
    let mut partition = Partition::new();

    // A transaction needs the coordinator's verification to start here.
    let unverified =
        partition.produce(Partition::data(P1, 0, 3, true), VerificationGuard::SENTINEL);
    assert_eq!(unverified, Err(ErrorCode::INVALID_TXN_STATE));
    let guard = partition.verify(P1, 0);
    assert_eq!(
        partition.produce(Partition::data(P1, 0, 3, true), guard),
        Ok(Offset(0))
    ); // 0..=2
    let guard = partition.verify(P2, 0);
    assert_eq!(
        partition.produce(Partition::data(P2, 0, 2, true), guard),
        Ok(Offset(3))
    ); // 3..=4
    let plain = VerificationGuard::SENTINEL;
    assert_eq!(
        partition.produce(Partition::data(P3, 0, 2, false), plain),
        Ok(Offset(5))
    ); // 5..=6
    // A retry of P1's batch is answered with its offsets, nothing appended.
    assert_eq!(
        partition.produce(Partition::data(P1, 0, 3, true), plain),
        Ok(Offset(0))
    );
    assert_eq!(partition.producers.first_unstable_offset(), Some(Offset(0)));

    // P1 aborts at 7; P2 is still open from 3, so the index entry's LSO is 3.
    assert_eq!(
        partition.write_marker(P1, 0, MarkerKind::Abort),
        Ok(Offset(7))
    );
    assert_eq!(
        partition.segments[0].0.entries(),
        [AbortedTxn {
            producer_id: P1,
            first_offset: Offset(0),
            last_offset: Offset(7),
            last_stable_offset: Offset(3),
        }]
    );
    partition.producers.on_high_watermark_updated(Offset(8));
    assert_eq!(
        partition.producers.last_stable_offset(Offset(0), Offset(8)),
        Offset(3)
    );

    // A snapshot with P2's transaction open, as at a segment roll.
    let snapshot = partition.producers.take_snapshot().encode().unwrap();
    partition.roll();
    assert_eq!(
        partition.produce(Partition::data(P2, 2, 4, true), plain),
        Ok(Offset(8))
    ); // 8..=11
    assert_eq!(
        partition.write_marker(P2, 0, MarkerKind::Commit),
        Ok(Offset(12))
    );
    let guard = partition.verify(P1, 3);
    assert_eq!(
        partition.produce(Partition::data(P1, 3, 2, true), guard),
        Ok(Offset(13))
    ); // 13..=14
    assert_eq!(
        partition.write_marker(P1, 0, MarkerKind::Abort),
        Ok(Offset(15))
    );
    // A zombie coordinator's marker is fenced.
    let fenced = partition.producers.clone();
    let old = TxnMarker {
        producer_id: P1,
        producer_epoch: ProducerEpoch(0),
        marker: EndTxnMarker {
            kind: MarkerKind::Abort,
            coordinator_epoch: 3,
        },
        timestamp: TimestampMs(0),
    };
    let refused = fenced.check_marker(&old, TransactionVersion::LEGACY);
    assert_eq!(
        refused.map_err(|error| error.error_code()).err(),
        Some(ErrorCode::TRANSACTION_COORDINATOR_FENCED)
    );

    // P2's transaction (from 3) is committed at 12, but until the high
    // watermark passes the marker it still holds the LSO at 3.
    partition.producers.on_high_watermark_updated(Offset(12));
    assert_eq!(
        partition
            .producers
            .last_stable_offset(Offset(0), Offset(12)),
        Offset(3)
    );
    partition.producers.on_high_watermark_updated(Offset(13));
    assert_eq!(
        partition
            .producers
            .last_stable_offset(Offset(0), Offset(13)),
        Offset(13)
    );
    partition.producers.on_high_watermark_updated(Offset(16));
    assert_eq!(
        partition
            .producers
            .last_stable_offset(Offset(0), Offset(16)),
        Offset(16)
    );
    let expected_second_index = partition.segments[1].0.clone();
    assert_eq!(expected_second_index.entries().len(), 1);
    assert_eq!(
        expected_second_index.entries()[0].last_stable_offset,
        Offset(16)
    );

    // read_committed fetches: the aborted transactions overlapping each range.
    let producers = |found: Vec<AbortedTxn>| -> Vec<(i64, i64)> {
        found
            .iter()
            .map(|entry| (entry.producer_id.0, entry.first_offset.0))
            .collect()
    };
    let upper = fetch_upper_bound_offset(None, Some(Offset(8)), Offset(16));
    assert_eq!(
        producers(partition.aborted_for_fetch(Offset(0), upper)),
        [(P1.0, 0)]
    );
    assert_eq!(
        producers(partition.aborted_for_fetch(Offset(5), upper)),
        [(P1.0, 0)]
    );
    assert_eq!(
        producers(partition.aborted_for_fetch(Offset(8), Offset(12))),
        []
    );
    let to_end = fetch_upper_bound_offset(None, None, Offset(16));
    assert_eq!(
        producers(partition.aborted_for_fetch(Offset(8), to_end)),
        [(P1.0, 13)]
    );
    assert_eq!(
        producers(partition.aborted_for_fetch(Offset(0), to_end)),
        [(P1.0, 0), (P1.0, 13)]
    );

    // Restart: load the snapshot taken at 8 and recover the active segment,
    // rebuilding its index from the replayed markers.
    let decoded = ProducerSnapshot::decode(Offset(8), &snapshot).unwrap();
    let mut restarted = ProducerStateManager::new(ProducerStateConfig::default());
    let rebuild =
        restarted.truncate_and_reload(Offset(0), Offset(16), TimestampMs(10_000), Some(decoded));
    assert_eq!(rebuild, Rebuild::ReplayFrom(Offset(8)));
    assert_eq!(restarted.first_unstable_offset(), Some(Offset(3)));
    let mut rebuilt_index = TransactionIndex::new(Offset(8));
    for bytes in &partition.segments[1].1 {
        let batch = BatchView::parse_exact(bytes).unwrap();
        match ProducerOfBatch::read(batch.header()) {
            ProducerOfBatch::Data(data) => restarted.replay_batch(&data, batch.base_offset()),
            ProducerOfBatch::ControlMarker { .. } => {
                let marker = TxnMarker::read(&batch).unwrap().unwrap();
                let completed = restarted.replay_marker(&marker, batch.base_offset());
                if let Some(aborted) =
                    completed.and_then(|completed| restarted.complete_txn(completed))
                {
                    rebuilt_index.append(aborted).unwrap();
                }
            }
            ProducerOfBatch::None => {}
        }
    }
    restarted.finish_rebuild(Offset(16));
    restarted.assert_transaction_invariants();
    assert_eq!(rebuilt_index, expected_second_index);
    restarted.on_high_watermark_updated(Offset(16));
    assert_eq!(
        restarted.last_stable_offset(Offset(0), Offset(16)),
        Offset(16)
    );
    assert_eq!(restarted.ongoing_transactions().count(), 0);
    assert_eq!(
        restarted.entry(P2).map(|entry| entry.last_timestamp()),
        Some(TimestampMs(9_000))
    );
}
