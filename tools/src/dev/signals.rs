//! The dev cluster's signals: SIGINT and SIGTERM (stop the cluster) and
//! SIGCHLD (a node exited), blocked in every thread and waited for by the
//! main thread, so a node's exit wakes it as promptly as a Ctrl-C does.
//! A blocked SIGCHLD stays pending (its default action, ignore, applies
//! only to an unblocked signal), so an exit between two waits is not lost.

use std::mem::MaybeUninit;
use std::time::Duration;

/// What a wait for a signal ended with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// SIGINT or SIGTERM, by name.
    Termination(&'static str),
    /// SIGCHLD: a node may have exited.
    ChildExited,
    /// The timeout passed (or another signal interrupted the wait).
    TimedOut,
}

fn set_of(signals: &[libc::c_int]) -> libc::sigset_t {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set; sigaddset adds valid signals.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for signal in signals {
            libc::sigaddset(set.as_mut_ptr(), *signal);
        }
        set.assume_init()
    }
}

fn waited_set() -> libc::sigset_t {
    set_of(&[libc::SIGINT, libc::SIGTERM, libc::SIGCHLD])
}

/// Blocks the waited signals in the calling thread and the threads it
/// starts after. Children inherit the mask (a node blocks SIGINT and
/// SIGTERM itself and waits for them, so one started just before a Ctrl-C
/// still stops cleanly); [`unblock_child_exits`] gives them SIGCHLD back.
pub fn block() {
    let set = waited_set();
    // SAFETY: a valid, initialised signal set.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Unblocks SIGCHLD: for a node, between fork and exec. Only an
/// async-signal-safe call (sigprocmask), no allocation.
pub fn unblock_child_exits() -> std::io::Result<()> {
    let set = set_of(&[libc::SIGCHLD]);
    // SAFETY: a valid set; sigprocmask is async-signal-safe.
    if unsafe { libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Waits for SIGINT, SIGTERM or SIGCHLD, at most `timeout` (`None`: for
/// as long as it takes). The signals must be blocked ([`block`]).
pub fn wait(timeout: Option<Duration>) -> Wake {
    let set = waited_set();
    let timeout = timeout.map(|timeout| libc::timespec {
        tv_sec: timeout.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    });
    let timeout_pointer = timeout
        .as_ref()
        .map_or(std::ptr::null(), |timeout| timeout as *const libc::timespec);
    // SAFETY: a valid set and timeout (or null: no timeout); no siginfo
    // wanted (null).
    let signal = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), timeout_pointer) };
    match signal {
        libc::SIGINT => Wake::Termination("SIGINT"),
        libc::SIGTERM => Wake::Termination("SIGTERM"),
        libc::SIGCHLD => Wake::ChildExited,
        // -1: EAGAIN (timed out) or EINTR.
        _ => Wake::TimedOut,
    }
}
