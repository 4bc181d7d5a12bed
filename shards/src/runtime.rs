//! Executors sized for this machine's limits.
//!
//! glommio registers `io_memory` bytes of locked memory per executor for
//! io_uring buffers. Its 10 MiB default exceeds the 8 MiB `ulimit -l` Brook
//! must start under, so every executor is built here with a smaller pool;
//! long-lived buffers (the log tail) come from the heap instead.

use std::borrow::Cow;
use std::future::Future;
use std::path::Path;

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

/// `path` as glommio must be given it: absolute. glommio opens every file
/// and directory with `openat(-1, path)`, so a relative path fails with
/// EBADF (the README's default `./brook-data` did). Every path this crate,
/// the tools or the benchmark hand to glommio goes through here.
pub fn glommio_path(path: &Path) -> Cow<'_, Path> {
    if path.is_absolute() {
        return Cow::Borrowed(path);
    }
    // `absolute` only fails for an empty path or an unreadable working
    // directory; glommio then reports the open's own error.
    std::path::absolute(path).map_or(Cow::Borrowed(path), Cow::Owned)
}
