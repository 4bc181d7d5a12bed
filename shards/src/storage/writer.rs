//! The two IO tasks behind each partition log.
//!
//! The *writer* writes what appends left in the active segment's tail (and
//! finishes rolled segments: last writes, trim to size, sync), one job at a
//! time so a page rewritten by a later write is never overtaken by an earlier
//! write. The *syncer* runs `fdatasync` on the active segment whenever the
//! flush policy asks, concurrently with the writer: one sync covers every
//! write completed before it started (group commit). Both only borrow the
//! state between awaits.

use std::rc::Rc;
use std::time::Instant;

use futures::future::{select, try_join_all};
use glommio::sync::Semaphore;

use crate::storage::error::{StorageError, io_error};
use crate::storage::partition_log::LogInner;
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

pub(crate) async fn run_writer(log: Rc<LogInner>) {
    loop {
        let next = {
            let mut state = log.state.borrow_mut();
            if state.failure().is_some() {
                return;
            }
            (state.next_write_job(), state.closing)
        };
        let job = match next {
            (Some(job), _) => job,
            (None, true) => return,
            (None, false) => {
                wait(&log.writer_bell).await;
                continue;
            }
        };
        let result = match job {
            WriteJob::Write {
                segment_base,
                dispatches,
            } => {
                let writes = dispatches
                    .iter()
                    .flatten()
                    .map(|dispatch| dispatch.execute());
                let result = try_join_all(writes).await;
                result.map(|_| {
                    log.state
                        .borrow_mut()
                        .complete_write(segment_base, dispatches)
                })
            }
            WriteJob::Seal {
                segment_base,
                files,
            } => seal(&files)
                .await
                .map(|()| log.state.borrow_mut().complete_seal(segment_base)),
        };
        if let Err(error) = result {
            tracing::error!(log = %log.name, %error, "write failed; taking the partition log offline");
            log.state.borrow_mut().fail(&error);
            return;
        }
        ring(&log.syncer_bell);
    }
}

async fn seal(
    files: &[(Rc<glommio::io::DmaFile>, std::path::PathBuf, u64)],
) -> Result<(), StorageError> {
    let trims = files.iter().map(|(file, path, len)| async move {
        file.truncate(*len)
            .await
            .map_err(io_error("trimming", path))?;
        file.fdatasync().await.map_err(io_error("syncing", path))
    });
    try_join_all(trims).await.map(|_| ())
}

pub(crate) async fn run_syncer(log: Rc<LogInner>) {
    loop {
        let decision = log.state.borrow().sync_decision(Instant::now());
        match decision {
            SyncDecision::Exit => return,
            SyncDecision::Wait => wait(&log.syncer_bell).await,
            SyncDecision::WaitUntil(deadline) => {
                let timeout = deadline.saturating_duration_since(Instant::now());
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
                if let Err(error) = file.fdatasync().await.map_err(io_error("syncing", &path)) {
                    tracing::error!(log = %log.name, %error, "sync failed; taking the partition log offline");
                    log.state.borrow_mut().fail(&error);
                    return;
                }
                log.state.borrow_mut().complete_sync(segment_base, written);
            }
        }
    }
}
