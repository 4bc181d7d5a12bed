//! Ctrl-C (SIGINT) and SIGTERM end `brook consume` cleanly: the handler
//! only sets a flag, which the fetch loop reads between fetches (each waits
//! at most a fraction of a second), so the consumer commits what it
//! printed and leaves its group before exiting 0. The handler is installed
//! with SA_RESETHAND: a second Ctrl-C kills the process as usual, for when
//! the broker does not answer the final commit.
//!
//! A closed output ends the loop too: `brook consume T | head -5` should
//! not wait for one more record to learn that `head` is gone.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::cli::CliError;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only an atomic store: nothing else is async-signal-safe here.
    STOP.store(true, Ordering::SeqCst);
}

/// Routes SIGINT and SIGTERM to the flag.
pub fn install() -> Result<(), CliError> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is a valid value (no handler, empty
        // flags) that is filled in before use; `on_signal` has the C
        // signature sigaction expects without SA_SIGINFO and does nothing
        // that is not async-signal-safe.
        let installed = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if installed != 0 {
            return Err(CliError::Io {
                operation: format!("installing a handler for signal {signal}"),
                source: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(())
}

/// Whether Ctrl-C or SIGTERM arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Whether stdout is a pipe or socket whose reader has gone (poll reports
/// POLLERR or POLLHUP without waiting); never for terminals and files.
pub fn output_closed() -> bool {
    let mut stdout = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a zero timeout; poll only writes `revents`.
    let ready = unsafe { libc::poll(&mut stdout, 1, 0) };
    ready > 0 && stdout.revents & (libc::POLLERR | libc::POLLHUP) != 0
}
