//! Executors sized for this machine's limits.
//!
//! glommio registers `io_memory` bytes of locked memory per executor for
//! io_uring buffers. Its 10 MiB default exceeds the 8 MiB `ulimit -l` Brook
//! must start under, so every executor is built here with a smaller pool;
//! long-lived buffers (the log tail) come from the heap instead.

use std::future::Future;

use glommio::{LocalExecutor, LocalExecutorBuilder, Placement};

/// Locked io_uring buffer memory per executor: two shards and a load
/// generator's executors fit well under 8 MiB.
pub const IO_MEMORY_BYTES: usize = 1 << 20;

/// A builder for an executor with Brook's memory settings.
pub fn executor_builder(placement: Placement) -> LocalExecutorBuilder {
    LocalExecutorBuilder::new(placement).io_memory(IO_MEMORY_BYTES)
}

/// Runs `future` to completion on a fresh, unpinned executor on this thread
/// (tools and tests; servers use pinned executors).
pub fn block_on<F: Future + 'static>(future: F) -> F::Output
where
    F::Output: 'static,
{
    let executor: LocalExecutor = executor_builder(Placement::Unbound)
        .make()
        .expect("creating a glommio executor");
    executor.run(future)
}
