//! Retention (S7) deletes whole old segments by time, by size, and below the
//! log start offset, never at or past the high watermark; the store's
//! checkpoints and clean-shutdown marker are Kafka-format files.

use brook_engine::log::config::{FlushPolicy, LogConfig};
use brook_engine::types::{Offset, TimestampMs, TopicPartition};
use brook_shards::runtime::block_on;
use std::rc::Rc;
use std::time::{Duration, Instant};

use brook_shards::storage::{MaintenanceSchedule, StorageError, Store, StoreOptions};

use crate::common::*;

const HOUR_MS: i64 = 3_600_000;

#[test]
fn time_retention_deletes_only_expired_segments() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("time-0");
    block_on(async move {
        let config = LogConfig {
            segment_bytes: 4096,
            retention_ms: Some(HOUR_MS),
            ..LogConfig::default()
        };
        let log = open(&dir, config, crashed()).await;
        let now = now_ms();
        for i in 0..30 {
            log.append(&batch(2, 400, now - 2 * HOUR_MS + i), EPOCH, now)
                .await
                .unwrap();
        }
        let fresh_from = log.log_end_offset();
        for i in 0..30 {
            log.append(&batch(2, 400, now + i), EPOCH, now)
                .await
                .unwrap();
        }
        commit(&log).await;
        let bases = segment_bases(&dir);
        let deleted = log
            .apply_retention(log.log_end_offset(), now)
            .await
            .unwrap();
        let kept = segment_bases(&dir);
        assert!(
            deleted > 0 && kept.len() + deleted == bases.len(),
            "deleted {deleted} of {bases:?}"
        );
        assert!(kept[0] <= fresh_from, "no fresh record was deleted");
        assert_eq!(log.log_start_offset(), kept[0]);
        let error = log.read(Offset(0), read_options(100)).await.unwrap_err();
        assert!(
            matches!(error, StorageError::OffsetOutOfRange { .. }),
            "{error:?}"
        );
        assert!(
            !read_all(&log, kept[0], 1 << 20, false)
                .await
                .unwrap()
                .is_empty()
        );
        log.close().await.unwrap();
        let log = open(&dir, LogConfig::default(), crashed()).await;
        assert_eq!(
            log.log_start_offset(),
            kept[0],
            "a reopened log starts at its first segment"
        );
        log.close().await.unwrap();
    });
}

#[test]
fn size_retention_and_the_high_watermark() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("size-0");
    block_on(async move {
        let config = LogConfig {
            segment_bytes: 4096,
            retention_bytes: Some(10_000),
            retention_ms: None,
            ..LogConfig::default()
        };
        let log = open(&dir, config, crashed()).await;
        for i in 0..100 {
            log.append(&batch(1, 500, i), EPOCH, now_ms())
                .await
                .unwrap();
        }
        commit(&log).await;
        let before = segment_bases(&dir);
        assert_eq!(
            log.apply_retention(Offset(0), now_ms()).await.unwrap(),
            0,
            "nothing below a high watermark of 0"
        );
        let deleted = log
            .apply_retention(log.log_end_offset(), now_ms())
            .await
            .unwrap();
        let total = log.size_bytes();
        // Kafka stops before the deletion that would take the log under the limit.
        assert!(
            deleted > 0 && (10_000..=10_000 + 4096).contains(&total),
            "{deleted} of {} segments deleted, {total} bytes left",
            before.len()
        );
        assert_eq!(segment_bases(&dir).len(), before.len() - deleted);
        log.close().await.unwrap();
    });
}

#[test]
fn when_everything_expires_a_fresh_segment_takes_over() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("all-0");
    block_on(async move {
        let config = LogConfig {
            segment_bytes: 4096,
            retention_ms: Some(HOUR_MS),
            ..LogConfig::default()
        };
        let log = open(&dir, config, crashed()).await;
        let old = now_ms() - 3 * HOUR_MS;
        for i in 0..20 {
            log.append(&batch(2, 400, old + i), EPOCH, now_ms())
                .await
                .unwrap();
        }
        commit(&log).await;
        let end = log.log_end_offset();
        log.apply_retention(end, now_ms()).await.unwrap();
        commit(&log).await;
        // The rolled segment is deleted once sealed (by the next pass at the latest).
        for _ in 0..100 {
            log.apply_retention(end, now_ms()).await.unwrap();
            if segment_bases(&dir) == vec![end] {
                break;
            }
            glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(segment_bases(&dir), vec![end]);
        assert_eq!(log.log_start_offset(), end);
        assert!(
            log.read(end, read_options(100))
                .await
                .unwrap()
                .data
                .is_empty()
        );
        let info = log
            .append(&batch(1, 10, now_ms()), EPOCH, now_ms())
            .await
            .unwrap();
        assert_eq!(info.base_offset, end);
        log.close().await.unwrap();
    });
}

#[test]
fn a_store_checkpoints_in_kafkas_format_and_marks_a_clean_shutdown() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    block_on(async move {
        let (options, store) = open_store(&root, 3).await;
        let orders = TopicPartition::new("orders", 0);
        assert!(!store.was_clean());
        let log = store
            .open_partition(&orders, LogConfig::default(), now_ms())
            .await
            .unwrap();
        log.append(&batch(4, 10, 1), EPOCH, now_ms()).await.unwrap();
        store.close().await.unwrap();
        assert!(root.join(".brook_cleanshutdown-3").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("recovery-point-offset-checkpoint-3")).unwrap(),
            "0\n1\norders 0 4\n"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("log-start-offset-checkpoint-3")).unwrap(),
            "0\n1\norders 0 0\n"
        );

        let store = Store::open(options.clone()).await.unwrap();
        assert!(store.was_clean());
        assert!(
            !root.join(".brook_cleanshutdown-3").exists(),
            "the marker is consumed on open"
        );
        let log = store
            .open_partition(&orders, LogConfig::default(), now_ms())
            .await
            .unwrap();
        assert_eq!(log.log_end_offset(), Offset(4));
        log.append(&batch(1, 10, 2), EPOCH, now_ms()).await.unwrap();
        commit(&log).await;
        drop(store);

        let store = Store::open(options).await.unwrap();
        assert!(!store.was_clean(), "no close, no marker");
        let log = store
            .open_partition(&orders, LogConfig::default(), now_ms())
            .await
            .unwrap();
        assert_eq!(log.log_end_offset(), Offset(5));
        store.close().await.unwrap();
    });
}

#[test]
fn shard_maintenance_applies_retention_and_checkpoints_in_the_background() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    block_on(async move {
        let store = Rc::new(
            Store::open(StoreOptions::in_dir(root.clone(), 0).unwrap())
                .await
                .unwrap(),
        );
        let config = LogConfig {
            segment_bytes: 4096,
            retention_ms: Some(HOUR_MS),
            ..LogConfig::default()
        };
        let tp = TopicPartition::new("expiring", 0);
        let log = store.open_partition(&tp, config, now_ms()).await.unwrap();
        for i in 0..20 {
            log.append(&batch(2, 400, now_ms() - 2 * HOUR_MS + i), EPOCH, now_ms())
                .await
                .unwrap();
        }
        commit(&log).await;
        let schedule = MaintenanceSchedule {
            retention_check_interval: Duration::from_millis(20),
            checkpoint_interval: Duration::from_millis(20),
            idle_release_interval: Duration::from_millis(20),
            cleaner: None,
            ..MaintenanceSchedule::default()
        };
        store.start_maintenance(schedule);
        let deadline = Instant::now() + Duration::from_secs(10);
        while log.log_start_offset() < log.log_end_offset() && Instant::now() < deadline {
            glommio::timer::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            log.log_start_offset(),
            log.log_end_offset(),
            "every expired segment was deleted"
        );
        let checkpoint = root.join("log-start-offset-checkpoint-0");
        let expected = format!("0\n1\nexpiring 0 {}\n", log.log_end_offset());
        while std::fs::read_to_string(&checkpoint).ok().as_deref() != Some(expected.as_str())
            && Instant::now() < deadline
        {
            glommio::timer::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(std::fs::read_to_string(&checkpoint).unwrap(), expected);
        store.close().await.unwrap();
    });
}

/// A partition deleted and created again in the same process starts afresh:
/// the checkpointed log start of the old one (read at start-up) is not
/// applied to the new one.
#[test]
fn a_recreated_partition_starts_at_offset_zero() {
    let temporary = tempfile::tempdir().unwrap();
    let root = temporary.path().to_owned();
    block_on(async move {
        let topic_partition = TopicPartition::new("t", 0);
        let config = small_segments(1500);
        let options = || StoreOptions::in_dir(root.clone(), 0).unwrap();
        {
            let store = Store::open(options()).await.unwrap();
            let log = store
                .open_partition(&topic_partition, config.clone(), now_ms())
                .await
                .unwrap();
            for i in 0..40 {
                let bytes = batch(3, 40, 1_700_000_000_000 + i * 10);
                log.append(&bytes, EPOCH, now_ms()).await.unwrap();
            }
            commit(&log).await;
            log.delete_records_before(Offset(60)).unwrap();
            store.close().await.unwrap();
        }
        let store = Store::open(options()).await.unwrap();
        let log = store
            .open_partition(&topic_partition, config.clone(), now_ms())
            .await
            .unwrap();
        assert_eq!(log.log_start_offset(), Offset(60));
        store.remove_partition(&topic_partition).unwrap();
        log.delete().await.unwrap();
        let log = store
            .open_partition(&topic_partition, config, now_ms())
            .await
            .unwrap();
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (Offset(0), Offset(0))
        );
        store.close().await.unwrap();
    });
}

/// A partition whose retention fails (here: closed under the store) is
/// skipped; the partitions after it still get their retention.
#[test]
fn retention_goes_on_past_a_failing_partition() {
    let temporary = tempfile::tempdir().unwrap();
    let root = temporary.path().to_owned();
    block_on(async move {
        let store = Store::open(StoreOptions::in_dir(root, 0).unwrap())
            .await
            .unwrap();
        let config = LogConfig {
            segment_bytes: 4096,
            retention_ms: Some(HOUR_MS),
            ..LogConfig::default()
        };
        // Partitions are visited in name order: the failing one comes first.
        let failing = TopicPartition::new("a-failing", 0);
        let expiring = TopicPartition::new("b-expiring", 0);
        let mut logs = Vec::new();
        for topic_partition in [&failing, &expiring] {
            let log = store
                .open_partition(topic_partition, config.clone(), now_ms())
                .await
                .unwrap();
            for i in 0..20 {
                log.append(&batch(2, 400, now_ms() - 2 * HOUR_MS + i), EPOCH, now_ms())
                    .await
                    .unwrap();
            }
            commit(&log).await;
            logs.push(log);
        }
        logs[0].close().await.unwrap();
        let deleted = store.apply_retention(now_ms()).await;
        assert!(deleted > 0, "the second partition's segments were deleted");
        assert!(logs[1].log_start_offset() > Offset(0));
        store.remove_partition(&failing);
        store.close().await.unwrap();
    });
}

/// A lookup by timestamp that waits on IO while retention deletes segments
/// before the one it is in still visits every later segment: it walks
/// segments by base offset, not by a slot that the deletion shifted.
#[test]
fn a_timestamp_lookup_survives_retention_running_meanwhile() {
    const LOW: i64 = 1_700_000_000_000;
    const HIGH: i64 = LOW + 1_000_000;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("lookup-0");
    block_on(async move {
        let batch_bytes = batch(2, 400, LOW).len() as u64;
        let config = LogConfig {
            segment_bytes: 4 * batch_bytes,
            retention_ms: None,
            ..LogConfig::default()
        };
        let log = open(&dir, config, crashed()).await;
        // Four batches of two records per segment. The first batch of the
        // third segment and the second of the fifth reach HIGH.
        for i in 0..28 {
            let timestamp = match i {
                8 => HIGH,
                17 => HIGH + 5,
                _ => LOW + i,
            };
            log.append(&batch(2, 400, timestamp), EPOCH, now_ms())
                .await
                .unwrap();
        }
        commit(&log).await;
        let bases = segment_bases(&dir);
        assert_eq!(bases.len(), 7, "{bases:?}");
        // The log start passes the first HIGH record: the lookup finds the
        // third segment first, finds nothing it may return there, and must
        // go on to the fifth.
        log.delete_records_before(Offset(18)).unwrap();
        let expected = Offset(34);
        let found = log.offset_for_timestamp(TimestampMs(HIGH)).await.unwrap();
        assert_eq!(found.map(|stamp| stamp.offset), Some(expected));

        let lookup = {
            let log = log.clone();
            glommio::spawn_local(async move { log.offset_for_timestamp(TimestampMs(HIGH)).await })
        };
        // Let the lookup start and wait on its first read in the third segment.
        glommio::executor().yield_now().await;
        let deleted = log
            .apply_retention(log.log_end_offset(), now_ms())
            .await
            .unwrap();
        assert_eq!(deleted, 2, "the two segments below the log start");
        let found = lookup.await.unwrap();
        assert_eq!(found.map(|stamp| stamp.offset), Some(expected));
        log.close().await.unwrap();
    });
}

/// Each checkpoint round syncs what the logs appended first, so the recovery
/// point checkpointed covers it: after a crash, recovery rescans at most one
/// interval's writes instead of whole active segments.
#[test]
fn checkpoints_sync_the_logs_so_recovery_points_keep_up() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    block_on(async move {
        let store = Rc::new(
            Store::open(StoreOptions::in_dir(root.clone(), 0).unwrap())
                .await
                .unwrap(),
        );
        // Kafka's default flush policy: the log itself never asks for a sync.
        let config = LogConfig {
            flush: FlushPolicy::Interval {
                messages: None,
                ms: None,
            },
            ..LogConfig::default()
        };
        let tp = TopicPartition::new("unsynced", 0);
        let log = store.open_partition(&tp, config, now_ms()).await.unwrap();
        for i in 0..10 {
            log.append(&batch(3, 100, i), EPOCH, now_ms())
                .await
                .unwrap();
        }
        assert_eq!(log.recovery_point(), Offset(0), "nothing synced yet");
        store.start_maintenance(MaintenanceSchedule {
            retention_check_interval: Duration::from_secs(3600),
            checkpoint_interval: Duration::from_millis(20),
            idle_release_interval: Duration::from_secs(3600),
            cleaner: None,
            ..MaintenanceSchedule::default()
        });
        let checkpoint = root.join("recovery-point-offset-checkpoint-0");
        let expected = format!("0\n1\nunsynced 0 {}\n", log.log_end_offset());
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(&checkpoint).ok().as_deref() != Some(expected.as_str())
            && Instant::now() < deadline
        {
            glommio::timer::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(std::fs::read_to_string(&checkpoint).unwrap(), expected);
        assert_eq!(log.durable_offset(), log.log_end_offset());
        store.close().await.unwrap();
    });
}
