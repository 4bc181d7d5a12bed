//! The two IO tasks behind each partition log.
//!
//! The *writer* keeps the disk busy with what appends left in the segments'
//! tails: up to a few chunk writes per file in flight at once (see
//! [`crate::storage::appender`] for which may overlap), the reserve ahead of
//! the active `.log`, and the trim-and-sync of rolled segments. The *syncer*
//! runs `fdatasync` on the active segment whenever the flush policy asks,
//! concurrently with the writer: one sync covers every write completed before
//! it started (group commit). Both only borrow the state between awaits.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use brook_engine::types::Offset;
use futures::StreamExt;
use futures::future::{Either, select, try_join_all};
use futures::stream::FuturesUnordered;
use glommio::io::DmaFile;
use glommio::sync::Semaphore;

use crate::runtime::clock_ms;
use crate::storage::error::{StorageError, io_error};

/// The latency of every active segment's `fdatasync`, seconds: 50 µs to
/// 5 s (the broker's metrics register it as
/// `brook_log_fsync_duration_seconds`; Kafka's `LogFlushRateAndTimeMs`).
pub static SYNC_SECONDS: std::sync::LazyLock<prometheus::Histogram> =
    std::sync::LazyLock::new(|| {
        let opts = prometheus::HistogramOpts::new(
            "log_fsync_duration_seconds",
            "fdatasync of a partition log's active segment.",
        )
        .buckets(vec![
            0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
            0.5, 1.0, 2.5, 5.0,
        ]);
        prometheus::Histogram::with_opts(opts).expect("a valid histogram")
    });
use crate::storage::files::trim_and_sync;
use crate::storage::partition_log::LogInner;
use crate::storage::segment::SegmentFile;
use crate::storage::state::{SyncDecision, WriteJob};

/// Wakes a task; wake-ups coalesce.
pub(crate) fn ring(bell: &Semaphore) {
    if bell.available() == 0 {
        bell.signal(1);
    }
}

async fn wait(bell: &Semaphore) {
    // The semaphore is never closed while its log's tasks run.
    let _ = bell.acquire(1).await;
}

/// What a finished job changes in the state.
enum Done {
    Write {
        segment_base: Offset,
        file: SegmentFile,
        end: u64,
    },
    Reserve {
        segment_base: Offset,
        size: u64,
        succeeded: bool,
    },
    Seal {
        segment_base: Offset,
        index_files: [Rc<DmaFile>; 2],
    },
}

type Running = Pin<Box<dyn Future<Output = Result<Done, StorageError>>>>;

fn start(job: WriteJob) -> Running {
    match job {
        WriteJob::Write {
            segment_base,
            file,
            write,
        } => Box::pin(async move {
            write.execute().await?;
            Ok(Done::Write {
                segment_base,
                file,
                end: write.end,
            })
        }),
        WriteJob::Reserve {
            segment_base,
            reservation,
        } => Box::pin(async move {
            // A filesystem that cannot reserve only costs appends their
            // speed: the log stays online and stops reserving.
            let succeeded = match reservation.execute().await {
                Ok(()) => true,
                Err(error) => {
                    tracing::warn!(%error, "cannot reserve space ahead of appends; writing without");
                    false
                }
            };
            Ok(Done::Reserve {
                segment_base,
                size: reservation.size,
                succeeded,
            })
        }),
        WriteJob::Seal {
            segment_base,
            files,
        } => Box::pin(async move {
            let [_, offset_index, time_index] = try_join_all(files.iter().map(trim_and_sync))
                .await?
                .try_into()
                .expect("three files in, three out");
            Ok(Done::Seal {
                segment_base,
                index_files: [offset_index, time_index],
            })
        }),
    }
}

pub(crate) async fn run_writer(log: Rc<LogInner>) {
    let mut running: FuturesUnordered<Running> = FuturesUnordered::new();
    loop {
        let closing = {
            let mut state = log.state.borrow_mut();
            if state.failure().is_some() {
                return;
            }
            while let Some(job) = state.next_write_job() {
                running.push(start(job));
            }
            state.closing
        };
        let done = if running.is_empty() {
            if closing {
                return;
            }
            wait(&log.writer_bell).await;
            continue;
        } else {
            match select(running.next(), std::pin::pin!(wait(&log.writer_bell))).await {
                Either::Left((Some(done), _)) => done,
                Either::Left((None, _)) | Either::Right(_) => continue,
            }
        };
        let result = done.map(|done| {
            let mut state = log.state.borrow_mut();
            match done {
                Done::Write {
                    segment_base,
                    file,
                    end,
                } => state.complete_write(segment_base, file, end),
                Done::Reserve {
                    segment_base,
                    size,
                    succeeded,
                } => state.complete_reservation(segment_base, size, succeeded),
                Done::Seal {
                    segment_base,
                    index_files,
                } => state.complete_seal(segment_base, index_files),
            }
        });
        if let Err(error) = result {
            tracing::error!(log = %log.name, %error, "write failed; taking the partition log offline");
            log.state.borrow_mut().fail(&error);
            return;
        }
        ring(&log.syncer_bell);
    }
}

pub(crate) async fn run_syncer(log: Rc<LogInner>) {
    loop {
        let decision = log.state.borrow().sync_decision(clock_ms());
        match decision {
            SyncDecision::Exit => return,
            SyncDecision::Wait => wait(&log.syncer_bell).await,
            SyncDecision::WaitUntil(due_ms) => {
                let timeout = Duration::from_millis(due_ms.saturating_sub(clock_ms()));
                let bell = std::pin::pin!(wait(&log.syncer_bell));
                let timer = std::pin::pin!(glommio::timer::sleep(timeout));
                let _ = select(bell, timer).await;
            }
            SyncDecision::Sync {
                segment_base,
                file,
                path,
                written,
            } => {
                let started = Instant::now();
                let synced = file.fdatasync().await;
                SYNC_SECONDS.observe(started.elapsed().as_secs_f64());
                if let Err(error) = synced.map_err(io_error("syncing", &path)) {
                    tracing::error!(log = %log.name, %error, "sync failed; taking the partition log offline");
                    log.state.borrow_mut().fail(&error);
                    return;
                }
                log.state.borrow_mut().complete_sync(segment_base, written);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use brook_engine::types::Offset;
    use glommio::io::OpenOptions;

    use super::{Done, start};
    use crate::runtime::block_on;
    use crate::storage::appender::{ChunkSizing, PageAppender};
    use crate::storage::files::FileAccess;
    use crate::storage::state::WriteJob;

    /// A disk that refuses `fallocate` (here: a descriptor open read-only)
    /// costs the log its reserve, not its service: the job ends reporting
    /// the failure instead of failing the writer.
    #[test]
    fn a_refused_reservation_is_reported_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().to_owned();
        block_on(async move {
            crate::storage::device::prepare_directory(&dir)
                .await
                .unwrap();
            let path = dir.join("00000000000000000000.log");
            std::fs::write(&path, [0u8; 4096]).unwrap();
            let file = OpenOptions::new().read(true).dma_open(&path).await.unwrap();
            let mut log = PageAppender::new(
                FileAccess::Open(Rc::new(file)),
                path,
                0,
                Vec::new(),
                ChunkSizing::LOG,
            );
            log.append(&[&[1u8; 70 << 10]]);
            let reservation = log.next_reservation(1 << 30).expect("an append waits");
            let job = WriteJob::Reserve {
                segment_base: Offset(0),
                reservation,
            };
            let done = start(job).await;
            assert!(matches!(
                done,
                Ok(Done::Reserve {
                    succeeded: false,
                    ..
                })
            ));
        });
    }
}
