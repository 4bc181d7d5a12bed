//! A follower's log at the storage level: batches appended as the leader
//! wrote them, and truncation at run time (the broker-level replication
//! tests are in tests/tests/e2e/replication*.rs).

use brook_engine::log::config::LogConfig;
use brook_engine::log::control::MarkerKind;
use brook_engine::replica::producer_state::ProducerEpoch;
use brook_engine::types::{LeaderEpoch, Offset, ProducerId};
use brook_shards::runtime::block_on;
use brook_shards::storage::{EPOCH_CHECKPOINT_FILE, LogCut, PartitionLog, StorageError};

use crate::common::*;

fn producer_batch(producer_id: i64, sequence: i32, records: usize, transactional: bool) -> Vec<u8> {
    producer_records(producer_id, sequence, records, 1_000, transactional)
}

/// A leader log with plain, idempotent and transactional batches, an
/// aborted transaction, two leader epochs and several segments. Returns the
/// log end offset.
async fn fill_leader(leader: &PartitionLog) -> Offset {
    let now = now_ms();
    let epoch_0 = LeaderEpoch(0);
    let epoch_2 = LeaderEpoch(2);
    for round in 0..6 {
        leader
            .append(&batch(5, 300, round), epoch_0, now)
            .await
            .unwrap();
    }
    leader
        .append(&producer_batch(7, 0, 3, false), epoch_0, now)
        .await
        .unwrap();
    leader
        .append(&producer_batch(8, 0, 2, true), epoch_0, now)
        .await
        .unwrap();
    leader
        .append_marker(
            ProducerId(8),
            ProducerEpoch(0),
            0,
            MarkerKind::Abort,
            epoch_0,
            now,
        )
        .await
        .unwrap();
    for round in 0..6 {
        leader
            .append(&batch(4, 300, 100 + round), epoch_2, now)
            .await
            .unwrap();
    }
    leader
        .append(&producer_batch(7, 3, 2, false), epoch_2, now)
        .await
        .unwrap();
    leader
        .append(&producer_batch(9, 0, 1, true), epoch_2, now)
        .await
        .unwrap();
    leader.flush().await.unwrap()
}

/// Copies the leader's log into the follower as a replica fetcher would:
/// reads of at most `max_bytes`, each appended whole.
async fn replicate(leader: &PartitionLog, follower: &PartitionLog, max_bytes: usize) {
    while follower.log_end_offset() < leader.log_end_offset() {
        let outcome = leader
            .read(follower.log_end_offset(), read_options(max_bytes))
            .await
            .unwrap();
        let bytes = materialize(&outcome.data);
        follower.append_as_follower(&bytes, now_ms()).await.unwrap();
    }
    follower.flush().await.unwrap();
}

fn small() -> LogConfig {
    small_segments(4 << 10)
}

#[test]
fn a_follower_holds_the_leaders_batches_byte_for_byte_with_its_epochs_and_producers() {
    let root = tempfile::tempdir().unwrap();
    block_on(async move {
        let leader = open(&root.path().join("leader-0"), small(), crashed()).await;
        let follower = open(&root.path().join("follower-0"), small(), crashed()).await;
        let end = fill_leader(&leader).await;
        replicate(&leader, &follower, 2_000).await;
        assert_eq!(follower.log_end_offset(), end);
        let leader_bytes = read_all(&leader, Offset(0), 1 << 20, false).await.unwrap();
        let follower_bytes = read_all(&follower, Offset(0), 1 << 20, false)
            .await
            .unwrap();
        assert_bytes_eq(&follower_bytes, &leader_bytes, "the follower's log");
        let checkpoint =
            |log: &PartitionLog| std::fs::read(log.dir().join(EPOCH_CHECKPOINT_FILE)).unwrap();
        assert_eq!(
            checkpoint(&follower),
            checkpoint(&leader),
            "leader-epoch-checkpoint"
        );
        assert_eq!(
            follower.epoch_end_offset(LeaderEpoch(0)),
            leader.epoch_end_offset(LeaderEpoch(0))
        );
        // The aborted transaction and the open one are known as on the leader.
        assert_eq!(
            follower.aborted_transactions(Offset(0), end),
            leader.aborted_transactions(Offset(0), end)
        );
        assert_eq!(
            follower.last_stable_offset(end),
            leader.last_stable_offset(end)
        );
        assert!(
            follower.last_stable_offset(end) < end,
            "producer 9's transaction is open"
        );
        // Made leader, the follower recognises producer 7's retry.
        let retry = follower
            .append(&producer_batch(7, 3, 2, false), LeaderEpoch(3), now_ms())
            .await
            .unwrap();
        assert!(retry.duplicate, "{retry:?}");
        follower.close().await.unwrap();
        leader.close().await.unwrap();
        // And a restart reads back what it wrote.
        let reopened = open(&root.path().join("follower-0"), small(), crashed()).await;
        let reread = read_all(&reopened, Offset(0), 1 << 20, false)
            .await
            .unwrap();
        assert_bytes_eq(&reread, &leader_bytes, "after a restart");
        reopened.close().await.unwrap();
    });
}

#[test]
fn a_replicated_append_that_does_not_follow_or_fails_its_crc_appends_nothing() {
    let root = tempfile::tempdir().unwrap();
    block_on(async move {
        let leader = open(
            &root.path().join("leader-0"),
            LogConfig::default(),
            crashed(),
        )
        .await;
        let follower = open(
            &root.path().join("follower-0"),
            LogConfig::default(),
            crashed(),
        )
        .await;
        for round in 0..3 {
            leader
                .append(&batch(2, 10, round), LeaderEpoch(1), now_ms())
                .await
                .unwrap();
        }
        leader.flush().await.unwrap();
        let read = |offset: i64| {
            let leader = leader.clone();
            async move {
                materialize(
                    &leader
                        .read(Offset(offset), read_options(1))
                        .await
                        .unwrap()
                        .data,
                )
            }
        };
        let second = read(2).await;
        match follower.append_as_follower(&second, now_ms()).await {
            Err(StorageError::UnexpectedAppendOffset { first, expected }) => {
                assert_eq!((first, expected), (Offset(2), Offset(0)));
            }
            other => panic!("a gap in a log with contiguous offsets: {other:?}"),
        }
        let mut damaged = read(0).await;
        let last = damaged.len() - 1;
        damaged[last] ^= 0xff;
        assert!(matches!(
            follower.append_as_follower(&damaged, now_ms()).await,
            Err(StorageError::InvalidBatch(_))
        ));
        assert_eq!(follower.log_end_offset(), Offset(0), "nothing appended");
        follower
            .append_as_follower(&read(0).await, now_ms())
            .await
            .unwrap();
        // A batch of an older epoch than the follower already has.
        let mut older = second.clone();
        older[12..16].copy_from_slice(&0i32.to_be_bytes());
        // The partition leader epoch is outside the CRC: no new one needed.
        assert!(matches!(
            follower.append_as_follower(&older, now_ms()).await,
            Err(StorageError::StaleLeaderEpoch { .. })
        ));
        assert_eq!(follower.log_end_offset(), Offset(2));
        follower.close().await.unwrap();
        leader.close().await.unwrap();
    });
}

#[test]
fn truncation_drops_the_suffix_from_every_file_and_the_log_goes_on() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("follower-0");
    block_on(async move {
        let leader = open(&root.path().join("leader-0"), small(), crashed()).await;
        let follower = open(&dir, small(), crashed()).await;
        let end = fill_leader(&leader).await;
        replicate(&leader, &follower, 3_000).await;
        let segments_before = segment_bases(&dir).len();
        // Offset 31 is inside producer 7's first batch (30..33): the batch
        // goes whole. Everything of epoch 2, the abort and producer 8 go.
        let truncated = follower
            .truncate(LogCut::To(Offset(31)), now_ms())
            .await
            .unwrap();
        assert!(
            follower.read(Offset(0), read_options(100)).await.is_err(),
            "the old handle is closed"
        );
        assert_eq!(truncated.log_end_offset(), Offset(30));
        assert!(segment_bases(&dir).len() < segments_before);
        assert_eq!(truncated.latest_epoch(), Some(LeaderEpoch(0)));
        assert_eq!(truncated.aborted_transactions(Offset(0), end), Vec::new());
        let prefix = read_all(&leader, Offset(0), 1 << 20, false).await.unwrap();
        let kept = read_all(&truncated, Offset(0), 1 << 20, false)
            .await
            .unwrap();
        assert_bytes_eq(&kept, &prefix[..kept.len()], "the kept prefix");
        // Producer 7's batch is gone, so a new leader would take it as new.
        // Instead it fetches it again, and everything after, from the leader.
        replicate(&leader, &truncated, 3_000).await;
        let again = read_all(&truncated, Offset(0), 1 << 20, false)
            .await
            .unwrap();
        assert_bytes_eq(&again, &prefix, "refetched");
        assert_eq!(
            truncated.aborted_transactions(Offset(0), end),
            leader.aborted_transactions(Offset(0), end)
        );
        // A crash right after keeps it all.
        let files_before_crash = std::fs::read(dir.join(EPOCH_CHECKPOINT_FILE)).unwrap();
        truncated.flush().await.unwrap();
        drop(truncated);
        let after_crash = open(&dir, small(), crashed()).await;
        assert_eq!(after_crash.log_end_offset(), end);
        assert_eq!(
            std::fs::read(dir.join(EPOCH_CHECKPOINT_FILE)).unwrap(),
            files_before_crash
        );
        after_crash.close().await.unwrap();
        leader.close().await.unwrap();
    });
}

#[test]
fn a_log_emptied_to_start_at_the_leaders_start_takes_batches_from_there() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("follower-0");
    block_on(async move {
        let follower = open(&dir, LogConfig::default(), crashed()).await;
        follower
            .append(&batch(3, 10, 0), LeaderEpoch(0), now_ms())
            .await
            .unwrap();
        let restarted = follower
            .truncate(LogCut::FullyAndStartAt(Offset(100)), now_ms())
            .await
            .unwrap();
        assert_eq!(restarted.log_start_offset(), Offset(100));
        assert_eq!(restarted.log_end_offset(), Offset(100));
        assert_eq!(segment_bases(&dir), vec![Offset(100)]);
        assert_eq!(
            restarted.latest_epoch(),
            None,
            "the epochs went with the batches"
        );
        let mut placed_at_100 = batch(2, 10, 5);
        placed_at_100[0..8].copy_from_slice(&100i64.to_be_bytes());
        placed_at_100[12..16].copy_from_slice(&4i32.to_be_bytes());
        restarted
            .append_as_follower(&placed_at_100, now_ms())
            .await
            .unwrap();
        assert_eq!(restarted.log_end_offset(), Offset(102));
        assert_eq!(
            restarted.epoch_end_offset(LeaderEpoch(4)),
            Some((LeaderEpoch(4), Offset(102)))
        );
        restarted.close().await.unwrap();
    });
}

/// A leader that recorded its epoch and appended nothing of it before
/// another was elected holds an epoch no other replica has. The leader's
/// DivergingEpoch answer then points at its own log end; that truncation
/// cuts no batch but drops the empty epoch (Kafka's `truncateTo` past the
/// end), on disk too, or every fetch would diverge again.
#[test]
fn truncating_at_the_end_drops_an_epoch_that_holds_no_batch() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("follower-0");
    block_on(async move {
        let log = open(&dir, LogConfig::default(), crashed()).await;
        log.append(&batch(3, 10, 0), LeaderEpoch(0), now_ms())
            .await
            .unwrap();
        log.become_leader(LeaderEpoch(2)).await.unwrap();
        assert_eq!(log.latest_epoch(), Some(LeaderEpoch(2)));
        let end = log.log_end_offset();
        let truncated = log.truncate(LogCut::To(end), now_ms()).await.unwrap();
        assert_eq!(truncated.log_end_offset(), end);
        assert_eq!(truncated.latest_epoch(), Some(LeaderEpoch(0)));
        truncated.flush().await.unwrap();
        drop(truncated);
        let reopened = open(&dir, LogConfig::default(), crashed()).await;
        assert_eq!(reopened.latest_epoch(), Some(LeaderEpoch(0)));
        reopened.close().await.unwrap();
    });
}
