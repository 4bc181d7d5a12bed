//! Closing a partition log ends everything that depends on it: waits for
//! offsets fail with `Closed` instead of hanging, and reads and appends are
//! refused.

use std::time::Duration;

use brook_engine::log::config::LogConfig;
use brook_engine::types::{Offset, TimestampMs};
use brook_shards::runtime::block_on;
use brook_shards::storage::StorageError;
use futures::future::{Either, select};

use crate::common::*;

/// Long enough for anything that is not hung.
const HANG: Duration = Duration::from_secs(5);

/// `future`'s output, or `None` if it did not finish within [`HANG`].
async fn unless_hung<T>(future: impl std::future::Future<Output = T>) -> Option<T> {
    let timer = std::pin::pin!(glommio::timer::sleep(HANG));
    match select(std::pin::pin!(future), timer).await {
        Either::Left((output, _)) => Some(output),
        Either::Right(_) => None,
    }
}

fn is_closed<T: std::fmt::Debug>(result: &Result<T, StorageError>) -> bool {
    matches!(result, Err(StorageError::Closed { .. }))
}

#[test]
fn close_fails_waiters_and_refuses_reads_and_appends() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("closing-0");
    block_on(async move {
        let log = open(&dir, LogConfig::default(), crashed()).await;
        log.append(&batch(2, 10, 1_700_000_000_000), EPOCH, now_ms())
            .await
            .unwrap();
        let end = log.flush().await.unwrap();
        // Long polls for data that will never come.
        let waits = [false, true].map(|durable| {
            let log = log.clone();
            glommio::spawn_local(async move {
                let offset = Offset(end.0 + 1);
                if durable {
                    log.wait_durable(offset).await
                } else {
                    log.wait_written(offset).await
                }
            })
        });
        glommio::executor().yield_now().await;
        assert_eq!(log.close().await.unwrap(), end);
        for (wait, name) in waits.into_iter().zip(["written", "durable"]) {
            let outcome = unless_hung(wait).await.expect("the wait ends");
            assert!(is_closed(&outcome), "waiting for {name}: {outcome:?}");
        }

        let after = unless_hung(log.wait_durable(Offset(end.0 + 1))).await;
        assert!(
            after.as_ref().is_some_and(is_closed),
            "a new wait: {after:?}"
        );
        assert!(
            log.wait_durable(end).await.is_ok(),
            "what was durable stays so"
        );
        let read = log.read(Offset(0), read_options(1 << 20)).await;
        assert!(is_closed(&read), "read: {read:?}");
        let by_time = log.offset_for_timestamp(TimestampMs(0)).await;
        assert!(is_closed(&by_time), "by timestamp: {by_time:?}");
        let append = log.append(&batch(1, 10, 1), EPOCH, now_ms()).await;
        assert!(is_closed(&append), "append: {append:?}");
    });
}
