//! Producer state in the partition log: expiry, snapshots and the
//! aborted-transaction index, at the storage level (the broker-level
//! behaviour is in tests/tests/e2e/idempotent_producer.rs and transactions*.rs).

use brook_engine::log::config::LogConfig;
use brook_engine::log::control::MarkerKind;
use brook_engine::replica::producer_state::ProducerEpoch;
use brook_engine::types::{Offset, ProducerId};
use brook_shards::runtime::block_on;

use crate::common::*;

const DAY_MS: i64 = 86_400_000;

fn producer_batch(producer_id: i64, sequence: i32, timestamp: i64, transactional: bool) -> Vec<u8> {
    producer_records(producer_id, sequence, 1, timestamp, transactional)
}

#[test]
fn producers_idle_past_the_expiration_are_forgotten() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("expiry-0");
    block_on(async move {
        let log = open(&dir, LogConfig::default(), crashed()).await;
        let now = now_ms();
        let stale = producer_batch(7, 0, now - 2 * DAY_MS, false);
        let fresh = producer_batch(8, 0, now, false);
        assert_eq!(
            log.append(&stale, EPOCH, now).await.unwrap().base_offset,
            Offset(0)
        );
        assert_eq!(
            log.append(&fresh, EPOCH, now).await.unwrap().base_offset,
            Offset(1)
        );
        let retry = log.append(&stale, EPOCH, now).await.unwrap();
        assert!(retry.duplicate, "known: a retry is a duplicate");
        assert_eq!(
            log.remove_expired_producers(now),
            1,
            "only the stale producer"
        );
        // Forgotten: its retry is now taken as a new batch (KIP-360 lets an
        // unknown producer start anywhere), the fresh one is still known.
        let again = log.append(&stale, EPOCH, now).await.unwrap();
        assert!(!again.duplicate);
        assert_eq!(again.base_offset, Offset(2));
        assert!(log.append(&fresh, EPOCH, now).await.unwrap().duplicate);
        log.close().await.unwrap();
    });
}

#[test]
fn an_abort_marker_indexes_the_transaction_and_a_commit_does_not() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("markers-0");
    block_on(async move {
        let log = open(&dir, LogConfig::default(), crashed()).await;
        let now = now_ms();
        let epoch = ProducerEpoch(0);
        log.append(&producer_batch(1, 0, now, true), EPOCH, now)
            .await
            .unwrap();
        log.append(&producer_batch(2, 0, now, true), EPOCH, now)
            .await
            .unwrap();
        assert_eq!(
            log.last_stable_offset(Offset(2)),
            Offset(0),
            "two open transactions"
        );
        let abort = log
            .append_marker(ProducerId(1), epoch, 0, MarkerKind::Abort, EPOCH, now)
            .await
            .unwrap();
        assert_eq!(abort.base_offset, Offset(2));
        assert_eq!(
            log.last_stable_offset(Offset(3)),
            Offset(1),
            "producer 2 still open at 1"
        );
        log.append_marker(ProducerId(2), epoch, 0, MarkerKind::Commit, EPOCH, now)
            .await
            .unwrap();
        assert_eq!(log.last_stable_offset(Offset(4)), Offset(4));
        assert_eq!(
            log.aborted_transactions(Offset(0), Offset(4)),
            vec![(ProducerId(1), Offset(0))]
        );
        assert_eq!(log.aborted_transactions(Offset(3), Offset(4)), Vec::new());
        let index = std::fs::read(dir.join("00000000000000000000.txnindex")).unwrap();
        assert_eq!(
            index.len(),
            34,
            "one aborted transaction in Kafka's entry format"
        );
        // A marker from an older producer epoch is refused.
        let stale = log
            .append_marker(
                ProducerId(1),
                ProducerEpoch(-1),
                0,
                MarkerKind::Abort,
                EPOCH,
                now,
            )
            .await;
        assert!(stale.is_err(), "{stale:?}");
        log.close().await.unwrap();
    });
}

#[test]
fn a_segment_roll_snapshots_the_producer_state_at_the_new_base() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("roll-0");
    block_on(async move {
        let log = open(&dir, small_segments(1024), crashed()).await;
        let now = now_ms();
        let mut sequence = 0;
        while segment_bases(&dir).len() < 2 {
            log.append(&producer_batch(3, sequence, now, false), EPOCH, now)
                .await
                .unwrap();
            sequence += 1;
        }
        let base = *segment_bases(&dir).last().unwrap();
        let snapshot = dir.join(format!("{:020}.snapshot", base.0));
        assert!(snapshot.exists(), "{} after the roll", snapshot.display());
        log.flush().await.unwrap();
        // A copy opened as after a crash with no checkpoint line: the
        // snapshot is loaded and only the batches after it are replayed;
        // the last batch is still known.
        let crashed_copy = root.path().join("roll-copy-0");
        copy_dir(&dir, &crashed_copy);
        let reopened = open(&crashed_copy, small_segments(1024), crashed()).await;
        let retry = producer_batch(3, sequence - 1, now, false);
        assert!(reopened.append(&retry, EPOCH, now).await.unwrap().duplicate);
        reopened.close().await.unwrap();
        log.close().await.unwrap();
    });
}
