//! SIGTERM and SIGINT: blocked in every thread (shards inherit the mask) and
//! waited for by one thread, which then stops the shards cleanly.

use std::mem::MaybeUninit;

fn termination_set() -> libc::sigset_t {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set; sigaddset adds valid signals.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), libc::SIGTERM);
        libc::sigaddset(set.as_mut_ptr(), libc::SIGINT);
        set.assume_init()
    }
}

/// Blocks SIGTERM and SIGINT in the calling thread and its future children.
pub fn block_termination_signals() {
    let set = termination_set();
    // SAFETY: a valid, initialised signal set.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Waits for SIGTERM or SIGINT; returns its name.
pub fn wait_for_termination() -> &'static str {
    let set = termination_set();
    let mut signal = 0;
    // SAFETY: a valid set and out-parameter; the signals are blocked.
    unsafe {
        libc::sigwait(&set, &mut signal);
    }
    if signal == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    }
}
