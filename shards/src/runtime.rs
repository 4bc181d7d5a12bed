//! Executors sized for this machine's limits, and kept awake.
//!
//! glommio registers `io_memory` bytes of locked memory per executor for
//! io_uring buffers. Its 10 MiB default exceeds the 8 MiB `ulimit -l` Brook
//! must start under, so every executor is built here with a smaller pool;
//! long-lived buffers (the log tail) come from the heap instead.
//!
//! Every executor Brook runs also runs [`guarded`]: a timer that makes its
//! reactor look at its completions again at least every
//! [`REACTOR_SLEEP_MAX`], and a process-wide watchdog thread that
//! interrupts an executor's thread with a signal when that timer has not
//! run for [`REACTOR_STALL_MAX`]. glommio 0.9's reactor has been caught
//! asleep for good: a storage test stalled 25 minutes in CI with its
//! thread in `io_uring_enter`, its rings holding only the reactor's own
//! eventfd read, link poll and preemption timer, the eventfd never written,
//! the blocking-pool thread idle; interrupting the wait (a debugger's
//! attach) let it finish at once. A glommio instrumented to report what it
//! found on waking from a long sleep reported, after 241 s, no
//! blocking-pool result and no remote wake-up pending: the wake-up is lost
//! below glommio, in how the kernel delivers a completion to the waiting
//! thread. Others report the same of recent kernels: a thread left in
//! `io_uring_enter` with its own fired timeout unconsumed (ClickHouse/silk
//! #88). A timer of the ring may then be lost too, so the guard's timer
//! alone is not trusted; a signal ends the wait the way the debugger did,
//! and the kernel runs the pending completions on the way back.

use std::borrow::Cow;
use std::cell::Cell;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

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
/// reactor every [`REACTOR_SLEEP_MAX`] until `future` ends, and the
/// watchdog watching that task. Every executor Brook starts runs its
/// top-level future through this.
pub async fn guarded<F: Future>(future: F) -> F::Output {
    let (_watch, beat) = watch_this_thread();
    let guard = glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(REACTOR_SLEEP_MAX).await;
            beat.store(clock_ms(), Ordering::Relaxed);
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

/// How long a guarded executor may go without its guard's timer running
/// before the watchdog interrupts its thread. A thread busy that long (or
/// not scheduled, on a loaded machine) is interrupted too, which costs it
/// one signal handler that does nothing; blocking calls restart.
pub const REACTOR_STALL_MAX: Duration = Duration::from_millis(250);

/// The signal that interrupts a stalled reactor's wait. Its handler does
/// nothing; SIGURG's default is to be ignored, so one arriving from
/// elsewhere (a socket's out-of-band data) is as harmless.
const WAKE_SIGNAL: libc::c_int = libc::SIGURG;

/// How many times the watchdog has interrupted an executor's thread, in
/// this process.
pub fn forced_wakes() -> u64 {
    FORCED_WAKES.get()
}

/// The watchdog's interruptions (the broker's metrics register it as
/// `brook_reactor_forced_wakeups_total`). Any at all on an idle broker is
/// the kernel's lost wake-up, caught.
pub static FORCED_WAKES: std::sync::LazyLock<prometheus::IntCounter> =
    std::sync::LazyLock::new(|| {
        prometheus::IntCounter::new(
            "reactor_forced_wakeups_total",
            "Signals the watchdog sent a reactor thread whose timer had not run for 250 ms.",
        )
        .expect("a valid counter")
    });

/// An executor the watchdog watches: its thread and the last time, on
/// [`clock_ms`], its guard ran.
struct Watched {
    id: u64,
    thread: libc::pid_t,
    beat: Arc<AtomicU64>,
    /// The beat of the last stall logged for this thread, so a stall is
    /// logged once however many signals it takes.
    warned_at: Option<u64>,
}

static WATCHED: Mutex<Vec<Watched>> = Mutex::new(Vec::new());

/// Milliseconds since the first time anything in this process asked.
pub(crate) fn clock_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Stops the watchdog watching an executor when its guarded future ends.
struct Watch(u64);

impl Drop for Watch {
    fn drop(&mut self) {
        let mut watched = WATCHED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        watched.retain(|executor| executor.id != self.0);
    }
}

/// Registers this thread's executor with the watchdog (started by the
/// first call) and returns the beat its guard must keep fresh.
fn watch_this_thread() -> (Watch, Arc<AtomicU64>) {
    static WATCHDOG: OnceLock<()> = OnceLock::new();
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    WATCHDOG.get_or_init(start_watchdog);
    let beat = Arc::new(AtomicU64::new(clock_ms()));
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut watched = WATCHED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    watched.push(Watched {
        id,
        // SAFETY: gettid has no preconditions.
        thread: unsafe { libc::gettid() },
        beat: Arc::clone(&beat),
        warned_at: None,
    });
    (Watch(id), beat)
}

extern "C" fn ignore_signal(_: libc::c_int) {}

/// Installs the wake signal's handler and starts the watchdog thread.
fn start_watchdog() {
    // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe
    // (it does nothing). SA_RESTART restarts the blocking calls a signal
    // interrupts; io_uring_enter's wait still returns, as it must.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = ignore_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(WAKE_SIGNAL, &action, std::ptr::null_mut()) != 0 {
            tracing::warn!(error = %std::io::Error::last_os_error(), "no reactor watchdog: installing its signal handler failed");
            return;
        }
    }
    let started = std::thread::Builder::new()
        .name("brook-watchdog".into())
        .spawn(|| {
            loop {
                std::thread::sleep(REACTOR_STALL_MAX / 2);
                interrupt_stalled(clock_ms());
            }
        });
    if let Err(error) = started {
        tracing::warn!(%error, "no reactor watchdog: starting its thread failed");
    }
}

/// A stall this long is logged: the lost wake-up's, or a task that holds
/// its core that long. Shorter ones are only counted (a benchmark's
/// deliberate blocking read, a thread the machine did not schedule).
const REACTOR_STALL_WARN_MS: u64 = 1000;

/// Signals every watched thread whose guard has not run for
/// [`REACTOR_STALL_MAX`].
fn interrupt_stalled(now_ms: u64) {
    let stall_max = REACTOR_STALL_MAX.as_millis() as u64;
    let mut watched = WATCHED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for executor in watched.iter_mut() {
        let beat = executor.beat.load(Ordering::Relaxed);
        let stalled_ms = now_ms.saturating_sub(beat);
        if stalled_ms < stall_max {
            continue;
        }
        if stalled_ms >= REACTOR_STALL_WARN_MS && executor.warned_at != Some(beat) {
            executor.warned_at = Some(beat);
            tracing::warn!(
                thread = executor.thread,
                stalled_ms,
                "an executor's reactor has not run its timer for a second; interrupting its thread"
            );
        }
        // SAFETY: tgkill with this process's id and a thread id that was
        // registered by a live executor (it unregisters before its thread
        // ends, under the lock held here).
        unsafe { libc::tgkill(libc::getpid(), executor.thread, WAKE_SIGNAL) };
        FORCED_WAKES.inc();
    }
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
    use std::time::{Duration, Instant};

    use super::{REACTOR_SLEEP_MAX, WAKE_SIGNAL, block_on, forced_wakes, guard_wakes};

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

    /// A reactor thread stuck in a wait only a signal ends (here `pause`,
    /// standing in for the io_uring wait the kernel failed to end) is
    /// interrupted by the watchdog. Without the watchdog only this test's
    /// own fallback signal, ten seconds (40 stall intervals) on, ends it,
    /// and the test fails.
    #[test]
    fn the_watchdog_interrupts_a_reactor_stuck_in_its_wait() {
        let before = forced_wakes();
        let (thread_tx, thread_rx) = std::sync::mpsc::channel();
        let started = Instant::now();
        let stuck = std::thread::spawn(move || {
            block_on(async move {
                // SAFETY: gettid and pause have no preconditions.
                thread_tx.send(unsafe { libc::gettid() }).unwrap();
                unsafe { libc::pause() };
            })
        });
        let thread = thread_rx.recv().unwrap();
        let fallback = Duration::from_secs(10);
        while !stuck.is_finished() && started.elapsed() < fallback {
            std::thread::sleep(Duration::from_millis(10));
        }
        let freed_by_watchdog = stuck.is_finished();
        if !freed_by_watchdog {
            // SAFETY: the thread is alive (not finished) and in this process.
            unsafe { libc::tgkill(libc::getpid(), thread, WAKE_SIGNAL) };
        }
        stuck.join().unwrap();
        assert!(
            freed_by_watchdog,
            "the stuck reactor's thread was still stuck after {fallback:?}"
        );
        assert!(
            forced_wakes() > before,
            "the watchdog counted no interruption"
        );
    }
}
