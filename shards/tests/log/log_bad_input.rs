//! Acceptance 6 of the storage engine: a batch with a wrong CRC, a wrong
//! magic, a length that does not match, or offsets that do not fit is a typed
//! error, and the log is left exactly as it was.

use brook_engine::log::batch::{BatchError, OFFSET_MAX};
use brook_engine::log::config::LogConfig;
use brook_engine::types::{LeaderEpoch, Offset};
use brook_shards::runtime::block_on;
use brook_shards::storage::{PartitionLog, RecoveryHints, StorageError};

use crate::common::*;

/// Which error a malformed append must produce.
type ErrorCheck = fn(&StorageError) -> bool;

/// Recomputes the CRC of a batch whose covered bytes were edited.
fn reseal(bytes: &mut [u8]) {
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
}

async fn snapshot(log: &PartitionLog) -> (Offset, Vec<u8>) {
    log.flush().await.unwrap();
    (
        log.log_end_offset(),
        read_all(log, log.log_start_offset(), 1 << 20, false)
            .await
            .unwrap(),
    )
}

#[test]
fn malformed_batches_are_rejected_and_leave_the_log_unchanged() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("bad-0");
    block_on(async move {
        let log = open(&dir, LogConfig::default(), crashed()).await;
        log.append(&batch(2, 10, 1), EPOCH, now_ms()).await.unwrap();
        let before = snapshot(&log).await;
        let good = batch(3, 20, 2);

        let mut crc = good.clone();
        *crc.last_mut().unwrap() ^= 1;
        let mut magic = good.clone();
        magic[16] = 1;
        let longer = good[..good.len() - 1].to_vec();
        let mut trailing = good.clone();
        trailing.extend_from_slice(&[0, 0, 0, 0, 0]);
        let mut good_then_garbage = good.clone();
        good_then_garbage.extend_from_slice(&good[..30]);
        let mut tiny_length = good.clone();
        tiny_length[8..12].copy_from_slice(&20i32.to_be_bytes());
        let mut miscounted = good.clone();
        miscounted[23..27].copy_from_slice(&7i32.to_be_bytes());
        reseal(&mut miscounted);
        let mut negative_delta = good.clone();
        negative_delta[23..27].copy_from_slice(&(-1i32).to_be_bytes());
        negative_delta[57..61].copy_from_slice(&0i32.to_be_bytes());
        reseal(&mut negative_delta);

        let cases: Vec<(&str, Vec<u8>, ErrorCheck)> = vec![
            ("wrong CRC", crc, |e| {
                matches!(
                    e,
                    StorageError::InvalidBatch(BatchError::CrcMismatch { .. })
                )
            }),
            ("wrong magic", magic, |e| {
                matches!(
                    e,
                    StorageError::InvalidBatch(BatchError::UnsupportedMagic(1))
                )
            }),
            ("length longer than the bytes", longer, |e| {
                matches!(e, StorageError::InvalidBatch(BatchError::Truncated { .. }))
            }),
            ("bytes after the batch", trailing, |e| {
                matches!(e, StorageError::InvalidBatch(_))
            }),
            ("a valid batch then a torn one", good_then_garbage, |e| {
                matches!(e, StorageError::InvalidBatch(BatchError::Truncated { .. }))
            }),
            ("length below a header", tiny_length, |e| {
                matches!(
                    e,
                    StorageError::InvalidBatch(BatchError::LengthOutOfBounds { .. })
                )
            }),
            ("record count disagrees with offsets", miscounted, |e| {
                matches!(
                    e,
                    StorageError::InvalidBatch(BatchError::RecordCountMismatch { .. })
                )
            }),
            ("negative offset delta", negative_delta, |e| {
                matches!(
                    e,
                    StorageError::InvalidBatch(BatchError::RecordCountMismatch { .. })
                )
            }),
            ("nothing at all", Vec::new(), |e| {
                matches!(e, StorageError::EmptyAppend)
            }),
        ];
        for (name, bytes, expected) in cases {
            let error = log.append(&bytes, EPOCH, now_ms()).await.expect_err(name);
            assert!(expected(&error), "{name}: got {error:?}");
            assert_eq!(snapshot(&log).await, before, "{name}: the log changed");
        }
        log.close().await.unwrap();
        let log = open(&dir, LogConfig::default(), crashed()).await;
        assert_eq!(snapshot(&log).await, before, "nothing reached the disk");
        log.close().await.unwrap();
    });
}

#[test]
fn oversized_batches_and_stale_epochs_are_rejected() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("limits-0");
    block_on(async move {
        let log = open(
            &dir,
            LogConfig {
                max_message_bytes: 1000,
                ..LogConfig::default()
            },
            crashed(),
        )
        .await;
        log.append(&batch(1, 10, 1), LeaderEpoch(5), now_ms())
            .await
            .unwrap();
        let before = snapshot(&log).await;
        let error = log
            .append(&batch(1, 2000, 1), LeaderEpoch(5), now_ms())
            .await
            .unwrap_err();
        assert!(
            matches!(error, StorageError::BatchTooLarge { max: 1000, .. }),
            "{error:?}"
        );
        let error = log
            .append(&batch(1, 10, 1), LeaderEpoch(4), now_ms())
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                StorageError::StaleLeaderEpoch {
                    epoch: LeaderEpoch(4),
                    latest: LeaderEpoch(5)
                }
            ),
            "{error:?}"
        );
        assert_eq!(snapshot(&log).await, before);
        log.close().await.unwrap();
    });
}

#[test]
fn offsets_past_the_largest_offset_do_not_fit() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("overflow-0");
    block_on(async move {
        let start = Offset(OFFSET_MAX - 2);
        let hints = RecoveryHints {
            log_start_offset: Some(start),
            ..RecoveryHints::default()
        };
        let log = PartitionLog::open(&dir, LogConfig::default(), hints, now_ms())
            .await
            .unwrap();
        assert_eq!(log.log_end_offset(), start);
        let error = log
            .append(&batch(4, 1, 1), EPOCH, now_ms())
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                StorageError::InvalidBatch(BatchError::OffsetOverflow { .. })
            ),
            "{error:?}"
        );
        assert_eq!(log.log_end_offset(), start);
        let info = log.append(&batch(3, 1, 1), EPOCH, now_ms()).await.unwrap();
        assert_eq!(info.last_offset, Offset(OFFSET_MAX));
        log.close().await.unwrap();
    });
}
