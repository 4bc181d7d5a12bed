//! Executors sized for this machine's limits, and kept awake.
//!
//! glommio registers `io_memory` bytes of locked memory per executor for
//! io_uring buffers. Its 10 MiB default exceeds the 8 MiB `ulimit -l` Brook
//! must start under, so every executor is built here with a smaller pool;
//! long-lived buffers (the log tail) come from the heap instead.
//!
//! Every executor Brook runs also runs [`guarded`]: a timer that makes its
//! reactor look at its completions again at least every
//! [`REACTOR_SLEEP_MAX`]. glommio 0.9's reactor has been caught asleep for
//! good: a storage test stalled 25 minutes in CI with its thread in
//! `io_uring_enter`, its rings holding only the reactor's own eventfd read,
//! link poll and preemption timer, the eventfd never written, the
//! blocking-pool thread idle; interrupting the wait (a debugger's attach)
//! let it finish at once. A glommio instrumented to report what it found
//! on waking from a long sleep reported, after 241 s, no blocking-pool
//! result and no remote wake-up pending: the wake-up is lost below
//! glommio, in how the kernel delivers a completion to the waiting thread.
//! The guard's timer gives that wait a reason to end every interval. It has
//! not been shown to rescue every such stall, only that it runs.

use std::borrow::Cow;
use std::cell::Cell;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use glommio::{LocalExecutor, LocalExecutorBuilder, Placement};

/// Locked io_uring buffer memory per executor: two shards and a load
/// generator's executors fit well under 8 MiB.
pub const IO_MEMORY_BYTES: usize = 1 << 20;

/// A builder for an executor with Brook's memory settings.
pub fn executor_builder(placement: Placement) -> LocalExecutorBuilder {
    LocalExecutorBuilder::new(placement).io_memory(IO_MEMORY_BYTES)
}

/// Runs `future` to completion on a fresh, unpinned executor on this thread
/// (tools and tests; servers use pinned executors), [`guarded`].
pub fn block_on<F: Future + 'static>(future: F) -> F::Output
where
    F::Output: 'static,
{
    let executor: LocalExecutor = executor_builder(Placement::Unbound)
        .make()
        .expect("creating a glommio executor");
    executor.run(guarded(future))
}

/// The longest a guarded executor's reactor sleeps without looking at its
/// completions again (see the module's doc for why it must).
pub const REACTOR_SLEEP_MAX: Duration = Duration::from_millis(20);

thread_local! {
    /// How many times this thread's guard has woken its reactor.
    static GUARD_WAKES: Cell<u64> = const { Cell::new(0) };
}

/// `future`, with a task beside it on the current executor that wakes the
/// reactor every [`REACTOR_SLEEP_MAX`] until `future` ends. Every executor
/// Brook starts runs its top-level future through this.
pub async fn guarded<F: Future>(future: F) -> F::Output {
    let guard = glommio::spawn_local(async {
        loop {
            glommio::timer::sleep(REACTOR_SLEEP_MAX).await;
            GUARD_WAKES.with(|wakes| wakes.set(wakes.get() + 1));
        }
    });
    let output = future.await;
    // Dropping a glommio task that is not detached cancels it.
    drop(guard);
    output
}

/// How many times the guard of the executor on this thread has woken it.
pub fn guard_wakes() -> u64 {
    GUARD_WAKES.with(Cell::get)
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

#[cfg(test)]
mod tests {
    use super::{REACTOR_SLEEP_MAX, block_on, guard_wakes};

    /// An executor with nothing to do but one long timer still wakes every
    /// REACTOR_SLEEP_MAX: the guard runs beside the future.
    #[test]
    fn a_guarded_executor_wakes_while_its_future_waits() {
        let before = guard_wakes();
        let waited = REACTOR_SLEEP_MAX * 20;
        block_on(glommio::timer::sleep(waited));
        let woken = guard_wakes() - before;
        assert!(
            woken >= 5,
            "the guard woke the reactor {woken} times in {waited:?}"
        );
    }
}
